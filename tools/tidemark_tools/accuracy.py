"""How much data a watermark keeps: global vs per-key, measured on generated streams.

Each micro-batch is judged against the watermark as it stood when the batch began
(DESIGN.md: batches are the unit of arrival), then advances it. An event is counted
in its window when it is not late (``ts >= W``). The *global* watermark is what Spark
Structured Streaming does: one ``max(event_time) - delay`` over all keys. The
*per-key* watermark is :class:`~tidemark.KeyedWatermarkTracker`'s. Both use the same
bounded delay. Run ``tidemark accuracy`` or ``python benches/keyed_accuracy.py``.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from tidemark._duration import Duration, to_micros
from tidemark.errors import ConfigError
from tidemark.watermarks import CompactKeyedWatermarkTracker, KeyedWatermarkTracker
from tidemark_tools.datagen import StreamSpec, batches, multi_tenant_stream

__all__ = [
    "DEFAULT_SCENARIOS",
    "AccuracyResult",
    "CompactComparison",
    "compare_compact",
    "measure_accuracy",
    "run_scenarios",
]


@dataclass(frozen=True)
class AccuracyResult:
    """Share of events counted in their window under each watermark scope."""

    scenario: str
    events: int
    global_kept: float
    keyed_kept: float
    global_kept_delayed_keys: float | None
    keyed_kept_delayed_keys: float | None
    seconds: float


def _kept(late: pa.ChunkedArray | pa.Array) -> int:
    return int(len(late) - (pc.sum(late).as_py() or 0))


def measure_accuracy(
    stream: pa.Table,
    bounded_delay: Duration = "5s",
    batch_rows: int = 10_000,
    scenario: str = "",
) -> AccuracyResult:
    """Replays ``stream`` (arrival order) in micro-batches through a global and a
    per-key watermark and returns the share of events each keeps."""
    delay = to_micros(bounded_delay, "bounded_delay")
    if stream.num_rows == 0:
        raise ConfigError("measure_accuracy: the stream has no events to measure")
    started = time.perf_counter()
    global_wm = KeyedWatermarkTracker(bounded_delay=delay)
    keyed = KeyedWatermarkTracker(bounded_delay=delay)
    kept_g = kept_k = kept_g_del = kept_k_del = n_del = 0
    for batch in batches(stream, batch_rows):
        times = batch.column("event_time")
        keys = batch.column("tenant")
        one_key = pa.nulls(batch.num_rows, pa.int8())
        late_g = global_wm.is_late_batch(one_key, times)
        late_k = keyed.is_late_batch(keys, times)
        global_wm.update_batch(one_key, times)
        keyed.update_batch(keys, times)
        delayed = batch.column("delayed").combine_chunks()
        kept_g += _kept(late_g)
        kept_k += _kept(late_k)
        kept_g_del += _kept(pc.filter(late_g, delayed))
        kept_k_del += _kept(pc.filter(late_k, delayed))
        n_del += int(pc.sum(delayed).as_py() or 0)
    n = stream.num_rows
    return AccuracyResult(
        scenario=scenario,
        events=n,
        global_kept=kept_g / n,
        keyed_kept=kept_k / n,
        global_kept_delayed_keys=kept_g_del / n_del if n_del else None,
        keyed_kept_delayed_keys=kept_k_del / n_del if n_del else None,
        seconds=time.perf_counter() - started,
    )


DEFAULT_SCENARIOS: dict[str, StreamSpec] = {
    "50% of keys delayed (random), even rates": StreamSpec(),
    "50% of keys delayed (median-rate keys), zipf 1.0": StreamSpec(
        skew=1.0, delayed_selection="median"
    ),
    "50% of keys delayed (random), zipf 1.0": StreamSpec(skew=1.0),
    "50% delayed (random), bursty keys (25% on)": StreamSpec(burst_on_fraction=0.25),
    "50% delayed, short delays (10-30 s)": StreamSpec(delay_min_s=10, delay_max_s=30),
    "50% delayed, jitter up to 8 s (> bounded delay)": StreamSpec(jitter_s=8.0),
    "10% of keys delayed": StreamSpec(delayed_fraction=0.1),
    "90% of keys delayed": StreamSpec(delayed_fraction=0.9),
    "no key delayed (jitter only)": StreamSpec(delayed_fraction=0.0),
}
"""The scenarios of the accuracy table (1,000 keys, 1M events, 1 h, jitter <= 2 s,
block delays 30-300 s unless said otherwise)."""


def run_scenarios(
    scenarios: dict[str, StreamSpec] | None = None,
    *,
    events: int | None = None,
    keys: int | None = None,
    bounded_delay: Duration = "5s",
    batch_rows: int = 10_000,
) -> Iterable[AccuracyResult]:
    """Generates and measures each scenario (optionally overriding size)."""
    for name, spec in (scenarios or DEFAULT_SCENARIOS).items():
        if events is not None:
            spec = replace(spec, events=events)
        if keys is not None:
            spec = replace(spec, keys=keys)
        yield measure_accuracy(multi_tenant_stream(spec), bounded_delay, batch_rows, scenario=name)


@dataclass(frozen=True)
class CompactComparison:
    """Lateness decisions of the compact tracker against the exact one."""

    keys: int
    events: int
    exact_keys: int
    exact_late: int
    compact_late: int
    false_late: int
    """Events the compact tracker called late that the exact tracker accepted."""
    missed_late: int
    """Events the exact tracker called late that the compact tracker accepted."""
    exact_bytes: int
    compact_bytes: int
    distinct_keys: int
    estimated_distinct_keys: float
    seconds: float


def compare_compact(
    spec: StreamSpec | None = None,
    *,
    exact_keys: int = 10_000,
    sketch_width: int = 1 << 16,
    sketch_depth: int = 4,
    bounded_delay: Duration = "5s",
    batch_rows: int = 50_000,
) -> CompactComparison:
    """Runs the exact and the compact tracker side by side on one stream."""
    spec = spec or StreamSpec(keys=1_000_000, events=4_000_000, skew=1.0, jitter_s=10.0)
    stream = multi_tenant_stream(spec)
    if stream.num_rows == 0:
        raise ConfigError("compare_compact: the stream has no events to compare on")
    delay = to_micros(bounded_delay, "bounded_delay")
    exact = KeyedWatermarkTracker(bounded_delay=delay)
    compact = CompactKeyedWatermarkTracker(
        bounded_delay=delay,
        exact_keys=exact_keys,
        sketch_width=sketch_width,
        sketch_depth=sketch_depth,
    )
    started = time.perf_counter()
    e_late = c_late = false_late = missed = 0
    for batch in batches(stream, batch_rows):
        keys, times = batch.column("tenant"), batch.column("event_time")
        e = exact.is_late_batch(keys, times)
        c = compact.is_late_batch(keys, times)
        e_late += int(pc.sum(e).as_py() or 0)
        c_late += int(pc.sum(c).as_py() or 0)
        false_late += int(pc.sum(pc.and_(c, pc.invert(e))).as_py() or 0)
        missed += int(pc.sum(pc.and_(e, pc.invert(c))).as_py() or 0)
        exact.update_batch(keys, times)
        compact.update_batch(keys, times)
    unique = pc.unique(stream.column("tenant"))
    key_bytes = int(pc.sum(pc.binary_length(unique)).as_py() or 0)
    return CompactComparison(
        keys=spec.keys,
        events=stream.num_rows,
        exact_keys=exact_keys,
        exact_late=e_late,
        compact_late=c_late,
        false_late=false_late,
        missed_late=missed,
        exact_bytes=exact.memory_bytes() + key_bytes,
        compact_bytes=compact.memory_bytes() + exact_keys * (key_bytes // max(len(unique), 1)),
        distinct_keys=len(unique),
        estimated_distinct_keys=compact.metrics()["estimated_distinct_keys"],
        seconds=time.perf_counter() - started,
    )


def render_accuracy(results: Iterable[AccuracyResult], console: Any) -> None:
    """Prints the accuracy table with rich."""
    from rich.table import Table

    table = Table(title="Events counted in their window (not late), same bounded delay")
    table.add_column("scenario")
    table.add_column("global watermark", justify="right", style="red")
    table.add_column("per-key watermarks", justify="right", style="green")
    table.add_column("delayed keys: global", justify="right")
    table.add_column("delayed keys: per-key", justify="right")
    for r in results:
        table.add_row(
            r.scenario,
            f"{r.global_kept:.1%}",
            f"{r.keyed_kept:.2%}",
            "-" if r.global_kept_delayed_keys is None else f"{r.global_kept_delayed_keys:.1%}",
            "-" if r.keyed_kept_delayed_keys is None else f"{r.keyed_kept_delayed_keys:.2%}",
        )
        console.print(
            f"[dim]{r.scenario}: {r.events:,} events in {r.seconds:.1f}s "
            f"({2 * r.events / r.seconds:,.0f} tracker events/s)[/dim]"
        )
    console.print(table)
