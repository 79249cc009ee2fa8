//! Routing Arrow batches to shards: keyed hash partitioning (tidemark's own stable
//! hash or Spark's `HashPartitioning`), round-robin, single partition and broadcast.
//!
//! A [`Router`] computes one partition id per row in one vectorised pass, then
//! [`Router::route`] cuts the batch into one sub-batch per partition with a single
//! counting sort of row indices and one `take` per non-empty shard; rows keep their
//! input order inside each shard.
//!
//! ## The hashes (stable: part of the on-disk and cross-process contract)
//!
//! * [`HashAlgo::Xxh3`]: `h = xxh3_64(key)` (seed 0) where `key` is the row's
//!   canonical key encoding ([`crate::key`]: the same bytes for `Int32` and `Int64`
//!   columns of equal values, for `Utf8` and `LargeUtf8`, and for the Python value
//!   `("eu", 7)`), and `partition = ((h >> 32) * n) >> 32` (a multiply-shift range
//!   reduction, no division). Null is a key of its own.
//! * [`HashAlgo::Spark`]: exactly `pmod(murmur3_x86_32(cols..., seed = 42), n)` as
//!   Spark's `HashPartitioning` (`df.repartition(n, cols...)`) computes it: each
//!   column's hash seeds the next; a null leaves the running hash unchanged; booleans,
//!   bytes, shorts, ints and dates hash as an `int`, longs and timestamps (microseconds)
//!   as a `long`, floats and doubles by their bits with `-0.0` as `0` and one NaN,
//!   strings and binaries by Spark's `hashUnsafeBytes` (4-byte little-endian words,
//!   then each trailing byte as a signed int).

use arrow_array::{Array, ArrayRef, RecordBatch, UInt32Array};
use arrow_schema::Schema;

use self::spark::spark_partitions;
use self::xxh3::{xxh3_map, xxh3_partitions};
use crate::error::{Result, TidemarkError};

/// Which hash a keyed [`Router`] uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HashAlgo {
    /// xxh3-64 of the canonical key encoding (tidemark's default).
    Xxh3,
    /// Spark's `HashPartitioning`: Murmur3_x86_32, seed 42, `pmod`.
    Spark,
}

crate::names::named!(HashAlgo, "hash", { "xxh3" => HashAlgo::Xxh3, "spark" => HashAlgo::Spark });

/// A routing strategy: how a pipeline's state can be split over shards.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Strategy {
    /// Rows with equal keys go to the same partition (GROUP BY, keyed state).
    Hash {
        /// Key columns (or system fields such as `_PARTITION`).
        keys: Vec<String>,
        /// The hash.
        algo: HashAlgo,
    },
    /// Rows spread evenly, in turn (stateless work, partial aggregates of a global
    /// aggregate). The turn continues across batches.
    RoundRobin,
    /// Every row to partition 0.
    Single,
    /// Every row to every partition (a replicated table).
    Broadcast,
}

/// System fields usable as routing keys, and the Kafka-source columns they name.
pub const SYSTEM_FIELDS: [(&str, &str); 3] = [
    ("_PARTITION", "partition"),
    ("_OFFSET", "offset"),
    ("_TIMESTAMP", "timestamp"),
];

/// The system field naming the pipeline's event-time column.
pub const EVENT_TIME_FIELD: &str = "_EVENT_TIME";

/// Resolves a routing key name to a column name: system fields (any case) map to
/// their source columns, `_EVENT_TIME` to `event_time` (an error when there is none),
/// anything else is a column name as given.
pub fn resolve_key(name: &str, event_time: Option<&str>) -> Result<String> {
    let upper = name.to_ascii_uppercase();
    if upper == EVENT_TIME_FIELD {
        return event_time.map(str::to_string).ok_or_else(|| {
            TidemarkError::config(
                "keys",
                "_EVENT_TIME needs the event-time column: pass event_time=...",
            )
        });
    }
    Ok(SYSTEM_FIELDS
        .iter()
        .find(|(f, _)| *f == upper)
        .map_or_else(|| name.to_string(), |(_, c)| c.to_string()))
}

/// Routes Arrow batches to `n` partitions by a [`Strategy`].
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use arrow_array::{Int64Array, RecordBatch, StringArray};
/// use arrow_schema::{DataType, Field, Schema};
/// use tidemark_core::route::{HashAlgo, Router, Strategy};
///
/// let schema = Arc::new(Schema::new(vec![
///     Field::new("device", DataType::Utf8, false),
///     Field::new("v", DataType::Int64, false),
/// ]));
/// let batch = RecordBatch::try_new(schema, vec![
///     Arc::new(StringArray::from(vec!["a", "b", "a", "c"])),
///     Arc::new(Int64Array::from(vec![1, 2, 3, 4])),
/// ]).unwrap();
/// let mut r = Router::new(4, Strategy::Hash { keys: vec!["device".into()], algo: HashAlgo::Xxh3 }, None).unwrap();
/// let ids = r.partition_ids(&batch).unwrap();
/// assert_eq!(ids[0], ids[2]);            // equal keys, same partition
/// let shards = r.route(&batch).unwrap();
/// assert_eq!(shards.len(), 4);
/// assert_eq!(shards.iter().map(|s| s.num_rows()).sum::<usize>(), 4);
/// ```
#[derive(Debug, Clone)]
pub struct Router {
    n: u32,
    strategy: Strategy,
    /// Resolved key column names (hash strategy).
    columns: Vec<String>,
    next: u64,
}

impl Router {
    /// A router to `num_partitions` partitions. `event_time` names the column that
    /// the `_EVENT_TIME` system field stands for.
    pub fn new(
        num_partitions: usize,
        strategy: Strategy,
        event_time: Option<&str>,
    ) -> Result<Self> {
        if num_partitions == 0 || num_partitions > i32::MAX as usize {
            return Err(TidemarkError::config(
                "num_partitions",
                format!("must be between 1 and {}, got {num_partitions}", i32::MAX),
            ));
        }
        let columns = match &strategy {
            Strategy::Hash { keys, .. } => {
                if keys.is_empty() {
                    return Err(TidemarkError::config(
                        "keys",
                        "hash routing needs at least one key column; use round-robin for none",
                    ));
                }
                keys.iter()
                    .map(|k| resolve_key(k, event_time))
                    .collect::<Result<Vec<_>>>()?
            }
            _ => Vec::new(),
        };
        Ok(Self {
            n: num_partitions as u32,
            strategy,
            columns,
            next: 0,
        })
    }

    /// Number of partitions.
    pub fn num_partitions(&self) -> usize {
        self.n as usize
    }

    /// The strategy.
    pub fn strategy(&self) -> &Strategy {
        &self.strategy
    }

    /// The key columns rows are hashed on (system fields resolved).
    pub fn key_columns(&self) -> &[String] {
        &self.columns
    }

    /// Checks that `schema` has the key columns with routable types.
    pub fn validate(&self, schema: &Schema) -> Result<()> {
        let algo = match &self.strategy {
            Strategy::Hash { algo, .. } => *algo,
            _ => return Ok(()),
        };
        for c in &self.columns {
            let f = schema.field(crate::error::column_index(schema, c)?);
            let ok = match algo {
                HashAlgo::Xxh3 => crate::key::is_key_type(f.data_type()),
                HashAlgo::Spark => spark_hashable(f.data_type()),
            };
            if !ok {
                return Err(TidemarkError::config(
                    "keys",
                    format!(
                        "column {c:?} has type {} which {} routing cannot hash",
                        f.data_type(),
                        algo.name()
                    ),
                ));
            }
        }
        Ok(())
    }

    /// One partition id per row (`0..n`). For [`Strategy::Broadcast`] this is an error:
    /// every row goes to every partition (use [`Router::route`]).
    pub fn partition_ids(&mut self, batch: &RecordBatch) -> Result<Vec<u32>> {
        let rows = batch.num_rows();
        match &self.strategy {
            Strategy::Hash { .. } => self.hash_ids(&self.key_arrays(batch)?),
            Strategy::RoundRobin => {
                let start = self.next;
                self.next = self.next.wrapping_add(rows as u64);
                let n = self.n as u64;
                let mut p = (start % n) as u32;
                Ok((0..rows)
                    .map(|_| {
                        let v = p;
                        p += 1;
                        if p == self.n {
                            p = 0;
                        }
                        v
                    })
                    .collect())
            }
            Strategy::Single => Ok(vec![0; rows]),
            Strategy::Broadcast => Err(TidemarkError::config(
                "strategy",
                "broadcast sends every row to every partition; there is no partition id per row (use route)",
            )),
        }
    }

    /// Whether a row's partition depends on its own key alone (hash and single
    /// strategies), so that slices of a batch can be routed independently, in
    /// parallel ([`Router::slice_partition_ids`]). Round-robin carries a turn.
    pub fn is_stateless(&self) -> bool {
        matches!(self.strategy, Strategy::Hash { .. } | Strategy::Single)
    }

    /// Partition ids of rows `offset..offset + len` of `batch`: the ids
    /// [`Router::partition_ids`] gives those rows, for stateless strategies
    /// ([`Router::is_stateless`]); takes `&self`, so threads can share the router.
    pub fn slice_partition_ids(
        &self,
        batch: &RecordBatch,
        offset: usize,
        len: usize,
    ) -> Result<Vec<u32>> {
        match &self.strategy {
            Strategy::Hash { .. } => {
                let cols: Vec<ArrayRef> = self
                    .key_arrays(batch)?
                    .iter()
                    .map(|c| c.slice(offset, len))
                    .collect();
                self.hash_ids(&cols)
            }
            Strategy::Single => Ok(vec![0; len]),
            _ => Err(TidemarkError::config(
                "strategy",
                "only hash and single routing route slices independently",
            )),
        }
    }

    /// The hash strategy's key arrays of `batch` (validated).
    fn key_arrays(&self, batch: &RecordBatch) -> Result<Vec<ArrayRef>> {
        self.validate(batch.schema_ref())?;
        Ok(self
            .columns
            .iter()
            .map(|c| batch.column_by_name(c).expect("validated").clone())
            .collect())
    }

    /// Partition ids of the rows of the key columns `cols` (hash strategy).
    fn hash_ids(&self, cols: &[ArrayRef]) -> Result<Vec<u32>> {
        match &self.strategy {
            Strategy::Hash {
                algo: HashAlgo::Spark,
                ..
            } => spark_partitions(cols, self.n),
            _ => xxh3_partitions(cols, self.n),
        }
    }

    /// The 64-bit xxh3 hash of every row's key ([`HashAlgo::Xxh3`] hash strategies
    /// only): `partition = reduce(hash, n)`.
    pub fn key_hashes(&self, batch: &RecordBatch) -> Result<Vec<u64>> {
        match &self.strategy {
            Strategy::Hash {
                algo: HashAlgo::Xxh3,
                ..
            } => xxh3_map(&self.key_arrays(batch)?, |h| h),
            _ => Err(TidemarkError::config(
                "strategy",
                "key hashes need hash routing with hash=\"xxh3\"",
            )),
        }
    }

    /// Cuts `batch` into one sub-batch per partition (index = partition id; empty
    /// batches for partitions with no rows). Rows keep their order inside a shard.
    /// Broadcast returns `n` references to the same batch (no copy).
    pub fn route(&mut self, batch: &RecordBatch) -> Result<Vec<RecordBatch>> {
        if self.strategy == Strategy::Broadcast {
            return Ok(vec![batch.clone(); self.n as usize]);
        }
        let ids = self.partition_ids(batch)?;
        split_by_partition(batch, &ids, self.n as usize)
    }
}

/// Splits `batch` by per-row partition ids (`< n`) with one counting sort and one
/// `take` per non-empty partition.
pub fn split_by_partition(batch: &RecordBatch, ids: &[u32], n: usize) -> Result<Vec<RecordBatch>> {
    let groups = group_rows(ids, n);
    let mut out = Vec::with_capacity(n);
    for p in 0..n {
        let (lo, hi) = (groups.offsets[p], groups.offsets[p + 1]);
        if hi == lo {
            out.push(batch.slice(0, 0));
        } else if hi - lo == batch.num_rows() {
            out.push(batch.clone());
        } else {
            let idx = UInt32Array::from(groups.rows[lo..hi].to_vec());
            out.push(arrow_select::take::take_record_batch(batch, &idx)?);
        }
    }
    Ok(out)
}

/// Row indices grouped by partition: partition `p`'s rows are
/// `rows[offsets[p]..offsets[p + 1]]`, in input order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowGroups {
    /// `n + 1` offsets into `rows`.
    pub offsets: Vec<usize>,
    /// Row indices, grouped by partition.
    pub rows: Vec<u32>,
}

/// Counting sort of row indices by partition id (stable).
pub fn group_rows(ids: &[u32], n: usize) -> RowGroups {
    let mut offsets = vec![0usize; n + 1];
    for &p in ids {
        offsets[p as usize + 1] += 1;
    }
    for p in 0..n {
        offsets[p + 1] += offsets[p];
    }
    let mut fill = offsets[..n].to_vec();
    let mut rows = vec![0u32; ids.len()];
    for (i, &p) in ids.iter().enumerate() {
        let f = &mut fill[p as usize];
        rows[*f] = i as u32;
        *f += 1;
    }
    RowGroups { offsets, rows }
}

/// A hash router on the given key columns (shorthand for [`Router::new`]).
pub fn hash_router(num_partitions: usize, keys: &[&str], algo: HashAlgo) -> Result<Router> {
    Router::new(
        num_partitions,
        Strategy::Hash {
            keys: keys.iter().map(|k| k.to_string()).collect(),
            algo,
        },
        None,
    )
}

pub(crate) mod spark;
mod xxh3;

pub use spark::{
    spark_hash_bytes, spark_hash_int, spark_hash_long, spark_hashable, spark_pmod, spark_tags,
};
pub use xxh3::{reduce, xxh3_partition};

#[cfg(test)]
mod tests;
