use arrow_array::types::Int64Type;
use arrow_array::{Float64Array, Int64Array, StringArray, TimestampMicrosecondArray};
use arrow_schema::{DataType, TimeUnit};

use super::order::{by_window_cell, grid_order, output_order, packed_order};
use super::*;
use crate::agg::{AggKind, AggSpec};
use crate::clock::ManualClock;
use crate::key::KeyBytes;

fn cfg(window: WindowSpec, scope: Scope) -> PipelineConfig {
    let aggs = vec![
        AggSpec::new("n", AggKind::Count, None),
        AggSpec::new("s", AggKind::Sum, Some("v")),
    ];
    // The unit tests below pin the per-row rule's timing (a window closes in the call
    // that moves the watermark past it); the window rules have tests of their own
    // (`late_rules_*`), and the property tests run under every rule.
    PipelineConfig {
        scope,
        late_rule: LateRule::Row,
        ..PipelineConfig::new(&["k"], "ts", window, aggs)
    }
}

fn batch(rows: &[(&str, i64, i64)]) -> RecordBatch {
    let values = Int64Array::from(rows.iter().map(|r| r.2).collect::<Vec<_>>());
    batch_with(rows.iter().map(|r| (r.0, r.1)), Arc::new(values))
}

/// Columns `k` (string), `ts` (timestamp, UTC) and `v` (`values`).
fn batch_with<'a>(rows: impl Iterator<Item = (&'a str, i64)>, values: ArrayRef) -> RecordBatch {
    let (k, ts): (Vec<&str>, Vec<i64>) = rows.unzip();
    RecordBatch::try_from_iter(vec![
        ("k", Arc::new(StringArray::from(k)) as ArrayRef),
        (
            "ts",
            Arc::new(TimestampMicrosecondArray::from(ts).with_timezone("UTC")) as ArrayRef,
        ),
        ("v", values),
    ])
    .unwrap()
}

/// The column names of `batch`.
fn column_names(batch: &RecordBatch) -> Vec<String> {
    batch
        .schema()
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect()
}

/// [`cfg`] with 10-tick tumbling windows, per-key watermarks and keys idle after
/// 1,000 ticks of the clock.
fn keyed_idle_cfg() -> PipelineConfig {
    PipelineConfig {
        idle_timeout: Some(1_000),
        idleness: Idleness::Clock,
        ..cfg(
            WindowSpec::Tumbling {
                size: 10,
                offset: 0,
            },
            Scope::Key,
        )
    }
}

fn op(c: PipelineConfig) -> (Operator, ManualClock) {
    let clock = ManualClock::new(0);
    (Operator::new(c, Arc::new(clock.clone())).unwrap(), clock)
}

/// (key, start, end, count, sum) rows of a windows output, its key in any string
/// layout and its bounds in any timestamp unit and zone (read as UTC microseconds).
fn rows(out: &RecordBatch) -> Vec<(String, i64, i64, i64, Option<i64>)> {
    let utc = DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()));
    let k = arrow_cast::cast(out.column(0), &DataType::Utf8).unwrap();
    let k = k.as_string::<i32>();
    let bound = |i: usize| arrow_cast::cast(out.column(i), &utc).unwrap();
    let (s, e) = (bound(1), bound(2));
    let s = s.as_primitive::<arrow_array::types::TimestampMicrosecondType>();
    let e = e.as_primitive::<arrow_array::types::TimestampMicrosecondType>();
    let n = out.column(3).as_primitive::<Int64Type>();
    let sum = out.column(4).as_primitive::<Int64Type>();
    (0..out.num_rows())
        .map(|i| {
            (
                k.value(i).to_string(),
                s.value(i),
                e.value(i),
                n.value(i),
                sum.is_valid(i).then(|| sum.value(i)),
            )
        })
        .collect()
}

#[test]
fn tumbling_windows_close_on_the_global_watermark() {
    let (mut o, _) = op(cfg(
        WindowSpec::Tumbling {
            size: 10,
            offset: 0,
        },
        Scope::Global,
    ));
    let out = o
        .process(&batch(&[("a", 1, 1), ("a", 5, 2), ("b", 12, 3)]), None)
        .unwrap();
    // Watermark is 12 after the batch: [0, 10) closed.
    assert_eq!(rows(&out.windows), vec![("a".into(), 0, 10, 2, Some(3))]);
    let out = o
        .process(&batch(&[("a", 8, 100), ("b", 25, 1)]), None)
        .unwrap();
    assert_eq!(out.late.num_rows(), 1, "8 < W=12 at batch start");
    assert_eq!(rows(&out.windows), vec![("b".into(), 10, 20, 1, Some(3))]);
    let out = o.flush().unwrap();
    assert_eq!(rows(&out.windows), vec![("b".into(), 20, 30, 1, Some(1))]);
    assert_eq!(o.metrics().windows_open, 0);
    assert_eq!(o.metrics().late_dropped_count, 1);
}

#[test]
fn rows_of_one_batch_are_judged_against_the_watermark_at_batch_start() {
    let (mut o, _) = op(cfg(
        WindowSpec::Tumbling {
            size: 10,
            offset: 0,
        },
        Scope::Global,
    ));
    // 100 would make 1 late if judged row by row; batch semantics keep it.
    let out = o
        .process(&batch(&[("a", 100, 1), ("a", 1, 1)]), None)
        .unwrap();
    assert_eq!(out.late.num_rows(), 0);
    assert_eq!(rows(&out.windows), vec![("a".into(), 0, 10, 1, Some(1))]);
}

#[test]
fn test_keyed_window_operator_uses_key_watermark() {
    let (mut o, _) = op(cfg(
        WindowSpec::Tumbling {
            size: 10,
            offset: 0,
        },
        Scope::Key,
    ));
    o.process(&batch(&[("fast", 100, 1), ("slow", 1, 1)]), None)
        .unwrap();
    let out = o
        .process(&batch(&[("slow", 5, 1), ("fast", 50, 1)]), None)
        .unwrap();
    assert_eq!(out.late.num_rows(), 1, "only fast's row at 50 is late");
    assert_eq!(
        o.key_watermark(
            &crate::key::KeyColumns::single(Arc::new(StringArray::from(vec!["slow"])))
                .unwrap()
                .key(0)
        ),
        Some(5)
    );
    let out = o.process(&batch(&[("slow", 30, 1)]), None).unwrap();
    assert_eq!(rows(&out.windows), vec![("slow".into(), 0, 10, 2, Some(2))]);
}

#[test]
fn idle_key_windows_close_on_the_global_watermark() {
    let c = keyed_idle_cfg();
    let (mut o, clock) = op(c);
    o.process(&batch(&[("quiet", 3, 1), ("busy", 4, 1)]), None)
        .unwrap();
    clock.advance(2_000);
    let out = o.process(&batch(&[("busy", 50, 1)]), None).unwrap();
    // busy's own window closed by its watermark; quiet is idle: closed by the global.
    assert_eq!(
        rows(&out.windows),
        vec![
            ("busy".into(), 0, 10, 1, Some(1)),
            ("quiet".into(), 0, 10, 1, Some(1))
        ]
    );
    let m = o.metrics();
    assert_eq!(m.windows_closed_by_watermark, 1);
    assert_eq!(m.windows_closed_by_timer, 1);
}

#[test]
fn sessions_merge_and_close() {
    let (mut o, _) = op(cfg(WindowSpec::Session { gap: 10 }, Scope::Global));
    let out = o
        .process(&batch(&[("a", 0, 1), ("a", 25, 2)]), None)
        .unwrap();
    assert_eq!(
        rows(&out.windows),
        vec![("a".into(), 0, 10, 1, Some(1))],
        "W=25 closed [0,10)"
    );
    // 30 extends [25,35) to [25,40); 41 starts [41,51); W=41 closes [25,40).
    let out = o
        .process(&batch(&[("a", 41, 4), ("a", 30, 3)]), None)
        .unwrap();
    assert_eq!(rows(&out.windows), vec![("a".into(), 25, 40, 2, Some(5))]);
    let out = o.flush().unwrap();
    assert_eq!(rows(&out.windows), vec![("a".into(), 41, 51, 1, Some(4))]);

    // Events exactly `gap` apart are one session (touching sessions merge, as in
    // Spark and Flink).
    let (mut o, _) = op(cfg(WindowSpec::Session { gap: 10 }, Scope::Global));
    o.process(&batch(&[("a", 0, 1), ("a", 10, 2), ("a", 20, 3)]), None)
        .unwrap();
    let out = o.flush().unwrap();
    assert_eq!(rows(&out.windows), vec![("a".into(), 0, 30, 3, Some(6))]);

    let mut c = cfg(WindowSpec::Session { gap: 10 }, Scope::Global);
    c.delay = 20;
    let (mut o, _) = op(c);
    o.process(&batch(&[("a", 0, 1), ("a", 15, 2)]), None)
        .unwrap();
    o.process(&batch(&[("a", 8, 3)]), None).unwrap(); // bridges [0,10) and [15,25)
    assert_eq!(o.metrics().sessions_merged, 1);
    let out = o.flush().unwrap();
    assert_eq!(rows(&out.windows), vec![("a".into(), 0, 25, 3, Some(6))]);
}

#[test]
fn seed_watermark_closes_session_at_the_right_time() {
    // Session closure on the watermark: gap 1000, events at 0 and 500, then 3000.
    let mut c = cfg(WindowSpec::Session { gap: 1000 }, Scope::Global);
    c.keys = vec![];
    let (mut o, _) = op(c);
    let out = o
        .process(&batch(&[("x", 0, 10), ("x", 500, 20)]), None)
        .unwrap();
    assert_eq!(out.windows.num_rows(), 0, "no output yet (on_window_close)");
    let out = o.process(&batch(&[("x", 3000, 100)]), None).unwrap();
    assert_eq!(out.windows.num_rows(), 1);
    let s = out
        .windows
        .column(0)
        .as_primitive::<arrow_array::types::TimestampMicrosecondType>();
    let e = out
        .windows
        .column(1)
        .as_primitive::<arrow_array::types::TimestampMicrosecondType>();
    let total = out.windows.column(3).as_primitive::<Int64Type>();
    assert_eq!((s.value(0), e.value(0), total.value(0)), (0, 1500, 30));
    assert_eq!(o.metrics().sessions_closed_by_timer, 1);
}

#[test]
fn snapshot_restore_gives_identical_output() {
    let c = cfg(
        WindowSpec::Sliding {
            size: 20,
            slide: 10,
            offset: 0,
        },
        Scope::Key,
    );
    let batches = [
        batch(&[("a", 1, 1), ("b", 3, 2), ("a", 12, 3)]),
        batch(&[("b", 22, 4), ("a", 30, 5)]),
        batch(&[("a", 45, 6), ("b", 41, 7), ("c", 5, 8)]),
    ];
    let (mut full, _) = op(c.clone());
    let mut expect = vec![];
    for b in &batches {
        expect.push(rows(&full.process(b, None).unwrap().windows));
    }
    expect.push(rows(&full.flush().unwrap().windows));
    for cut in 0..batches.len() {
        let (mut o, clock) = op(c.clone());
        let mut got = vec![];
        for b in &batches[..=cut] {
            got.push(rows(&o.process(b, None).unwrap().windows));
        }
        let snap = o.snapshot();
        drop(o);
        let mut o = Operator::restore(c.clone(), Arc::new(clock), &snap).unwrap();
        for b in &batches[cut + 1..] {
            got.push(rows(&o.process(b, None).unwrap().windows));
        }
        got.push(rows(&o.flush().unwrap().windows));
        assert_eq!(got, expect, "restored after batch {cut}");
    }
}

#[test]
fn snapshot_of_another_pipeline_is_rejected() {
    let (mut o, clock) = op(cfg(
        WindowSpec::Tumbling {
            size: 10,
            offset: 0,
        },
        Scope::Global,
    ));
    o.process(&batch(&[("a", 1, 1)]), None).unwrap();
    let snap = o.snapshot();
    let other = cfg(
        WindowSpec::Tumbling {
            size: 20,
            offset: 0,
        },
        Scope::Global,
    );
    let e = Operator::restore(other, Arc::new(clock.clone()), &snap).unwrap_err();
    assert!(e.to_string().contains("different configuration"), "{e}");
    let e = Operator::restore(
        cfg(
            WindowSpec::Tumbling {
                size: 10,
                offset: 0,
            },
            Scope::Global,
        ),
        Arc::new(clock),
        &snap[..snap.len() - 3],
    )
    .unwrap_err();
    assert!(matches!(e, TidemarkError::StateCorrupted(_)));
}

#[test]
fn on_update_emits_changes_and_retracts_merged_sessions() {
    let mut c = cfg(WindowSpec::Session { gap: 10 }, Scope::Global);
    c.emit = EmitMode::OnUpdate;
    c.delay = 20;
    let (mut o, _) = op(c);
    let out = o
        .process(&batch(&[("a", 0, 1), ("a", 15, 2)]), None)
        .unwrap();
    assert_eq!(out.windows.num_rows(), 2);
    let out = o.process(&batch(&[("a", 8, 3)]), None).unwrap();
    let retract = out.windows.column(5).as_boolean();
    let starts = out
        .windows
        .column(1)
        .as_primitive::<arrow_array::types::TimestampMicrosecondType>();
    let got: Vec<(i64, bool)> = (0..out.windows.num_rows())
        .map(|i| (starts.value(i), retract.value(i)))
        .collect();
    // Retract [0,10) and [15,25), upsert [0,25); rows in (end, start) order, so a
    // retraction always precedes an upsert of the same window start.
    assert_eq!(got, vec![(0, true), (0, false), (15, true)]);
    let m = o.metrics();
    assert_eq!(m.retractions_emitted, 2);
}

#[test]
fn on_update_retracts_only_emitted_bounds_when_a_session_grows_twice() {
    let mut c = cfg(WindowSpec::Session { gap: 10 }, Scope::Global);
    c.emit = EmitMode::OnUpdate;
    c.delay = 100;
    let (mut o, _) = op(c);
    o.process(&batch(&[("a", 20, 1)]), None).unwrap(); // emits [20, 30)
                                                       // Both rows move the session: [15, 30), then [15, 35). Only [20, 30) was emitted.
    let out = o
        .process(&batch(&[("a", 15, 1), ("a", 25, 1)]), None)
        .unwrap();
    let retract = out.windows.column(5).as_boolean();
    let col = |i: usize| {
        out.windows
            .column(i)
            .as_primitive::<arrow_array::types::TimestampMicrosecondType>()
            .clone()
    };
    let (starts, ends) = (col(1), col(2));
    let got: Vec<(i64, i64, bool)> = (0..out.windows.num_rows())
        .map(|i| (starts.value(i), ends.value(i), retract.value(i)))
        .collect();
    assert_eq!(got, vec![(20, 30, true), (15, 35, false)]);
    assert_eq!(o.metrics().retractions_emitted, 1);
}

#[test]
fn errors_and_partition_scope() {
    let mut c = cfg(
        WindowSpec::Tumbling {
            size: 10,
            offset: 0,
        },
        Scope::Partition { column: "p".into() },
    );
    c.idle_timeout = Some(100);
    c.idleness = Idleness::Clock;
    let (mut o, clock) = op(c);
    let b = RecordBatch::try_from_iter(vec![
        (
            "k",
            Arc::new(StringArray::from(vec!["a", "a", "a", "a"])) as ArrayRef,
        ),
        (
            "ts",
            Arc::new(TimestampMicrosecondArray::from(vec![
                Some(1),
                None,
                Some(50),
                Some(3),
            ])) as ArrayRef,
        ),
        (
            "v",
            Arc::new(Int64Array::from(vec![1, 1, 1, 1])) as ArrayRef,
        ),
        (
            "p",
            Arc::new(Int64Array::from(vec![Some(0), Some(0), Some(1), None])) as ArrayRef,
        ),
    ])
    .unwrap();
    let out = o.process(&b, None).unwrap();
    assert_eq!(out.errors.num_rows(), 2);
    let reasons = out.errors.column(4).as_string::<i32>();
    assert_eq!(reasons.value(0), "event time is null");
    assert_eq!(reasons.value(1), "partition is null");
    // Partition 0 is at 1: the combined watermark is 1, nothing closes.
    assert_eq!(o.watermark(), Some(1));
    assert_eq!(out.windows.num_rows(), 0);
    clock.advance(101);
    let b2 = RecordBatch::try_from_iter(vec![
        ("k", Arc::new(StringArray::from(vec!["a"])) as ArrayRef),
        (
            "ts",
            Arc::new(TimestampMicrosecondArray::from(vec![60])) as ArrayRef,
        ),
        ("v", Arc::new(Int64Array::from(vec![1])) as ArrayRef),
        ("p", Arc::new(Int64Array::from(vec![1])) as ArrayRef),
    ])
    .unwrap();
    let out = o.process(&b2, None).unwrap();
    // Partition 0 went idle: the watermark follows partition 1.
    assert_eq!(o.watermark(), Some(60));
    assert_eq!(out.windows.num_rows(), 2);
}

#[test]
fn float_sums_do_not_depend_on_row_order() {
    let mut c = cfg(
        WindowSpec::Tumbling {
            size: 100,
            offset: 0,
        },
        Scope::Global,
    );
    c.aggs = vec![AggSpec {
        name: "s".into(),
        kind: AggKind::Sum,
        column: Some("f".into()),
        by: None,
    }];
    let vals = [1e16, 1.0, -1e16, 3.3, 1e-3, 7e15, -7e15];
    let mk = |order: &[usize]| {
        RecordBatch::try_from_iter(vec![
            (
                "k",
                Arc::new(StringArray::from(vec!["a"; order.len()])) as ArrayRef,
            ),
            (
                "ts",
                Arc::new(TimestampMicrosecondArray::from(vec![1; order.len()])) as ArrayRef,
            ),
            (
                "f",
                Arc::new(Float64Array::from(
                    order.iter().map(|&i| vals[i]).collect::<Vec<_>>(),
                )) as ArrayRef,
            ),
        ])
        .unwrap()
    };
    let mut results = vec![];
    for order in [
        [0, 1, 2, 3, 4, 5, 6],
        [6, 5, 4, 3, 2, 1, 0],
        [2, 4, 6, 0, 1, 3, 5],
    ] {
        let (mut o, _) = op(c.clone());
        o.process(&mk(&order), None).unwrap();
        let out = o.flush().unwrap();
        results.push(
            out.windows
                .column(3)
                .as_primitive::<arrow_array::types::Float64Type>()
                .value(0)
                .to_bits(),
        );
    }
    assert!(results.windows(2).all(|w| w[0] == w[1]));
    assert_eq!(f64::from_bits(results[0]), 1.0 + 3.3 + 1e-3);
}

#[test]
fn float_sums_survive_a_snapshot_exactly_special_values_included() {
    // Per key: values whose exact sum needs several parts, a -0.0 sum, and infinities
    // and NaN (the non-finite part). Restored mid-stream, every sum comes out with the
    // same bits as without the snapshot, and a second snapshot has the same bytes.
    let mut c = cfg(
        WindowSpec::Tumbling {
            size: 10,
            offset: 0,
        },
        Scope::Global,
    );
    c.aggs = vec![AggSpec::new("s", AggKind::Sum, Some("f"))];
    // `batch`'s key and time columns, with a float column `f`.
    let mk = |rows: &[(&str, f64)]| {
        let b = batch(&rows.iter().map(|r| (r.0, 1, 0)).collect::<Vec<_>>());
        let f = Float64Array::from(rows.iter().map(|r| r.1).collect::<Vec<_>>());
        RecordBatch::try_from_iter(vec![
            ("k", b.column(0).clone()),
            ("ts", b.column(1).clone()),
            ("f", Arc::new(f) as ArrayRef),
        ])
        .unwrap()
    };
    let first = mk(&[
        ("exact", 1e16),
        ("exact", 1.0),
        ("exact", 1e-300),
        ("negzero", -0.0),
        ("inf", f64::INFINITY),
        ("inf", 2.5),
        ("nan", f64::INFINITY),
        ("nan", f64::NEG_INFINITY),
    ]);
    let second = mk(&[
        ("exact", -1e16),
        ("exact", 3.3),
        ("negzero", -0.0),
        ("inf", 1.0),
        ("nan", 1.0),
    ]);
    let sums = |o: &mut Operator| -> Vec<(String, u64)> {
        let out = o.flush().unwrap().windows;
        let k = out.column(0).as_string::<i32>();
        let s = out
            .column(3)
            .as_primitive::<arrow_array::types::Float64Type>();
        let mut v: Vec<_> = (0..out.num_rows())
            .map(|i| (k.value(i).to_string(), s.value(i).to_bits()))
            .collect();
        v.sort();
        v
    };
    let (mut plain, _) = op(c.clone());
    plain.process(&first, None).unwrap();
    plain.process(&second, None).unwrap();
    let want = sums(&mut plain);
    let (mut o, clock) = op(c.clone());
    o.process(&first, None).unwrap();
    let snap = o.snapshot();
    let mut back = Operator::restore(c.clone(), Arc::new(clock.clone()), &snap).unwrap();
    assert_eq!(
        back.snapshot(),
        snap,
        "a restored operator snapshots the same bytes"
    );
    back.process(&second, None).unwrap();
    assert_eq!(sums(&mut back), want);
    let bits = |k: &str| f64::from_bits(want.iter().find(|w| w.0 == k).unwrap().1);
    assert_eq!(bits("exact"), 1.0 + 3.3 + 1e-300);
    assert!(bits("negzero") == 0.0 && bits("negzero").is_sign_negative());
    assert_eq!(bits("inf"), f64::INFINITY);
    assert!(bits("nan").is_nan());
}

#[test]
fn max_keys_evicts_and_emits() {
    let mut c = cfg(
        WindowSpec::Tumbling {
            size: 10,
            offset: 0,
        },
        Scope::Global,
    );
    c.delay = 100;
    c.max_keys = Some(2);
    let (mut o, _) = op(c);
    o.process(&batch(&[("a", 1, 1), ("b", 2, 1)]), None)
        .unwrap();
    let out = o.process(&batch(&[("c", 3, 1)]), None).unwrap();
    assert_eq!(
        rows(&out.windows),
        vec![("a".into(), 0, 10, 1, Some(1))],
        "a evicted, emitted early"
    );
    assert_eq!(o.metrics().windows_evicted, 1);
    assert_eq!(o.metrics().keys_evicted, 1);
    // One batch with more keys than max_keys: the rows of the key evicted while the
    // batch was processed are reported, not silently lost.
    let out = o
        .process(&batch(&[("x", 4, 1), ("y", 5, 1), ("z", 6, 1)]), None)
        .unwrap();
    assert_eq!(out.errors.num_rows(), 1);
    let reasons = out.errors.column(3).as_string::<i32>();
    assert!(
        reasons.value(0).contains("max_keys"),
        "{}",
        reasons.value(0)
    );
}

#[test]
fn test_timer_survives_restore() {
    // a session's timer survives operator drop and re-creation.
    let c = cfg(WindowSpec::Session { gap: 1000 }, Scope::Global);
    let (mut o, clock) = op(c.clone());
    o.process(&batch(&[("k", 500, 1)]), None).unwrap();
    assert_eq!(o.timers.len, 1);
    let snap = o.snapshot();
    drop(o);
    let mut o2 = Operator::restore(c, Arc::new(clock), &snap).unwrap();
    assert_eq!(o2.timers.len, 1, "timer re-registered on restore");
    assert_eq!(*o2.timers.buckets.keys().next().unwrap(), 1500);
    let out = o2.process(&batch(&[("k", 3000, 1)]), None).unwrap();
    assert_eq!(
        rows(&out.windows),
        vec![("k".into(), 500, 1500, 1, Some(1))]
    );
    assert_eq!(o2.metrics().sessions_closed_by_timer, 1);
}

#[test]
fn state_ttl_drops_untouched_keys_and_emits_their_open_windows() {
    let mut c = cfg(
        WindowSpec::Tumbling {
            size: 10,
            offset: 0,
        },
        Scope::Key,
    );
    c.state_ttl = Some(1_000);
    c.idleness = Idleness::Clock;
    let (mut o, clock) = op(c);
    o.process(&batch(&[("a", 1, 1), ("b", 2, 2)]), None)
        .unwrap();
    clock.advance(600);
    // "b" stays active; "a" has no rows for 1.2 s.
    o.process(&batch(&[("b", 3, 3)]), None).unwrap();
    clock.advance(600);
    let out = o.process(&batch(&[("b", 4, 4)]), None).unwrap();
    // a's window [0, 10) was open (its watermark never passed 10): emitted early.
    assert_eq!(
        rows(&out.windows),
        vec![("a".to_string(), 0, 10, 1, Some(1))]
    );
    let m = o.metrics();
    assert_eq!((m.keys_expired, m.windows_expired), (1, 1));
    assert_eq!(o.key_metrics().total_keys, 1);
    let mut a = Vec::new();
    crate::key::AsKey::encode_key(&"a", &mut a);
    assert_eq!(o.key_watermark(&a), None);
    // The key comes back as a new key.
    o.process(&batch(&[("a", 5, 5)]), None).unwrap();
    assert_eq!(o.key_metrics().total_keys, 2);
    // Counters survive a snapshot.
    let r = Operator::restore(o.config().clone(), Arc::new(clock.clone()), &o.snapshot()).unwrap();
    assert_eq!(r.metrics().keys_expired, 1);
    let mut bad = o.config().clone();
    bad.state_ttl = Some(0);
    assert!(bad.validate().is_err());
}

#[test]
fn output_rows_come_in_end_start_key_order() {
    // Keys alike in their first 8 bytes, each with six windows. With a per-key scope
    // each key's windows close together (rows in runs by key: keys ranked once); with
    // a global scope they close by timer, keys interleaved (keys compared per row).
    let keys = [
        "tenant-000031",
        "tenant-000004",
        "tenant-000100",
        "tenant-000010",
    ];
    let first: Vec<(&str, i64, i64)> = keys
        .iter()
        .enumerate()
        .flat_map(|(i, &k)| (0..6).map(move |w| (k, w * 10 + 1, i as i64)))
        .collect();
    let last: Vec<(&str, i64, i64)> = keys.iter().map(|&k| (k, 1_000, 0)).collect();
    let mut want: Vec<(String, i64, i64, i64, Option<i64>)> = keys
        .iter()
        .enumerate()
        .flat_map(|(i, &k)| {
            (0..6).map(move |w| (k.to_string(), w * 10, w * 10 + 10, 1, Some(i as i64)))
        })
        .collect();
    want.sort_by(|a, b| (a.2, a.1, &a.0).cmp(&(b.2, b.1, &b.0)));
    for scope in [Scope::Key, Scope::Global] {
        let window = WindowSpec::Tumbling {
            size: 10,
            offset: 0,
        };
        let (mut o, _) = op(PipelineConfig {
            delay: 100, // nothing closes before the second batch
            ..cfg(window, scope.clone())
        });
        assert_eq!(
            o.process(&batch(&first), None).unwrap().windows.num_rows(),
            0
        );
        let out = o.process(&batch(&last), None).unwrap();
        assert_eq!(rows(&out.windows), want, "{scope:?}");
    }
}

#[test]
fn packed_order_sorts_on_the_fields_in_turn_in_64_or_128_bits() {
    // (a, b, c) per row; the order is lexicographic whatever the packing width.
    let check = |rows: &[[u64; 3]]| {
        let maxes = [0, 1, 2].map(|j| rows.iter().map(|r| r[j]).max().unwrap());
        let got = packed_order(rows.len(), &maxes, |i| rows[i]);
        let mut want: Vec<usize> = (0..rows.len()).collect();
        want.sort_by_key(|&i| rows[i]);
        assert_eq!(got, Some(want));
    };
    // Packed in a u64:
    check(&[[3, 0, 1], [1, 9, 0], [3, 0, 0], [1, 2, 7], [0, 5, 5]]);
    // 3 x 41 bits and the index: a u128.
    let big = 1 << 40;
    check(&[[big, 3, 1], [2, big, 0], [big, 2, big], [2, 0, 1]]);
    // Fields wider than 128 bits together: no packed order (the caller sorts tuples).
    assert_eq!(packed_order(2, &[u64::MAX; 3], |_| [0; 3]), None);
    assert_eq!(packed_order(0, &[0; 3], |_| [0; 3]), Some(vec![]));
}

/// A small deterministic generator: `next(m)` is in `0..m`.
fn lcg(mut seed: u64) -> impl FnMut(u64) -> u64 {
    move |m| {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (seed >> 33) % m
    }
}

#[test]
fn grid_order_is_the_output_order_of_tumbling_and_sliding_windows() {
    // Emits as build_windows gets them: key by key (one run each), each key's windows
    // by start; one key's bytes appear in two runs (a copy and a live slot).
    let key_bytes: Vec<Vec<u8>> = ["m", "a", "zz", "b", "a"]
        .iter()
        .map(|k| k.as_bytes().to_vec())
        .collect();
    let mut next = lcg(7);
    for (width, step) in [(10i64, 10u64), (30, 10)] {
        let mut emits = Vec::new();
        let mut keys = Vec::new();
        for (k, bytes) in key_bytes.iter().enumerate() {
            let mut start = -53 + 10 * next(5) as i64;
            for _ in 0..40 {
                start += 10 * (1 + next(3) as i64);
                emits.push(Emit {
                    key: KeyRef::Copied(k as u32),
                    start,
                    end: start + width,
                    state: 0,
                    retract: false,
                });
                keys.push(KeyBytes::Borrowed(bytes));
            }
        }
        let mut want: Vec<usize> = (0..emits.len()).collect();
        want.sort_by(|&a, &b| {
            (emits[a].end, emits[a].start, &*keys[a], a).cmp(&(
                emits[b].end,
                emits[b].start,
                &*keys[b],
                b,
            ))
        });
        assert_eq!(
            output_order(&emits, &keys, Some(step)),
            want,
            "width {width}"
        );
        assert_eq!(output_order(&emits, &keys, None), want, "width {width}");
        let runs: Vec<u32> = (0..key_bytes.len() as u32).map(|k| k * 40).collect();
        let mut by_key: Vec<u32> = (0..runs.len() as u32).collect();
        by_key.sort_by_key(|&r| (key_bytes[r as usize].clone(), r));
        assert_eq!(grid_order(&emits, &runs, &by_key, step), Some(want));
        // Off the grid, a window of another length, a retraction: not for the grid.
        let mut off = emits.clone();
        off[7].end += 1;
        off[7].start += 1;
        assert_eq!(grid_order(&off, &runs, &by_key, step), None);
        off[7].start -= 1;
        assert_eq!(grid_order(&off, &runs, &by_key, step), None);
        let mut retraction = emits.clone();
        retraction[3].retract = true;
        assert_eq!(grid_order(&retraction, &runs, &by_key, step), None);
    }
}

#[test]
fn results_do_not_depend_on_how_the_input_is_cut_into_batches() {
    // One key, one window; rows out of event-time order. Float min and max keep the
    // first of equal values (0.0 before -0.0 here), so a batch's rows must reach them
    // in arrival order; the other aggregates may see them in any order.
    let aggs = vec![
        AggSpec::new("lo", AggKind::Min, Some("v")),
        AggSpec::new("hi", AggKind::Max, Some("v")),
        AggSpec::new("first", AggKind::First, Some("v")),
        AggSpec::new("last", AggKind::Last, Some("v")),
        AggSpec::new("s", AggKind::Sum, Some("v")),
    ];
    let rows = [(5i64, 0.0f64), (1, -0.0), (5, -0.0), (1, 0.0), (3, -0.0)];
    let run = |cuts: &[usize]| {
        // A bounded delay that keeps every row on time and the window open.
        let (mut o, _) = op(PipelineConfig {
            delay: 100,
            ..PipelineConfig::new(
                &["k"],
                "ts",
                WindowSpec::Tumbling {
                    size: 10,
                    offset: 0,
                },
                aggs.clone(),
            )
        });
        let mut lo = 0;
        for &hi in cuts.iter().chain([&rows.len()]) {
            let part = &rows[lo..hi];
            let values = Float64Array::from(part.iter().map(|r| r.1).collect::<Vec<_>>());
            let b = batch_with(part.iter().map(|r| ("a", r.0)), Arc::new(values));
            assert_eq!(o.process(&b, None).unwrap().windows.num_rows(), 0);
            lo = hi;
        }
        let out = o.flush().unwrap().windows;
        (3..8)
            .map(|c| {
                out.column(c)
                    .as_primitive::<arrow_array::types::Float64Type>()
                    .value(0)
                    .to_bits()
            })
            .collect::<Vec<u64>>()
    };
    let whole = run(&[]);
    // min and max: the first zero to arrive (0.0); first and last: of the rows at the
    // smallest and largest event time, the first to arrive (-0.0 and 0.0).
    assert_eq!(
        whole,
        [0.0f64, 0.0, -0.0, 0.0, 0.0].map(f64::to_bits).to_vec()
    );
    for cuts in [&[1][..], &[2, 4], &[1, 2, 3, 4]] {
        assert_eq!(run(cuts), whole, "cuts {cuts:?}");
    }
}

#[test]
fn rows_are_listed_by_window_cell_in_arrival_order_within_a_cell() {
    let mut next = lcg(11);
    const SKIP: u32 = u32::MAX;
    // Times over 40 windows of 1024 (a power of two: the cells are exact), aligned to
    // 100; one row in ten belongs to no key.
    let n = 2_000;
    let times: Vec<i64> = (0..n).map(|_| -5_000 + next(40 * 1024) as i64).collect();
    let group: Vec<u32> = (0..n)
        .map(|_| if next(10) == 0 { SKIP } else { next(7) as u32 })
        .collect();
    let out = by_window_cell(&group, &times, 1024, 100).expect("out of order");
    let mut rows: Vec<u32> = out.iter().map(|r| r.1).collect();
    rows.sort_unstable();
    let valid: Vec<u32> = (0..n as u32)
        .filter(|&r| group[r as usize] != SKIP)
        .collect();
    assert_eq!(rows, valid);
    for &(t, row, g) in &out {
        assert_eq!((t, g), (times[row as usize], group[row as usize]));
    }
    let window = |t: i64| (t - 100).div_euclid(1024);
    for pair in out.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        assert!(window(a.0) <= window(b.0), "{a:?} before {b:?}");
        if window(a.0) == window(b.0) {
            assert!(a.1 < b.1, "a cell keeps arrival order");
        }
    }
    // More windows than rows: cells merge, the order stays by time across cells.
    let wide: Vec<i64> = (0..50).map(|i| (i * 7_919 % 50) * 1_000_000_007).collect();
    let out = by_window_cell(&[0; 50], &wide, 3, 0).expect("out of order");
    let mut by_time: Vec<i64> = out.iter().map(|r| r.0).collect();
    by_time.sort_unstable();
    let mut want = wide.clone();
    want.sort_unstable();
    assert_eq!(by_time, want);
    assert!(out.windows(2).all(|p| p[0].0 <= p[1].0));
    // Times in order already (or no rows): nothing to do.
    assert_eq!(by_window_cell(&[0, SKIP, 1], &[5, 1, 9], 10, 0), None);
    assert_eq!(by_window_cell(&[], &[], 10, 0), None);
    // Event times at both ends of the range.
    let ends = [i64::MAX, i64::MIN, 0, i64::MIN + 1];
    let out = by_window_cell(&[0; 4], &ends, 1_000_000, 7).expect("out of order");
    assert_eq!(out.iter().map(|r| r.1).collect::<Vec<_>>(), [1, 3, 2, 0]);
}

/// `b` (a [`batch`]) with its key column cast to `key` and its event time to `time`.
fn relaid(b: &RecordBatch, key: &DataType, time: &DataType) -> RecordBatch {
    let k = arrow_cast::cast(b.column(0), key).unwrap();
    let ts = arrow_cast::cast(b.column(1), time).unwrap();
    RecordBatch::try_from_iter(vec![("k", k), ("ts", ts), ("v", b.column(2).clone())]).unwrap()
}

#[test]
fn a_stream_may_change_its_string_layout_and_time_unit_or_zone_between_batches() {
    // Spark sends strings as large_string under one setting, polars as string_view, a
    // Parquet reader as a dictionary; a restart may run in another session time zone.
    let c = cfg(
        WindowSpec::Tumbling {
            size: 10_000,
            offset: 0,
        },
        Scope::Key,
    );
    let batches = [
        batch(&[("a", 1_000, 1), ("b", 3_000, 2)]),
        batch(&[("a", 12_000, 3), ("b", 14_000, 4)]),
        batch(&[("a", 25_000, 5), ("b", 27_000, 6), ("a", 21_000, 7)]),
        batch(&[("a", 38_000, 8), ("b", 39_000, 9)]),
    ];
    let (mut plain, _) = op(c.clone());
    let mut expect: Vec<_> = batches
        .iter()
        .map(|b| rows(&plain.process(b, None).unwrap().windows))
        .collect();
    expect.push(rows(&plain.flush().unwrap().windows));
    assert!(expect.iter().filter(|w| !w.is_empty()).count() >= 3);

    let ts = |unit, zone: &str| DataType::Timestamp(unit, Some(zone.into()));
    let layouts = [
        (DataType::Utf8, ts(TimeUnit::Microsecond, "UTC")),
        (
            DataType::LargeUtf8,
            ts(TimeUnit::Microsecond, "Europe/Paris"),
        ),
        (DataType::Utf8View, ts(TimeUnit::Millisecond, "UTC")),
        (
            DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8)),
            ts(TimeUnit::Nanosecond, "+05:00"),
        ),
    ];
    let (mut o, clock) = op(c.clone());
    let mut got = vec![];
    for (i, (b, (key, time))) in batches.iter().zip(&layouts).enumerate() {
        if i == 2 {
            // Restored from a snapshot taken under the earlier layout.
            let snap = o.snapshot();
            o = Operator::restore(c.clone(), Arc::new(clock.clone()), &snap).unwrap();
        }
        let out = o.process(&relaid(b, key, time), None).unwrap().windows;
        // The output takes the batch's own types.
        assert_eq!(out.schema().field(0).data_type(), key);
        assert_eq!(out.schema().field(1).data_type(), time);
        got.push(rows(&out));
    }
    got.push(rows(&o.flush().unwrap().windows));
    assert_eq!(got, expect);
}

#[test]
fn a_change_of_values_mid_stream_is_an_error_that_names_the_column_and_loses_nothing() {
    let aggs = vec![AggSpec::new("m", AggKind::Mean, Some("v"))];
    let c = PipelineConfig::new(
        &["k"],
        "ts",
        WindowSpec::Tumbling {
            size: 10,
            offset: 0,
        },
        aggs,
    );
    let ints = |rows: &[(&str, i64)], v: Vec<i64>| {
        batch_with(rows.iter().copied(), Arc::new(Int64Array::from(v)))
    };
    let (mut o, _) = op(c);
    o.process(&ints(&[("a", 1), ("a", 2)], vec![1, 2]), None)
        .unwrap();
    // Mean of integers keeps an integer sum: float values cannot join it.
    let floats = batch_with(
        [("a", 3)].into_iter(),
        Arc::new(Float64Array::from(vec![1.5])),
    );
    let err = o.process(&floats, None).unwrap_err().to_string();
    assert!(
        err.contains("aggregate \"m\"") && err.contains("\"v\"") && err.contains("Float64"),
        "{err}"
    );
    // A time zone on one side only: another kind of time, not another layout.
    let naive = DataType::Timestamp(TimeUnit::Microsecond, None);
    let b = ints(&[("a", 4)], vec![4]);
    let err = o
        .process(&relaid(&b, &DataType::Utf8, &naive), None)
        .unwrap_err()
        .to_string();
    assert!(err.contains("event-time column"), "{err}");
    // A key column of other values (numbers, not strings).
    let b = RecordBatch::try_from_iter(vec![
        ("k", Arc::new(Int64Array::from(vec![7])) as ArrayRef),
        ("ts", b.column(1).clone()),
        ("v", b.column(2).clone()),
    ])
    .unwrap();
    let err = o.process(&b, None).unwrap_err().to_string();
    assert!(err.contains("key column \"k\""), "{err}");
    // The rejected batches changed nothing: the state goes on with integers.
    o.process(&ints(&[("a", 6)], vec![6]), None).unwrap();
    let out = o.flush().unwrap().windows;
    let m = out
        .column(3)
        .as_primitive::<arrow_array::types::Float64Type>();
    assert_eq!((out.num_rows(), m.value(0)), (1, 3.0));
}

#[test]
fn a_flush_gives_late_and_error_tables_in_the_schemas_a_batch_gives_them() {
    // Only a count: column `v` is not read, yet late and error rows carry it, and
    // error rows their `reason`, whichever call returns them (empty or not).
    let c = PipelineConfig {
        aggs: vec![AggSpec::new("n", AggKind::Count, None)],
        ..cfg(
            WindowSpec::Tumbling {
                size: 10,
                offset: 0,
            },
            Scope::Key,
        )
    };
    let (mut o, _) = op(c.clone());
    let out = o
        .process(&batch(&[("a", 1, 1), ("a", 30, 2)]), None)
        .unwrap();
    let late = o.process(&batch(&[("a", 2, 3)]), None).unwrap().late;
    assert_eq!(late.num_rows(), 1);
    let flushed = o.flush().unwrap();
    assert_eq!(flushed.late.schema(), late.schema());
    assert_eq!(flushed.errors.schema(), out.errors.schema());
    assert_eq!(column_names(&flushed.errors), ["k", "ts", "v", "reason"]);
    // After a restore (no batch since) only the columns the pipeline reads are known.
    let restored = Operator::restore(c, Arc::new(ManualClock::new(0)), &o.snapshot()).unwrap();
    let mut restored = restored;
    let errors = restored.flush().unwrap().errors;
    assert_eq!(column_names(&errors), ["k", "ts", "reason"]);
}

#[test]
fn a_restored_operator_ticks_before_its_first_batch_as_the_live_one_does() {
    let c = keyed_idle_cfg();
    let (mut live, clock) = op(c.clone());
    live.process(&batch(&[("quiet", 3, 1), ("busy", 50, 1)]), None)
        .unwrap();
    let snap = live.snapshot();
    let mut restored = Operator::restore(c.clone(), Arc::new(clock.clone()), &snap).unwrap();
    let cores = Arc::new(clock.clone());
    let mut sharded = crate::runtime::ShardedOperator::new(c.clone(), cores.clone(), 2, 2).unwrap();
    sharded
        .process(&batch(&[("quiet", 3, 1), ("busy", 50, 1)]), None)
        .unwrap();
    let sharded_snap = sharded.snapshot().unwrap();
    let mut sharded =
        crate::runtime::ShardedOperator::restore(c, cores, 2, 2, &sharded_snap).unwrap();
    // Quiet goes idle on the clock: a call without rows releases its window, whether
    // the operator saw a batch or was just restored (before, a restored one waited for
    // its next batch).
    clock.advance(2_000);
    let expected = vec![("quiet".to_string(), 0, 10, 1, Some(1))];
    assert_eq!(rows(&live.tick().unwrap().windows), expected);
    let out = restored.tick().unwrap();
    assert_eq!(rows(&out.windows), expected);
    assert_eq!(column_names(&out.errors), ["k", "ts", "v", "reason"]);
    assert_eq!(rows(&sharded.tick().unwrap().windows), expected);
    // A fresh operator has nothing to close and no schema yet.
    let (mut fresh, _) = op(keyed_idle_cfg());
    assert_eq!(fresh.tick().unwrap().windows.num_columns(), 0);
}

/// Rows `(key, partition, event time)` with `v = 1`.
fn part_batch(rows: &[(&str, i64, i64)]) -> RecordBatch {
    let (k, (p, ts)): (Vec<&str>, (Vec<i64>, Vec<i64>)) =
        rows.iter().map(|r| (r.0, (r.1, r.2))).unzip();
    RecordBatch::try_from_iter(vec![
        ("k", Arc::new(StringArray::from(k)) as ArrayRef),
        (
            "ts",
            Arc::new(TimestampMicrosecondArray::from(ts).with_timezone("UTC")) as ArrayRef,
        ),
        (
            "v",
            Arc::new(Int64Array::from(vec![1; rows.len()])) as ArrayRef,
        ),
        ("p", Arc::new(Int64Array::from(p)) as ArrayRef),
    ])
    .unwrap()
}

fn partition_cfg(declared: Option<u32>) -> PipelineConfig {
    PipelineConfig {
        delay: 5,
        source_partitions: declared,
        ..cfg(
            WindowSpec::Tumbling {
                size: 10,
                offset: 0,
            },
            Scope::Partition { column: "p".into() },
        )
    }
}

#[test]
fn a_lagging_partition_holds_the_watermark_back_once_it_has_rows() {
    let (mut o, _) = op(partition_cfg(None));
    o.process(&part_batch(&[("fast", 0, 100)]), None).unwrap();
    assert_eq!(o.watermark(), Some(95));
    // Partition 1's first rows are behind the combined watermark: late, but they count
    // towards its own watermark, so from now on it holds the combined one back.
    let out = o.process(&part_batch(&[("slow", 1, 20)]), None).unwrap();
    assert_eq!(out.late.num_rows(), 1);
    let out = o
        .process(&part_batch(&[("fast", 0, 200), ("slow", 1, 40)]), None)
        .unwrap();
    assert_eq!(out.late.num_rows(), 1, "40 < 95");
    assert_eq!(
        o.watermark(),
        Some(95),
        "partition 1 (at 35) holds it at 95"
    );
    let out = o.process(&part_batch(&[("slow", 1, 97)]), None).unwrap();
    assert_eq!(out.late.num_rows(), 0, "97 >= 95: partition 1 caught up");
    assert_eq!(o.watermark(), Some(95));
    o.process(&part_batch(&[("slow", 1, 130)]), None).unwrap();
    assert_eq!(o.watermark(), Some(125));
}

#[test]
fn declared_partitions_hold_the_watermark_back_from_the_first_batch() {
    let (mut o, clock) = op(PipelineConfig {
        idle_timeout: Some(1_000),
        idleness: Idleness::Clock,
        ..partition_cfg(Some(3))
    });
    let out = o.process(&part_batch(&[("fast", 0, 100)]), None).unwrap();
    assert_eq!(o.watermark(), None, "partitions 1 and 2 have not reported");
    assert_eq!(out.windows.num_rows(), 0);
    let out = o.process(&part_batch(&[("slow", 1, 20)]), None).unwrap();
    assert_eq!(
        out.late.num_rows(),
        0,
        "nothing is late before every partition reported"
    );
    assert_eq!(o.watermark(), None, "partition 2 still silent");
    // Partition 2 never reports: it goes idle on the clock and stops holding it back.
    clock.advance(1_001);
    let out = o
        .process(&part_batch(&[("fast", 0, 110), ("slow", 1, 36)]), None)
        .unwrap();
    assert_eq!(o.watermark(), Some(31));
    assert_eq!(
        rows(&out.windows),
        vec![("slow".into(), 20, 30, 1, Some(1))],
        "[20, 30) closed at 31"
    );
    // Declared partitions are part of the configuration (its fingerprint).
    assert_ne!(
        partition_cfg(Some(3)).fingerprint(),
        partition_cfg(None).fingerprint()
    );
    let mut bad = partition_cfg(Some(0));
    assert!(bad.validate().is_err());
    bad.source_partitions = Some(2);
    bad.scope = Scope::Global;
    assert!(
        bad.validate().is_err(),
        "declared partitions need per=partition"
    );
}

/// Every window a run emitted, `(key, start)`, with the number of times it came out.
fn emitted_twice(outs: &[Output]) -> Vec<(String, i64)> {
    let mut seen = std::collections::HashMap::new();
    for out in outs {
        for (k, s, _, _, _) in rows(&out.windows) {
            *seen.entry((k, s)).or_insert(0) += 1;
        }
    }
    let mut twice: Vec<(String, i64)> = seen
        .into_iter()
        .filter(|&(_, n)| n > 1)
        .map(|(w, _)| w)
        .collect();
    twice.sort();
    twice
}

#[test]
fn an_evicted_key_that_returns_reopens_no_window_it_emitted() {
    for scope in [Scope::Key, Scope::Global] {
        let mut c = cfg(
            WindowSpec::Tumbling {
                size: 10,
                offset: 0,
            },
            scope.clone(),
        );
        c.delay = 60;
        c.max_keys = Some(2);
        let (mut o, _) = op(c.clone());
        let mut outs = vec![o
            .process(&batch(&[("a", 1, 1), ("b", 2, 1)]), None)
            .unwrap()];
        // "c" evicts "a", the least recently active key (keys of one call by key).
        outs.push(o.process(&batch(&[("c", 3, 1)]), None).unwrap());
        let out = o.process(&batch(&[("a", 4, 1)]), None).unwrap();
        // "a" was evicted (its [0, 10) emitted early with n=1): its row at 4 would
        // reopen that window, so it is late.
        assert_eq!(out.late.num_rows(), 1, "{scope:?}");
        outs.push(out);
        // The floor survives a snapshot.
        let mut o =
            Operator::restore(c.clone(), Arc::new(ManualClock::new(0)), &o.snapshot()).unwrap();
        let out = o
            .process(&batch(&[("d", 5, 1), ("a", 6, 1)]), None)
            .unwrap();
        assert_eq!(out.late.num_rows(), 1, "{scope:?}");
        outs.push(out);
        // A row of "a" after its floor opens a new window as usual.
        outs.push(o.process(&batch(&[("a", 12, 1)]), None).unwrap());
        outs.push(o.flush().unwrap());
        assert_eq!(
            emitted_twice(&outs),
            Vec::<(String, i64)>::new(),
            "{scope:?}"
        );
        let a: Vec<_> = outs
            .iter()
            .flat_map(|o| rows(&o.windows))
            .filter(|r| r.0 == "a")
            .map(|r| (r.1, r.3))
            .collect();
        assert_eq!(a, vec![(0, 1), (10, 1)], "{scope:?}");
    }
}

#[test]
fn an_expired_key_that_returns_reopens_no_window_it_emitted() {
    let mut c = keyed_idle_cfg();
    c.idle_timeout = None;
    c.delay = 60;
    c.state_ttl = Some(1_000);
    let (mut o, clock) = op(c);
    let mut outs = vec![o
        .process(&batch(&[("a", 1, 1), ("b", 2, 1)]), None)
        .unwrap()];
    clock.advance(1_500);
    outs.push(o.process(&batch(&[("b", 3, 1)]), None).unwrap());
    let out = o.process(&batch(&[("a", 4, 1)]), None).unwrap();
    assert_eq!(
        out.late.num_rows(),
        1,
        "a's [0, 10) was emitted when it expired"
    );
    outs.push(out);
    outs.push(o.flush().unwrap());
    assert!(emitted_twice(&outs).is_empty());
}

#[test]
fn a_flushed_operator_takes_no_more_rows() {
    let (mut o, clock) = op(cfg(
        WindowSpec::Tumbling {
            size: 10,
            offset: 0,
        },
        Scope::Global,
    ));
    o.process(&batch(&[("a", 1, 1)]), None).unwrap();
    assert_eq!(o.flush().unwrap().windows.num_rows(), 1);
    let err = o.process(&batch(&[("a", 2, 1)]), None).unwrap_err();
    assert!(err.to_string().contains("flushed"), "{err}");
    assert!(o.tick().is_err());
    // Also after a snapshot.
    let mut r = Operator::restore(o.config().clone(), Arc::new(clock), &o.snapshot()).unwrap();
    assert!(r.process(&batch(&[("a", 3, 1)]), None).is_err());
}

#[test]
fn an_idle_key_that_returns_reopens_no_window_the_global_watermark_closed() {
    let mut c = keyed_idle_cfg();
    c.delay = 0;
    let (mut o, clock) = op(c);
    let mut outs = vec![o
        .process(&batch(&[("a", 13, 1), ("b", 13, 1)]), None)
        .unwrap()];
    // "a" goes quiet and idle; "b" moves on: the global watermark passes a's [10, 20).
    clock.advance(1_001);
    outs.push(o.process(&batch(&[("b", 25, 1)]), None).unwrap());
    assert_eq!(
        rows(&outs[1].windows),
        vec![
            ("a".into(), 10, 20, 1, Some(1)),
            ("b".into(), 10, 20, 1, Some(1))
        ]
    );
    // "a" comes back with a row in that window (not behind its own watermark, 13).
    let out = o.process(&batch(&[("a", 15, 1)]), None).unwrap();
    assert_eq!(out.late.num_rows(), 1);
    outs.push(out);
    outs.push(o.flush().unwrap());
    assert!(
        emitted_twice(&outs).is_empty(),
        "{:?}",
        emitted_twice(&outs)
    );
}

/// The late-rule tests count in milliseconds (Spark's rule keeps a global watermark in
/// whole milliseconds): event times, window sizes and outputs below are milliseconds.
fn rule_cfg(window: WindowSpec, scope: Scope, rule: LateRule) -> PipelineConfig {
    let window = match window {
        WindowSpec::Tumbling { size, offset } => WindowSpec::Tumbling {
            size: size * 1_000,
            offset,
        },
        WindowSpec::Sliding {
            size,
            slide,
            offset,
        } => WindowSpec::Sliding {
            size: size * 1_000,
            slide: slide * 1_000,
            offset,
        },
        WindowSpec::Session { gap } => WindowSpec::Session { gap: gap * 1_000 },
        w => w,
    };
    PipelineConfig {
        late_rule: rule,
        allowed_lateness: 0,
        ..cfg(window, scope)
    }
}

fn batch_ms(rows: &[(&str, i64, i64)]) -> RecordBatch {
    let scaled: Vec<(&str, i64, i64)> = rows.iter().map(|&(k, t, v)| (k, t * 1_000, v)).collect();
    batch(&scaled)
}

fn rows_ms(out: &RecordBatch) -> Vec<Row> {
    rows(out)
        .into_iter()
        .map(|(k, s, e, n, v)| (k, s / 1_000, e / 1_000, n, v))
        .collect()
}

const TUMBLING_10: WindowSpec = WindowSpec::Tumbling {
    size: 10,
    offset: 0,
};

/// Windows emitted and late rows (their event times) per call.
fn run_calls(c: PipelineConfig, calls: &[&[(&str, i64, i64)]]) -> Vec<(Vec<Row>, Vec<i64>)> {
    let (mut o, _) = op(c);
    let mut out = Vec::new();
    for rows_in in calls {
        let b = batch_ms(rows_in);
        let o = o.process(&b, None).unwrap();
        let ts = o.late.column_by_name("ts").unwrap();
        let late: Vec<i64> = ts
            .as_primitive::<arrow_array::types::TimestampMicrosecondType>()
            .values()
            .iter()
            .map(|t| t / 1_000)
            .collect();
        out.push((rows_ms(&o.windows), late));
    }
    out
}

type Row = (String, i64, i64, i64, Option<i64>);

#[test]
fn late_rules_spark_closes_at_the_starting_watermark_and_judges_by_the_previous_one() {
    let calls: &[&[(&str, i64, i64)]] = &[
        &[("a", 5, 1)],
        &[("a", 25, 2)],
        &[("a", 7, 3)],
        &[("a", 8, 4)],
        &[],
    ];
    let spark = run_calls(rule_cfg(TUMBLING_10, Scope::Global, LateRule::Spark), calls);
    // Call 2 moves W to 25; [0,10) closes in call 3, whose row (judged against W=5,
    // the watermark call 2 began with) still joins it; call 4's row is late.
    let w = |s, e, n, v| vec![("a".to_string(), s, e, n, Some(v))];
    assert_eq!(spark[1], (vec![], vec![]));
    assert_eq!(spark[2], (w(0, 10, 2, 4), vec![]));
    assert_eq!(spark[3], (vec![], vec![8]));
    let flink = run_calls(rule_cfg(TUMBLING_10, Scope::Global, LateRule::Flink), calls);
    // Flink's rule closes [0,10) in call 2 itself; call 3's row is late.
    assert_eq!(flink[1], (w(0, 10, 1, 1), vec![]));
    assert_eq!(flink[2], (vec![], vec![7]));
    let row = run_calls(rule_cfg(TUMBLING_10, Scope::Global, LateRule::Row), calls);
    assert_eq!(row[1], flink[1]);
    assert_eq!(row[2], flink[2]);
}

#[test]
fn late_rules_a_window_rule_keeps_rows_of_open_windows_the_row_rule_drops() {
    // W=25 after call 1; [20,30) is open. A row at 21 is behind W: late for the
    // per-row rule, on time for the window rules (its window is open).
    let calls: &[&[(&str, i64, i64)]] = &[&[("a", 25, 1)], &[("a", 21, 2)], &[("a", 40, 3)], &[]];
    let flink = run_calls(rule_cfg(TUMBLING_10, Scope::Global, LateRule::Flink), calls);
    assert_eq!(flink[1].1, Vec::<i64>::new());
    assert_eq!(flink[2].0, vec![("a".into(), 20, 30, 2, Some(3))]);
    let row = run_calls(rule_cfg(TUMBLING_10, Scope::Global, LateRule::Row), calls);
    assert_eq!(row[1].1, vec![21]);
    // allowed_lateness adds to the rule: [0,10) stays open until W >= 15.
    let c = PipelineConfig {
        allowed_lateness: 6_000,
        ..rule_cfg(TUMBLING_10, Scope::Global, LateRule::Flink)
    };
    let out = run_calls(
        c,
        &[
            &[("a", 15, 1)],
            &[("a", 9, 2)],
            &[("a", 16, 3)],
            &[("a", 9, 4)],
        ],
    );
    assert_eq!(out[1].1, Vec::<i64>::new(), "end 10 + 6 > W=15");
    assert_eq!(out[2].0, vec![("a".into(), 0, 10, 1, Some(2))]);
    assert_eq!(out[3].1, vec![9], "end 10 + 6 <= W=16");
}

#[test]
fn late_rules_sliding_rows_join_their_open_windows_only() {
    let sliding = WindowSpec::Sliding {
        size: 10,
        slide: 5,
        offset: 0,
    };
    // W=12 after call 1 (Flink): [0,10) is closed, [5,15) open.
    let out = run_calls(
        rule_cfg(sliding, Scope::Global, LateRule::Flink),
        &[&[("a", 12, 1)], &[("a", 7, 2), ("a", 3, 4)], &[]],
    );
    // The row at 7 joins [5,15) only; the row at 3 (windows [-5,5) and [0,10), both
    // closed) is late.
    assert_eq!(out[1].1, vec![3]);
    let (mut o, _) = op(rule_cfg(sliding, Scope::Global, LateRule::Flink));
    for b in [&[("a", 12, 1)][..], &[("a", 7, 2), ("a", 3, 4)]] {
        o.process(&batch_ms(b), None).unwrap();
    }
    let all = rows_ms(&o.flush().unwrap().windows);
    assert_eq!(
        all,
        vec![
            ("a".into(), 5, 15, 2, Some(3)),
            ("a".into(), 10, 20, 1, Some(1))
        ]
    );
}

#[test]
fn late_rules_sessions_spark_judges_the_own_session_flink_the_merged_one() {
    let session = WindowSpec::Session { gap: 10 };
    // Session [20,40) is open (events 20 and 30); W=30 after call 1. A row at 12 has
    // its own session [12,22) closed (22 <= 30) but would merge into [20,40).
    let calls: &[&[(&str, i64, i64)]] = &[
        &[("a", 20, 1), ("a", 30, 2)],
        &[],
        &[("a", 12, 3), ("a", 5, 4)],
        &[],
    ];
    let spark = run_calls(rule_cfg(session, Scope::Global, LateRule::Spark), calls);
    // Spark: judged against W=30 (call 2's start): [12,22) and [5,15) closed: late.
    assert_eq!(spark[2].1, vec![12, 5], "late rows come in input order");
    let flink = run_calls(rule_cfg(session, Scope::Global, LateRule::Flink), calls);
    // Flink: 12 merges into the open session, and 5 ([5,15)) reaches it through 12,
    // whatever their order in the call.
    assert_eq!(flink[2].1, Vec::<i64>::new());
    let flink_reversed = run_calls(
        rule_cfg(session, Scope::Global, LateRule::Flink),
        &[calls[0], calls[1], &[("a", 5, 4), ("a", 12, 3)], &[]],
    );
    assert_eq!(flink_reversed, flink);
    let (mut o, _) = op(rule_cfg(session, Scope::Global, LateRule::Flink));
    for b in calls {
        o.process(&batch_ms(b), None).unwrap();
    }
    assert_eq!(
        rows_ms(&o.flush().unwrap().windows),
        vec![("a".into(), 5, 40, 4, Some(10))]
    );
}

#[test]
fn late_rules_spark_per_key_closes_a_key_in_the_call_after_its_watermark_moved() {
    // Key a's watermark moves to 25 in call 1; call 2 has rows of b only, yet closes
    // a's [0,10) (at a's watermark); a row of a at 8 in call 2 would still have joined.
    let c = rule_cfg(TUMBLING_10, Scope::Key, LateRule::Spark);
    let out = run_calls(
        c.clone(),
        &[
            &[("a", 5, 1), ("a", 25, 2)],
            &[("b", 1, 3)],
            &[("a", 9, 4)],
            &[],
        ],
    );
    assert_eq!(out[0].0, vec![]);
    assert_eq!(out[1].0, vec![("a".into(), 0, 10, 1, Some(1))]);
    assert_eq!(out[2].1, vec![9], "a's [0,10) was emitted: late");
    let out = run_calls(c, &[&[("a", 5, 1), ("a", 25, 2)], &[("a", 8, 3)], &[]]);
    assert_eq!(out[1].0, vec![("a".into(), 0, 10, 2, Some(4))]);
    // The pending close survives a snapshot.
    let c = rule_cfg(TUMBLING_10, Scope::Key, LateRule::Spark);
    let (mut o, clock) = op(c.clone());
    o.process(&batch_ms(&[("a", 5, 1), ("a", 25, 2)]), None)
        .unwrap();
    let mut back = Operator::restore(c, Arc::new(clock), &o.snapshot()).unwrap();
    let out = back.process(&batch_ms(&[("b", 1, 3)]), None).unwrap();
    assert_eq!(rows_ms(&out.windows), vec![("a".into(), 0, 10, 1, Some(1))]);
}

#[test]
fn late_rules_have_names_and_fingerprints() {
    for r in [LateRule::Spark, LateRule::Flink, LateRule::Row] {
        assert_eq!(r.name().parse::<LateRule>().unwrap(), r);
    }
    assert!("spark ".parse::<LateRule>().is_err());
    let fp = |r| rule_cfg(TUMBLING_10, Scope::Global, r).fingerprint();
    assert_ne!(fp(LateRule::Spark), fp(LateRule::Flink));
    assert_ne!(fp(LateRule::Row), fp(LateRule::Flink));
}

#[test]
fn late_rules_spark_keeps_a_global_watermark_in_whole_milliseconds() {
    // Spark: watermark = max(event time µs / 1000) - delay, in milliseconds.
    let c = PipelineConfig {
        late_rule: LateRule::Spark,
        ..cfg(WindowSpec::Session { gap: 1_000 }, Scope::Global)
    };
    let (mut o, _) = op(c.clone());
    o.process(&batch(&[("a", 1_200, 1), ("a", 2_700, 2)]), None)
        .unwrap();
    assert_eq!(o.watermark(), Some(2_000));
    // [1200, 2200) ends after W = 2000 µs: still open (at W = 2700 µs it would close).
    let out = o.process(&batch(&[]), None).unwrap();
    assert_eq!(rows(&out.windows), vec![]);
    let (mut flink, _) = op(PipelineConfig {
        late_rule: LateRule::Flink,
        ..c
    });
    flink
        .process(&batch(&[("a", 1_200, 1), ("a", 2_700, 2)]), None)
        .unwrap();
    assert_eq!(flink.watermark(), Some(2_700));
}

/// Per key, 10 s tumbling windows, keys idle after 1 s of event time (the default
/// idleness), the stream's event time its largest (`quorum` 1); event times in
/// microseconds.
fn event_idle_cfg() -> PipelineConfig {
    PipelineConfig {
        idle_timeout: Some(1_000),
        quorum: 1,
        ..cfg(
            WindowSpec::Tumbling {
                size: 10_000_000,
                offset: 0,
            },
            Scope::Key,
        )
    }
}

#[test]
fn idleness_in_event_time_is_decided_by_the_data_not_the_clock() {
    const S: i64 = 1_000_000;
    let calls: [&[(&str, i64, i64)]; 4] = [
        &[("quiet", 3 * S, 1), ("busy", 4 * S, 1)],
        &[("busy", 4 * S + S / 2, 1)],
        // The scope's time was 4.5 s when this call began: quiet (last rows when it
        // was 4 s, its first reading) is 0.5 s behind, not idle.
        &[("busy", 50 * S, 1)],
        // 50 s: quiet is idle; its window closes on the global watermark.
        &[("busy", 51 * S, 1)],
    ];
    let mut runs = Vec::new();
    for gaps in [[0, 0, 0, 0], [7_200_000, 1, 0, 86_400_000], [1, 1, 1, 1]] {
        let (mut o, clock) = op(event_idle_cfg());
        let mut out = Vec::new();
        for (rows, gap) in calls.iter().zip(gaps) {
            out.push(rows_of(&o.process(&batch(rows), None).unwrap().windows));
            clock.advance(gap);
        }
        out.push(rows_of(&o.flush().unwrap().windows));
        runs.push(out);
    }
    assert_eq!(runs[0], runs[1], "the clock's readings change nothing");
    assert_eq!(runs[0], runs[2]);
    let expected: Vec<Vec<Row>> = vec![
        vec![],
        vec![],
        vec![("busy".into(), 0, 10 * S, 2, Some(2))],
        vec![("quiet".into(), 0, 10 * S, 1, Some(1))],
        vec![("busy".into(), 50 * S, 60 * S, 2, Some(2))],
    ];
    assert_eq!(runs[0], expected);
}

fn rows_of(out: &RecordBatch) -> Vec<Row> {
    rows(out)
}

#[test]
fn inputs_of_the_first_call_take_the_first_event_time_reading_as_their_activity() {
    const S: i64 = 1_000_000;
    let (mut o, _) = op(event_idle_cfg());
    // One call spanning 10 s of event time: "a" sent at its start, but the scope had no
    // time yet; "a" counts as active when the scope's time began (10 s).
    o.process(&batch(&[("a", 0, 1), ("b", 10 * S, 1)]), None)
        .unwrap();
    for t in [11, 12] {
        o.process(&batch(&[("b", t * S, 1)]), None).unwrap();
        assert_eq!(o.key_metrics().idle_keys, 0, "at {t} s");
    }
    // The scope's time is 12 s: 2 s past "a"'s activity.
    o.process(&batch(&[("b", 13 * S, 1)]), None).unwrap();
    assert_eq!(o.key_metrics().idle_keys, 1);
}

#[test]
fn partitions_go_idle_in_event_time() {
    const S: i64 = 1_000_000;
    let c = PipelineConfig {
        idle_timeout: Some(1_000),
        delay: 0,
        ..cfg(
            WindowSpec::Tumbling {
                size: 10 * S,
                offset: 0,
            },
            Scope::Partition { column: "p".into() },
        )
    };
    let (mut o, clock) = op(c);
    o.process(&part_batch(&[("a", 0, S), ("b", 1, S)]), None)
        .unwrap();
    clock.advance(3_600_000); // an hour of wall time: nothing goes idle by it
    o.process(&part_batch(&[("a", 0, 2 * S)]), None).unwrap();
    assert_eq!(o.watermark(), Some(S), "partition 1 holds it back");
    o.process(&part_batch(&[("a", 0, 20 * S)]), None).unwrap();
    assert_eq!(
        o.watermark(),
        Some(S),
        "the scope's time was 2 s as the call began"
    );
    let out = o.process(&part_batch(&[("a", 0, 21 * S)]), None).unwrap();
    // 20 s: partition 1 has been silent for 19 s of event time.
    assert_eq!(o.watermark(), Some(21 * S));
    assert_eq!(
        rows(&out.windows),
        vec![
            ("a".into(), 0, 10 * S, 2, Some(2)),
            ("b".into(), 0, 10 * S, 1, Some(1))
        ]
    );
}

#[test]
fn rows_far_ahead_of_the_stream_are_error_rows_that_move_no_watermark() {
    const S: i64 = 1_000_000;
    let c = PipelineConfig {
        max_ahead: Some(3_600 * S),
        ..cfg(
            WindowSpec::Tumbling {
                size: 10 * S,
                offset: 0,
            },
            Scope::Global,
        )
    };
    let (mut o, _) = op(c);
    // The first call has nothing to measure from.
    o.process(&batch(&[("a", S, 1)]), None).unwrap();
    let year_2300 = 10_413_792_000 * S;
    let out = o
        .process(&batch(&[("a", 2 * S, 1), ("b", year_2300, 1)]), None)
        .unwrap();
    assert_eq!(out.errors.num_rows(), 1);
    let reason = out.errors.column(3).as_string::<i32>().value(0).to_string();
    assert!(
        reason.contains(
            "more than max_ahead (1h) ahead of the stream's event time (1970-01-01T00:00:01Z)"
        ),
        "{reason}"
    );
    assert_eq!(o.watermark(), Some(2 * S));
    // An hour ahead exactly is not too far.
    let out = o.process(&batch(&[("a", 3_602 * S, 1)]), None).unwrap();
    assert_eq!(out.errors.num_rows(), 0);
    assert_eq!(o.metrics().rows_error, 1);
}

#[test]
fn a_row_that_would_merge_into_a_closed_session_of_its_key_is_late() {
    // The mobile user: 30-minute sessions, per-key watermarks with a minute of
    // delay, keys idle after 5 minutes of event time. "a" goes idle; its session
    // [00:00, 00:30) closes on the global watermark; its row at 00:10 comes after.
    const M: i64 = 60_000_000;
    for rule in [LateRule::Spark, LateRule::Flink, LateRule::Row] {
        for scope in [Scope::Key, Scope::Partition { column: "p".into() }] {
            let c = PipelineConfig {
                delay: M,
                idle_timeout: Some(5 * 60_000),
                late_rule: rule,
                ..cfg(WindowSpec::Session { gap: 30 * M }, scope.clone())
            };
            let (mut o, _) = op(c.clone());
            let mut windows = Vec::new();
            let mut late = 0;
            for rows in [
                &[("a", 0, 0), ("b", 0, 0)][..],
                &[("b", 0, 60 * M)],
                &[("b", 0, 61 * M)],
                &[("b", 0, 62 * M)],
                &[("a", 0, 10 * M)],
            ] {
                let out = o.process(&part_batch(rows), None).unwrap();
                windows.extend(rows_of(&out.windows));
                late += out.late.num_rows();
                // Through a snapshot every call: the closed session's end is state.
                o = Operator::restore(c.clone(), Arc::new(ManualClock::new(0)), &o.snapshot())
                    .unwrap();
            }
            windows.extend(rows_of(&o.flush().unwrap().windows));
            let a: Vec<_> = windows.iter().filter(|w| w.0 == "a").collect();
            assert_eq!(
                a,
                vec![&("a".to_string(), 0, 30 * M, 1, Some(1))],
                "{rule:?} {scope:?}: one session of a, never overlapped"
            );
            assert_eq!(late, 1, "{rule:?} {scope:?}: the row at 00:10 is late");
        }
    }
}

#[test]
fn a_global_watermark_judges_a_session_row_by_its_own_session_as_spark_does() {
    // Spark's rule in a global scope: a row is late only when its own session
    // [ts, ts + gap) is closed, even when it overlaps a session already emitted.
    const M: i64 = 60_000_000;
    let c = PipelineConfig {
        late_rule: LateRule::Spark,
        ..cfg(WindowSpec::Session { gap: 30 * M }, Scope::Global)
    };
    let (mut o, _) = op(c);
    let mut windows = Vec::new();
    for rows in [
        &[("a", 0, 1)][..],
        &[("b", 40 * M, 1)],
        &[("b", 41 * M, 1)],
        &[("a", 20 * M, 1)],
    ] {
        let out = o.process(&batch(rows), None).unwrap();
        assert_eq!(out.late.num_rows(), 0);
        windows.extend(rows_of(&out.windows));
    }
    windows.extend(rows_of(&o.flush().unwrap().windows));
    let a: Vec<_> = windows
        .iter()
        .filter(|w| w.0 == "a")
        .map(|w| (w.1, w.2))
        .collect();
    assert_eq!(a, vec![(0, 30 * M), (20 * M, 50 * M)]);
}

#[test]
fn a_full_state_evicts_no_key_of_the_call_whatever_the_order_of_its_rows() {
    // Before, the new key "c" in the call's first row evicted "a", whose row came later
    // in the same call: "a" came back with its own floor and its row was late.
    for rows in [
        &[("c", 3, 1), ("a", 4, 1)][..],
        &[("a", 4, 1), ("c", 3, 1)][..],
    ] {
        let mut c = cfg(
            WindowSpec::Tumbling {
                size: 10,
                offset: 0,
            },
            Scope::Key,
        );
        c.delay = 60;
        c.max_keys = Some(2);
        let (mut o, _) = op(c);
        o.process(&batch(&[("a", 1, 1), ("b", 2, 1)]), None)
            .unwrap();
        let out = o.process(&batch(rows), None).unwrap();
        assert_eq!(out.late.num_rows(), 0);
        assert_eq!(rows_of(&out.windows), vec![("b".into(), 0, 10, 1, Some(1))]);
        let out = o.flush().unwrap();
        assert_eq!(
            rows_of(&out.windows),
            vec![
                ("a".into(), 0, 10, 2, Some(2)),
                ("c".into(), 0, 10, 1, Some(1))
            ]
        );
    }
}

#[test]
fn a_call_refused_after_a_flush_counts_nothing() {
    let (mut o, _) = op(cfg(
        WindowSpec::Tumbling {
            size: 10,
            offset: 0,
        },
        Scope::Global,
    ));
    o.process(&batch(&[("a", 1, 1)]), None).unwrap();
    o.flush().unwrap();
    let before = o.metrics();
    assert!(o.process(&batch(&[("a", 2, 1)]), None).is_err());
    assert_eq!(o.metrics(), before);
}
