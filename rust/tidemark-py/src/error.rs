//! The one mapping from core errors to Python exceptions, the binding's error type
//! (so `?` takes core and Python errors alike), and the helper every heavy binding
//! method goes through: release the GIL, run, catch panics.
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
        TidemarkError::Config { .. } | TidemarkError::KeyTooLong { .. } => "ConfigError",
        TidemarkError::StateCorrupted(_) => "StateCorruptedError",
        TidemarkError::Arrow(_) => "ArrowDataError",
    };
    exception(py, name, e.to_string())
}

/// An error on its way to Python: a core error (raised as its `tidemark` exception,
/// see [`to_py`]) or a Python one. Binding methods return [`Result`], so `?` works on
/// the core's results and on pyo3's.
#[derive(Debug)]
pub enum Error {
    /// A core error, not yet turned into its exception.
    Core(TidemarkError),
    /// A Python exception.
    Py(PyErr),
}

impl From<TidemarkError> for Error {
    fn from(e: TidemarkError) -> Self {
        Error::Core(e)
    }
}

impl From<std::convert::Infallible> for Error {
    fn from(e: std::convert::Infallible) -> Self {
        match e {}
    }
}

impl From<PyErr> for Error {
    fn from(e: PyErr) -> Self {
        Error::Py(e)
    }
}

impl From<Error> for PyErr {
    fn from(e: Error) -> Self {
        match e {
            Error::Py(e) => e,
            Error::Core(e) => Python::attach(|py| to_py(py, e)),
        }
    }
}

/// The binding's result: [`Error`] unless said otherwise.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Runs `f` with the GIL released, turning a panic into `tidemark.InternalError`
/// instead of an abort and mapping the core error.
pub fn detach<T, F>(py: Python<'_>, f: F) -> Result<T>
where
    T: Send,
    F: FnOnce() -> Result<T, TidemarkError> + Send,
{
    match py.detach(|| catch_unwind(AssertUnwindSafe(f))) {
        Ok(r) => Ok(r?),
        Err(panic) => Err(internal(py, panic).into()),
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
