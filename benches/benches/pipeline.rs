//! Pipeline and timer benchmarks (issue: timers, windows and the Pipeline operator).
//!
//! Run: `cargo bench -p tidemark-benches --bench pipeline` (or `make bench`).
//!
//! | group | goal |
//! |---|---|
//! | `timer/register_then_fire` | < 100 ns per timer (register + fire) |
//! | `pipeline/tumbling_count_sum_10k_keys` (64K-row batches, per-key watermarks) | >= 10M events/s |
//! | `pipeline/session_30s_10k_keys` | >= 5M events/s |
//! | `pipeline/one_unit_500k_rows_10s_windows_of_2500_keys` | one arrival unit, ~384K windows at its flush; `_unordered`: as a `tidemark.spark.aggregate` task runs it |
//! | `state/{snapshot,restore}_100k_keys`, `state/micro_batch_10k_rows_on_100k_keys` | a streaming state partition's work per micro-batch: restore, process, snapshot |
//! | `runtime/tumbling_10k_keys/cores=N` | scaling 1 -> 2 cores >= 90% |
//! | `runtime/skewed_half_one_key/*` | hot-key spreading vs plain hash routing (global watermark) |
//!
//! The Python-level figures (same workload through `tidemark.Pipeline`, compared with
//! polars `group_by` in the same run) come from `benches/pipeline_vs_polars.py`.

// The allocator the Python module ships with (see rust/tidemark-py/src/lib.rs).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::hint::black_box;
use std::sync::Arc;

use arrow_array::{ArrayRef, Float64Array, Int64Array, RecordBatch, TimestampMicrosecondArray};
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use tidemark_core::agg::{AggKind, AggSpec};
use tidemark_core::clock::ManualClock;
use tidemark_core::pipeline::{LatePolicy, Operator, PipelineConfig, Scope};
use tidemark_core::runtime::ShardedOperator;
use tidemark_core::timer::{TimeDomain, TimerService};
use tidemark_core::window::WindowSpec;

/// Rows per batch: 64K, or `TIDEMARK_BENCH_ROWS` (e.g. larger batches for the
/// scaling runs on a many-core machine, where 64K rows give each core little work).
fn rows() -> usize {
    std::env::var("TIDEMARK_BENCH_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(65_536)
}
const KEYS: u64 = 10_000;

/// A xorshift generator: cheap deterministic data.
fn xorshift(mut x: u64) -> impl FnMut() -> u64 {
    move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    }
}

/// A batch of the benches' schema: key `k`, event time `ts` (UTC), value `v`.
fn kv_batch(keys: Vec<i64>, ts: Vec<i64>, v: Vec<f64>) -> RecordBatch {
    RecordBatch::try_from_iter(vec![
        ("k", Arc::new(Int64Array::from(keys)) as ArrayRef),
        (
            "ts",
            Arc::new(TimestampMicrosecondArray::from(ts).with_timezone("UTC")) as ArrayRef,
        ),
        ("v", Arc::new(Float64Array::from(v)) as ArrayRef),
    ])
    .unwrap()
}

fn batches(n: usize) -> Vec<RecordBatch> {
    let mut rnd = xorshift(0x2545_F491_4F6C_DD1D);
    let rows = rows();
    (0..n)
        .map(|i| {
            let keys: Vec<i64> = (0..rows).map(|_| (rnd() % KEYS) as i64).collect();
            let mut ts: Vec<i64> = (0..rows)
                .map(|_| (rnd() % 10_000_000) as i64 + i as i64 * 10_000_000)
                .collect();
            ts.sort_unstable();
            let v: Vec<f64> = (0..rows).map(|_| (rnd() % 1000) as f64 / 7.0).collect();
            kv_batch(keys, ts, v)
        })
        .collect()
}

fn config(window: WindowSpec) -> PipelineConfig {
    let aggs = vec![
        AggSpec::new("n", AggKind::Count, None),
        AggSpec::new("s", AggKind::Sum, Some("v")),
    ];
    PipelineConfig {
        delay: 5_000_000,
        scope: Scope::Key,
        late: LatePolicy::Drop,
        ..PipelineConfig::new(&["k"], "ts", window, aggs)
    }
}

fn bench_pipeline(c: &mut Criterion) {
    let data = batches(8);
    let mut g = c.benchmark_group("pipeline");
    g.throughput(Throughput::Elements(
        data.iter().map(|b| b.num_rows() as u64).sum(),
    ));
    g.sample_size(10);
    for (name, window) in [
        (
            "tumbling_count_sum_10k_keys",
            WindowSpec::Tumbling {
                size: 10_000_000,
                offset: 0,
            },
        ),
        (
            "session_30s_10k_keys",
            WindowSpec::Session { gap: 30_000_000 },
        ),
    ] {
        g.bench_function(name, |b| {
            b.iter_batched(
                || Operator::new(config(window), Arc::new(ManualClock::new(0))).unwrap(),
                |mut op| {
                    for batch in &data {
                        black_box(op.process(batch, None).unwrap());
                    }
                    black_box(op.flush().unwrap())
                },
                BatchSize::LargeInput,
            )
        });
    }
    // One Spark task of `tidemark.spark.aggregate`: its partition is one arrival unit
    // (500K rows, 2,500 keys, an hour of event time in random order), then the flush
    // closes every window (about 384K, most with one or two rows).
    let unit = one_unit(500_000, 2_500);
    g.throughput(Throughput::Elements(unit.num_rows() as u64));
    // Sorted output (the Python API's default), and in closing order as the Spark
    // tasks run it (`ordered=False`).
    for (name, sorted) in [
        ("one_unit_500k_rows_10s_windows_of_2500_keys", true),
        (
            "one_unit_500k_rows_10s_windows_of_2500_keys_unordered",
            false,
        ),
    ] {
        g.bench_function(name, |b| {
            b.iter_batched(
                || {
                    let window = WindowSpec::Tumbling {
                        size: 10_000_000,
                        offset: 0,
                    };
                    let mut op =
                        Operator::new(config(window), Arc::new(ManualClock::new(0))).unwrap();
                    op.set_sorted_output(sorted);
                    op
                },
                |mut op| {
                    black_box(op.process(&unit, None).unwrap());
                    black_box(op.flush().unwrap())
                },
                BatchSize::LargeInput,
            )
        });
    }
    g.finish();
}

/// `rows` rows over `keys` keys, event times uniform over one hour (unordered).
fn one_unit(rows: usize, keys: u64) -> RecordBatch {
    let mut rnd = xorshift(0x9E37_79B9_7F4A_7C15);
    let k: Vec<i64> = (0..rows).map(|_| (rnd() % keys) as i64).collect();
    let ts: Vec<i64> = (0..rows).map(|_| (rnd() % 3_600_000_000) as i64).collect();
    let v: Vec<f64> = (0..rows).map(|_| (rnd() % 1000) as f64 / 7.0).collect();
    kv_batch(k, ts, v)
}

/// What a streaming state partition does each micro-batch (`StreamProcessor`): restore
/// its operator from the last snapshot, process the batch, write a snapshot. The state
/// holds 100K keys (random order, one open window each, per-key watermarks).
fn bench_state(c: &mut Criterion) {
    const STATE_KEYS: u64 = 100_000;
    let window = WindowSpec::Tumbling {
        size: 60_000_000,
        offset: 0,
    };
    let mut rnd = xorshift(0x5DEE_CE66_D1CE_4E5B);
    let mut batch = |rows: usize, t0: i64| {
        let k: Vec<i64> = (0..rows).map(|_| (rnd() % STATE_KEYS) as i64).collect();
        let ts: Vec<i64> = (0..rows)
            .map(|_| t0 + (rnd() % 50_000_000) as i64)
            .collect();
        let v: Vec<f64> = (0..rows).map(|_| (rnd() % 1000) as f64 / 7.0).collect();
        kv_batch(k, ts, v)
    };
    let fill = batch(2 * STATE_KEYS as usize, 0);
    let next = batch(10_000, 10_000_000);
    let clock = Arc::new(ManualClock::new(0));
    let mut op = Operator::new(config(window), clock.clone()).unwrap();
    op.process(&fill, None).unwrap();
    let snap = op.snapshot();
    let mut g = c.benchmark_group("state");
    g.sample_size(20);
    g.bench_function("snapshot_100k_keys", |b| {
        b.iter(|| black_box(op.snapshot()))
    });
    g.bench_function("restore_100k_keys", |b| {
        b.iter(|| black_box(Operator::restore(config(window), clock.clone(), &snap).unwrap()))
    });
    g.bench_function("micro_batch_10k_rows_on_100k_keys", |b| {
        b.iter(|| {
            let mut op = Operator::restore(config(window), clock.clone(), &snap).unwrap();
            black_box(op.process(&next, None).unwrap());
            black_box(op.snapshot())
        })
    });
    g.finish();
}

/// The thread-per-core runtime on the tumbling workload: 1 and 2 cores (and more when
/// the machine has them). Scaling efficiency = rate(N) / (N * rate(1)).
fn bench_runtime(c: &mut Criterion) {
    let data = batches(8);
    let mut g = c.benchmark_group("runtime");
    g.throughput(Throughput::Elements(
        data.iter().map(|b| b.num_rows() as u64).sum(),
    ));
    g.sample_size(10);
    let available = std::thread::available_parallelism().map_or(1, |n| n.get());
    let window = WindowSpec::Tumbling {
        size: 10_000_000,
        offset: 0,
    };
    for cores in [1usize, 2, 4, 8, 16] {
        if cores > available.max(2) {
            break;
        }
        g.bench_function(format!("tumbling_10k_keys/cores={cores}"), |b| {
            b.iter_batched(
                || {
                    ShardedOperator::new(config(window), Arc::new(ManualClock::new(0)), cores, 4)
                        .unwrap()
                },
                |mut op| {
                    for batch in &data {
                        black_box(op.process(batch, None).unwrap());
                    }
                    black_box(op.flush().unwrap())
                },
                BatchSize::LargeInput,
            )
        });
    }
    // Skew (Nexmark's hot auction): one key carries half of the rows. Global
    // watermark, with and without hot-key spreading.
    let skewed: Vec<RecordBatch> = data
        .iter()
        .map(|b| {
            let k = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
            let keys: Int64Array = k
                .iter()
                .enumerate()
                .map(|(i, v)| if i % 2 == 0 { Some(0) } else { v })
                .collect();
            let mut cols = b.columns().to_vec();
            cols[0] = Arc::new(keys);
            RecordBatch::try_new(b.schema(), cols).unwrap()
        })
        .collect();
    let mut global = config(window);
    global.scope = Scope::Global;
    // 2 cores here; on a machine with more, also all of them (up to 16).
    let mut skew_cores = vec![2usize];
    if available.min(16) > 2 {
        skew_cores.push(available.min(16));
    }
    for cores in skew_cores {
        for hot in [None, Some(0.1)] {
            let global = global.clone();
            let name = match hot {
                None => format!("cores={cores}"),
                Some(share) => format!("cores={cores},hot_keys={share}"),
            };
            g.bench_function(format!("skewed_half_one_key/{name}"), |b| {
                b.iter_batched(
                    || {
                        let clock = Arc::new(ManualClock::new(0));
                        match hot {
                            None => ShardedOperator::new(global.clone(), clock, cores, 4),
                            Some(share) => ShardedOperator::with_hot_keys(
                                global.clone(),
                                clock,
                                cores,
                                4,
                                share,
                            ),
                        }
                        .unwrap()
                    },
                    |mut op| {
                        for batch in &skewed {
                            black_box(op.process(batch, None).unwrap());
                        }
                        black_box(op.flush().unwrap())
                    },
                    BatchSize::LargeInput,
                )
            });
        }
    }
    g.finish();
}

fn bench_timers(c: &mut Criterion) {
    let mut g = c.benchmark_group("timer");
    const N: u64 = 100_000;
    g.throughput(Throughput::Elements(N));
    g.bench_function("register_then_fire", |b| {
        b.iter_batched(
            TimerService::<u32>::new,
            |mut t| {
                for i in 0..N {
                    t.register(
                        TimeDomain::EventTime,
                        (i * 7919 % N) as i64,
                        (i % 1000) as u32,
                        0,
                    );
                }
                black_box(t.advance_watermark(N as i64))
            },
            BatchSize::LargeInput,
        )
    });
    g.finish();
}

criterion_group!(
    benches,
    bench_timers,
    bench_pipeline,
    bench_state,
    bench_runtime
);
criterion_main!(benches);
