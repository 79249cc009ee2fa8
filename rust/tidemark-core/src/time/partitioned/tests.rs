use super::*;
use crate::clock::ManualClock;
use std::sync::Arc;

fn tracker(timeout: Option<i64>) -> (PartitionedWatermarkTracker, ManualClock) {
    let clock = ManualClock::new(0);
    let t = PartitionedWatermarkTracker::new()
        .idle_timeout_ticks(timeout)
        .with_clock(Arc::new(clock.clone()));
    (t, clock)
}

fn p(partition: u32) -> PartitionId {
    PartitionId::new(0, partition)
}

#[test]
fn test_partitioned_tracker_single_partition_updates_watermark() {
    let (mut t, _) = tracker(None);
    t.register_source(0, 1);
    assert_eq!(t.current_watermark(), None);
    assert_eq!(
        t.update_partition(p(0), 1000).unwrap(),
        Some(Watermark::new(1000))
    );
    assert_eq!(
        t.update_partition(p(0), 500).unwrap(),
        None,
        "lower is ignored"
    );
    assert_eq!(t.partition_watermark(p(0)), Some(1000));
    assert_eq!(
        t.update_partition(p(0), 2000).unwrap(),
        Some(Watermark::new(2000))
    );
}

#[test]
fn test_partitioned_tracker_multiple_partitions_uses_minimum() {
    let (mut t, _) = tracker(None);
    t.register_source(0, 3);
    assert_eq!(t.update_partition(p(0), 5000).unwrap(), None);
    assert_eq!(t.update_partition(p(1), 3000).unwrap(), None);
    assert_eq!(
        t.update_partition(p(2), 4000).unwrap(),
        Some(Watermark::new(3000))
    );
    assert_eq!(
        t.update_partition(p(1), 6000).unwrap(),
        Some(Watermark::new(4000))
    );
}

#[test]
fn test_partitioned_tracker_idle_partition_excluded_from_min() {
    let (mut t, _) = tracker(None);
    t.register_source(0, 4);
    for (i, wm) in [5000, 3000, 4000, 4500].into_iter().enumerate() {
        t.update_partition(p(i as u32), wm).unwrap();
    }
    assert_eq!(t.current_watermark(), Some(Watermark::new(3000)));
    assert_eq!(
        t.mark_partition_idle(p(1)).unwrap(),
        Some(Watermark::new(4000))
    );
    assert!(t.is_partition_idle(p(1)).unwrap());
    assert_eq!(t.active_partition_count(0).unwrap(), 3);
}

#[test]
fn test_partitioned_tracker_all_idle_uses_max() {
    let (mut t, _) = tracker(None);
    t.register_source(0, 2);
    t.update_partition(p(0), 1000).unwrap();
    t.update_partition(p(1), 7000).unwrap();
    t.mark_partition_idle(p(1)).unwrap();
    assert_eq!(t.current_watermark(), Some(Watermark::new(1000)));
    assert_eq!(
        t.mark_partition_idle(p(0)).unwrap(),
        Some(Watermark::new(7000))
    );
    assert_eq!(t.source_watermark(0), Some(7000));
}

#[test]
fn test_partitioned_tracker_partition_reactivated_on_update() {
    let (mut t, _) = tracker(None);
    t.register_source(0, 2);
    t.update_partition(p(0), 1000).unwrap();
    t.update_partition(p(1), 2000).unwrap();
    t.mark_partition_idle(p(0)).unwrap();
    assert_eq!(t.current_watermark(), Some(Watermark::new(2000)));
    t.update_partition(p(0), 1500).unwrap();
    assert!(!t.is_partition_idle(p(0)).unwrap());
    assert_eq!(
        t.current_watermark(),
        Some(Watermark::new(2000)),
        "monotonic"
    );
    assert_eq!(t.update_partition(p(0), 3000).unwrap(), None);
    assert_eq!(
        t.update_partition(p(1), 5000).unwrap(),
        Some(Watermark::new(3000))
    );
}

#[test]
fn test_partitioned_tracker_add_partition_during_operation() {
    let (mut t, _) = tracker(None);
    t.register_source(0, 2);
    t.update_partition(p(0), 1000).unwrap();
    t.update_partition(p(1), 2000).unwrap();
    t.add_partition(p(2)).unwrap();
    // The new partition has no watermark yet: it holds the minimum back.
    assert_eq!(t.update_partition(p(0), 5000).unwrap(), None);
    assert_eq!(
        t.update_partition(p(2), 4000).unwrap(),
        Some(Watermark::new(2000))
    );
    assert_eq!(t.metrics().rebalances, 1);
    assert!(matches!(
        t.add_partition(p(2)),
        Err(TidemarkError::InvalidPartition { partition: 2, .. })
    ));
    assert!(matches!(
        t.add_partition(PartitionId::new(9, 0)),
        Err(TidemarkError::SourceNotFound { source_id: 9 })
    ));
    t.add_partition(p(10)).unwrap();
    assert_eq!(t.partitions().len(), 4);
}

#[test]
fn test_partitioned_tracker_remove_partition_recalculates_watermark() {
    let (mut t, _) = tracker(None);
    t.register_source(0, 3);
    t.update_partition(p(0), 1000).unwrap();
    t.update_partition(p(1), 3000).unwrap();
    t.update_partition(p(2), 4000).unwrap();
    let removed = t.remove_partition(p(0)).unwrap();
    assert_eq!(removed.watermark, Some(1000));
    assert_eq!(t.current_watermark(), Some(Watermark::new(3000)));
    assert_eq!(t.remove_partition(p(0)), None);
    assert!(matches!(
        t.update_partition(p(0), 1),
        Err(TidemarkError::UnknownPartition {
            source_id: 0,
            partition: 0
        })
    ));
    assert_eq!(t.metrics().total_partitions, 2);
}

#[test]
fn test_partitioned_tracker_check_idle_marks_stale_partitions() {
    let (mut t, clock) = tracker(Some(30_000));
    t.register_source(0, 3);
    t.update_partition(p(0), 1000).unwrap();
    t.update_partition(p(1), 2000).unwrap();
    // p(2) never sends data: it blocks until it goes idle.
    assert_eq!(t.current_watermark(), None);
    clock.advance(20_000);
    t.update_partition(p(1), 6000).unwrap();
    clock.advance(10_001);
    // p(0) and p(2) were last active at 0; p(1) at 20_000.
    assert_eq!(t.check_idle_partitions(), Some(Watermark::new(6000)));
    assert!(t.is_partition_idle(p(0)).unwrap());
    assert!(t.is_partition_idle(p(2)).unwrap());
    assert!(!t.is_partition_idle(p(1)).unwrap());
    assert_eq!(t.check_idle_partitions(), None);
}

#[test]
fn test_partitioned_tracker_check_idle_is_exact_at_the_timeout() {
    let (mut t, clock) = tracker(Some(100));
    t.register_source(0, 1);
    t.update_partition(p(0), 1).unwrap();
    clock.advance(100);
    t.check_idle_partitions();
    assert!(
        !t.is_partition_idle(p(0)).unwrap(),
        "idle only after more than the timeout"
    );
    clock.advance(1);
    t.check_idle_partitions();
    assert!(t.is_partition_idle(p(0)).unwrap());
}

#[test]
fn test_partitioned_tracker_source_watermark_aggregates_partitions() {
    let (mut t, _) = tracker(None);
    t.register_source(0, 2);
    t.register_source(1, 2);
    t.update_partition(p(0), 100).unwrap();
    t.update_partition(p(1), 300).unwrap();
    t.update_partition(PartitionId::new(1, 0), 50).unwrap();
    assert_eq!(t.source_watermark(0), Some(100));
    assert_eq!(t.source_watermark(1), None, "partition (1, 1) has none yet");
    t.update_partition(PartitionId::new(1, 1), 70).unwrap();
    assert_eq!(t.source_watermark(1), Some(50));
    assert_eq!(t.current_watermark(), Some(Watermark::new(50)));
    assert_eq!(t.source_watermark(7), None);
}

#[test]
fn test_partitioned_tracker_metrics_accurate() {
    let (mut t, _) = tracker(None);
    t.register_source(0, 4);
    t.update_partition(p(0), 1).unwrap();
    t.update_partition(p(1), 1).unwrap();
    t.update_partition(p(2), 1).unwrap();
    t.update_partition(p(3), 2).unwrap();
    t.update_partition(p(0), 5).unwrap();
    t.mark_partition_idle(p(1)).unwrap();
    t.add_partition(p(4)).unwrap();
    t.remove_partition(p(4));
    let m = t.metrics();
    assert_eq!(m.total_partitions, 4);
    assert_eq!(m.active_partitions, 3);
    assert_eq!(m.idle_partitions, 1);
    assert_eq!(
        m.watermark_advances, 1,
        "only 1 -> 1 happened; idle of p1 left min at p2=1"
    );
    assert_eq!(m.rebalances, 2);
}

#[test]
fn test_partitioned_tracker_core_assignment() {
    let (mut t, _) = tracker(None);
    t.register_source(0, 2);
    assert_eq!(t.partition_core(p(0)), None);
    t.assign_partition_to_core(p(0), 3).unwrap();
    assert_eq!(t.partition_core(p(0)), Some(3));
    assert_eq!(t.partition_state(p(0)).unwrap().assigned_core, Some(3));
    assert!(t.assign_partition_to_core(p(9), 1).is_err());
}

#[test]
fn test_partitioned_tracker_register_source_again_resizes() {
    let (mut t, _) = tracker(None);
    t.register_source(0, 3);
    t.update_partition(p(0), 10).unwrap();
    t.update_partition(p(1), 20).unwrap();
    t.register_source(0, 2);
    assert_eq!(t.partitions(), vec![p(0), p(1)]);
    assert_eq!(t.current_watermark(), Some(Watermark::new(10)));
    t.register_source(0, 3);
    assert_eq!(t.metrics().rebalances, 2);
    assert_eq!(t.partition_watermark(p(2)), None);
}

#[test]
fn test_partitioned_tracker_observe_max_event_times() {
    let (mut t, _) = tracker(None);
    t.register_source(0, 2);
    assert_eq!(
        t.observe_max_event_times(0, &[(0, 10_000), (1, 8_000)], 5_000, false)
            .unwrap(),
        Some(Watermark::new(3_000))
    );
    assert!(t.observe_max_event_times(0, &[(5, 1)], 0, false).is_err());
    assert_eq!(t.partitions().len(), 2, "a failed observe changes nothing");
    t.observe_max_event_times(0, &[(5, 20_000)], 0, true)
        .unwrap();
    assert_eq!(t.partition_watermark(p(5)), Some(20_000));
    assert_eq!(
        t.partition_state(p(0)).unwrap().last_event_time,
        Some(10_000)
    );
}

#[test]
fn bytes_per_partition_fits_a_cache_line() {
    assert!(PartitionedWatermarkTracker::bytes_per_partition() < 64);
    assert_eq!(std::mem::size_of::<Slot>(), 32);
}

mod model {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    #[derive(Debug, Clone)]
    enum Op {
        Update(u32, i64),
        FromEvent(u32, i64, i64),
        Idle(u32),
        Active(u32),
        Advance(i64),
        CheckIdle,
        Remove(u32),
        Add(u32),
    }

    fn op() -> impl Strategy<Value = Op> {
        let part = 0u32..6;
        prop_oneof![
            4 => (part.clone(), -50i64..200).prop_map(|(p, w)| Op::Update(p, w)),
            2 => (part.clone(), -50i64..200, 0i64..20).prop_map(|(p, e, l)| Op::FromEvent(p, e, l)),
            1 => part.clone().prop_map(Op::Idle),
            1 => part.clone().prop_map(Op::Active),
            2 => (0i64..15).prop_map(Op::Advance),
            1 => Just(Op::CheckIdle),
            1 => part.clone().prop_map(Op::Remove),
            1 => part.prop_map(Op::Add),
        ]
    }

    /// The reference algorithm, written as plainly as possible.
    #[derive(Default)]
    struct Model {
        parts: BTreeMap<u32, (i64, i64, bool)>, // watermark, last_activity, idle
        combined: i64,
        now: i64,
    }

    impl Model {
        fn recalc(&mut self) -> Option<i64> {
            let active: Vec<i64> = self.parts.values().filter(|s| !s.2).map(|s| s.0).collect();
            let cand = if active.is_empty() {
                self.parts.values().map(|s| s.0).max().unwrap_or(i64::MIN)
            } else {
                *active.iter().min().unwrap()
            };
            if cand > self.combined {
                self.combined = cand;
                Some(cand)
            } else {
                None
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(500))]
        #[test]
        fn tracker_matches_naive_model(ops in proptest::collection::vec(op(), 1..80)) {
            let (mut t, clock) = tracker(Some(10));
            let mut m = Model { combined: i64::MIN, ..Default::default() };
            t.register_source(0, 3);
            for i in 0..3 { m.parts.insert(i, (i64::MIN, 0, false)); }
            for op in ops {
                let (got, want): (Option<i64>, Option<i64>) = match op {
                    Op::Update(pp, w) | Op::FromEvent(pp, w, 0) => {
                        let r = t.update_partition(p(pp), w);
                        match m.parts.get_mut(&pp) {
                            None => { prop_assert!(r.is_err()); (None, None) }
                            Some(s) => { s.0 = s.0.max(w); s.1 = m.now; s.2 = false;
                                (r.unwrap().map(|w| w.timestamp()), m.recalc()) }
                        }
                    }
                    Op::FromEvent(pp, e, l) => {
                        let r = t.update_partition_from_event(p(pp), e, l);
                        match m.parts.get_mut(&pp) {
                            None => { prop_assert!(r.is_err()); (None, None) }
                            Some(s) => { s.0 = s.0.max(e - l); s.1 = m.now; s.2 = false;
                                (r.unwrap().map(|w| w.timestamp()), m.recalc()) }
                        }
                    }
                    Op::Idle(pp) => {
                        let r = t.mark_partition_idle(p(pp));
                        match m.parts.get_mut(&pp) {
                            None => { prop_assert!(r.is_err()); (None, None) }
                            Some(s) => { s.2 = true; (r.unwrap().map(|w| w.timestamp()), m.recalc()) }
                        }
                    }
                    Op::Active(pp) => {
                        let r = t.mark_partition_active(p(pp));
                        match m.parts.get_mut(&pp) {
                            None => { prop_assert!(r.is_err()); (None, None) }
                            Some(s) => { s.2 = false; s.1 = m.now; r.unwrap(); (None, None) }
                        }
                    }
                    Op::Advance(d) => { clock.advance(d); m.now += d; (None, None) }
                    Op::CheckIdle => {
                        let got = t.check_idle_partitions().map(|w| w.timestamp());
                        let now = m.now;
                        let mut any = false;
                        for s in m.parts.values_mut() {
                            if !s.2 && now - s.1 > 10 { s.2 = true; any = true; }
                        }
                        (got, if any { m.recalc() } else { None })
                    }
                    Op::Remove(pp) => {
                        let r = t.remove_partition(p(pp));
                        let s = m.parts.remove(&pp);
                        prop_assert_eq!(r.map(|r| r.watermark.unwrap_or(i64::MIN)), s.map(|s| s.0));
                        m.recalc();
                        (None, None)
                    }
                    Op::Add(pp) => {
                        let r = t.add_partition(p(pp));
                        if m.parts.contains_key(&pp) { prop_assert!(r.is_err()); }
                        else { r.unwrap(); m.parts.insert(pp, (i64::MIN, m.now, false)); }
                        (None, None)
                    }
                };
                prop_assert_eq!(got, want);
                prop_assert_eq!(t.current_watermark().map(|w| w.timestamp()), Watermark::from_raw(m.combined).map(|w| w.timestamp()));
                // Whenever the combined watermark advances it is <= every active
                // partition's watermark (or, with all idle, their maximum).
                if let Some(w) = got {
                    for (pp, s) in &m.parts {
                        if !s.2 { prop_assert!(w <= s.0, "combined {} > active partition {} at {}", w, pp, s.0); }
                    }
                }
                for (pp, s) in &m.parts {
                    prop_assert_eq!(t.is_partition_idle(p(*pp)).unwrap(), s.2);
                }
                let mt = t.metrics();
                prop_assert_eq!(mt.total_partitions, m.parts.len());
                prop_assert_eq!(mt.idle_partitions, m.parts.values().filter(|s| s.2).count());
            }
        }

        #[test]
        fn combined_is_monotonic(ops in proptest::collection::vec(op(), 1..80)) {
            let (mut t, clock) = tracker(Some(10));
            t.register_source(0, 3);
            let mut last = None;
            for op in ops {
                match op {
                    Op::Update(pp, w) => { let _ = t.update_partition(p(pp), w); }
                    Op::FromEvent(pp, e, l) => { let _ = t.update_partition_from_event(p(pp), e, l); }
                    Op::Idle(pp) => { let _ = t.mark_partition_idle(p(pp)); }
                    Op::Active(pp) => { let _ = t.mark_partition_active(p(pp)); }
                    Op::Advance(d) => { clock.advance(d); }
                    Op::CheckIdle => { t.check_idle_partitions(); }
                    Op::Remove(pp) => { t.remove_partition(p(pp)); }
                    Op::Add(pp) => { let _ = t.add_partition(p(pp)); }
                }
                let now = t.current_watermark();
                prop_assert!(now >= last);
                last = now;
            }
        }
    }
}
