//! Event times a stream can believe. A row far outside them is an error row with its
//! reason, so that one absurd event time (a device clock set to 2300, or reset to
//! 1970) moves no watermark, makes no input idle and opens no window, from the
//! stream's first row on.
//!
//! A call's bounds ([`Bounds`]) are fixed as it begins, the same for every operator of
//! the scope:
//!
//! * **ahead**: a row more than `max_ahead` later than the wall clock (an event cannot
//!   come from the future; the clock reading is the Spark driver's, recorded with the
//!   micro-batch, or the operator's own system clock). On another clock (a replay's
//!   manual clock), more than `max_ahead` later than the stream's event time.
//! * **behind**: a row more than `max_behind` earlier than the stream's event time.
//!
//! The stream's event time is [`super::ScopeWatermark::time`], which only what
//! `quorum` keys agree on moves. Before the stream has one, the call's own rows judge
//! each other ([`Bounds::of_rows`]): a row is refused more than `max_behind` (or three
//! interquartile ranges, if more) before their lower quartile, or (without a wall
//! clock) `max_ahead` (or three interquartile ranges) after their upper quartile. That
//! needs every row of the call: where several operators share a call (cores, Spark's
//! state partitions) their coordinator computes it and hands it to each.
//!
//! Windows on a grid (tumbling and sliding windows) judge a row by its grid cell: a
//! row is refused only when its whole cell lies beyond a bound, so the rows of a cell
//! (a Spark fold's pane) share one fate.
//!
//! A stream that moved on by more than `max_ahead` while no wall clock ran (a replay
//! with a manual clock that pauses for days) would have every later row refused: a
//! call that believed none of its rows and refused some as too far ahead moves the
//! stream's event time to the earliest of them ([`super::Progress::ahead_floor`]), and
//! the next call believes them.

use arrow_array::{Array, Int64Array};

use super::{PipelineConfig, TimeMode};
use crate::duration::format_micros;
use crate::time::format_epoch_micros;

/// What a call's bounds were measured from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reference {
    /// The stream's event time (`None`: none yet) and the wall clock's reading
    /// (microseconds; `None`: not on a wall clock).
    Stream {
        /// The stream's event time as the call began.
        time: Option<i64>,
        /// The wall clock as the call began.
        wall: Option<i64>,
    },
    /// The stream's first rows (it had no event time yet): the start of their lower
    /// quartile's cell and the end of their upper quartile's, and the wall clock
    /// (which bounds what is ahead where there is one).
    FirstRows {
        /// The lower quartile (its cell's start).
        low: i64,
        /// The upper quartile (its cell's end).
        high: i64,
        /// The wall clock as the call began.
        wall: Option<i64>,
    },
}

/// Where a call's event times are believed (see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bounds {
    /// A row whose cell starts after this is too far ahead (`None`: no bound).
    pub ahead: Option<i64>,
    /// A row whose cell ends at or before this is too far behind (`None`: no bound).
    pub behind: Option<i64>,
    /// What the bounds were measured from.
    pub reference: Reference,
}

/// The rows a call refused as too far ahead, where that may move the stream on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Refused {
    /// The earliest cell start among the rows refused as too far ahead of the stream's
    /// event time (no wall clock), `None` if none.
    pub(super) ahead_floor: Option<i64>,
}

/// A pipeline's grid: `(step, origin)` of the cells rows are judged by.
fn grid(cfg: &PipelineConfig) -> (i64, i64) {
    cfg.window.grid().unwrap_or((1, 0))
}

/// The cell of `t` on the grid `(step, origin)`: its start and end (saturating).
fn cell(t: i64, (step, origin): (i64, i64)) -> (i64, i64) {
    if step == 1 {
        return (t, t.saturating_add(1));
    }
    let (t, step, origin) = (i128::from(t), i128::from(step), i128::from(origin));
    let start = (t - origin).div_euclid(step) * step + origin;
    let clamp = |v: i128| v.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64;
    (clamp(start), clamp(start + step))
}

impl Bounds {
    /// The bounds of a call as the stream stands: its event time `time` and the wall
    /// clock `wall` (microseconds). `None` where nothing bounds the call.
    pub fn of_stream(cfg: &PipelineConfig, time: Option<i64>, wall: Option<i64>) -> Option<Self> {
        if cfg.time == TimeMode::Processing {
            return None;
        }
        let ahead = cfg
            .max_ahead
            .and_then(|a| wall.or(time).map(|r| r.saturating_add(a)));
        let behind = cfg
            .max_behind
            .and_then(|b| time.map(|t| t.saturating_sub(b)));
        (ahead.is_some() || behind.is_some()).then_some(Bounds {
            ahead,
            behind,
            reference: Reference::Stream { time, wall },
        })
    }

    /// The bounds of a stream's first call from its rows' event times (`times`, null
    /// where unreadable; `weights`: the input rows each stands for, one each where
    /// `None`) and the wall clock `wall`: quartiles of the rows' cells (see the module
    /// documentation). `None` where nothing bounds the call.
    pub fn of_rows(
        cfg: &PipelineConfig,
        times: &Int64Array,
        weights: Option<&[i64]>,
        wall: Option<i64>,
    ) -> Option<Self> {
        if cfg.time == TimeMode::Processing || (cfg.max_ahead.is_none() && cfg.max_behind.is_none())
        {
            return None;
        }
        let g = grid(cfg);
        let mut cells: Vec<(i64, u64)> = (0..times.len())
            .filter(|&i| times.is_valid(i))
            .map(|i| {
                let w = weights.map_or(1, |w| w[i].max(1) as u64);
                (cell(times.value(i), g).0, w)
            })
            .collect();
        if cells.is_empty() {
            return Self::of_stream(cfg, None, wall);
        }
        cells.sort_unstable();
        let total: u64 = cells.iter().map(|c| c.1).sum();
        let at = |rank: u64| {
            let mut seen = 0u64;
            for &(c, w) in &cells {
                seen += w;
                if seen > rank {
                    return c;
                }
            }
            cells[cells.len() - 1].0
        };
        Self::of_quartiles(cfg, at((total - 1) / 4), at(3 * (total - 1) / 4), wall)
    }

    /// The bounds of a stream's first call from its rows' lower and upper quartiles
    /// (`q1`, `q3`: event times, as [`Self::of_rows`] finds them or as an estimate
    /// made where the rows are, recorded with the micro-batch so that a replay
    /// decides the same) and the wall clock `wall`.
    pub fn of_quartiles(cfg: &PipelineConfig, q1: i64, q3: i64, wall: Option<i64>) -> Option<Self> {
        if cfg.time == TimeMode::Processing || (cfg.max_ahead.is_none() && cfg.max_behind.is_none())
        {
            return None;
        }
        let g = grid(cfg);
        let (low, high) = (cell(q1, g).0, cell(q3, g).1);
        let spread = high.saturating_sub(low).saturating_mul(3);
        let ahead = match wall {
            Some(w) => cfg.max_ahead.map(|a| w.saturating_add(a)),
            None => cfg.max_ahead.map(|a| high.saturating_add(a.max(spread))),
        };
        let behind = cfg.max_behind.map(|b| low.saturating_sub(b.max(spread)));
        Some(Bounds {
            ahead,
            behind,
            reference: Reference::FirstRows { low, high, wall },
        })
    }

    /// Judges a call's rows (`times`; rows already in `errors`, or null, are skipped):
    /// each row beyond a bound becomes an error row with its reason.
    pub(super) fn judge(
        &self,
        cfg: &PipelineConfig,
        times: &Int64Array,
        bad: &mut [bool],
        errors: &mut Vec<(usize, String)>,
    ) -> Refused {
        let g = grid(cfg);
        let mut refused = Refused::default();
        let stream_ahead = matches!(self.reference, Reference::Stream { wall: None, .. });
        // A row's cell lies beyond a bound only if the row does: most rows are
        // cleared by two comparisons, without their cell.
        let (hi, lo) = (
            self.ahead.unwrap_or(i64::MAX),
            self.behind.unwrap_or(i64::MIN),
        );
        for (i, b) in bad.iter_mut().enumerate() {
            let t = times.value(i);
            if (lo..=hi).contains(&t) || *b || times.is_null(i) {
                continue;
            }
            let (start, end) = cell(t, g);
            let why = if self.ahead.is_some_and(|a| start > a) {
                if stream_ahead {
                    refused.ahead_floor = Some(refused.ahead_floor.map_or(start, |f| f.min(start)));
                }
                self.why_ahead(cfg, t)
            } else if self.behind.is_some_and(|b| end <= b) {
                self.why_behind(cfg, t)
            } else {
                continue;
            };
            *b = true;
            errors.push((i, why));
        }
        refused
    }

    fn why_ahead(&self, cfg: &PipelineConfig, t: i64) -> String {
        let d = format_micros(cfg.max_ahead.unwrap_or(0));
        let t = format_epoch_micros(t);
        match self.reference {
            Reference::Stream { wall: Some(w), .. }
            | Reference::FirstRows { wall: Some(w), .. } => format!(
                "event time {t} is more than max_ahead ({d}) ahead of the clock ({}): an \
                 event cannot come from the future",
                format_epoch_micros(w)
            ),
            Reference::Stream { time, .. } => format!(
                "event time {t} is more than max_ahead ({d}) ahead of the stream's event \
                 time ({})",
                stream_time(time)
            ),
            Reference::FirstRows { high, .. } => format!(
                "event time {t} lies far after the stream's first rows (their upper \
                 quartile ends at {}; believed up to max_ahead ({d}) or three \
                 interquartile ranges past it)",
                format_epoch_micros(high)
            ),
        }
    }

    fn why_behind(&self, cfg: &PipelineConfig, t: i64) -> String {
        let d = format_micros(cfg.max_behind.unwrap_or(0));
        let t = format_epoch_micros(t);
        match self.reference {
            Reference::Stream { time, .. } => format!(
                "event time {t} is more than max_behind ({d}) behind the stream's event \
                 time ({})",
                stream_time(time)
            ),
            Reference::FirstRows { low, .. } => format!(
                "event time {t} lies far before the stream's first rows (their lower \
                 quartile starts at {}; believed down to max_behind ({d}) or three \
                 interquartile ranges before it)",
                format_epoch_micros(low)
            ),
        }
    }
}

/// The stream's event time in a reason (`None`: none yet).
fn stream_time(time: Option<i64>) -> String {
    time.map_or_else(|| "none".into(), format_epoch_micros)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agg::{AggKind, AggSpec};
    use crate::window::WindowSpec;

    const S: i64 = 1_000_000;
    const DAY: i64 = 86_400 * S;
    const T0: i64 = 1_780_000_000 * S; // 2026

    fn cfg(window: WindowSpec) -> PipelineConfig {
        PipelineConfig::new(
            &["k"],
            "ts",
            window,
            vec![AggSpec {
                name: "n".into(),
                kind: AggKind::Count,
                column: None,
                by: None,
            }],
        )
    }

    fn refused(b: &Bounds, c: &PipelineConfig, ts: &[i64]) -> Vec<usize> {
        let times = Int64Array::from(ts.to_vec());
        let mut bad = vec![false; ts.len()];
        let mut errors = Vec::new();
        b.judge(c, &times, &mut bad, &mut errors);
        errors.into_iter().map(|e| e.0).collect()
    }

    #[test]
    fn first_rows_refuse_their_outliers_whatever_the_spread() {
        let c = cfg(WindowSpec::Session { gap: 10 * S });
        // A minute of readings, one from 2300 and one from 1969.
        let mut ts: Vec<i64> = (0..60).map(|i| T0 + i * S).collect();
        ts.push(10_413_792_000 * S);
        ts.push(-S);
        let b = Bounds::of_rows(&c, &Int64Array::from(ts.clone()), None, None).unwrap();
        assert_eq!(refused(&b, &c, &ts), vec![60, 61]);
        // Three months of backlog in the first call: nothing is refused.
        let backlog: Vec<i64> = (0..90).map(|d| T0 + d * DAY).collect();
        let b = Bounds::of_rows(&c, &Int64Array::from(backlog.clone()), None, None).unwrap();
        assert!(refused(&b, &c, &backlog).is_empty());
        // One row judges nothing.
        let b = Bounds::of_rows(&c, &Int64Array::from(vec![T0]), None, None).unwrap();
        assert!(refused(&b, &c, &[T0]).is_empty());
    }

    #[test]
    fn weights_count_as_rows() {
        let c = cfg(WindowSpec::Tumbling {
            size: 10 * S,
            offset: 0,
        });
        // One fold of 100 rows and five single rows a year later: the fold is the bulk.
        let ts = [
            T0,
            T0 + 365 * DAY,
            T0 + 365 * DAY,
            T0 + 365 * DAY,
            T0 + 365 * DAY,
            T0 + 365 * DAY,
        ];
        let w = [100, 1, 1, 1, 1, 1];
        let b = Bounds::of_rows(&c, &Int64Array::from(ts.to_vec()), Some(&w), None).unwrap();
        assert_eq!(refused(&b, &c, &ts), vec![1, 2, 3, 4, 5]);
        let b = Bounds::of_rows(&c, &Int64Array::from(ts.to_vec()), None, None).unwrap();
        assert_eq!(refused(&b, &c, &ts), vec![0]);
    }

    #[test]
    fn a_cell_shares_one_fate() {
        let c = cfg(WindowSpec::Tumbling {
            size: 10 * S,
            offset: 0,
        });
        let b = Bounds::of_stream(&c, Some(T0), None).unwrap();
        let ahead = b.ahead.unwrap();
        // The cell holding the bound is believed whole; the next one is refused whole.
        let edge = cell(ahead, grid(&c)).0;
        assert_eq!(
            refused(&b, &c, &[edge, edge + 10 * S - 1, edge + 10 * S]),
            vec![2]
        );
    }

    #[test]
    fn the_wall_clock_bounds_what_is_ahead() {
        let c = cfg(WindowSpec::Session { gap: S });
        // A replay (the clock long after the data): only the future is refused.
        let b = Bounds::of_stream(&c, Some(T0 - 400 * DAY), Some(T0)).unwrap();
        assert_eq!(
            refused(&b, &c, &[T0 - 399 * DAY, T0 + DAY, T0 + DAY + 1]),
            vec![2]
        );
        let mut times = Int64Array::from(vec![T0 + 2 * DAY]);
        let (mut bad, mut errors) = (vec![false], Vec::new());
        let r = b.judge(&c, &times, &mut bad, &mut errors);
        assert_eq!(r.ahead_floor, None, "the clock's bound moves nothing on");
        assert!(
            errors[0].1.contains("ahead of the clock"),
            "{}",
            errors[0].1
        );
        // On a manual clock the stream's own time bounds it, and a floor is kept.
        let b = Bounds::of_stream(&c, Some(T0), None).unwrap();
        times = Int64Array::from(vec![T0 + 2 * DAY]);
        let (mut bad, mut errors) = (vec![false], Vec::new());
        let r = b.judge(&c, &times, &mut bad, &mut errors);
        assert_eq!(r.ahead_floor, Some(T0 + 2 * DAY));
        assert!(
            errors[0].1.contains("stream's event time"),
            "{}",
            errors[0].1
        );
    }

    #[test]
    fn no_bounds_without_settings_or_in_processing_time() {
        let mut c = cfg(WindowSpec::Session { gap: S });
        c.max_ahead = None;
        c.max_behind = None;
        assert_eq!(Bounds::of_stream(&c, Some(T0), None), None);
        let c = PipelineConfig {
            time: TimeMode::Processing,
            ..cfg(WindowSpec::Session { gap: S })
        };
        assert_eq!(Bounds::of_stream(&c, Some(T0), Some(T0)), None);
    }
}
