//! Thread-per-core runtime: a pipeline operator sharded by key over worker threads.
//!
//! [`ShardedOperator`] owns `N` worker threads, created with it (never at import) and
//! joined when it is dropped. Each worker owns one [`Operator`]: the windows, timers and
//! per-key watermarks of the keys the [`Router`] sends it (xxh3 of the canonical key,
//! see [`crate::route`]). Workers are fed through bounded queues (a full queue blocks
//! the caller: nothing is dropped) and share no mutable state, so the hot path takes no
//! lock.
//!
//! Each `process` call runs in two steps so that the output is identical to one
//! operator's (the [`crate::time::CoreWatermarkState`] pattern of collecting core
//! watermarks and broadcasting the combined one):
//!
//! 1. every shard ingests its rows against the watermark as it stood when the call
//!    began (the coordinator's combined watermark, set on each shard), and reports its
//!    progress (on-time maximum, per-partition maxima, its keys' watermark minimum);
//! 2. the coordinator combines the progress exactly as one operator would (global:
//!    max event time - delay; partition: a [`PartitionedWatermarkTracker`](crate::time::PartitionedWatermarkTracker) with
//!    idleness; key: minimum over active keys of all shards) and broadcasts the result;
//!    every shard closes its windows at it.
//!
//! The windows of all shards are merged in the single-operator order (window end,
//! window start, key, retraction first); late and error rows come back in input order.

mod merge;
mod metrics;
pub mod micro_batch;
mod report;
mod routing;
mod snapshot;
mod worker;

pub use metrics::{BackpressureState, CoreMetrics, LatencyHistogram};
pub use snapshot::restore_operator;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{Int64Array, RecordBatch, UInt32Array};

use crate::clock::ClockRef;
use crate::error::{Result, TidemarkError};
use crate::pipeline::{
    merged_partition_max, Agreement, Bounds, External, ScopeWatermark, Start, TimeMode,
};
use crate::pipeline::{
    LatenessSummary, Operator, Output, PipelineConfig, PipelineMetrics, Progress, Scope,
};
use crate::route::{group_rows, HashAlgo, Router, Strategy};
use crate::time::KeyedWatermarkMetrics;
use merge::{interleave, MergeKeys};
use worker::{Job, Reply, ShardRows, SplitWork, Worker};

/// Starts a wall-clock measurement for the per-core metrics (busy time, latency).
/// The one place the runtime reads the system clock: metrics only, never a result,
/// which read time through [`crate::clock::Clock`].
#[allow(clippy::disallowed_methods)]
fn stopwatch() -> Instant {
    Instant::now()
}

/// Default capacity of each worker's queue (messages).
pub const DEFAULT_QUEUE_CAPACITY: usize = 4;

/// A pipeline operator whose keyed state is sharded over worker threads.
///
/// Same inputs, same outputs as one [`Operator`] (rows, order, late and error rows),
/// for any number of cores. `max_keys` applies per shard.
pub struct ShardedOperator {
    cfg: PipelineConfig,
    /// Shared with the workers while they route a batch themselves.
    router: Arc<Router>,
    workers: Vec<Worker>,
    capacity: usize,
    created: Instant,
    clock: ClockRef,
    /// Coordinator state: the watermark combined over the shards.
    scope: ScopeWatermark,
    progress: Progress,
    /// Two-phase mode: shards emit partial aggregates, merged here per window.
    partial: bool,
    /// Spread keys carrying at least this share of a batch's rows over all cores.
    hot_share: Option<f64>,
    /// Binds the schema and finishes merged partials (never processes rows).
    finisher: Option<Operator>,
    last_schema: Option<arrow_schema::SchemaRef>,
    windows_out: u64,
    hot_rows: u64,
    hot_keys: usize,
    /// The broadcast lookup, joined here once per batch before routing: one copy
    /// serves every core.
    lookup: Option<Arc<crate::pipeline::lookup::Lookup>>,
    /// Input rows an inner lookup join dropped.
    rows_unmatched: u64,
}

impl std::fmt::Debug for ShardedOperator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardedOperator")
            .field("cores", &self.workers.len())
            .field("watermark", &self.watermark())
            .finish()
    }
}

impl ShardedOperator {
    /// An operator over `cores` worker threads (started now) with queues of
    /// `queue_capacity` messages.
    pub fn new(
        cfg: PipelineConfig,
        clock: ClockRef,
        cores: usize,
        queue_capacity: usize,
    ) -> Result<Self> {
        Self::build(cfg, clock, cores, queue_capacity, None, None)
    }

    /// As [`Self::new`], spreading hot keys: a key carrying at least `share` of a
    /// batch's rows has its rows spread over all cores, and the partial aggregates
    /// of its windows merge when they close, so results stay exact. Needs a global
    /// or partition watermark (a per-key watermark must see all of its key's rows),
    /// tumbling or sliding windows, and `on_window_close`.
    pub fn with_hot_keys(
        cfg: PipelineConfig,
        clock: ClockRef,
        cores: usize,
        queue_capacity: usize,
        share: f64,
    ) -> Result<Self> {
        Self::build(cfg, clock, cores, queue_capacity, None, Some(share))
    }

    fn build(
        cfg: PipelineConfig,
        clock: ClockRef,
        cores: usize,
        queue_capacity: usize,
        shards: Option<Vec<&[u8]>>,
        hot_share: Option<f64>,
    ) -> Result<Self> {
        cfg.validate()?;
        if cores == 0 || cores > 1024 {
            return Err(TidemarkError::config(
                "cores",
                format!("must be between 1 and 1024, got {cores}"),
            ));
        }
        if queue_capacity == 0 {
            return Err(TidemarkError::config(
                "queue_capacity",
                "must be at least 1",
            ));
        }
        if let Some(share) = hot_share {
            if !(share > 0.0 && share <= 1.0) {
                return Err(TidemarkError::config(
                    "hot_keys",
                    format!("the share of a batch's rows that makes a key hot must be in (0, 1], got {share}"),
                ));
            }
            if cfg.keys.is_empty() {
                return Err(TidemarkError::config(
                    "hot_keys",
                    "a global aggregate (key=None) has no keys to spread; it is spread over cores already",
                ));
            }
        }
        let partial = cores > 1 && (cfg.keys.is_empty() || hot_share.is_some());
        if partial {
            let what = if cfg.keys.is_empty() {
                "a global aggregate (key=None) on several cores"
            } else {
                "spreading hot keys"
            };
            if cfg.scope == Scope::Key {
                return Err(TidemarkError::config(
                    "hot_keys",
                    format!("{what} needs a global or partition watermark: a per-key watermark must see every row of its key"),
                ));
            }
            if matches!(cfg.window, crate::window::WindowSpec::Session { .. }) {
                return Err(TidemarkError::config(
                    "window",
                    format!("{what} merges partial windows; sessions cannot merge that way (use cores=1)"),
                ));
            }
            if cfg.emit != crate::pipeline::EmitMode::OnWindowClose {
                return Err(TidemarkError::config(
                    "emit",
                    format!("{what} needs emit=\"on_window_close\" (use cores=1 for on_update)"),
                ));
            }
        }
        let router = if cfg.keys.is_empty() {
            // A global aggregate: rows spread in turn; partials merge per window.
            Router::new(cores, Strategy::RoundRobin, None)?
        } else {
            Router::new(
                cores,
                Strategy::Hash {
                    keys: cfg.keys.clone(),
                    algo: HashAlgo::Xxh3,
                },
                None,
            )?
        };
        let mut workers = Vec::with_capacity(cores);
        for i in 0..cores {
            let op = match &shards {
                Some(s) => Operator::restore(cfg.clone(), clock.clone(), s[i])?,
                None => Operator::new(cfg.clone(), clock.clone())?,
            };
            let mut op = op;
            op.set_partial_output(partial);
            workers.push(Worker::spawn(i, op, queue_capacity, cores > 1)?);
        }
        let scope = ScopeWatermark::new(&cfg, clock.clone());
        Ok(Self {
            cfg,
            router: Arc::new(router),
            workers,
            capacity: queue_capacity,
            created: stopwatch(),
            clock,
            scope,
            progress: Progress::default(),
            partial,
            hot_share,
            finisher: None,
            last_schema: None,
            windows_out: 0,
            hot_rows: 0,
            hot_keys: 0,
            lookup: None,
            rows_unmatched: 0,
        })
    }

    /// Number of worker threads.
    pub fn cores(&self) -> usize {
        self.workers.len()
    }

    /// The configuration.
    pub fn config(&self) -> &PipelineConfig {
        &self.cfg
    }

    /// The combined watermark (as [`Operator::watermark`]).
    pub fn watermark(&self) -> Option<i64> {
        self.scope.current()
    }

    /// What the last `process` call saw, combined over shards.
    pub fn progress(&self) -> &Progress {
        &self.progress
    }

    /// The combined watermark the call begins with, for every shard: it judges rows
    /// (global and partition scope) and, under Spark's rule, closes windows (per key:
    /// idle keys' windows).
    fn threshold(&self) -> Start {
        Start::Scope(self.scope.current())
    }

    /// As [`Operator::set_lookup`]: every input row is joined with `lookup` (once,
    /// before routing) and the cores see the enriched rows.
    pub fn set_lookup(&mut self, lookup: Option<Arc<crate::pipeline::lookup::Lookup>>) {
        self.lookup = lookup;
    }

    /// Processes one batch (one arrival unit), as [`Operator::process`].
    pub fn process(
        &mut self,
        batch: &RecordBatch,
        parsed_times: Option<&Int64Array>,
    ) -> Result<Output> {
        let Some(l) = self.lookup.clone() else {
            return self.process_rows(batch, parsed_times);
        };
        let (enriched, parsed, dropped) = l.enrich_input(batch, parsed_times)?;
        self.rows_unmatched += dropped as u64;
        self.process_rows(&enriched, parsed.as_ref())
    }

    fn process_rows(
        &mut self,
        batch: &RecordBatch,
        parsed_times: Option<&Int64Array>,
    ) -> Result<Output> {
        // Configuration mistakes surface here, before any shard changes state.
        Operator::output_schema(&self.cfg, batch.schema_ref())?;
        if let Some(p) = parsed_times {
            if p.len() != batch.num_rows() {
                return Err(TidemarkError::config(
                    "event_time",
                    format!(
                        "{} parsed event times for {} rows",
                        p.len(),
                        batch.num_rows()
                    ),
                ));
            }
        }
        let n = self.workers.len();
        self.last_schema = Some(batch.schema());
        let rows = if n == 1 {
            ShardRows::All
        } else if let Some(share) = self.hot_share {
            let ids = self.hot_partition_ids(batch, share)?;
            ShardRows::Grouped(Arc::new(group_rows(&ids, n)))
        } else if self.router.is_stateless() {
            // The workers route the rows themselves (in parallel). A worker that
            // stopped would leave the others waiting at the barrier: check first
            // (an idle worker cannot stop on its own), and validate the keys here.
            if self.workers.iter().any(Worker::stopped) {
                return Err(Worker::gone());
            }
            self.router.validate(batch.schema_ref())?;
            ShardRows::Split(Arc::new(SplitWork::new(
                self.router.clone(),
                batch.num_rows(),
                n,
            )))
        } else {
            let ids = Arc::make_mut(&mut self.router).partition_ids(batch)?;
            ShardRows::Grouped(Arc::new(group_rows(&ids, n)))
        };
        let threshold = self.threshold();
        // The bounds on event times, alike for every shard: the wall clock read once;
        // a stream's first rows judge each other here, where all of them are.
        let wall = self
            .clock
            .is_wall()
            .then(|| self.clock.now().saturating_mul(1_000));
        let bounds = match self.scope.time() {
            None if self.cfg.time == TimeMode::Event => Bounds::of_rows(
                &self.cfg,
                &Operator::event_times_of(&self.cfg, batch, parsed_times)?,
                None,
                wall,
            ),
            _ => None,
        };
        for w in &self.workers {
            w.send(Job::Ingest {
                batch: batch.clone(),
                parsed: parsed_times.cloned(),
                rows: rows.clone(),
                external: Box::new(External {
                    watermark: threshold,
                    time: self.scope.time(),
                    wall,
                    bounds,
                    newest: self.scope.max_time(),
                }),
            })?;
        }
        let mut progress = Vec::with_capacity(n);
        let mut late_rows = Vec::with_capacity(n);
        let mut error_rows = Vec::with_capacity(n);
        let mut shard_rows = Vec::with_capacity(n);
        let mut first_err = None;
        for w in &self.workers {
            match w.recv()? {
                Reply::Ingested(Ok(i)) => {
                    progress.push(Some(i.progress));
                    late_rows.push(i.late);
                    error_rows.push(i.errors);
                    shard_rows.push(i.rows);
                }
                Reply::Ingested(Err(e)) => {
                    progress.push(None);
                    late_rows.push(Vec::new());
                    error_rows.push(Vec::new());
                    shard_rows.push(None);
                    first_err.get_or_insert(e);
                }
                _ => unreachable!("ingest replies Ingested"),
            }
        }
        let close = if first_err.is_none() {
            // No combined watermark yet closes nothing.
            Some(self.combine(progress.iter().flatten())?.unwrap_or(i64::MIN))
        } else {
            None
        };
        for (w, p) in self.workers.iter().zip(&progress) {
            if p.is_some() {
                w.send(Job::Complete { close })?;
            }
        }
        let mut outs = Vec::with_capacity(n);
        for (w, p) in self.workers.iter().zip(&progress) {
            if p.is_some() {
                match w.recv()? {
                    Reply::Done(r) => outs.push(r),
                    _ => unreachable!("complete replies Done"),
                }
            }
        }
        if let Some(e) = first_err {
            return Err(e);
        }
        let (outs, keys): (Vec<Output>, Vec<MergeKeys>) = outs
            .into_iter()
            .collect::<Result<Vec<_>>>()?
            .into_iter()
            .unzip();
        if n == 1 {
            return Ok(outs.into_iter().next().expect("one shard"));
        }
        // Input-order merge of late and error rows: shard rows back to input rows.
        let to_input = |per_shard: &[Vec<u32>]| -> Vec<(usize, usize)> {
            let mut all: Vec<(u32, usize, usize)> = Vec::new();
            for (s, rows) in per_shard.iter().enumerate() {
                let map = shard_rows[s]
                    .as_ref()
                    .expect("several shards: rows are mapped");
                for (pos, &r) in rows.iter().enumerate() {
                    all.push((map.value(r as usize), s, pos));
                }
            }
            all.sort_unstable();
            all.into_iter().map(|(_, s, pos)| (s, pos)).collect()
        };
        let late_order = to_input(&late_rows);
        let error_order = to_input(&error_rows);
        let windows = self.merge_windows(outs.iter().map(|o| &o.windows).collect(), &keys)?;
        let late = interleave(outs.iter().map(|o| &o.late).collect(), &late_order)?;
        let errors = interleave(outs.iter().map(|o| &o.errors).collect(), &error_order)?;
        Ok(Output {
            windows,
            late,
            errors,
        })
    }

    /// Partition ids with hot keys spread: keys with at least `share` of a sample of
    /// the batch's rows go round-robin over all cores, the others by hash.
    fn hot_partition_ids(&mut self, batch: &RecordBatch, share: f64) -> Result<Vec<u32>> {
        let n = self.workers.len() as u32;
        let hashes = self.router.key_hashes(batch)?;
        let step = hashes.len().div_ceil(8192).max(1); // a sample of at most 8192 rows
        let mut counts: hashbrown::HashMap<u64, u32> = hashbrown::HashMap::new();
        let mut sampled = 0u32;
        for h in hashes.iter().step_by(step) {
            *counts.entry(*h).or_insert(0) += 1;
            sampled += 1;
        }
        let need = ((share * sampled as f64).ceil() as u32).max(1);
        let hot: Vec<u64> = counts
            .into_iter()
            .filter(|&(_, c)| c >= need)
            .map(|(h, _)| h)
            .collect();
        self.hot_keys = hot.len();
        if hot.is_empty() {
            return Ok(hashes
                .into_iter()
                .map(|h| crate::route::reduce(h, n))
                .collect());
        }
        // Hot rows take turns over the cores (the turn continues across batches).
        let mut next = self.hot_rows;
        let ids = hashes
            .iter()
            .map(|&h| {
                if hot.contains(&h) {
                    next += 1;
                    (next % n as u64) as u32
                } else {
                    crate::route::reduce(h, n)
                }
            })
            .collect();
        self.hot_rows = next;
        Ok(ids)
    }

    /// Combines the shards' progress into the watermark that closes windows now.
    fn combine<'a>(&mut self, progress: impl Iterator<Item = &'a Progress>) -> Result<Option<i64>> {
        let progress: Vec<&Progress> = progress.collect();
        let mut keys = Agreement::default();
        for p in &progress {
            keys.merge(self.cfg.quorum as usize, &p.keys);
        }
        let on_time_max = progress.iter().filter_map(|p| p.on_time_max).max();
        let partition_max = merged_partition_max(progress.iter().copied());
        let close = self.scope.advance(progress.iter().copied())?;
        self.progress = Progress {
            keys,
            partition_max,
            ahead_floor: progress.iter().filter_map(|p| p.ahead_floor).min(),
            key_global: match self.cfg.scope {
                Scope::Key => close,
                _ => None,
            },
            on_time_max,
            key_parts: (
                progress.iter().filter_map(|p| p.key_parts.0).min(),
                progress.iter().filter_map(|p| p.key_parts.1).max(),
            ),
        };
        Ok(close)
    }

    /// A call without rows (see [`Operator::tick`]): an empty batch of the latest
    /// input schema (after a restore, the input fields of the snapshot) through every
    /// shard, so the combined watermark moves on with the clock as well.
    pub fn tick(&mut self) -> Result<Output> {
        let Some(schema) = self.last_schema.clone() else {
            return Ok(Output::nothing());
        };
        // After any lookup join already: processed as joined rows.
        let parsed = self.cfg.no_parsed_times();
        self.process_rows(&RecordBatch::new_empty(schema), parsed.as_ref())
    }

    /// End of input: closes every open window of every shard.
    pub fn flush(&mut self) -> Result<Output> {
        for w in &self.workers {
            w.send(Job::Flush)?;
        }
        let mut outs = Vec::with_capacity(self.workers.len());
        for w in &self.workers {
            match w.recv()? {
                Reply::Done(r) => outs.push(r),
                _ => unreachable!("flush replies Done"),
            }
        }
        let (outs, keys): (Vec<Output>, Vec<MergeKeys>) = outs
            .into_iter()
            .collect::<Result<Vec<_>>>()?
            .into_iter()
            .unzip();
        if outs.len() == 1 {
            return Ok(outs.into_iter().next().expect("one shard"));
        }
        let windows = self.merge_windows(outs.iter().map(|o| &o.windows).collect(), &keys)?;
        let first = outs.into_iter().next().expect("shards");
        Ok(Output {
            windows,
            late: first.late,
            errors: first.errors,
        })
    }

    /// Pipeline metrics summed over shards, and key metrics summed over shards.
    pub fn metrics(&self) -> Result<(PipelineMetrics, KeyedWatermarkMetrics)> {
        self.metrics_and_lateness().map(|(m, k, _)| (m, k))
    }

    /// [`Self::metrics`], and with a lateness report its summary merged over shards.
    pub fn metrics_and_lateness(
        &self,
    ) -> Result<(
        PipelineMetrics,
        KeyedWatermarkMetrics,
        Option<LatenessSummary>,
    )> {
        for w in &self.workers {
            w.send(Job::Metrics)?;
        }
        let mut total = PipelineMetrics::default();
        let mut keys = KeyedWatermarkMetrics::default();
        let mut lateness: Option<LatenessSummary> = None;
        let top = self.cfg.lateness.map_or(0, |l| l.top as usize);
        for w in &self.workers {
            let Reply::Metrics(m) = w.recv()? else {
                unreachable!("metrics replies Metrics")
            };
            let (m, k, l) = *m;
            total.add(&m);
            keys.add(&k);
            if let Some(l) = l {
                match lateness.as_mut() {
                    Some(all) => all.merge(&l, top),
                    None => lateness = Some(l),
                }
            }
        }
        if self.partial {
            // Shards emit partials; the merged windows are what was emitted.
            total.windows_emitted = self.windows_out;
        }
        total.rows_unmatched += self.rows_unmatched;
        total.rows_in += self.rows_unmatched;
        Ok((total, keys, lateness))
    }

    /// Pins worker `i` to CPU core `i` (modulo the cores the process may use).
    /// Returns how many workers were pinned (0 where the platform does not allow it).
    pub fn pin_cores(&self) -> Result<usize> {
        let ids = core_affinity::get_core_ids().unwrap_or_default();
        if ids.is_empty() {
            return Ok(0);
        }
        for (i, w) in self.workers.iter().enumerate() {
            w.send(Job::Pin(ids[i % ids.len()]))?;
        }
        let mut pinned = 0;
        for w in &self.workers {
            if let Reply::Pinned(true) = w.recv()? {
                pinned += 1;
            }
        }
        Ok(pinned)
    }

    /// Hot-key spreading: rows spread so far, and hot keys in the last batch.
    pub fn hot_key_metrics(&self) -> (u64, usize) {
        (self.hot_rows, self.hot_keys)
    }

    /// Per-core runtime metrics (records, busy time, queue depth, utilisation,
    /// backpressure, latency percentiles).
    pub fn core_metrics(&self) -> Vec<CoreMetrics> {
        let elapsed = self.created.elapsed().as_nanos().max(1) as f64;
        self.workers
            .iter()
            .enumerate()
            .map(|(i, w)| {
                let sh = &w.shared;
                let depth = sh.queue_depth.load(Ordering::Relaxed);
                let busy = sh.busy_ns.load(Ordering::Relaxed);
                CoreMetrics {
                    core: i,
                    records_processed: sh.records.load(Ordering::Relaxed),
                    processing_time_us: busy / 1_000,
                    queue_depth: depth,
                    queue_capacity: self.capacity,
                    channel_utilization: depth as f64 / self.capacity as f64,
                    utilization: (busy as f64 / elapsed).min(1.0),
                    backpressure: BackpressureState::of(depth as f64 / self.capacity as f64),
                    backpressure_events: sh.backpressure_events.load(Ordering::Relaxed),
                    latency_p50_us: sh.latency.percentile(0.50),
                    latency_p95_us: sh.latency.percentile(0.95),
                    latency_p99_us: sh.latency.percentile(0.99),
                }
            })
            .collect()
    }
}

impl crate::pipeline::ArrivalOperator for ShardedOperator {
    fn process(&mut self, batch: &RecordBatch, parsed: Option<&Int64Array>) -> Result<Output> {
        Self::process(self, batch, parsed)
    }
    fn flush(&mut self) -> Result<Output> {
        self.flush()
    }
    fn tick(&mut self) -> Result<Output> {
        ShardedOperator::tick(self)
    }
    fn snapshot(&self) -> Result<Vec<u8>> {
        self.snapshot()
    }
}

/// The worker's rows of `batch` (and of the parsed times), and their input row
/// numbers (`None`: all rows).
fn shard_rows(
    batch: RecordBatch,
    parsed: Option<Int64Array>,
    rows: ShardRows,
    s: usize,
) -> Result<(RecordBatch, Option<Int64Array>, Option<UInt32Array>)> {
    let idx = UInt32Array::from(match rows {
        ShardRows::All => return Ok((batch, parsed, None)),
        ShardRows::Grouped(groups) => {
            groups.rows[groups.offsets[s]..groups.offsets[s + 1]].to_vec()
        }
        ShardRows::Split(split) => split.rows_of(&batch, s)?,
    });
    let sub = arrow_select::take::take_record_batch(&batch, &idx)?;
    let parsed = match parsed {
        Some(p) => Some(
            arrow_select::take::take(&p, &idx, None)?
                .as_primitive::<Int64Type>()
                .clone(),
        ),
        None => None,
    };
    Ok((sub, parsed, Some(idx)))
}

#[cfg(test)]
mod tests;
