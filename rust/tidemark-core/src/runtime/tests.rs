use super::*;
use crate::agg::{AggKind, AggSpec};
use crate::clock::ManualClock;
use crate::pipeline::{EmitMode, Idleness, LateRule, SourceView};
use crate::window::WindowSpec;
use arrow_array::ArrayRef;
use arrow_array::{Float64Array, Int32Array, StringArray, TimestampMicrosecondArray};
use proptest::prelude::{any, prop, prop_assert_eq, prop_oneof, proptest, Just, ProptestConfig};
use proptest::strategy::Strategy as _;

fn cfg(window: WindowSpec, scope: Scope, emit: EmitMode, idle: Option<i64>) -> PipelineConfig {
    let aggs = vec![
        AggSpec::new("n", AggKind::Count, None),
        AggSpec::new("s", AggKind::Sum, Some("v")),
        AggSpec::new("m", AggKind::Mean, Some("v")),
    ];
    PipelineConfig {
        delay: 2_000,
        scope,
        idle_timeout: idle,
        // Idleness on the (manual) clock unless a test says otherwise.
        idleness: Idleness::Clock,
        emit,
        ..PipelineConfig::new(&["k"], "ts", window, aggs)
    }
}

/// Rows: (key, partition, event time or None for an unparseable row, value).
fn batch(rows: &[(u8, i32, Option<i64>, f64)]) -> RecordBatch {
    RecordBatch::try_from_iter(vec![
        (
            "k",
            Arc::new(StringArray::from(
                rows.iter()
                    .map(|r| format!("key-{}", r.0))
                    .collect::<Vec<_>>(),
            )) as ArrayRef,
        ),
        (
            "p",
            Arc::new(Int32Array::from(
                rows.iter().map(|r| r.1).collect::<Vec<_>>(),
            )) as ArrayRef,
        ),
        (
            "ts",
            Arc::new(
                TimestampMicrosecondArray::from(rows.iter().map(|r| r.2).collect::<Vec<_>>())
                    .with_timezone("UTC"),
            ) as ArrayRef,
        ),
        (
            "v",
            Arc::new(Float64Array::from(
                rows.iter().map(|r| r.3).collect::<Vec<_>>(),
            )) as ArrayRef,
        ),
    ])
    .unwrap()
}

fn scopes() -> Vec<Scope> {
    vec![
        Scope::Global,
        Scope::Key,
        Scope::Partition { column: "p".into() },
    ]
}

fn windows() -> Vec<WindowSpec> {
    vec![
        WindowSpec::Tumbling {
            size: 5_000,
            offset: 0,
        },
        WindowSpec::Sliding {
            size: 6_000,
            slide: 2_000,
            offset: 0,
        },
        WindowSpec::Session { gap: 3_000 },
    ]
}

type Stream = Vec<(Vec<(u8, i32, Option<i64>, f64)>, i64)>;

/// Bounds on event times (`max_ahead` and `max_behind` alike) that the generated
/// streams' 60 ms cross (`None`: none), and the keys that must agree on progress.
fn believed() -> impl proptest::strategy::Strategy<Value = (Option<i64>, u32)> {
    (
        prop_oneof![Just(None), (2_000i64..40_000).prop_map(Some)],
        1u32..5,
    )
}

fn stream() -> impl proptest::strategy::Strategy<Value = Stream> {
    let row = (
        0u8..12,
        0i32..3,
        prop_oneof![20 => (0i64..60_000).prop_map(Some), 1 => Just(None)],
        (-50i32..50).prop_map(|v| v as f64 / 4.0),
    );
    // Each batch: rows, then the clock advance (ms) after it (drives idleness).
    prop::collection::vec((prop::collection::vec(row, 0..40), 0i64..4_000), 1..8)
}

/// Runs a stream through one operator and through a sharded one, batch by batch.
fn check_same(c: PipelineConfig, cores: usize, s: &Stream, snapshot_at: Option<usize>) {
    check_same_hot(c, cores, s, snapshot_at, None, cores)
}

fn check_same_hot(
    c: PipelineConfig,
    cores: usize,
    s: &Stream,
    snapshot_at: Option<usize>,
    hot: Option<f64>,
    restore_cores: usize,
) {
    let single_clock = ManualClock::new(0);
    let sharded_clock = ManualClock::new(0);
    let mut single = Operator::new(c.clone(), Arc::new(single_clock.clone())).unwrap();
    let mut sharded = match hot {
        None => ShardedOperator::new(c.clone(), Arc::new(sharded_clock.clone()), cores, 2),
        Some(share) => ShardedOperator::with_hot_keys(
            c.clone(),
            Arc::new(sharded_clock.clone()),
            cores,
            2,
            share,
        ),
    }
    .unwrap();
    for (i, (rows, advance)) in s.iter().enumerate() {
        if snapshot_at == Some(i) {
            let bytes = sharded.snapshot().unwrap();
            sharded = ShardedOperator::restore(
                c.clone(),
                Arc::new(sharded_clock.clone()),
                restore_cores,
                2,
                &bytes,
            )
            .unwrap();
            if restore_cores == 1 {
                // Through a plain operator too: its snapshot restores on `cores` cores.
                let one =
                    restore_operator(c.clone(), Arc::new(sharded_clock.clone()), &bytes).unwrap();
                sharded = ShardedOperator::restore(
                    c.clone(),
                    Arc::new(sharded_clock.clone()),
                    cores,
                    2,
                    &one.snapshot(),
                )
                .unwrap();
            }
        }
        let b = batch(rows);
        let a = single.process(&b, None).unwrap();
        let z = sharded.process(&b, None).unwrap();
        assert_eq!(
            a.windows, z.windows,
            "windows, batch {i}, {:?} {:?} {:?} {:?}",
            c.scope, c.window, c.late_rule, c.emit
        );
        assert_eq!(a.late, z.late, "late rows, batch {i}");
        assert_eq!(a.errors, z.errors, "error rows, batch {i}");
        assert_eq!(
            single.watermark(),
            sharded.watermark(),
            "watermark, batch {i}"
        );
        single_clock.advance(*advance);
        sharded_clock.advance(*advance);
    }
    let a = single.flush().unwrap();
    let z = sharded.flush().unwrap();
    assert_eq!(a.windows, z.windows, "flush");
    let (m, _) = sharded.metrics().unwrap();
    let sm = single.metrics();
    assert_eq!(m.rows_in, sm.rows_in);
    assert_eq!(m.late_dropped_count, sm.late_dropped_count);
    assert_eq!(m.windows_emitted, sm.windows_emitted);
    assert_eq!(m.batches, sm.batches);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn sharded_output_equals_one_operator(
        s in stream(),
        cores in 2usize..5,
        on_update in any::<bool>(),
        idle in prop_oneof![Just(None), (1_000i64..6_000).prop_map(Some)],
        in_event_time in any::<bool>(),
        snapshot_at in prop::option::of(0usize..8),
        restore_cores in 1usize..5,
        rule in prop_oneof![Just(LateRule::Spark), Just(LateRule::Flink), Just(LateRule::Row)],
        (bound, quorum) in believed(),
    ) {
        let emit = if on_update { EmitMode::OnUpdate } else { EmitMode::OnWindowClose };
        // Idleness in event time: 1-6 ms of the stream's 60 ms (its clock advances
        // are then noise the result must not depend on).
        let (idleness, idle) = if in_event_time {
            (Idleness::EventTime, idle.map(|t| t / 1_000))
        } else {
            (Idleness::Clock, idle)
        };
        for scope in scopes() {
            for window in windows() {
                let c = PipelineConfig { late_rule: rule, idleness, max_ahead: bound, max_behind: bound, quorum, ..cfg(window, scope.clone(), emit, idle) };
                check_same_hot(c, cores, &s, snapshot_at, None, restore_cores);
            }
        }
    }
}

fn two_phase_scopes() -> Vec<Scope> {
    vec![Scope::Global, Scope::Partition { column: "p".into() }]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    /// key=None on several cores: rows go round-robin, partial aggregates merge.
    #[test]
    fn two_phase_global_aggregate_equals_one_operator(
        s in stream(),
        cores in 2usize..5,
        idle in prop_oneof![Just(None), (1_000i64..6_000).prop_map(Some)],
        snapshot_at in prop::option::of(0usize..8),
        restore_cores in 1usize..5,
    ) {
        for scope in two_phase_scopes() {
            for window in &windows()[..2] {
                let mut c = cfg(*window, scope.clone(), EmitMode::OnWindowClose, idle);
                c.keys.clear();
                check_same_hot(c, cores, &s, snapshot_at, None, restore_cores);
            }
        }
    }

    /// Hot keys spread over cores (a skewed stream: key 0 carries most rows).
    #[test]
    fn spreading_hot_keys_keeps_results_exact(
        s in stream(),
        cores in 2usize..5,
        share in 0.05f64..0.6,
        snapshot_at in prop::option::of(0usize..8),
        restore_cores in 1usize..5,
    ) {
        let skewed: Stream = s
            .iter()
            .map(|(rows, adv)| {
                let rows = rows
                    .iter()
                    .enumerate()
                    .map(|(i, r)| if i % 4 != 0 { (0, r.1, r.2, r.3) } else { *r })
                    .collect();
                (rows, *adv)
            })
            .collect();
        for scope in two_phase_scopes() {
            for window in &windows()[..2] {
                let c = cfg(*window, scope.clone(), EmitMode::OnWindowClose, None);
                check_same_hot(c, cores, &skewed, snapshot_at, Some(share), restore_cores);
            }
        }
    }
}

#[test]
fn hot_keys_are_detected_and_spread() {
    let c = cfg(windows()[0], Scope::Global, EmitMode::OnWindowClose, None);
    let mut op =
        ShardedOperator::with_hot_keys(c, Arc::new(ManualClock::new(0)), 2, 4, 0.25).unwrap();
    let rows: Vec<_> = (0..1000)
        .map(|i| {
            (
                if i % 2 == 0 { 0 } else { (i % 50) as u8 },
                0,
                Some(i as i64 * 10),
                1.0,
            )
        })
        .collect();
    op.process(&batch(&rows), None).unwrap();
    let (spread, hot) = op.hot_key_metrics();
    assert_eq!(hot, 1);
    assert_eq!(spread, 500);
    let per_core: Vec<u64> = op
        .core_metrics()
        .iter()
        .map(|c| c.records_processed)
        .collect();
    // Without spreading one core would get the hot key's 500 rows plus its share.
    assert!(per_core.iter().all(|&r| r < 700), "{per_core:?}");
}

#[test]
fn one_core_is_the_plain_operator() {
    let s: Stream = vec![
        (vec![(1, 0, Some(1_000), 1.0), (2, 1, Some(7_000), 2.0)], 10),
        (vec![(1, 0, Some(12_000), 1.0), (3, 2, Some(500), 2.0)], 10),
    ];
    for scope in scopes() {
        check_same(
            cfg(windows()[0], scope, EmitMode::OnWindowClose, None),
            1,
            &s,
            Some(1),
        );
    }
}

#[test]
fn workers_spread_keys_and_report_metrics() {
    let c = cfg(windows()[0], Scope::Key, EmitMode::OnWindowClose, None);
    let mut op = ShardedOperator::new(c, Arc::new(ManualClock::new(0)), 3, 4).unwrap();
    let rows: Vec<_> = (0..300)
        .map(|i| ((i % 12) as u8, 0, Some(i as i64 * 100), 1.0))
        .collect();
    op.process(&batch(&rows), None).unwrap();
    let m = op.core_metrics();
    assert_eq!(m.len(), 3);
    assert_eq!(m.iter().map(|c| c.records_processed).sum::<u64>(), 300);
    assert!(m.iter().filter(|c| c.records_processed > 0).count() >= 2);
    for c in &m {
        assert_eq!(c.queue_depth, 0);
        assert_eq!(c.backpressure, BackpressureState::Healthy);
        assert!(c.latency_p50_us <= c.latency_p99_us);
    }
}

#[test]
fn configuration_errors_are_clear_and_change_nothing() {
    let c = cfg(windows()[0], Scope::Key, EmitMode::OnWindowClose, None);
    let clock: ClockRef = Arc::new(ManualClock::new(0));
    assert!(ShardedOperator::new(c.clone(), clock.clone(), 0, 4).is_err());
    assert!(ShardedOperator::new(c.clone(), clock.clone(), 2, 0).is_err());
    let mut global = c.clone();
    global.keys.clear();
    global.scope = Scope::Global;
    assert!(ShardedOperator::new(global.clone(), clock.clone(), 2, 4).is_ok());
    let mut sessions = global.clone();
    sessions.window = WindowSpec::Session { gap: 5 };
    let e = ShardedOperator::new(sessions, clock.clone(), 2, 4).unwrap_err();
    assert!(e.to_string().contains("sessions"), "{e}");
    let mut updates = global.clone();
    updates.emit = EmitMode::OnUpdate;
    let e = ShardedOperator::new(updates, clock.clone(), 2, 4).unwrap_err();
    assert!(e.to_string().contains("on_window_close"), "{e}");
    let e = ShardedOperator::with_hot_keys(c.clone(), clock.clone(), 2, 4, 0.3).unwrap_err();
    assert!(e.to_string().contains("per-key watermark"), "{e}");
    let e = ShardedOperator::with_hot_keys(c.clone(), clock.clone(), 2, 4, 1.5).unwrap_err();
    assert!(e.to_string().contains("(0, 1]"), "{e}");
    let mut op = ShardedOperator::new(c.clone(), clock.clone(), 2, 4).unwrap();
    let wrong =
        RecordBatch::try_from_iter(vec![("x", Arc::new(Int32Array::from(vec![1])) as ArrayRef)])
            .unwrap();
    assert!(op.process(&wrong, None).is_err());
    // Still usable after the error.
    op.process(&batch(&[(1, 0, Some(1), 1.0)]), None).unwrap();
    let snap = op.snapshot().unwrap();
    let mut damaged = snap.clone();
    let last = damaged.len() - 1;
    damaged[last] ^= 1;
    let e = ShardedOperator::restore(c.clone(), clock.clone(), 3, 4, &damaged).unwrap_err();
    assert!(e.to_string().contains("checksum"), "{e}");
    let mut other = c.clone();
    other.delay += 1;
    assert!(ShardedOperator::restore(other, clock, 3, 4, &snap).is_err());
}

/// Rows of window outputs, for comparing sets of windows.
fn window_rows(outs: &[RecordBatch]) -> Vec<String> {
    let mut rows = Vec::new();
    for b in outs {
        for i in 0..b.num_rows() {
            rows.push(
                b.columns()
                    .iter()
                    .map(|c| format!("{:?}", c.slice(i, 1)))
                    .collect::<Vec<_>>()
                    .join("|"),
            );
        }
    }
    rows.sort();
    rows
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    /// Spark state partitions rescaled from `before` to `after` between batches:
    /// the union of the partitions' windows is the single operator's.
    #[test]
    fn spark_state_partitions_rescale(
        s in stream(),
        before in 1usize..5,
        after in 1usize..5,
        at in 0usize..8,
        window in 0usize..3,
    ) {
        use crate::route::{hash_router, HashAlgo};
        let c = cfg(windows()[window], Scope::Key, EmitMode::OnWindowClose, None);
        let clock: ClockRef = Arc::new(ManualClock::new(0));
        let mut single = Operator::new(c.clone(), clock.clone()).unwrap();
        let mut parts: Vec<Operator> =
            (0..before).map(|_| Operator::new(c.clone(), clock.clone()).unwrap()).collect();
        let (mut expected, mut got) = (Vec::new(), Vec::new());
        for (i, (rows, _)) in s.iter().enumerate() {
            if i == at {
                let snaps: Vec<Vec<u8>> = parts.iter().map(|p| p.snapshot()).collect();
                let refs: Vec<&[u8]> = snaps.iter().map(Vec::as_slice).collect();
                let new = crate::pipeline::reshard::reshard_snapshots(&c, &refs, after, HashAlgo::Spark).unwrap();
                parts = new.iter().map(|b| Operator::restore(c.clone(), clock.clone(), b).unwrap()).collect();
            }
            let b = batch(rows);
            expected.push(single.process(&b, None).unwrap().windows);
            let mut router = hash_router(parts.len(), &["k"], HashAlgo::Spark).unwrap();
            for (p, sub) in router.route(&b).unwrap().iter().enumerate() {
                got.push(parts[p].process(sub, None).unwrap().windows);
            }
        }
        expected.push(single.flush().unwrap().windows);
        for p in parts.iter_mut() {
            got.push(p.flush().unwrap().windows);
        }
        prop_assert_eq!(window_rows(&expected), window_rows(&got));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    /// A broadcast lookup joined before aggregation: same output on any core count,
    /// also when the table is swapped mid-stream.
    #[test]
    fn enriched_pipelines_match_across_cores(
        s in stream(),
        cores in 2usize..4,
        inner in any::<bool>(),
        swap_at in 0usize..8,
    ) {
        use crate::pipeline::lookup::{JoinHow, Lookup};
        let table = |scale: f64| {
            RecordBatch::try_from_iter(vec![
                (
                    "k",
                    Arc::new(StringArray::from(
                        (0..6).map(|i| format!("key-{i}")).collect::<Vec<_>>(),
                    )) as ArrayRef,
                ),
                (
                    "w",
                    Arc::new(Float64Array::from(
                        (0..6).map(|i| i as f64 * scale).collect::<Vec<_>>(),
                    )) as ArrayRef,
                ),
            ])
            .unwrap()
        };
        let how = if inner { JoinHow::Inner } else { JoinHow::Left };
        let mut c = cfg(windows()[0], Scope::Key, EmitMode::OnWindowClose, None);
        c.aggs.push(AggSpec {
            name: "weight".into(),
            kind: AggKind::Sum,
            column: Some("lk_w".into()),
            by: None,
        });
        let clock: ClockRef = Arc::new(ManualClock::new(0));
        let mut single = Operator::new(c.clone(), clock.clone()).unwrap();
        let mut sharded = ShardedOperator::new(c.clone(), clock.clone(), cores, 2).unwrap();
        let l = Lookup::new(&table(1.0), &["k".into()], how, Some("lk_")).unwrap();
        single.set_lookup(Some(l.clone()));
        sharded.set_lookup(Some(l));
        for (i, (rows, _)) in s.iter().enumerate() {
            if i == swap_at {
                let l = Lookup::new(&table(2.0), &["k".into()], how, Some("lk_")).unwrap();
                single.set_lookup(Some(l.clone()));
                sharded.set_lookup(Some(l));
            }
            let b = batch(rows);
            let a = single.process(&b, None).unwrap();
            let z = sharded.process(&b, None).unwrap();
            prop_assert_eq!(a.windows, z.windows);
            prop_assert_eq!(a.late, z.late);
            prop_assert_eq!(a.errors, z.errors);
        }
        prop_assert_eq!(single.flush().unwrap().windows, sharded.flush().unwrap().windows);
        let (m, _) = sharded.metrics().unwrap();
        prop_assert_eq!(m.rows_unmatched, single.metrics().rows_unmatched);
        prop_assert_eq!(m.rows_in, single.metrics().rows_in);
        if !inner {
            prop_assert_eq!(m.rows_unmatched, 0);
        }
    }
}

/// A micro-batch's rows tagged with their state partition (Spark's hash of `k`), and
/// one placeholder row per state partition (data columns null), as the Spark layer's
/// `repartition` input carries them.
fn tagged_batch(b: &RecordBatch, n: u32) -> RecordBatch {
    use crate::route::{hash_router, spark_tags, HashAlgo};
    use arrow_array::{new_null_array, Int32Array};
    use arrow_schema::{Field, Schema};
    let (data, placeholder) = spark_tags(n);
    let ids = hash_router(n as usize, &["k"], HashAlgo::Spark)
        .unwrap()
        .partition_ids(b)
        .unwrap();
    let mut fields: Vec<Field> = b
        .schema()
        .fields()
        .iter()
        .map(|f| f.as_ref().clone().with_nullable(true))
        .collect();
    fields.push(Field::new("__tag", arrow_schema::DataType::Int32, false));
    let schema = Arc::new(Schema::new(fields));
    let mut cols: Vec<ArrayRef> = b.columns().to_vec();
    cols.push(Arc::new(Int32Array::from(
        ids.iter().map(|&p| data[p as usize]).collect::<Vec<_>>(),
    )));
    let rows = RecordBatch::try_new(schema.clone(), cols).unwrap();
    let mut ph: Vec<ArrayRef> = b
        .columns()
        .iter()
        .map(|c| new_null_array(c.data_type(), n as usize))
        .collect();
    ph.push(Arc::new(Int32Array::from(placeholder)));
    let ph = RecordBatch::try_new(schema.clone(), ph).unwrap();
    arrow_select::concat::concat_batches(&schema, [&ph, &rows]).unwrap()
}

/// A Spark query's state partitions as the driver keeps them between micro-batches.
struct Driven {
    mb: micro_batch::MicroBatch,
    snapshots: Vec<Option<Vec<u8>>>,
    tagged: bool,
}

impl Driven {
    fn new(c: &PipelineConfig, n: u32, threads: usize, tagged: bool) -> Self {
        use micro_batch::{MicroBatch, Placement};
        Driven {
            mb: MicroBatch {
                placement: if tagged {
                    Placement::Tagged("__tag".into())
                } else {
                    Placement::Route
                },
                threads,
                run: format!("run-{n}-{threads}-{tagged}"),
                ..MicroBatch::new(c.clone(), n)
            },
            snapshots: vec![None; n as usize],
            tagged,
        }
    }

    /// One micro-batch (`None`: a flush; empty rows with `settle`: a quiet batch):
    /// its windows and late rows, as sorted rows; the watermark after it.
    fn batch(
        &mut self,
        rows: Option<&RecordBatch>,
        settle: bool,
    ) -> (Vec<String>, Vec<String>, Vec<String>, Option<i64>) {
        use micro_batch::{summarize, Report, Restore};
        let n = self.mb.partitions;
        self.mb.flush = rows.is_none();
        self.mb.settle = settle;
        let empty = batch(&[]);
        let rows = rows.unwrap_or(&empty);
        let input = if self.tagged {
            tagged_batch(rows, n)
        } else {
            rows.clone()
        };
        let held = (0..n)
            .map(|p| Restore {
                partition: p,
                snapshot: self.snapshots[p as usize].clone(),
                name: format!("p{p}"),
            })
            .collect();
        let got = self.mb.run(&input, None, held).unwrap();
        let mut reports = Vec::new();
        let (mut windows, mut late, mut errors) = (Vec::new(), Vec::new(), Vec::new());
        for r in got {
            self.snapshots[r.partition as usize] = Some(r.snapshot);
            let bytes = r.report.to_bytes(&self.mb.cfg);
            reports.push(Report::from_bytes(&self.mb.cfg, &bytes).unwrap());
            windows.push(r.output.windows);
            late.push(r.output.late);
            errors.push(r.output.errors);
        }
        let s = summarize(
            &self.mb.cfg,
            self.mb.scope.as_deref(),
            self.mb.clock_ms,
            self.mb.source.as_ref(),
            &self.mb.run,
            &reports,
        )
        .unwrap()
        .expect("this run's reports");
        assert!(
            summarize(&self.mb.cfg, None, 0, None, "another run", &reports)
                .unwrap()
                .is_none()
        );
        assert_eq!(s.counts.input_rows, rows.num_rows() as u64);
        if !self.mb.flush {
            self.mb.watermark = s.watermark;
        }
        self.mb.time = s.time;
        self.mb.scope = Some(s.scope);
        (
            window_rows(&windows),
            window_rows(&late),
            window_rows(&errors),
            self.mb.watermark,
        )
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    /// A micro-batch over N state partitions (rows routed by Spark's hash, or tagged
    /// as Spark's shuffle delivers them; on one thread or several) gives one state
    /// partition's windows, late rows and watermarks, batch by batch, then in a quiet
    /// batch and a flush.
    #[test]
    fn micro_batch_partitions_equal_one(
        s in stream(),
        n in 2u32..5,
        threads in 1usize..4,
        rule in prop_oneof![Just(LateRule::Spark), Just(LateRule::Flink), Just(LateRule::Row)],
        window in 0usize..3,
        waiting in 0u8..16,
        (bound, quorum) in believed(),
    ) {
        for scope in scopes() {
            let c = PipelineConfig { late_rule: rule, idleness: Idleness::EventTime, max_ahead: bound, max_behind: bound, quorum, ..cfg(windows()[window], scope.clone(), EmitMode::OnWindowClose, Some(5)) };
            let mut one = Driven::new(&c, 1, 1, false);
            let mut routed = Driven::new(&c, n, threads, false);
            let mut tagged = Driven::new(&c, n, 1, true);
            for (i, (rows, _)) in s.iter().enumerate() {
                let b = batch(rows);
                // The source's partitions as a Kafka micro-batch's offsets tell them: a
                // fourth that sends nothing, some with records waiting.
                let view = SourceView {
                    partitions: vec![0, 1, 2, 3],
                    waiting: (0..4).filter(|p| waiting >> ((p + i as u32) % 4) & 1 == 1).collect(),
                };
                for d in [&mut one, &mut routed, &mut tagged] {
                    d.mb.source = (i % 3 != 2).then(|| view.clone());
                }
                let a = one.batch(Some(&b), false);
                prop_assert_eq!(&a, &routed.batch(Some(&b), false), "routed, batch {} {:?}", i, scope);
                prop_assert_eq!(&a, &tagged.batch(Some(&b), false), "tagged, batch {} {:?}", i, scope);
            }
            let empty = batch(&[]);
            let a = one.batch(Some(&empty), true);
            prop_assert_eq!(&a, &routed.batch(Some(&empty), true), "quiet batch");
            let a = one.batch(None, false);
            prop_assert_eq!(&a, &routed.batch(None, false), "flush");
        }
    }
}

#[test]
fn micro_batch_names_a_damaged_snapshot_and_refuses_another_pipelines_report() {
    use micro_batch::{Report, Restore};
    let c = cfg(windows()[0], Scope::Global, EmitMode::OnWindowClose, None);
    let mut d = Driven::new(&c, 2, 1, false);
    d.batch(
        Some(&batch(&[
            (1, 0, Some(1_000), 1.0),
            (2, 0, Some(9_000), 2.0),
        ])),
        false,
    );
    let mut damaged = d.snapshots[1].clone().unwrap();
    let last = damaged.len() - 1;
    damaged[last] ^= 0xff;
    let held = vec![
        Restore {
            partition: 0,
            snapshot: d.snapshots[0].clone(),
            name: "p0.snap".into(),
        },
        Restore {
            partition: 1,
            snapshot: Some(damaged),
            name: "partitions/1/0.snap".into(),
        },
    ];
    let e = d.mb.run(&batch(&[]), None, held).unwrap_err();
    assert!(matches!(e, TidemarkError::StateCorrupted(_)), "{e}");
    assert!(e.to_string().contains("partitions/1/0.snap"), "{e}");
    let report = Report {
        partition: 3,
        run: "r".into(),
        counts: micro_batch::Counts {
            input_rows: 7,
            late_rows: 2,
            ..Default::default()
        },
        settled: Some((2, true)),
        ..Default::default()
    };
    let bytes = report.to_bytes(&c);
    assert_eq!(Report::from_bytes(&c, &bytes).unwrap(), report);
    let mut other = c.clone();
    other.delay += 1;
    assert!(Report::from_bytes(&other, &bytes).is_err());
    // A reorder's report: its buffer, sealed with its configuration's fingerprint; the
    // stream's watermark is the least of the partitions' that have one.
    let buffered = |watermark, rows| Report {
        run: "r".into(),
        buffer: Some(micro_batch::Buffer {
            watermark,
            rows,
            bytes: 10 * rows,
        }),
        ..Default::default()
    };
    let r = buffered(Some(5), 2);
    assert_eq!(Report::open(7, false, &r.seal(7, false)).unwrap(), r);
    assert!(Report::open(8, false, &r.seal(7, false)).is_err());
    let all = [r, buffered(None, 0), buffered(Some(3), 1)];
    let s = micro_batch::summarize_reorder("r", &all).unwrap();
    assert_eq!(
        s.buffer,
        micro_batch::Buffer {
            watermark: Some(3),
            rows: 3,
            bytes: 30
        }
    );
    assert!(micro_batch::summarize_reorder("other", &all).is_none());
}

/// One partition's row per batch (key `key-<p>`, value 1) at each event time given.
fn partition_rows(rows: &[(i32, i64)]) -> RecordBatch {
    let r: Vec<_> = rows
        .iter()
        .map(|&(p, t)| (p as u8, p, Some(t), 1.0))
        .collect();
    batch(&r)
}

#[test]
fn a_sources_partitions_known_from_its_offsets_hold_the_watermark_and_waiting_ones_stay_active() {
    let part = Scope::Partition { column: "p".into() };
    let win = WindowSpec::Tumbling {
        size: 5_000,
        offset: 0,
    };
    let c = PipelineConfig {
        idleness: Idleness::EventTime,
        ..cfg(win, part, EmitMode::OnWindowClose, Some(10))
    };
    let view = |partitions: &[u32], waiting: &[u32]| SourceView {
        partitions: partitions.to_vec(),
        waiting: waiting.to_vec(),
    };
    // Partition 2 has sent nothing: known from the offsets, it holds the watermark.
    let mut known = Driven::new(&c, 2, 1, false);
    let mut blind = Driven::new(&c, 2, 1, false);
    known.mb.source = Some(view(&[0, 1, 2], &[]));
    let first = partition_rows(&[(0, 10_000), (1, 12_000)]);
    assert_eq!(known.batch(Some(&first), false).3, None);
    assert_eq!(blind.batch(Some(&first), false).3, Some(8_000));
    // It reports: the minimum over the three.
    let second = partition_rows(&[(0, 20_000), (1, 21_000), (2, 9_000)]);
    assert_eq!(known.batch(Some(&second), false).3, Some(7_000));
    // A partition added mid-stream holds the watermark where it is, never lower.
    known.mb.source = Some(view(&[0, 1, 2, 3], &[]));
    let third = partition_rows(&[(0, 30_000), (1, 31_000), (2, 30_000)]);
    assert_eq!(known.batch(Some(&third), false).3, Some(7_000));
    let fourth = partition_rows(&[(0, 40_000), (1, 41_000), (2, 40_000), (3, 35_000)]);
    assert_eq!(known.batch(Some(&fourth), false).3, Some(33_000));

    // Idleness: partition 1 sends nothing while the others move on (event time),
    // once with its records waiting unread, once without.
    let (mut waits, mut quiet) = (Driven::new(&c, 2, 1, false), Driven::new(&c, 2, 1, false));
    let start = partition_rows(&[(0, 1_000), (1, 1_000)]);
    for d in [&mut waits, &mut quiet] {
        d.mb.source = Some(view(&[0, 1], &[]));
        assert_eq!(d.batch(Some(&start), false).3, Some(-1_000));
    }
    waits.mb.source = Some(view(&[0, 1], &[1]));
    for t in [20_000, 40_000, 60_000] {
        let only0 = partition_rows(&[(0, t)]);
        waits.batch(Some(&only0), false);
        quiet.batch(Some(&only0), false);
    }
    // Idle after 10 ms of event time only where nothing waits for it.
    assert_eq!(waits.mb.watermark, Some(-1_000));
    assert_eq!(quiet.mb.watermark, Some(58_000));
    // Its records come: nothing of them is late where they waited.
    let late1 = partition_rows(&[(1, 1_500)]);
    waits.mb.source = Some(view(&[0, 1], &[]));
    let (_, late, _, _) = waits.batch(Some(&late1), false);
    assert!(late.is_empty(), "{late:?}");
    let (_, late, _, _) = quiet.batch(Some(&late1), false);
    assert_eq!(late.len(), 1);
}

/// A new stream's first micro-batch run in parts (a shuffled batch: one run per state
/// partition) judges its rows by the quartiles given with it as the run holding every
/// state partition judges them by its own rows': the same error rows.
#[test]
fn a_first_micro_batch_in_parts_judges_by_the_quartiles_given() {
    use micro_batch::{MicroBatch, Restore};
    let c = PipelineConfig {
        max_ahead: Some(1_000),
        max_behind: Some(1_000),
        ..cfg(
            windows()[2],
            Scope::Partition { column: "p".into() },
            EmitMode::OnWindowClose,
            None,
        )
    };
    let mut rows: Vec<(u8, i32, Option<i64>, f64)> = (0..40)
        .map(|i| (i as u8 % 12, i % 3, Some(50_000 + i as i64 * 10), 1.0))
        .collect();
    rows.push((3, 1, Some(5_000), 1.0)); // far behind the others
    rows.push((4, 2, Some(900_000), 1.0)); // far ahead
    let b = batch(&rows);
    let errors = |runs: Vec<Vec<Restore>>, mb: &MicroBatch| -> Vec<String> {
        let mut out = Vec::new();
        for held in runs {
            for r in mb.run(&b, None, held).unwrap() {
                out.push(r.output.errors);
            }
        }
        window_rows(&out)
    };
    let held = |p: u32| Restore {
        partition: p,
        snapshot: None,
        name: format!("p{p}"),
    };
    let whole = MicroBatch::new(c.clone(), 3);
    let want = errors(vec![(0..3).map(held).collect()], &whole);
    assert_eq!(want.len(), 2, "{want:?}");
    let mut times: Vec<i64> = rows.iter().filter_map(|r| r.2).collect();
    times.sort_unstable();
    let n = times.len() - 1;
    let parts = MicroBatch {
        quartiles: Some((times[n / 4], times[3 * n / 4])),
        ..MicroBatch::new(c, 3)
    };
    let got = errors((0..3).map(|p| vec![held(p)]).collect(), &parts);
    assert_eq!(got, want);
    // Without them, a part alone has nothing to judge its first rows by.
    let blind = errors(
        (0..3).map(|p| vec![held(p)]).collect(),
        &MicroBatch::new(parts.cfg.clone(), 3),
    );
    assert!(blind.is_empty());
}
