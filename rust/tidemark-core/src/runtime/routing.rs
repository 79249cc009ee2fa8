//! How a micro-batch's rows reach its state partitions ([`Routing`]: by their tags, by
//! Spark's hash of the keys, or dealt out in turn) and the scoped threads a run's state
//! partitions share ([`par_each`]).

use std::collections::HashMap;

use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, Int64Type};
use arrow_array::{ArrayRef, Int64Array, RecordBatch, UInt32Array};
use arrow_schema::DataType;

use crate::error::{Result, TidemarkError};
use crate::route::{group_rows, hash_router, spark_tags, HashAlgo, RowGroups};

/// How the micro-batch's rows reach its state partitions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Placement {
    /// The run holds every row of the batch and every state partition: rows are routed
    /// by Spark's `hash()` of the pipeline's keys (all rows to partition 0 without
    /// keys), as `repartition(N, keys)` routes them.
    Route,
    /// Each row carries its state partition's tag in this int column ([`spark_tags`]:
    /// a data tag, or a placeholder's, whose row holds no data): the run holds the
    /// partitions whose tags appear.
    Tagged(String),
}

/// A state partition held by a run, as the batch begins.
#[derive(Clone, Debug)]
pub struct Restore {
    /// The state partition.
    pub partition: u32,
    /// Its snapshot (`None`: it starts empty).
    pub snapshot: Option<Vec<u8>>,
    /// What to call the snapshot in an error (its file).
    pub name: String,
}

/// `f` over every item, on up to `threads` scoped threads (consecutive items per
/// thread), results in item order.
pub(super) fn par_each<T: Send, R: Send>(
    items: &mut [T],
    threads: usize,
    f: impl Fn(&mut T) -> Result<R> + Sync,
) -> Result<Vec<R>> {
    let threads = threads.clamp(1, items.len().max(1));
    if threads == 1 {
        return items.iter_mut().map(f).collect();
    }
    let (len, chunk) = (items.len(), items.len().div_ceil(threads));
    let f = &f;
    std::thread::scope(|s| {
        let handles: Vec<_> = items
            .chunks_mut(chunk)
            .map(|part| s.spawn(move || part.iter_mut().map(f).collect::<Result<Vec<R>>>()))
            .collect();
        let mut out = Vec::with_capacity(len);
        for h in handles {
            let got = h.join().map_err(|_| {
                TidemarkError::config("threads", "a state partition's thread panicked")
            })?;
            out.extend(got?);
        }
        Ok(out)
    })
}

/// `f` over every item, taking each (see [`par_each`]).
pub(super) fn par_each_owned<T: Send, R: Send>(
    items: Vec<T>,
    threads: usize,
    f: impl Fn(T) -> Result<R> + Sync,
) -> Result<Vec<R>> {
    let mut slots: Vec<Option<T>> = items.into_iter().map(Some).collect();
    par_each(&mut slots, threads, |t| {
        f(t.take().expect("each item once"))
    })
}

/// How a run's rows reach its state partitions: tagged, or routed by Spark's `hash()`
/// of `keys` (without keys: all to partition 0, or with `deal`, row `i` to partition
/// `i mod N`), a large batch hashed in slices on `threads`.
pub(super) struct Routing<'a> {
    pub(super) partitions: u32,
    pub(super) placement: &'a Placement,
    pub(super) keys: &'a [String],
    pub(super) deal: bool,
    pub(super) threads: usize,
}

impl Routing<'_> {
    /// Each held state partition with its rows (and parsed times) among `rows`.
    pub(super) fn held_rows(
        &self,
        rows: &RecordBatch,
        parsed: Option<&Int64Array>,
        held: Vec<Restore>,
    ) -> Result<Vec<(Restore, RecordBatch, Option<Int64Array>)>> {
        let (empty, mut shards) = self.shards(rows, parsed)?;
        Ok(held
            .into_iter()
            .map(|h| {
                let (rows, parsed) = shards.remove(&h.partition).unwrap_or((empty.clone(), None));
                (h, rows, parsed)
            })
            .collect())
    }

    /// Each state partition's rows (and parsed times) among `rows`, and no rows in
    /// their schema.
    pub(super) fn shards(
        &self,
        rows: &RecordBatch,
        parsed: Option<&Int64Array>,
    ) -> Result<(RecordBatch, Shards)> {
        let n = self.partitions;
        if n == 0 {
            return Err(TidemarkError::config(
                "num_partitions",
                "at least 1 state partition",
            ));
        }
        if let Some(p) = parsed {
            if p.len() != rows.num_rows() {
                return Err(TidemarkError::config(
                    "parsed_times",
                    format!("{} parsed times for {} rows", p.len(), rows.num_rows()),
                ));
            }
        }
        let (batch, ids, groups) = match self.placement {
            Placement::Route => {
                let dealt = self.keys.is_empty() && self.deal;
                if n == 1 || (self.keys.is_empty() && !dealt) || rows.num_rows() == 0 {
                    let one = HashMap::from([(0, (rows.clone(), parsed.cloned()))]);
                    return Ok((rows.slice(0, 0), one));
                }
                let ids = if dealt {
                    (0..rows.num_rows())
                        .map(|i| (i % n as usize) as u32)
                        .collect()
                } else {
                    self.route_ids(rows)?
                };
                (rows.clone(), ids, n as usize)
            }
            Placement::Tagged(column) => {
                let i = crate::error::column_index(rows.schema().as_ref(), column)?;
                let tags = arrow_cast::cast(rows.column(i), &DataType::Int32)?;
                let (data, placeholder) = spark_tags(n);
                let mut of: HashMap<i32, u32> = HashMap::with_capacity(2 * n as usize);
                for (p, (&d, &h)) in data.iter().zip(&placeholder).enumerate() {
                    of.insert(d, p as u32);
                    of.insert(h, n + p as u32); // a placeholder: no data
                }
                let tags = tags.as_primitive::<Int32Type>();
                let ids = tags
                    .iter()
                    .map(|t| {
                        t.and_then(|t| of.get(&t).copied()).ok_or_else(|| {
                            TidemarkError::config(
                                column.clone(),
                                format!("a row's state partition tag {t:?} is not one of {n} state partitions'"),
                            )
                        })
                    })
                    .collect::<Result<Vec<u32>>>()?;
                let mut batch = rows.clone();
                batch.remove_column(i);
                (batch, ids, 2 * n as usize)
            }
        };
        let g = group_rows(&ids, groups);
        let mut out: Shards = HashMap::new();
        for id in 0..groups {
            let (lo, hi) = (g.offsets[id], g.offsets[id + 1]);
            if hi == lo {
                continue;
            }
            let p = (id as u32) % n;
            if id as u32 >= n {
                out.entry(p).or_insert_with(|| (batch.slice(0, 0), None));
                continue;
            }
            out.insert(p, take_rows(&batch, parsed, &g, lo, hi)?);
        }
        Ok((batch.slice(0, 0), out))
    }

    /// Each row's state partition by Spark's hash of the keys; a large batch in
    /// slices on the run's threads (hashing reads every key once).
    pub(super) fn route_ids(&self, rows: &RecordBatch) -> Result<Vec<u32>> {
        let keys: Vec<&str> = self.keys.iter().map(String::as_str).collect();
        let router = hash_router(self.partitions as usize, &keys, HashAlgo::Spark)?;
        let len = rows.num_rows();
        if self.threads < 2 || len < PARALLEL_ROUTE_ROWS {
            return router.slice_partition_ids(rows, 0, len);
        }
        let step = len.div_ceil(self.threads);
        let mut slices: Vec<(usize, usize)> = (0..len)
            .step_by(step)
            .map(|o| (o, step.min(len - o)))
            .collect();
        let router = &router;
        let parts = par_each(&mut slices, self.threads, |&mut (o, l)| {
            router.slice_partition_ids(rows, o, l)
        })?;
        Ok(parts.concat())
    }
}

/// Each state partition's rows, and their parsed event times.
type Shards = HashMap<u32, (RecordBatch, Option<Int64Array>)>;

/// Rows at least which a run routes a batch in slices on several threads.
pub const PARALLEL_ROUTE_ROWS: usize = 200_000;

/// Rows `groups.rows[lo..hi]` of `batch` (and of `parsed`), in input order.
fn take_rows(
    batch: &RecordBatch,
    parsed: Option<&Int64Array>,
    g: &RowGroups,
    lo: usize,
    hi: usize,
) -> Result<(RecordBatch, Option<Int64Array>)> {
    if hi - lo == batch.num_rows() {
        return Ok((batch.clone(), parsed.cloned()));
    }
    let idx = UInt32Array::from(g.rows[lo..hi].to_vec());
    let rows = arrow_select::take::take_record_batch(batch, &idx)?;
    let parsed = parsed
        .map(|p| -> Result<Int64Array> {
            let t: ArrayRef = arrow_select::take::take(p, &idx, None)?;
            Ok(t.as_primitive::<Int64Type>().clone())
        })
        .transpose()?;
    Ok((rows, parsed))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agg::{AggKind, AggSpec};
    use crate::pipeline::PipelineConfig;
    use crate::runtime::micro_batch::MicroBatch;
    use crate::window::WindowSpec;
    use arrow_array::StringArray;
    use std::sync::Arc;

    /// Routed in slices on several threads, each state partition gets the rows one
    /// router gives it, in the same order.
    #[test]
    fn a_large_batch_routed_in_slices_goes_to_the_same_partitions() {
        let n = PARALLEL_ROUTE_ROWS + 10_001;
        let keys: Vec<String> = (0..n).map(|i| format!("d{}", (i * 7919) % 613)).collect();
        let rows = RecordBatch::try_from_iter(vec![(
            "device",
            Arc::new(StringArray::from(keys)) as ArrayRef,
        )])
        .unwrap();
        let aggs = vec![AggSpec::new("n", AggKind::Count, None)];
        let window = WindowSpec::Tumbling {
            size: 10,
            offset: 0,
        };
        let cfg = PipelineConfig::new(&["device"], "ts", window, aggs);
        let mb = |threads| MicroBatch {
            threads,
            ..MicroBatch::new(cfg.clone(), 4)
        };
        let one = mb(1).routing().route_ids(&rows).unwrap();
        assert!((0..4).all(|p| one.contains(&p)));
        let router = hash_router(4, &["device"], HashAlgo::Spark).unwrap();
        assert_eq!(one, router.slice_partition_ids(&rows, 0, n).unwrap());
        for threads in [2, 3, 7] {
            assert_eq!(
                mb(threads).routing().route_ids(&rows).unwrap(),
                one,
                "{threads} threads"
            );
        }
    }
}
