"""Python-level throughput benchmarks (pytest-benchmark).

Run: ``make bench-py`` or ``.venv/bin/python -m pytest benches --benchmark-only``.
Each benchmark prints events/s in its ``extra_info`` (``--benchmark-verbose`` or the
JSON report); the medians are what the closing notes quote.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import tidemark as tm
from tidemark_tools.datagen import tenant_names

ROWS = 65_536
KEYS = 10_000


def _batch(kind: str) -> tuple[pa.Array, pa.Array]:
    rng = np.random.default_rng(7)
    ids = rng.integers(0, KEYS, ROWS)
    keys = pa.array(ids) if kind == "int64" else tenant_names(KEYS).take(ids)
    times = pa.array(np.arange(ROWS, dtype=np.int64) + 1_000_000)
    return keys, times


@pytest.mark.parametrize("kind", ["int64", "string"])
def test_keyed_update_batch_64k_rows_10k_keys(benchmark: Any, kind: str) -> None:
    keys, times = _batch(kind)
    tracker = tm.KeyedWatermarkTracker(bounded_delay=5_000)
    tracker.update_batch(keys, times)
    benchmark(tracker.update_batch, keys, times)
    benchmark.extra_info["events_per_s_median"] = ROWS / benchmark.stats.stats.median


@pytest.mark.parametrize("kind", ["exact", "compact"])
def test_keyed_update_batch_64k_rows_1m_zipf_keys(benchmark: Any, kind: str) -> None:
    """A million keys at Zipf(1.0) frequencies (the accuracy benchmark's stream): the
    exact tracker holds them all; the compact one holds 10K exactly and the rest in
    its sketch. Each round updates the next of 16 batches (event times rising), so
    most keys' watermarks move."""
    from tidemark_tools.datagen import StreamSpec, multi_tenant_stream

    spec = StreamSpec(keys=1_000_000, events=16 * ROWS, skew=1.0, seed=11)
    tenants = multi_tenant_stream(spec).column("tenant").combine_chunks()
    batches = [tenants.slice(i * ROWS, ROWS) for i in range(16)]
    if kind == "exact":
        tracker: Any = tm.KeyedWatermarkTracker(bounded_delay=5_000)
        tracker.update_batch(tenant_names(spec.keys), pa.array(np.zeros(spec.keys, np.int64)))
    else:
        tracker = tm.CompactKeyedWatermarkTracker(bounded_delay=5_000, exact_keys=10_000)
    base = np.arange(ROWS, dtype=np.int64)
    turn = [0]

    def next_batch() -> tuple[tuple[pa.Array, pa.Array], dict[str, Any]]:
        i = turn[0]
        turn[0] += 1
        return (batches[i % 16], pa.array(base + i * ROWS)), {}

    for _ in range(16):  # every batch once: the trackers hold their steady state
        tracker.update_batch(*next_batch()[0])
    benchmark.pedantic(tracker.update_batch, setup=next_batch, rounds=64)
    benchmark.extra_info["events_per_s_median"] = ROWS / benchmark.stats.stats.median


@pytest.mark.parametrize("kind", ["int64", "string"])
def test_keyed_is_late_batch_64k_rows_10k_keys(benchmark: Any, kind: str) -> None:
    keys, times = _batch(kind)
    tracker = tm.KeyedWatermarkTracker(bounded_delay=5_000)
    tracker.update_batch(keys, times)
    benchmark(tracker.is_late_batch, keys, times)
    benchmark.extra_info["events_per_s_median"] = ROWS / benchmark.stats.stats.median


def test_partitioned_observe_64k_rows(benchmark: Any) -> None:
    rng = np.random.default_rng(3)
    batch = pa.record_batch(
        {
            "partition": pa.array(rng.integers(0, 16, ROWS), pa.int32()),
            "event_time": pa.array(
                np.arange(ROWS, dtype=np.int64) * 1_000, pa.timestamp("us", tz="UTC")
            ),
        }
    )
    tracker = tm.PartitionedWatermarkTracker()
    tracker.register_source(0, 16)
    benchmark(tracker.observe, batch, 0, "partition", "event_time", "5s")
    benchmark.extra_info["events_per_s_median"] = ROWS / benchmark.stats.stats.median


def _reorder_stream(out_of_order: float, batches: int = 16) -> list[pa.Table]:
    """64K-row batches, one event per 10 µs; a share of rows delayed by up to 2 s."""
    rng = np.random.default_rng(11)
    out = []
    for b in range(batches):
        ts = 10_000_000 + (np.arange(ROWS, dtype=np.int64) + b * ROWS) * 10
        late = rng.random(ROWS) < out_of_order
        ts[late] -= rng.integers(0, 2_000_000, int(late.sum()))
        out.append(
            pa.table(
                {
                    "ts": pa.array(ts, pa.timestamp("us", tz="UTC")),
                    "key": pa.array(rng.integers(0, KEYS, ROWS)),
                    "value": pa.array(rng.random(ROWS)),
                }
            )
        )
    return out


@pytest.mark.parametrize("pct", [1, 10, 50])
def test_reorder_64k_row_batches(benchmark: Any, pct: int) -> None:
    stream = _reorder_stream(pct / 100)

    def run() -> int:
        r = tm.Reorder("ts", late_tolerance="2s")
        n = sum(r.process(t).rows.num_rows for t in stream)
        return n + r.flush().rows.num_rows

    assert benchmark(run) == ROWS * len(stream)
    benchmark.extra_info["rows_per_s_median"] = ROWS * len(stream) / benchmark.stats.stats.median
