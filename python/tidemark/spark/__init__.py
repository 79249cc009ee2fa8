"""PySpark integration.

Everything here runs tidemark inside Spark's Python workers through ``mapInArrow``:
Arrow batches go from the JVM to the worker and straight into the Rust core, with no
per-row Python. Functions that need a SparkSession take one or use the active one.

Workers are forked and reused by Spark, so nothing here keeps state in a worker
between tasks; the native module starts no threads at import.
"""

from __future__ import annotations

from tidemark.spark.aggregate import AggregateResult, aggregate
from tidemark.spark.connectors import kafka_delta_conf, spark_packages
from tidemark.spark.reorder import ReorderResult, ReorderStream, reorder
from tidemark.spark.sinks import delta_sink
from tidemark.spark.streaming import StreamProcessor, heartbeat
from tidemark.spark.watermarks import PARTITION_PROGRESS_SCHEMA, observe_partitions

__all__ = [
    "PARTITION_PROGRESS_SCHEMA",
    "AggregateResult",
    "ReorderResult",
    "ReorderStream",
    "StreamProcessor",
    "aggregate",
    "delta_sink",
    "heartbeat",
    "kafka_delta_conf",
    "observe_partitions",
    "reorder",
    "spark_packages",
]
