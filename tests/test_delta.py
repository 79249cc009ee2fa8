"""Delta Lake tables as sinks (``tidemark.spark.delta_sink``), real Delta (``delta-spark``
and its jars in the test session)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from tidemark.errors import ConfigError
from tidemark.spark import StreamProcessor, delta_sink
from tidemark_tools.crashtest import pipeline

pytestmark = pytest.mark.spark


def batches() -> list[pa.Table]:
    """Four micro-batches of four tenants; one row of the last is 30 s behind its tenant."""
    return [
        pa.table(
            {
                "tenant": [f"t{(b * 3 + i) % 4}" for i in range(10)],
                "ts": [
                    100_000 + b * 6_000 + (i * 1_373) % 9_000 - (30_000 if (b, i) == (3, 7) else 0)
                    for i in range(10)
                ],
                "value": [b * 10 + i for i in range(10)],
            }
        )
        for b in range(4)
    ]


def rows(df: Any) -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for r in df.collect())


def test_a_replayed_micro_batch_is_written_to_delta_once(spark: Any, tmp_path: Path) -> None:
    data = batches()
    schema = spark.createDataFrame(data[0].to_pandas()).schema
    frames = [spark.createDataFrame(b.to_pandas(), schema) for b in data]

    # Uninterrupted, into a list.
    want: dict[str, list[Any]] = {"windows": [], "late": []}
    ref = StreamProcessor(
        pipeline(),
        str(tmp_path / "ref-state"),
        2,
        sink=lambda df, _b: want["windows"].extend(df.collect()),
        late_sink=lambda df, _b: want["late"].extend(df.collect()),
    )
    for b, df in enumerate(frames):
        ref(df, b)

    # Into Delta tables, every micro-batch run twice (a query that died after its sinks
    # wrote and before Spark committed the batch runs it again).
    tables = {kind: str(tmp_path / kind) for kind in ("windows", "late")}
    proc = StreamProcessor(
        pipeline(),
        str(tmp_path / "state"),
        2,
        sink=delta_sink(tables["windows"]),
        late_sink=delta_sink(tables["late"]),
    )
    emitted = []
    for b, df in enumerate(frames):
        proc(df, b)
        proc(df, b)
        emitted.append(proc.last_progress["window_rows"])
    for kind, where in tables.items():
        got = spark.read.format("delta").load(where)
        assert rows(got) == sorted(tuple(r) for r in want[kind]), kind
        assert want[kind], f"the stream has {kind}"
    # One Delta commit per micro-batch with windows (and the first, which created the
    # table): the replays committed nothing.
    history = spark.sql(f"DESCRIBE HISTORY delta.`{tables['windows']}`").collect()
    with_rows = {b for b, n in enumerate(emitted) if n}
    assert len(history) == len(with_rows | {0})
    # The late table: its first write, and the micro-batch with the late row.
    late_history = spark.sql(f"DESCRIBE HISTORY delta.`{tables['late']}`").collect()
    assert len(late_history) == 2
    # A restarted query's sink (a new one) finds the table: an empty micro-batch the
    # driver computed commits nothing; rows do.
    none = spark.read.format("delta").load(tables["late"]).limit(0).toArrow()
    again = delta_sink(tables["late"])
    again(spark.createDataFrame(none), 4)  # rows on the driver, as StreamProcessor's
    assert len(spark.sql(f"DESCRIBE HISTORY delta.`{tables['late']}`").collect()) == 2
    again(spark.read.format("delta").load(tables["late"]), 5)
    assert len(spark.sql(f"DESCRIBE HISTORY delta.`{tables['late']}`").collect()) == 3


def test_delta_sink_refuses_what_it_cannot_write() -> None:
    with pytest.raises(ConfigError, match="txnVersion"):
        delta_sink("/tmp/x", options={"txnVersion": "3"})
    with pytest.raises(ConfigError, match="arrow_sinks"):
        delta_sink("/tmp/x")(pa.table({"a": [1]}), 0)


@pytest.mark.slow(60)
def test_sigkilled_kafka_to_delta_driver_restarts_to_the_uninterrupted_tables(
    spark: Any, kafka: Any, tmp_path: Path
) -> None:
    """Kafka -> tidemark -> Delta Lake, the driver SIGKILLed (Python and JVM) at two
    points of a micro-batch, replayed after each: before its sinks write, and after
    every table committed but before Spark recorded the micro-batch (the third point,
    between the windows table's commit and the late table's, is the cluster test's:
    tests/test_cluster.py). Restarted each time from its checkpoint (the last time in
    this test's own session), it ends with every table (windows, late rows, error
    rows) equal to what an uninterrupted run emitted: no row lost, none twice."""
    import json
    import os
    import signal
    import subprocess
    import sys

    from kafka_delta_job import TABLES, run
    from test_kafka import produce_rows, topic_name
    from test_kafka_progress import readings

    topic = topic_name()
    kafka.create_topic(topic, 4)
    for p in range(4):
        produce_rows(kafka, topic, readings(p, 2, 0, 120), p)
    # Late rows (partition 3, 90 s behind, at its end) and errors.
    produce_rows(kafka, topic, readings(3, 1, 20, 30), 3)
    kafka.produce(topic, [(None, b"not json", None)] * 3, 1)

    work = tmp_path / "crash"
    work.mkdir()
    kills = [(1, "before"), (1, "after")]
    script = Path(__file__).parent / "kafka_delta_job.py"
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    for i, kill in enumerate(kills):
        # The first run gets Spark's connectors through spark.jars.packages, as a user's
        # job does (Spark resolves them from Maven Central); the restarts take the same
        # artifacts as files (spark.jars), which starts a session seconds sooner.
        job = {"bootstrap": kafka.bootstrap, "topic": topic, "kill": kill, "packages": i == 0}
        (work / "job.json").write_text(json.dumps(job))
        with open(tmp_path / "job.log", "a") as log:
            code = subprocess.run(
                [sys.executable, str(script), str(work)],
                env=env,
                stdout=log,
                stderr=log,
                start_new_session=True,  # its own process group: the kill takes the JVM
                timeout=600,
            ).returncode
        assert code == -signal.SIGKILL, (tmp_path / "job.log").read_text()[-3000:]
    assert (work / "kills.txt").read_text().split("\n")[:-1] == [f"{b} {p}" for b, p in kills]
    run(spark, work, kafka.bootstrap, topic)  # the last restart, to the end

    # Uninterrupted, its outputs collected.
    want: dict[str, list[tuple[Any, ...]]] = {t: [] for t in TABLES}
    run(spark, tmp_path / "reference", kafka.bootstrap, topic, collect=want)
    for table in TABLES:
        got = rows(spark.read.format("delta").load(str(work / "tables" / table)))
        assert got == sorted(want[table]), table
        assert got, f"the stream has {table}"
    windows = rows(spark.read.format("delta").load(str(work / "tables" / "windows")))
    assert len({(r[0], r[1]) for r in windows}) == len(windows)  # (device, window) once
