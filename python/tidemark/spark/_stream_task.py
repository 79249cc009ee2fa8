"""A ``StreamProcessor`` micro-batch's task: what runs for its state partitions, in a
Spark task or in the driver (:class:`StreamTask`), the rows' way to them (tags and
placeholders for a shuffle, or routing by Spark's hash in one task), the progress each
state partition reports, and a quiet micro-batch's calls without rows (:func:`settle`).
"""

from __future__ import annotations

import base64
import functools
import os
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from tidemark.clock import ManualClock
from tidemark.operator import Operator, Output, ScopeWatermark
from tidemark.pipeline import Pipeline
from tidemark.route import HashRouter
from tidemark.spark._args import ShippedPipeline, quoted, spark_context
from tidemark.spark._codec import (
    KIND_ERROR,
    KIND_LATE,
    KIND_WINDOW,
    OutputCodec,
    concat_input,
    to_arrow_schema,
)
from tidemark.spark._files import batch_files, read_batch_files
from tidemark.spark._preagg import WEIGHT
from tidemark.spark._records import StreamRecord
from tidemark.spark.state import StateStore
from tidemark.windows import Rows

# The outputs, in the order the sinks and run_on_driver give them.
KINDS = (KIND_WINDOW, KIND_LATE, KIND_ERROR)

# Progress rows a task reports, (state partition, kind, a, b) by kind:
P_TIMES = 0  # a: largest event time, b: largest event time of the on-time rows
P_PARTITION = 1  # a: source partition, b: its largest event time
P_OUTPUT = 2  # a: window rows, b: late rows
P_INPUT = 3  # a: error rows, b: input rows
P_KEYS = 4  # per key: a: minimum watermark over active keys, b: highest key watermark
P_READ = 5  # a: rows the task read (Spark's folds of the input rows, where folded)
P_SETTLED = 6  # a quiet batch's calls without rows: a: calls, b: 1 if the last changed nothing

#: A quiet micro-batch (no rows: see :func:`heartbeat`) runs calls without rows until one
#: changes nothing (the windows its watermark closed are out, and the ones inputs gone
#: idle released), at most this many.
SETTLE_CALLS = 8


def progress_rows(p: int, prog: dict[str, Any]) -> list[tuple[int, Any, Any, Any]]:
    """State partition ``p``'s progress (:meth:`Operator.progress`) as progress rows."""
    rows: list[tuple[int, Any, Any, Any]] = [
        (p, P_TIMES, prog["max_event_time"], prog["on_time_max"]),
        (p, P_KEYS, *prog["key_parts"]),
    ]
    rows += [(p, P_PARTITION, part, mx) for part, mx in prog["partition_max"]]
    return rows


def progress_dicts(rows: list[tuple[int, Any, Any, Any]]) -> list[dict[str, Any]]:
    """Progress rows back as one :meth:`Operator.progress` dict per state partition."""
    by: dict[int, dict[str, Any]] = {}
    for p, kind, a, b in rows:
        d = by.setdefault(
            p,
            {
                "max_event_time": None,
                "on_time_max": None,
                "partition_max": [],
                "key_global": None,
                "key_parts": (None, None),
            },
        )
        if kind == P_TIMES:
            d["max_event_time"], d["on_time_max"] = a, b
        elif kind == P_KEYS:
            d["key_parts"] = (a, b)
        elif kind == P_PARTITION:
            d["partition_max"].append((a, b))
    return list(by.values())


def scope_of(pipe: Pipeline, state: str | None, clock_ms: int) -> ScopeWatermark:
    """The scope watermark recorded before a batch (base64, ``None``: fresh), on the
    batch's clock reading."""
    raw = None if state is None else base64.b64decode(state)
    return ScopeWatermark(pipe, raw, clock=ManualClock(clock_ms))


# The column that carries each row's state partition into the task (see tags).
SP = "__tm_state_partition"


@functools.lru_cache(maxsize=32)
def tags(n: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Per state partition ``p``: the tag of its rows and the tag of its placeholder
    row, two int values that Spark's hash partitioning (``repartition(n, tag)``)
    sends to Spark partition ``p``.

    Every row carries its state partition as data, and every state partition gets
    one placeholder row, so a task learns which state partitions it holds from its
    rows, whatever Spark does to the partitioning afterwards (a sink that coalesces
    the output runs several state partitions in one task; adaptive execution may
    merge shuffle partitions), and a state partition with no rows still runs."""
    from tidemark import HashRouter

    data: dict[int, int] = {}
    placeholder: dict[int, int] = {}
    router = HashRouter(n, ["t"], hash="spark")
    start = 0
    while len(placeholder) < n:
        cand = pa.array(range(start, start + 4 * n + 64), pa.int32())
        ids = router.partition_ids(pa.record_batch({"t": cand}))
        for v, p in zip(cand.to_pylist(), ids.to_pylist(), strict=True):
            if p not in data:
                data[p] = v
            elif p not in placeholder:
                placeholder[p] = v
        start += len(cand)
    return tuple(data[p] for p in range(n)), tuple(placeholder[p] for p in range(n))


def pick_sql(values: tuple[int, ...], index_sql: str) -> str:
    """SQL for ``values[index]`` (``index_sql`` counts from 1)."""
    return f"element_at(array({', '.join(map(str, values))}), CAST({index_sql} AS INT))"


def placeholder_rows(spark: Any, n: int, slices: int) -> Any:
    """One placeholder row per state partition (see :func:`tags`), in ``slices``
    Spark partitions: built once per Spark application and reused by every
    micro-batch (saving its driver-to-JVM calls). ``foreachBatch`` hands each
    micro-batch a new session, so the cache is keyed by the SparkContext (a key by
    session would miss every time and keep the sessions alive); under Spark Connect,
    which has no SparkContext, by the session."""
    key = (spark_context(spark) or spark, n, slices)
    df = _PLACEHOLDERS.get(key)
    if df is None:
        if len(_PLACEHOLDERS) >= 16:
            _PLACEHOLDERS.clear()  # a long-lived driver that keeps starting Spark
        _, placeholder = tags(n)
        ph_tag = f"{pick_sql(placeholder, 'id + 1')} AS {quoted(SP)}"
        df = _PLACEHOLDERS[key] = spark.range(0, n, 1, slices).selectExpr(ph_tag)
    return df


_PLACEHOLDERS: dict[tuple[Any, int, int], Any] = {}


def tagged(
    df: Any,
    keys: list[str],
    n: int,
    flush: bool,
    shuffle: bool = True,
    columns: list[str] | None = None,
    untagged: bool = False,
) -> Any:
    """``df``'s rows, each tagged with its state partition (Spark's hash of the keys,
    as ``repartition(n, *keys)``), and one placeholder row per state partition,
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
    rows = df.selectExpr(*kept, f"{pick_sql(data, sp)} AS {quoted(SP)}")
    both = rows.unionByName(ph, allowMissingColumns=True)
    return both.repartition(n, SP) if shuffle else both.coalesce(1)


@dataclass(frozen=True)
class StreamTask:
    """The task over rows tagged by :func:`tagged` (run by Spark through
    ``mapInArrow``, or by the driver itself: see :func:`run_on_driver`). For every
    state partition among its rows it restores the operator from version
    ``prev_batch``, processes the partition's rows as one arrival unit (or flushes),
    writes version ``batch_id`` and its progress rows (tagged with the ``token`` of the
    driver's run, for the driver to read), and emits the combined result (windows, late
    rows, error rows) or, with ``windows_only``, the windows alone in their own schema.

    Windows close on the watermark combined over every state partition, as one
    operator would close them. A task that holds every state partition runs each call
    in two halves: every partition ingests its rows, the scope watermark (restored from
    ``scope_state``, the driver's record before the batch) combines their progress,
    then every partition closes what that passed. A task of one state partition among
    several (a shuffled batch) cannot see the others: under Spark's late rule it closes
    at the batch's starting ``watermark``, exactly as one operator; under the others on
    the highest watermark known not to exceed the combined one (the batch's starting
    ``watermark``; global scope: also its own), so a window may come one micro-batch
    later than from one operator, never twice, and late and error rows are the same."""

    shipped: ShippedPipeline
    codec: OutputCodec
    store: StateStore
    batch_id: int
    #: The version the state partitions restore (``None``: they start empty).
    prev_batch: int | None
    #: The watermark and the stream's event time the batch began with, and the
    #: batch's clock reading (idleness on the clock): the driver's record.
    watermark: int | None
    scope_time: int | None
    clock_ms: int
    retention: int
    token: str
    num_partitions: int
    #: End of input: every state partition flushes (reads no rows).
    flush: bool = False
    windows_only: bool = False
    #: The task holds every row of the batch, without tags, and runs every state
    #: partition: it routes the rows by tidemark's Spark hash of the keys, which equals
    #: Spark's ``hash()`` for the key types ``spark_hash_matches`` admits, so a key lands
    #: in the state partition a shuffled batch gives it.
    untagged: bool = False
    #: The driver's run, where no Spark task holds a core: up to that many state
    #: partitions at once (the Rust work releases the GIL); outputs in partition order.
    threads: int = 1
    scope_state: str | None = None
    #: Applied to the task's rows before the pipeline sees them (raw rows as folds:
    #: see :meth:`~tidemark.spark._preagg.Preaggregation.lift`).
    lift: Callable[[pa.Table], pa.Table] | None = None
    #: A quiet micro-batch (every state partition, no rows): calls without rows
    #: follow the first until one changes nothing (see :func:`settle_calls`).
    settle: bool = False

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        pipe = self.shipped.get()
        n = self.num_partitions
        if self.untagged:
            table = self._lifted(concat_input(batches, self.codec.input_arrow))  # a flush: none
            if self.threads < 2 or n < 2:
                shards = route(table, n, pipe.key) if n > 1 else [table]
                yield from self._every(pipe, shards, None)
                return
            with ThreadPoolExecutor(max_workers=min(self.threads, n)) as pool:
                shards = route(table, n, pipe.key, self.threads, pool)
                outs = list(self._every(pipe, shards, pool))
            yield from outs
            return
        collected = list(batches)
        if not collected:
            return
        data_tags, placeholder_tags = tags(n)
        partition_of = {v: p for ts in (data_tags, placeholder_tags) for p, v in enumerate(ts)}
        table = self._lifted(pa.Table.from_batches(collected))
        by_tag = rows_by_tag(table, SP)
        parts = sorted({partition_of[v] for v in by_tag})

        def rows_of(p: int) -> pa.Table:
            if self.flush or data_tags[p] not in by_tag:
                return self._lifted(self.codec.input_arrow.empty_table())
            return by_tag[data_tags[p]].drop_columns([SP])

        if len(parts) == n:
            # Every state partition's rows (and placeholder) in this one task.
            yield from self._every(pipe, [rows_of(p) for p in parts], None)
            return
        for p in parts:
            yield from self._one(pipe, p, rows_of(p))

    def _lifted(self, table: pa.Table) -> pa.Table:
        return table if self.lift is None else self.lift(table)

    def _restore(self, pipe: Pipeline, p: int) -> Operator:
        """State partition ``p``'s operator as the batch begins (see :func:`restore`)."""
        op = restore(pipe, self.store, p, self.prev_batch, self.clock_ms)
        if not isinstance(pipe.window, Rows):  # ROWS windows have no watermark
            # Before the stream has a watermark the combined one is the lowest: a
            # state partition must not close on its own view of the scope.
            op.set_external_watermark(self.watermark)
            op.set_external_time(self.scope_time)
        return op

    def _finish(
        self,
        p: int,
        op: Operator,
        out: Output,
        table: pa.Table,
        settled: tuple[int, bool] | None = None,
    ) -> Iterator[pa.RecordBatch]:
        """State partition ``p``'s outputs; its state and progress written."""
        if self.windows_only:
            yield from self.codec.encode_one(out, KIND_WINDOW)
        else:
            yield from self.codec.encode(out)
        store, b = self.store, self.batch_id
        store.write_snapshot(p, b, op.snapshot(), self.retention)
        rows = progress_rows(p, op.progress())
        rows.append((p, P_OUTPUT, out.windows.num_rows, weight(out.late)))
        rows.append((p, P_INPUT, weight(out.errors), weight(table)))
        rows.append((p, P_READ, table.num_rows, 0))
        if settled is not None:
            rows.append((p, P_SETTLED, settled[0], int(settled[1])))
        store.write_progress(p, b, {"token": self.token, "rows": rows}, self.retention)

    def _one(self, pipe: Pipeline, p: int, table: pa.Table) -> Iterator[pa.RecordBatch]:
        """State partition ``p`` alone (closed on the batch's starting watermark)."""
        op = self._restore(pipe, p)
        out = op.flush() if self.flush else op.process(table)
        yield from self._finish(p, op, out, table)

    def _every(self, pipe: Pipeline, shards: list[pa.Table], pool: Any) -> Iterator[pa.RecordBatch]:
        """Every state partition of the batch, closed on the combined watermark."""
        n = range(len(shards))
        if self.flush or isinstance(pipe.window, Rows):
            outs = pool_map(pool, lambda p: list(self._one(pipe, p, shards[p])), n)
            for out in outs:
                yield from out
            return

        def ingest(p: int) -> Operator:
            op = self._restore(pipe, p)
            op.ingest(shards[p])
            return op

        ops = pool_map(pool, ingest, n)
        scope = scope_of(pipe, self.scope_state, self.clock_ms)
        close = scope.advance([op.progress() for op in ops])
        results = pool_map(pool, functools.partial(_complete, ops, close), n)
        settled = None
        if self.settle:
            results, settled = settle_calls(
                ops, results, scope, self.watermark, close, shards, pool
            )
        outs = pool_map(
            pool, lambda p: list(self._finish(p, ops[p], results[p], shards[p], settled)), n
        )
        for out in outs:
            yield from out


def restore(
    pipe: Pipeline, store: StateStore, p: int, version: int | None, clock_ms: int
) -> Operator:
    """State partition ``p``'s operator restored from its snapshot ``version`` (``None``:
    a new one), on the batch's clock reading; a missing or damaged snapshot is a
    :class:`StateCorruptedError` naming the file."""
    state = store.snapshot_to_restore(p, version)
    with store.restoring(p, version):
        # A DataFrame has no row order: the windows need no sort.
        return pipe.operator(state=state, clock=ManualClock(clock_ms), ordered=False)


def settle_calls(
    ops: list[Operator],
    results: list[Output],
    scope: ScopeWatermark,
    start: int | None,
    close: int | None,
    shards: list[pa.Table],
    pool: Any,
) -> tuple[list[Output], tuple[int, bool]]:
    """A quiet micro-batch's calls without rows after its first (``results``, which
    closed on ``close``; the batch began with ``start``), over every state partition:
    each call begins with the watermark the one before reached, until one emits no
    window and moves no watermark, at most ``SETTLE_CALLS``. Returns each partition's
    outputs of all calls together, the calls made, and whether the last changed
    nothing (a next one would not either: no row, no new event time)."""
    calls, before = 1, start
    per_call = [results]
    while True:
        emitted = sum(o.windows.num_rows for o in per_call[-1])
        if emitted == 0 and close == before:
            settled = True
            break
        if calls >= SETTLE_CALLS:
            settled = False
            break
        before = close
        pool_map(pool, functools.partial(_call_again, ops, shards, before), range(len(ops)))
        close = scope.advance([op.progress() for op in ops])
        per_call.append(pool_map(pool, functools.partial(_complete, ops, close), range(len(ops))))
        calls += 1
    joined = [
        Output(*(pa.concat_tables([c[p][i] for c in per_call]) for i in range(3)))
        for p in range(len(ops))
    ]
    return joined, (calls, settled)


def _call_again(ops: list[Operator], shards: list[pa.Table], start: int | None, p: int) -> None:
    """State partition ``p``'s next call, beginning with the watermark ``start``."""
    ops[p].set_external_watermark(start)
    ops[p].ingest(shards[p])


def _complete(ops: list[Operator], close: int | None, p: int) -> Output:
    """State partition ``p``'s call, completed at ``close``."""
    return ops[p].complete(close)


def weight(table: pa.Table) -> int:
    """The input rows ``table``'s rows stand for: one each, or (Spark's folds, see
    ``preaggregate``) their :data:`~tidemark.spark._preagg.WEIGHT`."""
    if WEIGHT not in table.column_names:
        return int(table.num_rows)
    import pyarrow.compute as pc

    return int(pc.sum(table.column(WEIGHT)).as_py() or 0)


def rows_by_tag(table: pa.Table, column: str) -> dict[int, pa.Table]:
    """The rows of ``table`` grouped by the int value of ``column``, each group in input
    order: one stable sort and one ``take`` for the whole table (a filter per value
    would read every row once per state partition)."""
    import pyarrow.compute as pc

    tags = table.column(column)
    order = pc.sort_indices(tags)  # stable: equal tags keep their input order
    ordered = table.take(order)
    counts = pc.value_counts(ordered.column(column))
    out: dict[int, pa.Table] = {}
    start = 0
    for value, n in zip(
        counts.field("values").to_pylist(), counts.field("counts").to_pylist(), strict=True
    ):
        out[value] = ordered.slice(start, n)
        start += n
    return out


def pool_map(pool: Any, f: Callable[[int], Any], items: range) -> list[Any]:
    """``f`` over ``items`` in order: on ``pool``'s threads, or here (``None``)."""
    return list(map(f, items) if pool is None else pool.map(f, items))


def route(
    table: pa.Table, n: int, keys: list[str], threads: int = 1, pool: Any = None
) -> list[pa.Table]:
    """``table``'s rows per state partition, routed by Spark's hash of ``keys``; with
    ``threads`` and a ``pool``, a large table in that many slices at once (a router
    each: routing releases the GIL), each partition's rows kept in table order."""

    def route_slice(rows: pa.Table) -> list[pa.RecordBatch]:
        return HashRouter(n, keys, hash="spark").route(rows)

    if pool is None or threads < 2 or table.num_rows < PARALLEL_ROUTE_ROWS:
        return [pa.Table.from_batches([b]) for b in route_slice(table)]
    step = -(-table.num_rows // threads)
    slices = [table.slice(i, step) for i in range(0, table.num_rows, step)]
    routed = list(pool.map(route_slice, slices))
    return [pa.Table.from_batches([r[p] for r in routed]) for p in range(n)]


# Rows at least which the driver routes a micro-batch in slices on several threads.
PARALLEL_ROUTE_ROWS = 200_000


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

    ``table``: the micro-batch's rows, read from its files (see :func:`read_files_of`);
    ``None``: fetched from Spark."""
    batches: list[pa.RecordBatch] = []
    read = "none"
    if not flush:
        read = "spark" if table is None else "files"
        if table is None:
            src = df if columns is None else df.selectExpr(*[quoted(c) for c in columns])
            table = src.toArrow()
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


def read_files_of(df: Any, plan: OutputCodec, batch_plan: Any = None) -> pa.Table | str:
    """``df``'s rows (the columns of ``plan``'s input) read from its Parquet files, in
    the schema ``toArrow()`` gives them, or why they must come from Spark (see
    :mod:`tidemark.spark._files`; ``batch_plan``: the micro-batch's plan, if read)."""
    files = batch_files(df, batch_plan)
    if isinstance(files, str):
        return files
    return read_batch_files(files, to_arrow_schema(plan.input_arrow))


def batch_counts(
    batch_id: int,
    rec: StreamRecord,
    progress: list[tuple[int, Any, Any, Any]],
    layout: str,
    read: str,
) -> dict[str, Any]:
    """A batch's row counts, summed over the progress rows of its state partitions,
    where it ran (``layout``) and how its rows were read (``read``)."""
    c = {"input_rows": 0, "window_rows": 0, "late_rows": 0, "error_rows": 0}
    for _, kind, a, b in progress:
        if kind == P_OUTPUT:
            c["window_rows"] += a
            c["late_rows"] += b
        elif kind == P_INPUT:
            c["error_rows"] += a
            c["input_rows"] += b
    return {
        "batch_id": batch_id,
        **c,
        "watermark": rec.watermark,
        "next_watermark": rec.next_watermark,
        "layout": layout,
        "read": read,
    }
