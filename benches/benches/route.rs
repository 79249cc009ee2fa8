//! Routing benchmarks (issue: hash router and thread-per-core runtime).
//!
//! Run: `cargo bench -p tidemark-benches --bench route` (or `make bench`).
//!
//! | group | goal |
//! |---|---|
//! | `route/partition_ids/*` (64K rows, 16 partitions) | seed < 100 ns per row; ours <= 5 ns vectorised |
//! | `route/split/*` (ids + counting sort + one `take` per shard) | reported per row |
//!
//! Throughput is reported in elements (rows): criterion prints rows/s, and
//! ns per row = 1e9 / (rows/s).

// The allocator the Python module ships with (see rust/tidemark-py/src/lib.rs).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::hint::black_box;
use std::sync::Arc;

use arrow_array::{ArrayRef, Float64Array, Int64Array, RecordBatch, StringArray};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use tidemark_core::route::{HashAlgo, Router, Strategy};

const ROWS: usize = 65_536;

fn batch() -> RecordBatch {
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let ids: Vec<i64> = (0..ROWS).map(|_| (rnd() % 10_000) as i64).collect();
    let names: Vec<String> = ids.iter().map(|i| format!("tenant-{i}")).collect();
    let v: Vec<f64> = (0..ROWS).map(|_| (rnd() % 1000) as f64).collect();
    RecordBatch::try_from_iter(vec![
        ("id", Arc::new(Int64Array::from(ids)) as ArrayRef),
        ("name", Arc::new(StringArray::from(names)) as ArrayRef),
        ("v", Arc::new(Float64Array::from(v)) as ArrayRef),
    ])
    .expect("batch")
}

fn router(keys: &[&str], algo: HashAlgo) -> Router {
    Router::new(
        16,
        Strategy::Hash {
            keys: keys.iter().map(|k| k.to_string()).collect(),
            algo,
        },
        None,
    )
    .expect("router")
}

fn bench(c: &mut Criterion) {
    let b = batch();
    let mut g = c.benchmark_group("route");
    g.throughput(Throughput::Elements(ROWS as u64));
    for (name, keys, algo) in [
        ("xxh3_int", &["id"][..], HashAlgo::Xxh3),
        ("xxh3_string", &["name"][..], HashAlgo::Xxh3),
        ("xxh3_int_string", &["id", "name"][..], HashAlgo::Xxh3),
        ("spark_int", &["id"][..], HashAlgo::Spark),
        ("spark_string", &["name"][..], HashAlgo::Spark),
    ] {
        let mut r = router(keys, algo);
        g.bench_function(format!("partition_ids/{name}"), |bn| {
            bn.iter(|| black_box(r.partition_ids(black_box(&b)).expect("ids")))
        });
    }
    let mut r = Router::new(16, Strategy::RoundRobin, None).expect("router");
    g.bench_function("partition_ids/round_robin", |bn| {
        bn.iter(|| black_box(r.partition_ids(black_box(&b)).expect("ids")))
    });
    for (name, keys) in [("xxh3_int", &["id"][..]), ("xxh3_string", &["name"][..])] {
        let mut r = router(keys, HashAlgo::Xxh3);
        g.bench_function(format!("split/{name}"), |bn| {
            bn.iter(|| black_box(r.route(black_box(&b)).expect("route")))
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
