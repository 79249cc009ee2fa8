"""The live soak's short form: 45 seconds of a live Kafka topic through a streaming query,
keys churning and a partition going silent past its idle timeout and coming back;
every window exact against the oracle, the state bounded, the samples taken.
(``tidemark live-soak --minutes 30`` is the long form: the reliability guide.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tidemark_tools.live_soak import Stream, live_soak

pytestmark = pytest.mark.spark


@pytest.mark.slow(48)
def test_live_input_with_churn_and_an_idle_partition_gives_every_window_exactly(
    spark: Any, kafka: Any, tmp_path: Path
) -> None:
    # The last partition silent from 12 s to 36 s: past its idle timeout (20 s), back.
    stream = Stream(
        rate=400, partitions=4, lifetime_s=10, every_s=2, idle_every_s=36, idle_for_s=24
    )
    report = live_soak(
        spark,
        kafka,
        tmp_path,
        45,
        stream,
        sample_s=2,
        state_ttl="20s",
        trigger="2 seconds",
        on_driver=False,  # in Spark's Python workers, whose memory is sampled too
    )
    assert report.exact, report.lines()
    assert report.keys >= 45 * stream.new_keys_per_s * 0.95
    assert report.windows > report.keys  # keys' windows of 10 s, each key 10 s long
    assert len(report.samples) >= 15 and report.batches >= 15
    assert all(s[2] > 0 for s in report.samples), "the driver's JVM sampled"
    later = report.samples[len(report.samples) // 2 :]
    assert sum(s[3] > 0 for s in later) >= len(later) // 2, report.lines()
    # state_ttl bounds the keys held: a key's state leaves 20 s after its last record,
    # so the state holds about 30 s of keys however long the run.
    first, last = report.growth("state")
    assert last <= first * 1.5 + 0.5, report.lines()
