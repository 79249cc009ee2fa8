"""Damaged snapshots are detected and named, never a crash, never a fresh start."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest

import tidemark as tm


def _pipeline(delay: str = "1s") -> tm.Pipeline:
    return tm.Pipeline(
        key="k",
        event_time="ts",
        event_time_type="unixtimestamp_ms",
        watermark=tm.BoundedOutOfOrderness(delay, per="key"),
        window=tm.Tumbling("10s"),
        aggs={"n": tm.count()},
    )


def _operator_snapshot() -> bytes:
    op = _pipeline().operator()
    op.process(pa.table({"k": ["a", "b"], "ts": [1_000, 2_000]}))
    return op.snapshot()


def _reorder_snapshot() -> bytes:
    r = tm.Reorder("ts", "unixtimestamp_ms", late_tolerance="5s")
    r.process(pa.table({"ts": [9_000, 1_000]}))
    return r.snapshot()


RESTORERS: dict[str, tuple[Callable[[], bytes], Callable[[bytes], Any], Callable[[bytes], Any]]] = {
    "operator": (
        _operator_snapshot,
        lambda b: _pipeline().operator(state=b),
        lambda b: _pipeline("2s").operator(state=b),
    ),
    "reorder": (
        _reorder_snapshot,
        lambda b: tm.Reorder("ts", "unixtimestamp_ms", late_tolerance="5s", state=b),
        lambda b: tm.Reorder("ts", "unixtimestamp_ms", late_tolerance="1s", state=b),
    ),
}

DAMAGE: list[tuple[str, Callable[[bytes], bytes], str]] = [
    ("truncated", lambda b: b[:-7], "truncated"),
    ("extended", lambda b: b + b"\x00", "truncated or extended"),
    ("bit flip", lambda b: b[:30] + bytes([b[30] ^ 1]) + b[31:], "checksum"),
    ("wrong version", lambda b: b[:4] + b"\x07\x00" + b[6:], "format version 7"),
    ("not a snapshot", lambda b: b"PK\x03\x04" + b[4:], "not a tidemark snapshot"),
    ("empty", lambda b: b"", "not a tidemark snapshot"),
]


@pytest.mark.parametrize("kind", list(RESTORERS))
@pytest.mark.parametrize("damage", DAMAGE, ids=[d[0] for d in DAMAGE])
def test_damaged_snapshots_raise_state_corrupted(kind: str, damage: Any) -> None:
    make, restore, _ = RESTORERS[kind]
    good = make()
    restore(good)  # the undamaged snapshot restores
    _, hurt, why = damage
    with pytest.raises(tm.StateCorruptedError, match=why):
        restore(hurt(good))


@pytest.mark.parametrize("kind", list(RESTORERS))
def test_snapshot_of_another_configuration_is_refused(kind: str) -> None:
    make, _, other = RESTORERS[kind]
    with pytest.raises(tm.StateCorruptedError, match="configuration"):
        other(make())


def test_snapshot_of_another_kind_is_refused() -> None:
    with pytest.raises(tm.StateCorruptedError, match="reorder operator snapshot"):
        _pipeline().operator(state=_reorder_snapshot())
