//! Exact floating-point summation (Shewchuk's algorithm, as Python's `math.fsum`).
//!
//! A sum is kept as a short list of non-overlapping partials whose exact sum is the
//! exact sum of every value added. The final value is the correctly rounded exact
//! sum, so it does not depend on the order values were added or partial sums merged:
//! float aggregates stay identical whatever the row order inside a batch, the number
//! of cores, or how partial aggregates are combined (DESIGN.md, determinism).

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
#[derive(Debug, Clone, Default)]
pub struct ExactSum {
    /// The first partials inline (most sums need one or two), the rest in `extra`.
    inline: [f64; 2],
    n_inline: u8,
    /// Rarely needed, so boxed: keeps the sum (and every aggregate state) small.
    extra: Option<Box<Extra>>,
}

#[derive(Debug, Clone, Default)]
struct Extra {
    /// Partials after the first two.
    spill: Vec<f64>,
    /// Sum of non-finite inputs (inf, -inf, NaN), kept apart as `math.fsum` does.
    special: Option<f64>,
}

impl PartialEq for ExactSum {
    fn eq(&self, other: &Self) -> bool {
        self.partials() == other.partials() && self.special() == other.special()
    }
}

impl ExactSum {
    #[inline]
    fn spill_len(&self) -> usize {
        self.extra.as_ref().map_or(0, |e| e.spill.len())
    }

    #[inline]
    fn len(&self) -> usize {
        self.n_inline as usize + self.spill_len()
    }

    #[inline]
    fn special(&self) -> Option<f64> {
        self.extra.as_ref().and_then(|e| e.special)
    }

    #[inline]
    fn get(&self, i: usize) -> f64 {
        if i < 2 {
            self.inline[i]
        } else {
            self.extra.as_ref().expect("spilled").spill[i - 2]
        }
    }

    #[inline]
    fn set(&mut self, i: usize, v: f64) {
        if i < 2 {
            self.inline[i] = v;
        } else {
            self.extra.as_mut().expect("spilled").spill[i - 2] = v;
        }
    }

    #[inline]
    fn truncate_push(&mut self, len: usize, v: f64) {
        if len < 2 {
            self.inline[len] = v;
            self.n_inline = (len + 1) as u8;
            if let Some(e) = self.extra.as_mut() {
                e.spill.clear();
            }
        } else {
            self.n_inline = 2;
            let e = self.extra.get_or_insert_with(Box::default);
            e.spill.truncate(len - 2);
            e.spill.push(v);
        }
    }

    /// The partials, in order.
    fn partials(&self) -> Vec<f64> {
        (0..self.len()).map(|i| self.get(i)).collect()
    }

    /// Adds `x`.
    #[inline]
    pub fn add(&mut self, x: f64) {
        if !x.is_finite() {
            let e = self.extra.get_or_insert_with(Box::default);
            e.special = Some(e.special.map_or(x, |s| s + x));
            return;
        }
        let mut x = x;
        let mut i = 0;
        for j in 0..self.len() {
            let mut y = self.get(j);
            if x.abs() < y.abs() {
                std::mem::swap(&mut x, &mut y);
            }
            let hi = x + y;
            let lo = y - (hi - x);
            if lo != 0.0 {
                self.set(i, lo);
                i += 1;
            }
            x = hi;
        }
        self.truncate_push(i, x);
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

    /// Adds every partial of `other`.
    pub fn merge(&mut self, other: &ExactSum) {
        for i in 0..other.len() {
            self.add(other.get(i));
        }
        if let Some(sp) = other.special() {
            self.add(sp);
        }
    }

    /// The correctly rounded sum.
    pub fn value(&self) -> f64 {
        if let Some(sp) = self.special() {
            return sp;
        }
        let mut n = self.len();
        if n == 0 {
            return 0.0;
        }
        if n == 1 {
            return self.inline[0];
        }
        let p = |i: usize| self.get(i);
        n -= 1;
        let mut hi = p(n);
        let mut lo = 0.0;
        while n > 0 {
            let x = hi;
            n -= 1;
            let y = p(n);
            hi = x + y;
            let yr = hi - x;
            lo = y - yr;
            if lo != 0.0 {
                break;
            }
        }
        // Round half to even across the remaining partials.
        if n > 0 && ((lo < 0.0 && p(n - 1) < 0.0) || (lo > 0.0 && p(n - 1) > 0.0)) {
            let y = lo * 2.0;
            let x = hi + y;
            let yr = x - hi;
            if y == yr {
                hi = x;
            }
        }
        hi
    }

    /// Internal representation, for snapshots.
    pub fn parts(&self) -> (Vec<f64>, Option<f64>) {
        (self.partials(), self.special())
    }

    /// Rebuilds from [`Self::parts`].
    pub fn from_parts(partials: Vec<f64>, special: Option<f64>) -> Self {
        let mut s = ExactSum {
            extra: special.map(|sp| {
                Box::new(Extra {
                    spill: Vec::new(),
                    special: Some(sp),
                })
            }),
            ..Default::default()
        };
        for (i, p) in partials.into_iter().enumerate() {
            s.truncate_push(i, p);
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

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
