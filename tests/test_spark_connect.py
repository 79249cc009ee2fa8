"""tidemark.spark through Spark Connect: a client process with no JVM of its own.

The test starts a Spark Connect server in the shared session's JVM (an ephemeral
port) and runs ``tests/spark_connect_client.py`` as a separate Python process whose
``SPARK_REMOTE`` names it: the client's DataFrames are Spark Connect DataFrames, and
``foreachBatch`` runs the StreamProcessor in the server's Python process.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.spark


@pytest.fixture
def connect_port(spark: Any) -> Iterator[int]:
    """A Spark Connect server on the shared session's SparkContext (an ephemeral
    port), stopped afterwards so the tests that follow see a plain session."""
    pkg = spark._jvm.org.apache.spark.sql.connect.service
    service = pkg.__getattr__("SparkConnectService$").__getattr__("MODULE$")
    spark._jsc.sc().conf().set("spark.connect.grpc.binding.port", "0")
    pkg.SparkConnectService.start(spark._jsc.sc())
    try:
        yield int(service.localPort())
    finally:
        cls = pkg.SparkConnectService
        cls.stop(getattr(cls, "stop$default$1")(), getattr(cls, "stop$default$2")())


@pytest.mark.slow(30)
def test_tidemark_spark_through_spark_connect(
    connect_port: int, run_job: Callable[..., str], tmp_path: Path
) -> None:
    env = {"SPARK_REMOTE": f"sc://localhost:{connect_port}"}
    assert "CONNECT OK" in run_job("spark_connect_client.py", tmp_path, env)
