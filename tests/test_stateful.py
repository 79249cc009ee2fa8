"""Hypothesis stateful tests: trackers, timer service and operator against naive models.

Each machine drives the real object and a few-line Python model with the same random
sequence of operations (including snapshot / restore), and checks them after every
step.
"""

from __future__ import annotations

import pickle
from collections import defaultdict
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import tidemark as tm

KEYS = st.sampled_from(["a", "b", "c", "d"])
SETTINGS = settings(max_examples=40, stateful_step_count=30, deadline=None)


class KeyedTrackerMachine(RuleBasedStateMachine):
    """KeyedWatermarkTracker: per-key watermarks, idleness on the clock, global."""

    DELAY, TIMEOUT = 5, 10

    def __init__(self) -> None:
        super().__init__()
        self.clock = tm.ManualClock(0)
        self.t = tm.KeyedWatermarkTracker(
            bounded_delay=self.DELAY, idle_timeout=self.TIMEOUT, clock=self.clock
        )
        self.keys: dict[str, dict[str, Any]] = {}
        self.max_seen: int | None = None

    @rule(key=KEYS, ts=st.integers(0, 200))
    def update(self, key: str, ts: int) -> None:
        self.t.update(key, ts)
        k = self.keys.setdefault(key, {"max": ts})
        k.update(max=max(k["max"], ts), last=self.clock.now(), idle=False)
        wm = k["max"] - self.DELAY
        self.max_seen = wm if self.max_seen is None else max(self.max_seen, wm)

    @rule(ticks=st.integers(0, 8))
    def advance_and_check_idle(self, ticks: int) -> None:
        self.clock.advance(ticks)
        self.t.check_idle_keys()
        for k in self.keys.values():
            if self.clock.now() - k["last"] > self.TIMEOUT:
                k["idle"] = True

    @precondition(lambda self: self.keys)
    @rule(data=st.data())
    def mark_idle(self, data: Any) -> None:
        key = data.draw(st.sampled_from(sorted(self.keys)))
        self.t.mark_idle(key)
        self.keys[key]["idle"] = True

    @precondition(lambda self: self.keys)
    @rule(data=st.data())
    def remove(self, data: Any) -> None:
        key = data.draw(st.sampled_from(sorted(self.keys)))
        self.t.remove_key(key)
        del self.keys[key]

    @rule(pickled=st.booleans())
    def snapshot_restore(self, pickled: bool) -> None:
        # A restart: the tracker's bytes (or its pickle), on the same clock.
        if pickled:
            self.t = pickle.loads(pickle.dumps(self.t))
            self.clock = self.t.clock  # a pickled ManualClock is a copy of the reading
        else:
            self.t = tm.KeyedWatermarkTracker.restore(self.t.snapshot(), clock=self.clock)

    @invariant()
    def matches_model(self) -> None:
        for key, k in self.keys.items():
            assert self.t.watermark_for_key(key) == k["max"] - self.DELAY
            assert self.t.is_late(key, k["max"] - self.DELAY - 1)
            assert not self.t.is_late(key, k["max"] - self.DELAY)
        active = [k["max"] - self.DELAY for k in self.keys.values() if not k["idle"]]
        assert self.t.active_key_count() == len(active)
        assert self.t.total_key_count() == len(self.keys)
        want = min(active) if active else self.max_seen
        assert self.t.global_watermark() == want


class TimerServiceMachine(RuleBasedStateMachine):
    """TimerService: unique (timestamp, key, namespace) timers fire once, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.ts = tm.TimerService()
        self.pending: set[tuple[int, str, int]] = set()
        self.w: int | None = None

    @rule(at=st.integers(0, 100), key=KEYS, ns=st.integers(0, 2))
    def register(self, at: int, key: str, ns: int) -> None:
        new = (at, key, ns) not in self.pending
        assert self.ts.register(at, key, ns) == new
        self.pending.add((at, key, ns))

    @rule(at=st.integers(0, 100), key=KEYS, ns=st.integers(0, 2))
    def delete(self, at: int, key: str, ns: int) -> None:
        assert self.ts.delete(at, key, ns) == ((at, key, ns) in self.pending)
        self.pending.discard((at, key, ns))

    @rule(w=st.integers(0, 120))
    def advance(self, w: int) -> None:
        fired = self.ts.advance_watermark(w)
        # The watermark never goes back: a timer at or behind it fires at the next call.
        self.w = w if self.w is None else max(self.w, w)
        want = {t for t in self.pending if t[0] <= self.w}
        assert set(fired) == want and len(fired) == len(want), "each timer fires once"
        assert [t[0] for t in fired] == sorted(t[0] for t in fired), "in time order"
        self.pending -= want

    @rule(pickled=st.booleans())
    def snapshot_restore(self, pickled: bool) -> None:
        if pickled:
            self.ts = pickle.loads(pickle.dumps(self.ts))
        else:
            self.ts = tm.TimerService.restore(self.ts.snapshot())

    @invariant()
    def count(self) -> None:
        assert len(self.ts) == len(self.pending)
        assert set(self.ts.timers()) == self.pending


class OperatorMachine(RuleBasedStateMachine):
    """Pipeline operator (tumbling count per key, global watermark, the default late
    rule: Spark's) against a model of DESIGN.md's convention: a call closes the windows
    with ``end <= W`` for the watermark it began with; a row is late when its window
    has ``end <= W_prev``, the watermark the previous call began with (closed then)."""

    DELAY, SIZE = 3_000, 10_000  # microseconds

    def __init__(self) -> None:
        super().__init__()
        self.pipe = tm.Pipeline(
            key="k",
            event_time="ts",
            watermark=tm.BoundedOutOfOrderness(f"{self.DELAY}us"),
            window=tm.Tumbling(f"{self.SIZE}us"),
            aggs={"n": tm.count()},
        )
        self.op = self.pipe.operator()
        self.wm: int | None = None
        self.prev: int | None = None
        self.open: dict[tuple[str, int], int] = defaultdict(int)
        self.flushed = False

    def _table(self, rows: list[tuple[str, int]]) -> pa.Table:
        return pa.table(
            {
                "k": pa.array([r[0] for r in rows], pa.string()),
                "ts": pa.array([r[1] for r in rows], pa.timestamp("us", tz="UTC")),
            }
        )

    def _closed(self, out: tm.Output) -> list[tuple[str, int, int]]:
        w = out.windows
        if w.num_rows == 0:
            return []
        starts = [int(s.timestamp() * 1_000_000) for s in w.column("window_start").to_pylist()]
        return sorted(
            zip(w.column("k").to_pylist(), starts, w.column("n").to_pylist(), strict=True)
        )

    @rule(rows=st.lists(st.tuples(KEYS, st.integers(0, 60_000)), max_size=12))
    def process(self, rows: list[tuple[str, int]]) -> None:
        if self.flushed:
            # Every window was emitted at the flush: new rows could only emit one
            # again, so a flushed operator refuses them.
            with pytest.raises(tm.ConfigError, match="flushed"):
                self.op.process(self._table(rows))
            return
        out = self.op.process(self._table(rows))
        start, judged = self.wm, self.prev
        late = [
            r for r in rows if judged is not None and r[1] - r[1] % self.SIZE + self.SIZE <= judged
        ]
        for k, t in rows:
            if (k, t) not in late:
                self.open[(k, t - t % self.SIZE)] += 1
        if rows:
            cand = max(t for _, t in rows) - self.DELAY
            self.wm = cand if self.wm is None else max(self.wm, cand)
        self.prev = start
        closed = sorted(
            (k, s, n)
            for (k, s), n in self.open.items()
            if start is not None and s + self.SIZE <= start
        )
        for k, s, _ in closed:
            del self.open[(k, s)]
        assert self._closed(out) == closed
        assert out.late.num_rows == len(late)

    @rule()
    def snapshot_restore(self) -> None:
        self.op = self.pipe.operator(state=self.op.snapshot())

    @rule()
    def flush(self) -> None:
        out = self.op.flush()
        assert self._closed(out) == sorted((k, s, n) for (k, s), n in self.open.items())
        self.open.clear()
        self.flushed = True


TestKeyedTracker = KeyedTrackerMachine.TestCase
TestKeyedTracker.settings = SETTINGS
TestTimerService = TimerServiceMachine.TestCase
TestTimerService.settings = SETTINGS
TestOperator = OperatorMachine.TestCase
TestOperator.settings = SETTINGS
