//! Event-time reordering (`PhysicalEventtimeWatermark`) on Arrow batches.
//!
//! Input arrives out of order by event time. [`ReorderOperator`] buffers it and
//! releases it in non-decreasing event-time order (ties in arrival order), followed
//! by a watermark:
//!
//! * `target = max(W, max_seen - late_tolerance)`; rows with `ts < target` are
//!   released, then `W = target` is emitted (only when it rose). The watermark is
//!   monotonic.
//! * DESIGN.md's convention: after emitting `W`, no row with `ts < W` is ever
//!   released. A row arriving with `ts < W` is **late**: dropped and counted, or
//!   returned in the late side output ([`LatePolicy`]).
//! * Rows whose event time cannot be parsed are error rows (with a reason); they
//!   never abort a batch.
//! * No artificial maximum watermark at the end of input: [`ReorderOperator::flush`]
//!   releases what is buffered, in order, and emits no watermark.
//!
//! Every input row is released exactly once, or reported late or as an error.
//!
//! # How it stays fast with large buffers
//!
//! Work is per batch, never per row through a heap of rows: each batch's kept rows
//! are sorted once (index sort on the event time, stable; an already ordered batch
//! is kept as it is, without a copy) into a *run*. A release cuts every run at the
//! target with a binary search and merges the cut prefixes (a k-way merge of sorted
//! runs producing one `interleave` of the columns; one run is a zero-copy slice).
//! Runs are merged into one when there are many of them or when released prefixes
//! hold more memory than the rows still buffered.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;

use arrow_array::{Array, Int64Array, RecordBatch, UInt32Array};
use arrow_buffer::ScalarBuffer;
use arrow_schema::SchemaRef;

use crate::batch::{error_batch, from_ipc_bytes, gather, ipc_bytes, take_rows};
use crate::error::{Result, TidemarkError};
use crate::key::same_values;
use crate::pipeline::LatePolicy;
use crate::state::{self, Reader, SnapshotKind, Writer};
use crate::time::{parse_event_time, EventTimeType, BUILTIN_EVENT_TIME_TYPES};

/// Runs kept before they are merged into one.
const MAX_RUNS: usize = 16;

/// Configuration of a [`ReorderOperator`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReorderConfig {
    /// The event-time column.
    pub event_time: String,
    /// A built-in event-time type name (`None`: an Arrow timestamp or date column).
    pub event_time_type: Option<String>,
    /// Event times come parsed with each batch (user-registered parsers).
    pub parsed_externally: bool,
    /// Tolerated disorder, in microseconds: the watermark trails the largest event
    /// time seen by this much.
    pub late_tolerance: i64,
    /// What happens to rows behind the watermark.
    pub late: LatePolicy,
}

impl ReorderConfig {
    /// A configuration reading `event_time` (a timestamp or date column) with the given
    /// tolerance in microseconds; late rows are dropped.
    pub fn new(event_time: impl Into<String>, late_tolerance: i64) -> Self {
        Self {
            event_time: event_time.into(),
            event_time_type: None,
            parsed_externally: false,
            late_tolerance,
            late: LatePolicy::Drop,
        }
    }

    /// Checks the configuration (everything that can be checked without a schema).
    pub fn validate(&self) -> Result<()> {
        if self.event_time.is_empty() {
            return Err(TidemarkError::config(
                "event_time",
                "the event-time column name is empty",
            ));
        }
        if self.late_tolerance < 0 {
            return Err(TidemarkError::config(
                "late_tolerance",
                format!("must be zero or positive, got {} µs", self.late_tolerance),
            ));
        }
        if let (Some(name), false) = (&self.event_time_type, self.parsed_externally) {
            if EventTimeType::builtin(name).is_none() {
                return Err(TidemarkError::UnknownEventTimeType {
                    name: name.clone(),
                    registered: BUILTIN_EVENT_TIME_TYPES
                        .iter()
                        .map(|s| s.to_string())
                        .collect(),
                });
            }
        }
        Ok(())
    }

    /// A stable hash of the configuration (snapshots of another configuration are
    /// rejected).
    pub fn fingerprint(&self) -> u64 {
        let mut w = Writer::new();
        w.str("reorder");
        w.str(&self.event_time);
        w.str(self.event_time_type.as_deref().unwrap_or(""));
        w.bool(self.parsed_externally);
        w.i64(self.late_tolerance);
        w.u8(self.late as u8);
        xxhash_rust::xxh64::xxh64(&w.finish(), 0x7469_6465)
    }
}

/// What one call released.
#[derive(Debug, Clone)]
pub struct ReorderOutput {
    /// Released rows, in non-decreasing event-time order (ties in arrival order),
    /// with the input schema.
    pub rows: RecordBatch,
    /// The watermark emitted after `rows` (epoch microseconds), if it rose.
    pub watermark: Option<i64>,
    /// Late rows (input schema; empty when late rows are dropped).
    pub late: RecordBatch,
    /// Rows whose event time could not be parsed, with a `reason` column.
    pub errors: RecordBatch,
}

/// Counters of a [`ReorderOperator`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReorderMetrics {
    /// Batches processed.
    pub batches: u64,
    /// Rows received.
    pub rows_in: u64,
    /// Rows released in order.
    pub rows_released: u64,
    /// Rows buffered now.
    pub buffer_size: u64,
    /// Late rows (dropped or sent to the side output).
    pub late_dropped_count: u64,
    /// Error rows.
    pub rows_error: u64,
    /// Watermarks emitted.
    pub watermark_emitted_count: u64,
    /// Largest event time seen (`None` before the first row).
    pub max_timestamp_seen: Option<i64>,
    /// Bytes held by the buffer (Arrow buffers and event times).
    pub buffer_bytes: u64,
}

/// Rows of one arrival in event-time order: the `i`-th row in order is row
/// `order[i]` of `batch` (row `i` when `order` is `None`) with event time `ts[i]`;
/// the first `start` were released already. The batch itself is not copied.
#[derive(Debug, Clone)]
struct Run {
    batch: RecordBatch,
    order: Option<Vec<u32>>,
    ts: ScalarBuffer<i64>,
    start: usize,
}

impl Run {
    /// Row of `batch` holding the `i`-th row in order.
    #[inline]
    fn row(&self, i: usize) -> usize {
        self.order.as_ref().map_or(i, |o| o[i] as usize)
    }

    fn len(&self) -> usize {
        self.ts.len() - self.start
    }
    /// Index of the first row at or after `start` with `ts >= below`.
    fn cut(&self, below: i64) -> usize {
        self.start + self.ts[self.start..].partition_point(|&t| t < below)
    }
}

/// The event-time reorder operator (see the module docs).
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use arrow_array::{Int64Array, RecordBatch};
/// use arrow_schema::{DataType, Field, Schema};
/// use tidemark_core::reorder::{ReorderConfig, ReorderOperator};
///
/// let mut cfg = ReorderConfig::new("ts", 2_000_000); // 2 s of tolerated disorder
/// cfg.event_time_type = Some("unixtimestamp_ms".into());
/// let mut op = ReorderOperator::new(cfg).unwrap();
/// let schema = Arc::new(Schema::new(vec![Field::new("ts", DataType::Int64, true)]));
/// let batch = |ts: Vec<i64>| {
///     RecordBatch::try_new(schema.clone(), vec![Arc::new(Int64Array::from(ts))]).unwrap()
/// };
/// let out = op.process(&batch(vec![5_000, 1_000, 3_000]), None).unwrap();
/// // max seen 5 s, tolerance 2 s: watermark 3 s, rows before it come out in order
/// assert_eq!(out.watermark, Some(3_000_000));
/// assert_eq!(out.rows.num_rows(), 1);
/// let out = op.process(&batch(vec![2_000, 9_000]), None).unwrap(); // 2 s is late now
/// assert_eq!(out.watermark, Some(7_000_000));
/// assert_eq!(op.metrics().late_dropped_count, 1);
/// assert_eq!(out.rows.num_rows(), 2); // 3 s, 5 s
/// assert_eq!(op.flush().unwrap().rows.num_rows(), 1); // 9 s
/// ```
#[derive(Debug, Clone)]
pub struct ReorderOperator {
    cfg: ReorderConfig,
    /// Input schema, bound by the first batch.
    schema: Option<SchemaRef>,
    time_type: Option<EventTimeType>,
    /// Current watermark (`i64::MIN`: none emitted yet).
    watermark: i64,
    /// Largest event time buffered so far (`i64::MIN`: none).
    max_seen: i64,
    runs: Vec<Run>,
    metrics: ReorderMetrics,
}

impl ReorderOperator {
    /// A new operator (checks the configuration).
    pub fn new(cfg: ReorderConfig) -> Result<Self> {
        cfg.validate()?;
        Ok(Self {
            cfg,
            schema: None,
            time_type: None,
            watermark: i64::MIN,
            max_seen: i64::MIN,
            runs: Vec::new(),
            metrics: ReorderMetrics::default(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &ReorderConfig {
        &self.cfg
    }

    /// The current watermark (epoch microseconds), if one was emitted.
    pub fn watermark(&self) -> Option<i64> {
        (self.watermark != i64::MIN).then_some(self.watermark)
    }

    /// Counters, with the buffer's current size.
    pub fn metrics(&self) -> ReorderMetrics {
        let mut m = self.metrics.clone();
        m.buffer_size = self.runs.iter().map(|r| r.len() as u64).sum();
        m.max_timestamp_seen = (self.max_seen != i64::MIN).then_some(self.max_seen);
        m.buffer_bytes = self
            .runs
            .iter()
            .map(|r| (r.batch.get_array_memory_size() + r.ts.inner().capacity()) as u64)
            .sum();
        m
    }

    /// Checks `schema` against the configuration (column present, type readable) and
    /// binds the operator to it; a later batch must have the same schema.
    pub fn bind(&mut self, schema: &SchemaRef) -> Result<()> {
        if let Some(bound) = &self.schema {
            if bound.fields() != schema.fields() {
                self.relayout(schema)?;
            }
            return Ok(());
        }
        let i = crate::error::column_index(schema, &self.cfg.event_time)?;
        if !self.cfg.parsed_externally {
            self.time_type = Some(EventTimeType::resolve(
                self.cfg.event_time_type.as_deref(),
                &self.cfg.event_time,
                schema.field(i).data_type(),
                false,
            )?);
        }
        self.schema = Some(schema.clone());
        Ok(())
    }

    /// Binds a batch whose columns hold the values of the bound ones in another Arrow
    /// layout (see [`same_values`]: a string column as `large_string`, an event time
    /// in another zone): the rows held take the batch's layout, as the rows released
    /// with them must. Any other change is an error, and leaves the operator as it was.
    fn relayout(&mut self, schema: &SchemaRef) -> Result<()> {
        let bound = self.schema.as_ref().expect("bound");
        let changed = |why: String| {
            TidemarkError::config(
                "schema",
                format!(
                    "the input schema changed mid-stream: {why}; the operator holds rows of \
                     the first schema: flush it and start a new operator"
                ),
            )
        };
        let (old, new) = (bound.fields(), schema.fields());
        if old.len() != new.len() || old.iter().zip(new).any(|(a, b)| a.name() != b.name()) {
            let names = |f: &arrow_schema::Fields| {
                f.iter()
                    .map(|f| f.name().as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            return Err(changed(format!(
                "its columns were {}, this batch's are {}",
                names(old),
                names(new)
            )));
        }
        for (a, b) in old.iter().zip(new) {
            if !same_values(a.data_type(), b.data_type()) || a.is_nullable() != b.is_nullable() {
                let null = |f: &arrow_schema::Field| if f.is_nullable() { "" } else { " not null" };
                return Err(changed(format!(
                    "column {:?} changed type from {}{} to {}{}",
                    a.name(),
                    a.data_type(),
                    null(a),
                    b.data_type(),
                    null(b)
                )));
            }
        }
        if let Some(ty) = self.time_type {
            let i = schema.index_of(&self.cfg.event_time).expect("same names");
            let t = schema.field(i).data_type();
            let next = EventTimeType::resolve(
                self.cfg.event_time_type.as_deref(),
                &self.cfg.event_time,
                t,
                false,
            )?;
            if next != ty {
                return Err(changed(format!(
                    "the event-time column {:?} is now read as {next:?}, not {ty:?}",
                    self.cfg.event_time
                )));
            }
        }
        let runs = self
            .runs
            .iter()
            .map(|r| {
                let columns = (r.batch.columns().iter().zip(new))
                    .map(|(c, f)| arrow_cast::cast(c, f.data_type()))
                    .collect::<std::result::Result<Vec<_>, _>>()?;
                Ok(RecordBatch::try_new(schema.clone(), columns)?)
            })
            .collect::<Result<Vec<_>>>()?;
        for (run, batch) in self.runs.iter_mut().zip(runs) {
            run.batch = batch;
        }
        self.schema = Some(schema.clone());
        Ok(())
    }

    /// Takes one batch; returns the rows it made safe to release, in order, and the
    /// watermark that follows them. `parsed_times` (int64 epoch microseconds, one per
    /// row, null where a row failed) replaces parsing the event-time column.
    pub fn process(
        &mut self,
        batch: &RecordBatch,
        parsed_times: Option<&Int64Array>,
    ) -> Result<ReorderOutput> {
        self.bind(batch.schema_ref())?;
        let n = batch.num_rows();
        self.metrics.batches += 1;
        self.metrics.rows_in += n as u64;
        let (times, mut errors) = self.event_times(batch, parsed_times)?;

        // Split the batch: error rows, late rows, kept rows.
        let wm = self.watermark;
        let mut late_rows: Vec<u32> = Vec::new();
        let mut keep: Vec<u32> = Vec::with_capacity(n);
        let tv = times.values();
        let mut batch_max = i64::MIN;
        let mut sorted = true;
        let mut prev = i64::MIN;
        let nulls = times.nulls();
        for (i, &t) in tv.iter().enumerate() {
            if nulls.is_some_and(|nb| nb.is_null(i)) {
                continue;
            }
            if t < wm {
                late_rows.push(i as u32);
                continue;
            }
            sorted &= t >= prev;
            prev = t;
            batch_max = batch_max.max(t);
            keep.push(i as u32);
        }
        self.metrics.late_dropped_count += late_rows.len() as u64;
        errors.sort_by_key(|e| e.0);
        self.metrics.rows_error += errors.len() as u64;

        if !keep.is_empty() {
            self.push_run(batch, times.values(), keep, sorted)?;
            self.max_seen = self.max_seen.max(batch_max);
        }

        // The target watermark, and the rows it releases.
        let mut watermark = None;
        let mut rows = self.empty();
        if self.max_seen != i64::MIN {
            let target = self
                .watermark
                .max(self.max_seen.saturating_sub(self.cfg.late_tolerance));
            if target > self.watermark {
                rows = self.release(Some(target))?;
                self.watermark = target;
                self.metrics.watermark_emitted_count += 1;
                watermark = Some(target);
            }
        }
        let late = match self.cfg.late {
            LatePolicy::SideOutput => take_rows(batch, &late_rows)?,
            LatePolicy::Drop => RecordBatch::new_empty(batch.schema()),
        };
        Ok(ReorderOutput {
            rows,
            watermark,
            late,
            errors: error_batch(batch, &errors)?,
        })
    }

    /// Releases everything buffered, in order (end of input). Emits no watermark: the
    /// end of a stream is not a promise about event time.
    pub fn flush(&mut self) -> Result<ReorderOutput> {
        let rows = self.release(None)?;
        let empty = self.empty();
        let errors = error_batch(&empty, &[])?;
        Ok(ReorderOutput {
            rows,
            watermark: None,
            late: empty,
            errors,
        })
    }

    fn empty(&self) -> RecordBatch {
        match &self.schema {
            Some(s) => RecordBatch::new_empty(s.clone()),
            None => RecordBatch::new_empty(Arc::new(arrow_schema::Schema::empty())),
        }
    }

    /// Event times in epoch microseconds and the rows that failed.
    fn event_times(
        &self,
        batch: &RecordBatch,
        parsed: Option<&Int64Array>,
    ) -> Result<(Int64Array, Vec<(usize, String)>)> {
        let n = batch.num_rows();
        if let Some(p) = parsed {
            if p.len() != n {
                return Err(TidemarkError::config(
                    "event_time",
                    format!("{} parsed event times for {n} rows", p.len()),
                ));
            }
            let errors = (0..n)
                .filter(|&i| p.is_null(i))
                .map(|i| (i, "event time could not be parsed".to_string()))
                .collect();
            return Ok((p.clone(), errors));
        }
        let i = batch
            .schema_ref()
            .index_of(&self.cfg.event_time)
            .expect("bound schema has the column");
        let ty = self.time_type.expect("bound");
        let parsed = parse_event_time(batch.column(i).as_ref(), ty)?;
        Ok((parsed.values, parsed.errors))
    }

    /// Adds the kept rows of a batch as a sorted run.
    fn push_run(
        &mut self,
        batch: &RecordBatch,
        tv: &ScalarBuffer<i64>,
        keep: Vec<u32>,
        sorted: bool,
    ) -> Result<()> {
        let (order, ts) = if sorted && keep.len() == batch.num_rows() {
            // In order and complete: the run shares the batch and its event times.
            (None, tv.clone())
        } else if sorted {
            let ts: Vec<i64> = keep.iter().map(|&i| tv[i as usize]).collect();
            (Some(keep), ts.into())
        } else {
            let (order, ts) = sort_rows(tv, &keep);
            (Some(order), ts.into())
        };
        self.runs.push(Run {
            batch: batch.clone(),
            order,
            ts,
            start: 0,
        });
        let live: usize = self.runs.iter().map(Run::len).sum();
        let dead: usize = self.runs.iter().map(|r| r.start).sum();
        if self.runs.len() > MAX_RUNS || (dead > live && dead > 65_536) {
            self.compact()?;
        }
        Ok(())
    }

    /// Merges every run into one (frees released prefixes; keeps the order).
    fn compact(&mut self) -> Result<()> {
        if let [run] = self.runs.as_slice() {
            if run.start == 0 && run.order.is_none() {
                return Ok(());
            }
        }
        let (batch, ts) = self.merge(None, true)?;
        self.runs.clear();
        if !ts.is_empty() {
            self.runs.push(Run {
                batch,
                order: None,
                ts: ts.into(),
                start: 0,
            });
        }
        Ok(())
    }

    /// Releases the buffered rows with `ts < below` (all rows for `None`), in order.
    fn release(&mut self, below: Option<i64>) -> Result<RecordBatch> {
        let (batch, _) = self.merge(below, false)?;
        self.runs.retain(|r| r.len() > 0);
        self.metrics.rows_released += batch.num_rows() as u64;
        Ok(batch)
    }

    /// Takes the rows `ts < below` out of every run, merged in (event time, arrival)
    /// order, with their event times when `with_times`.
    fn merge(&mut self, below: Option<i64>, with_times: bool) -> Result<(RecordBatch, Vec<i64>)> {
        let mut parts: Vec<(usize, usize, usize)> = Vec::new(); // (run, from, to)
        for (r, run) in self.runs.iter().enumerate() {
            let to = below.map_or(run.ts.len(), |b| run.cut(b));
            if to > run.start {
                parts.push((r, run.start, to));
            }
        }
        let out = match parts.as_slice() {
            [] => (self.empty(), Vec::new()),
            &[(r, from, to)] => {
                let run = &self.runs[r];
                let ts = if with_times {
                    run.ts[from..to].to_vec()
                } else {
                    Vec::new()
                };
                let rows = match &run.order {
                    None => run.batch.slice(from, to - from),
                    Some(o) => {
                        let idx = UInt32Array::from(o[from..to].to_vec());
                        arrow_select::take::take_record_batch(&run.batch, &idx)?
                    }
                };
                (rows, ts)
            }
            _ => {
                let total: usize = parts.iter().map(|p| p.2 - p.1).sum();
                let mut indices: Vec<(u32, u32)> = Vec::with_capacity(total);
                let mut ts = Vec::with_capacity(if with_times { total } else { 0 });
                // k-way merge; run index breaks ties (runs are in arrival order).
                let mut heap: BinaryHeap<Reverse<(i64, usize, usize)>> = parts
                    .iter()
                    .enumerate()
                    .map(|(p, &(r, from, _))| Reverse((self.runs[r].ts[from], p, from)))
                    .collect();
                while let Some(Reverse((_, p, row))) = heap.pop() {
                    let (r, _, to) = parts[p];
                    let run = &self.runs[r];
                    // Take the run's rows while they still come first.
                    let limit = heap.peek().map(|Reverse((t, q, _))| (*t, *q));
                    let mut i = row;
                    while i < to && limit.is_none_or(|(t, q)| (run.ts[i], p) < (t, q)) {
                        indices.push((p as u32, run.row(i) as u32));
                        i += 1;
                    }
                    if with_times {
                        ts.extend_from_slice(&run.ts[row..i]);
                    }
                    let run_ts = &run.ts;
                    if i < to {
                        heap.push(Reverse((run_ts[i], p, i)));
                    }
                }
                let batches: Vec<&RecordBatch> =
                    parts.iter().map(|&(r, _, _)| &self.runs[r].batch).collect();
                (gather(&batches, &indices)?, ts)
            }
        };
        for &(r, _, to) in &parts {
            self.runs[r].start = to;
        }
        Ok(out)
    }

    /// Serialises the operator (watermark, counters, buffered rows in order).
    pub fn snapshot(&self) -> Result<Vec<u8>> {
        let mut copy = self.clone();
        copy.compact()?;
        let mut w = Writer::new();
        w.i64(self.watermark);
        w.i64(self.max_seen);
        let m = &self.metrics;
        for v in [
            m.batches,
            m.rows_in,
            m.rows_released,
            m.late_dropped_count,
            m.rows_error,
            m.watermark_emitted_count,
        ] {
            w.u64(v);
        }
        match &copy.schema {
            None => w.bool(false),
            Some(schema) => {
                w.bool(true);
                let batch = copy.runs.first().map_or_else(
                    || RecordBatch::new_empty(schema.clone()),
                    |r| r.batch.clone(),
                );
                let ts: &[i64] = copy.runs.first().map_or(&[], |r| &r.ts);
                w.len(ts.len());
                ts.iter().for_each(|&t| w.i64(t));
                w.bytes(&ipc_bytes(&batch)?);
            }
        }
        Ok(state::seal(
            SnapshotKind::Reorder,
            self.cfg.fingerprint(),
            &w.finish(),
        ))
    }

    /// Restores an operator from [`Self::snapshot`] bytes written with the same
    /// configuration.
    pub fn restore(cfg: ReorderConfig, bytes: &[u8]) -> Result<Self> {
        let mut op = Self::new(cfg)?;
        let payload = state::open(bytes, SnapshotKind::Reorder, Some(op.cfg.fingerprint()))?;
        let mut r = Reader::new(payload);
        op.watermark = r.i64()?;
        op.max_seen = r.i64()?;
        let m = &mut op.metrics;
        for v in [
            &mut m.batches,
            &mut m.rows_in,
            &mut m.rows_released,
            &mut m.late_dropped_count,
            &mut m.rows_error,
            &mut m.watermark_emitted_count,
        ] {
            *v = r.u64()?;
        }
        if r.bool()? {
            let n = r.len(8)?;
            let ts = (0..n).map(|_| r.i64()).collect::<Result<Vec<_>>>()?;
            let batch = from_ipc_bytes(r.bytes()?)?;
            if batch.num_rows() != n || ts.windows(2).any(|w| w[0] > w[1]) {
                return Err(TidemarkError::StateCorrupted(
                    "reorder buffer: event times do not match the buffered rows".into(),
                ));
            }
            op.bind(batch.schema_ref())?;
            if n > 0 {
                op.runs.push(Run {
                    batch,
                    order: None,
                    ts: ts.into(),
                    start: 0,
                });
            }
        }
        r.finish()?;
        Ok(op)
    }
}

/// The kept rows in (event time, row) order, with their times. Rows that keep up
/// with the running maximum are in order already; only the others are sorted, then
/// the two sorted lists are merged: near-sorted input costs about one pass.
fn sort_rows(tv: &[i64], keep: &[u32]) -> (Vec<u32>, Vec<i64>) {
    let mut main: Vec<u32> = Vec::with_capacity(keep.len());
    let mut rest: Vec<(i64, u32)> = Vec::new();
    let mut hi = i64::MIN;
    for &i in keep {
        let t = tv[i as usize];
        if t >= hi {
            hi = t;
            main.push(i);
        } else {
            rest.push((t, i));
        }
    }
    rest.sort_unstable();
    let mut order = Vec::with_capacity(keep.len());
    let mut ts = Vec::with_capacity(keep.len());
    let mut m = main.iter().map(|&i| (tv[i as usize], i)).peekable();
    for (t, i) in rest {
        while let Some(&(mt, mi)) = m.peek() {
            if (mt, mi) > (t, i) {
                break;
            }
            order.push(mi);
            ts.push(mt);
            m.next();
        }
        order.push(i);
        ts.push(t);
    }
    for (mt, mi) in m {
        order.push(mi);
        ts.push(mt);
    }
    (order, ts)
}

#[cfg(test)]
#[path = "reorder_tests.rs"]
mod tests;
