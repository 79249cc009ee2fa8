//! One micro-batch of a pipeline over `N` state partitions: what a Spark task, or the
//! driver, runs for the state partitions it holds.
//!
//! A Spark query keeps its keyed state in `N` state partitions, placed by Spark's
//! `hash()` of the keys (so `repartition(N, keys)` sends a key's rows where its state
//! is). [`MicroBatch::run`] takes the batch's rows and each held partition's snapshot,
//! and gives back every partition's output, its new snapshot and its [`Report`]: the
//! progress the driver combines into the next micro-batch's watermark
//! ([`summarize`]). The partitions run on up to [`MicroBatch::threads`] threads,
//! started for the call and joined before it returns (none at import, none kept).
//!
//! Windows close on the watermark combined over every state partition, as one operator
//! would close them. A run that holds every state partition does each call in two
//! halves: every partition ingests its rows, the scope watermark (restored from the
//! driver's record before the batch) combines their progress, then every partition
//! closes what that passed. A run of some state partitions among several (a shuffled
//! batch: one Spark task each) cannot see the others: each processes its rows alone,
//! driven by the watermark the batch began with, so a window may come one micro-batch
//! later than from one operator, never twice; late and error rows are the same.
//!
//! A quiet micro-batch ([`MicroBatch::settle`]: every partition, no rows) runs calls
//! without rows until one changes nothing, at most [`SETTLE_CALLS`].

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, Int64Type};
use arrow_array::{Array, Int64Array, RecordBatch};
use arrow_schema::DataType;

pub use super::report::{Buffer, Counts, Report};
use super::routing::{par_each, par_each_owned, Routing};
pub use super::routing::{Placement, Restore, PARALLEL_ROUTE_ROWS};
use crate::clock::ManualClock;
use crate::error::{Result, TidemarkError};
use crate::pipeline::lookup::Lookup;
use crate::pipeline::rows::RowsOperator;
use crate::pipeline::{
    ArrivalOperator, Bounds, External, LatenessSummary, Operator, Output, Pending, PipelineConfig,
    Progress, ScopeWatermark, SourceView, Start, TimeMode,
};
use crate::reorder::{ReorderConfig, ReorderOperator};
use crate::window::WindowSpec;

/// A quiet micro-batch runs calls without rows until one emits no window and moves no
/// watermark (the windows its watermark closed are out, and the ones inputs gone idle
/// released), at most this many.
pub const SETTLE_CALLS: u32 = 8;

/// One micro-batch over state partitions (see the module documentation).
#[derive(Clone, Debug)]
pub struct MicroBatch {
    /// The pipeline.
    pub cfg: PipelineConfig,
    /// The number of state partitions (`N`).
    pub partitions: u32,
    /// How rows reach the state partitions.
    pub placement: Placement,
    /// The watermark the batch began with, combined over every state partition by the
    /// driver (`None`: the stream has none yet).
    pub watermark: Option<i64>,
    /// The stream's event time as the batch began (`None`: none yet).
    pub time: Option<i64>,
    /// The batch's clock reading (idleness on the clock), in milliseconds.
    pub clock_ms: i64,
    /// `clock_ms` is the wall clock's (epoch milliseconds): an event time more than
    /// `max_ahead` past it comes from the future (see `pipeline/bounds.rs`).
    pub wall_clock: bool,
    /// A stream's first micro-batch (`time` `None`): the lower and upper quartiles of
    /// its event times, estimated where its rows are and recorded with it, for runs
    /// that hold part of it (see `pipeline/bounds.rs`; `None`: a run that holds every
    /// state partition finds them in its rows).
    pub quartiles: Option<(i64, i64)>,
    /// The scope watermark's state before the batch ([`ScopeWatermark::to_bytes`];
    /// `None`: a new stream).
    pub scope: Option<Vec<u8>>,
    /// What the driver knew of the source's partitions as the batch began (a Kafka
    /// micro-batch's offsets; [`SourceView`]); `None`: only what the rows show.
    pub source: Option<SourceView>,
    /// End of input: every partition flushes (reads no rows).
    pub flush: bool,
    /// A quiet micro-batch: calls without rows follow the first until one changes
    /// nothing (see [`SETTLE_CALLS`]).
    pub settle: bool,
    /// Up to this many state partitions at once.
    pub threads: usize,
    /// An int column whose values are the input rows a row stands for (Spark's folds
    /// of raw rows); `None` or absent: one each.
    pub weight: Option<String>,
    /// The pipeline's lookup table, joined with every input row first.
    pub lookup: Option<Arc<Lookup>>,
    /// The run that writes the reports (the driver's token: reports of another run
    /// are not this one's).
    pub run: String,
}

/// One state partition's result of a run.
#[derive(Debug)]
pub struct PartitionResult {
    /// The state partition.
    pub partition: u32,
    /// The windows, late rows and error rows it emitted.
    pub output: Output,
    /// Its state after the batch.
    pub snapshot: Vec<u8>,
    /// Its progress, for the driver.
    pub report: Report,
}

/// A micro-batch as the driver sees it after every state partition reported.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BatchSummary {
    /// The watermark the next micro-batch begins with (`None`: none yet).
    pub watermark: Option<i64>,
    /// The scope watermark's state after the batch.
    pub scope: Vec<u8>,
    /// The stream's event time after the batch (`None`: none yet).
    pub time: Option<i64>,
    /// The rows in and out, summed over the partitions.
    pub counts: Counts,
    /// A quiet batch: the most calls any partition made, and whether the last call
    /// changed nothing in every partition (`None`: not a quiet batch).
    pub settled: Option<(u32, bool)>,
    /// With a lateness report: the stream's lateness so far, over every partition.
    pub lateness: Option<LatenessSummary>,
}

/// The next watermark and the batch's counts from every state partition's report,
/// by the rule every operator kind shares ([`ScopeWatermark`]): starts from the
/// scope's state recorded before the batch (`scope`, on the batch's clock reading), so
/// a replayed batch gives the same result. `None` when a report is another run's than
/// `run` (a task of an earlier, failed run wrote it).
pub fn summarize(
    cfg: &PipelineConfig,
    scope: Option<&[u8]>,
    clock_ms: i64,
    source: Option<&SourceView>,
    run: &str,
    reports: &[Report],
) -> Result<Option<BatchSummary>> {
    if reports.iter().any(|r| r.run != run) {
        return Ok(None);
    }
    let mut scope = scope_of(cfg, scope, clock_ms, source)?;
    let progress: Vec<Progress> = reports.iter().map(|r| r.progress.clone()).collect();
    let watermark = scope.advance(&progress)?;
    let settled: Vec<(u32, bool)> = reports.iter().filter_map(|r| r.settled).collect();
    let top = cfg.lateness.map_or(0, |l| l.top as usize);
    let lateness = reports.iter().filter_map(|r| r.lateness.as_ref()).fold(
        None,
        |all: Option<LatenessSummary>, l| {
            Some(match all {
                Some(mut a) => {
                    a.merge(l, top);
                    a
                }
                None => l.clone(),
            })
        },
    );
    Ok(Some(BatchSummary {
        watermark,
        scope: scope.to_bytes(),
        time: scope.time(),
        counts: reports.iter().map(|r| r.counts).sum(),
        settled: (!settled.is_empty()).then(|| {
            let calls = settled.iter().map(|s| s.0).max().unwrap_or(0);
            (calls, settled.iter().all(|s| s.1))
        }),
        lateness,
    }))
}

/// The scope as the batch began: its recorded state on the batch's clock reading, and
/// what the driver knew of the source's partitions.
fn scope_of(
    cfg: &PipelineConfig,
    bytes: Option<&[u8]>,
    clock_ms: i64,
    source: Option<&SourceView>,
) -> Result<ScopeWatermark> {
    let clock = Arc::new(ManualClock::new(clock_ms));
    let mut scope = match bytes {
        None => ScopeWatermark::new(cfg, clock),
        Some(b) => ScopeWatermark::from_bytes(cfg, clock, b)?,
    };
    scope.set_source(source.cloned());
    Ok(scope)
}

/// A state partition's operator: time windows, ROWS windows (no watermark), or a
/// reorder buffer ([`ReorderBatch`]).
enum Op {
    Time(Box<Operator>),
    Rows(Box<RowsOperator>),
    Reorder(Box<ReorderOperator>),
}

/// A state partition during a run.
struct Part {
    partition: u32,
    op: Op,
    rows: RecordBatch,
    parsed: Option<Int64Array>,
    pending: Option<Pending>,
    /// Each call's output, in call order.
    outputs: Vec<Output>,
    /// Late rows dropped, not in the outputs (a reorder's `late="drop"`).
    dropped: u64,
}

impl Part {
    fn time(&mut self) -> &mut Operator {
        match &mut self.op {
            Op::Time(op) => op,
            Op::Rows(_) | Op::Reorder(_) => unreachable!("run each partition alone"),
        }
    }

    fn progress(&self) -> Progress {
        match &self.op {
            Op::Time(op) => op.progress().clone(),
            Op::Rows(_) | Op::Reorder(_) => Progress::default(),
        }
    }

    /// The partition's whole call alone: processes its rows (or flushes).
    fn alone(&mut self, flush: bool) -> Result<()> {
        let op: &mut dyn ArrivalOperator = match &mut self.op {
            Op::Time(op) => op.as_mut(),
            Op::Rows(op) => op.as_mut(),
            Op::Reorder(op) => {
                let before = op.metrics().late_dropped_count;
                let out = if flush {
                    op.flush()?
                } else {
                    op.process(&self.rows, self.parsed.as_ref())?
                };
                // Late rows a reorder with `late="drop"` counts and keeps none of.
                let late = op.metrics().late_dropped_count - before;
                self.dropped += late - out.late.num_rows() as u64;
                self.outputs.push(Output {
                    windows: out.rows,
                    late: out.late,
                    errors: out.errors,
                });
                return Ok(());
            }
        };
        let out = if flush {
            op.flush()?
        } else {
            op.process(&self.rows, self.parsed.as_ref())?
        };
        self.outputs.push(out);
        Ok(())
    }

    fn ingest(&mut self, start: Option<External>) -> Result<()> {
        let (rows, parsed) = (self.rows.clone(), self.parsed.clone());
        let op = self.time();
        if let Some(e) = start {
            op.set_external(e);
        }
        self.pending = Some(op.ingest(&rows, parsed.as_ref())?);
        Ok(())
    }

    fn complete(&mut self, close: Option<i64>) -> Result<()> {
        let pending = self.pending.take().expect("ingest before complete");
        let out = self.time().complete(pending, close)?;
        self.outputs.push(out);
        Ok(())
    }

    /// The partition's outputs, snapshot and report after its calls (`weight`: the
    /// column of the rows' weights, `run`: the run writing the report).
    fn finish(
        mut self,
        weight: Option<&str>,
        run: &str,
        settled: Option<(u32, bool)>,
    ) -> Result<PartitionResult> {
        let output = concat_outputs(std::mem::take(&mut self.outputs))?;
        let weight = |b: &RecordBatch| weight_of(b, weight);
        let report = Report {
            partition: self.partition,
            run: run.to_string(),
            progress: self.progress(),
            counts: Counts {
                input_rows: weight(&self.rows),
                read_rows: self.rows.num_rows() as u64,
                window_rows: output.windows.num_rows() as u64,
                late_rows: weight(&output.late) + self.dropped,
                error_rows: weight(&output.errors),
            },
            settled,
            lateness: match &self.op {
                Op::Time(op) => op.lateness(),
                Op::Rows(_) | Op::Reorder(_) => None,
            },
            buffer: match &self.op {
                Op::Reorder(op) => {
                    let m = op.metrics();
                    Some(Buffer {
                        watermark: op.watermark(),
                        rows: m.buffer_size,
                        bytes: m.buffer_bytes,
                    })
                }
                Op::Time(_) | Op::Rows(_) => None,
            },
        };
        let snapshot = match &self.op {
            Op::Time(op) => op.snapshot(),
            Op::Rows(op) => ArrivalOperator::snapshot(op.as_ref())?,
            Op::Reorder(op) => op.snapshot()?,
        };
        Ok(PartitionResult {
            partition: self.partition,
            output,
            snapshot,
            report,
        })
    }
}

/// The input rows `batch`'s rows stand for: one each, or the sum of `column`.
fn weight_of(batch: &RecordBatch, column: Option<&str>) -> u64 {
    let col = column.and_then(|c| batch.schema().index_of(c).ok());
    let Some(i) = col else {
        return batch.num_rows() as u64;
    };
    let c = batch.column(i);
    match c.data_type() {
        DataType::Int64 => c.as_primitive::<Int64Type>().iter().flatten().sum::<i64>() as u64,
        DataType::Int32 => c
            .as_primitive::<Int32Type>()
            .iter()
            .flatten()
            .map(i64::from)
            .sum::<i64>() as u64,
        _ => batch.num_rows() as u64,
    }
}

/// The outputs of a partition's calls as one (a quiet batch makes several).
fn concat_outputs(mut outs: Vec<Output>) -> Result<Output> {
    if outs.len() == 1 {
        return Ok(outs.remove(0));
    }
    let cat = |f: fn(&Output) -> &RecordBatch| -> Result<RecordBatch> {
        let batches: Vec<&RecordBatch> = outs.iter().map(f).collect();
        Ok(arrow_select::concat::concat_batches(
            &batches[0].schema(),
            batches,
        )?)
    };
    Ok(Output {
        windows: cat(|o| &o.windows)?,
        late: cat(|o| &o.late)?,
        errors: cat(|o| &o.errors)?,
    })
}

impl MicroBatch {
    /// A micro-batch of `cfg` over `partitions` state partitions as a stream begins:
    /// rows routed by Spark's hash, no watermark, event time or scope state yet, the
    /// clock at 0, one thread, no lookup (set the fields for the batch at hand).
    pub fn new(cfg: PipelineConfig, partitions: u32) -> Self {
        Self {
            cfg,
            partitions,
            placement: Placement::Route,
            watermark: None,
            time: None,
            clock_ms: 0,
            wall_clock: false,
            quartiles: None,
            scope: None,
            source: None,
            flush: false,
            settle: false,
            threads: 1,
            weight: None,
            lookup: None,
            run: String::new(),
        }
    }

    fn rows_windows(&self) -> bool {
        matches!(self.cfg.window, WindowSpec::Rows { .. })
    }

    /// Runs the batch over the state partitions in `held` (their snapshots as the
    /// batch begins) on `rows` (with `parsed`: event times a user parser read, one per
    /// row); returns each held partition's result, in `held`'s order. With
    /// [`Placement::Route`], `held` lists every state partition.
    pub fn run(
        &self,
        rows: &RecordBatch,
        parsed: Option<&Int64Array>,
        held: Vec<Restore>,
    ) -> Result<Vec<PartitionResult>> {
        let whole = held.len() == self.partitions as usize;
        // A stream's first rows judge each other: by their quartiles, given or found
        // where the run holds all of them.
        let wall = self.wall_clock.then(|| self.clock_ms.saturating_mul(1_000));
        let bounds = match (self.time, self.quartiles) {
            (Some(_), _) => None,
            (None, _) if self.flush || self.rows_windows() => None,
            (None, Some((q1, q3))) => Bounds::of_quartiles(&self.cfg, q1, q3, wall),
            (None, None) if whole => self.first_bounds(rows, parsed)?,
            (None, None) => None,
        };
        let newest = match &self.scope {
            Some(b) => {
                ScopeWatermark::from_bytes(&self.cfg, Arc::new(ManualClock::new(0)), b)?.max_time()
            }
            None => None,
        };
        let todo = self.routing().held_rows(rows, parsed, held)?;
        let mut parts = par_each_owned(todo, self.threads, |(h, rows, parsed)| {
            self.restore(
                h,
                rows,
                parsed,
                External {
                    newest,
                    ..self.external(bounds)
                },
            )
        })?;
        if self.flush || self.rows_windows() || !whole {
            let flush = self.flush;
            par_each(&mut parts, self.threads, |p| p.alone(flush))?;
            return par_each_owned(parts, self.threads, |p| self.finish(p, None));
        }
        // Every state partition: ingest, combine, close.
        par_each(&mut parts, self.threads, |p| p.ingest(None))?;
        let mut scope = scope_of(
            &self.cfg,
            self.scope.as_deref(),
            self.clock_ms,
            self.source.as_ref(),
        )?;
        let mut close = self.advance(&mut scope, &parts)?;
        par_each(&mut parts, self.threads, |p| p.complete(close))?;
        let mut settled = None;
        if self.settle {
            let (mut calls, mut before) = (1u32, self.watermark);
            let done = loop {
                let emitted: usize = parts
                    .iter()
                    .map(|p| p.outputs.last().map_or(0, |o| o.windows.num_rows()))
                    .sum();
                if emitted == 0 && close == before {
                    break true;
                }
                if calls >= SETTLE_CALLS {
                    break false;
                }
                before = close;
                let start = External {
                    watermark: Start::Scope(before),
                    newest,
                    ..self.external(None)
                };
                par_each(&mut parts, self.threads, |p| p.ingest(Some(start)))?;
                close = self.advance(&mut scope, &parts)?;
                par_each(&mut parts, self.threads, |p| p.complete(close))?;
                calls += 1;
            };
            settled = Some((calls, done));
        }
        par_each_owned(parts, self.threads, |p| self.finish(p, settled))
    }

    fn finish(&self, p: Part, settled: Option<(u32, bool)>) -> Result<PartitionResult> {
        p.finish(self.weight.as_deref(), &self.run, settled)
    }

    /// What every state partition's operator is given as the batch begins: its
    /// starting watermark and event time, the wall clock, the first call's `bounds`.
    fn external(&self, bounds: Option<Bounds>) -> External {
        External {
            watermark: Start::Scope(self.watermark),
            time: self.time,
            wall: self.wall_clock.then(|| self.clock_ms.saturating_mul(1_000)),
            bounds,
            newest: None,
        }
    }

    /// The bounds of a stream's first call, from every row of it (folds weighing the
    /// rows they stand for; see `pipeline/bounds.rs`).
    fn first_bounds(
        &self,
        rows: &RecordBatch,
        parsed: Option<&Int64Array>,
    ) -> Result<Option<Bounds>> {
        if self.cfg.time != TimeMode::Event || rows.num_rows() == 0 {
            return Ok(None);
        }
        let times = Operator::event_times_of(&self.cfg, rows, parsed)?;
        let col = self
            .weight
            .as_deref()
            .and_then(|c| rows.schema().index_of(c).ok());
        let weights: Option<Vec<i64>> = match col {
            Some(i) => Some(
                arrow_cast::cast(rows.column(i), &DataType::Int64)?
                    .as_primitive::<Int64Type>()
                    .iter()
                    .map(|w| w.unwrap_or(1))
                    .collect(),
            ),
            None => None,
        };
        let wall = self.wall_clock.then(|| self.clock_ms.saturating_mul(1_000));
        Ok(Bounds::of_rows(&self.cfg, &times, weights.as_deref(), wall))
    }

    /// The combined watermark after a call's ingest (`None`: none yet).
    fn advance(&self, scope: &mut ScopeWatermark, parts: &[Part]) -> Result<Option<i64>> {
        let progress: Vec<Progress> = parts.iter().map(Part::progress).collect();
        scope.advance(&progress)
    }

    /// A held partition's operator as the batch begins, driven by the batch's
    /// starting watermark and event time (its own view of the rows it holds would run
    /// ahead of the scope's).
    fn restore(
        &self,
        h: Restore,
        rows: RecordBatch,
        parsed: Option<Int64Array>,
        external: External,
    ) -> Result<Part> {
        let named = |e: TidemarkError| named(e, &h.name);
        let cfg = self.cfg.clone();
        let op = if self.rows_windows() {
            let op = match &h.snapshot {
                None => RowsOperator::new(cfg)?,
                Some(b) => RowsOperator::restore(cfg, b).map_err(named)?,
            };
            Op::Rows(Box::new(op))
        } else {
            let clock = Arc::new(ManualClock::new(self.clock_ms));
            let mut op = match &h.snapshot {
                None => Operator::new(cfg, clock)?,
                Some(b) => super::restore_operator(cfg, clock, b).map_err(named)?,
            };
            op.set_lookup(self.lookup.clone());
            // A DataFrame has no row order: the windows need no sort.
            op.set_sorted_output(false);
            op.set_external(external);
            Op::Time(Box::new(op))
        };
        Ok(Part {
            partition: h.partition,
            op,
            rows,
            parsed,
            pending: None,
            outputs: Vec::new(),
            dropped: 0,
        })
    }

    /// How the batch's rows reach its state partitions.
    pub(super) fn routing(&self) -> Routing<'_> {
        Routing {
            partitions: self.partitions,
            placement: &self.placement,
            keys: &self.cfg.keys,
            deal: false,
            threads: self.threads,
        }
    }
}

/// One micro-batch of a reorder over `N` state partitions (the event-time buffers of
/// Spark's `ReorderStream`): what a task or the driver runs for the partitions it
/// holds, as [`MicroBatch`] runs a pipeline's. Each partition restores its buffer, takes
/// its rows as one arrival unit (or flushes) and reports its buffer ([`Report::buffer`]);
/// the stream's watermark is the least over the partitions that emitted one
/// ([`summarize_reorder`]).
#[derive(Clone, Debug)]
pub struct ReorderBatch {
    /// The reorder.
    pub cfg: ReorderConfig,
    /// The columns rows are routed by (Spark's `hash()`, as `repartition(N, keys)`);
    /// none: row `i` of a routed batch to partition `i mod N`.
    pub keys: Vec<String>,
    /// The number of state partitions (`N`).
    pub partitions: u32,
    /// How rows reach the state partitions.
    pub placement: Placement,
    /// End of input: every partition releases what it buffers (reads no rows).
    pub flush: bool,
    /// Up to this many state partitions at once.
    pub threads: usize,
    /// The run that writes the reports.
    pub run: String,
}

/// A reorder's micro-batch as the driver sees it after every state partition reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReorderSummary {
    /// The rows in and out, summed (`window_rows`: rows released).
    pub counts: Counts,
    /// The stream's watermark (the least of the partitions' that have one) and what
    /// the buffers hold, summed.
    pub buffer: Buffer,
}

impl ReorderBatch {
    /// The report's seal: tied to the reorder's configuration.
    pub fn fingerprint(&self) -> u64 {
        self.cfg.fingerprint()
    }

    /// Runs the batch over the state partitions in `held` on `rows` (with `parsed`:
    /// event times a user parser read); each held partition's result, in `held`'s order.
    pub fn run(
        &self,
        rows: &RecordBatch,
        parsed: Option<&Int64Array>,
        held: Vec<Restore>,
    ) -> Result<Vec<PartitionResult>> {
        let routing = Routing {
            partitions: self.partitions,
            placement: &self.placement,
            keys: &self.keys,
            deal: true,
            threads: self.threads,
        };
        let todo = routing.held_rows(rows, parsed, held)?;
        let mut parts = par_each_owned(todo, self.threads, |(h, rows, parsed)| {
            let cfg = self.cfg.clone();
            let op = match &h.snapshot {
                None => ReorderOperator::new(cfg)?,
                Some(b) => ReorderOperator::restore(cfg, b).map_err(|e| named(e, &h.name))?,
            };
            Ok(Part {
                partition: h.partition,
                op: Op::Reorder(Box::new(op)),
                rows,
                parsed,
                pending: None,
                outputs: Vec::new(),
                dropped: 0,
            })
        })?;
        par_each(&mut parts, self.threads, |p| p.alone(self.flush))?;
        par_each_owned(parts, self.threads, |p| p.finish(None, &self.run, None))
    }
}

/// A reorder's batch from every state partition's report: `None` when one is another
/// run's than `run`.
pub fn summarize_reorder(run: &str, reports: &[Report]) -> Option<ReorderSummary> {
    if reports.iter().any(|r| r.run != run) {
        return None;
    }
    let buffers: Vec<Buffer> = reports.iter().filter_map(|r| r.buffer).collect();
    Some(ReorderSummary {
        counts: reports.iter().map(|r| r.counts).sum(),
        buffer: Buffer {
            // A partition that never had rows has released nothing to wait for.
            watermark: buffers.iter().filter_map(|b| b.watermark).min(),
            rows: buffers.iter().map(|b| b.rows).sum(),
            bytes: buffers.iter().map(|b| b.bytes).sum(),
        },
    })
}

/// A damaged snapshot's error, naming its file.
fn named(e: TidemarkError, name: &str) -> TidemarkError {
    match e {
        TidemarkError::StateCorrupted(m) => TidemarkError::StateCorrupted(format!("{name}: {m}")),
        e => e,
    }
}
