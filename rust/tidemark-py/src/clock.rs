//! Clock classes and the `clock=` argument every tracker takes.

use std::sync::Arc;

use crate::error::Result;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use tidemark_core::clock::{system_clock, Clock, ClockRef, ManualClock, SystemClock};

/// Monotonic wall clock in milliseconds.
#[pyclass(name = "SystemClock", module = "tidemark._native", frozen)]
pub struct PySystemClock;

#[pymethods]
impl PySystemClock {
    #[new]
    fn new() -> Self {
        PySystemClock
    }

    /// Current time in milliseconds.
    fn now(&self) -> i64 {
        SystemClock.now()
    }
}

/// A clock that only moves when told to.
#[pyclass(name = "ManualClock", module = "tidemark._native", frozen)]
pub struct PyManualClock {
    pub inner: ManualClock,
}

#[pymethods]
impl PyManualClock {
    #[new]
    #[pyo3(signature = (start = 0))]
    fn new(start: i64) -> Self {
        Self {
            inner: ManualClock::new(start),
        }
    }

    /// Current time in ticks.
    fn now(&self) -> i64 {
        self.inner.now()
    }

    /// Moves the clock forward by `ticks` and returns the new time.
    fn advance(&self, ticks: i64) -> Result<i64> {
        if ticks < 0 {
            return Err(PyValueError::new_err(format!(
                "ManualClock.advance: ticks must be >= 0, got {ticks} (clocks never run backwards)"
            ))
            .into());
        }
        Ok(self.inner.advance(ticks))
    }

    /// Sets the clock to `t` (not earlier than now).
    fn set(&self, t: i64) -> Result<()> {
        if !self.inner.set(t) {
            return Err(PyValueError::new_err(format!(
                "ManualClock.set: {t} is earlier than the current time {} (clocks never run backwards)",
                self.inner.now()
            )).into());
        }
        Ok(())
    }
}

/// Resolves a `clock=` argument: `None` (system clock) or a native clock object.
pub fn clock_ref(clock: Option<&Bound<'_, PyAny>>) -> Result<ClockRef> {
    match clock {
        None => Ok(system_clock()),
        Some(c) if c.is_none() => Ok(system_clock()),
        Some(c) => {
            if let Ok(m) = c.cast::<PyManualClock>() {
                Ok(Arc::new(m.get().inner.clone()))
            } else if c.cast::<PySystemClock>().is_ok() {
                Ok(system_clock())
            } else {
                Err(PyTypeError::new_err(format!(
                    "clock must be a tidemark SystemClock or ManualClock, got {}",
                    c.get_type().name()?
                ))
                .into())
            }
        }
    }
}
