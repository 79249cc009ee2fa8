//! Python values and Arrow columns as keys (the canonical encoding of
//! `tidemark_core::key`).

use arrow_array::ArrayRef;
use pyo3::exceptions::{PyOverflowError, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyByteArray, PyBytes, PyFloat, PyInt, PyString, PyTuple};
use pyo3_arrow::input::AnyArray;
use tidemark_core::key::{self, decode_key, KeyColumns, KeyValue};

use crate::convert::arrow::single_array;
use crate::error::Result;

fn encode_scalar(obj: &Bound<'_, PyAny>, out: &mut Vec<u8>) -> Result<()> {
    if obj.is_none() {
        key::encode_null(out);
    } else if let Ok(b) = obj.cast::<PyBool>() {
        key::encode_bool(b.is_true(), out);
    } else if obj.is_instance_of::<PyInt>() {
        if let Ok(i) = obj.extract::<i64>() {
            key::encode_int(i, out);
        } else if let Ok(u) = obj.extract::<u64>() {
            key::encode_uint(u, out);
        } else {
            return Err(PyOverflowError::new_err(
                "integer keys must fit in 64 bits (signed or unsigned)",
            )
            .into());
        }
    } else if let Ok(s) = obj.cast::<PyString>() {
        key::encode_str(s.to_str()?, out);
    } else if let Ok(b) = obj.cast::<PyBytes>() {
        key::encode_bytes(b.as_bytes(), out);
    } else if let Ok(b) = obj.cast::<PyByteArray>() {
        key::encode_bytes(&b.to_vec(), out);
    } else if let Ok(f) = obj.cast::<PyFloat>() {
        key::encode_float(f.value(), out);
    } else if let Some(value) = numpy_scalar_value(obj)? {
        // A numpy integer, bool or the like: the key of the Python value it holds (an
        // `np.int64(7)` and a `7` are one key, as in an int64 column).
        return encode_scalar(&value, out);
    } else {
        return Err(PyTypeError::new_err(format!(
            "a key must be str, bytes, int, float, bool, None or a tuple of them, got {}",
            obj.get_type().name()?
        ))
        .into());
    }
    Ok(())
}

/// The Python value a numpy scalar holds (its `item()`), when `obj` is one and that
/// value is a scalar key type (not another numpy object).
fn numpy_scalar_value<'py>(obj: &Bound<'py, PyAny>) -> Result<Option<Bound<'py, PyAny>>> {
    let ty = obj.get_type();
    if ty.module()?.to_str()? != "numpy" || !obj.hasattr("item")? {
        return Ok(None);
    }
    let value = obj.call_method0("item")?;
    let builtin = value.is_none()
        || value.is_instance_of::<PyBool>()
        || value.is_instance_of::<PyInt>()
        || value.is_instance_of::<PyFloat>()
        || value.is_instance_of::<PyString>()
        || value.is_instance_of::<PyBytes>();
    Ok(builtin.then_some(value))
}

/// Appends the encoding of a Python key (a value or a flat tuple of values).
pub fn encode_py_key(obj: &Bound<'_, PyAny>, out: &mut Vec<u8>) -> Result<()> {
    if let Ok(t) = obj.cast::<PyTuple>() {
        for item in t.iter() {
            if item.cast::<PyTuple>().is_ok() {
                return Err(PyTypeError::new_err("key tuples cannot be nested").into());
            }
            encode_scalar(&item, out)?;
        }
        Ok(())
    } else {
        encode_scalar(obj, out)
    }
}

/// The encoding of one Python key.
pub fn py_key(obj: &Bound<'_, PyAny>) -> Result<Vec<u8>> {
    let mut v = Vec::new();
    encode_py_key(obj, &mut v)?;
    Ok(v)
}

/// Reads key columns (each an array or chunked array; chunks are concatenated).
pub fn key_columns(columns: Vec<AnyArray>) -> Result<(KeyColumns, usize)> {
    let mut arrays: Vec<ArrayRef> = Vec::with_capacity(columns.len());
    for c in columns {
        arrays.push(single_array(c)?);
    }
    let kc = KeyColumns::new(&arrays)?;
    let n = kc.len();
    Ok((kc, n))
}

/// Decodes an encoded key back into a Python value (a tuple for several values).
pub fn decode_py_key(py: Python<'_>, k: &[u8]) -> Result<Py<PyAny>> {
    let mut values: Vec<Py<PyAny>> = Vec::new();
    for v in decode_key(k)? {
        values.push(match v {
            KeyValue::Null => py.None(),
            KeyValue::Int(i) => i.into_pyobject(py)?.into_any().unbind(),
            KeyValue::UInt(u) => u.into_pyobject(py)?.into_any().unbind(),
            KeyValue::Float(f) => f.into_pyobject(py)?.into_any().unbind(),
            KeyValue::Bool(b) => PyBool::new(py, b).to_owned().into_any().unbind(),
            KeyValue::Str(s) => PyString::new(py, s).into_any().unbind(),
            KeyValue::Bin(b) => PyBytes::new(py, b).into_any().unbind(),
        });
    }
    Ok(if values.len() == 1 {
        values.pop().expect("one")
    } else {
        PyTuple::new(py, values)?.into_any().unbind()
    })
}
