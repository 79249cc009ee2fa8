"""Watermark trackers (seed F064: per source partition).

All trackers share one convention: a watermark ``W`` asserts that no more events with
``ts < W`` are expected; the combined watermark is the minimum over active inputs,
idle inputs are excluded, the maximum is used when all are idle, and it never moves
backwards. A registered input that never sent data holds the combined watermark back
until it goes idle.

Watermarks and event times are plain ints here ("ticks"): use one unit consistently.
``observe`` on Arrow data with a timestamp column (or a named event-time type) works
in epoch microseconds. Idle timeouts are in clock ticks (milliseconds for
:class:`~tidemark.SystemClock`); duration strings such as ``"30s"`` are accepted.
"""

from __future__ import annotations

from typing import Any, TypedDict

import pyarrow as pa

from tidemark import _native
from tidemark._arrow import ArrowData, as_tabular, column
from tidemark._duration import Duration, to_micros, to_millis
from tidemark.clock import Clock, native_clock
from tidemark.errors import ConfigError
from tidemark.event_time import apply_user_parser, resolve_event_time_type

__all__ = ["PartitionState", "PartitionedWatermarkMetrics", "PartitionedWatermarkTracker"]


class PartitionState(TypedDict):
    """State of one partition (``None``: no value yet)."""

    watermark: int | None
    last_event_time: int | None
    last_activity: int
    is_idle: bool
    assigned_core: int | None


class PartitionedWatermarkMetrics(TypedDict):
    """Metrics of a :class:`PartitionedWatermarkTracker`."""

    total_partitions: int
    active_partitions: int
    idle_partitions: int
    watermark_advances: int
    rebalances: int


class PartitionedWatermarkTracker:
    """Watermarks per source partition, with idle detection (seed F064).

    One slow or silent partition no longer blocks the others: the combined watermark
    is the minimum over *active* partitions, and a partition that sends nothing for
    longer than ``idle_timeout`` is excluded until it sends again.

    Parameters
    ----------
    idle_timeout : int, str or timedelta, optional
        A partition with no update for longer than this is marked idle by
        :meth:`check_idle_partitions`. Ints are clock ticks (milliseconds for the
        system clock). ``None`` (default): partitions go idle only when marked idle.
    clock : SystemClock or ManualClock, optional
        The clock idleness is decided on (default: the system clock).

    Examples
    --------
    The seed's example:

    >>> import tidemark as tm
    >>> t = tm.PartitionedWatermarkTracker()
    >>> t.register_source(0, 4)
    >>> for partition, wm in [(0, 5000), (1, 3000), (2, 4000), (3, 4500)]:
    ...     _ = t.update_partition(0, partition, wm)
    >>> t.current_watermark()
    3000
    >>> t.mark_partition_idle(0, 1)
    4000
    >>> t.current_watermark()
    4000

    Idle detection on a manual clock:

    >>> clock = tm.ManualClock()
    >>> t = tm.PartitionedWatermarkTracker(idle_timeout="30s", clock=clock)
    >>> t.register_source(0, 2)
    >>> t.update_partition(0, 0, 10_000)   # partition 1 has sent nothing yet
    >>> _ = clock.advance(30_001)
    >>> t.update_partition(0, 0, 12_000)
    >>> t.check_idle_partitions()          # partition 1 is idle now
    12000
    """

    __slots__ = ("_clock", "_inner")

    def __init__(self, idle_timeout: Duration | None = None, clock: Clock | None = None) -> None:
        timeout = None if idle_timeout is None else to_millis(idle_timeout, "idle_timeout")
        self._clock = clock
        self._inner = _native.PartitionedWatermarkTracker(timeout, native_clock(clock))

    @property
    def idle_timeout(self) -> int | None:
        """The idle timeout in clock ticks (``None``: disabled)."""
        return self._inner.idle_timeout

    @property
    def clock(self) -> Clock | None:
        """The clock given at construction (``None``: the system clock)."""
        return self._clock

    def register_source(self, source_id: int, num_partitions: int) -> int | None:
        """Registers a source with partitions ``0 .. num_partitions - 1``.

        Registering a known source again resizes it (partitions at or above the new
        count are removed, missing ones added). Returns the combined watermark if the
        resize advanced it.
        """
        if num_partitions < 0:
            raise ConfigError(f"num_partitions must be >= 0, got {num_partitions}")
        return self._inner.register_source(source_id, num_partitions)

    def add_partition(self, source_id: int, partition: int) -> None:
        """Adds a partition to a registered source (rebalancing).

        Raises :class:`SourceNotFoundError` for an unknown source and
        :class:`InvalidPartitionError` if the partition is already registered.
        """
        self._inner.add_partition(source_id, partition)

    def remove_partition(self, source_id: int, partition: int) -> PartitionState | None:
        """Removes a partition and returns its last state (``None`` if not tracked)."""
        return self._inner.remove_partition(source_id, partition)  # type: ignore[return-value]

    def update_partition(self, source_id: int, partition: int, watermark: int) -> int | None:
        """Sets a partition's watermark (a lower value is ignored) and marks it active.

        Returns the new combined watermark if it advanced, else ``None``. Raises
        :class:`UnknownPartitionError` / :class:`SourceNotFoundError`.
        """
        return self._inner.update_partition(source_id, partition, watermark)

    def update_partition_from_event(
        self, source_id: int, partition: int, event_time: int, max_lateness: int
    ) -> int | None:
        """Updates a partition from an event: its watermark becomes
        ``event_time - max_lateness``. Returns the new combined watermark or ``None``."""
        return self._inner.update_partition_from_event(
            source_id, partition, event_time, max_lateness
        )

    def mark_partition_idle(self, source_id: int, partition: int) -> int | None:
        """Excludes a partition from the minimum. Returns the combined watermark if
        that advanced it."""
        return self._inner.mark_partition_idle(source_id, partition)

    def mark_partition_active(self, source_id: int, partition: int) -> None:
        """Includes an idle partition again (its idle timer restarts now)."""
        self._inner.mark_partition_active(source_id, partition)

    def check_idle_partitions(self) -> int | None:
        """Marks partitions silent for more than ``idle_timeout`` as idle (reads the
        clock). Returns the combined watermark if it advanced."""
        return self._inner.check_idle_partitions()

    def recalculate(self) -> int | None:
        """Recomputes the combined watermark; returns it if it advanced."""
        return self._inner.recalculate()

    def current_watermark(self) -> int | None:
        """The combined watermark, or ``None`` until every active partition has one."""
        return self._inner.current_watermark()

    @property
    def watermark(self) -> int | None:
        """Same as :meth:`current_watermark`."""
        return self._inner.current_watermark()

    def partition_watermark(self, source_id: int, partition: int) -> int | None:
        """A partition's watermark (``None`` if untracked or none yet)."""
        return self._inner.partition_watermark(source_id, partition)

    def partition_state(self, source_id: int, partition: int) -> PartitionState:
        """A partition's full state; raises :class:`UnknownPartitionError` if untracked."""
        return self._inner.partition_state(source_id, partition)  # type: ignore[return-value]

    def source_watermark(self, source_id: int) -> int | None:
        """A source's watermark: the minimum over its active partitions (maximum if all
        are idle); ``None`` if unknown or none yet."""
        return self._inner.source_watermark(source_id)

    def is_partition_idle(self, source_id: int, partition: int) -> bool:
        """Whether a partition is idle; raises :class:`UnknownPartitionError` if untracked."""
        return self._inner.is_partition_idle(source_id, partition)

    def active_partition_count(self, source_id: int) -> int:
        """Active partitions of a source; raises :class:`SourceNotFoundError` if unknown."""
        return self._inner.active_partition_count(source_id)

    def partitions(self) -> list[tuple[int, int]]:
        """Tracked ``(source_id, partition)`` pairs, sorted."""
        return self._inner.partitions()

    def assign_partition_to_core(self, source_id: int, partition: int, core: int) -> None:
        """Records which core processes a partition (thread-per-core routing)."""
        self._inner.assign_partition_to_core(source_id, partition, core)

    def partition_core(self, source_id: int, partition: int) -> int | None:
        """The core a partition is assigned to, if any."""
        return self._inner.partition_core(source_id, partition)

    def metrics(self) -> PartitionedWatermarkMetrics:
        """``total_partitions``, ``active_partitions``, ``idle_partitions``,
        ``watermark_advances``, ``rebalances``."""
        return self._inner.metrics()  # type: ignore[return-value]

    def observe(
        self,
        data: ArrowData,
        source_id: int = 0,
        partition_column: str = "partition",
        event_time: str = "event_time",
        max_lateness: Duration = 0,
        *,
        event_time_type: str | None = None,
        add_missing: bool = False,
    ) -> int | None:
        """Updates every partition present in one Arrow batch (the vectorised path).

        For each partition in ``data[partition_column]`` the largest event time in the
        batch sets its watermark to ``max_event_time - max_lateness`` and marks it
        active; the clock is read once. Rows with a null partition or an event time
        that cannot be parsed are skipped (they cannot advance a watermark).

        Parameters
        ----------
        data : Arrow tabular data
            pyarrow RecordBatch / Table, polars DataFrame, or any Arrow PyCapsule
            exporter. Not copied.
        source_id : int
            The registered source the partitions belong to.
        partition_column : str
            Integer column with the source partition of each row.
        event_time : str
            The event-time column. Timestamp columns and named types are in epoch
            microseconds; a raw integer column with no ``event_time_type`` is used as
            it is (ticks, like :meth:`update_partition`).
        max_lateness : int, str or timedelta
            Bounded out-of-orderness, in the event-time unit. Duration strings and
            timedeltas are microseconds and need a timestamp column or a named type.
        event_time_type : str, optional
            A registered event-time type for non-timestamp columns.
        add_missing : bool
            Add partitions not registered yet instead of raising
            :class:`UnknownPartitionError`.

        Returns
        -------
        int or None
            The new combined watermark if it advanced.
        """
        table = as_tabular(data)
        ts = column(table, event_time)
        column(table, partition_column)
        parser = resolve_event_time_type(event_time_type)
        parsed: Any = None
        if parser is not None:
            assert event_time_type is not None
            parsed = apply_user_parser(event_time_type, parser, ts)[0]
        if isinstance(max_lateness, int) and not isinstance(max_lateness, bool):
            lateness = max_lateness
        else:
            raw_ticks = (
                parser is None
                and event_time_type is None
                and not (pa.types.is_timestamp(ts.type) or pa.types.is_date(ts.type))
            )
            if raw_ticks:
                raise ConfigError(
                    f"max_lateness={max_lateness!r} is a duration, but column {event_time!r} "
                    f"is {ts.type} with no event_time_type, so its unit is unknown; pass an "
                    "int in the column's unit or name an event_time_type"
                )
            lateness = to_micros(max_lateness, "max_lateness")
        return self._inner.observe(
            table,
            source_id,
            partition_column,
            event_time,
            None if parser is not None else event_time_type,
            lateness,
            add_missing,
            parsed,
        )

    def __repr__(self) -> str:
        m = self.metrics()
        return (
            f"PartitionedWatermarkTracker(watermark={self.current_watermark()}, "
            f"partitions={m['total_partitions']}, idle={m['idle_partitions']})"
        )
