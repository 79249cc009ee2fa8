//! # tidemark-core
//!
//! The event-time engine behind tidemark, in pure Rust (no Python types anywhere).
//!
//! * [`time`]: watermarks per source partition with idle detection, per key, per core
//!   and per pipeline scope, and event-time column parsing to epoch microseconds.
//! * [`pipeline`]: the windowed event-time GROUP BY operator (late rules, closing,
//!   output order, snapshots, resharding, ROWS windows, lookups).
//! * [`window`]: tumbling, sliding and session window assignment.
//! * [`agg`]: the aggregates, their mergeable states and exact sums.
//! * [`key`]: one key encoding for Python values and Arrow columns; key interning.
//! * [`route`]: hash (xxh3 or Spark-exact), round-robin, single and broadcast routing
//!   of Arrow batches to shards.
//! * [`runtime`]: a pipeline operator sharded by key over worker threads.
//! * [`reorder`]: releases out-of-order input in event-time order behind a watermark.
//! * [`timer`]: the timer service (event and processing time).
//! * [`state`]: the versioned snapshot envelope and its reader and writer.
//! * [`duration`]: duration strings (Spark's interval forms included).
//! * [`clock`]: the injected clocks every time-dependent decision reads.
//! * [`error`]: the crate's one error enum.
//!
//! Semantics follow one convention everywhere (see `DESIGN.md`): a watermark `W`
//! asserts that no more events with `ts < W` are expected; combined watermarks are the
//! minimum over active inputs, idle inputs excluded, the maximum when all are idle,
//! and never move backwards.

pub mod agg;
pub(crate) mod batch;
pub mod clock;
pub mod duration;
pub mod error;
pub mod key;
mod names;
pub mod pipeline;
pub mod reorder;
pub mod route;
pub mod runtime;
pub mod state;
pub mod time;
pub mod timer;
pub mod window;

pub use error::{Result, TidemarkError};

/// Rows a per-batch scratch buffer may keep between batches; a larger one is freed.
pub(crate) const SCRATCH_ROWS: usize = 1 << 20;

/// Puts a per-batch scratch buffer back for the next batch, unless one huge batch made
/// it larger than [`SCRATCH_ROWS`] (then it is freed, not held for good).
#[inline]
pub(crate) fn keep_scratch<T>(slot: &mut Vec<T>, buf: Vec<T>) {
    if buf.capacity() <= SCRATCH_ROWS {
        *slot = buf;
    }
}

/// [`prefetch`] of `values[i]`, if there is one.
#[inline(always)]
pub(crate) fn prefetch_at<T>(values: &[T], i: usize) {
    if let Some(v) = values.get(i) {
        prefetch(v);
    }
}

/// [`prefetch_at`] of every cache line `values[i]` spans (a value may straddle two).
#[inline(always)]
pub(crate) fn prefetch_whole_at<T>(values: &[T], i: usize) {
    if let Some(v) = values.get(i) {
        let first = (v as *const T).cast::<u8>();
        prefetch_ptr(first);
        // The value's last byte (same object: no reference is made to it).
        prefetch_ptr(first.wrapping_add(std::mem::size_of::<T>().saturating_sub(1)));
    }
}

/// Asks the CPU to bring `value` into cache ahead of its use (a hint; no effect on
/// targets other than x86-64).
#[inline(always)]
pub(crate) fn prefetch<T>(value: &T) {
    prefetch_ptr((value as *const T).cast::<u8>());
}

/// [`prefetch`] of the cache line holding address `p`.
#[inline(always)]
fn prefetch_ptr(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    #[allow(unsafe_code, unused_unsafe)]
    // SAFETY: a prefetch is only a hint to the cache: it never faults (whatever the
    // address) and reads nothing the program observes.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast::<i8>())
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}
