"""Shared fixtures: one SparkSession for the whole test session (local[2], UI off)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tidemark_tools.class_archive import JVM_OPTIONS, jvm_options, with_options

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


# Every JVM the tests start (the test sessions', the clusters', the crash tests', the
# demo's) runs small jobs, many of them once: the quick JIT alone, one GC thread, and
# Spark's classes mapped from the archive `make test` made (tidemark_tools.class_archive).
_ARCHIVE = Path(__file__).resolve().parents[1] / "target" / "jvm" / "spark.jsa"
os.environ["JAVA_TOOL_OPTIONS"] = with_options(  # once: xdist's workers inherit them
    os.environ.get("JAVA_TOOL_OPTIONS", ""), JVM_OPTIONS, jvm_options(_ARCHIVE)
)


@pytest.fixture(scope="session")
def spark_workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The Spark JVM's working directory: where Spark resolves a relative path."""
    return tmp_path_factory.mktemp("spark-cwd")


@pytest.fixture(scope="session")
def spark(spark_workdir: Path) -> Iterator[Any]:
    """The one local SparkSession of the test run (its JVM started in
    ``spark_workdir``, so no relative path of a test lands in the checkout)."""
    from tidemark_tools.jars import kafka_delta_conf
    from tidemark_tools.session import local_session

    before = os.getcwd()
    os.chdir(spark_workdir)
    try:
        session = local_session(
            "local[2]",
            app_name="tidemark-tests",
            shuffle_partitions=2,
            extra_conf=kafka_delta_conf(),
        )
    finally:
        os.chdir(before)
    yield session
    session.stop()


def _run_job(script: str, arg: Path, env: dict[str, str] | None = None) -> str:
    """Runs ``tests/<script>`` with this interpreter in its own process (argument
    ``arg``); fails the test with the tail of its output unless it exits 0. Its stdout."""
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).parent / script), str(arg)],
        env=dict(os.environ, PYSPARK_PYTHON=sys.executable, **(env or {})),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return proc.stdout


@pytest.fixture
def run_job() -> Callable[..., str]:
    """Runs a Spark job script from ``tests/`` in a separate process (see ``_run_job``)."""
    return _run_job


class SwitchableSink:
    """A micro-batch sink that raises ``RuntimeError("sink down")`` while ``down``."""

    def __init__(self) -> None:
        self.down = False

    def __call__(self, df: Any, batch_id: int) -> None:
        if self.down:
            raise RuntimeError("sink down")


@pytest.fixture
def switchable_sink() -> SwitchableSink:
    """A sink to fail a micro-batch with (set ``.down``), as a dying sink would."""
    return SwitchableSink()


@pytest.fixture(scope="session")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One Apache Kafka broker for the whole test run (``tidemark_tools.kafka``), on
    127.0.0.1: the first pytest process to ask starts it, the others connect, and it
    stops when the run's main process ends. Tests create their own topics."""
    import fcntl
    import json
    import time

    from tidemark_tools.kafka import Broker

    # pytest-xdist's workers share their base temp directory's parent and are children
    # of the run's main process; without xdist this process is the run.
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    shared = tmp_path_factory.getbasetemp().parent if worker else tmp_path_factory.getbasetemp()
    owner = os.getppid() if worker else os.getpid()
    info = shared / "kafka.json"
    with open(shared / "kafka.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not info.exists():
            logs = [shared / "kafka-serve.log", shared / "kafka" / "broker.log"]
            with open(logs[0], "w") as log:  # the server keeps its own copy
                server = subprocess.Popen(
                    [
                        *(sys.executable, "-m", "tidemark_tools.kafka", "serve"),
                        *("--dir", str(shared / "kafka"), "--info", str(info)),
                        *("--owner", str(owner)),
                    ],
                    stdout=log,
                    stderr=log,
                    start_new_session=True,
                )
            deadline = time.monotonic() + 120
            while not info.exists():
                if server.poll() is not None or time.monotonic() > deadline:
                    tails = [f.read_text(errors="replace")[-3000:] for f in logs if f.exists()]
                    raise RuntimeError("the Kafka broker did not start: " + "\n".join(tails))
                time.sleep(0.2)
        bootstrap = json.loads(info.read_text())["bootstrap"]
    yield Broker.connect(bootstrap)
