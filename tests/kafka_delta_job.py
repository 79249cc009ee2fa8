"""A Kafka -> tidemark -> Delta Lake driver, as a user runs one (its connectors through
``spark.jars.packages``, ``tidemark.spark.kafka_delta_conf()``, where ``job.json`` says
``packages``), that can SIGKILL itself in a chosen micro-batch while its sinks write
(the windows table committed, the late and error tables not). The kill takes its whole
process group: the Python driver and its JVM.

``python tests/kafka_delta_job.py WORKDIR`` reads ``WORKDIR/job.json`` (``bootstrap``,
``topic``, and ``kill``: a micro-batch id or none), resumes from ``WORKDIR``'s
checkpoint and state, and reads the topic (``availableNow``, throttled, so that its
micro-batches are the same in every run) until it dies, or to its end.
``tests/test_cluster.py`` runs it on a standalone cluster (``master``: its URL), then
:func:`run` in its own session, uninterrupted, as the reference.

On a cluster the state runs on the executors, and two more points let the test fault
the cluster at a known moment. ``stall``: ``[partition, offset]``: the task that reads
that record (a Spark task on an executor: a filter that keeps every record) writes its
process id to
``WORKDIR/stalled`` and waits until the test has killed it with its worker; its retry,
elsewhere, finds ``WORKDIR/worker-killed``, adds its process id to ``WORKDIR/retried``
and goes on. ``pause``: a micro-batch after whose sinks the driver writes
``WORKDIR/paused`` and waits for ``WORKDIR/go`` (the test stops the broker meanwhile).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
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


def _die(work: Path, batch_id: int) -> None:
    # Only a job that leads its own process group kills it (never a test runner's).
    if os.getpgid(0) != os.getpid():
        raise RuntimeError("the job kills its process group: start it in a new session")
    with open(work / "kills.txt", "a") as f:
        f.write(f"{batch_id}\n")
        f.flush()
        os.fsync(f.fileno())
    os.killpg(os.getpid(), signal.SIGKILL)


def _wait_for(path: Path, what: str, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{path.name} did not appear in {timeout:.0f} s: {what}")
        time.sleep(0.1)


def _sink(
    work: Path, table: str, kill: int | None, pause: int | None
) -> Callable[[Any, int], None]:
    write = delta_sink(work / "tables" / table, app_id=f"crash-{table}")

    def sink(df: Any, batch_id: int) -> None:
        # The sinks run in order: windows, late, errors.
        if table == "late" and batch_id == kill:
            _die(work, batch_id)
        write(df, batch_id)
        if table == "errors" and batch_id == pause:
            _mark(work / "paused", str(batch_id))
            _wait_for(work / "go", "the test lets the driver go on")

    return sink


def _mark(path: Path, text: str) -> None:
    """Writes ``path`` whole or not at all (a reader never sees half of it)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def stall_at(work: Path, partition: int, offset: int) -> Any:
    """A filter on the Kafka source's records that keeps every one, and stalls the
    task that reads record ``offset`` of ``partition`` (see the module's doc) until
    the test kills it. (A filter keeps the source's ``partition`` column as it is,
    as the per-partition watermark needs.)"""
    from pyspark.sql import functions as F
    from pyspark.sql.types import BooleanType

    work_dir = str(work)

    def keep(p: int, o: int) -> bool:
        here = Path(work_dir)
        if p == partition and o == offset and not (here / "worker-killed").exists():
            _mark(here / "stalled", str(os.getpid()))
            _wait_for(here / "worker-killed", "the test kills this task's worker", 120)
            time.sleep(120)  # killed meanwhile: its worker was this process's too
            raise RuntimeError("the stalled task's worker was not killed")
        if p == partition and o == offset:  # the stalled task again: its retry
            with open(here / "retried", "a") as f:
                f.write(f"{os.getpid()}\n")
        return True

    return F.udf(keep, BooleanType())(F.col("partition"), F.col("offset"))


def run(
    spark: Any,
    work: Path,
    bootstrap: str,
    topic: str,
    kill: int | None = None,
    collect: dict[str, list[tuple[Any, ...]]] | None = None,
    *,
    on_executors: bool = False,
    stall: tuple[int, int] | None = None,
    pause: int | None = None,
    per_trigger: int = 200,
    fetch_bytes: int | None = None,
) -> None:
    """Reads ``topic`` to its end into the Delta tables under ``work/tables`` (or,
    with ``collect``, into its lists of rows, one per table); ``on_executors``: the
    state in Spark tasks whatever a micro-batch's size; ``fetch_bytes``: the executors'
    Kafka consumers fetch about that much of a partition at a time (a record batch at
    least), so that they hold little read ahead of the micro-batch."""

    def sink(table: str) -> Callable[[Any, int], None]:
        if collect is None:
            return _sink(work, table, kill, pause)
        return lambda df, _b: collect[table].extend(tuple(r) for r in df.collect())

    proc = StreamProcessor(
        pipeline(),
        str(work / "state"),
        2,
        sink=sink("windows"),
        late_sink=sink("late"),
        error_sink=sink("errors"),
        on_driver=False if on_executors else None,
    )
    keep = None if stall is None else stall_at(work, *stall)
    options = {"maxOffsetsPerTrigger": str(per_trigger)}
    if fetch_bytes is not None:
        options["kafka.max.partition.fetch.bytes"] = str(fetch_bytes)
    stream = kafka_stream(spark, bootstrap, topic, keep, **options)
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
    # Spark's scratch space (the jars it copies for its tasks, ~200 MB) in the work
    # directory: a SIGKILLed driver leaves it behind, and the test's directory goes with
    # the test's others.
    conf["spark.local.dir"] = str(work / "spark-local")
    master = job.get("master")
    if master:
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benches"))
        import standalone

        spark = standalone.session(master, 2, "kafka-delta-job", conf)
    else:
        spark = local_session("local[2]", "kafka-delta-job", 2, conf)
    kill = job.get("kill")
    stall = (int(job["stall"][0]), int(job["stall"][1])) if job.get("stall") else None
    run(
        spark,
        work,
        job["bootstrap"],
        job["topic"],
        kill,
        on_executors=bool(master),
        stall=stall,
        pause=job.get("pause"),
        per_trigger=int(job.get("per_trigger", 200)),
        fetch_bytes=job.get("fetch_bytes"),
    )
    spark.stop()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
