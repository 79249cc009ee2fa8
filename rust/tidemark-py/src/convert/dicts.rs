//! What the classes hand back to Python: output tables, and the progress and metrics
//! dicts (and progress read back).

use crate::error::Result;
use arrow_array::RecordBatch;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use pyo3_arrow::PyTable;
use tidemark_core::pipeline::{Agreement, Output, Progress, Top};

use crate::convert::config::get;

/// The (windows, late, errors) tables an operator call returns.
pub type Tables = (Py<PyAny>, Py<PyAny>, Py<PyAny>);

/// One batch as a `pyarrow.Table` (no copy).
pub fn batch_to_table(py: Python<'_>, b: RecordBatch) -> Result<Py<PyAny>> {
    let schema = b.schema();
    Ok(PyTable::try_new(vec![b], schema)?
        .into_pyarrow(py)?
        .unbind())
}

/// An operator's output as its three tables.
pub fn output(py: Python<'_>, o: Output) -> Result<Tables> {
    Ok((
        batch_to_table(py, o.windows)?,
        batch_to_table(py, o.late)?,
        batch_to_table(py, o.errors)?,
    ))
}

/// The progress dict of an operator (one or sharded).
pub fn progress_dict<'py>(
    py: Python<'py>,
    p: &tidemark_core::pipeline::Progress,
) -> Result<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("max_event_time", p.max_event_time())?;
    d.set_item("partition_max", p.partition_max.clone())?;
    // The keys the call moved on to: (over the stream, per source partition), each a
    // list of (event time, key hash) (see the core's `Agreement`).
    let parts: Vec<(u32, Vec<(i64, u64)>)> = p
        .keys
        .partitions
        .iter()
        .map(|(part, top)| (*part, top.0.clone()))
        .collect();
    d.set_item("keys", (p.keys.time.0.clone(), parts))?;
    d.set_item("key_global", p.key_global)?;
    d.set_item("on_time_max", p.on_time_max)?;
    d.set_item("key_parts", p.key_parts)?;
    d.set_item("ahead_floor", p.ahead_floor)?;
    Ok(d)
}

/// A progress dict (see [`progress_dict`]) read back.
pub fn progress_from_dict(d: &Bound<'_, PyDict>) -> Result<Progress> {
    type Keys = (Vec<(i64, u64)>, Vec<(u32, Vec<(i64, u64)>)>);
    let (time, parts): Keys = get(d, "keys")?;
    Ok(Progress {
        keys: Agreement {
            time: Top(time),
            partitions: parts.into_iter().map(|(p, t)| (p, Top(t))).collect(),
        },
        partition_max: get(d, "partition_max")?,
        key_global: get(d, "key_global")?,
        on_time_max: get(d, "on_time_max")?,
        key_parts: get(d, "key_parts")?,
        ahead_floor: get(d, "ahead_floor")?,
    })
}

/// The metrics dict of an operator (one or sharded).
pub fn metrics_dict<'py>(
    py: Python<'py>,
    m: &tidemark_core::pipeline::PipelineMetrics,
    k: &tidemark_core::time::KeyedWatermarkMetrics,
    watermark: Option<i64>,
) -> Result<Bound<'py, PyDict>> {
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
    if m.delay_state_bytes > 0 {
        // An adaptive delay's state (AdaptiveOutOfOrderness).
        d.set_item("delay_state_bytes", m.delay_state_bytes)?;
    }
    if m.lateness_state_bytes > 0 {
        // A lateness report's per-key records (LatenessReport).
        d.set_item("lateness_state_bytes", m.lateness_state_bytes)?;
    }
    d.set_item("watermark", watermark)?;
    Ok(d)
}

/// Seconds from microseconds (how reports give durations).
fn seconds(us: i64) -> f64 {
    us as f64 / 1e6
}

/// One key's, source partition's or the whole stream's lateness as a dict.
fn lateness_entry<'py>(
    py: Python<'py>,
    e: &tidemark_core::pipeline::LatenessEntry,
) -> Result<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("rows", e.rows())?;
    d.set_item("late_rows", e.late_rows())?;
    for (name, q) in [("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("p999", 0.999)] {
        d.set_item(
            format!("behind_{name}_s"),
            e.behind_quantile(q).map(seconds),
        )?;
    }
    d.set_item("behind_max_s", seconds(e.max_behind))?;
    d.set_item("late_by_p50_s", e.late_by_quantile(0.5).map(seconds))?;
    d.set_item("late_by_p99_s", e.late_by_quantile(0.99).map(seconds))?;
    d.set_item(
        "late_by_max_s",
        (e.late_rows() > 0).then(|| seconds(e.max_late_by)),
    )?;
    d.set_item("spark_dropped", e.spark_dropped)?;
    d.set_item("spark_kept", e.spark_kept)?;
    Ok(d)
}

/// A lateness report (`tidemark.LatenessReport`) as a dict: the stream's entry, then
/// `keys` (the top keys, each with its `key`) and `partitions` (each with its
/// `partition`).
pub fn lateness_dict<'py>(
    py: Python<'py>,
    s: &tidemark_core::pipeline::LatenessSummary,
) -> Result<Bound<'py, PyDict>> {
    let d = lateness_entry(py, &s.total)?;
    let keys = pyo3::types::PyList::empty(py);
    for (k, e) in &s.keys {
        let kd = PyDict::new(py);
        kd.set_item("key", crate::convert::keys::decode_py_key(py, k)?)?;
        kd.update(lateness_entry(py, e)?.as_mapping())?;
        keys.append(kd)?;
    }
    d.set_item("keys", keys)?;
    let parts = pyo3::types::PyList::empty(py);
    for (p, e) in &s.partitions {
        let pd = PyDict::new(py);
        pd.set_item("partition", p)?;
        pd.update(lateness_entry(py, e)?.as_mapping())?;
        parts.append(pd)?;
    }
    d.set_item("partitions", parts)?;
    Ok(d)
}
