//! What every operator class does the same way: process, flush, tick and snapshot
//! through [`ArrivalOperator`], with the GIL released.

use pyo3::prelude::*;
use pyo3::types::PyBytes;
use pyo3_arrow::input::{AnyArray, AnyRecordBatch};
use tidemark_core::pipeline::ArrivalOperator;

use crate::convert::arrow::{one_batch, parsed_times as parsed_times_of, read_batches};
use crate::convert::dicts::{output, Tables};
use crate::error::{detach, Result};

/// `process` of any operator kind: one arrival unit, GIL released.
pub fn process_with<T: ArrivalOperator>(
    py: Python<'_>,
    op: &mut T,
    data: AnyRecordBatch,
    parsed_times: Option<AnyArray>,
) -> Result<Tables> {
    let (schema, batches) = read_batches(data)?;
    let parsed = parsed_times_of(parsed_times)?;
    let out = detach(py, move || {
        let batch = one_batch(schema, batches)?;
        op.process(&batch, parsed.as_ref())
    })?;
    output(py, out)
}

/// `flush` of any operator kind.
pub fn flush_with<T: ArrivalOperator>(py: Python<'_>, op: &mut T) -> Result<Tables> {
    let out = detach(py, move || op.flush())?;
    output(py, out)
}

/// `tick` of any operator kind.
pub fn tick_with<T: ArrivalOperator>(py: Python<'_>, op: &mut T) -> Result<Tables> {
    let out = detach(py, move || op.tick())?;
    output(py, out)
}

/// `snapshot` of any operator kind.
pub fn snapshot_with<'py, T: ArrivalOperator + Sync>(
    py: Python<'py>,
    op: &T,
) -> Result<Bound<'py, PyBytes>> {
    let bytes = detach(py, move || op.snapshot())?;
    Ok(PyBytes::new(py, &bytes))
}
