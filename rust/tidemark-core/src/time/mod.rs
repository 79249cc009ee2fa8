//! Event-time progress: watermarks per partition, per core, and event-time parsing.

mod core;
mod mintree;
mod parse;
mod partitioned;
mod watermark;

pub use self::core::{CoreWatermarkState, WatermarkCoordinator};
pub use mintree::MinTree;
pub use parse::{parse_event_time, EventTimeType, ParsedEventTime, BUILTIN_EVENT_TIME_TYPES};
pub use partitioned::{
    max_event_time_per_partition, PartitionId, PartitionWatermarkState,
    PartitionedWatermarkMetrics, PartitionedWatermarkTracker,
};
pub use watermark::Watermark;
