//! Dirty data: bounds on event times, progress that keys agree on, activity that is
//! progress, null keys (see `bounds.rs` and [`super::Progress`]).

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray};

use super::*;
use crate::agg::{AggKind, AggSpec};
use crate::clock::{system_clock, ManualClock};

const S: i64 = 1_000_000;
const DAY: i64 = 86_400 * S;
/// 2026-06-01.
const T0: i64 = 1_780_272_000 * S;
const YEAR_2300: i64 = 10_413_792_000 * S;
/// 1969-12-31T23:59:59.
const YEAR_1969: i64 = -S;

fn cfg(scope: Scope) -> PipelineConfig {
    PipelineConfig {
        scope,
        delay: 10 * S,
        idle_timeout: Some(120_000),
        ..PipelineConfig::new(
            &["k"],
            "ts",
            WindowSpec::Tumbling {
                size: 10 * S,
                offset: 0,
            },
            vec![AggSpec::new("n", AggKind::Count, None)],
        )
    }
}

/// Rows `(key, partition, event time)`; a `None` key is a null.
fn rows(rows: &[(Option<&str>, i64, i64)]) -> RecordBatch {
    let k: Vec<Option<&str>> = rows.iter().map(|r| r.0).collect();
    let p: Vec<i64> = rows.iter().map(|r| r.1).collect();
    let ts: Vec<i64> = rows.iter().map(|r| r.2).collect();
    RecordBatch::try_from_iter(vec![
        ("k", Arc::new(StringArray::from(k)) as ArrayRef),
        ("p", Arc::new(Int64Array::from(p)) as ArrayRef),
        (
            "ts",
            Arc::new(TimestampMicrosecondArray::from(ts).with_timezone("UTC")) as ArrayRef,
        ),
    ])
    .unwrap()
}

fn op(c: PipelineConfig) -> Operator {
    Operator::new(c, Arc::new(ManualClock::new(0))).unwrap()
}

fn scopes() -> [Scope; 3] {
    [
        Scope::Global,
        Scope::Partition { column: "p".into() },
        Scope::Key,
    ]
}

fn reasons(out: &Output) -> Vec<String> {
    let i = out.errors.schema().index_of("reason").unwrap();
    let r = out.errors.column(i).as_string::<i32>();
    (0..r.len()).map(|i| r.value(i).to_string()).collect()
}

/// `(key, window start)` of the windows output.
fn windows(out: &Output) -> Vec<(String, i64)> {
    let k = out.windows.column(0).as_string::<i32>();
    let s = arrow_cast::cast(
        out.windows.column(1),
        &arrow_schema::DataType::Timestamp(arrow_schema::TimeUnit::Microsecond, None),
    )
    .unwrap();
    let s = s.as_primitive::<arrow_array::types::TimestampMicrosecondType>();
    (0..k.len())
        .map(|i| (k.value(i).to_string(), s.value(i)))
        .collect()
}

/// A minute of readings from four keys on two partitions, one a second each.
fn minute(from: i64) -> Vec<(Option<&'static str>, i64, i64)> {
    let mut out = Vec::new();
    for s in 0..60 {
        for (k, p) in [("a", 0), ("b", 0), ("c", 1), ("d", 1)] {
            out.push((Some(k), p, from + s * S));
        }
    }
    out
}

#[test]
fn absurd_times_in_the_first_call_are_refused_and_open_no_window() {
    for scope in scopes() {
        let mut o = op(cfg(scope.clone()));
        let mut first = minute(T0);
        first.push((Some("a"), 0, YEAR_2300));
        first.push((Some("c"), 1, YEAR_1969));
        let out = o.process(&rows(&first), None).unwrap();
        let why = reasons(&out);
        assert_eq!(why.len(), 2, "{scope:?}: {why:?}");
        assert!(
            why[0].contains("far after the stream's first rows"),
            "{}",
            why[0]
        );
        assert!(
            why[1].contains("far before the stream's first rows"),
            "{}",
            why[1]
        );
        // The watermark follows the real rows; the next minute closes real windows only.
        let out = o.process(&rows(&minute(T0 + 60 * S)), None).unwrap();
        let w = windows(&out);
        assert!(!w.is_empty(), "{scope:?}");
        assert!(
            w.iter().all(|(_, s)| (T0..T0 + 120 * S).contains(s)),
            "{scope:?}: {w:?}"
        );
        let out = o.flush().unwrap();
        assert!(windows(&out).iter().all(|(_, s)| *s >= T0), "{scope:?}");
    }
}

#[test]
fn absurd_times_later_are_refused_against_the_streams_time() {
    for scope in scopes() {
        let mut o = op(cfg(scope.clone()));
        o.process(&rows(&minute(T0)), None).unwrap();
        let mut next = minute(T0 + 60 * S);
        next.push((Some("b"), 0, YEAR_2300));
        next.push((Some("d"), 1, YEAR_1969));
        next.push((Some("b"), 0, T0 + 60 * S + 2 * DAY));
        let out = o.process(&rows(&next), None).unwrap();
        let why = reasons(&out);
        assert_eq!(why.len(), 3, "{scope:?}: {why:?}");
        assert!(
            why[0].contains("ahead of the stream's event time"),
            "{}",
            why[0]
        );
        assert!(
            why[1].contains("more than max_behind (30d) behind"),
            "{}",
            why[1]
        );
        assert_eq!(
            o.progress().max_event_time(),
            Some(T0 + 119 * S),
            "{scope:?}"
        );
    }
}

#[test]
fn on_a_wall_clock_only_the_future_is_refused() {
    let c = PipelineConfig {
        max_behind: None,
        ..cfg(Scope::Global)
    };
    let mut o = Operator::new(c, system_clock()).unwrap();
    // A replay of 1970: nothing ahead of the clock.
    let out = o
        .process(&rows(&[(Some("a"), 0, S), (Some("a"), 0, 400 * DAY)]), None)
        .unwrap();
    assert_eq!(out.errors.num_rows(), 0);
    let now = system_clock().now() * 1_000;
    let out = o
        .process(
            &rows(&[(Some("a"), 0, now), (Some("a"), 0, now + 2 * DAY)]),
            None,
        )
        .unwrap();
    let why = reasons(&out);
    assert_eq!(why.len(), 1);
    assert!(why[0].contains("ahead of the clock"), "{}", why[0]);
}

#[test]
fn a_stream_that_moved_on_past_max_ahead_is_believed_from_the_next_call() {
    // A manual clock (a replay) and a pause of three days in the data.
    let mut o = op(cfg(Scope::Global));
    o.process(&rows(&minute(T0)), None).unwrap();
    let later = minute(T0 + 3 * DAY);
    let out = o.process(&rows(&later), None).unwrap();
    assert_eq!(out.errors.num_rows(), later.len(), "refused once");
    let out = o
        .process(&rows(&minute(T0 + 3 * DAY + 60 * S)), None)
        .unwrap();
    assert_eq!(out.errors.num_rows(), 0, "then believed");
    // A few rows refused among believed ones move nothing.
    let mut o = op(cfg(Scope::Global));
    o.process(&rows(&minute(T0)), None).unwrap();
    let mut next = minute(T0 + 60 * S);
    next.push((Some("a"), 0, T0 + 3 * DAY));
    o.process(&rows(&next), None).unwrap();
    let out = o
        .process(&rows(&[(Some("a"), 0, T0 + 3 * DAY)]), None)
        .unwrap();
    assert_eq!(out.errors.num_rows(), 1);
}

/// Partition 0 on time, partition 1's keys 90 s late, and (`strays`) keys on
/// partition 1 whose rows come on time: `n` seconds of it.
fn lagging(n: i64, strays: &[&'static str]) -> Vec<(Option<&'static str>, i64, i64)> {
    let mut out = Vec::new();
    for s in 0..n {
        let t = T0 + 90 * S + s * S;
        for k in ["a", "b", "c"] {
            out.push((Some(k), 0, t));
        }
        for k in ["d", "e", "f", "g"] {
            out.push((Some(k), 1, t - 90 * S));
        }
        if s % 20 == 0 {
            for k in strays {
                out.push((Some(*k), 1, t));
            }
        }
    }
    out
}

fn late_rows(c: &PipelineConfig, all: &[(Option<&'static str>, i64, i64)], calls: usize) -> usize {
    let mut o = op(c.clone());
    let per = all.len().div_ceil(calls);
    all.chunks(per)
        .map(|chunk| o.process(&rows(chunk), None).unwrap().late.num_rows())
        .sum()
}

#[test]
fn a_few_keys_on_a_lagging_partition_do_not_make_its_rows_late() {
    let c = cfg(Scope::Partition { column: "p".into() });
    let stream = lagging(600, &["x", "y"]);
    for calls in [1, 10, 85, 600] {
        assert_eq!(late_rows(&c, &stream, calls), 0, "{calls} calls");
    }
    // Where one key's rows were enough (quorum 1), the strays made rows late.
    let one = PipelineConfig { quorum: 1, ..c };
    assert!(late_rows(&one, &stream, 85) > 0);
}

/// Partition 1 silent after the first minute but for rows far behind its watermark
/// (`stale`); six minutes in all.
fn silent_partition(stale: bool) -> Vec<Vec<(Option<&'static str>, i64, i64)>> {
    let mut calls = vec![minute(T0)];
    for m in 1..6 {
        let mut rows: Vec<_> = minute(T0 + m * 60 * S)
            .into_iter()
            .filter(|r| r.1 == 0)
            .collect();
        // From the third call on (Spark's rule judges the second by the first's
        // starting watermark, none: its rows are not late).
        if stale && m >= 2 {
            rows.push((Some("c"), 1, T0 - 3_600 * S));
        }
        calls.push(rows);
    }
    calls
}

#[test]
fn rows_behind_an_inputs_watermark_keep_it_from_going_idle_no_more_than_silence() {
    for scope in [Scope::Partition { column: "p".into() }, Scope::Key] {
        let run = |stale: bool| {
            let mut o = op(cfg(scope.clone()));
            let mut out = Vec::new();
            for call in silent_partition(stale) {
                let got = o.process(&rows(&call), None).unwrap();
                out.push(windows(&got));
            }
            out
        };
        let (silent, stale) = (run(false), run(true));
        assert_eq!(silent, stale, "{scope:?}");
        assert!(
            silent
                .iter()
                .flatten()
                .any(|w| w.0 == "a" && w.1 > T0 + 60 * S),
            "{scope:?}: partition 1 goes idle and the others' windows close"
        );
    }
}

#[test]
fn null_keys_are_error_rows_unless_grouped() {
    let input = rows(&[
        (Some("a"), 0, T0),
        (None, 0, T0),
        (Some("a"), 0, T0 + 60 * S),
    ]);
    let mut o = op(cfg(Scope::Global));
    let out = o.process(&input, None).unwrap();
    assert_eq!(
        reasons(&out),
        vec![
            "key column \"k\" is null (null_keys=\"error\"; \"group\" keeps such rows as one key)"
                .to_string()
        ]
    );
    let mut o = op(PipelineConfig {
        null_keys: NullKeys::Group,
        ..cfg(Scope::Global)
    });
    let out = o.process(&input, None).unwrap();
    assert_eq!(out.errors.num_rows(), 0);
    let out = o.flush().unwrap();
    assert_eq!(
        out.windows.num_rows(),
        3,
        "a's two windows and the null key's"
    );
}
