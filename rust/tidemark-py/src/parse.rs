//! Event-time parsing and duration bindings.

use std::sync::Arc;

use arrow_array::{ArrayRef, Int64Array, StringArray};
use arrow_schema::{DataType, Field};
use pyo3::prelude::*;
use pyo3_arrow::input::AnyArray;
use tidemark_core::duration::parse_duration_micros;
use tidemark_core::time::{
    parse_event_time as core_parse, EventTimeType, BUILTIN_EVENT_TIME_TYPES,
};

use crate::convert::arrow::{array_to_py, chunks_to_py, read_chunks};
use crate::error::{detach, Result};

/// Names of the built-in event-time types.
#[pyfunction]
pub fn builtin_event_time_types() -> Vec<&'static str> {
    BUILTIN_EVENT_TIME_TYPES.to_vec()
}

/// Checks a configuration name against the core's names for `setting`: `per` (a
/// watermark's scope), `idleness` or `late` (a reorder's late policy); an unknown name
/// is a `ConfigError` listing the names.
#[pyfunction]
pub fn check_name(setting: &str, value: &str) -> Result<()> {
    use tidemark_core::pipeline::{Idleness, LatePolicy, Scope};
    match setting {
        "per" => Scope::from_name(value, Some(String::new())).map(|_| ()),
        "idleness" => value.parse::<Idleness>().map(|_| ()),
        "late" => value.parse::<LatePolicy>().map(|_| ()),
        other => Err(tidemark_core::TidemarkError::config(
            "setting",
            format!("no names are known for {other:?}"),
        )),
    }?;
    Ok(())
}

/// Parses a duration string ("250ms", "5s", "1h30m") into microseconds.
#[pyfunction]
pub fn parse_duration(text: &str) -> Result<i64> {
    Ok(parse_duration_micros(text)?)
}

/// Checks that `event_time_type` can parse a column named `column` of the given
/// Arrow type (taken from `like`, any Arrow array or a pyarrow DataType's empty array).
#[pyfunction]
#[pyo3(signature = (column, like, event_time_type = None, allow_ticks = false))]
pub fn check_event_time_type(
    column: &str,
    like: AnyArray,
    event_time_type: Option<&str>,
    allow_ticks: bool,
) -> Result<String> {
    let field = like.field()?;
    let ty = EventTimeType::resolve(event_time_type, column, field.data_type(), allow_ticks)?;
    Ok(ty.name().to_string())
}

/// Parses an event-time array (or chunked array) to int64 epoch microseconds.
///
/// Returns `(values, error_rows, error_reasons)`: `values` has the input's shape
/// (array or chunked array) with nulls where a row failed; the error arrays give the
/// failing row numbers (over the whole input) and why.
#[pyfunction]
#[pyo3(signature = (data, event_time_type = None, allow_ticks = false, column = "event_time"))]
pub fn parse_event_time(
    py: Python<'_>,
    data: AnyArray,
    event_time_type: Option<String>,
    allow_ticks: bool,
    column: &str,
) -> Result<(Py<PyAny>, Py<PyAny>, Py<PyAny>)> {
    let chunked = matches!(data, AnyArray::Stream(_));
    let (field, chunks) = read_chunks(data)?;
    let column = column.to_string();
    let (values, rows, reasons) = detach(py, move || {
        let ty = EventTimeType::resolve(
            event_time_type.as_deref(),
            &column,
            field.data_type(),
            allow_ticks,
        )?;
        let mut values: Vec<ArrayRef> = Vec::with_capacity(chunks.len());
        let mut rows = Vec::new();
        let mut reasons = Vec::new();
        let mut offset = 0i64;
        for chunk in &chunks {
            let p = core_parse(chunk.as_ref(), ty)?;
            for (row, reason) in p.errors {
                rows.push(offset + row as i64);
                reasons.push(reason);
            }
            offset += chunk.len() as i64;
            values.push(Arc::new(p.values));
        }
        Ok((values, rows, reasons))
    })?;
    let rows: ArrayRef = Arc::new(Int64Array::from(rows));
    let reasons: ArrayRef = Arc::new(StringArray::from(reasons));
    let values = if chunked {
        chunks_to_py(
            py,
            values,
            Arc::new(Field::new("event_time", DataType::Int64, true)),
        )?
    } else {
        array_to_py(py, values.into_iter().next().expect("one chunk"))?
    };
    Ok((values, array_to_py(py, rows)?, array_to_py(py, reasons)?))
}
