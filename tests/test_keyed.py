"""KeyedWatermarkTracker and CompactKeyedWatermarkTracker through Python (seed F065)."""

from __future__ import annotations

import pickle
import re
from typing import Any

import numpy as np
import pandas as pd
import polars as pl
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tidemark as tm


def either_tracker(delay: Any) -> pytest.MarkDecorator:
    """Runs a test (argument ``make``) on the exact tracker and on the compact one (10
    exact slots), both with bounded delay ``delay``."""
    return pytest.mark.parametrize(
        "make",
        [
            lambda: tm.KeyedWatermarkTracker(bounded_delay=delay),
            lambda: tm.CompactKeyedWatermarkTracker(bounded_delay=delay, exact_keys=10),
        ],
        ids=["exact", "compact"],
    )


def test_seed_doc_example_verbatim() -> None:
    tracker = tm.KeyedWatermarkTracker(bounded_delay=5000, idle_timeout=60_000)
    # Fast tenant advances quickly
    tracker.update("tenant_a", 10_000)
    tracker.update("tenant_a", 15_000)
    # Slow tenant at earlier time
    tracker.update("tenant_b", 5_000)
    # Per-key watermarks
    assert tracker.watermark_for_key("tenant_a") == 10_000  # 15000 - 5000
    assert tracker.watermark_for_key("tenant_b") == 0  # 5000 - 5000
    # Global watermark is minimum across active keys
    assert tracker.global_watermark() == 0  # min of 10000, 0
    # Events for tenant_b at 3000 are NOT late (their key watermark allows it)
    assert not tracker.is_late("tenant_b", 3000)
    # But events for tenant_a at 3000 ARE late (their key watermark is 10000)
    assert tracker.is_late("tenant_a", 3000)


def test_update_returns_only_new_highs_of_the_global() -> None:
    t = tm.KeyedWatermarkTracker(bounded_delay=10)
    assert t.update("a", 100) == 90
    assert t.update("b", 50) is None  # a lagging key joins: global drops to 40
    assert t.global_watermark() == 40
    assert t.emitted_watermark() == 90
    assert t.update("b", 80) is None  # 70 < 90 reported before
    assert t.update("b", 200) is None  # global = min(90, 190) = 90: not above 90
    assert t.update("a", 300) == 190


def test_idle_keys_on_manual_clock() -> None:
    clock = tm.ManualClock()
    t = tm.KeyedWatermarkTracker(bounded_delay=0, idle_timeout="1m", clock=clock)
    t.update("slow", 100)
    t.update("fast", 10_000)
    assert t.global_watermark() == 100
    clock.advance(30_000)
    t.update("fast", 20_000)
    clock.advance(30_001)
    assert t.check_idle_keys() == 20_000
    assert t.key_state("slow") == {
        "max_event_time": 100,
        "watermark": 100,
        "last_activity": 0,
        "is_idle": True,
    }
    assert t.active_key_count() == 1 and t.total_key_count() == 2
    assert t.mark_active("slow")
    assert t.global_watermark() == 100
    assert not t.mark_active("nobody")
    assert t.mark_idle("slow") is None  # 20_000 was reported already
    assert t.metrics()["idle_keys"] == 1


@pytest.mark.parametrize(
    ("policy", "evicted"),
    [("least_recently_active", "b"), ("lowest_watermark", "c")],
)
def test_eviction_policies(policy: str, evicted: str) -> None:
    clock = tm.ManualClock()
    t = tm.KeyedWatermarkTracker(bounded_delay=0, max_keys=3, eviction=policy, clock=clock)
    for key, ts in [("a", 500), ("b", 400), ("c", 100)]:
        clock.advance(1)
        t.update(key, ts)
    clock.advance(1)
    t.update("a", 600)  # b is now least recently active; c has the lowest watermark
    t.update("d", 700)
    assert t.watermark_for_key(evicted) is None
    assert t.total_key_count() == 3
    assert t.metrics()["evicted_keys"] == 1


def test_reject_new_raises() -> None:
    t = tm.KeyedWatermarkTracker(bounded_delay=0, max_keys=2, eviction="reject_new")
    t.update("a", 1)
    t.update("b", 1)
    with pytest.raises(tm.MaxKeysReachedError, match="max_keys=2"):
        t.update("c", 1)
    with pytest.raises(tm.MaxKeysReachedError):
        t.update_batch(pa.array(["a", "c"]), pa.array([5, 5]))
    assert t.watermark_for_key("a") == 1, "the rejected batch changed nothing"
    assert isinstance(tm.MaxKeysReachedError("x"), tm.WatermarkError)


def test_configuration_errors() -> None:
    with pytest.raises(tm.ConfigError, match="eviction"):
        tm.KeyedWatermarkTracker(bounded_delay=1, eviction="random")
    with pytest.raises(tm.ConfigError, match="max_keys"):
        tm.KeyedWatermarkTracker(bounded_delay=1, max_keys=0)
    with pytest.raises(tm.ConfigError, match="bounded_delay"):
        tm.KeyedWatermarkTracker(bounded_delay="fast")
    assert tm.KeyedWatermarkTracker(bounded_delay="5s").bounded_delay == 5_000_000


def test_python_key_types_and_arrow_rows_are_the_same_keys() -> None:
    t = tm.KeyedWatermarkTracker(bounded_delay=0)
    t.update_batch(
        [pa.array(["eu", "us", None], pa.large_string()), pa.array([7, 8, 9], pa.int16())],
        pa.array([100, 200, 300]),
    )
    assert t.watermark_for_key(("eu", 7)) == 100
    assert t.watermark_for_key(("us", 8)) == 200
    assert t.watermark_for_key((None, 9)) == 300
    t.update(b"raw", 5)
    assert t.watermark_for_key(b"raw") == 5
    assert t.watermark_for_key("raw") is None, "bytes and str are different keys"
    t.update(3, 10)
    assert t.watermark_for_key(3) == 10
    with pytest.raises(TypeError, match="key must be"):
        t.update(object(), 1)
    with pytest.raises(TypeError, match="nested"):
        t.update(("a", ("b",)), 1)


@pytest.mark.parametrize(
    "column",
    [
        pa.array([1, 2, 1], pa.int8()),
        pa.array([1, 2, 1], pa.uint64()),
        pa.array(["x", "y", "x"]),
        pa.array(["x", "y", "x"], pa.large_string()),
        pa.array([b"x", b"y", b"x"]),
        pa.array(["x", "y", "x"]).dictionary_encode(),
        pa.chunked_array([["x", "y"], ["x"]]),
    ],
)
def test_arrow_key_column_types(column: pa.Array) -> None:
    t = tm.KeyedWatermarkTracker(bounded_delay=0)
    t.update_batch(column, pa.array([10, 20, 30]))
    first = column[0].as_py() if not isinstance(column, pa.ChunkedArray) else "x"
    assert t.watermark_for_key(first) == 30
    assert t.total_key_count() == 2
    late = t.is_late_batch(column, pa.array([29, 19, 31]))
    assert late.to_pylist() == [True, True, False]


def test_decimal_key_columns() -> None:
    import decimal

    # Account numbers as Spark reads them from JDBC sources: decimal(18, 0).
    accounts = pa.array(
        [decimal.Decimal(10**15 + 1), decimal.Decimal(7), None] * 2, pa.decimal128(18, 0)
    )
    t = tm.KeyedWatermarkTracker(bounded_delay=0)
    t.update_batch(accounts, pa.array([10, 20, 5, 11, 21, 6]))
    assert t.total_key_count() == 3  # two accounts and the null key
    assert t.is_late_batch(accounts, pa.array([10, 22, 6, 12, 20, 5])).to_pylist() == [
        True,
        False,
        False,
        False,
        True,
        True,
    ]


def test_tables_and_polars_as_key_columns() -> None:
    table = pa.table({"region": ["eu", "eu", "us"], "id": [1, 1, 2]})
    times = pa.chunked_array([[5, 9], [7]])
    t = tm.KeyedWatermarkTracker(bounded_delay=1)
    t.update_batch(table, times)
    assert t.watermark_for_key(("eu", 1)) == 8
    t2 = tm.KeyedWatermarkTracker(bounded_delay=1)
    t2.update_batch(pl.from_arrow(table), [5, 9, 7])
    assert t2.watermark_for_key(("us", 2)) == 6
    t3 = tm.KeyedWatermarkTracker(bounded_delay=1)
    t3.update_batch(pl.Series(["a", "b"]), [3, 4])
    assert t3.watermark_for_key("b") == 3


@pytest.mark.parametrize("dtype", ["int64", "int32", "uint8", "uint64", "bool", "float64", "U8"])
def test_numpy_arrays_pandas_series_and_numpy_scalars_are_keys(dtype: str) -> None:
    # Keys and times as numpy or pandas hold them: an np.int64(1) read from an array is
    # the key 1, whether it comes in a batch, one update, or a question.
    keys = np.array([1, 0, 1]).astype(dtype)
    for tracker_type in (tm.KeyedWatermarkTracker, tm.CompactKeyedWatermarkTracker):
        t = tracker_type(bounded_delay=5)
        t.update_batch(keys, np.array([10, 20, 30]))
        if isinstance(t, tm.KeyedWatermarkTracker):
            assert t.total_key_count() == 2
        assert t.watermark_for_key(keys[0]) == t.watermark_for_key(keys[0].item()) == 25
        assert t.is_late(keys[0], 3)
        t.update(keys[1], 40)
        assert t.watermark_for_key(keys[1].item()) == 35
        late = t.is_late_batch(pd.Series(keys), pd.Series([3, 100, 24]))
        assert late.to_pylist() == [True, False, True]


def test_two_dimensional_numpy_keys_and_datetime64_times() -> None:
    t = tm.KeyedWatermarkTracker(bounded_delay=5)
    t.update_batch(np.array([["eu", "7"], ["us", "8"]]), np.array([50, 60]))
    assert t.watermark_for_key(("us", "8")) == 55
    t.update_batch(pd.DataFrame({"r": ["eu"], "id": [7]}), pd.Series([70]))
    assert t.watermark_for_key(("eu", 7)) == 65
    # datetime64 times are Arrow timestamps: epoch microseconds.
    t.update_batch(np.array(["x"]), np.array(["1970-01-01T00:00:01"], dtype="datetime64[ms]"))
    assert t.watermark_for_key("x") == 1_000_000 - 5
    with pytest.raises(TypeError, match="got datetime64"):
        t.update(np.datetime64("2024-01-01"), 5)


def test_single_events_take_datetimes_as_microseconds() -> None:
    import datetime as dt

    for make in (
        lambda: tm.KeyedWatermarkTracker(bounded_delay="1s"),
        lambda: tm.CompactKeyedWatermarkTracker(bounded_delay="1s", exact_keys=4),
    ):
        t = make()
        t.update("a", dt.datetime(1970, 1, 1, 0, 0, 5, tzinfo=dt.timezone.utc))
        assert t.watermark_for_key("a") == 4_000_000
        t.update("a", dt.datetime(1970, 1, 1, 0, 0, 6))  # naive: UTC
        assert t.watermark_for_key("a") == 5_000_000
        t.update("a", np.datetime64("1970-01-01T00:00:07", "ms"))
        t.update("b", pd.Timestamp("1970-01-01 01:00:07", tz="Europe/Paris"))  # 00:00:07 UTC
        t.update("c", dt.date(1970, 1, 2))
        assert [t.watermark_for_key(k) for k in "abc"] == [6_000_000, 6_000_000, 86_399_000_000]
        assert t.is_late("a", dt.datetime(1970, 1, 1, 0, 0, 5)) is True
        assert t.is_late("a", 6_000_000) is False
        for missing in (None, pd.NaT, np.datetime64("NaT")):
            with pytest.raises(TypeError, match="an event needs a time"):
                t.update("a", missing)
        assert t.watermark_for_key("a") == 6_000_000


@either_tracker("1s")
def test_batches_of_python_times_read_them_as_single_events_do(make: Any) -> None:
    import datetime as dt

    # A list of datetimes (what update() takes one at a time) was refused by the batch
    # methods with "'datetime.datetime' object cannot be interpreted as an integer".
    t = make()
    times = [
        dt.datetime(1970, 1, 1, 0, 0, 5),
        None,
        pd.Timestamp("1970-01-01 00:00:09"),
        pd.NaT,
        np.datetime64("NaT"),
    ]
    t.update_batch(["a", "b", "c", "d", "e"], times)  # missing times: rows skipped
    assert [t.watermark_for_key(k) for k in "abcde"] == [4_000_000, None, 8_000_000, None, None]
    assert t.is_late_batch(["a", "c"], (dt.datetime(1970, 1, 1), 9_000_000)).to_pylist() == [
        True,
        False,
    ]
    # What is no event time says so, and where; nothing was applied.
    for bad, shown in ((1.5, "1.5 (float)"), (float("nan"), "nan (float)"), ("5", "'5' (str)")):
        with pytest.raises(TypeError, match=re.escape(f"event_times[1]: event_time is {shown}")):
            t.update_batch(["x", "y"], [dt.datetime(1970, 1, 1, 0, 1), bad])
        with pytest.raises(TypeError, match="an event time is an int"):
            t.update("x", bad)
    assert t.watermark_for_key("x") is None
    # A key that is no key still names the key.
    with pytest.raises(TypeError, match="a key must be"):
        t.update_batch([["a"]], [dt.datetime(1970, 1, 1)])
    # The same with an Arrow key column: datetimes read, a float no longer truncated
    # into ticks (1.5 was taken as 1).
    t.update_batch(pa.array(["d", "e"]), [dt.datetime(1970, 1, 1, 0, 0, 7), None])
    assert [t.watermark_for_key(k) for k in "de"] == [6_000_000, None]
    with pytest.raises(TypeError, match=re.escape("event_times[1]: event_time is 1.5")):
        t.update_batch(pa.array(["f", "f"]), [2_000_000, 1.5])
    assert t.watermark_for_key("f") is None


@either_tracker(5000)
@pytest.mark.parametrize("arrow", [False, True], ids=["python_keys", "arrow_keys"])
def test_a_batch_reports_the_global_watermark_it_leaves(make: Any, arrow: bool) -> None:
    # "a" far ahead, lagging "b" in the same batch: the compact tracker returned a's
    # 95_000 (the global after "a" alone), above the -4_995 the batch left, and then
    # kept quiet about b's real advances below it.
    t = make()
    keys = pa.array(["a", "b"]) if arrow else ["a", "b"]
    assert t.update_batch(keys, [100_000, 5]) == -4_995 == t.global_watermark()
    assert t.update("b", 20_000) == 15_000
    # A key that is no key is refused before any event of the batch is applied.
    with pytest.raises(TypeError, match="a key must be"):
        t.update_batch(["c", ["bad"]], [1, 2])
    assert t.watermark_for_key("c") is None


def test_timestamps_are_microseconds_and_nulls_skipped() -> None:
    t = tm.KeyedWatermarkTracker(bounded_delay="1s")
    t.update_batch(pa.array(["a", "a"]), pa.array([5_000, None], pa.timestamp("ms")))
    assert t.watermark_for_key("a") == 4_000_000
    out = t.is_late_batch(pa.array(["a", "a"]), pa.array([3_000_000, None]))
    assert out.to_pylist() == [True, None]


@either_tracker("1s")
def test_python_keys_with_array_times(make: Any) -> None:
    # Keys as Python values (tuples here, which no Arrow column holds) paired with times
    # in an Arrow, numpy or pandas array: timestamps read as epoch microseconds.
    keys = [("eu", 1), ("us", 2), ("eu", 1)]
    ms = [5_000, None, 7_000]
    for times in (
        pa.array(ms, pa.timestamp("ms")),
        pa.chunked_array(
            [
                pa.array(ms[:1], pa.int64()).cast(pa.timestamp("ms")),
                pa.array(ms[1:], pa.timestamp("ms")),
            ]
        ),
        pd.Series(ms, dtype="datetime64[ms]"),
    ):
        t = make()
        t.update_batch(keys, times)
        assert t.watermark_for_key(("eu", 1)) == 6_000_000
        assert t.watermark_for_key(("us", 2)) is None  # its null time skipped the row
        late = t.is_late_batch(keys, times)
        assert late.to_pylist() == [True, None, False]
    t = make()
    t.update_batch(keys, np.array([5_000_000, 6_000_000, 7_000_000]))  # int ticks
    assert t.watermark_for_key(("us", 2)) == 5_000_000


@either_tracker(1)
@pytest.mark.parametrize("arrow", [False, True], ids=["sequences", "arrow"])
def test_batches_pair_keys_and_times_row_by_row(make: Any, arrow: bool) -> None:
    t = make()
    keys: Any = pa.array(["a", "b"]) if arrow else ["a", "b"]
    # One time too few: refused, not a shorter batch, and nothing is recorded.
    short: Any = pa.array([5]) if arrow else [5]
    with pytest.raises(tm.ConfigError, match="2 keys but 1 event times"):
        t.update_batch(keys, short)
    with pytest.raises(tm.ConfigError, match="2 keys but 1 event times"):
        t.is_late_batch(keys, short)
    assert t.watermark_for_key("a") is None
    # A null time skips its row in an update and gives a null lateness.
    times: Any = pa.array([5, None]) if arrow else [5, None]
    t.update_batch(keys, times)
    assert (t.watermark_for_key("a"), t.watermark_for_key("b")) == (4, None)
    assert t.is_late_batch(["a", "a"], [None, 3]).to_pylist() == [None, True]


def test_remove_clear_and_metrics() -> None:
    t = tm.KeyedWatermarkTracker(bounded_delay=0)
    t.update_batch(["a", "b", ("c", 1)], [10, 20, 30])
    assert t.remove_key("a") == {
        "max_event_time": 10,
        "watermark": 10,
        "last_activity": t.key_state("b")["last_activity"],  # type: ignore[index]
        "is_idle": False,
    }
    assert t.global_watermark() == 20
    assert t.remove_key("a") is None
    m = t.metrics()
    assert m["total_keys"] == 2 and m["key_advances"] == 3 and m["global_advances"] == 2
    assert len(t) == 2
    t.clear()
    assert len(t) == 0 and t.global_watermark() is None
    assert t.memory_bytes() >= 0


# --- property test against a naive model ------------------------------------------

events = st.lists(
    st.tuples(
        st.sampled_from(["update", "batch", "idle", "remove", "advance", "check"]),
        st.integers(0, 5),
        st.integers(-50, 500),
    ),
    max_size=80,
)


@settings(max_examples=200, deadline=None)
@given(events)
def test_matches_naive_model(ops: list[tuple[str, int, int]]) -> None:
    clock = tm.ManualClock()
    t = tm.KeyedWatermarkTracker(bounded_delay=20, idle_timeout=10, clock=clock)
    maxes: dict[int, int] = {}
    last: dict[int, int] = {}
    idle: dict[int, bool] = {}
    now = 0
    max_seen: int | None = None
    reported: int | None = None

    def global_now() -> int | None:
        active = [maxes[k] - 20 for k in maxes if not idle[k]]
        return min(active) if active else max_seen

    def advanced() -> int | None:
        nonlocal reported
        g = global_now()
        if g is not None and (reported is None or g > reported):
            reported = g
            return g
        return None

    for op, k, v in ops:
        if op in ("update", "batch"):
            got = t.update(k, v) if op == "update" else t.update_batch([k, k], [v, v - 1])
            maxes[k] = max(maxes.get(k, v), v)
            last[k], idle[k] = now, False
            max_seen = max(max_seen if max_seen is not None else maxes[k] - 20, maxes[k] - 20)
            assert got == advanced()
        elif op == "idle":
            got = t.mark_idle(k)
            if k in maxes:
                idle[k] = True
                assert got == advanced()
        elif op == "remove":
            state = t.remove_key(k)
            assert (state is None) == (k not in maxes)
            maxes.pop(k, None), last.pop(k, None), idle.pop(k, None)
            advanced()
        elif op == "advance":
            clock.advance(v % 15)
            now += v % 15
        else:
            got = t.check_idle_keys()
            newly = [q for q in maxes if not idle[q] and now - last[q] > 10]
            for q in newly:
                idle[q] = True
            assert got == (advanced() if newly else None)
        assert t.global_watermark() == global_now()
        assert t.emitted_watermark() == reported
        for q in maxes:
            assert t.watermark_for_key(q) == maxes[q] - 20
            assert t.is_late(q, maxes[q] - 21) and not t.is_late(q, maxes[q] - 20)
            if not idle[q]:
                g = t.global_watermark()
                assert g is not None and g <= maxes[q] - 20


def test_snapshots_and_pickles_carry_state_and_configuration() -> None:
    """A restarted process goes on where the tracker stopped: keys, watermarks,
    idleness on its clock, the key bound and its policy, the metrics."""
    clock = tm.ManualClock(0)
    t = tm.KeyedWatermarkTracker(
        bounded_delay="5s", idle_timeout=1_000, max_keys=2, eviction="reject_new", clock=clock
    )
    t.update_batch(["a", "b"], pa.array([20_000_000, 9_000_000], pa.timestamp("us")))
    clock.advance(600)
    t.update("a", 21_000_000)
    for back in (
        tm.KeyedWatermarkTracker.restore(t.snapshot(), clock=clock),
        pickle.loads(pickle.dumps(t)),
    ):
        assert (back.bounded_delay, back.idle_timeout, back.max_keys, back.eviction) == (
            5_000_000,
            1_000,
            2,
            "reject_new",
        )
        assert back.metrics() == t.metrics()
        assert back.watermark_for_key("a") == 16_000_000
        assert back.global_watermark() == 4_000_000
        with pytest.raises(tm.MaxKeysReachedError):
            back.update("c", 1)
    # Idleness goes on from the last activity the snapshot holds, on the given clock.
    back = tm.KeyedWatermarkTracker.restore(t.snapshot(), clock=clock)
    clock.advance(401)
    assert back.check_idle_keys() == 16_000_000  # "b" silent for 1,001 ticks
    assert back.key_state("b")["is_idle"] and not back.key_state("a")["is_idle"]
    # A pickled ManualClock is a copy at the same reading.
    copied = pickle.loads(pickle.dumps(t))
    assert copied.clock is not clock and copied.clock.now() == clock.now()


def test_damaged_or_foreign_snapshots_are_refused() -> None:
    t = tm.KeyedWatermarkTracker(bounded_delay=10)
    t.update("a", 100)
    data = bytearray(t.snapshot())
    data[len(data) // 2] ^= 0xFF
    with pytest.raises(tm.StateCorruptedError, match="checksum"):
        tm.KeyedWatermarkTracker.restore(bytes(data))
    compact = tm.CompactKeyedWatermarkTracker(bounded_delay=10, exact_keys=4, sketch_width=64)
    with pytest.raises(tm.StateCorruptedError, match="compact keyed watermark tracker"):
        tm.KeyedWatermarkTracker.restore(compact.snapshot())
    with pytest.raises(tm.StateCorruptedError, match="keyed watermark tracker"):
        tm.CompactKeyedWatermarkTracker.restore(t.snapshot())
    with pytest.raises(tm.StateCorruptedError):
        tm.PartitionedWatermarkTracker.restore(t.snapshot())


# --- compact tracker ----------------------------------------------------------------


def test_compact_tracker_bounds_memory_and_never_overestimates_evicted_keys() -> None:
    t = tm.CompactKeyedWatermarkTracker(bounded_delay=10, exact_keys=1_000, sketch_width=4096)
    n = 100_000
    keys = pa.array(range(n), pa.int64())
    times = pa.array([(k * 7919) % 1_000_000 for k in range(n)], pa.int64())
    for off in range(0, n, 10_000):
        t.update_batch(keys.slice(off, 10_000), times.slice(off, 10_000))
    m = t.metrics()
    assert m["exact_keys"] == 1_000
    assert m["evicted_keys"] == n - 1_000
    assert abs(m["estimated_distinct_keys"] - n) / n < 0.05
    truth = [(k * 7919) % 1_000_000 - 10 for k in range(n)]
    for k in range(0, n - 1_000, 97):
        est = t.watermark_for_key(k)
        assert est is not None and est <= truth[k]
    assert t.memory_bytes() < 2 * t.configured_bytes() + (1 << 20)


def test_compact_tracker_snapshots_restore_exact_keys_and_sketch() -> None:
    t = tm.CompactKeyedWatermarkTracker(bounded_delay=10, exact_keys=50, sketch_width=256)
    keys = pa.array(range(2_000), pa.int64())
    t.update_batch(keys, pa.array([(k * 7919) % 10_000 for k in range(2_000)], pa.int64()))
    for back in (
        tm.CompactKeyedWatermarkTracker.restore(t.snapshot()),
        pickle.loads(pickle.dumps(t)),
    ):
        assert back.metrics() == t.metrics()
        assert back.is_late_batch(keys, keys).equals(t.is_late_batch(keys, keys))
        assert [back.watermark_for_key(k) for k in range(0, 2_100, 7)] == [
            t.watermark_for_key(k) for k in range(0, 2_100, 7)
        ]
        assert [back.is_exact(k) for k in range(2_000)] == [t.is_exact(k) for k in range(2_000)]
        assert repr(back) == repr(t)
    # The snapshot is bounded by the configuration, as the memory is.
    assert len(t.snapshot()) < 256 * 4 * 8 + 4096 + 50 * 64 + 1024


def test_compact_tracker_config_errors() -> None:
    with pytest.raises(tm.ConfigError, match="exact_keys"):
        tm.CompactKeyedWatermarkTracker(bounded_delay=1, exact_keys=0)
    with pytest.raises(tm.ConfigError, match="sketch_depth"):
        tm.CompactKeyedWatermarkTracker(bounded_delay=1, sketch_depth=9)


def test_eviction_names_are_the_cores_everywhere() -> None:
    """``"lru"`` was accepted by ``Pipeline`` and refused by the tracker: both take the
    core's names now, and an unknown one is the core's error, which lists them."""
    t = tm.KeyedWatermarkTracker(bounded_delay=5, max_keys=2, eviction="lru")
    assert t.eviction == "least_recently_active"
    with pytest.raises(tm.ConfigError, match='"least_recently_active", "lowest_watermark"'):
        tm.KeyedWatermarkTracker(bounded_delay=5, eviction="oldest")
