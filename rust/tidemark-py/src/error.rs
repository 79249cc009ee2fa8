//! The one mapping from core errors to Python exceptions, and the helper every
//! binding method goes through: release the GIL, run, catch panics, map the error.
//!
//! Exception classes are defined in Python (`tidemark/errors.py`, where they can
//! inherit from both `TidemarkError` and `KeyError` / `ValueError`) and looked up
//! here once.

use std::panic::{catch_unwind, AssertUnwindSafe};

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyModule;
use tidemark_core::TidemarkError;

static ERRORS: PyOnceLock<Py<PyModule>> = PyOnceLock::new();

fn exception(py: Python<'_>, name: &str, message: String) -> PyErr {
    let module = ERRORS.get_or_try_init(py, || py.import("tidemark.errors").map(|m| m.unbind()));
    match module.and_then(|m| m.bind(py).getattr(name)) {
        Ok(cls) => match cls.call1((message.clone(),)) {
            Ok(exc) => PyErr::from_value(exc),
            Err(e) => e,
        },
        Err(_) => PyRuntimeError::new_err(format!("{name}: {message}")),
    }
}

/// Converts a core error into the matching `tidemark` exception.
pub fn to_py(py: Python<'_>, e: TidemarkError) -> PyErr {
    let name = match &e {
        TidemarkError::UnknownPartition { .. } => "UnknownPartitionError",
        TidemarkError::SourceNotFound { .. } => "SourceNotFoundError",
        TidemarkError::InvalidPartition { .. } => "InvalidPartitionError",
        TidemarkError::MaxKeysReached { .. } => "MaxKeysReachedError",
        TidemarkError::UnknownEventTimeType { .. } => "UnknownEventTimeTypeError",
        TidemarkError::MissingColumn { .. } => "MissingColumnError",
        TidemarkError::Config { .. } => "ConfigError",
        TidemarkError::StateCorrupted(_) => "StateCorruptedError",
        TidemarkError::Arrow(_) => "ArrowDataError",
    };
    exception(py, name, e.to_string())
}

/// Maps a core result.
pub fn check<T>(py: Python<'_>, r: Result<T, TidemarkError>) -> PyResult<T> {
    r.map_err(|e| to_py(py, e))
}

/// Runs `f` with the GIL released, turning a panic into `tidemark.InternalError`
/// instead of an abort and mapping the core error.
pub fn detach<T, F>(py: Python<'_>, f: F) -> PyResult<T>
where
    T: Send,
    F: FnOnce() -> Result<T, TidemarkError> + Send,
{
    match py.detach(|| catch_unwind(AssertUnwindSafe(f))) {
        Ok(r) => check(py, r),
        Err(panic) => Err(internal(py, panic)),
    }
}

fn internal(py: Python<'_>, panic: Box<dyn std::any::Any + Send>) -> PyErr {
    let what = panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into());
    exception(
        py,
        "InternalError",
        format!("internal error in tidemark (please report it): {what}"),
    )
}
