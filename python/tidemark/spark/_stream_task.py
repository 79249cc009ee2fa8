"""A micro-batch's task, of ``StreamProcessor`` and ``ReorderStream`` alike: what runs
for its state partitions, in a Spark task or in the driver (:class:`StreamTask`), and
the rows' way to them (tags and placeholders for a shuffle, or routing by Spark's hash
in one task). The core runs the batch over the partitions (``_native.MicroBatch``:
threads, the combined watermark, a quiet batch's calls without rows; a reorder's
buffers) and reports each partition's progress, which the driver combines
(``_native.summarize_batch``).
"""

from __future__ import annotations

import base64
import functools
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from tidemark import _native
from tidemark.event_time import apply_user_parser
from tidemark.operator import Output
from tidemark.pipeline import Pipeline
from tidemark.reorder import Reorder
from tidemark.spark._args import ShippedPipeline, quoted
from tidemark.spark._codec import (
    KIND_ERROR,
    KIND_LATE,
    KIND_WINDOW,
    OutputCodec,
    concat_input,
)
from tidemark.spark._preagg import WEIGHT
from tidemark.spark._records import StreamRecord
from tidemark.spark.state import StateStore

# The outputs, in the order the sinks and run_on_driver give them.
KINDS = (KIND_WINDOW, KIND_LATE, KIND_ERROR)

#: A quiet micro-batch (no rows: see :func:`heartbeat`) runs calls without rows until one
#: changes nothing (the windows its watermark closed are out, and the ones inputs gone
#: idle released), at most this many (the core's ``SETTLE_CALLS``).
SETTLE_CALLS = _native.SETTLE_CALLS

# The column that carries each row's state partition into the task (see tags).
SP = "__tm_state_partition"


@functools.lru_cache(maxsize=32)
def tags(n: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Per state partition ``p``: the tag of its rows and the tag of its placeholder
    row, two int values that Spark's hash partitioning (``repartition(n, tag)``)
    sends to Spark partition ``p`` (the core's ``spark_tags``).

    Every row carries its state partition as data, and every state partition gets
    one placeholder row, so a task learns which state partitions it holds from its
    rows, whatever Spark does to the partitioning afterwards (a sink that coalesces
    the output runs several state partitions in one task; adaptive execution may
    merge shuffle partitions), and a state partition with no rows still runs."""
    data, placeholder = _native.spark_tags(n)
    return tuple(data), tuple(placeholder)


def pick_sql(values: tuple[int, ...], index_sql: str) -> str:
    """SQL for ``values[index]`` (``index_sql`` counts from 1)."""
    return f"element_at(array({', '.join(map(str, values))}), CAST({index_sql} AS INT))"


def placeholder_rows(spark: Any, n: int, slices: int) -> Any:
    """One placeholder row per state partition (see :func:`tags`), in ``slices``
    Spark partitions: built once per session and reused by every micro-batch (saving
    its driver-to-JVM calls). ``foreachBatch`` hands each micro-batch a new Python
    session object over the query's one JVM session, so the cache is keyed by that
    JVM session (two calls: its identity hash, then equality with the cached one's):
    a DataFrame of another session (another query's, or the one ``flush`` is called
    with) would run under that session's settings (its time zone, its Arrow string
    types). Under Spark Connect, which has no JVM handle, by the session."""
    jvm_session = getattr(spark, "_jsparkSession", None)
    if jvm_session is None:
        key: tuple[Any, ...] = (spark, n, slices)
    else:
        key = (jvm_session.hashCode(), n, slices)
    got = _PLACEHOLDERS.get(key)
    if got is not None and (jvm_session is None or got[0].equals(jvm_session)):
        return got[1]
    if len(_PLACEHOLDERS) >= 16:
        _PLACEHOLDERS.clear()  # a long-lived driver that keeps starting sessions
    _, placeholder = tags(n)
    ph_tag = f"{pick_sql(placeholder, 'id + 1')} AS {quoted(SP)}"
    df = spark.range(0, n, 1, slices).selectExpr(ph_tag)
    _PLACEHOLDERS[key] = (jvm_session, df)
    return df


_PLACEHOLDERS: dict[tuple[Any, ...], tuple[Any, Any]] = {}


def tagged(
    df: Any,
    keys: list[str],
    n: int,
    flush: bool,
    shuffle: bool = True,
    columns: list[str] | None = None,
    untagged: bool = False,
    deal: bool = False,
) -> Any:
    """``df``'s rows, each tagged with its state partition (Spark's hash of the keys,
    as ``repartition(n, *keys)``; without keys, state partition 0, or with ``deal`` each
    Spark partition's rows in turn), and one placeholder row per state partition,
    repartitioned so that Spark partition ``p`` holds state partition ``p``; without
    ``shuffle``, coalesced into one Spark partition instead (one task runs every
    state partition, and the micro-batch costs no shuffle stage). ``columns``: keep
    only these of ``df``'s columns (default: all). For a flush, ``df`` is ignored:
    the placeholders alone, with no shuffle (and a plan whose first run costs less
    JVM warm-up): one per Spark partition with ``shuffle``, else all in one.

    ``untagged`` (without ``shuffle``): the rows alone, coalesced into one Spark
    partition; the task routes them itself (see :class:`StreamTask`) and runs every state
    partition. ``coalesce(1)`` gives one task even for an empty input.

    Built from SQL expressions: a handful of driver-to-JVM calls per micro-batch
    (one per column function costs tens of milliseconds a batch)."""
    data, _ = tags(n)
    spark = df.sparkSession
    if flush:
        return placeholder_rows(spark, n, n if shuffle else 1)
    kept = ["*"] if columns is None else [quoted(c) for c in columns]
    if untagged and not shuffle:
        whole = columns is None or columns == df.columns
        return (df if whole else df.selectExpr(*kept)).coalesce(1)
    ph = placeholder_rows(spark, n, 1)
    sp = f"pmod(hash({', '.join(map(quoted, keys))}), {n}) + 1" if keys else "1"
    if not keys and deal:
        # The id counts a Spark partition's rows from its partition's offset: the same
        # tags whenever the same input partitions are read again.
        sp = f"pmod(monotonically_increasing_id(), {n}) + 1"
    rows = df.selectExpr(*kept, f"{pick_sql(data, sp)} AS {quoted(SP)}")
    both = rows.unionByName(ph, allowMissingColumns=True)
    return both.repartition(n, SP) if shuffle else both.coalesce(1)


@dataclass(frozen=True)
class Shipped:
    """An operator that travels inside the task's closure as it is (a reorder)."""

    op: Reorder

    def get(self) -> Reorder:
        return self.op


@dataclass(frozen=True)
class StreamTask:
    """The task over a micro-batch's rows (run by Spark through ``mapInArrow``, or by
    the driver itself: see :func:`run_on_driver`), of a pipeline (``shipped``: a
    :class:`~tidemark.spark._args.ShippedPipeline`) or of a reorder (a
    :class:`Shipped`; its state partitions are its buffers). It holds the state partitions whose
    tags its rows carry (see :func:`tagged`), or, ``untagged``, every state partition;
    the core runs the batch over them (``_native.MicroBatch``: each restored from
    version ``prev_batch``, its rows processed as one arrival unit, or flushed; windows
    closed on the watermark combined over every state partition where the task holds
    them all, else on the watermark the batch began with, its ``record``'s). The task writes each
    partition's version ``batch_id`` and its report (tagged with the ``token`` of the
    driver's run, for the driver to combine) and emits the combined result (windows,
    late rows, error rows) or, with ``windows_only``, the windows alone in their own
    schema."""

    shipped: ShippedPipeline | Shipped
    codec: OutputCodec
    store: StateStore
    batch_id: int
    #: The version the state partitions restore (``None``: they start empty).
    prev_batch: int | None
    retention: int
    token: str
    num_partitions: int
    #: End of input: every state partition flushes (reads no rows).
    flush: bool = False
    windows_only: bool = False
    #: The task holds every row of the batch, without tags, and runs every state
    #: partition: the core routes the rows by Spark's hash of the keys, which equals
    #: Spark's ``hash()`` for the key types ``spark_hash_matches`` admits, so a key lands
    #: in the state partition a shuffled batch gives it.
    untagged: bool = False
    #: The driver's run, where no Spark task holds a core: up to that many state
    #: partitions at once (threads of the core's call).
    threads: int = 1
    #: A pipeline's batch as the driver began it (``None``: a reorder's, which needs
    #: none): its watermark and event time, the clock's reading (idleness on the
    #: clock), the scope's state, the source's partitions, a new stream's quartiles.
    record: StreamRecord | None = None
    #: Applied to the task's rows before the pipeline sees them (raw rows as folds:
    #: see :meth:`~tidemark.spark._preagg.Preaggregation.lift`).
    lift: Callable[[pa.Table], pa.Table] | None = None
    #: A quiet micro-batch (every state partition, no rows): calls without rows
    #: follow the first until one changes nothing (the core's ``SETTLE_CALLS``).
    settle: bool = False
    #: The record's clock is the wall clock: event times more than ``max_ahead`` past
    #: it come from the future (the core's bounds on event times).
    wall_clock: bool = False
    #: A reorder's routing columns (``partition_by``; none: rows dealt out in turn).
    keys: tuple[str, ...] = ()

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        pipe = self.shipped.get()
        n = self.num_partitions
        tag = None
        if self.untagged:
            table = self._lifted(concat_input(batches, self.codec.input_arrow))  # a flush: none
            held = list(range(n))
        else:
            collected = list(batches)
            if not collected:
                return
            table, held = held_partitions(pa.Table.from_batches(collected), n, parses(pipe))
            if self.flush or self.settle:
                # The placeholders alone (see tagged): no rows.
                table = self.codec.input_arrow.empty_table()
            else:
                tag = SP
            table = self._lifted(table)
        results = self._micro_batch(pipe, tag).run(
            table, [self._held(p) for p in held], parsed_times(pipe, table)
        )
        for p, tables, snapshot, report in results:
            out = Output(*tables)
            if self.windows_only:
                yield from self.codec.encode_one(out, KIND_WINDOW)
            else:
                yield from self.codec.encode(out)
            self.store.write_snapshot(p, self.batch_id, snapshot, self.retention)
            self.store.write_progress(p, self.batch_id, report, self.retention)

    def _lifted(self, table: pa.Table) -> pa.Table:
        return table if self.lift is None else self.lift(table)

    def _held(self, p: int) -> tuple[int, bytes | None, str]:
        """State partition ``p`` as the batch begins: its snapshot of version
        ``prev_batch`` (a missing one is a :class:`StateCorruptedError` naming the file)
        and the file's name for the core's errors."""
        store, version = self.store, self.prev_batch
        state = store.snapshot_to_restore(p, version)
        return p, state, store.path(store.snapshot_file(p, version))

    def _micro_batch(self, pipe: Pipeline | Reorder, tag: str | None) -> Any:
        """The core's run of this batch; ``tag``: the column of the rows' state
        partition tags (``None``: the rows are routed)."""
        lk = pipe.lookup if isinstance(pipe, Pipeline) else None
        rec = self.record or StreamRecord(batch_id=self.batch_id)
        return _native.MicroBatch(
            pipe._config,
            self.num_partitions,
            tag_column=tag,
            watermark=rec.watermark,
            time=rec.time,
            clock_ms=rec.clock_ms,
            wall_clock=self.wall_clock,
            quartiles=rec.quartiles,
            scope=None if rec.scope is None else base64.b64decode(rec.scope),
            source=rec.source,
            flush=self.flush,
            settle=self.settle,
            threads=self.threads,
            weight=WEIGHT,
            lookup=None if lk is None else lk.args,
            run=self.token,
            keys=list(self.keys),
        )


def held_partitions(table: pa.Table, n: int, data_only: bool) -> tuple[pa.Table, list[int]]:
    """The state partitions whose tags (data or placeholder: see :func:`tags`) the rows
    carry; with ``data_only``, the rows without the placeholders (a user parser reads
    data rows alone)."""
    import pyarrow.compute as pc

    data_tags, placeholder_tags = tags(n)
    partition_of = {v: p for ts in (data_tags, placeholder_tags) for p, v in enumerate(ts)}
    held = sorted({partition_of[v] for v in pc.unique(table.column(SP)).to_pylist()})
    if data_only:
        table = table.filter(pc.is_in(table.column(SP), pa.array(data_tags, pa.int32())))
    return table, held


def parses(pipe: Pipeline | Reorder) -> bool:
    """Whether a user parser reads the pipeline's (or reorder's) event times."""
    event = isinstance(pipe, Reorder) or pipe.time == "event"
    return pipe._parser is not None and event


def parsed_times(pipe: Pipeline | Reorder, table: pa.Table) -> pa.Array | None:
    """The event times a user parser reads from ``table`` (``None``: the core parses)."""
    if not parses(pipe) or table.num_rows == 0:
        return None
    assert pipe.event_time_type is not None and pipe._parser is not None
    parsed = apply_user_parser(pipe.event_time_type, pipe._parser, table.column(pipe.event_time))[0]
    return parsed.combine_chunks() if isinstance(parsed, pa.ChunkedArray) else parsed


def run_on_driver(
    df: Any,
    task: Any,
    plan: OutputCodec,
    columns: list[str] | None,
    windows_only: bool,
    flush: bool,
    kinds: list[int],
    as_arrow: bool = False,
    table: pa.Table | None = None,
) -> tuple[Any, Any, Any, str]:
    """Runs ``task`` (see :class:`StreamTask`, built ``untagged``) in this process over
    ``df``'s rows (``columns`` of them, or all), fetched as Arrow (a flush reads none);
    returns the windows, late and error rows as local DataFrames in the schemas
    :meth:`OutputCodec.split` gives them (``as_arrow``: as Arrow tables in the schemas of
    :meth:`OutputCodec.sink_arrow_schema`), for the outputs ``kinds`` (``None`` for the
    others), and how the rows were read: ``"files"``, ``"spark"`` or ``"none"``.
    ``windows_only``: the task emits the windows alone (see :class:`StreamTask`), else the
    combined result, split here in Arrow (no Spark plan per output).

    ``table``: the micro-batch's rows, read from its files (see ``read_files``);
    ``None``: fetched from Spark."""
    batches: list[pa.RecordBatch] = []
    read = "none"
    if not flush:
        read = "spark" if table is None else "files"
        if table is None:
            src = df if columns is None else df.selectExpr(*[quoted(c) for c in columns])
            table = src.toArrow()
            if plan.main_is_input and table.schema != plan.input_arrow:
                # toArrow hands timestamps in UTC where a task gets the session zone:
                # a reorder's buffers keep the types a task would give them.
                table = table.cast(plan.input_arrow)
        batches = table.to_batches()
    out = list(task(iter(batches)))
    if windows_only:
        tables = {KIND_WINDOW: pa.Table.from_batches(out, schema=plan.single_arrow[KIND_WINDOW])}
    else:
        tables = plan.split_arrow(pa.Table.from_batches(out, schema=plan.combined_arrow), kinds)
    if as_arrow:
        got = [tables[k].cast(plan.sink_arrow_schema(k)) if k in tables else None for k in KINDS]
        return got[0], got[1], got[2], read
    spark = df.sparkSession
    local = [
        spark.createDataFrame(tables[k], schema=plan.split_spark(k)) if k in kinds else None
        for k in KINDS
    ]
    return local[0], local[1], local[2], read


def driver_threads() -> int:
    """The cores this process may run on: the state partitions a micro-batch run in
    the driver processes at once (no Spark task of the batch holds a core then)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def batch_counts(
    batch_id: int, rec: StreamRecord, summary: dict[str, Any], layout: str, read: str
) -> dict[str, Any]:
    """A batch's row counts, summed over its state partitions' reports (``summary``:
    ``_native.summarize_batch``'s), where it ran (``layout``) and how its rows were read
    (``read``); with a ``LatenessReport``, the stream's ``lateness`` so far."""
    lateness = summary.get("lateness")
    return {
        "batch_id": batch_id,
        **{k: summary[k] for k in ("input_rows", "window_rows", "late_rows", "error_rows")},
        "watermark": rec.watermark,
        "next_watermark": rec.next_watermark,
        "layout": layout,
        "read": read,
        **({} if lateness is None else {"lateness": lateness}),
    }
