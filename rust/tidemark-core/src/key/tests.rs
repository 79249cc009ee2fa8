use std::sync::Arc;

use arrow_array::types::*;
use arrow_array::{
    Array, ArrayRef, DictionaryArray, Float64Array, Int16Array, Int64Array, LargeStringArray,
    StringArray, UInt64Array,
};
use arrow_schema::DataType;
use proptest::prelude::*;

use super::table::{Dense, Head, INLINE_KEY};
use super::*;
use crate::error::Result;

fn enc<K: AsKey>(k: K) -> Vec<u8> {
    let mut v = Vec::new();
    k.encode_key(&mut v);
    v
}

#[test]
fn arrow_columns_encode_like_rust_values() {
    let cols: Vec<ArrayRef> = vec![
        Arc::new(LargeStringArray::from(vec![Some("a"), None])),
        Arc::new(Int16Array::from(vec![3, -4])),
    ];
    let k = KeyColumns::new(&cols).unwrap();
    assert_eq!(k.key(0), enc(("a", 3i64)));
    assert_eq!(k.key(1), enc((None::<&str>, -4i64)));

    let d: DictionaryArray<Int32Type> = vec![Some("x"), None, Some("x")].into_iter().collect();
    let k = KeyColumns::single(Arc::new(d)).unwrap();
    assert_eq!(k.key(0), enc("x"));
    assert_eq!(k.key(1), vec![tag::NULL]);
    assert_eq!(k.key(2), enc(String::from("x")));

    let u = KeyColumns::single(Arc::new(UInt64Array::from(vec![5, u64::MAX]))).unwrap();
    assert_eq!(u.key(0), enc(5i64));
    assert_eq!(u.key(1)[0], tag::UINT);

    let f = KeyColumns::single(Arc::new(Float64Array::from(vec![-0.0, 0.0, f64::NAN]))).unwrap();
    assert_eq!(f.key(0), f.key(1));
    assert_eq!(f.key(2), enc(f64::NAN));
}

#[test]
fn decode_round_trips_column_types() {
    let cols: Vec<ArrayRef> = vec![
        Arc::new(
            arrow_array::TimestampMillisecondArray::from(vec![Some(5), None]).with_timezone("UTC"),
        ),
        Arc::new(StringArray::from(vec![Some("a"), Some("b")])),
        Arc::new(
            vec![Some("x"), None]
                .into_iter()
                .collect::<DictionaryArray<Int8Type>>(),
        ),
        Arc::new(UInt64Array::from(vec![u64::MAX, 1])),
        Arc::new(arrow_array::Date32Array::from(vec![3, 4])),
        Arc::new(arrow_array::BooleanArray::from(vec![true, false])),
        Arc::new(
            arrow_array::Decimal128Array::from(vec![Some(-12_345), None])
                .with_precision_and_scale(30, 2)
                .unwrap(),
        ),
        // A slice: the key reads the values at the array's offset.
        Arc::new(
            arrow_array::Decimal128Array::from(vec![7, i128::MIN, i128::MAX])
                .with_precision_and_scale(38, 0)
                .unwrap()
                .slice(1, 2),
        ),
    ];
    let kc = KeyColumns::new(&cols).unwrap();
    let keys: Vec<Vec<u8>> = (0..2).map(|i| kc.key(i)).collect();
    let refs: Vec<&[u8]> = keys.iter().map(|k| k.as_slice()).collect();
    let types: Vec<DataType> = cols.iter().map(|c| c.data_type().clone()).collect();
    let back = decode_key_columns(&refs, &types).unwrap();
    for (a, b) in cols.iter().zip(&back) {
        assert_eq!(a.as_ref(), b.as_ref());
    }
}

#[test]
fn unsupported_types_are_config_errors() {
    let l: ArrayRef = Arc::new(arrow_array::ListArray::new_null(
        Arc::new(arrow_schema::Field::new("x", DataType::Int32, true)),
        1,
    ));
    let e = KeyColumns::single(l).unwrap_err();
    assert!(e.to_string().contains("cannot be a key"), "{e}");
}

#[test]
fn dense_integer_keys_skip_the_hash_index_until_they_spread() {
    let mut t = KeyTable::new();
    for v in (0..10_000i64).rev() {
        t.get_or_insert(&enc(v)).unwrap();
    }
    assert!(matches!(t.dense, Dense::On { .. }));
    assert_eq!(t.table.len(), 0);
    assert!(t.overhead_bytes() < 10_000 * (32 + 8) + 256 * 1024);
    // A value far away: every integer key moves to the hash index.
    let (far, _) = t.get_or_insert(&enc(1i64 << 40)).unwrap();
    assert!(matches!(t.dense, Dense::Off));
    assert_eq!(t.len(), 10_001);
    assert_eq!(t.table.len(), 10_001);
    for v in 0..10_000i64 {
        let w = WordKey::int(v);
        assert_eq!(t.get_word(w, w.hash()), t.get(&enc(v)));
        assert_eq!(t.key(t.get(&enc(v)).unwrap()), enc(v).as_slice());
    }
    assert_eq!(t.get(&enc(1i64 << 40)), Some(far));
    t.clear();
    assert!(matches!(t.dense, Dense::Unused));
}

#[test]
fn reserved_keys_insert_without_growth_and_dense_ints_in_any_order() {
    // Integer keys over a range wider than the dense map's floor (64K values),
    // inserted in a scattered order: one at a time, an early far-off key would
    // have turned the map off; reserved first, they all stay in it.
    let ints: Vec<Vec<u8>> = (0..100_000i64)
        .map(|i| enc(i * 7_919 % 100_000 * 3))
        .collect();
    let mut unreserved = KeyTable::new();
    for k in &ints[..10] {
        unreserved.insert_new(k, hash_key(k)).unwrap();
    }
    assert!(matches!(unreserved.dense, Dense::Off));
    let mut t = KeyTable::new();
    t.reserve_keys(ints.iter().map(Vec::as_slice));
    let entries = t.entries.capacity();
    for k in &ints {
        t.insert_new(k, hash_key(k)).unwrap();
    }
    assert!(matches!(t.dense, Dense::On { .. }));
    assert_eq!(
        (t.table.len(), t.len(), t.entries.capacity()),
        (0, 100_000, entries)
    );
    for k in &ints {
        assert_eq!(t.key(t.get(k).unwrap()), k.as_slice());
    }
    // Strings (short and long): the hash index is sized once.
    let strs: Vec<Vec<u8>> = (0..50_000)
        .map(|i| enc(format!("{i}{}", "x".repeat(i % 3 * 10))))
        .collect();
    let mut t = KeyTable::new();
    t.reserve_keys(strs.iter().map(Vec::as_slice));
    let (chunks, arena) = (t.table.chunks_len(), t.arena.capacity());
    for k in &strs {
        t.insert_new(k, hash_key(k)).unwrap();
    }
    assert_eq!((t.table.chunks_len(), t.arena.capacity()), (chunks, arena));
    assert!(strs
        .iter()
        .all(|k| t.key(t.get(k).unwrap()) == k.as_slice()));
    // Integers too far apart for the dense map: reserved in the hash index.
    let far: Vec<Vec<u8>> = (0..1_000i64).map(|i| enc(i << 40)).collect();
    let mut t = KeyTable::new();
    t.reserve_keys(far.iter().map(Vec::as_slice));
    let chunks = t.table.chunks_len();
    for k in &far {
        t.insert_new(k, hash_key(k)).unwrap();
    }
    assert_eq!(t.table.chunks_len(), chunks);
    assert!(far.iter().all(|k| t.key(t.get(k).unwrap()) == k.as_slice()));
}

#[test]
fn table_interns_and_reuses_slots() {
    let mut t = KeyTable::new();
    let (a, new) = t.get_or_insert(&enc("a")).unwrap();
    assert!(new);
    let (a2, new) = t.get_or_insert(&enc("a")).unwrap();
    assert!(!new);
    assert_eq!(a, a2);
    let (b, _) = t.get_or_insert(&enc(1i64)).unwrap();
    assert_ne!(a, b);
    t.remove(a);
    assert_eq!(t.get(&enc("a")), None);
    assert_eq!(t.len(), 1);
    let (c, _) = t.get_or_insert(&enc("c")).unwrap();
    assert_eq!(c, a, "slot reused");
    assert_eq!(t.key(c), enc("c").as_slice());
}

#[test]
fn heads_hold_short_keys_inline_byte_for_byte() {
    for n in 0..=40usize {
        let key: Vec<u8> = (0..n as u8)
            .map(|i| i.wrapping_mul(37).wrapping_add(1))
            .collect();
        let h = Head::of(&key, 0x1234);
        if n <= INLINE_KEY {
            let mut want = [0u8; 16];
            want[..n].copy_from_slice(&key);
            want[15] = n as u8;
            assert_eq!(h.0, want, "length {n}");
            assert_eq!(h.key(&[]), key.as_slice());
        } else {
            assert_eq!(h.tag(), Head::LONG);
            assert_eq!(h.span(), 0x1234);
            assert_eq!(&h.0[8..15], &key[..7]);
        }
    }
    // Keys that differ only past the inline bytes, or in length, stay apart.
    let mut t = KeyTable::new();
    let keys: Vec<Vec<u8>> = (0..=20usize).map(|n| vec![0u8; n]).collect();
    let slots: Vec<u32> = keys.iter().map(|k| t.get_or_insert(k).unwrap().0).collect();
    for (k, s) in keys.iter().zip(&slots) {
        assert_eq!(t.get(k), Some(*s));
        assert_eq!(t.key(*s), k.as_slice());
    }
    assert_eq!(t.key_bytes(), (0..=20).sum::<usize>());
}

#[test]
fn int_columns_of_any_width_are_one_key() {
    let a = KeyColumns::single(Arc::new(Int64Array::from(vec![9]))).unwrap();
    let b = KeyColumns::single(Arc::new(arrow_array::UInt8Array::from(vec![9]))).unwrap();
    let s = KeyColumns::single(Arc::new(StringArray::from(vec!["9"]))).unwrap();
    assert_eq!(a.key(0), b.key(0));
    assert_ne!(a.key(0), s.key(0));
}

#[test]
fn rows_visit_every_key_in_order_across_chunks() {
    let n = 300; // more than one encoding chunk
    let ints: ArrayRef = Arc::new(Int64Array::from_iter(
        (0..n as i64).map(|i| (i % 7 != 3).then_some(i * 31 - 500)),
    ));
    let strs: ArrayRef = Arc::new(StringArray::from_iter(
        (0..n).map(|i| (i % 5 != 1).then(|| "k".repeat(i % 40))),
    ));
    let large: ArrayRef = Arc::new(LargeStringArray::from_iter(
        (0..n).map(|i| (i % 4 != 0).then(|| format!("tenant-{i:07}"))),
    ));
    let view: ArrayRef =
        Arc::new(arrow_array::StringViewArray::from_iter((0..n).map(|i| {
            (i % 6 != 2).then(|| format!("a-much-longer-tenant-{i}"))
        })));
    let bins: ArrayRef = Arc::new(arrow_array::BinaryArray::from_iter(
        (0..n).map(|i| (i % 3 != 0).then(|| vec![i as u8; i % 20])),
    ));
    let large_bins: ArrayRef = Arc::new(arrow_array::LargeBinaryArray::from_iter(
        (0..n).map(|i| (i % 3 != 1).then(|| vec![7u8; i % 30])),
    ));
    for cols in [
        vec![ints.clone()],
        vec![strs.clone()],
        vec![large.clone()],
        vec![view],
        vec![bins.clone()],
        vec![large_bins],
        vec![strs, ints.clone(), large, bins],
    ] {
        let keys = KeyColumns::new(&cols).unwrap();
        let mut seen = Vec::new();
        keys.for_each_key(|i, k| seen.push((i, k.to_vec())));
        let want: Vec<_> = (0..n).map(|i| (i, keys.key(i))).collect();
        assert_eq!(seen, want);
        let mut refs = Vec::new();
        keys.for_each_row_key(|i, k| {
            refs.push((
                i,
                match k {
                    RowKey::Word(w) => w.bytes().to_vec(),
                    RowKey::Str(b) => {
                        let mut v = Vec::new();
                        b.encode(&mut v);
                        v
                    }
                    RowKey::Bytes(b) => b.to_vec(),
                },
            ))
        });
        assert_eq!(refs, want);
    }
}

type Model = std::collections::HashMap<Vec<u8>, u32>;

/// Inserts (or removes) `key` in the table and in the model, checking that the
/// table hands out the model's slot and keeps its count.
fn apply_to_both(
    t: &mut KeyTable,
    model: &mut Model,
    key: Vec<u8>,
    insert: bool,
) -> Result<(), TestCaseError> {
    if insert {
        let (slot, new) = t.get_or_insert(&key).unwrap();
        match model.get(&key) {
            Some(&s) => {
                prop_assert!(!new);
                prop_assert_eq!(s, slot);
            }
            None => {
                prop_assert!(new);
                model.insert(key, slot);
            }
        }
    } else if let Some(s) = model.remove(&key) {
        t.remove(s);
    }
    prop_assert_eq!(t.len(), model.len());
    Ok(())
}

/// Every key of the model is found in its slot.
fn same_as_model(t: &KeyTable, model: &Model) -> Result<(), TestCaseError> {
    for (k, s) in model {
        prop_assert_eq!(t.get(k), Some(*s));
        prop_assert_eq!(t.key(*s), k.as_slice());
    }
    Ok(())
}

/// String and binary values of 11 to 15 bytes live in their head alone: found
/// without the arena, given back as their encoding, removed and reused, and kept
/// through the table's growth.
#[test]
fn short_values_are_held_in_the_head() {
    // The last n digits of i: 2,000 values of each length from 4 bytes up.
    let value = |i: usize, n: usize| format!("{i:020}")[20 - n..].to_string();
    let mut t = KeyTable::new();
    let mut want = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for n in 0..=20usize {
        for i in 0..2_000 {
            for bin in [false, true] {
                let v = value(i, n);
                let k = if bin {
                    enc(v.as_bytes())
                } else {
                    enc(v.as_str())
                };
                let (slot, new) = t.get_or_insert(&k).unwrap();
                assert_eq!(new, seen.insert(k.clone()), "{k:?}");
                if !new {
                    continue;
                }
                let head = t.entries[slot as usize].head;
                assert_eq!(head.short().is_some(), (11..=15).contains(&n), "{n} bytes");
                want.push((k, slot));
            }
        }
    }
    // No arena bytes for short values: only the 16..20-byte ones went there.
    let long: usize = (16..=20).map(|n| 2 * 2_000 * (n + 5)).sum();
    assert_eq!(t.arena.len(), long);
    for (k, slot) in &want {
        assert_eq!(t.get(k), Some(*slot));
        assert_eq!(t.key(*slot), k.as_slice());
        let b = BytesKey::of_encoded(k).unwrap();
        assert_eq!(t.get_bytes(b, b.hash()), Some(*slot));
    }
    let bytes_before = t.key_bytes();
    // Remove every short value whose last digit is even, then put them back.
    let mut removed_bytes = 0;
    let gone = |k: &[u8]| {
        let b = BytesKey::of_encoded(k).unwrap();
        (11..=15).contains(&b.payload.len()) && b.payload[b.payload.len() - 1] % 2 == 0
    };
    for (k, slot) in &want {
        if gone(k) {
            t.remove(*slot);
            assert_eq!(t.get(k), None);
            // A short value's own bytes: its encoding less the tag and length.
            removed_bytes += k.len() - 5;
        }
    }
    assert!(removed_bytes > 0);
    assert_eq!(t.key_bytes(), bytes_before - removed_bytes);
    for (k, slot) in &want {
        if !gone(k) {
            assert_eq!(t.key(*slot), k.as_slice());
        } else {
            // Freed slots are handed out again.
            let (again, new) = t.get_or_insert(k).unwrap();
            assert!(new);
            assert_eq!(t.key(again), k.as_slice());
        }
    }
    assert_eq!(t.key_bytes(), bytes_before);
    assert_eq!(t.len(), want.len());
}

/// Keys that differ in any byte hash apart (every byte of a short value is hashed).
#[test]
fn string_keys_hash_apart() {
    for width in [1usize, 3, 6, 9, 12, 14, 16, 20] {
        let n = 20_000.min(10usize.pow(width.min(9) as u32));
        let hashes: std::collections::HashSet<u64> = (0..n)
            .map(|i| hash_key(&enc(format!("{i:0width$}").as_str())))
            .collect();
        assert_eq!(hashes.len(), n, "{width}-byte keys");
    }
    // Same bytes, other type: another key, another hash.
    assert_ne!(hash_key(&enc("ab")), hash_key(&enc(&b"ab"[..])));
}

proptest! {
    #[test]
    fn key_eq_is_byte_equality(a in proptest::collection::vec(0u8..2, 0..40), flip in proptest::option::of(0usize..40)) {
        let mut b = a.clone();
        if let Some(i) = flip.filter(|&i| i < b.len()) {
            b[i] ^= 1;
        }
        prop_assert_eq!(key_eq(&a, &b), a == b);
        prop_assert!(!key_eq(&a, &b[..b.len().saturating_sub(1)]) || a.is_empty());
    }

    #[test]
    fn word_keys_are_their_encoded_bytes(v in any::<i64>(), u in any::<u64>(), small in -300i64..300, other in any::<i64>()) {
        let mut t = KeyTable::new();
        for (w, bytes) in [
            (v.word_key(), enc(v)),
            (u.word_key(), enc(u)),
            ((small as i32).word_key(), enc(small)),
            (AsKey::word_key(&&small), enc(small)),
        ] {
            let w = w.expect("integers are word keys");
            prop_assert_eq!(&w.bytes()[..], &bytes[..]);
            prop_assert_eq!(w.hash(), hash_key(&bytes));
            prop_assert_eq!(Head::of_word(w), Head::of(&bytes, 0));
            // Inserted as bytes, found as a word (and not confused with another key).
            let (slot, _) = t.get_or_insert(&bytes).unwrap();
            prop_assert_eq!(t.get_word(w, w.hash()), Some(slot));
            let o = WordKey::int(other);
            prop_assert_eq!(t.get_word(o, o.hash()), t.get(&enc(other)));
        }
        prop_assert!("1".word_key().is_none() && (1, 2).word_key().is_none());
    }

    /// A string or binary key looked up from its bytes in place hashes, heads and
    /// finds as its encoding does; keys that only start like one (tuples) are not
    /// taken for one.
    #[test]
    fn bytes_keys_are_their_encoded_bytes(
        values in proptest::collection::vec((any::<bool>(), proptest::collection::vec(any::<u8>(), 0..40)), 1..40),
        other in proptest::collection::vec(any::<u8>(), 0..40),
    ) {
        let mut t = KeyTable::new();
        let mut slots = Vec::new();
        for (is_str, v) in &values {
            let b = if *is_str {
                let s = String::from_utf8_lossy(v).into_owned();
                prop_assert_eq!(s.as_str().bytes_key(), Some(BytesKey::str(&s)));
                BytesKey { tag: tag::STR, payload: v }
            } else {
                BytesKey::bin(v)
            };
            let bytes = { let mut e = Vec::new(); b.encode(&mut e); e };
            prop_assert_eq!(BytesKey::of_encoded(&bytes), Some(b));
            prop_assert_eq!(b.encoded_len(), bytes.len());
            prop_assert_eq!(b.hash(), hash_key(&bytes));
            prop_assert_eq!(b.head(), Head::of(&bytes, 0));
            prop_assert!(b.eq_encoded(&bytes));
            let (slot, _) = t.get_or_insert(&bytes).unwrap();
            slots.push((b, slot));
        }
        for (b, slot) in slots {
            prop_assert_eq!(t.get_bytes(b, b.hash()), Some(slot));
            let mut e = Vec::new();
            b.encode(&mut e);
            prop_assert_eq!(t.key(slot), e.as_slice());
        }
        // A key not inserted is found only if it equals an inserted one.
        let o = BytesKey::bin(&other);
        let known = values.iter().any(|(is_str, v)| !is_str && v == &other);
        prop_assert_eq!(t.get_bytes(o, o.hash()).is_some(), known);
        let (tuple, pair) = (enc(("a", 1i64)), enc(("a", "b")));
        prop_assert_eq!(BytesKey::of_encoded(&tuple), None);
        prop_assert_eq!(BytesKey::of_encoded(&pair), None);
        prop_assert!(!BytesKey::str("ab").eq_encoded(&enc(("ab", "c"))));
    }

    /// Integer keys: dense runs (the direct map), far-off values that turn it
    /// off, negative and extreme values, removals, strings mixed in; every
    /// lookup path agrees with a map.
    #[test]
    fn integer_keys_match_hashmap(ops in proptest::collection::vec((0u8..4, prop_oneof![
        6 => -300i64..300,
        1 => Just(i64::MIN), 1 => Just(i64::MAX),
        1 => any::<i64>(),
    ]), 1..1500), far_late in any::<bool>(), reserve in any::<bool>()) {
        let mut t = KeyTable::new();
        let mut model = Model::default();
        let n = ops.len();
        let steps: Vec<(u8, i64, Vec<u8>)> = ops.into_iter().enumerate().map(|(i, (op, v))| {
            // Without `far_late`, far-off values only come in the last tenth.
            let v = if far_late || i * 10 >= n * 9 || (-300..300).contains(&v) { v } else { v % 300 };
            (op, v, if op == 3 { enc(format!("s{v}")) } else { enc(v) })
        }).collect();
        if reserve {
            // A reserve (for the distinct keys, as a restore makes) is a hint only.
            let distinct: std::collections::BTreeSet<&[u8]> =
                steps.iter().map(|s| s.2.as_slice()).collect();
            t.reserve_keys(distinct);
        }
        for (op, v, key) in steps {
            apply_to_both(&mut t, &mut model, key, op != 2)?;
            let w = WordKey::int(v);
            prop_assert_eq!(t.get_word(w, w.hash()), model.get(&enc(v)).copied());
            prop_assert_eq!(t.get(&enc(v)), model.get(&enc(v)).copied());
        }
        same_as_model(&t, &model)?;
    }

    #[test]
    fn table_matches_hashmap(ops in proptest::collection::vec((0u8..3, 0u16..200), 1..2000)) {
        let mut t = KeyTable::new();
        let mut model = Model::default();
        for (op, k) in ops {
            // Long keys too, to exercise compaction.
            let key = enc(format!("{k}-{}", "x".repeat((k % 7) as usize * 300)));
            apply_to_both(&mut t, &mut model, key, op != 2)?;
        }
        same_as_model(&t, &model)?;
    }
}
