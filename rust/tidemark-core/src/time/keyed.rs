//! Per-key watermarks (seed F065).
//!
//! A global watermark drops the data of every key that runs behind the fastest ones.
//! [`KeyedWatermarkTracker`] keeps one watermark per key,
//! `max_event_time(key) - bounded_delay`, judges lateness against the key's own
//! watermark, and keeps a global watermark for ordering and for closing the windows
//! of idle keys:
//!
//! * global = minimum over **active** keys; idle keys are excluded; if no key is
//!   active, the highest watermark any key has had. It is the seed's "global (for
//!   ordering)": it moves back only when a key that is behind joins or becomes active
//!   again (the seed's own example: a slow tenant arriving after a fast one lowers it);
//!   removing or idling keys never lowers it;
//! * the advances the update calls report are monotonic: `Some(W)` only when `W` is
//!   above every value reported before ([`KeyedWatermarkTracker::emitted_watermark`]);
//! * per-key watermarks are monotonic;
//! * a key is idle when its last activity on the injected clock is more than
//!   `idle_timeout` ago (checked by [`KeyedWatermarkTracker::check_idle_keys`]);
//! * `max_keys` bounds memory, with the seed's eviction policies.
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

use arrow_array::{Array, BooleanArray, Int64Array};
use arrow_buffer::{BooleanBufferBuilder, NullBuffer};

use crate::clock::{system_clock, ClockRef};
use crate::error::{Result, TidemarkError};
use crate::key::{
    encode_chunked, hash_key, with_row_key, AsKey, KeyBytes, KeyColumns, KeyRows, KeyTable, RowKey,
};
use crate::state::{self, Reader, SnapshotKind, Writer};
use crate::time::{MinTree, NodeMinTree, Watermark};

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

impl KeyEvictionPolicy {
    /// Parses the policy names used by the Python API.
    pub fn from_name(name: &str) -> Result<Self> {
        Ok(match name {
            "least_recently_active" | "lru" => KeyEvictionPolicy::LeastRecentlyActive,
            "lowest_watermark" => KeyEvictionPolicy::LowestWatermark,
            "reject_new" => KeyEvictionPolicy::RejectNew,
            other => {
                return Err(TidemarkError::config(
                    "eviction",
                    format!(
                        "unknown eviction policy {other:?}; use least_recently_active, \
                         lowest_watermark or reject_new"
                    ),
                ))
            }
        })
    }
}

/// Keyed watermark tracker configuration (seed F065). Durations are milliseconds of
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
    /// Maximum event time seen for this key.
    pub max_event_time: i64,
    /// Current watermark (`max_event_time - bounded_delay`).
    pub watermark: i64,
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
/// The seed's example (keys may be any [`AsKey`] value: strings, integers, bytes,
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
    batch_now: i64,
    /// The batch's keys were all folded by [`Self::batch_fold_rows`], which leaves
    /// their activity (list position, last activity) to [`Self::end_batch`].
    activity_deferred: bool,
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
}

impl KeyedWatermarkTracker {
    /// A tracker on the system clock.
    pub fn new(config: KeyedWatermarkConfig) -> Self {
        Self::with_ticks(config.ticks(), system_clock())
    }

    /// A tracker with a configuration in ticks, reading `clock`.
    pub fn with_ticks(cfg: KeyedTicks, clock: ClockRef) -> Self {
        Self {
            cfg: KeyedTicks {
                bounded_delay: cfg.bounded_delay.max(0),
                idle_timeout: cfg.idle_timeout.map(|t| t.max(0)),
                ..cfg
            },
            clock,
            keys: KeyTable::default(),
            cold: Vec::new(),
            active: NodeMinTree::new(),
            head: NIL,
            tail: NIL,
            cursor: NIL,
            idle_heap: BinaryHeap::new(),
            global: i64::MIN,
            reported: i64::MIN,
            max_seen: i64::MIN,
            metrics: KeyedWatermarkMetrics::default(),
            scratch: Vec::new(),
            pending: Vec::new(),
            batch_now: 0,
            activity_deferred: false,
            group_scratch: Vec::new(),
            hash_scratch: Vec::new(),
            event_scratch: Default::default(),
            eviction_log: None,
            idle_log: None,
        }
    }

    /// Uses `clock` for idle detection.
    pub fn with_clock(mut self, clock: ClockRef) -> Self {
        self.clock = clock;
        self
    }

    /// Records evicted keys with their last watermark, for [`Self::drain_evictions`].
    pub fn with_eviction_log(mut self) -> Self {
        self.eviction_log = Some(Vec::new());
        self
    }

    /// Takes the keys evicted since the last call (empty unless the log is enabled).
    pub fn drain_evictions(&mut self) -> Vec<Eviction> {
        self.eviction_log
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// [`Self::drain_evictions`] into `buf` (cleared first), which hands its
    /// allocation to the log in exchange: a caller that drains after every update
    /// allocates no log.
    pub fn swap_evictions(&mut self, buf: &mut Vec<Eviction>) {
        buf.clear();
        if let Some(log) = self.eviction_log.as_mut() {
            std::mem::swap(log, buf);
        }
    }

    /// Records slots that go idle, for [`Self::drain_idle`].
    pub fn with_idle_log(mut self) -> Self {
        self.idle_log = Some(Vec::new());
        self
    }

    /// Takes the slots that went idle since the last call (empty unless enabled).
    pub fn drain_idle(&mut self) -> Vec<u32> {
        self.idle_log
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// `true` if evictions are waiting in the log.
    #[inline]
    pub fn has_evictions(&self) -> bool {
        self.eviction_log.as_ref().is_some_and(|l| !l.is_empty())
    }

    /// `true` if `key` (encoded) is tracked.
    pub fn contains_encoded(&self, key: &[u8]) -> bool {
        self.keys.get(key).is_some()
    }

    /// The watermark of an encoded key (`None` if unknown or none yet).
    pub fn watermark_for_encoded(&self, key: &[u8]) -> Option<i64> {
        let s = self.keys.get(key)? as usize;
        let wm = self.wm_of(s);
        (wm != i64::MIN).then_some(wm)
    }

    /// The configuration in ticks.
    pub fn config(&self) -> &KeyedTicks {
        &self.cfg
    }

    #[inline]
    fn wm_of(&self, slot: usize) -> i64 {
        self.keys[slot]
            .max_event
            .saturating_sub(self.cfg.bounded_delay)
    }

    /// Leaf `s` of the minimum tree: the key's watermark while it takes part in the
    /// global minimum, [`MinTree::EMPTY`] while it is idle, free, or being applied by
    /// a batch.
    #[inline(always)]
    fn leaf(keys: &KeyTable<Hot>, delay: i64, s: usize) -> i64 {
        match keys.live(s) {
            Some(h) if !h.idle && h.pending == NIL => h.max_event.saturating_sub(delay),
            _ => MinTree::EMPTY,
        }
    }

    /// Restores the minimum tree after slot `s`'s leaf changed. `rose_from`: the value
    /// the tree held for the leaf, when the leaf only rose since (unless the key held
    /// the minimum, such a change writes no node, see [`NodeMinTree::fix_rise`]).
    #[inline]
    fn fix(&mut self, s: usize, rose_from: Option<i64>) {
        let (keys, delay) = (&self.keys, self.cfg.bounded_delay);
        let leaf = |i| Self::leaf(keys, delay, i);
        match rose_from {
            Some(old) => self.active.fix_rise(s, old, leaf),
            None => self.active.fix(s, leaf),
        }
    }

    // --- activity list ---------------------------------------------------------

    fn unlink(&mut self, s: u32) {
        let (p, n) = (self.cold[s as usize].prev, self.cold[s as usize].next);
        if self.cursor == s {
            self.cursor = n;
        }
        if p == NIL {
            self.head = n;
        } else {
            self.cold[p as usize].next = n;
        }
        if n == NIL {
            self.tail = p;
        } else {
            self.cold[n as usize].prev = p;
        }
    }

    fn push_back(&mut self, s: u32) {
        self.cold[s as usize].prev = self.tail;
        self.cold[s as usize].next = NIL;
        if self.tail == NIL {
            self.head = s;
        } else {
            self.cold[self.tail as usize].next = s;
        }
        self.tail = s;
        if self.cursor == NIL {
            self.cursor = s;
        }
    }

    // --- slots -------------------------------------------------------------------

    fn ensure_slot(&mut self, slot: u32) {
        let need = slot as usize + 1;
        if self.cold.len() < need {
            self.cold.resize(need, Cold::FREE);
        }
    }

    /// Inserts a new key (absent from the table), evicting one if the tracker is full.
    /// `FIX`: restore the minimum tree for the new key's leaf (`i64::MIN`, no event
    /// yet). An update that applies its event right away passes `false`: that
    /// apply fixes the leaf once, where a fix here would first pull every node on the
    /// path to the root down to `i64::MIN` and the apply then raise them all again.
    fn insert_key<const FIX: bool>(&mut self, key: &[u8], hash: u64, now: i64) -> Result<u32> {
        if let Some(max) = self.cfg.max_keys {
            if self.keys.len() >= max {
                match self.cfg.eviction_policy {
                    KeyEvictionPolicy::RejectNew => {
                        return Err(TidemarkError::MaxKeysReached { max_keys: max })
                    }
                    _ if max == 0 => return Err(TidemarkError::MaxKeysReached { max_keys: max }),
                    _ => self.evict_one(),
                }
            }
        }
        let slot = self.keys.insert_new(key, hash)?;
        self.ensure_slot(slot);
        let s = slot as usize;
        self.cold[s].last_activity = now;
        self.push_back(slot);
        self.metrics.total_keys += 1;
        self.metrics.active_keys += 1;
        // No watermark yet (the leaf is i64::MIN): hold the minimum at "none" until
        // the first event lands.
        if FIX {
            self.fix(s, None);
        }
        Ok(slot)
    }

    /// `true` while the batch being applied has touched `slot`.
    ///
    /// Invariant: `hot[s].pending != NIL` exactly for the slots listed in `pending`
    /// (set by `batch_fold`, reset by `end_batch`, `begin_batch` and `drop_slot`).
    #[inline]
    fn in_batch(&self, slot: u32) -> bool {
        self.keys[slot as usize].pending != NIL
    }

    fn evict_one(&mut self) {
        let victim = match self.cfg.eviction_policy {
            KeyEvictionPolicy::LowestWatermark => self.lowest_watermark_slot(),
            _ => None,
        }
        .or_else(|| self.least_recently_active_slot());
        if let Some(v) = victim {
            if let Some(log) = self.eviction_log.as_mut() {
                log.push(Eviction {
                    slot: v,
                    key: self.keys.key(v).to_vec(),
                    watermark: self.keys[v as usize]
                        .max_event
                        .saturating_sub(self.cfg.bounded_delay),
                });
            }
            self.drop_slot(v);
            self.metrics.evicted_keys += 1;
        }
    }

    /// Drops every key whose last activity is more than `ttl` ticks before now (on the
    /// tracker's clock), oldest first, and returns them (slot and key). Keys touched by
    /// a batch being applied are kept.
    pub fn expire_older_than(&mut self, ttl: i64) -> Vec<Eviction> {
        let now = self.clock.now();
        let mut out = Vec::new();
        let mut s = self.head;
        while s != NIL {
            let next = self.cold[s as usize].next;
            if now.saturating_sub(self.cold[s as usize].last_activity) <= ttl {
                break;
            }
            if !self.in_batch(s) {
                out.push(Eviction {
                    slot: s,
                    key: self.keys.key(s).to_vec(),
                    watermark: self.wm_of(s as usize),
                });
                self.drop_slot(s);
            }
            s = next;
        }
        if !out.is_empty() {
            self.recalc();
        }
        out
    }

    /// The least recently active key not touched by the batch being applied (if every
    /// key was touched, the one the batch touched first): the head of the activity
    /// list, because [`Self::batch_fold`] moves a key behind every untouched key when
    /// the batch first touches it. O(1), however many keys the batch touched.
    fn least_recently_active_slot(&self) -> Option<u32> {
        debug_assert!(
            self.head == NIL
                || !self.in_batch(self.head)
                || self.keys.slots().all(|s| self.in_batch(s)),
            "batch keys are behind untouched keys"
        );
        (self.head != NIL).then_some(self.head)
    }

    /// The key with the lowest watermark among those not touched by the batch being
    /// applied (touched keys leave the active tree until the batch ends).
    fn lowest_watermark_slot(&mut self) -> Option<u32> {
        // Drop stale idle entries (key reactivated, removed, advanced, or in the batch).
        while let Some(&Reverse((wm, s))) = self.idle_heap.peek() {
            let valid = self.keys.is_live(s)
                && self.keys[s as usize].idle
                && !self.in_batch(s)
                && self.wm_of(s as usize) == wm;
            if valid {
                break;
            }
            self.idle_heap.pop();
        }
        let idle = self.idle_heap.peek().map(|&Reverse((wm, s))| (wm, s));
        let (keys, delay) = (&self.keys, self.cfg.bounded_delay);
        let active = self
            .active
            .argmin(|i| Self::leaf(keys, delay, i))
            .map(|s| (self.wm_of(s), s as u32));
        match (idle, active) {
            (Some(i), Some(a)) => Some(if i.0 <= a.0 { i.1 } else { a.1 }),
            (Some(i), None) => Some(i.1),
            (None, Some(a)) => Some(a.1),
            (None, None) => None,
        }
    }

    fn drop_slot(&mut self, slot: u32) -> KeyWatermarkState {
        let s = slot as usize;
        if self.in_batch(slot) {
            let p = self.keys[s].pending as usize;
            self.pending[p].0 = NIL;
        }
        self.keys[s].pending = NIL;
        let state = self.state_of(s);
        self.unlink(slot);
        if self.keys[s].idle {
            self.metrics.idle_keys -= 1;
        } else {
            self.metrics.active_keys -= 1;
        }
        self.metrics.total_keys -= 1;
        self.keys.remove(slot); // its value back to Hot::FREE
        self.fix(s, None);
        state
    }

    fn state_of(&self, s: usize) -> KeyWatermarkState {
        KeyWatermarkState {
            max_event_time: self.keys[s].max_event,
            watermark: self.wm_of(s),
            last_activity: self.cold[s].last_activity,
            is_idle: self.keys[s].idle,
        }
    }

    /// Records activity and a new event time for `slot`. Does not recompute the global.
    #[inline]
    fn apply(&mut self, slot: u32, event_time: i64, now: i64) {
        let before = self.wm_of(slot as usize);
        let s = slot as usize;
        // The leaf the tree holds for this key, if it is one (active, not in a batch),
        // for a lazy rise; with max_keys the rise is fixed at once. Evictions take the
        // least recently active (or the lowest) key, which mostly holds the minimum:
        // each then raises the root's pair, and the pass that brings the lagging
        // pairs up to date costs more than fixing each rise when it happens (at 10K
        // exact keys of a million, lazy rises made the compact tracker's update
        // 1.3-1.7x slower).
        let h = &self.keys[s];
        let leaf = (self.cfg.max_keys.is_none() && !h.idle && h.pending == NIL).then_some(before);
        self.keys[s].max_event = self.keys[s].max_event.max(event_time);
        self.move_to_back(slot);
        self.settle(slot, before, now, leaf);
    }

    /// Moves `slot` to the most recently active end of the activity list.
    #[inline]
    fn move_to_back(&mut self, slot: u32) {
        if self.tail != slot {
            self.unlink(slot);
            self.push_back(slot);
        } else if self.cursor == NIL {
            // Already last, but past the idle scan: it must be scanned again.
            self.cursor = slot;
        }
    }

    /// Activity bookkeeping for `slot`, already moved to the back, after its max event
    /// time was raised from watermark `before`. `leaf`: the value the minimum tree held
    /// for the slot, when known (the watermark only rose since): unless the key held
    /// the minimum, the tree then records the rise lazily.
    #[inline]
    fn settle(&mut self, slot: u32, before: i64, now: i64, leaf: Option<i64>) {
        let s = slot as usize;
        self.cold[s].last_activity = now;
        if self.keys[s].idle {
            self.keys[s].idle = false;
            self.metrics.idle_keys -= 1;
            self.metrics.active_keys += 1;
        }
        let wm = self.wm_of(s);
        if wm > before {
            self.metrics.key_advances += 1;
        }
        self.max_seen = self.max_seen.max(wm);
        self.fix(s, leaf);
    }

    fn slot_for_update<const FIX: bool>(&mut self, key: &[u8], now: i64) -> Result<u32> {
        self.slot_of::<FIX>(RowKey::Bytes(key), now)
    }

    /// The slot of `key`, inserted (activity at `now`) if new (`FIX`: see
    /// [`Self::insert_key`]).
    #[inline(always)]
    fn slot_of<const FIX: bool>(&mut self, key: RowKey<'_>, now: i64) -> Result<u32> {
        self.slot_of_hashed::<FIX>(key, key.hash(), now)
    }

    /// [`Self::slot_of`] with the key's [`RowKey::hash`] at hand.
    #[inline(always)]
    fn slot_of_hashed<const FIX: bool>(
        &mut self,
        key: RowKey<'_>,
        hash: u64,
        now: i64,
    ) -> Result<u32> {
        match key {
            RowKey::Word(w) => match self.keys.get_word(w, hash) {
                Some(s) => Ok(s),
                None => self.insert_key::<FIX>(&w.bytes(), hash, now),
            },
            RowKey::Str(b) => {
                match self.keys.get_bytes(b, hash) {
                    Some(s) => Ok(s),
                    None => {
                        // A new key: the table stores its encoding.
                        let mut enc = std::mem::take(&mut self.scratch);
                        enc.clear();
                        b.encode(&mut enc);
                        let slot = self.insert_key::<FIX>(&enc, hash, now);
                        self.scratch = enc;
                        slot
                    }
                }
            }
            RowKey::Bytes(key) => match self.keys.get_hashed(key, hash) {
                Some(s) => Ok(s),
                None => self.insert_key::<FIX>(key, hash, now),
            },
        }
    }

    // --- public API ------------------------------------------------------------

    /// Updates the watermark of `key` with an event at `event_time`.
    ///
    /// Returns the new global watermark if it advanced, or
    /// [`TidemarkError::MaxKeysReached`] under the `RejectNew` policy.
    pub fn update<K: AsKey>(&mut self, key: K, event_time: i64) -> Result<Option<Watermark>> {
        let now = self.clock.now();
        // Words and strings are looked up in place (no scratch buffer to take). A new
        // key's leaf is fixed by the apply below (see insert_key).
        let slot = if let Some(w) = key.word_key() {
            self.slot_of::<false>(RowKey::Word(w), now)
        } else if let Some(b) = key.bytes_key() {
            self.slot_of::<false>(RowKey::Str(b), now)
        } else {
            let mut buf = std::mem::take(&mut self.scratch);
            buf.clear();
            key.encode_key(&mut buf);
            let slot = self.slot_for_update::<false>(&buf, now);
            self.scratch = buf;
            slot
        };
        self.apply(slot?, event_time, now);
        Ok(self.recalc())
    }

    /// [`Self::update`] with an already encoded key.
    pub fn update_encoded(&mut self, key: &[u8], event_time: i64) -> Result<Option<Watermark>> {
        self.apply_encoded(key, event_time)?;
        Ok(self.recalc())
    }

    /// [`Self::update_encoded`] without recomputing the global watermark: for a caller
    /// that applies a batch key by key (evicting as it goes) and then calls
    /// [`Self::recalculate_global`] once, so the batch reports the global watermark
    /// it leaves, not one it passed through on the way.
    pub fn apply_encoded(&mut self, key: &[u8], event_time: i64) -> Result<()> {
        let now = self.clock.now();
        let slot = self.slot_for_update::<false>(key, now)?;
        self.apply(slot, event_time, now);
        Ok(())
    }

    /// Batch update (the clock is read once, the global recomputed once).
    pub fn update_batch<K: AsKey>(&mut self, events: &[(K, i64)]) -> Result<Option<Watermark>> {
        // A scratch buffer reused between calls: small batches pay no allocation.
        let mut times = std::mem::take(&mut self.event_scratch);
        times.clear();
        times.extend(events.iter().map(|e| e.1));
        let r = self.update_rows(&EventKeys(events), &times, None);
        crate::keep_scratch(&mut self.event_scratch, times);
        r
    }

    /// Batch update from Arrow key columns and event times (rows with a null time are
    /// skipped). Order inside the batch does not matter.
    pub fn update_columns(
        &mut self,
        keys: &KeyColumns,
        times: &Int64Array,
    ) -> Result<Option<Watermark>> {
        same_rows(keys, times)?;
        self.update_rows(keys, times.values(), times.nulls())
    }

    fn update_rows<R: KeyRows + ?Sized>(
        &mut self,
        rows: &R,
        times: &[i64],
        nulls: Option<&NullBuffer>,
    ) -> Result<Option<Watermark>> {
        let n = rows.num_rows();
        if let (KeyEvictionPolicy::RejectNew, Some(max)) =
            (self.cfg.eviction_policy, self.cfg.max_keys)
        {
            if self.keys.len() + n > max {
                // Atomic rejection: count the batch's new keys before changing anything.
                let mut new_keys = KeyTable::new();
                let mut err = None;
                rows.for_each_key(|i, key| {
                    if err.is_none()
                        && !nulls.is_some_and(|nb| nb.is_null(i))
                        && self.keys.get(key).is_none()
                    {
                        if let Err(e) = new_keys.get_or_insert(key) {
                            err = Some(e);
                        }
                    }
                });
                if let Some(e) = err {
                    return Err(e);
                }
                if self.keys.len() + new_keys.len() > max {
                    return Err(TidemarkError::MaxKeysReached { max_keys: max });
                }
            }
        }
        self.begin_batch();
        let mut err = None;
        if self.may_evict(n) {
            // Keys may be evicted while the batch runs: fold each row as it is found,
            // so a key found earlier in the batch is never evicted before its fold.
            rows.for_each_row_key(|i, key| {
                if err.is_some() || nulls.is_some_and(|nb| nb.is_null(i)) {
                    return;
                }
                match self.batch_slot_row(key) {
                    Ok(slot) => {
                        self.batch_fold(slot, times[i]);
                    }
                    Err(e) => err = Some(e),
                }
            });
        } else {
            let failed = std::cell::Cell::new(false);
            let mut groups = std::mem::take(&mut self.group_scratch);
            self.batch_fold_rows(
                rows,
                times,
                |i| failed.get() || nulls.is_some_and(|nb| nb.is_null(i)),
                |_, e| {
                    failed.set(true);
                    err.get_or_insert(e);
                },
                &mut groups,
            );
            crate::keep_scratch(&mut self.group_scratch, groups);
        }
        // Finish what was folded even if a row failed: the state stays consistent.
        let advanced = self.end_batch();
        err.map_or(Ok(advanced), Err)
    }

    // --- batches at slot level (used by the pipeline) ----------------------------

    /// Starts applying a batch: reads the clock once. Until [`Self::end_batch`], the
    /// global watermark, activity and idleness do not change; [`Self::batch_fold`]
    /// records event times ([`Self::batch_key`] gives a key's watermark as it stood
    /// before the batch).
    pub fn begin_batch(&mut self) -> i64 {
        // A batch left unfinished (a caller's error) is discarded.
        for i in 0..self.pending.len() {
            let (slot, before) = self.pending[i];
            if slot != NIL {
                self.keys[slot as usize].pending = NIL;
                self.keys[slot as usize].max_event = before;
                self.fix(slot as usize, None);
            }
        }
        self.pending.clear();
        self.activity_deferred = false;
        self.batch_now = self.clock.now();
        self.batch_now
    }

    /// The slot of `key` in the batch being applied, inserting the key if new. When
    /// the tracker is full, the evicted key is one the batch has not touched
    /// (see [`Self::with_eviction_log`] to learn which).
    #[inline]
    pub fn batch_slot(&mut self, key: &[u8]) -> Result<u32> {
        self.slot_for_update::<true>(key, self.batch_now)
    }

    /// [`Self::batch_slot`] for a key as [`KeyRows::for_each_row_key`] gives it.
    #[inline]
    pub fn batch_slot_row(&mut self, key: RowKey<'_>) -> Result<u32> {
        self.slot_of::<true>(key, self.batch_now)
    }

    /// `true` if applying `rows` more rows could evict keys (a bounded tracker without
    /// room for one new key per row): rows must then be folded one at a time.
    pub fn may_evict(&self, rows: usize) -> bool {
        self.cfg
            .max_keys
            .is_some_and(|max| self.keys.len() + rows > max)
    }

    /// Finds (inserting new keys) and folds every row of `rows` in the batch being
    /// applied; for trackers that cannot evict during it (`!may_evict(rows)`).
    /// `groups[row]` receives the row's key index in the batch ([`Self::batch_fold`]),
    /// or `u32::MAX` for rows where `skip(row)` held or whose key could not be
    /// inserted (then `on_error(row, error)` is called, before `skip` is asked about
    /// the next row, so `skip` can stop the batch at its first error).
    ///
    /// All lookups first (independent, so the CPU overlaps them), then the folds with
    /// each key's state and activity-list neighbours prefetched rows ahead.
    pub fn batch_fold_rows<R: KeyRows + ?Sized>(
        &mut self,
        rows: &R,
        times: &[i64],
        mut skip: impl FnMut(usize) -> bool,
        mut on_error: impl FnMut(usize, TidemarkError),
        groups: &mut Vec<u32>,
    ) {
        debug_assert!(!self.may_evict(rows.num_rows()));
        groups.clear();
        let now = self.batch_now;
        // With a hash index past the caches, every row is hashed first, then each row
        // is looked up while two rows ahead are on their way in: the index line of the
        // row LOOKUP_AHEAD rows on, and (that line having arrived by then) the entry
        // of the likely slot of the row ENTRY_AHEAD rows on.
        const LOOKUP_AHEAD: usize = 16;
        const ENTRY_AHEAD: usize = 8;
        let ahead = self.keys.indexed_len() >= PREFETCH_INDEX_FROM;
        let mut hashes = std::mem::take(&mut self.hash_scratch);
        hashes.clear();
        if ahead {
            hashes.resize(rows.num_rows(), 0);
            rows.for_each_row_key(|i, key| hashes[i] = key.hash());
            for &h in hashes.iter().take(LOOKUP_AHEAD) {
                self.keys.prefetch_hash(h);
            }
        }
        rows.for_each_row_key(|i, key| {
            if let Some(&h) = hashes.get(i + LOOKUP_AHEAD) {
                self.keys.prefetch_hash(h);
            }
            if let Some(&h) = hashes.get(i + ENTRY_AHEAD) {
                self.keys.prefetch_candidate(h);
            }
            let slot = if skip(i) {
                NIL
            } else {
                let hash = hashes.get(i).copied().unwrap_or_else(|| key.hash());
                self.slot_of_hashed::<true>(key, hash, now)
                    .unwrap_or_else(|e| {
                        on_error(i, e);
                        NIL
                    })
            };
            groups.push(slot);
        });
        crate::keep_scratch(&mut self.hash_scratch, hashes);
        // Nothing is evicted before the batch ends, so the keys' activity can wait
        // for end_batch: once per key there, in order of first touch (the same list
        // order), instead of on the rows here. Only from the batch's first key on: a
        // key folded earlier was already moved, and the moves must keep their order.
        if self.pending.is_empty() {
            self.activity_deferred = true;
        }
        const AHEAD: usize = 16;
        for i in 0..groups.len() {
            if let Some(&next) = groups.get(i + AHEAD) {
                self.keys.prefetch(next);
            }
            let slot = groups[i];
            if slot != NIL {
                groups[i] = self.batch_fold(slot, times[i]);
            }
        }
    }

    /// Records an event time for `slot` in the batch being applied. Returns the key's
    /// index in the batch (its order of first touch), stable until the batch ends.
    #[inline]
    pub fn batch_fold(&mut self, slot: u32, event_time: i64) -> u32 {
        let s = slot as usize;
        let h = &mut self.keys[s];
        let before = h.max_event;
        h.max_event = before.max(event_time);
        if h.pending != NIL {
            h.pending
        } else {
            let i = self.pending.len() as u32;
            h.pending = i;
            self.pending.push((slot, before));
            // Out of eviction candidacy until the batch ends (settle() puts it back):
            // out of the minimum, and behind every key the batch has not touched in the
            // activity list, so least-recently-active eviction finds an untouched key
            // at the head without walking past the batch's keys.
            // (Only a bounded tracker evicts: without max_keys the tree is left as it
            // was until settle() fixes it, one tree update instead of two. Nothing
            // reads the minimum during a batch.)
            if self.cfg.max_keys.is_some() {
                self.fix(s, None);
            }
            if !self.activity_deferred {
                self.cold[s].last_activity = self.batch_now;
                self.move_to_back(slot);
            }
            i
        }
    }

    /// Number of keys the batch being applied has touched (evicted ones included).
    pub fn batch_len(&self) -> usize {
        self.pending.len()
    }

    /// The slot of the batch's `index`-th key, or `None` if that key was evicted
    /// during the batch (its slot may hold another key now).
    #[inline]
    pub fn batch_key_slot(&self, index: u32) -> Option<u32> {
        let slot = self.pending[index as usize].0;
        (slot != NIL).then_some(slot)
    }

    /// The slot of the batch's `index`-th key and its watermark as it stood when the
    /// batch began, or `None` if that key was evicted during the batch.
    #[inline]
    pub fn batch_key(&self, index: u32) -> Option<(u32, i64)> {
        let (slot, before) = self.pending[index as usize];
        (slot != NIL).then_some((slot, before.saturating_sub(self.cfg.bounded_delay)))
    }

    /// Applies the batch: per touched key (in order of first touch) the new max event
    /// time and activity; then recomputes the global watermark. Returns it if it rose
    /// to a new high.
    pub fn end_batch(&mut self) -> Option<Watermark> {
        let now = self.batch_now;
        let pending = std::mem::take(&mut self.pending);
        let deferred = std::mem::take(&mut self.activity_deferred);
        const AHEAD: usize = 8;
        for (i, &(slot, before)) in pending.iter().enumerate() {
            if let Some(&(next, _)) = pending.get(i + AHEAD) {
                if next != NIL {
                    self.active.prefetch(next as usize);
                    if deferred {
                        crate::prefetch_at(&self.cold, next as usize);
                    }
                }
            }
            if slot == NIL {
                continue;
            }
            if deferred {
                // Half-way: the list neighbours the move relinks.
                if let Some(&(near, _)) = pending.get(i + AHEAD / 2) {
                    if near != NIL {
                        let c = self.cold[near as usize];
                        crate::prefetch_at(&self.cold, c.prev as usize);
                        crate::prefetch_at(&self.cold, c.next as usize);
                    }
                }
                self.move_to_back(slot);
            }
            self.keys[slot as usize].pending = NIL;
            let before = before.saturating_sub(self.cfg.bounded_delay);
            // Without max_keys the tree was not touched when the batch took the key
            // (see batch_fold): the node over its pair was computed with `before` (or
            // lower, a lazy rise) for an active key, or (after a fix of the pair
            // during the batch) with the key out. A node not above `before` is at
            // most the key's new value, which is all a lazy rise needs
            // (NodeMinTree::fix_rise); a node above it (set while the key was out)
            // is fixed in full.
            let leaf =
                (self.cfg.max_keys.is_none() && !self.keys[slot as usize].idle).then_some(before);
            self.settle(slot, before, now, leaf);
        }
        self.pending = pending;
        self.pending.clear();
        self.recalc()
    }

    /// The watermark of `slot` (`i64::MIN`: none yet). During a batch it already
    /// counts the batch's events; see [`Self::batch_key`] for the value before it.
    #[inline]
    pub fn slot_watermark(&self, slot: u32) -> i64 {
        self.wm_of(slot as usize)
    }

    /// Raises the watermark of the idle key in `slot` to at least `w`, leaving it
    /// idle: its windows up to `w` closed on the global watermark, so its rows behind
    /// `w` are late when it comes back (an idle key's watermark follows the global
    /// one as far as it closed the key's windows). No effect on an active key.
    pub fn raise_idle_watermark(&mut self, slot: u32, w: i64) {
        let h = &mut self.keys[slot as usize];
        if h.idle {
            h.max_event = h.max_event.max(w.saturating_add(self.cfg.bounded_delay));
        }
    }

    /// Whether the key in `slot` is idle.
    #[inline]
    pub fn slot_is_idle(&self, slot: u32) -> bool {
        self.keys[slot as usize].idle
    }

    /// The encoded key in `slot`.
    pub fn slot_key(&self, slot: u32) -> KeyBytes<'_> {
        self.keys.key(slot)
    }

    /// Live slots, in slot order.
    pub fn live_slots(&self) -> impl Iterator<Item = u32> + '_ {
        self.keys.slots()
    }

    /// The watermark of `key` (`None` if unknown).
    pub fn watermark_for_key<K: AsKey + ?Sized>(&self, key: &K) -> Option<i64> {
        let s = self.find(key)? as usize;
        let wm = self.wm_of(s);
        (wm != i64::MIN).then_some(wm)
    }

    /// The full state of `key`.
    pub fn key_state<K: AsKey + ?Sized>(&self, key: &K) -> Option<KeyWatermarkState> {
        self.find(key).map(|s| self.state_of(s as usize))
    }

    fn find<K: AsKey + ?Sized>(&self, key: &K) -> Option<u32> {
        if let Some(w) = key.word_key() {
            return self.keys.get_word(w, w.hash());
        }
        let mut buf = Vec::new();
        key.encode_key(&mut buf);
        self.keys.get(&buf)
    }

    /// The global watermark: minimum over active keys (if none is active, the highest
    /// watermark any key has had). May move back when a lagging key joins.
    #[inline]
    pub fn global_watermark(&self) -> Option<Watermark> {
        Watermark::from_raw(self.global)
    }

    /// One more than the largest key slot ever handed out.
    pub fn slot_bound(&self) -> usize {
        self.keys.slot_bound()
    }

    /// The minimum watermark over active keys right now (`None`: no active key), and
    /// the highest key watermark ever seen: the two inputs of the global watermark,
    /// for combining trackers that each hold a shard of the keys.
    pub fn global_parts(&self) -> (Option<i64>, i64) {
        let m = self.active.min();
        ((m != MinTree::EMPTY).then_some(m), self.max_seen)
    }

    /// The highest global watermark reported so far (monotonic): what a consumer
    /// driving event-time timers from this tracker should use.
    #[inline]
    pub fn emitted_watermark(&self) -> Option<Watermark> {
        Watermark::from_raw(self.reported)
    }

    /// Whether an event is late for its key (its own watermark, not the global one).
    /// Events of unknown keys are never late.
    pub fn is_late<K: AsKey>(&self, key: K, event_time: i64) -> bool {
        self.watermark_for_key(&key)
            .is_some_and(|wm| event_time < wm)
    }

    /// Vectorised [`Self::is_late`]: one boolean per row (null where the time is null).
    pub fn is_late_columns(&self, keys: &KeyColumns, times: &Int64Array) -> Result<BooleanArray> {
        same_rows(keys, times)?;
        let mut late = BooleanBufferBuilder::new(keys.len());
        keys.for_each_row_key(|i, key| {
            late.append(
                times.is_valid(i)
                    && self
                        .keys
                        .get_row(key, key.hash())
                        .is_some_and(|s| times.value(i) < self.wm_of(s as usize)),
            )
        });
        Ok(BooleanArray::new(
            late.finish(),
            times.nulls().cloned().map(|n: NullBuffer| n),
        ))
    }

    /// Marks `key` idle. Returns the new global watermark if that advanced it.
    pub fn mark_idle<K: AsKey + ?Sized>(&mut self, key: &K) -> Option<Watermark> {
        let s = self.find(key)?;
        self.set_idle(s);
        self.recalc()
    }

    /// Marks `key` active again (its idle timer restarts now; it takes part in the
    /// global minimum again). Returns `false` if the key is unknown.
    pub fn mark_active<K: AsKey + ?Sized>(&mut self, key: &K) -> bool {
        let Some(s) = self.find(key) else {
            return false;
        };
        let now = self.clock.now();
        let t = self.keys[s as usize].max_event;
        self.apply(s, t, now);
        self.recalc();
        true
    }

    fn set_idle(&mut self, slot: u32) {
        let s = slot as usize;
        if !self.keys[s].idle {
            self.keys[s].idle = true;
            if let Some(log) = self.idle_log.as_mut() {
                log.push(slot);
            }
            self.metrics.idle_keys += 1;
            self.metrics.active_keys -= 1;
            self.fix(s, None);
            if self.cfg.eviction_policy == KeyEvictionPolicy::LowestWatermark {
                self.idle_heap.push(Reverse((self.wm_of(s), slot)));
                if self.idle_heap.len() > 2 * self.metrics.idle_keys + 1024 {
                    self.rebuild_idle_heap();
                }
            }
        }
    }

    fn rebuild_idle_heap(&mut self) {
        let entries: Vec<_> = self
            .keys
            .slots()
            .filter(|&s| self.keys[s as usize].idle)
            .map(|s| Reverse((self.wm_of(s as usize), s)))
            .collect();
        self.idle_heap = BinaryHeap::from(entries);
    }

    /// Marks every key with no activity for more than `idle_timeout` as idle. Touches
    /// only keys past the scan cursor. Returns the new global watermark if it advanced.
    pub fn check_idle_keys(&mut self) -> Option<Watermark> {
        let timeout = self.cfg.idle_timeout?;
        let now = self.clock.now();
        let mut any = false;
        while self.cursor != NIL {
            let s = self.cursor;
            if now.saturating_sub(self.cold[s as usize].last_activity) <= timeout {
                break;
            }
            if !self.keys[s as usize].idle {
                self.set_idle(s);
                any = true;
            }
            self.cursor = self.cold[s as usize].next;
        }
        if any {
            self.recalc()
        } else {
            None
        }
    }

    /// Number of active keys.
    pub fn active_key_count(&self) -> usize {
        self.metrics.active_keys
    }

    /// Number of tracked keys.
    pub fn total_key_count(&self) -> usize {
        self.metrics.total_keys
    }

    /// Bytes of the tracked keys themselves (see [`KeyTable::key_bytes`]).
    pub fn key_bytes(&self) -> usize {
        self.keys.key_bytes()
    }

    /// Metrics.
    pub fn metrics(&self) -> &KeyedWatermarkMetrics {
        &self.metrics
    }

    /// Forces recalculation of the global watermark. Returns it if it advanced.
    pub fn recalculate_global(&mut self) -> Option<Watermark> {
        self.recalc()
    }

    #[inline]
    fn recalc(&mut self) -> Option<Watermark> {
        let m = self.active.min();
        self.global = if m != MinTree::EMPTY {
            m
        } else {
            self.max_seen
        };
        if self.global > self.reported {
            self.reported = self.global;
            self.metrics.global_advances += 1;
            Some(Watermark::new(self.global))
        } else {
            None
        }
    }

    /// Removes `key` from tracking and returns its state. The global watermark is
    /// recalculated (removing a key never lowers it).
    pub fn remove_key<K: AsKey + ?Sized>(&mut self, key: &K) -> Option<KeyWatermarkState> {
        let s = self.find(key)?;
        let state = self.drop_slot(s);
        self.recalc();
        Some(state)
    }

    /// Forgets every key and watermark (metrics counters are kept).
    pub fn clear(&mut self) {
        let metrics = KeyedWatermarkMetrics {
            total_keys: 0,
            active_keys: 0,
            idle_keys: 0,
            ..self.metrics.clone()
        };
        let log = self.eviction_log.take().map(|_| Vec::new());
        let idle = self.idle_log.take().map(|_| Vec::new());
        *self = Self::with_ticks(self.cfg, self.clock.clone());
        self.metrics = metrics;
        self.eviction_log = log;
        self.idle_log = idle;
    }

    /// Slots in activity order, least recently active first.
    pub fn activity_order(&self) -> Vec<u32> {
        let mut out = Vec::with_capacity(self.keys.len());
        let mut s = self.head;
        while s != NIL {
            out.push(s);
            s = self.cold[s as usize].next;
        }
        out
    }

    /// Writes the tracker's state (keys in activity order, watermarks, metrics).
    /// Returns the slots in the order written ([`Self::activity_order`]), as
    /// [`Self::read_state`] returns them: per-key state written after this follows
    /// it without walking the activity list again.
    pub fn write_state(&self, w: &mut Writer) -> Vec<u32> {
        let order = self.activity_order();
        w.len(order.len());
        let mut cursor_index = order.len();
        for (i, &s) in order.iter().enumerate() {
            if s == self.cursor {
                cursor_index = i;
            }
            w.bytes(&self.keys.key(s));
            w.i64(self.keys[s as usize].max_event);
            w.i64(self.cold[s as usize].last_activity);
            w.bool(self.keys[s as usize].idle);
        }
        w.len(cursor_index);
        w.i64(self.global);
        w.i64(self.reported);
        w.i64(self.max_seen);
        w.u64(self.metrics.evicted_keys);
        w.u64(self.metrics.global_advances);
        w.u64(self.metrics.key_advances);
        order
    }

    /// Restores state written by [`Self::write_state`] into this (empty) tracker.
    /// Returns the new slots in the written activity order.
    pub fn read_state(&mut self, r: &mut Reader<'_>) -> Result<Vec<u32>> {
        let n = r.len(8 + 8 + 8 + 1)?;
        let mut records = Vec::with_capacity(n);
        for _ in 0..n {
            records.push((r.bytes()?, r.i64()?, r.i64()?, r.bool()?));
        }
        // Every array sized once for the keys and half as many again (a restore of a
        // million keys otherwise spends much of its time growing and rehashing them;
        // see `KeyTable::reserve_keys`).
        self.keys.reserve_keys(records.iter().map(|k| k.0));
        self.cold
            .reserve((self.keys.len() + n + n / 2).saturating_sub(self.cold.len()));
        let mut slots = Vec::with_capacity(n);
        for (key, max_event, last, idle) in records {
            let hash = hash_key(key);
            if self.keys.get_hashed(key, hash).is_some() {
                return Err(TidemarkError::StateCorrupted(
                    "duplicate key in tracker state".into(),
                ));
            }
            let slot = self.keys.insert_new(key, hash)?;
            self.ensure_slot(slot);
            let s = slot as usize;
            self.keys[s] = Hot {
                max_event,
                pending: NIL,
                idle,
            };
            self.cold[s].last_activity = last;
            self.push_back(slot);
            self.metrics.total_keys += 1;
            if idle {
                self.metrics.idle_keys += 1;
                if self.cfg.eviction_policy == KeyEvictionPolicy::LowestWatermark {
                    self.idle_heap.push(Reverse((self.wm_of(s), slot)));
                }
            } else {
                self.metrics.active_keys += 1;
            }
            slots.push(slot);
        }
        // The minimum tree loaded in one pass over every slot (idle and free slots
        // take no part).
        let (keys, delay) = (&self.keys, self.cfg.bounded_delay);
        self.active
            .build(keys.slot_bound(), |i| Self::leaf(keys, delay, i));
        let cursor_index = r.len(0)?;
        self.cursor = slots.get(cursor_index).copied().unwrap_or(NIL);
        self.global = r.i64()?;
        self.reported = r.i64()?;
        self.max_seen = r.i64()?;
        self.metrics.evicted_keys = r.u64()?;
        self.metrics.global_advances = r.u64()?;
        self.metrics.key_advances = r.u64()?;
        Ok(slots)
    }

    /// The tracker's whole state as bytes (versioned, checksummed): its
    /// configuration, and per key its maximum event time, last activity and idleness,
    /// in activity order; the global watermark as reported so far, and the metrics.
    /// [`Self::restore`] reads it back on any clock.
    ///
    /// # Examples
    ///
    /// ```
    /// use tidemark_core::clock::system_clock;
    /// use tidemark_core::time::{KeyedWatermarkConfig, KeyedWatermarkTracker};
    /// let mut t = KeyedWatermarkTracker::new(KeyedWatermarkConfig::default());
    /// t.update("a", 15_000).unwrap();
    /// let back = KeyedWatermarkTracker::restore(&t.snapshot(), system_clock()).unwrap();
    /// assert_eq!(back.watermark_for_key("a"), Some(10_000));
    /// ```
    pub fn snapshot(&self) -> Vec<u8> {
        let mut w = Writer::sealed(256 + self.keys.len() * 40 + self.key_bytes());
        self.write_config(&mut w);
        self.write_state(&mut w);
        w.seal(SnapshotKind::Keyed, 0)
    }

    /// A tracker restored from [`Self::snapshot`] bytes, reading `clock` from now on.
    /// Fails with [`TidemarkError::StateCorrupted`] if the bytes are damaged, of
    /// another format version or of another kind of snapshot.
    pub fn restore(bytes: &[u8], clock: ClockRef) -> Result<Self> {
        let mut r = Reader::new(state::open(bytes, SnapshotKind::Keyed, None)?);
        let mut t = Self::with_ticks(Self::read_config(&mut r)?, clock);
        t.read_bounded_state(&mut r)?;
        r.finish()?;
        Ok(t)
    }

    /// Writes the configuration (for a snapshot that stands alone).
    pub(crate) fn write_config(&self, w: &mut Writer) {
        let c = &self.cfg;
        w.i64(c.bounded_delay);
        w.i64(c.idle_timeout.unwrap_or(-1));
        w.u64(c.max_keys.map_or(0, |m| m as u64 + 1));
        w.u8(match c.eviction_policy {
            KeyEvictionPolicy::LeastRecentlyActive => 0,
            KeyEvictionPolicy::LowestWatermark => 1,
            KeyEvictionPolicy::RejectNew => 2,
        });
    }

    /// Reads a configuration written by [`Self::write_config`].
    pub(crate) fn read_config(r: &mut Reader<'_>) -> Result<KeyedTicks> {
        let bounded_delay = r.i64()?;
        let idle_timeout = r.i64()?;
        let max_keys = r.u64()?;
        let eviction_policy = match r.u8()? {
            0 => KeyEvictionPolicy::LeastRecentlyActive,
            1 => KeyEvictionPolicy::LowestWatermark,
            2 => KeyEvictionPolicy::RejectNew,
            other => {
                return Err(TidemarkError::StateCorrupted(format!(
                    "unknown eviction policy {other} in tracker state"
                )))
            }
        };
        Ok(KeyedTicks {
            bounded_delay,
            idle_timeout: (idle_timeout >= 0).then_some(idle_timeout),
            max_keys: max_keys
                .checked_sub(1)
                .map(|m| usize::try_from(m).unwrap_or(usize::MAX)),
            eviction_policy,
        })
    }

    /// [`Self::read_state`], refusing more keys than the configuration bounds.
    pub(crate) fn read_bounded_state(&mut self, r: &mut Reader<'_>) -> Result<()> {
        self.read_state(r)?;
        if let Some(max) = self.cfg.max_keys {
            if self.keys.len() > max {
                return Err(TidemarkError::StateCorrupted(format!(
                    "tracker state holds {} keys, more than its max_keys {max}",
                    self.keys.len()
                )));
            }
        }
        Ok(())
    }

    /// Bytes of memory per key by layout, excluding the key's own bytes: the table
    /// entry (16-byte key head, holding keys of up to 15 encoded bytes inline, and the
    /// 16-byte per-key state), the activity record, a minimum-tree node, and the
    /// hash index's slot id and tag (a 64-byte chunk per 12 keys, rounded up to 6
    /// bytes). An upper bound: for an inline key the head's bytes are partly the key's
    /// own (a 9-byte integer key leaves 53 bytes).
    pub fn bytes_per_key() -> usize {
        16 /* key head */ + std::mem::size_of::<Hot>() + std::mem::size_of::<Cold>()
            + 8 /* min tree node */ + 64usize.div_ceil(12) /* hash index slot */
    }

    /// Heap bytes held, excluding the keys' own bytes.
    pub fn heap_bytes(&self) -> usize {
        self.cold.capacity() * std::mem::size_of::<Cold>()
            + self.active.heap_bytes()
            + self.keys.overhead_bytes()
            + self.idle_heap.capacity() * 16
    }
}

#[cfg(test)]
#[path = "keyed_tests.rs"]
mod tests;
