//! Closing windows: the event-time timers, the late rules' thresholds, key
//! eviction and expiry, and the calls that close without rows (tick, flush).

use std::collections::BTreeMap;

use arrow_array::RecordBatch;

use super::floors::FloorSketch;
use super::marks::NOT_PENDING;
use super::{
    Emit, EmitMode, KeyRef, LateRule, Operator, Output, PipelineMetrics, Scope, TimeMode, DIRTY,
    EMITTED, RETIME, UNRESOLVED,
};
use crate::error::Result;
use crate::window::{OpenWindow, WindowSpec};

/// Open windows by close time (`end + allowed_lateness`), so a watermark closes them
/// in order. These are the pipeline's event-time timers: one per window (per key scope:
/// only for idle keys, whose windows close on the global watermark). Entries are
/// never deleted eagerly: a timer whose window merged, moved or closed is stale and
/// is ignored when it fires ([`Operator::close_window`] checks it).
#[derive(Debug, Clone, Default)]
pub(crate) struct CloseIndex {
    pub(super) buckets: BTreeMap<i64, Vec<(u32, i64)>>,
    pub(super) len: usize,
}

impl CloseIndex {
    #[inline]
    pub(super) fn add(&mut self, at: i64, slot: u32, start: i64) {
        self.buckets.entry(at).or_default().push((slot, start));
        self.len += 1;
    }

    /// Removes and returns every timer with `at <= w`, in time order.
    fn pop_until(&mut self, w: i64) -> Vec<(i64, u32, i64)> {
        let mut out = Vec::new();
        while let Some(entry) = self.buckets.first_entry() {
            if *entry.key() > w {
                break;
            }
            let (at, items) = entry.remove_entry();
            self.len -= items.len();
            out.extend(items.into_iter().map(|(slot, start)| (at, slot, start)));
        }
        out
    }

    fn clear(&mut self) {
        self.buckets.clear();
        self.len = 0;
    }
}

/// Counts `n` windows (sessions when `session`) closed by timer or by watermark.
fn count_closed(metrics: &mut PipelineMetrics, session: bool, by_timer: bool, n: u64) {
    *match (by_timer, session) {
        (true, true) => &mut metrics.sessions_closed_by_timer,
        (false, true) => &mut metrics.sessions_closed_by_watermark,
        (true, false) => &mut metrics.windows_closed_by_timer,
        (false, false) => &mut metrics.windows_closed_by_watermark,
    } += n;
}

/// A closed window `w` of `key`: its row is emitted (when `emit`, i.e. on window
/// close) and its state released at the end of the call.
fn push_closed_to(
    emits: &mut Vec<Emit>,
    release: &mut Vec<u32>,
    metrics: &mut PipelineMetrics,
    emit: bool,
    key: KeyRef,
    w: OpenWindow,
) {
    if emit {
        metrics.windows_emitted += 1;
        emits.push(Emit {
            key,
            start: w.start,
            end: w.end,
            state: w.state,
            retract: false,
        });
    }
    release.push(w.state);
}

impl Operator {
    pub(super) fn close_at(&self, end: i64) -> i64 {
        end.saturating_add(self.cfg.allowed_lateness)
    }

    /// The late rule in force (processing time: no row is late, and windows close as
    /// soon as the clock passes them).
    pub(super) fn rule(&self) -> LateRule {
        match self.cfg.time {
            TimeMode::Processing => LateRule::Flink,
            TimeMode::Event => self.cfg.late_rule,
        }
    }

    /// The watermark a call begins with (see [`Marks::start`]).
    pub(super) fn start_watermark(&self) -> i64 {
        let own = self.scope.current().unwrap_or(i64::MIN);
        self.marks.start(&self.cfg.scope, own)
    }

    /// The key's closing mark to keep in a snapshot (`NOT_PENDING`: its watermark).
    pub(super) fn snapshot_mark(&self, slot: u32) -> i64 {
        self.marks.key_closed(slot, NOT_PENDING)
    }

    /// The earliest event time whose windows are not all closed, when every window
    /// with `end <= closed` is: rows before it are late (Flink's sessions: unless they
    /// merge into an open session). The per-row rule: `closed` itself.
    pub(super) fn late_before(&self, rule: LateRule, closed: i64) -> i64 {
        if closed == i64::MIN || rule == LateRule::Row {
            return closed;
        }
        let align = |v: i64, step: i64, origin: i64| {
            v.checked_sub(origin)
                .and_then(|r| r.div_euclid(step).checked_mul(step))
                .and_then(|s| s.checked_add(origin))
        };
        let t = match self.cfg.window {
            // The window holding `closed` is open: rows before its start are late.
            WindowSpec::Tumbling { size, offset } => align(closed, size, offset),
            // A row's latest window starts at its slide; all its windows are closed
            // when that one ends at or before `closed`.
            WindowSpec::Sliding {
                size,
                slide,
                offset,
            } => closed
                .checked_sub(size)
                .and_then(|v| align(v, slide, offset))
                .and_then(|s| s.checked_add(slide)),
            // A row's own session `[ts, ts + gap)` is closed when `ts + gap <= closed`.
            WindowSpec::Session { gap } => closed.checked_sub(gap).map(|v| v + 1),
            WindowSpec::Rows { .. } => Some(i64::MIN),
        };
        t.unwrap_or(i64::MIN)
    }

    /// Drops keys untouched for longer than `state_ttl`; their open windows close
    /// early (emitted in `on_window_close` mode), as for eviction.
    pub(super) fn expire_keys(&mut self, ttl: i64) {
        let expired = self.keys.expire_older_than_at(ttl, self.call_now);
        self.metrics.keys_expired += expired.len() as u64;
        if !expired.is_empty() {
            // A key dropped after its rows were judged sets no closing mark for the
            // next call: that would hold for whichever key takes its slot.
            let keys = &self.keys;
            self.marks
                .key_starts
                .retain(|&(slot, _)| keys.holds_slot(slot));
        }
        let before = self.metrics.windows_evicted;
        self.close_dropped(expired);
        let n = self.metrics.windows_evicted - before;
        self.metrics.windows_evicted = before;
        self.metrics.windows_expired += n;
    }

    /// Closes the windows of keys evicted because of `max_keys` (emitting them).
    pub(super) fn evict_keys(&mut self) {
        let evicted = self.keys.drain_evictions();
        self.close_dropped(evicted);
    }

    /// Closes the windows of keys dropped from the tracker, and remembers each key's floor (the end of the last window it emitted; per key
    /// also its lateness threshold), so that a returning key reopens none of them.
    fn close_dropped(&mut self, dropped: Vec<crate::time::Eviction>) {
        let width = FloorSketch::width_for(self.cfg.max_keys);
        if self.floors.is_empty() && !dropped.is_empty() {
            // The keys held now were never forgotten: no floor (a key that comes
            // later, in a new slot or one freed here, is looked up).
            self.slot_floor.clear();
            self.slot_floor.resize(self.keys.slot_bound(), i64::MIN);
        }
        for e in dropped {
            let slot = e.slot as usize;
            // The slot goes to another key (or this one, back): its floor is looked up.
            if let Some(f) = self.slot_floor.get_mut(slot) {
                *f = UNRESOLVED;
            }
            self.marks.drop_key(e.slot);
            if let Some(l) = self.lateness.as_mut() {
                l.reset(e.slot);
            }
            if let Some(w) = self.watch.as_mut() {
                w.reset(e.slot);
            }
            let list = self
                .wins
                .get_mut(slot)
                .map(std::mem::take)
                .unwrap_or_default();
            let mut floor = list.iter().map(|w| w.end).max().unwrap_or(i64::MIN);
            if self.cfg.scope == Scope::Key {
                floor = floor.max(e.watermark.saturating_sub(self.cfg.allowed_lateness));
            }
            // The sessions it closed before, too (their slot goes to another key).
            floor = floor.max(self.closed_session_end(e.slot));
            if let Some(end) = self.session_end.get_mut(slot) {
                *end = i64::MIN;
            }
            self.floors.insert(&e.key, floor, width);
            if list.is_empty() {
                continue;
            }
            self.owned_keys.push(e.key);
            let key = KeyRef::Copied((self.owned_keys.len() - 1) as u32);
            for w in list {
                self.metrics.windows_evicted += 1;
                self.push_closed(key, w);
            }
        }
    }

    /// A window closed: `on_window_close` emits its final value; either way its state
    /// is released once the output is built.
    fn push_closed(&mut self, key: KeyRef, w: OpenWindow) {
        let emit = self.cfg.emit == EmitMode::OnWindowClose;
        push_closed_to(
            &mut self.emits,
            &mut self.release,
            &mut self.metrics,
            emit,
            key,
            w,
        );
    }

    fn close_window(&mut self, slot: u32, start: i64, close_at: i64, by_timer: bool) -> bool {
        let Some(list) = self.wins.get_mut(slot as usize) else {
            return false;
        };
        let Some(pos) = list.iter().position(|w| w.start == start) else {
            return false;
        };
        let w = list[pos];
        if w.end.saturating_add(self.cfg.allowed_lateness) != close_at {
            return false; // stale timer: the session moved
        }
        list.remove(pos);
        count_closed(&mut self.metrics, self.cfg.window.is_session(), by_timer, 1);
        self.note_closed_session(slot, w.end);
        self.push_closed(KeyRef::Slot(slot), w);
        true
    }

    /// The end of the last session the key in `slot` closed (`i64::MIN`: none, or
    /// not kept: see [`PipelineConfig::keeps_session_ends`](super::PipelineConfig)).
    pub(super) fn closed_session_end(&self, slot: u32) -> i64 {
        self.session_end
            .get(slot as usize)
            .copied()
            .unwrap_or(i64::MIN)
    }

    /// A session of the key in `slot` ending at `end` closed: rows that would merge
    /// into it are late from now on (per key or partition).
    fn note_closed_session(&mut self, slot: u32, end: i64) {
        if !self.cfg.keeps_session_ends() {
            return;
        }
        let s = slot as usize;
        if self.session_end.len() <= s {
            self.session_end.resize(s + 1, i64::MIN);
        }
        self.session_end[s] = self.session_end[s].max(end);
    }

    pub(super) fn close_windows(&mut self, combined: Option<i64>) {
        let key_scope = self.cfg.scope == Scope::Key;
        for i in 0..self.touched.len() {
            let slot = self.touched[i];
            let Some(list) = self.wins.get(slot as usize) else {
                continue;
            };
            for w in list.iter().copied() {
                let f = &mut self.flags[w.state as usize];
                // (Re)add the timers of new or moved windows (key scope: only idle keys
                // need timers, see below; a key stays idle through rows that were no
                // progress for it).
                if *f & RETIME != 0 {
                    *f &= !RETIME;
                    if !key_scope || self.keys.slot_is_idle(slot) {
                        let at = w.end.saturating_add(self.cfg.allowed_lateness);
                        self.timers.add(at, slot, w.start);
                    }
                }
                if *f & DIRTY != 0 {
                    *f &= !DIRTY;
                    if self.cfg.emit == EmitMode::OnUpdate {
                        *f |= EMITTED;
                        self.metrics.updates_emitted += 1;
                        self.emits.push(Emit {
                            key: KeyRef::Slot(slot),
                            start: w.start,
                            end: w.end,
                            state: w.state,
                            retract: false,
                        });
                    }
                }
            }
        }
        if key_scope && self.rule() == LateRule::Spark {
            // Spark's rule: a key's windows close at the watermark the call began
            // with, so the keys whose watermark moved in the previous call close now
            // (at their current watermark, unless they have rows in this call), and
            // this call's keys close at their starting one and stay pending.
            let mut deferred = std::mem::take(&mut self.marks.deferred);
            for &slot in &deferred {
                let live = self.marks.key_live(slot);
                // A key with rows in this call closes below, at its starting
                // watermark (the same value).
                if live && self.touch_epoch.get(slot as usize) != Some(&self.epoch) {
                    let wk = self.keys.slot_watermark(slot);
                    self.close_key_prefix(slot, wk);
                }
            }
            deferred.clear();
            let starts = std::mem::take(&mut self.marks.key_starts);
            self.marks.reserve_keys(self.wins.len());
            for &(slot, wk) in &starts {
                self.close_key_prefix(slot, wk);
                let now = self.keys.slot_watermark(slot);
                if now == wk {
                    continue; // not moved: its windows are closed at its watermark
                }
                self.marks.set_key(slot, wk);
                // What the key's watermark passed in this call closes in the next (a
                // key whose rows were all late may have no window list yet).
                if self
                    .wins
                    .get(slot as usize)
                    .and_then(|w| w.first())
                    .is_some_and(|w| self.close_at(w.end) <= now)
                {
                    deferred.push(slot);
                }
            }
            self.marks.deferred = deferred;
            self.marks.key_starts = starts;
        } else if key_scope {
            // Each touched key's windows close on the key's own watermark.
            for i in 0..self.touched.len() {
                let slot = self.touched[i];
                let wk = self.keys.slot_watermark(slot);
                self.close_key_prefix(slot, wk);
            }
        }
        if key_scope {
            // Keys that went idle: their windows now close on the global watermark.
            for slot in self.keys.drain_idle() {
                if let Some(list) = self.wins.get(slot as usize) {
                    for w in list {
                        self.timers.add(
                            w.end.saturating_add(self.cfg.allowed_lateness),
                            slot,
                            w.start,
                        );
                    }
                }
            }
        }
        let w = self.marks.close(self.rule(), &self.cfg.scope, combined);
        for (at, slot, start) in self.timers.pop_until(w) {
            // Per key, the global watermark closes the windows of idle keys only: a key
            // that sent rows again closes its windows on its own watermark (its timers
            // from while it was idle are stale, as after a restore, which sets timers
            // for idle keys alone).
            if key_scope && !self.keys.slot_is_idle(slot) {
                continue;
            }
            if self.close_window(slot, start, at, true) && key_scope {
                // An idle key's window closed on the global watermark: the key's rows
                // in it are late when it comes back, not a reopened window.
                self.keys.raise_idle_watermark(slot, at);
                self.marks.raise_key(slot, at);
            }
        }
    }

    /// Closes the windows of the key in `slot` that the watermark `wk` passed. The
    /// key's windows are ordered by start and by end alike (sessions do not overlap):
    /// those are a prefix, closed at once (one move of the rest of the list, not one
    /// per window).
    fn close_key_prefix(&mut self, slot: u32, wk: i64) {
        let Some(list) = self.wins.get(slot as usize) else {
            return;
        };
        let k = list
            .iter()
            .take_while(|w| self.close_at(w.end) <= wk)
            .count();
        if k == 0 {
            return;
        }
        count_closed(
            &mut self.metrics,
            self.cfg.window.is_session(),
            false,
            k as u64,
        );
        // Sessions of a key do not overlap: the last of the prefix ends last.
        let last_end = list[k - 1].end;
        self.note_closed_session(slot, last_end);
        let emit = self.cfg.emit == EmitMode::OnWindowClose;
        for w in self.wins[slot as usize].drain(..k) {
            push_closed_to(
                &mut self.emits,
                &mut self.release,
                &mut self.metrics,
                emit,
                KeyRef::Slot(slot),
                w,
            );
        }
    }

    /// The floor of the key in `slot` (looked up once per key: see [`floors`]).
    pub(super) fn floor_of(&mut self, slot: u32) -> i64 {
        let s = slot as usize;
        if self.slot_floor.len() <= s {
            self.slot_floor.resize(s + 1, UNRESOLVED);
        }
        if self.slot_floor[s] == UNRESOLVED {
            self.slot_floor[s] = self.floors.floor(&self.keys.slot_key(slot));
        }
        self.slot_floor[s]
    }

    /// A call without rows: idleness and processing time move on with the clock, and
    /// windows close as an empty batch would close them. It reads the schema of the
    /// latest batch, or after a restore the input fields stored in the snapshot (so a
    /// restored operator's windows close without waiting for a batch); before either
    /// there is nothing to close ([`Output::nothing`]).
    pub fn tick(&mut self) -> Result<Output> {
        let Some(b) = &self.bound else {
            return Ok(Output::nothing());
        };
        // The bound schema is the batch after any lookup join: no second join.
        let empty = RecordBatch::new_empty(b.input.clone());
        let parsed = self.cfg.no_parsed_times();
        let pending = self.ingest_rows(&empty, parsed.as_ref())?;
        self.complete(pending, None)
    }

    /// Closes every open window (end of input). In `on_window_close` mode their final
    /// values are returned; in `on_update` mode every value was emitted already.
    pub fn flush(&mut self) -> Result<Output> {
        self.emits.clear();
        self.owned_keys.clear();
        self.release.clear();
        self.flushed = true;
        self.marks.clear_keys();
        let Some(bound) = self.bound.clone() else {
            return Ok(Output::nothing());
        };
        for slot in 0..self.wins.len() as u32 {
            let list = std::mem::take(&mut self.wins[slot as usize]);
            for w in list {
                self.metrics.windows_flushed += 1;
                self.push_closed(KeyRef::Slot(slot), w);
            }
        }
        self.timers.clear();
        let windows = self.build_windows(&bound)?;
        let (late, errors) = bound.no_rejects()?;
        Ok(Output {
            windows,
            late,
            errors,
        })
    }
}
