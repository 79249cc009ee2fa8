"""A quiet stream closes its windows: Structured Streaming end to end.

When the input stops, Spark's own stateful query runs a no-data micro-batch and emits
the windows its watermark closed. ``StreamProcessor.start`` gives the stream a
heartbeat (``tidemark.spark.heartbeat``: a ``rate-micro-batch`` source whose rows are
all filtered out), so that Spark runs a micro-batch at every trigger; a micro-batch
without rows closes what the watermark passed, in calls without rows until one changes
nothing, and later quiet micro-batches are skipped. Each test runs a real query over a
Parquet file stream: the windows come out without new data and without a flush, within
a trigger interval, exactly once, and the same after a restart while quiet.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import tidemark as tm
from tidemark.spark import StreamProcessor

pytestmark = pytest.mark.spark

S = 1_000_000
SCHEMA = pa.schema([("k", pa.string()), ("p", pa.int32()), ("ts", pa.timestamp("us", tz="UTC"))])
TRIGGER = "0.2 seconds"


def write(where: Path, name: str, rows: list[tuple[str, int, int]]) -> None:
    """Rows ``(key, partition, seconds)`` as one Parquet file of the stream."""
    table = pa.table(
        {
            "k": [k for k, _, _ in rows],
            "p": [p for _, p, _ in rows],
            "ts": [t * S for _, _, t in rows],
        },
        schema=SCHEMA,
    )
    tmp = where / f".{name}.tmp"
    pq.write_table(table, tmp)
    tmp.rename(where / name)  # the file source never sees a file half written


class Windows:
    """A sink keeping each micro-batch's windows as ``(key, start s, end s, n)``; it
    fails the micro-batches ``fail`` names (as a sink whose write died)."""

    def __init__(self, fail: tuple[int, ...] = ()) -> None:
        self.got: dict[int, list[tuple[Any, ...]]] = {}
        self.fail = set(fail)
        self.lock = threading.Lock()

    def __call__(self, t: pa.Table, batch_id: int) -> None:
        if batch_id in self.fail:
            self.fail.discard(batch_id)
            raise RuntimeError("sink down")
        rows = sorted(
            (r["k"], r["window_start"].second, r["window_end"].second, r["n"])
            for r in t.to_pylist()
        )
        with self.lock:
            self.got[batch_id] = rows

    def all(self) -> list[tuple[Any, ...]]:
        with self.lock:
            return [w for b in sorted(self.got) for w in self.got[b]]


def wait_for(what: Callable[[], bool], seconds: float = 60) -> None:
    deadline = time.time() + seconds
    while not what():
        assert time.time() < deadline, "timed out"
        time.sleep(0.05)


def last_batch(q: Any) -> int:
    """The id of the query's last finished micro-batch (-1: none yet)."""
    p = q.lastProgress
    return -1 if p is None else int(p["batchId"])


def pipeline(**watermark: Any) -> tm.Pipeline:
    return tm.Pipeline(
        key="k",
        event_time="ts",
        window=tm.Tumbling("10s"),
        aggs={"n": tm.count()},
        watermark=tm.BoundedOutOfOrderness("0s", **watermark),
    )


def start(spark: Any, proc: StreamProcessor, src: Path, chk: Path) -> Any:
    stream = spark.readStream.schema(spark.createDataFrame(SCHEMA.empty_table()).schema)
    return proc.start(stream.parquet(str(src)), chk, trigger=TRIGGER)


@pytest.mark.parametrize("on_driver", [None, False])
def test_a_quiet_stream_emits_what_its_watermark_closed_once(
    spark: Any, tmp_path: Path, on_driver: bool | None
) -> None:
    src = tmp_path / "in"
    src.mkdir()
    write(src, "0.parquet", [("a", 0, 1), ("b", 0, 2), ("a", 0, 12)])
    sink = Windows()
    proc = StreamProcessor(
        pipeline(),
        tmp_path / "state",
        num_partitions=2,
        sink=sink,
        arrow_sinks=True,
        on_driver=on_driver,
    )
    q = start(spark, proc, src, tmp_path / "chk")
    try:
        # The rows moved the watermark to 12 s; under Spark's rule [0, 10) closes in the
        # next call: the next trigger's micro-batch, which has no rows.
        wait_for(lambda: len(sink.all()) == 2)
        assert sink.got[0] == []
        assert sink.got[1] == [("a", 0, 10, 1), ("b", 0, 10, 1)]
        assert proc.progress(1)["read"] == "none"
        assert proc.progress(1)["input_rows"] == 0
        # Quiet micro-batches go on; once nothing is left to close they are skipped.
        n = last_batch(q)
        wait_for(lambda: last_batch(q) >= n + 5)
        assert sorted(sink.got) == [0, 1]
        # New rows, then quiet again: what they closed comes out without more data.
        write(src, "1.parquet", [("a", 1, 25)])
        wait_for(lambda: ("a", 10, 20, 1) in sink.all())
    finally:
        q.stop()
    emitted = sink.all()
    assert len(emitted) == len(set(emitted)) == 3, emitted


def test_a_restart_while_quiet_emits_the_closed_windows_once(spark: Any, tmp_path: Path) -> None:
    src, state, chk = tmp_path / "in", tmp_path / "state", tmp_path / "chk"
    src.mkdir()
    write(src, "0.parquet", [("a", 0, 1), ("b", 0, 2), ("a", 0, 12)])
    # The first quiet micro-batch dies in the sink: the query stops with the windows
    # its watermark closed not delivered.
    dying = Windows(fail=(1,))
    q = start(spark, StreamProcessor(pipeline(), state, sink=dying, arrow_sinks=True), src, chk)
    try:
        q.awaitTermination(60)
    except Exception as e:  # StreamingQueryException: the sink's error
        assert "sink down" in str(e)
    finally:
        q.stop()
    assert dying.all() == []
    # Restarted while quiet: Spark replays micro-batch 1, the processor replays its
    # record, and the windows come out once.
    sink = Windows()
    proc = StreamProcessor(pipeline(), state, sink=sink, arrow_sinks=True)
    q = start(spark, proc, src, chk)
    try:
        wait_for(lambda: 1 in sink.got)
        wait_for(lambda: last_batch(q) >= 4)
    finally:
        q.stop()
    assert sink.got == {1: [("a", 0, 10, 1), ("b", 0, 10, 1)]}
    # And a restart after they came out emits nothing again.
    again = Windows()
    q = start(spark, StreamProcessor(pipeline(), state, sink=again, arrow_sinks=True), src, chk)
    try:
        wait_for(lambda: last_batch(q) >= 4)
        n = last_batch(q)
        wait_for(lambda: last_batch(q) >= n + 3)
    finally:
        q.stop()
    assert again.all() == []


def test_windows_an_input_idle_on_the_clock_held_back_come_out_while_quiet(
    spark: Any, tmp_path: Path
) -> None:
    """Idleness on the clock, a live source: partition 1 holds the watermark at 0 s;
    when the stream goes quiet both partitions go idle after ``idle_timeout`` of wall
    time, and the windows come out within that plus a trigger interval."""
    src = tmp_path / "in"
    src.mkdir()
    write(src, "0.parquet", [("a", 0, 1), ("a", 0, 12), ("b", 1, 0)])
    sink = Windows()
    pipe = pipeline(per="partition", partition_column="p", idle_timeout="1s", idleness="clock")
    proc = StreamProcessor(pipe, tmp_path / "state", sink=sink, arrow_sinks=True)
    began = time.time()
    q = start(spark, proc, src, tmp_path / "chk")
    try:
        wait_for(lambda: len(sink.all()) == 2, seconds=30)
        took = time.time() - began
    finally:
        q.stop()
    assert sink.all() == [("a", 0, 10, 1), ("b", 0, 10, 1)]
    assert took > 1.0, "not before the partitions went idle"


@pytest.mark.parametrize("on_driver", [True, False])
def test_a_pipelines_clock_drives_idleness_on_the_clock_in_driver_and_tasks(
    spark: Any, tmp_path: Path, on_driver: bool
) -> None:
    """``Pipeline(clock=...)`` is the processor's clock, read once per micro-batch on
    the driver (before, the driver ignored it and tasks failed to pickle it)."""
    clock = tm.ManualClock(0)
    pipe = tm.Pipeline(
        key="k",
        event_time="ts",
        window=tm.Tumbling("10s"),
        aggs={"n": tm.count()},
        watermark=tm.BoundedOutOfOrderness(
            "0s", per="partition", partition_column="p", idle_timeout="5m", idleness="clock"
        ),
        clock=clock,
    )
    sink = Windows()
    proc = StreamProcessor(
        pipe, tmp_path / "state", sink=sink, arrow_sinks=True, on_driver=on_driver
    )

    def batch(rows: list[tuple[str, int, int]], b: int) -> None:
        t = pa.table(
            {"k": [r[0] for r in rows], "p": [r[1] for r in rows], "ts": [r[2] * S for r in rows]},
            schema=SCHEMA,
        )
        proc(spark.createDataFrame(t), b)

    batch([("a", 0, 1), ("b", 1, 0)], 0)
    batch([("a", 0, 12)], 1)
    assert proc.last_progress is not None and proc.last_progress["next_watermark"] == 0
    clock.advance(40 * 60_000)  # partition 1 silent for 40 minutes on the clock
    batch([("a", 0, 13)], 2)
    batch([("a", 0, 14)], 3)
    assert proc.last_progress["next_watermark"] == 14 * S
    assert ("b", 0, 10, 1) in sink.all()
    with pytest.raises(tm.ConfigError, match="give one"):
        StreamProcessor(pipe, tmp_path / "other", sink=sink, clock=lambda: 0)


def test_a_flush_keeps_the_watermark_it_began_with(spark: Any, tmp_path: Path) -> None:
    """The flush's progress showed ``next_watermark: 0`` per key (a restored operator
    that read no rows reported event time 0)."""
    sink = Windows()
    proc = StreamProcessor(pipeline(per="key"), tmp_path / "state", sink=sink, arrow_sinks=True)
    t = pa.table({"k": ["a", "b"], "p": [0, 0], "ts": [12 * S, 30 * S]}, schema=SCHEMA)
    proc(spark.createDataFrame(t), 0)
    assert proc.last_progress is not None
    before = proc.last_progress["next_watermark"]
    assert before == 12 * S
    proc.flush(spark, spark.createDataFrame(t).schema)
    assert proc.last_progress["next_watermark"] == before
