//! Exact floating-point summation.
//!
//! The sum of every value added is kept exactly; its value is the correctly rounded
//! exact sum (ties to even, as Python's `math.fsum`), so it does not depend on the
//! order values were added or partial sums merged: float aggregates stay identical
//! whatever the row order inside a batch, the number of cores, or how partial
//! aggregates are combined (DESIGN.md, determinism).
//!
//! Most values are added to a 128-bit fixed-point integer whose unit is placed, at
//! the first value, 40 bits below that value's last mantissa bit: adding is an
//! integer shift and add. A value whose bits fall outside that window (much smaller
//! or much larger than the first, or a sum that would overflow it) goes to a list of
//! non-overlapping partials (Shewchuk's algorithm, as `math.fsum`), which is exact
//! for any values; non-finite values are summed apart, as `math.fsum` does. A sum
//! whose finite part leaves the double range (a partial sum beyond ±`f64::MAX`)
//! becomes ±inf, as an IEEE sum that overflows (`math.fsum` raises instead): then,
//! and only then, the result can depend on the order of values of mixed signs
//! (`[MAX, MAX, -MAX]` overflows, `[MAX, -MAX, MAX]` gives `MAX`).

/// An exact sum of `f64` values.
///
/// # Examples
///
/// ```
/// use tidemark_core::agg::ExactSum;
/// let mut a = ExactSum::default();
/// for x in [1e100, 1.0, -1e100] { a.add(x); }
/// assert_eq!(a.value(), 1.0); // naive summation gives 0.0
/// let mut b = ExactSum::default();
/// for x in [-1e100, 1e100, 1.0] { b.add(x); }
/// assert_eq!(a.value(), b.value());
/// ```
#[derive(Debug, Clone)]
pub struct ExactSum {
    /// The values inside the window, in units of `2^lsb`.
    fixed: i128,
    /// Exponent of the fixed-point unit; above [`MAX_LSB`] while no window is placed
    /// ([`UNSET`]; [`NEG_ZERO`]: only `-0.0` was added, whose sum is `-0.0`;
    /// [`POS_ZERO`]: only zeros were added, `0.0` among them, whose sum is `0.0`
    /// whatever zeros follow).
    lsb: i16,
    /// Rarely needed, so boxed: keeps the sum (and every aggregate state) small.
    extra: Option<Box<Extra>>,
}

#[derive(Debug, Clone, Default)]
struct Extra {
    /// Values outside the window, as non-overlapping partials (Shewchuk).
    partials: Partials,
    /// Sum of non-finite inputs (inf, -inf, NaN), kept apart as `math.fsum` does.
    special: Option<f64>,
}

const UNSET: i16 = i16::MAX;
const NEG_ZERO: i16 = i16::MAX - 1;
const POS_ZERO: i16 = i16::MAX - 2;
/// Window bounds: `fixed * 2^lsb` and the three chunks of [`ExactSum::chunks`] stay
/// normal, finite doubles (`|fixed| < 2^127`).
const MIN_LSB: i32 = -1022;
const MAX_LSB: i32 = 896;
/// Bits of the window below the first value's last mantissa bit.
const BELOW: i32 = 40;
/// Largest shift of a 53-bit mantissa into the window (its top bit stays below 2^126).
const MAX_SHIFT: i32 = 72;
const FRAC: u64 = (1 << 52) - 1;

impl Default for ExactSum {
    fn default() -> Self {
        ExactSum {
            fixed: 0,
            lsb: UNSET,
            extra: None,
        }
    }
}

impl PartialEq for ExactSum {
    /// Equal exact sums (and equal non-finite parts), however they are represented
    /// (sums that overflow a double: equal values).
    fn eq(&self, other: &Self) -> bool {
        if self.special().map(f64::to_bits) != other.special().map(f64::to_bits) {
            return false;
        }
        if self.special().is_some() {
            return true; // the value is the non-finite part, whatever the finite part
        }
        let mut d = Partials::default();
        let mut fits = true;
        self.for_each_part(|p| fits &= d.add(p).is_ok());
        other.for_each_part(|p| fits &= d.add(-p).is_ok());
        let (a, b) = (self.value(), other.value());
        match d.value() {
            // Sums near the top of the double range: the difference overflows.
            dv if !fits || !dv.is_finite() => a.to_bits() == b.to_bits(),
            dv => dv == 0.0 && a.is_sign_negative() == b.is_sign_negative(),
        }
    }
}

/// `2^e` for `e` in the normal range.
#[inline]
fn pow2(e: i32) -> f64 {
    debug_assert!((-1022..=1023).contains(&e));
    f64::from_bits(((e + 1023) as u64) << 52)
}

impl ExactSum {
    #[inline]
    pub(crate) fn special(&self) -> Option<f64> {
        self.extra.as_ref().and_then(|e| e.special)
    }

    #[inline]
    fn has_window(&self) -> bool {
        i32::from(self.lsb) <= MAX_LSB
    }

    /// Adds `x`.
    #[inline]
    pub fn add(&mut self, x: f64) {
        let bits = x.to_bits();
        let biased = ((bits >> 52) & 0x7ff) as i32;
        let frac = bits & FRAC;
        if biased == 0x7ff || (biased == 0 && frac == 0) {
            return self.add_rare(x);
        }
        // x = ±mant * 2^e exactly.
        let (mant, e) = if biased == 0 {
            (frac, -1074)
        } else {
            (frac | (1 << 52), biased - 1075)
        };
        if !self.has_window() {
            self.lsb = (e - BELOW).clamp(MIN_LSB, MAX_LSB) as i16;
        }
        let shift = e - i32::from(self.lsb);
        let m = if (0..=MAX_SHIFT).contains(&shift) {
            Some(i128::from(mant) << shift)
        } else if shift < 0 && shift > -53 && mant.trailing_zeros() >= shift.unsigned_abs() {
            // Its bits below the unit are all zero.
            Some(i128::from(mant >> shift.unsigned_abs()))
        } else {
            None
        };
        if let Some(m) = m {
            let v = if (bits as i64) < 0 { -m } else { m };
            if let Some(f) = self.fixed.checked_add(v) {
                self.fixed = f;
                return;
            }
        }
        if let Err(inf) = self.extra_mut().partials.add(x) {
            self.overflow(inf);
        }
    }

    /// The finite part's sum left the double range (`inf`: ±inf, its direction): the
    /// sum is that infinity from now on, as an IEEE sum that overflows, and the finite
    /// part is dropped (no finite value can be represented next to it).
    #[cold]
    fn overflow(&mut self, inf: f64) {
        self.fixed = 0;
        self.lsb = UNSET;
        let e = self.extra_mut();
        e.partials = Partials::default();
        e.special = Some(e.special.map_or(inf, |s| s + inf));
    }

    /// Zeros and non-finite values.
    #[cold]
    fn add_rare(&mut self, x: f64) {
        if !x.is_finite() {
            let e = self.extra_mut();
            e.special = Some(e.special.map_or(x, |s| s + x));
        } else if self.lsb == UNSET && x.is_sign_negative() && self.extra.is_none() {
            self.lsb = NEG_ZERO; // -0.0 so far: the sum is -0.0
        } else if (self.lsb == NEG_ZERO || self.lsb == UNSET) && x.is_sign_positive() {
            // -0.0 + 0.0 = 0.0, and a later -0.0 leaves it (0.0 + -0.0 = 0.0).
            self.lsb = POS_ZERO;
        }
    }

    #[cold]
    fn extra_mut(&mut self) -> &mut Extra {
        if self.lsb == NEG_ZERO {
            self.lsb = UNSET;
        }
        self.extra.get_or_insert_with(Box::default)
    }

    /// Adds `a * b` exactly (the product's rounding error is added too).
    #[inline]
    pub fn add_product(&mut self, a: f64, b: f64) {
        let p = a * b;
        if !p.is_finite() {
            self.add(p);
            return;
        }
        self.add(p);
        self.add(a.mul_add(b, -p));
    }

    /// `fixed * 2^lsb` as three exact doubles (42-bit chunks), high to low.
    fn chunks(&self) -> [f64; 3] {
        const MASK: i128 = (1 << 42) - 1;
        let lsb = i32::from(self.lsb);
        [
            (self.fixed >> 84) as f64 * pow2(lsb + 84),
            ((self.fixed >> 42) & MASK) as f64 * pow2(lsb + 42),
            (self.fixed & MASK) as f64 * pow2(lsb),
        ]
    }

    /// Calls `f` with finite doubles whose exact sum is the finite part of the sum.
    pub(crate) fn for_each_part(&self, mut f: impl FnMut(f64)) {
        if self.lsb == NEG_ZERO {
            f(-0.0);
        } else if self.lsb == POS_ZERO {
            f(0.0);
        }
        if self.has_window() && self.fixed != 0 {
            self.chunks()
                .into_iter()
                .filter(|&c| c != 0.0)
                .for_each(&mut f);
        }
        if let Some(e) = &self.extra {
            e.partials.0.iter().copied().for_each(f);
        }
    }

    /// Adds the sum `other` holds.
    pub fn merge(&mut self, other: &ExactSum) {
        if other.has_window() && other.lsb == self.lsb {
            if let Some(f) = self.fixed.checked_add(other.fixed) {
                self.fixed = f;
                if let Some(e) = &other.extra {
                    e.partials.0.iter().for_each(|&p| self.add(p));
                }
                if let Some(sp) = other.special() {
                    self.add(sp);
                }
                return;
            }
        }
        other.for_each_part(|p| self.add(p));
        if let Some(sp) = other.special() {
            self.add(sp);
        }
    }

    /// The correctly rounded sum.
    pub fn value(&self) -> f64 {
        if let Some(sp) = self.special() {
            return sp;
        }
        match &self.extra {
            // One rounding: i128 to f64 rounds to nearest, ties to even; scaling by a
            // power of two in the normal range is exact.
            None if self.has_window() => self.fixed as f64 * pow2(i32::from(self.lsb)),
            None if self.lsb == NEG_ZERO => -0.0,
            None => 0.0,
            Some(e) => {
                let mut p = e.partials.clone();
                if self.has_window() && self.fixed != 0 {
                    for c in self.chunks() {
                        if let Err(inf) = p.add(c) {
                            return inf; // window and partials together overflow
                        }
                    }
                }
                p.value()
            }
        }
    }

    /// An exact representation (finite partials and the non-finite part), for
    /// snapshots.
    pub fn parts(&self) -> (Vec<f64>, Option<f64>) {
        let mut out = Vec::new();
        self.for_each_part(|p| out.push(p));
        (out, self.special())
    }

    /// Rebuilds from [`Self::parts`] (the parts as a vector, or read one by one).
    pub fn from_parts(partials: impl IntoIterator<Item = f64>, special: Option<f64>) -> Self {
        let mut s = ExactSum::default();
        partials.into_iter().for_each(|p| s.add(p));
        if let Some(sp) = special {
            s.extra_mut().special = Some(sp);
        }
        s
    }
}

/// Shewchuk's non-overlapping partials (the algorithm of Python's `math.fsum`): exact
/// for any finite values.
#[derive(Debug, Clone, Default)]
struct Partials(Vec<f64>);

impl Partials {
    /// Adds `x`. `Err(±inf)` if a partial sum leaves the double range (the partials
    /// are then left in no useful state: the caller drops them).
    fn add(&mut self, x: f64) -> Result<(), f64> {
        let p = &mut self.0;
        let mut x = x;
        let mut i = 0;
        for j in 0..p.len() {
            let mut y = p[j];
            if x.abs() < y.abs() {
                std::mem::swap(&mut x, &mut y);
            }
            let hi = x + y;
            if hi.is_infinite() {
                return Err(hi);
            }
            let lo = y - (hi - x);
            if lo != 0.0 {
                p[i] = lo;
                i += 1;
            }
            x = hi;
        }
        p.truncate(i);
        p.push(x);
        Ok(())
    }

    fn value(&self) -> f64 {
        let p = &self.0;
        let mut n = p.len();
        if n == 0 {
            return 0.0;
        }
        n -= 1;
        let mut hi = p[n];
        let mut lo = 0.0;
        while n > 0 {
            let x = hi;
            n -= 1;
            let y = p[n];
            hi = x + y;
            let yr = hi - x;
            lo = y - yr;
            if lo != 0.0 {
                break;
            }
        }
        // Round half to even across the remaining partials.
        if n > 0 && ((lo < 0.0 && p[n - 1] < 0.0) || (lo > 0.0 && p[n - 1] > 0.0)) {
            let y = lo * 2.0;
            let x = hi + y;
            let yr = x - hi;
            if y == yr {
                hi = x;
            }
        }
        hi
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sum(xs: &[f64]) -> f64 {
        let mut s = ExactSum::default();
        xs.iter().for_each(|&x| s.add(x));
        s.value()
    }

    #[test]
    fn a_sum_beyond_the_double_range_is_infinite_not_nan() {
        const M: f64 = f64::MAX;
        assert_eq!(sum(&[M, M]), f64::INFINITY);
        assert_eq!(sum(&[1e308, 1e308]), f64::INFINITY);
        assert_eq!(sum(&[-M, -M, 1.0]), f64::NEG_INFINITY);
        assert_eq!(sum(&[1.0, -1e308, -1e308, 5.0]), f64::NEG_INFINITY);
        // Overflowed, then more values: still the infinity (inf - inf is NaN).
        assert_eq!(sum(&[M, M, -M]), f64::INFINITY);
        assert!(sum(&[M, M, f64::NEG_INFINITY]).is_nan());
        // Within the range the sum stays exact, near the top included.
        assert_eq!(sum(&[M, -M, M]), M);
        assert_eq!(sum(&[M, 1.0, -1.0]), M);
        assert_eq!(sum(&[M / 2.0, M / 2.0]), M);
        // Two overflowed sums compare equal; merged, they stay infinite.
        let (mut a, mut b) = (ExactSum::default(), ExactSum::default());
        [M, M, 3.0].iter().for_each(|&x| a.add(x));
        [M, M].iter().for_each(|&x| b.add(x));
        assert_eq!(a, b);
        a.merge(&b);
        assert_eq!(a.value(), f64::INFINITY);
        // The parts a snapshot keeps rebuild the same sum.
        let (parts, special) = a.parts();
        assert_eq!(ExactSum::from_parts(parts, special).value(), f64::INFINITY);
    }

    proptest! {
        #[test]
        fn order_does_not_matter(mut xs in proptest::collection::vec(-1e12f64..1e12, 0..60), seed in any::<u64>()) {
            let mut a = ExactSum::default();
            xs.iter().for_each(|&x| a.add(x));
            // Shuffle deterministically and split into two merged halves.
            let n = xs.len();
            for i in (1..n).rev() {
                let j = (seed.wrapping_mul(i as u64 + 1) >> 7) as usize % (i + 1);
                xs.swap(i, j);
            }
            let (l, r) = xs.split_at(n / 2);
            let mut b = ExactSum::default();
            l.iter().for_each(|&x| b.add(x));
            let mut c = ExactSum::default();
            r.iter().for_each(|&x| c.add(x));
            b.merge(&c);
            prop_assert_eq!(a.value().to_bits(), b.value().to_bits());
        }
    }

    /// Doubles of every scale: mantissa, exponent (a window's width apart and more),
    /// sign; now and then a zero, a huge or a subnormal value (sums of up to 80 of
    /// them stay finite: fsum itself fails on overflow).
    fn any_double() -> impl Strategy<Value = f64> {
        prop_oneof![
            8 => (any::<u64>(), -80i32..80, any::<bool>()).prop_map(|(m, e, neg)| {
                let v = (m >> 11) as f64 * 2f64.powi(e - 53);
                if neg { -v } else { v }
            }),
            2 => (-1000i64..1000).prop_map(|i| i as f64 / 8.0),
            1 => prop_oneof![Just(0.0), Just(-0.0), Just(1e300), Just(-1e300), Just(5e-324),
                             Just(f64::MIN_POSITIVE), Just(-4e-320)],
        ]
    }

    /// The reference: Shewchuk's partials alone (the `math.fsum` algorithm).
    fn reference(xs: &[f64]) -> f64 {
        let mut p = Partials::default();
        xs.iter()
            .for_each(|&x| p.add(x).expect("the test values stay within the range"));
        p.value()
    }

    proptest! {
        #[test]
        fn matches_fsum(xs in proptest::collection::vec(any_double(), 0..80), cut in any::<prop::sample::Index>()) {
            let finite: Vec<f64> = xs.iter().copied().filter(|x| x.is_finite()).collect();
            let mut a = ExactSum::default();
            finite.iter().for_each(|&x| a.add(x));
            let want = reference(&finite);
            let got = a.value();
            prop_assert_eq!(got.to_bits(), want.to_bits(), "{:?}: {} vs fsum {}", finite, got, want);
            // Split anywhere and merged; snapshotted and restored.
            let k = if finite.is_empty() { 0 } else { cut.index(finite.len() + 1) };
            let (l, r) = finite.split_at(k);
            let (mut b, mut c) = (ExactSum::default(), ExactSum::default());
            l.iter().for_each(|&x| b.add(x));
            r.iter().for_each(|&x| c.add(x));
            b.merge(&c);
            prop_assert_eq!(b.value().to_bits(), got.to_bits());
            prop_assert!(b == a);
            let (parts, special) = a.parts();
            prop_assert_eq!(ExactSum::from_parts(parts, special).value().to_bits(), got.to_bits());
        }
    }

    /// Only `-0.0` added sums to `-0.0`, in any order, as IEEE addition gives (and as the
    /// partials alone did before the fixed-point window; `math.fsum` returns `0.0`).
    #[test]
    fn negative_zero_sums_keep_their_sign() {
        let sum = |xs: &[f64]| {
            let mut a = ExactSum::default();
            xs.iter().for_each(|&x| a.add(x));
            a.value()
        };
        assert!(sum(&[]).is_sign_positive());
        assert!(sum(&[-0.0]).is_sign_negative());
        assert!(sum(&[-0.0, -0.0]).is_sign_negative());
        assert!(sum(&[-0.0, 0.0]).is_sign_positive());
        // In any order: 0.0 + -0.0 is 0.0 too.
        assert!(sum(&[0.0, -0.0]).is_sign_positive());
        assert!(sum(&[-0.0, 0.0, -0.0]).is_sign_positive());
        assert!(sum(&[1.0, -1.0, -0.0]).is_sign_positive());
        assert!(sum(&[-0.0, 1.0, -1.0]).is_sign_positive());
        let mut a = ExactSum::default();
        a.add(-0.0);
        a.merge(&ExactSum::default());
        assert!(a.value().is_sign_negative());
        let (parts, sp) = a.parts();
        assert!(ExactSum::from_parts(parts, sp).value().is_sign_negative());
        // A sum of 0.0 merged into a sum of -0.0 and back, and through its parts.
        let mut b = ExactSum::default();
        b.add(0.0);
        b.add(-0.0);
        let mut c = a.clone();
        c.merge(&b);
        assert!(c.value().is_sign_positive());
        b.merge(&a);
        assert!(b.value().is_sign_positive());
        let (parts, sp) = b.parts();
        assert!(ExactSum::from_parts(parts, sp).value().is_sign_positive());
    }

    #[test]
    fn the_sum_stays_as_small_as_before() {
        // Every float aggregate state holds one (the partials took 32 bytes too).
        assert_eq!(std::mem::size_of::<ExactSum>(), 32);
    }

    #[test]
    fn values_outside_the_window_stay_exact() {
        // Far below and far above the first value, and a running sum that outgrows
        // the fixed-point window.
        let mut a = ExactSum::default();
        let xs = [1.0, 1e-30, 2f64.powi(80), -2f64.powi(80), 3e-300, -1.0];
        xs.iter().for_each(|&x| a.add(x));
        assert_eq!(a.value(), 1e-30);
        let mut b = ExactSum::default();
        b.add(1.0);
        for _ in 0..1000 {
            b.add(2f64.powi(60));
        }
        b.add(0.5);
        assert_eq!(b.value(), 1000.0 * 2f64.powi(60));
        assert!(b.extra.is_some(), "the window overflowed");
        for _ in 0..1000 {
            b.add(-(2f64.powi(60)));
        }
        assert_eq!(b.value(), 1.5);
    }

    #[test]
    fn specials() {
        let mut a = ExactSum::default();
        a.add(1.0);
        a.add(f64::INFINITY);
        assert_eq!(a.value(), f64::INFINITY);
        a.add(f64::NEG_INFINITY);
        assert!(a.value().is_nan());
        let mut p = ExactSum::default();
        p.add_product(0.1, 0.1);
        assert_eq!(p.value(), 0.1 * 0.1);
    }
}
