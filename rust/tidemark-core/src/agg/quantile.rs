//! A mergeable quantile sketch for `percentile_approx`, the algorithm of Spark's own
//! (`QuantileSummaries`: Greenwald-Khanna with a buffer of new values and merging by
//! sorted union).
//!
//! Each sample keeps a value, `g` (how many values it stands for since the previous
//! sample) and `delta` (the uncertainty of its rank). New values wait in a buffer and
//! are sorted in at once; compression merges neighbours while `g + g' + delta' <
//! 2 * n / accuracy`, so an answer's rank is off by at most about `n / accuracy`.
//! While no sample was merged (up to `accuracy / 2` values) the answer is exact: the
//! value at rank `ceil(p * n)`, the smallest for `p <= 1 / accuracy` and the largest
//! for `p >= 1 - 1 / accuracy`, which is Spark's answer too.

use std::cmp::Ordering;

use super::Scalar;

/// Values buffered before they are sorted into the samples.
const BUFFER: usize = 1_024;
/// Samples beyond which a settle also compresses (Spark's default threshold).
const COMPRESS_AT: usize = 10_000;

/// One sample: a value, the values it stands for, its rank uncertainty.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Sample {
    pub(crate) value: Scalar,
    pub(crate) g: u64,
    pub(crate) delta: u64,
}

/// The sketch (see the module docs).
#[derive(Debug, Clone, PartialEq)]
pub struct QuantileSketch {
    /// Values added.
    pub(crate) n: u64,
    /// Sorted by [`Scalar::total_cmp`].
    pub(crate) samples: Vec<Sample>,
    /// Values not yet sorted in.
    pub(crate) buffer: Vec<Scalar>,
    /// Relative rank error `1 / accuracy` (Spark's `accuracy`).
    pub(crate) accuracy: u32,
}

impl QuantileSketch {
    /// An empty sketch.
    pub fn new(accuracy: u32) -> Self {
        Self {
            n: 0,
            samples: Vec::new(),
            buffer: Vec::new(),
            accuracy: accuracy.max(1),
        }
    }

    fn eps(&self) -> f64 {
        1.0 / f64::from(self.accuracy)
    }

    /// A sketch read back from a snapshot (samples sorted, buffer settled).
    pub(crate) fn from_parts(
        n: u64,
        accuracy: u32,
        samples: Vec<Sample>,
    ) -> crate::error::Result<Self> {
        let sorted = samples
            .windows(2)
            .all(|w| w[0].value.total_cmp(&w[1].value) != Ordering::Greater);
        if accuracy == 0 || !sorted || samples.iter().map(|s| s.g).sum::<u64>() != n {
            return Err(crate::error::TidemarkError::StateCorrupted(
                "percentile_approx: a damaged sketch".into(),
            ));
        }
        Ok(Self {
            n,
            samples,
            buffer: Vec::new(),
            accuracy,
        })
    }

    /// Adds a value.
    pub fn add(&mut self, v: Scalar) {
        self.buffer.push(v);
        if self.buffer.len() >= BUFFER {
            self.settle();
            if self.samples.len() >= COMPRESS_AT {
                self.compress();
            }
        }
    }

    /// Sorts the buffered values into the samples (Spark's `withHeadBufferInserted`).
    pub(crate) fn settle(&mut self) {
        if self.buffer.is_empty() {
            return;
        }
        let mut sorted = std::mem::take(&mut self.buffer);
        sorted.sort_by(|a, b| a.total_cmp(b));
        let old = std::mem::take(&mut self.samples);
        let mut out: Vec<Sample> = Vec::with_capacity(old.len() + sorted.len());
        let mut old = old.into_iter().peekable();
        let last = sorted.len() - 1;
        for (i, v) in sorted.into_iter().enumerate() {
            while let Some(s) = old.peek() {
                if s.value.total_cmp(&v) == Ordering::Greater {
                    break;
                }
                out.push(old.next().expect("peeked"));
            }
            self.n += 1;
            let delta = if out.is_empty() || (old.peek().is_none() && i == last) {
                0
            } else {
                (2.0 * self.eps() * self.n as f64).floor() as u64
            };
            out.push(Sample {
                value: v,
                g: 1,
                delta,
            });
        }
        out.extend(old);
        self.samples = out;
    }

    /// Merges neighbouring samples (Spark's `compressImmut`).
    fn compress(&mut self) {
        self.samples = compressed(&self.samples, 2.0 * self.eps() * self.n as f64);
    }

    /// Merges another sketch into this one (Spark's `merge`).
    pub fn merge(&mut self, other: &QuantileSketch) {
        let mut other = other.clone();
        other.settle();
        self.settle();
        if other.n == 0 {
            return;
        }
        self.n += other.n;
        self.accuracy = self.accuracy.min(other.accuracy);
        let mut all = std::mem::take(&mut self.samples);
        all.extend(other.samples);
        all.sort_by(|a, b| a.value.total_cmp(&b.value));
        self.samples = compressed(&all, 2.0 * self.eps() * self.n as f64);
    }

    /// The value at quantile `p` (`None`: no values), as Spark's `percentile_approx`.
    pub fn query(&self, p: f64) -> Option<Scalar> {
        let mut s = self.clone();
        s.settle();
        s.compress();
        let (first, last) = (s.samples.first()?, s.samples.last()?);
        if p <= s.eps() {
            return Some(first.value.clone());
        }
        if p >= 1.0 - s.eps() {
            return Some(last.value.clone());
        }
        let rank = (p * s.n as f64).ceil() as i64;
        let target = s.samples.iter().map(|x| x.g + x.delta).max().unwrap_or(0) as i64 / 2;
        let mut min_rank = 0i64;
        for x in &s.samples[..s.samples.len() - 1] {
            min_rank += x.g as i64;
            let max_rank = min_rank + x.delta as i64;
            if max_rank - target <= rank && rank <= min_rank + target {
                return Some(x.value.clone());
            }
        }
        Some(last.value.clone())
    }
}

/// `samples` with neighbours merged while `g + g' + delta' < threshold` (from the
/// end; the first sample is always kept).
fn compressed(samples: &[Sample], threshold: f64) -> Vec<Sample> {
    let Some(mut head) = samples.last().cloned() else {
        return Vec::new();
    };
    let mut res: Vec<Sample> = Vec::with_capacity(samples.len());
    for s in samples[..samples.len() - 1].iter().skip(1).rev() {
        if ((s.g + head.g + head.delta) as f64) < threshold {
            head.g += s.g;
        } else {
            res.push(head);
            head = s.clone();
        }
    }
    res.push(head);
    if samples.len() > 1 {
        res.push(samples[0].clone());
    }
    res.reverse();
    res
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ints(s: &QuantileSketch, p: f64) -> Option<i64> {
        match s.query(p) {
            Some(Scalar::I(v)) => Some(v),
            _ => None,
        }
    }

    #[test]
    fn small_inputs_answer_exactly_as_spark() {
        let mut s = QuantileSketch::new(10_000);
        assert_eq!(ints(&s, 0.5), None);
        for v in [5i64, 1, 4, 2, 3, 3] {
            s.add(Scalar::I(v));
        }
        // Sorted 1 2 3 3 4 5: rank ceil(p * 6).
        assert_eq!(ints(&s, 0.5), Some(3));
        assert_eq!(ints(&s, 0.1), Some(1));
        assert_eq!(ints(&s, 0.9), Some(5));
        assert_eq!(ints(&s, 0.0), Some(1));
        assert_eq!(ints(&s, 1.0), Some(5));
    }

    proptest! {
        /// Any split of the values, merged in any order, answers within the rank
        /// error `n / accuracy` of the exact answer; exactly while it is exact.
        #[test]
        fn answers_stay_within_the_rank_error(
            vals in prop::collection::vec(-1_000i64..1_000, 1..3_000),
            split in prop::collection::vec(any::<bool>(), 3_000),
            acc in prop::sample::select(vec![10u32, 100, 10_000]),
            p in 0.0f64..=1.0,
        ) {
            let (mut a, mut b, mut all) =
                (QuantileSketch::new(acc), QuantileSketch::new(acc), QuantileSketch::new(acc));
            for (i, &v) in vals.iter().enumerate() {
                all.add(Scalar::I(v));
                if split[i] { a.add(Scalar::I(v)) } else { b.add(Scalar::I(v)) }
            }
            a.merge(&b);
            let mut sorted = vals.clone();
            sorted.sort_unstable();
            let n = sorted.len() as u64;
            let err = 2 * n / u64::from(acc) + 1;
            for s in [&a, &all] {
                let got = ints(s, p).unwrap();
                // The ranks of the answer in the sorted values.
                let lo = sorted.partition_point(|&x| x < got) as u64 + 1;
                let hi = sorted.partition_point(|&x| x <= got) as u64;
                let rel = 1.0 / f64::from(acc);
                let want = if p <= rel { 1 } else if p >= 1.0 - rel { n } else {
                    ((p * n as f64).ceil() as u64).max(1)
                };
                prop_assert!(lo <= want + err && want <= hi + err, "{got} for rank {want} of {n}");
                if 2 * n < u64::from(acc) {
                    prop_assert!(lo <= want && want <= hi, "exact below accuracy / 2 values");
                }

            }
        }
    }
}
