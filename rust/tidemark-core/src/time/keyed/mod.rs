//! Per-key watermarks.
//!
//! A global watermark drops the data of every key that runs behind the fastest ones.
//! [`KeyedWatermarkTracker`] keeps one watermark per key,
//! `max_event_time(key) - bounded_delay`, judges lateness against the key's own
//! watermark, and keeps a global watermark for ordering and for closing the windows
//! of idle keys:
//!
//! * global = minimum over **active** keys; idle keys are excluded; if no key is
//!   active, the highest watermark any key has had. It is the "global (for
//!   ordering)" watermark: it moves back only when a key that is behind joins or becomes active
//!   again (for example, a slow tenant arriving after a fast one lowers it);
//!   removing or idling keys never lowers it;
//! * the advances the update calls report are monotonic: `Some(W)` only when `W` is
//!   above every value reported before ([`KeyedWatermarkTracker::emitted_watermark`]);
//! * per-key watermarks are monotonic;
//! * a key is idle when its last activity on the injected clock is more than
//!   `idle_timeout` ago (checked by [`KeyedWatermarkTracker::check_idle_keys`]);
//! * `max_keys` bounds memory, with an eviction policy (least recently active, lowest
//!   watermark, or reject new keys).
//!
//! # Data structure
//!
//! Keys are interned into dense slots ([`KeyTable`]); the state every update touches
//! sits next to the key in the table, the rest in a parallel vector (at most 62 bytes
//! per key, see [`KeyedWatermarkTracker::bytes_per_key`]). The global minimum is a
//! [`NodeMinTree`] whose leaves are the active slots: `global_watermark` is O(1),
//! an update of a key above the minimum usually O(1) (its rise is recorded lazily,
//! without writing the tree), and of the minimum key O(log n) plus one depth-first
//! pass over the paths to the lagging pairs it brings up to date. With `max_keys` a
//! rise is fixed at once: evictions mostly remove the minimum key, and the passes
//! would then cost more than the lazy rises save. An intrusive list orders keys by
//! last activity, so idle detection and least-recently-active eviction touch only the
//! keys they act on; a scan cursor marks the prefix of the list already known to be
//! idle. Lowest-watermark eviction takes the minimum of the active tree and of a lazy
//! heap of idle keys.
//!
//! Past the caches, the list's two neighbour writes are the third memory access an
//! update waits for (after the hash index and the key's entry). A lazily compacted
//! activity queue instead (append on every touch, stale entries dropped when the
//! queue reaches twice the key count; same bytes per key) was built and measured
//! against this list: 5-7 ns slower per update at 1K-10K keys (each compaction reads
//! every entry's key) and no faster at 1M sparse keys (queue vs list: best of 6 runs
//! 209 vs 229 ns, medians 256 vs 249 ns), so the list stays.
//!
//! The activity record (last activity and list links, 16 bytes) is kept apart from
//! the table entry on purpose. Merged into it (48-byte entries, same bytes per key),
//! a single update would fetch the key's state in one access instead of two, but
//! a batch's rows, which touch only the entry, read 48 bytes per key instead of 32.
//! Measured against this layout in alternating runs: 64K-row `update_columns` of 10K keys
//! 1.7-2.4 vs 1.3-1.4 ms (int64) and 3.7 vs 2.1-3.0 ms (strings), Zipf updates over
//! 1M keys 198-219 vs 182-191 ns; uniform updates over 1M sparse keys moved within
//! this machine's noise (243-360 vs 268-332 ns).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Duration;

use arrow_array::Int64Array;

use crate::clock::ClockRef;
use crate::error::{Result, TidemarkError};
use crate::key::{encode_chunked, with_row_key, AsKey, KeyColumns, KeyRows, KeyTable, RowKey};
use crate::time::NodeMinTree;

/// Policy for evicting keys when `max_keys` is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum KeyEvictionPolicy {
    /// Evict the key with the oldest last activity.
    #[default]
    LeastRecentlyActive,
    /// Evict the key with the lowest watermark.
    LowestWatermark,
    /// Reject new keys with [`TidemarkError::MaxKeysReached`].
    RejectNew,
}

crate::names::named!(KeyEvictionPolicy, "eviction", {
    "least_recently_active" | "lru" => KeyEvictionPolicy::LeastRecentlyActive,
    "lowest_watermark" => KeyEvictionPolicy::LowestWatermark,
    "reject_new" => KeyEvictionPolicy::RejectNew,
});

/// Keyed watermark tracker configuration. Durations are milliseconds of
/// clock and event time; see [`KeyedWatermarkConfig::ticks`] for other units.
#[derive(Debug, Clone)]
pub struct KeyedWatermarkConfig {
    /// Maximum out-of-orderness: a key's watermark is its max event time minus this.
    pub bounded_delay: Duration,
    /// A key with no update for longer than this is idle.
    pub idle_timeout: Duration,
    /// Maximum number of keys tracked (`None`: unlimited).
    pub max_keys: Option<usize>,
    /// What happens when `max_keys` is reached.
    pub eviction_policy: KeyEvictionPolicy,
}

impl Default for KeyedWatermarkConfig {
    fn default() -> Self {
        Self {
            bounded_delay: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(60),
            max_keys: None,
            eviction_policy: KeyEvictionPolicy::LeastRecentlyActive,
        }
    }
}

/// The configuration in ticks (any unit; the tracker is unit-agnostic).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyedTicks {
    /// Bounded delay in event-time ticks.
    pub bounded_delay: i64,
    /// Idle timeout in clock ticks (`None`: keys go idle only when marked).
    pub idle_timeout: Option<i64>,
    /// Maximum number of keys.
    pub max_keys: Option<usize>,
    /// Eviction policy.
    pub eviction_policy: KeyEvictionPolicy,
}

impl KeyedWatermarkConfig {
    /// The configuration in ticks (durations as milliseconds).
    pub fn ticks(&self) -> KeyedTicks {
        KeyedTicks {
            bounded_delay: self.bounded_delay.as_millis() as i64,
            idle_timeout: Some(self.idle_timeout.as_millis() as i64),
            max_keys: self.max_keys,
            eviction_policy: self.eviction_policy,
        }
    }
}

/// Per-key watermark state, as returned by `key_state` and `remove_key`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyWatermarkState {
    /// Maximum event time seen for this key (`None`: none yet).
    pub max_event_time: Option<i64>,
    /// Current watermark (`max_event_time - bounded_delay`; `None`: none yet).
    pub watermark: Option<i64>,
    /// Clock reading of the last activity.
    pub last_activity: i64,
    /// Whether the key is idle.
    pub is_idle: bool,
}

/// Metrics for keyed watermark tracking.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyedWatermarkMetrics {
    /// Total keys tracked.
    pub total_keys: usize,
    /// Currently active (non-idle) keys.
    pub active_keys: usize,
    /// Idle keys.
    pub idle_keys: usize,
    /// Keys evicted because of `max_keys`.
    pub evicted_keys: u64,
    /// Global watermark advancements.
    pub global_advances: u64,
    /// Per-key watermark advancements.
    pub key_advances: u64,
}

impl KeyedWatermarkMetrics {
    /// Adds another shard's counters.
    pub fn add(&mut self, o: &KeyedWatermarkMetrics) {
        self.total_keys += o.total_keys;
        self.active_keys += o.active_keys;
        self.idle_keys += o.idle_keys;
        self.evicted_keys += o.evicted_keys;
        self.global_advances += o.global_advances;
        self.key_advances += o.key_advances;
    }
}

const NIL: u32 = u32::MAX;

/// A key evicted because of `max_keys`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Eviction {
    /// The slot it held (may already be reused by the key that displaced it).
    pub slot: u32,
    /// The encoded key.
    pub key: Vec<u8>,
    /// Its watermark when evicted.
    pub watermark: i64,
}

/// The keys of `(key, event time)` pairs as [`KeyRows`]: integer keys are handed out
/// as words, others encoded a chunk of rows at a time.
struct EventKeys<'a, K>(&'a [(K, i64)]);

impl<K: AsKey> KeyRows for EventKeys<'_, K> {
    fn num_rows(&self) -> usize {
        self.0.len()
    }

    fn for_each_key(&self, mut f: impl FnMut(usize, &[u8])) {
        encode_chunked(self.0.len(), &mut f, |i, buf| self.0[i].0.encode_key(buf));
    }

    #[inline]
    fn for_each_row_key(&self, mut f: impl FnMut(usize, RowKey<'_>)) {
        // Whether a key is a word, a string or other depends on its type (the checks
        // fold away once `K` is known).
        let mut buf = Vec::new();
        for (i, (k, _)) in self.0.iter().enumerate() {
            with_row_key(k, &mut buf, |key| f(i, key));
        }
    }
}

/// Keys in the hash index from which batch lookups prefetch its lines (an index of
/// 32K keys takes about 200 KiB: below that it mostly stays in cache).
const PREFETCH_INDEX_FROM: usize = 1 << 15;

/// A batch of `keys` key rows and `times` event times must have one time per key
/// row: a mismatch is a configuration error, not a silently shorter batch.
pub fn same_len(keys: usize, times: usize) -> Result<()> {
    if keys == times {
        return Ok(());
    }
    Err(TidemarkError::config(
        "event_times",
        format!("{keys} keys but {times} event times"),
    ))
}

/// [`same_len`] of key columns and an event-time array.
pub(crate) fn same_rows(keys: &KeyColumns, times: &Int64Array) -> Result<()> {
    same_len(keys.len(), times.len())
}

/// Per-key state read or written by every row of a batch (16 bytes).
#[derive(Debug, Clone, Copy)]
struct Hot {
    /// Largest event time seen; the watermark is this minus the bounded delay.
    max_event: i64,
    /// Index of this slot's entry in `pending` while a batch touches it.
    pending: u32,
    idle: bool,
}

/// Per-key activity bookkeeping, touched once per key per batch (16 bytes).
#[derive(Debug, Clone, Copy)]
struct Cold {
    /// Clock reading of the last activity.
    last_activity: i64,
    /// Activity list links.
    prev: u32,
    next: u32,
}

impl Hot {
    const FREE: Hot = Hot {
        max_event: i64::MIN,
        pending: NIL,
        idle: false,
    };
}

impl Default for Hot {
    fn default() -> Self {
        Self::FREE
    }
}

impl Cold {
    const FREE: Cold = Cold {
        last_activity: 0,
        prev: NIL,
        next: NIL,
    };
}

/// Tracks watermarks per logical key.
///
/// # Examples
///
/// An example (keys may be any [`AsKey`] value: strings, integers, bytes,
/// tuples):
///
/// ```
/// use tidemark_core::time::{KeyedWatermarkTracker, KeyedWatermarkConfig, Watermark};
/// use std::time::Duration;
///
/// let config = KeyedWatermarkConfig {
///     bounded_delay: Duration::from_secs(5),
///     idle_timeout: Duration::from_secs(60),
///     ..Default::default()
/// };
///
/// let mut tracker = KeyedWatermarkTracker::new(config);
///
/// // Fast tenant advances quickly
/// tracker.update("tenant_a".to_string(), 10_000).unwrap();
/// tracker.update("tenant_a".to_string(), 15_000).unwrap();
///
/// // Slow tenant at earlier time
/// tracker.update("tenant_b".to_string(), 5_000).unwrap();
///
/// // Per-key watermarks
/// assert_eq!(tracker.watermark_for_key(&"tenant_a".to_string()), Some(10_000)); // 15000 - 5000
/// assert_eq!(tracker.watermark_for_key(&"tenant_b".to_string()), Some(0));      // 5000 - 5000
///
/// // Global watermark is minimum across active keys
/// assert_eq!(tracker.global_watermark(), Some(Watermark::new(0))); // min of 10000, 0
///
/// // Events for tenant_b at 3000 are NOT late (their key watermark allows it)
/// assert!(!tracker.is_late("tenant_b".to_string(), 3000));
///
/// // But events for tenant_a at 3000 ARE late (their key watermark is 10000)
/// assert!(tracker.is_late("tenant_a".to_string(), 3000));
/// ```
#[derive(Debug, Clone)]
pub struct KeyedWatermarkTracker {
    cfg: KeyedTicks,
    clock: ClockRef,
    /// Keys, each with the state every row of a batch touches ([`Hot`], 16 bytes, next
    /// to the key's 16-byte head: the lookup that finds the key brings it into cache),
    /// indexed by slot id (`keys[s]`).
    keys: KeyTable<Hot>,
    /// Per-slot state only activity bookkeeping touches (16 bytes), kept apart so the
    /// per-row working set stays small.
    cold: Vec<Cold>,
    /// Minimum over active keys' watermarks; its leaves are read from `keys` (see
    /// [`Self::leaf`]): idle keys, free slots, and (in a bounded tracker) keys a batch
    /// is applying take no part.
    active: NodeMinTree,
    /// Activity list: oldest activity at `head`. Slots before `cursor` are all idle.
    head: u32,
    tail: u32,
    cursor: u32,
    /// Idle keys by watermark, for lowest-watermark eviction (entries validated lazily).
    idle_heap: BinaryHeap<Reverse<(i64, u32)>>,
    /// Current global watermark (may move back when a lagging key joins).
    global: i64,
    /// Highest global watermark reported so far (monotonic).
    reported: i64,
    /// Highest watermark any key has had (the value when no key is active).
    max_seen: i64,
    metrics: KeyedWatermarkMetrics,
    /// Encoding of a key that is not a word or a string read in place, and of a new
    /// string key (the table stores encodings).
    scratch: Vec<u8>,
    /// The batch being applied: `(slot, max event time before the batch)` per key
    /// touched, in order of first touch (`slot == NIL`: evicted during the batch).
    /// `hot[s].pending` points into it. During a batch `hot[s].max_event` already
    /// holds the batch's events (one cache line per row); watermarks and activity
    /// change only in [`Self::end_batch`], from the saved value.
    pending: Vec<(u32, i64)>,
    /// The batch's keys (indexes into `pending`) whose rows were no progress
    /// ([`Self::batch_no_progress`]): their activity stays as it was.
    stale: Vec<u32>,
    batch_now: i64,
    /// During a batch, where the search for the least recently active key the batch
    /// has not touched goes on from (`None`: the head): every key before it in the
    /// activity list is one the batch touched. Keys keep their place in the list
    /// until [`Self::end_batch`].
    evict_from: Option<u32>,
    /// During a batch, once every key in the activity list is one the batch touched:
    /// where the search for the first-touched key still in the state goes on from in
    /// `pending` (every entry before it was removed).
    pending_from: usize,
    /// Key indexes of a batch's rows (reused between batches).
    group_scratch: Vec<u32>,
    /// Key hashes of a batch's rows, for lookups with the index prefetched (reused).
    hash_scratch: Vec<u64>,
    /// Event times of an `update_batch` call (reused).
    event_scratch: Vec<i64>,
    /// When enabled, evicted keys (slot, key, watermark), for the caller to drain.
    eviction_log: Option<Vec<Eviction>>,
    /// When enabled, slots that went idle, for the caller to drain.
    idle_log: Option<Vec<u32>>,
    /// Per-key delays ([`Self::with_key_delays`]): a key's watermark is its max event
    /// time minus `delays[slot]` (empty: every key's is `cfg.bounded_delay`).
    delays: Vec<i64>,
    /// The batch's delay targets, by batch key index ([`Self::set_batch_delay`];
    /// `NO_TARGET`: unchanged).
    batch_targets: Vec<i64>,
}

/// A batch key whose delay the batch leaves as it was.
const NO_TARGET: i64 = i64::MIN;

mod query;
mod slots;
mod snapshot;
mod update;

#[cfg(test)]
mod tests;
