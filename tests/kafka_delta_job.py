"""A Kafka -> tidemark -> Delta Lake driver, as a user runs one (its connectors through
``spark.jars.packages``, ``tidemark.spark.kafka_delta_conf()``, where ``job.json`` says
``packages``), that can SIGKILL
itself at a chosen point of a chosen micro-batch: ``before`` its sinks write,
``during`` them (the windows table committed, the late and error tables not), or
``after`` every table committed (before Spark records the micro-batch as done). The
kill takes its whole process group: the Python driver and its JVM.

``python tests/kafka_delta_job.py WORKDIR`` reads ``WORKDIR/job.json`` (``bootstrap``,
``topic``, and ``kill``: ``[batch, point]``), resumes from ``WORKDIR``'s
checkpoint and state, and reads the topic (``availableNow``, throttled, so that its
micro-batches are the same in every run) until it dies. ``tests/test_delta.py`` runs it,
then :func:`run` in its own session: to the end from the crashed run's checkpoint, and
uninterrupted as the reference.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import tidemark as tm
from test_kafka import kafka_stream
from tidemark.spark import StreamProcessor, delta_sink

TABLES = ("windows", "late", "errors")


def pipeline() -> tm.Pipeline:
    return tm.Pipeline(
        key="device",
        event_time="ts",
        watermark=tm.BoundedOutOfOrderness("5s", per="partition", idle_timeout="30s"),
        window=tm.Tumbling("10s"),
        aggs={"n": tm.count(), "total": tm.sum("value")},
    )


def _die(work: Path, batch_id: int, point: str) -> None:
    # Only a job that leads its own process group kills it (never a test runner's).
    if os.getpgid(0) != os.getpid():
        raise RuntimeError("the job kills its process group: start it in a new session")
    with open(work / "kills.txt", "a") as f:
        f.write(f"{batch_id} {point}\n")
        f.flush()
        os.fsync(f.fileno())
    os.killpg(os.getpid(), signal.SIGKILL)


def _sink(work: Path, table: str, kill: tuple[int, str] | None) -> Callable[[Any, int], None]:
    write = delta_sink(work / "tables" / table, app_id=f"crash-{table}")
    batch, point = kill if kill is not None else (-1, "")
    # The sinks run in order: windows, late, errors.
    before = (point, table) in (("before", "windows"), ("during", "late"))
    after = (point, table) == ("after", "errors")

    def sink(df: Any, batch_id: int) -> None:
        if before and batch_id == batch:
            _die(work, batch_id, point)
        write(df, batch_id)
        if after and batch_id == batch:
            _die(work, batch_id, point)

    return sink


def run(
    spark: Any,
    work: Path,
    bootstrap: str,
    topic: str,
    kill: tuple[int, str] | None = None,
    collect: dict[str, list[tuple[Any, ...]]] | None = None,
) -> None:
    """Reads ``topic`` to its end into the Delta tables under ``work/tables`` (or,
    with ``collect``, into its lists of rows, one per table)."""

    def sink(table: str) -> Callable[[Any, int], None]:
        if collect is None:
            return _sink(work, table, kill)
        return lambda df, _b: collect[table].extend(tuple(r) for r in df.collect())

    proc = StreamProcessor(
        pipeline(),
        str(work / "state"),
        2,
        sink=sink("windows"),
        late_sink=sink("late"),
        error_sink=sink("errors"),
    )
    stream = kafka_stream(spark, bootstrap, topic, maxOffsetsPerTrigger="200")
    q = (
        stream.writeStream.foreachBatch(proc)
        .option("checkpointLocation", str(work / "chk"))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination()
    proc.flush(spark, stream.schema)


def main(work: Path) -> None:
    from tidemark.spark import kafka_delta_conf
    from tidemark_tools import jars
    from tidemark_tools.session import local_session

    job = json.loads((work / "job.json").read_text())
    if job.get("packages"):
        # The connectors as a user gets them: Maven coordinates matching the installed
        # PySpark (spark.jars.packages), resolved by Spark itself from Maven Central
        # into Ivy's cache (the repository's git-ignored .cache/, kept between runs).
        ivy = Path(__file__).resolve().parent.parent / ".cache" / "ivy"
        conf = {**kafka_delta_conf(), "spark.jars.ivy": str(ivy)}
    else:
        conf = jars.kafka_delta_conf()  # the same artifacts, resolved by Maven as files
    spark = local_session("local[2]", "kafka-delta-job", 2, conf)
    kill = (int(job["kill"][0]), str(job["kill"][1]))
    run(spark, work, job["bootstrap"], job["topic"], kill)
    spark.stop()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
