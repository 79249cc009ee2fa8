//! The watermark value type.

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
