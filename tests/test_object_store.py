"""A whole streaming query on an S3-compatible server (s3proxy on 127.0.0.1, started by
the test run): Spark's checkpoint and the Delta tables through Hadoop's S3A connector,
tidemark's state through pyarrow's S3 file system, as a cluster on S3 runs it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from test_delta import batches, rows
from tidemark.spark import StreamProcessor, delta_sink
from tidemark_tools.crashtest import pipeline

pytestmark = pytest.mark.spark


@pytest.mark.slow(18)
def test_a_query_restarted_on_an_object_store_writes_the_uninterrupted_tables(
    spark: Any, tmp_path: Path, s3_location: str, s3a_root: str
) -> None:
    data = batches()
    schema = spark.createDataFrame(data[0].to_pandas()).schema

    # Uninterrupted, on local state, into lists.
    want: dict[str, list[Any]] = {"windows": [], "late": []}
    ref = StreamProcessor(
        pipeline(),
        str(tmp_path / "ref-state"),
        2,
        sink=lambda df, _b: want["windows"].extend(df.collect()),
        late_sink=lambda df, _b: want["late"].extend(df.collect()),
    )
    for b, t in enumerate(data):
        ref(spark.createDataFrame(t.to_pandas(), schema), b)
    ref.flush(spark, schema)

    # On the object store: one file per micro-batch, the query stopped after two and
    # started again (a new processor, as a restarted driver builds), a micro-batch
    # replayed, then flushed.
    inp = tmp_path / "in"
    inp.mkdir()
    tables = {kind: f"{s3a_root}/{kind}" for kind in ("windows", "late")}

    def processor() -> StreamProcessor:
        return StreamProcessor(
            pipeline(),
            s3_location,
            2,
            sink=delta_sink(tables["windows"]),
            late_sink=delta_sink(tables["late"]),
        )

    def run(upto: int) -> StreamProcessor:
        for b in range(upto):
            f = inp / f"part-{b:05d}.parquet"
            if not f.exists():
                pq.write_table(data[b], f)
                os.utime(f, (1_700_000_000 + b, 1_700_000_000 + b))
        proc = processor()
        q = (
            spark.readStream.schema(schema)
            .option("maxFilesPerTrigger", 1)
            .parquet(str(inp))
            .writeStream.foreachBatch(proc)
            .option("checkpointLocation", f"{s3a_root}/checkpoint")
            .trigger(availableNow=True)
            .start()
        )
        q.awaitTermination()
        return proc

    run(2)
    proc = run(len(data))
    last = len(data) - 1
    proc(spark.read.parquet(str(inp / f"part-{last:05d}.parquet")), last)  # a replay
    proc.flush(spark, schema)

    for kind, where in tables.items():
        got = spark.read.format("delta").load(where)
        assert rows(got) == sorted(tuple(r) for r in want[kind]), kind
        assert want[kind], f"the stream has {kind}"
    # Spark's checkpoint lives on the server: its offsets say four micro-batches ran.
    offsets = spark.read.text(f"{s3a_root}/checkpoint/offsets").inputFiles()
    assert sorted(int(f.rsplit("/", 1)[1]) for f in offsets) == list(range(len(data)))
    assert proc.progress() is not None and proc.progress()["batch_id"] == len(data)
