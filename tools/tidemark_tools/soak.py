"""Soak: keys churn at a fixed rate for a while; memory must level off.

Every simulated second brings ``new_keys_per_s`` keys that were never seen before;
each key reports for ``key_lifetime_s`` seconds and then goes silent for good. An
operator with a bound on its state (``max_keys`` and/or ``state_ttl``) must hold a
bounded number of keys, so its process RSS levels off; without a bound it grows with
every key ever seen.

The stream runs on a :class:`tidemark.ManualClock` (one simulated second per batch), so
the run is as fast as the machine allows and reproducible. RSS is read from
``/proc/self/statm`` after every batch.

    tidemark soak --seconds 600 --rate 200000 --new-keys 5000 --max-keys 50000

``leveled_off`` compares the RSS growth over the last third of the run with the growth
over the first third.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

__all__ = ["MINIMUM", "SoakReport", "rss_bytes", "soak", "soak_problem"]


def rss_bytes() -> int:
    """Resident set size of this process (Linux)."""
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE")


@dataclass
class SoakReport:
    """RSS samples and state counters of a soak run."""

    seconds: int
    events: int
    keys_seen: int
    samples: list[tuple[int, int, int]] = field(default_factory=list)
    """(simulated second, RSS bytes, keys in state)."""
    wall_s: float = 0.0

    @property
    def leveled_off(self) -> bool:
        """RSS grew at most a quarter as much in the last third as in the first third
        (or less than 8 MiB in the last third)."""
        n = len(self.samples)
        if n < 6:
            return False
        third = n // 3
        first = self.samples[third][1] - self.samples[0][1]
        last = self.samples[-1][1] - self.samples[-third][1]
        return last < 8 * 2**20 or last <= first / 4

    def table(self, rows: int = 10) -> list[tuple[int, float, int]]:
        """About ``rows`` evenly spaced samples: (second, RSS MiB, keys in state)."""
        step = max(1, len(self.samples) // rows)
        picked = self.samples[::step]
        if picked[-1] != self.samples[-1]:
            picked.append(self.samples[-1])
        return [(s, r / 2**20, k) for s, r, k in picked]


#: The least value of each churn parameter, and the ``tidemark soak`` flag that sets it.
#: ``seconds``: the verdict compares the first and last thirds of one sample a second.
MINIMUM = {
    "seconds": (6, "--seconds"),
    "rate": (1, "--rate"),
    "new_keys_per_s": (1, "--new-keys"),
    "key_lifetime_s": (1, "--lifetime"),
}


def soak_problem(**params: int) -> tuple[str, str] | None:
    """``(parameter, reason)`` for the first parameter below its :data:`MINIMUM`, or
    ``None`` when the churn can run.

    >>> soak_problem(seconds=3, rate=10)
    ('seconds', 'must be at least 6 (one RSS sample a second, compared by thirds), got 3')
    """
    for name, value in params.items():
        least, _ = MINIMUM[name]
        if value < least:
            why = " (one RSS sample a second, compared by thirds)" if name == "seconds" else ""
            return name, f"must be at least {least}{why}, got {value}"
    return None


def soak(
    seconds: int = 120,
    rate: int = 100_000,
    new_keys_per_s: int = 2_000,
    key_lifetime_s: int = 5,
    max_keys: int | None = 20_000,
    state_ttl: str | None = "30s",
    window: str = "10s",
) -> SoakReport:
    """Runs the churn for ``seconds`` simulated seconds at ``rate`` events/s.

    Raises :class:`~tidemark.ConfigError` for a parameter below its :data:`MINIMUM`.
    """
    import tidemark as tm

    problem = soak_problem(
        seconds=seconds, rate=rate, new_keys_per_s=new_keys_per_s, key_lifetime_s=key_lifetime_s
    )
    if problem is not None:
        raise tm.ConfigError(f"{problem[0]} {problem[1]}")

    clock = tm.ManualClock(0)
    pipe = tm.Pipeline(
        key="k",
        event_time="ts",
        event_time_type="unixtimestamp_ms",
        watermark=tm.BoundedOutOfOrderness("2s", per="key", idle_timeout="10s"),
        window=tm.Tumbling(window),
        aggs={"n": tm.count(), "total": tm.sum("v")},
        max_keys=max_keys,
        state_ttl=state_ttl,
        clock=clock,
    )
    op = pipe.operator()
    rng = np.random.default_rng(5)
    report = SoakReport(seconds=seconds, events=0, keys_seen=0)
    live = new_keys_per_s * key_lifetime_s
    begin = time.perf_counter()
    for s in range(seconds):
        clock.set(s * 1000)
        # Keys alive this second: ids [first, first + live).
        first = max(0, (s - key_lifetime_s + 1) * new_keys_per_s)
        keys = rng.integers(first, first + live, rate, dtype=np.int64)
        ts = s * 1000 + rng.integers(0, 1000, rate, dtype=np.int64)
        op.process(pa.table({"k": keys, "ts": ts, "v": rng.random(rate)}))
        report.events += rate
        report.keys_seen = (s + 1) * new_keys_per_s
        report.samples.append((s, rss_bytes(), int(op.metrics()["keys"])))
    op.flush()
    report.wall_s = time.perf_counter() - begin
    return report


def describe(r: SoakReport) -> list[str]:
    """Lines for a report."""
    lines = [
        f"{r.seconds} simulated seconds, {r.events:,} events, {r.keys_seen:,} distinct keys, "
        f"{r.wall_s:.1f}s wall",
        "second   RSS MiB   keys in state",
    ]
    lines += [f"{s:6d}  {mib:8.1f}  {k:14,d}" for s, mib, k in r.table()]
    lines.append("RSS leveled off: " + ("yes" if r.leveled_off else "NO"))
    return lines


def main_args(args: Any) -> int:
    """``tidemark soak`` (see :mod:`tidemark_tools.cli`)."""
    from tidemark.errors import ConfigError

    churn = {
        "seconds": args.seconds,
        "rate": args.rate,
        "new_keys_per_s": args.new_keys,
        "key_lifetime_s": args.lifetime,
    }
    # Checked here too, to name the flag rather than the parameter.
    problem = soak_problem(**churn)
    if problem is not None:
        raise ConfigError(f"{MINIMUM[problem[0]][1]} {problem[1]}")
    r = soak(
        **churn,
        max_keys=args.max_keys if args.max_keys > 0 else None,
        state_ttl=args.state_ttl or None,
    )
    for line in describe(r):
        print(line)
    return 0 if r.leveled_off else 1
