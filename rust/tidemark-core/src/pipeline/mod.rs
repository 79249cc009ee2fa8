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

use crate::pipeline::bind::Binding;

use crate::agg::codec::read_acc;
use crate::pipeline::close::CloseIndex;

mod adaptive;
mod agree;
mod bind;
mod bounds;
mod close;
mod config;
mod emit;
mod floors;
mod ingest;
mod judge;
mod marks;
mod order;
mod scope;
pub(crate) mod snapshot;
pub(crate) mod watch;

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, BooleanArray, Int64Array, RecordBatch, RecordBatchOptions};
use arrow_schema::Schema;

pub use agree::{Agreement, Top};
pub use bounds::{Bounds, Reference};
pub use config::{
    AdaptiveDelay, EmitMode, Idleness, LatePolicy, LateRule, LatenessReport, NullKeys,
    PipelineConfig, Scope, TimeMode, DEFAULT_MAX_AHEAD, DEFAULT_MAX_BEHIND, DEFAULT_QUORUM,
};
pub use marks::{External, Start};
pub(crate) use scope::merged_partition_max;
pub use scope::{idle_reading, ScopeWatermark, SourceView};
pub use watch::{LatenessEntry, LatenessSummary, BOUNDS as LATENESS_BOUNDS};

use crate::agg::Acc;
use crate::clock::ClockRef;
use crate::error::{Result, TidemarkError};
use crate::state::Reader;
use crate::time::{KeyedTicks, KeyedWatermarkTracker};
use crate::window::{OpenWindow, WindowSpec};
use adaptive::Lateness;
use floors::FloorSketch;
use marks::Marks;

/// What every operator kind (one core, sharded, ROWS) does with arrival units: the
/// surface the bindings drive.
pub trait ArrivalOperator: Send {
    /// Processes one arrival unit.
    fn process(&mut self, batch: &RecordBatch, parsed: Option<&Int64Array>) -> Result<Output>;
    /// End of input.
    fn flush(&mut self) -> Result<Output>;
    /// A call without rows: time moves on by itself (see [`Operator::tick`]).
    fn tick(&mut self) -> Result<Output>;
    /// The whole state as bytes.
    fn snapshot(&self) -> Result<Vec<u8>>;
}

impl ArrivalOperator for Operator {
    fn process(&mut self, batch: &RecordBatch, parsed: Option<&Int64Array>) -> Result<Output> {
        Self::process(self, batch, parsed)
    }
    fn flush(&mut self) -> Result<Output> {
        self.flush()
    }
    fn tick(&mut self) -> Result<Output> {
        Operator::tick(self)
    }
    fn snapshot(&self) -> Result<Vec<u8>> {
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
    /// With an adaptive delay: bytes of the keys' delays and lateness histograms.
    pub delay_state_bytes: u64,
    /// With a lateness report: bytes of the keys' lateness records.
    pub lateness_state_bytes: u64,
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
        self.delay_state_bytes += o.delay_state_bytes;
        self.lateness_state_bytes += o.lateness_state_bytes;
    }
}

/// What the last `process` call saw, for combining watermarks across operators (the
/// Spark driver combines the progress of every task). Before any call (and after a
/// restore) it saw nothing: no event time, no key.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Progress {
    /// The event times the call's keys moved on to (of its rows the call believed,
    /// late or not): what the stream's event time and the source partitions'
    /// watermarks advance with, as far as `quorum` keys agree (see [`Agreement`]).
    pub keys: Agreement,
    /// Largest believed event time of the call per source partition (partition scope):
    /// a partition's activity.
    pub partition_max: Vec<(u32, i64)>,
    /// Key scope: the minimum watermark over this operator's active keys.
    pub key_global: Option<i64>,
    /// Largest event time of the call's on-time rows (`None`: none); what the global
    /// scope's watermark advances with.
    pub on_time_max: Option<i64>,
    /// Key scope: the minimum watermark over active keys (`None`: no active key) and
    /// the highest key watermark seen (`None`: none;
    /// [`KeyedWatermarkTracker::global_parts`]).
    pub key_parts: (Option<i64>, Option<i64>),
    /// A call that believed none of its rows and refused some as too far ahead of the
    /// stream's event time (no wall clock): the earliest cell start among those. Where
    /// no operator of the scope believed a row, the stream's event time moves there
    /// (see `pipeline/bounds.rs`).
    pub ahead_floor: Option<i64>,
}

impl Progress {
    /// The highest event time a key of the call moved on to (`None`: none).
    pub fn max_event_time(&self) -> Option<i64> {
        self.keys.time.max()
    }
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

/// Where an output row's key bytes are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KeyRef {
    /// The key in a live slot.
    Slot(u32),
    /// An index into the call's copied keys (keys evicted or retracted during the
    /// call, whose slot may be reused).
    Copied(u32),
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

/// The stateful operator of a pipeline.
#[derive(Debug)]
pub struct Operator {
    cfg: PipelineConfig,
    fingerprint: u64,
    clock: ClockRef,
    bound: Option<Binding>,
    /// Key interning, activity, per-key watermarks (meaningful in key scope).
    keys: KeyedWatermarkTracker,
    /// With an adaptive delay: each key's lateness histogram (see [`adaptive`]).
    lateness: Option<Lateness>,
    /// With a lateness report: per key and source partition (see [`watch`]).
    watch: Option<watch::Watch>,
    /// Open windows per key slot, sorted by start.
    wins: Vec<Vec<OpenWindow>>,
    /// Partial aggregates: `accs[state * n_aggs + j]`.
    accs: Vec<Acc>,
    flags: Vec<u8>,
    free_states: Vec<u32>,
    /// Event-time timers closing windows.
    timers: CloseIndex,
    /// The scope's watermark, advanced by this operator's own rows (the rule every
    /// operator kind shares: see [`ScopeWatermark`]).
    scope: ScopeWatermark,
    /// Which watermark judges the call's rows and which closes its windows, and the
    /// values given from outside (see [`marks`]).
    marks: Marks,
    /// The time idleness and `state_ttl` are measured at in this call (see
    /// [`scope::idle_reading`]), read once when it begins.
    call_now: i64,
    /// The closed-through mark of the key whose rows are being added (sliding
    /// windows skip the closed ones).
    row_closed: i64,
    /// Floors of keys whose state was dropped (`max_keys`, `state_ttl`).
    floors: FloorSketch,
    /// Per key slot: its floor (see [`floors`]), `UNRESOLVED` until looked up.
    slot_floor: Vec<i64>,
    /// Session windows per key or per source partition: per key slot the end of the
    /// last session it closed (`i64::MIN`: none). A row at or before it would merge
    /// into that session: it is late, so no closed session is overlapped or reopened
    /// (see [`PipelineConfig::keeps_session_ends`]).
    session_end: Vec<i64>,
    /// `flush` closed every window: the operator takes no more rows.
    flushed: bool,
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
        let (keys, lateness) = match &cfg.adaptive {
            Some(a) => (keys.with_key_delays(), Some(Lateness::new(a, cfg.delay))),
            None => (keys, None),
        };
        let scope = ScopeWatermark::new(&cfg, clock.clone());
        let watch = cfg.lateness.map(|l| watch::Watch::new(l.spark_delay));
        let op = Operator {
            fingerprint: cfg.fingerprint(),
            cfg,
            clock,
            bound: None,
            keys,
            lateness,
            watch,
            wins: Vec::new(),
            accs: Vec::new(),
            flags: Vec::new(),
            free_states: Vec::new(),
            timers: CloseIndex::default(),
            scope,
            marks: Marks::default(),
            call_now: i64::MIN,
            row_closed: i64::MIN,
            floors: FloorSketch::default(),
            slot_floor: Vec::new(),
            session_end: Vec::new(),
            flushed: false,
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
            delay_state_bytes: self.lateness.as_ref().map_or(0, |l| {
                (self.keys.total_key_count() * (l.bytes_per_key() + 8)) as u64
            }),
            lateness_state_bytes: self.watch.as_ref().map_or(0, |w| w.bytes() as u64),
            ..self.metrics.clone()
        }
    }

    /// With a lateness report (`PipelineConfig::lateness`): the keys' and source
    /// partitions' lateness, the `top` keys furthest behind listed (`None`: no report).
    pub fn lateness(&self) -> Option<LatenessSummary> {
        let top = self.cfg.lateness?.top as usize;
        let w = self.watch.as_ref()?;
        Some(w.summary(self.keys.live_slots(), |s| self.keys.slot_key(s), top))
    }

    /// Key-tracker metrics (keys tracked, active, idle, evicted).
    pub fn key_metrics(&self) -> &crate::time::KeyedWatermarkMetrics {
        self.keys.metrics()
    }

    /// The operator's watermark: global, combined over partitions, or (key scope) the
    /// highest global watermark reached. `None` until there is one.
    pub fn watermark(&self) -> Option<i64> {
        if let (Start::Scope(w), Scope::Global | Scope::Partition { .. }) =
            (self.marks.external.watermark, &self.cfg.scope)
        {
            return w;
        }
        match self.cfg.scope {
            Scope::Key => self.keys.emitted_watermark().map(|w| w.timestamp()),
            _ => self.scope.current(),
        }
    }

    /// Uses the values of `e` from the next call on (see [`External`]): the scope's
    /// watermark and event time combined over every operator of the scope (the Spark
    /// driver's, the runtime's coordinator's), so that this operator judges rows,
    /// idleness in event time and `max_ahead` as every part of the scope does. `None`
    /// values return to the operator's own. (The watermark that closes windows is
    /// [`Self::complete`]'s argument.)
    pub fn set_external(&mut self, e: External) {
        self.marks.external = e;
    }

    /// The values given from outside (see [`Self::set_external`]).
    pub fn external(&self) -> External {
        self.marks.external
    }

    /// The scope's event time as the next call begins: this operator's own, or the
    /// one given from outside if higher.
    pub fn scope_time(&self) -> i64 {
        self.marks.scope_time(self.scope.time().unwrap_or(i64::MIN))
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
}

pub mod lookup;
pub mod reshard;
pub mod rows;

#[cfg(test)]
#[path = "tests.rs"]
mod tests;

#[cfg(test)]
mod believed_tests;
