"""StreamProcessor gives exactly what one standalone operator gives, batch by batch.

Hypothesis generates streams (keys, source partitions, out-of-order and late event
times, keys and partitions that fall silent, a clock that moves between micro-batches)
and pipelines (global, per-partition and per-key watermarks, fixed or learned per key
(``AdaptiveOutOfOrderness``), idleness in event time
and on the clock, declared
partitions, ``max_keys`` with each eviction policy, ``state_ttl``, tumbling, sliding and
session windows). Each stream goes through:

* one standalone operator (``cores=1``), one ``process()`` per micro-batch: the
  reference;
* the same operator on two cores (where keys are not bounded: ``max_keys`` is per core);
* ``StreamProcessor`` with 1, 2, 3 or 8 state partitions, its micro-batches run in the
  driver or in a Spark task (the executor path), called as ``foreachBatch`` calls it.

Windows, late rows and error rows must be equal micro-batch by micro-batch (and at the
final flush), and no run may emit a (key, window) twice. ``max_keys`` bounds each state
partition, as it bounds each core: those runs use one state partition.

``TIDEMARK_EQUIVALENCE_EXAMPLES`` sets the number of examples (default 25 for the driver
path, a fifth of it for the executor path); the long profile was run with 2,000.
"""

from __future__ import annotations

import collections
import datetime as dt
import os
from collections import Counter
from pathlib import Path
from typing import Any
from unittest import mock

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import tidemark as tm
from tidemark.spark import StreamProcessor, _layout, streaming

pytestmark = pytest.mark.spark

EXAMPLES = int(os.environ.get("TIDEMARK_EQUIVALENCE_EXAMPLES", "25"))
KEYS = [f"k{i}" for i in range(6)]
SOURCE_PARTITIONS = 3  # key i sends from partition i % 3
SCHEMA = pa.schema(
    [
        ("key", pa.string()),
        ("partition", pa.int64()),
        ("ts", pa.timestamp("us", tz="UTC")),
        ("v", pa.int64()),
    ]
)
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


def table(rows: list[tuple[int, int]]) -> pa.Table:
    """Rows ``(key index, event time in seconds)`` as the stream's table."""
    return pa.table(
        {
            "key": [KEYS[k] for k, _ in rows],
            "partition": [k % SOURCE_PARTITIONS for k, _ in rows],
            "ts": [t * 1_000_000 for _, t in rows],
            "v": [k * 1_000 + t for k, t in rows],
        },
        schema=SCHEMA,
    )


@st.composite
def streams(draw: Any, quiet: bool = False) -> list[tuple[int, list[tuple[int, int]] | None]]:
    """Micro-batches ``(clock step in seconds, rows)``: a moving front, rows behind it
    (late or not), keys that fall silent, an empty batch now and then; with ``quiet``,
    quiet micro-batches (rows ``None``: Spark ran them for a heartbeat) between them."""
    n = draw(st.integers(1, 5))
    active = draw(st.sets(st.integers(0, len(KEYS) - 1), min_size=1))
    batches = []
    front = draw(st.integers(0, 30))
    for _ in range(n):
        front += draw(st.sampled_from([0, 3, 10, 25]))
        step = draw(st.sampled_from([0, 30, 90]))
        keys = draw(st.lists(st.sampled_from(sorted(active)), max_size=8))
        rows = [(k, max(0, front - draw(st.sampled_from([0, 1, 4, 9, 20])))) for k in keys]
        batches.append((step, rows))
        while quiet and draw(st.booleans()):
            batches.append((draw(st.sampled_from([0, 30, 90])), None))
    return batches  # type: ignore[return-value]


@st.composite
def pipelines(draw: Any, idleness: str | None = None) -> tuple[tm.Pipeline, bool]:
    """A pipeline, and whether its keys are bounded (``max_keys``); ``idleness``: the
    watermark's (default: either)."""
    per = draw(st.sampled_from(["global", "partition", "key"]))
    window = draw(st.sampled_from([tm.Tumbling("10s"), tm.Sliding("10s", "5s"), tm.Session("5s")]))
    idle = draw(st.sampled_from([None, "60s"])) if per != "global" else None
    declared = draw(st.sampled_from([None, SOURCE_PARTITIONS])) if per == "partition" else None
    bounded = draw(st.booleans())
    extra: dict[str, Any] = {}
    if bounded:
        extra["max_keys"] = draw(st.integers(1, 4))
        extra["eviction"] = draw(
            st.sampled_from(["least_recently_active", "lowest_watermark", "reject_new"])
        )
    if draw(st.booleans()):
        extra["state_ttl"] = "100s"
    idleness = idleness or draw(st.sampled_from(["event_time", "clock"]))
    wm: tm.BoundedOutOfOrderness
    if per == "key" and draw(st.booleans()):
        # Each key's delay learned from its rows (a key of a few rows keeps max_delay).
        wm = tm.AdaptiveOutOfOrderness(
            quantile=draw(st.sampled_from([0.5, 0.9])),
            min_delay=draw(st.sampled_from(["0s", "1s"])),
            max_delay=draw(st.sampled_from(["5s", "20s"])),
            horizon=draw(st.sampled_from(["30s", "1h"])),
            idle_timeout=idle,
            idleness=idleness,
        )
    else:
        wm = tm.BoundedOutOfOrderness(
            draw(st.sampled_from(["0s", "5s"])),
            per=per,
            idle_timeout=idle,
            partitions=declared,
            idleness=idleness,
        )
    if draw(st.booleans()):
        # Lateness per key and source partition, and what Spark would have dropped.
        extra["lateness"] = tm.LatenessReport(top=2, spark_delay="2s")
    pipe = tm.Pipeline(
        key="key",
        event_time="ts",
        window=window,
        aggs={"n": tm.count(), "s": tm.sum("v")},
        watermark=wm,
        allowed_lateness=draw(st.sampled_from(["0s", "3s"])),
        late_rule=draw(st.sampled_from(["spark", "flink", "row"])),
        **extra,
    )
    return pipe, bounded


def _micros(v: Any) -> Any:
    return int((v - EPOCH).total_seconds() * 1_000_000) if isinstance(v, dt.datetime) else v


def rows_of(t: pa.Table | None) -> list[tuple[Any, ...]]:
    """A table's rows, sorted, timestamps as epoch microseconds."""
    if t is None or t.num_rows == 0:
        return []
    cols = [c.to_pylist() for c in t.columns]
    return sorted(tuple(_micros(v) for v in r) for r in zip(*cols, strict=True))


Run = list[tuple[list[tuple[Any, ...]], list[tuple[Any, ...]], list[tuple[Any, ...]]]]


def by_operator(pipe: tm.Pipeline, stream: list[Any], cores: int) -> Run:
    """(windows, late, errors) per micro-batch, then the flush, of one operator. A quiet
    micro-batch (rows ``None``): ``SETTLE_CALLS`` calls without rows (``tick``)."""
    from tidemark.spark._stream_task import SETTLE_CALLS

    clock = tm.ManualClock(1_000_000)
    op = pipe.operator(clock=clock, cores=cores)
    out: Run = []
    for step, rows in stream:
        clock.advance(step * 1_000)
        if rows is None:
            ticks = [op.tick() for _ in range(SETTLE_CALLS)]
            out.append((sorted(w for t in ticks for w in rows_of(t.windows)), [], []))
            continue
        o = op.process(table(rows))
        out.append((rows_of(o.windows), rows_of(o.late), rows_of(o.errors)))
    o = op.flush()
    out.append((rows_of(o.windows), [], []))
    return out


class Collect:
    """A sink keeping each micro-batch's rows."""

    def __init__(self) -> None:
        self.got: dict[int, list[tuple[Any, ...]]] = {}

    def __call__(self, t: pa.Table, batch_id: int) -> None:
        self.got[batch_id] = rows_of(t)


def by_stream_processor(
    spark: Any,
    pipe: tm.Pipeline,
    stream: list[Any],
    where: Path,
    n: int,
    on_driver: bool,
    shuffle: bool | None = None,
) -> tuple[Run, list[dict[str, Any]]]:
    """(windows, late, errors) per micro-batch, then the flush, of a StreamProcessor
    called as foreachBatch calls it; and each batch's progress."""
    now = [1_000_000]
    sinks = Collect(), Collect(), Collect()
    proc = StreamProcessor(
        pipe,
        str(where),
        num_partitions=n,
        sink=sinks[0],
        late_sink=sinks[1],
        error_sink=sinks[2],
        arrow_sinks=True,
        on_driver=on_driver,
        shuffle=shuffle,
        clock=lambda: now[0],
    )
    progress: list[dict[str, Any]] = []
    for b, (step, rows) in enumerate(stream):
        now[0] += step * 1_000
        if rows is None:
            # A quiet micro-batch, as a heartbeat's: Spark ran it without rows.
            with mock.patch.object(streaming, "has_no_rows", lambda plan: True):
                proc(spark.createDataFrame(table([])), b)
            ran = proc.last_batch_id == b
            progress.append(proc.last_progress if ran else {"late_rows": 0})  # type: ignore[arg-type]
            continue
        proc(spark.createDataFrame(table(rows)), b)
        assert proc.last_progress is not None
        progress.append(proc.last_progress)
    proc.flush(spark, spark.createDataFrame(table([])).schema)
    nb = len(stream) + 1
    out: Run = [
        (sinks[0].got.get(b, []), sinks[1].got.get(b, []), sinks[2].got.get(b, []))
        for b in range(nb)
    ]
    return out, progress


def emitted_twice(run: Run) -> list[tuple[Any, ...]]:
    """(key, window start, window end) that came out more than once in a run."""
    seen = collections.Counter(w[:3] for windows, _, _ in run for w in windows)
    return [w for w, c in seen.items() if c > 1]


def check(spark: Any, tmp: Path, pipe: tm.Pipeline, bounded: bool, stream: Any, paths: Any) -> None:
    want = by_operator(pipe, stream, cores=1)
    assert emitted_twice(want) == []
    if not bounded:
        assert by_operator(pipe, stream, cores=2) == want
        if pipe.lateness is not None:
            assert operator_report(pipe, stream, 2) == operator_report(pipe, stream, 1)
    for n, on_driver in paths:
        if bounded and n > 1:
            continue
        where = tmp / f"state-{len(list(tmp.iterdir()))}"
        got, progress = by_stream_processor(spark, pipe, stream, where, n, on_driver)
        label = f"num_partitions={n} on_driver={on_driver}"
        assert emitted_twice(got) == [], label
        for b, (g, w) in enumerate(zip(got, want, strict=True)):
            assert g == w, f"{label}, batch {b} (of {len(stream)}; the last is the flush)"
        assert [p["late_rows"] for p in progress] == [len(w[1]) for w in want[:-1]]
        if pipe.lateness is not None and not bounded:
            reported = [p["lateness"] for p in progress if "lateness" in p]
            assert reported[-1:] == [operator_report(pipe, stream, 1)], label


def operator_report(pipe: tm.Pipeline, stream: list[Any], cores: int) -> dict[str, Any]:
    """One operator's ``LatenessReport`` after the stream's micro-batches (called as
    :func:`by_operator` calls it)."""
    from tidemark.spark._stream_task import SETTLE_CALLS

    clock = tm.ManualClock(1_000_000)
    op = pipe.operator(clock=clock, cores=cores)
    for step, rows in stream:
        clock.advance(step * 1_000)
        if rows is None:
            for _ in range(SETTLE_CALLS):
                op.tick()
        else:
            op.process(table(rows))
    return op.metrics()["lateness"]


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
)
@given(pipe=pipelines(), stream=streams(), n=st.sampled_from([1, 2, 3, 8]))
def test_stream_processor_in_the_driver_equals_the_operator(
    spark: Any, tmp_path_factory: Any, pipe: Any, stream: Any, n: int
) -> None:
    check(spark, tmp_path_factory.mktemp("eq"), *pipe, stream, [(n, True)])


@settings(
    max_examples=max(EXAMPLES // 3, 3),
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
)
@given(
    pipe=pipelines(),
    stream=streams(quiet=True),
    n=st.sampled_from([1, 3]),
    on_driver=st.sampled_from([None, False]),
)
def test_quiet_micro_batches_emit_the_operators_windows(
    spark: Any, tmp_path_factory: Any, pipe: Any, stream: Any, n: int, on_driver: bool | None
) -> None:
    """Micro-batches without rows between the others (a heartbeat's, when the stream
    is quiet), in the driver or in one task: each closes what one operator's calls
    without rows close (skipped once nothing is left: the operator's later calls emit
    nothing either); the windows, late and error rows equal, batch by batch."""
    pipe, bounded = pipe
    if bounded and n > 1:
        n = 1  # max_keys bounds each state partition (see the module's text)
    want = by_operator(pipe, stream, cores=1)
    where = tmp_path_factory.mktemp("quiet") / "state"
    got, _ = by_stream_processor(spark, pipe, stream, where, n, on_driver is None)
    assert emitted_twice(got) == []
    assert got == want


@settings(
    max_examples=max(EXAMPLES // 5, 3),
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
)
@given(
    pipe=pipelines(idleness="event_time"),
    stream=streams(),
    gaps=st.lists(st.sampled_from([0, 1, 30, 90, 3_600]), min_size=5, max_size=5),
)
def test_idleness_in_event_time_gives_the_same_windows_at_any_replay_speed(
    spark: Any, tmp_path_factory: Any, pipe: Any, stream: Any, gaps: list[int]
) -> None:
    """The same micro-batches with other wall-clock gaps between them (a backfill read
    fast, a slow replay, a live run with pauses): with idleness in event time, the
    same windows, late and error rows, batch by batch, from the operator and from
    ``StreamProcessor`` (whose clock reads the gaps)."""
    pipe, bounded = pipe
    other = [(gap, rows) for gap, (_, rows) in zip(gaps, stream, strict=False)]
    want = by_operator(pipe, stream, cores=1)
    assert by_operator(pipe, other, cores=1) == want
    tmp = tmp_path_factory.mktemp("speed")
    n = 1 if bounded else 2  # max_keys bounds each state partition (the module's text)
    first, _ = by_stream_processor(spark, pipe, stream, tmp / "a", n, True)
    second, _ = by_stream_processor(spark, pipe, other, tmp / "b", n, True)
    assert first == second == want


@settings(
    max_examples=max(EXAMPLES // 8, 3),
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
)
@given(pipe=pipelines(), stream=streams(), n=st.sampled_from([2, 3]))
def test_a_shuffled_stream_processor_emits_the_operators_windows_once(
    spark: Any, tmp_path_factory: Any, pipe: Any, stream: Any, n: int
) -> None:
    """One task per state partition: no task sees the others. Under Spark's rule (the
    default) windows close on the watermark the micro-batch starts with, which the
    driver hands every task: the output is the operator's, batch by batch. Under the
    other rules a window may close one micro-batch later than in one operator (on the
    watermark the next batch starts with), never twice; late and error rows are the
    same, batch by batch."""
    pipe, bounded = pipe
    if bounded:
        return  # max_keys bounds each state partition (see the module's text)
    want = by_operator(pipe, stream, cores=1)
    where = tmp_path_factory.mktemp("eq") / "state"
    got, _ = by_stream_processor(spark, pipe, stream, where, n, False, shuffle=True)
    check_shuffled(got, want, pipe.late_rule)


def check_shuffled(got: Run, want: Run, late_rule: str) -> None:
    """``got``, from state partitions that ran apart, against one operator's ``want``:
    each window once, in the batch the operator emits it or the next (under Spark's
    rule in the same); late and error rows the same, batch by batch."""
    assert emitted_twice(got) == []
    if late_rule == "spark":
        assert got == want
    assert [g[1:] for g in got] == [w[1:] for w in want]
    assert sorted(x for g in got for x in g[0]) == sorted(x for w in want for x in w[0])
    for b, (g, w) in enumerate(zip(got, want, strict=True)):
        # Every window comes in the batch one operator emits it or in the next.
        later = set(got[b + 1][0]) if b + 1 < len(got) else set()
        assert set(w[0]) <= set(g[0]) | later, f"batch {b}"


@settings(
    max_examples=max(EXAMPLES // 5, 3),
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
)
@given(pipe=pipelines(), stream=streams(), n=st.sampled_from([1, 3, 8]))
def test_stream_processor_on_the_executors_equals_the_operator(
    spark: Any, tmp_path_factory: Any, pipe: Any, stream: Any, n: int
) -> None:
    check(spark, tmp_path_factory.mktemp("eq"), *pipe, stream, [(n, False)])


@settings(
    max_examples=max(EXAMPLES // 8, 3),
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
)
@given(pipe=pipelines(), stream=streams(), n=st.sampled_from([2, 3]))
# A micro-batch known empty between routed ones (Spark tags it: a task still runs).
@example(
    pipe=(
        tm.Pipeline(
            key="key",
            event_time="ts",
            window=tm.Tumbling("10s"),
            aggs={"n": tm.count(), "s": tm.sum("v")},
            watermark=tm.BoundedOutOfOrderness("2s", per="key"),
        ),
        False,
    ),
    stream=[(0, [(0, 5), (1, 7)]), (0, [(0, 14)]), (0, []), (0, [(1, 25), (0, 31)])],
    n=3,
)
def test_a_stream_spark_cannot_size_emits_the_operators_windows_once(
    spark: Any, tmp_path_factory: Any, pipe: Any, stream: Any, n: int
) -> None:
    """A source Spark cannot size (``rate``): the first micro-batch is shuffled, the
    next ones run in one task sized by the last one's rows, which routes them itself
    where it hashes the keys as Spark does (Spark tags the rows of a micro-batch its
    optimizer knows is empty: its estimate is 0). The windows are the shuffled path's:
    each in the batch one operator emits it or the next, once; late and error rows the
    operator's, batch by batch."""
    import importlib

    sizing = importlib.import_module("tidemark.spark._sizing")
    estimate = sizing.spark_estimate
    pipe, bounded = pipe
    if bounded:
        return  # max_keys bounds each state partition (see the module's text)
    want = by_operator(pipe, stream, cores=1)
    where = tmp_path_factory.mktemp("eq") / "state"
    place, routed = _layout.place, []

    def placing(stats: Any, *a: Any) -> Any:
        got = place(stats, *a)
        if stats.kind == "rows":
            routed.append((got.routes, stats.size, stats.unsized, stats.routable))
        return got

    def unsized(df: Any, plan: Any = None) -> tuple[int | None, bool]:
        size, _ = estimate(df, plan)
        return (size, False) if size == 0 else (None, True)

    with (
        mock.patch.object(sizing, "spark_estimate", unsized),
        mock.patch.object(_layout, "place", placing),
    ):
        got, progress = by_stream_processor(spark, pipe, stream, where, n, False)
    # The first has no size to go by (unless Spark knows it empty: sized 0).
    first = "shuffled" if stream[0][1] else "one task"
    assert [p["layout"] for p in progress] == [first] + ["one task"] * (len(stream) - 1)
    # Every micro-batch after the first routed by its task, unless known empty.
    assert [r for r, *_ in routed[1:]] == [u and k for _, _, u, k in routed[1:]]
    assert all(u == (size is None) for _, size, u, _ in routed)
    check_shuffled(got, want, pipe.late_rule)


def _stream_of(rows_per_batch: list[list[tuple[str, int, int]]]) -> list[pa.Table]:
    return [
        pa.table(
            {
                "key": [r[0] for r in rows],
                "partition": [r[1] for r in rows],
                "ts": [r[2] * 1_000_000 for r in rows],
            },
            schema=pa.schema(
                [
                    ("key", pa.string()),
                    ("partition", pa.int64()),
                    ("ts", pa.timestamp("us", tz="UTC")),
                ]
            ),
        )
        for rows in rows_per_batch
    ]


def _windows_per_batch(
    spark: Any, pipe: tm.Pipeline, tables: list[pa.Table], where: Path, step_ms: int = 0, **kw: Any
) -> tuple[list[list[tuple[Any, ...]]], list[list[tuple[Any, ...]]], list[dict[str, Any]]]:
    """Windows per micro-batch from StreamProcessor and from one operator (same clock)."""
    now = [1_000_000]
    sink = Collect()
    proc = StreamProcessor(
        pipe, str(where), sink=sink, arrow_sinks=True, clock=lambda: now[0], **kw
    )
    clock = tm.ManualClock(now[0])
    op = pipe.operator(clock=clock)
    want, progress = [], []
    for b, t in enumerate(tables):
        now[0] += step_ms
        clock.advance(step_ms)
        proc(spark.createDataFrame(t), b)
        assert proc.last_progress is not None
        progress.append(proc.last_progress)
        want.append(rows_of(op.process(t).windows))
    return [sink.got.get(b, []) for b in range(len(tables))], want, progress


@pytest.mark.parametrize("on_driver", [True, False])
def test_per_partition_windows_close_once_on_the_combined_watermark(
    spark: Any, tmp_path: Path, on_driver: bool
) -> None:
    # Each key stays in one source partition; dev1's partition lags. A state partition
    # closed dev0's [0, 10) on its own view of the partitions (only partition 0):
    # emitted at batch 1 with n=1 and again at batch 2 with n=1.
    tables = _stream_of(
        [
            [("dev0", 0, 1), ("dev1", 1, 1)],
            [("dev0", 0, 31), ("dev1", 1, 2)],
            [("dev0", 0, 8), ("dev1", 1, 3)],
            [("dev0", 0, 61), ("dev1", 1, 61)],
            [],  # Spark's rule closes what the last batch's watermark passed here
        ]
    )
    pipe = tm.Pipeline(
        key="key",
        event_time="ts",
        window=tm.Tumbling("10s"),
        aggs={"n": tm.count()},
        watermark=tm.BoundedOutOfOrderness("5s", per="partition"),
    )
    got, want, progress = _windows_per_batch(spark, pipe, tables, tmp_path, on_driver=on_driver)
    assert got == want
    dev0 = [w for batch in got for w in batch if w[0] == "dev0" and w[1] == 0]
    assert [w[3] for w in dev0] == [2], "dev0 [0, 10) once, with both rows"
    assert sum(p["late_rows"] for p in progress) == 0


@pytest.mark.parametrize("on_driver", [True, False])
def test_an_idle_key_alone_in_its_state_partition_still_closes(
    spark: Any, tmp_path: Path, on_driver: bool
) -> None:
    # tenant-9 sends only in the first micro-batch; the clock moves 60 s per batch and
    # keys go idle after 90 s on it. Its window closed on the global watermark at batch
    # 2 in one operator, and never in its own state partition.
    tenants = [f"tenant-{i}" for i in range(10)]
    tables = _stream_of(
        [[(t, 0, 1) for t in tenants]]
        + [[(t, 0, 1 + 10 * b) for t in tenants[:9]] for b in range(1, 8)]
    )
    pipe = tm.Pipeline(
        key="key",
        event_time="ts",
        window=tm.Tumbling("10s"),
        aggs={"n": tm.count()},
        watermark=tm.BoundedOutOfOrderness("5s", per="key", idle_timeout="90s", idleness="clock"),
    )
    got, want, progress = _windows_per_batch(
        spark, pipe, tables, tmp_path, step_ms=60_000, on_driver=on_driver
    )
    assert got == want
    closed_at = [b for b, ws in enumerate(got) for w in ws if w[0] == "tenant-9"]
    # The global watermark passes it in batch 2; Spark's rule closes it as batch 3 begins.
    assert closed_at == [3]
    assert progress[-1]["next_watermark"] > 0, "no longer held at tenant-9's -4 s"


def _file_stream(
    spark: Any, tmp: Path, proc: StreamProcessor, query: Any = None, **write: Any
) -> list[dict[str, Any]]:
    """Three Parquet files (pyarrow ``write`` options) streamed one a micro-batch
    through ``proc`` (``query`` applied to the stream); each batch's progress."""
    inp = tmp / "in"
    inp.mkdir()
    for b in range(3):
        t = _stream_of([[("a", 0, 10 * b + 1), ("b", 1, 10 * b + 2), ("a", 0, 0)]])[0]
        import pyarrow.parquet as pq

        pq.write_table(t, inp / f"part-{b}.parquet", **write)
        os.utime(inp / f"part-{b}.parquet", (1_700_000_000 + b, 1_700_000_000 + b))
    schema = spark.read.parquet(str(inp)).schema
    stream = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(str(inp))
    if query is not None:
        stream = query(stream)
    progress: list[dict[str, Any]] = []

    def each(df: Any, b: int) -> None:
        proc(df, b)
        assert proc.last_progress is not None
        progress.append(proc.last_progress)

    q = (
        stream.writeStream.foreachBatch(each)
        .option("checkpointLocation", str(tmp / "chk"))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination()
    return progress


def _pipe(**kw: Any) -> tm.Pipeline:
    return tm.Pipeline(
        key="key",
        event_time="ts",
        window=tm.Tumbling("10s"),
        aggs={"n": tm.count()},
        watermark=tm.BoundedOutOfOrderness("0s"),
        **kw,
    )


def test_a_stream_processor_says_what_it_drops_and_ignores(spark: Any, tmp_path: Path) -> None:
    from pyspark.sql import functions as F

    with pytest.raises(tm.ConfigError, match="needs a sink"):
        StreamProcessor(_pipe(), str(tmp_path / "none"))
    # The per-row rule: the row at 0 s of each file is late from the second file on.
    proc = StreamProcessor(
        _pipe(late_rule="row"), str(tmp_path / "state"), 2, sink=lambda d, b: None
    )
    with pytest.warns(tm.TidemarkWarning) as said:
        progress = _file_stream(
            spark, tmp_path, proc, lambda s: s.withWatermark("ts", "10 seconds")
        )
    messages = [str(w.message) for w in said]
    # Each said once, though every batch has late rows and the watermark.
    assert sum("withWatermark" in m and "ignores it" in m for m in messages) == 1, messages
    assert sum("late_sink" in m for m in messages) == 1, messages
    assert sum(p["late_rows"] for p in progress) == 2
    with pytest.raises(tm.ConfigError, match="needs the stream's schema"):
        proc.flush(spark, None)
    # Rows after the end-of-input flush would reopen windows it emitted.
    schema = spark.read.parquet(str(tmp_path / "in")).schema
    proc.flush(spark, schema)
    with pytest.raises(tm.ConfigError, match="end-of-input flush"):
        proc(spark.read.parquet(str(tmp_path / "in")).withColumn("n", F.lit(1)), 4)


def test_int96_files_say_why_they_are_read_through_spark(spark: Any, tmp_path: Path) -> None:
    seen: list[int] = []
    proc = StreamProcessor(_pipe(), str(tmp_path / "state"), 2, sink=lambda d, b: seen.append(b))
    progress = _file_stream(spark, tmp_path, proc, use_deprecated_int96_timestamps=True)
    assert seen == [0, 1, 2]
    assert {p["read"] for p in progress} == {"spark"}
    assert all("INT96" in p["read_why"] for p in progress), progress


def test_a_relative_state_location_is_resolved_on_the_driver(
    spark: Any, tmp_path: Path, monkeypatch: Any
) -> None:
    import pickle

    monkeypatch.chdir(tmp_path)
    proc = StreamProcessor(_pipe(), "rel/state", 2, sink=lambda d, b: None, on_driver=False)
    # What an executor gets (its working directory is its own) names the driver's path.
    assert pickle.loads(pickle.dumps(proc.store)).root == str(tmp_path / "rel" / "state")
    proc(spark.createDataFrame(_stream_of([[("a", 0, 1)]])[0]), 0)
    assert (tmp_path / "rel" / "state" / "partitions" / "0" / "0.snap").exists()


def test_a_reorder_streams_watermark_ignores_partitions_without_rows(
    spark: Any, tmp_path: Path
) -> None:
    from tidemark.spark import ReorderStream

    rs = ReorderStream(
        tm.Reorder("ts", late_tolerance="2s"),
        str(tmp_path / "state"),
        num_partitions=4,
        partition_by=["key"],
        sink=lambda df, b: None,
    )
    tables = _stream_of([[("a", 0, 5)], [("a", 0, 9)]])
    for b, t in enumerate(tables):
        rs(spark.createDataFrame(t), b)
        # One key: three of the four state partitions never see a row.
        assert rs.watermark() == (5 + 4 * b - 2) * 1_000_000


def test_aggregate_bounds_keys_without_error_rows_when_replayed_in_small_units(
    spark: Any,
) -> None:
    from tidemark.spark import aggregate

    rows = [(f"k{i % 30}", 0, i) for i in range(300)]
    t = _stream_of([rows])[0].append_column("seq", pa.array(range(300)))
    df = spark.createDataFrame(t)
    pipe = _pipe(max_keys=5)
    whole = aggregate(df, pipe, num_partitions=1)
    assert whole.errors.count() > 0, "one unit of 30 keys over a bound of 5"
    assert "max_keys" in whole.errors.first()["reason"]
    res = aggregate(df, pipe, num_partitions=1, order_by="seq", batch_rows=5)
    assert res.errors.count() == 0
    counted = sum(r["n"] for r in res.windows.collect())
    assert counted + res.late.count() == 300, "nothing lost: counted or late"
    seen = Counter((r["key"], r["window_start"]) for r in res.windows.collect())
    assert max(seen.values()) == 1, "no window twice"


def test_a_shuffled_state_partition_closes_nothing_before_the_stream_has_a_watermark(
    spark: Any, tmp_path: Path
) -> None:
    # Found by the long profile of the shuffled test: at the first micro-batch the
    # driver has no watermark yet, and a state partition holding only source
    # partition 0 closed k0's [0, 10) on its own view (10), where the combined
    # watermark is 9 (partition 1 is at 9).
    pipe = tm.Pipeline(
        key="key",
        event_time="ts",
        window=tm.Tumbling("10s"),
        aggs={"n": tm.count(), "s": tm.sum("v")},
        watermark=tm.BoundedOutOfOrderness("0s", per="partition"),
    )
    stream = [(0, [(0, 10), (0, 10), (0, 10), (0, 10), (0, 9), (1, 9)])]
    want = by_operator(pipe, stream, cores=1)
    got, _ = by_stream_processor(spark, pipe, stream, tmp_path / "s", 2, False, shuffle=True)
    assert got == want
