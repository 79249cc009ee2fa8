use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::*;
use arrow_array::{
    BooleanArray, Date32Array, Float64Array, Int32Array, Int64Array, LargeStringArray, StringArray,
};
use arrow_schema::Field;

use super::spark::{java_big_integer_bytes, spark_hash_column, PMod};
use super::xxh3::{xxh3_encoded, xxh3_int_key, xxh3_partitions};
use super::*;
use crate::key::KeyColumns;

fn batch(cols: Vec<(&str, ArrayRef)>) -> RecordBatch {
    let schema = Schema::new(
        cols.iter()
            .map(|(n, a)| Field::new(*n, a.data_type().clone(), true))
            .collect::<Vec<_>>(),
    );
    RecordBatch::try_new(Arc::new(schema), cols.into_iter().map(|(_, a)| a).collect()).unwrap()
}

// Reference values from PySpark 4.3 (`SELECT hash(1), hash(1L), hash('a'), ...`, i.e. Murmur3Hash with
// seed 42) — the same function HashPartitioning applies before pmod.
#[test]
fn spark_murmur3_matches_known_spark_hash_values() {
    assert_eq!(spark_hash_int(1, 42), -559_580_957);
    assert_eq!(spark_hash_long(1, 42), -1_712_319_331);
    assert_eq!(spark_hash_bytes(b"a", 42), 1_485_273_170);
    assert_eq!(spark_hash_long(0, 42), -1_670_924_195); // hash(-0.0D): -0.0 as 0L
    assert_eq!(spark_hash_int(19000, 42), -779_492_372); // hash(date'2022-01-08')
    assert_eq!(spark_hash_bytes(b"abc", 42), 1_322_437_556);
    assert_eq!(spark_hash_bytes(b"Spark", 42), 228_093_765);
}

#[test]
fn inlined_hashes_equal_the_reference_functions() {
    for v in [0i64, 1, -1, 42, i64::MIN, i64::MAX, 0x0123_4567_89ab_cdef] {
        let mut k = Vec::new();
        crate::key::encode_int(v, &mut k);
        assert_eq!(xxh3_int_key(v), xxhash_rust::xxh3::xxh3_64(&k), "{v}");
    }
    let long = b"0123456789abcdefghijklmnopqrstuvwxyz";
    for len in 0..long.len() {
        let k = &long[..len];
        assert_eq!(xxh3_encoded(k), xxhash_rust::xxh3::xxh3_64(k), "{len}");
    }
    for n in [1u32, 2, 3, 7, 200, 1000, 65_537, i32::MAX as u32] {
        let m = PMod::new(n);
        for h in [0, 1, -1, 42, i32::MIN, i32::MAX, -123_456_789, 987_654_321] {
            assert_eq!(m.pmod(h), spark_pmod(h, n), "{h} {n}");
        }
    }
}

#[test]
fn decimal_bytes_are_java_big_integer_bytes() {
    let cases: [(i128, &[u8]); 9] = [
        (0, &[0]),
        (127, &[0x7F]),
        (128, &[0x00, 0x80]),
        (-1, &[0xFF]),
        (-128, &[0x80]),
        (-129, &[0xFF, 0x7F]),
        (65_535, &[0x00, 0xFF, 0xFF]),
        (
            i128::MAX,
            &[
                0x7F, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
                0xFF, 0xFF,
            ],
        ),
        (
            i128::MIN,
            &[0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        ),
    ];
    for (v, want) in cases {
        let (bytes, start) = java_big_integer_bytes(v);
        assert_eq!(&bytes[start..], want, "{v}");
    }
}

#[test]
fn spark_pmod_is_non_negative() {
    assert_eq!(spark_pmod(-1, 4), 3);
    assert_eq!(
        spark_pmod(i32::MIN, 7),
        ((i32::MIN as i64).rem_euclid(7)) as u32
    );
    assert_eq!(spark_pmod(9, 4), 1);
}

#[test]
fn spark_null_leaves_the_running_hash_unchanged() {
    let b = batch(vec![
        (
            "a",
            Arc::new(Int32Array::from(vec![Some(1), None])) as ArrayRef,
        ),
        (
            "b",
            Arc::new(StringArray::from(vec![None, Some("x")])) as ArrayRef,
        ),
    ]);
    let mut h = vec![42; 2];
    spark_hash_column(b.column(0), &mut h).unwrap();
    spark_hash_column(b.column(1), &mut h).unwrap();
    assert_eq!(h[0], spark_hash_int(1, 42));
    assert_eq!(h[1], spark_hash_bytes(b"x", 42));
}

#[test]
fn xxh3_routing_depends_on_values_not_arrow_widths() {
    let narrow = batch(vec![(
        "k",
        Arc::new(Int32Array::from(vec![1, 2, 3, 400_000])) as ArrayRef,
    )]);
    let wide = batch(vec![(
        "k",
        Arc::new(Int64Array::from(vec![1, 2, 3, 400_000])) as ArrayRef,
    )]);
    let mut r = hash_router(16, &["k"], HashAlgo::Xxh3).unwrap();
    assert_eq!(
        r.partition_ids(&narrow).unwrap(),
        r.partition_ids(&wide).unwrap()
    );
    let s = batch(vec![(
        "k",
        Arc::new(StringArray::from(vec!["a", "b"])) as ArrayRef,
    )]);
    let l = batch(vec![(
        "k",
        Arc::new(LargeStringArray::from(vec!["a", "b"])) as ArrayRef,
    )]);
    assert_eq!(r.partition_ids(&s).unwrap(), r.partition_ids(&l).unwrap());
}

#[test]
fn xxh3_fast_path_equals_the_generic_encoding() {
    let vals: Vec<i64> = (-500..500).map(|x| x * 7919).collect();
    let col: ArrayRef = Arc::new(Int64Array::from(vals.clone()));
    let fast = xxh3_partitions(std::slice::from_ref(&col), 13).unwrap();
    for (i, v) in vals.iter().enumerate() {
        let mut k = Vec::new();
        crate::key::encode_int(*v, &mut k);
        assert_eq!(fast[i], xxh3_partition(&k, 13));
    }
}

#[test]
fn multi_column_keys_route_by_their_encoded_key() {
    let n = 300; // several encoding chunks
    let a: ArrayRef = Arc::new(StringArray::from_iter(
        (0..n).map(|i| (i % 9 != 4).then(|| format!("region-{}", i % 11))),
    ));
    let b: ArrayRef = Arc::new(Int64Array::from_iter_values((0..n as i64).map(|i| i * 37)));
    let cols = [a, b];
    let got = xxh3_partitions(&cols, 7).unwrap();
    let keys = KeyColumns::new(&cols).unwrap();
    let want: Vec<u32> = (0..n).map(|i| xxh3_partition(&keys.key(i), 7)).collect();
    assert_eq!(got, want);
}

#[test]
fn route_keeps_every_row_once_in_order() {
    let keys: Vec<i64> = (0..1000).map(|i| i % 37).collect();
    let vals: Vec<i64> = (0..1000).collect();
    let b = batch(vec![
        ("k", Arc::new(Int64Array::from(keys)) as ArrayRef),
        ("v", Arc::new(Int64Array::from(vals)) as ArrayRef),
    ]);
    for strategy in [
        Strategy::Hash {
            keys: vec!["k".into()],
            algo: HashAlgo::Xxh3,
        },
        Strategy::Hash {
            keys: vec!["k".into()],
            algo: HashAlgo::Spark,
        },
        Strategy::RoundRobin,
        Strategy::Single,
    ] {
        let mut r = Router::new(5, strategy.clone(), None).unwrap();
        let ids = r.clone().partition_ids(&b).unwrap();
        let shards = r.route(&b).unwrap();
        assert_eq!(shards.len(), 5);
        let mut seen = Vec::new();
        for (p, s) in shards.iter().enumerate() {
            let v = s.column(1).as_primitive::<Int64Type>();
            let rows: Vec<i64> = v.values().to_vec();
            assert!(rows.windows(2).all(|w| w[0] < w[1]), "{strategy:?} order");
            for &row in &rows {
                assert_eq!(ids[row as usize], p as u32, "{strategy:?}");
            }
            seen.extend(rows);
        }
        seen.sort();
        assert_eq!(seen, (0..1000).collect::<Vec<_>>(), "{strategy:?}");
    }
}

#[test]
fn slices_route_like_the_whole_batch() {
    // Nullable int and string keys (the generic encoding), a dictionary, and a
    // non-null int (the fast path).
    let ints: Vec<Option<i64>> = (0..997).map(|i| (i % 11 != 0).then_some(i % 41)).collect();
    let strs: Vec<Option<String>> = (0..997)
        .map(|i| (i % 13 != 0).then(|| format!("tenant-{}", i % 29)))
        .collect();
    let dict: arrow_array::DictionaryArray<arrow_array::types::Int32Type> =
        (0..997).map(|i| ["x", "y", "z"][i % 3]).collect();
    let b = batch(vec![
        ("i", Arc::new(Int64Array::from(ints)) as ArrayRef),
        ("s", Arc::new(StringArray::from(strs)) as ArrayRef),
        ("d", Arc::new(dict) as ArrayRef),
        (
            "n",
            Arc::new(Int64Array::from_iter_values(0..997)) as ArrayRef,
        ),
    ]);
    for keys in [
        vec!["i"],
        vec!["s"],
        vec!["d"],
        vec!["n"],
        vec!["i", "s", "d"],
    ] {
        for algo in [HashAlgo::Xxh3, HashAlgo::Spark] {
            let strategy = Strategy::Hash {
                keys: keys.iter().map(|k| k.to_string()).collect(),
                algo,
            };
            let mut r = Router::new(7, strategy, None).unwrap();
            assert!(r.is_stateless());
            let whole = r.partition_ids(&b).unwrap();
            for (lo, hi) in [(0, 0), (0, 997), (0, 1), (5, 400), (400, 997), (996, 997)] {
                let part = r.slice_partition_ids(&b, lo, hi - lo).unwrap();
                assert_eq!(part, whole[lo..hi], "{keys:?} {algo:?} {lo}..{hi}");
            }
        }
    }
    let single = Router::new(3, Strategy::Single, None).unwrap();
    assert_eq!(single.slice_partition_ids(&b, 2, 3).unwrap(), vec![0, 0, 0]);
    let rr = Router::new(3, Strategy::RoundRobin, None).unwrap();
    assert!(!rr.is_stateless());
    assert!(rr.slice_partition_ids(&b, 0, 3).is_err());
    let missing = Router::new(
        3,
        Strategy::Hash {
            keys: vec!["nope".into()],
            algo: HashAlgo::Xxh3,
        },
        None,
    )
    .unwrap();
    assert!(missing.slice_partition_ids(&b, 0, 3).is_err());
}

#[test]
fn round_robin_continues_across_batches() {
    let b = batch(vec![(
        "v",
        Arc::new(Int64Array::from(vec![0, 1, 2])) as ArrayRef,
    )]);
    let mut r = Router::new(4, Strategy::RoundRobin, None).unwrap();
    assert_eq!(r.partition_ids(&b).unwrap(), vec![0, 1, 2]);
    assert_eq!(r.partition_ids(&b).unwrap(), vec![3, 0, 1]);
}

#[test]
fn broadcast_replicates_without_copying() {
    let b = batch(vec![(
        "v",
        Arc::new(Int64Array::from(vec![0, 1, 2])) as ArrayRef,
    )]);
    let mut r = Router::new(3, Strategy::Broadcast, None).unwrap();
    let out = r.route(&b).unwrap();
    assert_eq!(out.len(), 3);
    for s in &out {
        assert!(Arc::ptr_eq(s.column(0), b.column(0)));
    }
    assert!(r.partition_ids(&b).is_err());
}

#[test]
fn system_fields_resolve_to_source_columns() {
    assert_eq!(resolve_key("_PARTITION", None).unwrap(), "partition");
    assert_eq!(resolve_key("_offset", None).unwrap(), "offset");
    assert_eq!(resolve_key("_TIMESTAMP", None).unwrap(), "timestamp");
    assert_eq!(resolve_key("_EVENT_TIME", Some("ts")).unwrap(), "ts");
    assert!(resolve_key("_EVENT_TIME", None).is_err());
    assert_eq!(resolve_key("device", None).unwrap(), "device");
}

#[test]
fn bad_configuration_and_input_are_clear_errors() {
    assert!(Router::new(0, Strategy::Single, None).is_err());
    assert!(Router::new(
        2,
        Strategy::Hash {
            keys: vec![],
            algo: HashAlgo::Xxh3
        },
        None
    )
    .is_err());
    assert!("md5".parse::<HashAlgo>().is_err());
    let b = batch(vec![("v", Arc::new(Int64Array::from(vec![0])) as ArrayRef)]);
    let mut r = hash_router(2, &["nope"], HashAlgo::Xxh3).unwrap();
    let e = r.partition_ids(&b).unwrap_err().to_string();
    assert!(e.contains("nope") && e.contains('v'), "{e}");
}

#[test]
fn spark_mode_hashes_mixed_types_and_chains_columns() {
    let b = batch(vec![
        ("i", Arc::new(Int32Array::from(vec![1])) as ArrayRef),
        ("l", Arc::new(Int64Array::from(vec![1])) as ArrayRef),
        ("s", Arc::new(StringArray::from(vec!["abc"])) as ArrayRef),
        ("d", Arc::new(Float64Array::from(vec![-0.0])) as ArrayRef),
        ("b", Arc::new(BooleanArray::from(vec![true])) as ArrayRef),
        ("dt", Arc::new(Date32Array::from(vec![19000])) as ArrayRef),
    ]);
    let mut r = hash_router(1000, &["i", "l", "s", "d", "b", "dt"], HashAlgo::Spark).unwrap();
    let mut h = spark_hash_int(1, 42);
    h = spark_hash_long(1, h);
    h = spark_hash_bytes(b"abc", h);
    h = spark_hash_long(0, h);
    h = spark_hash_int(1, h);
    h = spark_hash_int(19000, h);
    assert_eq!(r.partition_ids(&b).unwrap(), vec![spark_pmod(h, 1000)]);
}

#[test]
fn java_big_integer_bytes_are_minimal_twos_complement() {
    let minimal = |v: i128| {
        let (bytes, start) = java_big_integer_bytes(v);
        bytes[start..].to_vec()
    };
    assert_eq!(minimal(0), vec![0]);
    assert_eq!(minimal(127), vec![0x7f]);
    assert_eq!(minimal(128), vec![0x00, 0x80]);
    assert_eq!(minimal(-1), vec![0xff]);
    assert_eq!(minimal(-129), vec![0xff, 0x7f]);
}
