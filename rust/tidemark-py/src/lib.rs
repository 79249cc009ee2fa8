//! `tidemark._native`: thin PyO3 bindings over `tidemark-core`.
//!
//! Every method has the same shape: extract arguments, run the core (with the GIL
//! released where the work is more than a few nanoseconds), map the error through
//! [`error`]. Arrow data crosses through the PyCapsule interface without copies.
//! The module starts no threads at import: Spark forks Python workers.

/// A `dict` of `$v`'s fields, each under its own name: `fields_dict!(py, m; a, b)` in a
/// function that returns the binding's `Result`.
macro_rules! fields_dict {
    ($py:expr, $v:expr; $($f:ident),+ $(,)?) => {{
        let d = pyo3::types::PyDict::new($py);
        $(d.set_item(stringify!($f), $v.$f)?;)+
        d
    }};
}

// Leaves: errors, clocks, conversions, and what every operator class does alike.
mod clock;
mod convert;
mod drive;
mod error;
// Classes and functions: each depends only on the leaves.
mod keyed;
mod micro_batch;
mod parse;
mod partitioned;
mod pipeline;
mod reorder;
mod route;
mod runtime;
mod timer;

use pyo3::prelude::*;

/// Rust's allocations in this module (operator state, output columns) come from
/// mimalloc, which keeps freed pages for reuse. The system allocator returns large
/// blocks to the OS when they are freed, so every operator (every Spark task) faults
/// its pages in again: about 25K page faults per 500K-row task, a quarter of its
/// time. Python's and pyarrow's own allocations are not affected (mimalloc does not
/// replace `malloc`), and it starts no threads.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    // The longest key (in the core's key encoding) a pipeline or tracker accepts.
    m.add("MAX_KEY_BYTES", tidemark_core::key::MAX_KEY_BYTES)?;
    // A key value's size in that encoding: at most this for fixed-width types, and
    // this much beyond its bytes for strings and binaries.
    m.add(
        "MAX_FIXED_VALUE_BYTES",
        tidemark_core::key::MAX_FIXED_VALUE_BYTES,
    )?;
    m.add(
        "VARIABLE_VALUE_OVERHEAD",
        tidemark_core::key::VARIABLE_VALUE_OVERHEAD,
    )?;
    // Source partition ids a pipeline takes: 0 to SOURCE_PARTITIONS - 1.
    m.add(
        "SOURCE_PARTITIONS",
        tidemark_core::pipeline::SOURCE_PARTITIONS,
    )?;
    // Event times (epoch microseconds) within -SAFE_EVENT_TIME..=SAFE_EVENT_TIME get
    // their windows under any window within SAFE_WINDOW (sizes, slides, offsets, gaps).
    m.add("SAFE_EVENT_TIME", tidemark_core::window::SAFE_EVENT_TIME)?;
    m.add("SAFE_WINDOW", tidemark_core::window::SAFE_WINDOW)?;
    m.add(
        "SETTLE_CALLS",
        tidemark_core::runtime::micro_batch::SETTLE_CALLS,
    )?;
    // Microseconds per unit of the epoch event-time types that multiply.
    m.add(
        "EPOCH_UNIT_MICROS",
        tidemark_core::time::epoch_unit_micros()
            .into_iter()
            .collect::<std::collections::HashMap<_, _>>(),
    )?;
    m.add_class::<clock::PySystemClock>()?;
    m.add_class::<clock::PyManualClock>()?;
    m.add_class::<partitioned::PyPartitionedWatermarkTracker>()?;
    m.add_class::<keyed::PyKeyedWatermarkTracker>()?;
    m.add_class::<keyed::PyCompactKeyedWatermarkTracker>()?;
    m.add_class::<pipeline::PyOperator>()?;
    m.add_class::<pipeline::PyScopeWatermark>()?;
    m.add_class::<timer::PyTimerService>()?;
    m.add_class::<pipeline::PyRowsOperator>()?;
    m.add_class::<route::PyRouter>()?;
    m.add_class::<reorder::PyReorderOperator>()?;
    m.add_class::<runtime::PyShardedOperator>()?;
    m.add_class::<micro_batch::PyMicroBatch>()?;
    m.add_function(wrap_pyfunction!(micro_batch::spark_tags, m)?)?;
    m.add_function(wrap_pyfunction!(micro_batch::summarize_batch, m)?)?;
    m.add_function(wrap_pyfunction!(runtime::reshard_snapshots, m)?)?;
    m.add_function(wrap_pyfunction!(pipeline::validate_pipeline, m)?)?;
    m.add_function(wrap_pyfunction!(pipeline::pipeline_output_schema, m)?)?;
    m.add_function(wrap_pyfunction!(pipeline::pipeline_input_columns, m)?)?;
    m.add_function(wrap_pyfunction!(pipeline::lookup_schema, m)?)?;
    m.add_function(wrap_pyfunction!(route::spark_hashable, m)?)?;
    m.add_function(wrap_pyfunction!(parse::builtin_event_time_types, m)?)?;
    m.add_function(wrap_pyfunction!(parse::parse_duration, m)?)?;
    m.add_function(wrap_pyfunction!(parse::parse_event_time, m)?)?;
    m.add_function(wrap_pyfunction!(parse::check_event_time_type, m)?)?;
    m.add_function(wrap_pyfunction!(parse::check_name, m)?)?;
    Ok(())
}
