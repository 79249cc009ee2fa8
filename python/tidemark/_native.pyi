"""Type stubs for the compiled module ``tidemark._native`` (checked by mypy.stubtest).

Users call the documented Python classes in ``tidemark``; these are the native
objects behind them.
"""

from typing import Any, final

__version__: str
__all__ = [
    "ManualClock",
    "PartitionedWatermarkTracker",
    "SystemClock",
    "__version__",
    "builtin_event_time_types",
    "check_event_time_type",
    "parse_duration",
    "parse_event_time",
]

@final
class SystemClock:
    """Monotonic wall clock in milliseconds."""

    def __new__(cls) -> SystemClock: ...
    def now(self) -> int:
        """Current time in milliseconds."""

@final
class ManualClock:
    """A clock that only moves when told to."""

    def __new__(cls, start: int = 0) -> ManualClock: ...
    def now(self) -> int:
        """Current time in ticks."""
    def advance(self, ticks: int) -> int:
        """Moves the clock forward by `ticks` and returns the new time."""
    def set(self, t: int) -> None:
        """Sets the clock to `t` (not earlier than now)."""

@final
class PartitionedWatermarkTracker:
    """Native per-partition watermark tracker (see `tidemark.PartitionedWatermarkTracker`)."""

    def __new__(
        cls, idle_timeout: int | None = None, clock: SystemClock | ManualClock | None = None
    ) -> PartitionedWatermarkTracker: ...
    @property
    def idle_timeout(self) -> int | None: ...
    def register_source(self, source_id: int, num_partitions: int) -> int | None: ...
    def add_partition(self, source_id: int, partition: int) -> None: ...
    def remove_partition(self, source_id: int, partition: int) -> dict[str, Any] | None: ...
    def update_partition(self, source_id: int, partition: int, watermark: int) -> int | None: ...
    def update_partition_from_event(
        self, source_id: int, partition: int, event_time: int, max_lateness: int
    ) -> int | None: ...
    def mark_partition_idle(self, source_id: int, partition: int) -> int | None: ...
    def mark_partition_active(self, source_id: int, partition: int) -> None: ...
    def check_idle_partitions(self) -> int | None: ...
    def recalculate(self) -> int | None: ...
    def current_watermark(self) -> int | None: ...
    def partition_watermark(self, source_id: int, partition: int) -> int | None: ...
    def partition_state(self, source_id: int, partition: int) -> dict[str, Any]: ...
    def source_watermark(self, source_id: int) -> int | None: ...
    def is_partition_idle(self, source_id: int, partition: int) -> bool: ...
    def active_partition_count(self, source_id: int) -> int: ...
    def partitions(self) -> list[tuple[int, int]]: ...
    def assign_partition_to_core(self, source_id: int, partition: int, core: int) -> None: ...
    def partition_core(self, source_id: int, partition: int) -> int | None: ...
    def metrics(self) -> dict[str, int]: ...
    def observe(
        self,
        data: Any,
        source_id: int,
        partition_column: str,
        event_time: str,
        event_time_type: str | None,
        max_lateness: int,
        add_missing: bool,
        parsed: Any = None,
    ) -> int | None:
        """Vectorised update from one Arrow batch (see the Python docstring)."""

def builtin_event_time_types() -> list[str]:
    """Names of the built-in event-time types."""

def parse_duration(text: str) -> int:
    """Parses a duration string ("250ms", "5s", "1h30m") into microseconds."""

def parse_event_time(
    data: Any,
    event_time_type: str | None = None,
    allow_ticks: bool = False,
    column: str = "event_time",
) -> tuple[Any, Any, Any]:
    """Parses an event-time array (or chunked array) to int64 epoch microseconds."""

def check_event_time_type(
    column: str, like: Any, event_time_type: str | None = None, allow_ticks: bool = False
) -> str:
    """Checks that `event_time_type` can parse a column of the given Arrow type."""
