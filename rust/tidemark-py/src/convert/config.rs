//! The pipeline configuration dict `tidemark.Pipeline` prepares, read into the core
//! configuration, and the other settings classes take from Python.

use std::str::FromStr;

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use pyo3_arrow::input::AnyRecordBatch;
use tidemark_core::agg::{AggKind, AggSpec};
use tidemark_core::pipeline::{
    AdaptiveDelay, EmitMode, LatePolicy, LatenessReport, PipelineConfig, Scope, TimeMode,
};
use tidemark_core::window::WindowSpec;
use tidemark_core::TidemarkError;

use crate::clock::clock_ref;
use crate::convert::arrow::{one_batch, read_batches};
use crate::error::{detach, Result};
use tidemark_core::clock::ClockRef;

/// The value of `k` in the dict (a `TypeError` if it is missing or of the wrong type).
pub fn get<'py, T>(d: &Bound<'py, PyDict>, k: &str) -> Result<T>
where
    T: for<'a> FromPyObject<'a, 'py, Error = PyErr>,
{
    match d.get_item(k)? {
        Some(v) => v
            .extract::<T>()
            .map_err(|e| PyTypeError::new_err(format!("pipeline config {k:?}: {e}")).into()),
        None => Err(PyTypeError::new_err(format!("pipeline config is missing {k:?}")).into()),
    }
}

/// Builds the core configuration from the dict `tidemark.Pipeline` prepares.
pub fn config_from_dict(d: &Bound<'_, PyDict>) -> Result<PipelineConfig> {
    let scope: String = get(d, "scope")?;
    let column = match scope.as_str() {
        "partition" => Some(get(d, "partition_column")?),
        _ => None,
    };
    let scope = Scope::from_name(&scope, column)?;
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
            return Err(
                TidemarkError::config("window", format!("unknown window kind {other:?}")).into(),
            )
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
            kind: kind?,
            column,
            by,
        });
    }
    let emit: EmitMode = named(d, "emit")?;
    let late: LatePolicy = named(d, "late")?;
    let time: TimeMode = named(d, "time")?;
    let cfg = PipelineConfig {
        keys: get(d, "keys")?,
        event_time: get(d, "event_time")?,
        event_time_type: get(d, "event_time_type")?,
        parsed_externally: get(d, "parsed_externally")?,
        delay: get(d, "delay")?,
        scope,
        idle_timeout: get(d, "idle_timeout_ms")?,
        idleness: named(d, "idleness")?,
        max_ahead: get(d, "max_ahead")?,
        max_behind: get(d, "max_behind")?,
        quorum: get(d, "quorum")?,
        null_keys: named(d, "null_keys")?,
        source_partitions: get(d, "source_partitions")?,
        window,
        aggs,
        emit,
        allowed_lateness: get(d, "allowed_lateness")?,
        late,
        late_rule: named(d, "late_rule")?,
        max_keys: get(d, "max_keys")?,
        eviction: named(d, "eviction")?,
        time,
        state_ttl: get(d, "state_ttl_ms")?,
        // (quantile in parts per billion, min delay, horizon, min rows); absent: a
        // fixed delay.
        adaptive: match d.get_item("adaptive")? {
            Some(v) if !v.is_none() => {
                let (quantile_ppb, min_delay, horizon, min_rows) = get(d, "adaptive")?;
                Some(AdaptiveDelay {
                    quantile_ppb,
                    min_delay,
                    horizon,
                    min_rows,
                })
            }
            _ => None,
        },
        // (top keys, Spark's delay or None); absent: no lateness report.
        lateness: match d.get_item("lateness")? {
            Some(v) if !v.is_none() => {
                let (top, spark_delay) = get(d, "lateness")?;
                Some(LatenessReport { top, spark_delay })
            }
            _ => None,
        },
    };
    cfg.validate()?;
    Ok(cfg)
}

/// A core object of the pipeline `config` reading `clock`: `new` for a fresh one,
/// `restore` from snapshot bytes (`state`).
pub fn built<T>(
    config: &Bound<'_, PyDict>,
    clock: Option<&Bound<'_, PyAny>>,
    state: Option<&[u8]>,
    new: impl FnOnce(PipelineConfig, ClockRef) -> tidemark_core::Result<T>,
    restore: impl FnOnce(PipelineConfig, ClockRef, &[u8]) -> tidemark_core::Result<T>,
) -> Result<T> {
    let (cfg, clock) = (config_from_dict(config)?, clock_ref(clock)?);
    Ok(match state {
        None => new(cfg, clock)?,
        Some(bytes) => restore(cfg, clock, bytes)?,
    })
}

/// A lookup table as `Pipeline.enrich` keeps it: the table, `on`, `how`, `prefix`.
pub type LookupArgs = (AnyRecordBatch, Vec<String>, String, Option<String>);

/// The core's lookup from `Pipeline.enrich`'s arguments (`None`: no lookup).
pub fn lookup_of(
    py: Python<'_>,
    args: Option<LookupArgs>,
) -> Result<Option<std::sync::Arc<tidemark_core::pipeline::lookup::Lookup>>> {
    args.map(|(table, on, how, prefix)| lookup_from(py, table, on, &how, prefix))
        .transpose()
}

/// Builds a lookup from Arrow data (the table's buffers are shared, not copied).
pub fn lookup_from(
    py: Python<'_>,
    table: AnyRecordBatch,
    on: Vec<String>,
    how: &str,
    prefix: Option<String>,
) -> Result<std::sync::Arc<tidemark_core::pipeline::lookup::Lookup>> {
    use tidemark_core::pipeline::lookup::{JoinHow, Lookup};
    let (schema, batches) = read_batches(table)?;
    let how = how.parse::<JoinHow>()?;
    detach(py, move || {
        let batch = one_batch(schema, batches)?;
        Lookup::new(&batch, &on, how, prefix.as_deref())
    })
}

/// A named setting from the dict: an enum's name, parsed by the core's `FromStr`.
pub fn named<T: FromStr<Err = TidemarkError>>(d: &Bound<'_, PyDict>, key: &str) -> Result<T> {
    Ok(get::<String>(d, key)?.parse()?)
}
