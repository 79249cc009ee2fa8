//! The worker threads: one operator each, fed through a bounded queue.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Barrier, OnceLock};
use std::thread::JoinHandle;

use arrow_array::{Int64Array, RecordBatch, UInt32Array};

use super::merge::{with_merge_keys, MergeKeys};
use super::metrics::LatencyHistogram;
use super::{shard_rows, stopwatch};
use crate::error::{Result, TidemarkError};
use crate::pipeline::{External, LatenessSummary, Operator, Output, PipelineMetrics, Progress};
use crate::route::{group_rows, Router, RowGroups};
use crate::time::KeyedWatermarkMetrics;

pub(super) enum Job {
    Ingest {
        /// The whole input batch; the worker takes its rows (in parallel with the
        /// other workers).
        batch: RecordBatch,
        parsed: Option<Int64Array>,
        /// This shard's rows.
        rows: ShardRows,
        /// The coordinator's values for the call: the combined watermark, the scope's
        /// event time, the wall clock, the first call's bounds.
        external: Box<External>,
    },
    Complete {
        close: Option<i64>,
    },
    Flush,
    Snapshot,
    Metrics,
    /// Pin the worker thread to this CPU core.
    Pin(core_affinity::CoreId),
}

/// How a batch's rows reach the workers (each worker takes its own shard's).
#[derive(Clone)]
pub(super) enum ShardRows {
    /// All of them (one core).
    All,
    /// Grouped by shard by the coordinator.
    Grouped(Arc<RowGroups>),
    /// Routed by the workers themselves.
    Split(Arc<SplitWork>),
}

/// A batch that the workers route themselves, so that no thread makes a serial
/// pass over its rows: worker `s` computes the partition ids of the `s`-th of `n`
/// equal slices of the batch and groups them; once every slice is done (a
/// barrier), each worker gathers its own rows from all slices, in input order.
pub(super) struct SplitWork {
    pub(super) router: Arc<Router>,
    pub(super) rows: usize,
    /// Slice `c`'s rows grouped by shard (row numbers inside the slice), or why
    /// routing the slice failed.
    pub(super) slices: Vec<OnceLock<std::result::Result<RowGroups, String>>>,
    pub(super) barrier: Barrier,
}

impl SplitWork {
    pub(super) fn new(router: Arc<Router>, rows: usize, n: usize) -> Self {
        SplitWork {
            router,
            rows,
            slices: (0..n).map(|_| OnceLock::new()).collect(),
            barrier: Barrier::new(n),
        }
    }

    fn bounds(&self, c: usize) -> (usize, usize) {
        let n = self.slices.len();
        (c * self.rows / n, (c + 1) * self.rows / n)
    }

    /// Shard `s`'s input rows (ascending). Every worker of the batch must call
    /// this (the barrier waits for all of them); it never returns before they have.
    pub(super) fn rows_of(&self, batch: &RecordBatch, s: usize) -> Result<Vec<u32>> {
        let n = self.slices.len();
        let (lo, hi) = self.bounds(s);
        let mine = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.router
                .slice_partition_ids(batch, lo, hi - lo)
                .map(|ids| group_rows(&ids, n))
                .map_err(|e| e.to_string())
        }))
        .unwrap_or_else(|_| Err("routing a slice of the batch panicked".to_string()));
        let _ = self.slices[s].set(mine);
        self.barrier.wait();
        let mut rows = Vec::new();
        for (c, slot) in self.slices.iter().enumerate() {
            match slot.get() {
                Some(Ok(g)) => {
                    let base = self.bounds(c).0 as u32;
                    rows.extend(
                        g.rows[g.offsets[s]..g.offsets[s + 1]]
                            .iter()
                            .map(|&r| r + base),
                    );
                }
                Some(Err(e)) => {
                    return Err(TidemarkError::config(
                        "runtime",
                        format!("routing rows: {e}"),
                    ))
                }
                None => unreachable!("every slice is routed before the barrier"),
            }
        }
        Ok(rows)
    }
}

/// What a worker reports after ingesting its rows.
pub(crate) struct Ingested {
    pub(super) progress: Progress,
    /// Late and error rows (row numbers in the shard's rows).
    pub(super) late: Vec<u32>,
    pub(super) errors: Vec<u32>,
    /// The shard's input row numbers (`None`: all rows, in order).
    pub(super) rows: Option<UInt32Array>,
}

pub(super) enum Reply {
    Ingested(Result<Ingested>),
    /// Output, and (several cores) the merge keys of its window rows.
    Done(Result<(Output, MergeKeys)>),
    Snapshot(Vec<u8>),
    Pinned(bool),
    Metrics(
        Box<(
            PipelineMetrics,
            KeyedWatermarkMetrics,
            Option<LatenessSummary>,
        )>,
    ),
}

/// Counters a worker shares with the coordinator (atomics: read without a lock).
#[derive(Debug, Default)]
pub(super) struct Shared {
    pub(super) records: AtomicU64,
    pub(super) busy_ns: AtomicU64,
    pub(super) queue_depth: AtomicUsize,
    pub(super) backpressure_events: AtomicU64,
    pub(super) latency: LatencyHistogram,
}

pub(super) struct Worker {
    pub(super) tx: Option<SyncSender<Job>>,
    pub(super) rx: Receiver<Reply>,
    pub(super) handle: Option<JoinHandle<()>>,
    pub(super) shared: Arc<Shared>,
}

impl Worker {
    pub(super) fn spawn(
        index: usize,
        mut op: Operator,
        capacity: usize,
        merge: bool,
    ) -> Result<Self> {
        let (tx, jobs) = sync_channel::<Job>(capacity);
        let (reply_tx, rx) = sync_channel::<Reply>(1);
        let shared = Arc::new(Shared::default());
        let sh = shared.clone();
        let handle = std::thread::Builder::new()
            .name(format!("tidemark-core-{index}"))
            .spawn(move || {
                let mut pending = None;
                let mut started = None;
                while let Ok(job) = jobs.recv() {
                    sh.queue_depth.fetch_sub(1, Ordering::Relaxed);
                    let t0 = stopwatch();
                    let reply = match job {
                        Job::Ingest {
                            batch,
                            parsed,
                            rows,
                            external,
                        } => {
                            started = Some(t0);
                            op.set_external(*external);
                            let r =
                                shard_rows(batch, parsed, rows, index).and_then(|(b, p, rows)| {
                                    sh.records.fetch_add(b.num_rows() as u64, Ordering::Relaxed);
                                    op.ingest(&b, p.as_ref()).map(|i| (i, rows))
                                });
                            Reply::Ingested(r.map(|(p, rows)| {
                                let ingested = Ingested {
                                    progress: op.progress().clone(),
                                    late: p.late_rows().to_vec(),
                                    errors: p.error_rows(),
                                    rows,
                                };
                                pending = Some(p);
                                ingested
                            }))
                        }
                        Job::Complete { close } => {
                            let out = match pending.take() {
                                Some(p) => op.complete(p, close),
                                None => Err(TidemarkError::config(
                                    "runtime",
                                    "complete without ingest (internal error)",
                                )),
                            };
                            if let Some(s) = started.take() {
                                sh.latency.record(s.elapsed().as_micros() as u64);
                            }
                            Reply::Done(with_merge_keys(out, merge, op.config()))
                        }
                        Job::Pin(id) => Reply::Pinned(core_affinity::set_for_current(id)),
                        Job::Flush => Reply::Done(with_merge_keys(op.flush(), merge, op.config())),
                        Job::Snapshot => Reply::Snapshot(op.snapshot()),
                        Job::Metrics => {
                            let k = op.key_metrics().clone();
                            Reply::Metrics(Box::new((op.metrics(), k, op.lateness())))
                        }
                    };
                    sh.busy_ns
                        .fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
                    if reply_tx.send(reply).is_err() {
                        break;
                    }
                }
            })
            .map_err(|e| {
                TidemarkError::config("cores", format!("cannot start a worker thread: {e}"))
            })?;
        Ok(Worker {
            tx: Some(tx),
            rx,
            handle: Some(handle),
            shared,
        })
    }

    /// Enqueues a job; a full queue blocks (and counts a backpressure event).
    pub(super) fn send(&self, job: Job) -> Result<()> {
        let tx = self.tx.as_ref().expect("worker running");
        self.shared.queue_depth.fetch_add(1, Ordering::Relaxed);
        let gone = Self::gone;
        match tx.try_send(job) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(job)) => {
                self.shared
                    .backpressure_events
                    .fetch_add(1, Ordering::Relaxed);
                tx.send(job).map_err(|_| gone())
            }
            Err(TrySendError::Disconnected(_)) => Err(gone()),
        }
    }

    pub(super) fn recv(&self) -> Result<Reply> {
        self.rx.recv().map_err(|_| Self::gone())
    }

    /// Whether the worker thread has stopped (it panicked).
    pub(super) fn stopped(&self) -> bool {
        self.handle.as_ref().is_none_or(JoinHandle::is_finished)
    }

    pub(super) fn gone() -> TidemarkError {
        TidemarkError::config("runtime", "a worker thread stopped (it panicked)")
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.tx.take();
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}
