"""PartitionedWatermarkTracker through the Python API (seed F064)."""

from __future__ import annotations

import datetime as dt
import pickle

import polars as pl
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tidemark as tm


def test_seed_doc_example_verbatim() -> None:
    tracker = tm.PartitionedWatermarkTracker()
    # Register Kafka source with 4 partitions
    tracker.register_source(0, 4)
    # Update individual partitions
    tracker.update_partition(0, 0, 5000)
    tracker.update_partition(0, 1, 3000)
    tracker.update_partition(0, 2, 4000)
    tracker.update_partition(0, 3, 4500)
    # Combined watermark is minimum (3000)
    assert tracker.current_watermark() == 3000
    # Mark partition 1 as idle
    tracker.mark_partition_idle(0, 1)
    # Now combined watermark advances to 4000 (min of active partitions)
    assert tracker.current_watermark() == 4000


def test_update_returns_new_combined_watermark_only_when_it_advances() -> None:
    t = tm.PartitionedWatermarkTracker()
    t.register_source(0, 2)
    assert t.update_partition(0, 0, 100) is None  # partition 1 has none yet
    assert t.update_partition(0, 1, 50) == 50
    assert t.update_partition(0, 1, 40) is None  # lower: ignored
    assert t.partition_watermark(0, 1) == 50
    assert t.update_partition_from_event(0, 1, 1_000, 100) == 100
    assert t.partition_state(0, 1)["last_event_time"] == 1_000


def test_idle_detection_on_manual_clock() -> None:
    clock = tm.ManualClock(start=0)
    t = tm.PartitionedWatermarkTracker(idle_timeout=30_000, clock=clock)
    t.register_source(0, 3)
    t.update_partition(0, 0, 10_000)
    t.update_partition(0, 1, 20_000)
    # Partition 2 never sent anything: it holds the combined watermark back.
    assert t.current_watermark() is None
    clock.advance(30_000)
    assert t.check_idle_partitions() is None  # exactly the timeout: not idle yet
    clock.advance(1)
    t.update_partition(0, 1, 25_000)
    assert t.check_idle_partitions() == 25_000  # partitions 0 and 2 idle
    assert t.is_partition_idle(0, 0) and t.is_partition_idle(0, 2)
    assert not t.is_partition_idle(0, 1)
    assert t.active_partition_count(0) == 1
    # An update reactivates; the combined watermark never goes back.
    t.update_partition(0, 0, 12_000)
    assert not t.is_partition_idle(0, 0)
    assert t.current_watermark() == 25_000
    m = t.metrics()
    assert m == {
        "total_partitions": 3,
        "active_partitions": 2,
        "idle_partitions": 1,
        "watermark_advances": 1,
        "rebalances": 0,
    }


def test_all_idle_uses_max_and_mark_active() -> None:
    t = tm.PartitionedWatermarkTracker()
    t.register_source(0, 2)
    t.update_partition(0, 0, 10)
    t.update_partition(0, 1, 90)
    t.mark_partition_idle(0, 0)
    assert t.mark_partition_idle(0, 1) is None  # min over active was already 90
    assert t.current_watermark() == 90
    t.mark_partition_active(0, 0)
    assert not t.is_partition_idle(0, 0)
    assert t.current_watermark() == 90


def test_idle_timeout_accepts_durations() -> None:
    assert tm.PartitionedWatermarkTracker(idle_timeout="30s").idle_timeout == 30_000
    assert (
        tm.PartitionedWatermarkTracker(idle_timeout=dt.timedelta(minutes=1)).idle_timeout == 60_000
    )
    with pytest.raises(tm.ConfigError, match="idle_timeout"):
        tm.PartitionedWatermarkTracker(idle_timeout="soon")
    with pytest.raises(tm.ConfigError, match="negative"):
        tm.PartitionedWatermarkTracker(idle_timeout=-1)


def test_events_take_datetimes_and_durations_in_microseconds() -> None:
    t = tm.PartitionedWatermarkTracker()
    t.register_source(0, 2)
    t.update_partition_from_event(0, 0, dt.datetime(1970, 1, 1, 0, 0, 10), "1s")
    t.update_partition_from_event(0, 1, 20_000_000, dt.timedelta(seconds=2))
    assert t.current_watermark() == 9_000_000
    t.update_partition_from_event(0, 0, 30, 5)  # ints: ticks as given
    assert t.partition_watermark(0, 0) == 9_000_000  # a lower value is ignored
    with pytest.raises(tm.ConfigError, match="max_lateness"):
        t.update_partition_from_event(0, 0, 1, -1)
    t.update_partition(0, 1, dt.datetime(1970, 1, 1, 0, 0, 12, tzinfo=dt.timezone.utc))
    assert t.partition_watermark(0, 1) == 18_000_000  # lower than 18 s: ignored
    t.update_partition(0, 0, dt.datetime(1970, 1, 1, 0, 0, 12))
    assert t.current_watermark() == 12_000_000


def test_snapshots_and_pickles_go_on_where_the_tracker_stopped() -> None:
    clock = tm.ManualClock(0)
    t = tm.PartitionedWatermarkTracker(idle_timeout=100, clock=clock)
    t.register_source(0, 3)
    t.update_partition(0, 0, 50)
    t.update_partition(0, 1, 80)
    clock.advance(60)
    t.update_partition(0, 1, 90)  # partition 2 has sent nothing
    for back in (
        tm.PartitionedWatermarkTracker.restore(t.snapshot(), clock=clock),
        pickle.loads(pickle.dumps(t)),
    ):
        assert back.idle_timeout == 100
        assert back.metrics() == t.metrics()
        assert back.partition_state(0, 1) == t.partition_state(0, 1)
        assert back.current_watermark() is None  # partition 2 still holds it back
    back = tm.PartitionedWatermarkTracker.restore(t.snapshot(), clock=clock)
    clock.advance(41)  # partitions 0 and 2 silent for 101 ticks, 1 for 41
    assert back.check_idle_partitions() == 90
    assert back.is_partition_idle(0, 0) and not back.is_partition_idle(0, 1)
    with pytest.raises(tm.StateCorruptedError):
        tm.PartitionedWatermarkTracker.restore(t.snapshot()[:-1])


def test_rebalancing_and_core_assignment() -> None:
    t = tm.PartitionedWatermarkTracker()
    t.register_source(0, 2)
    t.update_partition(0, 0, 100)
    t.update_partition(0, 1, 200)
    t.add_partition(0, 7)
    assert t.partitions() == [(0, 0), (0, 1), (0, 7)]
    assert t.update_partition(0, 0, 500) is None  # partition 7 holds it back
    assert t.update_partition(0, 7, 300) == 200
    removed = t.remove_partition(0, 1)
    assert removed is not None and removed["watermark"] == 200
    assert t.current_watermark() == 300
    assert t.remove_partition(0, 1) is None
    assert t.metrics()["rebalances"] == 2
    t.assign_partition_to_core(0, 7, core=3)
    assert t.partition_core(0, 7) == 3
    assert t.partition_core(0, 0) is None


@pytest.mark.parametrize(
    ("call", "exc", "message"),
    [
        (lambda t: t.update_partition(0, 9, 1), tm.UnknownPartitionError, "add_partition"),
        (lambda t: t.update_partition(5, 0, 1), tm.SourceNotFoundError, "register_source"),
        (lambda t: t.update_partition(0, -1, 1), tm.InvalidPartitionError, "between 0"),
        (lambda t: t.add_partition(0, 0), tm.InvalidPartitionError, "already registered"),
        (lambda t: t.add_partition(3, 0), tm.SourceNotFoundError, "source 3"),
        (lambda t: t.mark_partition_idle(0, 9), tm.UnknownPartitionError, "partition 9"),
        (lambda t: t.mark_partition_active(0, 9), tm.UnknownPartitionError, "partition 9"),
        (lambda t: t.is_partition_idle(0, 9), tm.UnknownPartitionError, "partition 9"),
        (lambda t: t.partition_state(0, 9), tm.UnknownPartitionError, "partition 9"),
        (lambda t: t.active_partition_count(4), tm.SourceNotFoundError, "source 4"),
        (lambda t: t.assign_partition_to_core(0, 9, 1), tm.UnknownPartitionError, "9"),
        (lambda t: t.register_source(1, -2), tm.ConfigError, "num_partitions"),
    ],
)
def test_error_cases(call, exc, message) -> None:  # type: ignore[no-untyped-def]
    t = tm.PartitionedWatermarkTracker()
    t.register_source(0, 2)
    with pytest.raises(exc, match=message) as info:
        call(t)
    assert isinstance(info.value, tm.TidemarkError)
    if exc in (tm.UnknownPartitionError, tm.SourceNotFoundError):
        assert isinstance(info.value, (tm.WatermarkError, KeyError))


def test_queries_on_unknown_partitions_return_none() -> None:
    t = tm.PartitionedWatermarkTracker()
    t.register_source(0, 1)
    assert t.partition_watermark(0, 5) is None
    assert t.source_watermark(9) is None
    assert t.partition_core(0, 5) is None


# --- observe: the vectorised path -------------------------------------------------


def _events(partitions: list[int], times_ms: list[int]) -> pa.RecordBatch:
    return pa.record_batch(
        {
            "partition": pa.array(partitions, pa.int32()),
            "event_time": pa.array(times_ms, pa.timestamp("ms", tz="UTC")),
            "value": pa.array(range(len(partitions)), pa.int64()),
        }
    )


def test_observe_updates_every_partition_in_the_batch() -> None:
    t = tm.PartitionedWatermarkTracker()
    t.register_source(0, 3)
    batch = _events([0, 1, 0, 2, 1], [5_000, 3_000, 9_000, 4_000, 8_000])
    assert t.observe(batch, max_lateness="1s") == 3_000_000  # epoch micros
    assert t.partition_watermark(0, 0) == 8_000_000
    assert t.partition_watermark(0, 1) == 7_000_000
    assert t.partition_watermark(0, 2) == 3_000_000
    assert t.partition_state(0, 0)["last_event_time"] == 9_000_000


def test_observe_accepts_tables_and_polars() -> None:
    batch = _events([0, 1], [1_000, 2_000])
    table = pa.Table.from_batches([batch, _events([0, 1], [3_000, 500])])
    for data in (table, pl.from_arrow(table)):
        t = tm.PartitionedWatermarkTracker()
        t.register_source(0, 2)
        assert t.observe(data) == 2_000_000
        assert t.partition_watermark(0, 0) == 3_000_000


def test_observe_raw_integer_times_are_ticks() -> None:
    t = tm.PartitionedWatermarkTracker()
    t.register_source(0, 2)
    data = pa.table({"p": [0, 1, 1], "ts": [100, 50, 70]})
    assert t.observe(data, partition_column="p", event_time="ts", max_lateness=10) == 60
    with pytest.raises(tm.ConfigError, match="unit is unknown"):
        t.observe(data, partition_column="p", event_time="ts", max_lateness="1s")


def test_observe_named_and_user_types() -> None:
    t = tm.PartitionedWatermarkTracker()
    t.register_source(0, 1)
    data = pa.table({"partition": [0, 0], "ts": ["1970-01-01T00:00:02Z", "garbage"]})
    assert t.observe(data, event_time="ts", event_time_type="iso8601") == 2_000_000

    tm.register_event_time_type(
        "deciseconds", lambda a: pa.compute.multiply(a, 100_000), replace=True
    )
    t2 = tm.PartitionedWatermarkTracker()
    t2.register_source(0, 1)
    data = pa.table({"partition": [0, 0], "ts": pa.array([30, None], pa.int64())})
    assert t2.observe(data, event_time="ts", event_time_type="deciseconds") == 3_000_000


def test_observe_skips_null_partitions_and_bad_times() -> None:
    t = tm.PartitionedWatermarkTracker()
    t.register_source(0, 1)
    data = pa.table(
        {
            "partition": pa.array([None, 0, 0], pa.int64()),
            "event_time": pa.array([9_000, None, 1_000], pa.timestamp("us")),
        }
    )
    assert t.observe(data) == 1_000


def test_observe_errors() -> None:
    t = tm.PartitionedWatermarkTracker()
    t.register_source(0, 1)
    batch = _events([0, 4], [1, 2])
    with pytest.raises(tm.UnknownPartitionError, match="partition 4"):
        t.observe(batch)
    assert t.partitions() == [(0, 0)], "a failed observe changes nothing"
    assert t.observe(batch, add_missing=True) == 1_000
    assert t.partitions() == [(0, 0), (0, 4)]
    with pytest.raises(tm.MissingColumnError, match="available columns: partition"):
        t.observe(batch, event_time="ts")
    with pytest.raises(tm.MissingColumnError, match="'part'"):
        t.observe(batch, partition_column="part")
    with pytest.raises(tm.SourceNotFoundError):
        t.observe(batch, source_id=3)
    with pytest.raises(tm.InvalidPartitionError, match="-1"):
        t.observe(_events([-1], [1]))
    with pytest.raises(tm.UnknownEventTimeTypeError, match="unixtimestamp_ms"):
        t.observe(pa.table({"partition": [0], "event_time": [1]}), event_time_type="nope")
    with pytest.raises(TypeError, match="Arrow tabular data"):
        t.observe([1, 2, 3])


# --- property test against a naive model ------------------------------------------

ops = st.lists(
    st.one_of(
        st.tuples(st.just("update"), st.integers(0, 3), st.integers(-100, 1_000)),
        st.tuples(st.just("idle"), st.integers(0, 3), st.just(0)),
        st.tuples(st.just("active"), st.integers(0, 3), st.just(0)),
        st.tuples(st.just("advance"), st.just(0), st.integers(0, 20)),
        st.tuples(st.just("check"), st.just(0), st.just(0)),
    ),
    max_size=60,
)


@settings(max_examples=200, deadline=None)
@given(ops)
def test_matches_naive_model(operations: list[tuple[str, int, int]]) -> None:
    clock = tm.ManualClock()
    t = tm.PartitionedWatermarkTracker(idle_timeout=10, clock=clock)
    t.register_source(0, 4)
    wm = {p: None for p in range(4)}
    last = {p: 0 for p in range(4)}
    idle = {p: False for p in range(4)}
    combined: int | None = None
    now = 0

    def recalc() -> int | None:
        nonlocal combined
        active = [wm[p] for p in wm if not idle[p]]
        if active:
            cand = None if any(w is None for w in active) else min(active)  # type: ignore[type-var]
        else:
            known = [w for w in wm.values() if w is not None]
            cand = max(known) if known else None
        if cand is not None and (combined is None or cand > combined):
            combined = cand
            return cand
        return None

    for op, p, v in operations:
        if op == "update":
            got = t.update_partition(0, p, v)
            wm[p] = v if wm[p] is None else max(wm[p], v)  # type: ignore[type-var]
            last[p], idle[p] = now, False
            assert got == recalc()
        elif op == "idle":
            got = t.mark_partition_idle(0, p)
            idle[p] = True
            assert got == recalc()
        elif op == "active":
            t.mark_partition_active(0, p)
            idle[p], last[p] = False, now
        elif op == "advance":
            clock.advance(v)
            now += v
        else:
            got = t.check_idle_partitions()
            newly = [q for q in wm if not idle[q] and now - last[q] > 10]
            for q in newly:
                idle[q] = True
            assert got == (recalc() if newly else None)
        assert t.current_watermark() == combined
        for q in range(4):
            assert t.is_partition_idle(0, q) == idle[q]
