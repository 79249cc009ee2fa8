//! Ingest, the first half of a call: its rows bound, their event times parsed and
//! their keys resolved, each key's rows judged late or on time (`judge.rs`) and the
//! on-time rows folded into their windows' partial aggregates; then `complete`, the
//! second half, closes what the watermark passed.

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{Array, Int64Array, RecordBatch};
use arrow_schema::DataType;

use super::judge::{CallRows, KeyCall, Seen};
use super::order::{by_window_cell, rows_by_key, SKIP};
use super::watch::WatchCall;
use super::{
    n_aggs, partition_error, Agreement, Bounds, Emit, EmitMode, KeyRef, LatePolicy, LateRule,
    NullKeys, Operator, Output, Pending, PipelineConfig, Progress, Scope, Start, TimeMode, Top,
    DIRTY, EMITTED, NO_STATE, RETIME,
};
use crate::agg::{BoundAgg, Input};
use crate::batch::{error_batch, take_rows};
use crate::error::{Result, TidemarkError};
use crate::key::{KeyColumns, KeyRows};
use crate::time::parse_event_time;
use crate::window::{add_to_sessions, OpenWindow, SessionChange, WindowSpec};

impl Operator {
    /// Processes one batch. `parsed_times` (int64 epoch microseconds, one per row)
    /// replaces parsing the event-time column, for user-registered parsers.
    pub fn process(
        &mut self,
        batch: &RecordBatch,
        parsed_times: Option<&Int64Array>,
    ) -> Result<Output> {
        let pending = self.ingest(batch, parsed_times)?;
        self.complete(pending, None)
    }

    /// The first half of [`Self::process`]: judges and adds the rows, advances the
    /// operator's watermarks and records [`Self::progress`], but closes nothing.
    /// [`Self::complete`] finishes the call; between the two a coordinator combines the
    /// operators' progress into the watermark that closes their windows.
    pub fn ingest(
        &mut self,
        batch: &RecordBatch,
        parsed_times: Option<&Int64Array>,
    ) -> Result<Pending> {
        let Some(l) = self.lookup.clone() else {
            return self.ingest_rows(batch, parsed_times);
        };
        let (enriched, parsed, dropped) = l.enrich_input(batch, parsed_times)?;
        self.metrics.rows_unmatched += dropped as u64;
        self.metrics.rows_in += dropped as u64;
        self.ingest_rows(&enriched, parsed.as_ref())
    }

    pub(super) fn ingest_rows(
        &mut self,
        batch: &RecordBatch,
        parsed_times: Option<&Int64Array>,
    ) -> Result<Pending> {
        self.refuse_after_flush()?;
        self.ensure_bound(batch.schema_ref())?;
        let bound = self.bound.clone().expect("bound");
        let n = batch.num_rows();
        // Room for a new window per row beyond the free states (every row's, for
        // tumbling and session windows): grown by doubling instead, the state arrays
        // were copied into fresh pages again and again, a tenth of a large call.
        // Untouched capacity costs address space, not memory.
        let new_states = n.saturating_sub(self.free_states.len());
        self.accs.reserve(new_states * n_aggs(&self.cfg));
        self.flags.reserve(new_states);
        self.metrics.batches += 1;
        self.metrics.rows_in += n as u64;
        let mut errors: Vec<(usize, String)> = Vec::new();

        // 1. Event times (epoch microseconds), or the clock in processing-time mode.
        let times = self.event_times(batch, parsed_times, &bound, &mut errors)?;
        // The scope's event time as the call began: idleness (in event time) and the
        // bounds on event times are measured from it.
        let scope_time = self.scope_time();
        self.call_now = super::idle_reading(self.cfg.idleness, &self.clock, scope_time);
        let mut bad_row = vec![false; n];
        for &(r, _) in &errors {
            bad_row[r] = true;
        }
        let refused = match self.call_bounds(&times, scope_time) {
            Some(b) => b.judge(&self.cfg, &times, &mut bad_row, &mut errors),
            None => Default::default(),
        };

        // 2. Inputs of the aggregates, keys, partitions.
        let (inputs, keys) = bound.inputs_and_keys(batch)?;
        if self.cfg.null_keys == NullKeys::Error {
            null_key_errors(batch, &bound, &self.cfg.keys, &mut bad_row, &mut errors);
        }
        let parts = match bound.part_idx {
            Some(i) => Some(arrow_cast::cast(batch.column(i), &DataType::Int64)?),
            None => None,
        };
        let parts = parts.as_ref().map(|p| p.as_primitive::<Int64Type>());

        // 3. The watermark as it stood when the call began.
        let start = self.start_watermark();
        let judging = self.judging(start);
        self.marks.key_starts.clear();
        let watch = match self.watch.as_mut() {
            Some(w) => {
                let newest = self.marks.newest(self.scope.max_time().unwrap_or(i64::MIN));
                let spark = w.begin(newest);
                Some(WatchCall {
                    stream_time: newest,
                    spark_before: self.late_before(LateRule::Spark, spark),
                })
            }
            None => None,
        };

        let time_vals = times.values().clone();
        self.begin_call();
        if let Some(p) = parts {
            for (row, bad) in bad_row.iter_mut().enumerate() {
                if !*bad {
                    if let Some(reason) = partition_error(p, row) {
                        errors.push((row, reason));
                        *bad = true;
                    }
                }
            }
        }

        // Phase 1, per row: resolve the key (one hash lookup) and note the row's key
        // index in the batch.
        let group = self.resolve_keys(&keys, &time_vals, &bad_row, &mut errors)?;

        // Phase 2: order rows by key (counting sort on the batch key index), so each
        // key's windows are updated together while they are in cache. Each key's rows
        // in window order, unless the windows are sessions (whose merges are counted)
        // or an aggregate depends on the order of the rows: a new window then goes at
        // the end of the key's list instead of into the middle, and consecutive rows
        // share a window more often.
        let groups = self.keys.batch_len();
        let by_cell = match self.cfg.window.grid() {
            Some((step, origin)) if bound.aggs.iter().all(BoundAgg::order_free) => {
                by_window_cell(&group, &time_vals, step, origin)
            }
            _ => None,
        };
        let (starts, rows_by_key) = rows_by_key(&group, &time_vals, groups, by_cell);

        // Phase 3, per key: judge each row against the watermark as it stood when the
        // call began, then add the on-time rows to their windows.
        let mut seen = Seen {
            late_rows: Vec::new(),
            key_top: Top::default(),
            part_top: Vec::new(),
            part_max: Vec::new(),
            batch_max: i64::MIN,
        };
        for g in 0..groups {
            let from = starts[g] as usize;
            let rows = &rows_by_key[from..starts[g + 1] as usize];
            let key = KeyCall {
                g: g as u32,
                rows,
                ahead: &rows_by_key[from..],
            };
            let call = CallRows {
                judging: &judging,
                inputs: &inputs,
                aggs: &bound.aggs,
                parts,
                watch,
            };
            self.judge_key(key, &call, &mut seen, &mut errors);
        }
        if let Some(w) = self.watch.as_mut() {
            w.end();
        }
        let mut late_rows = std::mem::take(&mut seen.late_rows);
        late_rows.sort_unstable();
        crate::keep_scratch(&mut self.group_scratch, group);
        self.keys.end_batch();
        if self.keys.has_evictions() {
            self.evict_keys();
        }
        if let Some(ttl) = self.cfg.state_ttl {
            self.expire_keys(ttl);
        }

        // 4. Advance the watermarks with this batch's rows.
        let ahead_floor = refused.ahead_floor.filter(|_| seen.key_top.0.is_empty());
        self.advance_marks(start, seen, ahead_floor)?;
        Ok(Pending {
            batch: batch.clone(),
            late_rows,
            errors,
        })
    }

    /// A flushed operator takes no rows: refused before anything is counted or bound.
    fn refuse_after_flush(&self) -> Result<()> {
        if self.flushed {
            return Err(TidemarkError::config(
                "flush",
                "the operator was flushed (end of input: every window closed and was \
                 emitted); a flushed operator takes no more rows, so that no window \
                 comes out twice: build a new operator, or restore a snapshot taken \
                 before the flush",
            ));
        }
        Ok(())
    }

    /// A batch's event times as an operator of `cfg` reads them (null where a row has
    /// none), for a coordinator that judges a call's rows before its operators do (see
    /// `pipeline/bounds.rs`). Event time only.
    pub fn event_times_of(
        cfg: &PipelineConfig,
        batch: &RecordBatch,
        parsed: Option<&Int64Array>,
    ) -> Result<Int64Array> {
        if let Some(p) = parsed {
            return Ok(p.clone());
        }
        let bound = Self::bind(cfg, batch.schema_ref())?;
        let (_, ty) = bound.time_type.as_ref().expect("event time");
        let col = batch.column(bound.time_idx.expect("event time"));
        Ok(parse_event_time(col.as_ref(), *ty)?.values)
    }

    /// The call's event times (epoch microseconds; the clock's in processing-time
    /// mode): parsed here, or `parsed` by a user parser; a row without one is an error
    /// row.
    fn event_times(
        &self,
        batch: &RecordBatch,
        parsed: Option<&Int64Array>,
        bound: &super::bind::Binding,
        errors: &mut Vec<(usize, String)>,
    ) -> Result<Int64Array> {
        let n = batch.num_rows();
        Ok(match (self.cfg.time, parsed) {
            (TimeMode::Processing, _) => {
                let now = self.clock.now().saturating_mul(1_000);
                Int64Array::from_value(now, n)
            }
            (TimeMode::Event, Some(p)) => {
                if p.len() != n {
                    return Err(TidemarkError::config(
                        "event_time",
                        format!("{} parsed event times for {n} rows", p.len()),
                    ));
                }
                for i in 0..n {
                    if p.is_null(i) {
                        errors.push((i, "event time is null or could not be parsed".into()));
                    }
                }
                p.clone()
            }
            (TimeMode::Event, None) if self.cfg.parsed_externally => {
                return Err(TidemarkError::config(
                    "event_time",
                    "this pipeline parses event times outside the core: pass parsed times",
                ));
            }
            (TimeMode::Event, None) => {
                let (_, ty) = bound.time_type.as_ref().expect("event mode");
                let parsed = parse_event_time(
                    batch.column(bound.time_idx.expect("event mode")).as_ref(),
                    *ty,
                )?;
                errors.extend(parsed.errors);
                parsed.values
            }
        })
    }

    /// The bounds on the call's event times (see `pipeline/bounds.rs`): given by a
    /// coordinator holding the whole call, else from the scope's event time
    /// (`scope_time`) and the wall clock, or, before the scope has an event time and
    /// where this operator holds the whole call, from its rows (`times`).
    fn call_bounds(&self, times: &Int64Array, scope_time: i64) -> Option<Bounds> {
        let ext = self.marks.external;
        if ext.bounds.is_some() {
            return ext.bounds;
        }
        let driven = ext.watermark != Start::Own;
        let wall = ext.wall.or_else(|| {
            self.clock
                .is_wall()
                .then(|| self.clock.now().saturating_mul(1_000))
        });
        if scope_time == i64::MIN && !driven {
            return Bounds::of_rows(&self.cfg, times, None, wall);
        }
        Bounds::of_stream(
            &self.cfg,
            (scope_time != i64::MIN).then_some(scope_time),
            wall,
        )
    }

    /// The per-call scratch emptied, and the key table told a call begins.
    fn begin_call(&mut self) {
        self.touched.clear();
        self.emits.clear();
        self.owned_keys.clear();
        self.release.clear();
        self.epoch = self.epoch.wrapping_add(1);
        if self.epoch == 0 {
            self.touch_epoch.iter_mut().for_each(|e| *e = 0);
            self.epoch = 1;
        }
        self.keys.begin_batch_at(self.call_now);
    }

    /// Each row's key index in the batch (`SKIP`: an error row), its key resolved (one
    /// hash lookup) and its event time folded into the key's watermark. A key that
    /// `max_keys` refuses makes its rows error rows; another failure ends the call.
    fn resolve_keys(
        &mut self,
        keys: &KeyColumns,
        time_vals: &[i64],
        bad_row: &[bool],
        errors: &mut Vec<(usize, String)>,
    ) -> Result<Vec<u32>> {
        let n = bad_row.len();
        let mut fatal: Option<TidemarkError> = None;
        let mut group = std::mem::take(&mut self.group_scratch);
        if !self.keys.may_evict(n) {
            // No key can be evicted by this batch: all lookups, then all folds.
            let fatal_cell = std::cell::RefCell::new(None);
            self.keys.batch_fold_rows(
                keys,
                time_vals,
                |row| bad_row[row] || fatal_cell.borrow().is_some(),
                |row, e| match e {
                    TidemarkError::MaxKeysReached { .. }
                    | TidemarkError::KeyTooLong { .. }
                    | TidemarkError::Config { .. } => errors.push((row, e.to_string())),
                    e => {
                        fatal_cell.borrow_mut().get_or_insert(e);
                    }
                },
                &mut group,
            );
            fatal = fatal_cell.into_inner();
        } else {
            group.clear();
            group.resize(n, SKIP);
            // Keys the state holds first: taken by the batch, none of them is evicted
            // for the batch's new keys (whatever the order of the rows), which come
            // second and evict the least recently active keys the batch has not.
            keys.for_each_row_key(|row, key| {
                if !bad_row[row] {
                    if let Some(slot) = self.keys.find_row(key) {
                        group[row] = self.keys.batch_fold(slot, time_vals[row]);
                    }
                }
            });
            keys.for_each_row_key(|row, key| {
                if fatal.is_some() || bad_row[row] || group[row] != SKIP {
                    return;
                }
                let slot = match self.keys.batch_slot_row(key) {
                    Ok(s) => s,
                    Err(
                        e @ (TidemarkError::MaxKeysReached { .. }
                        | TidemarkError::KeyTooLong { .. }
                        | TidemarkError::Config { .. }),
                    ) => {
                        errors.push((row, e.to_string()));
                        return;
                    }
                    Err(e) => {
                        fatal = Some(e);
                        return;
                    }
                };
                if self.keys.has_evictions() {
                    self.evict_keys();
                }
                group[row] = self.keys.batch_fold(slot, time_vals[row]);
            });
        }
        if let Some(e) = fatal {
            crate::keep_scratch(&mut self.group_scratch, group);
            self.keys.end_batch();
            return Err(e);
        }
        Ok(group)
    }

    /// The call's progress recorded (what its keys agree on, `seen`; its on-time
    /// rows' largest event time; see [`Progress`]) and this operator's watermarks
    /// advanced with it; the call began at `start`.
    fn advance_marks(&mut self, start: i64, seen: Seen, ahead_floor: Option<i64>) -> Result<()> {
        if self.cfg.scope == Scope::Key {
            self.keys.check_idle_keys_at(self.call_now);
        }
        let some = |t: i64| (t != i64::MIN).then_some(t);
        let (lowest_active, highest) = self.keys.global_parts();
        self.progress = Progress {
            keys: Agreement {
                time: seen.key_top,
                partitions: seen
                    .part_top
                    .into_iter()
                    .enumerate()
                    .filter(|(_, top)| !top.0.is_empty())
                    .map(|(p, top)| (p as u32, top))
                    .collect(),
            },
            partition_max: seen
                .part_max
                .iter()
                .enumerate()
                .filter(|&(_, &t)| t != i64::MIN)
                .map(|(p, &t)| (p as u32, t))
                .collect(),
            key_global: match self.cfg.scope {
                Scope::Key => self.keys.global_watermark().map(|w| w.timestamp()),
                _ => None,
            },
            on_time_max: some(seen.batch_max),
            key_parts: (lowest_active, some(highest)),
            ahead_floor,
        };
        let own_close = self.scope.advance([&self.progress])?;
        self.marks.ingested(start, own_close.unwrap_or(i64::MIN));
        Ok(())
    }

    /// The second half of [`Self::process`]: closes what the watermark passed and
    /// builds the output. `close`: the watermark that closes windows, combined by a
    /// coordinator over every operator of the scope (global and partition scope; idle
    /// keys' windows in key scope); `None`: this operator's own (see
    /// `pipeline/marks.rs`).
    pub fn complete(&mut self, pending: Pending, close: Option<i64>) -> Result<Output> {
        let Pending {
            batch,
            late_rows,
            mut errors,
        } = pending;
        let batch = &batch;
        let bound = self.bound.clone().expect("bound by ingest");
        // 5. Close what the watermark passed; emit.
        self.close_windows(close);
        self.marks.completed();
        self.metrics.late_dropped_count += late_rows.len() as u64;
        errors.sort_by_key(|e| e.0);
        self.metrics.rows_error += errors.len() as u64;
        let windows = self.build_windows(&bound)?;
        let late = if self.cfg.late == LatePolicy::SideOutput {
            take_rows(batch, &late_rows)?
        } else {
            take_rows(batch, &[])?
        };
        let errors = error_batch(batch, &errors)?;
        Ok(Output {
            windows,
            late,
            errors,
        })
    }

    /// Adds one on-time row to its windows. Returns `(lo, hi, state)`: later rows of
    /// the key with `lo <= ts < hi` fall in the same single window, whose state is
    /// `state` (an empty range for sliding windows).
    #[inline]
    pub(super) fn add_row(
        &mut self,
        slot: u32,
        ts: i64,
        row: usize,
        inputs: &[Input],
        aggs: &[BoundAgg],
    ) -> std::result::Result<(i64, i64, u32), &'static str> {
        let n = aggs.len();
        if self.wins.len() <= slot as usize {
            self.wins.resize_with(slot as usize + 1, Vec::new);
        }
        if self.touch_epoch.len() <= slot as usize {
            self.touch_epoch.resize(slot as usize + 1, 0);
        }
        if self.touch_epoch[slot as usize] != self.epoch {
            self.touch_epoch[slot as usize] = self.epoch;
            self.touched.push(slot);
        }
        match self.cfg.window {
            WindowSpec::Session { gap } => {
                let end = ts
                    .checked_add(gap)
                    .ok_or("event time out of range for the window")?;
                let (accs, flags, free, wins) = (
                    &mut self.accs,
                    &mut self.flags,
                    &mut self.free_states,
                    &mut self.wins,
                );
                let list = &mut wins[slot as usize];
                let change =
                    add_to_sessions(list, ts, end, || Self::alloc_state(accs, flags, free, aggs));
                let (idx, old, merged) = match change {
                    SessionChange::Created(i) => {
                        let st = list[i].state as usize;
                        self.flags[st] |= RETIME;
                        (i, None, Vec::new())
                    }
                    SessionChange::Inside(i) => (i, None, Vec::new()),
                    SessionChange::Grown { index, old, merged } => (index, Some(old), merged),
                };
                let survivor = self.wins[slot as usize][idx];
                let st = survivor.state as usize;
                if let Some((os, oe)) = old {
                    // The session moved: its timer is re-added at the end of the call;
                    // the old one (and those of merged sessions) go stale.
                    self.flags[st] |= RETIME;
                    if self.flags[st] & EMITTED != 0 {
                        // Retract the emitted bounds once: a second move in the same
                        // call must not retract bounds that were never emitted.
                        self.flags[st] &= !EMITTED;
                        self.retract(slot, os, oe);
                    }
                    for m in &merged {
                        if self.flags[m.state as usize] & EMITTED != 0 {
                            self.retract(slot, m.start, m.end);
                        }
                        for j in 0..n {
                            let other = self.accs[m.state as usize * n + j].clone();
                            self.accs[st * n + j].merge(&other);
                        }
                        self.free_states.push(m.state);
                        self.metrics.sessions_merged += 1;
                    }
                }
                for (j, input) in inputs.iter().enumerate() {
                    self.accs[st * n + j].update(input, row, ts);
                }
                self.flags[st] |= DIRTY;
                // A later event `t` stays inside the session while `t + gap <= end`.
                let survivor = self.wins[slot as usize][idx];
                Ok((
                    survivor.start,
                    survivor.end.saturating_sub(gap).saturating_add(1),
                    survivor.state,
                ))
            }
            WindowSpec::Tumbling { size, offset } => {
                let start = ts
                    .checked_sub(offset)
                    .and_then(|r| r.div_euclid(size).checked_mul(size))
                    .and_then(|s| s.checked_add(offset))
                    .ok_or("event time out of range for the window")?;
                let end = start
                    .checked_add(size)
                    .ok_or("event time out of range for the window")?;
                let st = self.add_to_window(slot, start, end, ts, row, inputs, aggs);
                Ok((start, end, st))
            }
            spec => {
                let mut ws = std::mem::take(&mut self.scratch_windows);
                ws.clear();
                let r = spec.assign(ts, |s, e| ws.push((s, e)));
                if r.is_ok() {
                    for &(start, end) in &ws {
                        // A closed window takes no more rows (the row is in an open
                        // one, or late).
                        if end > self.row_closed {
                            self.add_to_window(slot, start, end, ts, row, inputs, aggs);
                        }
                    }
                }
                self.scratch_windows = ws;
                r?;
                Ok((i64::MAX, i64::MIN, NO_STATE))
            }
        }
    }

    /// Adds a row to the tumbling or sliding window `[start, end)` of `slot`.
    #[inline]
    #[allow(clippy::too_many_arguments)]
    fn add_to_window(
        &mut self,
        slot: u32,
        start: i64,
        end: i64,
        ts: i64,
        row: usize,
        inputs: &[Input],
        aggs: &[BoundAgg],
    ) -> u32 {
        let n = aggs.len();
        let list = &mut self.wins[slot as usize];
        // Windows are few per key and sorted by start; rows mostly hit the last one.
        let pos = match list.last() {
            Some(w) if w.start == start => list.len() - 1,
            Some(w) if w.start < start => list.len(),
            _ => list.partition_point(|w| w.start < start),
        };
        let state = if pos < list.len() && list[pos].start == start {
            list[pos].state
        } else {
            let st =
                Self::alloc_state(&mut self.accs, &mut self.flags, &mut self.free_states, aggs);
            self.wins[slot as usize].insert(
                pos,
                OpenWindow {
                    start,
                    end,
                    state: st,
                },
            );
            self.flags[st as usize] |= RETIME;
            st
        };
        let base = state as usize * n;
        for (j, input) in inputs.iter().enumerate() {
            self.accs[base + j].update(input, row, ts);
        }
        self.flags[state as usize] |= DIRTY;
        state
    }

    fn retract(&mut self, slot: u32, start: i64, end: i64) {
        if self.cfg.emit == EmitMode::OnUpdate {
            self.owned_keys.push(self.keys.slot_key(slot).to_vec());
            self.emits.push(Emit {
                key: KeyRef::Copied((self.owned_keys.len() - 1) as u32),
                start,
                end,
                state: NO_STATE,
                retract: true,
            });
        }
    }
}

/// Rows whose key (any key column) is null become error rows naming the column
/// (`null_keys="error"`).
fn null_key_errors(
    batch: &RecordBatch,
    bound: &super::bind::Binding,
    names: &[String],
    bad: &mut [bool],
    errors: &mut Vec<(usize, String)>,
) {
    for (&i, name) in bound.key_idx.iter().zip(names) {
        let Some(nulls) = batch.column(i).logical_nulls() else {
            continue;
        };
        if nulls.null_count() == 0 {
            continue;
        }
        for (row, b) in bad.iter_mut().enumerate() {
            if !*b && nulls.is_null(row) {
                *b = true;
                errors.push((
                    row,
                    format!(
                        "key column {name:?} is null (null_keys=\"error\"; \"group\" keeps \
                         such rows as one key)"
                    ),
                ));
            }
        }
    }
}
