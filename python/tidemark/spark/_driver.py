"""The exactly-once micro-batch driver that ``StreamProcessor`` and ``ReorderStream`` both
are: what runs in the ``foreachBatch`` process around each micro-batch.

Both keep their operators' state in a :class:`~tidemark.spark.state.StateStore`, one
version per state partition and batch, and one driver record per batch
(``driver/<batch_id>.json``). A batch's record is written when it starts (what it
restores) and again when it finishes (what it produced); a replayed batch finds its
record and runs from the same inputs, so it writes the same state and outputs. This
module holds the life cycle the two share (:meth:`MicroBatchDriver._run`): the store's
meta check, the batch's run (its :class:`~tidemark.spark._stream_task.StreamTask` in the
driver, in one task or in one task per state partition: :meth:`_execute`), the outputs
fetched as Arrow for Arrow sinks, the sinks, the state partitions' reports read back
and summarised by the core (:meth:`_summary`), the record's commit and pruning, the
batch id a flush runs as, and the ``foreachBatch`` entry point. A subclass supplies the
steps whose content differs (its operator, what it records): :meth:`_begin`,
:meth:`_route` and :meth:`_finish`.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from tidemark import _native
from tidemark.errors import ConfigError, StateCorruptedError
from tidemark.spark._args import map_in_arrow
from tidemark.spark._codec import KIND_ERROR, KIND_LATE, KIND_WINDOW, OutputCodec
from tidemark.spark._layout import History, Layout, Stats, after
from tidemark.spark._records import BatchRecord
from tidemark.spark._stream_task import run_on_driver, tagged
from tidemark.spark.state import StateStore, state_errors_surface

#: The layout of a state location (``meta.json``'s ``format``): its files, their names
#: and the driver records' fields. Snapshots carry a version of their own (the core's).
STATE_FORMAT = 1

#: ``f(output, batch_id)``: a DataFrame, or a ``pyarrow.Table`` with ``arrow_sinks``.
Sink = Callable[[Any, int], None]


def _other_format(meta: dict[str, Any]) -> str:
    """Why a state store of another format (``meta.json``'s ``format``) is not read."""
    fmt = meta.get("format")
    by = meta.get("tidemark")
    who = f"tidemark {by}" if by else "another tidemark"
    head = (
        f"written by {who} in state format {fmt}; this tidemark ({_native.__version__}) "
        f"reads format {STATE_FORMAT}"
    )
    if isinstance(fmt, int) and fmt > STATE_FORMAT:
        return f"{head}: run the query with that tidemark or a newer one"
    return (
        f"{head}, and does not convert older state: finish the query with the tidemark "
        "that wrote it, or start over with a new state_location and checkpoint location"
    )


def _changed(old: Any, new: dict[str, Any] | None) -> str:
    """The settings that differ between a store's ``old`` configuration and ``new``,
    as ``name: was -> now`` (empty where either is unknown)."""
    if not isinstance(old, dict) or new is None:
        return ""
    keys = [k for k in new if old.get(k) != new[k]] + [k for k in old if k not in new]
    return "; ".join(f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in keys)


def next_flush_batch(store: StateStore) -> int:
    """The batch id a flush runs as: the last batch again if it was a flush or never
    finished, else the one after it."""
    last = store.last_record()
    if last is None:
        return 0
    replay = last.flush or not last.finished
    return int(last.batch_id if replay else last.batch_id + 1)


@contextlib.contextmanager
def session_settings(spark: Any, values: dict[str, str]) -> Iterator[None]:
    """Spark session ``values`` for the body of a ``with``, each restored (or unset)
    after it."""
    before = {k: spark.conf.get(k, None) for k in values}
    for k, v in values.items():
        spark.conf.set(k, v)
    try:
        yield
    finally:
        for k, old in before.items():
            if old is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, old)


def exact_partitions(spark: Any) -> contextlib.AbstractContextManager[None]:
    """Adaptive partition coalescing off for one job: one task per state partition
    (adaptive execution would merge them into fewer)."""
    return session_settings(spark, {"spark.sql.adaptive.coalescePartitions.enabled": "false"})


@dataclass(kw_only=True)
class BatchRun:
    """One run of a micro-batch, as a driver's :meth:`MicroBatchDriver._begin` planned
    it (subclasses add what their steps need): its batch id, whether it is a flush and
    its outputs' codec are its task's."""

    #: Where it runs: ``"driver"``, ``"one task"`` or ``"shuffled"``.
    layout: str
    #: The batch's driver record as started (what it restores); :meth:`_finish`
    #: completes it.
    record: BatchRecord
    #: The batch's cached result, or ``None`` (nothing persisted).
    persisted: Any = field(default=None)
    #: A quiet micro-batch: Spark ran it without rows (see
    #: :func:`tidemark.spark.heartbeat`); like a flush it reads none, unlike one it
    #: closes only what the watermark passed.
    quiet: bool = False
    #: What the layout was decided from, and what it gave (see ``_layout``).
    stats: Stats = field(default_factory=Stats)
    placed: Layout = field(
        default_factory=lambda: Layout(shuffled=False, routes=False, driver=False, files=False)
    )
    #: The task over the batch's rows (:class:`~tidemark.spark._stream_task.StreamTask`):
    #: its ``token`` tags this run's reports (those of an earlier, failed run are
    #: ignored); ``windows_only``: it emits the main output alone (no late or error
    #: sink: the sink's job is the batch's job, nothing is cached); ``untagged``: the
    #: rows reach it untagged (it holds every state partition and routes them).
    task: Any
    #: The columns of the rows the task reads (``None``: all).
    columns: list[str] | None = None
    #: The rows read from the micro-batch's files in the driver, or ``None``.
    table: pa.Table | None = None
    #: The batch's rows (``None``: the micro-batch itself).
    rows: Any = None
    #: ``"files"``, ``"spark"``, ``"folds"`` or ``"none"``: how the rows were read.
    read: str = "none"
    #: The DataFrame of the batch's tasks (run in Spark), whose count runs them all.
    job: Any = None

    @property
    def batch_id(self) -> int:
        return int(self.task.batch_id)

    @property
    def flush(self) -> bool:
        return bool(self.task.flush)

    @property
    def codec(self) -> OutputCodec:
        """``sink_arrow_schema(kind)`` gives Arrow sinks their schema."""
        codec: OutputCodec = self.task.codec
        return codec

    @property
    def driver(self) -> bool:
        """Whether the batch runs in this process."""
        return self.layout == "driver"


class MicroBatchDriver:
    """The micro-batch life cycle around a subclass's ``_run(df, batch_id, flush)``.

    Subclasses set ``store``, ``num_partitions``, ``retention``, ``start_fresh`` and
    the sinks in ``__init__``, and say what their driver records are (``RECORD``) and
    what their configuration is (:meth:`_fingerprint`)."""

    #: The type of this driver's records (see :mod:`tidemark.spark._records`).
    RECORD: type[BatchRecord] = BatchRecord

    store: StateStore
    num_partitions: int
    retention: int
    start_fresh: bool
    sink: Sink | None
    late_sink: Sink | None
    error_sink: Sink | None
    on_driver: bool | None
    arrow_sinks: bool
    last_progress: dict[str, Any] | None

    def _init_driver(
        self,
        state_location: str | os.PathLike[str],
        num_partitions: int,
        sinks: tuple[Sink | None, Sink | None, Sink | None],
        retention: int,
        start_fresh: bool,
        on_driver: bool | None,
        arrow_sinks: bool,
    ) -> None:
        """The settings every driver has (see the subclasses' parameters), and its own
        state: nothing checked, run or persisted yet."""
        if retention < 2:
            raise ConfigError("retention must be at least 2 (the last batch must be replayable)")
        self.store = StateStore(state_location, self.RECORD)
        self.num_partitions = num_partitions
        self.sink, self.late_sink, self.error_sink = sinks
        self.retention = retention
        self.start_fresh = start_fresh
        self.on_driver = on_driver
        self.arrow_sinks = arrow_sinks
        # What earlier micro-batches leave for the next ones' layout (see _layout).
        self._history = History()
        self._checked = False
        self._last: Any = None
        self.last_progress = None
        self.last_batch_id: int | None = None
        # The last micro-batch skipped with nothing to do (see __call__).
        self._skipped_to: int | None = None

    def _fingerprint(self) -> int | str:
        raise NotImplementedError

    def _settings(self) -> dict[str, Any] | None:
        """The configuration behind :meth:`_fingerprint`, kept in ``meta.json`` to name
        what changed when a store's fingerprint is not this driver's (``None``: none)."""
        return None

    def _mismatch(self, meta: dict[str, Any], want: dict[str, Any]) -> str:
        """Why a state store whose ``meta.json`` is ``meta`` is not this driver's."""
        return f"written with {meta}, this driver is {want}"

    def _check_meta(self, rescale: Callable[[int], None] | None = None) -> None:
        """Checks ``meta.json`` (configuration fingerprint, state partitions, format)
        against this driver once, writing it for a new store. A store that differs
        only in its number of state partitions is redistributed by ``rescale(old)``
        where the driver can (else it is refused, as any other difference is)."""
        if self._checked:
            return
        want = {
            "fingerprint": self._fingerprint(),
            "num_partitions": self.num_partitions,
            "format": STATE_FORMAT,
        }
        settings = self._settings()
        written: dict[str, Any] = {**want, "tidemark": _native.__version__}
        if settings is not None:
            written["settings"] = settings
        meta = self.store.read_json("meta.json")
        if meta is not None and meta.get("format") != STATE_FORMAT:
            raise StateCorruptedError(f"{self.store.path('meta.json')}: {_other_format(meta)}")
        if meta is None:
            self.store.write_json("meta.json", written)
        elif {k: meta.get(k) for k in want} != want:
            changed = _changed(meta.get("settings"), settings)
            if changed and meta.get("fingerprint") != want["fingerprint"]:
                raise ConfigError(
                    f"{self.store.path('meta.json')}: the state was written by another "
                    f"configuration ({changed}). A changed pipeline starts over: give it a "
                    "new state_location and a new checkpoint location (or delete both)"
                )
            same = {k: v for k, v in meta.items() if k in want and k != "num_partitions"}
            if rescale is None or same != {k: v for k, v in want.items() if k != "num_partitions"}:
                why = self._mismatch(meta, want)
                raise StateCorruptedError(f"{self.store.path('meta.json')}: {why}")
            rescale(int(meta["num_partitions"]))
            self.store.write_json("meta.json", written)
        self.store.clean_temp()
        self._checked = True

    def _send(self, outputs: tuple[Any, Any, Any], batch_id: int) -> None:
        """Hands the batch's (main, late, error) outputs to their sinks, in that order."""
        for sink, out in zip((self.sink, self.late_sink, self.error_sink), outputs, strict=True):
            if sink is not None:
                sink(out, batch_id)

    def _commit(self, record: BatchRecord, persisted: Any) -> None:
        """Writes the finished batch's record, prunes records older than the
        retention, and keeps ``persisted`` (the batch's cached result, or ``None``)
        until the next batch is called."""
        self.store.write_record(record, self.retention)
        self._last = persisted

    # --- one batch: the life cycle, and the steps a subclass supplies ------------

    def _run(
        self, df: Any, batch_id: int, flush: bool, schema: Any = None, plan: Any = None
    ) -> tuple[Any, Any, Any]:
        """One batch: ``df`` holds its rows (for a flush, any DataFrame of the session:
        its rows are not read, and ``schema`` is the stream's; ``plan``: what
        :meth:`_plan_of` read of it). Returns the (main, late, error) outputs the sinks
        got."""
        run = self._begin(df, batch_id, flush, schema, plan)
        self._history = after(self._history, run.placed, run.stats, run.driver)
        outs = self._execute(df, run)
        try:
            with self._sending(run):
                if self.arrow_sinks and not run.driver:
                    outs = self._fetch_arrow(outs, run)
                self._send(outs, batch_id)
                self.last_progress = run.record.progress = self._finish(run)
        except BaseException:
            if run.persisted is not None:
                run.persisted.unpersist()
            raise
        self._commit(run.record, run.persisted)
        self.last_batch_id = batch_id
        return outs

    def _begin(self, df: Any, batch_id: int, flush: bool, schema: Any, plan: Any) -> BatchRun:
        """Checks the state store and the input, records the batch's start (or finds
        the record of its earlier run) and decides where it runs."""
        raise NotImplementedError

    def _plan_of(self, df: Any) -> Any:
        """What the driver reads of a micro-batch's plan before it runs it (``None``:
        nothing)."""
        return None

    def _nothing_to_do(self, plan: Any) -> bool:
        """Whether a micro-batch with this plan (see :meth:`_plan_of`) would change
        nothing: it is not run, and nothing is recorded for it."""
        return False

    def _route(self) -> tuple[list[str], bool]:
        """The columns rows go to state partitions by (Spark's hash, as
        ``repartition(n, *keys)``), and whether rows without them are dealt out in turn
        (else they all go to state partition 0)."""
        raise NotImplementedError

    def _execute(self, df: Any, run: BatchRun) -> tuple[Any, Any, Any]:
        """Runs the batch's task in this process (outputs computed, state written), or
        plans its Spark job: one task, or one per state partition (outputs the sinks'
        jobs compute; a cached result in ``run.persisted``). Returns the (main, late,
        error) outputs."""
        from pyspark import StorageLevel

        plan: OutputCodec = run.codec
        rows = df if run.rows is None else run.rows
        rowless = run.flush or run.quiet
        if run.driver:
            # The task's work, done here: the outputs are computed (and the state
            # written) before any sink runs; the sinks read local DataFrames.
            kinds = [KIND_WINDOW]
            kinds += [KIND_LATE] if self.late_sink is not None else []
            kinds += [KIND_ERROR] if self.error_sink is not None else []
            main, late, errors, read = run_on_driver(
                rows,
                run.task,
                plan,
                run.columns,
                run.task.windows_only,
                rowless,
                kinds,
                self.arrow_sinks,
                run.table,
            )
            run.read = run.read if run.read == "folds" else read
            return main, late, errors  # nothing persisted, no job left to run
        keys, deal = self._route()
        shuffled = run.layout == "shuffled"
        n = self.num_partitions
        parted = tagged(rows, keys, n, rowless, shuffled, run.columns, run.task.untagged, deal)
        if run.task.windows_only:
            run.job = map_in_arrow(parted, run.task, plan.single_spark[KIND_WINDOW])
            return run.job, None, None
        combined = map_in_arrow(parted, run.task, plan.combined_spark)
        run.job = run.persisted = combined.persist(StorageLevel.MEMORY_AND_DISK)
        return plan.split(run.persisted)

    @contextlib.contextmanager
    def _sending(self, run: BatchRun) -> Iterator[None]:
        """The context the outputs are fetched and sent in (the jobs of a run in Spark
        tasks run there): one task per state partition when shuffled (adaptive
        execution would merge them into fewer); errors a task raised about the state
        surface as :class:`StateCorruptedError`."""
        parallel = run.layout == "shuffled" and not run.flush and run.job is not None
        exact = exact_partitions(run.job.sparkSession) if parallel else contextlib.nullcontext()
        with exact, state_errors_surface():
            yield

    def _summary(
        self, run: BatchRun, summarize: Callable[[list[bytes]], dict[str, Any] | None]
    ) -> dict[str, Any]:
        """The batch as every state partition reported it in this run: ``summarize``
        of their reports (``None``: one is another run's). Where a partition has not
        reported (the sinks did not run every task: no sink, or one that read part of
        its output) the batch's job runs: a task that ran already gives the same output
        and state again."""
        summary = self._reported(run, summarize)
        if summary is None and run.job is not None:
            run.job.count()
            summary = self._reported(run, summarize)
        if summary is None:
            raise StateCorruptedError(
                f"batch {run.batch_id}: a state partition wrote no progress under "
                f"{self.store.path('partitions')}"
            )
        return summary

    def _reported(
        self, run: BatchRun, summarize: Callable[[list[bytes]], dict[str, Any] | None]
    ) -> dict[str, Any] | None:
        reports = self.store.read_reports(run.batch_id, self.num_partitions)
        return None if reports is None else summarize(reports)

    def _finish(self, run: BatchRun) -> dict[str, Any]:
        """After the sinks: completes ``run.record`` with what the batch produced
        (the next batch starts from it) and returns the batch's progress."""
        raise NotImplementedError

    def _fetch_arrow(self, outs: tuple[Any, Any, Any], run: BatchRun) -> tuple[Any, Any, Any]:
        """The outputs of a run in Spark tasks as ``toArrow()`` tables in the schemas a
        run in the driver gives Arrow sinks: those a sink reads, and a flush's main
        output (it is returned, sink or none)."""
        wanted = [self.sink is not None or run.flush, self.late_sink is not None]
        wanted.append(self.error_sink is not None)
        got = [
            out.toArrow().cast(run.codec.sink_arrow_schema(kind)) if want else out
            for kind, (out, want) in enumerate(zip(outs, wanted, strict=True))
        ]
        return got[0], got[1], got[2]

    def _flush_batch_id(self, batch_id: int | None) -> int:
        """``batch_id``, or by default the batch a flush runs as (see
        :func:`next_flush_batch`): after micro-batches this driver skipped (nothing to
        do, nothing recorded), the one after the last of them, the id Spark gives next."""
        if batch_id is not None:
            return batch_id
        b = next_flush_batch(self.store)
        done = self.store.record_ids()
        if self._skipped_to is not None and (not done or b > done[-1]):
            b = max(b, self._skipped_to + 1)
        return b

    def __call__(self, df: Any, batch_id: int) -> None:
        """Processes micro-batch ``batch_id`` (Spark's foreachBatch contract)."""
        plan = self._plan_of(df)
        if self._nothing_to_do(plan):
            self._skipped_to = batch_id
            return
        self._run(df, batch_id, flush=False, plan=plan)
        if self._last is not None:  # None: run in the driver, nothing persisted
            self._last.unpersist()

    def progress(self, batch_id: int | None = None) -> dict[str, Any] | None:
        """A finished batch's counts (the keys of :attr:`last_progress`), read from
        ``state_location``: batch ``batch_id``, or the last finished one. ``None`` if
        it did not finish or was pruned (``retention``).

        Works from any process that reaches ``state_location``: under Spark Connect
        the driver runs in the server's ``foreachBatch`` process, and this is how the
        client reads its progress.
        """
        return self.store.batch_progress(batch_id)
