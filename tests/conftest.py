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
from tidemark_tools.s3 import CLIENT_ENV

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
# Before any JVM starts, so that Spark's Python workers inherit it: the S3 client's
# checksums as s3proxy takes them (see tidemark_tools.s3).
os.environ.update({k: os.environ.get(k, v) for k, v in CLIENT_ENV.items()})


# Every JVM the tests start (the test sessions', the clusters', the crash tests', the
# demo's) runs small jobs, many of them once: the quick JIT alone, one GC thread, and
# Spark's classes mapped from the archive `make test` made (tidemark_tools.class_archive).
_ARCHIVE = Path(__file__).resolve().parents[1] / "target" / "jvm" / "spark.jsa"
os.environ["JAVA_TOOL_OPTIONS"] = with_options(  # once: xdist's workers inherit them
    os.environ.get("JAVA_TOOL_OPTIONS", ""), JVM_OPTIONS, jvm_options(_ARCHIVE)
)


def _weight(item: pytest.Item) -> float:
    """A ``slow`` test's seconds as its marker gives them (``@pytest.mark.slow(80)``),
    else 10; 0 for a quick test."""
    mark = item.get_closest_marker("slow")
    if mark is None:
        return 0.0
    return float(mark.args[0]) if mark.args else 10.0


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under pytest-xdist (``make test``: two workers, ``--dist worksteal``), each worker
    is first sent an equal, contiguous share of the tests: the ``slow`` ones are shared
    out by their weight (the longest first) at the head of each share, so that no
    worker is left running a minute-long test after the other has finished; quick tests
    fill the shares, and the worker done first steals from the other's tail."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    slow = sorted((i for i in items if _weight(i) > 0), key=_weight, reverse=True)
    quick = [i for i in items if _weight(i) == 0]
    groups: list[list[pytest.Item]] = [[] for _ in range(max(1, workers))]
    for item in slow:
        min(groups, key=lambda g: sum(map(_weight, g))).append(item)
    ordered: list[pytest.Item] = []
    left, rest = len(items), list(quick)
    for n, group in enumerate(groups):
        share = left // (len(groups) - n)  # what the scheduler sends the n-th worker
        take = max(0, share - len(group))
        ordered += group + rest[:take]
        rest = rest[take:]
        left -= share
    items[:] = ordered + rest


@pytest.fixture(scope="session")
def spark_workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The Spark JVM's working directory: where Spark resolves a relative path."""
    return tmp_path_factory.mktemp("spark-cwd")


@pytest.fixture(scope="session")
def spark(spark_workdir: Path) -> Iterator[Any]:
    """The one local SparkSession of the test run (its JVM started in
    ``spark_workdir``, so no relative path of a test lands in the checkout)."""
    from tidemark_tools.jars import kafka_delta_conf, spark_jars
    from tidemark_tools.session import local_session

    conf = kafka_delta_conf()
    # Hadoop's S3A connector too: tables and checkpoints on the S3-compatible server.
    conf["spark.jars"] = ",".join([conf["spark.jars"], *spark_jars("s3a")])
    before = os.getcwd()
    os.chdir(spark_workdir)
    try:
        session = local_session(
            "local[2]",
            app_name="tidemark-tests",
            shuffle_partitions=2,
            extra_conf=conf,
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


def _shared_server(factory: pytest.TempPathFactory, name: str, what: str) -> dict[str, Any]:
    """One server for the whole test run (``python -m tidemark_tools.<name> serve``), on
    127.0.0.1: the first pytest process to ask starts it, the others read its address,
    and it stops when the run's main process ends. Its ``info`` (address) as JSON."""
    import fcntl
    import json
    import time

    # pytest-xdist's workers share their base temp directory's parent and are children
    # of the run's main process; without xdist this process is the run.
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    shared = factory.getbasetemp().parent if worker else factory.getbasetemp()
    owner = os.getppid() if worker else os.getpid()
    info = shared / f"{name}.json"
    with open(shared / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not info.exists():
            logs = [shared / f"{name}-serve.log"]
            with open(logs[0], "w") as log:  # the server keeps its own copy
                server = subprocess.Popen(
                    [
                        *(sys.executable, "-m", f"tidemark_tools.{name}", "serve"),
                        *("--dir", str(shared / name), "--info", str(info)),
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
                    raise RuntimeError(f"{what} did not start: " + "\n".join(tails))
                time.sleep(0.2)
        doc: dict[str, Any] = json.loads(info.read_text())
    return doc


@pytest.fixture(scope="session")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One Apache Kafka broker for the whole test run (``tidemark_tools.kafka``), shared
    by the run's processes (see ``_shared_server``). Tests create their own topics."""
    from tidemark_tools.kafka import Broker

    info = _shared_server(tmp_path_factory, "kafka", "the Kafka broker")
    yield Broker.connect(info["bootstrap"])


@pytest.fixture(scope="session")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One S3-compatible server (s3proxy, ``tidemark_tools.s3``) for the whole test run,
    shared by the run's processes (see ``_shared_server``). Tests create their own
    buckets (see ``s3_location``)."""
    from tidemark_tools.s3 import S3Server

    info = _shared_server(tmp_path_factory, "s3", "the S3-compatible server")
    yield S3Server.connect(info["endpoint"])


@pytest.fixture
def state_in(tmp_path: Path, request: pytest.FixtureRequest) -> Callable[[str], str]:
    """A state location: ``state_in("local")`` a directory under ``tmp_path``,
    ``state_in("s3")`` this test's bucket on the S3-compatible server (``s3_location``)."""

    def location(where: str) -> str:
        if where == "s3":
            return str(request.getfixturevalue("s3_location"))
        assert where == "local", where
        return str(tmp_path / "state")

    return location


@pytest.fixture
def s3_bucket(s3: Any) -> str:
    """A bucket of this test's own on the shared S3-compatible server."""
    import uuid

    bucket = f"t-{uuid.uuid4().hex[:20]}"
    s3.create_bucket(bucket)
    return bucket


@pytest.fixture
def s3_location(s3: Any, s3_bucket: str) -> str:
    """An ``s3://`` state location in this test's bucket, its endpoint and credentials
    in the URI as a user would give them."""
    return str(s3.uri(s3_bucket, "state"))


@pytest.fixture
def s3a_root(spark: Any, s3: Any, s3_bucket: str) -> str:
    """``s3a://<this test's bucket>``, for Spark's own reads and writes (Delta tables,
    a streaming query's checkpoint) through Hadoop's S3A connector, set up in the
    test session for the server."""
    for key, value in s3.hadoop_conf().items():
        spark.conf.set(key, value)
    return f"s3a://{s3_bucket}"
