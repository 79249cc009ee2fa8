"""Nexmark q0, q5, q7, q11 and q12 over a stream of bids, as Spark native Structured
Streaming and as tidemark (``StreamProcessor`` in ``foreachBatch``).

Each query is the stateful part the benchmark measures; both systems compute the same
rows (:func:`normalized` puts them in one shape) under the same watermark: Spark's
``withWatermark(delay)`` and tidemark's global ``BoundedOutOfOrderness(delay)`` with its
default Spark late rule close the same windows in the same micro-batch.

* q5 hot items: bids per auction in sliding windows of 10 s every 2 s (the auction with
  the most bids per window is a per-window maximum over these rows);
* q7 highest bid: the maximum price per tumbling 10 s window;
* q11 user sessions: bids per bidder per session (10 s gap);
* q12 processing-time windows: bids per bidder per 10 s of processing time (the rows
  stamped with Spark's ``current_timestamp()`` of their micro-batch);
* q0 pass-through: ``foreachBatch`` counting the rows (the floor of any query).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa

import tidemark as tm

QUERIES = ("q0", "q5", "q7", "q11", "q12")

#: Flink's published per-core throughput (Nexmark reference run, Flink 1.13, 8 cores per
#: worker), events per second per core.
FLINK_PER_CORE = {"q5": 22_100, "q7": 12_300, "q11": 39_700}


def stamp(query: str, bids: Any) -> Any:
    """The stream a query reads: q12 adds its processing time (``p_time``)."""
    if query != "q12":
        return bids
    from pyspark.sql import functions as F

    return bids.withColumn("p_time", F.current_timestamp())


def time_column(query: str) -> str:
    return "p_time" if query == "q12" else "date_time"


def spark_native(query: str, bids: Any, delay: str) -> Any:
    """The query as Spark's own streaming aggregation (append mode)."""
    from pyspark.sql import functions as F

    ts = time_column(query)
    s = stamp(query, bids).withWatermark(ts, delay)
    if query == "q5":
        return s.groupBy(F.window(ts, "10 seconds", "2 seconds"), "auction").agg(
            F.count("*").alias("num")
        )
    if query == "q7":
        return s.groupBy(F.window(ts, "10 seconds")).agg(F.max("price").alias("max_price"))
    if query == "q11":
        return s.groupBy(F.session_window(ts, "10 seconds"), "bidder").agg(
            F.count("*").alias("num")
        )
    if query == "q12":
        return s.groupBy(F.window(ts, "10 seconds"), "bidder").agg(F.count("*").alias("num"))
    raise ValueError(query)


#: Each query's key, window and aggregates as a tidemark pipeline.
_SHAPES: dict[str, tuple[str | None, Any, dict[str, Any]]] = {
    "q5": ("auction", tm.Sliding("10s", "2s"), {"num": tm.count()}),
    "q7": (None, tm.Tumbling("10s"), {"max_price": tm.max("price")}),
    "q11": ("bidder", tm.Session("10s"), {"num": tm.count()}),
    "q12": ("bidder", tm.Tumbling("10s"), {"num": tm.count()}),
}


def pipeline(query: str, delay: str) -> tm.Pipeline:
    """The query as a tidemark pipeline (global watermark, Spark's late rule)."""
    key, window, aggs = _SHAPES[query]
    return tm.Pipeline(
        key=key,
        event_time=time_column(query),
        window=window,
        aggs=aggs,
        watermark=tm.BoundedOutOfOrderness(delay),
    )


def key_of(query: str) -> list[str]:
    return {"q5": ["auction"], "q7": [], "q11": ["bidder"], "q12": ["bidder"]}[query]


def value_of(query: str) -> str:
    return "max_price" if query == "q7" else "num"


def normalized(query: str, table: pa.Table) -> list[tuple[Any, ...]]:
    """Rows as sorted ``(key..., window start, window end, value)`` tuples (epoch
    microseconds), from Spark's ``window`` struct or tidemark's ``window_start`` /
    ``window_end`` columns."""
    keys = key_of(query)
    if "window" in table.column_names:
        w = table.column("window").combine_chunks()
        starts, ends = w.field("start"), w.field("end")
    elif "session_window" in table.column_names:
        w = table.column("session_window").combine_chunks()
        starts, ends = w.field("start"), w.field("end")
    else:
        starts, ends = table.column("window_start"), table.column("window_end")

    def micros(a: Any) -> list[int]:
        return a.cast(pa.timestamp("us", tz="UTC")).cast(pa.int64()).to_pylist()

    cols = [table.column(k).to_pylist() for k in keys]
    cols += [micros(starts), micros(ends), table.column(value_of(query)).to_pylist()]
    return sorted(zip(*cols, strict=True))


def exact(query: str, bids: pa.Table) -> list[tuple[Any, ...]] | None:
    """The exact answer over every bid (every window complete), for the event-time
    queries (``None`` for q0 and q12: no event-time answer)."""
    if query in ("q0", "q12"):
        return None
    op = pipeline(query, "0s").operator()
    out = op.process(bids)
    rest = op.flush()
    return normalized(query, pa.concat_tables([out.windows, rest.windows]))


def closed_before(rows: list[tuple[Any, ...]], end: int) -> list[tuple[Any, ...]]:
    """The rows of windows that end at or before ``end`` (epoch microseconds)."""
    return [r for r in rows if r[-2] <= end]


Sink = Callable[[Any, int], None]
