//! Emitting windows: the output batch of the windows closed or updated in a call.

use std::borrow::Cow;
use std::sync::Arc;

use arrow_array::{ArrayRef, BooleanArray, Int64Array, RecordBatch, RecordBatchOptions};
use arrow_schema::{DataType, Field, Schema, TimeUnit};

use super::bind::Binding;
use super::order::output_order;
use super::{Emit, EmitMode, KeyRef, Operator, FINISH_AHEAD, NO_STATE, PARTIALS_COLUMN};
use crate::agg::codec::write_acc;
use crate::agg::Acc;
use crate::error::Result;
use crate::key::{decode_key_columns, KeyBytes};
use crate::state::Writer;

/// Converts window bounds (epoch microseconds) to the output's timestamp type.
pub(super) fn time_column(values: impl Iterator<Item = i64>, dt: &DataType) -> Result<ArrayRef> {
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

impl Operator {
    /// Builds the windows output from the queued emits and releases closed states.
    pub(super) fn build_windows(&mut self, bound: &Binding) -> Result<RecordBatch> {
        let emits = std::mem::take(&mut self.emits);
        let key_of = |k: KeyRef| -> KeyBytes<'_> {
            match k {
                KeyRef::Slot(s) => self.keys.slot_key(s),
                KeyRef::Copied(i) => KeyBytes::Borrowed(&self.owned_keys[i as usize]),
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
            self.recycle(emits, retractions);
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
        self.recycle(emits, retractions);
        Ok(batch)
    }

    /// After a windows batch: counts its retractions, frees the closed windows' states
    /// and keeps the emit queue's allocation for the next call.
    fn recycle(&mut self, mut emits: Vec<Emit>, retractions: u64) {
        self.metrics.retractions_emitted += retractions;
        self.free_states.append(&mut self.release);
        emits.clear();
        self.emits = emits;
    }
}
