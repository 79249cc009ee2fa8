//! tidemark's own keyed hash: xxh3 of the canonical key encoding, with fast paths for
//! integer and string columns that give the same hash as the generic encoding.

use arrow_array::cast::AsArray;
use arrow_array::types::*;
use arrow_array::{Array, ArrayRef};
use arrow_schema::DataType;

use crate::error::Result;
use crate::key::{KeyColumns, KeyRows};

/// Multiply-shift range reduction of a 64-bit hash to `0..n`.
#[inline(always)]
pub fn reduce(h: u64, n: u32) -> u32 {
    (((h >> 32) * n as u64) >> 32) as u32
}

/// Partition of one encoded key under [`HashAlgo::Xxh3`](super::HashAlgo::Xxh3) (the same function the
/// vectorised path computes; use it to route Python values).
#[inline]
pub fn xxh3_partition(encoded_key: &[u8], n: u32) -> u32 {
    reduce(xxh3_encoded(encoded_key), n)
}

pub(super) fn xxh3_partitions(cols: &[ArrayRef], n: u32) -> Result<Vec<u32>> {
    xxh3_map(cols, |h| reduce(h, n))
}

/// `f(xxh3 hash of the row's key)` for every row, in one vectorised pass.
pub(super) fn xxh3_map<T>(cols: &[ArrayRef], f: impl Fn(u64) -> T) -> Result<Vec<T>> {
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
pub(super) fn xxh3_int_key(v: i64) -> u64 {
    xxh3_9to16(crate::key::tag::INT as u64 | ((v as u64) << 8), v as u64, 9)
}

/// xxh3-64 of an encoded key, with the 9..=16-byte case inlined.
#[inline(always)]
pub(super) fn xxh3_encoded(k: &[u8]) -> u64 {
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
