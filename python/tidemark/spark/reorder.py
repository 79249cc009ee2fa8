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

Each micro-batch: the task of state partition ``p`` restores its reorder buffer from
version ``b-1``, takes its rows as one arrival unit, writes version ``b``, and emits
what the watermark released. A replayed batch restores ``b-1`` again and produces the
same rows. A small micro-batch runs those steps in the driver instead, for every state
partition in turn (``ReorderStream(on_driver=...)``): no shuffle, no Python worker.
"""

from __future__ import annotations

import contextlib
import json
import os
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa

from tidemark.errors import ConfigError, StateCorruptedError
from tidemark.reorder import Reorder, ReorderOutput
from tidemark.route import HashRouter, Router
from tidemark.spark._args import (
    column,
    map_in_arrow,
    require_args,
    require_batch,
    spark_hash_matches,
)
from tidemark.spark._codec import (
    KIND_ERROR,
    KIND_LATE,
    KIND_WINDOW,
    OutputCodec,
    arrow_schema_of,
    concat_input,
    session_arrow_settings,
)
from tidemark.spark._driver import (
    BatchRun,
    MicroBatchDriver,
    Sink,
    exact_partitions,
)
from tidemark.spark._layout import Layout, Options, Stats, place
from tidemark.spark._records import ReorderRecord
from tidemark.spark._sizing import estimated_bytes
from tidemark.spark.state import StateStore, state_errors_surface

__all__ = ["ReorderResult", "ReorderStream", "reorder"]

#: A batch's counts, in the order of a state partition's progress (the buffer's
#: figures are after the batch).
COUNTS = (
    "input_rows",
    "released_rows",
    "late_rows",
    "error_rows",
    "buffered_rows",
    "buffer_bytes",
)


def progress_bytes(token: str, watermark: int | None, counts: list[int]) -> bytes:
    """A state partition's progress of a batch, as its task writes it to the store
    (``StateStore.write_progress``, the channel ``StreamProcessor``'s tasks report
    through): the driver's run ``token``, the partition's watermark after the batch
    and its :data:`COUNTS`."""
    doc = {"token": token, "watermark": watermark, "counts": dict(zip(COUNTS, counts, strict=True))}
    return json.dumps(doc).encode()


def read_progress(
    store: StateStore, n: int, batch_id: int, token: str
) -> dict[int, tuple[int | None, list[int]]] | None:
    """Each state partition's watermark and :data:`COUNTS` of this run of the batch
    (``token``), or ``None`` if one has not reported in this run."""
    got: dict[int, tuple[int | None, list[int]]] = {}
    for p in range(n):
        raw = store.read_progress(p, batch_id)
        doc = None if raw is None else json.loads(raw)
        if doc is None or doc.get("token") != token:
            return None
        got[p] = (doc["watermark"], [doc["counts"][c] for c in COUNTS])
    return got


def batch_counts(before: dict[str, Any], after: dict[str, Any]) -> list[int]:
    """A task's :data:`COUNTS` from its operator's metrics before and after the batch
    (the late count includes dropped rows)."""
    return [
        after["rows_in"] - before["rows_in"],
        after["rows_released"] - before["rows_released"],
        after["late_dropped_count"] - before["late_dropped_count"],
        after["rows_error"] - before["rows_error"],
        after["buffer_size"],
        after["buffer_bytes"],
    ]


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
    """A reorder batch's run: the version it restores, its input schema, and the
    token its state partitions report under (reports of an earlier, failed run of the
    batch are not this one's)."""

    record: ReorderRecord
    codec: OutputCodec
    prev: int | None
    input_arrow: pa.Schema
    token: str


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
    retention : int
        Versions kept per partition (at least 2, so the last batch can be replayed).
    start_fresh : bool
        Discard state another query left at ``state_location`` (one whose batches are
        not this query's: a new checkpoint location counts batch ids from 0 again)
        and start empty, instead of raising :class:`StateCorruptedError`. This
        query's own state, replays included, is never discarded.
    on_driver : bool, optional
        Whether a micro-batch runs in the driver's process instead of Spark tasks:
        its rows come back as Arrow (``df.toArrow()``), the driver routes them to
        the state partitions by Spark's hash of ``partition_by`` (as the shuffle
        would), restores, updates and writes each buffer as its task would, and the
        sinks get local DataFrames. This skips the shuffle and the Python workers.
        Default: a micro-batch that Spark estimates at most ``ON_DRIVER_BYTES``
        (8 MiB; the driver holds it in memory). ``True``: every micro-batch.
        ``False``: never. With ``partition_by``, either way only where its columns
        are of the types ``StreamProcessor``'s ``shuffle`` lists (the driver then
        routes each key where Spark's shuffle would: buffers, outputs and replays
        are the same either way). Without it, the driver deals the rows out in
        turn (row ``i`` to state partition ``i`` mod ``num_partitions``), which is
        not Spark's round-robin order: a replayed micro-batch runs where its first
        run did (recorded with the batch), so that it releases the same rows. A
        :meth:`flush` runs in the driver with ``True``, or by default after a
        micro-batch that did. In the driver, a micro-batch's output is one local DataFrame
        holding the state partitions one after the other: each ``partition_by``
        key's rows are in event-time order in every Spark partition of it, and
        ``collect()`` returns each state partition's rows in event-time order.

    Attributes
    ----------
    last_progress : dict or None
        The last batch, set once it is done: ``batch_id``, its ``input_rows``,
        ``released_rows``, ``late_rows`` (dropped or sent to ``late_sink``) and
        ``error_rows``; the buffer after it, ``buffered_rows`` and ``buffer_bytes``
        (summed over state partitions); the stream's ``watermark`` (epoch
        microseconds); and ``layout``, where it ran: ``"driver"`` or
        ``"shuffled"``. Counted by the batch's own job, and recorded in
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
    ) -> None:
        require_args(
            "ReorderStream()",
            ("r", r, Reorder),
            {"num_partitions": num_partitions},
            {"sink": sink, "late_sink": late_sink, "error_sink": error_sink},
        )
        self.template = r.restore(None)
        self.partition_by = partition_by
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

    def _prev_batch(
        self, batch_id: int, flush: bool, layout: str
    ) -> tuple[int | None, str, ReorderRecord]:
        """The batch to restore, where the batch runs, and its started record:
        ``layout``, except for a replayed batch with round-robin routing, which runs
        where its first run did (the driver and Spark deal rows out differently)."""
        rec: ReorderRecord | None = self.store.replayed(batch_id, flush, self.start_fresh)
        prev: int | None
        if rec is not None:
            prev = rec.prev_batch  # same inputs as the first run
            if self._round_robin and not flush and rec.layout in ("driver", "shuffled"):
                layout = rec.layout
        else:
            done = self.store.finished_ids(before=batch_id)
            if not done:
                self.store.start(batch_id, self.start_fresh)
            prev = done[-1] if done else None
        started = ReorderRecord(batch_id=batch_id, prev_batch=prev, flush=flush, layout=layout)
        if rec is None:
            self.store.write_record(started)
        return prev, layout, started

    @property
    def _round_robin(self) -> bool:
        """Rows go to state partitions in turn (no ``partition_by``, several)."""
        return not self.partition_by and self.num_partitions > 1

    def _placement(self, df: Any, flush: bool) -> tuple[Stats, Layout]:
        """The batch as measured, and where it runs (see ``on_driver``; the rules are
        ``tidemark.spark._layout``'s, with the driver or one task per state partition as
        the only places): a batch in this process only where it routes keyed rows as
        Spark's shuffle would (``partition_by`` columns tidemark hashes as Spark does),
        by default up to ``ON_DRIVER_BYTES``; a flush (no rows) with ``on_driver=True``,
        or by default after a batch that ran here."""
        by = self.partition_by
        if flush:
            stats = Stats(kind="flush")
        else:
            size = estimated_bytes(df)
            routable = self.num_partitions == 1 or not by or spark_hash_matches(df.schema, by)
            stats = Stats(size=size, guess=size, routable=routable)
        options = Options(self.num_partitions, shuffle=False, on_driver=self.on_driver)
        placed = place(stats, self._history, options)
        return stats, replace(placed, shuffled=not placed.driver)

    def _runs_on_driver(self, df: Any, flush: bool) -> bool:
        """Whether the batch runs in this process (see :meth:`_placement`)."""
        return self._placement(df, flush)[1].driver

    def _begin(
        self, df: Any, batch_id: int, flush: bool, schema: Any, plan: Any = None
    ) -> _ReorderRun:
        self._check_meta()
        _check_columns(self.template, df, self.partition_by)
        stats, placed = self._placement(df, flush)
        chosen = "driver" if placed.driver else "shuffled"
        prev, layout, record = self._prev_batch(batch_id, flush, chosen)
        tz, large = session_arrow_settings(df.sparkSession)
        return _ReorderRun(
            batch_id=batch_id,
            flush=flush,
            stats=stats,
            placed=replace(placed, driver=layout == "driver", shuffled=layout != "driver"),
            layout=layout,
            codec=OutputCodec.rows(df.schema, tz, large),
            record=record,
            prev=prev,
            input_arrow=arrow_schema_of(df.schema, tz, large),
            token=uuid.uuid4().hex,
        )

    def _execute(self, df: Any, run: BatchRun) -> tuple[Any, Any, Any]:
        from pyspark import StorageLevel

        assert isinstance(run, _ReorderRun)
        plan, prev, batch_id, flush = run.codec, run.prev, run.batch_id, run.flush
        template, store, retention, token = self.template, self.store, self.retention, run.token

        def one(p: int, table: pa.Table) -> ReorderOutput:
            """State partition ``p``'s work on its rows: restore version ``prev``,
            process (or flush), write version ``batch_id`` and its progress."""
            state = store.snapshot_to_restore(p, prev)
            with store.restoring(p, prev):
                op = template.restore(state)
            before = op.metrics()
            out = op.flush() if flush else op.process(table)
            store.write_snapshot(p, batch_id, op.snapshot(), retention)
            counts = batch_counts(before, op.metrics())
            report = progress_bytes(token, op.watermark, counts)
            store.write_progress(p, batch_id, report, retention)
            return out

        if run.driver:
            return self._run_on_driver(df, one, plan, run.input_arrow, flush)
        input_arrow = run.input_arrow

        def task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            from pyspark import TaskContext

            # The state partition is the task's Spark partition (see _sending).
            ctx = TaskContext.get()
            p = ctx.partitionId() if ctx is not None else 0
            yield from plan.encode(one(p, concat_input(batches, input_arrow)))

        # A flush reads no rows, but every state partition must run its task: one
        # row per partition (an empty input would run none under Spark Connect,
        # whose empty DataFrames are local relations the optimizer prunes).
        n, spark = self.num_partitions, df.sparkSession
        source = spark.range(0, n, 1, n) if flush else _partitioned(df, n, self.partition_by)
        combined = map_in_arrow(source, task, plan.combined_spark)
        run.persisted = combined.persist(StorageLevel.MEMORY_AND_DISK)
        return plan.split(combined)

    @contextlib.contextmanager
    def _sending(self, run: BatchRun) -> Iterator[None]:
        # One task per state partition, the Spark partition being the state
        # partition: adaptive execution must not merge them.
        job = run.persisted
        exact = contextlib.nullcontext() if job is None else exact_partitions(job.sparkSession)
        with exact, state_errors_surface():
            yield

    def _finish(self, run: BatchRun) -> dict[str, Any]:
        assert isinstance(run, _ReorderRun)
        n, store = self.num_partitions, self.store
        progress = read_progress(store, n, run.batch_id, run.token)
        if progress is None and run.persisted is not None:
            # The sinks did not run every task (no sink, or one that read part of
            # its output): run them (a task that ran already gives the same again).
            run.persisted.count()
            progress = read_progress(store, n, run.batch_id, run.token)
        if progress is None:
            raise StateCorruptedError(
                f"batch {run.batch_id}: a state partition wrote no progress under "
                f"{store.path('partitions')}"
            )
        marks = [w for w, _ in progress.values() if w is not None]
        # The stream's watermark: every partition has released up to it. A partition
        # that never had rows holds nothing and has released nothing to wait for (its
        # keys' rows, when they come, are judged by its own watermark).
        watermark = min(marks) if marks else None
        totals = [sum(c[i] for _, c in progress.values()) for i in range(len(COUNTS))]
        run.record.done, run.record.released = True, watermark
        return {
            "batch_id": run.batch_id,
            **dict(zip(COUNTS, totals, strict=True)),
            "watermark": watermark,
            "layout": run.layout,
        }

    def _run_on_driver(
        self,
        df: Any,
        one: Callable[[int, pa.Table], ReorderOutput],
        plan: OutputCodec,
        input_arrow: pa.Schema,
        flush: bool,
    ) -> tuple[Any, Any, Any]:
        """Runs every state partition in this process over ``df``'s rows, fetched as
        Arrow and routed by Spark's hash of ``partition_by``, or in turn without it (a
        flush reads none).
        Returns the released, late and error rows as local DataFrames (Arrow tables
        with ``arrow_sinks``), the state partitions one after the other (``None`` for
        an output no sink reads; a flush always returns its released rows)."""
        n = self.num_partitions
        shards = [input_arrow.empty_table()] * n
        if not flush:
            # toArrow hands timestamps in UTC where a task gets the session zone: the
            # buffers keep the types a task would give them.
            table = df.toArrow()
            if table.schema != input_arrow:
                table = table.cast(input_arrow)
            shards = [table]
            if n > 1 and self.partition_by:
                router = HashRouter(n, self.partition_by, hash="spark")
                shards = [pa.Table.from_batches([b]) for b in router.route(table)]
            elif n > 1:
                # Round robin: row i to state partition i mod n, so that every buffer
                # sees the whole batch's spread of event times, as Spark's round
                # robin gives it (not Spark's order: see _prev_batch).
                shards = [pa.Table.from_batches([b]) for b in Router.round_robin(n).route(table)]
        outs = [one(p, rows) for p, rows in enumerate(shards)]
        spark = df.sparkSession

        def local(tables: list[pa.Table], arrow: pa.Schema, schema: Any, sink: pa.Schema) -> Any:
            # Positional: an error table's reason column takes the plan's name.
            table = pa.concat_tables(
                [
                    pa.Table.from_arrays(t.columns, names=arrow.names).cast(arrow)
                    for t in tables
                    if t.num_rows
                ]
                or [arrow.empty_table()]
            )
            if self.arrow_sinks:
                return table.cast(sink)
            return spark.createDataFrame(table, schema=schema)

        schemas = {
            k: (plan.split_arrow_schema(k), plan.split_spark(k), plan.sink_arrow_schema(k))
            for k in (KIND_WINDOW, KIND_LATE, KIND_ERROR)
        }
        rows = late = errors = None
        if self.sink is not None or flush:
            rows = local([o.rows for o in outs], *schemas[KIND_WINDOW])
        if self.late_sink is not None:
            late = local([o.late for o in outs], *schemas[KIND_LATE])
        if self.error_sink is not None:
            errors = local([o.errors for o in outs], *schemas[KIND_ERROR])
        return rows, late, errors

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
