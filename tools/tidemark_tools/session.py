"""A local SparkSession configured the way tidemark's tests, demo and benches use it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from typing import Any


def _local_checkpoints() -> str:
    """Spark's ``FileSystem``-based checkpoint manager (its package moved in 4.1)."""
    import pyspark

    major, minor = (int(x) for x in pyspark.__version__.split(".")[:2])
    package = "org.apache.spark.sql.execution.streaming"
    if (major, minor) >= (4, 1):
        package += ".checkpointing"
    return f"{package}.FileSystemBasedCheckpointFileManager"


def local_session(
    master: str = "local[2]",
    app_name: str = "tidemark",
    shuffle_partitions: int = 4,
    extra_conf: dict[str, str] | None = None,
) -> Any:
    """Creates (or returns) a local SparkSession: UI off, Arrow on, few shuffle partitions.

    Sets ``PYSPARK_PYTHON`` to this interpreter so Python workers import the same
    tidemark, and pins the session time zone to UTC so timestamps print predictably.

    The JVM and its Python workers talk over Unix domain sockets where the platform
    has them (``spark.python.unix.domain.socket.enabled``, Spark 4.1 and later; older
    versions ignore it; ``extra_conf`` may turn it off). Over TCP, a task's end of
    input sometimes reached the worker about 40 ms after its last batch (in 1 to 6 of
    every 10 micro-batches in the runs measured), which a micro-batch of a few tenths
    of a second pays in full.

    Streaming checkpoints are written through Hadoop's ``FileSystem``
    (``FileSystemBasedCheckpointFileManager``), not its ``FileContext`` (Spark's default):
    on a local disk without Hadoop's native library (pip's pyspark has none), each
    ``FileContext`` rename asks for a file's link status, which starts a ``readlink``
    process from the JVM; with every micro-batch writing several checkpoint files, the
    test suite spent about 8% of the machine's samples starting them (``perf``: ``readlink``
    3%, and ``jspawnhelper`` and the JVM's process reaper halved without them), and two
    streaming test modules ran in 64 s instead of 84.
    A rename on a local file system is atomic, as the checkpoints need; ``extra_conf``
    may set ``spark.sql.streaming.checkpointFileManagerClass`` back (for checkpoints on
    an object store, where a ``FileSystem`` rename is not atomic).
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.default.parallelism", str(shuffle_partitions))
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "2g")
        .config("spark.sql.adaptive.enabled", "false")
        .config("spark.python.worker.reuse", "true")
        .config("spark.sql.streaming.checkpointFileManagerClass", _local_checkpoints())
    )
    if hasattr(socket, "AF_UNIX"):  # not on Windows
        builder = builder.config("spark.python.unix.domain.socket.enabled", "true")
    for k, v in (extra_conf or {}).items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


#: How long :func:`stop_with_jvm` waits for the JVM to exit before killing it.
JVM_EXIT_S = 60


def stop_with_jvm(spark: Any) -> None:
    """Stops ``spark`` and its JVM, and waits for the JVM to exit: a JVM writes some
    things as it exits (a class archive, ``-XX:ArchiveClassesAtExit``), which a
    process that ends first never sees. (PySpark keeps the JVM until the Python
    process ends; it exits when its standard input closes.)"""
    gateway: Any = spark.sparkContext._gateway
    jvm = gateway.proc  # spark-submit, which execs into the JVM
    spark.stop()
    if jvm is not None and jvm.stdin is not None:
        jvm.stdin.close()
        try:
            jvm.wait(timeout=JVM_EXIT_S)
        except subprocess.TimeoutExpired:
            # Seen with a class archive's dump at exit after a streaming query (JDK
            # 17.0.15): the JVM never finishes exiting. Killed, it writes nothing.
            jvm.kill()
            jvm.wait()
