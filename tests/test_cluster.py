"""Kafka -> tidemark -> Delta Lake on a standalone cluster (a master and two one-core
workers, ``benches/standalone.py``), faulted as a deployment is: a worker killed with
its executor mid-micro-batch, the driver killed between two tables' commits and
restarted, the broker stopped for 30 s. The Delta tables end equal to an uninterrupted
run's.

The job is ``tests/kafka_delta_job.py`` (the Kafka guide's), its state in Spark tasks on
the executors. What each fault did to the query is asserted from the drivers' logs and
the checkpoint, and written down in ``docs/guide/reliability.md``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benches"))

pytestmark = pytest.mark.spark

OUTAGE_S = 30.0  # how long the broker stays down


def _start(work: Path, job: dict[str, Any], log: Path) -> subprocess.Popen[bytes]:
    (work / "job.json").write_text(json.dumps(job))
    with open(log, "ab") as out:
        return subprocess.Popen(
            [sys.executable, str(Path(__file__).parent / "kafka_delta_job.py"), str(work)],
            env=dict(os.environ, PYSPARK_PYTHON=sys.executable),
            stdout=out,
            stderr=out,
            start_new_session=True,  # its own process group: its kill takes its JVM
        )


def _wait(proc: subprocess.Popen[bytes], log: Path, timeout: float = 300.0) -> int:
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise AssertionError(log.read_text(errors="replace")[-4000:]) from None


def _give_up_after(deadline: float, proc: subprocess.Popen[bytes], tail: Any) -> None:
    """Past ``deadline``: kills the driver's process group and fails with its log."""
    if time.monotonic() > deadline:
        os.killpg(proc.pid, signal.SIGKILL)
        raise AssertionError("the driver did not get there in time: " + tail())


def _commits(work: Path) -> list[int]:
    return sorted(int(p.name) for p in (work / "chk" / "commits").glob("[0-9]*"))


@pytest.mark.slow(115)
def test_a_cluster_whose_worker_driver_and_broker_fail_writes_the_uninterrupted_tables(
    spark: Any, tmp_path: Path
) -> None:
    """One run of five micro-batches over a topic of 8 partitions, two of them lagging
    60 s behind, with late and unreadable records. Micro-batch 0: a worker is SIGKILLed
    (its executor and Python workers with it) while one of its tasks runs; the driver
    goes on with the other executor. Micro-batch 1: the driver (Python and JVM) is
    SIGKILLed between the windows table's Delta commit and the late table's. With the
    worker started again, a new driver replays micro-batch 1; after micro-batch 3's
    sinks the broker stops for 30 s. The windows, late and error tables
    equal those of an uninterrupted run: no row lost, none twice. The first driver gets
    its connectors as a user's job does: ``spark.jars.packages`` (``kafka_delta_conf()``),
    resolved by Spark."""
    import standalone
    from kafka_delta_job import TABLES, run
    from test_delta import rows
    from test_kafka import produce_rows, topic_name
    from test_kafka_progress import readings
    from tidemark_tools.kafka import Broker

    with (
        Broker.start(tmp_path / "kafka") as broker,
        standalone.cluster(workers=2, cores=1) as cluster,
    ):
        topic = topic_name()
        broker.create_topic(topic, 8)
        for p in range(8):
            lagging = p >= 6  # event time 60 s behind the others
            part = readings(p, 2, 0, 60 if lagging else 120)
            # Record batches of 20 records, fetched one at a time (fetch_bytes): an
            # executor holds too little read ahead to run a micro-batch without the
            # broker.
            for i in range(0, part.num_rows, 20):
                produce_rows(broker, topic, part.slice(i, 20), p)
        produce_rows(broker, topic, readings(3, 1, 0, 10), 3)  # late: 110 s behind
        broker.produce(topic, [(None, b"not json", None)] * 3, 1)
        base = {"bootstrap": broker.bootstrap, "topic": topic, "master": cluster.url}
        base |= {"per_trigger": 350, "fetch_bytes": 1}
        work, log = tmp_path / "cluster", tmp_path / "driver.log"
        work.mkdir()

        def tail() -> str:
            return log.read_text(errors="replace")[-4000:]

        # The first driver: a worker lost in micro-batch 0, the driver killed in 1.
        job = {**base, "stall": [2, 10], "kill": 1, "packages": True}
        first = _start(work, job, log)
        killed: list[int] = []
        lost = -1  # the worker killed
        deadline = time.monotonic() + 300
        while first.poll() is None:
            _give_up_after(deadline, first, tail)
            stalled = work / "stalled"
            if not killed and stalled.exists():
                w = cluster.worker_of(int(stalled.read_text()))
                assert w is not None, "the stalled task runs under no worker"
                (work / "worker-killed").write_text(str(w))
                killed, lost = cluster.kill_worker(w), w
            time.sleep(0.1)
        assert first.returncode == -signal.SIGKILL, tail()
        assert killed, "no task stalled: " + tail()
        # The worker's loss: Spark lost its executor and ran the task again on another.
        assert "Lost executor" in log.read_text(errors="replace"), tail()
        retried = [int(p) for p in (work / "retried").read_text().split()]
        assert retried and not set(retried) & set(killed)
        assert _commits(work) == [0]  # micro-batch 1 was not committed

        assert (work / "kills.txt").read_text() == "1\n"
        cluster.restart_worker(lost)  # for the next driver's second executor

        # The second driver: replays micro-batch 1; the broker stops after 3's sinks.
        second = _start(work, {**base, "pause": 3}, log)
        deadline = time.monotonic() + 300
        while not (work / "paused").exists():
            assert second.poll() is None, tail()
            _give_up_after(deadline, second, tail)
            time.sleep(0.1)
        broker.stop()
        stopped = time.monotonic()
        (work / "go").write_text("")
        while time.monotonic() - stopped < OUTAGE_S:
            assert second.poll() is None, tail()
            time.sleep(0.2)
        # The query waits for the broker: micro-batch 4 reads it, and is not committed
        # until it is back (no error raised, no task failed for good).
        assert _commits(work) == [0, 1, 2, 3], "a micro-batch was committed without the broker"
        broker.start_again()
        back = time.time()
        assert _wait(second, log) == 0, tail()
        assert _commits(work) == [0, 1, 2, 3, 4]
        assert (work / "chk" / "commits" / "4").stat().st_mtime >= back - 1

        # Uninterrupted, in this test's session, the same state layout.
        want: dict[str, list[tuple[Any, ...]]] = {t: [] for t in TABLES}
        reference = tmp_path / "reference"
        run(
            spark, reference, broker.bootstrap, topic, collect=want, on_executors=True,
            per_trigger=350,
        )  # fmt: skip
    for table in TABLES:
        got = rows(spark.read.format("delta").load(str(work / "tables" / table)))
        assert got == sorted(want[table]), table
        assert got, f"the stream has {table}"
    windows = rows(spark.read.format("delta").load(str(work / "tables" / "windows")))
    assert len({(r[0], r[1]) for r in windows}) == len(windows)  # (device, window) once
