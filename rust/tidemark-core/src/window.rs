//! Window assigners: tumbling, sliding and session windows.
//!
//! Times are epoch microseconds (`i64`). A window is `[start, end)`. Tumbling and
//! sliding windows are aligned to `offset` (0: the Unix epoch), like Spark's
//! `window()`. Sessions are built per key from events: an event at `ts` covers
//! `[ts, ts + gap)`, and overlapping covers merge into one session
//! `[first event, last event + gap)`; an event can bridge two sessions.

use crate::error::{Result, TidemarkError};

/// The window a pipeline aggregates over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WindowSpec {
    /// Fixed, non-overlapping windows of `size`.
    Tumbling {
        /// Window length.
        size: i64,
        /// Alignment offset.
        offset: i64,
    },
    /// Windows of `size` starting every `slide`.
    Sliding {
        /// Window length.
        size: i64,
        /// Distance between window starts.
        slide: i64,
        /// Alignment offset.
        offset: i64,
    },
    /// Per-key sessions closed by `gap` of inactivity.
    Session {
        /// Inactivity gap.
        gap: i64,
    },
    /// The last `n` rows of each key (a moving aggregate; see
    /// `pipeline::rows::RowsOperator`).
    Rows {
        /// Rows per window.
        n: i64,
    },
}

/// Window sizes, slides, offsets and gaps up to this (in microseconds: about 31,700
/// years) give every event time within [`SAFE_EVENT_TIME`] its windows: no window
/// bound leaves the 64-bit range.
pub const SAFE_WINDOW: i64 = 1_000_000_000_000_000_000;

/// Event times (epoch microseconds) within `-SAFE_EVENT_TIME..=SAFE_EVENT_TIME` always
/// get their windows, under any window within [`SAFE_WINDOW`] (see the test
/// `safe_range_never_overflows`); further out, a row may be an error row.
pub const SAFE_EVENT_TIME: i64 = 4 * SAFE_WINDOW;

impl WindowSpec {
    /// Checks the sizes.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: &str| Err(TidemarkError::config("window", m));
        match *self {
            WindowSpec::Tumbling { size, .. } if size <= 0 => {
                bad("tumbling window size must be positive")
            }
            WindowSpec::Sliding { size, slide, .. } if size <= 0 || slide <= 0 => {
                bad("sliding window size and slide must be positive")
            }
            WindowSpec::Sliding { size, slide, .. } if slide > size => bad(
                "a sliding window's slide must not exceed its size (rows between windows would \
                 belong to none); use a tumbling window for slide == size",
            ),
            WindowSpec::Sliding { size, slide, .. } if size / slide > 1_000 => {
                bad("a sliding window may overlap at most 1000 windows (size / slide)")
            }
            WindowSpec::Session { gap } if gap <= 0 => bad("session gap must be positive"),
            WindowSpec::Rows { n } if !(1..=100_000).contains(&n) => {
                bad("a ROWS window holds between 1 and 100000 rows")
            }
            _ => Ok(()),
        }
    }

    /// `true` for session windows.
    pub fn is_session(&self) -> bool {
        matches!(self, WindowSpec::Session { .. })
    }

    /// The grid every window bound lies on, `(step, origin)`: bounds are
    /// `origin + k * step` (a tumbling window's size, a sliding window's slide, and
    /// their offset). `None` for sessions and ROWS windows.
    pub fn grid(&self) -> Option<(i64, i64)> {
        match *self {
            WindowSpec::Tumbling { size, offset } => Some((size, offset)),
            WindowSpec::Sliding { slide, offset, .. } => Some((slide, offset)),
            _ => None,
        }
    }

    /// Calls `f(start, end)` for every tumbling or sliding window containing `ts`,
    /// in increasing start order. Errors (without calling `f`) if a bound overflows.
    ///
    /// # Examples
    ///
    /// ```
    /// use tidemark_core::window::WindowSpec;
    /// let w = WindowSpec::Sliding { size: 10, slide: 5, offset: 0 };
    /// let mut got = vec![];
    /// w.assign(12, |s, e| got.push((s, e))).unwrap();
    /// assert_eq!(got, vec![(5, 15), (10, 20)]);
    /// ```
    #[inline]
    pub fn assign(
        &self,
        ts: i64,
        mut f: impl FnMut(i64, i64),
    ) -> std::result::Result<(), &'static str> {
        const OVERFLOW: &str = "event time out of range for the window";
        match *self {
            WindowSpec::Tumbling { size, offset } => {
                let rel = ts.checked_sub(offset).ok_or(OVERFLOW)?;
                let start = rel
                    .div_euclid(size)
                    .checked_mul(size)
                    .and_then(|s| s.checked_add(offset))
                    .ok_or(OVERFLOW)?;
                let end = start.checked_add(size).ok_or(OVERFLOW)?;
                f(start, end);
                Ok(())
            }
            WindowSpec::Sliding {
                size,
                slide,
                offset,
            } => {
                let rel = ts.checked_sub(offset).ok_or(OVERFLOW)?;
                let last = rel
                    .div_euclid(slide)
                    .checked_mul(slide)
                    .and_then(|s| s.checked_add(offset))
                    .ok_or(OVERFLOW)?;
                last.checked_add(size).ok_or(OVERFLOW)?;
                // Earliest start s with s + size > ts.
                let n = (size - 1) / slide; // windows before `last` that still contain ts
                let first = last.checked_sub(n * slide).ok_or(OVERFLOW)?;
                let mut s = first;
                while s <= last {
                    if s + size > ts {
                        f(s, s + size);
                    }
                    s += slide;
                }
                Ok(())
            }
            WindowSpec::Session { gap } => {
                let end = ts.checked_add(gap).ok_or(OVERFLOW)?;
                f(ts, end);
                Ok(())
            }
            WindowSpec::Rows { .. } => Err("ROWS windows are count-based, not assigned by time"),
        }
    }
}

/// One open window of a key, of any kind: `[start, end)` with the index of its aggregate
/// state (a session's bounds grow as events join it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenWindow {
    /// First event time.
    pub start: i64,
    /// Last event time plus the gap.
    pub end: i64,
    /// Index of the session's aggregate state.
    pub state: u32,
}

/// The result of adding an event's cover to a key's sessions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionChange {
    /// The event fell into an existing session that kept its bounds.
    Inside(usize),
    /// The event created a new session at this index.
    Created(usize),
    /// The event grew or merged sessions: `merged` states were folded into the one at
    /// `index`, whose bounds changed from `old` to its current bounds.
    Grown {
        /// Index of the surviving session.
        index: usize,
        /// Bounds of the surviving session before the change.
        old: (i64, i64),
        /// States of sessions merged into it (removed from the list), with their bounds.
        merged: Vec<OpenWindow>,
    },
}

/// Adds the cover `[start, end)` of an event to `sessions` (sorted by start,
/// disjoint and not touching). `new_state` is called when a new session is needed.
/// Sessions that overlap or touch the cover merge with it (as Spark's
/// `session_window` and Flink's session windows merge them): events exactly `gap`
/// apart form one session.
///
/// # Examples
///
/// ```
/// use tidemark_core::window::{add_to_sessions, OpenWindow, SessionChange};
/// let mut s = vec![OpenWindow { start: 0, end: 10, state: 0 }, OpenWindow { start: 20, end: 30, state: 1 }];
/// // An event at 8 with gap 14 covers [8, 22): it bridges both sessions.
/// let change = add_to_sessions(&mut s, 8, 22, || 2);
/// assert_eq!(s, vec![OpenWindow { start: 0, end: 30, state: 0 }]);
/// assert!(matches!(change, SessionChange::Grown { index: 0, .. }));
/// ```
pub fn add_to_sessions(
    sessions: &mut Vec<OpenWindow>,
    start: i64,
    end: i64,
    new_state: impl FnOnce() -> u32,
) -> SessionChange {
    // Sessions overlapping or touching [start, end): s.start <= end && s.end >= start.
    let first = sessions.partition_point(|s| s.end < start);
    let mut last = first;
    while last < sessions.len() && sessions[last].start <= end {
        last += 1;
    }
    if first == last {
        sessions.insert(
            first,
            OpenWindow {
                start,
                end,
                state: new_state(),
            },
        );
        return SessionChange::Created(first);
    }
    let old = (sessions[first].start, sessions[first].end);
    let new_start = old.0.min(start);
    let new_end = sessions[last - 1].end.max(end);
    if last - first == 1 && new_start == old.0 && new_end == old.1 {
        return SessionChange::Inside(first);
    }
    let merged: Vec<OpenWindow> = sessions.drain(first + 1..last).collect();
    sessions[first].start = new_start;
    sessions[first].end = new_end;
    SessionChange::Grown {
        index: first,
        old,
        merged,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn safe_range_never_overflows() {
        let (t, w) = (SAFE_EVENT_TIME, SAFE_WINDOW);
        let mut specs = vec![WindowSpec::Session { gap: w }];
        for offset in [-w, 0, w] {
            specs.push(WindowSpec::Tumbling { size: w, offset });
            // Up to a thousand windows per row (each one is a call).
            for slide in [w / 1000, w] {
                specs.push(WindowSpec::Sliding {
                    size: w,
                    slide,
                    offset,
                });
            }
        }
        for spec in specs {
            for ts in [-t, -1, 0, t] {
                let mut n = 0u64;
                spec.assign(ts, |_, _| n += 1)
                    .unwrap_or_else(|e| panic!("{spec:?} at {ts}: {e}"));
                assert!(n >= 1, "{spec:?} at {ts}");
            }
        }
    }

    #[test]
    fn tumbling_alignment_and_negatives() {
        let w = WindowSpec::Tumbling {
            size: 10,
            offset: 0,
        };
        let mut got = vec![];
        for ts in [-1, 0, 9, 10] {
            w.assign(ts, |s, e| got.push((s, e))).unwrap();
        }
        assert_eq!(got, vec![(-10, 0), (0, 10), (0, 10), (10, 20)]);
        let w = WindowSpec::Tumbling {
            size: 10,
            offset: 3,
        };
        let mut got = vec![];
        w.assign(2, |s, e| got.push((s, e))).unwrap();
        assert_eq!(got, vec![(-7, 3)]);
        assert!(w.assign(i64::MAX - 1, |_, _| {}).is_err());
        assert!(w.assign(i64::MIN + 1, |_, _| {}).is_err());
    }

    proptest! {
        #[test]
        fn sliding_windows_contain_ts(
            ts in -1_000_000i64..1_000_000,
            (size, slide) in (1i64..100).prop_flat_map(|size| (Just(size), 1..=size)),
        ) {
            let w = WindowSpec::Sliding { size, slide, offset: 0 };
            let mut got = vec![];
            w.assign(ts, |s, e| got.push((s, e))).unwrap();
            // Every aligned window containing ts, and only those.
            let mut want = vec![];
            let mut s = (ts - size).div_euclid(slide) * slide;
            while s <= ts {
                if s + size > ts { want.push((s, s + size)); }
                s += slide;
            }
            prop_assert_eq!(got, want);
        }

        #[test]
        fn sessions_match_interval_union(events in proptest::collection::vec(0i64..200, 1..30), gap in 1i64..20) {
            let mut sessions = vec![];
            let mut next = 0u32;
            for &t in &events {
                add_to_sessions(&mut sessions, t, t + gap, || { next += 1; next });
            }
            // Naive: sort events, cut where the distance exceeds the gap.
            let mut sorted = events.clone();
            sorted.sort();
            let mut want = vec![];
            let (mut s, mut e) = (sorted[0], sorted[0] + gap);
            for &t in &sorted[1..] {
                if t <= e { e = e.max(t + gap); } else { want.push((s, e)); s = t; e = t + gap; }
            }
            want.push((s, e));
            let got: Vec<(i64, i64)> = sessions.iter().map(|s| (s.start, s.end)).collect();
            prop_assert_eq!(got, want);
        }
    }
}
