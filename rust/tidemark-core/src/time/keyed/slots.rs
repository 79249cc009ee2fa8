//! Key slots: construction, interning, activity order, eviction and expiry.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::{
    Cold, Eviction, Hot, KeyEvictionPolicy, KeyWatermarkState, KeyedTicks, KeyedWatermarkConfig,
    KeyedWatermarkMetrics, KeyedWatermarkTracker, NIL,
};
use crate::clock::{system_clock, ClockRef};
use crate::error::{Result, TidemarkError};
use crate::key::{KeyTable, RowKey};
use crate::time::{MinTree, NodeMinTree};

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
            stale: Vec::new(),
            batch_now: 0,
            evict_from: None,
            pending_from: 0,
            group_scratch: Vec::new(),
            hash_scratch: Vec::new(),
            event_scratch: Default::default(),
            eviction_log: None,
            idle_log: None,
            delays: Vec::new(),
            batch_targets: Vec::new(),
        }
    }

    /// Gives every key its own delay: `bounded_delay` when it is new, then as each
    /// batch that touches it sets ([`Self::set_batch_delay`]). For a fresh tracker.
    pub fn with_key_delays(mut self) -> Self {
        self.delays = vec![self.cfg.bounded_delay; self.cold.len().max(1)];
        self
    }

    /// Whether keys have their own delays ([`Self::with_key_delays`]).
    #[inline]
    pub fn has_key_delays(&self) -> bool {
        !self.delays.is_empty()
    }

    /// The delay of the key in `slot`: its watermark is its max event time minus it.
    #[inline]
    pub fn slot_delay(&self, slot: u32) -> i64 {
        Self::delay_in(&self.delays, self.cfg.bounded_delay, slot as usize)
    }

    #[inline(always)]
    fn delay_in(delays: &[i64], delay: i64, s: usize) -> i64 {
        if delays.is_empty() {
            delay
        } else {
            delays[s]
        }
    }

    /// Sets the delay of the settled key in `slot` (a restore): its watermark becomes
    /// its max event time minus `delay`. The global watermark is left as it was
    /// reported; [`Self::recalculate_global`] recomputes it.
    pub fn set_slot_delay(&mut self, slot: u32, delay: i64) {
        let s = slot as usize;
        if self.delays.is_empty() || self.keys.live(s).is_none() {
            return;
        }
        self.delays[s] = delay.max(0);
        self.fix(s, None);
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
    pub(super) fn wm_of(&self, slot: usize) -> i64 {
        self.keys[slot].max_event.saturating_sub(Self::delay_in(
            &self.delays,
            self.cfg.bounded_delay,
            slot,
        ))
    }

    /// Leaf `s` of the minimum tree: the key's watermark while it takes part in the
    /// global minimum, [`MinTree::EMPTY`] while it is idle, free, or being applied by
    /// a batch (`delays`, `delay`: the keys' delays, see [`Self::slot_delay`]).
    #[inline(always)]
    pub(super) fn leaf(keys: &KeyTable<Hot>, delays: &[i64], delay: i64, s: usize) -> i64 {
        match keys.live(s) {
            Some(h) if !h.idle && h.pending == NIL => {
                h.max_event.saturating_sub(Self::delay_in(delays, delay, s))
            }
            _ => MinTree::EMPTY,
        }
    }

    /// Restores the minimum tree after slot `s`'s leaf changed. `rose_from`: the value
    /// the tree held for the leaf, when the leaf only rose since (unless the key held
    /// the minimum, such a change writes no node, see [`NodeMinTree::fix_rise`]).
    #[inline]
    pub(super) fn fix(&mut self, s: usize, rose_from: Option<i64>) {
        let (keys, delays, delay) = (&self.keys, &self.delays, self.cfg.bounded_delay);
        let leaf = |i| Self::leaf(keys, delays, delay, i);
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
        if self.evict_from == Some(s) {
            self.evict_from = Some(n);
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

    pub(super) fn push_back(&mut self, s: u32) {
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

    pub(super) fn ensure_slot(&mut self, slot: u32) {
        let need = slot as usize + 1;
        if self.cold.len() < need {
            self.cold.resize(need, Cold::FREE);
        }
        if !self.delays.is_empty() {
            if self.delays.len() < need {
                self.delays.resize(need, self.cfg.bounded_delay);
            }
            // A slot freed by another key starts over at the configured delay.
            self.delays[slot as usize] = self.cfg.bounded_delay;
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
            let watermark = self.wm_of(v as usize);
            if let Some(log) = self.eviction_log.as_mut() {
                log.push(Eviction {
                    slot: v,
                    key: self.keys.key(v).to_vec(),
                    watermark,
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
        self.expire_older_than_at(ttl, now)
    }

    /// [`Self::expire_older_than`] at the time `now` given by the caller. Nothing
    /// expires at `i64::MIN` (a time that has not started).
    pub fn expire_older_than_at(&mut self, ttl: i64, now: i64) -> Vec<Eviction> {
        let mut out = Vec::new();
        if now == i64::MIN {
            return out;
        }
        self.stamp_unstamped(now);
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
    /// key was touched, the one the batch touched first). The batch's keys keep their
    /// place in the activity list until it ends: the search walks past them once per
    /// batch, going on from where the last one stopped.
    fn least_recently_active_slot(&mut self) -> Option<u32> {
        if self.pending.is_empty() {
            return (self.head != NIL).then_some(self.head);
        }
        let mut s = self.evict_from.unwrap_or(self.head);
        while s != NIL && self.in_batch(s) {
            s = self.cold[s as usize].next;
        }
        self.evict_from = Some(s);
        if s != NIL {
            return Some(s);
        }
        // Entries only ever turn NIL (a removed key), and new ones are appended: the
        // search goes on from where the last one stopped (a batch of new keys past
        // `max_keys` evicts its own first keys in one pass).
        let from = self.pending_from;
        let skip = self.pending[from..]
            .iter()
            .take_while(|&&(s, _)| s == NIL)
            .count();
        self.pending_from = from + skip;
        self.pending.get(self.pending_from).map(|&(s, _)| s)
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
        let (keys, delays, delay) = (&self.keys, &self.delays, self.cfg.bounded_delay);
        let active = self
            .active
            .argmin(|i| Self::leaf(keys, delays, delay, i))
            .map(|s| (self.wm_of(s), s as u32));
        match (idle, active) {
            (Some(i), Some(a)) => Some(if i.0 <= a.0 { i.1 } else { a.1 }),
            (Some(i), None) => Some(i.1),
            (None, Some(a)) => Some(a.1),
            (None, None) => None,
        }
    }

    pub(super) fn drop_slot(&mut self, slot: u32) -> KeyWatermarkState {
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

    pub(super) fn state_of(&self, s: usize) -> KeyWatermarkState {
        KeyWatermarkState {
            max_event_time: some(self.keys[s].max_event),
            watermark: some(self.wm_of(s)),
            last_activity: self.cold[s].last_activity,
            is_idle: self.keys[s].idle,
        }
    }

    /// Records activity and a new event time for `slot`. Does not recompute the global.
    #[inline]
    pub(super) fn apply(&mut self, slot: u32, event_time: i64, now: i64) {
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
        self.settle(slot, before, now, leaf, true);
    }

    /// Moves `slot` to the most recently active end of the activity list.
    #[inline]
    pub(super) fn move_to_back(&mut self, slot: u32) {
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
    pub(super) fn settle(
        &mut self,
        slot: u32,
        before: i64,
        now: i64,
        leaf: Option<i64>,
        progress: bool,
    ) {
        let s = slot as usize;
        if progress {
            self.cold[s].last_activity = now;
        }
        if progress && self.keys[s].idle {
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

    pub(super) fn slot_for_update<const FIX: bool>(&mut self, key: &[u8], now: i64) -> Result<u32> {
        self.slot_of::<FIX>(RowKey::Bytes(key), now)
    }

    /// The slot of `key`, inserted (activity at `now`) if new (`FIX`: see
    /// [`Self::insert_key`]).
    #[inline(always)]
    pub(super) fn slot_of<const FIX: bool>(&mut self, key: RowKey<'_>, now: i64) -> Result<u32> {
        self.slot_of_hashed::<FIX>(key, key.hash(), now)
    }

    /// [`Self::slot_of`] with the key's [`RowKey::hash`] at hand.
    #[inline(always)]
    pub(super) fn slot_of_hashed<const FIX: bool>(
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
}

/// A time, or `None` for the "none yet" mark `i64::MIN`.
fn some(t: i64) -> Option<i64> {
    (t != i64::MIN).then_some(t)
}
