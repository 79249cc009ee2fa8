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

use arrow_array::cast::AsArray;
use arrow_array::types::*;
use arrow_array::{Array, ArrayRef, RecordBatch, UInt32Array};
use arrow_schema::{DataType, Schema, TimeUnit};

use crate::error::{Result, TidemarkError};
use crate::key::{KeyColumns, KeyRows};

/// Which hash a keyed [`Router`] uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HashAlgo {
    /// xxh3-64 of the canonical key encoding (tidemark's default).
    Xxh3,
    /// Spark's `HashPartitioning`: Murmur3_x86_32, seed 42, `pmod`.
    Spark,
}

impl HashAlgo {
    /// Parses `"xxh3"` or `"spark"`.
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "xxh3" => Ok(HashAlgo::Xxh3),
            "spark" => Ok(HashAlgo::Spark),
            other => Err(TidemarkError::config(
                "hash",
                format!("unknown hash {other:?}; use \"xxh3\" or \"spark\""),
            )),
        }
    }

    /// The name [`HashAlgo::parse`] accepts.
    pub fn name(self) -> &'static str {
        match self {
            HashAlgo::Xxh3 => "xxh3",
            HashAlgo::Spark => "spark",
        }
    }
}

/// A routing strategy (the seed's partitionability analysis).
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

/// Multiply-shift range reduction of a 64-bit hash to `0..n`.
#[inline(always)]
pub fn reduce(h: u64, n: u32) -> u32 {
    (((h >> 32) * n as u64) >> 32) as u32
}

/// Partition of one encoded key under [`HashAlgo::Xxh3`] (the same function the
/// vectorised path computes; use it to route Python values).
#[inline]
pub fn xxh3_partition(encoded_key: &[u8], n: u32) -> u32 {
    reduce(xxh3_encoded(encoded_key), n)
}

fn xxh3_partitions(cols: &[ArrayRef], n: u32) -> Result<Vec<u32>> {
    xxh3_map(cols, |h| reduce(h, n))
}

/// `f(xxh3 hash of the row's key)` for every row, in one vectorised pass.
fn xxh3_map<T>(cols: &[ArrayRef], f: impl Fn(u64) -> T) -> Result<Vec<T>> {
    let rows = cols.first().map_or(0, |c| c.len());
    // Fast path: one non-null 64-bit-or-narrower integer column (the encoding is
    // the tag byte and 8 little-endian bytes).
    if let [c] = cols {
        if c.null_count() == 0 && int_column(c.data_type()) {
            let v = match c.data_type() {
                DataType::Int64 => c.clone(),
                DataType::Date32 | DataType::Time32(_) => {
                    arrow_cast::cast(&arrow_cast::cast(c, &DataType::Int32)?, &DataType::Int64)?
                }
                _ => arrow_cast::cast(c, &DataType::Int64)?,
            };
            let v = v.as_primitive::<Int64Type>();
            return Ok(v.values().iter().map(|x| f(xxh3_int_key(*x))).collect());
        }
        if c.null_count() == 0 {
            match c.data_type() {
                DataType::Utf8 => {
                    let a = c.as_string::<i32>();
                    return Ok(string_hashes(
                        (0..a.len()).map(|i| a.value(i).as_bytes()),
                        crate::key::tag::STR,
                        f,
                    ));
                }
                DataType::LargeUtf8 => {
                    let a = c.as_string::<i64>();
                    return Ok(string_hashes(
                        (0..a.len()).map(|i| a.value(i).as_bytes()),
                        crate::key::tag::STR,
                        f,
                    ));
                }
                _ => {}
            }
        }
    }
    let keys = KeyColumns::new(cols)?;
    let mut out = Vec::with_capacity(rows);
    keys.for_each_key(|_, k| out.push(f(xxh3_encoded(k))));
    Ok(out)
}

/// xxh3-64 (default secret, seed 0) of an input of 9 to 16 bytes whose first and
/// last 8 bytes are `lo` and `hi` (little-endian): xxh3's `9..=16` case, inlined.
#[inline(always)]
fn xxh3_9to16(lo: u64, hi: u64, len: u64) -> u64 {
    // (secret[24..32] ^ secret[32..40]) and (secret[40..48] ^ secret[48..56]).
    const FLIP1: u64 = 0x1f67_b3b7_a4a4_4072 ^ 0x78e5_c0cc_4ee6_79cb;
    const FLIP2: u64 = 0x2172_ffcc_7dd0_5a82 ^ 0x8e24_43f7_7446_08b8;
    let lo = lo ^ FLIP1;
    let hi = hi ^ FLIP2;
    let m = (lo as u128).wrapping_mul(hi as u128);
    let acc = len
        .wrapping_add(lo.swap_bytes())
        .wrapping_add(hi)
        .wrapping_add((m as u64) ^ ((m >> 64) as u64));
    let mut h = acc ^ (acc >> 37);
    h = h.wrapping_mul(0x1656_6791_9E37_79F9);
    h ^ (h >> 32)
}

/// xxh3-64 of the 9-byte encoding of an integer key (`tag::INT`, 8 LE bytes); equal
/// to `xxh3_64` of the encoded bytes (a test checks it).
#[inline(always)]
fn xxh3_int_key(v: i64) -> u64 {
    xxh3_9to16(crate::key::tag::INT as u64 | ((v as u64) << 8), v as u64, 9)
}

/// xxh3-64 of an encoded key, with the 9..=16-byte case inlined.
#[inline(always)]
fn xxh3_encoded(k: &[u8]) -> u64 {
    let n = k.len();
    if (9..=16).contains(&n) {
        let lo = u64::from_le_bytes(k[..8].try_into().expect("8 bytes"));
        let hi = u64::from_le_bytes(k[n - 8..].try_into().expect("8 bytes"));
        xxh3_9to16(lo, hi, n as u64)
    } else {
        xxhash_rust::xxh3::xxh3_64(k)
    }
}

/// `f(hash)` of non-null string (or binary) keys: encodes tag, length and bytes into
/// one reused buffer per row.
fn string_hashes<'a, T>(
    values: impl Iterator<Item = &'a [u8]>,
    tag: u8,
    f: impl Fn(u64) -> T,
) -> Vec<T> {
    let mut buf = Vec::with_capacity(64);
    values
        .map(|v| {
            buf.clear();
            buf.push(tag);
            buf.extend_from_slice(&(v.len() as u32).to_le_bytes());
            buf.extend_from_slice(v);
            f(xxh3_encoded(&buf))
        })
        .collect()
}

/// Integer-valued columns whose values all fit in `i64` (no `UInt64`).
fn int_column(dt: &DataType) -> bool {
    matches!(
        dt,
        DataType::Int8
            | DataType::Int16
            | DataType::Int32
            | DataType::Int64
            | DataType::UInt8
            | DataType::UInt16
            | DataType::UInt32
            | DataType::Date32
            | DataType::Date64
            | DataType::Timestamp(_, _)
            | DataType::Time32(_)
            | DataType::Time64(_)
            | DataType::Duration(_)
    )
}

// ---------------------------------------------------------------------------------
// Spark's Murmur3_x86_32 (org.apache.spark.unsafe.hash.Murmur3_x86_32) and
// HashPartitioning (pmod(Murmur3Hash(cols, 42), n)).

const C1: u32 = 0xcc9e_2d51;
const C2: u32 = 0x1b87_3593;

#[inline(always)]
fn mix_k1(k1: u32) -> u32 {
    k1.wrapping_mul(C1).rotate_left(15).wrapping_mul(C2)
}

#[inline(always)]
fn mix_h1(h1: u32, k1: u32) -> u32 {
    (h1 ^ k1)
        .rotate_left(13)
        .wrapping_mul(5)
        .wrapping_add(0xe654_6b64)
}

#[inline(always)]
fn fmix(mut h1: u32, len: u32) -> u32 {
    h1 ^= len;
    h1 ^= h1 >> 16;
    h1 = h1.wrapping_mul(0x85eb_ca6b);
    h1 ^= h1 >> 13;
    h1 = h1.wrapping_mul(0xc2b2_ae35);
    h1 ^ (h1 >> 16)
}

/// Spark's `Murmur3_x86_32.hashInt`.
#[inline]
pub fn spark_hash_int(v: i32, seed: i32) -> i32 {
    fmix(mix_h1(seed as u32, mix_k1(v as u32)), 4) as i32
}

/// Spark's `Murmur3_x86_32.hashLong`.
#[inline]
pub fn spark_hash_long(v: i64, seed: i32) -> i32 {
    let low = v as u32;
    let high = ((v as u64) >> 32) as u32;
    let h1 = mix_h1(seed as u32, mix_k1(low));
    fmix(mix_h1(h1, mix_k1(high)), 8) as i32
}

/// Spark's `Murmur3_x86_32.hashUnsafeBytes` (strings and binaries).
#[inline]
pub fn spark_hash_bytes(b: &[u8], seed: i32) -> i32 {
    let aligned = b.len() - b.len() % 4;
    let mut h1 = seed as u32;
    for w in b[..aligned].chunks_exact(4) {
        h1 = mix_h1(
            h1,
            mix_k1(u32::from_le_bytes(w.try_into().expect("4 bytes"))),
        );
    }
    for &byte in &b[aligned..] {
        h1 = mix_h1(h1, mix_k1(byte as i8 as i32 as u32));
    }
    fmix(h1, b.len() as u32) as i32
}

/// Spark's `pmod(hash, n)`.
#[inline]
pub fn spark_pmod(h: i32, n: u32) -> u32 {
    let n = n as i64;
    (((h as i64 % n) + n) % n) as u32
}

/// `pmod(h, n)` for a fixed `n` without a division per row (Lemire's fastmod on
/// `h + 2^31`, then shifted back by `2^31 mod n`).
#[derive(Debug, Clone, Copy)]
struct PMod {
    n: u64,
    m: u64,
    shift: u64,
}

impl PMod {
    fn new(n: u32) -> Self {
        let n = n as u64;
        Self {
            n,
            m: (u64::MAX / n).wrapping_add(1),
            shift: (1u64 << 31) % n,
        }
    }

    #[inline(always)]
    fn pmod(&self, h: i32) -> u32 {
        let x = (h as i64 + (1i64 << 31)) as u64; // 0..2^32
        let low = self.m.wrapping_mul(x);
        let r = ((low as u128 * self.n as u128) >> 64) as u64; // x mod n
        (if r >= self.shift {
            r - self.shift
        } else {
            r + self.n - self.shift
        }) as u32
    }
}

/// Java's `BigInteger.toByteArray` of `v`: the shortest big-endian two's complement
/// bytes that hold it (at least one), as `bytes[start..]` of the returned pair (no
/// allocation per row).
fn java_big_integer_bytes(v: i128) -> ([u8; 16], usize) {
    let b = v.to_be_bytes();
    let mut start = 0;
    // A leading byte is redundant while it only extends the sign of the next one.
    while start < 15
        && ((b[start] == 0 && b[start + 1] < 0x80) || (b[start] == 0xFF && b[start + 1] >= 0x80))
    {
        start += 1;
    }
    (b, start)
}

/// Types whose Spark hash [`HashAlgo::Spark`] reproduces.
pub fn spark_hashable(dt: &DataType) -> bool {
    match dt {
        DataType::Dictionary(_, v) => spark_hashable(v),
        DataType::Null
        | DataType::Boolean
        | DataType::Int8
        | DataType::Int16
        | DataType::Int32
        | DataType::Int64
        | DataType::Float32
        | DataType::Float64
        | DataType::Date32
        | DataType::Timestamp(_, _)
        | DataType::Utf8
        | DataType::LargeUtf8
        | DataType::Utf8View
        | DataType::Binary
        | DataType::LargeBinary
        | DataType::BinaryView
        | DataType::Decimal128(_, _) => true,
        _ => false,
    }
}

fn spark_partitions(cols: &[ArrayRef], n: u32) -> Result<Vec<u32>> {
    let rows = cols.first().map_or(0, |c| c.len());
    let mut h = vec![42i32; rows];
    for c in cols {
        spark_hash_column(c, &mut h)?;
    }
    let m = PMod::new(n);
    Ok(h.into_iter().map(|x| m.pmod(x)).collect())
}

/// Folds one column into the running per-row hashes (nulls leave them unchanged).
fn spark_hash_column(c: &ArrayRef, h: &mut [i32]) -> Result<()> {
    fn each<F: FnMut(usize, i32) -> i32>(a: &dyn Array, h: &mut [i32], mut f: F) {
        match a.nulls() {
            Some(nulls) if a.null_count() > 0 => {
                for (i, x) in h.iter_mut().enumerate() {
                    if nulls.is_valid(i) {
                        *x = f(i, *x);
                    }
                }
            }
            _ => {
                for (i, x) in h.iter_mut().enumerate() {
                    *x = f(i, *x);
                }
            }
        }
    }
    match c.data_type() {
        DataType::Null => {}
        DataType::Dictionary(_, v) => {
            let plain = arrow_cast::cast(c, v)?;
            spark_hash_column(&plain, h)?;
        }
        DataType::Boolean => {
            let a = c.as_boolean();
            each(a, h, |i, s| spark_hash_int(a.value(i) as i32, s));
        }
        DataType::Int8 => {
            let a = c.as_primitive::<Int8Type>();
            each(a, h, |i, s| spark_hash_int(a.value(i) as i32, s));
        }
        DataType::Int16 => {
            let a = c.as_primitive::<Int16Type>();
            each(a, h, |i, s| spark_hash_int(a.value(i) as i32, s));
        }
        DataType::Int32 => {
            let a = c.as_primitive::<Int32Type>();
            each(a, h, |i, s| spark_hash_int(a.value(i), s));
        }
        DataType::Date32 => {
            let a = c.as_primitive::<Date32Type>();
            each(a, h, |i, s| spark_hash_int(a.value(i), s));
        }
        DataType::Int64 => {
            let a = c.as_primitive::<Int64Type>();
            each(a, h, |i, s| spark_hash_long(a.value(i), s));
        }
        DataType::Timestamp(unit, _) => {
            // Spark timestamps are microseconds.
            let micros = match unit {
                TimeUnit::Microsecond => c.clone(),
                _ => arrow_cast::cast(c, &DataType::Timestamp(TimeUnit::Microsecond, None))?,
            };
            let a = micros.as_primitive::<TimestampMicrosecondType>();
            each(a, h, |i, s| spark_hash_long(a.value(i), s));
        }
        DataType::Float32 => {
            let a = c.as_primitive::<Float32Type>();
            each(a, h, |i, s| {
                let f = a.value(i);
                let bits = if f == 0.0 {
                    0
                } else if f.is_nan() {
                    0x7fc0_0000
                } else {
                    f.to_bits() as i32
                };
                spark_hash_int(bits, s)
            });
        }
        DataType::Float64 => {
            let a = c.as_primitive::<Float64Type>();
            each(a, h, |i, s| {
                let f = a.value(i);
                let bits = if f == 0.0 {
                    0
                } else if f.is_nan() {
                    0x7ff8_0000_0000_0000
                } else {
                    f.to_bits() as i64
                };
                spark_hash_long(bits, s)
            });
        }
        DataType::Decimal128(p, _) => {
            let a = c.as_primitive::<Decimal128Type>();
            if *p <= 18 {
                // Spark hashes a decimal of up to 18 digits as its unscaled long.
                each(a, h, |i, s| spark_hash_long(a.value(i) as i64, s));
            } else {
                // Wider ones as the bytes of Java's BigInteger.toByteArray.
                each(a, h, |i, s| {
                    let (bytes, start) = java_big_integer_bytes(a.value(i));
                    spark_hash_bytes(&bytes[start..], s)
                });
            }
        }
        DataType::Utf8 => {
            let a = c.as_string::<i32>();
            each(a, h, |i, s| spark_hash_bytes(a.value(i).as_bytes(), s));
        }
        DataType::LargeUtf8 => {
            let a = c.as_string::<i64>();
            each(a, h, |i, s| spark_hash_bytes(a.value(i).as_bytes(), s));
        }
        DataType::Utf8View => {
            let a = c.as_string_view();
            each(a, h, |i, s| spark_hash_bytes(a.value(i).as_bytes(), s));
        }
        DataType::Binary => {
            let a = c.as_binary::<i32>();
            each(a, h, |i, s| spark_hash_bytes(a.value(i), s));
        }
        DataType::LargeBinary => {
            let a = c.as_binary::<i64>();
            each(a, h, |i, s| spark_hash_bytes(a.value(i), s));
        }
        DataType::BinaryView => {
            let a = c.as_binary_view();
            each(a, h, |i, s| spark_hash_bytes(a.value(i), s));
        }
        other => {
            return Err(TidemarkError::config(
                "keys",
                format!("spark routing cannot hash a {other} column"),
            ))
        }
    }
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{
        BooleanArray, Date32Array, Float64Array, Int32Array, Int64Array, LargeStringArray,
        StringArray,
    };
    use arrow_schema::Field;
    use std::sync::Arc;

    fn batch(cols: Vec<(&str, ArrayRef)>) -> RecordBatch {
        let schema = Schema::new(
            cols.iter()
                .map(|(n, a)| Field::new(*n, a.data_type().clone(), true))
                .collect::<Vec<_>>(),
        );
        RecordBatch::try_new(Arc::new(schema), cols.into_iter().map(|(_, a)| a).collect()).unwrap()
    }

    // Reference values from PySpark 4.3 (`SELECT hash(1), hash(1L), hash('a'), ...`, i.e. Murmur3Hash with
    // seed 42) — the same function HashPartitioning applies before pmod.
    #[test]
    fn spark_murmur3_matches_known_spark_hash_values() {
        assert_eq!(spark_hash_int(1, 42), -559_580_957);
        assert_eq!(spark_hash_long(1, 42), -1_712_319_331);
        assert_eq!(spark_hash_bytes(b"a", 42), 1_485_273_170);
        assert_eq!(spark_hash_long(0, 42), -1_670_924_195); // hash(-0.0D): -0.0 as 0L
        assert_eq!(spark_hash_int(19000, 42), -779_492_372); // hash(date'2022-01-08')
        assert_eq!(spark_hash_bytes(b"abc", 42), 1_322_437_556);
        assert_eq!(spark_hash_bytes(b"Spark", 42), 228_093_765);
    }

    #[test]
    fn inlined_hashes_equal_the_reference_functions() {
        for v in [0i64, 1, -1, 42, i64::MIN, i64::MAX, 0x0123_4567_89ab_cdef] {
            let mut k = Vec::new();
            crate::key::encode_int(v, &mut k);
            assert_eq!(xxh3_int_key(v), xxhash_rust::xxh3::xxh3_64(&k), "{v}");
        }
        let long = b"0123456789abcdefghijklmnopqrstuvwxyz";
        for len in 0..long.len() {
            let k = &long[..len];
            assert_eq!(xxh3_encoded(k), xxhash_rust::xxh3::xxh3_64(k), "{len}");
        }
        for n in [1u32, 2, 3, 7, 200, 1000, 65_537, i32::MAX as u32] {
            let m = PMod::new(n);
            for h in [0, 1, -1, 42, i32::MIN, i32::MAX, -123_456_789, 987_654_321] {
                assert_eq!(m.pmod(h), spark_pmod(h, n), "{h} {n}");
            }
        }
    }

    #[test]
    fn decimal_bytes_are_java_big_integer_bytes() {
        let cases: [(i128, &[u8]); 9] = [
            (0, &[0]),
            (127, &[0x7F]),
            (128, &[0x00, 0x80]),
            (-1, &[0xFF]),
            (-128, &[0x80]),
            (-129, &[0xFF, 0x7F]),
            (65_535, &[0x00, 0xFF, 0xFF]),
            (
                i128::MAX,
                &[
                    0x7F, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
                    0xFF, 0xFF, 0xFF,
                ],
            ),
            (
                i128::MIN,
                &[0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
            ),
        ];
        for (v, want) in cases {
            let (bytes, start) = java_big_integer_bytes(v);
            assert_eq!(&bytes[start..], want, "{v}");
        }
    }

    #[test]
    fn spark_pmod_is_non_negative() {
        assert_eq!(spark_pmod(-1, 4), 3);
        assert_eq!(
            spark_pmod(i32::MIN, 7),
            ((i32::MIN as i64).rem_euclid(7)) as u32
        );
        assert_eq!(spark_pmod(9, 4), 1);
    }

    #[test]
    fn spark_null_leaves_the_running_hash_unchanged() {
        let b = batch(vec![
            (
                "a",
                Arc::new(Int32Array::from(vec![Some(1), None])) as ArrayRef,
            ),
            (
                "b",
                Arc::new(StringArray::from(vec![None, Some("x")])) as ArrayRef,
            ),
        ]);
        let mut h = vec![42; 2];
        spark_hash_column(b.column(0), &mut h).unwrap();
        spark_hash_column(b.column(1), &mut h).unwrap();
        assert_eq!(h[0], spark_hash_int(1, 42));
        assert_eq!(h[1], spark_hash_bytes(b"x", 42));
    }

    #[test]
    fn xxh3_routing_depends_on_values_not_arrow_widths() {
        let narrow = batch(vec![(
            "k",
            Arc::new(Int32Array::from(vec![1, 2, 3, 400_000])) as ArrayRef,
        )]);
        let wide = batch(vec![(
            "k",
            Arc::new(Int64Array::from(vec![1, 2, 3, 400_000])) as ArrayRef,
        )]);
        let mut r = hash_router(16, &["k"], HashAlgo::Xxh3).unwrap();
        assert_eq!(
            r.partition_ids(&narrow).unwrap(),
            r.partition_ids(&wide).unwrap()
        );
        let s = batch(vec![(
            "k",
            Arc::new(StringArray::from(vec!["a", "b"])) as ArrayRef,
        )]);
        let l = batch(vec![(
            "k",
            Arc::new(LargeStringArray::from(vec!["a", "b"])) as ArrayRef,
        )]);
        assert_eq!(r.partition_ids(&s).unwrap(), r.partition_ids(&l).unwrap());
    }

    #[test]
    fn xxh3_fast_path_equals_the_generic_encoding() {
        let vals: Vec<i64> = (-500..500).map(|x| x * 7919).collect();
        let col: ArrayRef = Arc::new(Int64Array::from(vals.clone()));
        let fast = xxh3_partitions(std::slice::from_ref(&col), 13).unwrap();
        for (i, v) in vals.iter().enumerate() {
            let mut k = Vec::new();
            crate::key::encode_int(*v, &mut k);
            assert_eq!(fast[i], xxh3_partition(&k, 13));
        }
    }

    #[test]
    fn multi_column_keys_route_by_their_encoded_key() {
        let n = 300; // several encoding chunks
        let a: ArrayRef = Arc::new(StringArray::from_iter(
            (0..n).map(|i| (i % 9 != 4).then(|| format!("region-{}", i % 11))),
        ));
        let b: ArrayRef = Arc::new(Int64Array::from_iter_values((0..n as i64).map(|i| i * 37)));
        let cols = [a, b];
        let got = xxh3_partitions(&cols, 7).unwrap();
        let keys = KeyColumns::new(&cols).unwrap();
        let want: Vec<u32> = (0..n).map(|i| xxh3_partition(&keys.key(i), 7)).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn route_keeps_every_row_once_in_order() {
        let keys: Vec<i64> = (0..1000).map(|i| i % 37).collect();
        let vals: Vec<i64> = (0..1000).collect();
        let b = batch(vec![
            ("k", Arc::new(Int64Array::from(keys)) as ArrayRef),
            ("v", Arc::new(Int64Array::from(vals)) as ArrayRef),
        ]);
        for strategy in [
            Strategy::Hash {
                keys: vec!["k".into()],
                algo: HashAlgo::Xxh3,
            },
            Strategy::Hash {
                keys: vec!["k".into()],
                algo: HashAlgo::Spark,
            },
            Strategy::RoundRobin,
            Strategy::Single,
        ] {
            let mut r = Router::new(5, strategy.clone(), None).unwrap();
            let ids = r.clone().partition_ids(&b).unwrap();
            let shards = r.route(&b).unwrap();
            assert_eq!(shards.len(), 5);
            let mut seen = Vec::new();
            for (p, s) in shards.iter().enumerate() {
                let v = s.column(1).as_primitive::<Int64Type>();
                let rows: Vec<i64> = v.values().to_vec();
                assert!(rows.windows(2).all(|w| w[0] < w[1]), "{strategy:?} order");
                for &row in &rows {
                    assert_eq!(ids[row as usize], p as u32, "{strategy:?}");
                }
                seen.extend(rows);
            }
            seen.sort();
            assert_eq!(seen, (0..1000).collect::<Vec<_>>(), "{strategy:?}");
        }
    }

    #[test]
    fn slices_route_like_the_whole_batch() {
        // Nullable int and string keys (the generic encoding), a dictionary, and a
        // non-null int (the fast path).
        let ints: Vec<Option<i64>> = (0..997).map(|i| (i % 11 != 0).then_some(i % 41)).collect();
        let strs: Vec<Option<String>> = (0..997)
            .map(|i| (i % 13 != 0).then(|| format!("tenant-{}", i % 29)))
            .collect();
        let dict: arrow_array::DictionaryArray<arrow_array::types::Int32Type> =
            (0..997).map(|i| ["x", "y", "z"][i % 3]).collect();
        let b = batch(vec![
            ("i", Arc::new(Int64Array::from(ints)) as ArrayRef),
            ("s", Arc::new(StringArray::from(strs)) as ArrayRef),
            ("d", Arc::new(dict) as ArrayRef),
            (
                "n",
                Arc::new(Int64Array::from_iter_values(0..997)) as ArrayRef,
            ),
        ]);
        for keys in [
            vec!["i"],
            vec!["s"],
            vec!["d"],
            vec!["n"],
            vec!["i", "s", "d"],
        ] {
            for algo in [HashAlgo::Xxh3, HashAlgo::Spark] {
                let strategy = Strategy::Hash {
                    keys: keys.iter().map(|k| k.to_string()).collect(),
                    algo,
                };
                let mut r = Router::new(7, strategy, None).unwrap();
                assert!(r.is_stateless());
                let whole = r.partition_ids(&b).unwrap();
                for (lo, hi) in [(0, 0), (0, 997), (0, 1), (5, 400), (400, 997), (996, 997)] {
                    let part = r.slice_partition_ids(&b, lo, hi - lo).unwrap();
                    assert_eq!(part, whole[lo..hi], "{keys:?} {algo:?} {lo}..{hi}");
                }
            }
        }
        let single = Router::new(3, Strategy::Single, None).unwrap();
        assert_eq!(single.slice_partition_ids(&b, 2, 3).unwrap(), vec![0, 0, 0]);
        let rr = Router::new(3, Strategy::RoundRobin, None).unwrap();
        assert!(!rr.is_stateless());
        assert!(rr.slice_partition_ids(&b, 0, 3).is_err());
        let missing = Router::new(
            3,
            Strategy::Hash {
                keys: vec!["nope".into()],
                algo: HashAlgo::Xxh3,
            },
            None,
        )
        .unwrap();
        assert!(missing.slice_partition_ids(&b, 0, 3).is_err());
    }

    #[test]
    fn round_robin_continues_across_batches() {
        let b = batch(vec![(
            "v",
            Arc::new(Int64Array::from(vec![0, 1, 2])) as ArrayRef,
        )]);
        let mut r = Router::new(4, Strategy::RoundRobin, None).unwrap();
        assert_eq!(r.partition_ids(&b).unwrap(), vec![0, 1, 2]);
        assert_eq!(r.partition_ids(&b).unwrap(), vec![3, 0, 1]);
    }

    #[test]
    fn broadcast_replicates_without_copying() {
        let b = batch(vec![(
            "v",
            Arc::new(Int64Array::from(vec![0, 1, 2])) as ArrayRef,
        )]);
        let mut r = Router::new(3, Strategy::Broadcast, None).unwrap();
        let out = r.route(&b).unwrap();
        assert_eq!(out.len(), 3);
        for s in &out {
            assert!(Arc::ptr_eq(s.column(0), b.column(0)));
        }
        assert!(r.partition_ids(&b).is_err());
    }

    #[test]
    fn system_fields_resolve_to_source_columns() {
        assert_eq!(resolve_key("_PARTITION", None).unwrap(), "partition");
        assert_eq!(resolve_key("_offset", None).unwrap(), "offset");
        assert_eq!(resolve_key("_TIMESTAMP", None).unwrap(), "timestamp");
        assert_eq!(resolve_key("_EVENT_TIME", Some("ts")).unwrap(), "ts");
        assert!(resolve_key("_EVENT_TIME", None).is_err());
        assert_eq!(resolve_key("device", None).unwrap(), "device");
    }

    #[test]
    fn bad_configuration_and_input_are_clear_errors() {
        assert!(Router::new(0, Strategy::Single, None).is_err());
        assert!(Router::new(
            2,
            Strategy::Hash {
                keys: vec![],
                algo: HashAlgo::Xxh3
            },
            None
        )
        .is_err());
        assert!(HashAlgo::parse("md5").is_err());
        let b = batch(vec![("v", Arc::new(Int64Array::from(vec![0])) as ArrayRef)]);
        let mut r = hash_router(2, &["nope"], HashAlgo::Xxh3).unwrap();
        let e = r.partition_ids(&b).unwrap_err().to_string();
        assert!(e.contains("nope") && e.contains('v'), "{e}");
    }

    #[test]
    fn spark_mode_hashes_mixed_types_and_chains_columns() {
        let b = batch(vec![
            ("i", Arc::new(Int32Array::from(vec![1])) as ArrayRef),
            ("l", Arc::new(Int64Array::from(vec![1])) as ArrayRef),
            ("s", Arc::new(StringArray::from(vec!["abc"])) as ArrayRef),
            ("d", Arc::new(Float64Array::from(vec![-0.0])) as ArrayRef),
            ("b", Arc::new(BooleanArray::from(vec![true])) as ArrayRef),
            ("dt", Arc::new(Date32Array::from(vec![19000])) as ArrayRef),
        ]);
        let mut r = hash_router(1000, &["i", "l", "s", "d", "b", "dt"], HashAlgo::Spark).unwrap();
        let mut h = spark_hash_int(1, 42);
        h = spark_hash_long(1, h);
        h = spark_hash_bytes(b"abc", h);
        h = spark_hash_long(0, h);
        h = spark_hash_int(1, h);
        h = spark_hash_int(19000, h);
        assert_eq!(r.partition_ids(&b).unwrap(), vec![spark_pmod(h, 1000)]);
    }
}
