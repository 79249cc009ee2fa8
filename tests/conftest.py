"""Shared fixtures: one SparkSession for the whole test session (local[2], UI off)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


# Every JVM the tests start (the test sessions', the clusters', Spark Connect's, the
# demo's) runs small jobs, many of them once: with the quick JIT alone and one GC thread
# it spends less of the machine on compiling and collecting than on the tests.
_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
os.environ["JAVA_TOOL_OPTIONS"] = " ".join(
    filter(None, (os.environ.get("JAVA_TOOL_OPTIONS"), _JVM))
)


@pytest.fixture(scope="session")
def spark_workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The Spark JVM's working directory: where Spark resolves a relative path."""
    return tmp_path_factory.mktemp("spark-cwd")


@pytest.fixture(scope="session")
def spark(spark_workdir: Path) -> Iterator[Any]:
    """The one local SparkSession of the test run (its JVM started in
    ``spark_workdir``, so no relative path of a test lands in the checkout)."""
    from tidemark.tools.session import local_session

    before = os.getcwd()
    os.chdir(spark_workdir)
    try:
        session = local_session("local[2]", app_name="tidemark-tests", shuffle_partitions=2)
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
