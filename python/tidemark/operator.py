"""A pipeline's operator (:class:`Operator`: process, flush, snapshot; its
:class:`Output`) and the rule that combines several operators' progress
(:class:`ScopeWatermark`)."""

from __future__ import annotations

import copy as _copy
import datetime as _dt
import threading
from typing import TYPE_CHECKING, Any, NamedTuple, TypedDict

import pyarrow as pa

from tidemark import _native
from tidemark._arrow import ArrowData, as_tabular, column
from tidemark._duration import micros_datetime
from tidemark.clock import Clock, native_clock
from tidemark.errors import ConfigError
from tidemark.event_time import apply_user_parser
from tidemark.windows import Rows

if TYPE_CHECKING:
    from tidemark.pipeline import Pipeline


class OperatorOptions(TypedDict, total=False):
    """The keyword options of :class:`Operator` (and :meth:`Pipeline.operator`)."""

    clock: Clock | None
    cores: int
    queue_capacity: int
    hot_keys: float | None
    pin_cores: bool
    ordered: bool


__all__ = ["Operator", "Output", "ScopeWatermark"]


class Output(NamedTuple):
    """What one ``process`` / ``flush`` call produced (pyarrow Tables)."""

    windows: pa.Table
    """Key columns, ``window_start``, ``window_end``, one column per aggregate (and
    ``retract`` in ``on_update`` mode)."""
    late: pa.Table
    """Late input rows, with the input's columns."""
    errors: pa.Table
    """Input rows that could not be processed, with a ``reason`` column.

    Every call gives ``late`` and ``errors`` in the schemas of the latest batch, even
    empty (a ``flush`` reads no rows): the outputs of a stream's calls concatenate.
    Before any batch, the pipeline's schemas (:meth:`Operator.empty_output`); after a
    restore from a snapshot, until the next batch, they hold the columns the pipeline
    reads."""

    def __repr__(self) -> str:
        # Row counts, not the tables (print out.windows for those).
        return (
            f"Output(windows={self.windows.num_rows} rows, late={self.late.num_rows} rows, "
            f"errors={self.errors.num_rows} rows)"
        )


class Operator:
    """The stateful operator of a :class:`Pipeline` (see ``Pipeline.operator()``)."""

    __slots__ = ("_inner", "_lock", "_options", "_pipeline", "pinned")

    def __init__(
        self,
        pipeline: Pipeline,
        state: bytes | None = None,
        *,
        clock: Clock | None = None,
        cores: int = 1,
        queue_capacity: int = 4,
        hot_keys: float | None = None,
        pin_cores: bool = False,
        ordered: bool = True,
    ) -> None:
        self._pipeline = pipeline
        # One call at a time: a second thread waits for the first (the native operator
        # runs with the GIL released and refuses a concurrent call).
        self._lock = threading.Lock()
        # What a pickled copy is built with (see __reduce__).
        self._options: dict[str, Any] = {
            "clock": clock,
            "cores": cores,
            "queue_capacity": queue_capacity,
            "hot_keys": hot_keys,
            "pin_cores": pin_cores,
            "ordered": ordered,
        }
        if not isinstance(cores, int) or isinstance(cores, bool) or cores < 1:
            raise ConfigError(f"cores must be a positive int, got {cores!r}")
        if not isinstance(ordered, bool):
            raise ConfigError(f"ordered must be True or False, got {ordered!r}")
        self._inner: _native.Operator | _native.ShardedOperator | _native.RowsOperator
        if cores == 1 and hot_keys is not None:
            raise ConfigError("hot_keys spreads keys over cores: it needs cores > 1")
        if isinstance(pipeline.window, Rows):
            if cores != 1 or pipeline.lookup is not None:
                raise ConfigError("ROWS windows run on one core, without a lookup")
            self._inner = _native.RowsOperator(pipeline._config, state)
        elif cores == 1:
            self._inner = _native.Operator(pipeline._config, native_clock(clock), state)
        else:
            self._inner = _native.ShardedOperator(
                pipeline._config, cores, queue_capacity, native_clock(clock), state, hot_keys
            )
        if pipeline.lookup is not None and not isinstance(self._inner, _native.RowsOperator):
            lk = pipeline.lookup
            self._inner.set_lookup(lk.args)
        if not ordered and isinstance(self._inner, _native.Operator):
            self._inner.set_sorted_output(False)
        # Workers pinned to a CPU core (pin_cores=True).
        self.pinned = 0
        if pin_cores and isinstance(self._inner, _native.ShardedOperator):
            self.pinned = self._inner.pin_cores()

    def update_lookup(self, table: ArrowData) -> None:
        """Swaps in a new version of the pipeline's lookup table (same ``on``, ``how``
        and ``prefix``); the next ``process`` call joins with it."""
        lookup = self._pipeline.lookup
        if lookup is None or isinstance(self._inner, _native.RowsOperator):
            raise ConfigError("this pipeline has no lookup: use Pipeline.enrich(...)")
        table = as_tabular(table, "the lookup table")
        self._inner.set_lookup((table, lookup.on, lookup.how, lookup.prefix))
        self._options["lookup_table"] = table

    @property
    def cores(self) -> int:
        """Worker threads (1: the calling thread does the work)."""
        return self._inner.cores if isinstance(self._inner, _native.ShardedOperator) else 1

    def __repr__(self) -> str:
        m = self._inner.metrics()
        return (
            f"Operator({self._pipeline!r}, cores={self.cores}, batches={m.get('batches', 0)}, "
            f"keys={m.get('keys', 0)}, windows_open={m.get('windows_open', 0)}, "
            f"watermark={m.get('watermark')})"
        )

    def _single(self, what: str) -> _native.Operator:
        if not isinstance(self._inner, _native.Operator):
            raise ConfigError(f"{what} needs an operator with cores=1 and time windows")
        return self._inner

    @property
    def pipeline(self) -> Pipeline:
        """The pipeline this operator runs."""
        return self._pipeline

    def _parsed(self, data: ArrowData) -> tuple[Any, Any]:
        """``data`` as Arrow, and its event times where a user parser reads them."""
        parsed = None
        p = self._pipeline
        table = as_tabular(data)
        if p._parser is not None and p.time == "event":
            assert p.event_time_type is not None
            parsed = apply_user_parser(p.event_time_type, p._parser, column(table, p.event_time))[0]
            if isinstance(parsed, pa.ChunkedArray):
                parsed = parsed.combine_chunks()
        return table, parsed

    def process(self, data: ArrowData) -> Output:
        """Processes one arrival unit (a batch; a Table counts as one batch).

        Returns the windows closed (or updated) by this call, the late rows and the
        error rows. ``data`` is any Arrow tabular object (pyarrow, polars, pandas, ...),
        or a batch Spark DataFrame, whose rows are fetched into this process with
        ``toArrow()`` (for work spread over a cluster, see :mod:`tidemark.spark`).
        A flushed operator takes no more rows (:class:`ConfigError`).
        """
        table, parsed = self._parsed(data)
        with self._lock:
            return Output(*self._inner.process(table, parsed))

    def ingest(self, data: ArrowData) -> None:
        """The first half of :meth:`process`, for operators that each hold part of a
        scope (the state partitions of a Spark micro-batch): judges and adds the rows
        and advances this operator's own watermarks (see :meth:`progress`), but closes
        nothing. Combine every operator's :meth:`progress` with
        :class:`ScopeWatermark`, then call :meth:`complete` on each."""
        table, parsed = self._parsed(data)
        with self._lock:
            self._single("ingest").ingest(table, parsed)

    def complete(self, close_watermark: int | None = None) -> Output:
        """The second half of :meth:`process`: closes the windows that
        ``close_watermark`` (combined over every operator of the scope; ``None``: this
        operator's own) passed and returns the call's output. Under Spark's late rule
        (the default) a call closes at the watermark it began with instead (the one
        given by :meth:`set_external_watermark` before :meth:`ingest`, else its own),
        and ``close_watermark`` is not used."""
        with self._lock:
            return Output(*self._single("complete").complete(close_watermark))

    def tick(self) -> Output:
        """A call without rows: time moves on by itself.

        With ``time="processing"`` the watermark follows the clock, so windows close
        in wall time even when no rows arrive (a processing-time ticker);
        with event time, keys and partitions that went idle on the clock release
        their windows. An operator restored from a snapshot does this before its
        first batch too; a fresh one has nothing to close (tables without columns).
        """
        with self._lock:
            return self._typed(Output(*self._inner.tick()))

    def flush(self) -> Output:
        """End of input: closes every open window and returns them. Before any batch,
        tables in the pipeline's schemas (see :meth:`empty_output`)."""
        with self._lock:
            return self._typed(Output(*self._inner.flush()))

    def empty_output(self) -> Output:
        """The outputs of a call that saw no batch yet: empty tables in the pipeline's
        schemas. With ``Pipeline(schema=...)`` exactly the schemas a batch of that
        schema gives; without it, the columns by name (keys, ``window_start``,
        ``window_end``, the aggregates; for late and error rows the columns the
        pipeline reads, and ``reason``), of type null until a batch brings the types.

        >>> import tidemark as tm
        >>> pipe = tm.Pipeline(key="k", event_time="ts", window=tm.Tumbling("10s"),
        ...                    aggs={"n": tm.count()}, watermark=tm.BoundedOutOfOrderness("1s"))
        >>> pipe.operator().flush().windows.column_names
        ['k', 'window_start', 'window_end', 'n']
        """
        p = self._pipeline
        if p.schema is not None and p.lookup is None:
            errors = p.schema.append(pa.field("reason", pa.string(), nullable=False))
            return Output(
                p.output_schema(p.schema).empty_table(),
                p.schema.empty_table(),
                errors.empty_table(),
            )
        names = [*p.key, "window_start", "window_end", *p.aggs]
        if p.emit == "on_update":
            names.append("retract")
        read = list(dict.fromkeys([*p.key, *([p.event_time] if p.time == "event" else [])]))
        if p.watermark.per == "partition":
            read.append(p.watermark.partition_column)
        read += [c for a in p.aggs.values() for c in (a.column, a.by) if c is not None]
        read = list(dict.fromkeys(read))

        def table(cols: list[str]) -> pa.Table:
            return pa.schema([(c, pa.null()) for c in cols]).empty_table()

        return Output(table(names), table(read), table([*read, "reason"]))

    def _typed(self, out: Output) -> Output:
        """``out``, or before any batch (tables without columns) :meth:`empty_output`."""
        return self.empty_output() if out.windows.num_columns == 0 else out

    def snapshot(self) -> bytes:
        """The whole state (windows, aggregates, timers, watermarks) as bytes:
        versioned, checksummed, tied to this pipeline's configuration."""
        with self._lock:
            return bytes(self._inner.snapshot())

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickles as its pipeline, snapshot and options. The clock travels in the
        # options (a ManualClock as a new clock at the same reading), not in the
        # pipeline, which refuses to pickle with one.
        pipe = _copy.copy(self._pipeline)
        pipe.clock = None
        return (_unpickle_operator, (pipe, self.snapshot(), dict(self._options)))

    @property
    def watermark(self) -> int | None:
        """The watermark in epoch microseconds (key scope: the highest global one)."""
        return self._inner.watermark

    def watermark_datetime(self) -> _dt.datetime | None:
        """:attr:`watermark` as a UTC datetime."""
        return micros_datetime(self._inner.watermark)

    def set_external_watermark(self, watermark: int | None) -> None:
        """Drives this operator, which holds part of a scope, with the watermark the
        scope's call began with, combined elsewhere (the Spark driver combines every
        task's :meth:`progress` with :class:`ScopeWatermark`): it judges the rows
        (global and partition scope) and, unless :meth:`complete` is given the
        combined watermark, closes windows (global scope: or this operator's own
        watermark, if higher; per key: idle keys' windows). ``None``: the scope has no
        watermark yet (the operator stays driven: its own view of the rows it holds
        would run ahead of the scope's)."""
        self._single("set_external_watermark").set_external_watermark(watermark)

    def set_external_time(self, time: int | None) -> None:
        """Drives this operator, which holds part of a scope, with the scope's event
        time combined elsewhere (:attr:`ScopeWatermark.time` of every operator's
        :meth:`progress`, epoch microseconds): idleness in event time and
        ``max_ahead`` are measured from it, so every part of the scope judges alike.
        ``None`` returns to the operator's own."""
        self._single("set_external_time").set_external_time(time)

    def progress(self) -> dict[str, Any]:
        """What the last ``process`` call saw: ``max_event_time``, ``partition_max``
        (``[(partition, max event time)]``), ``key_global`` (per-key scope: the
        minimum watermark over active keys), ``on_time_max`` (the largest event time
        of its on-time rows) and ``key_parts`` (per key: the minimum watermark over
        active keys, and the highest key watermark seen): what
        :class:`ScopeWatermark` combines."""
        return self._inner.progress()

    def key_watermark(self, key: Any) -> int | None:
        """The watermark of one key (meaningful with ``per="key"``)."""
        return self._single("key_watermark").key_watermark(key)

    def metrics(self) -> dict[str, Any]:
        """Counters: ``rows_in``, ``late_dropped_count``, ``rows_error``,
        ``windows_emitted``, ``updates_emitted``, ``windows_open``,
        ``sessions_closed_by_timer``, ``sessions_closed_by_watermark``, keys, ...

        With ``cores > 1`` the counters are summed over cores and ``cores`` lists each
        core's ``records_processed``, ``processing_time_us``, ``queue_depth``,
        ``queue_capacity``, ``channel_utilization``, ``utilization``, ``backpressure``
        (``healthy`` < 0.7 <= ``warning`` < 0.85 <= ``critical`` < 0.95 <=
        ``saturated``), ``backpressure_events`` and ``latency_p50_us`` / ``p95`` /
        ``p99`` (per batch, from an HDR-style histogram); ``hot_rows_spread`` and
        ``hot_keys`` (in the last batch) count hot-key spreading."""
        return self._inner.metrics()


class ScopeWatermark:
    """The watermark of a pipeline's scope, combined over operators that each hold
    part of it (the rule one operator applies to itself, in one home).

    Global: ``max(on-time event time) - delay`` over every operator; per source
    partition: one watermark per partition (every row counting), the minimum over
    active ones (idle ones excluded; all idle: the maximum; declared partitions hold
    it back until they report or go idle); per key: the minimum over every operator's
    active keys (none active: the highest key watermark), which closes idle keys'
    windows. Under Flink's and the per-row rule the operators close at what ``advance``
    gives; under Spark's (the default) a call closes at the combined watermark it began
    with (give it to each operator with ``set_external_watermark`` before ``ingest``).

    >>> import pyarrow as pa, tidemark as tm
    >>> pipe = tm.Pipeline(key="k", event_time="ts", event_time_type="unixtimestamp_ms",
    ...                    window=tm.Tumbling("10s"), aggs={"n": tm.count()},
    ...                    watermark=tm.BoundedOutOfOrderness("0s"), late_rule="flink")
    >>> ops = [pipe.operator(), pipe.operator()]
    >>> ops[0].ingest(pa.table({"k": ["a"], "ts": [12_000]}))
    >>> ops[1].ingest(pa.table({"k": ["b"], "ts": [3_000]}))
    >>> scope = tm.ScopeWatermark(pipe)
    >>> w = scope.advance([op.progress() for op in ops])
    >>> w
    12000000
    >>> [op.complete(w).windows.num_rows for op in ops]
    [0, 1]
    """

    __slots__ = ("_inner",)

    def __init__(
        self, pipeline: Pipeline, state: bytes | None = None, *, clock: Clock | None = None
    ) -> None:
        self._inner = _native.ScopeWatermark(pipeline._config, native_clock(clock), state)

    def advance(self, progress: list[dict[str, Any]]) -> int | None:
        """Combines one call's :meth:`Operator.progress` of every operator; returns the
        watermark that closes windows after it (epoch microseconds, ``None``: none)."""
        return self._inner.advance(list(progress))

    @property
    def current(self) -> int | None:
        """The combined watermark so far (per key: the highest reported)."""
        return self._inner.current

    @property
    def time(self) -> int | None:
        """The scope's event time: the largest event time any operator reported
        (epoch microseconds, ``None``: none yet). Idleness in event time is measured
        on it (see :meth:`Operator.set_external_time`)."""
        return self._inner.time

    def to_bytes(self) -> bytes:
        """The state, for ``ScopeWatermark(pipeline, state)``."""
        return bytes(self._inner.to_bytes())

    def __repr__(self) -> str:
        return f"ScopeWatermark(current={self.current})"


def _unpickle_operator(pipe: Pipeline, state: bytes, options: dict[str, Any]) -> Operator:
    """An operator from :meth:`Operator.__reduce__`'s parts."""
    lookup_table = options.pop("lookup_table", None)
    if options["clock"] is not None:
        pipe = _copy.copy(pipe)
        pipe.clock = options["clock"]
    op = Operator(pipe, state, **options)
    if lookup_table is not None:
        op.update_lookup(lookup_table)
    return op
