//! `PartitionedWatermarkTracker` bindings.

use pyo3::prelude::*;
use pyo3::types::PyDict;
use pyo3_arrow::input::{AnyArray, AnyRecordBatch};
use tidemark_core::time::{
    max_event_time_per_partition, parse_event_time, EventTimeType, PartitionId,
    PartitionWatermarkState, PartitionedWatermarkTracker,
};
use tidemark_core::TidemarkError;

use crate::clock::clock_ref;
use crate::convert::arrow::{column_index, read_batches, read_chunks};
use crate::error::{detach, Result};

fn pid(source_id: usize, partition: i64) -> Result<PartitionId> {
    let p = u32::try_from(partition).map_err(|_| TidemarkError::InvalidPartition {
        source_id,
        partition,
        reason: "partition numbers must be between 0 and 4294967295".into(),
    })?;
    Ok(PartitionId::new(source_id, p))
}

fn state_dict<'py>(py: Python<'py>, s: &PartitionWatermarkState) -> Result<Bound<'py, PyDict>> {
    let d = fields_dict!(py, s; watermark, last_event_time, last_activity, is_idle, assigned_core);
    Ok(d)
}

/// Native per-partition watermark tracker (see `tidemark.PartitionedWatermarkTracker`).
#[pyclass(name = "PartitionedWatermarkTracker", module = "tidemark._native")]
pub struct PyPartitionedWatermarkTracker {
    inner: PartitionedWatermarkTracker,
}

#[pymethods]
impl PyPartitionedWatermarkTracker {
    #[new]
    #[pyo3(signature = (idle_timeout = None, clock = None))]
    fn new(idle_timeout: Option<i64>, clock: Option<&Bound<'_, PyAny>>) -> Result<Self> {
        let inner = PartitionedWatermarkTracker::new()
            .idle_timeout_ticks(idle_timeout)
            .with_clock(clock_ref(clock)?);
        Ok(Self { inner })
    }

    #[getter]
    fn idle_timeout(&self) -> Option<i64> {
        self.inner.idle_timeout()
    }

    fn register_source(&mut self, source_id: usize, num_partitions: usize) -> Option<i64> {
        self.inner
            .register_source(source_id, num_partitions)
            .map(|w| w.timestamp())
    }

    fn add_partition(&mut self, source_id: usize, partition: i64) -> Result<()> {
        let p = pid(source_id, partition)?;
        Ok(self.inner.add_partition(p)?)
    }

    fn remove_partition<'py>(
        &mut self,
        py: Python<'py>,
        source_id: usize,
        partition: i64,
    ) -> Result<Option<Bound<'py, PyDict>>> {
        let p = pid(source_id, partition)?;
        self.inner
            .remove_partition(p)
            .map(|s| state_dict(py, &s))
            .transpose()
    }

    fn update_partition(
        &mut self,
        source_id: usize,
        partition: i64,
        watermark: i64,
    ) -> Result<Option<i64>> {
        let p = pid(source_id, partition)?;
        Ok(self.inner.update_partition(p, watermark)?).map(|w| w.map(|w| w.timestamp()))
    }

    fn update_partition_from_event(
        &mut self,
        source_id: usize,
        partition: i64,
        event_time: i64,
        max_lateness: i64,
    ) -> Result<Option<i64>> {
        let p = pid(source_id, partition)?;
        Ok(self
            .inner
            .update_partition_from_event(p, event_time, max_lateness)?)
        .map(|w| w.map(|w| w.timestamp()))
    }

    fn mark_partition_idle(&mut self, source_id: usize, partition: i64) -> Result<Option<i64>> {
        let p = pid(source_id, partition)?;
        Ok(self.inner.mark_partition_idle(p)?).map(|w| w.map(|w| w.timestamp()))
    }

    fn mark_partition_active(&mut self, source_id: usize, partition: i64) -> Result<()> {
        let p = pid(source_id, partition)?;
        Ok(self.inner.mark_partition_active(p)?)
    }

    fn check_idle_partitions(&mut self) -> Option<i64> {
        self.inner.check_idle_partitions().map(|w| w.timestamp())
    }

    fn recalculate(&mut self) -> Option<i64> {
        self.inner.recalculate().map(|w| w.timestamp())
    }

    fn current_watermark(&self) -> Option<i64> {
        self.inner.current_watermark().map(|w| w.timestamp())
    }

    fn partition_watermark(&self, source_id: usize, partition: i64) -> Result<Option<i64>> {
        let p = pid(source_id, partition)?;
        Ok(self.inner.partition_watermark(p))
    }

    fn partition_state<'py>(
        &self,
        py: Python<'py>,
        source_id: usize,
        partition: i64,
    ) -> Result<Bound<'py, PyDict>> {
        let p = pid(source_id, partition)?;
        let s = self.inner.partition_state(p)?;
        state_dict(py, &s)
    }

    fn source_watermark(&self, source_id: usize) -> Option<i64> {
        self.inner.source_watermark(source_id)
    }

    fn is_partition_idle(&self, source_id: usize, partition: i64) -> Result<bool> {
        let p = pid(source_id, partition)?;
        Ok(self.inner.is_partition_idle(p)?)
    }

    fn active_partition_count(&self, source_id: usize) -> Result<usize> {
        Ok(self.inner.active_partition_count(source_id)?)
    }

    fn partitions(&self) -> Vec<(usize, u32)> {
        self.inner
            .partitions()
            .into_iter()
            .map(|p| (p.source_id, p.partition))
            .collect()
    }

    fn assign_partition_to_core(
        &mut self,
        source_id: usize,
        partition: i64,
        core: usize,
    ) -> Result<()> {
        let p = pid(source_id, partition)?;
        Ok(self.inner.assign_partition_to_core(p, core)?)
    }

    fn partition_core(&self, source_id: usize, partition: i64) -> Result<Option<usize>> {
        let p = pid(source_id, partition)?;
        Ok(self.inner.partition_core(p))
    }

    fn metrics<'py>(&self, py: Python<'py>) -> Result<Bound<'py, PyDict>> {
        let m = self.inner.metrics();
        let d = fields_dict!(py, m;
            total_partitions, active_partitions, idle_partitions, watermark_advances, rebalances
        );
        Ok(d)
    }

    /// The tracker's state as bytes (versioned, checksummed).
    fn snapshot<'py>(&self, py: Python<'py>) -> Bound<'py, pyo3::types::PyBytes> {
        let mut w = tidemark_core::state::Writer::new();
        w.i64(self.inner.idle_timeout().unwrap_or(-1));
        self.inner.write_state(&mut w);
        let bytes = tidemark_core::state::seal(
            tidemark_core::state::SnapshotKind::Partitions,
            0,
            &w.finish(),
        );
        pyo3::types::PyBytes::new(py, &bytes)
    }

    /// A tracker restored from `snapshot()` bytes, reading `clock`.
    #[staticmethod]
    #[pyo3(signature = (data, clock = None))]
    fn restore(data: &[u8], clock: Option<&Bound<'_, PyAny>>) -> Result<Self> {
        let payload =
            tidemark_core::state::open(data, tidemark_core::state::SnapshotKind::Partitions, None)?;
        let mut r = tidemark_core::state::Reader::new(payload);
        let timeout = r.i64()?;
        let mut inner = PartitionedWatermarkTracker::new()
            .idle_timeout_ticks((timeout >= 0).then_some(timeout))
            .with_clock(clock_ref(clock)?);
        inner.read_state(&mut r)?;
        r.finish()?;
        Ok(Self { inner })
    }

    /// Vectorised update from one Arrow batch (see the Python docstring).
    #[pyo3(signature = (data, source_id, partition_column, event_time, event_time_type, max_lateness, add_missing, parsed = None))]
    #[allow(clippy::too_many_arguments)]
    fn observe(
        &mut self,
        py: Python<'_>,
        data: AnyRecordBatch,
        source_id: usize,
        partition_column: String,
        event_time: String,
        event_time_type: Option<String>,
        max_lateness: i64,
        add_missing: bool,
        parsed: Option<AnyArray>,
    ) -> Result<Option<i64>> {
        let (schema, batches) = read_batches(data)?;
        let parsed = parsed.map(read_chunks).transpose()?;
        let tracker = &mut self.inner;
        detach(py, move || {
            let pi = column_index(&schema, &partition_column)?;
            let ei = column_index(&schema, &event_time)?;
            let ty = match &parsed {
                Some(_) => EventTimeType::Ticks,
                None => EventTimeType::resolve(
                    event_time_type.as_deref(),
                    &event_time,
                    schema.field(ei).data_type(),
                    true,
                )?,
            };
            let parsed = match &parsed {
                Some((_, chunks)) => Some(arrow_select::concat::concat(
                    &chunks.iter().map(|c| c.as_ref()).collect::<Vec<_>>(),
                )?),
                None => None,
            };
            let mut maxima: Vec<(u32, i64)> = Vec::new();
            let mut offset = 0usize;
            for batch in &batches {
                let times = match &parsed {
                    Some(whole) => {
                        parse_event_time(whole.slice(offset, batch.num_rows()).as_ref(), ty)?.values
                    }
                    None => parse_event_time(batch.column(ei).as_ref(), ty)?.values,
                };
                offset += batch.num_rows();
                maxima.extend(max_event_time_per_partition(
                    source_id,
                    batch.column(pi).as_ref(),
                    &times,
                )?);
            }
            maxima.sort_unstable_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
            maxima.dedup_by_key(|m| m.0);
            Ok(tracker
                .observe_max_event_times(source_id, &maxima, max_lateness, add_missing)?
                .map(|w| w.timestamp()))
        })
    }
}
