"""Runs a StreamProcessor on local-cluster[2,1,1024] and checks it against local mode
(used by tests/test_spark_pipeline.py::test_local_cluster_mode)."""

from __future__ import annotations

import datetime as dt
import sys
from pathlib import Path

import pyarrow as pa

import tidemark as tm
from tidemark.spark import StreamProcessor
from tidemark_tools.session import local_session

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)


def main(tmp: str) -> None:
    spark = local_session("local-cluster[2,1,1024]", app_name="tidemark-local-cluster")
    pipe = tm.Pipeline(
        key="device",
        event_time="ts",
        watermark=tm.BoundedOutOfOrderness("5s", per="key"),
        window=tm.Tumbling("1m"),
        aggs={"n": tm.count()},
    )
    got: list[tuple] = []
    pids: set[int] = set()
    proc = StreamProcessor(
        pipe,
        str(Path(tmp) / "state"),
        num_partitions=4,
        sink=lambda df, b: got.extend((r.device, r.window_start, r.n) for r in df.collect()),
        on_driver=False,  # the state partitions run in the executors, not in this process
    )
    schema = None
    for b in range(4):
        t = pa.table(
            {
                "device": [f"d{k}" for k in range(6) for _ in range(5)],
                "ts": pa.array(
                    [T0 + dt.timedelta(seconds=b * 70 + j * 3) for _ in range(6) for j in range(5)],
                    pa.timestamp("us", tz="UTC"),
                ),
            }
        )
        df = spark.createDataFrame(t.to_pandas())
        schema = df.schema
        proc(df, b)
        pids.update(
            r.pid
            for r in df.repartition(4)
            .mapInArrow(
                lambda it: (
                    pa.record_batch({"pid": pa.array([__import__("os").getpid()], pa.int64())})
                    for _ in it
                ),
                "pid long",
            )
            .collect()
        )
    proc.flush(spark, schema)  # the sink receives the last windows
    counts = sorted(n for *_, n in got)
    assert sum(counts) == 6 * 5 * 4, counts
    assert len(pids) >= 2, f"expected several executor processes, got {pids}"
    spark.stop()
    print("LOCAL-CLUSTER OK", len(got), "windows from", len(pids), "worker processes")


if __name__ == "__main__":
    main(sys.argv[1])
