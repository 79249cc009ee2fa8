"""Watermark trackers: per source partition and per key.

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

import datetime as _dt
from typing import Any, ClassVar, TypedDict, TypeVar

import pyarrow as pa

from tidemark import _native
from tidemark._arrow import ArrowData, as_tabular, column
from tidemark._duration import Duration, clock_ticks, to_micros
from tidemark._inputs import delay, keyed_call, time_value
from tidemark.clock import Clock, native_clock
from tidemark.errors import ConfigError
from tidemark.event_time import apply_user_parser, resolve_event_time_type

__all__ = [
    "CompactKeyedMetrics",
    "CompactKeyedWatermarkTracker",
    "KeyState",
    "KeyedWatermarkMetrics",
    "KeyedWatermarkTracker",
    "PartitionState",
    "PartitionedWatermarkMetrics",
    "PartitionedWatermarkTracker",
]


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


_T = TypeVar("_T", bound="_Restorable")


class _Restorable:
    """Snapshots, restores, pickling and the clock: the same for every tracker."""

    __slots__ = ()
    _native_type: ClassVar[Any]
    _clock: Clock | None
    _inner: Any

    @property
    def clock(self) -> Clock | None:
        """The clock given at construction or restore (``None``: the system clock)."""
        return self._clock

    def snapshot(self) -> bytes:
        """The tracker's whole state as bytes (versioned, checksummed), configuration
        included: what it tracks, watermarks, idleness, metrics.

        >>> import tidemark as tm
        >>> t = tm.KeyedWatermarkTracker(bounded_delay=5000, max_keys=100)
        >>> t.update("tenant_a", 15_000)
        10000
        >>> back = tm.KeyedWatermarkTracker.restore(t.snapshot())
        >>> back.watermark_for_key("tenant_a"), back.max_keys
        (10000, 100)
        """
        return bytes(self._inner.snapshot())

    @classmethod
    def restore(cls: type[_T], data: bytes, clock: Clock | None = None) -> _T:
        """A tracker from :meth:`snapshot` bytes, configured as the one that wrote them,
        reading ``clock`` (for idleness) from now on. Raises
        :class:`StateCorruptedError` for damaged bytes or another kind of snapshot."""
        obj = cls.__new__(cls)
        obj._clock = clock
        obj._inner = cls._native_type.restore(data, native_clock(clock))
        return obj

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickles as its snapshot (and its clock: a ManualClock at the same reading).
        return (type(self).restore, (self.snapshot(), self._clock))


class PartitionedWatermarkTracker(_Restorable):
    """Watermarks per source partition, with idle detection.

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
    For example:

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
    _native_type = _native.PartitionedWatermarkTracker
    _inner: _native.PartitionedWatermarkTracker

    def __init__(self, idle_timeout: Duration | None = None, clock: Clock | None = None) -> None:
        timeout = None if idle_timeout is None else clock_ticks(idle_timeout, "idle_timeout")
        self._clock = clock
        self._inner = _native.PartitionedWatermarkTracker(timeout, native_clock(clock))

    @property
    def idle_timeout(self) -> int | None:
        """The idle timeout in clock ticks (``None``: disabled)."""
        return self._inner.idle_timeout

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

    def update_partition(
        self, source_id: int, partition: int, watermark: int | _dt.date
    ) -> int | None:
        """Sets a partition's watermark (a lower value is ignored) and marks it active:
        ticks, or a ``datetime`` as epoch microseconds.

        Returns the new combined watermark if it advanced, else ``None``. Raises
        :class:`UnknownPartitionError` / :class:`SourceNotFoundError`.
        """
        return self._inner.update_partition(source_id, partition, time_value(watermark))

    def update_partition_from_event(
        self,
        source_id: int,
        partition: int,
        event_time: int | _dt.date,
        max_lateness: Duration,
    ) -> int | None:
        """Updates a partition from an event: its watermark becomes
        ``event_time - max_lateness``. Returns the new combined watermark or ``None``.

        Ints are ticks as given; a ``datetime`` (or date, pandas Timestamp, numpy
        ``datetime64``) event time and a string or ``timedelta`` lateness are
        microseconds, the unit of Arrow timestamps (``"1s"``: 1,000,000)."""
        return self._inner.update_partition_from_event(
            source_id, partition, time_value(event_time), delay(max_lateness, "max_lateness")
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


class _PerKey(_Restorable):
    """What both per-key trackers do the same way: updates and lateness, one event or
    a batch, idleness on the clock, memory."""

    __slots__ = ("_clock", "_inner")
    _inner: _native.KeyedWatermarkTracker | _native.CompactKeyedWatermarkTracker

    def update(self, key: Any, event_time: int | _dt.date) -> int | None:
        """Records an event of ``key`` at ``event_time``: ticks (an int), or a
        ``datetime`` / ``date`` / numpy ``datetime64`` as epoch microseconds (naive
        ones as UTC), as :meth:`update_batch` reads timestamp arrays.

        Returns the global watermark if it rose above every value returned before.
        Raises :class:`MaxKeysReachedError` for a new key when full under ``reject_new``.
        """
        return self._inner.update(key, time_value(event_time))

    def update_batch(self, keys: Any, event_times: Any) -> int | None:
        """Records many events at once (vectorised when given Arrow data).

        Parameters
        ----------
        keys
            An Arrow array / chunked array / polars Series / numpy array / pandas
            Series, a RecordBatch / Table / DataFrame (all columns form the key) or a
            2-D numpy array (each column a key column), a list of Arrow arrays
            (several key columns), or a plain sequence of Python keys (numpy scalars
            count as the Python values they hold).
        event_times
            int64 ticks or timestamps (Arrow or numpy ``datetime64``: epoch
            microseconds), as an Arrow array, chunked array (e.g. a Table column),
            numpy array, pandas Series or a sequence (of ints, or of datetimes as
            :meth:`update` takes them). Rows with a null time are
            skipped.

        Returns
        -------
        int or None
            The global watermark if it rose above every value returned before.
        """
        watermark: int | None = keyed_call(self._inner, "update", keys, event_times)
        return watermark

    def is_late(self, key: Any, event_time: int | _dt.date) -> bool:
        """Whether an event is late for its key: ``event_time < watermark(key)``
        (``event_time`` as for :meth:`update`). Events of unknown keys are never
        late."""
        return self._inner.is_late(key, time_value(event_time))

    def is_late_batch(self, keys: Any, event_times: Any) -> pa.BooleanArray:
        """Vectorised :meth:`is_late` (same inputs as :meth:`update_batch`); null where
        the event time is null."""
        return keyed_call(self._inner, "is_late", keys, event_times)

    def check_idle_keys(self) -> int | None:
        """Marks (exact) keys silent for more than ``idle_timeout`` as idle (reads the
        clock); returns the global watermark if that made it rise."""
        return self._inner.check_idle_keys()

    def memory_bytes(self) -> int:
        """Heap bytes held, excluding the (exact) keys' own bytes."""
        return self._inner.heap_bytes()


class KeyState(TypedDict):
    """State of one key (``None``: no value yet)."""

    max_event_time: int | None
    watermark: int | None
    last_activity: int
    is_idle: bool


class KeyedWatermarkMetrics(TypedDict):
    """Metrics of a :class:`KeyedWatermarkTracker`."""

    total_keys: int
    active_keys: int
    idle_keys: int
    evicted_keys: int
    global_advances: int
    key_advances: int


class KeyedWatermarkTracker(_PerKey):
    """Watermarks per key: a slow tenant is judged by its own progress.

    Each key's watermark is its largest event time minus ``bounded_delay``; an event is
    late only if it is behind *its key's* watermark. With a global watermark, every key
    that runs behind the fastest ones loses data; with per-key watermarks it does not.

    The global watermark is the minimum over active keys (if none is active, the
    highest watermark any key has had): the "global, for ordering" watermark. It moves
    back only when a key that is behind joins or becomes active again (as in the
    example below); idling or removing keys never lowers it. The values the update
    calls *return* are monotonic: ``update`` returns the global watermark only when it
    rises above every value returned before (:meth:`emitted_watermark`).

    Parameters
    ----------
    bounded_delay : int, str or timedelta
        Maximum out-of-orderness. Ints are event-time ticks; strings and timedeltas are
        microseconds (the unit of Arrow timestamp event times).
    idle_timeout : int, str or timedelta, optional
        A key with no update for longer than this is idle (clock ticks, ms for the
        system clock). ``None``: keys go idle only when marked.
    max_keys : int, optional
        Bound on tracked keys (memory). ``None``: unlimited.
    eviction : str
        When ``max_keys`` is reached: ``"least_recently_active"`` (default),
        ``"lowest_watermark"``, or ``"reject_new"`` (raises
        :class:`MaxKeysReachedError`).
    clock : SystemClock or ManualClock, optional
        The clock idleness is decided on.

    Keys may be ``str``, ``bytes``, ``int``, ``float``, ``bool``, ``None`` or tuples of
    them; Arrow key columns may be any integer, string, binary, dictionary (and
    float/bool/date/timestamp/decimal) type, and several columns together. The Python key
    ``("eu", 7)`` and the Arrow row ``region="eu", id=7`` are the same key.

    Examples
    --------
    For example:

    >>> import tidemark as tm
    >>> tracker = tm.KeyedWatermarkTracker(bounded_delay=5000, idle_timeout=60_000)
    >>> tracker.update("tenant_a", 10_000)
    5000
    >>> tracker.update("tenant_a", 15_000)
    10000
    >>> tracker.update("tenant_b", 5_000)
    >>> tracker.watermark_for_key("tenant_a"), tracker.watermark_for_key("tenant_b")
    (10000, 0)
    >>> tracker.global_watermark()
    0
    >>> tracker.is_late("tenant_b", 3000), tracker.is_late("tenant_a", 3000)
    (False, True)
    """

    __slots__ = ()
    _native_type = _native.KeyedWatermarkTracker
    _inner: _native.KeyedWatermarkTracker

    def __init__(
        self,
        bounded_delay: Duration,
        idle_timeout: Duration | None = None,
        max_keys: int | None = None,
        eviction: str = "least_recently_active",
        clock: Clock | None = None,
    ) -> None:
        if max_keys is not None and max_keys < 1:
            raise ConfigError(f"max_keys must be >= 1 (or None for unlimited), got {max_keys}")
        timeout = None if idle_timeout is None else clock_ticks(idle_timeout, "idle_timeout")
        self._clock = clock
        self._inner = _native.KeyedWatermarkTracker(
            delay(bounded_delay, "bounded_delay"), timeout, max_keys, eviction, native_clock(clock)
        )

    @property
    def bounded_delay(self) -> int:
        """The bounded delay in event-time ticks."""
        return self._inner.bounded_delay

    @property
    def idle_timeout(self) -> int | None:
        """The idle timeout in clock ticks (``None``: disabled)."""
        return self._inner.idle_timeout

    @property
    def max_keys(self) -> int | None:
        """The key limit (``None``: unlimited)."""
        return self._inner.max_keys

    @property
    def eviction(self) -> str:
        """The eviction policy at ``max_keys``."""
        return self._inner.eviction

    def watermark_for_key(self, key: Any) -> int | None:
        """The watermark of ``key`` (``None`` if unknown)."""
        return self._inner.watermark_for_key(key)

    def key_state(self, key: Any) -> KeyState | None:
        """The full state of ``key`` (``None`` if unknown)."""
        return self._inner.key_state(key)  # type: ignore[return-value]

    def global_watermark(self) -> int | None:
        """Minimum over active keys (see the class docstring)."""
        return self._inner.global_watermark()

    def emitted_watermark(self) -> int | None:
        """The highest global watermark returned so far (monotonic)."""
        return self._inner.emitted_watermark()

    def mark_idle(self, key: Any) -> int | None:
        """Excludes ``key`` from the global minimum. Returns the global watermark if
        that made it rise above every value returned before."""
        return self._inner.mark_idle(key)

    def mark_active(self, key: Any) -> bool:
        """Includes ``key`` again (its idle timer restarts). ``False`` if unknown."""
        return self._inner.mark_active(key)

    def remove_key(self, key: Any) -> KeyState | None:
        """Stops tracking ``key``; returns its last state (``None`` if unknown)."""
        return self._inner.remove_key(key)  # type: ignore[return-value]

    def clear(self) -> None:
        """Forgets every key and watermark (metric counters are kept)."""
        self._inner.clear()

    def active_key_count(self) -> int:
        """Number of active keys."""
        return self._inner.active_key_count()

    def total_key_count(self) -> int:
        """Number of tracked keys."""
        return self._inner.total_key_count()

    def recalculate_global(self) -> int | None:
        """Recomputes the global watermark; returns it if it rose to a new high."""
        return self._inner.recalculate_global()

    def metrics(self) -> KeyedWatermarkMetrics:
        """``total_keys``, ``active_keys``, ``idle_keys``, ``evicted_keys``,
        ``global_advances``, ``key_advances``."""
        return self._inner.metrics()  # type: ignore[return-value]

    def __len__(self) -> int:
        return self._inner.total_key_count()

    def __repr__(self) -> str:
        return (
            f"KeyedWatermarkTracker(keys={self.total_key_count()}, "
            f"active={self.active_key_count()}, global={self.global_watermark()})"
        )


class CompactKeyedMetrics(TypedDict):
    """Metrics of a :class:`CompactKeyedWatermarkTracker`."""

    exact_keys: int
    evicted_keys: int
    estimated_distinct_keys: float
    sketch_fill: float


class CompactKeyedWatermarkTracker(_PerKey):
    """Per-key watermarks for millions of keys, in memory bounded by configuration.

    The ``exact_keys`` most recently active keys are tracked exactly (as in
    :class:`KeyedWatermarkTracker`). A key pushed out leaves its watermark in a
    min-sketch (``sketch_depth`` rows of ``sketch_width`` buckets, each holding the
    *minimum* watermark of the keys evicted into it); keys outside the exact set are
    estimated from it. Memory: ``exact_keys`` × (~60 bytes + key bytes) +
    ``sketch_width × sketch_depth × 8`` bytes + 4 KiB, whatever the key count.

    **Error direction.** For a key that was evicted, the estimate is at or below the
    watermark it had: its events are never wrongly called late, but some late events
    the exact tracker would reject are accepted. For a key never seen before, bucket
    collisions can give it an estimate (chance ≈ ``sketch_fill ** sketch_depth``): its
    events older than that estimate are called late although the exact tracker would
    accept them. ``benches/keyed_accuracy.py --compact`` measures both against the
    exact tracker. The global watermark is the exact part's.

    Examples
    --------
    >>> import tidemark as tm
    >>> t = tm.CompactKeyedWatermarkTracker(bounded_delay=10, exact_keys=2)
    >>> for key, ts in [("a", 100), ("b", 50), ("c", 70)]:   # "a" is evicted
    ...     _ = t.update(key, ts)
    >>> t.is_exact("a"), t.watermark_for_key("a"), t.is_late("a", 80)
    (False, 90, True)
    """

    _native_type = _native.CompactKeyedWatermarkTracker
    __slots__ = ()
    _inner: _native.CompactKeyedWatermarkTracker

    def __init__(
        self,
        bounded_delay: Duration,
        exact_keys: int = 10_000,
        sketch_width: int = 1 << 16,
        sketch_depth: int = 4,
        idle_timeout: Duration | None = None,
        clock: Clock | None = None,
    ) -> None:
        timeout = None if idle_timeout is None else clock_ticks(idle_timeout, "idle_timeout")
        self._clock = clock
        self._inner = _native.CompactKeyedWatermarkTracker(
            delay(bounded_delay, "bounded_delay"),
            exact_keys,
            sketch_width,
            sketch_depth,
            timeout,
            native_clock(clock),
        )

    def watermark_for_key(self, key: Any) -> int | None:
        """Exact watermark if the key is tracked exactly, else the sketch estimate."""
        return self._inner.watermark_for_key(key)

    def is_exact(self, key: Any) -> bool:
        """Whether ``key`` is in the exact part."""
        return self._inner.is_exact(key)

    def global_watermark(self) -> int | None:
        """The exact part's global watermark."""
        return self._inner.global_watermark()

    def configured_bytes(self) -> int:
        """The memory the configuration implies (per-key layout + sketch + HLL)."""
        return self._inner.configured_bytes()

    def metrics(self) -> CompactKeyedMetrics:
        """``exact_keys``, ``evicted_keys``, ``estimated_distinct_keys`` (HyperLogLog),
        ``sketch_fill``."""
        return self._inner.metrics()  # type: ignore[return-value]

    def __repr__(self) -> str:
        m = self.metrics()
        delay, exact, width, depth, _ = self._inner.config()
        return (
            f"CompactKeyedWatermarkTracker(bounded_delay={delay}, exact_keys={exact}, "
            f"sketch={depth}x{width}, exact_now={m['exact_keys']}, "
            f"global={self.global_watermark()})"
        )
