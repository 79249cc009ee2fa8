use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray};
use arrow_schema::{DataType, Field, Schema, TimeUnit};
use proptest::prelude::*;

use super::*;

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("ts", DataType::Int64, true),
        Field::new("id", DataType::Int64, false),
    ]))
}

/// A batch of (event time in ms, id) rows; `None` is a null event time.
fn batch(rows: &[(Option<i64>, i64)]) -> RecordBatch {
    let ts: Int64Array = rows.iter().map(|r| r.0).collect();
    let id: Int64Array = rows.iter().map(|r| Some(r.1)).collect();
    RecordBatch::try_new(schema(), vec![Arc::new(ts), Arc::new(id)]).unwrap()
}

fn op(tolerance_ms: i64, late: LatePolicy) -> ReorderOperator {
    let mut cfg = ReorderConfig::new("ts", tolerance_ms * 1000);
    cfg.event_time_type = Some("unixtimestamp_ms".into());
    cfg.late = late;
    ReorderOperator::new(cfg).unwrap()
}

fn ids(b: &RecordBatch) -> Vec<i64> {
    b.column(1).as_primitive::<Int64Type>().values().to_vec()
}

fn times(b: &RecordBatch) -> Vec<i64> {
    b.column(0).as_primitive::<Int64Type>().values().to_vec()
}

#[test]
fn releases_in_event_time_order_then_the_watermark() {
    let mut r = op(2_000, LatePolicy::Drop);
    let out = r
        .process(
            &batch(&[
                (Some(5_000), 0),
                (Some(1_000), 1),
                (Some(3_000), 2),
                (Some(2_000), 3),
            ]),
            None,
        )
        .unwrap();
    assert_eq!(out.watermark, Some(3_000_000));
    assert_eq!(times(&out.rows), vec![1_000, 2_000]);
    let out = r
        .process(&batch(&[(Some(4_000), 4), (Some(8_000), 5)]), None)
        .unwrap();
    assert_eq!(out.watermark, Some(6_000_000));
    assert_eq!(times(&out.rows), vec![3_000, 4_000, 5_000]);
    assert_eq!(ids(&out.rows), vec![2, 4, 0]);
    let m = r.metrics();
    assert_eq!(m.buffer_size, 1);
    assert_eq!(m.watermark_emitted_count, 2);
    assert_eq!(m.max_timestamp_seen, Some(8_000_000));
    let out = r.flush().unwrap();
    assert_eq!(out.watermark, None, "no artificial watermark at the end");
    assert_eq!(ids(&out.rows), vec![5]);
    assert_eq!(r.metrics().buffer_size, 0);
}

#[test]
fn ties_keep_arrival_order_across_batches() {
    let mut r = op(0, LatePolicy::Drop);
    r.process(&batch(&[(Some(10), 0), (Some(5), 1), (Some(5), 2)]), None)
        .unwrap();
    let out = r
        .process(&batch(&[(Some(10), 3), (Some(5), 4)]), None)
        .unwrap();
    // 5 is behind the watermark (10 ms) now: late.
    assert_eq!(r.metrics().late_dropped_count, 1);
    assert!(out.rows.num_rows() == 0 && out.watermark.is_none());
    let out = r.process(&batch(&[(Some(11), 5)]), None).unwrap();
    assert_eq!(ids(&out.rows), vec![0, 3], "ties in arrival order");
}

#[test]
fn late_rows_go_to_the_side_output_and_errors_carry_a_reason() {
    let mut r = op(1_000, LatePolicy::SideOutput);
    r.process(&batch(&[(Some(10_000), 0)]), None).unwrap();
    let out = r
        .process(
            &batch(&[(Some(1_000), 1), (None, 2), (Some(9_500), 3)]),
            None,
        )
        .unwrap();
    assert_eq!(ids(&out.late), vec![1]);
    assert_eq!(out.late.schema(), schema());
    assert_eq!(ids(&out.errors), vec![2]);
    let reason = out
        .errors
        .column_by_name("reason")
        .unwrap()
        .as_string::<i32>();
    assert!(reason.value(0).contains("null"), "{}", reason.value(0));
    assert_eq!(r.metrics().late_dropped_count, 1);
    assert_eq!(r.metrics().rows_error, 1);
}

#[test]
fn validation_names_the_problem() {
    let mut cfg = ReorderConfig::new("ts", 0);
    cfg.event_time_type = Some("unixtime".into());
    let e = ReorderOperator::new(cfg).unwrap_err().to_string();
    assert!(
        e.contains("unixtimestamp_ms") && e.contains("unixtime"),
        "{e}"
    );
    let e = ReorderOperator::new(ReorderConfig::new("ts", -1))
        .unwrap_err()
        .to_string();
    assert!(e.contains("late_tolerance"), "{e}");
    let mut r = ReorderOperator::new(ReorderConfig::new("event_time", 0)).unwrap();
    let e = r.process(&batch(&[(Some(1), 0)]), None).unwrap_err();
    assert!(matches!(e, TidemarkError::MissingColumn { .. }), "{e}");
    assert!(
        e.to_string().contains("ts") && e.to_string().contains("id"),
        "{e}"
    );
    // An int64 column without a type name is not taken as a guess.
    let mut r = ReorderOperator::new(ReorderConfig::new("ts", 0)).unwrap();
    assert!(r.process(&batch(&[(Some(1), 0)]), None).is_err());
}

#[test]
fn schema_change_mid_stream_is_an_error() {
    let mut r = op(0, LatePolicy::Drop);
    r.process(&batch(&[(Some(1), 0)]), None).unwrap();
    let other = RecordBatch::try_new(
        Arc::new(Schema::new(vec![Field::new("ts", DataType::Int64, true)])),
        vec![Arc::new(Int64Array::from(vec![2]))],
    )
    .unwrap();
    let e = r.process(&other, None).unwrap_err().to_string();
    assert!(e.contains("schema changed"), "{e}");
}

#[test]
fn timestamp_columns_and_other_columns_pass_through_unchanged() {
    let s = Arc::new(Schema::new(vec![
        Field::new(
            "t",
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            true,
        ),
        Field::new("name", DataType::Utf8, true),
    ]));
    let b = RecordBatch::try_new(
        s.clone(),
        vec![
            Arc::new(TimestampMicrosecondArray::from(vec![30, 10, 20]).with_timezone("UTC"))
                as ArrayRef,
            Arc::new(StringArray::from(vec!["c", "a", "b"])),
        ],
    )
    .unwrap();
    let mut r = ReorderOperator::new(ReorderConfig::new("t", 0)).unwrap();
    let out = r.process(&b, None).unwrap();
    assert_eq!(out.rows.schema(), s);
    let names = out.rows.column(1).as_string::<i32>();
    assert_eq!(names.iter().flatten().collect::<Vec<_>>(), vec!["a", "b"]);
    assert_eq!(out.watermark, Some(30));
}

#[test]
fn held_rows_take_a_later_batchs_string_layout_and_time_zone() {
    let batch_in = |ts: Vec<i64>, names: Vec<&str>, name: DataType, zone: &str| {
        let t: ArrayRef = Arc::new(TimestampMicrosecondArray::from(ts).with_timezone(zone));
        let n: ArrayRef = Arc::new(StringArray::from(names));
        let n = arrow_cast::cast(&n, &name).unwrap();
        RecordBatch::try_from_iter(vec![("t", t), ("name", n)]).unwrap()
    };
    let mut r = ReorderOperator::new(ReorderConfig::new("t", 10)).unwrap();
    let out = r
        .process(
            &batch_in(vec![30, 10], vec!["c", "a"], DataType::Utf8, "UTC"),
            None,
        )
        .unwrap();
    assert_eq!(out.rows.num_rows(), 1); // 10 released at watermark 20; 30 held
                                        // Restored, then a batch of large strings in another zone: the held row comes out
                                        // with the batch's rows, in its layout.
    let mut r = ReorderOperator::restore(r.config().clone(), &r.snapshot().unwrap()).unwrap();
    let b = batch_in(
        vec![25, 50],
        vec!["b", "d"],
        DataType::LargeUtf8,
        "Asia/Tokyo",
    );
    let out = r.process(&b, None).unwrap();
    assert_eq!(out.rows.schema(), b.schema());
    let names = arrow_cast::cast(out.rows.column(1), &DataType::Utf8).unwrap();
    let names: Vec<_> = names.as_string::<i32>().iter().flatten().collect();
    assert_eq!(names, vec!["b", "c"]);
    // Another kind of values is refused by name, and changes nothing.
    let ints: ArrayRef = Arc::new(Int64Array::from(vec![7]));
    let t: ArrayRef = Arc::new(TimestampMicrosecondArray::from(vec![60]).with_timezone("UTC"));
    let bad = RecordBatch::try_from_iter(vec![("t", t), ("name", ints)]).unwrap();
    let e = r.process(&bad, None).unwrap_err().to_string();
    assert!(e.contains("column \"name\" changed type"), "{e}");
    let out = r.flush().unwrap();
    assert_eq!(out.rows.schema(), b.schema());
    assert_eq!(out.rows.num_rows(), 1);
}

#[test]
fn snapshot_restores_the_buffer_and_rejects_other_configurations() {
    let mut r = op(5_000, LatePolicy::Drop);
    r.process(&batch(&[(Some(9_000), 0), (Some(4_000), 1)]), None)
        .unwrap();
    r.process(&batch(&[(Some(7_000), 2), (Some(6_000), 3)]), None)
        .unwrap();
    let snap = r.snapshot().unwrap();
    let mut back = ReorderOperator::restore(r.config().clone(), &snap).unwrap();
    // Same counters and buffer (its memory layout after decoding may differ).
    let counters = |m: ReorderMetrics| ReorderMetrics {
        buffer_bytes: 0,
        ..m
    };
    assert_eq!(counters(back.metrics()), counters(r.metrics()));
    let a = r.process(&batch(&[(Some(20_000), 4)]), None).unwrap();
    let b = back.process(&batch(&[(Some(20_000), 4)]), None).unwrap();
    assert_eq!(a.rows, b.rows);
    assert_eq!(a.watermark, b.watermark);
    assert_eq!(ids(&a.rows), vec![1, 3, 2, 0]);
    let other = ReorderConfig::new("ts", 1);
    assert!(matches!(
        ReorderOperator::restore(other, &snap),
        Err(TidemarkError::StateCorrupted(_))
    ));
    let mut cut = snap.clone();
    cut.truncate(snap.len() - 3);
    assert!(ReorderOperator::restore(r.config().clone(), &cut).is_err());
}

#[test]
fn many_runs_are_compacted_without_changing_the_order() {
    let mut r = op(1_000_000, LatePolicy::Drop);
    let mut expected = Vec::new();
    for b in 0..40i64 {
        let rows: Vec<(Option<i64>, i64)> = (0..10)
            .map(|i| (Some((i * 7 + b * 3) % 50), b * 10 + i))
            .collect();
        expected.extend(rows.iter().map(|r| (r.0.unwrap(), r.1)));
        r.process(&batch(&rows), None).unwrap();
        assert!(r.runs.len() <= MAX_RUNS + 1);
    }
    expected.sort_by_key(|e| e.0); // stable: arrival order on ties
    let out = r.flush().unwrap();
    let got: Vec<(i64, i64)> = times(&out.rows).into_iter().zip(ids(&out.rows)).collect();
    assert_eq!(got, expected);
}

/// The naive model: the reference algorithm, row by row with a sorted list.
fn model(batches: &[Vec<(Option<i64>, i64)>], tol: i64) -> (Vec<i64>, Vec<Option<i64>>, Vec<i64>) {
    let (mut wm, mut max) = (i64::MIN, i64::MIN);
    let mut buf: Vec<(i64, u64, i64)> = Vec::new();
    let (mut seq, mut released, mut wms, mut late) = (0u64, Vec::new(), Vec::new(), Vec::new());
    for b in batches {
        for &(t, id) in b {
            let Some(t) = t else { continue };
            let t = t * 1000;
            if t < wm {
                late.push(id);
                continue;
            }
            max = max.max(t);
            buf.push((t, seq, id));
            seq += 1;
        }
        buf.sort();
        let mut emitted = None;
        if max != i64::MIN {
            let target = wm.max(max - tol);
            if target > wm {
                let n = buf.iter().take_while(|e| e.0 < target).count();
                released.extend(buf.drain(..n).map(|e| e.2));
                wm = target;
                emitted = Some(target);
            }
        }
        wms.push(emitted);
    }
    released.extend(buf.iter().map(|e| e.2));
    (released, wms, late)
}

proptest! {
    #[test]
    fn matches_the_row_at_a_time_model(
        batches in proptest::collection::vec(
            proptest::collection::vec((proptest::option::weighted(0.95, 0i64..200), 0i64..1), 0..30),
            1..12),
        tol in 0i64..60,
        snapshot_at in 0usize..12,
    ) {
        // Unique ids, so the order is checked row by row.
        let mut next = 0;
        let batches: Vec<Vec<(Option<i64>, i64)>> = batches.into_iter().map(|b| {
            b.into_iter().map(|(t, _)| { next += 1; (t, next) }).collect()
        }).collect();
        let (want, want_wms, want_late) = model(&batches, tol * 1000);
        let mut r = op(tol, LatePolicy::SideOutput);
        let (mut got, mut wms, mut late, mut errors) = (Vec::new(), Vec::new(), Vec::new(), 0);
        let mut last_wm = i64::MIN;
        let mut last_ts = i64::MIN;
        for (i, b) in batches.iter().enumerate() {
            if i == snapshot_at {
                r = ReorderOperator::restore(r.config().clone(), &r.snapshot().unwrap()).unwrap();
            }
            let out = r.process(&batch(b), None).unwrap();
            for t in times(&out.rows) {
                // Non-decreasing, and never below a watermark already emitted.
                prop_assert!(t >= last_ts && t * 1000 >= last_wm);
                last_ts = t;
            }
            if let Some(w) = out.watermark {
                prop_assert!(w > last_wm);
                last_wm = w;
            }
            got.extend(ids(&out.rows));
            wms.push(out.watermark);
            late.extend(ids(&out.late));
            errors += out.errors.num_rows();
        }
        got.extend(ids(&r.flush().unwrap().rows));
        prop_assert_eq!(&got, &want);
        prop_assert_eq!(wms, want_wms);
        prop_assert_eq!(&late, &want_late);
        // Nothing lost: every row released once, late, or an error.
        let total: usize = batches.iter().map(Vec::len).sum();
        prop_assert_eq!(got.len() + late.len() + errors, total);
        prop_assert_eq!(r.metrics().buffer_size, 0);
    }
}
