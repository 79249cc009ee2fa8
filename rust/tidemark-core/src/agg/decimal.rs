//! Exact sums of decimal values (Arrow `Decimal128`, Spark's `DecimalType`).
//!
//! A decimal column holds unscaled `i128` values. [`WideSum`] adds them exactly,
//! whatever their number and order (a sum of many values near `10^38` needs more than
//! 128 bits); the result is checked against the output precision once, at the end,
//! so it does not depend on row order or on how partial sums were merged.
//!
//! Output types follow Spark's rules for `sum` and `avg` of `decimal(p, s)`:
//! `decimal(min(38, p + 10), s)` and `decimal(min(38, p + 4), min(38, s + 4))`; a mean
//! is rounded half away from zero (Java's `HALF_UP`, as Spark).

/// Largest decimal precision (digits) of `Decimal128`.
pub const MAX_PRECISION: u8 = 38;

/// An exact sum of `i128` values: a wrapping `i128` plus the number of times it
/// wrapped, so the sum is `carry * 2^128 + lo` and no order of additions overflows.
///
/// # Examples
///
/// ```
/// use tidemark_core::agg::WideSum;
/// let mut s = WideSum::default();
/// for v in [i128::MAX, i128::MAX, -i128::MAX] { s.add(v); }
/// assert_eq!(s.get(), Some(i128::MAX)); // the partial sum left the i128 range
/// assert_eq!(s.scaled_div(0, 4), Some(i128::MAX / 4 + 1)); // i128::MAX / 4 = ...31.75, rounded
/// assert_eq!(s.scaled_div(1, 4), None); // i128::MAX * 10 / 4 leaves the i128 range
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WideSum {
    lo: Unscaled,
    carry: i64,
}

impl WideSum {
    /// A sum stored as [`Self::parts`] gave it.
    pub fn from_parts(lo: i128, carry: i64) -> Self {
        Self {
            lo: Unscaled::new(lo),
            carry,
        }
    }

    /// The low 128 bits (two's complement) and the carry: the sum is
    /// `carry * 2^128 + lo`.
    pub fn parts(&self) -> (i128, i64) {
        (self.lo.get(), self.carry)
    }

    /// Adds `v`.
    #[inline]
    pub fn add(&mut self, v: i128) {
        let (r, wrapped) = self.lo.get().overflowing_add(v);
        self.lo = Unscaled::new(r);
        if wrapped {
            self.carry += if v < 0 { -1 } else { 1 };
        }
    }

    /// Adds another sum.
    pub fn merge(&mut self, other: &WideSum) {
        self.add(other.lo.get());
        self.carry += other.carry;
    }

    /// The sum, if it fits an `i128`.
    pub fn get(&self) -> Option<i128> {
        // carry * 2^128 + lo leaves the i128 range for any carry other than 0.
        (self.carry == 0).then_some(self.lo.get())
    }

    /// `sum * 10^k / n`, rounded half away from zero, if it fits an `i128`
    /// (`k <= 19`, `n > 0`): the mean of `n` values at `k` more decimal places.
    pub fn scaled_div(&self, k: u32, n: u64) -> Option<i128> {
        assert!(k <= 19 && n > 0, "scaled_div(k = {k}, n = {n})");
        // Most means (sums of a window's values, at 4 more places) fit an i64: one
        // native division instead of the long division below.
        if let (0, Ok(n64)) = (self.carry, i64::try_from(n)) {
            let num = self.lo.get().checked_mul(10i128.pow(k)).map(i64::try_from);
            if let Some(Ok(num)) = num {
                let (q, r) = (num / n64, num % n64);
                // 2|r| < 2n <= 2^64: no overflow.
                let up = 2 * r.unsigned_abs() >= n;
                return Some(i128::from(q) + if up { i128::from(num.signum()) } else { 0 });
            }
        }
        let (negative, mut mag) = self.magnitude();
        // mag * 10^k: a 256-bit magnitude (below 2^192) times a 64-bit factor.
        let mul = 10u64.pow(k);
        let mut carry = 0u128;
        for limb in mag.iter_mut() {
            let p = u128::from(*limb) * u128::from(mul) + carry;
            *limb = p as u64;
            carry = p >> 64;
        }
        if carry != 0 {
            return None;
        }
        // Long division by n, most significant limb first.
        let mut rem = 0u128;
        for limb in mag.iter_mut().rev() {
            let cur = (rem << 64) | u128::from(*limb);
            *limb = (cur / u128::from(n)) as u64;
            rem = cur % u128::from(n);
        }
        if mag[2] != 0 || mag[3] != 0 {
            return None;
        }
        let q = u128::from(mag[0]) | (u128::from(mag[1]) << 64);
        let q = q.checked_add(u128::from(2 * rem >= u128::from(n)))?;
        if negative {
            // Down to -2^127 (i128::MIN).
            (q <= 1u128 << 127).then(|| (q as i128).wrapping_neg())
        } else {
            i128::try_from(q).ok()
        }
    }

    /// Sign and magnitude (little-endian 64-bit limbs) of the sum.
    fn magnitude(&self) -> (bool, [u64; 4]) {
        // Two's complement over 256 bits: lo sign-extended, plus carry << 128.
        let lo = self.lo.get() as u128;
        let lo_ext = if self.lo.get() < 0 { u64::MAX } else { 0 };
        let c = self.carry as u64;
        let c_ext = if self.carry < 0 { u64::MAX } else { 0 };
        let a = [lo as u64, (lo >> 64) as u64, lo_ext, lo_ext];
        let b = [0, 0, c, c_ext];
        let mut v = [0u64; 4];
        let mut carry = false;
        for i in 0..4 {
            let (s1, c1) = a[i].overflowing_add(b[i]);
            let (s2, c2) = s1.overflowing_add(u64::from(carry));
            v[i] = s2;
            carry = c1 || c2;
        }
        let negative = v[3] >> 63 == 1;
        if negative {
            // Negate: invert and add one.
            let mut add = true;
            for limb in v.iter_mut() {
                let (s, c) = (!*limb).overflowing_add(u64::from(add));
                *limb = s;
                add = c;
            }
        }
        (negative, v)
    }
}

/// An unscaled decimal value (an `i128`) stored with 8-byte alignment, so that the
/// aggregate states holding one stay as small as the others (an `i128` field would
/// align and pad them to 16 bytes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Unscaled([u64; 2]);

impl Unscaled {
    /// Wraps `v`.
    #[inline]
    pub fn new(v: i128) -> Self {
        Self([v as u64, (v >> 64) as u64])
    }

    /// The value.
    #[inline]
    pub fn get(self) -> i128 {
        (i128::from(self.0[1] as i64) << 64) | i128::from(self.0[0])
    }
}

/// `10^p`, the first unscaled value a decimal of precision `p` cannot hold.
pub fn pow10(p: u8) -> i128 {
    10i128.pow(u32::from(p))
}

/// Whether unscaled `v` fits a decimal of precision `p`.
pub fn fits(v: i128, p: u8) -> bool {
    let bound = pow10(p.min(MAX_PRECISION));
    -bound < v && v < bound
}

/// Output precision and scale of `sum` over `decimal(p, s)` (Spark's rule).
pub fn sum_type(p: u8, s: i8) -> (u8, i8) {
    ((p + 10).min(MAX_PRECISION), s)
}

/// Output precision and scale of `mean` over `decimal(p, s)` (Spark's rule).
pub fn mean_type(p: u8, s: i8) -> (u8, i8) {
    ((p + 4).min(MAX_PRECISION), (s + 4).min(MAX_PRECISION as i8))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn value() -> impl Strategy<Value = i128> {
        prop_oneof![
            any::<i128>(),
            (-1_000_000i128..1_000_000),
            Just(i128::MAX),
            Just(i128::MIN),
            Just(pow10(38) - 1),
            Just(1 - pow10(38)),
        ]
    }

    /// The exact sum of `values` as `hi * 2^64 + lo` (`lo < 2^64`), computed from each
    /// value's high and low 64 bits summed apart: no 128-bit sum can overflow.
    fn model_sum(values: &[i128]) -> (i128, u64) {
        let high: i128 = values.iter().map(|v| v >> 64).sum();
        let low: u128 = values
            .iter()
            .map(|&v| (v as u128) & u128::from(u64::MAX))
            .sum();
        (high + (low >> 64) as i128, low as u64)
    }

    /// [`WideSum`] in [`model_sum`]'s form.
    fn as_model(s: &WideSum) -> (i128, u64) {
        let (lo, carry) = s.parts();
        ((i128::from(carry) << 64) + (lo >> 64), lo as u64)
    }

    /// `round_half_away(x * 10^k / n)` where everything fits an `i128`.
    fn model_div(x: i128, k: u32, n: u64) -> Option<i128> {
        let num = x.checked_mul(10i128.pow(k))?;
        let (q, r) = (num / i128::from(n), (num % i128::from(n)).unsigned_abs());
        Some(if 2 * r >= u128::from(n) {
            q + num.signum()
        } else {
            q
        })
    }

    proptest! {
        /// Any order of additions and merges gives the exact sum.
        #[test]
        fn sums_exactly(values in proptest::collection::vec(value(), 0..60), split in 0usize..60) {
            let mut all = WideSum::default();
            let (mut left, mut right) = (WideSum::default(), WideSum::default());
            for (i, &v) in values.iter().enumerate() {
                all.add(v);
                if i < split { left.add(v) } else { right.add(v) }
            }
            right.merge(&left);
            let exact = model_sum(&values);
            prop_assert_eq!(as_model(&all), exact);
            prop_assert_eq!(as_model(&right), exact);
            // It fits an i128 when the part above the low 64 bits fits an i64.
            let fits = i64::try_from(exact.0).is_ok();
            prop_assert_eq!(all.get(), fits.then(|| (exact.0 << 64) | i128::from(exact.1)));
        }

        /// Scaled, rounded quotients of sums that fit an `i128`.
        #[test]
        fn divides_exactly(
            values in proptest::collection::vec(-(1i128 << 100)..(1i128 << 100), 1..20),
            k in 0u32..5,
            n in prop_oneof![1u64..10, any::<u64>().prop_map(|n| n.max(1))],
        ) {
            let mut s = WideSum::default();
            for &v in &values {
                s.add(v);
            }
            let sum: i128 = values.iter().sum();
            prop_assert_eq!(s.scaled_div(k, n), model_div(sum, k, n));
        }

        /// The mean of `n` copies of any value is that value, however far the sum
        /// leaves the i128 range.
        #[test]
        fn mean_of_copies_is_the_value(v in value(), copies in 1u64..1000, k in 0u32..3) {
            let mut s = WideSum::default();
            for _ in 0..copies {
                s.add(v);
            }
            prop_assert_eq!(s.scaled_div(k, copies), v.checked_mul(10i128.pow(k)));
        }
    }

    #[test]
    fn rounds_half_away_from_zero() {
        let of = |values: &[i128]| {
            let mut s = WideSum::default();
            values.iter().for_each(|&v| s.add(v));
            s
        };
        assert_eq!(of(&[5]).scaled_div(0, 2), Some(3)); // 2.5 -> 3
        assert_eq!(of(&[-5]).scaled_div(0, 2), Some(-3)); // -2.5 -> -3
        assert_eq!(of(&[4]).scaled_div(0, 3), Some(1)); // 1.33 -> 1
        assert_eq!(of(&[-5]).scaled_div(0, 3), Some(-2)); // -1.67 -> -2
        assert_eq!(of(&[1]).scaled_div(4, 3), Some(3333));
        assert_eq!(of(&[i128::MIN]).scaled_div(0, 1), Some(i128::MIN));
        assert_eq!(of(&[i128::MIN]).scaled_div(1, 1), None);
        // (2 * MAX + 1) / 2 = MAX + 0.5, rounded up past the range.
        assert_eq!(of(&[i128::MAX, i128::MAX, 1]).scaled_div(0, 2), None);
        assert_eq!(
            of(&[i128::MAX, i128::MAX]).scaled_div(0, 2),
            Some(i128::MAX)
        );
        assert_eq!(of(&[i128::MIN, i128::MIN, -1]).scaled_div(0, 2), None);
        assert_eq!(
            of(&[i128::MIN, i128::MIN, 1]).scaled_div(0, 2),
            Some(i128::MIN)
        );
    }

    #[test]
    fn spark_output_types_and_bounds() {
        assert_eq!(sum_type(10, 2), (20, 2));
        assert_eq!(sum_type(30, 5), (38, 5));
        assert_eq!(mean_type(10, 2), (14, 6));
        assert_eq!(mean_type(38, 36), (38, 38));
        assert!(fits(pow10(5) - 1, 5) && !fits(pow10(5), 5) && !fits(-pow10(5), 5));
        assert!(fits(pow10(38) - 1, 38) && !fits(pow10(38), 38));
    }
}
