//! Reorder operator binding (see `tidemark.Reorder`).

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use pyo3_arrow::input::{AnyArray, AnyRecordBatch};
use tidemark_core::reorder::{ReorderConfig, ReorderOperator, ReorderOutput};

use crate::convert::arrow::{one_batch, parsed_times, read_batches};
use crate::convert::config::{get, named};
use crate::convert::dicts::batch_to_table;
use crate::error::{detach, Result};

/// A reorder's configuration from `tidemark.Reorder`'s dict.
pub(crate) fn config(d: &Bound<'_, PyDict>) -> Result<ReorderConfig> {
    Ok(ReorderConfig {
        event_time: get(d, "event_time")?,
        event_time_type: get(d, "event_time_type")?,
        parsed_externally: get(d, "parsed_externally")?,
        late_tolerance: get(d, "late_tolerance")?,
        late: named(d, "late")?,
    })
}

type Released = (Py<PyAny>, Option<i64>, Py<PyAny>, Py<PyAny>);

fn released(py: Python<'_>, o: ReorderOutput) -> Result<Released> {
    Ok((
        batch_to_table(py, o.rows)?,
        o.watermark,
        batch_to_table(py, o.late)?,
        batch_to_table(py, o.errors)?,
    ))
}

/// Native reorder operator.
#[pyclass(name = "ReorderOperator", module = "tidemark._native")]
pub struct PyReorderOperator {
    inner: ReorderOperator,
}

#[pymethods]
impl PyReorderOperator {
    #[new]
    #[pyo3(signature = (config, state = None))]
    fn new(config: &Bound<'_, PyDict>, state: Option<&[u8]>) -> Result<Self> {
        let cfg = self::config(config)?;
        let inner = match state {
            None => ReorderOperator::new(cfg)?,
            Some(bytes) => ReorderOperator::restore(cfg, bytes)?,
        };
        Ok(Self { inner })
    }

    #[pyo3(signature = (data, parsed_times = None))]
    fn process(
        &mut self,
        py: Python<'_>,
        data: AnyRecordBatch,
        parsed_times: Option<AnyArray>,
    ) -> Result<Released> {
        let (schema, batches) = read_batches(data)?;
        let parsed = self::parsed_times(parsed_times)?;
        let op = &mut self.inner;
        let out = detach(py, move || {
            let batch = one_batch(schema, batches)?;
            op.process(&batch, parsed.as_ref())
        })?;
        released(py, out)
    }

    fn flush(&mut self, py: Python<'_>) -> Result<Released> {
        let op = &mut self.inner;
        let out = detach(py, move || op.flush())?;
        released(py, out)
    }

    fn snapshot<'py>(&self, py: Python<'py>) -> Result<Bound<'py, PyBytes>> {
        let op = &self.inner;
        let bytes = detach(py, move || op.snapshot())?;
        Ok(PyBytes::new(py, &bytes))
    }

    #[getter]
    fn watermark(&self) -> Option<i64> {
        self.inner.watermark()
    }

    fn metrics<'py>(&self, py: Python<'py>) -> Result<Bound<'py, PyDict>> {
        let m = self.inner.metrics();
        let d = PyDict::new(py);
        for (name, v) in [
            ("batches", m.batches),
            ("rows_in", m.rows_in),
            ("rows_released", m.rows_released),
            ("buffer_size", m.buffer_size),
            ("late_dropped_count", m.late_dropped_count),
            ("rows_error", m.rows_error),
            ("watermark_emitted_count", m.watermark_emitted_count),
            ("buffer_bytes", m.buffer_bytes),
        ] {
            d.set_item(name, v)?;
        }
        d.set_item("max_timestamp_seen", m.max_timestamp_seen)?;
        d.set_item("watermark", self.inner.watermark())?;
        Ok(d)
    }
}
