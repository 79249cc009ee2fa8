//! The watermark value type, and the one rule that combines watermarks.

/// An event-time watermark: the assertion that no more events with `ts < W` are
/// expected (DESIGN.md). Ticks are unit-agnostic at this level; the pipeline uses
/// epoch microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Watermark(i64);

impl Watermark {
    /// A watermark at `timestamp`.
    #[inline]
    pub const fn new(timestamp: i64) -> Self {
        Watermark(timestamp)
    }

    /// The watermark's timestamp.
    #[inline]
    pub const fn timestamp(self) -> i64 {
        self.0
    }

    /// `true` if an event at `event_time` is late under this watermark (`ts < W`).
    #[inline]
    pub const fn is_late(self, event_time: i64) -> bool {
        event_time < self.0
    }

    /// `None` for the "no watermark yet" value `i64::MIN`, else the watermark.
    #[inline]
    pub const fn from_raw(raw: i64) -> Option<Self> {
        if raw == i64::MIN {
            None
        } else {
            Some(Watermark(raw))
        }
    }
}

impl From<Watermark> for i64 {
    fn from(w: Watermark) -> i64 {
        w.0
    }
}

/// The rule every combined watermark follows (source partitions, keys, cores): the
/// minimum over the active inputs (`min_active`, `None` when no input is active) or,
/// when every input is idle, the maximum over all of them, so that idle inputs never
/// hold progress back. Callers keep the result monotonic with [`advance`].
///
/// # Examples
///
/// ```
/// use tidemark_core::time::combine;
/// assert_eq!(combine(Some(3), || 9), 3);
/// assert_eq!(combine(None, || 9), 9);
/// ```
#[inline]
pub fn combine(min_active: Option<i64>, max_all: impl FnOnce() -> i64) -> i64 {
    match min_active {
        Some(m) => m,
        None => max_all(),
    }
}

/// Raises `current` to `candidate` if it is higher (a watermark never moves back);
/// `true` if it moved.
#[inline]
pub fn advance(current: &mut i64, candidate: i64) -> bool {
    let moved = candidate > *current;
    if moved {
        *current = candidate;
    }
    moved
}
