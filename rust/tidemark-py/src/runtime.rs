//! `tidemark._native.ShardedOperator`: a pipeline operator over worker threads
//! (see `tidemark.Operator` with `cores > 1`). Threads start with the operator, never
//! at import, and stop when it is garbage-collected.

use std::sync::Mutex;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};
use pyo3_arrow::input::{AnyArray, AnyRecordBatch};
use tidemark_core::runtime::ShardedOperator;

use crate::clock::clock_ref;
use crate::convert::arrow::{one_batch, parsed_times as parsed_times_of, read_batches};
use crate::convert::config::{config_from_dict, lookup_of, LookupArgs};
use crate::convert::dicts::{metrics_dict, output, progress_dict, Tables};
use crate::error::{detach, Result};

/// Native sharded operator.
#[pyclass(name = "ShardedOperator", module = "tidemark._native")]
pub struct PyShardedOperator {
    inner: Mutex<ShardedOperator>,
}

impl PyShardedOperator {
    fn with<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut ShardedOperator) -> Result<T, tidemark_core::TidemarkError> + Send,
    ) -> Result<T> {
        let inner = &self.inner;
        detach(py, move || {
            let mut op = inner.lock().unwrap_or_else(|e| e.into_inner());
            f(&mut op)
        })
    }
}

#[pymethods]
impl PyShardedOperator {
    #[new]
    #[pyo3(signature = (config, cores, queue_capacity = 4, clock = None, state = None, hot_keys = None))]
    fn new(
        config: &Bound<'_, PyDict>,
        cores: usize,
        queue_capacity: usize,
        clock: Option<&Bound<'_, PyAny>>,
        state: Option<&[u8]>,
        hot_keys: Option<f64>,
    ) -> Result<Self> {
        let cfg = config_from_dict(config)?;
        let clock = clock_ref(clock)?;
        let inner = match (state, hot_keys) {
            (None, None) => ShardedOperator::new(cfg, clock, cores, queue_capacity)?,
            (None, Some(share)) => {
                ShardedOperator::with_hot_keys(cfg, clock, cores, queue_capacity, share)?
            }
            (Some(bytes), _) => ShardedOperator::restore(cfg, clock, cores, queue_capacity, bytes)?,
        };
        Ok(Self {
            inner: Mutex::new(inner),
        })
    }

    /// Joins every input row with a lookup table first: `(table, on, how, prefix)`
    /// (`None`: no lookup).
    fn set_lookup(&self, py: Python<'_>, lookup: Option<LookupArgs>) -> Result<()> {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .set_lookup(lookup_of(py, lookup)?);
        Ok(())
    }

    /// Pins worker i to CPU core i; returns how many were pinned.
    fn pin_cores(&self, py: Python<'_>) -> Result<usize> {
        self.with(py, |op| op.pin_cores())
    }

    #[getter]
    fn cores(&self) -> usize {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).cores()
    }

    #[pyo3(signature = (data, parsed_times = None))]
    fn process(
        &self,
        py: Python<'_>,
        data: AnyRecordBatch,
        parsed_times: Option<AnyArray>,
    ) -> Result<Tables> {
        let (schema, batches) = read_batches(data)?;
        let parsed = parsed_times_of(parsed_times)?;
        let out = self.with(py, move |op| {
            let batch = one_batch(schema, batches)?;
            op.process(&batch, parsed.as_ref())
        })?;
        output(py, out)
    }

    fn flush(&self, py: Python<'_>) -> Result<Tables> {
        let out = self.with(py, |op| op.flush())?;
        output(py, out)
    }

    /// A call without rows: time moves on by itself.
    fn tick(&self, py: Python<'_>) -> Result<Tables> {
        let out = self.with(py, |op| op.tick())?;
        output(py, out)
    }

    fn snapshot<'py>(&self, py: Python<'py>) -> Result<Bound<'py, PyBytes>> {
        let bytes = self.with(py, |op| op.snapshot())?;
        Ok(PyBytes::new(py, &bytes))
    }

    #[getter]
    fn watermark(&self) -> Option<i64> {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .watermark()
    }

    fn progress<'py>(&self, py: Python<'py>) -> Result<Bound<'py, PyDict>> {
        let op = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        progress_dict(py, op.progress())
    }

    fn metrics<'py>(&self, py: Python<'py>) -> Result<Bound<'py, PyDict>> {
        let (m, k, l) = self.with(py, |op| op.metrics_and_lateness())?;
        let op = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let d = metrics_dict(py, &m, &k, op.watermark())?;
        if let Some(l) = l {
            d.set_item("lateness", crate::convert::dicts::lateness_dict(py, &l)?)?;
        }
        let cores = PyList::empty(py);
        for c in op.core_metrics() {
            let cd = fields_dict!(py, c;
                core, records_processed, processing_time_us, queue_depth, queue_capacity,
                channel_utilization, utilization
            );
            cd.set_item("backpressure", c.backpressure.name())?;
            cd.set_item("backpressure_events", c.backpressure_events)?;
            cd.set_item("latency_p50_us", c.latency_p50_us)?;
            cd.set_item("latency_p95_us", c.latency_p95_us)?;
            cd.set_item("latency_p99_us", c.latency_p99_us)?;
            cores.append(cd)?;
        }
        d.set_item("cores", cores)?;
        let (hot_rows, hot_keys) = op.hot_key_metrics();
        d.set_item("hot_rows_spread", hot_rows)?;
        d.set_item("hot_keys", hot_keys)?;
        Ok(d)
    }
}

/// Operator snapshots redistributed over `n` state partitions by key
/// (`hash="spark"`: as `df.repartition(n, *keys)`; `"xxh3"`: as the runtime).
#[pyfunction]
#[pyo3(signature = (config, snapshots, n, hash = "spark"))]
pub fn reshard_snapshots<'py>(
    py: Python<'py>,
    config: &Bound<'_, PyDict>,
    snapshots: Vec<Vec<u8>>,
    n: usize,
    hash: &str,
) -> Result<Bound<'py, PyList>> {
    let cfg = config_from_dict(config)?;
    let algo = hash.parse::<tidemark_core::route::HashAlgo>()?;
    let out = detach(py, move || {
        let refs: Vec<&[u8]> = snapshots.iter().map(Vec::as_slice).collect();
        tidemark_core::pipeline::reshard::reshard_snapshots(&cfg, &refs, n, algo)
    })?;
    let list = PyList::empty(py);
    for b in out {
        list.append(PyBytes::new(py, &b))?;
    }
    Ok(list)
}
