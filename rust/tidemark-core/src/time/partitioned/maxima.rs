//! The largest event time per source partition of one batch.

use std::collections::BTreeMap;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{Array, Int64Array};
use arrow_schema::DataType;

use crate::error::{Result, TidemarkError};

/// Largest valid event time per partition number in one batch, in partition order.
///
/// `partitions` is any integer column; rows whose partition or event time is null are
/// skipped (they cannot advance a watermark). A negative partition number, or one
/// beyond `u32`, is an error naming the value.
pub fn max_event_time_per_partition(
    source_id: usize,
    partitions: &dyn Array,
    event_times: &Int64Array,
) -> Result<Vec<(u32, i64)>> {
    if !partitions.data_type().is_integer() {
        return Err(TidemarkError::config(
            "partition_column",
            format!("must be an integer column, got {}", partitions.data_type()),
        ));
    }
    let parts = arrow_cast::cast(partitions, &DataType::Int64)?;
    let parts = parts.as_primitive::<Int64Type>();
    // Partition numbers are small and dense (Kafka, Spark): index a vector by them.
    let mut dense: Vec<i64> = Vec::new();
    let mut sparse: BTreeMap<u32, i64> = BTreeMap::new();
    for i in 0..parts.len() {
        if parts.is_null(i) || event_times.is_null(i) {
            continue;
        }
        let raw = parts.value(i);
        let p = u32::try_from(raw).map_err(|_| TidemarkError::InvalidPartition {
            source_id,
            partition: raw,
            reason: "partition numbers must be between 0 and 4294967295".into(),
        })?;
        let t = event_times.value(i);
        if (p as usize) < 65_536 {
            if dense.len() <= p as usize {
                dense.resize(p as usize + 1, i64::MIN);
            }
            let slot = &mut dense[p as usize];
            *slot = (*slot).max(t);
        } else {
            let e = sparse.entry(p).or_insert(i64::MIN);
            *e = (*e).max(t);
        }
    }
    let mut out: Vec<(u32, i64)> = dense
        .into_iter()
        .enumerate()
        .filter(|&(_, t)| t != i64::MIN)
        .map(|(p, t)| (p as u32, t))
        .collect();
    out.extend(sparse);
    Ok(out)
}
