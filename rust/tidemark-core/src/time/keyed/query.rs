//! Reading watermarks and lateness, and key idleness.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use arrow_array::{Array, BooleanArray, Int64Array};
use arrow_buffer::{BooleanBufferBuilder, NullBuffer};

use super::{
    same_rows, KeyEvictionPolicy, KeyWatermarkState, KeyedWatermarkMetrics, KeyedWatermarkTracker,
    NIL,
};
use crate::error::Result;
use crate::key::{AsKey, KeyBytes, KeyColumns, KeyRows};
use crate::time::{advance, combine, MinTree, Watermark};

impl KeyedWatermarkTracker {
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
        let delay = self.slot_delay(slot);
        let h = &mut self.keys[slot as usize];
        if h.idle {
            h.max_event = h.max_event.max(w.saturating_add(delay));
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

    /// Whether `slot` holds a key.
    pub fn holds_slot(&self, slot: u32) -> bool {
        self.keys.is_live(slot)
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
        let now = self.clock.now();
        self.check_idle_keys_at(now)
    }

    /// [`Self::check_idle_keys`] at the time `now` given by the caller. No key is idle
    /// at `i64::MIN` (a time that has not started).
    pub fn check_idle_keys_at(&mut self, now: i64) -> Option<Watermark> {
        let timeout = self.cfg.idle_timeout?;
        if now == i64::MIN {
            return None;
        }
        self.stamp_unstamped(now);
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

    /// Keys active before time started (activity `i64::MIN`: an event-time clock
    /// reads `i64::MIN` until the scope saw its first row) take its first reading
    /// `now` as their activity. They head the activity list (every later activity
    /// is at least `now`), so the list stays in order.
    pub(super) fn stamp_unstamped(&mut self, now: i64) {
        if now == i64::MIN {
            return;
        }
        let mut s = self.head;
        while s != NIL && self.cold[s as usize].last_activity == i64::MIN {
            self.cold[s as usize].last_activity = now;
            s = self.cold[s as usize].next;
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

    /// Bytes of the tracked keys themselves (see [`KeyTable::key_bytes`](crate::key::KeyTable::key_bytes)).
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
    pub(super) fn recalc(&mut self) -> Option<Watermark> {
        let m = self.active.min();
        self.global = combine((m != MinTree::EMPTY).then_some(m), || self.max_seen);
        if advance(&mut self.reported, self.global) {
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
}
