//! Adaptive per-key delays (`tidemark.AdaptiveOutOfOrderness`): each key's delay learned
//! from its own lateness.
//!
//! A row's **lateness** is how far its event time lies behind its key's largest event
//! time as the row's call began (0 for a row at or ahead of it, and for a key's first
//! call). Each key keeps a histogram of its rows' lateness ([`Lateness`]): buckets
//! from `min_delay` to the longest delay (the pipeline's `delay`), each bound about
//! 1.41x the one before (integer steps: the same bounds on every machine), one bucket
//! below and one above; counted in two halves of `horizon` of the key's event time,
//! the older half dropped as the key's events pass into a new half (a key's
//! behaviour learned over its last `horizon` to `horizon / 2`).
//!
//! After each call that touched a key, its delay aims at the `quantile` of the
//! histogram (the bound of the bucket holding it: at most 1.41x above the true
//! quantile; with fewer than `1 / (1 - quantile)` rows, the largest lateness seen),
//! clamped to `[min_delay, delay]`; a key with fewer than `min_rows` rows counted keeps
//! the longest delay. The key's watermark then
//! becomes `max(watermark as the call began, max event time - target)`
//! (`KeyedWatermarkTracker::set_batch_delay`): per-key watermarks stay monotonic, a
//! longer delay holds the watermark until the key's events pass it.
//!
//! Everything is a function of the call's rows as a set and the state before the call:
//! the same calls give the same delays and windows whatever the row order, the cores
//! or the state partitions (a key lives in one). Per key: `8 * buckets + 8` bytes
//! (`Lateness::bytes_per_key`; 176 with the defaults `1s` to `10m`) besides the
//! tracker's 8-byte delay.

use super::config::AdaptiveDelay;
use crate::error::Result;
use crate::state::{Reader, Writer};

const BILLION: u128 = 1_000_000_000;

/// The lateness histograms of a pipeline's keys, by key slot (see the module docs).
#[derive(Debug, Clone)]
pub(crate) struct Lateness {
    /// Upper bounds of every bucket but the last (lateness `<= bounds[0]`: bucket 0;
    /// above the last bound: the last bucket).
    bounds: Vec<i64>,
    min_delay: i64,
    max_delay: i64,
    quantile_ppb: u32,
    /// Rows a key is counted in before its delay is learned.
    warmup: u64,
    /// Half the horizon (event time).
    half: i64,
    /// Per slot: the current half's counts, then the older half's.
    counts: Vec<u32>,
    /// Per slot: the half of event time the current counts belong to (`i64::MIN`:
    /// nothing counted).
    half_of: Vec<i64>,
}

impl Lateness {
    /// The histograms of `a`, whose longest delay is `max_delay`.
    pub(crate) fn new(a: &AdaptiveDelay, max_delay: i64) -> Self {
        let mut bounds = Vec::new();
        let mut b = a.min_delay.max(1);
        loop {
            bounds.push(b.min(max_delay.max(1)));
            if b >= max_delay {
                break;
            }
            b = b.saturating_add((b / 100 * 41).max(1)).min(max_delay);
        }
        let warmup = u64::from(a.min_rows);
        Self {
            bounds,
            min_delay: a.min_delay,
            max_delay,
            quantile_ppb: a.quantile_ppb,
            warmup,
            half: (a.horizon / 2).max(1),
            counts: Vec::new(),
            half_of: Vec::new(),
        }
    }

    fn buckets(&self) -> usize {
        self.bounds.len() + 1
    }

    /// Bytes of state per key (the counts of both halves and the current half).
    pub(crate) fn bytes_per_key(&self) -> usize {
        8 * self.buckets() + 8
    }

    fn bucket(&self, late: i64) -> usize {
        self.bounds.partition_point(|&b| b < late)
    }

    fn ensure(&mut self, slot: u32) {
        let need = slot as usize + 1;
        if self.half_of.len() < need {
            self.half_of.resize(need, i64::MIN);
            self.counts.resize(need * 2 * self.buckets(), 0);
        }
    }

    /// Forgets the key in `slot` (evicted or expired: the slot goes to another key).
    pub(crate) fn reset(&mut self, slot: u32) {
        if (slot as usize) < self.half_of.len() {
            let nb = self.buckets();
            self.half_of[slot as usize] = i64::MIN;
            self.counts[slot as usize * 2 * nb..][..2 * nb].fill(0);
        }
    }

    /// Counts one key's rows of a call (their event times `times`; the key's largest
    /// event time as the call began, `before`, `i64::MIN` for none), and returns the
    /// delay the key aims at after it.
    pub(crate) fn learn(
        &mut self,
        slot: u32,
        before: i64,
        times: impl Iterator<Item = i64> + Clone,
    ) -> i64 {
        self.ensure(slot);
        let nb = self.buckets();
        let s = slot as usize;
        let max = times.clone().fold(before, i64::max);
        if max != i64::MIN {
            let h = max.div_euclid(self.half);
            let cur = self.half_of[s];
            let c = &mut self.counts[s * 2 * nb..][..2 * nb];
            if cur == i64::MIN {
                self.half_of[s] = h;
            } else if h > cur {
                if h == cur + 1 {
                    c.copy_within(0..nb, nb);
                } else {
                    c[nb..].fill(0);
                }
                c[..nb].fill(0);
                self.half_of[s] = h;
            }
        }
        for t in times {
            let late = if before == i64::MIN {
                0
            } else {
                before.saturating_sub(t).max(0)
            };
            let b = self.bucket(late);
            let c = &mut self.counts[s * 2 * nb + b];
            *c = c.saturating_add(1);
        }
        self.target(slot)
    }

    /// The delay the key in `slot` aims at (see the module docs).
    pub(crate) fn target(&self, slot: u32) -> i64 {
        let nb = self.buckets();
        let s = slot as usize;
        if s >= self.half_of.len() {
            return self.max_delay;
        }
        let c = &self.counts[s * 2 * nb..][..2 * nb];
        let per = |b: usize| u64::from(c[b]) + u64::from(c[nb + b]);
        let total: u64 = (0..nb).map(per).sum();
        if total < self.warmup {
            return self.max_delay;
        }
        let rank = (u128::from(total) * u128::from(self.quantile_ppb)).div_ceil(BILLION);
        let rank = (rank as u64).max(1);
        let mut seen = 0;
        for b in 0..nb {
            seen += per(b);
            if seen >= rank {
                let d = if b == 0 {
                    self.min_delay
                } else {
                    self.bounds.get(b).copied().unwrap_or(self.max_delay)
                };
                return d.clamp(self.min_delay, self.max_delay);
            }
        }
        self.max_delay
    }

    /// Writes the key in `slot`'s histogram (a snapshot's per-key record).
    pub(crate) fn write(&self, w: &mut Writer, slot: u32) {
        let nb = self.buckets();
        let s = slot as usize;
        if s >= self.half_of.len() {
            w.i64(i64::MIN);
            (0..2 * nb).for_each(|_| w.u32(0));
            return;
        }
        w.i64(self.half_of[s]);
        for &v in &self.counts[s * 2 * nb..][..2 * nb] {
            w.u32(v);
        }
    }

    /// Reads a histogram [`Self::write`] wrote into `slot`.
    pub(crate) fn read(&mut self, r: &mut Reader<'_>, slot: u32) -> Result<()> {
        self.ensure(slot);
        let nb = self.buckets();
        let s = slot as usize;
        self.half_of[s] = r.i64()?;
        for i in 0..2 * nb {
            self.counts[s * 2 * nb + i] = r.u32()?;
        }
        Ok(())
    }

    /// Reads a histogram as written, without a tracker (resharding).
    pub(crate) fn read_record(&self, r: &mut Reader<'_>) -> Result<(i64, Vec<u32>)> {
        let half = r.i64()?;
        let counts = (0..2 * self.buckets())
            .map(|_| r.u32())
            .collect::<Result<Vec<_>>>()?;
        Ok((half, counts))
    }

    /// Writes a record [`Self::read_record`] read.
    pub(crate) fn write_record(w: &mut Writer, record: &(i64, Vec<u32>)) {
        w.i64(record.0);
        record.1.iter().for_each(|&v| w.u32(v));
    }

    /// Merges two records of one key (a key found in two snapshots): the later
    /// half's counts, and the other's where they count the same halves.
    pub(crate) fn merge_records(into: &mut (i64, Vec<u32>), other: &(i64, Vec<u32>)) {
        let nb = into.1.len() / 2;
        let (a, b) = (into.0, other.0);
        if b == i64::MIN {
            return;
        }
        if a == i64::MIN || b > a {
            let mine = std::mem::replace(into, other.clone());
            return Self::merge_records(into, &mine);
        }
        // a >= b: other's current half is a's current (a == b) or older (a == b + 1).
        let add = |dst: &mut [u32], src: &[u32]| {
            dst.iter_mut()
                .zip(src)
                .for_each(|(d, s)| *d = d.saturating_add(*s))
        };
        if a == b {
            add(&mut into.1, &other.1);
        } else if a == b + 1 {
            add(&mut into.1[nb..], &other.1[..nb]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i64 = 1_000_000;

    fn lateness(min_rows: u32) -> Lateness {
        let a = AdaptiveDelay {
            quantile_ppb: 990_000_000,
            min_delay: S,
            horizon: 100 * S,
            min_rows,
        };
        Lateness::new(&a, 600 * S)
    }

    #[test]
    fn bounds_grow_by_about_1_41_from_min_to_max() {
        let l = lateness(1);
        assert_eq!(l.bounds.first(), Some(&S));
        assert_eq!(l.bounds.last(), Some(&(600 * S)));
        for w in l.bounds.windows(2) {
            assert!(w[1] > w[0] && w[1] <= w[0] + w[0] / 100 * 41 + 1, "{w:?}");
        }
        assert_eq!(l.buckets(), 21);
        assert_eq!(l.bytes_per_key(), 176);
        // Lateness at or below min_delay is bucket 0; above max_delay the last one.
        assert_eq!(l.bucket(0), 0);
        assert_eq!(l.bucket(S), 0);
        assert_eq!(l.bucket(S + 1), 1);
        assert_eq!(l.bucket(601 * S), l.buckets() - 1);
    }

    #[test]
    fn a_key_waits_the_longest_delay_until_min_rows_then_its_quantile() {
        let mut l = lateness(100);
        // 99 rows in order: not enough rows yet.
        let times: Vec<i64> = (0..99).map(|i| 1_000 * S + i).collect();
        assert_eq!(l.learn(0, 999 * S, times.iter().copied()), 600 * S);
        // One more, 30 s behind the key's max: 1 row in 100 is late by 30 s; the 99th
        // percentile is still on time (min_delay).
        assert_eq!(l.learn(0, 1_000 * S + 98, [970 * S + 98].into_iter()), S);
        // Two more rows that late: the 99th percentile is now the bucket above 30 s.
        let d = l.learn(0, 1_000 * S + 98, [970 * S, 971 * S].into_iter());
        assert!((30 * S..=43 * S).contains(&d), "{d}");
        // Another key's slot is untouched.
        assert_eq!(l.target(1), 600 * S);
        l.reset(0);
        assert_eq!(l.target(0), 600 * S);
    }

    #[test]
    fn the_older_half_is_dropped_as_the_key_moves_on() {
        let mut l = lateness(1);
        // 10 rows 100 s late in the half [0, 50 s): the delay covers them.
        let before = 40 * S;
        assert!(l.learn(0, before, (0..10).map(|_| before - 100 * S)) >= 100 * S);
        // Next half: the late rows are still counted (the older half).
        assert!(l.learn(0, 45 * S, (0..10).map(|i| 60 * S + i)) >= 100 * S);
        // Two halves on: forgotten, only on-time rows remain.
        assert_eq!(l.learn(0, 60 * S, (0..10).map(|i| 160 * S + i)), S);
    }

    #[test]
    fn records_merge_by_half() {
        let nb = 3;
        let rec = |half, cur: [u32; 3], old: [u32; 3]| {
            let mut v = cur.to_vec();
            v.extend(old);
            (half, v)
        };
        let mut a = rec(5, [1, 2, 3], [1, 1, 1]);
        Lateness::merge_records(&mut a, &rec(5, [1, 0, 0], [0, 0, 1]));
        assert_eq!(a, rec(5, [2, 2, 3], [1, 1, 2]));
        // The other's current half is this one's older half.
        Lateness::merge_records(&mut a, &rec(4, [1, 1, 1], [9, 9, 9]));
        assert_eq!(a, rec(5, [2, 2, 3], [2, 2, 3]));
        // A later one wins its halves.
        Lateness::merge_records(&mut a, &rec(6, [0, 0, 1], [0, 0, 0]));
        assert_eq!(a, rec(6, [0, 0, 1], [2, 2, 3]));
        Lateness::merge_records(&mut a, &(i64::MIN, vec![7; 2 * nb]));
        assert_eq!(a, rec(6, [0, 0, 1], [2, 2, 3]));
    }
}
