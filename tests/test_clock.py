from __future__ import annotations

import pytest

import tidemark as tm


def test_manual_clock_moves_only_when_told() -> None:
    c = tm.ManualClock(start=5)
    assert c.now() == 5
    assert c.advance(10) == 15
    c.set(100)
    assert c.now() == 100


def test_manual_clock_never_runs_backwards() -> None:
    c = tm.ManualClock(start=50)
    with pytest.raises(ValueError, match="backwards"):
        c.set(10)
    with pytest.raises(ValueError, match=">= 0"):
        c.advance(-1)
    assert c.now() == 50


def test_system_clock_is_monotonic_epoch_millis() -> None:
    c = tm.SystemClock()
    readings = [c.now() for _ in range(1000)]
    assert readings == sorted(readings)
    assert readings[0] > 1_600_000_000_000


def test_trackers_reject_other_clocks() -> None:
    with pytest.raises(TypeError, match="clock"):
        tm.PartitionedWatermarkTracker(clock=object())  # type: ignore[arg-type]
