//! Event-time updates: one event, an event list, key columns, and the per-call batch
//! protocol the pipeline operator drives.

use arrow_array::{Array, Int64Array};
use arrow_buffer::NullBuffer;

use super::{
    same_rows, EventKeys, KeyEvictionPolicy, KeyedWatermarkTracker, NIL, NO_TARGET,
    PREFETCH_INDEX_FROM,
};
use crate::error::{Result, TidemarkError};
use crate::key::{AsKey, KeyColumns, KeyRows, KeyTable, RowKey};
use crate::time::Watermark;

impl KeyedWatermarkTracker {
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
        let now = self.clock.now();
        self.begin_batch_at(now)
    }

    /// [`Self::begin_batch`] at the time `now` given by the caller (a pipeline whose
    /// idleness is measured in event time reads no clock).
    pub fn begin_batch_at(&mut self, now: i64) -> i64 {
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
        self.stale.clear();
        self.evict_from = None;
        self.pending_from = 0;
        self.stamp_unstamped(now);
        self.batch_now = now;
        self.batch_now
    }

    /// The slot of `key` in the batch being applied, inserting the key if new. When
    /// the tracker is full, the evicted key is one the batch has not touched
    /// (see [`Self::with_eviction_log`] to learn which).
    #[inline]
    pub fn batch_slot(&mut self, key: &[u8]) -> Result<u32> {
        self.slot_for_update::<true>(key, self.batch_now)
    }

    /// The slot of `key` if the tracker holds it (nothing is inserted or touched).
    #[inline]
    pub fn find_row(&self, key: RowKey<'_>) -> Option<u32> {
        self.keys.get_row(key, key.hash())
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
            // out of the minimum; least-recently-active eviction walks past the
            // batch's keys (see least_recently_active_slot), which keep their place in
            // the activity list until end_batch knows which of them made progress.
            // (Only a bounded tracker evicts: without max_keys the tree is left as it
            // was until settle() fixes it, one tree update instead of two. Nothing
            // reads the minimum during a batch.)
            if self.cfg.max_keys.is_some() {
                self.fix(s, None);
            }
            i
        }
    }

    /// The batch's `index`-th key had no progress in it (every row behind its own
    /// watermark as the batch began): its activity stays as it was, so rows that are
    /// late for the key keep it from going idle no more than silence does.
    pub fn batch_no_progress(&mut self, index: u32) {
        self.stale.push(index);
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
        (slot != NIL).then(|| (slot, before.saturating_sub(self.slot_delay(slot))))
    }

    /// The batch's `index`-th key's max event time as the batch began (`i64::MIN`:
    /// none yet), or `None` if that key was evicted during the batch.
    #[inline]
    pub fn batch_key_max(&self, index: u32) -> Option<i64> {
        let (slot, before) = self.pending[index as usize];
        (slot != NIL).then_some(before)
    }

    /// With keys' own delays ([`Self::with_key_delays`]): the delay the batch's
    /// `index`-th key aims at once the batch is applied. Its watermark then becomes
    /// `max(watermark as the batch began, max event time - target)`: a longer delay
    /// holds the watermark where it stood (never moving it back) until the key's
    /// events pass it, a shorter one moves it on at once.
    pub fn set_batch_delay(&mut self, index: u32, target: i64) {
        if self.delays.is_empty() {
            return;
        }
        let i = index as usize;
        if self.batch_targets.len() <= i {
            self.batch_targets
                .resize(self.pending.len().max(i + 1), NO_TARGET);
        }
        self.batch_targets[i] = target.max(0);
    }

    /// Applies the batch: per touched key (in order of first touch) the new max event
    /// time and activity; then recomputes the global watermark. Returns it if it rose
    /// to a new high.
    pub fn end_batch(&mut self) -> Option<Watermark> {
        let now = self.batch_now;
        let pending = std::mem::take(&mut self.pending);
        self.evict_from = None;
        self.pending_from = 0;
        let mut stale = vec![
            false;
            if self.stale.is_empty() {
                0
            } else {
                pending.len()
            }
        ];
        for &i in &self.stale {
            stale[i as usize] = true;
        }
        const AHEAD: usize = 8;
        for (i, &(slot, before)) in pending.iter().enumerate() {
            if let Some(&(next, _)) = pending.get(i + AHEAD) {
                if next != NIL {
                    self.active.prefetch(next as usize);
                    crate::prefetch_at(&self.cold, next as usize);
                }
            }
            if slot == NIL {
                continue;
            }
            let progress = !stale.get(i).copied().unwrap_or(false);
            if progress {
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
            let before = before.saturating_sub(self.slot_delay(slot));
            if let Some(&target) = self.batch_targets.get(i) {
                if target != NO_TARGET {
                    // The delay that leaves the watermark at max(before, max - target).
                    let max = self.keys[slot as usize].max_event;
                    let held = if before == i64::MIN {
                        target
                    } else {
                        max.saturating_sub(before)
                    };
                    self.delays[slot as usize] = held.min(target).max(0);
                }
            }
            // Without max_keys the tree was not touched when the batch took the key
            // (see batch_fold): the node over its pair was computed with `before` (or
            // lower, a lazy rise) for an active key, or (after a fix of the pair
            // during the batch) with the key out. A node not above `before` is at
            // most the key's new value, which is all a lazy rise needs
            // (NodeMinTree::fix_rise); a node above it (set while the key was out)
            // is fixed in full.
            let leaf =
                (self.cfg.max_keys.is_none() && !self.keys[slot as usize].idle).then_some(before);
            self.settle(slot, before, now, leaf, progress);
        }
        if self.cfg.max_keys.is_some()
            && self.cfg.eviction_policy == KeyEvictionPolicy::LeastRecentlyActive
        {
            // The batch's keys share one activity time: which of them is evicted first
            // later must not depend on the order of the batch's rows. They end the
            // activity list in the order of their encoded keys.
            let mut batch: Vec<u32> = pending
                .iter()
                .enumerate()
                .filter(|&(i, &(s, _))| s != NIL && !stale.get(i).copied().unwrap_or(false))
                .map(|(_, &(s, _))| s)
                .collect();
            batch.sort_unstable_by(|&a, &b| self.keys.key(a).cmp(&self.keys.key(b)));
            for slot in batch {
                self.move_to_back(slot);
            }
        }
        self.pending = pending;
        self.pending.clear();
        self.stale.clear();
        self.batch_targets.clear();
        self.recalc()
    }
}
