//! Arrow batch helpers shared by the operators: taking and gathering rows, the error
//! output, and batches as Arrow IPC bytes (in snapshots).

use std::sync::Arc;

use arrow_array::builder::StringBuilder;
use arrow_array::cast::AsArray;
use arrow_array::{
    downcast_primitive_array, new_empty_array, Array, ArrayRef, RecordBatch, RecordBatchOptions,
    UInt32Array,
};
use arrow_schema::{DataType, Field, Schema};

use crate::error::{Result, TidemarkError};

/// The given rows of `batch` (an empty batch of its schema for none).
pub(crate) fn take_rows(batch: &RecordBatch, rows: &[u32]) -> Result<RecordBatch> {
    if rows.is_empty() {
        return Ok(RecordBatch::new_empty(batch.schema()));
    }
    let idx = UInt32Array::from(rows.to_vec());
    Ok(arrow_select::take::take_record_batch(batch, &idx)?)
}

/// The error rows of `batch` with a `reason` column (`_tidemark_reason` if the input
/// has a `reason` column already).
pub(crate) fn error_batch(batch: &RecordBatch, errors: &[(usize, String)]) -> Result<RecordBatch> {
    let schema = batch.schema();
    let reason = if schema.index_of("reason").is_ok() {
        "_tidemark_reason"
    } else {
        "reason"
    };
    let mut fields: Vec<Field> = schema.fields().iter().map(|f| f.as_ref().clone()).collect();
    fields.push(Field::new(reason, DataType::Utf8, false));
    let out_schema = Arc::new(Schema::new(fields));
    let rows: Vec<u32> = errors.iter().map(|e| e.0 as u32).collect();
    let taken = if rows.is_empty() {
        batch
            .columns()
            .iter()
            .map(|c| new_empty_array(c.data_type()))
            .collect()
    } else {
        take_rows(batch, &rows)?.columns().to_vec()
    };
    let mut b = StringBuilder::new();
    for e in errors {
        b.append_value(&e.1);
    }
    let mut cols = taken;
    cols.push(Arc::new(b.finish()));
    Ok(RecordBatch::try_new_with_options(
        out_schema,
        cols,
        &RecordBatchOptions::new().with_row_count(Some(errors.len())),
    )?)
}

/// Rows `(batch, row)` of `batches` (same schema), in the order given. Fixed-width
/// columns without nulls are gathered directly; others go through Arrow's
/// `interleave`.
pub(crate) fn gather(batches: &[&RecordBatch], indices: &[(u32, u32)]) -> Result<RecordBatch> {
    let schema = batches[0].schema();
    let mut wide: Option<Vec<(usize, usize)>> = None;
    let mut columns = Vec::with_capacity(schema.fields().len());
    for c in 0..schema.fields().len() {
        let arrays: Vec<&dyn Array> = batches.iter().map(|b| b.column(c).as_ref()).collect();
        let first = arrays[0];
        let direct = first.data_type().is_primitive() && arrays.iter().all(|a| a.null_count() == 0);
        let col: Option<ArrayRef> = if direct {
            downcast_primitive_array!(
                first => Some(Arc::new(gather_values(first, &arrays, indices)) as ArrayRef),
                _ => None
            )
        } else {
            None
        };
        let col = match col {
            Some(c) => c,
            None => {
                let wide = wide.get_or_insert_with(|| {
                    indices
                        .iter()
                        .map(|&(b, r)| (b as usize, r as usize))
                        .collect()
                });
                arrow_select::interleave::interleave(&arrays, wide)?
            }
        };
        columns.push(col);
    }
    Ok(RecordBatch::try_new_with_options(
        schema,
        columns,
        &arrow_array::RecordBatchOptions::new().with_row_count(Some(indices.len())),
    )?)
}

fn gather_values<T: arrow_array::ArrowPrimitiveType>(
    like: &arrow_array::PrimitiveArray<T>,
    arrays: &[&dyn Array],
    indices: &[(u32, u32)],
) -> arrow_array::PrimitiveArray<T> {
    let values: Vec<&[T::Native]> = arrays
        .iter()
        .map(|a| a.as_primitive::<T>().values().as_ref())
        .collect();
    let out: Vec<T::Native> = indices
        .iter()
        .map(|&(b, r)| values[b as usize][r as usize])
        .collect();
    arrow_array::PrimitiveArray::<T>::new(out.into(), None).with_data_type(like.data_type().clone())
}

/// One batch as Arrow IPC stream bytes.
pub(crate) fn ipc_bytes(batch: &RecordBatch) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut w = arrow_ipc::writer::StreamWriter::try_new(&mut out, batch.schema_ref())?;
    w.write(batch)?;
    w.finish()?;
    drop(w);
    Ok(out)
}

/// The one batch of [`ipc_bytes`]. The push decoder grows its buffers with the bytes
/// it is given, so a corrupted length in the file cannot make it allocate more than
/// the file holds.
pub(crate) fn from_ipc_bytes(bytes: &[u8]) -> Result<RecordBatch> {
    let corrupt = |e: arrow_schema::ArrowError| {
        TidemarkError::StateCorrupted(format!("reorder buffer rows: {e}"))
    };
    let mut decoder = arrow_ipc::reader::StreamDecoder::new();
    let mut buffer = arrow_buffer::Buffer::from(bytes.to_vec());
    let mut batches = Vec::new();
    while !buffer.is_empty() {
        match decoder.decode(&mut buffer).map_err(corrupt)? {
            Some(b) => batches.push(b),
            None => break,
        }
    }
    decoder.finish().map_err(corrupt)?;
    let schema = decoder
        .schema()
        .ok_or_else(|| TidemarkError::StateCorrupted("reorder buffer rows: no schema".into()))?;
    Ok(arrow_select::concat::concat_batches(&schema, &batches)?)
}
