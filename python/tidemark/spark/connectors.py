"""Spark's Kafka connector and Delta Lake, the way Spark gets them: Maven coordinates for
``spark.jars.packages`` that match the installed PySpark, which Spark resolves itself
(from Maven Central into Ivy's cache, ``~/.ivy2.5.2`` unless ``spark.jars.ivy`` says
otherwise) when the session starts. Nothing here reads a file of tidemark's repository.

>>> from pyspark.sql import SparkSession                            # doctest: +SKIP
>>> builder = SparkSession.builder.master("local[2]")               # doctest: +SKIP
>>> for k, v in kafka_delta_conf().items():                         # doctest: +SKIP
...     builder = builder.config(k, v)
>>> spark = builder.getOrCreate()                                   # doctest: +SKIP
"""

from __future__ import annotations

from importlib import metadata

# No tidemark import at the top: the repository's tools load this file on its own
# before the library is built (tidemark_tools.jars).

__all__ = ["kafka_delta_conf", "spark_packages"]

SCALA = "2.13"  # PySpark 4's Scala


def _version(dist: str, extra: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        from tidemark.errors import ConfigError

        raise ConfigError(
            f"the {dist} package is not installed: pip install 'tidemark-engine[{extra}]' "
            f"(its version picks the connector's)"
        ) from None


def spark_packages(kafka: bool = True, delta: bool = True) -> list[str]:
    """The Maven coordinates of Spark's Kafka source and sink
    (``spark-sql-kafka-0-10``, at the installed PySpark's version) and of Delta Lake
    (``delta-spark``, at the installed ``delta-spark`` package's version, for this
    PySpark's minor version from Delta 4.1 on)."""
    spark = _version("pyspark", "spark")
    out = []
    if kafka:
        out.append(f"org.apache.spark:spark-sql-kafka-0-10_{SCALA}:{spark}")
    if delta:
        version = _version("delta-spark", "delta")
        major_minor = tuple(int(x) for x in version.split(".")[:2])
        spark_minor = ".".join(spark.split(".")[:2])
        # Delta publishes one artifact per Spark minor version from 4.1 on.
        name = f"delta-spark_{spark_minor}_{SCALA}"
        if major_minor < (4, 1):
            name = f"delta-spark_{SCALA}"
        out.append(f"io.delta:{name}:{version}")
    return out


def kafka_delta_conf(kafka: bool = True, delta: bool = True) -> dict[str, str]:
    """The settings a SparkSession needs to read Kafka and write Delta tables:
    :func:`spark_packages` as ``spark.jars.packages``, and (``delta``) Delta's SQL
    extension and catalog. Pass them to the builder before the session starts."""
    conf = {"spark.jars.packages": ",".join(spark_packages(kafka, delta))}
    if delta:
        conf.update(
            {
                "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
                "spark.sql.catalog.spark_catalog": (
                    "org.apache.spark.sql.delta.catalog.DeltaCatalog"
                ),
                # A small table's snapshot in one task, not Delta's default 50 tasks.
                "spark.databricks.delta.snapshotPartitions": "1",
            }
        )
    return conf
