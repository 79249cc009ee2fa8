//! A Spark micro-batch over state partitions (see
//! `tidemark_core::runtime::micro_batch`): the task's and the driver's one call, for a
//! pipeline (`StreamProcessor`) or a reorder (`ReorderStream`).

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use pyo3_arrow::input::{AnyArray, AnyRecordBatch};
use tidemark_core::pipeline::SourceView;
use tidemark_core::runtime::micro_batch::{
    summarize, summarize_reorder, MicroBatch, Placement, ReorderBatch, Report, Restore,
};

use crate::convert::arrow::{one_batch, parsed_times as parsed_times_of, read_batches};
use crate::convert::config::{config_from_dict, lookup_of, LookupArgs};
use crate::convert::dicts::{output, Tables};
use crate::error::{detach, Result};

/// What the driver knew of the source's partitions: every partition, and those with
/// records waiting unread (see the core's `SourceView`).
type SourceArgs = (Vec<u32>, Vec<u32>);

fn source_view((partitions, waiting): SourceArgs) -> SourceView {
    SourceView {
        partitions,
        waiting,
    }
}

/// One state partition's result: its partition, outputs, snapshot and report bytes.
type PartitionOut = (u32, Tables, Py<PyBytes>, Py<PyBytes>);

/// Whether `config` is a reorder's (`tidemark.Reorder`'s dict) rather than a pipeline's.
fn is_reorder(config: &Bound<'_, PyDict>) -> Result<bool> {
    Ok(match config.get_item("operator")? {
        Some(v) => v.extract::<String>()? == "reorder",
        None => false,
    })
}

/// What the batch runs over its state partitions.
enum Batch {
    Pipeline(Box<MicroBatch>),
    Reorder(ReorderBatch),
}

/// One micro-batch over state partitions (see the core's `MicroBatch` and
/// `ReorderBatch`): of a pipeline, or of a reorder (a config with `operator:
/// "reorder"`); built with the batch's driver record, run once per task.
#[pyclass(name = "MicroBatch", module = "tidemark._native", frozen)]
pub struct PyMicroBatch {
    inner: Batch,
}

#[pymethods]
impl PyMicroBatch {
    #[new]
    #[pyo3(signature = (
        config, partitions, *, tag_column = None, watermark = None, time = None,
        clock_ms = 0, wall_clock = false, quartiles = None, scope = None, source = None, flush = false,
        settle = false, threads = 1, weight = None, lookup = None, run = String::new(),
        keys = Vec::new()
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        config: &Bound<'_, PyDict>,
        partitions: u32,
        tag_column: Option<String>,
        watermark: Option<i64>,
        time: Option<i64>,
        clock_ms: i64,
        wall_clock: bool,
        quartiles: Option<(i64, i64)>,
        scope: Option<Vec<u8>>,
        source: Option<SourceArgs>,
        flush: bool,
        settle: bool,
        threads: usize,
        weight: Option<String>,
        lookup: Option<LookupArgs>,
        run: String,
        keys: Vec<String>,
    ) -> Result<Self> {
        let placement = tag_column.map_or(Placement::Route, Placement::Tagged);
        if is_reorder(config)? {
            return Ok(Self {
                inner: Batch::Reorder(ReorderBatch {
                    cfg: crate::reorder::config(config)?,
                    keys,
                    partitions,
                    placement,
                    flush,
                    threads,
                    run,
                }),
            });
        }
        if !keys.is_empty() {
            return Err(tidemark_core::TidemarkError::config(
                "keys",
                "a pipeline routes its rows by its own keys",
            )
            .into());
        }
        let lookup = lookup_of(py, lookup)?;
        Ok(Self {
            inner: Batch::Pipeline(Box::new(MicroBatch {
                cfg: config_from_dict(config)?,
                partitions,
                placement,
                watermark,
                time,
                clock_ms,
                wall_clock,
                quartiles,
                scope,
                source: source.map(source_view),
                flush,
                settle,
                threads,
                weight,
                lookup,
                run,
            })),
        })
    }

    /// Runs the batch over the state partitions `held` (`(partition, snapshot or
    /// None, its name in errors)`) on `data`: `[(partition, (windows, late, errors),
    /// snapshot, report)]` in `held`'s order.
    #[pyo3(signature = (data, held, parsed_times = None))]
    fn run(
        &self,
        py: Python<'_>,
        data: AnyRecordBatch,
        held: Vec<(u32, Option<Vec<u8>>, String)>,
        parsed_times: Option<AnyArray>,
    ) -> Result<Vec<PartitionOut>> {
        let (schema, batches) = read_batches(data)?;
        let parsed = parsed_times_of(parsed_times)?;
        let held = held
            .into_iter()
            .map(|(partition, snapshot, name)| Restore {
                partition,
                snapshot,
                name,
            })
            .collect();
        let inner = &self.inner;
        let results = detach(py, move || {
            let batch = one_batch(schema, batches)?;
            let (got, fingerprint, lateness) = match inner {
                Batch::Pipeline(mb) => (
                    mb.run(&batch, parsed.as_ref(), held)?,
                    mb.cfg.fingerprint(),
                    mb.cfg.lateness.is_some(),
                ),
                Batch::Reorder(rb) => (
                    rb.run(&batch, parsed.as_ref(), held)?,
                    rb.fingerprint(),
                    false,
                ),
            };
            Ok(got
                .into_iter()
                .map(|r| {
                    let report = r.report.seal(fingerprint, lateness);
                    (r.partition, r.output, r.snapshot, report)
                })
                .collect::<Vec<_>>())
        })?;
        results
            .into_iter()
            .map(|(p, out, snap, report)| {
                Ok((
                    p,
                    output(py, out)?,
                    PyBytes::new(py, &snap).unbind(),
                    PyBytes::new(py, &report).unbind(),
                ))
            })
            .collect()
    }
}

/// Per state partition of `n`: the int tag of its rows and of its placeholder row,
/// which Spark's `repartition(n, tag)` sends to that partition.
#[pyfunction]
pub fn spark_tags(n: u32) -> (Vec<i32>, Vec<i32>) {
    tidemark_core::route::spark_tags(n)
}

/// The driver's view of a micro-batch from every state partition's report bytes:
/// `None` when one is another run's; else a dict with the next `watermark`, the
/// `scope` state and `time` after the batch, the row counts summed, and `settled`
/// (a quiet batch: the most calls made, and whether the last changed nothing). Of a
/// reorder: the stream's `watermark`, `input_rows`, `released_rows`, `late_rows`,
/// `error_rows`, `buffered_rows` and `buffer_bytes`.
#[pyfunction]
#[pyo3(signature = (config, reports, run, scope, clock_ms, source = None))]
pub fn summarize_batch<'py>(
    py: Python<'py>,
    config: &Bound<'_, PyDict>,
    reports: Vec<Vec<u8>>,
    run: &str,
    scope: Option<Vec<u8>>,
    clock_ms: i64,
    source: Option<SourceArgs>,
) -> Result<Option<Bound<'py, PyDict>>> {
    if is_reorder(config)? {
        return summarize_reorder_batch(py, config, reports, run);
    }
    let cfg = config_from_dict(config)?;
    let reports = reports
        .iter()
        .map(|b| Report::from_bytes(&cfg, b))
        .collect::<tidemark_core::Result<Vec<_>>>()?;
    let Some(s) = summarize(
        &cfg,
        scope.as_deref(),
        clock_ms,
        source.map(source_view).as_ref(),
        run,
        &reports,
    )?
    else {
        return Ok(None);
    };
    let d = PyDict::new(py);
    d.set_item("watermark", s.watermark)?;
    d.set_item("scope", PyBytes::new(py, &s.scope))?;
    d.set_item("time", s.time)?;
    let c = s.counts;
    for (k, v) in [
        ("input_rows", c.input_rows),
        ("read_rows", c.read_rows),
        ("window_rows", c.window_rows),
        ("late_rows", c.late_rows),
        ("error_rows", c.error_rows),
    ] {
        d.set_item(k, v)?;
    }
    d.set_item("settled", s.settled)?;
    if let Some(l) = &s.lateness {
        d.set_item("lateness", crate::convert::dicts::lateness_dict(py, l)?)?;
    }
    Ok(Some(d))
}

fn summarize_reorder_batch<'py>(
    py: Python<'py>,
    config: &Bound<'_, PyDict>,
    reports: Vec<Vec<u8>>,
    run: &str,
) -> Result<Option<Bound<'py, PyDict>>> {
    let fingerprint = crate::reorder::config(config)?.fingerprint();
    let reports = reports
        .iter()
        .map(|b| Report::open(fingerprint, false, b))
        .collect::<tidemark_core::Result<Vec<_>>>()?;
    let Some(s) = summarize_reorder(run, &reports) else {
        return Ok(None);
    };
    let d = PyDict::new(py);
    let (c, b) = (s.counts, s.buffer);
    d.set_item("watermark", b.watermark)?;
    for (k, v) in [
        ("input_rows", c.input_rows),
        ("released_rows", c.window_rows),
        ("late_rows", c.late_rows),
        ("error_rows", c.error_rows),
        ("buffered_rows", b.rows),
        ("buffer_bytes", b.bytes),
    ] {
        d.set_item(k, v)?;
    }
    Ok(Some(d))
}
