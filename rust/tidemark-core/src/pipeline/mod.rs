//! The pipeline operator: an event-time windowed GROUP BY on Arrow batches.
//!
//! [`Operator::process`] takes one batch (in Spark, one micro-batch) and follows
//! DESIGN.md's one convention:
//!
//! 1. every row is judged late or on time against a watermark fixed before the call
//!    (the scope's: global, the source partitions combined, or the row's key): a row
//!    is late when its window is closed ([`LateRule`]: Spark's rule judges by the
//!    watermark the previous call began with, Flink's by the one this call began
//!    with; the per-row rule is `ts < W - allowed_lateness`);
//! 2. on-time rows update their (open) windows' partial aggregates;
//! 3. the batch's rows advance the watermarks;
//! 4. windows whose `end + allowed_lateness <= W` close, `W` being the watermark the
//!    call began with (Spark's rule) or the advanced one (the others):
//!    `on_window_close` emits each once and drops its state; `on_update` emits every
//!    window the batch changed.
//!
//! Output rows are sorted by (window end, window start, key), so for the same
//! sequence of batches the output is identical whatever the row order inside each
//! batch. State (windows, partial aggregates, per-key and per-partition watermarks;
//! timers are derived from the open windows) round-trips through
//! [`Operator::snapshot`] / [`Operator::restore`].

mod config;
mod floors;

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_array::builder::StringBuilder;
use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{
    new_empty_array, Array, ArrayRef, BooleanArray, Int64Array, RecordBatch, RecordBatchOptions,
    UInt32Array,
};
use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};

pub use config::{EmitMode, LatePolicy, LateRule, PipelineConfig, Scope, TimeMode};

use crate::agg::{Acc, BoundAgg, ExactSum, Input, Scalar, Unscaled, WideSum};
use crate::clock::ClockRef;
use crate::error::{column_index, Result, TidemarkError};
use crate::key::{decode_key_columns, is_key_type, same_values, KeyBytes, KeyColumns, KeyRows};
use crate::state::{self, Reader, SnapshotKind, Writer};
use crate::time::{
    parse_event_time, EventTimeType, KeyedTicks, KeyedWatermarkTracker, ScopeWatermark,
};
use crate::window::{add_to_sessions, Session, SessionChange, WindowSpec};
use floors::FloorSketch;

/// What every operator kind (one core, sharded, ROWS) does with arrival units: the
/// surface the bindings drive.
pub trait ArrivalOperator: Send {
    /// Processes one arrival unit.
    fn process_unit(&mut self, batch: &RecordBatch, parsed: Option<&Int64Array>) -> Result<Output>;
    /// End of input.
    fn flush_all(&mut self) -> Result<Output>;
    /// A call without rows: time moves on by itself (see [`Operator::tick`]).
    fn tick(&mut self) -> Result<Output>;
    /// The whole state as bytes.
    fn snapshot_bytes(&self) -> Result<Vec<u8>>;
}

impl ArrivalOperator for Operator {
    fn process_unit(&mut self, batch: &RecordBatch, parsed: Option<&Int64Array>) -> Result<Output> {
        self.process(batch, parsed)
    }
    fn flush_all(&mut self) -> Result<Output> {
        self.flush()
    }
    fn tick(&mut self) -> Result<Output> {
        Operator::tick(self)
    }
    fn snapshot_bytes(&self) -> Result<Vec<u8>> {
        Ok(self.snapshot())
    }
}

/// The binary column of partial aggregates (see [`Operator::set_partial_output`]).
pub const PARTIALS_COLUMN: &str = "__tidemark_partials";

/// What one `process` / `flush` call produced.
#[derive(Debug, Clone)]
pub struct Output {
    /// Window results (or, in `on_update` mode, window updates).
    pub windows: RecordBatch,
    /// Late input rows (empty when the late policy is `Drop`).
    pub late: RecordBatch,
    /// Input rows that could not be processed, with a `reason` column.
    pub errors: RecordBatch,
}

impl Output {
    /// The output of a call before any input: three tables without columns (no
    /// schema is known yet).
    pub fn nothing() -> Self {
        let none = RecordBatch::new_empty(Arc::new(Schema::empty()));
        Output {
            windows: none.clone(),
            late: none.clone(),
            errors: none,
        }
    }
}

/// Counters of an operator.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PipelineMetrics {
    /// `process` calls.
    pub batches: u64,
    /// Input rows.
    pub rows_in: u64,
    /// Rows behind the watermark (dropped or sent to the late output).
    pub late_dropped_count: u64,
    /// Rows sent to the error output.
    pub rows_error: u64,
    /// Final window results emitted (`on_window_close`, flush, eviction).
    pub windows_emitted: u64,
    /// Window updates emitted (`on_update`).
    pub updates_emitted: u64,
    /// Retraction rows emitted (`on_update` sessions merged or moved).
    pub retractions_emitted: u64,
    /// Windows currently open.
    pub windows_open: u64,
    /// Windows closed because their timer fired (global / partition scope, idle keys).
    pub windows_closed_by_timer: u64,
    /// Windows closed by their key's own watermark (key scope).
    pub windows_closed_by_watermark: u64,
    /// Sessions closed because their timer fired.
    pub sessions_closed_by_timer: u64,
    /// Sessions closed by their key's own watermark.
    pub sessions_closed_by_watermark: u64,
    /// Sessions merged into another because an event bridged them.
    pub sessions_merged: u64,
    /// Windows closed by `flush`.
    pub windows_flushed: u64,
    /// Keys evicted because of `max_keys`.
    pub keys_evicted: u64,
    /// Windows closed early because their key was evicted.
    pub windows_evicted: u64,
    /// Keys dropped because their state outlived `state_ttl`.
    pub keys_expired: u64,
    /// Windows closed early because their key expired.
    pub windows_expired: u64,
    /// Input rows dropped by an inner lookup join (no matching lookup row).
    pub rows_unmatched: u64,
}

impl PipelineMetrics {
    /// Adds another shard's counters (`batches`: the calls, counted once).
    pub fn add(&mut self, o: &PipelineMetrics) {
        self.batches = self.batches.max(o.batches);
        self.rows_in += o.rows_in;
        self.late_dropped_count += o.late_dropped_count;
        self.rows_error += o.rows_error;
        self.windows_emitted += o.windows_emitted;
        self.updates_emitted += o.updates_emitted;
        self.retractions_emitted += o.retractions_emitted;
        self.windows_open += o.windows_open;
        self.windows_closed_by_timer += o.windows_closed_by_timer;
        self.windows_closed_by_watermark += o.windows_closed_by_watermark;
        self.sessions_closed_by_timer += o.sessions_closed_by_timer;
        self.sessions_closed_by_watermark += o.sessions_closed_by_watermark;
        self.sessions_merged += o.sessions_merged;
        self.windows_flushed += o.windows_flushed;
        self.keys_evicted += o.keys_evicted;
        self.windows_evicted += o.windows_evicted;
        self.keys_expired += o.keys_expired;
        self.windows_expired += o.windows_expired;
        self.rows_unmatched += o.rows_unmatched;
    }
}

/// What the last `process` call saw, for combining watermarks across operators (the
/// Spark driver combines the progress of every task).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Progress {
    /// Largest valid event time of the call (`i64::MIN`: none).
    pub max_event_time: i64,
    /// Largest valid event time per source partition (partition scope).
    pub partition_max: Vec<(u32, i64)>,
    /// Key scope: the minimum watermark over this operator's active keys.
    pub key_global: Option<i64>,
    /// Largest event time of the call's on-time rows (`i64::MIN`: none); what the
    /// global scope's watermark advances with.
    pub on_time_max: i64,
    /// Key scope: the minimum watermark over active keys (`None`: no active key) and
    /// the highest key watermark seen ([`KeyedWatermarkTracker::global_parts`]).
    pub key_parts: (Option<i64>, i64),
}

/// The first half of a [`Operator::process`] call: rows ingested, windows not yet
/// closed (see [`Operator::ingest`]).
#[derive(Debug)]
pub struct Pending {
    batch: RecordBatch,
    late_rows: Vec<u32>,
    errors: Vec<(usize, String)>,
}

impl Pending {
    /// Rows (indices into the ingested batch) judged late, ascending.
    pub fn late_rows(&self) -> &[u32] {
        &self.late_rows
    }

    /// Rows (indices into the ingested batch) that became error rows, ascending: the
    /// order of the `errors` output.
    pub fn error_rows(&self) -> Vec<u32> {
        let mut rows: Vec<u32> = self.errors.iter().map(|e| e.0 as u32).collect();
        rows.sort_unstable();
        rows
    }
}

/// Schema-dependent parts, fixed at the first batch.
#[derive(Debug, Clone)]
struct Bound {
    key_idx: Vec<usize>,
    key_types: Vec<DataType>,
    time_idx: Option<usize>,
    time_type: Option<(DataType, EventTimeType)>,
    part_idx: Option<usize>,
    aggs: Vec<BoundAgg>,
    /// Output type of window_start / window_end.
    bound_type: DataType,
    out_schema: SchemaRef,
    /// The input fields the pipeline reads (stored in snapshots to re-bind).
    used_fields: Vec<Field>,
    /// The schema bound: the latest batch's (after a restore with no batch since,
    /// `used_fields`). Late and error rows carry its columns.
    input: SchemaRef,
}

impl Bound {
    /// The late and error outputs of a call that reads no rows (a flush): empty, in
    /// the schemas a call with rows gives them (the input's columns; the errors with
    /// their `reason` column too).
    fn no_rejects(&self) -> Result<(RecordBatch, RecordBatch)> {
        let late = RecordBatch::new_empty(self.input.clone());
        let errors = error_batch(&late, &[])?;
        Ok((late, errors))
    }

    /// Why the state kept under `self` cannot go on with batches bound as `next` (the
    /// same pipeline on a later batch's schema), or `None` when it can: the key
    /// columns hold the same values ([`same_values`]: another string layout, say),
    /// the event time is read the same way (a timestamp may change unit or zone: its
    /// instants are what the state keeps), and every aggregate can go on
    /// ([`BoundAgg::cannot_follow`]). The output then takes the later batch's types.
    fn cannot_follow(&self, next: &Bound) -> Option<String> {
        let keys = self.out_schema.fields().iter().zip(&next.key_types);
        for (old, new) in keys.take(self.key_types.len()) {
            if !same_values(old.data_type(), new) {
                return Some(format!(
                    "key column {:?} changed type from {} to {}",
                    old.name(),
                    old.data_type(),
                    new
                ));
            }
        }
        if let (Some((old, how)), Some((new, next_how))) = (&self.time_type, &next.time_type) {
            let instants = matches!(
                (old, new),
                (DataType::Timestamp(_, a), DataType::Timestamp(_, b)) if a.is_some() == b.is_some()
            );
            if how != next_how || !(instants || same_values(old, new)) {
                return Some(format!(
                    "the event-time column changed type from {old} to {new}"
                ));
            }
        }
        self.aggs
            .iter()
            .zip(&next.aggs)
            .find_map(|(old, new)| old.cannot_follow(new))
    }

    /// The aggregates' inputs and the key columns of `batch` (no key columns: every
    /// row has the null key, one global group).
    fn inputs_and_keys(&self, batch: &RecordBatch) -> Result<(Vec<crate::agg::Input>, KeyColumns)> {
        let inputs = self
            .aggs
            .iter()
            .map(|a| a.input(batch.columns()))
            .collect::<Result<Vec<_>>>()?;
        let key_cols: Vec<ArrayRef> = self
            .key_idx
            .iter()
            .map(|&i| batch.column(i).clone())
            .collect();
        let keys = if key_cols.is_empty() {
            let nulls = arrow_array::NullArray::new(batch.num_rows());
            KeyColumns::new(&[Arc::new(nulls) as ArrayRef])?
        } else {
            KeyColumns::new(&key_cols)?
        };
        Ok((inputs, keys))
    }
}

/// Open windows by close time (`end + allowed_lateness`), so a watermark closes them
/// in order. These are the pipeline's event-time timers: one per window (per key scope:
/// only for idle keys, whose windows close on the global watermark). Entries are
/// never deleted eagerly: a timer whose window merged, moved or closed is stale and
/// is ignored when it fires ([`Operator::close_window`] checks it).
#[derive(Debug, Clone, Default)]
struct CloseIndex {
    buckets: BTreeMap<i64, Vec<(u32, i64)>>,
    len: usize,
}

impl CloseIndex {
    #[inline]
    fn add(&mut self, at: i64, slot: u32, start: i64) {
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

/// Where an output row's key bytes are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KeyRef {
    /// The key in a live slot.
    Slot(u32),
    /// A copy (keys evicted or retracted during the call, whose slot may be reused).
    Owned(u32),
}

/// An output row of the current call: a final window, an update, or a retraction.
#[derive(Debug, Clone, Copy)]
struct Emit {
    key: KeyRef,
    start: i64,
    end: i64,
    /// State index (`NO_STATE` for retractions).
    state: u32,
    retract: bool,
}

const NO_STATE: u32 = u32::MAX;

/// Rows ahead whose aggregate state [`Operator::build_windows`] prefetches.
const FINISH_AHEAD: usize = 16;
/// The window changed in this call.
const DIRTY: u8 = 1;
/// An update of the window was emitted (`on_update`).
const EMITTED: u8 = 2;
/// The window's close time changed (or it is new): its timer must be (re)added.
const RETIME: u8 = 4;

/// The order of the output rows: by window end, start, key bytes, retraction first.
/// (end, start, key, retraction) identifies a row, so an unstable sort is
/// deterministic. `keys[i]` holds the bytes of `emits[i].key`.
///
/// `step`: the grid of the windows' bounds (a tumbling window's size, a sliding
/// window's slide), `None` for sessions.
fn output_order(emits: &[Emit], keys: &[KeyBytes<'_>], step: Option<u64>) -> Vec<usize> {
    let n = emits.len();
    // A key's windows mostly close together, so its rows come in runs. With few runs,
    // the runs' keys are ranked by their bytes once, and rows sort on integers alone;
    // otherwise rows sort on the keys' first 8 bytes (big-endian, so integer order is
    // byte order) and compare whole keys only on a tie.
    let mut runs: Vec<u32> = Vec::new();
    for (i, e) in emits.iter().enumerate() {
        if i == 0 || e.key != emits[i - 1].key {
            runs.push(i as u32);
            if runs.len() * 4 > n {
                break;
            }
        }
    }
    let few_runs = runs.len() * 4 <= n;
    // The key part of a row's sort key (with the retraction flag in its low bit).
    let key_part: Vec<u64> = if few_runs {
        let mut by_key: Vec<u32> = (0..runs.len() as u32).collect();
        let key_of_run = |r: u32| &*keys[runs[r as usize] as usize];
        by_key.sort_unstable_by(|&a, &b| key_of_run(a).cmp(key_of_run(b)).then(a.cmp(&b)));
        if let Some(order) = step.and_then(|step| grid_order(emits, &runs, &by_key, step)) {
            return order;
        }
        let mut rank_of_run = vec![0u64; runs.len()];
        let mut rank = 0u64;
        for (j, &r) in by_key.iter().enumerate() {
            if j > 0 && key_of_run(r) != key_of_run(by_key[j - 1]) {
                rank += 1;
            }
            rank_of_run[r as usize] = rank;
        }
        let mut out = Vec::with_capacity(n);
        let mut run = 0;
        for (i, e) in emits.iter().enumerate() {
            if run + 1 < runs.len() && runs[run + 1] as usize == i {
                run += 1;
            }
            out.push(rank_of_run[run] << 1 | u64::from(!e.retract));
        }
        out
    } else {
        keys.iter()
            .map(|k| {
                let mut prefix = [0u8; 8];
                let m = k.len().min(8);
                prefix[..m].copy_from_slice(&k[..m]);
                u64::from_be_bytes(prefix)
            })
            .collect()
    };
    if few_runs {
        // The key part is the whole key: rows sort on (end, start, key part) packed
        // into one integer when their spreads fit, a primitive sort.
        let spread = |f: fn(&Emit) -> i64| {
            let lo = emits.iter().map(f).min().unwrap_or(0);
            let hi = emits.iter().map(f).max().unwrap_or(0);
            (lo, hi.abs_diff(lo))
        };
        let (end0, end_span) = spread(|e| e.end);
        let (start0, start_span) = spread(|e| e.start);
        let key_span = key_part.iter().copied().max().unwrap_or(0);
        let packed = packed_order(n, &[end_span, start_span, key_span], |i| {
            [
                emits[i].end.abs_diff(end0),
                emits[i].start.abs_diff(start0),
                key_part[i],
            ]
        });
        if let Some(order) = packed {
            return order;
        }
    }
    let tie = |a: u32, b: u32| {
        if few_runs {
            return std::cmp::Ordering::Equal; // the key part is the whole key
        }
        let (a, b) = (a as usize, b as usize);
        (*keys[a])
            .cmp(&*keys[b])
            .then_with(|| emits[b].retract.cmp(&emits[a].retract))
    };
    let one_window = emits
        .windows(2)
        .all(|w| (w[0].end, w[0].start) == (w[1].end, w[1].start));
    if one_window {
        // Every row in the same window (the usual close of a tumbling window): sort on
        // the key part alone.
        let mut by_key: Vec<(u64, u32)> = key_part
            .iter()
            .zip(0..n as u32)
            .map(|(&k, i)| (k, i))
            .collect();
        by_key.sort_unstable_by(|x, y| x.0.cmp(&y.0).then_with(|| tie(x.1, y.1)));
        return by_key.iter().map(|k| k.1 as usize).collect();
    }
    let mut sort_keys: Vec<(i64, i64, u64, u32)> = emits
        .iter()
        .zip(&key_part)
        .zip(0..n as u32)
        .map(|((e, &k), i)| (e.end, e.start, k, i))
        .collect();
    sort_keys.sort_unstable_by(|x, y| {
        (x.0, x.1, x.2)
            .cmp(&(y.0, y.1, y.2))
            .then_with(|| tie(x.3, y.3))
    });
    sort_keys.iter().map(|k| k.3 as usize).collect()
}

/// The output order by counting sort, when no row is a retraction and every row's
/// window has the same length, with its end on a grid of `step` (tumbling and sliding
/// windows): the order by (end, start, key, row) is then the order by (end, key, row).
/// The rows are listed key by key (`by_key`: the runs starting at `runs[r]`, by key
/// bytes, then by position), then distributed stably over the ends. `None` if the rows
/// do not fit, or if there are more distinct ends than rows.
fn grid_order(emits: &[Emit], runs: &[u32], by_key: &[u32], step: u64) -> Option<Vec<usize>> {
    let n = emits.len();
    let first = emits.first()?;
    let width = first.end.wrapping_sub(first.start);
    let end0 = emits.iter().map(|e| e.end).min()?;
    let inv = 1.0 / step as f64;
    let mut cells: Vec<u32> = Vec::with_capacity(n);
    let mut max_cell = 0u32;
    for e in emits {
        if e.retract || e.end.wrapping_sub(e.start) != width {
            return None;
        }
        let d = e.end.abs_diff(end0);
        // A quotient by multiplication, checked exactly (a wrong guess only loses the
        // fast path).
        let q = (d as f64 * inv).round() as u64;
        if q >= n as u64 || q.checked_mul(step) != Some(d) {
            return None;
        }
        max_cell = max_cell.max(q as u32);
        cells.push(q as u32);
    }
    let mut fill = vec![0u32; max_cell as usize + 2];
    for &c in &cells {
        fill[c as usize + 1] += 1;
    }
    for i in 1..fill.len() {
        fill[i] += fill[i - 1];
    }
    let mut order = vec![0usize; n];
    for &r in by_key {
        let lo = runs[r as usize] as usize;
        let hi = runs.get(r as usize + 1).map_or(n, |&h| h as usize);
        for i in lo..hi {
            let c = &mut fill[cells[i] as usize];
            order[*c as usize] = i;
            *c += 1;
        }
    }
    Some(order)
}

/// The rows of the batch's keys (`group[row]` not `u32::MAX`) as (event time, row,
/// key index), by the cell of the window grid (`step` apart, aligned to `origin`)
/// their event time falls in, rows of a cell in arrival order: a counting sort. With
/// more cells than rows, runs of cells are merged into one (the order stays by time).
/// `None` when the rows arrived in time order already.
fn by_window_cell(
    group: &[u32],
    times: &[i64],
    step: i64,
    origin: i64,
) -> Option<Vec<(i64, u32, u32)>> {
    let (mut lo, mut hi, mut n, mut in_order) = (i64::MAX, i64::MIN, 0usize, true);
    for (&g, &t) in group.iter().zip(times) {
        if g != u32::MAX {
            in_order &= t >= hi;
            lo = lo.min(t);
            hi = hi.max(t);
            n += 1;
        }
    }
    if in_order {
        return None;
    }
    // The grid line at or below the earliest event time.
    // (Below the range of `i64`: the earliest time, unaligned.)
    let base = i128::from(lo) - (i128::from(lo) - i128::from(origin)).rem_euclid(i128::from(step));
    let base = i64::try_from(base).unwrap_or(lo);
    let offset = |t: i64| t.abs_diff(base) as f64;
    let mut scale = 1.0 / step as f64;
    let cells = offset(hi) * scale + 1.0;
    if cells > n as f64 {
        scale *= n as f64 / cells;
    }
    // Monotone in `t`: float rounding and truncation never reverse an order.
    let last = ((offset(hi) * scale) as usize).min(n - 1);
    let cell = |t: i64| ((offset(t) * scale) as usize).min(last);
    let mut fill = vec![0u32; last + 2];
    for (&g, &t) in group.iter().zip(times) {
        if g != u32::MAX {
            fill[cell(t) + 1] += 1;
        }
    }
    for i in 1..fill.len() {
        fill[i] += fill[i - 1];
    }
    let mut out = vec![(0i64, 0u32, 0u32); n];
    for (row, (&g, &t)) in group.iter().zip(times).enumerate() {
        if g != u32::MAX {
            let c = &mut fill[cell(t)];
            out[*c as usize] = (t, row as u32, g);
            *c += 1;
        }
    }
    Some(out)
}

/// Bits that hold values up to `max`.
fn bits_for(max: u64) -> u32 {
    u64::BITS - max.leading_zeros()
}

/// The order of rows `0..n` by three unsigned sort fields (`fields(i)`, most
/// significant first, each at most its `maxes` entry), sorting the fields and the row
/// index packed into one `u64` or `u128`; `None` if they need more than 128 bits.
fn packed_order(
    n: usize,
    maxes: &[u64; 3],
    fields: impl Fn(usize) -> [u64; 3],
) -> Option<Vec<usize>> {
    let widths = maxes.map(bits_for);
    let index_bits = bits_for(n as u64);
    let total = widths.iter().sum::<u32>() + index_bits;
    if total > u128::BITS {
        return None;
    }
    let pack = |i: usize| -> u128 {
        let f = fields(i);
        let mut x = 0u128;
        for (v, w) in f.iter().zip(widths) {
            x = x << w | u128::from(*v);
        }
        x << index_bits | i as u128
    };
    let index_mask = (1u128 << index_bits) - 1;
    if total <= u64::BITS {
        let mut rows: Vec<u64> = (0..n).map(|i| pack(i) as u64).collect();
        rows.sort_unstable();
        Some(
            rows.iter()
                .map(|&x| (u128::from(x) & index_mask) as usize)
                .collect(),
        )
    } else {
        let mut rows: Vec<u128> = (0..n).map(pack).collect();
        rows.sort_unstable();
        Some(rows.iter().map(|&x| (x & index_mask) as usize).collect())
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
    w: Session,
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

/// The stateful operator of a pipeline.
#[derive(Debug)]
pub struct Operator {
    cfg: PipelineConfig,
    fingerprint: u64,
    clock: ClockRef,
    bound: Option<Bound>,
    /// Key interning, activity, per-key watermarks (meaningful in key scope).
    keys: KeyedWatermarkTracker,
    /// Open windows per key slot, sorted by start.
    wins: Vec<Vec<Session>>,
    /// Partial aggregates: `accs[state * n_aggs + j]`.
    accs: Vec<Acc>,
    flags: Vec<u8>,
    free_states: Vec<u32>,
    /// Event-time timers closing windows.
    timers: CloseIndex,
    /// The scope's watermark, advanced by this operator's own rows (the rule every
    /// operator kind shares: see [`ScopeWatermark`]).
    scope: ScopeWatermark,
    /// What [`ScopeWatermark::advance`] gave for the last call: the watermark that
    /// closes windows (per key: idle keys' windows).
    own_close: i64,
    /// A watermark given from outside (the Spark driver combines all tasks' progress):
    /// the watermark the call began with, combined over every operator of the scope.
    /// It judges rows (global, partition) and bounds what closes when no combined
    /// close watermark is set (see [`Self::close_watermark`]).
    external: Option<i64>,
    /// Spark's rule (global and partition scope): the watermark the previous call
    /// began with. Every window with `end + allowed_lateness` at or before it is
    /// closed; rows of those windows are late.
    late_mark: i64,
    /// The watermark this call began with (Spark's rule closes at it).
    call_start: i64,
    /// Spark's rule per key: per key slot the watermark its windows were closed at by
    /// the call that set it, and that call's number (valid in the call after it only:
    /// the key's windows are closed at its own watermark otherwise).
    key_mark: Vec<(i64, u64)>,
    /// Calls completed (numbers the marks above).
    calls: u64,
    /// Keys with windows that the last call's watermark passed: they close in the next
    /// call (at the key's watermark, unless the key has rows in it).
    deferred: Vec<u32>,
    /// This call's keys (per key, Spark's rule): slot and watermark at the start.
    key_starts: Vec<(u32, i64)>,
    /// The closed-through mark of the key whose rows are being added (sliding
    /// windows skip the closed ones).
    row_closed: i64,
    /// Floors of keys whose state was dropped (`max_keys`, `state_ttl`).
    floors: FloorSketch,
    /// Per key slot: its floor (see [`floors`]), `UNRESOLVED` until looked up.
    slot_floor: Vec<i64>,
    /// `flush` closed every window: the operator takes no more rows.
    flushed: bool,
    /// The watermark that closes windows (global and partition scope; idle keys'
    /// windows in key scope), set by a coordinator combining several operators.
    close_override: Option<i64>,
    /// Emit mergeable partial aggregates instead of final values (two-phase
    /// aggregation across cores; see [`Self::set_partial_output`]).
    partials: bool,
    /// Windows output in the documented order (see [`Self::set_sorted_output`]).
    sorted: bool,
    /// A broadcast lookup joined to every input row first (see [`Self::set_lookup`]).
    lookup: Option<Arc<lookup::Lookup>>,
    progress: Progress,
    metrics: PipelineMetrics,
    // Per-call scratch.
    /// Keys with on-time rows in this call (deduplicated by `touch_epoch`).
    touched: Vec<u32>,
    touch_epoch: Vec<u32>,
    /// Per row of a batch: its key's index in the batch (reused between batches).
    group_scratch: Vec<u32>,
    epoch: u32,
    emits: Vec<Emit>,
    owned_keys: Vec<Vec<u8>>,
    /// States to free once the output is built.
    release: Vec<u32>,
    scratch_windows: Vec<(i64, i64)>,
}

/// A key slot whose floor is not looked up yet (see [`Operator::floor_of`]).
const UNRESOLVED: i64 = i64::MAX;

/// A key with no closing mark in a snapshot (see `Operator::key_mark`).
const NOT_PENDING: i64 = i64::MAX;

/// The call number of a key mark that is never valid (a dropped key's).
const NO_CALL: u64 = u64::MAX;

/// Source partition ids a pipeline takes: `0..SOURCE_PARTITIONS` (other rows are
/// error rows).
pub const SOURCE_PARTITIONS: i64 = 1 << 20;

/// Why `row`'s source partition is unusable, if it is (null, or out of range).
fn partition_error(p: &Int64Array, row: usize) -> Option<String> {
    if p.is_null(row) {
        return Some("partition is null".into());
    }
    let v = p.value(row);
    (!(0..SOURCE_PARTITIONS).contains(&v)).then(|| {
        format!(
            "partition {v} is out of range (0 to {})",
            SOURCE_PARTITIONS - 1
        )
    })
}

fn n_aggs(cfg: &PipelineConfig) -> usize {
    cfg.aggs.len()
}

impl Operator {
    /// A fresh operator. The configuration is validated here.
    pub fn new(cfg: PipelineConfig, clock: ClockRef) -> Result<Self> {
        cfg.validate()?;
        if matches!(cfg.window, WindowSpec::Rows { .. }) {
            return Err(TidemarkError::config(
                "window",
                "ROWS windows run in rows::RowsOperator",
            ));
        }
        let key_scope = cfg.scope == Scope::Key;
        let keys = KeyedWatermarkTracker::with_ticks(
            KeyedTicks {
                bounded_delay: if key_scope { cfg.delay } else { 0 },
                idle_timeout: if key_scope { cfg.idle_timeout } else { None },
                max_keys: cfg.max_keys,
                eviction_policy: cfg.eviction,
            },
            clock.clone(),
        )
        .with_eviction_log()
        .with_idle_log();
        let scope = ScopeWatermark::new(&cfg, clock.clone());
        let op = Operator {
            fingerprint: cfg.fingerprint(),
            cfg,
            clock,
            bound: None,
            keys,
            wins: Vec::new(),
            accs: Vec::new(),
            flags: Vec::new(),
            free_states: Vec::new(),
            timers: CloseIndex::default(),
            scope,
            own_close: i64::MIN,
            external: None,
            late_mark: i64::MIN,
            call_start: i64::MIN,
            key_mark: Vec::new(),
            calls: 0,
            deferred: Vec::new(),
            key_starts: Vec::new(),
            row_closed: i64::MIN,
            floors: FloorSketch::default(),
            slot_floor: Vec::new(),
            flushed: false,
            close_override: None,
            partials: false,
            sorted: true,
            lookup: None,
            progress: Progress::default(),
            metrics: PipelineMetrics::default(),
            touched: Vec::new(),
            touch_epoch: Vec::new(),
            group_scratch: Vec::new(),
            epoch: 0,
            emits: Vec::new(),
            owned_keys: Vec::new(),
            release: Vec::new(),
            scratch_windows: Vec::new(),
        };
        Ok(op)
    }

    /// The configuration.
    pub fn config(&self) -> &PipelineConfig {
        &self.cfg
    }

    /// Metrics.
    pub fn metrics(&self) -> PipelineMetrics {
        PipelineMetrics {
            windows_open: (self.accs.len() / n_aggs(&self.cfg).max(1) - self.free_states.len())
                as u64,
            keys_evicted: self.keys.metrics().evicted_keys,
            ..self.metrics.clone()
        }
    }

    /// Key-tracker metrics (keys tracked, active, idle, evicted).
    pub fn key_metrics(&self) -> &crate::time::KeyedWatermarkMetrics {
        self.keys.metrics()
    }

    /// The operator's watermark: global, combined over partitions, or (key scope) the
    /// highest global watermark reached. `None` until there is one.
    pub fn watermark(&self) -> Option<i64> {
        if let (Some(w), Scope::Global | Scope::Partition { .. }) = (self.external, &self.cfg.scope)
        {
            return Some(w);
        }
        let w = match self.cfg.scope {
            Scope::Key => self
                .keys
                .emitted_watermark()
                .map_or(i64::MIN, |w| w.timestamp()),
            _ => self.scope.current(),
        };
        (w != i64::MIN).then_some(w)
    }

    /// Uses `w` as the scope watermark from now on (see [`Progress`]); `None` returns
    /// to the operator's own watermark.
    pub fn set_external_watermark(&mut self, w: Option<i64>) {
        self.external = w;
    }

    /// Closes windows at `w` instead of the operator's own watermark from the next
    /// close on (the runtime's coordinator sets the watermark combined over shards);
    /// `None` returns to the operator's own.
    pub fn set_close_watermark(&mut self, w: Option<i64>) {
        self.close_override = w;
    }

    /// Joins every input row with `lookup` before it is aggregated (the aggregates may
    /// use its columns); `None` removes it. Swapping tables between calls is atomic:
    /// a call sees one table.
    pub fn set_lookup(&mut self, lookup: Option<Arc<lookup::Lookup>>) {
        self.lookup = lookup;
    }

    /// With `on`, the windows output carries the partial aggregates of each window in
    /// one binary column [`PARTIALS_COLUMN`] (after `window_end`) instead of one column
    /// per aggregate: the first phase of a two-phase aggregation. Rows of the same
    /// window from several operators merge with [`Self::finish_partials`].
    pub fn set_partial_output(&mut self, on: bool) {
        self.partials = on;
    }

    /// With `on` (the default), each call's windows come ordered by window end, start
    /// and key bytes (retractions first). Off, they come in the order the operator
    /// closed or updated them (a call's retractions first): the same rows, built
    /// faster, for consumers that do not depend on their order (a Spark DataFrame).
    pub fn set_sorted_output(&mut self, on: bool) {
        self.sorted = on;
    }

    /// The second phase of a two-phase aggregation: each group of partial window rows
    /// (`(batch, row)` pairs into `parts`, all of one window and key) merges into one
    /// final window row; the result has the pipeline's windows schema for `input`.
    pub fn finish_partials(
        &mut self,
        input: &Schema,
        parts: &[&RecordBatch],
        groups: &[Vec<(usize, usize)>],
    ) -> Result<RecordBatch> {
        self.ensure_bound(input)?;
        let bound = self.bound.clone().expect("bound");
        let nk = bound.key_types.len();
        let firsts: Vec<(usize, usize)> = groups.iter().map(|g| g[0]).collect();
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(bound.out_schema.fields().len());
        for c in 0..nk + 2 {
            let arrays: Vec<&dyn Array> = parts.iter().map(|b| b.column(c).as_ref()).collect();
            columns.push(arrow_select::interleave::interleave(&arrays, &firsts)?);
        }
        let empties: Vec<Acc> = bound.aggs.iter().map(|a| a.new_acc()).collect();
        let blobs: Vec<&arrow_array::BinaryArray> = parts
            .iter()
            .map(|b| b.column(nk + 2).as_binary::<i32>())
            .collect();
        let mut merged: Vec<Vec<Acc>> = Vec::with_capacity(groups.len());
        for g in groups {
            let mut accs = empties.clone();
            for &(b, r) in g {
                let mut rd = Reader::new(blobs[b].value(r));
                for acc in accs.iter_mut() {
                    acc.merge(&read_acc(&mut rd)?);
                }
                rd.finish()?;
            }
            merged.push(accs);
        }
        for (j, agg) in bound.aggs.iter().enumerate() {
            columns.push(agg.finish(merged.iter().map(|a| &a[j]))?);
        }
        let schema = bound.out_schema.clone();
        if self.cfg.emit == EmitMode::OnUpdate {
            // Partial output is for on_window_close: nothing is retracted.
            columns.push(Arc::new(BooleanArray::from(vec![false; groups.len()])));
        }
        Ok(RecordBatch::try_new_with_options(
            schema,
            columns,
            &RecordBatchOptions::new().with_row_count(Some(groups.len())),
        )?)
    }

    /// What the last `process` call saw.
    pub fn progress(&self) -> &Progress {
        &self.progress
    }

    /// The watermark of one key (key scope), by encoded key.
    pub fn key_watermark(&self, key: &[u8]) -> Option<i64> {
        self.keys.watermark_for_encoded(key)
    }

    /// The output schema for an input schema (validates the configuration against it).
    pub fn output_schema(cfg: &PipelineConfig, input: &Schema) -> Result<SchemaRef> {
        Ok(Self::bind(cfg, input)?.out_schema)
    }

    fn bind(cfg: &PipelineConfig, schema: &Schema) -> Result<Bound> {
        // A name the pipeline reads must name one column (Spark: AMBIGUOUS_REFERENCE).
        let mut read: Vec<&str> = cfg.keys.iter().map(String::as_str).collect();
        if cfg.time == TimeMode::Event {
            read.push(&cfg.event_time);
        }
        if let Scope::Partition { column } = &cfg.scope {
            read.push(column);
        }
        read.extend(cfg.aggs.iter().filter_map(|a| a.column.as_deref()));
        read.extend(cfg.aggs.iter().filter_map(|a| a.by.as_deref()));
        for name in read {
            let n = schema.fields().iter().filter(|f| f.name() == name).count();
            if n > 1 {
                return Err(TidemarkError::config(
                    "input",
                    format!(
                        "the input has {n} columns named {name:?}: the reference is ambiguous; \
                         rename or drop all but one"
                    ),
                ));
            }
        }
        let mut key_idx = Vec::new();
        let mut key_fields = Vec::new();
        for k in &cfg.keys {
            let i = column_index(schema, k)?;
            let f = schema.field(i);
            if !is_key_type(f.data_type()) {
                return Err(TidemarkError::config(
                    "key",
                    format!("column {k:?} of type {} cannot be a key", f.data_type()),
                ));
            }
            key_idx.push(i);
            key_fields.push(f.as_ref().clone().with_nullable(true));
        }
        let (time_idx, time_type, bound_type) = match cfg.time {
            TimeMode::Processing => (
                None,
                None,
                DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            ),
            TimeMode::Event if cfg.parsed_externally => {
                let i = column_index(schema, &cfg.event_time)?;
                let dt = schema.field(i).data_type().clone();
                (
                    Some(i),
                    Some((dt, EventTimeType::Ticks)),
                    DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
                )
            }
            TimeMode::Event => {
                let i = column_index(schema, &cfg.event_time)?;
                let dt = schema.field(i).data_type().clone();
                let ty = EventTimeType::resolve(
                    cfg.event_time_type.as_deref(),
                    &cfg.event_time,
                    &dt,
                    false,
                )?;
                let bound = match &dt {
                    DataType::Timestamp(unit, tz) => DataType::Timestamp(*unit, tz.clone()),
                    _ => DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
                };
                (Some(i), Some((dt, ty)), bound)
            }
        };
        let part_idx = match &cfg.scope {
            Scope::Partition { column } => {
                let i = column_index(schema, column)?;
                if !schema.field(i).data_type().is_integer() {
                    return Err(TidemarkError::config(
                        "partition_column",
                        format!(
                            "{column:?} must be an integer column, got {}",
                            schema.field(i).data_type()
                        ),
                    ));
                }
                Some(i)
            }
            _ => None,
        };
        let aggs = cfg
            .aggs
            .iter()
            .map(|a| BoundAgg::bind(a, schema))
            .collect::<Result<Vec<_>>>()?;
        let mut used: Vec<usize> = key_idx.clone();
        used.extend(time_idx);
        used.extend(part_idx);
        for a in &cfg.aggs {
            for c in a.column.iter().chain(&a.by) {
                used.push(schema.index_of(c).expect("bound"));
            }
        }
        let mut used_fields: Vec<Field> = Vec::new();
        for i in used {
            let f = schema.field(i);
            if used_fields.iter().all(|u| u.name() != f.name()) {
                used_fields.push(f.as_ref().clone());
            }
        }
        let mut fields: Vec<Field> = key_fields.clone();
        fields.push(Field::new("window_start", bound_type.clone(), false));
        fields.push(Field::new("window_end", bound_type.clone(), false));
        fields.extend(aggs.iter().map(|a| a.output_field()));
        if cfg.emit == EmitMode::OnUpdate {
            fields.push(Field::new("retract", DataType::Boolean, false));
        }
        Ok(Bound {
            key_types: key_fields.iter().map(|f| f.data_type().clone()).collect(),
            key_idx,
            time_idx,
            time_type,
            part_idx,
            aggs,
            bound_type,
            out_schema: Arc::new(Schema::new(fields)),
            used_fields,
            input: Arc::new(schema.clone()),
        })
    }

    /// Checks that a batch's schema fits the one bound at the first batch.
    fn ensure_bound(&mut self, schema: &Schema) -> Result<()> {
        let fresh = Self::bind(&self.cfg, schema)?;
        match &self.bound {
            None => self.bound = Some(fresh),
            Some(b) => {
                if let Some(why) = b.cannot_follow(&fresh) {
                    return Err(schema_changed(&why));
                }
                // Column positions may move, layouts change (see Bound::cannot_follow).
                self.bound = Some(fresh);
            }
        }
        Ok(())
    }

    fn alloc_state(
        accs: &mut Vec<Acc>,
        flags: &mut Vec<u8>,
        free: &mut Vec<u32>,
        aggs: &[BoundAgg],
    ) -> u32 {
        let n = aggs.len();
        match free.pop() {
            Some(s) => {
                for (j, a) in aggs.iter().enumerate() {
                    accs[s as usize * n + j] = a.new_acc();
                }
                flags[s as usize] = 0;
                s
            }
            None => {
                let s = (accs.len() / n) as u32;
                accs.extend(aggs.iter().map(|a| a.new_acc()));
                flags.push(0);
                s
            }
        }
    }

    fn close_at(&self, end: i64) -> i64 {
        end.saturating_add(self.cfg.allowed_lateness)
    }

    /// The late rule in force (processing time: no row is late, and windows close as
    /// soon as the clock passes them).
    fn rule(&self) -> LateRule {
        match self.cfg.time {
            TimeMode::Processing => LateRule::Flink,
            TimeMode::Event => self.cfg.late_rule,
        }
    }

    /// The watermark a call begins with: the scope's (per key: the global watermark
    /// over keys, which closes idle keys' windows), or the combined one given from
    /// outside ([`Self::set_external_watermark`]; global scope: the higher of the two).
    fn start_watermark(&self) -> i64 {
        let own = self.scope.current();
        match self.external {
            Some(e) if self.cfg.scope == Scope::Global => e.max(own),
            Some(e) => e,
            None => own,
        }
    }

    /// Spark's rule per key: the watermark the key's windows were closed at (the one
    /// its previous call began with, if its watermark moved then; else its own).
    fn key_closed(&self, slot: u32, wm: i64) -> i64 {
        match self.key_mark.get(slot as usize) {
            Some(&(m, call)) if call == self.calls => m,
            _ => wm,
        }
    }

    /// The key's closing mark to keep in a snapshot (`NOT_PENDING`: its watermark).
    fn snapshot_mark(&self, slot: u32) -> i64 {
        self.key_closed(slot, NOT_PENDING)
    }

    /// The earliest event time whose windows are not all closed, when every window
    /// with `end <= closed` is: rows before it are late (Flink's sessions: unless they
    /// merge into an open session). The per-row rule: `closed` itself.
    fn late_before(&self, rule: LateRule, closed: i64) -> i64 {
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

    /// Processes one batch. `parsed_times` (int64 epoch microseconds, one per row)
    /// replaces parsing the event-time column, for user-registered parsers.
    pub fn process(
        &mut self,
        batch: &RecordBatch,
        parsed_times: Option<&Int64Array>,
    ) -> Result<Output> {
        let pending = self.ingest(batch, parsed_times)?;
        self.complete(pending)
    }

    /// The first half of [`Self::process`]: judges and adds the rows, advances the
    /// operator's watermarks and records [`Self::progress`], but closes nothing.
    /// [`Self::complete`] finishes the call; between the two a coordinator may set the
    /// combined watermark ([`Self::set_close_watermark`]).
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

    fn ingest_rows(
        &mut self,
        batch: &RecordBatch,
        parsed_times: Option<&Int64Array>,
    ) -> Result<Pending> {
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
        let times: Int64Array = match (self.cfg.time, parsed_times) {
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
        };

        // 2. Inputs of the aggregates, keys, partitions.
        let (inputs, keys) = bound.inputs_and_keys(batch)?;
        let parts = match bound.part_idx {
            Some(i) => Some(arrow_cast::cast(batch.column(i), &DataType::Int64)?),
            None => None,
        };
        let parts = parts.as_ref().map(|p| p.as_primitive::<Int64Type>());

        // 3. The watermark as it stood when the call began.
        if self.flushed {
            return Err(TidemarkError::config(
                "flush",
                "the operator was flushed (end of input: every window closed and was \
                 emitted); a flushed operator takes no more rows, so that no window \
                 comes out twice: build a new operator, or restore a snapshot taken \
                 before the flush",
            ));
        }
        let lateness = self.cfg.allowed_lateness;
        let key_scope = self.cfg.scope == Scope::Key;
        let rule = self.rule();
        let spark = rule == LateRule::Spark;
        // The watermark the call began with, and the one rows are judged against
        // (Spark's rule: the previous call's, whose windows are the closed ones).
        let start = self.start_watermark();
        let judged = if spark { self.late_mark } else { start };
        // Global and partition scope: every window with `end` at or before this is
        // closed (per key: each key's own, below).
        let scope_closed = judged.saturating_sub(lateness);
        let flink_sessions = rule == LateRule::Flink && self.cfg.window.is_session();
        self.key_starts.clear();

        let mut bad_row = vec![false; n];
        for &(r, _) in &errors {
            bad_row[r] = true;
        }
        let mut late_rows: Vec<u32> = Vec::new();
        // Largest on-time event time per source partition (dense: partitions are small).
        let mut part_max: Vec<i64> = Vec::new();
        let mut batch_max = i64::MIN;
        let time_vals = times.values().clone();
        self.touched.clear();
        self.emits.clear();
        self.owned_keys.clear();
        self.release.clear();
        self.epoch = self.epoch.wrapping_add(1);
        if self.epoch == 0 {
            self.touch_epoch.iter_mut().for_each(|e| *e = 0);
            self.epoch = 1;
        }
        self.keys.begin_batch();
        let mut fatal: Option<TidemarkError> = None;

        // Phase 1, per row: resolve the key (one hash lookup) and note the row's key
        // index in the batch.
        const SKIP: u32 = u32::MAX;
        let mut group = std::mem::take(&mut self.group_scratch);
        if !self.keys.may_evict(n) {
            // No key can be evicted by this batch: all lookups, then all folds.
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
            let fatal_cell = std::cell::RefCell::new(None);
            self.keys.batch_fold_rows(
                &keys,
                &time_vals,
                |row| bad_row[row] || fatal_cell.borrow().is_some(),
                |row, e| match e {
                    TidemarkError::MaxKeysReached { .. } | TidemarkError::Config { .. } => {
                        errors.push((row, e.to_string()))
                    }
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
            keys.for_each_row_key(|row, key| {
                if fatal.is_some() || bad_row[row] {
                    return;
                }
                if let Some(reason) = parts.and_then(|p| partition_error(p, row)) {
                    errors.push((row, reason));
                    return;
                }
                let slot = match self.keys.batch_slot_row(key) {
                    Ok(s) => s,
                    Err(
                        e @ (TidemarkError::MaxKeysReached { .. } | TidemarkError::Config { .. }),
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

        // Phase 2: order rows by key (counting sort on the batch key index), so each
        // key's windows are updated together while they are in cache.
        let groups = self.keys.batch_len();
        let mut starts = vec![0u32; groups + 1];
        for &g in &group {
            if g != SKIP {
                starts[g as usize + 1] += 1;
            }
        }
        for i in 0..groups {
            starts[i + 1] += starts[i];
        }
        // Each entry is (event time, row): phase 3 reads the times in sequence.
        let mut fill = starts.clone();
        let mut rows_by_key = vec![(0i64, 0u32); starts[groups] as usize];
        // Each key's rows in window order, unless the windows are sessions (whose
        // merges are counted) or an aggregate depends on the order of the rows: a new
        // window then goes at the end of the key's list instead of into the middle, and
        // consecutive rows share a window more often. The rows are listed by window
        // first, then distributed stably over the keys.
        let by_cell = match self.cfg.window.grid() {
            Some((step, origin)) if bound.aggs.iter().all(BoundAgg::order_free) => {
                by_window_cell(&group, &time_vals, step, origin)
            }
            _ => None,
        };
        match by_cell {
            Some(cells) => {
                for (ts, row, g) in cells {
                    rows_by_key[fill[g as usize] as usize] = (ts, row);
                    fill[g as usize] += 1;
                }
            }
            None => {
                for (row, &g) in group.iter().enumerate() {
                    if g != SKIP {
                        rows_by_key[fill[g as usize] as usize] = (time_vals[row], row as u32);
                        fill[g as usize] += 1;
                    }
                }
            }
        }

        let na = bound.aggs.len();
        const AHEAD: usize = 16;
        // Phase 3, per key: judge each row against the watermark as it stood when the
        // call began, then add the on-time rows to their windows.
        for g in 0..groups {
            let rows = &rows_by_key[starts[g] as usize..starts[g + 1] as usize];
            let Some((slot, wm)) = self.keys.batch_key(g as u32) else {
                for &(_, row) in rows {
                    errors.push((row as usize, "max_keys reached: the key was evicted while its batch was processed (max_keys is smaller than the keys of one batch)".into()));
                }
                continue;
            };
            let closed = if key_scope {
                if spark {
                    self.key_starts.push((slot, wm));
                    self.key_closed(slot, wm).saturating_sub(lateness)
                } else {
                    wm.saturating_sub(lateness)
                }
            } else {
                scope_closed
            };
            let closed = if self.floors.is_empty() {
                closed
            } else {
                closed.max(self.floor_of(slot))
            };
            // Rows before `threshold` are late (Flink's sessions: unless they merge
            // into an open session, checked after the key's other rows).
            let threshold = self.late_before(rule, closed);
            self.row_closed = closed;
            let mut candidates: Vec<(i64, u32)> = Vec::new();
            // Consecutive rows of a key mostly fall in the window of the previous row:
            // rows with `lo <= ts < hi` update its state directly.
            let (mut lo, mut hi, mut base) = (i64::MAX, i64::MIN, 0);
            for (k, &(ts, row)) in rows.iter().enumerate() {
                // Rows come grouped by key: fetch the inputs of a row some way ahead
                // (the order is unrelated to memory).
                if let Some(&(_, ahead)) = rows_by_key.get(starts[g] as usize + k + AHEAD) {
                    for input in &inputs {
                        input.prefetch(ahead as usize);
                    }
                }
                let row = row as usize;
                if let Some(p) = parts {
                    // A source partition's rows all count towards its own watermark,
                    // late or not: a partition that lags holds the combined watermark
                    // back from its first row on.
                    let pi = p.value(row) as usize;
                    if part_max.len() <= pi {
                        part_max.resize(pi + 1, i64::MIN);
                    }
                    part_max[pi] = part_max[pi].max(ts);
                }
                if ts < threshold {
                    if flink_sessions {
                        candidates.push((ts, row as u32));
                    } else {
                        late_rows.push(row as u32);
                    }
                    continue;
                }
                if lo <= ts && ts < hi {
                    for (j, input) in inputs.iter().enumerate() {
                        self.accs[base + j].update(input, row, ts);
                    }
                } else {
                    match self.add_row(slot, ts, row, &inputs, &bound.aggs) {
                        Ok((l, h, st)) => (lo, hi, base) = (l, h, st as usize * na),
                        Err(reason) => {
                            errors.push((row, reason.to_string()));
                            continue;
                        }
                    }
                }
                batch_max = batch_max.max(ts);
            }
            if !candidates.is_empty() {
                // Flink's sessions: a row whose own session is closed is late unless
                // it merges into an open one. Latest first, so that a chain of such
                // rows reaching an open session joins it whatever the row order.
                candidates.sort_unstable_by(|a, b| b.cmp(a));
                let WindowSpec::Session { gap } = self.cfg.window else {
                    unreachable!("candidates are sessions' rows")
                };
                for (ts, row) in candidates {
                    let cover_end = ts.saturating_add(gap);
                    let joins = self.wins.get(slot as usize).is_some_and(|list| {
                        list.iter().any(|w| w.start <= cover_end && w.end >= ts)
                    });
                    if !joins {
                        late_rows.push(row);
                        continue;
                    }
                    match self.add_row(slot, ts, row as usize, &inputs, &bound.aggs) {
                        Ok(_) => batch_max = batch_max.max(ts),
                        Err(reason) => errors.push((row as usize, reason.to_string())),
                    }
                }
            }
        }
        late_rows.sort_unstable();
        let mut seen_max = i64::MIN;
        for (row, &g) in group.iter().enumerate() {
            if g != SKIP {
                seen_max = seen_max.max(time_vals[row]);
            }
        }
        crate::keep_scratch(&mut self.group_scratch, group);
        self.keys.end_batch();
        if self.keys.has_evictions() {
            self.evict_keys();
        }
        if let Some(ttl) = self.cfg.state_ttl {
            self.expire_keys(ttl);
        }

        // 4. Advance the watermarks with this batch's rows.
        if self.cfg.scope == Scope::Key {
            self.keys.check_idle_keys();
        }
        self.progress = Progress {
            max_event_time: seen_max.max(batch_max),
            partition_max: part_max
                .iter()
                .enumerate()
                .filter(|&(_, &t)| t != i64::MIN)
                .map(|(p, &t)| (p as u32, t))
                .collect(),
            key_global: match self.cfg.scope {
                Scope::Key => self.keys.global_watermark().map(|w| w.timestamp()),
                _ => None,
            },
            on_time_max: batch_max,
            key_parts: self.keys.global_parts(),
        };
        self.own_close = self.scope.advance([&self.progress])?;
        self.call_start = start;
        self.late_mark = start;
        Ok(Pending {
            batch: batch.clone(),
            late_rows,
            errors,
        })
    }

    /// The second half of [`Self::process`]: closes what the watermark passed and
    /// builds the output.
    pub fn complete(&mut self, pending: Pending) -> Result<Output> {
        let Pending {
            batch,
            late_rows,
            mut errors,
        } = pending;
        let batch = &batch;
        let bound = self.bound.clone().expect("bound by ingest");
        // 5. Close what the watermark passed; emit.
        self.close_windows();
        self.calls += 1;
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
    fn add_row(
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
                Session {
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
                key: KeyRef::Owned((self.owned_keys.len() - 1) as u32),
                start,
                end,
                state: NO_STATE,
                retract: true,
            });
        }
    }

    /// Closes the windows of keys evicted because of `max_keys` (emitting them).
    /// Drops keys untouched for longer than `state_ttl`; their open windows close
    /// early (emitted in `on_window_close` mode), as for eviction.
    fn expire_keys(&mut self, ttl: i64) {
        let expired = self.keys.expire_older_than(ttl);
        self.metrics.keys_expired += expired.len() as u64;
        let before = self.metrics.windows_evicted;
        self.close_dropped(expired);
        let n = self.metrics.windows_evicted - before;
        self.metrics.windows_evicted = before;
        self.metrics.windows_expired += n;
    }

    fn evict_keys(&mut self) {
        let evicted = self.keys.drain_evictions();
        self.close_dropped(evicted);
    }

    /// Closes the windows of keys dropped from the tracker.
    /// Remembers each key's floor (the end of the last window it emitted; per key
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
            if let Some(m) = self.key_mark.get_mut(slot) {
                m.1 = NO_CALL;
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
            self.floors.insert(&e.key, floor, width);
            if list.is_empty() {
                continue;
            }
            self.owned_keys.push(e.key);
            let key = KeyRef::Owned((self.owned_keys.len() - 1) as u32);
            for w in list {
                self.metrics.windows_evicted += 1;
                self.push_closed(key, w);
            }
        }
    }

    /// A window closed: `on_window_close` emits its final value; either way its state
    /// is released once the output is built.
    fn push_closed(&mut self, key: KeyRef, w: Session) {
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
        self.push_closed(KeyRef::Slot(slot), w);
        true
    }

    fn close_windows(&mut self) {
        let key_scope = self.cfg.scope == Scope::Key;
        for i in 0..self.touched.len() {
            let slot = self.touched[i];
            let Some(list) = self.wins.get(slot as usize) else {
                continue;
            };
            for w in list.iter().copied() {
                let f = &mut self.flags[w.state as usize];
                // (Re)add the timers of new or moved windows (key scope: only idle keys
                // need timers; see below).
                if *f & RETIME != 0 {
                    *f &= !RETIME;
                    if !key_scope {
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
            let mut deferred = std::mem::take(&mut self.deferred);
            for &slot in &deferred {
                let s = slot as usize;
                let live = self.key_mark.get(s).is_some_and(|m| m.1 == self.calls);
                // A key with rows in this call closes below, at its starting
                // watermark (the same value).
                if live && self.touch_epoch.get(s) != Some(&self.epoch) {
                    let wk = self.keys.slot_watermark(slot);
                    self.close_key_prefix(slot, wk);
                }
            }
            deferred.clear();
            let starts = std::mem::take(&mut self.key_starts);
            let call = self.calls + 1;
            if self.key_mark.len() < self.wins.len() {
                self.key_mark
                    .resize(self.wins.len(), (NOT_PENDING, NO_CALL));
            }
            for &(slot, wk) in &starts {
                self.close_key_prefix(slot, wk);
                let now = self.keys.slot_watermark(slot);
                if now == wk {
                    continue; // not moved: its windows are closed at its watermark
                }
                let s = slot as usize;
                if self.key_mark.len() <= s {
                    self.key_mark.resize(s + 1, (NOT_PENDING, NO_CALL));
                }
                self.key_mark[s] = (wk, call);
                // What the key's watermark passed in this call closes in the next.
                if self.wins[s]
                    .first()
                    .is_some_and(|w| self.close_at(w.end) <= now)
                {
                    deferred.push(slot);
                }
            }
            self.deferred = deferred;
            self.key_starts = starts;
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
        let w = self.close_watermark();
        for (at, slot, start) in self.timers.pop_until(w) {
            if self.close_window(slot, start, at, true) && key_scope {
                // An idle key's window closed on the global watermark: the key's rows
                // in it are late when it comes back, not a reopened window.
                self.keys.raise_idle_watermark(slot, at);
                let call = self.calls + 1;
                if let Some(m) = self.key_mark.get_mut(slot as usize) {
                    if m.1 == call {
                        m.0 = m.0.max(at);
                    }
                }
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

    /// The watermark that closes windows now (per key: idle keys' windows; the
    /// current global watermark, the minimum over active keys, is at or below every
    /// active key's own, so it closes nothing early):
    ///
    /// * the combined watermark a coordinator set ([`Self::set_close_watermark`]);
    /// * else, with an external watermark (this operator holds part of the scope and
    ///   no combined close is known), the highest value known not to exceed the
    ///   combined one: its own global watermark or the external one (global scope),
    ///   the external one (partition and key scope: this operator's view of the
    ///   partitions or keys it saw would run ahead of the combined minimum);
    /// * else its own.
    fn close_watermark(&self) -> i64 {
        if self.rule() == LateRule::Spark {
            // Spark's rule closes what the call's starting watermark passed.
            return self.call_start;
        }
        match (self.close_override, self.external) {
            (Some(c), _) => c,
            (None, Some(e)) if self.cfg.scope == Scope::Global => e.max(self.own_close),
            (None, Some(e)) => e,
            (None, None) => self.own_close,
        }
    }

    /// The floor of the key in `slot` (looked up once per key: see [`floors`]).
    fn floor_of(&mut self, slot: u32) -> i64 {
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
        self.complete(pending)
    }

    /// Closes every open window (end of input). In `on_window_close` mode their final
    /// values are returned; in `on_update` mode every value was emitted already.
    pub fn flush(&mut self) -> Result<Output> {
        self.emits.clear();
        self.owned_keys.clear();
        self.release.clear();
        self.flushed = true;
        self.deferred.clear();
        self.key_mark.clear();
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

    /// Builds the windows output from the queued emits and releases closed states.
    fn build_windows(&mut self, bound: &Bound) -> Result<RecordBatch> {
        let emits = std::mem::take(&mut self.emits);
        let key_of = |k: KeyRef| -> KeyBytes<'_> {
            match k {
                KeyRef::Slot(s) => self.keys.slot_key(s),
                KeyRef::Owned(i) => KeyBytes::Borrowed(&self.owned_keys[i as usize]),
            }
        };
        let keys: Vec<KeyBytes<'_>> = emits.iter().map(|e| key_of(e.key)).collect();
        // Sorted: rows and keys in output order, gathered in one pass that requests
        // the row `FINISH_AHEAD` on (output order is far from emit order), so that
        // every column then reads them in sequence. Unsorted: the emits as they are.
        let (rows, key_refs): (Cow<'_, [Emit]>, Vec<&[u8]>) = if self.sorted {
            let step = self
                .cfg
                .window
                .grid()
                .and_then(|(step, _)| u64::try_from(step).ok());
            let order = output_order(&emits, &keys, step);
            let (rows, key_refs) = order
                .iter()
                .enumerate()
                .map(|(i, &o)| {
                    if let Some(&ahead) = order.get(i + FINISH_AHEAD) {
                        crate::prefetch_at(&emits, ahead);
                        crate::prefetch_at(&keys, ahead);
                    }
                    (emits[o], &*keys[o])
                })
                .unzip();
            (Cow::Owned(rows), key_refs)
        } else {
            (
                Cow::Borrowed(&emits[..]),
                keys.iter().map(|k| &**k).collect(),
            )
        };
        let retractions = rows.iter().filter(|e| e.retract).count() as u64;

        let mut columns: Vec<ArrayRef> = if bound.key_types.is_empty() {
            Vec::new()
        } else {
            decode_key_columns(&key_refs, &bound.key_types)?
        };
        columns.push(time_column(
            rows.iter().map(|e| e.start),
            &bound.bound_type,
        )?);
        columns.push(time_column(rows.iter().map(|e| e.end), &bound.bound_type)?);
        let n = bound.aggs.len();
        let empties: Vec<Acc> = bound.aggs.iter().map(|a| a.new_acc()).collect();
        let retracted = BooleanArray::from(rows.iter().map(|e| e.retract).collect::<Vec<_>>());
        if self.partials {
            let mut blobs = arrow_array::builder::BinaryBuilder::new();
            for e in rows.iter() {
                let mut w = Writer::new();
                for (j, empty) in empties.iter().enumerate() {
                    write_acc(
                        &mut w,
                        if e.state == NO_STATE {
                            empty
                        } else {
                            &self.accs[e.state as usize * n + j]
                        },
                    );
                }
                blobs.append_value(w.finish());
            }
            columns.push(Arc::new(blobs.finish()));
            let mut fields: Vec<Field> = bound.out_schema.fields()[..columns.len() - 1]
                .iter()
                .map(|f| f.as_ref().clone())
                .collect();
            fields.push(Field::new(PARTIALS_COLUMN, DataType::Binary, false));
            let n_rows = rows.len();
            drop(rows);
            self.metrics.retractions_emitted += retractions;
            self.free_states.append(&mut self.release);
            let mut emits = emits;
            emits.clear();
            self.emits = emits;
            return Ok(RecordBatch::try_new_with_options(
                Arc::new(Schema::new(fields)),
                columns,
                &RecordBatchOptions::new().with_row_count(Some(n_rows)),
            )?);
        }
        // States in output order: the windows of a batch sort far from the order their
        // states were allocated in, so each aggregate reads its states at random; the
        // state `FINISH_AHEAD` rows on is requested while this one is read.
        for (j, agg) in bound.aggs.iter().enumerate() {
            let accs = rows.iter().enumerate().map(|(i, e)| {
                if let Some(ahead) = rows.get(i + FINISH_AHEAD) {
                    if ahead.state != NO_STATE {
                        crate::prefetch_whole_at(&self.accs, ahead.state as usize * n + j);
                    }
                }
                if e.state == NO_STATE {
                    &empties[j]
                } else {
                    &self.accs[e.state as usize * n + j]
                }
            });
            let col = agg.finish(accs)?;
            columns.push(if retracted.true_count() > 0 {
                arrow_select::nullif::nullif(col.as_ref(), &retracted)?
            } else {
                col
            });
        }
        if self.cfg.emit == EmitMode::OnUpdate {
            columns.push(Arc::new(retracted));
        }
        let batch = RecordBatch::try_new_with_options(
            bound.out_schema.clone(),
            columns,
            &RecordBatchOptions::new().with_row_count(Some(rows.len())),
        )?;
        drop(rows);
        self.metrics.retractions_emitted += retractions;
        self.free_states.append(&mut self.release);
        let mut emits = emits;
        emits.clear();
        self.emits = emits;
        Ok(batch)
    }

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
        }
        w.i64(self.scope.watermark);
        w.i64(self.scope.global_max);
        self.scope.partitions.write_state(&mut w);
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
        w.i64(self.late_mark);
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
            op.key_mark.resize(slots, (NOT_PENDING, NO_CALL));
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
                op.wins[slot as usize].push(Session {
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
                    if op.key_mark.len() <= slot as usize {
                        op.key_mark
                            .resize(slot as usize + 1, (NOT_PENDING, NO_CALL));
                    }
                    op.key_mark[slot as usize] = (m, 0);
                    // Windows its watermark passed close in the next call.
                    let wk = op.keys.slot_watermark(slot);
                    if op.wins[slot as usize]
                        .first()
                        .is_some_and(|w| op.close_at(w.end) <= wk)
                    {
                        op.deferred.push(slot);
                    }
                }
            }
        }
        op.scope.watermark = r.i64()?;
        op.scope.global_max = r.i64()?;
        op.scope.partitions = crate::time::PartitionedWatermarkTracker::new()
            .idle_timeout_ticks(op.cfg.idle_timeout)
            .with_clock(op.clock.clone());
        op.scope.partitions.read_state(&mut r)?;
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
        op.late_mark = r.i64()?;
        r.finish()?;
        Ok(op)
    }
}

/// Writes the input fields an operator is bound to (`None`: it saw no batch yet), so a
/// restored operator re-binds before its next batch.
fn write_fields(w: &mut Writer, fields: Option<&[Field]>) {
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
fn read_fields(r: &mut Reader<'_>) -> Result<Option<Vec<Field>>> {
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

/// Converts window bounds (epoch microseconds) to the output's timestamp type.
fn time_column(values: impl Iterator<Item = i64>, dt: &DataType) -> Result<ArrayRef> {
    let v: Vec<i64> = match dt {
        DataType::Timestamp(TimeUnit::Second, _) => {
            values.map(|x| x.div_euclid(1_000_000)).collect()
        }
        DataType::Timestamp(TimeUnit::Millisecond, _) => {
            values.map(|x| x.div_euclid(1_000)).collect()
        }
        DataType::Timestamp(TimeUnit::Nanosecond, _) => {
            values.map(|x| x.saturating_mul(1_000)).collect()
        }
        _ => values.collect(),
    };
    let arr: ArrayRef = Arc::new(Int64Array::from(v));
    Ok(arrow_cast::cast(&arr, dt)?)
}

/// The given rows of `batch` (an empty batch of its schema for none).
pub(crate) fn take_rows(batch: &RecordBatch, rows: &[u32]) -> Result<RecordBatch> {
    if rows.is_empty() {
        return Ok(RecordBatch::new_empty(batch.schema()));
    }
    let idx = UInt32Array::from(rows.to_vec());
    Ok(arrow_select::take::take_record_batch(batch, &idx)?)
}

/// The error rows of `batch` with a `reason` column (`_tidemark_reason` if the input
/// has a `reason` column already).
pub(crate) fn error_batch(batch: &RecordBatch, errors: &[(usize, String)]) -> Result<RecordBatch> {
    let schema = batch.schema();
    let reason = if schema.index_of("reason").is_ok() {
        "_tidemark_reason"
    } else {
        "reason"
    };
    let mut fields: Vec<Field> = schema.fields().iter().map(|f| f.as_ref().clone()).collect();
    fields.push(Field::new(reason, DataType::Utf8, false));
    let out_schema = Arc::new(Schema::new(fields));
    let rows: Vec<u32> = errors.iter().map(|e| e.0 as u32).collect();
    let taken = if rows.is_empty() {
        batch
            .columns()
            .iter()
            .map(|c| new_empty_array(c.data_type()))
            .collect()
    } else {
        take_rows(batch, &rows)?.columns().to_vec()
    };
    let mut b = StringBuilder::new();
    for e in errors {
        b.append_value(&e.1);
    }
    let mut cols = taken;
    cols.push(Arc::new(b.finish()));
    Ok(RecordBatch::try_new_with_options(
        out_schema,
        cols,
        &RecordBatchOptions::new().with_row_count(Some(errors.len())),
    )?)
}

fn write_scalar(w: &mut Writer, s: &Scalar) {
    match s {
        Scalar::I(v) => {
            w.u8(0);
            w.i64(*v)
        }
        Scalar::U(v) => {
            w.u8(1);
            w.u64(*v)
        }
        Scalar::F(v) => {
            w.u8(2);
            w.f64(*v)
        }
        Scalar::Bool(v) => {
            w.u8(3);
            w.bool(*v)
        }
        Scalar::B(v) => {
            w.u8(4);
            w.bytes(v)
        }
        Scalar::D(v) => {
            w.u8(5);
            w.i128(v.get())
        }
    }
}

fn read_scalar(r: &mut Reader<'_>) -> Result<Scalar> {
    Ok(match r.u8()? {
        0 => Scalar::I(r.i64()?),
        1 => Scalar::U(r.u64()?),
        2 => Scalar::F(r.f64()?),
        3 => Scalar::Bool(r.bool()?),
        4 => Scalar::B(r.bytes()?.to_vec()),
        5 => Scalar::D(Unscaled::new(r.i128()?)),
        t => {
            return Err(TidemarkError::StateCorrupted(format!(
                "unknown value tag {t}"
            )))
        }
    })
}

fn write_sum(w: &mut Writer, s: &ExactSum) {
    // The parts as they come, their count after them (no vector per accumulator).
    let at = w.len_later();
    let mut n = 0;
    s.for_each_part(|p| {
        w.f64(p);
        n += 1;
    });
    w.set_len(at, n);
    let special = s.special();
    w.bool(special.is_some());
    w.f64(special.unwrap_or(0.0));
}

fn read_sum(r: &mut Reader<'_>) -> Result<ExactSum> {
    let n = r.len(8)?;
    let parts = r.f64s(n)?;
    let has = r.bool()?;
    let sp = r.f64()?;
    Ok(ExactSum::from_parts(parts, has.then_some(sp)))
}

fn write_acc(w: &mut Writer, a: &Acc) {
    let opt = |w: &mut Writer, s: &Option<Scalar>| match s {
        None => w.bool(false),
        Some(s) => {
            w.bool(true);
            write_scalar(w, s)
        }
    };
    let opt_t = |w: &mut Writer, s: &Option<(i64, Scalar)>| match s {
        None => w.bool(false),
        Some((t, s)) => {
            w.bool(true);
            w.i64(*t);
            write_scalar(w, s)
        }
    };
    match a {
        Acc::Count(c) => {
            w.u8(0);
            w.i64(*c)
        }
        Acc::SumI(s, n) => {
            w.u8(1);
            w.i128(*s);
            w.i64(*n)
        }
        Acc::SumF(s, n) => {
            w.u8(2);
            write_sum(w, s);
            w.i64(*n)
        }
        Acc::MeanI(s, n) => {
            w.u8(3);
            w.i128(*s);
            w.i64(*n)
        }
        Acc::MeanF(s, n) => {
            w.u8(4);
            write_sum(w, s);
            w.i64(*n)
        }
        Acc::Moments(m, n) => {
            w.u8(5);
            write_sum(w, &m[0]);
            write_sum(w, &m[1]);
            w.i64(*n)
        }
        Acc::Min(s) => {
            w.u8(6);
            opt(w, s)
        }
        Acc::Max(s) => {
            w.u8(7);
            opt(w, s)
        }
        Acc::First(s) => {
            w.u8(8);
            opt_t(w, s)
        }
        Acc::Last(s) => {
            w.u8(9);
            opt_t(w, s)
        }
        Acc::Dec(s, n) => {
            let (lo, carry) = s.parts();
            w.u8(10);
            w.i128(lo);
            w.i64(carry);
            w.i64(*n)
        }
        Acc::Distinct(values) => {
            w.u8(11);
            w.len(values.len());
            for v in values {
                write_scalar(w, v);
            }
        }
        Acc::Hll(reg) => {
            w.u8(12);
            w.bytes(reg);
        }
        Acc::Quantiles(q) => {
            w.u8(15);
            w.u64(q.n);
            w.u32(q.accuracy);
            w.len(q.samples.len());
            for x in &q.samples {
                write_scalar(w, &x.value);
                w.u64(x.g);
                w.u64(x.delta);
            }
            w.len(q.buffer.len());
            for v in &q.buffer {
                write_scalar(w, v);
            }
        }
        Acc::MinBy(b) | Acc::MaxBy(b) => {
            w.u8(if matches!(a, Acc::MinBy(_)) { 13 } else { 14 });
            match b {
                None => w.bool(false),
                Some(b) => {
                    w.bool(true);
                    write_scalar(w, &b.0);
                    opt(w, &b.1);
                }
            }
        }
    }
}

fn read_acc(r: &mut Reader<'_>) -> Result<Acc> {
    let opt = |r: &mut Reader<'_>| -> Result<Option<Scalar>> {
        Ok(if r.bool()? {
            Some(read_scalar(r)?)
        } else {
            None
        })
    };
    let opt_t = |r: &mut Reader<'_>| -> Result<Option<(i64, Scalar)>> {
        Ok(if r.bool()? {
            Some((r.i64()?, read_scalar(r)?))
        } else {
            None
        })
    };
    Ok(match r.u8()? {
        0 => Acc::Count(r.i64()?),
        1 => Acc::SumI(r.i128()?, r.i64()?),
        2 => Acc::SumF(read_sum(r)?, r.i64()?),
        3 => Acc::MeanI(r.i128()?, r.i64()?),
        4 => Acc::MeanF(read_sum(r)?, r.i64()?),
        5 => Acc::Moments(Box::new([read_sum(r)?, read_sum(r)?]), r.i64()?),
        6 => Acc::Min(opt(r)?),
        7 => Acc::Max(opt(r)?),
        8 => Acc::First(opt_t(r)?),
        9 => Acc::Last(opt_t(r)?),
        10 => Acc::Dec(WideSum::from_parts(r.i128()?, r.i64()?), r.i64()?),
        11 => {
            let n = r.len(2)?;
            let mut values = Vec::with_capacity(n);
            for _ in 0..n {
                values.push(read_scalar(r)?);
            }
            Acc::Distinct(values)
        }
        12 => {
            let reg = r.bytes()?;
            let mut fresh = crate::agg::hll_registers();
            if reg.len() != fresh.len() {
                return Err(TidemarkError::StateCorrupted(format!(
                    "approx_count_distinct: {} registers, expected {}",
                    reg.len(),
                    fresh.len()
                )));
            }
            fresh.copy_from_slice(reg);
            Acc::Hll(fresh)
        }
        15 => {
            let (n, accuracy) = (r.u64()?, r.u32()?);
            let count = r.len(17)?;
            let mut samples = Vec::with_capacity(count);
            for _ in 0..count {
                let (value, g, delta) = (read_scalar(r)?, r.u64()?, r.u64()?);
                samples.push(crate::agg::Sample { value, g, delta });
            }
            let mut q = crate::agg::QuantileSketch::from_parts(n, accuracy, samples)?;
            let buffered = r.len(2)?;
            for _ in 0..buffered {
                q.buffer.push(read_scalar(r)?);
            }
            Acc::Quantiles(Box::new(q))
        }
        t @ (13 | 14) => {
            let b = if r.bool()? {
                Some(Box::new((read_scalar(r)?, opt(r)?)))
            } else {
                None
            };
            if t == 13 {
                Acc::MinBy(b)
            } else {
                Acc::MaxBy(b)
            }
        }
        t => {
            return Err(TidemarkError::StateCorrupted(format!(
                "unknown aggregate tag {t}"
            )))
        }
    })
}

pub mod lookup;
pub mod reshard;
pub mod rows;

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
