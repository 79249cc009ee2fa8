//! Injected clocks.
//!
//! Every decision that depends on "now" (idle detection, processing-time timers,
//! processing-time windows) reads time through the [`Clock`] trait, never through
//! `Instant::now()` or `SystemTime::now()` directly (the crate's `clippy.toml` bans
//! both outside this module). Tests and replays use a [`ManualClock`]; production
//! uses a [`SystemClock`].
//!
//! A clock returns an `i64` tick count. [`SystemClock`] ticks are milliseconds.
//! [`ManualClock`] ticks mean whatever the caller decides; by convention milliseconds,
//! so that durations given as strings (`"30s"`) line up.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// A source of the current time, in ticks.
///
/// Implementations must be cheap (this is called on hot paths) and monotonic
/// (a later call never returns a smaller value).
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// The current time in ticks.
    fn now(&self) -> i64;

    /// Whether the ticks are the wall clock's epoch milliseconds (an event time far
    /// past them comes from the future: see `pipeline/bounds.rs`).
    fn is_wall(&self) -> bool {
        false
    }
}

/// Shared handle to a clock.
pub type ClockRef = Arc<dyn Clock>;

/// Monotonic wall clock in milliseconds.
///
/// Readings are anchored at the Unix epoch when the process first reads the clock
/// and then advance with the monotonic clock, so they are comparable (roughly)
/// across processes yet never go backwards when the system time is adjusted.
///
/// # Examples
///
/// ```
/// use tidemark_core::clock::{Clock, SystemClock};
/// let c = SystemClock::new();
/// let a = c.now();
/// let b = c.now();
/// assert!(b >= a);
/// assert!(a > 1_600_000_000_000); // after 2020, in epoch milliseconds
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

struct Anchor {
    instant: Instant,
    epoch_ms: i64,
}

fn anchor() -> &'static Anchor {
    static ANCHOR: OnceLock<Anchor> = OnceLock::new();
    ANCHOR.get_or_init(|| {
        #[allow(clippy::disallowed_methods)]
        let (instant, wall) = (Instant::now(), SystemTime::now());
        let epoch_ms = wall
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0);
        Anchor { instant, epoch_ms }
    })
}

impl SystemClock {
    /// Creates a system clock.
    pub fn new() -> Self {
        SystemClock
    }
}

impl Clock for SystemClock {
    #[inline]
    fn now(&self) -> i64 {
        let a = anchor();
        a.epoch_ms + a.instant.elapsed().as_millis() as i64
    }

    fn is_wall(&self) -> bool {
        true
    }
}

/// A clock that only moves when told to. Clones share the same time.
///
/// # Examples
///
/// ```
/// use tidemark_core::clock::{Clock, ManualClock};
/// let c = ManualClock::new(100);
/// let shared = c.clone();
/// c.advance(50);
/// assert_eq!(shared.now(), 150);
/// c.set(1_000);
/// assert_eq!(shared.now(), 1_000);
/// ```
#[derive(Debug, Clone, Default)]
pub struct ManualClock {
    t: Arc<AtomicI64>,
}

impl ManualClock {
    /// Creates a manual clock reading `start`.
    pub fn new(start: i64) -> Self {
        Self {
            t: Arc::new(AtomicI64::new(start)),
        }
    }

    /// Moves the clock forward by `ticks` (saturating) and returns the new time.
    ///
    /// Negative values are rejected by the bindings; here they are ignored so that
    /// the clock stays monotonic.
    pub fn advance(&self, ticks: i64) -> i64 {
        let ticks = ticks.max(0);
        let prev = self
            .t
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| {
                Some(v.saturating_add(ticks))
            })
            .unwrap_or_else(|v| v);
        prev.saturating_add(ticks)
    }

    /// Sets the clock to `t`. Returns `false` (and leaves the clock unchanged) if
    /// `t` is earlier than the current reading: clocks never run backwards.
    pub fn set(&self, t: i64) -> bool {
        self.t
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| {
                (t >= v).then_some(t)
            })
            .is_ok()
    }
}

impl Clock for ManualClock {
    #[inline]
    fn now(&self) -> i64 {
        self.t.load(Ordering::Acquire)
    }
}

/// The default clock: a shared [`SystemClock`].
pub fn system_clock() -> ClockRef {
    Arc::new(SystemClock)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_never_runs_backwards() {
        let c = ManualClock::new(10);
        assert!(!c.set(5));
        assert_eq!(c.now(), 10);
        assert_eq!(c.advance(-3), 10);
        assert!(c.set(10));
        assert_eq!(c.advance(i64::MAX), i64::MAX);
    }

    #[test]
    fn system_clock_is_monotonic() {
        let c = SystemClock::new();
        let mut last = c.now();
        for _ in 0..1000 {
            let t = c.now();
            assert!(t >= last);
            last = t;
        }
    }
}
