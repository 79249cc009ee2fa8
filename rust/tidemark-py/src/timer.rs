//! The timer service class.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};
use tidemark_core::timer::{TimeDomain, Timer, TimerService};

use crate::convert::keys::{decode_py_key, py_key};
use crate::error::Result;

/// Native timer service (see `tidemark.TimerService`). Keys are Python keys, stored
/// in the canonical key encoding and decoded back when timers fire.
#[pyclass(name = "TimerService", module = "tidemark._native")]
pub struct PyTimerService {
    inner: TimerService<Vec<u8>>,
}

/// A timer kind; anything else is a `ConfigError`, as every other setting's is.
fn domain(kind: &str) -> Result<TimeDomain> {
    Ok(kind.parse()?)
}

fn timer_list(py: Python<'_>, timers: Vec<&Timer<Vec<u8>>>) -> Result<Py<PyList>> {
    let out = PyList::empty(py);
    for t in timers {
        out.append((t.timestamp, decode_py_key(py, &t.key)?, t.namespace))?;
    }
    Ok(out.unbind())
}

#[pymethods]
impl PyTimerService {
    #[new]
    fn new() -> Self {
        Self {
            inner: TimerService::new(),
        }
    }

    /// Registers a timer (`add`) or deletes one; whether that changed anything.
    fn change(
        &mut self,
        add: bool,
        timestamp: i64,
        key: &Bound<'_, PyAny>,
        namespace: i64,
        kind: &str,
    ) -> Result<bool> {
        let (domain, key) = (domain(kind)?, py_key(key)?);
        Ok(if add {
            self.inner.register(domain, timestamp, key, namespace)
        } else {
            self.inner.delete(domain, timestamp, key, namespace)
        })
    }

    fn timers(&self, py: Python<'_>, kind: &str) -> Result<Py<PyList>> {
        timer_list(py, self.inner.timers(domain(kind)?).collect())
    }

    fn advance_watermark(&mut self, py: Python<'_>, watermark: i64) -> Result<Py<PyList>> {
        let fired = self.inner.advance_watermark(watermark);
        timer_list(py, fired.iter().collect())
    }

    fn advance_processing_time(&mut self, py: Python<'_>, now: i64) -> Result<Py<PyList>> {
        let fired = self.inner.advance_processing_time(now);
        timer_list(py, fired.iter().collect())
    }

    #[getter]
    fn watermark(&self) -> Option<i64> {
        self.inner.current_watermark()
    }

    fn __len__(&self) -> usize {
        self.inner.len()
    }

    fn snapshot<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.inner.snapshot())
    }

    #[staticmethod]
    fn restore(data: &[u8]) -> Result<Self> {
        Ok(Self {
            inner: TimerService::restore(data)?,
        })
    }
}
