//! Pipeline operator and timer-service bindings.

use arrow_array::RecordBatch;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};
use pyo3_arrow::input::{AnyArray, AnyRecordBatch};
use pyo3_arrow::{PySchema, PyTable};
use tidemark_core::agg::{AggKind, AggSpec};
use tidemark_core::pipeline::{
    ArrivalOperator, EmitMode, LatePolicy, LateRule, Operator, Output, Pending, PipelineConfig,
    Progress, Scope, TimeMode,
};
use tidemark_core::state::{self, Reader, SnapshotKind, Writer};
use tidemark_core::time::{KeyEvictionPolicy, ScopeWatermark};
use tidemark_core::timer::{TimeDomain, TimerService};
use tidemark_core::window::WindowSpec;
use tidemark_core::TidemarkError;

use crate::arrow_io::{one_batch, parsed_times as parsed_times_of, read_batches};
use crate::clock::clock_ref;
use crate::error::{check, detach, to_py};
use crate::keys::{decode_py_key, py_key};

pub fn get<'py, T>(d: &Bound<'py, PyDict>, k: &str) -> PyResult<T>
where
    T: for<'a> FromPyObject<'a, 'py, Error = PyErr>,
{
    match d.get_item(k)? {
        Some(v) => v
            .extract::<T>()
            .map_err(|e| PyTypeError::new_err(format!("pipeline config {k:?}: {e}"))),
        None => Err(PyTypeError::new_err(format!(
            "pipeline config is missing {k:?}"
        ))),
    }
}

fn cfg_err(setting: &str, m: String) -> TidemarkError {
    TidemarkError::config(setting, m)
}

/// One of a fixed set of names from the config dict, or a `ConfigError` listing them.
pub fn choice<T: Copy>(
    py: Python<'_>,
    d: &Bound<'_, PyDict>,
    key: &str,
    options: &[(&str, T)],
) -> PyResult<T> {
    let name: String = get(d, key)?;
    if let Some((_, v)) = options.iter().find(|(n, _)| *n == name) {
        return Ok(*v);
    }
    let names: Vec<String> = options.iter().map(|(n, _)| format!("{n:?}")).collect();
    let (last, rest) = names.split_last().expect("options");
    Err(to_py(
        py,
        cfg_err(key, format!("{name:?}: use {} or {last}", rest.join(", "))),
    ))
}

/// Builds the core configuration from the dict `tidemark.Pipeline` prepares.
pub fn config_from_dict(py: Python<'_>, d: &Bound<'_, PyDict>) -> PyResult<PipelineConfig> {
    let scope: String = get(d, "scope")?;
    let scope = match scope.as_str() {
        "global" => Scope::Global,
        "key" => Scope::Key,
        "partition" => Scope::Partition {
            column: get(d, "partition_column")?,
        },
        other => {
            return Err(to_py(
                py,
                cfg_err(
                    "watermark",
                    format!("per={other:?}: use \"global\", \"partition\" or \"key\""),
                ),
            ))
        }
    };
    let window = d
        .get_item("window")?
        .ok_or_else(|| PyTypeError::new_err("pipeline config is missing \"window\""))?
        .cast_into::<PyDict>()
        .map_err(|_| PyTypeError::new_err("pipeline config \"window\" must be a dict"))?;
    let kind: String = get(&window, "kind")?;
    let window = match kind.as_str() {
        "tumbling" => WindowSpec::Tumbling {
            size: get(&window, "size")?,
            offset: get(&window, "offset")?,
        },
        "sliding" => WindowSpec::Sliding {
            size: get(&window, "size")?,
            slide: get(&window, "slide")?,
            offset: get(&window, "offset")?,
        },
        "session" => WindowSpec::Session {
            gap: get(&window, "gap")?,
        },
        "rows" => WindowSpec::Rows {
            n: get(&window, "n")?,
        },
        other => {
            return Err(to_py(
                py,
                cfg_err("window", format!("unknown window kind {other:?}")),
            ))
        }
    };
    // (name, kind, column, ddof, by, (percentage, accuracy) of percentile_approx)
    type AggTuple = (
        String,
        String,
        Option<String>,
        u8,
        Option<String>,
        Option<(f64, u32)>,
    );
    let agg_list: Vec<AggTuple> = get(d, "aggs")?;
    let mut aggs = Vec::with_capacity(agg_list.len());
    for (name, kind, column, ddof, by, quantile) in agg_list {
        let kind = match quantile {
            Some((p, accuracy)) => AggKind::percentile_approx(p, accuracy),
            None => AggKind::from_name(&kind, ddof),
        };
        aggs.push(AggSpec {
            name,
            kind: check(py, kind)?,
            column,
            by,
        });
    }
    let emit = choice(
        py,
        d,
        "emit",
        &[
            ("on_window_close", EmitMode::OnWindowClose),
            ("on_update", EmitMode::OnUpdate),
        ],
    )?;
    let late = choice(
        py,
        d,
        "late",
        &[
            ("side_output", LatePolicy::SideOutput),
            ("drop", LatePolicy::Drop),
        ],
    )?;
    let time = choice(
        py,
        d,
        "time",
        &[
            ("event", TimeMode::Event),
            ("processing", TimeMode::Processing),
        ],
    )?;
    let eviction: String = get(d, "eviction")?;
    let cfg = PipelineConfig {
        keys: get(d, "keys")?,
        event_time: get(d, "event_time")?,
        event_time_type: get(d, "event_time_type")?,
        parsed_externally: get(d, "parsed_externally")?,
        delay: get(d, "delay")?,
        scope,
        idle_timeout: get(d, "idle_timeout")?,
        source_partitions: get(d, "source_partitions")?,
        window,
        aggs,
        emit,
        allowed_lateness: get(d, "allowed_lateness")?,
        late,
        late_rule: check(py, get::<String>(d, "late_rule")?.parse::<LateRule>())?,
        max_keys: get(d, "max_keys")?,
        eviction: check(py, KeyEvictionPolicy::from_name(&eviction))?,
        time,
        state_ttl: get(d, "state_ttl")?,
    };
    check(py, cfg.validate())?;
    Ok(cfg)
}

/// The core configuration and clock of a class built from `tidemark.Pipeline`'s dict.
fn config_and_clock(
    py: Python<'_>,
    config: &Bound<'_, PyDict>,
    clock: Option<&Bound<'_, PyAny>>,
) -> PyResult<(PipelineConfig, tidemark_core::clock::ClockRef)> {
    Ok((config_from_dict(py, config)?, clock_ref(clock)?))
}

/// Validates a pipeline configuration dict (raises a `ConfigError` on mistakes).
#[pyfunction]
pub fn validate_pipeline(py: Python<'_>, config: &Bound<'_, PyDict>) -> PyResult<u64> {
    Ok(config_from_dict(py, config)?.fingerprint())
}

/// The output schema of a pipeline for an input schema.
#[pyfunction]
pub fn pipeline_output_schema(
    py: Python<'_>,
    config: &Bound<'_, PyDict>,
    schema: PySchema,
) -> PyResult<Py<PyAny>> {
    let cfg = config_from_dict(py, config)?;
    let out = check(py, Operator::output_schema(&cfg, schema.as_ref()))?;
    Ok(PySchema::new(out).into_pyarrow(py)?.unbind())
}

pub fn batch_to_table(py: Python<'_>, b: RecordBatch) -> PyResult<Py<PyAny>> {
    let schema = b.schema();
    Ok(PyTable::try_new(vec![b], schema)?
        .into_pyarrow(py)?
        .unbind())
}

pub fn output(py: Python<'_>, o: Output) -> PyResult<(Py<PyAny>, Py<PyAny>, Py<PyAny>)> {
    Ok((
        batch_to_table(py, o.windows)?,
        batch_to_table(py, o.late)?,
        batch_to_table(py, o.errors)?,
    ))
}

/// Native pipeline operator (see `tidemark.Operator`).
#[pyclass(name = "Operator", module = "tidemark._native")]
pub struct PyOperator {
    inner: Operator,
    /// Rows ingested by `ingest`, waiting for `complete`.
    pending: Option<Pending>,
}

#[pymethods]
impl PyOperator {
    #[new]
    #[pyo3(signature = (config, clock = None, state = None))]
    fn new(
        py: Python<'_>,
        config: &Bound<'_, PyDict>,
        clock: Option<&Bound<'_, PyAny>>,
        state: Option<&[u8]>,
    ) -> PyResult<Self> {
        let (cfg, clock) = config_and_clock(py, config, clock)?;
        let inner = match state {
            None => check(py, Operator::new(cfg, clock))?,
            Some(bytes) => check(
                py,
                tidemark_core::runtime::restore_operator(cfg, clock, bytes),
            )?,
        };
        Ok(Self {
            inner,
            pending: None,
        })
    }

    /// The first half of `process`: judges and adds the rows and advances this
    /// operator's watermarks (see `progress`), closing nothing; `complete` finishes.
    #[pyo3(signature = (data, parsed_times = None))]
    fn ingest(
        &mut self,
        py: Python<'_>,
        data: AnyRecordBatch,
        parsed_times: Option<AnyArray>,
    ) -> PyResult<()> {
        let (schema, batches) = read_batches(py, data)?;
        let parsed = parsed_times_of(py, parsed_times)?;
        let op = &mut self.inner;
        let pending = detach(py, move || {
            let batch = one_batch(schema, batches)?;
            op.ingest(&batch, parsed.as_ref())
        })?;
        self.pending = Some(pending);
        Ok(())
    }

    /// The second half of `process`: closes the windows `close_watermark` (combined
    /// over every operator of the scope; `None`: this operator's own) passed.
    #[pyo3(signature = (close_watermark = None))]
    fn complete(&mut self, py: Python<'_>, close_watermark: Option<i64>) -> PyResult<Tables> {
        let pending = self.pending.take().ok_or_else(|| {
            to_py(
                py,
                TidemarkError::config("complete", "complete() needs an ingest() first"),
            )
        })?;
        let op = &mut self.inner;
        let out = detach(py, move || {
            op.set_close_watermark(close_watermark);
            let out = op.complete(pending);
            op.set_close_watermark(None);
            out
        })?;
        output(py, out)
    }

    /// Processes one arrival unit (all batches of `data` together).
    #[pyo3(signature = (data, parsed_times = None))]
    fn process(
        &mut self,
        py: Python<'_>,
        data: AnyRecordBatch,
        parsed_times: Option<AnyArray>,
    ) -> PyResult<Tables> {
        process_with(py, &mut self.inner, data, parsed_times)
    }

    fn flush(&mut self, py: Python<'_>) -> PyResult<Tables> {
        flush_with(py, &mut self.inner)
    }

    /// A call without rows: time moves on by itself.
    fn tick(&mut self, py: Python<'_>) -> PyResult<Tables> {
        tick_with(py, &mut self.inner)
    }

    fn snapshot<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        snapshot_with(py, &self.inner)
    }

    #[getter]
    fn watermark(&self) -> Option<i64> {
        self.inner.watermark()
    }

    /// Joins every input row with `table` on `on` first (`None`: no lookup).
    #[pyo3(signature = (table, on, how = "left", prefix = None))]
    fn set_lookup(
        &mut self,
        py: Python<'_>,
        table: Option<AnyRecordBatch>,
        on: Vec<String>,
        how: &str,
        prefix: Option<String>,
    ) -> PyResult<()> {
        let l = match table {
            Some(t) => Some(crate::runtime::lookup_from(py, t, on, how, prefix)?),
            None => None,
        };
        self.inner.set_lookup(l);
        Ok(())
    }

    /// Uses an externally combined watermark (see the Rust docs); None to stop.
    fn set_external_watermark(&mut self, watermark: Option<i64>) {
        self.inner.set_external_watermark(watermark)
    }

    /// Off: each call's windows in the order they closed instead of sorted.
    fn set_sorted_output(&mut self, on: bool) {
        self.inner.set_sorted_output(on)
    }

    /// What the last process call saw: max event time, per-partition maxima, key-scope
    /// global watermark.
    fn progress<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        progress_dict(py, self.inner.progress())
    }

    fn key_watermark(&self, key: &Bound<'_, PyAny>) -> PyResult<Option<i64>> {
        Ok(self.inner.key_watermark(&py_key(key)?))
    }

    fn metrics<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        metrics_dict(
            py,
            &self.inner.metrics(),
            self.inner.key_metrics(),
            self.inner.watermark(),
        )
    }
}

type Tables = (Py<PyAny>, Py<PyAny>, Py<PyAny>);

/// `process` of any operator kind: one arrival unit, GIL released.
pub fn process_with<T: ArrivalOperator>(
    py: Python<'_>,
    op: &mut T,
    data: AnyRecordBatch,
    parsed_times: Option<AnyArray>,
) -> PyResult<Tables> {
    let (schema, batches) = read_batches(py, data)?;
    let parsed = parsed_times_of(py, parsed_times)?;
    let out = detach(py, move || {
        let batch = one_batch(schema, batches)?;
        op.process_unit(&batch, parsed.as_ref())
    })?;
    output(py, out)
}

/// `flush` of any operator kind.
pub fn flush_with<T: ArrivalOperator>(py: Python<'_>, op: &mut T) -> PyResult<Tables> {
    let out = detach(py, move || op.flush_all())?;
    output(py, out)
}

/// `tick` of any operator kind.
pub fn tick_with<T: ArrivalOperator>(py: Python<'_>, op: &mut T) -> PyResult<Tables> {
    let out = detach(py, move || op.tick())?;
    output(py, out)
}

/// `snapshot` of any operator kind.
pub fn snapshot_with<'py, T: ArrivalOperator + Sync>(
    py: Python<'py>,
    op: &T,
) -> PyResult<Bound<'py, PyBytes>> {
    let bytes = detach(py, move || op.snapshot_bytes())?;
    Ok(PyBytes::new(py, &bytes))
}

/// The progress dict of an operator (one or sharded).
pub fn progress_dict<'py>(
    py: Python<'py>,
    p: &tidemark_core::pipeline::Progress,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item(
        "max_event_time",
        (p.max_event_time != i64::MIN).then_some(p.max_event_time),
    )?;
    d.set_item("partition_max", p.partition_max.clone())?;
    d.set_item("key_global", p.key_global)?;
    d.set_item(
        "on_time_max",
        (p.on_time_max != i64::MIN).then_some(p.on_time_max),
    )?;
    d.set_item(
        "key_parts",
        (
            p.key_parts.0,
            (p.key_parts.1 != i64::MIN).then_some(p.key_parts.1),
        ),
    )?;
    Ok(d)
}

/// A progress dict (see [`progress_dict`]) read back.
fn progress_from_dict(d: &Bound<'_, PyDict>) -> PyResult<Progress> {
    let opt = |k: &str| -> PyResult<i64> { Ok(get::<Option<i64>>(d, k)?.unwrap_or(i64::MIN)) };
    let (active, highest): (Option<i64>, Option<i64>) = get(d, "key_parts")?;
    Ok(Progress {
        max_event_time: opt("max_event_time")?,
        partition_max: get(d, "partition_max")?,
        key_global: get(d, "key_global")?,
        on_time_max: opt("on_time_max")?,
        key_parts: (active, highest.unwrap_or(i64::MIN)),
    })
}

/// The watermark of a pipeline's scope, combined over the operators that share it
/// (see `tidemark_core::time::ScopeWatermark`).
#[pyclass(name = "ScopeWatermark", module = "tidemark._native")]
pub struct PyScopeWatermark {
    inner: ScopeWatermark,
}

#[pymethods]
impl PyScopeWatermark {
    #[new]
    #[pyo3(signature = (config, clock = None, state = None))]
    fn new(
        py: Python<'_>,
        config: &Bound<'_, PyDict>,
        clock: Option<&Bound<'_, PyAny>>,
        state: Option<&[u8]>,
    ) -> PyResult<Self> {
        let (cfg, clock) = config_and_clock(py, config, clock)?;
        let inner = match state {
            None => ScopeWatermark::new(&cfg, clock),
            Some(b) => check(py, ScopeWatermark::from_bytes(&cfg, clock, b))?,
        };
        Ok(Self { inner })
    }

    /// Combines the progress dicts of one call of every operator; returns the
    /// watermark that closes windows after it (`None`: none yet).
    fn advance(
        &mut self,
        py: Python<'_>,
        progress: Vec<Bound<'_, PyDict>>,
    ) -> PyResult<Option<i64>> {
        let progress = progress
            .iter()
            .map(progress_from_dict)
            .collect::<PyResult<Vec<_>>>()?;
        let w = check(py, self.inner.advance(&progress))?;
        Ok((w != i64::MIN).then_some(w))
    }

    /// The current watermark (`None`: none yet).
    #[getter]
    fn current(&self) -> Option<i64> {
        let w = self.inner.current();
        (w != i64::MIN).then_some(w)
    }

    fn to_bytes<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.inner.to_bytes())
    }
}

/// The metrics dict of an operator (one or sharded).
pub fn metrics_dict<'py>(
    py: Python<'py>,
    m: &tidemark_core::pipeline::PipelineMetrics,
    k: &tidemark_core::time::KeyedWatermarkMetrics,
    watermark: Option<i64>,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    for (name, v) in [
        ("batches", m.batches),
        ("rows_in", m.rows_in),
        ("late_dropped_count", m.late_dropped_count),
        ("rows_error", m.rows_error),
        ("windows_emitted", m.windows_emitted),
        ("updates_emitted", m.updates_emitted),
        ("retractions_emitted", m.retractions_emitted),
        ("windows_open", m.windows_open),
        ("windows_closed_by_timer", m.windows_closed_by_timer),
        ("windows_closed_by_watermark", m.windows_closed_by_watermark),
        ("sessions_closed_by_timer", m.sessions_closed_by_timer),
        (
            "sessions_closed_by_watermark",
            m.sessions_closed_by_watermark,
        ),
        ("sessions_merged", m.sessions_merged),
        ("windows_flushed", m.windows_flushed),
        ("windows_evicted", m.windows_evicted),
        ("keys_evicted", m.keys_evicted),
        ("keys_expired", m.keys_expired),
        ("windows_expired", m.windows_expired),
        ("rows_unmatched", m.rows_unmatched),
    ] {
        d.set_item(name, v)?;
    }
    d.set_item("keys", k.total_keys)?;
    d.set_item("active_keys", k.active_keys)?;
    d.set_item("idle_keys", k.idle_keys)?;
    d.set_item("watermark", watermark)?;
    Ok(d)
}

/// Native ROWS-window operator (see `tidemark.Rows`).
#[pyclass(name = "RowsOperator", module = "tidemark._native")]
pub struct PyRowsOperator {
    inner: tidemark_core::pipeline::rows::RowsOperator,
}

#[pymethods]
impl PyRowsOperator {
    #[new]
    #[pyo3(signature = (config, state = None))]
    fn new(py: Python<'_>, config: &Bound<'_, PyDict>, state: Option<&[u8]>) -> PyResult<Self> {
        use tidemark_core::pipeline::rows::RowsOperator;
        let cfg = config_from_dict(py, config)?;
        let inner = match state {
            None => check(py, RowsOperator::new(cfg))?,
            Some(bytes) => check(py, RowsOperator::restore(cfg, bytes))?,
        };
        Ok(Self { inner })
    }

    #[pyo3(signature = (data, parsed_times = None))]
    fn process(
        &mut self,
        py: Python<'_>,
        data: AnyRecordBatch,
        parsed_times: Option<AnyArray>,
    ) -> PyResult<Tables> {
        process_with(py, &mut self.inner, data, parsed_times)
    }

    fn flush(&mut self, py: Python<'_>) -> PyResult<Tables> {
        flush_with(py, &mut self.inner)
    }

    /// A call without rows: time moves on by itself.
    fn tick(&mut self, py: Python<'_>) -> PyResult<Tables> {
        tick_with(py, &mut self.inner)
    }

    fn snapshot<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        snapshot_with(py, &self.inner)
    }

    /// ROWS windows have no watermark.
    #[getter]
    fn watermark(&self) -> Option<i64> {
        None
    }

    fn progress<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        // ROWS windows track no event-time progress.
        let none = tidemark_core::pipeline::Progress {
            max_event_time: i64::MIN,
            ..Default::default()
        };
        progress_dict(py, &none)
    }

    fn metrics<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let k = tidemark_core::time::KeyedWatermarkMetrics {
            total_keys: self.inner.key_count(),
            ..Default::default()
        };
        metrics_dict(py, &self.inner.metrics(), &k, None)
    }
}

/// Native timer service (see `tidemark.TimerService`). Keys are Python keys, stored
/// in the canonical key encoding and decoded back when timers fire.
#[pyclass(name = "TimerService", module = "tidemark._native")]
pub struct PyTimerService {
    inner: TimerService<Vec<u8>>,
}

/// A timer kind; anything else is a `ConfigError`, as every other setting's is.
fn domain(py: Python<'_>, kind: &str) -> PyResult<TimeDomain> {
    match kind {
        "event" => Ok(TimeDomain::EventTime),
        "processing" => Ok(TimeDomain::ProcessingTime),
        other => check(
            py,
            Err(tidemark_core::TidemarkError::config(
                "kind",
                format!("timer domain {other:?}: use \"event\" or \"processing\""),
            )),
        ),
    }
}

fn timer_list(
    py: Python<'_>,
    timers: Vec<&tidemark_core::timer::Timer<Vec<u8>>>,
) -> PyResult<Py<PyList>> {
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

    fn register(
        &mut self,
        py: Python<'_>,
        timestamp: i64,
        key: &Bound<'_, PyAny>,
        namespace: i64,
        kind: &str,
    ) -> PyResult<bool> {
        Ok(self
            .inner
            .register(domain(py, kind)?, timestamp, py_key(key)?, namespace))
    }

    fn delete(
        &mut self,
        py: Python<'_>,
        timestamp: i64,
        key: &Bound<'_, PyAny>,
        namespace: i64,
        kind: &str,
    ) -> PyResult<bool> {
        Ok(self
            .inner
            .delete(domain(py, kind)?, timestamp, py_key(key)?, namespace))
    }

    fn timers(&self, py: Python<'_>, kind: &str) -> PyResult<Py<PyList>> {
        timer_list(py, self.inner.timers(domain(py, kind)?).collect())
    }

    fn advance_watermark(&mut self, py: Python<'_>, watermark: i64) -> PyResult<Py<PyList>> {
        let fired = self.inner.advance_watermark(watermark);
        timer_list(py, fired.iter().collect())
    }

    fn advance_processing_time(&mut self, py: Python<'_>, now: i64) -> PyResult<Py<PyList>> {
        let fired = self.inner.advance_processing_time(now);
        timer_list(py, fired.iter().collect())
    }

    #[getter]
    fn watermark(&self) -> Option<i64> {
        let w = self.inner.current_watermark();
        (w != i64::MIN).then_some(w)
    }

    fn __len__(&self) -> usize {
        self.inner.len()
    }

    fn snapshot<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        let mut w = Writer::new();
        w.i64(self.inner.current_watermark());
        w.i64(self.inner.current_processing_time());
        for d in [TimeDomain::EventTime, TimeDomain::ProcessingTime] {
            let timers: Vec<_> = self.inner.timers(d).collect();
            w.len(timers.len());
            for t in timers {
                w.i64(t.timestamp);
                w.bytes(&t.key);
                w.i64(t.namespace);
            }
        }
        PyBytes::new(py, &state::seal(SnapshotKind::Timers, 0, &w.finish()))
    }

    #[staticmethod]
    fn restore(py: Python<'_>, data: &[u8]) -> PyResult<Self> {
        let payload = check(py, state::open(data, SnapshotKind::Timers, None))?;
        let mut r = Reader::new(payload);
        let mut svc = TimerService::new();
        let (w, p) = (check(py, r.i64())?, check(py, r.i64())?);
        svc.set_times(w, p);
        for d in [TimeDomain::EventTime, TimeDomain::ProcessingTime] {
            let n = check(py, r.len(24))?;
            for _ in 0..n {
                let ts = check(py, r.i64())?;
                let key = check(py, r.bytes())?.to_vec();
                decode_py_key(py, &key)?;
                let ns = check(py, r.i64())?;
                svc.register(d, ts, key, ns);
            }
        }
        check(py, r.finish())?;
        Ok(Self { inner: svc })
    }
}
