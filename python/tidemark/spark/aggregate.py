"""Batch DataFrames: ``tidemark.spark.aggregate(df, pipe)``."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa

from tidemark.operator import Output
from tidemark.pipeline import Pipeline
from tidemark.spark._args import (
    ShippedPipeline,
    column,
    map_in_arrow,
    quoted,
    require_args,
    require_batch,
    used_input,
)
from tidemark.spark._codec import (
    KIND_ERROR,
    KIND_LATE,
    KIND_WINDOW,
    OutputCodec,
    concat_input,
    packed_spark,
    session_arrow_settings,
    split_packed,
)
from tidemark.spark._preagg import preaggregation
from tidemark.spark._sizing import (
    estimated_bytes,
    fits_one_task,
    known_late_and_errors,
)

__all__ = ["AggregateResult", "aggregate"]


class AggregateResult:
    """The three outputs of :func:`aggregate`: ``windows``, ``late`` and ``errors``
    (Spark DataFrames), and ``combined``.

    By default the pipeline runs once for all three. Where each row fails or not on
    its own (no ``order_by`` replay, so no row is late; a Spark timestamp, date or
    epoch-integer event time; an integer source-partition column, if any; no
    ``max_keys``, lookup or ``state_ttl``), ``windows`` is the pipeline's job,
    ``late`` is empty and ``errors`` runs the pipeline only on the rows a Spark filter
    cannot clear (null or extreme event times, keys near the size limit, partitions
    out of range: usually none). Nothing is persisted (``combined`` is ``None``).
    Otherwise the three are read from one persisted result, ``combined``: the first
    action computes it, the others reuse it; call :meth:`unpersist` when done. For a
    large input (Spark's estimate at least ``PACK_FROM_BYTES``, or none) it holds each
    output's rows as Arrow IPC blobs, else the rows themselves. With ``cache=False``
    each is its own job (``combined`` is ``None``). Where nothing is persisted,
    ``late`` and ``errors`` are built when first read.
    """

    __slots__ = ("_errors", "_late", "_pending", "combined", "windows")

    def __init__(self, windows: Any, late: Any, errors: Any, combined: Any = None) -> None:
        self.windows = windows
        self._late = late
        self._errors = errors
        self.combined = combined
        self._pending: Callable[[], tuple[Any, Any]] | None = None

    @classmethod
    def _lazy(cls, windows: Any, build: Callable[[], tuple[Any, Any]]) -> AggregateResult:
        """``windows``, with ``late`` and ``errors`` from ``build()`` when first read."""
        res = cls(windows, None, None)
        res._pending = build
        return res

    def _resolve(self) -> None:
        if self._pending is not None:
            self._late, self._errors = self._pending()
            self._pending = None

    @property
    def late(self) -> Any:
        """The rows behind the watermark (with every input column)."""
        self._resolve()
        return self._late

    @property
    def errors(self) -> Any:
        """The rows that could not be processed, with every input column and a
        ``reason`` (``_tidemark_reason`` when the input has a ``reason`` column)."""
        self._resolve()
        return self._errors

    def unpersist(self) -> None:
        """Frees the cached result (nothing to free with ``cache=False``)."""
        if self.combined is not None:
            self.combined.unpersist()

    def __repr__(self) -> str:
        return f"AggregateResult(windows={self.windows!r}, combined={self.combined!r})"


def task_cores(cores: int | None, pipe: Pipeline) -> int:
    """Cores for a task's operator: ``cores``, else the task's ``TaskContext.cpus()``
    (``spark.task.cpus``, 1 by default); a global aggregate runs on one."""
    if not pipe.key:
        return 1
    if cores is not None:
        return cores
    from pyspark import TaskContext

    ctx = TaskContext.get()
    return max(1, ctx.cpus()) if ctx is not None else 1


#: Inputs Spark estimates at this many bytes or more persist their outputs packed (a
#: few blobs: far cheaper to cache than many rows). Smaller ones persist combined rows,
#: which each output reads without a Python stage (about 0.1 s saved per read).
PACK_FROM_BYTES = 8 << 20


def _task(
    shipped: ShippedPipeline,
    plan: OutputCodec,
    order_by: str | None,
    batch_rows: int | None,
    cores: int | None,
    kind: int | None = None,
    packed: bool = True,
) -> Any:
    """The ``mapInArrow`` function: all outputs (``packed`` or combined rows), or
    output ``kind`` alone."""

    def encode(out: Output) -> Iterator[pa.RecordBatch]:
        if kind is not None:
            return plan.encode_one(out, kind)
        return plan.encode_packed(out) if packed else plan.encode(out)

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        pipe = shipped.get()
        # A DataFrame has no row order: the windows need no sort.
        op = pipe.operator(cores=task_cores(cores, pipe), ordered=False)
        table = concat_input(batches, plan.input_arrow)
        if order_by is not None and batch_rows is not None:
            # Replay in arrival order, in micro-batches: late rows are judged as a
            # stream would judge them.
            for start in range(0, table.num_rows, batch_rows):
                yield from encode(op.process(table.slice(start, batch_rows)))
        elif table.num_rows:
            yield from encode(op.process(table))
        yield from encode(op.flush())

    return run


def aggregate(
    df: Any,
    pipe: Pipeline,
    num_partitions: int | None = None,
    *,
    order_by: str | None = None,
    batch_rows: int | None = None,
    storage_level: Any = None,
    cores: int | None = None,
    cache: bool = True,
    preaggregate: bool | None = None,
) -> AggregateResult:
    """Runs a pipeline over a batch DataFrame on Spark.

    Rows are repartitioned by the pipeline's keys (``key=None``: one partition), each
    Spark partition runs one operator through ``mapInArrow`` and flushes at the end.
    By default a partition is one arrival unit: every row counts (as in a batch
    GROUP BY) and the result does not depend on row order. With ``order_by`` (an
    arrival-time column) and ``batch_rows``, each partition is replayed in that order
    in micro-batches of ``batch_rows`` rows, and rows behind the watermark come back in
    ``late`` as they would in a stream.

    Parameters
    ----------
    df : pyspark.sql.DataFrame
        The input. Any column types the pipeline supports, including session-time-zone
        timestamps and strings of either Arrow width.
    pipe : Pipeline
        The pipeline (built without a clock, so it can be shipped to executors).
    num_partitions : int, optional
        Spark partitions, one task each, rows shuffled to them by key. Default:
        ``spark.sql.shuffle.partitions``, except that a small input runs in one task
        with no shuffle when there is no ``order_by``: Spark's estimate (a file source
        knows its size) below ``SINGLE_TASK_BYTES`` (16 MiB) on 2 cores, ``2 / cores``
        of it with more. The outputs are the same.
    order_by, batch_rows
        Replay each partition in ``order_by`` order, ``batch_rows`` rows at a time.
        Also the way to bound keys (``max_keys``) on an input with more keys per
        partition than the bound: a partition run as one arrival unit sends the rows
        of the keys evicted while it ran to ``errors``; replayed in smaller units,
        keys are evicted between them (their windows emitted early, their later rows
        late).
    storage_level : pyspark.StorageLevel, optional
        How the result is persisted (default: memory and disk).
    cores : int, optional
        Worker threads per task's operator (default: ``TaskContext.cpus()``, i.e.
        ``spark.task.cpus``; same output for any value).
    cache : bool
        ``True`` (default): the pipeline runs once for all three outputs. Where late
        and error rows follow from the input alone (see :class:`AggregateResult`),
        the windows are its only job and nothing is persisted; otherwise one job
        computes all three outputs and persists them (``storage_level``; a large
        input's packed as Arrow IPC blobs). Either way, reading a second output
        costs no second run of the pipeline. ``False``: nothing is
        persisted and each output is its own job with its own narrow schema: the
        fastest way to read one output (typically ``windows``, whose job reads only
        the input columns the windows need), but every output read runs the pipeline
        over the input again.
    preaggregate : bool or None
        ``True``: where it gives the same windows (``count``, ``sum`` of 8-32-bit
        integers, exact ``sum`` of floats (of one column), ``min`` / ``max`` of
        integers, dates and timestamps, over tumbling or sliding windows of a Spark
        timestamp; no ``order_by``, ``max_keys``, lookup or ``state_ttl``; keys that
        are not floats), Spark's own ``groupBy`` folds the
        rows per key and window pane before they reach Python, and the pipeline merges
        those partial aggregates (for tumbling windows in the tasks of Spark's
        aggregation, with no second shuffle). Faster where keys have many rows per
        window (2.4x with 200 rows per key and window: 0.69-0.85 s for 2M rows on 2
        cores, against 1.65-2.14 s without, and Spark's own ``groupBy`` at
        0.71-0.86 s), slower where they have few (1.6-1.8x slower with one row per key
        and window: the fold saves nothing and Spark's aggregation is paid on top);
        see the deployment guide. Elsewhere it changes nothing. ``False``: every row
        goes through the pipeline. Default ``None``: folded where it gives the same
        windows, the input is too large for one task, and a sample says it pays:
        ``df`` is a bare Parquet scan (at most a selection of its columns) whose first
        file's first 65,536 rows, extrapolated to the file, fold into at most a tenth
        as many groups as rows; any other input (cached, filtered, computed) runs raw.

    Returns
    -------
    AggregateResult
        ``windows``, ``late``, ``errors`` DataFrames.

    Examples
    --------
    >>> res = tidemark.spark.aggregate(df, pipe)          # doctest: +SKIP
    >>> res.windows.orderBy("window_end").show()           # doctest: +SKIP
    """
    from pyspark import StorageLevel
    from pyspark.sql.types import StructType

    require_batch(df, "aggregate()", "a tidemark.spark.StreamProcessor")
    require_args(
        "aggregate()",
        ("pipe", pipe, Pipeline),
        {"num_partitions": num_partitions, "batch_rows": batch_rows, "cores": cores},
    )
    if (order_by is None) != (batch_rows is None):
        from tidemark.errors import ConfigError

        raise ConfigError("order_by and batch_rows go together")
    if order_by is None:
        # One arrival unit: no stream time to judge rows by, nothing late, each
        # window its rows' own (Spark's groupBy); no bounds on event times either.
        pipe = pipe.unbounded()
    spark = df.sparkSession
    tz, large = session_arrow_settings(spark)
    plan = OutputCodec.build(pipe, df.schema, tz, large)
    n = num_partitions or int(spark.conf.get("spark.sql.shuffle.partitions"))
    size = estimated_bytes(df)
    single = num_partitions is None and order_by is None and fits_one_task(spark, size)

    def parted(inp: Any) -> Any:
        if single:
            return inp.coalesce(1)
        keys = [column(k) for k in pipe.key]
        out = inp.repartition(n, *keys) if keys else inp.repartition(1)
        return out if order_by is None else out.sortWithinPartitions(column(order_by))

    shipped = ShippedPipeline(pipe, spark)
    # By default an input small enough for one task runs raw there (no shuffle either
    # way; the fold's aggregation costs more than it saves), a larger one folds where a
    # sample of it says the fold pays.
    fold = order_by is None and (preaggregate is True or (preaggregate is None and not single))
    pre = preaggregation(pipe, df.schema, tz, large) if fold else None
    if pre is not None and preaggregate is None and not pre.pays_on(df):
        pre = None

    def windows_job() -> Any:
        if pre is not None:
            # Spark folds the rows per key and pane; the pipeline merges the folds:
            # a small input in one task (its aggregation then needs no shuffle); where
            # each fold is a whole window, in the partitions Spark's aggregation left
            # them in (no second shuffle); else after a shuffle by key.
            in_place = single or (pre.in_place() and num_partitions is None)
            rows = pre.rows(df.coalesce(1) if single else df)
            pre_plan = OutputCodec.build(pre.pipe, rows.schema, tz, large)
            task = _task(ShippedPipeline(pre.pipe, spark), pre_plan, None, None, cores, KIND_WINDOW)
            placed = rows if in_place else parted(rows)
            return map_in_arrow(placed, task, plan.single_spark[KIND_WINDOW])
        # Only the columns the windows need (and the arrival order) are read; late and
        # error rows carry every input column.
        fields = used_input(pipe, df.schema)
        if order_by is not None and order_by not in fields.fieldNames():
            fields = StructType([*fields.fields, df.schema[order_by]])
        names = fields.fieldNames()
        # (A projection onto every column would cost the JVM an analysis for nothing.)
        used = df if names == df.schema.fieldNames() else df.selectExpr(*map(quoted, names))
        rows = parted(used)
        windows_plan = OutputCodec.build(pipe, fields, tz, large)
        task = _task(shipped, windows_plan, order_by, batch_rows, cores, KIND_WINDOW)
        return map_in_arrow(rows, task, plan.single_spark[KIND_WINDOW])

    if cache and order_by is None:
        error_task = _task(shipped, plan, None, None, cores, KIND_ERROR)
        known = known_late_and_errors(df, pipe, plan, error_task)
        if known is not None:
            # Late and error rows follow from the input: the windows job is the only
            # run of the pipeline, and nothing needs persisting.
            return AggregateResult._lazy(windows_job(), known)
    if not cache:

        def late_and_errors() -> tuple[Any, Any]:
            full = parted(df)
            late, errors = (
                map_in_arrow(
                    full,
                    _task(shipped, plan, order_by, batch_rows, cores, kind),
                    plan.single_spark[kind],
                )
                for kind in (KIND_LATE, KIND_ERROR)
            )
            return late, errors

        return AggregateResult._lazy(windows_job(), late_and_errors)
    packed = size is None or size >= PACK_FROM_BYTES
    task = _task(shipped, plan, order_by, batch_rows, cores, packed=packed)
    combined = map_in_arrow(parted(df), task, packed_spark() if packed else plan.combined_spark)
    combined = combined.persist(storage_level or StorageLevel.MEMORY_AND_DISK)
    split = split_packed(plan, combined) if packed else plan.split(combined)
    return AggregateResult(*split, combined)
