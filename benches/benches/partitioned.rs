//! Per-partition watermark benchmarks.
//!
//! Run: `cargo bench -p tidemark-benches --bench partitioned` (or `make bench`).
//!
//! | group | seed target | tidemark goal (5x) |
//! |---|---|---|
//! | `partition_update` | < 50 ns | < 10 ns |
//! | `combined_watermark_100_partitions` | < 500 ns | < 100 ns |
//! | `idle_check_100_partitions` | < 1 µs | < 200 ns |
//! | memory per partition (printed) | < 64 B | < 13 B |
//!
//! Every tracker reads a `ManualClock` (an atomic load) except where the group name
//! says `system_clock`, which reads the monotonic clock on every update.

// The allocator the Python module ships with (see rust/tidemark-py/src/lib.rs).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::hint::black_box;
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use tidemark_core::clock::{ManualClock, SystemClock};
use tidemark_core::time::{PartitionId, PartitionedWatermarkTracker};

fn tracker(n: usize) -> PartitionedWatermarkTracker {
    let mut t = PartitionedWatermarkTracker::new()
        .idle_timeout_ticks(Some(30_000))
        .with_clock(Arc::new(ManualClock::new(0)));
    t.register_source(0, n);
    for p in 0..n as u32 {
        t.update_partition(PartitionId::new(0, p), 1_000 + p as i64)
            .unwrap();
    }
    t
}

fn bench_update(c: &mut Criterion) {
    let mut g = c.benchmark_group("partition_update");
    g.throughput(Throughput::Elements(1));
    for n in [4usize, 100, 1000] {
        // Round-robin updates: every update advances one partition past the others,
        // so the minimum moves on each one (the worst case for the combined value).
        g.bench_function(format!("round_robin_{n}_partitions"), |b| {
            let mut t = tracker(n);
            let mut i = 0u64;
            b.iter(|| {
                let p = (i % n as u64) as u32;
                i += 1;
                black_box(
                    t.update_partition(PartitionId::new(0, p), 2_000 + i as i64)
                        .unwrap(),
                )
            })
        });
    }
    g.bench_function("same_partition_100_partitions", |b| {
        let mut t = tracker(100);
        let mut i = 0i64;
        b.iter(|| {
            i += 1;
            black_box(
                t.update_partition(PartitionId::new(0, 50), 2_000 + i)
                    .unwrap(),
            )
        })
    });
    g.bench_function("round_robin_100_partitions_system_clock", |b| {
        let mut t = tracker(100).with_clock(Arc::new(SystemClock::new()));
        let mut i = 0u64;
        b.iter(|| {
            let p = (i % 100) as u32;
            i += 1;
            black_box(
                t.update_partition(PartitionId::new(0, p), 2_000 + i as i64)
                    .unwrap(),
            )
        })
    });
    g.finish();
}

fn bench_combined(c: &mut Criterion) {
    let mut g = c.benchmark_group("combined_watermark_100_partitions");
    g.bench_function("current_watermark", |b| {
        let t = tracker(100);
        b.iter(|| black_box(t.current_watermark()))
    });
    g.bench_function("recalculate", |b| {
        let mut t = tracker(100);
        b.iter(|| black_box(t.recalculate()))
    });
    // A full recalculation: mark the minimum idle and active again, so the
    // combined value is computed afresh each time.
    g.bench_function("idle_then_active_min_partition", |b| {
        let mut t = tracker(100);
        b.iter(|| {
            let w = t.mark_partition_idle(PartitionId::new(0, 0)).unwrap();
            t.mark_partition_active(PartitionId::new(0, 0)).unwrap();
            black_box(w)
        })
    });
    g.finish();
}

fn bench_idle(c: &mut Criterion) {
    let mut g = c.benchmark_group("idle_check_100_partitions");
    g.bench_function("none_idle", |b| {
        let mut t = tracker(100);
        b.iter(|| black_box(t.check_idle_partitions()))
    });
    g.bench_function("all_go_idle", |b| {
        let clock = ManualClock::new(0);
        b.iter_batched(
            || {
                let t = tracker(100).with_clock(Arc::new(clock.clone()));
                clock.advance(30_001);
                t
            },
            |mut t| black_box(t.check_idle_partitions()),
            BatchSize::SmallInput,
        )
    });
    g.finish();
}

fn report_memory(_c: &mut Criterion) {
    for n in [100usize, 10_000] {
        let t = tracker(n);
        println!(
            "memory: {n} partitions -> {:.1} bytes/partition (heap incl. spare capacity); \
             {} bytes/partition by layout",
            t.heap_bytes() as f64 / n as f64,
            PartitionedWatermarkTracker::bytes_per_partition()
        );
    }
}

criterion_group!(
    benches,
    bench_update,
    bench_combined,
    bench_idle,
    report_memory
);
criterion_main!(benches);
