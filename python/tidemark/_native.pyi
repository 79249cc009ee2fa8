"""Type stubs for the compiled module ``tidemark._native`` (checked by mypy.stubtest).

Users call the documented Python classes in ``tidemark``; these are the native
objects behind them.
"""

from typing import Any, final

__version__: str
MAX_KEY_BYTES: int
MAX_FIXED_VALUE_BYTES: int
VARIABLE_VALUE_OVERHEAD: int
SOURCE_PARTITIONS: int
SAFE_EVENT_TIME: int
SAFE_WINDOW: int
SETTLE_CALLS: int
EPOCH_UNIT_MICROS: dict[str, int]
__all__ = [
    "EPOCH_UNIT_MICROS",
    "MAX_FIXED_VALUE_BYTES",
    "MAX_KEY_BYTES",
    "SAFE_EVENT_TIME",
    "SAFE_WINDOW",
    "SETTLE_CALLS",
    "SOURCE_PARTITIONS",
    "VARIABLE_VALUE_OVERHEAD",
    "CompactKeyedWatermarkTracker",
    "KeyedWatermarkTracker",
    "ManualClock",
    "MicroBatch",
    "Operator",
    "PartitionedWatermarkTracker",
    "ReorderOperator",
    "Router",
    "RowsOperator",
    "ScopeWatermark",
    "ShardedOperator",
    "SystemClock",
    "TimerService",
    "__version__",
    "builtin_event_time_types",
    "check_event_time_type",
    "check_name",
    "lookup_schema",
    "parse_duration",
    "parse_event_time",
    "pipeline_input_columns",
    "pipeline_output_schema",
    "reshard_snapshots",
    "spark_hashable",
    "spark_tags",
    "summarize_batch",
    "validate_pipeline",
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
    def snapshot(self) -> bytes:
        """The tracker's state as bytes (versioned, checksummed)."""
    @staticmethod
    def restore(
        data: bytes, clock: SystemClock | ManualClock | None = None
    ) -> PartitionedWatermarkTracker:
        """A tracker restored from `snapshot()` bytes, reading `clock`."""
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

@final
class KeyedWatermarkTracker:
    """Native per-key watermark tracker (see `tidemark.KeyedWatermarkTracker`)."""

    def __new__(
        cls,
        bounded_delay: int,
        idle_timeout: int | None = None,
        max_keys: int | None = None,
        eviction: str = "least_recently_active",
        clock: SystemClock | ManualClock | None = None,
    ) -> KeyedWatermarkTracker: ...
    @property
    def bounded_delay(self) -> int: ...
    @property
    def idle_timeout(self) -> int | None: ...
    @property
    def max_keys(self) -> int | None: ...
    @property
    def eviction(self) -> str: ...
    def snapshot(self) -> bytes:
        """The tracker's state, configuration included, as bytes (versioned, checksummed)."""
    @staticmethod
    def restore(
        data: bytes, clock: SystemClock | ManualClock | None = None
    ) -> KeyedWatermarkTracker:
        """A tracker restored from `snapshot()` bytes, reading `clock`."""
    def update(self, key: Any, event_time: int) -> int | None: ...
    def update_columns(self, columns: list[Any], event_times: Any) -> int | None:
        """Batch update from Arrow key columns and an event-time array."""
    def update_pykeys(self, keys: list[Any], event_times: list[int | None] | Any) -> int | None:
        """Batch update from Python keys and int event times (None: row skipped)."""
    def watermark_for_key(self, key: Any) -> int | None: ...
    def key_state(self, key: Any) -> dict[str, Any] | None: ...
    def global_watermark(self) -> int | None: ...
    def emitted_watermark(self) -> int | None: ...
    def is_late(self, key: Any, event_time: int) -> bool: ...
    def is_late_columns(self, columns: list[Any], event_times: Any) -> Any: ...
    def is_late_pykeys(self, keys: list[Any], event_times: list[int | None] | Any) -> Any: ...
    def mark_idle(self, key: Any) -> int | None: ...
    def mark_active(self, key: Any) -> bool: ...
    def check_idle_keys(self) -> int | None: ...
    def remove_key(self, key: Any) -> dict[str, Any] | None: ...
    def clear(self) -> None: ...
    def active_key_count(self) -> int: ...
    def total_key_count(self) -> int: ...
    def recalculate_global(self) -> int | None: ...
    def heap_bytes(self) -> int: ...
    def metrics(self) -> dict[str, int]: ...

@final
class CompactKeyedWatermarkTracker:
    """Native memory-bounded keyed tracker (see `tidemark.CompactKeyedWatermarkTracker`)."""

    def __new__(
        cls,
        bounded_delay: int,
        exact_keys: int,
        sketch_width: int,
        sketch_depth: int,
        idle_timeout: int | None = None,
        clock: SystemClock | ManualClock | None = None,
    ) -> CompactKeyedWatermarkTracker: ...
    def config(self) -> tuple[int, int, int, int, int | None]:
        """The configuration: (bounded_delay, exact_keys, sketch_width, sketch_depth,
        idle_timeout)."""
    def snapshot(self) -> bytes:
        """The tracker's state, configuration included, as bytes (versioned, checksummed)."""
    @staticmethod
    def restore(
        data: bytes, clock: SystemClock | ManualClock | None = None
    ) -> CompactKeyedWatermarkTracker:
        """A tracker restored from `snapshot()` bytes, reading `clock`."""
    def update(self, key: Any, event_time: int) -> int | None: ...
    def update_columns(self, columns: list[Any], event_times: Any) -> int | None: ...
    def update_pykeys(self, keys: list[Any], event_times: list[int | None] | Any) -> int | None: ...
    def watermark_for_key(self, key: Any) -> int | None: ...
    def is_exact(self, key: Any) -> bool: ...
    def is_late(self, key: Any, event_time: int) -> bool: ...
    def is_late_columns(self, columns: list[Any], event_times: Any) -> Any: ...
    def is_late_pykeys(self, keys: list[Any], event_times: list[int | None] | Any) -> Any: ...
    def global_watermark(self) -> int | None: ...
    def check_idle_keys(self) -> int | None: ...
    def heap_bytes(self) -> int: ...
    def configured_bytes(self) -> int: ...
    def metrics(self) -> dict[str, Any]: ...

@final
class Operator:
    """Native pipeline operator (see `tidemark.Operator`)."""

    def __new__(
        cls,
        config: dict[str, Any],
        clock: SystemClock | ManualClock | None = None,
        state: bytes | None = None,
    ) -> Operator: ...
    def ingest(self, data: Any, parsed_times: Any = None) -> None:
        """The first half of `process`: judges and adds the rows and advances this
        operator's watermarks (see `progress`), closing nothing; `complete` finishes."""
    def complete(self, close_watermark: int | None = None) -> tuple[Any, Any, Any]:
        """The second half of `process`: closes the windows `close_watermark` (combined
        over every operator of the scope; `None`: this operator's own) passed."""
    def process(self, data: Any, parsed_times: Any = None) -> tuple[Any, Any, Any]:
        """Processes one arrival unit (all batches of `data` together)."""
    def flush(self) -> tuple[Any, Any, Any]: ...
    def tick(self) -> tuple[Any, Any, Any]: ...
    def snapshot(self) -> bytes: ...
    @property
    def watermark(self) -> int | None: ...
    def set_lookup(self, lookup: tuple[Any, list[str], str, str | None] | None) -> None:
        """Joins every input row with a lookup table first: `(table, on, how, prefix)`
        (`None`: no lookup)."""
    def set_external_watermark(self, watermark: int | None) -> None:
        """Drives the operator with the scope's watermark combined elsewhere (`None`: the
        scope has none yet; see `External`)."""
    def set_external_time(self, time: int | None) -> None:
        """The scope's event time combined elsewhere (`None`: this operator's own)."""
    def set_sorted_output(self, on: bool) -> None:
        """Off: each call's windows in the order they closed instead of sorted."""
    def progress(self) -> dict[str, Any]:
        """What the last process call saw: max event time, per-partition maxima, key-scope
        global watermark."""
    def key_watermark(self, key: Any) -> int | None: ...
    def metrics(self) -> dict[str, Any]: ...

@final
class ScopeWatermark:
    """The watermark of a pipeline's scope, combined over the operators that share it
    (see `tidemark_core::pipeline::ScopeWatermark`)."""

    def __new__(
        cls,
        config: dict[str, Any],
        clock: SystemClock | ManualClock | None = None,
        state: bytes | None = None,
    ) -> ScopeWatermark: ...
    @staticmethod
    def processing(clock: SystemClock | ManualClock | None = None) -> ScopeWatermark:
        """The processing-time rule alone: the watermark follows `clock` (see
        `tidemark.ProcessingTimeWatermark`)."""
    def advance(self, progress: list[dict[str, Any]]) -> int | None:
        """Combines the progress dicts of one call of every operator; returns the
        watermark that closes windows after it (`None`: none yet)."""
    @property
    def current(self) -> int | None:
        """The current watermark (`None`: none yet)."""
    @property
    def time(self) -> int | None:
        """The scope's event time: the largest event time reported (`None`: none)."""
    def to_bytes(self) -> bytes: ...

@final
class RowsOperator:
    """Native ROWS-window operator (see `tidemark.Rows`)."""

    def __new__(cls, config: dict[str, Any], state: bytes | None = None) -> RowsOperator: ...
    def process(self, data: Any, parsed_times: Any = None) -> tuple[Any, Any, Any]: ...
    def flush(self) -> tuple[Any, Any, Any]: ...
    def tick(self) -> tuple[Any, Any, Any]: ...
    def snapshot(self) -> bytes: ...
    @property
    def watermark(self) -> int | None:
        """ROWS windows have no watermark."""
    def progress(self) -> dict[str, Any]: ...
    def metrics(self) -> dict[str, Any]: ...

@final
class ReorderOperator:
    """Native reorder operator."""

    def __new__(cls, config: dict[str, Any], state: bytes | None = None) -> ReorderOperator: ...
    def process(self, data: Any, parsed_times: Any = None) -> tuple[Any, int | None, Any, Any]: ...
    def flush(self) -> tuple[Any, int | None, Any, Any]: ...
    def snapshot(self) -> bytes: ...
    @property
    def watermark(self) -> int | None: ...
    def metrics(self) -> dict[str, Any]: ...

@final
class ShardedOperator:
    """Native sharded operator (see `tidemark.Operator` with cores > 1)."""

    def __new__(
        cls,
        config: dict[str, Any],
        cores: int,
        queue_capacity: int = 4,
        clock: SystemClock | ManualClock | None = None,
        state: bytes | None = None,
        hot_keys: float | None = None,
    ) -> ShardedOperator: ...
    def set_lookup(self, lookup: tuple[Any, list[str], str, str | None] | None) -> None:
        """Joins every input row with a lookup table first: `(table, on, how, prefix)`
        (`None`: no lookup)."""
    def pin_cores(self) -> int:
        """Pins worker i to CPU core i; returns how many were pinned."""
    @property
    def cores(self) -> int: ...
    def process(self, data: Any, parsed_times: Any = None) -> tuple[Any, Any, Any]: ...
    def flush(self) -> tuple[Any, Any, Any]: ...
    def tick(self) -> tuple[Any, Any, Any]: ...
    def snapshot(self) -> bytes: ...
    @property
    def watermark(self) -> int | None: ...
    def progress(self) -> dict[str, Any]: ...
    def metrics(self) -> dict[str, Any]: ...

@final
class TimerService:
    """Native timer service (see `tidemark.TimerService`). Keys are Python keys, stored
    in the canonical key encoding and decoded back when timers fire."""

    def __new__(cls) -> TimerService: ...
    def change(self, add: bool, timestamp: int, key: Any, namespace: int, kind: str) -> bool:
        """Registers a timer (`add`) or deletes one; whether that changed anything."""
    def timers(self, kind: str) -> list[tuple[int, Any, int]]: ...
    def advance_watermark(self, watermark: int) -> list[tuple[int, Any, int]]: ...
    def advance_processing_time(self, now: int) -> list[tuple[int, Any, int]]: ...
    @property
    def watermark(self) -> int | None: ...
    def __len__(self) -> int: ...
    def snapshot(self) -> bytes: ...
    @staticmethod
    def restore(data: bytes) -> TimerService: ...

def validate_pipeline(config: dict[str, Any]) -> int:
    """Validates a pipeline configuration dict (raises a `ConfigError` on mistakes)."""

def lookup_schema(table: Any, on: list[str], how: str, prefix: str | None, schema: Any) -> Any:
    """The input schema with a lookup table's non-key columns appended."""

def pipeline_input_columns(config: dict[str, Any]) -> list[str]:
    """The input columns a pipeline reads (keys, event time, source partition,
    aggregate inputs), once each."""

def pipeline_output_schema(config: dict[str, Any], schema: Any) -> Any:
    """The output schema of a pipeline for an input schema."""

def spark_hashable(schema: Any, names: list[str]) -> list[bool]:
    """Whether tidemark's Spark hash reproduces Spark's `hash()` of each of the columns
    `names` of `schema` (an Arrow schema): `False` for a missing column or another type."""

def reshard_snapshots(
    config: dict[str, Any], snapshots: list[bytes], n: int, hash: str = "spark"
) -> list[bytes]:
    """Operator snapshots redistributed over `n` state partitions by key."""

@final
class MicroBatch:
    """One micro-batch over state partitions (see the core's `MicroBatch` and
    `ReorderBatch`): of a pipeline, or of a reorder (a config with `operator:
    "reorder"`); built with the batch's driver record, run once per task."""

    def __new__(
        cls,
        config: dict[str, Any],
        partitions: int,
        *,
        tag_column: str | None = None,
        watermark: int | None = None,
        time: int | None = None,
        clock_ms: int = 0,
        wall_clock: bool = False,
        quartiles: tuple[int, int] | None = None,
        scope: bytes | None = None,
        source: tuple[list[int], list[int]] | None = None,
        flush: bool = False,
        settle: bool = False,
        threads: int = 1,
        weight: str | None = None,
        lookup: tuple[Any, list[str], str, str | None] | None = None,
        run: str = ...,
        keys: list[str] = ...,
    ) -> MicroBatch: ...
    def run(
        self, data: Any, held: list[tuple[int, bytes | None, str]], parsed_times: Any = None
    ) -> list[tuple[int, tuple[Any, Any, Any], bytes, bytes]]:
        """Runs the batch over the state partitions `held` (`(partition, snapshot or
        None, its name in errors)`) on `data`: `[(partition, (windows, late, errors),
        snapshot, report)]` in `held`'s order."""

def spark_tags(n: int) -> tuple[list[int], list[int]]:
    """Per state partition of `n`: the int tag of its rows and of its placeholder row,
    which Spark's `repartition(n, tag)` sends to that partition."""

def summarize_batch(
    config: dict[str, Any],
    reports: list[bytes],
    run: str,
    scope: bytes | None,
    clock_ms: int,
    source: tuple[list[int], list[int]] | None = None,
) -> dict[str, Any] | None:
    """The driver's view of a micro-batch from every state partition's report bytes:
    `None` when one is another run's; else a dict with the next `watermark`, the
    `scope` state and `time` after the batch, the row counts summed, and `settled`
    (a quiet batch: the most calls made, and whether the last changed nothing). Of a
    reorder: the stream's `watermark`, `input_rows`, `released_rows`, `late_rows`,
    `error_rows`, `buffered_rows` and `buffer_bytes`."""

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

def check_name(setting: str, value: str) -> None:
    """Checks a configuration name against the core's names for `setting`: `per` (a
    watermark's scope), `idleness` or `late` (a reorder's late policy); an unknown name
    is a `ConfigError` listing the names."""

@final
class Router:
    """Native router (see `tidemark.Router`)."""

    def __new__(
        cls,
        num_partitions: int,
        strategy: str,
        keys: list[str] | None = None,
        hash: str = "xxh3",
        event_time: str | None = None,
    ) -> Router: ...
    @property
    def num_partitions(self) -> int: ...
    @property
    def key_columns(self) -> list[str]: ...
    def partition_ids(self, data: Any) -> Any:
        """Partition id per row, as a pyarrow Int32Array."""
    def route(self, data: Any) -> list[Any]:
        """One pyarrow RecordBatch per partition."""
    def partition_of(self, key: Any) -> int:
        """Partition of one key given as Python values (xxh3 hashing only)."""
