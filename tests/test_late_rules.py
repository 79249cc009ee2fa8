"""The three late rules (``late_rule=``): the worked examples of docs/guide/late-data.md,
and per-key watermarks never losing what a global one keeps, under each window rule.

Spark's rule against Spark itself is tests/test_spark_parity.py; each rule against a
plain-Python model is tests/test_pipeline_oracle.py.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tidemark as tm

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)


def table(rows: list[tuple[str, int]]) -> pa.Table:
    """Rows ``(key, event time in seconds after T0)``."""
    return pa.table(
        {
            "k": pa.array([k for k, _ in rows], pa.string()),
            "ts": pa.array(
                [T0 + dt.timedelta(seconds=s) for _, s in rows], pa.timestamp("us", tz="UTC")
            ),
        }
    )


def pipe(rule: str, per: str = "global", window: Any = None) -> tm.Pipeline:
    return tm.Pipeline(
        key="k",
        event_time="ts",
        window=window or tm.Tumbling("10s"),
        aggs={"n": tm.count()},
        watermark=tm.BoundedOutOfOrderness("0s", per=per),
        late_rule=rule,
    )


def calls(rule: str, batches: list[list[tuple[str, int]]], **kw: Any) -> list[tuple[Any, ...]]:
    """Per call: the windows emitted (start second, count) and the late rows' seconds."""
    op = pipe(rule, **kw).operator()
    out = []
    for rows in batches:
        o = op.process(table(rows))
        wins = [
            (int((r["window_start"] - T0).total_seconds()), r["n"]) for r in o.windows.to_pylist()
        ]
        late = [int((r["ts"] - T0).total_seconds()) for r in o.late.to_pylist()]
        out.append((wins, late))
    return out


# The worked example of docs/guide/late-data.md: 10 s windows, no delay.
EXAMPLE = [[("a", 5)], [("a", 25)], [("a", 7)], [("a", 8)]]


def test_the_worked_example_of_the_guide() -> None:
    # Spark: the call that moves W to 25 s closes nothing; the next one closes [0, 10)
    # with its row at 7 s (judged by W = 5 s, the watermark the call before began
    # with); the row at 8 s after that is late.
    assert calls("spark", EXAMPLE) == [([], []), ([], []), ([(0, 2)], []), ([], [8])]
    # Flink: [0, 10) closes in the call that moves W past it; 7 s and 8 s are late.
    assert calls("flink", EXAMPLE) == [([], []), ([(0, 1)], []), ([], [7]), ([], [8])]
    # Row: as Flink here; it differs for rows behind W whose window is open.
    assert calls("row", EXAMPLE) == calls("flink", EXAMPLE)
    behind = [[("a", 25)], [("a", 21)], [("a", 40)]]
    assert calls("flink", behind)[1] == ([], [])  # [20, 30) is open: on time
    assert calls("row", behind)[1] == ([], [21])  # 21 < W = 25: late


def test_the_rule_is_checked_shown_and_fingerprinted() -> None:
    with pytest.raises(tm.ConfigError, match='late_rule must be "spark", "flink" or "row"'):
        pipe("Spark")
    assert "late_rule='spark'" in repr(pipe("spark"))
    assert len({pipe(r).fingerprint for r in ("spark", "flink", "row")}) == 3
    # A snapshot of one rule does not restore under another.
    op = pipe("spark").operator()
    op.process(table([("a", 1)]))
    with pytest.raises(tm.StateCorruptedError):
        pipe("flink").operator(state=op.snapshot())


rows_st = st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(0, 90)), max_size=10)


def counts(rule: str, per: str, window: Any, batches: list[Any]) -> Counter[tuple[Any, ...]]:
    """Each emitted (key, window)'s count, flushed at the end."""
    op = pipe(rule, per, window).operator()
    outs = [op.process(table(rows)) for rows in batches] + [op.flush()]
    got: Counter[tuple[Any, ...]] = Counter()
    for o in outs:
        for r in o.windows.to_pylist():
            got[(r["k"], r["window_start"], r["window_end"])] += r["n"]
    return got


@settings(max_examples=200, deadline=None)
@given(
    batches=st.lists(rows_st, min_size=1, max_size=6),
    rule=st.sampled_from(["spark", "flink"]),
    window=st.sampled_from([tm.Tumbling("10s"), tm.Sliding("10s", "5s"), tm.Session("5s")]),
)
def test_per_key_keeps_every_window_a_global_watermark_gets_right(
    batches: list[Any], rule: str, window: Any
) -> None:
    """Every window the global watermark emits with its exact count (no row of it
    late) comes out per key with that count: per key never loses what global keeps."""
    exact = counts(rule, "global", window, [[r for rows in batches for r in rows]])
    global_ = counts(rule, "global", window, batches)
    per_key = counts(rule, "key", window, batches)
    for w, n in global_.items():
        if exact[w] == n:
            assert per_key[w] == n, w


def _minutes(users: list[str], minutes: list[int]) -> pa.Table:
    """A table of ``user`` and ``ts`` at those minutes past midnight."""
    return pa.table(
        {
            "user": users,
            "ts": pa.array([m * 60_000_000 for m in minutes], pa.timestamp("us", tz="UTC")),
        }
    )


@pytest.mark.parametrize("rule", ["spark", "flink", "row"])
@pytest.mark.parametrize("idleness", ["clock", "event_time"])
def test_a_user_session_closed_while_idle_is_never_overlapped(rule: str, idleness: str) -> None:
    """The mobile user of the issue: "a" goes idle, its session [00:00, 00:30) closes on
    the global watermark, then its row at 00:10 arrives. One session, one late row (a
    second session [00:10, 00:40) would count the user's time twice)."""
    clock = tm.ManualClock(0)
    op = tm.Pipeline(
        key="user",
        event_time="ts",
        window=tm.Session(gap="30m"),
        aggs={"n": tm.count()},
        watermark=tm.BoundedOutOfOrderness("1m", per="key", idle_timeout="5m", idleness=idleness),
        late_rule=rule,
        clock=clock,
    ).operator()
    outs = [op.process(_minutes(["a", "b"], [0, 0]))]
    clock.advance(600_000)
    outs.append(op.process(_minutes(["b"], [60])))
    for m in (61, 62):
        clock.advance(1_000)
        outs.append(op.process(_minutes(["b"], [m])))
    clock.advance(1_000)
    outs.append(op.process(_minutes(["a"], [10])))
    outs.append(op.flush())
    sessions = [
        (r["window_start"].minute, r["window_end"].minute, r["n"])
        for o in outs
        for r in o.windows.to_pylist()
        if r["user"] == "a"
    ]
    assert sessions == [(0, 30, 1)]
    assert sum(o.late.num_rows for o in outs) == 1
