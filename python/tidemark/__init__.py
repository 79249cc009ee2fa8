"""tidemark: correct event time for Spark and Arrow.

Per-partition watermarks with idle detection, event-time parsing, and (as the
project grows) per-key watermarks, timers, windows and reordering — in Rust, on
Arrow data, callable from PySpark ``mapInArrow``, pyarrow and polars.

>>> import tidemark as tm
>>> t = tm.PartitionedWatermarkTracker()
>>> t.register_source(0, 2)
>>> t.update_partition(0, 0, 5_000)
>>> t.update_partition(0, 1, 3_000)
3000
"""

from __future__ import annotations

from tidemark import _native
from tidemark import aggs as _aggs
from tidemark.aggs import *  # noqa: F403 (the aggregates: tidemark.aggs.__all__)
from tidemark.clock import Clock, ManualClock, SystemClock
from tidemark.errors import (
    ArrowDataError,
    ConfigError,
    InternalError,
    InvalidPartitionError,
    MaxKeysReachedError,
    MissingColumnError,
    SourceNotFoundError,
    StateCorruptedError,
    TidemarkError,
    TidemarkWarning,
    UnknownEventTimeTypeError,
    UnknownPartitionError,
    WatermarkError,
)
from tidemark.event_time import (
    ParsedEventTime,
    event_time_types,
    parse_event_time,
    register_event_time_type,
)
from tidemark.lateness import LatenessReport
from tidemark.operator import Operator, Output, ScopeWatermark
from tidemark.pipeline import Pipeline
from tidemark.reorder import ProcessingTimeWatermark, Reorder, ReorderOutput
from tidemark.route import HashRouter, Router
from tidemark.stream import EventTimeColumn, EventTimeOptions, StreamDefinition, plan
from tidemark.timers import TimerService
from tidemark.watermarks import (
    CompactKeyedWatermarkTracker,
    KeyedWatermarkTracker,
    PartitionedWatermarkTracker,
)
from tidemark.windows import (
    AdaptiveOutOfOrderness,
    BoundedOutOfOrderness,
    Rows,
    Session,
    Sliding,
    Tumbling,
)

__version__: str = _native.__version__

__all__ = [
    # The aggregates (tm.count(), tm.sum(...)): tidemark.aggs'.
    *_aggs.__all__,
    "AdaptiveOutOfOrderness",
    "ArrowDataError",
    "BoundedOutOfOrderness",
    "Clock",
    "CompactKeyedWatermarkTracker",
    "ConfigError",
    "EventTimeColumn",
    "EventTimeOptions",
    "HashRouter",
    "InternalError",
    "InvalidPartitionError",
    "KeyedWatermarkTracker",
    "LatenessReport",
    "ManualClock",
    "MaxKeysReachedError",
    "MissingColumnError",
    "Operator",
    "Output",
    "ParsedEventTime",
    "PartitionedWatermarkTracker",
    "Pipeline",
    "ProcessingTimeWatermark",
    "Reorder",
    "ReorderOutput",
    "Router",
    "Rows",
    "ScopeWatermark",
    "Session",
    "Sliding",
    "SourceNotFoundError",
    "StateCorruptedError",
    "StreamDefinition",
    "SystemClock",
    "TidemarkError",
    "TidemarkWarning",
    "TimerService",
    "Tumbling",
    "UnknownEventTimeTypeError",
    "UnknownPartitionError",
    "WatermarkError",
    "__version__",
    "event_time_types",
    "parse_event_time",
    "plan",
    "register_event_time_type",
]
