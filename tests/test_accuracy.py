"""The accuracy benchmark (``tidemark accuracy``): global vs per-key watermarks on
generated multi-tenant streams, checked against a plain model of the same replay."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

import tidemark as tm
from tidemark_tools.accuracy import compare_compact, measure_accuracy
from tidemark_tools.cli import main
from tidemark_tools.datagen import StreamSpec, batches, check_spec, multi_tenant_stream


def model(stream: pa.Table, delay_us: int, rows: int) -> tuple[int, int, int, int]:
    """Events kept (not late) by one global and by per-key watermarks, each batch
    judged against the watermark of the batches before it: (global, per-key, global of
    the delayed keys, per-key of the delayed keys)."""
    kept = [0, 0, 0, 0]
    top = None
    per_key: dict[str, int] = {}
    for b in batches(stream, rows):
        keys = b.column("tenant").to_pylist()
        times = [t.value for t in b.column("event_time")]
        delayed = b.column("delayed").to_pylist()
        for k, t, d in zip(keys, times, delayed, strict=True):
            g = top is None or t >= top - delay_us
            own = per_key.get(k)
            p = own is None or t >= own - delay_us
            kept[0] += g
            kept[1] += p
            kept[2] += g and d
            kept[3] += p and d
        for k, t in zip(keys, times, strict=True):
            top = t if top is None else max(top, t)
            per_key[k] = max(per_key.get(k, t), t)
    return kept[0], kept[1], kept[2], kept[3]


@pytest.mark.parametrize(
    "spec",
    [
        StreamSpec(keys=200, events=40_000, duration_s=600),
        StreamSpec(keys=300, events=40_000, duration_s=600, skew=1.0, burst_on_fraction=0.3),
        StreamSpec(keys=100, events=30_000, duration_s=600, delayed_fraction=0.0),
    ],
    ids=["half-delayed", "zipf-bursty", "none-delayed"],
)
def test_each_share_is_the_models(spec: StreamSpec) -> None:
    stream = multi_tenant_stream(spec)
    r = measure_accuracy(stream, bounded_delay="5s", batch_rows=2_000)
    g, k, g_del, k_del = model(stream, 5_000_000, 2_000)
    n = stream.num_rows
    n_del = sum(stream.column("delayed").to_pylist())
    assert (r.events, r.global_kept, r.keyed_kept) == (n, g / n, k / n)
    if n_del:
        assert (r.global_kept_delayed_keys, r.keyed_kept_delayed_keys) == (
            g_del / n_del,
            k_del / n_del,
        )
    else:
        assert r.global_kept_delayed_keys is None and r.keyed_kept_delayed_keys is None


def test_half_of_the_keys_delayed_global_loses_them_per_key_keeps_them() -> None:
    """The seed's case: with half of the keys late as a block, one watermark drops
    their events; per-key watermarks keep at least 99% of all events."""
    stream = multi_tenant_stream(StreamSpec(keys=500, events=100_000, duration_s=1_800))
    r = measure_accuracy(stream, bounded_delay="5s", batch_rows=5_000)
    assert r.keyed_kept >= 0.99
    assert r.global_kept < 0.7
    assert r.global_kept_delayed_keys is not None and r.global_kept_delayed_keys < 0.2


def test_the_compact_tracker_errs_as_documented() -> None:
    """An evicted key's estimate is at or below its watermark, so its events are never
    called late wrongly; a new key whose buckets other keys filled may be (about
    ``fill ** depth`` of them): rare with a sketch wide for the evicted keys, frequent
    with a narrow one."""
    spec = StreamSpec(keys=20_000, events=100_000, duration_s=600, skew=1.0, jitter_s=10.0)
    wide = compare_compact(spec, exact_keys=1_000, batch_rows=5_000)
    narrow = compare_compact(spec, exact_keys=1_000, sketch_width=64, batch_rows=5_000)
    for c in (wide, narrow):
        assert c.events == 100_000 and c.exact_keys == 1_000
        assert c.compact_late == c.exact_late - c.missed_late + c.false_late
        assert abs(c.estimated_distinct_keys - c.distinct_keys) / c.distinct_keys < 0.05
    assert wide.false_late <= 0.001 * wide.events
    assert narrow.false_late > 10 * max(wide.false_late, 1)
    # Memory is set by the configuration, not by the number of keys.
    more = compare_compact(
        StreamSpec(keys=60_000, events=100_000, duration_s=600, jitter_s=10.0),
        exact_keys=1_000,
        batch_rows=5_000,
    )
    assert more.distinct_keys > 3 * wide.distinct_keys
    assert more.exact_bytes > 2 * wide.exact_bytes
    assert more.compact_bytes < 1.1 * wide.compact_bytes


def test_an_empty_stream_is_an_error_not_a_division_by_zero() -> None:
    empty = multi_tenant_stream(StreamSpec(events=0))
    with pytest.raises(tm.ConfigError, match="no events"):
        measure_accuracy(empty)
    with pytest.raises(tm.ConfigError, match="no events"):
        compare_compact(StreamSpec(keys=10, events=0))


def test_the_cli_runs_a_scenario_of_ones_own(capsys: pytest.CaptureFixture[str]) -> None:
    flags = ["--skew", "1.2", "--delayed-fraction", "0.3", "--delay-range", "10s,1m"]
    flags += ["--jitter", "500ms", "--burst-on", "0.5", "--burst-period", "5m", "--seed", "7"]
    code = main(["accuracy", "--events", "20000", "--keys", "100", *flags])
    out = " ".join(capsys.readouterr().out.split())  # rich wraps long lines
    assert code == 0
    assert "your scenario: skew=1.2, delayed_fraction=0.3, jitter_s=0.5" in out
    assert "delay_min_s=10, delay_max_s=60" in out
    assert "50% of keys delayed" not in out, "instead of the table"


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--burst-on", "0"], "--burst-on: burst_on_fraction must be above 0"),
        (["--delay-range", "5m,30s"], "--delay-range: delay_max_s must be >= delay_min_s"),
        (["--delay-range", "30s"], "expected MIN,MAX"),
        (["--jitter", "soon"], "--jitter"),
        (["--delayed-fraction", "1.5"], "--delayed-fraction: delayed_fraction must be"),
        (["--keys", "0"], "--keys: keys must be at least 1"),
        (["--events", "0"], "--events: events must be at least 1 to measure"),
        (["--compact", "--events", "0"], "--events: events must be at least 1"),
        (["--bounded-delay=-1s"], "bounded_delay"),
    ],
)
def test_the_cli_refuses_a_scenario_it_cannot_generate(
    flags: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as e:
        main(["accuracy", "--events", "1000", *flags])
    assert e.value.code == 2
    assert message in capsys.readouterr().err


def test_every_spec_field_is_checked() -> None:
    bad: dict[str, Any] = {
        "keys": 0,
        "events": -1,
        "duration_s": 0.0,
        "skew": -0.5,
        "delayed_fraction": -0.1,
        "delayed_selection": "fastest",
        "delay_min_s": -1.0,
        "jitter_s": -1.0,
        "burst_on_fraction": 1.5,
        "burst_period_s": 0.0,
    }
    for field, value in bad.items():
        with pytest.raises(tm.ConfigError, match=field):
            check_spec(StreamSpec(**{field: value}))
        with pytest.raises(ValueError, match=field):
            multi_tenant_stream(StreamSpec(**{field: value}))
    check_spec(StreamSpec())


def test_every_scenario_flag_is_documented(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["accuracy", "--help"])
    assert e.value.code == 0
    text = capsys.readouterr().out
    for flag in ["--skew", "--delayed-fraction", "--delayed-selection", "--delay-range"]:
        assert flag in text
    for flag in ["--jitter", "--burst-on", "--burst-period", "--duration", "--seed"]:
        assert flag in text
