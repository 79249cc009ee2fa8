//! Lateness a user can see (`tidemark.LatenessReport`): per key and per source
//! partition, how far behind its rows arrive, how many were late and by how much, and
//! (with a Spark delay) how many rows Spark's global watermark would have dropped.
//!
//! * A row's **behind** is, per key, how far its event time lies behind the key's
//!   largest event time as the row's call began (0 for a key's first call: what an
//!   out-of-order key needs as its delay); per source partition, how far behind the
//!   stream's largest event time as the call began (a partition that lags an hour is an
//!   hour behind).
//! * A late row's **late by** is how far it lies behind the watermark that judged it.
//! * **Spark would drop**: each call's rows are also judged by Spark's rule with one
//!   global watermark, `max event time of the stream - spark_delay`, as the previous
//!   call began (`withWatermark` + `groupBy(window(...))`, micro-batch by micro-batch):
//!   a row whose windows that watermark closed. `spark_kept` counts those tidemark
//!   kept.
//!
//! Counts sit in fixed buckets (0, then `<= 1 ms, 2 ms, 5 ms, ..., 50,000 s`, then
//! above): the same on every machine, merged by adding (cores, state partitions,
//! resharding). Everything is a function of the call's rows as a set and the state as
//! it began, so the same calls give the same report whatever the row order, cores or
//! state partitions. Per key: [`SlotWatch::BYTES`] bytes.

use crate::error::Result;
use crate::state::{Reader, Writer};

/// Upper bounds of the buckets (microseconds): `0`, then `1 ms` to `50,000 s` in 1-2-5
/// steps; a last bucket holds what lies above.
pub const BOUNDS: [i64; 25] = {
    let mut b = [0i64; 25];
    let mut i = 1;
    let mut decade = 1_000i64;
    while i < 25 {
        b[i] = decade;
        if i + 1 < 25 {
            b[i + 1] = 2 * decade;
        }
        if i + 2 < 25 {
            b[i + 2] = 5 * decade;
        }
        decade *= 10;
        i += 3;
    }
    b
};

/// Buckets of a histogram (the bounds and one above them).
pub const NB: usize = BOUNDS.len() + 1;

fn bucket(v: i64) -> usize {
    BOUNDS.partition_point(|&b| b < v)
}

/// A count of rows: 32 bits in a key's state, 64 in reports; adds saturate.
pub trait Count: Copy + Default + Eq + std::fmt::Debug {
    /// `self + o`, saturating.
    fn plus(self, o: Self) -> Self;
    /// The count as 64 bits.
    fn get(self) -> u64;
    /// Written to a snapshot or report.
    fn write(self, w: &mut Writer);
    /// Read back.
    fn read(r: &mut Reader<'_>) -> Result<Self>;
}

impl Count for u32 {
    fn plus(self, o: Self) -> Self {
        self.saturating_add(o)
    }
    fn get(self) -> u64 {
        u64::from(self)
    }
    fn write(self, w: &mut Writer) {
        w.u32(self);
    }
    fn read(r: &mut Reader<'_>) -> Result<Self> {
        r.u32()
    }
}

impl Count for u64 {
    fn plus(self, o: Self) -> Self {
        self.saturating_add(o)
    }
    fn get(self) -> u64 {
        self
    }
    fn write(self, w: &mut Writer) {
        w.u64(self);
    }
    fn read(r: &mut Reader<'_>) -> Result<Self> {
        r.u64()
    }
}

/// The lateness of rows: of one key or source partition, or of all of them (summed).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tally<C> {
    /// Rows by how far behind they arrived (buckets of [`BOUNDS`]).
    pub behind: [C; NB],
    /// Late rows by how far behind the watermark that judged them.
    pub late_by: [C; NB],
    /// The furthest behind a row arrived.
    pub max_behind: i64,
    /// The furthest behind its watermark a late row was.
    pub max_late_by: i64,
    /// Rows Spark's global watermark would have dropped.
    pub spark_dropped: C,
    /// Of those, rows tidemark kept.
    pub spark_kept: C,
}

/// A report's lateness of a key, a source partition or the stream.
pub type LatenessEntry = Tally<u64>;

/// One key's lateness as state keeps it (`SlotWatch::BYTES` per key).
pub(crate) type SlotWatch = Tally<u32>;

impl SlotWatch {
    /// Bytes of state per key.
    pub(crate) const BYTES: usize = std::mem::size_of::<SlotWatch>();
}

impl<C: Count> Tally<C> {
    /// Rows counted.
    pub fn rows(&self) -> u64 {
        self.behind.iter().map(|c| c.get()).sum()
    }

    /// Late rows.
    pub fn late_rows(&self) -> u64 {
        self.late_by.iter().map(|c| c.get()).sum()
    }

    /// The `q`-th quantile (0 < q <= 1) of how far behind rows arrived: the upper bound
    /// of the bucket holding it (the largest seen, in the last bucket or when smaller);
    /// `None` without rows.
    pub fn behind_quantile(&self, q: f64) -> Option<i64> {
        quantile(&self.behind, self.max_behind, q)
    }

    /// The `q`-th quantile of how far behind its watermark a late row was.
    pub fn late_by_quantile(&self, q: f64) -> Option<i64> {
        quantile(&self.late_by, self.max_late_by, q)
    }

    /// Adds another tally's counts (another core's or state partition's, or the same
    /// key's from another snapshot).
    pub fn add(&mut self, o: &Tally<C>) {
        let add = |a: &mut [C; NB], b: &[C; NB]| {
            a.iter_mut().zip(b).for_each(|(x, y)| *x = x.plus(*y));
        };
        add(&mut self.behind, &o.behind);
        add(&mut self.late_by, &o.late_by);
        self.max_behind = self.max_behind.max(o.max_behind);
        self.max_late_by = self.max_late_by.max(o.max_late_by);
        self.spark_dropped = self.spark_dropped.plus(o.spark_dropped);
        self.spark_kept = self.spark_kept.plus(o.spark_kept);
    }

    /// Counts one row: how far behind it arrived, how late it was (`None`: on time),
    /// whether Spark's watermark would drop it.
    fn count(&mut self, behind: i64, late_by: Option<i64>, spark_drops: bool, one: C) {
        let b = behind.max(0);
        self.behind[bucket(b)] = self.behind[bucket(b)].plus(one);
        self.max_behind = self.max_behind.max(b);
        if let Some(l) = late_by {
            let l = l.max(0);
            self.late_by[bucket(l)] = self.late_by[bucket(l)].plus(one);
            self.max_late_by = self.max_late_by.max(l);
        }
        if spark_drops {
            self.spark_dropped = self.spark_dropped.plus(one);
            if late_by.is_none() {
                self.spark_kept = self.spark_kept.plus(one);
            }
        }
    }

    /// The counts as 64 bits (a report's).
    fn widen(&self) -> LatenessEntry {
        Tally {
            behind: self.behind.map(Count::get),
            late_by: self.late_by.map(Count::get),
            max_behind: self.max_behind,
            max_late_by: self.max_late_by,
            spark_dropped: self.spark_dropped.get(),
            spark_kept: self.spark_kept.get(),
        }
    }

    /// How a key ranks among the top keys: the furthest behind at the 99th percentile,
    /// then the most late rows, then the most rows Spark would have dropped.
    fn rank(&self) -> (i64, u64, u64) {
        (
            self.behind_quantile(0.99).unwrap_or(0),
            self.late_rows(),
            self.spark_kept.get(),
        )
    }

    pub(crate) fn write(&self, w: &mut Writer) {
        self.behind
            .iter()
            .chain(&self.late_by)
            .for_each(|v| v.write(w));
        w.i64(self.max_behind);
        w.i64(self.max_late_by);
        self.spark_dropped.write(w);
        self.spark_kept.write(w);
    }

    pub(crate) fn read(r: &mut Reader<'_>) -> Result<Self> {
        let mut t = Self::default();
        for v in t.behind.iter_mut().chain(t.late_by.iter_mut()) {
            *v = C::read(r)?;
        }
        t.max_behind = r.i64()?;
        t.max_late_by = r.i64()?;
        t.spark_dropped = C::read(r)?;
        t.spark_kept = C::read(r)?;
        Ok(t)
    }
}

fn quantile<C: Count>(h: &[C; NB], max: i64, q: f64) -> Option<i64> {
    let total: u64 = h.iter().map(|c| c.get()).sum();
    if total == 0 {
        return None;
    }
    let rank = ((total as f64 * q).ceil() as u64).clamp(1, total);
    let mut seen = 0;
    for (b, c) in h.iter().enumerate() {
        seen += c.get();
        if seen >= rank {
            return Some(BOUNDS.get(b).map_or(max, |&bound| bound.min(max)));
        }
    }
    Some(max)
}

/// One row as the watch counts it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RowSeen {
    /// Behind its key's largest event time.
    pub(crate) behind_key: i64,
    /// Behind the stream's largest event time.
    pub(crate) behind_stream: i64,
    /// Late by this much (`None`: on time).
    pub(crate) late_by: Option<i64>,
    /// Spark's global watermark would drop it.
    pub(crate) spark_drops: bool,
}

/// What a call's rows are measured against, fixed as it begins.
#[derive(Clone, Copy, Debug)]
pub(crate) struct WatchCall {
    /// The stream's largest event time as the call began (`i64::MIN`: none).
    pub(crate) stream_time: i64,
    /// Rows before this are dropped under Spark's rule (`i64::MIN`: none).
    pub(crate) spark_before: i64,
}

/// The report's state: per key slot and per source partition (see the module docs).
#[derive(Clone, Debug, Default)]
pub(crate) struct Watch {
    slots: Vec<SlotWatch>,
    parts: Vec<LatenessEntry>,
    spark_delay: Option<i64>,
    /// Spark's global watermark as the previous call began, and as this one began.
    spark_prev: i64,
    spark_start: i64,
}

impl Watch {
    pub(crate) fn new(spark_delay: Option<i64>) -> Self {
        Self {
            spark_delay,
            spark_prev: i64::MIN,
            spark_start: i64::MIN,
            ..Default::default()
        }
    }

    /// A call begins with the stream at `stream_time`: the watermark Spark would judge
    /// its rows by is the one the previous call began with.
    pub(crate) fn begin(&mut self, stream_time: i64) -> i64 {
        self.spark_start = match (self.spark_delay, stream_time) {
            (Some(d), t) if t != i64::MIN => t.saturating_sub(d),
            _ => i64::MIN,
        };
        if self.spark_delay.is_some() {
            self.spark_prev
        } else {
            i64::MIN
        }
    }

    /// The call's rows are in.
    pub(crate) fn end(&mut self) {
        self.spark_prev = self.spark_prev.max(self.spark_start);
    }

    /// Counts one row of the key in `slot` (from source partition `part`, if known).
    pub(crate) fn count(&mut self, slot: u32, part: Option<usize>, row: RowSeen) {
        let s = slot as usize;
        if self.slots.len() <= s {
            self.slots.resize_with(s + 1, SlotWatch::default);
        }
        self.slots[s].count(row.behind_key, row.late_by, row.spark_drops, 1);
        if let Some(p) = part {
            if self.parts.len() <= p {
                self.parts.resize_with(p + 1, LatenessEntry::default);
            }
            self.parts[p].count(row.behind_stream, row.late_by, row.spark_drops, 1);
        }
    }

    /// Forgets the key in `slot` (dropped: the slot goes to another key).
    pub(crate) fn reset(&mut self, slot: u32) {
        if let Some(s) = self.slots.get_mut(slot as usize) {
            *s = SlotWatch::default();
        }
    }

    /// The key in `slot`'s record (for snapshots).
    pub(crate) fn slot(&self, slot: u32) -> SlotWatch {
        self.slots.get(slot as usize).cloned().unwrap_or_default()
    }

    /// Restores the key in `slot`'s record.
    pub(crate) fn set_slot(&mut self, slot: u32, s: SlotWatch) {
        let i = slot as usize;
        if self.slots.len() <= i {
            self.slots.resize_with(i + 1, SlotWatch::default);
        }
        self.slots[i] = s;
    }

    /// Bytes of the per-key records.
    pub(crate) fn bytes(&self) -> usize {
        self.slots.len() * SlotWatch::BYTES
    }

    /// Writes what is not per key (after the keys, in a snapshot).
    pub(crate) fn write_tail(&self, w: &mut Writer) {
        write_tail(w, &self.parts, self.spark_prev);
    }

    /// Reads what [`Self::write_tail`] wrote.
    pub(crate) fn read_tail(&mut self, r: &mut Reader<'_>) -> Result<()> {
        (self.parts, self.spark_prev) = read_tail(r)?;
        Ok(())
    }

    /// The summary of the keys in `live` slots (`key_of`: a slot's encoded key),
    /// keeping the `top`.
    pub(crate) fn summary<K: AsRef<[u8]>>(
        &self,
        live: impl Iterator<Item = u32>,
        key_of: impl Fn(u32) -> K,
        top: usize,
    ) -> LatenessSummary {
        let mut s = LatenessSummary {
            partitions: self
                .parts
                .iter()
                .enumerate()
                .filter(|(_, e)| e.rows() > 0)
                .map(|(p, e)| (p as u32, e.clone()))
                .collect(),
            ..Default::default()
        };
        let mut ranked = Vec::new();
        for slot in live {
            let Some(w) = self.slots.get(slot as usize).filter(|w| w.rows() > 0) else {
                continue;
            };
            let e = w.widen();
            s.total.add(&e);
            ranked.push((e.rank(), slot));
        }
        ranked.sort_by(|a, b| {
            b.0.cmp(&a.0)
                .then_with(|| key_of(a.1).as_ref().cmp(key_of(b.1).as_ref()))
        });
        s.keys = ranked
            .into_iter()
            .take(top)
            .map(|(_, slot)| {
                (
                    key_of(slot).as_ref().to_vec(),
                    self.slots[slot as usize].widen(),
                )
            })
            .collect();
        s
    }
}

/// The tail of a snapshot's report state: the source partitions' entries and
/// Spark's watermark as the previous call began.
pub(crate) fn write_tail(w: &mut Writer, parts: &[LatenessEntry], spark_prev: i64) {
    w.len(parts.len());
    parts.iter().for_each(|e| e.write(w));
    w.i64(spark_prev);
}

/// Reads [`write_tail`]'s tail.
pub(crate) fn read_tail(r: &mut Reader<'_>) -> Result<(Vec<LatenessEntry>, i64)> {
    let n = r.len(8 * (2 * NB + 4))?;
    let parts = (0..n)
        .map(|_| LatenessEntry::read(r))
        .collect::<Result<_>>()?;
    Ok((parts, r.i64()?))
}

/// A report of lateness: the total over keys, the `top` keys (encoded) and every
/// source partition.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LatenessSummary {
    /// Over every key.
    pub total: LatenessEntry,
    /// The keys furthest behind (encoded keys), furthest first.
    pub keys: Vec<(Vec<u8>, LatenessEntry)>,
    /// Per source partition (partition scope), by partition.
    pub partitions: Vec<(u32, LatenessEntry)>,
}

impl LatenessSummary {
    fn keep_top(&mut self, top: usize) {
        self.keys
            .sort_by(|a, b| b.1.rank().cmp(&a.1.rank()).then_with(|| a.0.cmp(&b.0)));
        self.keys.truncate(top);
    }

    /// Adds another operator's summary (keys live in one operator each; partitions
    /// and totals add), keeping the `top` keys.
    pub fn merge(&mut self, o: &LatenessSummary, top: usize) {
        self.total.add(&o.total);
        for (k, e) in &o.keys {
            // A key spread over cores (hot keys) is in several summaries.
            match self.keys.iter_mut().find(|x| x.0 == *k) {
                Some(x) => x.1.add(e),
                None => self.keys.push((k.clone(), e.clone())),
            }
        }
        self.keep_top(top);
        for (p, e) in &o.partitions {
            match self.partitions.binary_search_by_key(p, |x| x.0) {
                Ok(i) => self.partitions[i].1.add(e),
                Err(i) => self.partitions.insert(i, (*p, e.clone())),
            }
        }
    }

    /// Writes the summary (a state partition's progress report).
    pub fn write(&self, w: &mut Writer) {
        self.total.write(w);
        w.len(self.keys.len());
        for (k, e) in &self.keys {
            w.bytes(k);
            e.write(w);
        }
        w.len(self.partitions.len());
        for (p, e) in &self.partitions {
            w.u32(*p);
            e.write(w);
        }
    }

    /// Reads what [`Self::write`] wrote.
    pub fn read(r: &mut Reader<'_>) -> Result<Self> {
        let total = LatenessEntry::read(r)?;
        let n = r.len(8)?;
        let keys = (0..n)
            .map(|_| Ok((r.bytes()?.to_vec(), LatenessEntry::read(r)?)))
            .collect::<Result<_>>()?;
        let n = r.len(8)?;
        let partitions = (0..n)
            .map(|_| Ok((r.u32()?, LatenessEntry::read(r)?)))
            .collect::<Result<_>>()?;
        Ok(Self {
            total,
            keys,
            partitions,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_run_from_zero_to_fifty_thousand_seconds_in_one_two_five_steps() {
        assert_eq!(&BOUNDS[..5], &[0, 1_000, 2_000, 5_000, 10_000]);
        assert_eq!(BOUNDS[24], 50_000_000_000);
        assert_eq!(bucket(0), 0);
        assert_eq!(bucket(1), 1);
        assert_eq!(bucket(1_000), 1);
        assert_eq!(bucket(1_001), 2);
        assert_eq!(bucket(i64::MAX), NB - 1);
    }

    #[test]
    fn quantiles_are_the_bounds_of_their_buckets_and_never_above_the_largest_seen() {
        let mut w = Watch::new(None);
        let row = |b| RowSeen {
            behind_key: b,
            behind_stream: 0,
            late_by: None,
            spark_drops: false,
        };
        for b in [0, 0, 0, 1_500, 3_000_000] {
            w.count(0, None, row(b));
        }
        let s = w.summary([0u32].into_iter(), |_| b"k", 10);
        let e = &s.keys[0].1;
        assert_eq!(e.rows(), 5);
        assert_eq!(e.behind_quantile(0.5), Some(0));
        assert_eq!(e.behind_quantile(0.8), Some(2_000));
        assert_eq!(e.behind_quantile(1.0), Some(3_000_000));
        assert_eq!(e.late_by_quantile(0.5), None);
    }

    #[test]
    fn summaries_merge_by_adding_and_keep_the_keys_furthest_behind() {
        let mut a = Watch::new(Some(10));
        let mut b = Watch::new(Some(10));
        for (which, slot, behind) in [(0, 0, 5_000), (0, 1, 10), (1, 0, 60_000_000)] {
            let w = if which == 0 { &mut a } else { &mut b };
            w.count(
                slot,
                Some(0),
                RowSeen {
                    behind_key: behind,
                    behind_stream: behind,
                    late_by: Some(1),
                    spark_drops: true,
                },
            );
        }
        let keys: [&[u8]; 3] = [b"a", b"b", b"c"];
        let mut s = a.summary([0, 1].into_iter(), |slot| keys[slot as usize], 2);
        s.merge(&b.summary([0].into_iter(), |_| keys[2], 2), 2);
        let got: Vec<&[u8]> = s.keys.iter().map(|k| k.0.as_slice()).collect();
        assert_eq!(got, vec![keys[2], keys[0]]);
        assert_eq!(s.total.rows(), 3);
        assert_eq!(s.total.late_rows(), 3);
        assert_eq!(s.total.spark_dropped, 3);
        assert_eq!(s.total.spark_kept, 0);
        assert_eq!(s.partitions.len(), 1);
        assert_eq!(s.partitions[0].1.rows(), 3);
        let mut wr = Writer::new();
        s.write(&mut wr);
        let bytes = wr.finish();
        let back = LatenessSummary::read(&mut Reader::new(&bytes)).unwrap();
        assert_eq!(back, s);
    }
}
