"""Where a Spark micro-batch or batch input runs, from Spark's size estimate: one task or
a shuffle, the driver or the executors; and the late and error rows a batch run can
know without its windows.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from tidemark import _native
from tidemark.pipeline import Pipeline
from tidemark.spark import _layout
from tidemark.spark._args import column, map_in_arrow, spark_context
from tidemark.spark._codec import KIND_ERROR, OutputCodec
from tidemark.spark._kafka import kafka_records
from tidemark.spark._types import spark_type, type_name, value_bytes

#: Spark's size estimate of a one-task input at most which its unused fixed-width
#: columns travel to the task instead of being projected away (see
#: :func:`unused_columns_are_cheap`).
CHEAP_INPUT_BYTES = 1 << 20


def unused_columns_are_cheap(schema: Any, used: list[str], size: int | None) -> bool:
    """Whether a task should read every column of ``schema`` (a Spark ``StructType``)
    though it uses only ``used``: the others are all fixed-width (numbers, booleans,
    dates, timestamps, decimals) and Spark estimates the whole input at most
    :data:`CHEAP_INPUT_BYTES`. Sending such columns costs the task well under a
    millisecond; the projection that drops them costs the driver a JVM analysis of the
    plan (about 15 ms for a streaming micro-batch here)."""
    if size is None or size > CHEAP_INPUT_BYTES:
        return False
    keep = set(used)
    return all(spark_type(f.dataType).fixed for f in schema.fields if f.name not in keep)


def _safe_event_time(pipe: Pipeline, schema: Any) -> Callable[[], Any] | None:
    """A builder of a Spark predicate true for rows whose event time the core reads and
    windows without fail (not null, well inside the 64-bit microsecond range), or
    ``None`` where only the core can tell (strings, floats, user parsers)."""
    from pyspark.sql import functions as F

    dt = schema[pipe.event_time].dataType
    kind, integer = type_name(dt), spark_type(dt).integer
    name = pipe.event_time_type

    def within(lo: Callable[[], Any], hi: Callable[[], Any]) -> Callable[[], Any]:
        def build() -> Any:
            ts = column(pipe.event_time)
            return ts.isNotNull() & (ts >= lo()) & (ts <= hi())

        return build

    if name is None and kind == "TimestampType":
        # Compared as microseconds: a timestamp literal this far out is pushed down to
        # a Parquet scan, which then reads three times slower.
        def micros() -> Any:
            ts = column(pipe.event_time)
            return ts.isNotNull() & F.unix_micros(ts).between(
                -_native.SAFE_EVENT_TIME, _native.SAFE_EVENT_TIME
            )

        return micros
    if name is None and kind == "TimestampNTZType":
        return within(
            lambda: F.timestamp_micros(F.lit(-_native.SAFE_EVENT_TIME)).cast("timestamp_ntz"),
            lambda: F.timestamp_micros(F.lit(_native.SAFE_EVENT_TIME)).cast("timestamp_ntz"),
        )
    if name is None and kind == "DateType":
        days = _native.SAFE_EVENT_TIME // 86_400_000_000
        return within(
            lambda: F.date_from_unix_date(F.lit(-days)), lambda: F.date_from_unix_date(F.lit(days))
        )
    if name == "unixtimestamp_ns" and integer:
        # A long of nanoseconds always fits in microseconds.
        return lambda: column(pipe.event_time).isNotNull()
    if name in _native.EPOCH_UNIT_MICROS and integer:
        bound = _native.SAFE_EVENT_TIME // _native.EPOCH_UNIT_MICROS[name]
        return within(lambda: F.lit(-bound), lambda: F.lit(bound))
    return None


def event_micros(pipe: Pipeline, schema: Any) -> Callable[[], Any] | None:
    """A builder of the event time as the core reads it, epoch microseconds, as a Spark
    column (null where the row has none), or ``None`` where only the core can read it
    (strings, floats, user parsers, timestamps without a time zone)."""
    from pyspark.sql import functions as F

    if pipe.config["parsed_externally"] or pipe.event_time not in schema.fieldNames():
        return None
    dt = schema[pipe.event_time].dataType
    kind, integer = type_name(dt), spark_type(dt).integer
    name = pipe.event_time_type
    if name is None and kind == "TimestampType":
        return lambda: F.unix_micros(column(pipe.event_time))
    if name is None and kind == "DateType":
        return lambda: F.unix_date(column(pipe.event_time)).cast("long") * F.lit(86_400_000_000)
    if name == "unixtimestamp_ns" and integer:
        return lambda: F.floor(column(pipe.event_time) / F.lit(1_000))
    if name in _native.EPOCH_UNIT_MICROS and integer:
        return lambda: column(pipe.event_time).cast("long") * F.lit(_native.EPOCH_UNIT_MICROS[name])
    return None


def event_quartiles(df: Any, micros: Callable[[], Any]) -> tuple[int, int] | None:
    """The lower and upper quartiles of ``df``'s event times (``micros``, see
    :func:`event_micros`), estimated by Spark (``percentile_approx``, relative error
    0.001: one job); ``None`` for a micro-batch without an event time.

    (Not ``DataFrame.approxQuantile``: PySpark reads its answer with a JVM iterator,
    whose end is an exception the JVM raises and PySpark classifies in a dozen more
    calls into the JVM, twice a call.)"""
    from pyspark.sql import functions as F

    row = df.select(F.percentile_approx(micros(), [0.25, 0.75], 1000)).first()
    got = None if row is None else row[0]
    return (int(got[0]), int(got[1])) if got else None


def safe_rows(df: Any, pipe: Pipeline) -> Callable[[], Any] | None:
    """A builder of a Spark predicate true for rows that fail or not on their own and
    that the pipeline reads without fail: a non-null, well-ranged event time, a short
    key with no null (``null_keys="error"``) and (partition scope) a source partition
    in range. ``None`` where a row's fate depends on others or on state (``max_keys``,
    a lookup, ``state_ttl``, bounds on event times), or where no Spark filter can tell
    (string, float or user-parsed event times or partitions, key types the core does
    not take). Decided now, from the schema alone."""
    from pyspark.sql import functions as F

    cfg = pipe.config
    schema = df.schema
    if (
        pipe.lookup is not None
        or pipe.max_keys is not None
        or pipe.state_ttl is not None
        or cfg["time"] != "event"
        or cfg["parsed_externally"]
        or cfg["max_ahead"] is not None
        or cfg["max_behind"] is not None
        or any(
            abs(v) > _native.SAFE_WINDOW
            for k, v in cfg["window"].items()
            if k in ("size", "slide", "offset", "gap")
        )
    ):
        return None
    safe_time = _safe_event_time(pipe, schema)
    if safe_time is None:
        return None
    part = cfg["partition_column"] if cfg["scope"] == "partition" else None
    if part is not None and not spark_type(schema[part].dataType).integer:
        return None
    kinds = [spark_type(schema[k].dataType).key for k in pipe.key]
    if None in kinds:
        return None  # not a key type the core takes: its run says so
    var = [k for k, kind in zip(pipe.key, kinds, strict=True) if kind == "variable"]

    def build() -> Any:
        safe = safe_time()
        if cfg["null_keys"] == "error":
            for k in pipe.key:
                safe = safe & column(k).isNotNull()
        if part is not None:
            pc = column(part)
            safe = safe & pc.isNotNull() & (pc >= 0) & (pc < F.lit(_native.SOURCE_PARTITIONS))
        if var:
            # A key's most bytes in the core's encoding: fixed-width values at most
            # MAX_FIXED_VALUE_BYTES each, strings and binaries their bytes and more.
            fixed = len(pipe.key) - len(var)
            most = F.lit(
                _native.MAX_FIXED_VALUE_BYTES * fixed + _native.VARIABLE_VALUE_OVERHEAD * len(var)
            )
            for k in var:
                most = most + F.coalesce(F.octet_length(column(k)), F.lit(0))
            safe = safe & (most <= F.lit(_native.MAX_KEY_BYTES))
        return safe

    return build


def known_late_and_errors(
    df: Any, pipe: Pipeline, plan: OutputCodec, error_task: Any
) -> Callable[[], tuple[Any, Any]] | None:
    """A builder of the late and error rows of a batch ``aggregate`` run without a
    replay (each partition one arrival unit), computed without the pipeline's windows,
    where a row fails or not on its own (:func:`safe_rows`): no row of such a run is
    late, and a row fails for its event time (null, unreadable, out of range) or its
    key (too long) alone.

    ``late`` is then empty, and ``errors`` is ``error_task`` (the pipeline, emitting
    its error rows) run on the input rows the filter of :func:`safe_rows` cannot clear,
    so the task usually sees none, and it gives exactly the rows and reasons of the
    full run. ``None`` where :func:`safe_rows` is: only the full run tells, and its
    result is persisted. The builder makes the two DataFrames (a few dozen calls into
    the JVM, saved when only the windows are read)."""
    from pyspark.sql import functions as F

    safe = safe_rows(df, pipe)
    if safe is None:
        return None

    def build() -> tuple[Any, Any]:
        doubtful = df.filter(~F.coalesce(safe(), F.lit(False)))
        errors = map_in_arrow(doubtful, error_task, plan.single_spark[KIND_ERROR])
        return df.filter(F.lit(False)), errors

    return build


#: An estimate of at least this many bytes is Spark's placeholder for an input it cannot
#: size (a streaming source such as Kafka or ``rate``): ``spark.sql.defaultSizeInBytes``,
#: ``Long.MaxValue`` unless set, which the plan above scales by row widths (a projection
#: onto narrower rows shrinks it) but never to a size a micro-batch has.
NO_ESTIMATE_BYTES = 1 << 40


def estimated_bytes(df: Any, plan: Any = None) -> int | None:
    """Spark's size estimate of ``df`` (optimizer statistics), if it has one: ``None``
    also for Spark's placeholder of an input it cannot size (``NO_ESTIMATE_BYTES`` or
    more). A Spark Connect DataFrame has no JVM handle: its estimate is read from the
    cost plan (one request to the server). ``plan``: the micro-batch's physical plan,
    if read (:func:`~tidemark.spark._files.micro_batch_plan`): branches of a union
    that give no rows (a :func:`~tidemark.spark.heartbeat`'s) are not counted."""
    return spark_estimate(df, plan)[0]


def spark_estimate(df: Any, plan: Any = None) -> tuple[int | None, bool]:
    """:func:`estimated_bytes`, and whether Spark's estimate was its placeholder: it
    cannot size the input (a Kafka or ``rate`` source), so neither does its optimizer
    know it empty (it sizes an input it knows empty 0). ``(None, False)`` where the
    estimate could not be read."""
    size = _estimate(df, plan)
    if size is not None and size >= NO_ESTIMATE_BYTES:
        return None, True
    return size, False


def _estimate(df: Any, plan: Any) -> int | None:
    """Spark's estimate as it gives it (its placeholder included), ``None`` where it
    could not be read."""
    branches = _live_union_branches(plan)
    if branches is not None:
        try:
            # A branch without its logical plan (an empty Option: asked first, as a
            # Java exception costs PySpark a dozen calls into the JVM to classify).
            links = [b.logicalLink() for b in branches]
            if all(link.isDefined() for link in links):
                return sum(int(link.get().stats().sizeInBytes()) for link in links)
        except Exception:  # an API Spark does not promise: the whole plan's estimate
            pass
    try:
        return int(df._jdf.queryExecution().optimizedPlan().stats().sizeInBytes())
    except Exception:  # an API Spark does not promise: no estimate, not an error
        try:
            return size_in_cost_plan(df._explain_string(mode="cost"))
        except Exception:
            return None


def _live_union_branches(plan: Any) -> list[Any] | None:
    """The branches of a micro-batch's union that may give rows (``None``: the plan is
    not a union with branches that never do)."""
    from tidemark.spark._files import never_rows, simple_name

    if plan is None or isinstance(plan, str):
        return None
    try:
        node = plan
        while simple_name(node) == "WholeStageCodegenExec":
            node = node.children().apply(0)
        if simple_name(node) != "UnionExec":
            return None
        children = [node.children().apply(i) for i in range(node.children().size())]
        live = [c for c in children if not never_rows(c)]
        return live if len(live) < len(children) else None
    except Exception:  # Spark internals it does not promise
        return None


def row_bytes(schema: Any) -> int:
    """Bytes per row of ``schema`` (a Spark ``StructType``), as Spark estimates a row it
    has no statistics for: 8 plus each column's default size (strings and binary 20,
    decimals 8 or 16)."""
    return 8 + sum(value_bytes(field.dataType) for field in schema.fields)


def micro_batch_size(
    df: Any, plan: Any, last_rows: int | None
) -> tuple[int | None, int | None, bool]:
    """Streaming micro-batch ``df``'s size (``plan``: its physical plan, if read):
    Spark's estimate, else from Kafka its records (its offsets) in Spark's width of a
    row, else ``None``; the size its layout goes by: that, or (``rate``) the last one's
    ``last_rows`` in that width, as a stream's micro-batches tend to be alike; and
    whether Spark cannot size it (see :func:`spark_estimate`)."""
    size, unsized = spark_estimate(df, plan)
    if size is None and (records := kafka_records(plan)) is not None:
        size = records * row_bytes(df.schema)
    guess = last_rows * row_bytes(df.schema) if size is None and last_rows is not None else size
    return size, guess, unsized


_UNITS = {"B": 0, "KiB": 1, "MiB": 2, "GiB": 3, "TiB": 4, "PiB": 5, "EiB": 6}


def size_in_cost_plan(text: str) -> int | None:
    """The root's ``sizeInBytes`` in the optimized plan of ``explain(mode="cost")``
    text (``Statistics(sizeInBytes=1239.3 KiB)``), or ``None`` where it has none.

    >>> size_in_cost_plan("== Optimized Logical Plan ==\\nRelation [a#1L] parquet, "
    ...                   "Statistics(sizeInBytes=1.5 KiB)\\n\\n== Physical Plan ==")
    1536
    """
    _, found, plan = text.partition("== Optimized Logical Plan ==")
    m = re.search(r"Statistics\(sizeInBytes=([0-9.]+) ([KMGTPE]iB|B)\b", plan) if found else None
    if m is None:
        return None
    return int(float(m.group(1)) * 1024 ** _UNITS[m.group(2)])


def cores_of(spark: Any) -> int:
    """The cores a session's work spreads over (``SparkContext.defaultParallelism``, at
    least 2; 2 under Spark Connect, which does not tell)."""
    sc = spark_context(spark)
    return 2 if sc is None else max(2, int(sc.defaultParallelism))


def fits_one_task(spark: Any, size: int | None) -> bool:
    """Whether an input of ``size`` estimated bytes runs in one task with no shuffle in
    ``spark``'s cluster (:func:`tidemark.spark._layout.fits_one_task`)."""
    return _layout.fits_one_task(size, cores_of(spark))
