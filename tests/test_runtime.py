"""The thread-per-core runtime: pipe.operator(cores=N) gives the cores=1 output."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tidemark as tm
from tidemark.metrics import PrometheusCollector, prometheus_text


def _pipe(per: str, window: Any, emit: str = "on_window_close") -> tm.Pipeline:
    return tm.Pipeline(
        key=["tenant", "device"],
        event_time="ts",
        event_time_type="unixtimestamp_ms",
        watermark=tm.BoundedOutOfOrderness(
            "2s",
            per=per,
            idle_timeout=None if per == "global" else "5s",
            **({"partition_column": "p"} if per == "partition" else {}),
        ),
        window=window,
        aggs={"n": tm.count(), "s": tm.sum("v"), "m": tm.mean("v"), "hi": tm.max("v")},
        emit=emit,
    )


rows = st.tuples(
    st.sampled_from(["acme", "globex", "initech"]),
    st.integers(0, 9),
    st.integers(0, 2),
    st.integers(0, 60_000),
    st.floats(-100, 100, allow_nan=False),
)


def _table(rs: list[tuple[str, int, int, int, float]]) -> pa.Table:
    return pa.table(
        {
            "tenant": pa.array([r[0] for r in rs], pa.large_string()),
            "device": pa.array([r[1] for r in rs], pa.int32()),
            "p": pa.array([r[2] for r in rs], pa.int32()),
            "ts": pa.array([r[3] for r in rs], pa.int64()),
            "v": pa.array([r[4] for r in rs], pa.float64()),
        }
    )


@settings(max_examples=25, deadline=None)
@given(
    batches=st.lists(st.lists(rows, max_size=30), min_size=1, max_size=6),
    cores=st.integers(2, 4),
    per=st.sampled_from(["global", "partition", "key"]),
    window=st.sampled_from([tm.Tumbling("5s"), tm.Sliding("6s", every="2s"), tm.Session(gap="3s")]),
    emit=st.sampled_from(["on_window_close", "on_update"]),
)
def test_any_core_count_gives_the_single_core_output(
    batches: list[list[Any]], cores: int, per: str, window: Any, emit: str
) -> None:
    pipe = _pipe(per, window, emit)
    clock1, clockn = tm.ManualClock(0), tm.ManualClock(0)
    one = pipe.operator(clock=clock1)
    many = pipe.operator(clock=clockn, cores=cores)
    assert many.cores == cores
    for b in batches:
        t = _table(b)
        a, z = one.process(t), many.process(t)
        assert a.windows.equals(z.windows)
        assert a.late.equals(z.late)
        assert a.errors.equals(z.errors)
        assert one.watermark == many.watermark
        clock1.advance(3_000)
        clockn.advance(3_000)
    assert one.flush().windows.equals(many.flush().windows)
    m1, mn = one.metrics(), many.metrics()
    for k in ("rows_in", "late_dropped_count", "windows_emitted", "updates_emitted", "batches"):
        assert m1[k] == mn[k], k


@settings(max_examples=20, deadline=None)
@given(
    batches=st.lists(st.lists(rows, max_size=40), min_size=1, max_size=5),
    cores=st.integers(2, 4),
    per=st.sampled_from(["global", "partition"]),
    window=st.sampled_from([tm.Tumbling("5s"), tm.Sliding("6s", every="2s")]),
    hot=st.sampled_from([None, 0.1, 0.3]),
    global_aggregate=st.booleans(),
)
def test_two_phase_and_hot_keys_give_the_single_core_output(
    batches: list[list[Any]],
    cores: int,
    per: str,
    window: Any,
    hot: float | None,
    global_aggregate: bool,
) -> None:
    pipe = tm.Pipeline(
        key=None if global_aggregate else ["tenant", "device"],
        event_time="ts",
        event_time_type="unixtimestamp_ms",
        watermark=tm.BoundedOutOfOrderness(
            "2s", per=per, **({"partition_column": "p"} if per == "partition" else {})
        ),
        window=window,
        aggs={
            "n": tm.count(),
            "s": tm.sum("v"),
            "m": tm.mean("v"),
            "sd": tm.stddev("v"),
            "lo": tm.min("v"),
        },
    )
    hot = None if global_aggregate else hot
    one = pipe.operator()
    many = pipe.operator(cores=cores, hot_keys=hot)
    for b in batches:
        # Skew: most rows belong to one tenant/device.
        t = _table([("acme", 0, *r[2:]) if i % 3 else r for i, r in enumerate(b)])
        a, z = one.process(t), many.process(t)
        assert a.windows.equals(z.windows)
        assert a.late.equals(z.late)
    assert one.flush().windows.equals(many.flush().windows)
    assert one.metrics()["windows_emitted"] == many.metrics()["windows_emitted"]


def test_hot_keys_spread_one_dominant_key() -> None:
    pipe = tm.Pipeline(
        key="device",
        event_time="ts",
        event_time_type="unixtimestamp_ms",
        watermark=tm.BoundedOutOfOrderness("2s"),
        window=tm.Tumbling("5s"),
        aggs={"n": tm.count()},
    )
    t = pa.table({"device": [0 if i % 2 else i for i in range(1000)], "ts": list(range(1000))})
    plain = pipe.operator(cores=2)
    spread = pipe.operator(cores=2, hot_keys=0.2)
    assert plain.process(t).windows.equals(spread.process(t).windows)
    m = spread.metrics()
    assert m["hot_keys"] == 1 and m["hot_rows_spread"] == 501
    busiest = max(c["records_processed"] for c in m["cores"])
    assert busiest < max(c["records_processed"] for c in plain.metrics()["cores"])
    # Restored mid-window, the spread key's partial windows merge at a flush before
    # any batch (the merge reads the input schema from the snapshot).
    for hot in (plain, spread):
        hot.process(pa.table({"device": [0] * 10, "ts": [5_500] * 10}))
    restored = pipe.operator(spread.snapshot(), cores=2, hot_keys=0.2)
    assert restored.flush().windows.equals(plain.flush().windows)
    with pytest.raises(tm.ConfigError, match="per-key watermark"):
        _pipe("key", tm.Tumbling("5s")).operator(cores=2, hot_keys=0.2)
    with pytest.raises(tm.ConfigError, match="cores > 1"):
        pipe.operator(hot_keys=0.2)


@pytest.mark.parametrize(("before", "after"), [(3, 3), (3, 2), (2, 5), (4, 1), (1, 3)])
def test_snapshots_restore_on_any_core_count(before: int, after: int) -> None:
    # Rescaling: keyed state is redistributed by key hash.
    pipe = _pipe("key", tm.Tumbling("5s"))
    first = _table([("acme", d, 0, 1_000 + d, float(d)) for d in range(40)])
    later = _table([("acme", d, 0, 30_000, 1.0) for d in range(0, 40, 3)])
    op = pipe.operator(cores=before)
    op.process(first)
    restored = pipe.operator(op.snapshot(), cores=after)
    assert restored.cores == after
    single = pipe.operator()
    single.process(first)
    assert restored.process(later).windows.equals(single.process(later).windows)
    assert restored.flush().windows.equals(single.flush().windows)
    assert restored.metrics()["rows_in"] == single.metrics()["rows_in"]


def test_configuration_errors() -> None:
    pipe = _pipe("key", tm.Tumbling("5s"))
    with pytest.raises(tm.ConfigError, match="cores"):
        pipe.operator(cores=0)
    with pytest.raises(tm.ConfigError, match="queue_capacity"):
        pipe.operator(cores=2, queue_capacity=0)
    glob = tm.Pipeline(
        watermark=tm.BoundedOutOfOrderness("0s"),
        key=None,
        event_time="ts",
        event_time_type="unixtimestamp_ms",
        window=tm.Session(gap="5s"),
        aggs={"n": tm.count()},
    )
    with pytest.raises(tm.ConfigError, match="sessions"):
        glob.operator(cores=2)
    op = pipe.operator(cores=2)
    with pytest.raises(tm.ConfigError, match="cores=1"):
        op.set_external_watermark(5)
    with pytest.raises(tm.MissingColumnError):
        op.process(pa.table({"x": [1]}))
    with pytest.raises(tm.StateCorruptedError):
        pipe.operator(b"not a snapshot", cores=2)
    op.process(_table([("acme", 1, 0, 1_000, 1.0)]))  # still usable


def test_per_core_metrics_and_prometheus() -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    op = _pipe("key", tm.Tumbling("5s")).operator(cores=2)
    op.process(_table([("acme", d, 0, d * 100, 1.0) for d in range(10)]))
    m = op.metrics()
    assert len(m["cores"]) == 2
    assert sum(c["records_processed"] for c in m["cores"]) == 10
    for c in m["cores"]:
        assert c["backpressure"] == "healthy"
        assert c["queue_depth"] == 0 and c["queue_capacity"] == 4
        assert 0 <= c["utilization"] <= 1
        assert c["latency_p50_us"] <= c["latency_p95_us"] <= c["latency_p99_us"]
    text = prometheus_text(op)
    assert "# TYPE tidemark_partition_records_processed counter" in text
    assert 'tidemark_partition_backpressure_state{partition="1",state="healthy"} 1' in text
    reg = CollectorRegistry()
    reg.register(PrometheusCollector(op))
    exposed = generate_latest(reg).decode()
    assert 'tidemark_partition_records_processed_total{partition="0"}' in exposed
    assert "tidemark_rows_in_total 10.0" in exposed


def test_prometheus_covers_every_operator_counter_reorders_and_trackers() -> None:
    from prometheus_client.parser import text_string_to_metric_families

    def values(obj: object) -> dict[str, float]:
        text = prometheus_text(obj)
        fams = list(text_string_to_metric_families(text))  # valid exposition format
        return {s.name: s.value for f in fams for s in f.samples if not s.labels}

    op = _pipe("key", tm.Tumbling("5s")).operator()
    op.process(_table([("acme", d, 0, d * 100, 1.0) for d in range(10)]))
    got = values(op)
    m = op.metrics()
    # Every numeric counter and gauge of metrics() is exported under some name.
    assert sorted(v for k, v in m.items() if isinstance(v, int)) == sorted(
        v for k, v in got.items() if not k.startswith("tidemark_partition_")
    )
    assert got["tidemark_windows_open"] == m["windows_open"]
    assert got["tidemark_keys"] == m["keys"] == 10
    r = tm.Reorder("ts", "unixtimestamp_ms", late_tolerance="1s")
    r.process(pa.table({"ts": [5_000, 1_000, 9_000]}))
    assert values(r)["tidemark_reorder_buffer_size"] == r.metrics()["buffer_size"] == 1
    kt = tm.KeyedWatermarkTracker(bounded_delay=10)
    assert "tidemark_keyed_global_watermark" not in values(kt)  # none yet: no sample
    kt.update_batch(["a", "b"], [100, 50])
    assert values(kt)["tidemark_keyed_global_watermark"] == 40
    assert values(kt)["tidemark_keyed_keys"] == 2
    ck = tm.CompactKeyedWatermarkTracker(bounded_delay=10, exact_keys=1, sketch_width=8)
    ck.update_batch(["a", "b"], [100, 50])
    assert values(ck)["tidemark_compact_evicted_keys_total"] == 1
    pt = tm.PartitionedWatermarkTracker()
    pt.register_source(0, 2)
    pt.update_partition(0, 0, 7)
    pt.update_partition(0, 1, 9)
    assert values(pt)["tidemark_source_watermark"] == 7
    with pytest.raises(TypeError, match="got dict"):
        prometheus_text({"rows_in": 1})
    with pytest.raises(TypeError, match="got str"):
        PrometheusCollector("op")


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs /proc")
def test_threads_start_with_the_operator_not_at_import() -> None:
    code = (
        "import os, gc\n"
        "n = lambda: len(os.listdir('/proc/self/task'))\n"
        "before = n()\n"
        "import tidemark as tm\n"
        "imported = n()\n"
        "pipe = tm.Pipeline(key='k', event_time='ts', event_time_type='unixtimestamp_ms',\n"
        "    window=tm.Tumbling('5s'), aggs={'n': tm.count()},\n"
        "    watermark=tm.BoundedOutOfOrderness('5s'))\n"
        "op = pipe.operator(cores=3)\n"
        "running = n()\n"
        "del op; gc.collect()\n"
        "print(before, imported, running, n())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    before, imported, running, after = map(int, out.stdout.split())
    # pyarrow may start its own pools at import; tidemark adds none until an operator.
    assert running == imported + 3
    assert after == imported
    del before


def test_work_is_spread_over_threads() -> None:
    op = _pipe("key", tm.Tumbling("5s")).operator(cores=2)
    op.process(_table([("acme", d, 0, 1_000, 1.0) for d in range(100)]))
    busy = [c for c in op.metrics()["cores"] if c["records_processed"] > 0]
    assert len(busy) == 2


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="Linux affinity")
def test_pin_cores_pins_each_worker() -> None:
    pipe = _pipe("key", tm.Tumbling("5s"))
    op = pipe.operator(cores=2, pin_cores=True)
    assert op.pinned == 2
    t = _table([("acme", d, 0, 1_000, 1.0) for d in range(10)])
    assert op.process(t).windows.equals(pipe.operator().process(t).windows)
    assert pipe.operator(cores=2).pinned == 0
