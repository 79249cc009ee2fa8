"""A Spark Connect client: runs tidemark.spark against the server that ``SPARK_REMOTE``
names and checks it against the local operator (used by
tests/test_spark_connect.py, which starts the server).

Checks the batch ``aggregate`` (persisted default, ``cache=False``, a lookup table,
which travels in the closure because Spark Connect has no broadcast variables, and
the size estimate read from the cost plan), ``reorder``, ``observe_partitions``, and a
``StreamProcessor`` and a ``ReorderStream`` under ``foreachBatch`` (run by the
server's Python process), each flushed from this client; the processor's counts read
from the state store, and a damaged snapshot reported as ``tm.StateCorruptedError``.
"""

from __future__ import annotations

import datetime as dt
import os
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

import tidemark as tm
from tidemark.spark import (
    ReorderStream,
    StreamProcessor,
    aggregate,
    observe_partitions,
    reorder,
)
from tidemark.spark._sizing import (
    estimated_bytes,
    fits_one_task,
)

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)


def batch_table(b: int) -> pa.Table:
    """Micro-batch ``b``: 6 devices, 5 events each, 70 s after the last batch; device
    d5 reports 2 minutes behind the others (late under a global watermark, on time
    under its own)."""
    devices, ts, values = [], [], []
    for k in range(6):
        for j in range(5):
            lag = 120 if k == 5 else 0
            devices.append(f"d{k}")
            ts.append(T0 + dt.timedelta(seconds=b * 70 + j * 3 - lag))
            values.append(float(k + j))
    return pa.table(
        {
            "device": devices,
            "ts": pa.array(ts, pa.timestamp("us", tz="UTC")),
            "value": values,
        }
    )


def pipeline(summed: str) -> tm.Pipeline:
    """Per-device 1-minute windows: a count and the sum of column ``summed``."""
    return tm.Pipeline(
        key="device",
        event_time="ts",
        watermark=tm.BoundedOutOfOrderness("5s", per="key"),
        window=tm.Tumbling("1m"),
        aggs={"n": tm.count(), "s": tm.sum(summed)},
    )


def windows_of(rows: list[Any]) -> list[tuple]:
    return sorted(
        (r["device"], r["window_start"].replace(tzinfo=None), r["n"], r["s"]) for r in rows
    )


def local(pipe: tm.Pipeline, tables: list[pa.Table]) -> list[tuple]:
    op = pipe.operator()
    out = []
    for t in tables:
        out += op.process(t).windows.to_pylist()
    out += op.flush().windows.to_pylist()
    return windows_of(out)


def run_stream(spark: Any, schema: Any, inp: Path, fn: Any, chk: Path) -> None:
    """A file stream over ``inp``, one file per micro-batch, into ``foreachBatch(fn)``
    until every file is read."""
    q = (
        spark.readStream.schema(schema)
        .option("maxFilesPerTrigger", 1)
        .parquet(str(inp))
        .writeStream.foreachBatch(fn)
        .option("checkpointLocation", str(chk))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination()
    assert q.exception() is None, q.exception()


def appender(path: Path) -> Any:
    """A sink appending each micro-batch's rows to Parquet files under ``path``."""
    return lambda df, batch_id: df.write.mode("append").parquet(str(path))


def run_processor(
    spark: Any, pipe: tm.Pipeline, schema: Any, work: Path, name: str, **kw: Any
) -> tuple[StreamProcessor, list[tuple], list[tuple]]:
    """A ``StreamProcessor`` (2 state partitions, ``kw``) over the files in ``work/in``,
    flushed from this client; its state, checkpoint and sink output under
    ``work/name``. The processor, the windows its sink received, the flushed ones."""
    out = work / name / "out"
    proc = StreamProcessor(
        pipe, str(work / name / "state"), num_partitions=2, sink=appender(out), **kw
    )
    run_stream(spark, schema, work / "in", proc, work / name / "chk")
    flushed = windows_of(proc.flush(spark, schema).collect())
    return proc, windows_of(spark.read.parquet(str(out)).collect()), flushed


def main(tmp: str) -> None:
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    spark = SparkSession.builder.getOrCreate()  # SPARK_REMOTE: a Spark Connect session
    assert type(spark).__module__.startswith("pyspark.sql.connect"), type(spark)
    work = Path(tmp)
    tables = [batch_table(b) for b in range(3)]
    pipe = pipeline("value")

    # Batch: the whole input is one arrival unit.
    whole = pa.concat_tables(tables)
    pq.write_table(whole, work / "whole.parquet")
    df = spark.read.parquet(str(work / "whole.parquet"))
    want = local(pipe, [whole])
    # Spark Connect has no JVM handle: the size estimate comes from the cost plan, so a
    # small input still runs in one task with no shuffle.
    size = estimated_bytes(df)
    assert size is not None and 0 < size < (work / "whole.parquet").stat().st_size * 10, size
    assert fits_one_task(spark, size)
    res = aggregate(df, pipe)
    assert windows_of(res.windows.collect()) == want, "aggregate default"
    assert res.late.count() == 0 and res.errors.count() == 0
    res.unpersist()
    got = windows_of(aggregate(df, pipe, cache=False, num_partitions=3).windows.collect())
    assert got == want, "aggregate cache=False"
    # Spark's fold (an exact float sum): one SQL statement over the client's DataFrame.
    got = windows_of(aggregate(df, pipe, preaggregate=True, num_partitions=2).windows.collect())
    assert got == want, "aggregate preaggregate=True"
    weights = pa.table({"device": [f"d{i}" for i in range(5)], "w": [1.0, 2.0, 3.0, 4.0, 5.0]})
    looked_up = pipeline("w").enrich(weights, on="device", how="inner")
    got = windows_of(aggregate(df, looked_up, num_partitions=2).windows.collect())
    assert got == local(looked_up, [whole]), "aggregate with a lookup"
    assert "d5" not in {g[0] for g in got}  # no lookup row: dropped by the inner join

    # Reordering and per-source-partition progress.
    r = tm.Reorder("ts", late_tolerance="3s", late="side_output")
    rr = reorder(df, r, partition_by=["device"], num_partitions=2)
    released = rr.rows.select("device", "ts").collect()
    assert len(released) + rr.late.count() == whole.num_rows, "nothing lost"
    assert rr.errors.count() == 0
    by_device: dict[str, list[Any]] = {}
    for row in released:
        by_device.setdefault(row[0], []).append(row[1])
    assert all(ts == sorted(ts) for ts in by_device.values()), "event-time order per key"
    rr.unpersist()
    seen = {
        (row.partition, row.watermark)
        for row in observe_partitions(
            df.withColumn("partition", F.pmod(F.hash("device"), F.lit(2))),
            event_time="ts",
            max_lateness="1s",
        ).collect()
    }
    assert {p for p, _ in seen} <= {0, 1} and seen, seen
    latest = pc.max(whole.column("ts").cast(pa.int64())).as_py()
    assert max(w for _, w in seen) == latest - 1_000_000, (seen, latest)

    # Streaming: one file per micro-batch; foreachBatch runs on the server. Spark
    # reads the files in modification-time order: one second apart.
    (work / "in").mkdir()
    for b, t in enumerate(tables):
        path = work / "in" / f"part-{b}.parquet"
        pq.write_table(t, path)
        os.utime(path, (1_700_000_000 + b, 1_700_000_000 + b))
    schema = spark.read.parquet(str(work / "in")).schema
    proc, streamed, flushed = run_processor(spark, pipe, schema, work, "default")
    assert flushed and set(flushed) <= set(streamed), "the flush reaches the sink"
    assert streamed == local(pipe, tables), "StreamProcessor under Spark Connect"
    # Small micro-batches run in the foreachBatch process by default. Shuffled to the
    # state partitions (adaptive coalescing is turned off for the batch's job through
    # the session's conf, then restored), the first micro-batch folded by Spark
    # (shuffle=True: none is small; its folds keep more than FOLD_SHARE of its rows, so
    # the next ones run raw, shuffled, into the same state). (In one task: the
    # ReorderStream below, on the same micro-batch call.)
    folding, folded, _ = run_processor(
        spark, pipe, schema, work, "folded", shuffle=True, preaggregate=True, retention=5
    )
    assert folded == streamed
    first = folding.progress(0)
    assert first is not None and first["read"] == "folds", first
    # The copy in the server's foreachBatch process counted the batches; this client
    # reads the counts from the state store.
    last = proc.progress(len(tables) - 1)
    assert last is not None and last["input_rows"] == tables[-1].num_rows, last
    assert last["layout"] == "driver", last
    # A damaged state file surfaces on this client as tm.StateCorruptedError naming it.
    # Rows after the flush (batch 3) run as batch 3 again, from batch 2's state.
    snap = work / "default" / "state" / "partitions" / "1" / "2.snap"
    snap.write_bytes(snap.read_bytes()[:-10])
    try:
        proc(spark.read.parquet(str(work / "in" / "part-0.parquet")), 3)
    except tm.StateCorruptedError as e:
        assert str(snap) in str(e) and "truncated" in str(e), e
    else:
        raise AssertionError("a truncated snapshot was not reported")

    # The reorder buffer across micro-batches, state under state_location.
    rs = ReorderStream(
        tm.Reorder("ts", late_tolerance="3s", late="side_output"),
        str(work / "reorder-state"),
        num_partitions=1,
        sink=appender(work / "released"),
        late_sink=appender(work / "late"),
    )
    run_stream(spark, schema, work / "in", rs, work / "chk-reorder")
    streamed_last = rs.progress(len(tables) - 1)
    # A reorder's small micro-batch runs in one task by default (in the driver only for
    # Arrow sinks: its output is every row it takes).
    assert streamed_last is not None and streamed_last["layout"] == "one task", streamed_last
    rs.flush(spark, schema)
    released = spark.read.parquet(str(work / "released")).count()
    late_rows = spark.read.parquet(str(work / "late")).count() if (work / "late").exists() else 0
    assert released + late_rows == whole.num_rows, "nothing lost"

    print("CONNECT OK", len(want), "batch windows,", len(streamed), "streamed windows")


if __name__ == "__main__":
    main(sys.argv[1])
