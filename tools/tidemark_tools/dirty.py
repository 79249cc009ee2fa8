"""A dirty IoT topic (:func:`tidemark_tools.datagen.dirty_iot`) read as a user reads
it, and its windows scored against the truth: the test and the bench of
"one bad record costs one record" (``tests/test_dirty.py``, ``tests/test_kafka.py``,
``benches/dirty_stream.py``).

The pipeline is the one a user writes for the topic, with no bound or filter of their
own (:func:`user_pipeline`); its input is what Spark's ``from_json`` gives for the
records (:func:`parsed`: a value that is not JSON, or a field of another type, reads
as null).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

import tidemark as tm

__all__ = [
    "READING",
    "Score",
    "closed_by",
    "kafka_source",
    "operator_windows",
    "parsed",
    "score",
    "slices",
    "user_pipeline",
]

#: The records' values as the query's ``from_json`` reads them.
READING = "device STRING, ts LONG, temp DOUBLE"

#: The windows of the pipeline (seconds) and its watermark delay.
WINDOW_S = 10
DELAY = "10s"


def user_pipeline(**watermark: Any) -> tm.Pipeline:
    """Ten-second windows per device, counted and averaged, a watermark per Kafka
    partition with a 10 s delay, partitions idle after two minutes of the stream's
    event time: nothing else set (``watermark``: settings to change, for comparisons)."""
    return tm.Pipeline(
        key="device",
        event_time="ts",
        watermark=tm.BoundedOutOfOrderness(DELAY, per="partition", idle_timeout="2m", **watermark),
        window=tm.Tumbling(f"{WINDOW_S}s"),
        aggs={"n": tm.count(), "avg_temp": tm.mean("temp")},
    )


def kafka_source(spark: Any, bootstrap: str, topic: str) -> Any:
    """The topic as a user's query reads it with Spark's Kafka source: the record's
    ``partition`` and ``offset``, and the value's fields by ``from_json`` (``ts`` a
    timestamp from epoch milliseconds)."""
    from pyspark.sql import functions as F

    ev = F.from_json(F.col("value").cast("string"), READING)
    from tidemark_tools.kafka import read_topic

    return read_topic(spark, bootstrap, topic).select(
        "partition",
        "offset",
        ev["device"].alias("device"),
        F.timestamp_millis(ev["ts"]).alias("ts"),
        ev["temp"].alias("temp"),
    )


def _field(doc: Any, name: str, kind: type) -> Any:
    v = doc.get(name) if isinstance(doc, dict) else None
    if isinstance(v, bool) or not isinstance(v, kind):
        return (
            float(v) if kind is float and isinstance(v, int) and not isinstance(v, bool) else None
        )
    return v


def parsed(records: pa.Table, offsets: list[int] | None = None) -> pa.Table:
    """``records``' values as the query reads them (Spark's ``from_json`` with
    :data:`READING`: a value that is not JSON, or a field of another type, is null),
    with the record's ``partition`` and ``offset`` (``offsets``: each record's; by
    default its row number)."""
    device, ts, temp = [], [], []
    for v in records["value"].to_pylist():
        try:
            doc = json.loads(v)
        except (ValueError, TypeError):
            doc = None
        device.append(_field(doc, "device", str))
        ts.append(_field(doc, "ts", int))
        temp.append(_field(doc, "temp", float))
    n = records.num_rows
    return pa.table(
        {
            "partition": records["partition"],
            "offset": pa.array(offsets if offsets is not None else range(n), pa.int64()),
            "device": pa.array(device, pa.string()),
            "ts": pa.array(ts, pa.int64()).cast(pa.timestamp("ms", tz="UTC")),
            "temp": pa.array(temp, pa.float64()),
        }
    )


def slices(records: pa.Table, width_s: float) -> Iterator[pa.Table]:
    """The records arriving in each ``width_s`` seconds, in order: a live topic read
    once per slice (a micro-batch of about that many seconds)."""
    arrival = records["arrival"].to_numpy()
    start = 0.0
    end = float(arrival.max()) if len(arrival) else 0.0
    while start <= end:
        keep = (arrival >= start) & (arrival < start + width_s)
        yield records.filter(pa.array(keep))
        start += width_s


def operator_windows(pipe: tm.Pipeline, records: pa.Table, width_s: float) -> dict[str, pa.Table]:
    """The pipeline's operator fed ``records`` parsed, one call per ``width_s`` seconds
    of arrival: its windows, late and error rows (no flush: a stream does not end)."""
    op = pipe.operator()
    out: dict[str, list[pa.Table]] = {"windows": [], "late": [], "errors": []}
    offset = 0
    for batch in slices(records, width_s):
        rows = parsed(batch, list(range(offset, offset + batch.num_rows)))
        offset += batch.num_rows
        got = op.process(rows)
        out["windows"].append(got.windows)
        out["late"].append(got.late)
        out["errors"].append(got.errors)
    return {k: pa.concat_tables(v) for k, v in out.items()}


@dataclass(frozen=True)
class Score:
    """Windows against the truth, over the windows every watermark should have
    closed by the stream's end."""

    #: Events of the scored windows.
    events: int
    #: Of them, counted in their window.
    counted: int
    #: Scored windows, and those emitted with their exact count.
    windows: int
    exact: int
    #: Emitted windows that are no window of the readings (a null key, a 1969 or
    #: 2300 window), and windows emitted more than once.
    spurious: int
    twice: int

    @property
    def counted_share(self) -> float:
        return self.counted / max(1, self.events)

    @property
    def exact_share(self) -> float:
        return self.exact / max(1, self.windows)


def score(windows: pa.Table, readings: pa.Table, until_ms: int) -> Score:
    """``windows`` (``device``, ``window_start``, ``n``) against ``readings``' own
    windows that end by ``until_ms``; ``spurious`` and ``twice`` over every window."""
    size = WINDOW_S * 1000
    ts = readings["ts"].cast(pa.int64()).to_numpy()
    start = ts - ts % size
    truth_t = pa.table({"device": readings["device"], "start": pa.array(start)})
    truth = {
        (r["device"], r["start"]): r["count"]
        for r in truth_t.group_by(["device", "start"])
        .aggregate([("start", "count")])
        .rename_columns(["device", "start", "count"])
        .to_pylist()
    }
    starts = windows["window_start"].cast(pa.timestamp("ms", tz="UTC")).cast(pa.int64())
    got: dict[tuple[Any, int], int] = {}
    twice = spurious = 0
    for d, s, n in zip(
        windows["device"].to_pylist(), starts.to_pylist(), windows["n"].to_pylist(), strict=True
    ):
        if (d, s) in got:
            twice += 1
        got[(d, s)] = got.get((d, s), 0) + n
        if (d, s) not in truth:
            spurious += 1
    scored = {k: v for k, v in truth.items() if k[1] + size <= until_ms}
    counted = sum(min(got.get(k, 0), v) for k, v in scored.items())
    exact = sum(1 for k, v in scored.items() if got.get(k) == v)
    return Score(
        events=sum(scored.values()),
        counted=counted,
        windows=len(scored),
        exact=exact,
        spurious=spurious,
        twice=twice,
    )


def closed_by(readings: pa.Table, lag_s: float) -> int:
    """Epoch milliseconds by which every window of ``readings`` should have closed
    when the stream ends: the latest reading, less a partition's lag, the watermark's
    delay and a window."""
    last = pc.max(readings["ts"].cast(pa.int64())).as_py()
    return int(last - (lag_s + 10 + WINDOW_S) * 1000)
