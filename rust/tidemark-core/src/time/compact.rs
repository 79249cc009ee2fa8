//! Memory-bounded keyed watermarks for millions of keys.
//!
//! [`CompactKeyedWatermarkTracker`] keeps exact state (a [`KeyedWatermarkTracker`])
//! for the `exact_keys` most recently active keys. A key pushed out of the exact set
//! leaves its watermark in a min-sketch: `depth` rows of `width` buckets, each bucket
//! holding the **minimum** watermark of the keys evicted into it. A key outside the
//! exact set is estimated as the maximum over its `depth` buckets. A HyperLogLog
//! counts distinct keys. Memory is `exact_keys` × (per-key state + key bytes) +
//! `width × depth × 8` bytes + 4 KiB, whatever the number of keys in the stream.
//!
//! # Error, and what it means for lateness
//!
//! * A key that was evicted gets an estimate **at or below** the watermark it had when
//!   it was evicted (every one of its buckets holds the minimum over a set that
//!   includes it). Its events are never wrongly called late; some events the exact
//!   tracker would call late are accepted instead (buckets shared with slower keys
//!   pull the estimate down).
//! * A key never seen before has no watermark in the exact tracker. Here, if every
//!   one of its buckets was filled by other keys, it gets their (lower-bound) value:
//!   an event of a new key older than that value is called late although the exact
//!   tracker would accept it. The chance is about `fill^depth`, where `fill` is the
//!   share of occupied buckets; the benchmark `benches/keyed_accuracy.py` measures both
//!   error directions against the exact tracker.
//! * When a key comes back it is tracked exactly again from its own events; the
//!   estimate is not copied into its state (for a key never seen before it may be a
//!   collision, and copying it would turn a one-off error into a lasting one). Call
//!   `is_late` before `update` (as the pipeline does) to catch a returning key's late
//!   events.
//!
//! The global watermark is the exact part's: keys outside the exact set are treated
//! as idle (they are the least recently active ones).

use crate::clock::ClockRef;
use crate::error::{Result, TidemarkError};
use crate::key::{hash_key, AsKey, KeyColumns, KeyRows, KeyTable};
use crate::state::{self, Reader, SnapshotKind, Writer};
use crate::time::keyed::same_rows;
use crate::time::{Eviction, KeyEvictionPolicy, KeyedTicks, KeyedWatermarkTracker, Watermark};
use arrow_array::{Array, BooleanArray, Int64Array};
use arrow_buffer::BooleanBufferBuilder;

/// Configuration of a [`CompactKeyedWatermarkTracker`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompactKeyedConfig {
    /// Keys tracked exactly.
    pub exact_keys: usize,
    /// Buckets per sketch row.
    pub sketch_width: usize,
    /// Sketch rows.
    pub sketch_depth: usize,
    /// Bounded delay in event-time ticks.
    pub bounded_delay: i64,
    /// Idle timeout for exact keys in clock ticks.
    pub idle_timeout: Option<i64>,
}

impl Default for CompactKeyedConfig {
    fn default() -> Self {
        Self {
            exact_keys: 10_000,
            sketch_width: 1 << 16,
            sketch_depth: 4,
            bounded_delay: 5_000,
            idle_timeout: None,
        }
    }
}

impl CompactKeyedConfig {
    /// Checks the sizes: at least one exact key and one bucket per row, 1 to 8 rows.
    pub fn validate(&self) -> Result<()> {
        for (name, value) in [
            ("exact_keys", self.exact_keys),
            ("sketch_width", self.sketch_width),
        ] {
            if value < 1 {
                return Err(TidemarkError::config(
                    name,
                    format!("{name} must be >= 1, got {value}"),
                ));
            }
        }
        if !(1..=8).contains(&self.sketch_depth) {
            return Err(TidemarkError::config(
                "sketch_depth",
                format!(
                    "sketch_depth must be between 1 and 8, got {}",
                    self.sketch_depth
                ),
            ));
        }
        Ok(())
    }
}

/// Metrics of a [`CompactKeyedWatermarkTracker`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CompactKeyedMetrics {
    /// Keys in the exact part.
    pub exact_keys: usize,
    /// Keys moved from the exact part to the sketch.
    pub evicted_keys: u64,
    /// Distinct keys seen (HyperLogLog estimate, about 1.6% standard error).
    pub estimated_distinct_keys: f64,
    /// Share of sketch buckets holding a value.
    pub sketch_fill: f64,
}

const HLL_P: u32 = 12;

/// Per-key watermarks with memory bounded by configuration (see the module docs).
///
/// # Examples
///
/// ```
/// use tidemark_core::time::{CompactKeyedConfig, CompactKeyedWatermarkTracker};
/// let cfg = CompactKeyedConfig { exact_keys: 2, bounded_delay: 10, ..Default::default() };
/// let mut t = CompactKeyedWatermarkTracker::new(cfg).unwrap();
/// t.update("a", 100).unwrap();
/// t.update("b", 50).unwrap();
/// t.update("c", 70).unwrap();            // evicts "a" (least recently active) into the sketch
/// assert_eq!(t.watermark_for_key("a"), Some(90)); // estimated, at or below the truth
/// assert!(t.is_late("a", 80));
/// ```
#[derive(Debug, Clone)]
pub struct CompactKeyedWatermarkTracker {
    cfg: CompactKeyedConfig,
    exact: KeyedWatermarkTracker,
    sketch: Vec<i64>,
    filled: usize,
    hll: Vec<u8>,
    scratch: Vec<u8>,
    /// The exact part's eviction log, drained (kept for its allocation).
    evicted: Vec<Eviction>,
}

const EMPTY: i64 = i64::MAX;

fn corrupted(why: &str) -> crate::TidemarkError {
    crate::TidemarkError::StateCorrupted(format!("compact keyed tracker state: {why}"))
}

impl CompactKeyedWatermarkTracker {
    /// A tracker on the system clock (an error if `cfg` is out of range, see
    /// [`CompactKeyedConfig::validate`]).
    pub fn new(cfg: CompactKeyedConfig) -> Result<Self> {
        Self::with_clock(cfg, crate::clock::system_clock())
    }

    /// A tracker reading `clock` for idleness of exact keys.
    pub fn with_clock(cfg: CompactKeyedConfig, clock: ClockRef) -> Result<Self> {
        cfg.validate()?;
        let exact = KeyedWatermarkTracker::with_ticks(
            KeyedTicks {
                bounded_delay: cfg.bounded_delay,
                idle_timeout: cfg.idle_timeout,
                max_keys: Some(cfg.exact_keys),
                eviction_policy: KeyEvictionPolicy::LeastRecentlyActive,
            },
            clock,
        )
        .with_eviction_log();
        Ok(Self {
            sketch: vec![EMPTY; cfg.sketch_width * cfg.sketch_depth],
            filled: 0,
            hll: vec![0; 1 << HLL_P],
            scratch: Vec::new(),
            evicted: Vec::new(),
            exact,
            cfg,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &CompactKeyedConfig {
        &self.cfg
    }

    #[inline]
    fn bucket(&self, hash: u64, row: usize) -> usize {
        // Independent-enough row hashes from one 64-bit hash (Kirsch–Mitzenmacher).
        let h1 = hash as u32 as u64;
        let h2 = (hash >> 32) | 1;
        let h = h1.wrapping_add((row as u64).wrapping_mul(h2));
        row * self.cfg.sketch_width + (h % self.cfg.sketch_width as u64) as usize
    }

    fn sketch_insert(&mut self, key: &[u8], wm: i64) {
        let hash = hash_key(key);
        for row in 0..self.cfg.sketch_depth {
            let b = self.bucket(hash, row);
            let v = &mut self.sketch[b];
            if *v == EMPTY {
                self.filled += 1;
            }
            *v = (*v).min(wm);
        }
    }

    /// The sketch's lower-bound estimate for a key outside the exact set.
    fn sketch_estimate(&self, key: &[u8]) -> Option<i64> {
        let hash = hash_key(key);
        let mut best = i64::MIN;
        for row in 0..self.cfg.sketch_depth {
            let v = self.sketch[self.bucket(hash, row)];
            if v == EMPTY {
                return None;
            }
            best = best.max(v);
        }
        (best != i64::MIN).then_some(best)
    }

    /// Counts `key` among the distinct keys. Adding a key again changes nothing (a
    /// register keeps its maximum), so no lookup asks whether the key is new.
    fn hll_add(&mut self, key: &[u8]) {
        let h = hash_key(key).rotate_left(17) ^ 0x9E37_79B9_7F4A_7C15;
        let idx = (h >> (64 - HLL_P)) as usize;
        let rank = ((h << HLL_P) | (1 << (HLL_P - 1))).leading_zeros() as u8 + 1;
        if self.hll[idx] < rank {
            self.hll[idx] = rank;
        }
    }

    fn hll_estimate(&self) -> f64 {
        let m = self.hll.len() as f64;
        let alpha = 0.7213 / (1.0 + 1.079 / m);
        let sum: f64 = self.hll.iter().map(|&r| 2f64.powi(-(r as i32))).sum();
        let raw = alpha * m * m / sum;
        let zeros = self.hll.iter().filter(|&&r| r == 0).count();
        if raw <= 2.5 * m && zeros > 0 {
            m * (m / zeros as f64).ln()
        } else {
            raw
        }
    }

    fn drain(&mut self) {
        if !self.exact.has_evictions() {
            return;
        }
        let mut log = std::mem::take(&mut self.evicted);
        self.exact.swap_evictions(&mut log);
        for e in &log {
            if e.watermark != i64::MIN {
                self.sketch_insert(&e.key, e.watermark);
            }
        }
        self.evicted = log;
    }

    /// Records an event of `key`. Returns the global watermark if it rose to a new high.
    pub fn update<K: AsKey>(&mut self, key: K, event_time: i64) -> Result<Option<Watermark>> {
        let mut buf = std::mem::take(&mut self.scratch);
        buf.clear();
        key.encode_key(&mut buf);
        let r = self.update_encoded(&buf, event_time);
        self.scratch = buf;
        r
    }

    /// [`Self::update`] with an encoded key.
    pub fn update_encoded(&mut self, key: &[u8], event_time: i64) -> Result<Option<Watermark>> {
        self.hll_add(key);
        let r = self.exact.update_encoded(key, event_time);
        self.drain();
        r
    }

    /// Batch update from Arrow key columns (rows with a null time are skipped).
    pub fn update_columns(
        &mut self,
        keys: &KeyColumns,
        times: &Int64Array,
    ) -> Result<Option<Watermark>> {
        same_rows(keys, times)?;
        // Fold per key (its maximum, and the row of its last event), then apply each
        // key once.
        let mut local = KeyTable::new();
        let mut maxima: Vec<i64> = Vec::new();
        let mut last_row: Vec<u32> = Vec::new();
        let mut err = None;
        keys.for_each_key(|i, key| {
            if times.is_null(i) || err.is_some() {
                return;
            }
            match local.get_or_insert(key) {
                Ok((_, true)) => {
                    maxima.push(times.value(i));
                    last_row.push(i as u32);
                }
                Ok((slot, false)) => {
                    let m = &mut maxima[slot as usize];
                    *m = (*m).max(times.value(i));
                    last_row[slot as usize] = i as u32;
                }
                Err(e) => err = Some(e),
            }
        });
        if let Some(e) = err {
            return Err(e);
        }
        // Apply key by key: a batch may hold more keys than the exact part, and each
        // key's event time must land before the key can be evicted into the sketch.
        // Keys are applied in the order of their last events, so the exact part ends
        // the batch as row-by-row updates would leave it: the keys active last (the
        // busiest, in a skewed stream) stay exact, rather than being pushed out by
        // the batch's rare keys that first appeared after them.
        let mut by_row = vec![u32::MAX; keys.len()];
        for (s, &r) in last_row.iter().enumerate() {
            by_row[r as usize] = s as u32;
        }
        let order = by_row.into_iter().filter(|&s| s != u32::MAX);
        self.update_batch_encoded(order.map(|s| (local.key(s), maxima[s as usize])))
    }

    /// Applies a batch of `(encoded key, event time)` one key at a time (a key's time
    /// lands before it can be evicted into the sketch), then recomputes the global
    /// watermark once: like the exact tracker's batches, the result is the global
    /// watermark the batch leaves if it rose to a new high, not a value it passed
    /// through (a key that rose first and a lagging key after it in the same batch
    /// do not report the first key's watermark). On an error the events before it
    /// stay applied and the global is still recomputed.
    pub fn update_batch_encoded<K: AsRef<[u8]>>(
        &mut self,
        events: impl IntoIterator<Item = (K, i64)>,
    ) -> Result<Option<Watermark>> {
        let mut result = Ok(());
        for (key, t) in events {
            let key = key.as_ref();
            self.hll_add(key);
            result = self.exact.apply_encoded(key, t);
            self.drain();
            if result.is_err() {
                break;
            }
        }
        let advanced = self.exact.recalculate_global();
        result.map(|()| advanced)
    }

    /// The watermark of `key`: exact if tracked exactly, else the sketch estimate.
    pub fn watermark_for_key<K: AsKey + ?Sized>(&self, key: &K) -> Option<i64> {
        let mut buf = Vec::new();
        key.encode_key(&mut buf);
        self.watermark_for_encoded(&buf)
    }

    fn watermark_for_encoded(&self, key: &[u8]) -> Option<i64> {
        if self.exact.contains_encoded(key) {
            self.exact.watermark_for_encoded(key)
        } else {
            self.sketch_estimate(key)
        }
    }

    /// `true` if `key` is tracked exactly.
    pub fn is_exact<K: AsKey + ?Sized>(&self, key: &K) -> bool {
        let mut buf = Vec::new();
        key.encode_key(&mut buf);
        self.exact.contains_encoded(&buf)
    }

    /// Whether an event is late for its key (exact or estimated watermark).
    pub fn is_late<K: AsKey>(&self, key: K, event_time: i64) -> bool {
        self.watermark_for_key(&key).is_some_and(|w| event_time < w)
    }

    /// Vectorised [`Self::is_late`]; null where the time is null.
    pub fn is_late_columns(&self, keys: &KeyColumns, times: &Int64Array) -> Result<BooleanArray> {
        same_rows(keys, times)?;
        let mut late = BooleanBufferBuilder::new(keys.len());
        keys.for_each_key(|i, key| {
            late.append(
                times.is_valid(i)
                    && self
                        .watermark_for_encoded(key)
                        .is_some_and(|w| times.value(i) < w),
            )
        });
        Ok(BooleanArray::new(late.finish(), times.nulls().cloned()))
    }

    /// The global watermark of the exact part (see [`KeyedWatermarkTracker`]).
    pub fn global_watermark(&self) -> Option<Watermark> {
        self.exact.global_watermark()
    }

    /// Marks exact keys silent for longer than the idle timeout as idle.
    pub fn check_idle_keys(&mut self) -> Option<Watermark> {
        self.exact.check_idle_keys()
    }

    /// Metrics.
    pub fn metrics(&self) -> CompactKeyedMetrics {
        CompactKeyedMetrics {
            exact_keys: self.exact.total_key_count(),
            evicted_keys: self.exact.metrics().evicted_keys,
            estimated_distinct_keys: self.hll_estimate(),
            sketch_fill: self.filled as f64 / self.sketch.len() as f64,
        }
    }

    /// Heap bytes held, excluding the exact keys' own bytes.
    pub fn heap_bytes(&self) -> usize {
        self.exact.heap_bytes() + self.sketch.capacity() * 8 + self.hll.capacity()
    }

    /// The tracker's whole state as bytes (versioned, checksummed): its
    /// configuration, the exact keys (as [`KeyedWatermarkTracker::snapshot`] holds
    /// them), the sketch and the distinct-key counter. [`Self::restore`] reads it back
    /// on any clock; its size is bounded by the configuration, as the memory is.
    pub fn snapshot(&self) -> Vec<u8> {
        let c = &self.cfg;
        let mut w = Writer::sealed(
            256 + self.exact.total_key_count() * 40
                + self.exact.key_bytes()
                + self.sketch.len() * 8
                + self.hll.len(),
        );
        for v in [c.exact_keys, c.sketch_width, c.sketch_depth] {
            w.u64(v as u64);
        }
        w.i64(c.bounded_delay);
        w.i64(c.idle_timeout.unwrap_or(-1));
        self.exact.write_state(&mut w);
        for &v in &self.sketch {
            w.i64(v);
        }
        w.bytes(&self.hll);
        w.seal(SnapshotKind::CompactKeyed, 0)
    }

    /// A tracker restored from [`Self::snapshot`] bytes, reading `clock` from now on.
    /// Fails with [`crate::TidemarkError::StateCorrupted`] if the bytes are damaged,
    /// of another format version or of another kind of snapshot.
    pub fn restore(bytes: &[u8], clock: ClockRef) -> Result<Self> {
        let mut r = Reader::new(state::open(bytes, SnapshotKind::CompactKeyed, None)?);
        let mut sizes = [0usize; 3];
        for v in &mut sizes {
            *v = usize::try_from(r.u64()?).unwrap_or(usize::MAX);
        }
        let [exact_keys, sketch_width, sketch_depth] = sizes;
        let (bounded_delay, idle_timeout) = (r.i64()?, r.i64()?);
        // The sketch's size comes from the configuration: it must fit in the bytes
        // left before anything is allocated for it.
        if sketch_width
            .checked_mul(sketch_depth)
            .and_then(|n| n.checked_mul(8))
            .is_none_or(|n| n > r.remaining())
        {
            return Err(corrupted("its sketch does not match its configuration"));
        }
        let cfg = CompactKeyedConfig {
            exact_keys,
            sketch_width,
            sketch_depth,
            bounded_delay,
            idle_timeout: (idle_timeout >= 0).then_some(idle_timeout),
        };
        if cfg.validate().is_err() {
            return Err(corrupted("its sketch does not match its configuration"));
        }
        let mut t = Self::with_clock(cfg, clock)?;
        t.exact.read_bounded_state(&mut r)?;
        for v in &mut t.sketch {
            *v = r.i64()?;
        }
        t.filled = t.sketch.iter().filter(|&&v| v != EMPTY).count();
        let hll = r.bytes()?;
        if hll.len() != t.hll.len() {
            return Err(corrupted("its distinct-key counter has the wrong size"));
        }
        t.hll.copy_from_slice(hll);
        r.finish()?;
        Ok(t)
    }

    /// Upper bound of [`Self::heap_bytes`] implied by the configuration (per-key
    /// layout plus the sketch), independent of the stream's key count.
    pub fn configured_bytes(&self) -> usize {
        self.cfg.exact_keys * KeyedWatermarkTracker::bytes_per_key()
            + self.cfg.sketch_width * self.cfg.sketch_depth * 8
            + (1 << HLL_P)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tracker(exact: usize, width: usize) -> CompactKeyedWatermarkTracker {
        tracker_on(exact, width, crate::clock::system_clock())
    }

    fn tracker_on(exact: usize, width: usize, clock: ClockRef) -> CompactKeyedWatermarkTracker {
        let cfg = CompactKeyedConfig {
            exact_keys: exact,
            sketch_width: width,
            sketch_depth: 4,
            bounded_delay: 10,
            idle_timeout: None,
        };
        CompactKeyedWatermarkTracker::with_clock(cfg, clock).unwrap()
    }

    #[test]
    fn evicted_keys_get_a_lower_bound() {
        let mut t = tracker(100, 1 << 12);
        let mut truth = std::collections::HashMap::new();
        for k in 0..10_000i64 {
            let ts = (k * 7919) % 100_000;
            t.update(k, ts).unwrap();
            truth.insert(k, ts - 10);
        }
        let m = t.metrics();
        assert_eq!(m.exact_keys, 100);
        assert_eq!(m.evicted_keys, 9_900);
        for (k, wm) in &truth {
            let est = t
                .watermark_for_key(k)
                .expect("every evicted key has buckets");
            assert!(
                est <= *wm,
                "key {k}: estimate {est} above its watermark {wm}"
            );
        }
        assert!(
            (m.estimated_distinct_keys - 10_000.0).abs() < 600.0,
            "{}",
            m.estimated_distinct_keys
        );
    }

    #[test]
    fn a_batch_reports_the_global_watermark_it_leaves() {
        // "a" rises first, lagging "b" joins later in the same batch: the batch
        // reported a's 99_990 (a value it passed through, above the global it left);
        // the exact tracker reports the global after the batch.
        use arrow_array::{ArrayRef, StringArray};
        let keys =
            KeyColumns::single(std::sync::Arc::new(StringArray::from(vec!["a", "b"])) as ArrayRef)
                .unwrap();
        let times = Int64Array::from(vec![100_000, 5]);
        let mut exact = KeyedWatermarkTracker::with_ticks(
            KeyedTicks {
                bounded_delay: 10,
                idle_timeout: None,
                max_keys: None,
                eviction_policy: KeyEvictionPolicy::LeastRecentlyActive,
            },
            crate::clock::system_clock(),
        );
        let want = exact.update_columns(&keys, &times).unwrap();
        assert_eq!(want, Some(Watermark::new(-5)));
        let mut t = tracker(10, 1 << 10);
        assert_eq!(t.update_columns(&keys, &times).unwrap(), want);
        let mut t2 = tracker(10, 1 << 10);
        let enc = |k: &str| {
            let mut v = Vec::new();
            k.encode_key(&mut v);
            v
        };
        let events = [(enc("a"), 100_000), (enc("b"), 5)];
        assert_eq!(t2.update_batch_encoded(events).unwrap(), want);
        // Nothing above the global was reported, so b's rise to 50 is an advance.
        assert_eq!(t.update("b", 60).unwrap(), Some(Watermark::new(50)));
        assert_eq!(t.global_watermark(), Some(Watermark::new(50)));
    }

    #[test]
    fn returning_key_late_event_is_caught() {
        let mut t = tracker(1, 1 << 10);
        t.update("a", 1_000).unwrap();
        t.update("b", 5).unwrap(); // evicts a (wm 990)
        assert!(!t.is_exact("a"));
        assert!(t.is_late("a", 100), "judged against the estimate");
        assert!(!t.is_late("a", 995));
        t.update("a", 995).unwrap();
        assert_eq!(
            t.watermark_for_key("a"),
            Some(985),
            "exact again, from its own events"
        );
    }

    /// A batch leaves the exact part as row-by-row updates would: the keys whose last
    /// events came last stay exact, although they first appeared before the rest.
    #[test]
    fn a_batch_keeps_its_last_active_keys_exact() {
        use arrow_array::{ArrayRef, StringArray};
        // "hot" opens and closes the batch; 5 rare keys come between: 3 exact slots.
        let names = ["hot", "r1", "r2", "r3", "r4", "r5", "hot"];
        let keys =
            KeyColumns::single(std::sync::Arc::new(StringArray::from(names.to_vec())) as ArrayRef)
                .unwrap();
        let times = Int64Array::from((0..names.len() as i64).map(|i| 100 + i).collect::<Vec<_>>());
        let mut batched = tracker(3, 1 << 10);
        batched.update_columns(&keys, &times).unwrap();
        let mut one_by_one = tracker(3, 1 << 10);
        for (k, ts) in names.iter().zip(times.values()) {
            one_by_one.update(*k, *ts).unwrap();
        }
        for k in ["hot", "r1", "r2", "r3", "r4", "r5"] {
            assert_eq!(batched.is_exact(k), one_by_one.is_exact(k), "{k}");
        }
        assert!(batched.is_exact("hot") && batched.is_exact("r5") && !batched.is_exact("r3"));
        assert_eq!(batched.watermark_for_key("hot"), Some(96));
        assert_eq!(batched.metrics().evicted_keys, 3);
    }

    /// Column batches need one event time per key row: a mismatch is refused before
    /// any row is applied (not cut to the shorter length, nor a panic past its end).
    #[test]
    fn column_batches_need_a_time_per_row() {
        let mut t = tracker(10, 1 << 10);
        let kc = KeyColumns::single(std::sync::Arc::new(Int64Array::from(vec![1, 2]))).unwrap();
        let one = Int64Array::from(vec![50]);
        let err = t.update_columns(&kc, &one).unwrap_err().to_string();
        assert!(err.contains("2 keys but 1 event times"), "{err}");
        assert!(t.is_late_columns(&kc, &one).is_err());
        assert_eq!(t.watermark_for_key(&1i64), None);
        let two = Int64Array::from(vec![Some(50), None]);
        t.update_columns(&kc, &two).unwrap();
        assert_eq!(t.watermark_for_key(&1i64), Some(40));
        assert_eq!(
            t.watermark_for_key(&2i64),
            None,
            "a null time skips its row"
        );
        let late = t
            .is_late_columns(&kc, &Int64Array::from(vec![39, 39]))
            .unwrap();
        assert_eq!(late.iter().collect::<Vec<_>>(), [Some(true), Some(false)]);
    }

    /// A restored tracker answers as the original does, for exact and sketched keys,
    /// and goes on from the same state; a snapshot whose configuration cannot match
    /// its sketch is refused before anything is allocated for it.
    #[test]
    fn snapshots_restore_exact_keys_and_the_sketch() {
        // One manual clock for both: on the system clock a millisecond could pass
        // between the two trackers' updates, and their keys' last activity (in the
        // snapshots compared below) would differ.
        let clock: ClockRef = std::sync::Arc::new(crate::clock::ManualClock::new(1_000));
        let mut t = tracker_on(50, 1 << 8, clock.clone());
        for k in 0..2_000i64 {
            t.update(k, (k * 7919) % 10_000).unwrap();
        }
        let bytes = t.snapshot();
        let mut back = CompactKeyedWatermarkTracker::restore(&bytes, clock.clone()).unwrap();
        assert_eq!(back.config(), t.config());
        assert_eq!(back.metrics(), t.metrics());
        for k in 0..2_100i64 {
            assert_eq!(back.watermark_for_key(&k), t.watermark_for_key(&k), "{k}");
            assert_eq!(back.is_exact(&k), t.is_exact(&k), "{k}");
        }
        for k in 5_000..5_100i64 {
            back.update(k, k).unwrap();
            t.update(k, k).unwrap();
        }
        assert_eq!(back.metrics(), t.metrics());
        assert_eq!(back.global_watermark(), t.global_watermark());
        assert_eq!(back.snapshot(), t.snapshot());

        // A sketch width past the bytes there are: refused, not allocated.
        let mut w = Writer::sealed(64);
        for v in [10u64, 1 << 40, 4] {
            w.u64(v);
        }
        w.i64(0);
        w.i64(-1);
        let huge = w.seal(SnapshotKind::CompactKeyed, 0);
        let err = CompactKeyedWatermarkTracker::restore(&huge, clock).unwrap_err();
        assert!(err.to_string().contains("sketch does not match"), "{err}");
    }

    #[test]
    fn memory_is_bounded_by_configuration() {
        let mut t = tracker(1_000, 1 << 12);
        let feed = |t: &mut CompactKeyedWatermarkTracker, from: i64, to: i64| {
            let keys: Vec<i64> = (from..to).collect();
            for chunk in keys.chunks(10_000) {
                let kc = KeyColumns::single(std::sync::Arc::new(Int64Array::from(chunk.to_vec())))
                    .unwrap();
                t.update_columns(&kc, &Int64Array::from(chunk.to_vec()))
                    .unwrap();
            }
        };
        feed(&mut t, 0, 50_000);
        let at_50k = t.heap_bytes();
        feed(&mut t, 50_000, 1_000_000);
        let at_1m = t.heap_bytes();
        assert_eq!(t.metrics().exact_keys, 1_000);
        assert!(
            at_1m <= at_50k + at_50k / 4,
            "memory grew with the key count: {at_50k} -> {at_1m}"
        );
        assert!(
            at_1m < 2 * t.configured_bytes() + (1 << 20),
            "{at_1m} vs {}",
            t.configured_bytes()
        );
    }
}
