"""tidemark's default late rule against Spark Structured Streaming itself.

An oracle no one here wrote: hypothesis generates streams (keys, out-of-order and late
event times, several micro-batch splits, empty micro-batches, equal timestamps, rows
exactly on window edges), written as one Parquet file per micro-batch. Each stream goes
through

* Spark: a file source with ``maxFilesPerTrigger=1``, ``withWatermark`` and
  ``groupBy(window(...) or session_window(...), key)`` in append mode;
* ``StreamProcessor`` with a global watermark and the default rule (``"spark"``), as a
  query of its own over the same files (``StreamProcessor.start``); when the files are
  read, the query goes quiet and tidemark emits on its own, in its first micro-batch
  without rows (the processor's heartbeat), what Spark's trailing no-data micro-batch
  emits (Spark runs one when the watermark moved);
* the standalone operator, one ``process()`` per file.

Assertions: the windows (key, bounds, count, sum) of every micro-batch id are identical
in all three; tidemark's late rows are the rows Spark dropped (Spark counts dropped rows
after its partial aggregation: one per (key, window) of a micro-batch, per (key, event
time) for sessions); and a per-key watermark (``"spark"`` rule) emits every window Spark
emits with its exact count, with that count.

``TIDEMARK_PARITY_EXAMPLES`` sets the number of examples per window kind (default 3;
the closing note of the late-rule issue gives the long run).
"""

from __future__ import annotations

import os
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import tidemark as tm
from tidemark.spark import StreamProcessor

pytestmark = pytest.mark.spark

EXAMPLES = int(os.environ.get("TIDEMARK_PARITY_EXAMPLES", "3"))
T0 = 1_700_000_000_000  # epoch milliseconds, a multiple of every window size here
DELAY_MS = 3_000
SCHEMA = pa.schema([("k", pa.string()), ("ts", pa.timestamp("us", tz="UTC")), ("v", pa.int64())])

# (tidemark window, Spark grouping expression, Spark's dropped-row unit)
KINDS = {
    "tumbling": (tm.Tumbling("10s"), "window(ts, '10 seconds')"),
    "sliding": (tm.Sliding("10s", "5s"), "window(ts, '10 seconds', '5 seconds')"),
    "session": (tm.Session("5s"), "session_window(ts, '5 seconds')"),
}

Rows = list[tuple[str, int, int]]  # (key, event time in µs after T0, value)


def table(rows: Rows) -> pa.Table:
    return pa.table(
        {
            "k": [k for k, _, _ in rows],
            "ts": [T0 * 1_000 + t for _, t, _ in rows],
            "v": [v for _, _, v in rows],
        },
        schema=SCHEMA,
    )


@st.composite
def streams(draw: Any) -> list[Rows]:
    """Micro-batches of rows around a moving front: rows behind it (late or not), on
    window edges (whole multiples of 5 s) or between them, repeated timestamps, empty
    micro-batches."""
    batches: list[Rows] = []
    front = draw(st.integers(0, 20)) * 1_000  # milliseconds
    for _ in range(draw(st.integers(1, 6))):
        front += draw(st.sampled_from([0, 2_000, 5_000, 9_500, 20_000]))
        n = draw(st.sampled_from([0, 1, 3, 6, 10]))
        rows = []
        for _ in range(n):
            behind = draw(st.sampled_from([0, 0, 1_000, 2_500, 5_000, 7_000, 12_000, 30_000]))
            t = max(0, front - behind)
            if draw(st.booleans()):
                t -= t % 5_000  # exactly on a window edge
            # Microseconds: Spark keeps its watermark in whole milliseconds.
            t = t * 1_000 + draw(st.sampled_from([0, 0, 0, 1, 500, 999]))
            rows.append((draw(st.sampled_from(["a", "b", "c"])), t, draw(st.integers(0, 9))))
        batches.append(rows)
    return batches


def file_stream(spark: Any, src: Path, batches: list[Rows]) -> Any:
    """The stream's micro-batches as Parquet files in ``src`` (once), read one a
    micro-batch."""
    if not src.exists():
        src.mkdir(parents=True)
        base = time.time() - 10_000
        for i, rows in enumerate(batches):
            path = src / f"part-{i:04d}.parquet"
            pq.write_table(table(rows), path)
            os.utime(path, (base + i, base + i))  # the file source takes the oldest first
    return (
        spark.readStream.schema(spark.createDataFrame(table([])).schema)
        .option("maxFilesPerTrigger", 1)
        .parquet(str(src))
    )


def spark_native(spark: Any, where: Path, batches: list[Rows], kind: str) -> tuple[Any, Any]:
    """Spark's own windowed aggregation over the stream: (windows per micro-batch id,
    rows dropped by the watermark per micro-batch id)."""
    from pyspark.sql import functions as F

    df = file_stream(spark, where / "in", batches).withWatermark(
        "ts", f"{DELAY_MS // 1000} seconds"
    )
    out = (
        df.groupBy(F.expr(KINDS[kind][1]).alias("w"), "k")
        .agg({"*": "count", "v": "sum"})
        .selectExpr(
            "k",
            "unix_micros(w.start) AS window_start",
            "unix_micros(w.end) AS window_end",
            "`count(1)` AS n",
            "`sum(v)` AS s",
        )
    )
    got: dict[int, list[tuple[Any, ...]]] = {}

    def collect(bdf: Any, batch_id: int) -> None:
        got[batch_id] = sorted(tuple(r) for r in bdf.collect())

    q = (
        out.writeStream.outputMode("append")
        .foreachBatch(collect)
        .option("checkpointLocation", str(where / "checkpoint"))
        .start()
    )
    try:
        q.processAllAvailable()
        # A trailing no-data micro-batch runs when the last data batch moved the
        # watermark: wait for it.
        front = [
            max((t // 1_000 for rows in batches[: i + 1] for _, t, _ in rows), default=-1)
            for i in range(len(batches))
        ]
        moved = front[-1] >= 0 and (len(front) < 2 or front[-1] > front[-2])
        deadline = time.time() + 30
        while moved and len(batches) not in got and time.time() < deadline:
            time.sleep(0.05)
        q.processAllAvailable()
        dropped: dict[int, int] = {}
        for p in q.recentProgress:
            dropped[p.batchId] = sum(s.numRowsDroppedByWatermark for s in p.stateOperators)
    finally:
        q.stop()
    return got, dropped


def micros(v: Any) -> Any:
    return v.value if isinstance(v, pa.TimestampScalar) else v


def rows_of(t: pa.Table | None) -> list[tuple[Any, ...]]:
    if t is None or t.num_rows == 0:
        return []
    t = t.select(["k", "window_start", "window_end", "n", "s"])
    t = t.set_column(1, "window_start", t.column(1).cast(pa.int64()))
    t = t.set_column(2, "window_end", t.column(2).cast(pa.int64()))
    return sorted(tuple(r.values()) for r in t.to_pylist())


class Collect:
    def __init__(self) -> None:
        self.got: dict[int, pa.Table] = {}

    def __call__(self, t: pa.Table, batch_id: int) -> None:
        self.got[batch_id] = t


def pipeline(kind: str, per: str = "global", rule: str = "spark") -> tm.Pipeline:
    return tm.Pipeline(
        key="k",
        event_time="ts",
        window=KINDS[kind][0],
        aggs={"n": tm.count(), "s": tm.sum("v")},
        watermark=tm.BoundedOutOfOrderness(f"{DELAY_MS}ms", per=per),
        late_rule=rule,
    )


def by_operator(
    pipe: tm.Pipeline, batches: list[Rows]
) -> tuple[list[Any], list[pa.Table], list[int | None]]:
    """Windows per call (the stream's micro-batches, then one empty call), late rows, and
    the watermark after each call."""
    op = pipe.operator()
    outs, marks = [], []
    for rows in [*batches, []]:
        outs.append(op.process(table(rows)))
        marks.append(op.watermark)
    return [rows_of(o.windows) for o in outs], [o.late for o in outs], marks


def by_stream_processor(
    spark: Any, where: Path, src: Path, pipe: tm.Pipeline, batches: list[Rows]
) -> Any:
    """The windows and late rows of each micro-batch id of ``StreamProcessor.start``
    over the same file stream: the stream's micro-batches, then the first quiet one
    (no rows: the processor's heartbeat), in which tidemark emits on its own what
    Spark's trailing no-data micro-batch emits."""
    sink, late = Collect(), Collect()
    proc = StreamProcessor(pipe, str(where / "state"), sink=sink, late_sink=late, arrow_sinks=True)
    n = len(batches) + 1
    q = proc.start(file_stream(spark, src, batches), where / "chk", trigger="0.1 seconds")
    try:
        deadline = time.time() + 120
        while proc.progress(n - 1) is None and q.isActive and time.time() < deadline:
            time.sleep(0.05)
    finally:
        q.stop()
    assert proc.progress(n - 1) is not None, q.exception()
    return [rows_of(sink.got.get(b)) for b in range(n)], [late.got.get(b) for b in range(n)]


def sliding_closed_groups(rows: Rows, closed: int | None) -> int:
    """Spark's count of a micro-batch's dropped rows for sliding windows: one per (key,
    window) closed by the watermark ``closed`` (µs), whether or not the row also went
    into an open window (its windows end at the next two 5 s edges)."""
    if closed is None:
        return 0
    groups = set()
    for k, t, _ in rows:
        edge = (T0 * 1_000 + t) // 5_000_000 * 5_000_000
        groups |= {(k, end) for end in (edge + 5_000_000, edge + 10_000_000) if end <= closed}
    return len(groups)


def dropped_groups(kind: str, late: pa.Table | None) -> int:
    """Spark's count of a micro-batch's dropped rows, from tidemark's late rows: one per
    (key, window) after Spark's partial aggregation (sessions: per (key, event time))."""
    if late is None or late.num_rows == 0:
        return 0
    keys, times = late.column("k").to_pylist(), late.column("ts").cast(pa.int64()).to_pylist()
    rows = zip(keys, times, strict=True)
    if kind == "session":
        return len(set(rows))
    return len({(k, t // 10_000_000) for k, t in rows})


def exact_counts(kind: str, batches: list[Rows]) -> Counter[tuple[Any, ...]]:
    """Each window's count over every row of the stream (no row late)."""
    op = pipeline(kind).operator()
    op.process(pa.concat_tables([table(rows) for rows in batches]))
    return Counter({r[:3]: r[3] for r in rows_of(op.flush().windows)})


def check(spark: Any, where: Path, kind: str, batches: list[Rows]) -> None:
    want, dropped = spark_native(spark, where / "spark", batches, kind)
    n = len(batches) + 1
    spark_windows = [want.get(b, []) for b in range(n)]
    assert max(want, default=0) < n, "Spark ran more micro-batches than expected"
    got, late = by_stream_processor(
        spark, where / "tidemark", where / "spark" / "in", pipeline(kind), batches
    )
    for b in range(n):
        assert got[b] == spark_windows[b], f"{kind}: micro-batch {b} of {len(batches)}"
    op_windows, op_late, marks = by_operator(pipeline(kind), batches)
    assert op_windows == got
    assert [rows_of_late(t) for t in op_late] == [rows_of_late(t) for t in late]
    for b in range(len(batches)):
        if kind == "sliding":
            # Spark also drops the closed windows of rows that join an open one
            # (tidemark's late rows are those with every window closed): count from
            # the watermark call b - 1 began with, tidemark's own.
            closed = marks[b - 2] if b >= 2 else None
            want_dropped = sliding_closed_groups(batches[b], closed)
            assert all(sliding_closed_groups([r], closed) == 2 for r in late_rows(late[b]))
        else:
            want_dropped = dropped_groups(kind, late[b])
        assert want_dropped == dropped.get(b, 0), f"{kind}: dropped rows, batch {b}"
    # Per key: every window Spark emits with its exact count comes out with that count.
    exact = exact_counts(kind, batches)
    per_key_op = pipeline(kind, per="key").operator()
    per_key = [
        w for rows in batches for w in rows_of(per_key_op.process(table(rows)).windows)
    ] + rows_of(per_key_op.flush().windows)
    per_key_count = {w[:3]: w[3] for w in per_key}
    for w in (w for ws in spark_windows for w in ws):
        if exact[w[:3]] == w[3]:
            assert per_key_count.get(w[:3]) == w[3], f"{kind}: per key lost {w}"


def late_rows(t: pa.Table | None) -> Rows:
    """Late rows as the stream's rows."""
    if t is None or t.num_rows == 0:
        return []
    return [
        (k, ts - T0 * 1_000, v)
        for k, ts, v in zip(
            t.column("k").to_pylist(),
            t.column("ts").cast(pa.int64()).to_pylist(),
            t.column("v").to_pylist(),
            strict=True,
        )
    ]


def rows_of_late(t: pa.Table | None) -> list[tuple[Any, ...]]:
    if t is None or t.num_rows == 0:
        return []
    return sorted(tuple(r.values()) for r in t.cast(SCHEMA).to_pylist())


EDGES: list[Rows] = [
    [("a", 0, 1), ("a", 5_000_000, 2), ("b", 9_999_999, 3)],
    [("a", 20_000_000, 4), ("a", 20_000_000, 5), ("c", 22_999_999, 6)],
    [],
    [("a", 10_000_000, 6), ("b", 5_000_000, 7), ("a", 15_000_000, 8), ("c", 17_000_500, 9)],
    [("a", 30_000_000, 1), ("b", 12_000_000, 2), ("c", 16_500_000, 3)],
]


def _settings() -> Any:
    return settings(
        max_examples=EXAMPLES,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        derandomize=True,
    )


@pytest.mark.slow(15)
@_settings()
@given(batches=streams())
@example(batches=EDGES)
def test_tumbling_windows_equal_sparks(spark: Any, tmp_path_factory: Any, batches: Any) -> None:
    check(spark, tmp_path_factory.mktemp("parity"), "tumbling", batches)


@pytest.mark.slow(15)
@_settings()
@given(batches=streams())
@example(batches=EDGES)
def test_sliding_windows_equal_sparks(spark: Any, tmp_path_factory: Any, batches: Any) -> None:
    check(spark, tmp_path_factory.mktemp("parity"), "sliding", batches)


@pytest.mark.slow(15)
@_settings()
@given(batches=streams())
@example(batches=EDGES)
def test_session_windows_equal_sparks(spark: Any, tmp_path_factory: Any, batches: Any) -> None:
    check(spark, tmp_path_factory.mktemp("parity"), "session", batches)
