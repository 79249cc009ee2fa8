"""Shared fixtures: one SparkSession for the whole test session (local[2], UI off)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """The one local SparkSession of the test run."""
    from tidemark.spark import local_session

    session = local_session("local[2]", app_name="tidemark-tests", shuffle_partitions=2)
    yield session
    session.stop()
