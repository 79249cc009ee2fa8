//! Arrow in and out of Python through the PyCapsule interface (zero-copy both ways).

use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{ArrowError, Field, Schema, SchemaRef};
use pyo3::prelude::*;
use pyo3_arrow::input::{AnyArray, AnyRecordBatch};
use pyo3_arrow::{PyArray, PyChunkedArray};
use tidemark_core::TidemarkError;

use crate::error::Result;

/// Reads every batch of a RecordBatch, Table, DataFrame or stream.
pub fn read_batches(data: AnyRecordBatch) -> Result<(SchemaRef, Vec<RecordBatch>)> {
    let reader = data.into_reader()?;
    let schema = reader.schema();
    let batches = reader
        .collect::<Result<Vec<_>, ArrowError>>()
        .map_err(TidemarkError::from)?;
    Ok((schema, batches))
}

/// Reads every chunk of an array or chunked array.
pub fn read_chunks(data: AnyArray) -> Result<(Arc<Field>, Vec<ArrayRef>)> {
    let reader = data.into_reader()?;
    let field = reader.field();
    let chunks = reader
        .collect::<Result<Vec<_>, ArrowError>>()
        .map_err(TidemarkError::from)?;
    Ok((field, chunks))
}

/// Index of `name` in `schema`, or a `MissingColumnError` listing the columns.
pub fn column_index(schema: &Schema, name: &str) -> Result<usize, TidemarkError> {
    schema
        .index_of(name)
        .map_err(|_| TidemarkError::MissingColumn {
            column: name.to_string(),
            available: schema.fields().iter().map(|f| f.name().clone()).collect(),
        })
}

/// Exports an array to `pyarrow.Array` without copying.
pub fn array_to_py(py: Python<'_>, array: ArrayRef) -> Result<Py<PyAny>> {
    Ok(PyArray::from_array_ref(array).to_pyarrow(py)?.unbind())
}

/// Exports chunks to `pyarrow.ChunkedArray` without copying.
pub fn chunks_to_py(py: Python<'_>, chunks: Vec<ArrayRef>, field: Arc<Field>) -> Result<Py<PyAny>> {
    let chunked = PyChunkedArray::try_new(chunks, field)?;
    Ok(chunked.into_pyarrow(py)?.unbind())
}

/// Batches of one arrival unit as one batch (concatenated if there are several).
pub fn one_batch(
    schema: SchemaRef,
    batches: Vec<RecordBatch>,
) -> Result<RecordBatch, TidemarkError> {
    Ok(match batches.len() {
        1 => batches.into_iter().next().expect("one"),
        _ => arrow_select::concat::concat_batches(&schema, &batches)?,
    })
}

/// Optional externally parsed event times (int64 epoch microseconds).
pub fn parsed_times(data: Option<AnyArray>) -> Result<Option<arrow_array::Int64Array>> {
    use arrow_array::Array;
    match data {
        None => Ok(None),
        Some(p) => single_array(p)?
            .as_any()
            .downcast_ref::<arrow_array::Int64Array>()
            .cloned()
            .map(Some)
            .ok_or_else(|| {
                pyo3::exceptions::PyTypeError::new_err("parsed_times must be int64").into()
            }),
    }
}

/// One array from an array or chunked array (concatenating chunks if there are several).
pub fn single_array(data: AnyArray) -> Result<ArrayRef> {
    let (field, chunks) = read_chunks(data)?;
    Ok(match chunks.len() {
        0 => arrow_array::new_empty_array(field.data_type()),
        1 => chunks.into_iter().next().expect("one chunk"),
        _ => arrow_select::concat::concat(&chunks.iter().map(|c| c.as_ref()).collect::<Vec<_>>())
            .map_err(TidemarkError::from)?,
    })
}
