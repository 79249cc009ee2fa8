"""observe() inside Spark mapInArrow, combined on the driver (local mode)."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

import tidemark as tm
from tidemark.spark import observe_partitions

pytestmark = pytest.mark.spark


def test_observe_inside_map_in_arrow(spark: Any) -> None:
    base = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
    rows = []
    for partition, last_second in [(0, 50), (1, 20), (2, 40)]:
        for s in range(0, last_second + 1, 5):
            rows.append((partition, base + dt.timedelta(seconds=s), s))
    df = spark.createDataFrame(rows, "partition int, event_time timestamp, value long")
    df = df.repartition(3)  # every task sees a mix of source partitions

    progress = observe_partitions(df, max_lateness="5s").collect()
    assert {r.partition for r in progress} == {0, 1, 2}

    base_us = int(base.timestamp() * 1_000_000)
    per_partition: dict[int, int] = {}
    for r in progress:
        per_partition[r.partition] = max(
            per_partition.get(r.partition, r.max_event_time), r.max_event_time
        )
        assert r.watermark == r.max_event_time - 5_000_000
    assert per_partition == {
        0: base_us + 50_000_000,
        1: base_us + 20_000_000,
        2: base_us + 40_000_000,
    }

    clock = tm.ManualClock()
    driver = tm.PartitionedWatermarkTracker(idle_timeout="30s", clock=clock)
    driver.register_source(0, 3)
    for r in progress:
        driver.update_partition(r.source_id, r.partition, r.watermark)
    assert driver.current_watermark() == base_us + 15_000_000  # held back by partition 1

    # Partition 1 goes silent; the others keep reporting; after the timeout it is idle.
    clock.advance(31_000)
    driver.update_partition(0, 0, base_us + 60_000_000)
    driver.update_partition(0, 2, base_us + 55_000_000)
    assert driver.check_idle_partitions() == base_us + 55_000_000


def test_observe_partitions_with_named_type(spark: Any) -> None:
    df = spark.createDataFrame([(0, 1_000), (0, 3_000), (1, 2_000)], "partition long, ts_ms long")
    got = {
        r.partition: r.watermark
        for r in observe_partitions(
            df.coalesce(1), event_time="ts_ms", event_time_type="unixtimestamp_ms"
        ).collect()
    }
    assert got == {0: 3_000_000, 1: 2_000_000}
    # A column that is not there is named at the call, not by a failed Spark task.
    with pytest.raises(tm.MissingColumnError, match=r"'event_time' not found.*partition, ts_ms"):
        observe_partitions(df)
    with pytest.raises(tm.MissingColumnError, match="'p' not found"):
        observe_partitions(df, partition_column="p", event_time="ts_ms")
