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

ROWS = 65_536
KEYS = 10_000


def _batch(kind: str) -> tuple[pa.Array, pa.Array]:
    rng = np.random.default_rng(7)
    ids = rng.integers(0, KEYS, ROWS)
    keys = pa.array(ids) if kind == "int64" else pa.array([f"tenant-{i:07d}" for i in ids])
    times = pa.array(np.arange(ROWS, dtype=np.int64) + 1_000_000)
    return keys, times


@pytest.mark.parametrize("kind", ["int64", "string"])
def test_keyed_update_batch_64k_rows_10k_keys(benchmark: Any, kind: str) -> None:
    keys, times = _batch(kind)
    tracker = tm.KeyedWatermarkTracker(bounded_delay=5_000)
    tracker.update_batch(keys, times)
    benchmark(tracker.update_batch, keys, times)
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
