"""Event-time reordering (``PhysicalEventtimeWatermark``).

:class:`Reorder` takes batches out of order by event time and releases their rows in
non-decreasing event-time order (ties in arrival order), each release followed by a
watermark ``W = max event time seen - late_tolerance``:

* rows with ``ts < W`` are released, then ``W`` is emitted; it never moves back;
* after ``W`` is emitted no row with ``ts < W`` is ever released: a row arriving
  with ``ts < W`` is **late** (dropped and counted, or returned in ``late``);
* rows whose event time cannot be parsed come back in ``errors`` with a ``reason``;
* no artificial "end of time" watermark: :meth:`Reorder.flush` releases what is
  buffered when you end the stream.

Every input row is released exactly once, or reported late or as an error.

>>> import pyarrow as pa, tidemark as tm
>>> r = tm.Reorder(event_time="ts", event_time_type="unixtimestamp_ms", late_tolerance="2s")
>>> out = r.process(pa.table({"ts": [5_000, 1_000, 3_000], "v": ["c", "a", "b"]}))
>>> out.rows.column("v").to_pylist(), out.watermark    # W = 5 s - 2 s, in microseconds
(['a'], 3000000)
>>> out = r.process(pa.table({"ts": [2_000, 9_000], "v": ["late", "d"]}))
>>> out.rows.column("v").to_pylist(), out.watermark, r.metrics()["late_dropped_count"]
(['b', 'c'], 7000000, 1)
>>> r.flush().rows.column("v").to_pylist()
['d']
"""

from __future__ import annotations

import datetime as _dt
from typing import Any, NamedTuple

import pyarrow as pa

from tidemark import _native
from tidemark._arrow import ArrowData, as_tabular, column
from tidemark._duration import Duration, micros_datetime, to_micros
from tidemark.clock import Clock, SystemClock, native_clock
from tidemark.errors import ConfigError, MissingColumnError
from tidemark.event_time import apply_user_parser, resolve_event_time_type

__all__ = ["ProcessingTimeWatermark", "Reorder", "ReorderOutput"]


class ReorderOutput(NamedTuple):
    """What one :meth:`Reorder.process` / :meth:`Reorder.flush` call released."""

    rows: pa.Table
    """Released rows in event-time order, with the input schema unchanged."""
    watermark: int | None
    """The watermark emitted after ``rows`` (epoch microseconds), if it rose."""
    late: pa.Table
    """Late rows (input schema; empty with ``late="drop"``)."""
    errors: pa.Table
    """Rows whose event time could not be parsed, with a ``reason`` column."""

    def __repr__(self) -> str:
        # Row counts, not the tables (print out.rows for those).
        return (
            f"ReorderOutput(rows={self.rows.num_rows} rows, watermark={self.watermark}, "
            f"late={self.late.num_rows} rows, errors={self.errors.num_rows} rows)"
        )


class Reorder:
    """Buffers out-of-order rows and releases them in event-time order.

    Parameters
    ----------
    event_time : str
        The event-time column: an Arrow timestamp or date, or any column with an
        ``event_time_type``.
    event_time_type : str, optional
        A registered event-time type (see :func:`tidemark.event_time_types`).
    late_tolerance : str, timedelta or int
        Tolerated disorder (ints are microseconds): the watermark trails the largest
        event time seen by this much, and rows arriving later than that are late.
    late : str
        ``"drop"`` (count late rows) or ``"side_output"`` (return them in ``late``).
    state : bytes, optional
        A :meth:`snapshot` to restore (written with the same configuration).
    schema : pyarrow.Schema, optional
        Checks the event-time column now rather than at the first batch.

    Raises
    ------
    ConfigError
        For a bad duration or policy; :class:`UnknownEventTimeTypeError` (listing the
        registered types) and :class:`MissingColumnError` (listing the columns).
    """

    __slots__ = ("_config", "_inner", "_parser", "_tolerance", "event_time", "event_time_type")

    def __init__(
        self,
        event_time: str,
        event_time_type: str | None = None,
        late_tolerance: Duration = "0s",
        late: str = "drop",
        *,
        state: bytes | None = None,
        schema: pa.Schema | None = None,
    ) -> None:
        if not isinstance(event_time, str) or not event_time:
            raise ConfigError(f"event_time must be a column name, got {event_time!r}")
        _native.check_name("late", late)
        self._parser = resolve_event_time_type(event_time_type)
        self.event_time = event_time
        self.event_time_type = event_time_type
        self._tolerance = to_micros(late_tolerance, "late_tolerance")
        self._config: dict[str, Any] = {
            "event_time": event_time,
            "event_time_type": event_time_type if self._parser is None else None,
            "parsed_externally": self._parser is not None,
            "late_tolerance": self._tolerance,
            "late": late,
            # Runs in a Spark micro-batch as a reorder (``_native.MicroBatch``).
            "operator": "reorder",
        }
        self._inner = _native.ReorderOperator(self._config, state)
        if schema is not None:
            if event_time not in schema.names:
                raise MissingColumnError(
                    f"column {event_time!r} not found; available columns: "
                    + ", ".join(schema.names)
                )
            if self._parser is None:
                _native.check_event_time_type(
                    event_time, pa.array([], schema.field(event_time).type), event_time_type
                )

    @property
    def late_tolerance(self) -> int:
        """The tolerance in microseconds."""
        return self._tolerance

    @property
    def late(self) -> str:
        """``"drop"`` (late rows counted, not kept) or ``"side_output"``."""
        late: str = self._config["late"]
        return late

    def process(self, data: ArrowData) -> ReorderOutput:
        """Takes one batch (pyarrow, polars, any Arrow tabular data) and returns the
        rows it made safe to release, followed by the watermark."""
        parsed = None
        if self._parser is not None:
            table = as_tabular(data)
            assert self.event_time_type is not None
            parsed = apply_user_parser(
                self.event_time_type, self._parser, column(table, self.event_time)
            )[0]
            if isinstance(parsed, pa.ChunkedArray):
                parsed = parsed.combine_chunks()
            data = table
        return ReorderOutput(*self._inner.process(data, parsed))

    def flush(self) -> ReorderOutput:
        """End of the stream: releases every buffered row, in order (no watermark)."""
        return ReorderOutput(*self._inner.flush())

    def snapshot(self) -> bytes:
        """The watermark, counters and buffered rows as bytes (versioned, checksummed,
        tied to this configuration)."""
        return bytes(self._inner.snapshot())

    def restore(self, state: bytes | None) -> Reorder:
        """A new operator with this configuration, restored from ``state`` (``None``:
        empty)."""
        return _build(self._attrs(), state)

    def _attrs(self) -> dict[str, Any]:
        """The configuration attributes (everything but the native operator)."""
        return {n: getattr(self, n) for n in self.__slots__ if n != "_inner"}

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickles (e.g. to Spark executors) with its parser and its buffered rows.
        return (_build, (self._attrs(), self.snapshot()))

    @property
    def fingerprint(self) -> str:
        """Identifies the configuration (state written by another one is rejected)."""
        c = self._config
        return f"reorder:{c['event_time']}:{self.event_time_type}:{c['late_tolerance']}:{c['late']}"

    @property
    def watermark(self) -> int | None:
        """The last emitted watermark (epoch microseconds)."""
        w: int | None = self._inner.watermark
        return w

    def metrics(self) -> dict[str, Any]:
        """``buffer_size``, ``late_dropped_count``, ``watermark_emitted_count``,
        ``max_timestamp_seen``, plus ``rows_in``,
        ``rows_released``, ``rows_error``, ``batches``, ``buffer_bytes``, ``watermark``."""
        return dict(self._inner.metrics())

    def __repr__(self) -> str:
        return (
            f"Reorder(event_time={self.event_time!r}, event_time_type={self.event_time_type!r}, "
            f"late_tolerance={self.late_tolerance}us, late={self.late!r})"
        )


def _build(attrs: dict[str, Any], state: bytes | None) -> Reorder:
    """A Reorder with these attributes and a native operator restored from ``state``."""
    out = object.__new__(Reorder)
    for k, v in attrs.items():
        setattr(out, k, v)
    out._inner = _native.ReorderOperator(out._config, state)
    return out


class ProcessingTimeWatermark:
    """A processing-time watermark (``PhysicalProcessTimeWatermark``): rows pass through
    in arrival order and the watermark follows the clock (epoch microseconds), as a
    ticker would.

    The same ``process`` / ``flush`` / ``metrics`` surface as :class:`Reorder`, so a
    planned stream (:func:`tidemark.plan`) runs either. Deterministic under
    :class:`tidemark.ManualClock` (whose ticks are milliseconds).

    >>> import pyarrow as pa, tidemark as tm
    >>> clock = tm.ManualClock(1_000)
    >>> p = tm.ProcessingTimeWatermark(clock=clock)
    >>> p.process(pa.table({"v": [2, 1]})).watermark
    1000000
    >>> _ = clock.advance(500)
    >>> p.tick().watermark
    1500000
    """

    __slots__ = ("_clock", "_metrics", "_scope")

    def __init__(self, clock: Clock | None = None) -> None:
        self._clock = clock if clock is not None else SystemClock()
        # The processing-time rule (the clock's milliseconds as microseconds, never
        # falling back) is the core's: a processing-time pipeline's scope watermark.
        self._scope = _native.ScopeWatermark.processing(native_clock(self._clock))
        self._metrics = {
            "batches": 0,
            "rows_in": 0,
            "rows_released": 0,
            "watermark_emitted_count": 0,
        }

    def _advance(self) -> int | None:
        """The clock's time, where it moved the watermark (else ``None``)."""
        before = self._scope.current
        now = self._scope.advance([])
        if now is None or now == before:
            return None
        self._metrics["watermark_emitted_count"] += 1
        return now

    def process(self, data: ArrowData) -> ReorderOutput:
        """Passes the batch through and emits the clock's time as the watermark."""
        table = as_tabular(data)
        if isinstance(table, pa.RecordBatch):
            table = pa.Table.from_batches([table])
        self._metrics["batches"] += 1
        self._metrics["rows_in"] += table.num_rows
        self._metrics["rows_released"] += table.num_rows
        return _passed(table, self._advance())

    def tick(self) -> ReorderOutput:
        """No rows: emits the clock's time if it moved (the ticker)."""
        return _passed(pa.table({}), self._advance())

    def flush(self) -> ReorderOutput:
        """Nothing is buffered in processing time."""
        return _passed(pa.table({}), None)

    @property
    def watermark(self) -> int | None:
        """The last emitted watermark (epoch microseconds)."""
        return self._scope.current

    def watermark_datetime(self) -> _dt.datetime | None:
        """The watermark as a UTC datetime."""
        return micros_datetime(self.watermark)

    def metrics(self) -> dict[str, Any]:
        """Counters (``buffer_size`` is always 0: nothing waits in processing time)."""
        return {
            **self._metrics,
            "buffer_size": 0,
            "late_dropped_count": 0,
            "watermark": self.watermark,
        }

    def __repr__(self) -> str:
        return f"ProcessingTimeWatermark(clock={self._clock!r}, watermark={self.watermark})"


def _passed(rows: pa.Table, watermark: int | None) -> ReorderOutput:
    """Processing-time output: ``rows`` as they came, no late rows, no error rows."""
    empty = rows.schema.empty_table()
    errors = empty.append_column("reason", pa.array([], pa.string()))
    return ReorderOutput(rows, watermark, empty, errors)
