//! The operator's snapshot: its whole state as versioned, checksummed bytes.

use std::sync::Arc;

use arrow_schema::{DataType, Field, Schema, SchemaRef};

use super::floors::FloorSketch;
use super::marks::NOT_PENDING;
use super::{n_aggs, Operator, PipelineConfig, PipelineMetrics, Scope};
use crate::agg::codec::{read_acc, write_acc};
use crate::clock::ClockRef;
use crate::error::Result;
use crate::state::{Reader, SnapshotKind, Writer};
use crate::window::OpenWindow;
use crate::{state, TidemarkError};

/// Writes the input fields an operator is bound to (`None`: it saw no batch yet), so a
/// restored operator re-binds before its next batch.
pub(super) fn write_fields(w: &mut Writer, fields: Option<&[Field]>) {
    match fields {
        None => w.bool(false),
        Some(fields) => {
            w.bool(true);
            w.len(fields.len());
            for f in fields {
                w.str(f.name());
                w.str(&f.data_type().to_string());
            }
        }
    }
}

/// The input fields stored in an operator snapshot of `cfg`, as a schema (`None`: the
/// operator had seen no batch).
pub(crate) fn snapshot_input(cfg: &PipelineConfig, bytes: &[u8]) -> Result<Option<SchemaRef>> {
    let payload = state::open(bytes, SnapshotKind::Pipeline, Some(cfg.fingerprint()))?;
    Ok(read_fields(&mut Reader::new(payload))?.map(|f| Arc::new(Schema::new(f))))
}

/// Reads what [`write_fields`] wrote.
pub(super) fn read_fields(r: &mut Reader<'_>) -> Result<Option<Vec<Field>>> {
    if !r.bool()? {
        return Ok(None);
    }
    let nf = r.len(2)?;
    let mut fields = Vec::with_capacity(nf);
    for _ in 0..nf {
        let name = r.str()?.to_string();
        let dt: DataType = r
            .str()?
            .parse()
            .map_err(|_| TidemarkError::StateCorrupted("unreadable column type".into()))?;
        fields.push(Field::new(name, dt, true));
    }
    Ok(Some(fields))
}

/// The error for a batch whose schema the operator's state cannot follow.
pub(crate) fn schema_changed(why: &str) -> TidemarkError {
    TidemarkError::config(
        "schema",
        format!("the input schema changed mid-stream: {why}"),
    )
}

impl Operator {
    // --- snapshots -------------------------------------------------------------------

    /// The operator's whole state as bytes (versioned, checksummed).
    pub fn snapshot(&self) -> Vec<u8> {
        // Sealed in place, in a buffer sized for the state up front (an estimate: a
        // key's record and a window's bounds, flags and accumulators), so that a
        // large state is neither regrown by doubling nor copied into an envelope.
        let n = n_aggs(&self.cfg);
        let windows = (self.accs.len() / n.max(1)).saturating_sub(self.free_states.len());
        let keys = self.keys.total_key_count() * 48 + self.keys.key_bytes();
        let mut w = Writer::sealed(1024 + keys + windows * (24 + 32 * n));
        write_fields(
            &mut w,
            self.bound.as_ref().map(|b| b.used_fields.as_slice()),
        );
        for slot in self.keys.write_state(&mut w) {
            let list = self
                .wins
                .get(slot as usize)
                .map(Vec::as_slice)
                .unwrap_or(&[]);
            w.len(list.len());
            for win in list {
                w.i64(win.start);
                w.i64(win.end);
                w.u8(self.flags[win.state as usize]);
                for j in 0..n {
                    write_acc(&mut w, &self.accs[win.state as usize * n + j]);
                }
            }
            if self.cfg.keeps_key_marks() {
                w.i64(self.snapshot_mark(slot));
            }
            if self.cfg.keeps_session_ends() {
                w.i64(self.closed_session_end(slot));
            }
            if let Some(l) = &self.lateness {
                w.i64(self.keys.slot_delay(slot));
                l.write(&mut w, slot);
            }
            if let Some(wt) = &self.watch {
                wt.slot(slot).write(&mut w);
            }
        }
        self.scope.write_state(&mut w);
        let m = &self.metrics;
        for v in [
            m.batches,
            m.rows_in,
            m.late_dropped_count,
            m.rows_error,
            m.windows_emitted,
            m.updates_emitted,
            m.retractions_emitted,
            m.windows_closed_by_timer,
            m.windows_closed_by_watermark,
            m.sessions_closed_by_timer,
            m.sessions_closed_by_watermark,
            m.sessions_merged,
            m.windows_flushed,
            m.windows_evicted,
            m.keys_expired,
            m.windows_expired,
            m.rows_unmatched,
        ] {
            w.u64(v);
        }
        w.bool(self.flushed);
        self.floors.write(&mut w);
        w.i64(self.marks.late_mark());
        if let Some(wt) = &self.watch {
            wt.write_tail(&mut w);
        }
        w.seal(SnapshotKind::Pipeline, self.fingerprint)
    }

    /// An operator restored from [`Self::snapshot`] bytes. Fails with
    /// [`TidemarkError::StateCorrupted`] if the bytes are damaged, of another format
    /// version, or were written by a different pipeline configuration.
    pub fn restore(cfg: PipelineConfig, clock: ClockRef, bytes: &[u8]) -> Result<Self> {
        let mut op = Operator::new(cfg, clock)?;
        let payload = state::open(bytes, SnapshotKind::Pipeline, Some(op.fingerprint))?;
        let mut r = Reader::new(payload);
        if let Some(fields) = read_fields(&mut r)? {
            // Re-bind on the stored input fields, so flush works before the next batch.
            op.bound = Some(Self::bind(&op.cfg, &Schema::new(fields))?);
        }
        let order = op.keys.read_state(&mut r)?;
        let n = n_aggs(&op.cfg);
        let aggs = op.bound.as_ref().map(|b| b.aggs.clone());
        // Room for a window per key and half as many again up front: the arrays would
        // otherwise grow by doubling, copying themselves into fresh pages each time,
        // and the next batch's first new windows would copy them once more.
        let room = order.len() + order.len() / 2;
        let slots = order.iter().max().map_or(0, |&s| s as usize + 1);
        op.wins.reserve(slots);
        if op.cfg.keeps_key_marks() {
            op.marks.reserve_keys(slots);
        }
        op.accs.reserve(room * n);
        op.flags.reserve(room);
        for slot in order {
            let count = r.len(17)?;
            if op.wins.len() <= slot as usize {
                op.wins.resize_with(slot as usize + 1, Vec::new);
            }
            op.wins[slot as usize].reserve_exact(count);
            for _ in 0..count {
                let (start, end, flags) = (r.i64()?, r.i64()?, r.u8()?);
                let aggs = aggs.as_ref().ok_or_else(|| {
                    TidemarkError::StateCorrupted("windows without a schema".into())
                })?;
                let st = Self::alloc_state(&mut op.accs, &mut op.flags, &mut op.free_states, aggs);
                op.flags[st as usize] = flags;
                for j in 0..n {
                    op.accs[st as usize * n + j] = read_acc(&mut r)?;
                }
                op.wins[slot as usize].push(OpenWindow {
                    start,
                    end,
                    state: st,
                });
                // Timers follow the open windows (key scope: idle keys only).
                if op.cfg.scope != Scope::Key || op.keys.slot_is_idle(slot) {
                    let at = op.close_at(end);
                    op.timers.add(at, slot, start);
                }
            }
            if op.cfg.keeps_key_marks() {
                let m = r.i64()?;
                if m != NOT_PENDING {
                    op.marks.restore_key(slot, m);
                    // Windows its watermark passed close in the next call.
                    let wk = op.keys.slot_watermark(slot);
                    if op.wins[slot as usize]
                        .first()
                        .is_some_and(|w| op.close_at(w.end) <= wk)
                    {
                        op.marks.deferred.push(slot);
                    }
                }
            }
            if op.cfg.keeps_session_ends() {
                let end = r.i64()?;
                if end != i64::MIN {
                    if op.session_end.len() <= slot as usize {
                        op.session_end.resize(slot as usize + 1, i64::MIN);
                    }
                    op.session_end[slot as usize] = end;
                }
            }
            if let Some(l) = op.lateness.as_mut() {
                let delay = r.i64()?;
                op.keys.set_slot_delay(slot, delay);
                l.read(&mut r, slot)?;
            }
            if let Some(wt) = op.watch.as_mut() {
                wt.set_slot(slot, super::watch::SlotWatch::read(&mut r)?);
            }
        }
        op.scope.read_state(&mut r)?;
        let mut m = PipelineMetrics::default();
        for v in [
            &mut m.batches,
            &mut m.rows_in,
            &mut m.late_dropped_count,
            &mut m.rows_error,
            &mut m.windows_emitted,
            &mut m.updates_emitted,
            &mut m.retractions_emitted,
            &mut m.windows_closed_by_timer,
            &mut m.windows_closed_by_watermark,
            &mut m.sessions_closed_by_timer,
            &mut m.sessions_closed_by_watermark,
            &mut m.sessions_merged,
            &mut m.windows_flushed,
            &mut m.windows_evicted,
            &mut m.keys_expired,
            &mut m.windows_expired,
            &mut m.rows_unmatched,
        ] {
            *v = r.u64()?;
        }
        op.metrics = m;
        op.flushed = r.bool()?;
        op.floors = FloorSketch::read(&mut r)?;
        op.marks.restore_late_mark(r.i64()?);
        if let Some(wt) = op.watch.as_mut() {
            wt.read_tail(&mut r)?;
        }
        r.finish()?;
        Ok(op)
    }
}
