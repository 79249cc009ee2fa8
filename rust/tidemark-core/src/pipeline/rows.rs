//! ROWS windows: the last `n` rows of each key (a moving aggregate), one output row
//! per input row.
//!
//! Rows of a key are taken in arrival order across calls and in event-time order
//! within a call (ties in input order). For every valid input row the output has the
//! key, `window_start` (event time of the oldest of the key's last `n` rows),
//! `window_end` (this row's event time, inclusive), the aggregates over those rows,
//! and `retract = false` (an `on_update` changelog that only inserts). ROWS windows
//! are count-based: there is no watermark and no late row. State is bounded by `n`
//! rows per key (each kept as one mergeable partial aggregate per aggregate).

use std::collections::VecDeque;
use std::sync::Arc;

use arrow_array::{Array, ArrayRef, BooleanArray, Int64Array, RecordBatch, RecordBatchOptions};
use arrow_schema::Schema;

use super::bind::Binding;
use super::emit::time_column;
use super::snapshot::{read_fields, schema_changed, write_fields};
use super::{Operator, Output, PipelineConfig, PipelineMetrics};
use crate::agg::codec::{read_acc, write_acc};
use crate::agg::Acc;
use crate::batch::error_batch;
use crate::error::{Result, TidemarkError};
use crate::key::{decode_key_columns, KeyTable};
use crate::state::{self, Reader, SnapshotKind, Writer};
use crate::time::parse_event_time;
use crate::window::WindowSpec;

/// The operator of a pipeline with `window = Rows { n }`.
#[derive(Debug)]
pub struct RowsOperator {
    cfg: PipelineConfig,
    n: usize,
    bound: Option<Binding>,
    keys: KeyTable,
    /// Per key slot: the last `n` rows (event time, one partial aggregate per agg).
    rows: Vec<VecDeque<(i64, Vec<Acc>)>>,
    metrics: PipelineMetrics,
}

impl RowsOperator {
    /// A fresh operator (`cfg.window` must be `Rows`).
    pub fn new(cfg: PipelineConfig) -> Result<Self> {
        cfg.validate()?;
        let WindowSpec::Rows { n } = cfg.window else {
            return Err(TidemarkError::config(
                "window",
                "RowsOperator runs ROWS windows",
            ));
        };
        Ok(Self {
            n: n as usize,
            cfg,
            bound: None,
            keys: KeyTable::new(),
            rows: Vec::new(),
            metrics: PipelineMetrics::default(),
        })
    }

    /// Metrics (`rows_in`, `rows_error`, `updates_emitted`).
    pub fn metrics(&self) -> PipelineMetrics {
        self.metrics.clone()
    }

    /// Keys in state.
    pub fn key_count(&self) -> usize {
        self.keys.len()
    }

    fn bind(&mut self, schema: &Schema) -> Result<Binding> {
        let b = Operator::bind(&self.cfg, schema)?;
        if let Some(old) = &self.bound {
            if let Some(why) = old.cannot_follow(&b) {
                return Err(schema_changed(&why));
            }
        }
        self.bound = Some(b.clone());
        Ok(b)
    }

    /// Processes one batch: one output row per valid input row.
    pub fn process(
        &mut self,
        batch: &RecordBatch,
        parsed_times: Option<&Int64Array>,
    ) -> Result<Output> {
        let bound = self.bind(batch.schema_ref())?;
        let n = batch.num_rows();
        self.metrics.batches += 1;
        self.metrics.rows_in += n as u64;
        let mut errors: Vec<(usize, String)> = Vec::new();
        let times: Int64Array = match parsed_times {
            Some(p) => {
                for i in 0..n {
                    if p.is_null(i) {
                        errors.push((i, "event time is null or could not be parsed".into()));
                    }
                }
                p.clone()
            }
            None => {
                let (_, ty) = bound
                    .time_type
                    .as_ref()
                    .ok_or_else(|| TidemarkError::config("time", "ROWS windows need event time"))?;
                let parsed = parse_event_time(
                    batch.column(bound.time_idx.expect("event time")).as_ref(),
                    *ty,
                )?;
                errors.extend(parsed.errors);
                parsed.values
            }
        };
        let mut bad = vec![false; n];
        for &(r, _) in &errors {
            bad[r] = true;
        }
        let (inputs, keys) = bound.inputs_and_keys(batch)?;
        // Event-time order within the call; ties keep input order.
        let mut order: Vec<u32> = (0..n as u32).filter(|&r| !bad[r as usize]).collect();
        let tv = times.values();
        order.sort_by_key(|&r| tv[r as usize]);
        let mut out_keys: Vec<Vec<u8>> = Vec::with_capacity(order.len());
        let (mut starts, mut ends) = (
            Vec::with_capacity(order.len()),
            Vec::with_capacity(order.len()),
        );
        let mut merged: Vec<Vec<Acc>> = Vec::with_capacity(order.len());
        let empties: Vec<Acc> = bound.aggs.iter().map(|a| a.new_acc()).collect();
        let mut scratch = Vec::with_capacity(32);
        for &r in &order {
            let r = r as usize;
            scratch.clear();
            keys.encode(r, &mut scratch);
            let (slot, _) = self.keys.get_or_insert(&scratch)?;
            if self.rows.len() <= slot as usize {
                self.rows.resize_with(slot as usize + 1, VecDeque::new);
            }
            let ts = tv[r];
            let mut accs = empties.clone();
            for (j, input) in inputs.iter().enumerate() {
                accs[j].update(input, r, ts);
            }
            let q = &mut self.rows[slot as usize];
            if q.len() == self.n {
                q.pop_front();
            }
            q.push_back((ts, accs));
            let mut total = empties.clone();
            for (_, a) in q.iter() {
                for (t, x) in total.iter_mut().zip(a) {
                    t.merge(x);
                }
            }
            starts.push(q.front().expect("a row").0);
            ends.push(ts);
            merged.push(total);
            out_keys.push(scratch.clone());
        }
        self.metrics.updates_emitted += order.len() as u64;
        errors.sort_by_key(|e| e.0);
        self.metrics.rows_error += errors.len() as u64;
        let rows = order.len();
        let mut columns: Vec<ArrayRef> = if bound.key_types.is_empty() {
            Vec::new()
        } else {
            let refs: Vec<&[u8]> = out_keys.iter().map(Vec::as_slice).collect();
            decode_key_columns(&refs, &bound.key_types)?
        };
        columns.push(time_column(starts.into_iter(), &bound.bound_type)?);
        columns.push(time_column(ends.into_iter(), &bound.bound_type)?);
        for (j, agg) in bound.aggs.iter().enumerate() {
            columns.push(agg.finish(merged.iter().map(|m| &m[j]))?);
        }
        columns.push(Arc::new(BooleanArray::from(vec![false; rows])));
        let windows = RecordBatch::try_new_with_options(
            bound.out_schema.clone(),
            columns,
            &RecordBatchOptions::new().with_row_count(Some(rows)),
        )?;
        Ok(Output {
            windows,
            late: batch.slice(0, 0),
            errors: error_batch(batch, &errors)?,
        })
    }

    /// End of input: nothing is pending (every row was emitted when it arrived).
    pub fn flush(&mut self) -> Result<Output> {
        let Some(b) = &self.bound else {
            return Ok(Output::nothing());
        };
        let (late, errors) = b.no_rejects()?;
        Ok(Output {
            windows: RecordBatch::new_empty(b.out_schema.clone()),
            late,
            errors,
        })
    }

    /// The state (each key's last `n` rows) as bytes.
    pub fn snapshot(&self) -> Vec<u8> {
        let mut w = Writer::new();
        write_fields(
            &mut w,
            self.bound.as_ref().map(|b| b.used_fields.as_slice()),
        );
        let slots: Vec<u32> = self.keys.slots().collect();
        w.len(slots.len());
        for s in slots {
            w.bytes(&self.keys.key(s));
            let q = &self.rows[s as usize];
            w.len(q.len());
            for (ts, accs) in q {
                w.i64(*ts);
                for a in accs {
                    write_acc(&mut w, a);
                }
            }
        }
        let m = &self.metrics;
        for v in [m.batches, m.rows_in, m.rows_error, m.updates_emitted] {
            w.u64(v);
        }
        state::seal(SnapshotKind::Pipeline, self.cfg.fingerprint(), &w.finish())
    }

    /// Restores [`Self::snapshot`] bytes.
    pub fn restore(cfg: PipelineConfig, bytes: &[u8]) -> Result<Self> {
        let mut op = Self::new(cfg)?;
        let payload = state::open(bytes, SnapshotKind::Pipeline, Some(op.cfg.fingerprint()))?;
        let mut r = Reader::new(payload);
        if let Some(fields) = read_fields(&mut r)? {
            op.bind(&Schema::new(fields))?;
        }
        let na = op.cfg.aggs.len();
        let nk = r.len(4)?;
        for _ in 0..nk {
            let (slot, _) = op.keys.get_or_insert(r.bytes()?)?;
            if op.rows.len() <= slot as usize {
                op.rows.resize_with(slot as usize + 1, VecDeque::new);
            }
            let count = r.len(8)?;
            if count > op.n {
                return Err(TidemarkError::StateCorrupted(format!(
                    "{count} rows for a key of a ROWS {} window",
                    op.n
                )));
            }
            for _ in 0..count {
                let ts = r.i64()?;
                let mut accs = Vec::with_capacity(na);
                for _ in 0..na {
                    accs.push(read_acc(&mut r)?);
                }
                op.rows[slot as usize].push_back((ts, accs));
            }
        }
        let m = &mut op.metrics;
        for v in [
            &mut m.batches,
            &mut m.rows_in,
            &mut m.rows_error,
            &mut m.updates_emitted,
        ] {
            *v = r.u64()?;
        }
        r.finish()?;
        Ok(op)
    }
}

impl super::ArrivalOperator for RowsOperator {
    fn process(&mut self, batch: &RecordBatch, parsed: Option<&Int64Array>) -> Result<Output> {
        Self::process(self, batch, parsed)
    }
    fn flush(&mut self) -> Result<Output> {
        self.flush()
    }
    fn tick(&mut self) -> Result<Output> {
        // Nothing waits on time: a call without rows emits nothing, as a flush.
        self.flush()
    }
    fn snapshot(&self) -> Result<Vec<u8>> {
        Ok(self.snapshot())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agg::{AggKind, AggSpec};
    use crate::pipeline::EmitMode;
    use arrow_array::cast::AsArray;
    use arrow_array::types::{Float64Type, Int64Type, TimestampMicrosecondType};
    use arrow_array::{Float64Array, StringArray, TimestampMicrosecondArray};
    use arrow_schema::DataType;

    fn cfg(n: i64) -> PipelineConfig {
        let aggs = vec![
            AggSpec::new("n", AggKind::Count, None),
            AggSpec::new("avg", AggKind::Mean, Some("v")),
        ];
        PipelineConfig {
            emit: EmitMode::OnUpdate,
            ..PipelineConfig::new(&["k"], "ts", WindowSpec::Rows { n }, aggs)
        }
    }

    fn batch(rows: &[(&str, Option<i64>, f64)]) -> RecordBatch {
        RecordBatch::try_from_iter(vec![
            (
                "k",
                Arc::new(StringArray::from(
                    rows.iter().map(|r| r.0).collect::<Vec<_>>(),
                )) as ArrayRef,
            ),
            (
                "ts",
                Arc::new(
                    TimestampMicrosecondArray::from(rows.iter().map(|r| r.1).collect::<Vec<_>>())
                        .with_timezone("UTC"),
                ) as ArrayRef,
            ),
            (
                "v",
                Arc::new(Float64Array::from(
                    rows.iter().map(|r| r.2).collect::<Vec<_>>(),
                )) as ArrayRef,
            ),
        ])
        .unwrap()
    }

    /// (key, start, end, count, mean) per output row.
    fn out(b: &RecordBatch) -> Vec<(String, i64, i64, i64, f64)> {
        let k = arrow_cast::cast(b.column(0), &DataType::Utf8).unwrap(); // any string layout
        let k = k.as_string::<i32>();
        let s = b.column(1).as_primitive::<TimestampMicrosecondType>();
        let e = b.column(2).as_primitive::<TimestampMicrosecondType>();
        let n = b.column(3).as_primitive::<Int64Type>();
        let m = b.column(4).as_primitive::<Float64Type>();
        (0..b.num_rows())
            .map(|i| {
                (
                    k.value(i).to_string(),
                    s.value(i),
                    e.value(i),
                    n.value(i),
                    m.value(i),
                )
            })
            .collect()
    }

    #[test]
    fn moving_aggregate_over_the_last_n_rows_of_each_key() {
        let mut op = RowsOperator::new(cfg(2)).unwrap();
        // Within a call rows are taken in event-time order.
        let o = op
            .process(
                &batch(&[
                    ("a", Some(20), 4.0),
                    ("a", Some(10), 2.0),
                    ("b", Some(15), 1.0),
                ]),
                None,
            )
            .unwrap();
        assert_eq!(
            out(&o.windows),
            vec![
                ("a".into(), 10, 10, 1, 2.0),
                ("b".into(), 15, 15, 1, 1.0),
                ("a".into(), 10, 20, 2, 3.0),
            ]
        );
        // Across calls the key's state carries over, bounded by n = 2.
        let snap = op.snapshot();
        let mut op = RowsOperator::restore(cfg(2), &snap).unwrap();
        let o = op
            .process(&batch(&[("a", Some(30), 6.0), ("a", None, 9.0)]), None)
            .unwrap();
        assert_eq!(out(&o.windows), vec![("a".into(), 20, 30, 2, 5.0)]);
        assert_eq!(o.errors.num_rows(), 1);
        assert_eq!(op.metrics().updates_emitted, 4);
        let flushed = op.flush().unwrap();
        assert_eq!(flushed.windows.num_rows(), 0);
        // Empty, but in the schemas a batch gives: the input's columns (the errors
        // with their reason).
        assert_eq!(flushed.windows.schema(), o.windows.schema());
        assert_eq!(flushed.late.schema(), o.late.schema());
        assert_eq!(flushed.errors.schema(), o.errors.schema());
        assert_eq!(op.key_count(), 2);
    }

    #[test]
    fn a_key_goes_on_in_another_string_layout_and_other_values_are_refused() {
        let mut op = RowsOperator::new(cfg(2)).unwrap();
        op.process(&batch(&[("a", Some(10), 2.0)]), None).unwrap();
        // The same key as large_string: its last rows carry over.
        let b = batch(&[("a", Some(20), 4.0)]);
        let large = arrow_cast::cast(b.column(0), &DataType::LargeUtf8).unwrap();
        let b = RecordBatch::try_from_iter(vec![
            ("k", large),
            ("ts", b.column(1).clone()),
            ("v", b.column(2).clone()),
        ])
        .unwrap();
        let o = op.process(&b, None).unwrap();
        assert_eq!(
            o.windows.schema().field(0).data_type(),
            &DataType::LargeUtf8
        );
        assert_eq!(out(&o.windows), vec![("a".into(), 10, 20, 2, 3.0)]);
        // Integer values for a mean of floats: refused, naming the aggregate.
        let b = batch(&[("a", Some(30), 6.0)]);
        let ints: ArrayRef = Arc::new(Int64Array::from(vec![6]));
        let b = RecordBatch::try_from_iter(vec![
            ("k", b.column(0).clone()),
            ("ts", b.column(1).clone()),
            ("v", ints),
        ])
        .unwrap();
        let err = op.process(&b, None).unwrap_err().to_string();
        assert!(err.contains("aggregate \"avg\""), "{err}");
    }

    #[test]
    fn configuration_errors() {
        let mut c = cfg(2);
        c.emit = EmitMode::OnWindowClose;
        assert!(RowsOperator::new(c).is_err());
        assert!(RowsOperator::new(cfg(0)).is_err());
        assert!(Operator::new(cfg(2), Arc::new(crate::clock::ManualClock::new(0))).is_err());
        assert!(
            RowsOperator::restore(cfg(3), &RowsOperator::new(cfg(2)).unwrap().snapshot()).is_err()
        );
    }
}
