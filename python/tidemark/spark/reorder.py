"""Event-time reordering on Spark: ``reorder`` (batch) and ``ReorderStream``
(Structured Streaming, buffer kept across micro-batches).

Both run a :class:`tidemark.Reorder` per Spark partition through ``mapInArrow``: rows
come out in event-time order within each partition (``partition_by`` routes rows,
e.g. by device, so that each device's rows are ordered together). Like
``aggregate``, one Spark job computes released, late and error rows; the driver
persists that result once and splits it with projections.

>>> res = tidemark.spark.reorder(df, tm.Reorder("ts", late_tolerance="2s"),  # doctest: +SKIP
...                              partition_by=["device"])
>>> res.rows.show()                                                         # doctest: +SKIP

Streaming (exactly-once buffer state, the same state store as ``StreamProcessor``):

>>> rs = tidemark.spark.ReorderStream(tm.Reorder("ts", late_tolerance="2s"),  # doctest: +SKIP
...     state_location="/chk/reorder", num_partitions=4,
...     sink=lambda rows_df, batch_id: rows_df.write.mode("overwrite").parquet(
...         f"/out/ordered/batch={batch_id}"))
>>> stream_df.writeStream.foreachBatch(rs).start()                         # doctest: +SKIP

Each micro-batch runs as ``StreamProcessor``'s do, through the same task and the core's
one call (``_native.MicroBatch``): each state partition ``p`` restores its buffer from
version ``b-1``, takes its rows as one arrival unit, writes version ``b`` and its
report, and emits what its watermark released; the driver combines the reports (the
stream's watermark is the least of the buffers'). A replayed batch restores ``b-1``
again and produces the same rows. Where it runs follows ``StreamProcessor``'s rules: a
small micro-batch in the driver (``on_driver``: no Python worker), or in one task that
routes its rows itself (no shuffle), a large one in one task per state partition.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from tidemark import _native
from tidemark.errors import ConfigError
from tidemark.reorder import Reorder
from tidemark.spark._args import (
    column,
    map_in_arrow,
    require_args,
    require_batch,
    spark_hash_matches,
)
from tidemark.spark._codec import (
    OutputCodec,
    arrow_schema_of,
    concat_input,
    session_arrow_settings,
)
from tidemark.spark._driver import BatchRun, MicroBatchDriver, Sink
from tidemark.spark._layout import Layout, Options, Stats, place
from tidemark.spark._records import ReorderRecord
from tidemark.spark._sizing import cores_of, estimated_bytes
from tidemark.spark._stream_task import Shipped, StreamTask, driver_threads

__all__ = ["ReorderResult", "ReorderStream", "reorder"]


@dataclass
class ReorderResult:
    """Released rows (in event-time order within each partition), late rows and
    error rows, computed by one Spark job. Call :meth:`unpersist` when done."""

    rows: Any
    late: Any
    errors: Any
    combined: Any

    def unpersist(self) -> None:
        """Frees the cached result."""
        self.combined.unpersist()


def _partitioned(df: Any, n: int, partition_by: list[str] | None) -> Any:
    if not partition_by:
        return df.repartition(n)
    return df.repartition(n, *[column(c) for c in partition_by])


def _check_columns(r: Reorder, df: Any, partition_by: list[str] | None) -> None:
    from tidemark._arrow import require_column

    names = df.schema.fieldNames()
    require_column(names, r.event_time)
    missing = [c for c in partition_by or [] if c not in names]
    if missing:
        raise ConfigError(f"partition_by column(s) {missing} are not columns of the DataFrame")


def reorder(
    df: Any,
    r: Reorder,
    *,
    partition_by: list[str] | None = None,
    num_partitions: int | None = None,
    sort_within: str | None = None,
    batch_rows: int | None = None,
    storage_level: Any = None,
) -> ReorderResult:
    """Reorders a batch DataFrame per Spark partition.

    Each partition runs a fresh copy of ``r``: its Arrow batches arrive in the order
    Spark delivers them (``sort_within``: sort each partition by this arrival column
    first), rows are released in event-time order behind the watermark, rows that
    arrive behind it are late, and the rest is released by a final flush.

    Parameters
    ----------
    df : pyspark.sql.DataFrame
        The input.
    r : Reorder
        The operator configuration (its buffered rows, if any, are not used).
    partition_by : list of str, optional
        Route rows by these columns (all rows of a key in one partition, in order);
        default: keep Spark's partitioning.
    num_partitions : int, optional
        With ``partition_by``: the number of partitions (default
        ``spark.sql.shuffle.partitions``).
    sort_within : str, optional
        An arrival-order column to sort each partition by before reordering.
    batch_rows : int, optional
        Feed each partition to the operator ``batch_rows`` rows at a time (arrival
        units, as micro-batches would be); default: the Arrow batches Spark sends
        (``spark.sql.execution.arrow.maxRecordsPerBatch`` rows).
    storage_level : pyspark.StorageLevel, optional
        How the combined result is persisted (default: memory and disk).
    """
    from pyspark import StorageLevel

    require_batch(df, "reorder()", "a tidemark.spark.ReorderStream")
    require_args(
        "reorder()", ("r", r, Reorder), {"num_partitions": num_partitions, "batch_rows": batch_rows}
    )
    _check_columns(r, df, partition_by)
    spark = df.sparkSession
    tz, large = session_arrow_settings(spark)
    plan = OutputCodec.rows(df.schema, tz, large)
    input_arrow = arrow_schema_of(df.schema, tz, large)
    template = r.restore(None)

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        op = template.restore(None)
        units: Iterator[Any] = iter(batches)
        if batch_rows is not None:
            table = concat_input(batches, input_arrow)
            units = (table.slice(i, batch_rows) for i in range(0, table.num_rows, batch_rows))
        for unit in units:
            if unit.num_rows:
                yield from plan.encode(op.process(unit))
        yield from plan.encode(op.flush())

    parted = df
    if partition_by:
        n = num_partitions or int(spark.conf.get("spark.sql.shuffle.partitions"))
        parted = _partitioned(df, n, partition_by)
    if sort_within is not None:
        parted = parted.sortWithinPartitions(column(sort_within))
    combined = map_in_arrow(parted, run, plan.combined_spark).persist(
        storage_level or StorageLevel.MEMORY_AND_DISK
    )
    rows, late, errors = plan.split(combined)
    return ReorderResult(rows, late, errors, combined)


@dataclass(kw_only=True)
class _ReorderRun(BatchRun):
    """A reorder batch's run: its record (what it restores, where it runs)."""

    record: ReorderRecord


class ReorderStream(MicroBatchDriver):
    """A ``foreachBatch`` function that reorders a stream with exactly-once buffers.

    Parameters
    ----------
    r : Reorder
        The operator configuration.
    state_location : str or os.PathLike
        Directory (or pyarrow filesystem URI) for the buffers, one file per state
        partition and batch.
    num_partitions : int
        State partitions (fixed for the life of the state location).
    sink, late_sink, error_sink : callable, optional
        ``f(df, batch_id)`` for released, late and error rows of every micro-batch. A
        ``late_sink`` needs a reorder built with ``late="side_output"`` (its default,
        ``"drop"``, counts late rows and keeps none: a :class:`ConfigError`).
    arrow_sinks : bool
        ``True``: the sinks get each output as a ``pyarrow.Table`` instead of a Spark
        DataFrame: the table ``toArrow()`` of that DataFrame gives (timestamps in UTC,
        ``large_string`` under ``useLargeVarTypes``, every column nullable). A
        micro-batch run in the driver hands them the rows it released, without
        sending them to the JVM and back; one run in Spark tasks hands them
        ``toArrow()`` of the output. :meth:`flush` then returns a table too. Default
        ``False`` (as ``StreamProcessor``'s ``arrow_sinks``).
    partition_by : list of str, optional
        Route rows to state partitions by these columns (default: round-robin).
    retention, start_fresh
        As ``StreamProcessor``'s: the buffers' versions kept per partition (at least
        2: the last batch must be replayable); ``start_fresh=True`` starts empty where
        another query (another checkpoint location) left state, rather than raising
        :class:`StateCorruptedError` (this query's own state is never discarded).
    shuffle : bool, optional
        ``True``: rows are shuffled to their state partitions, one task each.
        ``False``: never; one task (or the driver, see ``on_driver``) runs every
        state partition. Default: as ``StreamProcessor``'s (a shuffle only for a
        micro-batch Spark estimates above ``SINGLE_TASK_BYTES`` on 2 cores). The
        released rows are the same either way.
    on_driver : bool, optional
        Whether a micro-batch runs in the driver's process instead of Spark tasks:
        its rows come back as Arrow (``df.toArrow()``), the core routes them to the
        state partitions by Spark's hash of ``partition_by`` (as the shuffle would),
        restores, updates and writes each buffer as a task would, and the sinks get
        local DataFrames. This skips the Python workers. Default: with ``arrow_sinks``,
        a micro-batch that Spark estimates at most ``ON_DRIVER_BYTES`` (8 MiB; the
        driver holds it in memory); without, none (a local DataFrame of every released
        row costs more than a task's output); a micro-batch not run in the driver runs
        in one task that routes its rows the same way (up to ``SINGLE_TASK_BYTES``: no
        shuffle), else in one task per state partition. ``True``: every micro-batch.
        ``False``: never. With ``partition_by``, the
        driver and one task route only columns of the types ``StreamProcessor``'s
        ``shuffle`` lists (each key then lands where Spark's shuffle puts it:
        buffers, outputs and replays are the same in every layout). Without it, the
        driver and one task deal the rows out in turn (row ``i`` to state partition
        ``i mod num_partitions``) and a shuffle deals each Spark partition's rows in
        turn: a replayed micro-batch runs where its first run did (recorded with the
        batch), so that it releases the same rows. A :meth:`flush` runs in the driver
        with ``True``, or by default after a micro-batch that did. In the driver, a
        micro-batch's output is one local DataFrame holding the state partitions one
        after the other: each ``partition_by`` key's rows are in event-time order in
        every Spark partition of it, and ``collect()`` returns each state partition's
        rows in event-time order.

    Attributes
    ----------
    last_progress : dict or None
        The last batch, set once it is done: ``batch_id``, its ``input_rows``,
        ``released_rows``, ``late_rows`` (dropped or sent to ``late_sink``) and
        ``error_rows``; the buffer after it, ``buffered_rows`` and ``buffer_bytes``
        (summed over state partitions); the stream's ``watermark`` (epoch
        microseconds); and ``layout``, where it ran: ``"driver"``, ``"one task"``
        or ``"shuffled"``. Counted by the batch's own job, and recorded in
        ``state_location``: see :meth:`progress`.
    """

    def __init__(
        self,
        r: Reorder,
        state_location: str | os.PathLike[str],
        num_partitions: int = 4,
        sink: Sink | None = None,
        late_sink: Sink | None = None,
        error_sink: Sink | None = None,
        *,
        partition_by: list[str] | None = None,
        retention: int = 3,
        start_fresh: bool = False,
        on_driver: bool | None = None,
        arrow_sinks: bool = False,
        shuffle: bool | None = None,
    ) -> None:
        require_args(
            "ReorderStream()",
            ("r", r, Reorder),
            {"num_partitions": num_partitions},
            {"sink": sink, "late_sink": late_sink, "error_sink": error_sink},
        )
        self.template = r.restore(None)
        self.partition_by = partition_by
        self.shuffle = shuffle
        sinks = (sink, late_sink, error_sink)
        self._init_driver(
            state_location, num_partitions, sinks, retention, start_fresh, on_driver, arrow_sinks
        )

    RECORD = ReorderRecord

    def _fingerprint(self) -> int | str:
        return self.template.fingerprint

    def _mismatch(self, meta: dict[str, Any], want: dict[str, Any]) -> str:
        return (
            f"written with {meta}, this stream is {want} (a reorder buffer keeps its "
            "configuration and partition count)"
        )

    def _replayed(self, batch_id: int, flush: bool) -> tuple[ReorderRecord | None, int | None]:
        """The record of this batch's earlier run, if any, and the batch it restores
        (a replay restores what its first run did)."""
        rec: ReorderRecord | None = self.store.replayed(batch_id, flush, self.start_fresh)
        if rec is not None:
            return rec, rec.prev_batch
        done = self.store.finished_ids(before=batch_id)
        if not done:
            self.store.start(batch_id, self.start_fresh)
        return None, done[-1] if done else None

    def _options(self) -> Options:
        # A reorder's output is every row it takes: in the driver, its sinks' DataFrames
        # would carry them back to the JVM, which one task's output does not need. So by
        # default the driver runs a micro-batch only for Arrow sinks.
        on_driver = self.on_driver
        if on_driver is None and not self.arrow_sinks:
            on_driver = False
        return Options(self.num_partitions, shuffle=self.shuffle, on_driver=on_driver)

    def _stats(self, df: Any, flush: bool, pinned: str | None = None) -> Stats:
        """The batch as measured for the layout: a flush reads no rows. A replayed batch
        whose rows are dealt out in turn (no ``partition_by``, several state
        partitions) runs where its first run did (``pinned``): Spark's shuffle deals
        them otherwise than the driver and one task."""
        if flush:
            return Stats(kind="flush")
        by = self.partition_by
        size = estimated_bytes(df)
        routable = self.num_partitions == 1 or not by or spark_hash_matches(df.schema, by)
        return Stats(
            size=size, guess=size, cores=cores_of(df.sparkSession), routable=routable, pinned=pinned
        )

    def _placement(self, df: Any, flush: bool, pinned: str | None = None) -> Layout:
        """Where the batch runs (the rules of ``tidemark.spark._layout``, as for
        ``StreamProcessor``; see ``on_driver``)."""
        return place(self._stats(df, flush, pinned), self._history, self._options())

    def _begin(
        self, df: Any, batch_id: int, flush: bool, schema: Any, plan: Any = None
    ) -> _ReorderRun:
        self._check_meta()
        _check_columns(self.template, df, self.partition_by)
        replayed, prev = self._replayed(batch_id, flush)
        dealt = not self.partition_by and self.num_partitions > 1 and not flush
        pinned = replayed.layout if replayed is not None and dealt else None
        stats = self._stats(df, flush, pinned)
        placed = place(stats, self._history, self._options())
        record = ReorderRecord(batch_id=batch_id, prev_batch=prev, flush=flush, layout=placed.where)
        if replayed is None:
            self.store.write_record(record)
        tz, large = session_arrow_settings(df.sparkSession)
        codec = OutputCodec.rows(df.schema, tz, large)
        token = uuid.uuid4().hex
        task = StreamTask(
            shipped=Shipped(self.template),
            codec=codec,
            store=self.store,
            batch_id=batch_id,
            prev_batch=prev,
            retention=self.retention,
            token=token,
            num_partitions=self.num_partitions,
            flush=flush,
            windows_only=not flush and self.late_sink is None and self.error_sink is None,
            untagged=placed.routes,
            threads=driver_threads() if placed.driver else 1,
            keys=tuple(self.partition_by or ()),
        )
        return _ReorderRun(
            stats=stats,
            placed=placed,
            layout=placed.where,
            record=record,
            task=task,
        )

    def _route(self) -> tuple[list[str], bool]:
        return list(self.partition_by or []), True

    def _finish(self, run: BatchRun) -> dict[str, Any]:
        assert isinstance(run, _ReorderRun)
        config = self.template._config
        summary = self._summary(
            run, lambda got: _native.summarize_batch(config, got, run.task.token, None, 0)
        )
        run.record.done, run.record.released = True, summary["watermark"]
        return {"batch_id": run.batch_id, **summary, "layout": run.layout}

    def flush(self, spark: Any, schema: Any, batch_id: int | None = None) -> Any:
        """End of input: releases every buffered row, as batch ``batch_id`` (default:
        one after the last, or the last again if it was a flush or did not finish),
        sends them to the sink and returns them (persisted; a local DataFrame when
        the flush runs in the driver, see ``on_driver``; a table with
        ``arrow_sinks``)."""
        batch_id = self._flush_batch_id(batch_id)
        rows, _, _ = self._run(spark.createDataFrame([], schema), batch_id, flush=True)
        return rows

    def watermark(self) -> int | None:
        """The stream's watermark after the last finished batch (minimum over
        partitions): a batch that did not finish has none yet."""
        for v in reversed(self.store.record_ids()):
            rec: ReorderRecord | None = self.store.read_record(v)
            if rec is not None and rec.finished:
                return rec.released
        return None
