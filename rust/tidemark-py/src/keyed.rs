//! `KeyedWatermarkTracker` bindings.

use std::sync::Arc;

use arrow_array::{Array, BooleanArray, Int64Array};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use pyo3_arrow::input::AnyArray;
use tidemark_core::key::KeyColumns;
use tidemark_core::time::{
    parse_event_time, same_len, CompactKeyedConfig, CompactKeyedWatermarkTracker, EventTimeType,
    KeyEvictionPolicy, KeyWatermarkState, KeyedTicks, KeyedWatermarkTracker, Watermark,
};
use tidemark_core::Result as CoreResult;

use crate::clock::clock_ref;
use crate::convert::arrow::{array_to_py, single_array};
use crate::convert::keys::{key_columns, py_key};
use crate::error::{detach, Result};

pub fn state_dict<'py>(py: Python<'py>, s: &KeyWatermarkState) -> Result<Bound<'py, PyDict>> {
    let d = fields_dict!(py, s; max_event_time, watermark, last_activity, is_idle);
    Ok(d)
}

/// Keys and event times given as Python sequences, paired row by row: a length
/// mismatch is a `ConfigError` (as for Arrow input), not a silently shorter batch.
fn paired<'a, 'py>(
    keys: &'a [Bound<'py, PyAny>],
    event_times: &'a [Option<i64>],
) -> Result<impl Iterator<Item = (&'a Bound<'py, PyAny>, Option<i64>)>> {
    same_len(keys.len(), event_times.len())?;
    Ok(keys.iter().zip(event_times.iter().copied()))
}

/// The event times paired with Python keys: a sequence of ints (or `None`), or any
/// Arrow array (timestamps in epoch microseconds, integers as they are).
fn time_values(times: &Bound<'_, PyAny>) -> Result<Vec<Option<i64>>> {
    if times.hasattr("__arrow_c_array__")? || times.hasattr("__arrow_c_stream__")? {
        let values = event_times(times.extract::<AnyArray>()?)?;
        return Ok(values.iter().collect());
    }
    Ok(times.extract()?)
}

/// Event times as int64: timestamps in epoch microseconds, integers as they are.
pub fn event_times(times: AnyArray) -> Result<Int64Array> {
    let array = single_array(times)?;
    let ty = EventTimeType::resolve(None, "event_times", array.data_type(), true)?;
    Ok(parse_event_time(array.as_ref(), ty)?.values)
}

/// What the two keyed trackers' bindings share: one implementation of each Python
/// entry point (keys as Python values or Arrow columns, times as ints or Arrow).
trait Tracker: Send + Sync {
    fn update_key(&mut self, key: &[u8], event_time: i64) -> CoreResult<Option<Watermark>>;
    fn update_cols(
        &mut self,
        keys: &KeyColumns,
        times: &Int64Array,
    ) -> CoreResult<Option<Watermark>>;
    /// A batch of `(encoded key, time)`: every key read before any is applied, and
    /// the global watermark recomputed once.
    fn update_many(&mut self, events: Vec<(Vec<u8>, i64)>) -> CoreResult<Option<Watermark>>;
    fn late(&self, key: EncodedKey, event_time: i64) -> bool;
    fn late_cols(&self, keys: &KeyColumns, times: &Int64Array) -> CoreResult<BooleanArray>;
}

/// The entry points both trackers name alike.
macro_rules! same_calls {
    () => {
        fn update_key(&mut self, key: &[u8], event_time: i64) -> CoreResult<Option<Watermark>> {
            self.update_encoded(key, event_time)
        }
        fn update_cols(
            &mut self,
            keys: &KeyColumns,
            times: &Int64Array,
        ) -> CoreResult<Option<Watermark>> {
            self.update_columns(keys, times)
        }
        fn late(&self, key: EncodedKey, event_time: i64) -> bool {
            self.is_late(key, event_time)
        }
        fn late_cols(&self, keys: &KeyColumns, times: &Int64Array) -> CoreResult<BooleanArray> {
            self.is_late_columns(keys, times)
        }
    };
}

impl Tracker for KeyedWatermarkTracker {
    same_calls!();
    fn update_many(&mut self, events: Vec<(Vec<u8>, i64)>) -> CoreResult<Option<Watermark>> {
        let events: Vec<(EncodedKey, i64)> = events
            .into_iter()
            .map(|(k, t)| (EncodedKey(k), t))
            .collect();
        self.update_batch(&events)
    }
}

impl Tracker for CompactKeyedWatermarkTracker {
    same_calls!();
    fn update_many(&mut self, events: Vec<(Vec<u8>, i64)>) -> CoreResult<Option<Watermark>> {
        self.update_batch_encoded(events)
    }
}

fn micros(w: Option<Watermark>) -> Option<i64> {
    w.map(|w| w.timestamp())
}

fn update_one(
    t: &mut impl Tracker,
    key: &Bound<'_, PyAny>,
    event_time: i64,
) -> Result<Option<i64>> {
    Ok(micros(t.update_key(&py_key(key)?, event_time)?))
}

fn update_columns(
    py: Python<'_>,
    t: &mut impl Tracker,
    columns: Vec<AnyArray>,
    event_times: AnyArray,
) -> Result<Option<i64>> {
    let (kc, _) = key_columns(columns)?;
    let times = event_times_of(event_times)?;
    detach(py, move || t.update_cols(&kc, &times)).map(micros)
}

/// Rows with a null time are skipped (as for Arrow input); their keys are still read
/// and checked, every one before any is applied.
fn update_pykeys(
    py: Python<'_>,
    t: &mut impl Tracker,
    keys: Vec<Bound<'_, PyAny>>,
    event_times: &Bound<'_, PyAny>,
) -> Result<Option<i64>> {
    let mut events = Vec::with_capacity(keys.len());
    for (k, time) in paired(&keys, &time_values(event_times)?)? {
        let k = py_key(k)?;
        if let Some(time) = time {
            events.push((k, time));
        }
    }
    detach(py, move || t.update_many(events)).map(micros)
}

fn is_late_one(t: &impl Tracker, key: &Bound<'_, PyAny>, event_time: i64) -> Result<bool> {
    Ok(t.late(EncodedKey(py_key(key)?), event_time))
}

fn is_late_columns(
    py: Python<'_>,
    t: &impl Tracker,
    columns: Vec<AnyArray>,
    event_times: AnyArray,
) -> Result<Py<PyAny>> {
    let (kc, _) = key_columns(columns)?;
    let times = event_times_of(event_times)?;
    let out = detach(py, move || t.late_cols(&kc, &times))?;
    array_to_py(py, Arc::new(out))
}

/// `is_late` of every (key, time) pair of Python sequences, as a BooleanArray (null
/// where the time is None).
fn is_late_pykeys(
    py: Python<'_>,
    t: &impl Tracker,
    keys: Vec<Bound<'_, PyAny>>,
    event_times: &Bound<'_, PyAny>,
) -> Result<Py<PyAny>> {
    let mut out = Vec::with_capacity(keys.len());
    for (k, time) in paired(&keys, &time_values(event_times)?)? {
        let k = EncodedKey(py_key(k)?);
        out.push(time.map(|time| t.late(k, time)));
    }
    array_to_py(py, Arc::new(arrow_array::BooleanArray::from(out)))
}

/// `#[pymethods]` of a per-key tracker class: the methods both trackers share (updates,
/// lateness, watermarks, memory), forwarded to the core tracker in `inner`, and the
/// class's own methods given in braces.
macro_rules! tracker_methods {
    ($ty:ident, { $($own:tt)* }) => {
        #[pymethods]
        impl $ty {
            fn update(&mut self, key: &Bound<'_, PyAny>, event_time: i64) -> Result<Option<i64>> {
                update_one(&mut self.inner, key, event_time)
            }

            /// Batch update from Arrow key columns and an event-time array.
            fn update_columns(
                &mut self,
                py: Python<'_>,
                columns: Vec<AnyArray>,
                event_times: AnyArray,
            ) -> Result<Option<i64>> {
                update_columns(py, &mut self.inner, columns, event_times)
            }

            /// Batch update from Python keys and int event times.
            fn update_pykeys(
                &mut self,
                py: Python<'_>,
                keys: Vec<Bound<'_, PyAny>>,
                event_times: &Bound<'_, PyAny>,
            ) -> Result<Option<i64>> {
                update_pykeys(py, &mut self.inner, keys, event_times)
            }

            fn watermark_for_key(&self, key: &Bound<'_, PyAny>) -> Result<Option<i64>> {
                let k = py_key(key)?;
                Ok(self.inner.watermark_for_key(&EncodedKey(k)))
            }

            fn is_late(&self, key: &Bound<'_, PyAny>, event_time: i64) -> Result<bool> {
                is_late_one(&self.inner, key, event_time)
            }

            fn is_late_columns(
                &self,
                py: Python<'_>,
                columns: Vec<AnyArray>,
                event_times: AnyArray,
            ) -> Result<Py<PyAny>> {
                is_late_columns(py, &self.inner, columns, event_times)
            }

            fn is_late_pykeys(
                &self,
                py: Python<'_>,
                keys: Vec<Bound<'_, PyAny>>,
                event_times: &Bound<'_, PyAny>,
            ) -> Result<Py<PyAny>> {
                is_late_pykeys(py, &self.inner, keys, event_times)
            }

            fn global_watermark(&self) -> Option<i64> {
                self.inner.global_watermark().map(|w| w.timestamp())
            }

            fn check_idle_keys(&mut self) -> Option<i64> {
                self.inner.check_idle_keys().map(|w| w.timestamp())
            }

            fn heap_bytes(&self) -> usize {
                self.inner.heap_bytes()
            }

            $($own)*
        }
    };
}

/// Native per-key watermark tracker (see `tidemark.KeyedWatermarkTracker`).
#[pyclass(name = "KeyedWatermarkTracker", module = "tidemark._native")]
pub struct PyKeyedWatermarkTracker {
    inner: KeyedWatermarkTracker,
}

tracker_methods!(PyKeyedWatermarkTracker, {
    #[new]
    #[pyo3(signature = (bounded_delay, idle_timeout = None, max_keys = None, eviction = "least_recently_active", clock = None))]
    fn new(
        bounded_delay: i64,
        idle_timeout: Option<i64>,
        max_keys: Option<usize>,
        eviction: &str,
        clock: Option<&Bound<'_, PyAny>>,
    ) -> Result<Self> {
        let policy = eviction.parse::<KeyEvictionPolicy>()?;
        let cfg = KeyedTicks {
            bounded_delay,
            idle_timeout,
            max_keys,
            eviction_policy: policy,
        };
        Ok(Self {
            inner: KeyedWatermarkTracker::with_ticks(cfg, clock_ref(clock)?),
        })
    }

    #[getter]
    fn bounded_delay(&self) -> i64 {
        self.inner.config().bounded_delay
    }

    #[getter]
    fn eviction(&self) -> &'static str {
        self.inner.config().eviction_policy.name()
    }

    /// The tracker's state, configuration included, as bytes (versioned, checksummed).
    fn snapshot<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.inner.snapshot())
    }

    /// A tracker restored from `snapshot()` bytes, reading `clock`.
    #[staticmethod]
    #[pyo3(signature = (data, clock = None))]
    fn restore(data: &[u8], clock: Option<&Bound<'_, PyAny>>) -> Result<Self> {
        let inner = KeyedWatermarkTracker::restore(data, clock_ref(clock)?)?;
        Ok(Self { inner })
    }

    #[getter]
    fn idle_timeout(&self) -> Option<i64> {
        self.inner.config().idle_timeout
    }

    #[getter]
    fn max_keys(&self) -> Option<usize> {
        self.inner.config().max_keys
    }

    fn key_state<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'_, PyAny>,
    ) -> Result<Option<Bound<'py, PyDict>>> {
        let k = py_key(key)?;
        self.inner
            .key_state(&EncodedKey(k))
            .map(|s| state_dict(py, &s))
            .transpose()
    }

    fn emitted_watermark(&self) -> Option<i64> {
        self.inner.emitted_watermark().map(|w| w.timestamp())
    }

    fn mark_idle(&mut self, key: &Bound<'_, PyAny>) -> Result<Option<i64>> {
        let k = py_key(key)?;
        Ok(self.inner.mark_idle(&EncodedKey(k)).map(|w| w.timestamp()))
    }

    fn mark_active(&mut self, key: &Bound<'_, PyAny>) -> Result<bool> {
        let k = py_key(key)?;
        Ok(self.inner.mark_active(&EncodedKey(k)))
    }

    fn remove_key<'py>(
        &mut self,
        py: Python<'py>,
        key: &Bound<'_, PyAny>,
    ) -> Result<Option<Bound<'py, PyDict>>> {
        let k = py_key(key)?;
        self.inner
            .remove_key(&EncodedKey(k))
            .map(|s| state_dict(py, &s))
            .transpose()
    }

    fn clear(&mut self) {
        self.inner.clear()
    }

    fn active_key_count(&self) -> usize {
        self.inner.active_key_count()
    }

    fn total_key_count(&self) -> usize {
        self.inner.total_key_count()
    }

    fn recalculate_global(&mut self) -> Option<i64> {
        self.inner.recalculate_global().map(|w| w.timestamp())
    }

    fn metrics<'py>(&self, py: Python<'py>) -> Result<Bound<'py, PyDict>> {
        let m = self.inner.metrics();
        let d = fields_dict!(py, m;
            total_keys, active_keys, idle_keys, evicted_keys, global_advances, key_advances
        );
        Ok(d)
    }
});

/// An already encoded key, usable wherever the core takes an [`AsKey`].
pub struct EncodedKey(pub Vec<u8>);

impl tidemark_core::key::AsKey for EncodedKey {
    fn encode_key(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.0);
    }
}

fn event_times_of(data: AnyArray) -> Result<Int64Array> {
    event_times(data)
}

/// Native memory-bounded keyed tracker (see `tidemark.CompactKeyedWatermarkTracker`).
#[pyclass(name = "CompactKeyedWatermarkTracker", module = "tidemark._native")]
pub struct PyCompactKeyedWatermarkTracker {
    inner: CompactKeyedWatermarkTracker,
}

tracker_methods!(PyCompactKeyedWatermarkTracker, {
    #[new]
    #[pyo3(signature = (bounded_delay, exact_keys, sketch_width, sketch_depth, idle_timeout = None, clock = None))]
    fn new(
        bounded_delay: i64,
        exact_keys: usize,
        sketch_width: usize,
        sketch_depth: usize,
        idle_timeout: Option<i64>,
        clock: Option<&Bound<'_, PyAny>>,
    ) -> Result<Self> {
        let cfg = CompactKeyedConfig {
            exact_keys,
            sketch_width,
            sketch_depth,
            bounded_delay,
            idle_timeout,
        };
        Ok(Self {
            inner: CompactKeyedWatermarkTracker::with_clock(cfg, clock_ref(clock)?)?,
        })
    }

    /// The configuration: (bounded_delay, exact_keys, sketch_width, sketch_depth,
    /// idle_timeout).
    fn config(&self) -> (i64, usize, usize, usize, Option<i64>) {
        let c = self.inner.config();
        (
            c.bounded_delay,
            c.exact_keys,
            c.sketch_width,
            c.sketch_depth,
            c.idle_timeout,
        )
    }

    /// The tracker's state, configuration included, as bytes (versioned, checksummed).
    fn snapshot<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.inner.snapshot())
    }

    /// A tracker restored from `snapshot()` bytes, reading `clock`.
    #[staticmethod]
    #[pyo3(signature = (data, clock = None))]
    fn restore(data: &[u8], clock: Option<&Bound<'_, PyAny>>) -> Result<Self> {
        let inner = CompactKeyedWatermarkTracker::restore(data, clock_ref(clock)?)?;
        Ok(Self { inner })
    }

    fn is_exact(&self, key: &Bound<'_, PyAny>) -> Result<bool> {
        Ok(self.inner.is_exact(&EncodedKey(py_key(key)?)))
    }

    fn configured_bytes(&self) -> usize {
        self.inner.configured_bytes()
    }

    fn metrics<'py>(&self, py: Python<'py>) -> Result<Bound<'py, PyDict>> {
        let m = self.inner.metrics();
        let d = fields_dict!(py, m; exact_keys, evicted_keys, estimated_distinct_keys, sketch_fill);
        Ok(d)
    }
});
