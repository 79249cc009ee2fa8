//! Spark's `HashPartitioning`, exactly: Murmur3 x86_32 with seed 42 over the key
//! columns, chained, and `pmod` by the number of partitions.

use arrow_array::cast::AsArray;
use arrow_array::types::*;
use arrow_array::{Array, ArrayRef};
use arrow_schema::{DataType, TimeUnit};

use crate::error::{Result, TidemarkError};

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

/// Per state partition `p` of `n`: two int values that Spark's hash partitioning
/// (`repartition(n, tag)`, `pmod(hash(tag), n)`) sends to partition `p`: the tag of its
/// rows and the tag of its placeholder row (the first and the second such value from
/// 0 up). A row that carries its partition's tag as data lands where its state is,
/// whatever Spark does to the partitioning afterwards, and a placeholder makes a
/// partition with no rows run.
///
/// ```
/// use tidemark_core::route::{spark_hash_int, spark_pmod, spark_tags};
/// let (data, placeholder) = spark_tags(8);
/// for p in 0..8 {
///     assert_eq!(spark_pmod(spark_hash_int(data[p], 42), 8), p as u32);
///     assert_eq!(spark_pmod(spark_hash_int(placeholder[p], 42), 8), p as u32);
///     assert!(data[p] < placeholder[p]);
/// }
/// ```
pub fn spark_tags(n: u32) -> (Vec<i32>, Vec<i32>) {
    let n_us = n as usize;
    let mut data: Vec<Option<i32>> = vec![None; n_us];
    let mut placeholder: Vec<Option<i32>> = vec![None; n_us];
    let mut left = n_us;
    let mut v: i32 = 0;
    while left > 0 {
        let p = spark_pmod(spark_hash_int(v, 42), n) as usize;
        if data[p].is_none() {
            data[p] = Some(v);
        } else if placeholder[p].is_none() {
            placeholder[p] = Some(v);
            left -= 1;
        }
        v += 1;
    }
    let all = |t: Vec<Option<i32>>| t.into_iter().map(|t| t.unwrap_or_default()).collect();
    (all(data), all(placeholder))
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
pub(super) struct PMod {
    n: u64,
    m: u64,
    shift: u64,
}

impl PMod {
    pub(super) fn new(n: u32) -> Self {
        let n = n as u64;
        Self {
            n,
            m: (u64::MAX / n).wrapping_add(1),
            shift: (1u64 << 31) % n,
        }
    }

    #[inline(always)]
    pub(super) fn pmod(&self, h: i32) -> u32 {
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
pub(crate) fn java_big_integer_bytes(v: i128) -> ([u8; 16], usize) {
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

/// Types whose Spark hash [`HashAlgo::Spark`](super::HashAlgo::Spark) reproduces.
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

pub(super) fn spark_partitions(cols: &[ArrayRef], n: u32) -> Result<Vec<u32>> {
    let rows = cols.first().map_or(0, |c| c.len());
    let mut h = vec![42i32; rows];
    for c in cols {
        spark_hash_column(c, &mut h)?;
    }
    let m = PMod::new(n);
    Ok(h.into_iter().map(|x| m.pmod(x)).collect())
}

/// Folds one column into the running per-row hashes (nulls leave them unchanged).
pub(super) fn spark_hash_column(c: &ArrayRef, h: &mut [i32]) -> Result<()> {
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
