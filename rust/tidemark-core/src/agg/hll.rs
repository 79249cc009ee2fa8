//! HyperLogLog++ as Spark computes `approx_count_distinct(col)` at its default
//! relative standard deviation (5%): the same hash of each value (xxHash64, seed 42,
//! over the value as Spark types it), the same 512 registers (`p = 9`) and the same
//! estimate where Spark uses linear counting (an estimate up to 400, i.e. up to about
//! 400 distinct values). Above that Spark subtracts an empirical bias read from
//! tables this module does not carry, for raw estimates below `5 * 512`; there the
//! results may differ from Spark's by about the bias (a few percent), within the
//! sketch's own error. Registers merge by maximum, so the state is mergeable across
//! cores, sessions and snapshots.

use arrow_array::cast::AsArray;
use arrow_array::types::*;
use arrow_array::{Array, ArrayRef, UInt64Array};
use arrow_schema::{DataType, TimeUnit};

use crate::error::{Result, TidemarkError};
use crate::route::spark::java_big_integer_bytes;

/// Register index bits (Spark: `ceil(2 * log2(1.106 / 0.05))`).
const P: u32 = 9;
/// Registers.
const M: usize = 1 << P;
/// Spark's seed for the hash of `approx_count_distinct`.
const SEED: u64 = 42;
/// Linear counting below this estimate (Spark's `THRESHOLDS(p - 4)`).
const THRESHOLD: f64 = 400.0;

/// Fresh (all zero) registers.
pub(crate) fn registers() -> Box<[u8]> {
    vec![0u8; M].into_boxed_slice()
}

/// Adds one value's hash.
#[inline]
pub(crate) fn add(reg: &mut [u8], hash: u64) {
    let idx = (hash >> (64 - P)) as usize;
    let w = ((hash << P) | (1u64 << (P - 1))).leading_zeros() as u8 + 1;
    if w > reg[idx] {
        reg[idx] = w;
    }
}

/// Merges `other` into `reg` (register by register, the larger).
pub(crate) fn merge(reg: &mut [u8], other: &[u8]) {
    for (a, b) in reg.iter_mut().zip(other) {
        *a = (*a).max(*b);
    }
}

/// The estimated number of distinct values.
pub(crate) fn estimate(reg: &[u8]) -> i64 {
    let m = M as f64;
    let alpha_m2 = 0.7213 / (1.0 + 1.079 / m) * m * m;
    let (mut z_inverse, mut zeros) = (0.0f64, 0usize);
    for &r in reg {
        z_inverse += 1.0 / (1u64 << r) as f64;
        zeros += usize::from(r == 0);
    }
    let e = alpha_m2 / z_inverse;
    let est = if zeros > 0 {
        let lc = m * (m / zeros as f64).ln();
        if lc <= THRESHOLD {
            lc
        } else {
            e
        }
    } else {
        e
    };
    est.round() as i64
}

fn xxh64(bytes: &[u8]) -> u64 {
    xxhash_rust::xxh64::xxh64(bytes, SEED)
}

fn hash_int(v: i32) -> u64 {
    xxh64(&v.to_le_bytes())
}

fn hash_long(v: i64) -> u64 {
    xxh64(&v.to_le_bytes())
}

/// Spark's hash of each value of `col` (nulls stay null), as `approx_count_distinct`
/// hashes the column Spark reads it as: integers up to 32 bits, dates and booleans as
/// ints; longs and timestamps (in microseconds) as longs; floats and doubles by
/// their bits (`-0.0` as `0.0`, one NaN); decimals up to 18 digits by their unscaled
/// long, wider ones by its bytes; strings and binary by their bytes.
pub(crate) fn spark_hashes(col: &ArrayRef) -> Result<UInt64Array> {
    fn map<T: ArrowPrimitiveType>(col: &ArrayRef, f: impl Fn(T::Native) -> u64) -> UInt64Array {
        col.as_primitive::<T>().unary(f)
    }
    Ok(match col.data_type() {
        DataType::Boolean => {
            let b = col.as_boolean();
            (0..b.len())
                .map(|i| b.is_valid(i).then(|| hash_int(i32::from(b.value(i)))))
                .collect()
        }
        DataType::Int8 => map::<Int8Type>(col, |v| hash_int(v.into())),
        DataType::Int16 => map::<Int16Type>(col, |v| hash_int(v.into())),
        DataType::Int32 => map::<Int32Type>(col, hash_int),
        DataType::Date32 => map::<Date32Type>(col, hash_int),
        DataType::UInt8 => map::<UInt8Type>(col, |v| hash_int(v.into())),
        DataType::UInt16 => map::<UInt16Type>(col, |v| hash_int(v.into())),
        DataType::UInt32 => map::<UInt32Type>(col, |v| hash_long(v.into())),
        DataType::UInt64 => map::<UInt64Type>(col, |v| hash_long(v as i64)),
        DataType::Int64 => map::<Int64Type>(col, hash_long),
        DataType::Date64 => map::<Date64Type>(col, |v| hash_int(v.div_euclid(86_400_000) as i32)),
        DataType::Timestamp(unit, _) => {
            let micros = |v: i64| match unit {
                TimeUnit::Second => v.saturating_mul(1_000_000),
                TimeUnit::Millisecond => v.saturating_mul(1_000),
                TimeUnit::Microsecond => v,
                TimeUnit::Nanosecond => v.div_euclid(1_000),
            };
            let v = arrow_cast::cast(col, &DataType::Int64)?;
            v.as_primitive::<Int64Type>()
                .unary(|v| hash_long(micros(v)))
        }
        DataType::Float16 | DataType::Float32 => {
            let v = arrow_cast::cast(col, &DataType::Float32)?;
            v.as_primitive::<Float32Type>().unary(|f: f32| {
                let bits = if f == 0.0 {
                    0
                } else if f.is_nan() {
                    0x7fc0_0000
                } else {
                    f.to_bits() as i32
                };
                hash_int(bits)
            })
        }
        DataType::Float64 => map::<Float64Type>(col, |d| {
            let bits = if d == 0.0 {
                0
            } else if d.is_nan() {
                0x7ff8_0000_0000_0000
            } else {
                d.to_bits() as i64
            };
            hash_long(bits)
        }),
        DataType::Decimal128(p, _) => {
            let narrow = *p <= 18;
            map::<Decimal128Type>(col, |v| {
                if narrow {
                    hash_long(v as i64)
                } else {
                    {
                        let (bytes, start) = java_big_integer_bytes(v);
                        xxh64(&bytes[start..])
                    }
                }
            })
        }
        DataType::Time32(_) | DataType::Time64(_) | DataType::Duration(_) => {
            let v = arrow_cast::cast(col, &DataType::Int64)?;
            v.as_primitive::<Int64Type>().unary(hash_long)
        }
        DataType::Utf8
        | DataType::LargeUtf8
        | DataType::Utf8View
        | DataType::Binary
        | DataType::LargeBinary
        | DataType::BinaryView => {
            let v = arrow_cast::cast(col, &DataType::BinaryView)?;
            let v = v.as_binary_view();
            (0..v.len())
                .map(|i| v.is_valid(i).then(|| xxh64(v.value(i))))
                .collect()
        }
        other => {
            return Err(TidemarkError::config(
                "aggs",
                format!("approx_count_distinct cannot read a {other} column"),
            ))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn count(values: impl Iterator<Item = i64>) -> i64 {
        let mut r = registers();
        let col: ArrayRef = Arc::new(arrow_array::Int64Array::from_iter_values(values));
        let h = spark_hashes(&col).unwrap();
        for v in h.values() {
            add(&mut r, *v);
        }
        estimate(&r)
    }

    #[test]
    fn estimates_are_close_and_ignore_repeats() {
        assert_eq!(count(0..0), 0);
        assert_eq!(count(0..1), 1);
        // Repeats change nothing; a small count is close (linear counting).
        assert_eq!(count((0..50).chain(0..50)), count(0..50));
        assert!((count(0..50) - 50).abs() <= 3);
        for n in [1_000i64, 10_000, 100_000] {
            let e = count(0..n) as f64;
            assert!((e - n as f64).abs() / (n as f64) < 0.15, "{n}: {e}");
        }
    }

    #[test]
    fn merged_registers_estimate_the_union() {
        let mut a = registers();
        let mut b = registers();
        for v in 0..300i64 {
            add(&mut a, hash_long(v));
            add(&mut b, hash_long(v + 150));
        }
        merge(&mut a, &b);
        let mut both = registers();
        for v in 0..450i64 {
            add(&mut both, hash_long(v));
        }
        assert_eq!(a, both);
    }
}
