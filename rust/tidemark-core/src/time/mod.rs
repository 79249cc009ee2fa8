//! Event-time progress: watermarks per partition, per core, and event-time parsing.

mod compact;
mod keyed;
mod mintree;
mod parse;
mod partitioned;
mod per_core;
mod watermark;

pub use compact::{CompactKeyedConfig, CompactKeyedMetrics, CompactKeyedWatermarkTracker};
pub use keyed::{
    same_len, Eviction, KeyEvictionPolicy, KeyWatermarkState, KeyedTicks, KeyedWatermarkConfig,
    KeyedWatermarkMetrics, KeyedWatermarkTracker,
};
pub use mintree::{MinTree, NodeMinTree};
pub use parse::{
    epoch_unit_micros, format_epoch_micros, parse_event_time, EventTimeType, ParsedEventTime,
    BUILTIN_EVENT_TIME_TYPES,
};
pub use partitioned::{
    max_event_time_per_partition, PartitionId, PartitionWatermarkState,
    PartitionedWatermarkMetrics, PartitionedWatermarkTracker,
};
pub use per_core::{CoreWatermarkState, WatermarkCoordinator};
pub use watermark::{advance, combine, Watermark};
