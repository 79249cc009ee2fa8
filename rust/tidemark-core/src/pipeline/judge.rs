//! Judging a call's rows, key by key: against the watermark as the call began (the
//! key's own per key, the scope's otherwise, the previous call's under Spark's rule),
//! late or on time, and the on-time rows added to their windows.

use arrow_array::Int64Array;

use super::watch::{RowSeen, WatchCall};
use super::{LateRule, Operator, Scope, Top};
use crate::agg::{BoundAgg, Input};
use crate::window::WindowSpec;

impl Operator {
    /// What the call's rows are judged by, as it begins at `start`.
    pub(super) fn judging(&self, start: i64) -> Judging {
        let rule = self.rule();
        let lateness = self.cfg.allowed_lateness;
        // The watermark rows are judged against (Spark's rule: the previous call's,
        // whose windows are the closed ones). Global and partition scope: every window
        // with `end` at or before it, less the lateness, is closed (per key: each
        // key's own).
        let judged = self.marks.judged(rule, start);
        let session = self.cfg.window.is_session();
        Judging {
            rule,
            lateness,
            key_scope: self.cfg.scope == Scope::Key,
            spark: rule == LateRule::Spark,
            scope_closed: judged.saturating_sub(lateness),
            session,
            flink_sessions: rule == LateRule::Flink && session,
        }
    }

    /// One key's rows of the call: each judged against the watermark as the call
    /// began (the key's own per key), the on-time ones added to their windows.
    pub(super) fn judge_key(
        &mut self,
        key: KeyCall<'_>,
        call: &CallRows<'_>,
        seen: &mut Seen,
        errors: &mut Vec<(usize, String)>,
    ) {
        const AHEAD: usize = 16;
        let j = call.judging;
        let na = call.aggs.len();
        let Some((slot, wm)) = self.keys.batch_key(key.g) else {
            for &(_, row) in key.rows {
                errors.push((row as usize, "max_keys reached: the key was evicted while its batch was processed (max_keys is smaller than the keys of one batch)".into()));
            }
            return;
        };
        let late_from = seen.late_rows.len();
        if let Some(l) = self.lateness.as_mut() {
            // The key's delay after this call, learned from its rows (a function of the
            // call's rows as a set: see `adaptive`).
            let before = self.keys.batch_key_max(key.g).unwrap_or(i64::MIN);
            let target = l.learn(slot, before, key.rows.iter().map(|r| r.0));
            self.keys.set_batch_delay(key.g, target);
        }
        let closed = if j.key_scope {
            if j.spark {
                self.marks.key_starts.push((slot, wm));
                self.marks.key_closed(slot, wm).saturating_sub(j.lateness)
            } else {
                wm.saturating_sub(j.lateness)
            }
        } else {
            j.scope_closed
        };
        let floor = if self.floors.is_empty() {
            i64::MIN
        } else {
            self.floor_of(slot)
        };
        // Sessions: a row at or before `session_floor`, the end of a session the
        // key closed (per key or partition) or its floor (a forgotten key), would
        // merge into a session already closed: it is late, whatever the rule.
        let (closed, session_floor) = if j.session {
            (closed, floor.max(self.closed_session_end(slot)))
        } else {
            (closed.max(floor), i64::MIN)
        };
        // Rows before `threshold` are late (Flink's sessions: unless they merge
        // into an open session, checked after the key's other rows).
        let threshold = self.late_before(j.rule, closed);
        self.row_closed = closed;
        let mut candidates: Vec<(i64, u32)> = Vec::new();
        // The key's largest event time over its rows the call believed (late or not),
        // overall and per source partition (a key mostly sends on one): what it tells
        // of the stream's progress.
        let mut key_max = i64::MIN;
        let mut key_part: Option<(usize, i64)> = None;
        let mut key_more_parts: Vec<(usize, i64)> = Vec::new();
        // Consecutive rows of a key mostly fall in the window of the previous row:
        // rows with `lo <= ts < hi` update its state directly.
        let (mut lo, mut hi, mut base) = (i64::MAX, i64::MIN, 0);
        for (k, &(ts, row)) in key.rows.iter().enumerate() {
            // Rows come grouped by key: fetch the inputs of a row some way ahead
            // (the order is unrelated to memory).
            if let Some(&(_, ahead)) = key.ahead.get(k + AHEAD) {
                for input in call.inputs {
                    input.prefetch(ahead as usize);
                }
            }
            let row = row as usize;
            key_max = key_max.max(ts);
            if let Some(p) = call.parts {
                // A source partition's rows all count towards its own watermark,
                // late or not: a partition that lags holds the combined watermark
                // back from its first row on.
                let pi = p.value(row) as usize;
                if seen.part_max.len() <= pi {
                    seen.part_max.resize(pi + 1, i64::MIN);
                }
                seen.part_max[pi] = seen.part_max[pi].max(ts);
                match &mut key_part {
                    Some(e) if e.0 == pi => e.1 = e.1.max(ts),
                    None => key_part = Some((pi, ts)),
                    Some(_) => match key_more_parts.iter_mut().find(|e| e.0 == pi) {
                        Some(e) => e.1 = e.1.max(ts),
                        None => key_more_parts.push((pi, ts)),
                    },
                }
            }
            if session_floor != i64::MIN && ts <= session_floor {
                seen.late_rows.push(row as u32);
                continue;
            }
            if ts < threshold {
                if j.flink_sessions {
                    candidates.push((ts, row as u32));
                } else {
                    seen.late_rows.push(row as u32);
                }
                continue;
            }
            if lo <= ts && ts < hi {
                for (j, input) in call.inputs.iter().enumerate() {
                    self.accs[base + j].update(input, row, ts);
                }
            } else {
                match self.add_row(slot, ts, row, call.inputs, call.aggs) {
                    Ok((l, h, st)) => (lo, hi, base) = (l, h, st as usize * na),
                    Err(reason) => {
                        errors.push((row, reason.to_string()));
                        continue;
                    }
                }
            }
            seen.batch_max = seen.batch_max.max(ts);
        }
        if !candidates.is_empty() {
            self.flink_late_candidates(slot, candidates, call, seen, errors);
        }
        let q = self.cfg.quorum as usize;
        let mut hash = None;
        let mut key_hash = |keys: &crate::time::KeyedWatermarkTracker| {
            *hash.get_or_insert_with(|| xxhash_rust::xxh3::xxh3_64(&keys.slot_key(slot)))
        };
        if key_max != i64::MIN && seen.key_top.takes(q, key_max) {
            seen.key_top.push(q, key_max, key_hash(&self.keys));
        }
        for (pi, t) in key_part.into_iter().chain(key_more_parts) {
            if seen.part_top.len() <= pi {
                seen.part_top.resize(pi + 1, Top::default());
            }
            if seen.part_top[pi].takes(q, t) {
                seen.part_top[pi].push(q, t, key_hash(&self.keys));
            }
        }
        if j.key_scope && key_max < wm {
            // Rows behind the key's own watermark are no progress: they keep it from
            // going idle no more than silence does.
            self.keys.batch_no_progress(key.g);
        }
        if let Some(wc) = call.watch {
            self.watch_key(key, slot, wc, call.parts, &seen.late_rows[late_from..]);
        }
    }

    /// A lateness report counts the key's rows of the call (`late`: those judged
    /// late).
    fn watch_key(
        &mut self,
        key: KeyCall<'_>,
        slot: u32,
        wc: WatchCall,
        parts: Option<&Int64Array>,
        late: &[u32],
    ) {
        let before = self.keys.batch_key_max(key.g).unwrap_or(i64::MIN);
        let mut late = late.to_vec();
        late.sort_unstable();
        let judged = self.row_closed;
        let Some(w) = self.watch.as_mut() else {
            return;
        };
        let behind = |from: i64, ts: i64| {
            if from == i64::MIN {
                0
            } else {
                from.saturating_sub(ts)
            }
        };
        for &(ts, row) in key.rows {
            let late_by = late.binary_search(&row).is_ok().then(|| behind(judged, ts));
            let seen = RowSeen {
                behind_key: behind(before, ts),
                behind_stream: behind(wc.stream_time, ts),
                late_by,
                spark_drops: ts < wc.spark_before,
            };
            w.count(slot, parts.map(|p| p.value(row as usize) as usize), seen);
        }
    }

    /// Flink's sessions: a row whose own session is closed is late unless it merges
    /// into an open one. Latest first, so that a chain of such rows reaching an open
    /// session joins it whatever the row order.
    fn flink_late_candidates(
        &mut self,
        slot: u32,
        mut candidates: Vec<(i64, u32)>,
        call: &CallRows<'_>,
        seen: &mut Seen,
        errors: &mut Vec<(usize, String)>,
    ) {
        candidates.sort_unstable_by(|a, b| b.cmp(a));
        let WindowSpec::Session { gap } = self.cfg.window else {
            unreachable!("candidates are sessions' rows")
        };
        for (ts, row) in candidates {
            let cover_end = ts.saturating_add(gap);
            let joins = self
                .wins
                .get(slot as usize)
                .is_some_and(|list| list.iter().any(|w| w.start <= cover_end && w.end >= ts));
            if !joins {
                seen.late_rows.push(row);
                continue;
            }
            match self.add_row(slot, ts, row as usize, call.inputs, call.aggs) {
                Ok(_) => seen.batch_max = seen.batch_max.max(ts),
                Err(reason) => errors.push((row as usize, reason.to_string())),
            }
        }
    }
}

/// What a call judges its rows by, fixed as it begins (see `Operator::judging`).
pub(super) struct Judging {
    pub(super) rule: LateRule,
    pub(super) lateness: i64,
    pub(super) key_scope: bool,
    pub(super) spark: bool,
    /// Global and partition scope: every window with `end` at or before this is
    /// closed (per key: each key's own).
    pub(super) scope_closed: i64,
    pub(super) session: bool,
    /// Flink's rule with session windows: a late row may still merge into an open
    /// session.
    pub(super) flink_sessions: bool,
}

/// What every key of a call reads.
pub(super) struct CallRows<'a> {
    pub(super) judging: &'a Judging,
    pub(super) inputs: &'a [Input],
    pub(super) aggs: &'a [BoundAgg],
    /// The rows' source partitions (partition scope).
    pub(super) parts: Option<&'a Int64Array>,
    /// With a lateness report: what the rows are measured against.
    pub(super) watch: Option<WatchCall>,
}

/// One key of a call: its index in the batch, its `(event time, row)` pairs, and
/// the pairs from its first on (read ahead to prefetch the inputs of later rows).
pub(super) struct KeyCall<'a> {
    pub(super) g: u32,
    pub(super) rows: &'a [(i64, u32)],
    pub(super) ahead: &'a [(i64, u32)],
}

/// What a call's rows showed, gathered key by key (see [`super::Progress`]).
pub(super) struct Seen {
    pub(super) late_rows: Vec<u32>,
    /// The keys with the `quorum` highest largest event times.
    pub(super) key_top: Top,
    /// The same per source partition (dense: partitions are small; empty: none).
    pub(super) part_top: Vec<Top>,
    /// The largest event time per source partition (dense; `i64::MIN`: none), late
    /// rows included.
    pub(super) part_max: Vec<i64>,
    /// The largest event time of the on-time rows.
    pub(super) batch_max: i64,
}
