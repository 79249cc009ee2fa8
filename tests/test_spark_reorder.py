"""Reordering on Spark: batch per partition, and streaming with exactly-once buffers."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import tidemark as tm
from tidemark.spark import ReorderStream, reorder


def arrivals(n_batches: int = 5, per_batch: int = 30) -> list[pa.Table]:
    """Three devices, event times (ms) out of order by up to 3 s, one late row."""
    out = []
    for b in range(n_batches):
        rows = []
        for i in range(per_batch):
            seq = b * per_batch + i
            ts = seq * 100 - ((seq * 37) % 31) * 100  # up to 3 s behind
            rows.append((f"d{seq % 3}", ts, seq))
        if b == 3:
            rows.append(("d0", 0, 10_000))  # far behind every watermark: late
        out.append(
            pa.table(
                {
                    "device": [r[0] for r in rows],
                    "ts": pa.array([r[1] for r in rows], pa.int64()),
                    "seq": pa.array([r[2] for r in rows], pa.int64()),
                }
            )
        )
    return out


def local(batches: list[pa.Table]) -> tuple[list[int], list[int]]:
    """One local operator over the same arrival units: released seqs and late seqs."""
    r = tm.Reorder("ts", "unixtimestamp_ms", late_tolerance="3s", late="side_output")
    rows, late = [], []
    for b in batches:
        out = r.process(b)
        rows += out.rows.column("seq").to_pylist()
        late += out.late.column("seq").to_pylist()
    rows += r.flush().rows.column("seq").to_pylist()
    return rows, late


def test_batch_reorder_orders_each_partition(spark: Any) -> None:
    table = pa.concat_tables(arrivals())
    df = spark.createDataFrame(table.to_pandas())
    r = tm.Reorder("ts", "unixtimestamp_ms", late_tolerance="3s", late="side_output")
    res = reorder(
        df, r, partition_by=["device"], num_partitions=2, sort_within="seq", batch_rows=10
    )
    try:
        from pyspark.sql import functions as F

        rows = res.rows.withColumn("p", F.spark_partition_id()).collect()
        late = [x.seq for x in res.late.collect()]
        assert res.errors.count() == 0
    finally:
        res.unpersist()
    by_part: dict[int, list[int]] = {}
    for x in rows:
        by_part.setdefault(x.p, []).append(x.ts)
    for ts in by_part.values():
        assert ts == sorted(ts), "released in event-time order within each partition"
    assert late == [10_000]
    assert len(rows) + len(late) == table.num_rows, "nothing lost"
    with pytest.raises(tm.MissingColumnError, match="device, ts, seq"):
        reorder(df, tm.Reorder("event_ts", "unixtimestamp_ms"))


@pytest.mark.parametrize("on_driver", [True, None], ids=["driver", "one-task"])
def test_streaming_reorder_keeps_the_buffer_and_replays_exactly(
    spark: Any, tmp_path: Path, on_driver: bool | None
) -> None:
    """Run in the driver and in one Spark task (the default for small micro-batches)."""
    batches = arrivals()
    inp = tmp_path / "in"
    inp.mkdir()
    for i, t in enumerate(batches):
        f = inp / f"part-{i:05d}.parquet"
        pq.write_table(t, f)
        os.utime(f, (1_700_000_000 + i, 1_700_000_000 + i))
    schema = spark.read.parquet(str(inp)).schema
    got: dict[int, list[int]] = {}
    late: list[int] = []
    rs = ReorderStream(
        tm.Reorder("ts", "unixtimestamp_ms", late_tolerance="3s", late="side_output"),
        str(tmp_path / "state"),
        num_partitions=1,
        sink=lambda df, b: got.__setitem__(b, [r.seq for r in df.collect()]),
        late_sink=lambda df, b: late.extend(r.seq for r in df.collect()),
        on_driver=on_driver,
    )
    progress: dict[int, dict[str, Any]] = {}

    def each_batch(df: Any, b: int) -> None:
        rs(df, b)
        assert rs.last_progress is not None
        progress[b] = rs.last_progress

    q = (
        spark.readStream.schema(schema)
        .option("maxFilesPerTrigger", 1)
        .parquet(str(inp))
        .writeStream.foreachBatch(each_batch)
        .option("checkpointLocation", str(tmp_path / "chk"))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination()
    assert rs.watermark() is not None
    # Replay the last batch (as Spark does after a crash): same rows.
    last = len(batches) - 1
    before = got[last]
    rs(spark.read.parquet(str(inp / f"part-{last:05d}.parquet")), last)
    assert got[last] == before
    assert rs.last_progress == progress[last], "a replay counts the same"
    rs.flush(spark, schema)
    progress[last + 1] = rs.progress()
    # Per batch: what came in, what left, what the buffer holds; nothing unaccounted.
    buffered = 0
    for b, p in sorted(progress.items()):
        assert p["batch_id"] == b
        assert p["input_rows"] == (batches[b].num_rows if b <= last else 0)
        assert p["released_rows"] == len(got[b])
        assert p["late_rows"] == (1 if b == 3 else 0)
        assert p["error_rows"] == 0
        buffered += p["input_rows"] - p["released_rows"] - p["late_rows"] - p["error_rows"]
        assert p["buffered_rows"] == buffered
        assert (p["buffer_bytes"] > 0) == (buffered > 0)
    assert buffered == 0, "the flush empties the buffer"
    layout = "driver" if on_driver else "one task"
    assert {p["layout"] for p in progress.values()} == {layout}, "the flush too"
    # Recorded with the state: another process (a fresh object) reads it back.
    again = ReorderStream(
        tm.Reorder("ts", "unixtimestamp_ms", late_tolerance="3s", late="side_output"),
        str(tmp_path / "state"),
        num_partitions=1,
    )
    assert again.progress() == progress[last + 1]
    assert again.progress(last) == progress[last]
    assert again.progress(0) is None, "pruned after retention"
    # Batch `last` once more, after the flush recorded a later batch: not a replay Spark
    # makes (it replays only its last batch), so another query must be using the state.
    with pytest.raises(tm.StateCorruptedError, match=f"holds batches up to {last + 1}"):
        again(spark.read.parquet(str(inp / f"part-{last:05d}.parquet")), last)
    streamed = [s for b in sorted(got) for s in got[b]]
    want_rows, want_late = local(batches)
    # One state partition: exactly the local operator's order, across micro-batches.
    assert streamed == want_rows
    assert late == want_late == [10_000]
    # A different configuration on the same state location is refused.
    other = ReorderStream(
        tm.Reorder("ts", "unixtimestamp_ms", late_tolerance="1s"), str(tmp_path / "state"), 1
    )
    with pytest.raises(tm.StateCorruptedError, match="configuration"):
        other(spark.read.parquet(str(inp / "part-00000.parquet")), 9)


def test_a_reorder_stream_that_goes_on_after_a_flush_loses_nothing(
    spark: Any, tmp_path: Path
) -> None:
    """The query run again with new input after ``flush()``, one batch a run: each
    batch follows the one before the flush (the flush released the buffer early, and
    those rows come out again), so every row is released at least once, none late
    that the local operator keeps."""
    batches = arrivals()
    schema = spark.createDataFrame(batches[0].to_pandas()).schema
    released: list[int] = []
    late: list[int] = []

    def run() -> ReorderStream:
        return ReorderStream(
            tm.Reorder("ts", "unixtimestamp_ms", late_tolerance="3s", late="side_output"),
            str(tmp_path / "state"),
            num_partitions=1,
            sink=lambda df, b: released.extend(r.seq for r in df.collect()),
            late_sink=lambda df, b: late.extend(r.seq for r in df.collect()),
        )

    rs = run()
    for b in range(3):
        rs(spark.createDataFrame(batches[b].to_pandas(), schema), b)
    rs.flush(spark, schema)  # as batch 3
    for b in (3, 4):
        rs = run()
        rs(spark.createDataFrame(batches[b].to_pandas(), schema), b)
        rs.flush(spark, schema)
    want_rows, want_late = local(batches)
    assert set(released) == set(want_rows)
    assert late == want_late


def test_reorder_watermark_is_the_last_finished_batchs(
    spark: Any, tmp_path: Path, switchable_sink: Any
) -> None:
    batches = arrivals(n_batches=3)
    schema = spark.createDataFrame(batches[0].to_pandas()).schema
    sink = switchable_sink
    rs = ReorderStream(
        tm.Reorder("ts", "unixtimestamp_ms", late_tolerance="3s"), str(tmp_path / "s"), 1, sink
    )
    for b in range(2):
        rs(spark.createDataFrame(batches[b].to_pandas(), schema), b)
    after_1 = rs.watermark()
    assert after_1 is not None
    sink.down = True
    with pytest.raises(RuntimeError, match="sink down"):
        rs(spark.createDataFrame(batches[2].to_pandas(), schema), 2)
    assert rs.watermark() == after_1  # not None: batch 2 has none yet


@pytest.mark.parametrize("on_driver", [None, False])
def test_a_restarted_reorder_stream_goes_on_with_large_strings(
    spark: Any, tmp_path: Path, on_driver: bool | None
) -> None:
    """The rows held by a stream stopped with strings as ``string`` come out after a
    restart under ``useLargeVarTypes``, in order, as one local operator gives them."""
    batches = arrivals()
    got: list[int] = []
    dfs = [spark.createDataFrame(t) for t in batches]

    def stream() -> ReorderStream:
        return ReorderStream(
            tm.Reorder("ts", "unixtimestamp_ms", late_tolerance="3s"),
            str(tmp_path / "state"),
            num_partitions=1,
            sink=lambda df, _b: got.extend(r.seq for r in df.collect()),
            on_driver=on_driver,
        )

    rs = stream()
    try:
        for i, df in enumerate(dfs):
            if i == 2:
                spark.conf.set("spark.sql.execution.arrow.useLargeVarTypes", "true")
                rs = stream()
            rs(df, i)
        rs.flush(spark, dfs[0].schema)
    finally:
        spark.conf.unset("spark.sql.execution.arrow.useLargeVarTypes")
    want, late = local(batches)
    assert got == want and late == [10_000]


@pytest.mark.parametrize("on_driver", [None, True], ids=["shuffled", "driver"])
def test_streaming_reorder_with_an_empty_partition_and_the_default_time_zone(
    spark: Any, tmp_path: Path, on_driver: bool | None
) -> None:
    """A state partition that gets no rows in one micro-batch and rows in the next,
    with the session time zone left at the JVM's default: its buffer keeps one
    schema (the empty partition's table takes the zone Spark's batches carry, e.g.
    Etc/UTC, not "UTC"). By default these batches (Python rows, whose size Spark
    does not know) are shuffled; ``on_driver=True`` runs them in the driver."""
    import datetime as dt

    old_tz = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.unset("spark.sql.session.timeZone")
    try:
        t0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
        schema = "device string, ts timestamp, seq long"

        def batch(rows: list[tuple[str, int, int]]) -> Any:
            return spark.createDataFrame(
                [(d, t0 + dt.timedelta(seconds=s), q) for d, s, q in rows], schema
            )

        released: list[int] = []
        rs = ReorderStream(
            tm.Reorder("ts", late_tolerance="10s"),
            str(tmp_path / "state"),
            num_partitions=2,
            partition_by=["device"],
            sink=lambda df, b: released.extend(r.seq for r in df.collect()),
            on_driver=on_driver,
        )
        # Every row of batch 0 hashes to one state partition: the other runs empty.
        rs(batch([("d0", s, s) for s in range(5)]), 0)
        assert rs.last_progress is not None
        assert rs.last_progress["layout"] == ("driver" if on_driver else "shuffled")
        rs(batch([(d, 100 + i, 100 + i) for i, d in enumerate(["d0", "d1", "d2", "d3"])]), 1)
        rs.flush(spark, batch([]).schema)
        assert sorted(released) == [0, 1, 2, 3, 4, 100, 101, 102, 103]
    finally:
        spark.conf.set("spark.sql.session.timeZone", old_tz)


def test_streaming_reorder_in_the_driver_equals_spark_tasks(spark: Any, tmp_path: Path) -> None:
    """Routed by ``partition_by`` over 3 state partitions, micro-batches that alternate
    between the driver, one task and Spark's shuffle (and a flush) release, drop and
    count exactly what an all-shuffled run does, and keep each device's rows in
    event-time order; under a non-UTC session zone and ``large_string`` (``toArrow``
    hands the driver UTC timestamps: the buffers keep a task's types). With
    ``arrow_sinks`` the sinks get those rows as the tables ``toArrow()`` of the
    DataFrames gives, in the same order per device, in either layout."""
    import datetime as dt

    old_tz = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "America/New_York")
    spark.conf.set("spark.sql.execution.arrow.useLargeVarTypes", "true")
    t0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    try:
        dfs = []
        for t in arrivals(n_batches=6):
            ms = t.column("ts").to_pylist()
            dfs.append(
                spark.createDataFrame(
                    [
                        (d, t0 + dt.timedelta(milliseconds=m), q, f"payload-{q}")
                        for d, m, q in zip(
                            t.column("device").to_pylist(),
                            ms,
                            t.column("seq").to_pylist(),
                            strict=True,
                        )
                    ],
                    "device string, ts timestamp, seq long, note string",
                )
            )

        # Each run's released and late rows as Arrow rows (toArrow(), or the tables).
        as_arrow: dict[tuple[str, bool], tuple[list[list[Any]], list[Any], set[Any]]] = {}

        def run(
            layouts: list[str], arrow: bool = False
        ) -> tuple[list[list[Any]], list[Any], list[dict[str, Any]]]:
            released: list[list[Any]] = []
            late: list[Any] = []
            tables: tuple[list[list[Any]], list[Any], set[Any]] = ([], [], set())
            as_arrow[(str(layouts), arrow)] = tables

            def table(out: Any) -> pa.Table:
                t = out if arrow else out.toArrow()
                assert isinstance(t, pa.Table)
                tables[2].add(t.schema)
                return t

            def sink(df: Any, b: int) -> None:
                tables[0].append(table(df).to_pylist())
                if not arrow:
                    released.append(df.collect())

            def late_sink(df: Any, b: int) -> None:
                tables[1].extend(table(df).to_pylist())
                if not arrow:
                    late.extend(df.collect())

            rs = ReorderStream(
                tm.Reorder("ts", late_tolerance="3s", late="side_output"),
                str(tmp_path / f"state-{layouts}-{arrow}"),
                num_partitions=3,
                partition_by=["device"],
                sink=sink,
                late_sink=late_sink,
                arrow_sinks=arrow,
            )
            progress = []
            for b, (df, layout) in enumerate(zip(dfs, layouts, strict=True)):
                rs.on_driver = layout == "driver"
                rs.shuffle = layout == "shuffled"
                rs(df, b)
                assert rs.last_progress is not None
                progress.append(rs.last_progress)
            flushed = rs.flush(spark, dfs[0].schema)
            assert isinstance(flushed, pa.Table) == arrow
            assert rs.last_progress is not None
            progress.append(rs.last_progress)
            return released, late, progress

        mixed = ["driver", "one task", "driver", "shuffled", "one task", "driver"]
        shuffled = ["shuffled"] * len(mixed)
        got, got_late, got_progress = run(mixed)
        want, want_late, want_progress = run(shuffled)
        assert [p["layout"] for p in got_progress] == [
            *mixed,
            "driver",  # the flush follows a batch run in the driver
        ]
        assert [p["layout"] for p in want_progress] == ["shuffled"] * (len(mixed) + 1)
        strip = [{k: v for k, v in p.items() if k != "layout"} for p in got_progress]
        assert strip == [{k: v for k, v in p.items() if k != "layout"} for p in want_progress]
        assert len(got) == len(want) == len(mixed) + 1
        for g, w in zip(got, want, strict=True):
            assert sorted(g) == sorted(w), "the same rows, every column"
            for device in {r.device for r in w}:
                assert [r for r in g if r.device == device] == [
                    r for r in w if r.device == device
                ], "each device's rows in the same (event-time) order"
        assert sorted(got_late) == sorted(want_late) and len(want_late) == 1
        assert got_late[0].note == "payload-10000"
        run(mixed, arrow=True)
        run(shuffled, arrow=True)
        ref = as_arrow[(str(shuffled), False)]
        assert len(ref[2]) == 1  # one schema for the released and late rows
        for layouts in (mixed, shuffled):
            rows, late_rows, schemas = as_arrow[(str(layouts), True)]
            assert schemas == ref[2]
            assert sorted(late_rows, key=repr) == sorted(ref[1], key=repr)
            for g, w in zip(rows, ref[0], strict=True):
                for device in {r["device"] for r in w}:
                    assert [r for r in g if r["device"] == device] == [
                        r for r in w if r["device"] == device
                    ]
                assert len(g) == len(w)
    finally:
        spark.conf.set("spark.sql.session.timeZone", old_tz)
        spark.conf.unset("spark.sql.execution.arrow.useLargeVarTypes")


def test_streaming_reorder_runs_in_the_driver_only_where_it_routes_as_spark(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Default: a micro-batch Spark estimates at most ``ON_DRIVER_BYTES``; ``True``:
    any; ``False``: none. Never with ``partition_by`` columns whose Spark hash
    tidemark does not reproduce; a flush after a batch that ran there, or with
    ``True``."""
    import importlib

    # From Arrow: a local relation, whose size Spark knows (Python rows: it does not).
    df = spark.createDataFrame(
        pa.table(
            {
                "device": ["d0", "d1"],
                "ts": pa.array([1, 2], pa.int64()),
                "tags": pa.array([[1], [2]], pa.list_(pa.int32())),
            }
        )
    )

    def rs(n: int = 2, by: list[str] | None = None, **kw: Any) -> ReorderStream:
        r = tm.Reorder("ts", "unixtimestamp_ms")
        return ReorderStream(r, str(tmp_path / "s"), n, partition_by=by, **kw)

    def where(s: ReorderStream, flush: bool = False) -> str:
        return s._placement(df, flush).where

    # By default the driver runs a small micro-batch for Arrow sinks only.
    assert where(rs(by=["device"])) == "one task"
    assert where(rs(by=["device"], arrow_sinks=True)) == "driver"
    assert where(rs(n=1, arrow_sinks=True)) == "driver"
    assert where(rs(by=["device"], on_driver=False, arrow_sinks=True)) == "one task"
    assert where(rs(by=["device"], shuffle=True)) == "shuffled"
    assert where(rs(arrow_sinks=True)) == "driver", "round robin: the driver deals in turn"
    # An array column: Spark's hash routes it, in one task that Spark tags.
    assert where(rs(by=["tags"], on_driver=True)) == "one task"
    assert where(rs(by=["device"], on_driver=True), True) == "driver"
    assert where(rs(by=["device"]), True) == "shuffled"  # no batch ran here yet
    monkeypatch.setattr(importlib.import_module("tidemark.spark._layout"), "ON_DRIVER_BYTES", 1)
    assert where(rs(by=["device"], arrow_sinks=True)) == "one task"
    assert where(rs(by=["device"], on_driver=True)) == "driver"
    # Over the cap, the default runs the batch in one Spark task, and its flush too.
    released: list[Any] = []
    big = rs(by=["device"], sink=lambda d, b: released.extend(d.collect()))
    big(df, 0)
    assert big.last_progress is not None and big.last_progress["layout"] == "one task"
    big.flush(spark, df.schema)
    assert big.last_progress is not None and big.last_progress["layout"] == "one task"
    assert sorted(r.ts for r in released) == [1, 2]


@pytest.mark.parametrize("where", ["local", "s3"])
def test_a_replayed_round_robin_batch_runs_where_its_first_run_did(
    spark: Any, state_in: Any, where: str
) -> None:
    """Without ``partition_by`` the driver deals rows out in turn and Spark in its own
    round-robin order, so a row may land in another buffer: a replayed micro-batch
    runs where its first run did, whatever ``on_driver`` says now, and releases the
    same rows. The buffers on a local disk, or on an S3-compatible server."""
    batches = arrivals(n_batches=3)
    dfs = [spark.createDataFrame(t) for t in batches]  # from Arrow: a known size
    got: dict[int, list[int]] = {}
    rs = ReorderStream(
        tm.Reorder("ts", "unixtimestamp_ms", late_tolerance="1s", late="side_output"),
        state_in(where),
        num_partitions=2,
        sink=lambda df, b: got.__setitem__(b, [r.seq for r in df.collect()]),
        late_sink=lambda df, b: late.__setitem__(b, [r.seq for r in df.collect()]),
    )
    late: dict[int, list[int]] = {}

    def run(b: int, on_driver: bool | None, shuffle: bool | None = None) -> tuple[str, list[int]]:
        rs.on_driver, rs.shuffle = on_driver, shuffle
        rs(dfs[b], b)
        assert rs.last_progress is not None
        return rs.last_progress["layout"], got[b]

    first = run(0, True)
    assert first[0] == "driver"
    assert run(0, False) == first, "replayed in the driver, the same rows"
    second = run(1, False, shuffle=True)
    assert second[0] == "shuffled"
    assert run(1, True) == second, "replayed in Spark's shuffle, the same rows"
    # The next batch follows the current setting again.
    assert run(2, True)[0] == "driver"
    # Every row is accounted for after a flush.
    rs.flush(spark, dfs[0].schema)
    flushed = rs.progress()
    assert flushed is not None and flushed["buffered_rows"] == 0
    seqs = sorted(x for out in (got, late) for v in out.values() for x in v)
    assert seqs == sorted(x for t in batches for x in t.column("seq").to_pylist())
    assert late[0] == [] and any(late.values()), "rows 1 s behind are late"
