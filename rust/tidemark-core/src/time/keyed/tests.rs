use std::sync::Arc;

use arrow_array::{ArrayRef, Int64Array, StringArray};

use super::*;
use crate::clock::ManualClock;
use crate::key::{AsKey, KeyColumns};
use crate::state::{Reader, Writer};
use crate::time::Watermark;

fn tracker(
    delay: i64,
    idle: Option<i64>,
    max_keys: Option<usize>,
    policy: KeyEvictionPolicy,
) -> (KeyedWatermarkTracker, ManualClock) {
    let clock = ManualClock::new(0);
    let t = KeyedWatermarkTracker::with_ticks(
        KeyedTicks {
            bounded_delay: delay,
            idle_timeout: idle,
            max_keys,
            eviction_policy: policy,
        },
        Arc::new(clock.clone()),
    );
    (t, clock)
}

fn simple() -> (KeyedWatermarkTracker, ManualClock) {
    tracker(
        5_000,
        Some(60_000),
        None,
        KeyEvictionPolicy::LeastRecentlyActive,
    )
}

fn w(v: i64) -> Option<Watermark> {
    Some(Watermark::new(v))
}

#[test]
fn test_keyed_tracker_single_key_updates_watermark() {
    let (mut t, _) = simple();
    assert_eq!(t.update("a", 10_000).unwrap(), w(5_000));
    assert_eq!(t.watermark_for_key("a"), Some(5_000));
    assert_eq!(
        t.update("a", 8_000).unwrap(),
        None,
        "older event: no change"
    );
    assert_eq!(t.watermark_for_key("a"), Some(5_000));
    assert_eq!(t.update("a", 12_000).unwrap(), w(7_000));
    assert_eq!(t.metrics().key_advances, 2);
}

#[test]
fn test_keyed_tracker_multiple_keys_independent_watermarks() {
    let (mut t, _) = simple();
    t.update("a", 20_000).unwrap();
    t.update("b", 9_000).unwrap();
    t.update(7i64, 6_000).unwrap();
    assert_eq!(t.watermark_for_key("a"), Some(15_000));
    assert_eq!(t.watermark_for_key("b"), Some(4_000));
    assert_eq!(t.watermark_for_key(&7i64), Some(1_000));
    assert_eq!(t.watermark_for_key("c"), None);
    assert_eq!(t.total_key_count(), 3);
}

#[test]
fn test_keyed_tracker_global_is_minimum_of_active_keys() {
    let (mut t, _) = simple();
    t.update("a", 20_000).unwrap();
    assert_eq!(t.global_watermark(), w(15_000));
    assert_eq!(
        t.update("b", 9_000).unwrap(),
        None,
        "a lagging key joining is no advance"
    );
    assert_eq!(t.global_watermark(), w(4_000), "but it lowers the global");
    assert_eq!(
        t.emitted_watermark(),
        w(15_000),
        "reported advances stay monotonic"
    );
    let (mut t, _) = simple();
    t.update_batch(&[("a", 20_000), ("b", 9_000), ("c", 30_000)])
        .unwrap();
    assert_eq!(t.global_watermark(), w(4_000));
    assert_eq!(t.update("b", 40_000).unwrap(), w(15_000));
}

#[test]
fn test_keyed_tracker_fast_key_does_not_affect_slow_key() {
    let (mut t, _) = simple();
    t.update("slow", 1_000).unwrap();
    for i in 0..100 {
        t.update("fast", 100_000 + i * 1_000).unwrap();
    }
    assert_eq!(t.watermark_for_key("slow"), Some(-4_000));
    assert!(
        !t.is_late("slow", 500),
        "the slow key's own watermark decides"
    );
}

#[test]
fn test_keyed_tracker_is_late_uses_key_watermark_not_global() {
    let (mut t, _) = simple();
    t.update("tenant_a", 15_000).unwrap();
    t.update("tenant_b", 5_000).unwrap();
    assert_eq!(t.global_watermark(), w(0));
    assert!(!t.is_late("tenant_b", 3_000));
    assert!(t.is_late("tenant_a", 3_000));
    assert!(!t.is_late("tenant_a", 10_000), "ts == W is on time");
    assert!(t.is_late("tenant_a", 9_999));
    assert!(!t.is_late("unknown", i64::MIN + 1));
}

#[test]
fn test_keyed_tracker_idle_key_excluded_from_global() {
    let (mut t, clock) = simple();
    t.update_batch(&[("a", 10_000), ("b", 50_000)]).unwrap();
    assert_eq!(t.global_watermark(), w(5_000));
    clock.advance(30_000);
    t.update("b", 60_000).unwrap();
    clock.advance(30_001);
    assert_eq!(t.check_idle_keys(), w(55_000), "a is idle after 60s");
    assert_eq!(t.active_key_count(), 1);
    assert_eq!(t.metrics().idle_keys, 1);
    assert!(t.key_state("a").unwrap().is_idle);
    // A new event reactivates the key, which takes part in the minimum again.
    assert_eq!(t.update("a", 11_000).unwrap(), None);
    assert_eq!(t.active_key_count(), 2);
    assert_eq!(t.global_watermark(), w(6_000));
    assert_eq!(t.emitted_watermark(), w(55_000));
}

#[test]
fn test_keyed_tracker_all_idle_uses_max() {
    let (mut t, _) = simple();
    t.update_batch(&[("a", 10_000), ("b", 50_000)]).unwrap();
    assert_eq!(t.mark_idle("a"), w(45_000));
    assert_eq!(t.mark_idle("b"), None, "all idle: max = 45_000 already");
    assert_eq!(t.global_watermark(), w(45_000));
    let (mut t, _) = simple();
    t.update_batch(&[("a", 50_000), ("b", 10_000)]).unwrap();
    t.mark_idle("a");
    assert_eq!(t.mark_idle("b"), w(45_000));
}

#[test]
fn test_keyed_tracker_key_eviction_lru() {
    let (mut t, clock) = tracker(0, None, Some(3), KeyEvictionPolicy::LeastRecentlyActive);
    for (i, k) in ["a", "b", "c"].iter().enumerate() {
        clock.advance(1);
        t.update(*k, 100 + i as i64).unwrap();
    }
    clock.advance(1);
    t.update("a", 200).unwrap(); // a is now the most recent; b the least
    t.update("d", 300).unwrap();
    assert_eq!(t.watermark_for_key("b"), None, "b evicted");
    assert!(t.watermark_for_key("a").is_some());
    assert_eq!(t.metrics().evicted_keys, 1);
    assert_eq!(t.total_key_count(), 3);
}

#[test]
fn swapped_eviction_logs_keep_every_eviction_in_order() {
    let (t, clock) = tracker(0, None, Some(2), KeyEvictionPolicy::LeastRecentlyActive);
    let mut t = t.with_eviction_log();
    let mut buf = vec![Eviction {
        slot: 9,
        key: b"stale".to_vec(),
        watermark: 0,
    }];
    let mut seen = Vec::new();
    for (i, k) in ["a", "b", "c", "d", "e"].iter().enumerate() {
        clock.advance(1);
        t.update(*k, 100 + i as i64).unwrap();
        if i == 3 {
            continue; // b's eviction waits in the log for c's: one swap hands both
        }
        t.swap_evictions(&mut buf);
        seen.extend(buf.iter().map(|e| (e.key.clone(), e.watermark)));
    }
    let enc = |k: &str| {
        let mut b = Vec::new();
        k.encode_key(&mut b);
        b
    };
    // The buffer's old content is dropped, not handed back as an eviction.
    assert_eq!(
        seen,
        vec![(enc("a"), 100), (enc("b"), 101), (enc("c"), 102)]
    );
    assert!(!t.has_evictions());
}

#[test]
fn evictions_at_capacity_keep_the_global_exact() {
    // With max_keys, a rise is fixed at once (no lazy rise): the global watermark
    // must still be the minimum over the tracked keys after every eviction.
    let (mut t, clock) = tracker(10, None, Some(50), KeyEvictionPolicy::LeastRecentlyActive);
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    let mut last: std::collections::HashMap<i64, i64> = Default::default();
    for step in 0..20_000i64 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let key = (x % 80) as i64; // 80 keys over 50 slots: evictions all along
        let ts = step + (x >> 40) as i64 % 200; // out of order by up to 200
        clock.advance(1);
        t.update(key, ts).unwrap();
        let e = last.entry(key).or_insert(i64::MIN);
        *e = (*e).max(ts);
        last.retain(|k, _| t.watermark_for_key(k).is_some());
        // The model holds the keys the tracker still answers for: all it holds.
        assert_eq!(last.len(), t.total_key_count());
        assert!(last.len() <= 50);
        if step % 97 == 0 {
            let naive = last.values().map(|m| m - 10).min().unwrap();
            assert_eq!(t.global_parts().0, Some(naive), "step {step}");
            assert_eq!(t.global_watermark(), w(naive));
        }
    }
}

#[test]
fn test_keyed_tracker_key_eviction_lowest_watermark() {
    let (mut t, _) = tracker(0, None, Some(3), KeyEvictionPolicy::LowestWatermark);
    t.update_batch(&[("a", 500), ("b", 100), ("c", 300)])
        .unwrap();
    t.mark_idle("c");
    t.update("d", 900).unwrap();
    assert_eq!(t.watermark_for_key("b"), None, "lowest (active) evicted");
    t.update("a", 1_000).unwrap();
    t.update("e", 950).unwrap();
    assert_eq!(t.watermark_for_key("c"), None, "lowest (idle) evicted");
    assert_eq!(t.metrics().evicted_keys, 2);
}

#[test]
fn test_keyed_tracker_reject_new() {
    let (mut t, _) = tracker(0, None, Some(2), KeyEvictionPolicy::RejectNew);
    t.update("a", 1).unwrap();
    t.update("b", 1).unwrap();
    assert!(matches!(
        t.update("c", 1),
        Err(TidemarkError::MaxKeysReached { max_keys: 2 })
    ));
    t.update("a", 5).unwrap();
    assert!(t.update_batch(&[("a", 9), ("c", 1)]).is_err());
    assert_eq!(
        t.watermark_for_key("a"),
        Some(5),
        "a rejected batch changes nothing"
    );
    t.remove_key("b");
    t.update_batch(&[("a", 9), ("c", 1)]).unwrap();
    assert_eq!(t.total_key_count(), 2);
}

#[test]
fn test_keyed_tracker_batch_update_efficient() {
    let (mut t, clock) = simple();
    let keys: ArrayRef = Arc::new(StringArray::from(vec!["a", "b", "a", "c", "b"]));
    let times = Int64Array::from(vec![
        Some(10_000),
        Some(7_000),
        Some(30_000),
        None,
        Some(9_000),
    ]);
    let kc = KeyColumns::single(keys).unwrap();
    clock.advance(5);
    assert_eq!(t.update_columns(&kc, &times).unwrap(), w(4_000));
    assert_eq!(t.watermark_for_key("a"), Some(25_000));
    assert_eq!(t.watermark_for_key("b"), Some(4_000));
    assert_eq!(
        t.watermark_for_key("c"),
        None,
        "a null time does not create a key"
    );
    assert_eq!(t.key_state("a").unwrap().last_activity, 5);
    // One advance per key per batch, whatever the number of rows.
    assert_eq!(t.metrics().key_advances, 2);
    let late = t.is_late_columns(&kc, &times).unwrap();
    assert_eq!(
        late.iter().collect::<Vec<_>>(),
        vec![Some(true), Some(false), Some(false), None, Some(false)]
    );
}

#[test]
fn test_keyed_tracker_remove_key_recalculates_global() {
    let (mut t, _) = simple();
    t.update_batch(&[("a", 10_000), ("b", 50_000)]).unwrap();
    let st = t.remove_key("a").unwrap();
    assert_eq!(st.watermark, Some(5_000));
    assert_eq!(t.global_watermark(), w(45_000));
    assert_eq!(t.remove_key("a"), None);
    // Removing the key with the highest watermark while all are idle keeps the value.
    t.mark_idle("b");
    t.remove_key("b");
    assert_eq!(t.global_watermark(), w(45_000));
    t.clear();
    assert_eq!(t.total_key_count(), 0);
    assert_eq!(t.global_watermark(), None);
}

#[test]
fn new_key_without_event_holds_nothing_back() {
    // A key exists only once it has an event, so it always has a watermark.
    let (mut t, _) = simple();
    t.update("a", i64::MIN + 1).unwrap();
    assert_eq!(t.watermark_for_key("a"), None, "saturates to none");
    assert_eq!(t.global_watermark(), None);
    t.update("a", 10_000).unwrap();
    assert_eq!(t.global_watermark(), w(5_000));
}

#[test]
fn idle_check_touches_only_expired_keys() {
    let (mut t, clock) = tracker(0, Some(10), None, KeyEvictionPolicy::LeastRecentlyActive);
    for i in 0..1000i64 {
        t.update(i, i).unwrap();
    }
    clock.advance(11);
    t.update(5i64, 2_000).unwrap();
    t.check_idle_keys();
    assert_eq!(t.metrics().idle_keys, 999);
    assert_eq!(t.global_watermark(), w(2_000));
    // Nothing left to scan: the cursor sits at key 5 (not expired).
    assert_eq!(t.check_idle_keys(), None);
    t.update(7i64, 3_000).unwrap();
    clock.advance(11);
    t.check_idle_keys();
    assert_eq!(t.metrics().idle_keys, 1000);
    assert_eq!(t.active_key_count(), 0);
}

#[test]
fn bytes_per_key_is_at_most_64() {
    assert!(KeyedWatermarkTracker::bytes_per_key() <= 64);
    // Measured, spare capacity included: a million integer keys (held inline).
    let mut t = KeyedWatermarkTracker::new(KeyedWatermarkConfig::default());
    for k in 0..1_000_000i64 {
        t.update(k, k).unwrap();
    }
    let per_key = t.heap_bytes() as f64 / 1e6;
    assert!(per_key <= 64.0, "{per_key} bytes per key");
}

mod model {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    #[derive(Debug, Clone)]
    enum Op {
        Update(u8, i64),
        Batch(Vec<(u8, i64)>),
        Idle(u8),
        Active(u8),
        Advance(i64),
        Check,
        Remove(u8),
        /// The state written and read back into a new tracker (activity order and
        /// idle scan position included).
        Restore,
    }

    fn op() -> impl Strategy<Value = Op> {
        let k = 0u8..8;
        prop_oneof![
            5 => (k.clone(), -100i64..400).prop_map(|(k, t)| Op::Update(k, t)),
            2 => proptest::collection::vec((k.clone(), -100i64..400), 0..6).prop_map(Op::Batch),
            1 => k.clone().prop_map(Op::Idle),
            1 => k.clone().prop_map(Op::Active),
            2 => (0i64..8).prop_map(Op::Advance),
            1 => Just(Op::Check),
            1 => k.prop_map(Op::Remove),
            1 => Just(Op::Restore),
        ]
    }

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum OpKind {
        Idle,
        Check,
        Remove,
        Other,
    }

    #[derive(Debug, Clone)]
    struct K {
        max: i64,
        last: i64,
        idle: bool,
    }

    /// The reference algorithm with plain maps; eviction by full scans.
    struct Model {
        keys: BTreeMap<u8, K>,
        global: i64,
        reported: i64,
        max_seen: i64,
        now: i64,
        delay: i64,
        max_keys: Option<usize>,
        policy: KeyEvictionPolicy,
        order: Vec<u8>, // activity order, oldest first
        /// Keys the tracker evicted in the operation being checked (lowest-watermark
        /// ties may be broken either way; the model follows the tracker's choice).
        evicted_by_tracker: Vec<u8>,
    }

    impl Model {
        fn wm(&self, k: &K) -> i64 {
            k.max.saturating_sub(self.delay)
        }
        fn recalc(&mut self) -> Option<i64> {
            let active: Vec<i64> = self
                .keys
                .values()
                .filter(|k| !k.idle)
                .map(|k| self.wm(k))
                .collect();
            let seen = self
                .keys
                .values()
                .map(|k| self.wm(k))
                .max()
                .unwrap_or(i64::MIN);
            self.max_seen = self.max_seen.max(seen);
            self.global = if active.is_empty() {
                self.max_seen
            } else {
                *active.iter().min().unwrap()
            };
            if self.global > self.reported {
                self.reported = self.global;
                Some(self.global)
            } else {
                None
            }
        }
        fn touch(&mut self, key: u8) {
            self.order.retain(|&k| k != key);
            self.order.push(key);
        }
        /// Evicts one key, never one of `busy` (keys of the batch being applied)
        /// unless all keys are busy. Returns the victim.
        fn evict(&mut self, busy: &[u8]) -> u8 {
            let free: Vec<u8> = self
                .order
                .iter()
                .copied()
                .filter(|k| !busy.contains(k))
                .collect();
            let victim = match self.policy {
                KeyEvictionPolicy::LowestWatermark if !free.is_empty() => {
                    let min = free.iter().map(|k| self.wm(&self.keys[k])).min().unwrap();
                    let candidates: Vec<u8> = free
                        .iter()
                        .copied()
                        .filter(|k| self.wm(&self.keys[k]) == min)
                        .collect();
                    *candidates
                        .iter()
                        .find(|c| self.evicted_by_tracker.contains(c))
                        .unwrap_or(&candidates[0])
                }
                _ => free.first().copied().unwrap_or(self.order[0]),
            };
            self.keys.remove(&victim);
            self.order.retain(|&k| k != victim);
            victim
        }
        /// Returns false if rejected.
        fn update(&mut self, key: u8, t: i64) -> bool {
            if !self.keys.contains_key(&key) {
                if let Some(m) = self.max_keys {
                    if self.keys.len() >= m {
                        if self.policy == KeyEvictionPolicy::RejectNew {
                            return false;
                        }
                        self.evict(&[]);
                    }
                }
                self.keys.insert(
                    key,
                    K {
                        max: i64::MIN,
                        last: self.now,
                        idle: false,
                    },
                );
            }
            let now = self.now;
            let k = self.keys.get_mut(&key).unwrap();
            k.max = k.max.max(t);
            k.last = now;
            k.idle = false;
            let wm = k.max.saturating_sub(self.delay);
            self.max_seen = self.max_seen.max(wm);
            self.touch(key);
            true
        }
    }

    fn run(
        ops: Vec<Op>,
        max_keys: Option<usize>,
        policy: KeyEvictionPolicy,
    ) -> std::result::Result<(), TestCaseError> {
        let (mut t, clock) = tracker(10, Some(5), max_keys, policy);
        let mut m = Model {
            keys: BTreeMap::new(),
            global: i64::MIN,
            reported: i64::MIN,
            max_seen: i64::MIN,
            now: 0,
            delay: 10,
            max_keys,
            policy,
            order: vec![],
            evicted_by_tracker: vec![],
        };
        for op in ops {
            let before: BTreeMap<u8, Option<i64>> = m
                .keys
                .keys()
                .map(|&k| (k, t.watermark_for_key(&(k as i64))))
                .collect();
            let global_before = t.global_watermark();
            let evicted_before = t.metrics().evicted_keys;
            let emitted_before = t.emitted_watermark();
            let op_kind = match &op {
                Op::Idle(_) => OpKind::Idle,
                Op::Check => OpKind::Check,
                Op::Remove(_) => OpKind::Remove,
                _ => OpKind::Other,
            };
            let (got, want) = match op {
                Op::Update(k, ts) => {
                    let r = t.update(k as i64, ts);
                    m.evicted_by_tracker = (0u8..8)
                        .filter(|&x| t.key_state(&(x as i64)).is_none())
                        .collect();
                    if m.update(k, ts) {
                        (r.unwrap().map(|w| w.timestamp()), m.recalc())
                    } else {
                        prop_assert!(r.is_err());
                        (None, None)
                    }
                }
                Op::Batch(events) => {
                    let evs: Vec<(i64, i64)> =
                        events.iter().map(|&(k, ts)| (k as i64, ts)).collect();
                    let r = t.update_batch(&evs);
                    m.evicted_by_tracker = (0u8..8)
                        .filter(|&x| t.key_state(&(x as i64)).is_none())
                        .collect();
                    // Model: fold per key (first appearance order), reject atomically.
                    let mut folded: Vec<(u8, i64)> = Vec::new();
                    for &(k, ts) in &events {
                        match folded.iter_mut().find(|f| f.0 == k) {
                            Some(f) => f.1 = f.1.max(ts),
                            None => folded.push((k, ts)),
                        }
                    }
                    let new_keys = folded.iter().filter(|f| !m.keys.contains_key(&f.0)).count();
                    let rejected = policy == KeyEvictionPolicy::RejectNew
                        && max_keys.is_some_and(|mk| m.keys.len() + new_keys > mk);
                    if rejected {
                        prop_assert!(r.is_err());
                        (None, None)
                    } else {
                        // Rows in order: new keys inserted at first appearance, evicting
                        // keys outside the batch; then every batch key gets its max and
                        // its activity, in order of first touch.
                        let mut busy: Vec<u8> = Vec::new();
                        let mut pending: BTreeMap<u8, i64> = BTreeMap::new();
                        for &(k, ts) in &events {
                            if !m.keys.contains_key(&k) {
                                if max_keys.is_some_and(|mk| m.keys.len() >= mk) {
                                    let v = m.evict(&busy);
                                    busy.retain(|&b| b != v);
                                    pending.remove(&v);
                                }
                                let now = m.now;
                                m.keys.insert(
                                    k,
                                    K {
                                        max: i64::MIN,
                                        last: now,
                                        idle: false,
                                    },
                                );
                                m.order.push(k);
                            }
                            if !busy.contains(&k) {
                                // A key joins the most recent end of the activity order
                                // when the batch first touches it, so evictions find
                                // untouched keys first; if every key is touched, the
                                // batch's first-touched key goes.
                                busy.push(k);
                                m.touch(k);
                            }
                            let e = pending.entry(k).or_insert(ts);
                            *e = (*e).max(ts);
                        }
                        for &k in &busy {
                            let ts = pending[&k];
                            m.update(k, ts);
                        }
                        if max_keys.is_some() && policy == KeyEvictionPolicy::LeastRecentlyActive {
                            // A bounded LRU tracker orders one batch's keys by key, so
                            // which goes first later does not depend on the rows' order.
                            busy.sort_unstable();
                            for k in busy {
                                m.touch(k);
                            }
                        }
                        (r.unwrap().map(|w| w.timestamp()), m.recalc())
                    }
                }
                Op::Idle(k) => {
                    let got = t.mark_idle(&(k as i64)).map(|w| w.timestamp());
                    if let Some(key) = m.keys.get_mut(&k) {
                        key.idle = true;
                    }
                    (
                        got,
                        if m.keys.contains_key(&k) {
                            m.recalc()
                        } else {
                            None
                        },
                    )
                }
                Op::Active(k) => {
                    let known = t.mark_active(&(k as i64));
                    prop_assert_eq!(known, m.keys.contains_key(&k));
                    if known {
                        let now = m.now;
                        let key = m.keys.get_mut(&k).unwrap();
                        key.idle = false;
                        key.last = now;
                        m.touch(k);
                        m.recalc();
                    }
                    (None, None)
                }
                Op::Advance(d) => {
                    clock.advance(d);
                    m.now += d;
                    (None, None)
                }
                Op::Check => {
                    let got = t.check_idle_keys().map(|w| w.timestamp());
                    let now = m.now;
                    let mut any = false;
                    for k in m.keys.values_mut() {
                        if !k.idle && now - k.last > 5 {
                            k.idle = true;
                            any = true;
                        }
                    }
                    (got, if any { m.recalc() } else { None })
                }
                Op::Restore => {
                    // The whole tracker, configuration included, through a snapshot.
                    let cfg = *t.config();
                    t = KeyedWatermarkTracker::restore(&t.snapshot(), Arc::new(clock.clone()))
                        .unwrap();
                    prop_assert_eq!(*t.config(), cfg);
                    (None, None)
                }
                Op::Remove(k) => {
                    let st = t.remove_key(&(k as i64));
                    let mk = m.keys.remove(&k);
                    m.order.retain(|&x| x != k);
                    prop_assert_eq!(
                        st.map(|s| s.max_event_time.unwrap_or(i64::MIN)),
                        mk.map(|k| k.max)
                    );
                    m.recalc();
                    (None, None)
                }
            };
            prop_assert_eq!(got, want);
            prop_assert_eq!(
                t.global_watermark().map(|w| w.timestamp()),
                Watermark::from_raw(m.global).map(|w| w.timestamp())
            );
            prop_assert!(
                t.emitted_watermark() >= emitted_before,
                "reported advances are monotonic"
            );
            if let Some(g) = got {
                prop_assert!(Some(Watermark::new(g)) > emitted_before);
            }
            if matches!(op_kind, OpKind::Idle | OpKind::Check | OpKind::Remove) {
                prop_assert!(
                    t.global_watermark() >= global_before,
                    "idling or removing keys never lowers the global"
                );
            }
            prop_assert_eq!(t.total_key_count(), m.keys.len());
            // The activity order (least-recently-active eviction and the idle scan
            // follow it) is the model's after every operation.
            let encoded = |k: u8| {
                let mut b = Vec::new();
                crate::key::AsKey::encode_key(&(k as i64), &mut b);
                b
            };
            prop_assert_eq!(
                t.activity_order()
                    .iter()
                    .map(|&s| t.slot_key(s).to_vec())
                    .collect::<Vec<_>>(),
                m.order.iter().map(|&k| encoded(k)).collect::<Vec<_>>()
            );
            for (k, key) in &m.keys {
                let wm = key.max.saturating_sub(10);
                prop_assert_eq!(
                    t.watermark_for_key(&(*k as i64)),
                    (wm != i64::MIN).then_some(wm)
                );
                prop_assert_eq!(t.key_state(&(*k as i64)).unwrap().is_idle, key.idle);
                // Per-key watermarks are monotonic while a key is tracked.
                if let (Some(Some(b)), true) =
                    (before.get(k), t.metrics().evicted_keys == evicted_before)
                {
                    prop_assert!(t.watermark_for_key(&(*k as i64)).unwrap() >= *b);
                }
                // The global never exceeds an active key's watermark.
                if !key.idle {
                    prop_assert!(t.global_watermark().map_or(i64::MIN, |g| g.timestamp()) <= wm);
                    prop_assert!(m.global <= wm);
                }
            }
            prop_assert_eq!(
                t.metrics().idle_keys,
                m.keys.values().filter(|k| k.idle).count()
            );
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(400))]
        #[test]
        fn matches_model_unbounded(ops in proptest::collection::vec(op(), 1..60)) {
            run(ops, None, KeyEvictionPolicy::LeastRecentlyActive)?;
        }
        #[test]
        fn matches_model_lru(ops in proptest::collection::vec(op(), 1..60)) {
            run(ops, Some(3), KeyEvictionPolicy::LeastRecentlyActive)?;
        }
        #[test]
        fn matches_model_lowest_watermark(ops in proptest::collection::vec(op(), 1..60)) {
            // Distinct watermarks per key (ts * 8 + key), so which key has the lowest
            // watermark is never a tie the model would have to guess.
            let distinct = |k: u8, t: i64| t * 8 + k as i64;
            let ops = ops
                .into_iter()
                .map(|op| match op {
                    Op::Update(k, t) => Op::Update(k, distinct(k, t)),
                    Op::Batch(evs) => Op::Batch(evs.into_iter().map(|(k, t)| (k, distinct(k, t))).collect()),
                    other => other,
                })
                .collect();
            run(ops, Some(3), KeyEvictionPolicy::LowestWatermark)?;
        }
        #[test]
        fn matches_model_reject_new(ops in proptest::collection::vec(op(), 1..60)) {
            run(ops, Some(3), KeyEvictionPolicy::RejectNew)?;
        }
    }
}

#[test]
fn batches_of_string_keys_match_updates_one_by_one() {
    // More rows than one encoding chunk, keys repeated within the batch.
    let names: Vec<String> = (0..300).map(|i| format!("tenant-{}", i % 170)).collect();
    let events: Vec<(&str, i64)> = names
        .iter()
        .enumerate()
        .map(|(i, k)| (k.as_str(), 10_000 + (i as i64 * 7919) % 5_000))
        .collect();
    let (mut batched, _) = simple();
    let (mut single, _) = simple();
    batched.update_batch(&events).unwrap();
    for &(k, ts) in &events {
        single.update(k, ts).unwrap();
    }
    assert_eq!(batched.total_key_count(), 170);
    for k in &names {
        assert_eq!(
            batched.watermark_for_key(k.as_str()),
            single.watermark_for_key(k.as_str())
        );
    }
    assert_eq!(batched.global_watermark(), single.global_watermark());
}

/// Keys of every length class (inline encodings, short values held in the head,
/// arena keys), strings and binary: the state written and read back holds the same
/// keys with the same watermarks, and updates after the restore find them.
#[test]
fn state_round_trips_keys_of_every_length() {
    let (mut t, _) = simple();
    let names: Vec<String> = (0..=24usize)
        .flat_map(|n| {
            (0..if n == 0 { 1 } else { 3 }).map(move |i| format!("{i:024}")[24 - n..].to_string())
        })
        .collect();
    for (i, k) in names.iter().enumerate() {
        t.update(k.as_str(), 10_000 + i as i64).unwrap();
        t.update(k.as_bytes(), 20_000 + i as i64).unwrap();
    }
    let mut out = Writer::new();
    t.write_state(&mut out);
    let bytes = out.finish();
    let (mut back, _) = simple();
    back.read_state(&mut Reader::new(&bytes)).unwrap();
    assert_eq!(back.total_key_count(), t.total_key_count());
    for s in back.live_slots() {
        let key = back.slot_key(s).to_vec();
        assert_eq!(
            t.watermark_for_key(&crate::key::Encoded(&key)),
            back.watermark_for_key(&crate::key::Encoded(&key))
        );
    }
    for (i, k) in names.iter().enumerate() {
        assert_eq!(
            back.watermark_for_key(k.as_str()),
            Some(10_000 + i as i64 - 5_000),
            "{k:?}"
        );
        assert_eq!(
            back.watermark_for_key(k.as_bytes()),
            Some(20_000 + i as i64 - 5_000),
            "{k:?}"
        );
        back.update(k.as_str(), 30_000).unwrap();
    }
    assert_eq!(back.total_key_count(), t.total_key_count());
}

/// Batches over a hash index large enough for its lines to be prefetched (at least
/// `PREFETCH_INDEX_FROM` keys) give what one-by-one updates give: every key's
/// watermark, new keys included, null times skipped, the global watermark.
#[test]
fn batches_over_a_large_index_match_one_by_one_updates() {
    const HELD: usize = PREFETCH_INDEX_FROM + 1_000;
    let name = |i: usize| format!("key-{i:07}");
    let (mut batched, _) = simple();
    let (mut single, _) = simple();
    for i in 0..HELD {
        batched.update(name(i).as_str(), i as i64).unwrap();
        single.update(name(i).as_str(), i as i64).unwrap();
    }
    assert!(batched.keys.indexed_len() >= PREFETCH_INDEX_FROM);
    // 20,000 rows over held keys and 5,000 new ones, with some null times.
    let rows: Vec<(String, Option<i64>)> = (0..20_000usize)
        .map(|r| {
            let k = (r * 7_919) % (HELD + 5_000);
            (
                name(k),
                (r % 97 != 0).then_some(1_000_000 + (r * 31 % 5_000) as i64),
            )
        })
        .collect();
    let keys: ArrayRef = Arc::new(StringArray::from_iter_values(rows.iter().map(|r| &r.0)));
    let times = Int64Array::from(rows.iter().map(|r| r.1).collect::<Vec<_>>());
    batched
        .update_columns(&KeyColumns::single(keys).unwrap(), &times)
        .unwrap();
    for (k, t) in &rows {
        if let Some(t) = t {
            single.update(k.as_str(), *t).unwrap();
        }
    }
    assert_eq!(batched.total_key_count(), single.total_key_count());
    for i in 0..HELD + 5_000 {
        let k = name(i);
        assert_eq!(
            batched.watermark_for_key(k.as_str()),
            single.watermark_for_key(k.as_str()),
            "{k}"
        );
    }
    assert_eq!(batched.global_watermark(), single.global_watermark());
}

/// A snapshot holds the configuration with the state: a restored tracker bounds its
/// keys and evicts as the original did, and damaged or foreign bytes are refused.
#[test]
fn snapshots_carry_the_configuration_and_refuse_damage() {
    let (mut t, clock) = tracker(
        100,
        Some(1_000),
        Some(2),
        KeyEvictionPolicy::LowestWatermark,
    );
    t.update("a", 500).unwrap();
    t.update("b", 300).unwrap();
    let bytes = t.snapshot();
    let mut back = KeyedWatermarkTracker::restore(&bytes, Arc::new(clock.clone())).unwrap();
    assert_eq!(*back.config(), *t.config());
    assert_eq!(back.global_watermark(), t.global_watermark());
    assert_eq!(back.metrics(), t.metrics());
    // Full at 2 keys: "c" evicts one on both (the lowest watermark: "b", once idle).
    back.mark_idle("b");
    t.mark_idle("b");
    back.update("c", 900).unwrap();
    t.update("c", 900).unwrap();
    assert_eq!(back.watermark_for_key("b"), None);
    assert_eq!(back.total_key_count(), 2);
    assert_eq!(back.metrics(), t.metrics());
    // Idleness reads the clock the restored tracker was given.
    clock.advance(1_001);
    assert_eq!(back.check_idle_keys(), t.check_idle_keys());
    assert_eq!(back.active_key_count(), 0);

    let mut damaged = bytes.clone();
    let mid = damaged.len() / 2;
    damaged[mid] ^= 1;
    for bad in [&damaged[..], &bytes[..bytes.len() - 1], b"TDMK"] {
        let err = KeyedWatermarkTracker::restore(bad, Arc::new(clock.clone())).unwrap_err();
        assert!(matches!(err, TidemarkError::StateCorrupted(_)), "{err}");
    }
    let other = crate::time::CompactKeyedWatermarkTracker::new(Default::default())
        .unwrap()
        .snapshot();
    let err = KeyedWatermarkTracker::restore(&other, Arc::new(clock)).unwrap_err();
    assert!(
        err.to_string().contains("compact keyed watermark tracker"),
        "{err}"
    );
}

proptest::proptest! {
    /// Arbitrary payloads in a valid envelope reach the tracker decoders: an error or
    /// a tracker, never a panic or a huge allocation (the fuzz target's check, run in
    /// the test suite).
    #[test]
    fn tracker_restores_never_panic(payload in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..256)) {
        use crate::state::{seal, SnapshotKind};
        let clock = || -> crate::clock::ClockRef { Arc::new(ManualClock::new(0)) };
        let _ = KeyedWatermarkTracker::restore(&seal(SnapshotKind::Keyed, 0, &payload), clock());
        let _ = crate::time::CompactKeyedWatermarkTracker::restore(
            &seal(SnapshotKind::CompactKeyed, 0, &payload),
            clock(),
        );
    }
}

#[test]
fn a_key_delay_moves_its_watermark_on_at_once_and_never_back() {
    let (t, _) = simple();
    let mut t = t.with_key_delays();
    let batch = |t: &mut KeyedWatermarkTracker, times: &[(&str, i64)], target: Option<i64>| {
        t.begin_batch_at(0);
        for &(k, ts) in times {
            let slot = t.batch_slot(k.as_bytes()).unwrap();
            let i = t.batch_fold(slot, ts);
            if let Some(d) = target {
                t.set_batch_delay(i, d);
            }
        }
        t.end_batch();
    };
    let key = |k: &str| k.as_bytes().to_vec();
    // A new key starts at the configured delay (5 s), unless its batch sets one.
    batch(&mut t, &[("a", 100_000), ("b", 100_000)], None);
    assert_eq!(t.watermark_for_encoded(&key("a")), Some(95_000));
    // A shorter delay: the watermark moves on at once.
    batch(&mut t, &[("a", 101_000)], Some(1_000));
    assert_eq!(t.watermark_for_encoded(&key("a")), Some(100_000));
    // A longer one: held where it stood until the key's events pass it.
    batch(&mut t, &[("a", 102_000)], Some(10_000));
    assert_eq!(t.watermark_for_encoded(&key("a")), Some(100_000));
    batch(&mut t, &[("a", 115_000)], Some(10_000));
    assert_eq!(t.watermark_for_encoded(&key("a")), Some(105_000));
    // The other key kept its own delay, and the global watermark is the lower one.
    assert_eq!(t.watermark_for_encoded(&key("b")), Some(95_000));
    assert_eq!(t.global_watermark(), Some(Watermark::new(95_000)));
    let a = t.keys.get(b"a").unwrap();
    assert_eq!(t.slot_delay(a), 10_000);
    // A restore sets a key's delay directly.
    t.set_slot_delay(a, 0);
    assert_eq!(t.watermark_for_encoded(&key("a")), Some(115_000));
}

#[test]
fn a_batch_without_progress_keeps_a_keys_place_among_keys_of_the_same_activity() {
    // Every batch reads the same clock: only the order of the batches tells which key
    // was active last. "c" is active first; "b" comes next, in a batch where "c" has
    // only rows behind its watermark (no progress); a third key evicts "c", the least
    // recently active, whether the batch could evict (rows folded one at a time) or not.
    for max_keys in [Some(2), None] {
        let (mut t, _) = tracker(0, None, max_keys, KeyEvictionPolicy::LeastRecentlyActive);
        t = t.with_eviction_log();
        let batch = |t: &mut KeyedWatermarkTracker, rows: &[(&str, i64)]| {
            t.begin_batch_at(1);
            for &(k, ts) in rows {
                let slot = t.batch_slot(k.as_bytes()).unwrap();
                let i = t.batch_fold(slot, ts);
                let (_, wm) = t.batch_key(i).unwrap();
                if ts < wm {
                    t.batch_no_progress(i);
                }
            }
            t.end_batch();
        };
        batch(&mut t, &[("c", 1)]);
        batch(&mut t, &[("b", 0), ("c", 0)]);
        let order: Vec<Vec<u8>> = t
            .activity_order()
            .into_iter()
            .map(|s| t.slot_key(s).to_vec())
            .collect();
        assert_eq!(
            order,
            [b"c".to_vec(), b"b".to_vec()],
            "max_keys {max_keys:?}"
        );
        if max_keys.is_some() {
            batch(&mut t, &[("a", 0)]);
            let evicted: Vec<Vec<u8>> = t.drain_evictions().into_iter().map(|e| e.key).collect();
            assert_eq!(evicted, [b"c".to_vec()]);
        }
    }
}
