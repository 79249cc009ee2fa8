//! Merging the shards' window outputs into the single-operator order.

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::DataType;

use super::ShardedOperator;
use crate::error::{Result, TidemarkError};
use crate::key::{EncodedRows, KeyColumns, KeyRows};
use crate::pipeline::{Operator, Output, PipelineConfig};

/// Concatenates shard outputs in the order of `order` (`(shard, row)` pairs).
pub(super) fn interleave(
    batches: Vec<&RecordBatch>,
    order: &[(usize, usize)],
) -> Result<RecordBatch> {
    if order.is_empty() {
        return Ok(batches[0].slice(0, 0));
    }
    Ok(arrow_select::interleave::interleave_record_batch(
        &batches, order,
    )?)
}

/// The merge keys of a shard's window rows: window end, window start and the
/// encoded key of each row (keys back to back: no allocation per row).
#[derive(Debug, Default)]
pub(super) struct MergeKeys {
    times: Vec<(i64, i64)>,
    pub(super) keys: EncodedRows,
}

impl MergeKeys {
    fn get(&self, i: usize) -> Option<(i64, i64, &[u8])> {
        let &(end, start) = self.times.get(i)?;
        Some((end, start, self.keys.get(i)))
    }
}

/// Adds the merge keys of the output's window rows (computed by each worker, in
/// parallel) when the runtime has several cores.
pub(super) fn with_merge_keys(
    out: Result<Output>,
    merge: bool,
    cfg: &PipelineConfig,
) -> Result<(Output, MergeKeys)> {
    let out = out?;
    let keys = if merge {
        merge_keys(cfg.keys.len(), &out.windows)?
    } else {
        MergeKeys::default()
    };
    Ok((out, keys))
}

fn merge_keys(nk: usize, b: &RecordBatch) -> Result<MergeKeys> {
    if b.num_rows() == 0 {
        return Ok(MergeKeys::default());
    }
    let times = |i: usize| -> Result<ArrayRef> {
        Ok(arrow_cast::cast(
            &arrow_cast::cast(
                b.column(i),
                &DataType::Timestamp(arrow_schema::TimeUnit::Microsecond, None),
            )?,
            &DataType::Int64,
        )?)
    };
    let start = times(nk)?;
    let end = times(nk + 1)?;
    let (start, end) = (
        start.as_primitive::<Int64Type>(),
        end.as_primitive::<Int64Type>(),
    );
    let rows = b.num_rows();
    let mut keys = EncodedRows::with_capacity(rows, rows * 9);
    if nk == 0 {
        (0..rows).for_each(|_| keys.push(&[]));
    } else {
        KeyColumns::new(&b.columns()[..nk])?.for_each_key(|_, k| keys.push(k));
    }
    Ok(MergeKeys {
        times: (0..rows).map(|i| (end.value(i), start.value(i))).collect(),
        keys,
    })
}

/// The k-way merge of shards' window rows (each shard already in the single-operator
/// order) into that order: window end, window start, key. Rows of one key of one
/// shard keep their order (retractions first).
fn merge_order(keys: &[MergeKeys]) -> Vec<(usize, usize)> {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;
    let total: usize = keys.iter().map(|k| k.times.len()).sum();
    let mut heap = BinaryHeap::with_capacity(keys.len());
    for (s, k) in keys.iter().enumerate() {
        if let Some(first) = k.get(0) {
            heap.push(Reverse((first, s, 0usize)));
        }
    }
    let mut order = Vec::with_capacity(total);
    while let Some(mut top) = heap.peek_mut() {
        let Reverse((_, s, i)) = *top;
        order.push((s, i));
        match keys[s].get(i + 1) {
            // Replace the top in place: one sift-down instead of a pop and a push.
            Some(next) => *top = Reverse((next, s, i + 1)),
            None => {
                std::collections::binary_heap::PeekMut::pop(top);
            }
        }
    }
    order
}

impl ShardedOperator {
    /// Merges the shards' window outputs into the single-operator order; in two-phase
    /// mode, rows of the same window and key merge their partial aggregates.
    pub(super) fn merge_windows(
        &mut self,
        batches: Vec<&RecordBatch>,
        keys: &[MergeKeys],
    ) -> Result<RecordBatch> {
        let order = merge_order(keys);
        let out = if !self.partial {
            if order.is_empty() {
                RecordBatch::new_empty(batches[0].schema())
            } else {
                arrow_select::interleave::interleave_record_batch(&batches, &order)?
            }
        } else {
            let mut groups: Vec<Vec<(usize, usize)>> = Vec::new();
            let mut last = None;
            for &(s, i) in &order {
                let k = keys[s].get(i).expect("merge order indexes existing rows");
                if last == Some(k) {
                    groups.last_mut().expect("a group").push((s, i));
                } else {
                    groups.push(vec![(s, i)]);
                }
                last = Some(k);
            }
            let schema = self
                .last_schema
                .clone()
                .ok_or_else(|| TidemarkError::config("runtime", "no input seen yet"))?;
            let finisher = match &mut self.finisher {
                Some(f) => f,
                None => self
                    .finisher
                    .insert(Operator::new(self.cfg.clone(), self.clock.clone())?),
            };
            finisher.finish_partials(&schema, &batches, &groups)?
        };
        self.windows_out += out.num_rows() as u64;
        Ok(out)
    }
}
