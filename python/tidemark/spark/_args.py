"""Arguments of the Spark entry points: their checks, column names as Spark reads them,
the columns a pipeline reads and which of them Spark's hash covers, and a pipeline as
executors receive it.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa

from tidemark import _native
from tidemark.errors import ConfigError
from tidemark.pipeline import Pipeline


def spark_context(spark: Any) -> Any | None:
    """The ``SparkContext`` of a classic session; ``None`` for a Spark Connect session,
    which has none (``spark.sparkContext`` raises there)."""
    try:
        return spark.sparkContext
    except Exception:  # PySparkAttributeError under Spark Connect
        return None


class ShippedPipeline:
    """A pipeline as executors receive it: a lookup table (``Pipeline.enrich``)
    travels as a Spark broadcast variable (once per executor), not inside every
    task's closure. Spark Connect has no broadcast variables: there the table travels
    inside the closure."""

    def __init__(self, pipe: Pipeline, spark: Any) -> None:
        lk = pipe.lookup
        self.bare = pipe.without_lookup()
        self.spec = None if lk is None else (lk.on, lk.how, lk.prefix)
        self.table: Any = None
        self.inline: pa.Table | None = None
        if lk is not None:
            sc = spark_context(spark)
            if sc is None:
                self.inline = lk.table
            else:
                self.table = sc.broadcast(lk.table)

    def get(self) -> Pipeline:
        """The pipeline, with its lookup table (read from the broadcast variable)."""
        if self.spec is None:
            return self.bare
        table = self.inline if self.table is None else self.table.value
        on, how, prefix = self.spec
        return self.bare.enrich(table, on, how, prefix)


def collated_columns(schema: Any, names: list[str]) -> list[tuple[str, str]]:
    """``(name, collation)`` for each of the columns ``names`` of ``schema`` (a Spark
    ``StructType``) that is a string with a collation other than ``UTF8_BINARY``
    (byte-wise equality): Spark compares, groups and hashes those by their collation
    key.

    >>> from pyspark.sql import types as T
    >>> schema = T.StructType([T.StructField("a", T.StringType()),
    ...                        T.StructField("b", T.StringType("UTF8_LCASE"))])
    >>> collated_columns(schema, ["a", "b", "missing"])
    [('b', 'UTF8_LCASE')]
    """
    from pyspark.sql import types as T

    fields = {f.name: f.dataType for f in schema.fields}
    out = []
    for name in names:
        dt = fields.get(name)
        if type(dt) is T.StringType:
            collation = getattr(dt, "collation", "UTF8_BINARY")
            if collation != "UTF8_BINARY":
                out.append((name, collation))
    return out


def spark_hash_matches(schema: Any, names: list[str]) -> bool:
    """Whether tidemark's Spark hash (``HashRouter(hash="spark")``) of these columns of
    ``schema`` (a Spark ``StructType``), read from their Arrow form in a task, equals
    Spark's own ``hash()`` of them, so that a task may route rows to state partitions
    itself. The core decides by the columns' Arrow types (the types
    ``tests/test_route.py`` checks against Spark's ``repartition``); false for a string
    with a collation other than ``UTF8_BINARY`` (Spark hashes those by their collation
    key) and for a type Arrow cannot carry."""
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import StructType

    if collated_columns(schema, names):
        return False
    fields = {f.name: f for f in schema.fields}
    if any(n not in fields for n in names):
        return False
    try:
        arrow = to_arrow_schema(StructType([fields[n] for n in names]), timezone="UTC")
    except Exception:  # a type with no Arrow form: Spark's hash cannot be reproduced
        return False
    return all(_native.spark_hashable(arrow, names))


def quoted(name: str) -> str:
    """A column name as a SQL identifier."""
    return "`" + name.replace("`", "``") + "`"


def map_in_arrow(df: Any, fn: Any, schema: Any) -> Any:
    """``df.mapInArrow(fn, schema)`` for any column names. PySpark's ``mapInArrow``
    resolves each input column by its name, which fails for a name with a dot or a
    backtick (``user.id`` from flattened JSON): such an input travels under
    positional names, and ``fn`` sees batches with the real names again."""
    names = list(df.columns)
    if not any("." in n or "`" in n for n in names):
        return df.mapInArrow(settled(fn), schema)
    safe = df.selectExpr(*[f"{quoted(n)} AS `__tm_c{i}`" for i, n in enumerate(names)])

    def renamed(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        return fn(b.rename_columns(names) for b in batches)  # type: ignore[no-any-return]

    return safe.mapInArrow(settled(renamed), schema)


def settled(fn: Callable[[Iterator[pa.RecordBatch]], Any]) -> Any:
    """``fn`` as a Python worker runs it: the first tidemark task a worker process runs
    moves the objects its imports made (PySpark's, pyarrow's, pandas', tidemark's:
    about 75,000) out of the cyclic garbage collector's sight (``gc.freeze``), once
    per process. PySpark's worker runs a full ``gc.collect()`` after every task, which
    walked all of them each time: 23-65 ms of an executor core per task (one collect timed
    after those imports); about 39 ms per task less in a 400-task ``aggregate``.
    They live as long as the process anyway; what tasks allocate is collected as
    before. (A flag, not ``gc.get_freeze_count()``, which counts the frozen objects one
    by one.)"""

    def task(batches: Iterator[pa.RecordBatch]) -> Any:
        global _settled
        if not _settled:
            gc.freeze()
            _settled = True
        return fn(batches)

    return task


#: Whether this process froze its objects (:func:`settled`); a forked process inherits
#: it with the frozen objects.
_settled = False


def require_batch(df: Any, call: str, streaming_way: str) -> None:
    """Raises :class:`~tidemark.ConfigError` for a streaming DataFrame (Spark's own
    error would come later, from the first action, and not say what to use), and a
    ``TypeError`` for anything but a DataFrame."""
    if not (hasattr(df, "isStreaming") and hasattr(df, "sparkSession")):
        raise TypeError(f"{call} takes a pyspark.sql.DataFrame, got {type(df).__name__}")
    if df.isStreaming:
        from tidemark.errors import ConfigError

        raise ConfigError(
            f"{call} takes a batch DataFrame; for a streaming one, pass "
            f"{streaming_way} to df.writeStream.foreachBatch(...)"
        )


def require_args(
    call: str,
    operator: tuple[str, Any, type],
    counts: dict[str, Any],
    sinks: dict[str, Any] | None = None,
) -> None:
    """Checks the arguments of a Spark entry point when it is called, where a wrong
    one would otherwise fail later inside a Spark job (or be silently replaced):
    ``operator`` is ``(name, value, expected type)``; each of ``counts`` is ``None``
    (its default) or an int of at least 1; each of ``sinks`` is ``None`` or callable.

    >>> require_args("f()", ("pipe", 1, str), {})
    Traceback (most recent call last):
    TypeError: f(): pipe must be a str, got int
    >>> require_args("f()", ("pipe", "p", str), {"num_partitions": 0})
    Traceback (most recent call last):
    tidemark.errors.ConfigError: f(): num_partitions must be an int >= 1, got 0
    """
    from tidemark.errors import ConfigError

    name, value, expected = operator
    if not isinstance(value, expected):
        raise TypeError(f"{call}: {name} must be a {expected.__name__}, got {type(value).__name__}")
    for name, n in counts.items():
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
            raise ConfigError(f"{call}: {name} must be an int >= 1, got {n!r}")
    for name, sink in (sinks or {}).items():
        if sink is not None and not callable(sink):
            raise TypeError(
                f"{call}: {name} must be a function (DataFrame, batch_id) or None, "
                f"got {type(sink).__name__}"
            )
    # A Pipeline and a Reorder both say what they do with late rows.
    if (sinks or {}).get("late_sink") is not None and getattr(value, "late", None) == "drop":
        # Every batch would hand it an empty table: as if no row were ever late.
        raise ConfigError(
            f'{call}: late_sink gets no rows from a {operator[0]} built with late="drop" (late '
            'rows are dropped and counted); build it with late="side_output" or leave '
            "late_sink out"
        )


def column(name: str) -> Any:
    """The top-level column ``name``, whatever characters it holds (Spark reads a bare
    ``"a.b"`` as field ``b`` of struct ``a``)."""
    from pyspark.sql import functions as F

    return F.col(quoted(name))


def used_input(pipe: Pipeline, schema: Any) -> Any:
    """The fields of ``schema`` (a Spark ``StructType``) the pipeline's windows read (the
    core's list: keys, event time, source partition, aggregate inputs), in input order.
    With a lookup (:meth:`Pipeline.enrich`), every field (its columns meet the input's)."""
    from pyspark.sql.types import StructType

    if pipe.lookup is not None:
        return schema
    used = set(_native.pipeline_input_columns(pipe.config))
    return StructType([f for f in schema.fields if f.name in used])


def processor_partitions(
    pipe: Pipeline,
    num_partitions: int | None,
    sinks: tuple[Any, Any, Any],
    shuffle: bool | None,
    on_driver: bool | None,
    preaggregate: bool | None,
) -> int:
    """``StreamProcessor``'s arguments checked (a :class:`ConfigError` that says what to
    change), and its number of state partitions: ``num_partitions``, by default 8 for
    a keyed pipeline and 1 for a global aggregate."""
    sink, late_sink, error_sink = sinks
    require_args(
        "StreamProcessor()",
        ("pipe", pipe, Pipeline),
        {"num_partitions": num_partitions},
        {"sink": sink, "late_sink": late_sink, "error_sink": error_sink},
    )
    if num_partitions is None:
        num_partitions = 8 if pipe.key else 1
    if not pipe.key and num_partitions != 1:
        raise ConfigError(
            "a global aggregate (key=None) keeps its windows in one state partition: "
            f"use num_partitions=1 (got {num_partitions})"
        )
    if pipe.time != "event":
        raise ConfigError(
            "StreamProcessor runs event-time pipelines: for windows by arrival time, "
            'stamp the rows in the query, e.g. stream.withColumn("arrived", '
            "F.current_timestamp()) (Spark records a micro-batch's timestamp, so a "
            'replay sees the same one), and use event_time="arrived"'
        )
    if shuffle is True and on_driver is True:
        raise ConfigError(
            "shuffle=True sends the rows to one task per state partition and "
            "on_driver=True processes them in the driver: choose one"
        )
    if preaggregate is True and (late_sink is not None or error_sink is not None):
        raise ConfigError(
            "preaggregate=True folds each micro-batch's rows per key and window pane "
            "in Spark before the pipeline sees them: late and error rows are counted "
            "(last_progress), not kept; drop late_sink and error_sink, or "
            "preaggregate"
        )
    return num_partitions


def dropped_late_rows(late_rows: int, batch_id: int) -> str:
    """What a ``StreamProcessor`` says, once, when it drops late rows that its pipeline
    keeps (``late="side_output"``) for want of a ``late_sink``."""
    return (
        f"StreamProcessor dropped {late_rows} late rows in batch {batch_id} (rows "
        "behind the watermark): pass late_sink=f(df, batch_id) to keep them, or build "
        'the pipeline with late="drop" to drop them knowingly; '
        "last_progress['late_rows'] counts them"
    )


def ignored_spark_watermark(schema: Any, watermark: Any) -> str | None:
    """What a ``StreamProcessor`` says, once, of a stream that carries Spark's own
    ``withWatermark`` (Spark marks the column with its delay): the pipeline's
    ``watermark`` applies instead. ``None``: the stream has none."""
    for f in schema.fields:
        delay = (f.metadata or {}).get("spark.watermarkDelayMs")
        if delay is not None:
            return (
                f"the stream has Spark's withWatermark on {f.name!r} ({delay} ms): "
                "StreamProcessor ignores it; the pipeline's own watermark "
                f"({watermark!r}) judges late rows and closes windows"
            )
    return None
