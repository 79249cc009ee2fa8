//! Accumulators: the mergeable partial state of each aggregate, its inputs and values.

use std::cmp::Ordering;

use arrow_array::cast::AsArray;
use arrow_array::types::Float64Type;
use arrow_array::{
    Array, BinaryViewArray, BooleanArray, Decimal128Array, Float64Array, Int64Array,
    LargeListArray, UInt64Array,
};
use arrow_buffer::NullBuffer;

use super::decimal::{Unscaled, WideSum};
use super::exact::ExactSum;
use super::quantile::QuantileSketch;
use super::{hll, AggKind};

/// One aggregate's input column for a batch, normalised to a few concrete types.
#[derive(Debug, Clone)]
pub enum Input {
    /// `count()` of rows.
    Rows,
    /// `count(col)`: the column's validity.
    NonNull(Option<NullBuffer>),
    /// Integers and temporal values as `Int64`.
    Int(Int64Array),
    /// `UInt64`.
    UInt(UInt64Array),
    /// Floats as `Float64`.
    Float(Float64Array),
    /// Booleans.
    Bool(BooleanArray),
    /// Decimals (unscaled values).
    Dec(Decimal128Array),
    /// Lists of floats, every element of a row's list added (an exact fold's parts).
    FloatParts(LargeListArray),
    /// Strings and binary as `BinaryView`.
    Bytes(BinaryViewArray),
    /// Spark's 64-bit hash of each value (`approx_count_distinct`).
    Hash(UInt64Array),
    /// `min_by` / `max_by`: the values and the column they are ordered by.
    By(Box<Input>, Box<Input>),
}

impl Input {
    /// Hints the CPU to bring `row`'s value into cache (rows are visited grouped by
    /// key, so in an order unrelated to memory).
    #[inline]
    pub fn prefetch(&self, row: usize) {
        match self {
            Input::Int(a) => crate::prefetch_at(a.values(), row),
            Input::UInt(a) => crate::prefetch_at(a.values(), row),
            Input::Float(a) => crate::prefetch_at(a.values(), row),
            Input::Dec(a) => crate::prefetch_at(a.values(), row),
            _ => {}
        }
    }

    /// The value of `row` (`None` for null; `Rows` / `NonNull` yield a dummy value).
    #[inline]
    fn value(&self, row: usize) -> Option<Scalar> {
        match self {
            Input::Rows => Some(Scalar::Bool(true)),
            Input::NonNull(n) => n
                .as_ref()
                .is_none_or(|n| n.is_valid(row))
                .then_some(Scalar::Bool(true)),
            Input::Int(a) => a.is_valid(row).then(|| Scalar::I(a.value(row))),
            Input::UInt(a) => a.is_valid(row).then(|| Scalar::U(a.value(row))),
            Input::Float(a) => a.is_valid(row).then(|| Scalar::F(a.value(row))),
            Input::Bool(a) => a.is_valid(row).then(|| Scalar::Bool(a.value(row))),
            Input::Dec(a) => a
                .is_valid(row)
                .then(|| Scalar::D(Unscaled::new(a.value(row)))),
            Input::Bytes(a) => a.is_valid(row).then(|| Scalar::B(a.value(row).to_vec())),
            Input::Hash(a) => a.is_valid(row).then(|| Scalar::U(a.value(row))),
            Input::By(v, _) => v.value(row),
            Input::FloatParts(_) => unreachable!("only sum reads float parts"),
        }
    }
}

/// The state of `min_by` / `max_by`: the `by` value kept and its row's value.
pub type ByValue = (Scalar, Option<Scalar>);

/// A single value of an aggregate input.
#[derive(Debug, Clone, PartialEq)]
pub enum Scalar {
    /// Integer or temporal value.
    I(i64),
    /// Unsigned 64-bit integer.
    U(u64),
    /// Float.
    F(f64),
    /// Boolean.
    Bool(bool),
    /// String or binary bytes.
    B(Vec<u8>),
    /// Unscaled decimal value.
    D(Unscaled),
}

impl Scalar {
    /// Total order within one type (NaN greatest, `-0.0 == 0.0`).
    pub fn total_cmp(&self, other: &Scalar) -> Ordering {
        fn norm(f: f64) -> f64 {
            if f.is_nan() {
                f64::NAN
            } else if f == 0.0 {
                0.0
            } else {
                f
            }
        }
        match (self, other) {
            (Scalar::I(a), Scalar::I(b)) => a.cmp(b),
            (Scalar::U(a), Scalar::U(b)) => a.cmp(b),
            (Scalar::F(a), Scalar::F(b)) => norm(*a).total_cmp(&norm(*b)),
            (Scalar::Bool(a), Scalar::Bool(b)) => a.cmp(b),
            (Scalar::B(a), Scalar::B(b)) => a.cmp(b),
            (Scalar::D(a), Scalar::D(b)) => a.get().cmp(&b.get()),
            _ => Ordering::Equal,
        }
    }

    fn as_f64(&self) -> f64 {
        match self {
            Scalar::I(v) => *v as f64,
            Scalar::U(v) => *v as f64,
            Scalar::F(v) => *v,
            Scalar::Bool(v) => *v as u8 as f64,
            Scalar::B(_) | Scalar::D(_) => f64::NAN,
        }
    }

    fn as_i128(&self) -> i128 {
        match self {
            Scalar::I(v) => *v as i128,
            Scalar::U(v) => *v as i128,
            Scalar::D(v) => v.get(),
            _ => 0,
        }
    }
}

/// A mergeable partial aggregate state.
#[derive(Debug, Clone, PartialEq)]
pub enum Acc {
    /// Count.
    Count(i64),
    /// Exact integer sum and number of values.
    SumI(i128, i64),
    /// Exact float sum and number of values.
    SumF(ExactSum, i64),
    /// Integer sum for a mean.
    MeanI(i128, i64),
    /// Float sum for a mean.
    MeanF(ExactSum, i64),
    /// Exact sum of unscaled decimal values and their number (decimal sum and mean).
    Dec(WideSum, i64),
    /// Sum, sum of squares and count (variance, stddev).
    Moments(Box<[ExactSum; 2]>, i64),
    /// Smallest value.
    Min(Option<Scalar>),
    /// Largest value.
    Max(Option<Scalar>),
    /// Value at the smallest event time.
    First(Option<(i64, Scalar)>),
    /// Value at the largest event time.
    Last(Option<(i64, Scalar)>),
    /// The distinct values, sorted by [`Scalar::total_cmp`].
    Distinct(Vec<Scalar>),
    /// HyperLogLog++ registers.
    Hll(Box<[u8]>),
    /// The smallest `by` value so far and its row's value (null: `None`), boxed:
    /// two values would double every state's size.
    MinBy(Option<Box<ByValue>>),
    /// The largest `by` value so far and its row's value.
    MaxBy(Option<Box<ByValue>>),
    /// A quantile sketch (`percentile_approx`).
    Quantiles(Box<QuantileSketch>),
}

impl Acc {
    /// Adds the value of `row` of `input` (an event at `ts`).
    #[inline]
    pub fn update(&mut self, input: &Input, row: usize, ts: i64) {
        match (&mut *self, input) {
            (Acc::Count(c), Input::Rows) => *c += 1,
            (Acc::Count(c), Input::NonNull(n)) => {
                if n.as_ref().is_none_or(|n| n.is_valid(row)) {
                    *c += 1
                }
            }
            (Acc::SumF(s, n) | Acc::MeanF(s, n), Input::Float(a)) => {
                if a.is_valid(row) {
                    s.add(a.value(row));
                    *n += 1;
                }
            }
            (Acc::SumF(s, n), Input::FloatParts(a)) => {
                if a.is_valid(row) {
                    // The row's range of the values (no slice of the list per row).
                    let values = a.values().as_primitive::<Float64Type>();
                    let offsets = a.value_offsets();
                    for i in offsets[row] as usize..offsets[row + 1] as usize {
                        if values.is_valid(i) {
                            s.add(values.value(i));
                        }
                    }
                    *n += 1;
                }
            }
            (Acc::SumI(s, n) | Acc::MeanI(s, n), Input::Int(a)) => {
                if a.is_valid(row) {
                    *s += a.value(row) as i128;
                    *n += 1;
                }
            }
            (Acc::Dec(s, n), Input::Dec(a)) => {
                if a.is_valid(row) {
                    s.add(a.value(row));
                    *n += 1;
                }
            }
            (Acc::Hll(r), Input::Hash(h)) => {
                if h.is_valid(row) {
                    hll::add(r, h.value(row));
                }
            }
            (Acc::MinBy(_) | Acc::MaxBy(_), Input::By(v, by)) => {
                // Rows whose `by` value is null are skipped (as in Spark).
                if let Some(o) = by.value(row) {
                    self.offer_by(o, v.value(row));
                }
            }
            _ => {
                if let Some(v) = input.value(row) {
                    self.update_value(v, ts);
                }
            }
        }
    }

    fn update_value(&mut self, v: Scalar, ts: i64) {
        match self {
            Acc::Count(c) => *c += 1,
            Acc::SumI(s, n) | Acc::MeanI(s, n) => {
                *s += v.as_i128();
                *n += 1;
            }
            Acc::SumF(s, n) | Acc::MeanF(s, n) => {
                s.add(v.as_f64());
                *n += 1;
            }
            Acc::Dec(s, n) => {
                s.add(v.as_i128());
                *n += 1;
            }
            Acc::Moments(m, n) => {
                let [s, q] = &mut **m;
                let x = v.as_f64();
                s.add(x);
                q.add_product(x, x);
                *n += 1;
            }
            Acc::Min(m) => {
                if m.as_ref()
                    .is_none_or(|cur| v.total_cmp(cur) == Ordering::Less)
                {
                    *m = Some(v);
                }
            }
            Acc::Max(m) => {
                if m.as_ref()
                    .is_none_or(|cur| v.total_cmp(cur) == Ordering::Greater)
                {
                    *m = Some(v);
                }
            }
            Acc::First(f) => {
                let better = f.as_ref().is_none_or(|(t, cur)| {
                    ts < *t || (ts == *t && v.total_cmp(cur) == Ordering::Less)
                });
                if better {
                    *f = Some((ts, v));
                }
            }
            Acc::Last(l) => {
                let better = l.as_ref().is_none_or(|(t, cur)| {
                    ts > *t || (ts == *t && v.total_cmp(cur) == Ordering::Greater)
                });
                if better {
                    *l = Some((ts, v));
                }
            }
            Acc::Distinct(d) => {
                if let Err(i) = d.binary_search_by(|x| x.total_cmp(&v)) {
                    d.insert(i, v);
                }
            }
            Acc::Hll(r) => {
                if let Scalar::U(h) = v {
                    hll::add(r, h);
                }
            }
            Acc::MinBy(_) | Acc::MaxBy(_) => {}
            Acc::Quantiles(q) => q.add(v),
        }
    }

    /// `min_by` / `max_by`: the row ordered by `by` with value `v` replaces the one
    /// kept if its `by` value is smaller (larger), or equal with a smaller (larger)
    /// value, a null value being the smallest: the result never depends on row order.
    fn offer_by(&mut self, by: Scalar, v: Option<Scalar>) {
        let value_cmp = |a: &Option<Scalar>, b: &Option<Scalar>| match (a, b) {
            (None, None) => Ordering::Equal,
            (None, Some(_)) => Ordering::Less,
            (Some(_), None) => Ordering::Greater,
            (Some(a), Some(b)) => a.total_cmp(b),
        };
        let (slot, want) = match self {
            Acc::MinBy(s) => (s, Ordering::Less),
            Acc::MaxBy(s) => (s, Ordering::Greater),
            _ => return,
        };
        let better = slot.as_ref().is_none_or(|cur| match by.total_cmp(&cur.0) {
            Ordering::Equal => value_cmp(&v, &cur.1) == want,
            o => o == want,
        });
        if better {
            *slot = Some(Box::new((by, v)));
        }
    }

    /// Merges another partial state of the same aggregate into this one.
    pub fn merge(&mut self, other: &Acc) {
        match (self, other) {
            (Acc::Count(a), Acc::Count(b)) => *a += b,
            (Acc::SumI(s, n), Acc::SumI(s2, n2)) | (Acc::MeanI(s, n), Acc::MeanI(s2, n2)) => {
                *s += s2;
                *n += n2;
            }
            (Acc::SumF(s, n), Acc::SumF(s2, n2)) | (Acc::MeanF(s, n), Acc::MeanF(s2, n2)) => {
                s.merge(s2);
                *n += n2;
            }
            (Acc::Dec(s, n), Acc::Dec(s2, n2)) => {
                s.merge(s2);
                *n += n2;
            }
            (Acc::Moments(m, n), Acc::Moments(m2, n2)) => {
                m[0].merge(&m2[0]);
                m[1].merge(&m2[1]);
                *n += n2;
            }
            (me @ Acc::Min(_), Acc::Min(Some(v))) | (me @ Acc::Max(_), Acc::Max(Some(v))) => {
                me.update_value(v.clone(), 0)
            }
            (me @ Acc::First(_), Acc::First(Some((t, v))))
            | (me @ Acc::Last(_), Acc::Last(Some((t, v)))) => me.update_value(v.clone(), *t),
            (Acc::Distinct(a), Acc::Distinct(b)) => {
                // Both sorted: one merge pass, equal values once.
                let mut out = Vec::with_capacity(a.len() + b.len());
                let (mut i, mut j) = (0, 0);
                while i < a.len() && j < b.len() {
                    match a[i].total_cmp(&b[j]) {
                        Ordering::Less => {
                            out.push(a[i].clone());
                            i += 1;
                        }
                        Ordering::Greater => {
                            out.push(b[j].clone());
                            j += 1;
                        }
                        Ordering::Equal => {
                            out.push(a[i].clone());
                            i += 1;
                            j += 1;
                        }
                    }
                }
                out.extend_from_slice(&a[i..]);
                out.extend_from_slice(&b[j..]);
                *a = out;
            }
            (Acc::Hll(a), Acc::Hll(b)) => hll::merge(a, b),
            (Acc::Quantiles(a), Acc::Quantiles(b)) => a.merge(b),
            (me @ Acc::MinBy(_), Acc::MinBy(Some(b)))
            | (me @ Acc::MaxBy(_), Acc::MaxBy(Some(b))) => me.offer_by(b.0.clone(), b.1.clone()),
            _ => {}
        }
    }

    pub(super) fn count(&self) -> i64 {
        match self {
            Acc::Count(c) => *c,
            _ => 0,
        }
    }

    pub(super) fn int_sum(&self) -> Option<i64> {
        match self {
            Acc::SumI(s, n) if *n > 0 => i64::try_from(*s).ok(),
            _ => None,
        }
    }

    pub(super) fn float_value(&self, kind: AggKind) -> Option<f64> {
        match (self, kind) {
            (Acc::SumF(s, n), _) => (*n > 0).then(|| s.value()),
            (Acc::SumI(s, n), _) => (*n > 0).then_some(*s as f64),
            (Acc::MeanF(s, n), _) => (*n > 0).then(|| s.value() / *n as f64),
            (Acc::MeanI(s, n), _) => (*n > 0).then(|| (*s as f64) / *n as f64),
            (Acc::Moments(m, n), AggKind::Variance { ddof } | AggKind::Stddev { ddof }) => {
                let [s, q] = &**m;
                let n = *n;
                if n <= ddof as i64 {
                    return None;
                }
                // n^2 * var_pop = n*Q - S^2, computed exactly from the exact sums
                // (S = S_hat + S_lo; every product split into two exact parts), then
                // rounded once: accurate even when the mean dwarfs the spread.
                let nf = n as f64;
                let s_hat = s.value();
                let mut rest = s.clone();
                rest.add(-s_hat);
                let s_lo = rest.value();
                let mut d = ExactSum::default();
                let (qparts, qspecial) = q.parts();
                if let Some(sp) = qspecial {
                    d.add(sp);
                }
                for &p in &qparts {
                    d.add_product(p, nf);
                }
                d.add_product(-s_hat, s_hat);
                d.add_product(-2.0 * s_hat, s_lo);
                d.add_product(-s_lo, s_lo);
                let m2 = d.value().max(0.0);
                let var = m2 / (nf * (n - ddof as i64) as f64);
                Some(if matches!(kind, AggKind::Stddev { .. }) {
                    var.sqrt()
                } else {
                    var
                })
            }
            _ => None,
        }
    }

    pub(super) fn scalar(&self) -> Option<&Scalar> {
        match self {
            Acc::Min(m) | Acc::Max(m) => m.as_ref(),
            Acc::First(f) | Acc::Last(f) => f.as_ref().map(|(_, v)| v),
            Acc::MinBy(b) | Acc::MaxBy(b) => b.as_ref().and_then(|b| b.1.as_ref()),
            _ => None,
        }
    }
}
