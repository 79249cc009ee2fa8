//! Reorder operator benchmarks (issue: event-time reordering).
//!
//! Run: `cargo bench -p tidemark-benches --bench reorder` (or `make bench`).
//!
//! | group | goal |
//! |---|---|
//! | `reorder/64k_rows/{1,10,50}pct_out_of_order` | >= 20M rows/s on one core at 10% |
//! | memory per buffered row (printed) | reported |
//!
//! The stream: 64K-row batches of (ts int64 µs, key int64, value float64), one
//! event per 10 µs; the given share of rows is delayed by up to the tolerance (2 s),
//! so they arrive out of order but never late. Each iteration pushes 16 batches
//! (1M rows) through a fresh operator and flushes it: every row is sorted, merged and
//! released once.

// The allocator the Python module ships with (see rust/tidemark-py/src/lib.rs).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow_array::{ArrayRef, Float64Array, Int64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use tidemark_core::reorder::{ReorderConfig, ReorderOperator};

const ROWS: usize = 65_536;
const BATCHES: usize = 16;
const TOLERANCE_US: i64 = 2_000_000;

fn stream(out_of_order: f64) -> Vec<RecordBatch> {
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let schema = Arc::new(Schema::new(vec![
        Field::new("ts", DataType::Int64, false),
        Field::new("key", DataType::Int64, false),
        Field::new("value", DataType::Float64, false),
    ]));
    let threshold = (out_of_order * u64::MAX as f64) as u64;
    (0..BATCHES)
        .map(|b| {
            let ts: Vec<i64> = (0..ROWS)
                .map(|i| {
                    let t = 10_000_000 + ((b * ROWS + i) as i64) * 10;
                    if rnd() < threshold {
                        t - (rnd() % TOLERANCE_US as u64) as i64
                    } else {
                        t
                    }
                })
                .collect();
            let keys: Vec<i64> = (0..ROWS).map(|_| (rnd() % 10_000) as i64).collect();
            let values: Vec<f64> = (0..ROWS).map(|i| i as f64).collect();
            RecordBatch::try_new(
                schema.clone(),
                vec![
                    Arc::new(Int64Array::from(ts)) as ArrayRef,
                    Arc::new(Int64Array::from(keys)),
                    Arc::new(Float64Array::from(values)),
                ],
            )
            .unwrap()
        })
        .collect()
}

fn operator() -> ReorderOperator {
    let mut cfg = ReorderConfig::new("ts", TOLERANCE_US);
    cfg.event_time_type = Some("unixtimestamp_us".into());
    ReorderOperator::new(cfg).unwrap()
}

// Timing only the operator calls (not building a fresh operator) needs a raw clock.
#[allow(clippy::disallowed_methods)]
fn bench_reorder(c: &mut Criterion) {
    let mut g = c.benchmark_group("reorder/64k_rows");
    g.throughput(Throughput::Elements((ROWS * BATCHES) as u64));
    for pct in [1u32, 10, 50] {
        let batches = stream(pct as f64 / 100.0);
        g.bench_function(format!("{pct}pct_out_of_order"), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let mut op = operator();
                    let start = Instant::now();
                    let mut released = 0;
                    for batch in &batches {
                        released += op.process(batch, None).unwrap().rows.num_rows();
                    }
                    released += op.flush().unwrap().rows.num_rows();
                    total += start.elapsed();
                    assert_eq!(released, ROWS * BATCHES);
                    black_box(released);
                }
                total
            })
        });
    }
    g.finish();
}

fn report_memory(_c: &mut Criterion) {
    let mut op = operator();
    for batch in stream(0.1).iter().take(4) {
        op.process(batch, None).unwrap();
    }
    let m = op.metrics();
    println!(
        "memory: {} rows buffered -> {:.1} bytes per buffered row (3 columns of 8 bytes \
         + 8 bytes of event time = 32 bytes of data)",
        m.buffer_size,
        m.buffer_bytes as f64 / m.buffer_size.max(1) as f64
    );
}

criterion_group!(benches, bench_reorder, report_memory);
criterion_main!(benches);
