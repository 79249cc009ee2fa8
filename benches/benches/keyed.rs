//! Per-key watermark benchmarks.
//!
//! Run: `cargo bench -p tidemark-benches --bench keyed` (or `make bench`).
//!
//! | group | seed target | tidemark goal |
//! |---|---|---|
//! | `keyed_update` | < 100 ns | < 50 ns |
//! | `keyed_global_watermark/{1K,100K,1M}` | < 1 µs / < 10 µs | O(1) at any key count |
//! | `keyed_batch_100` (100 events, one call) | < 5 µs | |
//! | `keyed_update_columns` (64K rows, 10K keys) | | >= 20M events/s |
//! | memory per key (printed) | < 128 B | <= 64 B |
//! | `keyed_compact_update` (1M keys, 10K exact) | | |
//!
//! Keys are `i64` tenant ids `0..n` unless the name says `string`, `sparse` or `zipf`
//! (ids spread over the whole `i64` range: the key table's hash index instead of its
//! dense-integer map; `zipf`: a million such keys at Zipf(1.0) frequencies, the
//! accuracy benchmark's skew). `keyed_update/zipf_key_of_1000000` and
//! `keyed_compact_update/zipf_key_of_1000000_10k_exact` run the same keys through the
//! exact tracker (a million keys held) and the memory-bounded one (10K held, the rest
//! in its sketch). Every tracker reads a `ManualClock`.

// The allocator the Python module ships with (see rust/tidemark-py/src/lib.rs).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::hint::black_box;
use std::sync::Arc;

use arrow_array::{ArrayRef, Int64Array, StringArray};
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use tidemark_core::clock::ManualClock;
use tidemark_core::key::KeyColumns;
use tidemark_core::time::{
    CompactKeyedConfig, CompactKeyedWatermarkTracker, KeyEvictionPolicy, KeyedTicks,
    KeyedWatermarkTracker,
};

fn tracker(max_keys: Option<usize>) -> KeyedWatermarkTracker {
    KeyedWatermarkTracker::with_ticks(
        KeyedTicks {
            bounded_delay: 5_000,
            idle_timeout: Some(60_000),
            max_keys,
            eviction_policy: KeyEvictionPolicy::LeastRecentlyActive,
        },
        Arc::new(ManualClock::new(0)),
    )
}

fn filled(n: i64) -> KeyedWatermarkTracker {
    let mut t = tracker(None);
    for k in 0..n {
        t.update(k, 10_000 + k).unwrap();
    }
    t
}

/// A cheap deterministic sequence of key ids (xorshift), so lookups are not sequential.
struct Keys(u64, u64);
impl Keys {
    fn next(&mut self) -> i64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        // Multiply-high range reduction (Lemire): a division would cost the harness
        // more than some of what is measured.
        ((u128::from(self.0) * u128::from(self.1)) >> 64) as i64
    }
}

fn bench_update(c: &mut Criterion) {
    let mut g = c.benchmark_group("keyed_update");
    g.throughput(Throughput::Elements(1));
    for n in [1_000i64, 10_000, 100_000] {
        g.bench_function(format!("random_key_of_{n}"), |b| {
            let mut t = filled(n);
            let mut keys = Keys(0x9E37_79B9_7F4A_7C15, n as u64);
            let mut ts = 1_000_000i64;
            b.iter(|| {
                ts += 1;
                black_box(t.update(keys.next(), ts).unwrap())
            })
        });
    }
    // Integer ids spread over the whole i64 range (no dense range: hash lookups).
    for n in [10_000i64, 1_000_000] {
        g.bench_function(format!("sparse_key_of_{n}"), |b| {
            const SPREAD: i64 = 0x9E37_79B9_7F4A_7C15u64 as i64;
            let mut t = tracker(None);
            for k in 0..n {
                t.update(k.wrapping_mul(SPREAD), 10_000 + k).unwrap();
            }
            let mut keys = Keys(0x9E37_79B9_7F4A_7C15, n as u64);
            let mut ts = 1_000_000i64;
            b.iter(|| {
                ts += 1;
                black_box(t.update(keys.next().wrapping_mul(SPREAD), ts).unwrap())
            })
        });
    }
    g.bench_function("string_key_of_10000", |b| {
        let mut t = tracker(None);
        let names: Vec<String> = (0..10_000).map(|i| format!("tenant-{i:07}")).collect();
        for (i, k) in names.iter().enumerate() {
            t.update(k.as_str(), i as i64).unwrap();
        }
        let mut keys = Keys(0x1234_5678, 10_000);
        let mut ts = 1_000_000i64;
        b.iter(|| {
            ts += 1;
            black_box(t.update(names[keys.next() as usize].as_str(), ts).unwrap())
        })
    });
    // The same keys as they arrive with their events: read in order from one string
    // column (as a batch's key column is), so the harness does not pay a random
    // fetch of the key's bytes before each update.
    g.bench_function("string_key_stream_of_10000", |b| {
        const ROWS: usize = 1 << 20;
        let mut t = tracker(None);
        for i in 0..10_000 {
            t.update(format!("tenant-{i:07}").as_str(), i).unwrap();
        }
        let mut keys = Keys(0x1234_5678, 10_000);
        let stream =
            StringArray::from_iter_values((0..ROWS).map(|_| format!("tenant-{:07}", keys.next())));
        let (mut row, mut ts) = (0usize, 1_000_000i64);
        b.iter(|| {
            ts += 1;
            row = (row + 1) & (ROWS - 1);
            black_box(t.update(stream.value(row), ts).unwrap())
        })
    });
    // A million sparse keys as streams have them: Zipf-skewed (s = 1.0, the
    // accuracy benchmark's skew), read in order from a pre-generated sequence. The
    // rank of a key has nothing to do with where its state lies (the keys are
    // inserted in a scrambled order).
    g.bench_function("zipf_key_of_1000000", |b| {
        let mut t = tracker(None);
        for k in 0..ZIPF_KEYS {
            t.update(sparse_key(scrambled(k)), 10_000).unwrap();
        }
        let stream = zipf_stream(ZIPF_KEYS, 1 << 20, 0x5EED);
        let (mut row, mut ts) = (0usize, 1_000_000i64);
        b.iter(|| {
            ts += 1;
            row = (row + 1) & (stream.len() - 1);
            black_box(t.update(stream[row], ts).unwrap())
        })
    });
    g.finish();
}

const ZIPF_KEYS: i64 = 1_000_000;

/// Key id `k` spread over the whole `i64` range (the key table's hash index).
fn sparse_key(k: i64) -> i64 {
    k.wrapping_mul(0x9E37_79B9_7F4A_7C15u64 as i64)
}

/// A bijection of `0..ZIPF_KEYS` (999,983 is prime, so coprime with 10^6).
fn scrambled(k: i64) -> i64 {
    k * 999_983 % ZIPF_KEYS
}

/// `len` sparse keys drawn from `n` with Zipf(1.0) frequencies (rank 0 the hottest),
/// by inverse transform over the cumulative weights.
fn zipf_stream(n: i64, len: usize, seed: u64) -> Vec<i64> {
    let mut cdf = Vec::with_capacity(n as usize);
    let mut sum = 0.0f64;
    for r in 0..n {
        sum += 1.0 / (r + 1) as f64;
        cdf.push(sum);
    }
    let mut rng = Keys(seed, 1 << 53);
    (0..len)
        .map(|_| {
            let u = rng.next() as f64 / (1u64 << 53) as f64 * sum;
            let rank = cdf.partition_point(|&c| c < u).min(n as usize - 1) as i64;
            sparse_key(rank)
        })
        .collect()
}

/// The memory-bounded tracker (10K exact keys, the default sketch) at a million keys:
/// Zipf-skewed as above, and uniform (nearly every event evicts an exact key into the
/// sketch: the worst case).
fn bench_compact(c: &mut Criterion) {
    let mut g = c.benchmark_group("keyed_compact_update");
    g.throughput(Throughput::Elements(1));
    let mut uniform = Keys(0x9E37_79B9_7F4A_7C15, ZIPF_KEYS as u64);
    let streams = [
        (
            "zipf_key_of_1000000_10k_exact",
            zipf_stream(ZIPF_KEYS, 1 << 20, 0x5EED),
        ),
        (
            "uniform_key_of_1000000_10k_exact",
            (0..1 << 20).map(|_| sparse_key(uniform.next())).collect(),
        ),
    ];
    for (label, stream) in streams {
        g.bench_function(label, |b| {
            let mut t = CompactKeyedWatermarkTracker::with_clock(
                CompactKeyedConfig {
                    exact_keys: 10_000,
                    idle_timeout: Some(60_000),
                    ..CompactKeyedConfig::default()
                },
                Arc::new(ManualClock::new(0)),
            )
            .expect("valid configuration");
            let mut ts = 1_000_000i64;
            for &k in &stream {
                ts += 1;
                t.update(k, ts).unwrap();
            }
            let mut row = 0usize;
            b.iter(|| {
                ts += 1;
                row = (row + 1) & (stream.len() - 1);
                black_box(t.update(stream[row], ts).unwrap())
            })
        });
    }
    g.finish();

    // The batch path (what Python's update_batch runs): 64K-row batches of the
    // Zipf stream, each next one with later event times.
    let mut g = c.benchmark_group("keyed_compact_update_columns");
    const ROWS: usize = 65_536;
    g.throughput(Throughput::Elements(ROWS as u64));
    let stream = zipf_stream(ZIPF_KEYS, 16 * ROWS, 0x5EED);
    let batches: Vec<KeyColumns> = stream
        .chunks(ROWS)
        .map(|c| KeyColumns::single(Arc::new(Int64Array::from(c.to_vec())) as ArrayRef).unwrap())
        .collect();
    g.bench_function("zipf_64k_rows_1m_keys_10k_exact", |b| {
        let mut t = CompactKeyedWatermarkTracker::with_clock(
            CompactKeyedConfig {
                exact_keys: 10_000,
                ..CompactKeyedConfig::default()
            },
            Arc::new(ManualClock::new(0)),
        )
        .expect("valid configuration");
        let mut turn = 0i64;
        b.iter_batched(
            || {
                turn += 1;
                let times = (0..ROWS as i64).map(|i| turn * ROWS as i64 + i);
                (
                    turn as usize % batches.len(),
                    Int64Array::from_iter_values(times),
                )
            },
            |(i, times)| black_box(t.update_columns(&batches[i], &times).unwrap()),
            BatchSize::SmallInput,
        )
    });
    g.finish();
}

fn bench_global(c: &mut Criterion) {
    let mut g = c.benchmark_group("keyed_global_watermark");
    for (label, n) in [("1K", 1_000i64), ("100K", 100_000), ("1M", 1_000_000)] {
        let t = filled(n);
        g.bench_function(label, |b| b.iter(|| black_box(t.global_watermark())));
    }
    // The "global calc": recompute after the key holding the minimum moves.
    for (label, n) in [("1K", 1_000i64), ("100K", 100_000), ("1M", 1_000_000)] {
        g.bench_function(format!("min_key_update_{label}"), |b| {
            let mut t = filled(n);
            let mut k = 0i64;
            let mut ts = 20_000_000i64;
            b.iter(|| {
                // Keys advance in order, so every update moves the minimum.
                ts += 1;
                let r = t.update(k, ts).unwrap();
                k = (k + 1) % n;
                black_box(r)
            })
        });
    }
    g.finish();
}

fn bench_batch(c: &mut Criterion) {
    let mut g = c.benchmark_group("keyed_batch_100");
    g.throughput(Throughput::Elements(100));
    for n in [1_000i64, 10_000] {
        g.bench_function(format!("update_batch_100_of_{n}_keys"), |b| {
            let mut t = filled(n);
            let mut keys = Keys(42, n as u64);
            let mut ts = 1_000_000i64;
            b.iter_batched(
                || {
                    (0..100)
                        .map(|_| {
                            ts += 1;
                            (keys.next(), ts)
                        })
                        .collect::<Vec<_>>()
                },
                |events| black_box(t.update_batch(&events).unwrap()),
                BatchSize::SmallInput,
            )
        });
    }
    g.finish();

    let mut g = c.benchmark_group("keyed_update_columns");
    const ROWS: usize = 65_536;
    g.throughput(Throughput::Elements(ROWS as u64));
    let mut keys = Keys(7, 10_000);
    let ids: Vec<i64> = (0..ROWS).map(|_| keys.next()).collect();
    let times = Int64Array::from((0..ROWS as i64).map(|i| 1_000_000 + i).collect::<Vec<_>>());
    let int_keys = KeyColumns::single(Arc::new(Int64Array::from(ids.clone())) as ArrayRef).unwrap();
    let str_keys = KeyColumns::single(Arc::new(StringArray::from(
        ids.iter()
            .map(|i| format!("tenant-{i:07}"))
            .collect::<Vec<_>>(),
    )) as ArrayRef)
    .unwrap();
    for (label, kc) in [
        ("int64_64k_rows_10k_keys", &int_keys),
        ("string_64k_rows_10k_keys", &str_keys),
    ] {
        g.bench_function(label, |b| {
            let mut t = tracker(None);
            t.update_columns(kc, &times).unwrap();
            b.iter(|| black_box(t.update_columns(kc, &times).unwrap()))
        });
    }
    // A million string keys: the key table's hash index is far past the caches.
    g.bench_function("string_64k_rows_1m_keys", |b| {
        const KEYS: i64 = 1_000_000;
        let mut t = tracker(None);
        let all = (0..KEYS).map(|i| format!("tenant-{i:07}"));
        let all = KeyColumns::single(Arc::new(StringArray::from_iter_values(all)) as ArrayRef);
        let all_times = Int64Array::from((0..KEYS).collect::<Vec<_>>());
        t.update_columns(&all.unwrap(), &all_times).unwrap();
        let mut keys = Keys(11, KEYS as u64);
        let rows = (0..ROWS).map(|_| format!("tenant-{:07}", keys.next()));
        let kc = KeyColumns::single(Arc::new(StringArray::from_iter_values(rows)) as ArrayRef);
        let kc = kc.unwrap();
        b.iter(|| black_box(t.update_columns(&kc, &times).unwrap()))
    });
    g.finish();
}

fn report_memory(_c: &mut Criterion) {
    const SPREAD: i64 = 0x9E37_79B9_7F4A_7C15u64 as i64;
    for n in [10_000i64, 1_000_000] {
        let t = filled(n);
        println!(
            "memory: {n} keys -> {:.1} bytes/key measured (heap incl. spare capacity, excl. key \
             bytes); {} bytes/key by layout",
            t.heap_bytes() as f64 / n as f64,
            KeyedWatermarkTracker::bytes_per_key()
        );
        // Keys the dense-integer map cannot hold: the hash index's share included.
        let mut sparse = tracker(None);
        let mut strings = tracker(None);
        for k in 0..n {
            sparse.update(k.wrapping_mul(SPREAD), 10_000 + k).unwrap();
            strings
                .update(format!("tenant-{k:07}").as_str(), 10_000 + k)
                .unwrap();
        }
        println!(
            "memory: {n} keys -> {:.1} bytes/key with sparse integer keys, {:.1} with 14-byte \
             string keys (same measure)",
            sparse.heap_bytes() as f64 / n as f64,
            strings.heap_bytes() as f64 / n as f64
        );
    }
}

criterion_group!(
    benches,
    bench_update,
    bench_compact,
    bench_global,
    bench_batch,
    report_memory
);
criterion_main!(benches);
