//! Arrow batch helpers shared by the operators: taking rows, and the error output.

use std::sync::Arc;

use arrow_array::builder::StringBuilder;
use arrow_array::{new_empty_array, RecordBatch, RecordBatchOptions, UInt32Array};
use arrow_schema::{DataType, Field, Schema};

use crate::error::Result;

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
