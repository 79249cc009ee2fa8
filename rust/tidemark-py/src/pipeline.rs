//! Pipeline operator and timer-service bindings.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use pyo3_arrow::input::{AnyArray, AnyRecordBatch};
use pyo3_arrow::PySchema;
use tidemark_core::pipeline::{External, Operator, Pending, ScopeWatermark, Start};
use tidemark_core::TidemarkError;

use crate::clock::clock_ref;
use crate::convert::arrow::{one_batch, parsed_times as parsed_times_of, read_batches};
use crate::convert::config::{built, config_from_dict, lookup_from, lookup_of, LookupArgs};
use crate::convert::dicts::{metrics_dict, output, progress_dict, progress_from_dict, Tables};
use crate::convert::keys::py_key;
use crate::drive::{flush_with, process_with, snapshot_with, tick_with};
use crate::error::{detach, Result};

/// Validates a pipeline configuration dict (raises a `ConfigError` on mistakes).
#[pyfunction]
pub fn validate_pipeline(config: &Bound<'_, PyDict>) -> Result<u64> {
    Ok(config_from_dict(config)?.fingerprint())
}

/// The input columns a pipeline reads (keys, event time, source partition, aggregate
/// inputs), once each.
#[pyfunction]
pub fn pipeline_input_columns(config: &Bound<'_, PyDict>) -> Result<Vec<String>> {
    let cfg = config_from_dict(config)?;
    Ok(cfg.input_columns().into_iter().map(String::from).collect())
}

/// The input schema with a lookup table's non-key columns appended (see
/// `tidemark_core::pipeline::lookup::Lookup::schema`).
#[pyfunction]
#[pyo3(signature = (table, on, how, prefix, schema))]
pub fn lookup_schema(
    py: Python<'_>,
    table: AnyRecordBatch,
    on: Vec<String>,
    how: &str,
    prefix: Option<String>,
    schema: PySchema,
) -> Result<Py<PyAny>> {
    let lookup = lookup_from(py, table, on, how, prefix)?;
    let out = lookup.schema(schema.as_ref())?;
    Ok(PySchema::new(out).into_pyarrow(py)?.unbind())
}

/// The output schema of a pipeline for an input schema.
#[pyfunction]
pub fn pipeline_output_schema(
    py: Python<'_>,
    config: &Bound<'_, PyDict>,
    schema: PySchema,
) -> Result<Py<PyAny>> {
    let cfg = config_from_dict(config)?;
    let out = Operator::output_schema(&cfg, schema.as_ref())?;
    Ok(PySchema::new(out).into_pyarrow(py)?.unbind())
}

/// `#[pymethods]` of an operator class that takes arrival units (`ArrivalOperator`):
/// `process`, `flush`, `tick` and `snapshot` forwarded to `inner`, and the
/// class's own methods given in braces.
macro_rules! arrival_methods {
    ($ty:ident, { $($own:tt)* }) => {
        #[pymethods]
        impl $ty {
            /// Processes one arrival unit (all batches of `data` together).
            #[pyo3(signature = (data, parsed_times = None))]
            fn process(
                &mut self,
                py: Python<'_>,
                data: AnyRecordBatch,
                parsed_times: Option<AnyArray>,
            ) -> Result<Tables> {
                process_with(py, &mut self.inner, data, parsed_times)
            }

            fn flush(&mut self, py: Python<'_>) -> Result<Tables> {
                flush_with(py, &mut self.inner)
            }

            /// A call without rows: time moves on by itself.
            fn tick(&mut self, py: Python<'_>) -> Result<Tables> {
                tick_with(py, &mut self.inner)
            }

            fn snapshot<'py>(&self, py: Python<'py>) -> Result<Bound<'py, PyBytes>> {
                snapshot_with(py, &self.inner)
            }

            $($own)*
        }
    };
}

/// Native pipeline operator (see `tidemark.Operator`).
#[pyclass(name = "Operator", module = "tidemark._native")]
pub struct PyOperator {
    inner: Operator,
    /// Rows ingested by `ingest`, waiting for `complete`.
    pending: Option<Pending>,
}

arrival_methods!(PyOperator, {
    #[new]
    #[pyo3(signature = (config, clock = None, state = None))]
    fn new(
        config: &Bound<'_, PyDict>,
        clock: Option<&Bound<'_, PyAny>>,
        state: Option<&[u8]>,
    ) -> Result<Self> {
        let restore = tidemark_core::runtime::restore_operator;
        let inner = built(config, clock, state, Operator::new, restore)?;
        Ok(Self {
            inner,
            pending: None,
        })
    }

    /// The first half of `process`: judges and adds the rows and advances this
    /// operator's watermarks (see `progress`), closing nothing; `complete` finishes.
    #[pyo3(signature = (data, parsed_times = None))]
    fn ingest(
        &mut self,
        py: Python<'_>,
        data: AnyRecordBatch,
        parsed_times: Option<AnyArray>,
    ) -> Result<()> {
        let (schema, batches) = read_batches(data)?;
        let parsed = parsed_times_of(parsed_times)?;
        let op = &mut self.inner;
        let pending = detach(py, move || {
            let batch = one_batch(schema, batches)?;
            op.ingest(&batch, parsed.as_ref())
        })?;
        self.pending = Some(pending);
        Ok(())
    }

    /// The second half of `process`: closes the windows `close_watermark` (combined
    /// over every operator of the scope; `None`: this operator's own) passed.
    #[pyo3(signature = (close_watermark = None))]
    fn complete(&mut self, py: Python<'_>, close_watermark: Option<i64>) -> Result<Tables> {
        let pending = self.pending.take().ok_or_else(|| {
            TidemarkError::config("complete", "complete() needs an ingest() first")
        })?;
        let op = &mut self.inner;
        let out = detach(py, move || op.complete(pending, close_watermark))?;
        output(py, out)
    }

    #[getter]
    fn watermark(&self) -> Option<i64> {
        self.inner.watermark()
    }

    /// Joins every input row with a lookup table first: `(table, on, how, prefix)`
    /// (`None`: no lookup).
    fn set_lookup(&mut self, py: Python<'_>, lookup: Option<LookupArgs>) -> Result<()> {
        self.inner.set_lookup(lookup_of(py, lookup)?);
        Ok(())
    }

    /// Drives the operator with the scope's watermark combined elsewhere (`None`: the
    /// scope has none yet; see `External`).
    fn set_external_watermark(&mut self, watermark: Option<i64>) {
        let watermark = Start::Scope(watermark);
        self.inner.set_external(External {
            watermark,
            ..self.inner.external()
        });
    }

    /// The scope's event time combined elsewhere (`None`: this operator's own).
    fn set_external_time(&mut self, time: Option<i64>) {
        self.inner.set_external(External {
            time,
            ..self.inner.external()
        });
    }

    /// Off: each call's windows in the order they closed instead of sorted.
    fn set_sorted_output(&mut self, on: bool) {
        self.inner.set_sorted_output(on)
    }

    /// What the last process call saw: max event time, per-partition maxima, key-scope
    /// global watermark.
    fn progress<'py>(&self, py: Python<'py>) -> Result<Bound<'py, PyDict>> {
        progress_dict(py, self.inner.progress())
    }

    fn key_watermark(&self, key: &Bound<'_, PyAny>) -> Result<Option<i64>> {
        Ok(self.inner.key_watermark(&py_key(key)?))
    }

    fn metrics<'py>(&self, py: Python<'py>) -> Result<Bound<'py, PyDict>> {
        let d = metrics_dict(
            py,
            &self.inner.metrics(),
            self.inner.key_metrics(),
            self.inner.watermark(),
        )?;
        if let Some(l) = self.inner.lateness() {
            d.set_item("lateness", crate::convert::dicts::lateness_dict(py, &l)?)?;
        }
        Ok(d)
    }
});

/// The watermark of a pipeline's scope, combined over the operators that share it
/// (see `tidemark_core::pipeline::ScopeWatermark`).
#[pyclass(name = "ScopeWatermark", module = "tidemark._native")]
pub struct PyScopeWatermark {
    inner: ScopeWatermark,
}

#[pymethods]
impl PyScopeWatermark {
    #[new]
    #[pyo3(signature = (config, clock = None, state = None))]
    fn new(
        config: &Bound<'_, PyDict>,
        clock: Option<&Bound<'_, PyAny>>,
        state: Option<&[u8]>,
    ) -> Result<Self> {
        let inner = built(
            config,
            clock,
            state,
            |cfg, clock| Ok(ScopeWatermark::new(&cfg, clock)),
            |cfg, clock, bytes| ScopeWatermark::from_bytes(&cfg, clock, bytes),
        )?;
        Ok(Self { inner })
    }

    /// The processing-time rule alone: the watermark follows `clock` (see
    /// `tidemark.ProcessingTimeWatermark`).
    #[staticmethod]
    #[pyo3(signature = (clock = None))]
    fn processing(clock: Option<&Bound<'_, PyAny>>) -> Result<Self> {
        Ok(Self {
            inner: ScopeWatermark::processing(clock_ref(clock)?),
        })
    }

    /// Combines the progress dicts of one call of every operator; returns the
    /// watermark that closes windows after it (`None`: none yet).
    fn advance(&mut self, progress: Vec<Bound<'_, PyDict>>) -> Result<Option<i64>> {
        let progress = progress
            .iter()
            .map(progress_from_dict)
            .collect::<Result<Vec<_>>>()?;
        Ok(self.inner.advance(&progress)?)
    }

    /// The current watermark (`None`: none yet).
    #[getter]
    fn current(&self) -> Option<i64> {
        self.inner.current()
    }

    /// The scope's event time: the largest event time reported (`None`: none).
    #[getter]
    fn time(&self) -> Option<i64> {
        self.inner.time()
    }

    fn to_bytes<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.inner.to_bytes())
    }
}

/// Native ROWS-window operator (see `tidemark.Rows`).
#[pyclass(name = "RowsOperator", module = "tidemark._native")]
pub struct PyRowsOperator {
    inner: tidemark_core::pipeline::rows::RowsOperator,
}

arrival_methods!(PyRowsOperator, {
    #[new]
    #[pyo3(signature = (config, state = None))]
    fn new(config: &Bound<'_, PyDict>, state: Option<&[u8]>) -> Result<Self> {
        use tidemark_core::pipeline::rows::RowsOperator;
        let cfg = config_from_dict(config)?;
        let inner = match state {
            None => RowsOperator::new(cfg)?,
            Some(bytes) => RowsOperator::restore(cfg, bytes)?,
        };
        Ok(Self { inner })
    }

    /// ROWS windows have no watermark.
    #[getter]
    fn watermark(&self) -> Option<i64> {
        None
    }

    fn progress<'py>(&self, py: Python<'py>) -> Result<Bound<'py, PyDict>> {
        // ROWS windows track no event-time progress.
        progress_dict(py, &tidemark_core::pipeline::Progress::default())
    }

    fn metrics<'py>(&self, py: Python<'py>) -> Result<Bound<'py, PyDict>> {
        let k = tidemark_core::time::KeyedWatermarkMetrics {
            total_keys: self.inner.key_count(),
            ..Default::default()
        };
        metrics_dict(py, &self.inner.metrics(), &k, None)
    }
});
