//! Timer service: timers that survive operator re-creation.
//!
//! A timer is unique per `(timestamp, key, namespace)`: the key identifies the keyed
//! state it belongs to (the key is part of the timer key, so a
//! timer can be routed back to its key), the namespace identifies the window or
//! session within the key. Event-time timers fire when the watermark reaches their
//! timestamp (`W >= ts`), processing-time timers when the clock does. Each fires
//! exactly once, in `(timestamp, key, namespace)` order. Timers are plain data: they
//! are part of every snapshot, so an operator dropped and re-created between
//! micro-batches restores them all.
//!
//! Callers ignore stale timers (a session already merged or closed) by checking the
//! timer against their own state when it fires; deleting timers on merge keeps them
//! rare.

use std::collections::BTreeSet;

use crate::error::Result;
use crate::key::decode_key;
use crate::state::{self, Reader, SnapshotKind, Writer};

/// Which clock a timer follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TimeDomain {
    /// Fires when the watermark reaches the timer.
    EventTime,
    /// Fires when the processing-time clock reaches the timer.
    ProcessingTime,
}

crate::names::named!(TimeDomain, "kind", "timer domain", {
    "event" => TimeDomain::EventTime,
    "processing" => TimeDomain::ProcessingTime,
});

/// A registered timer.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timer<K> {
    /// When it fires.
    pub timestamp: i64,
    /// The key it belongs to.
    pub key: K,
    /// The window or session within the key.
    pub namespace: i64,
}

/// Event-time and processing-time timers.
///
/// # Examples
///
/// ```
/// use tidemark_core::timer::{TimeDomain, TimerService};
/// let mut t = TimerService::new();
/// t.register(TimeDomain::EventTime, 2_000, "b", 0);
/// t.register(TimeDomain::EventTime, 1_000, "a", 7);
/// t.register(TimeDomain::EventTime, 1_000, "a", 7); // duplicate: one timer
/// assert_eq!(t.len(), 2);
/// let fired = t.advance_watermark(1_500);
/// assert_eq!(fired.len(), 1);
/// assert_eq!((fired[0].timestamp, fired[0].key, fired[0].namespace), (1_000, "a", 7));
/// assert!(t.advance_watermark(1_500).is_empty(), "fires exactly once");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimerService<K: Ord + Clone> {
    event: BTreeSet<Timer<K>>,
    processing: BTreeSet<Timer<K>>,
    watermark: i64,
    processing_time: i64,
}

impl<K: Ord + Clone> Default for TimerService<K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: Ord + Clone> TimerService<K> {
    /// No timers; watermark and processing time at `i64::MIN`.
    pub fn new() -> Self {
        Self {
            event: BTreeSet::new(),
            processing: BTreeSet::new(),
            watermark: i64::MIN,
            processing_time: i64::MIN,
        }
    }

    fn set(&mut self, domain: TimeDomain) -> &mut BTreeSet<Timer<K>> {
        match domain {
            TimeDomain::EventTime => &mut self.event,
            TimeDomain::ProcessingTime => &mut self.processing,
        }
    }

    /// Registers a timer; returns `false` if it already existed.
    pub fn register(&mut self, domain: TimeDomain, timestamp: i64, key: K, namespace: i64) -> bool {
        self.set(domain).insert(Timer {
            timestamp,
            key,
            namespace,
        })
    }

    /// Deletes a timer; returns `false` if there was none.
    pub fn delete(&mut self, domain: TimeDomain, timestamp: i64, key: K, namespace: i64) -> bool {
        self.set(domain).remove(&Timer {
            timestamp,
            key,
            namespace,
        })
    }

    /// Timers of a domain in firing order.
    pub fn timers(&self, domain: TimeDomain) -> impl Iterator<Item = &Timer<K>> {
        match domain {
            TimeDomain::EventTime => self.event.iter(),
            TimeDomain::ProcessingTime => self.processing.iter(),
        }
    }

    /// Number of timers (both domains).
    pub fn len(&self) -> usize {
        self.event.len() + self.processing.len()
    }

    /// `true` if there are no timers.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The highest watermark seen (`None`: none yet).
    pub fn current_watermark(&self) -> Option<i64> {
        (self.watermark != i64::MIN).then_some(self.watermark)
    }

    /// The highest processing time seen.
    pub fn current_processing_time(&self) -> i64 {
        self.processing_time
    }

    fn pop_until(set: &mut BTreeSet<Timer<K>>, t: i64) -> Vec<Timer<K>> {
        let mut fired = Vec::new();
        while set.first().is_some_and(|f| f.timestamp <= t) {
            fired.push(set.pop_first().expect("checked"));
        }
        fired
    }

    /// Advances the watermark (a lower value is ignored) and returns the event-time
    /// timers it reached, removed, in `(timestamp, key, namespace)` order.
    pub fn advance_watermark(&mut self, watermark: i64) -> Vec<Timer<K>> {
        self.watermark = self.watermark.max(watermark);
        Self::pop_until(&mut self.event, self.watermark)
    }

    /// Advances processing time and returns the processing-time timers it reached.
    pub fn advance_processing_time(&mut self, now: i64) -> Vec<Timer<K>> {
        self.processing_time = self.processing_time.max(now);
        Self::pop_until(&mut self.processing, self.processing_time)
    }

    /// Fires event-time timers up to `t` without moving the watermark (used to close
    /// per-key state on a key's own watermark).
    pub fn fire_until(&mut self, t: i64) -> Vec<Timer<K>> {
        Self::pop_until(&mut self.event, t)
    }

    /// Removes every timer.
    pub fn clear(&mut self) {
        self.event.clear();
        self.processing.clear();
    }

    /// Restores the time bounds (for snapshots).
    pub fn set_times(&mut self, watermark: i64, processing_time: i64) {
        self.watermark = watermark;
        self.processing_time = processing_time;
    }
}

impl TimerService<Vec<u8>> {
    /// The timers and time bounds as bytes (keys in the canonical key encoding).
    pub fn snapshot(&self) -> Vec<u8> {
        let mut w = Writer::new();
        w.i64(self.watermark);
        w.i64(self.processing_time);
        for d in [TimeDomain::EventTime, TimeDomain::ProcessingTime] {
            w.len(self.timers(d).count());
            for t in self.timers(d) {
                w.i64(t.timestamp);
                w.bytes(&t.key);
                w.i64(t.namespace);
            }
        }
        state::seal(SnapshotKind::Timers, 0, &w.finish())
    }

    /// A service from [`TimerService::snapshot`]'s bytes; a key that is not a key
    /// encoding is [`crate::error::TidemarkError::StateCorrupted`].
    pub fn restore(bytes: &[u8]) -> Result<Self> {
        let mut r = Reader::new(state::open(bytes, SnapshotKind::Timers, None)?);
        let mut svc = TimerService::new();
        let (watermark, processing_time) = (r.i64()?, r.i64()?);
        svc.set_times(watermark, processing_time);
        for d in [TimeDomain::EventTime, TimeDomain::ProcessingTime] {
            // A timer takes at least 24 bytes (timestamp, key length, namespace).
            for _ in 0..r.len(24)? {
                let timestamp = r.i64()?;
                let key = r.bytes()?.to_vec();
                decode_key(&key)?;
                let namespace = r.i64()?;
                svc.register(d, timestamp, key, namespace);
            }
        }
        r.finish()?;
        Ok(svc)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn fires_each_timer_once_in_order(
            timers in proptest::collection::vec((0i64..100, 0u8..4, 0i64..3), 0..50),
            steps in proptest::collection::vec(0i64..120, 1..10),
        ) {
            let mut svc = TimerService::new();
            let mut want: BTreeSet<(i64, u8, i64)> = BTreeSet::new();
            for &(t, k, ns) in &timers {
                svc.register(TimeDomain::EventTime, t, k, ns);
                want.insert((t, k, ns));
            }
            let mut fired = vec![];
            for w in steps {
                let got = svc.advance_watermark(w);
                prop_assert!(got.windows(2).all(|p| p[0] < p[1]));
                for t in got {
                    prop_assert!(Some(t.timestamp) <= svc.current_watermark());
                    fired.push((t.timestamp, t.key, t.namespace));
                }
            }
            let w = svc.current_watermark();
            let expect: Vec<_> = want.iter().copied().filter(|t| Some(t.0) <= w).collect();
            let mut sorted = fired.clone();
            sorted.sort();
            prop_assert_eq!(sorted, expect, "each reached timer exactly once");
            prop_assert_eq!(svc.len(), want.len() - fired.len());
        }
    }

    #[test]
    fn snapshots_keep_every_timer_and_reject_bad_keys() {
        use crate::key::AsKey;
        let mut s: TimerService<Vec<u8>> = TimerService::new();
        let key = |k: &str| {
            let mut b = Vec::new();
            k.encode_key(&mut b);
            b
        };
        s.register(TimeDomain::EventTime, 5, key("a"), 1);
        s.register(TimeDomain::ProcessingTime, 7, key("b"), 2);
        s.set_times(3, 4);
        let back = TimerService::restore(&s.snapshot()).unwrap();
        assert_eq!(back.current_watermark(), Some(3));
        assert_eq!(back.current_processing_time(), 4);
        for d in [TimeDomain::EventTime, TimeDomain::ProcessingTime] {
            assert!(back.timers(d).eq(s.timers(d)));
        }
        let mut bad: TimerService<Vec<u8>> = TimerService::new();
        bad.register(TimeDomain::EventTime, 1, vec![99], 0);
        assert!(matches!(
            TimerService::restore(&bad.snapshot()),
            Err(crate::error::TidemarkError::StateCorrupted(_))
        ));
    }

    #[test]
    fn domains_are_separate() {
        let mut s = TimerService::new();
        s.register(TimeDomain::ProcessingTime, 5, 1u32, 0);
        s.register(TimeDomain::EventTime, 5, 1u32, 0);
        assert_eq!(s.advance_watermark(10).len(), 1);
        assert_eq!(s.len(), 1);
        assert!(s.delete(TimeDomain::ProcessingTime, 5, 1, 0));
        assert!(!s.delete(TimeDomain::ProcessingTime, 5, 1, 0));
        assert!(s.is_empty());
    }
}
