//! The one error type of the core crate.
//!
//! Every fallible public function returns [`Result<T>`]. The Python bindings map each
//! variant to one exception class under `tidemark.TidemarkError` (see
//! `rust/tidemark-py/src/error.rs`), so the variant names here are part of the API.

use arrow_schema::ArrowError;

/// Result alias used throughout the core crate.
pub type Result<T, E = TidemarkError> = std::result::Result<T, E>;

/// Every error the core can report.
#[derive(Debug, thiserror::Error)]
pub enum TidemarkError {
    /// A partition was named that is not (or no longer) tracked.
    #[error("unknown partition {partition} of source {source_id}: it is not registered (or was removed); call add_partition({source_id}, {partition}) first")]
    UnknownPartition {
        /// Source of the partition.
        source_id: usize,
        /// Partition number within the source.
        partition: u32,
    },

    /// A source was named that was never registered.
    #[error("unknown source {source_id}: call register_source({source_id}, num_partitions) first")]
    SourceNotFound {
        /// The source id.
        source_id: usize,
    },

    /// A partition number that cannot be used (out of range, or already registered).
    #[error("invalid partition {partition} of source {source_id}: {reason}")]
    InvalidPartition {
        /// Source of the partition.
        source_id: usize,
        /// Partition number within the source.
        partition: i64,
        /// What is wrong with it.
        reason: String,
    },

    /// A keyed tracker with the `reject_new` policy is full.
    #[error("max_keys={max_keys} reached: new key rejected (raise max_keys or choose the least_recently_active / lowest_watermark eviction policy)")]
    MaxKeysReached {
        /// The configured limit.
        max_keys: usize,
    },

    /// An event-time type name that is not registered.
    #[error("unknown event time type {name:?}; registered types: {}", registered.join(", "))]
    UnknownEventTimeType {
        /// The name asked for.
        name: String,
        /// The names that are registered.
        registered: Vec<String>,
    },

    /// A column named in the configuration is not in the data.
    #[error("column {column:?} not found; available columns: {}", available.join(", "))]
    MissingColumn {
        /// The missing column.
        column: String,
        /// The columns the data has.
        available: Vec<String>,
    },

    /// A configuration value that cannot work, named by the setting.
    #[error("invalid configuration for {setting}: {message}")]
    Config {
        /// The setting (argument or column) at fault.
        setting: String,
        /// What is wrong and what would work.
        message: String,
    },

    /// A key longer than keyed state holds (a row's error, not the stream's).
    #[error("a key of {bytes} bytes is longer than the supported {limit} bytes")]
    KeyTooLong {
        /// The key's length.
        bytes: usize,
        /// The longest key supported.
        limit: usize,
    },

    /// A saved state that cannot be restored.
    #[error("state corrupted: {0}")]
    StateCorrupted(String),

    /// An error from the Arrow libraries.
    #[error("arrow error: {0}")]
    Arrow(#[from] ArrowError),
}

impl TidemarkError {
    /// Shorthand for a [`TidemarkError::Config`] error.
    pub fn config(setting: impl Into<String>, message: impl Into<String>) -> Self {
        TidemarkError::Config {
            setting: setting.into(),
            message: message.into(),
        }
    }
}

/// The index of the column `name` in `schema`, or [`TidemarkError::MissingColumn`]
/// naming the columns the schema has.
pub fn column_index(schema: &arrow_schema::Schema, name: &str) -> Result<usize> {
    schema
        .index_of(name)
        .map_err(|_| TidemarkError::MissingColumn {
            column: name.to_string(),
            available: schema.fields().iter().map(|f| f.name().clone()).collect(),
        })
}
