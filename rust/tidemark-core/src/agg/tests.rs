use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::*;
use arrow_array::{Array, ArrayRef, Float64Array, Int32Array, Int64Array, StringArray};
use arrow_schema::{DataType, Field, Schema};

use super::*;

fn schema() -> Schema {
    Schema::new(vec![
        Field::new("i", DataType::Int32, true),
        Field::new("f", DataType::Float64, true),
        Field::new("s", DataType::Utf8, true),
    ])
}

fn cols() -> Vec<ArrayRef> {
    vec![
        Arc::new(Int32Array::from(vec![Some(3), None, Some(-1), Some(7)])),
        Arc::new(Float64Array::from(vec![
            Some(1.5),
            Some(f64::NAN),
            None,
            Some(-0.0),
        ])),
        Arc::new(StringArray::from(vec![
            Some("b"),
            Some("a"),
            None,
            Some("c"),
        ])),
    ]
}

fn run(kind: AggKind, col: Option<&str>, times: &[i64]) -> ArrayRef {
    let spec = AggSpec {
        name: "x".into(),
        kind,
        column: col.map(Into::into),
        by: None,
    };
    let b = BoundAgg::bind(&spec, &schema()).unwrap();
    let input = b.input(&cols()).unwrap();
    let mut acc = b.new_acc();
    for (row, &t) in times.iter().enumerate() {
        acc.update(&input, row, t);
    }
    b.finish(std::iter::once(&acc)).unwrap()
}

#[test]
fn values() {
    let t = [10, 20, 30, 40];
    let c = run(AggKind::Count, None, &t);
    assert_eq!(c.as_primitive::<Int64Type>().value(0), 4);
    let c = run(AggKind::Count, Some("i"), &t);
    assert_eq!(c.as_primitive::<Int64Type>().value(0), 3);
    let s = run(AggKind::Sum, Some("i"), &t);
    assert_eq!(s.as_primitive::<Int64Type>().value(0), 9);
    let m = run(AggKind::Max, Some("f"), &t);
    assert!(
        m.as_primitive::<Float64Type>().value(0).is_nan(),
        "NaN is greatest"
    );
    let m = run(AggKind::Min, Some("i"), &t);
    assert_eq!(m.data_type(), &DataType::Int32);
    assert_eq!(m.as_primitive::<Int32Type>().value(0), -1);
    let f = run(AggKind::First, Some("s"), &t);
    assert_eq!(f.as_string::<i32>().value(0), "b");
    let l = run(AggKind::Last, Some("s"), &t);
    assert_eq!(l.as_string::<i32>().value(0), "c");
    let v = run(AggKind::Variance { ddof: 1 }, Some("i"), &t);
    let mean = 3.0;
    let expect =
        ((3.0f64 - mean).powi(2) + (-1.0f64 - mean).powi(2) + (7.0f64 - mean).powi(2)) / 2.0;
    assert!((v.as_primitive::<Float64Type>().value(0) - expect).abs() < 1e-12);
}

#[test]
fn bind_errors() {
    let s = schema();
    let e = BoundAgg::bind(
        &AggSpec {
            name: "x".into(),
            kind: AggKind::Sum,
            column: Some("s".into()),
            by: None,
        },
        &s,
    )
    .unwrap_err();
    assert!(e.to_string().contains("integer or float"), "{e}");
    let e = BoundAgg::bind(
        &AggSpec {
            name: "x".into(),
            kind: AggKind::Sum,
            column: Some("zz".into()),
            by: None,
        },
        &s,
    )
    .unwrap_err();
    assert!(matches!(e, TidemarkError::MissingColumn { .. }));
    let e = BoundAgg::bind(
        &AggSpec {
            name: "x".into(),
            kind: AggKind::Mean,
            column: None,
            by: None,
        },
        &s,
    )
    .unwrap_err();
    assert!(e.to_string().contains("needs a column"), "{e}");
}

#[test]
fn decimals_follow_spark_types_and_stay_exact() {
    use arrow_array::Decimal128Array;
    let sch = Schema::new(vec![Field::new("d", DataType::Decimal128(10, 2), true)]);
    // 1.25, -0.50, null, 3.00, 0.01
    let col: ArrayRef = Arc::new(
        Decimal128Array::from(vec![Some(125), Some(-50), None, Some(300), Some(1)])
            .with_precision_and_scale(10, 2)
            .unwrap(),
    );
    let out = |kind: AggKind| {
        let b = BoundAgg::bind(&AggSpec::new("x", kind, Some("d")), &sch).unwrap();
        let input = b.input(std::slice::from_ref(&col)).unwrap();
        let (mut l, mut r) = (b.new_acc(), b.new_acc());
        for row in 0..5 {
            let acc = if row % 2 == 0 { &mut l } else { &mut r };
            acc.update(&input, row, row as i64);
        }
        l.merge(&r);
        (
            b.output_field().data_type().clone(),
            b.finish(std::iter::once(&l)).unwrap(),
        )
    };
    let dec = |a: &ArrayRef| a.as_primitive::<Decimal128Type>().value(0);
    let (t, a) = out(AggKind::Sum);
    assert_eq!((t, dec(&a)), (DataType::Decimal128(20, 2), 376));
    // 3.76 / 4 = 0.94 at 4 more places.
    let (t, a) = out(AggKind::Mean);
    assert_eq!((t, dec(&a)), (DataType::Decimal128(14, 6), 940_000));
    let (t, a) = out(AggKind::Min);
    assert_eq!((t, dec(&a)), (DataType::Decimal128(10, 2), -50));
    let (_, a) = out(AggKind::Max);
    assert_eq!(dec(&a), 300);
    let (_, a) = out(AggKind::Last);
    assert_eq!(dec(&a), 1);
    let (t, a) = out(AggKind::Variance { ddof: 0 });
    assert_eq!(t, DataType::Float64);
    let v = a.as_primitive::<Float64Type>().value(0);
    let xs = [1.25f64, -0.5, 3.0, 0.01];
    let m = xs.iter().sum::<f64>() / 4.0;
    let want = xs.iter().map(|x| (x - m).powi(2)).sum::<f64>() / 4.0;
    assert!((v - want).abs() < 1e-12, "{v} vs {want}");

    // The aggregate of `n` copies of one decimal(38, 0) value.
    let sch = Schema::new(vec![Field::new("d", DataType::Decimal128(38, 0), true)]);
    let over_copies = |kind: AggKind, v: i128, n: usize| {
        let col: ArrayRef = Arc::new(
            Decimal128Array::from(vec![v; n])
                .with_precision_and_scale(38, 0)
                .unwrap(),
        );
        let b = BoundAgg::bind(&AggSpec::new("x", kind, Some("d")), &sch).unwrap();
        let input = b.input(&[col]).unwrap();
        let mut acc = b.new_acc();
        (0..n).for_each(|row| acc.update(&input, row, 0));
        b.finish(std::iter::once(&acc)).unwrap()
    };
    // A sum beyond the output precision is null, not a wrapped value.
    assert!(over_copies(AggKind::Sum, decimal::pow10(38) - 1, 3).is_null(0));
    // The mean of 20,000 copies of 10^34 - 1 (a decimal(38, 4) mean) is that value,
    // though their sum leaves the i128 range.
    let mean = over_copies(AggKind::Mean, decimal::pow10(34) - 1, 20_000);
    assert_eq!(mean.data_type(), &DataType::Decimal128(38, 4));
    assert_eq!(dec(&mean), (decimal::pow10(34) - 1) * 10_000);
}

/// Every open window holds one state per aggregate: decimal states (128-bit values)
/// must not make all of them larger.
#[test]
fn states_stay_small() {
    assert!(std::mem::size_of::<Acc>() <= 48);
    assert!(std::mem::size_of::<Scalar>() <= 24);
}

#[test]
fn merge_equals_single_pass() {
    let spec = AggSpec {
        name: "x".into(),
        kind: AggKind::Stddev { ddof: 1 },
        column: Some("f".into()),
        by: None,
    };
    let sch = Schema::new(vec![Field::new("f", DataType::Float64, true)]);
    let b = BoundAgg::bind(&spec, &sch).unwrap();
    let vals: Vec<f64> = (0..100).map(|i| 1e6 + (i as f64) * 0.37).collect();
    let input = b
        .input(&[Arc::new(Float64Array::from(vals.clone())) as ArrayRef])
        .unwrap();
    let mut all = b.new_acc();
    let (mut l, mut r) = (b.new_acc(), b.new_acc());
    for i in 0..100 {
        all.update(&input, i, 0);
        if i % 3 == 0 {
            l.update(&input, i, 0)
        } else {
            r.update(&input, i, 0)
        }
    }
    r.merge(&l);
    assert_eq!(
        all.float_value(spec.kind).unwrap().to_bits(),
        r.float_value(spec.kind).unwrap().to_bits()
    );
    let mean = vals.iter().sum::<f64>() / 100.0;
    let sd = (vals.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / 99.0).sqrt();
    assert!((all.float_value(spec.kind).unwrap() - sd).abs() / sd < 1e-9);
}

/// The int64 result of an aggregate over `input`'s rows in one pass, and over two
/// parts (`left[i]`: row `i` in the first) merged in either order.
fn one_pass_and_merged(b: &BoundAgg, input: &Input, left: &[bool]) -> [Option<i64>; 3] {
    let (mut all, mut l, mut r) = (b.new_acc(), b.new_acc(), b.new_acc());
    for (i, &first) in left.iter().enumerate() {
        all.update(input, i, 0);
        if first {
            l.update(input, i, 0)
        } else {
            r.update(input, i, 0)
        }
    }
    let mut lr = l.clone();
    lr.merge(&r);
    r.merge(&l);
    [all, lr, r].map(|a| {
        let arr = b.finish(std::iter::once(&a)).unwrap();
        let arr = arr.as_primitive::<Int64Type>();
        arr.is_valid(0).then(|| arr.value(0))
    })
}

proptest::proptest! {
    /// Distinct counts, exact and estimated, are the same from one pass as from
    /// two parts merged in either order.
    #[test]
    fn distinct_counts_merge_as_one_pass(
        vals in proptest::collection::vec(proptest::option::of(-50i64..50), 0..300),
        split in proptest::collection::vec(proptest::bool::ANY, 300),
    ) {
        let sch = Schema::new(vec![Field::new("v", DataType::Int64, true)]);
        let col: ArrayRef = Arc::new(Int64Array::from(vals.clone()));
        for kind in [AggKind::CountDistinct, AggKind::ApproxCountDistinct] {
            let spec = AggSpec::new("x", kind, Some("v"));
            let b = BoundAgg::bind(&spec, &sch).unwrap();
            let input = b.input(std::slice::from_ref(&col)).unwrap();
            let [all, lr, rl] = one_pass_and_merged(&b, &input, &split[..vals.len()]);
            proptest::prop_assert_eq!(lr, all);
            proptest::prop_assert_eq!(rl, all);
            if kind == AggKind::CountDistinct {
                let mut want: Vec<i64> = vals.iter().flatten().copied().collect();
                want.sort_unstable();
                want.dedup();
                proptest::prop_assert_eq!(all, Some(want.len() as i64));
            }
        }
    }

    /// `min_by` / `max_by` keep the same row from one pass as from two parts
    /// merged in either order, ties in the ordering column included.
    #[test]
    fn ordered_values_merge_as_one_pass(
        rows in proptest::collection::vec(
            (proptest::option::of(0i64..5), proptest::option::of(0i64..20)), 0..60),
        split in proptest::collection::vec(proptest::bool::ANY, 60),
    ) {
        let sch = Schema::new(vec![
            Field::new("o", DataType::Int64, true),
            Field::new("v", DataType::Int64, true),
        ]);
        let o: ArrayRef = Arc::new(Int64Array::from(rows.iter().map(|r| r.0).collect::<Vec<_>>()));
        let v: ArrayRef = Arc::new(Int64Array::from(rows.iter().map(|r| r.1).collect::<Vec<_>>()));
        for kind in [AggKind::MinBy, AggKind::MaxBy] {
            let b = BoundAgg::bind(&AggSpec::ordered("x", kind, "v", "o"), &sch).unwrap();
            let input = b.input(&[o.clone(), v.clone()]).unwrap();
            let [all, lr, rl] = one_pass_and_merged(&b, &input, &split[..rows.len()]);
            proptest::prop_assert_eq!(lr, all);
            proptest::prop_assert_eq!(rl, all);
        }
    }
}

/// A sum over lists of floats (an exact fold's parts) adds every element exactly, a
/// null list adds nothing (a window of null lists alone sums to null), and a
/// `List` column reads as its `LargeList` form; other aggregates refuse such a column.
#[test]
fn sum_of_float_parts() {
    use arrow_array::builder::{Float64Builder, ListBuilder};

    let mut lists = ListBuilder::new(Float64Builder::new());
    for row in [
        Some(vec![Some(1e100), Some(1.0)]),
        None,
        Some(vec![Some(-1e100), None]),
        Some(vec![]),
    ] {
        match row {
            Some(values) => {
                for v in values {
                    lists.values().append_option(v);
                }
                lists.append(true);
            }
            None => lists.append(false),
        }
    }
    let col: ArrayRef = Arc::new(lists.finish());
    let schema = Schema::new(vec![Field::new("p", col.data_type().clone(), true)]);
    let spec = |kind| AggSpec {
        name: "x".into(),
        kind,
        column: Some("p".into()),
        by: None,
    };
    let b = BoundAgg::bind(&spec(AggKind::Sum), &schema).unwrap();
    assert_eq!(b.output_field().data_type(), &DataType::Float64);
    let input = b.input(&[col]).unwrap();
    let sum = |rows: &[usize]| {
        let mut acc = b.new_acc();
        for &r in rows {
            acc.update(&input, r, 0);
        }
        b.finish(std::iter::once(&acc)).unwrap()
    };
    assert_eq!(
        sum(&[0, 1, 2, 3]).as_primitive::<Float64Type>().value(0),
        1.0
    );
    assert_eq!(sum(&[2, 0]).as_primitive::<Float64Type>().value(0), 1.0);
    assert!(sum(&[1]).is_null(0));
    assert_eq!(sum(&[3]).as_primitive::<Float64Type>().value(0), 0.0);
    assert!(BoundAgg::bind(&spec(AggKind::Mean), &schema).is_err());
    assert!(BoundAgg::bind(&spec(AggKind::Max), &schema).is_err());
}
