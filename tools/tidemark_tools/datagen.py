"""Generators of event streams that exercise event time: tidemark's own test data.

:func:`multi_tenant_stream` produces a multi-tenant stream **in arrival order** in
which a chosen fraction of keys (tenants, devices) reports late as a block: each
delayed key's events arrive a constant delay (drawn per key from a range) after they
happened, plus network jitter. This is the situation in which one global watermark
drops the slow keys' data and per-key watermarks do not.

Everything is vectorised with numpy and seeded, so a run is reproducible.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import pyarrow as pa

__all__ = [
    "HOSTILE_KINDS",
    "StreamSpec",
    "batches",
    "check_spec",
    "differing_lateness_stream",
    "dirty_iot",
    "iot_stream",
    "librdkafka_partition",
    "mobile_sessions",
    "multi_tenant_stream",
    "spec_problem",
    "tenant_names",
]


@dataclass(frozen=True)
class StreamSpec:
    """Parameters of :func:`multi_tenant_stream` (times in seconds)."""

    keys: int = 1_000
    """Number of distinct keys."""
    events: int = 1_000_000
    """Number of events."""
    duration_s: float = 3_600.0
    """Event-time span of the stream."""
    skew: float = 0.0
    """Zipf exponent of per-key event rates (0: every key equally busy)."""
    delayed_fraction: float = 0.5
    """Share of keys that report late as a block."""
    delayed_selection: str = "random"
    """``"random"`` keys, or the keys closest to the ``"median"`` rate."""
    delay_min_s: float = 30.0
    """Smallest per-key block delay."""
    delay_max_s: float = 300.0
    """Largest per-key block delay."""
    jitter_s: float = 2.0
    """Every event's extra arrival delay is uniform in ``[0, jitter_s]``."""
    burst_on_fraction: float = 1.0
    """Share of time a key is active (1: always; below 1: on/off bursts)."""
    burst_period_s: float = 600.0
    """Length of one on/off cycle."""
    start_us: int = 1_767_225_600_000_000
    """Event time of the first event (2026-01-01T00:00:00Z)."""
    seed: int = 42
    """Random seed."""

    def describe(self) -> dict[str, Any]:
        """The parameters as a dict."""
        return asdict(self)


def tenant_names(keys: int) -> pa.Array:
    """The ``tenant`` values :func:`multi_tenant_stream` draws from: key ``i`` of
    ``keys`` is ``tenant-{i:07d}``.

    Examples
    --------
    >>> from tidemark_tools.datagen import tenant_names
    >>> tenant_names(3).to_pylist()
    ['tenant-0000000', 'tenant-0000001', 'tenant-0000002']
    """
    return pa.array([f"tenant-{i:07d}" for i in range(keys)], pa.string())


_RULES: list[tuple[str, str, Callable[[StreamSpec], bool]]] = [
    ("keys", "must be at least 1", lambda s: s.keys >= 1),
    ("events", "must not be negative", lambda s: s.events >= 0),
    ("duration_s", "must be positive", lambda s: s.duration_s > 0),
    ("skew", "must not be negative", lambda s: s.skew >= 0),
    ("delayed_fraction", "must be between 0 and 1", lambda s: 0 <= s.delayed_fraction <= 1),
    (
        "delayed_selection",
        "must be 'random' or 'median'",
        lambda s: s.delayed_selection in ("random", "median"),
    ),
    ("delay_min_s", "must not be negative", lambda s: s.delay_min_s >= 0),
    ("delay_max_s", "must be >= delay_min_s", lambda s: s.delay_max_s >= s.delay_min_s),
    ("jitter_s", "must not be negative", lambda s: s.jitter_s >= 0),
    ("burst_on_fraction", "must be above 0 and at most 1", lambda s: 0 < s.burst_on_fraction <= 1),
    ("burst_period_s", "must be positive", lambda s: s.burst_period_s > 0),
]


def spec_problem(spec: StreamSpec) -> tuple[str, str] | None:
    """The first field of ``spec`` that :func:`multi_tenant_stream` cannot use, and
    why (``None``: every field is usable).

    Examples
    --------
    >>> from tidemark_tools.datagen import StreamSpec, spec_problem
    >>> spec_problem(StreamSpec(delay_min_s=60, delay_max_s=30))
    ('delay_max_s', 'delay_max_s must be >= delay_min_s, got 30')
    """
    for field, rule, ok in _RULES:
        if not ok(spec):
            return field, f"{field} {rule}, got {getattr(spec, field)!r}"
    return None


def check_spec(spec: StreamSpec) -> None:
    """Raises :class:`tidemark.ConfigError` (a ``ValueError``) naming the first field
    of ``spec`` that :func:`multi_tenant_stream` cannot use (see :func:`spec_problem`).

    Examples
    --------
    >>> from tidemark_tools.datagen import StreamSpec, check_spec
    >>> check_spec(StreamSpec(burst_on_fraction=0.0))
    Traceback (most recent call last):
    ...
    tidemark.errors.ConfigError: burst_on_fraction must be above 0 and at most 1, got 0.0
    """
    from tidemark.errors import ConfigError

    problem = spec_problem(spec)
    if problem is not None:
        raise ConfigError(problem[1])


def multi_tenant_stream(spec: StreamSpec) -> pa.Table:
    """A multi-tenant event stream in arrival order.

    Columns: ``tenant`` (string), ``event_time`` (``timestamp[us, UTC]``),
    ``arrival_time`` (``timestamp[us, UTC]``), ``value`` (int64), ``delayed`` (bool:
    whether the row's key is one of the delayed block).

    Examples
    --------
    >>> from tidemark_tools.datagen import StreamSpec, multi_tenant_stream
    >>> t = multi_tenant_stream(StreamSpec(keys=10, events=1_000, seed=1))
    >>> t.num_rows, t.column_names
    (1000, ['tenant', 'event_time', 'arrival_time', 'value', 'delayed'])
    """
    import numpy as np

    check_spec(spec)
    rng = np.random.default_rng(spec.seed)
    n, k = spec.events, spec.keys

    # Per-key rates: Zipf weights over a random ranking of the keys.
    ranks = np.arange(1, k + 1, dtype=np.float64)
    weights = ranks ** (-spec.skew) if spec.skew > 0 else np.ones(k)
    weights /= weights.sum()
    key_of_rank = rng.permutation(k)

    # Which keys are delayed as a block.
    n_delayed = round(spec.delayed_fraction * k)
    if spec.delayed_selection == "median":
        order = np.argsort(np.abs(np.arange(k) - (k - 1) / 2.0), kind="stable")
        delayed_ranks = order[:n_delayed]
    elif spec.delayed_selection == "random":
        delayed_ranks = rng.choice(k, size=n_delayed, replace=False)
    else:
        raise AssertionError("checked by check_spec")
    delay_s = np.zeros(k)
    delay_s[key_of_rank[delayed_ranks]] = rng.uniform(spec.delay_min_s, spec.delay_max_s, n_delayed)
    is_delayed = np.zeros(k, dtype=bool)
    is_delayed[key_of_rank[delayed_ranks]] = True

    # Events: key by rate, time uniform over the span; bursts keep only "on" phases.
    key = key_of_rank[rng.choice(k, size=n, p=weights)]
    if spec.burst_on_fraction < 1.0:
        phase = rng.uniform(0, spec.burst_period_s, k)
        on_len = spec.burst_on_fraction * spec.burst_period_s
        cycles = int(np.ceil(spec.duration_s / spec.burst_period_s)) + 1
        cycle = rng.integers(0, cycles, n)
        t_s = cycle * spec.burst_period_s - phase[key] + rng.uniform(0, on_len, n)
        t_s = np.clip(t_s, 0, spec.duration_s)
    else:
        t_s = rng.uniform(0, spec.duration_s, n)
    event_us = spec.start_us + (t_s * 1e6).astype(np.int64)
    arrival_us = event_us + ((delay_s[key] + rng.uniform(0, spec.jitter_s, n)) * 1e6).astype(
        np.int64
    )
    order = np.argsort(arrival_us, kind="stable")

    ts = pa.timestamp("us", tz="UTC")
    return pa.table(
        {
            "tenant": tenant_names(k).take(key[order]),
            "event_time": pa.array(event_us[order], ts),
            "arrival_time": pa.array(arrival_us[order], ts),
            "value": pa.array(rng.integers(0, 1_000, n)[order], pa.int64()),
            "delayed": pa.array(is_delayed[key[order]]),
        }
    )


def iot_stream(
    partitions: int = 12,
    devices_per_partition: int = 20,
    minutes: int = 60,
    every_s: float = 5.0,
    lagging: tuple[int, ...] = (3,),
    lag_s: float = 60.0,
    silent: tuple[int, ...] = (10, 11),
    silent_after_min: float = 8.0,
    jitter_s: float = 2.0,
    start_us: int = 1_767_225_600_000_000,
    seed: int = 7,
) -> pa.Table:
    """An IoT stream in arrival order, as a Kafka topic of ``partitions`` partitions
    delivers it: each device (``devices_per_partition`` per partition) reports every
    ``every_s`` seconds for ``minutes`` minutes; the ``lagging`` partitions arrive
    ``lag_s`` behind the others; the ``silent`` partitions fall silent after
    ``silent_after_min`` minutes (their devices stop). Every event arrives up to
    ``jitter_s`` late.

    Columns: ``device`` (string), ``partition`` (int32), ``ts`` (event time,
    ``timestamp[us, UTC]``), ``arrival`` (``timestamp[us, UTC]``), ``value`` (int64).

    Examples
    --------
    >>> from tidemark_tools.datagen import iot_stream
    >>> t = iot_stream(partitions=3, devices_per_partition=2, minutes=1, silent=(2,),
    ...                silent_after_min=0.5, lagging=())
    >>> t.num_rows, t.column_names
    (60, ['device', 'partition', 'ts', 'arrival', 'value'])
    """
    import numpy as np

    rng = np.random.default_rng(seed)
    n_dev = partitions * devices_per_partition
    device = np.repeat(np.arange(n_dev), int(minutes * 60 / every_s))
    ticks = np.tile(np.arange(int(minutes * 60 / every_s)), n_dev)
    part = device // devices_per_partition
    phase = rng.uniform(0, every_s, n_dev)
    t_s = ticks * every_s + phase[device]
    keep = ~(np.isin(part, silent) & (t_s >= silent_after_min * 60))
    device, part, t_s = device[keep], part[keep], t_s[keep]
    arrival_s = (
        t_s + rng.uniform(0, jitter_s, len(t_s)) + np.where(np.isin(part, lagging), lag_s, 0)
    )
    names = pa.array([f"dev-{d:05d}" for d in range(n_dev)], pa.string())
    return _in_arrival_order(
        {"device": names.take(device), "partition": pa.array(part, pa.int32())},
        t_s,
        arrival_s,
        start_us,
        rng,
    )


#: The hostile records of :func:`dirty_iot`, by kind.
HOSTILE_KINDS = ("not_json", "no_device", "year_2300", "as_strings", "year_1969")

#: Event-time milliseconds of 2300-01-01 and of 1969-12-31T23:59:59.
_YEAR_2300_MS = 10_413_792_000_000
_YEAR_1969_MS = -1_000


def librdkafka_partition(key: bytes, partitions: int) -> int:
    """The partition confluent-kafka's (librdkafka's) default partitioner,
    ``consistent_random``, gives a record with this key: CRC-32 of the key modulo the
    partition count (a record without a key goes to a random partition). Java's
    client hashes with murmur2 instead (:func:`tidemark_tools.kafka.partition_for`).

    >>> [librdkafka_partition(f"d{i}".encode(), 4) for i in range(8)]
    [0, 2, 0, 2, 1, 3, 1, 3]
    """
    import zlib

    return zlib.crc32(key) % partitions


def dirty_iot(
    devices: int = 300,
    partitions: int = 6,
    minutes: float = 20.0,
    lagging: int = 2,
    lag_s: float = 90.0,
    strays: int = 9,
    silent: int = 5,
    silent_after_min: float = 12.0,
    hostile: float = 0.001,
    jitter_s: float = 2.0,
    start_ms: int = 1_796_083_200_000,
    seed: int = 11,
) -> tuple[pa.Table, pa.Table]:
    """A dirty IoT topic, as a producer writes it: ``devices`` devices (``d0``...)
    report a reading a second for ``minutes``, keyed by device and placed by
    confluent-kafka's default partitioner (:func:`librdkafka_partition`) over
    ``partitions`` partitions; partition ``lagging``'s devices arrive ``lag_s`` late,
    but for ``strays`` of their readings (of as many devices), which arrive on time,
    ahead of the rest of their partition, once its readings flow (at least 30 s after
    they begin to arrive); partition ``silent`` stops after
    ``silent_after_min`` minutes; every reading arrives up to ``jitter_s`` late. A
    share ``hostile`` of extra records is bad, of each kind in
    :data:`HOSTILE_KINDS` alike: values that are not JSON, records with no key and
    no device (stamped with the time they are sent, on the lagging partition or a
    random one), event times in the year 2300, numbers sent as strings, and 1969
    event times (sent by devices of the silent partition, also after it fell silent).
    The first second's records include one of each.

    Returns ``(records, readings)``: the records in arrival order (``key`` binary or
    null, ``value`` binary, ``partition`` int32, ``arrival`` float seconds from the
    start, ``kind`` string: ``"reading"`` or a hostile kind), and the readings alone
    (``device``, ``ts`` as ``timestamp[ms, UTC]``, ``temp``), the oracle's input.
    Values are JSON ``{"device", "ts" (epoch ms), "temp"}``.
    """
    import json

    import numpy as np

    rng = np.random.default_rng(seed)
    names = [f"d{d}" for d in range(devices)]
    part = np.array([librdkafka_partition(n.encode(), partitions) for n in names])
    on_lagging = np.flatnonzero(part == lagging)
    seconds = int(minutes * 60)
    dev = np.repeat(np.arange(devices), seconds)
    t = np.tile(np.arange(seconds), devices) + rng.uniform(0, 1, devices)[dev]
    keep = ~((part[dev] == silent) & (t >= silent_after_min * 60))
    dev, t = dev[keep], t[keep]
    lag = np.where(part[dev] == lagging, lag_s, 0.0)
    # Stray readings: one each of `strays` devices of the lagging partition, on time.
    lagging_rows = np.flatnonzero((part[dev] == lagging) & (t >= lag_s + 30))
    chosen: list[int] = []
    for d in rng.permutation(on_lagging)[:strays]:
        rows = lagging_rows[dev[lagging_rows] == d]
        if len(rows):
            chosen.append(int(rng.choice(rows)))
    lag[chosen] = 0.0
    arrival = t + lag + rng.uniform(0, jitter_s, len(t))
    ts_ms = start_ms + (t * 1000).astype(np.int64)
    temp = np.round(rng.normal(21.0, 2.0, len(t)), 2)
    readings = pa.table(
        {
            "device": pa.array([names[d] for d in dev]),
            "ts": pa.array(ts_ms, pa.timestamp("ms", tz="UTC")),
            "temp": pa.array(temp),
        }
    )
    keys: list[bytes | None] = [names[d].encode() for d in dev]
    values = [
        json.dumps({"device": names[d], "ts": int(ms), "temp": float(v)}).encode()
        for d, ms, v in zip(dev, ts_ms, temp, strict=True)
    ]
    parts = part[dev].tolist()
    arrivals = arrival.tolist()
    kinds = ["reading"] * len(values)
    n_bad = max(len(HOSTILE_KINDS), round(hostile * len(values)))
    silent_devs = np.flatnonzero(part == silent)
    for i in range(n_bad):
        kind = HOSTILE_KINDS[i % len(HOSTILE_KINDS)]
        at = float(rng.uniform(0, 1)) if i < len(HOSTILE_KINDS) else float(rng.uniform(0, seconds))
        d = int(
            silent_devs[rng.integers(len(silent_devs))]
            if kind == "year_1969"
            else rng.integers(devices)
        )
        now_ms = start_ms + int(at * 1000)
        key: bytes | None = names[d].encode()
        p = int(part[d])
        if kind == "not_json":
            value = b"\x00\xffnot json {"
        elif kind == "no_device":
            key = None
            p = lagging if rng.uniform() < 0.5 else int(rng.integers(partitions))
            value = json.dumps({"ts": now_ms, "temp": 20.0}).encode()
        elif kind == "year_2300":
            value = json.dumps(
                {"device": names[d], "ts": _YEAR_2300_MS + now_ms - start_ms, "temp": 20.0}
            ).encode()
        elif kind == "as_strings":
            value = json.dumps({"device": names[d], "ts": str(now_ms), "temp": "21.5"}).encode()
        else:
            value = json.dumps({"device": names[d], "ts": _YEAR_1969_MS, "temp": 20.0}).encode()
        keys.append(key)
        values.append(value)
        parts.append(p)
        arrivals.append(at)
        kinds.append(kind)
    order = np.argsort(np.array(arrivals), kind="stable")
    records = pa.table(
        {
            "key": pa.array([keys[i] for i in order], pa.binary()),
            "value": pa.array([values[i] for i in order], pa.binary()),
            "partition": pa.array([parts[i] for i in order], pa.int32()),
            "arrival": pa.array([arrivals[i] for i in order], pa.float64()),
            "kind": pa.array([kinds[i] for i in order]),
        }
    )
    return records, readings


def mobile_sessions(
    users: int = 5_000,
    hours: float = 24.0,
    sessions_per_user: int = 4,
    offline_fraction: float = 0.1,
    offline_delay_h: tuple[float, float] = (2.0, 6.0),
    start_us: int = 1_767_225_600_000_000,
    seed: int = 11,
) -> pa.Table:
    """Mobile users' app sessions in arrival order: each user has about
    ``sessions_per_user`` sessions over ``hours`` (a session: events one to five
    minutes apart for five to 25 minutes; sessions at least 45 minutes apart, so a
    30-minute gap separates them). Most phones send each event within seconds; the
    ``offline_fraction`` of users upload each session ``offline_delay_h`` hours after
    it (the phone was offline), all of its events at once.

    Columns: ``user`` (string), ``ts`` (event time), ``arrival`` (both
    ``timestamp[us, UTC]``), ``offline`` (bool: the user uploads late).

    Examples
    --------
    >>> from tidemark_tools.datagen import mobile_sessions
    >>> t = mobile_sessions(users=10, hours=4, sessions_per_user=2)
    >>> t.column_names
    ['user', 'ts', 'arrival', 'offline']
    """
    import numpy as np

    rng = np.random.default_rng(seed)
    span_s = hours * 3600.0
    offline = rng.random(users) < offline_fraction
    user_l, ts_l, arr_l = [], [], []
    for u in range(users):
        # Session starts: a random ordered set at least 45 min + 25 min apart.
        k = max(1, rng.poisson(sessions_per_user))
        room = span_s - k * (25 + 45) * 60.0
        if room <= 0:
            k, room = 1, span_s - 70 * 60.0
        starts = np.sort(rng.uniform(0, room, k)) + np.arange(k) * (25 + 45) * 60.0
        for st in starts:
            length = rng.uniform(5, 25) * 60.0
            gaps = rng.uniform(60, 300, int(length // 60) + 1)
            t = st + np.concatenate([[0.0], np.cumsum(gaps)])
            t = t[t <= st + length]
            if offline[u]:
                up = t[-1] + rng.uniform(*offline_delay_h) * 3600.0
                arrival = up + rng.uniform(0, 5, len(t))
            else:
                arrival = t + rng.uniform(0, 3, len(t))
            user_l.append(np.full(len(t), u))
            ts_l.append(t)
            arr_l.append(arrival)
    user = np.concatenate(user_l)
    t_s = np.concatenate(ts_l)
    arrival_s = np.concatenate(arr_l)
    order = np.argsort(arrival_s, kind="stable")
    ts = pa.timestamp("us", tz="UTC")
    names = pa.array([f"user-{u:05d}" for u in range(users)], pa.string())
    return pa.table(
        {
            "user": names.take(user[order]),
            "ts": pa.array(start_us + (t_s[order] * 1e6).astype(np.int64), ts),
            "arrival": pa.array(start_us + (arrival_s[order] * 1e6).astype(np.int64), ts),
            "offline": pa.array(offline[user[order]]),
        }
    )


#: The key kinds of :func:`differing_lateness_stream`, in key order.
LATENESS_KINDS = ("steady", "uploads", "bursts", "changing")


def differing_lateness_stream(
    keys: int = 200,
    minutes: float = 60.0,
    every_s: float = 1.0,
    uploads: float = 0.15,
    bursts: float = 0.05,
    jitter_s: float = 0.3,
    upload_spread_s: float = 60.0,
    burst_delay_s: tuple[float, float] = (120.0, 600.0),
    burst_share: float = 0.05,
    start_us: int = 1_767_225_600_000_000,
    seed: int = 11,
) -> pa.Table:
    """A stream in arrival order whose keys differ in how late they send: each key
    sends an event every ``every_s`` seconds (at a random phase) for ``minutes``;

    * ``steady`` keys (the rest): each event arrives up to ``jitter_s`` after it
      happened (uniform);
    * ``uploads`` (this share of keys): each event arrives up to ``upload_spread_s``
      after it happened (uniform: out-of-order uploads);
    * ``bursts`` (this share): as steady keys, except that ``burst_share`` of their
      events come back in bursts, each burst (a minute of events) delayed by
      ``burst_delay_s`` (uniform per burst);
    * ``changing``: one more key, steady for the first half, then sending as an
      ``uploads`` key.

    Columns: ``key`` (string), ``kind`` (string), ``ts`` (event time) and ``arrival``
    (``timestamp[us, UTC]``), ``value`` (int64).

    Examples
    --------
    >>> from tidemark_tools.datagen import differing_lateness_stream
    >>> t = differing_lateness_stream(keys=20, minutes=2)
    >>> t.num_rows, sorted(set(t.column("kind").to_pylist()))
    (2520, ['bursts', 'changing', 'steady', 'uploads'])
    """
    import numpy as np

    rng = np.random.default_rng(seed)
    n_up, n_burst = round(keys * uploads), round(keys * bursts)
    kinds = np.array(
        ["uploads"] * n_up + ["bursts"] * n_burst + ["steady"] * (keys - n_up - n_burst)
    )
    kinds = np.append(rng.permutation(kinds), "changing")
    n = len(kinds)
    per_key = int(minutes * 60 / every_s)
    key = np.repeat(np.arange(n), per_key)
    t_s = np.tile(np.arange(per_key) * every_s, n) + rng.uniform(0, every_s, n)[key]
    kind = kinds[key]
    late = rng.uniform(0, jitter_s, len(t_s))
    spread = rng.uniform(0, upload_spread_s, len(t_s))
    half = minutes * 30
    late = np.where((kind == "uploads") | ((kind == "changing") & (t_s >= half)), spread, late)
    # Bursts: a minute of a key's events (one in 1 / burst_share of its minutes)
    # returns burst_delay_s late, the same delay for the whole burst.
    minute = (t_s // 60).astype(np.int64)
    burst = (kind == "bursts") & (
        rng.random(n * (int(minutes) + 1))[key * (int(minutes) + 1) + minute] < burst_share
    )
    delays = rng.uniform(*burst_delay_s, n * (int(minutes) + 1))[key * (int(minutes) + 1) + minute]
    late = np.where(burst, delays + late, late)
    arrival_s = t_s + late
    names = pa.array([f"key-{k:04d}" for k in range(n)], pa.string())
    return _in_arrival_order(
        {"key": names.take(key), "kind": pa.array(kind, pa.string())},
        t_s,
        arrival_s,
        start_us,
        rng,
    )


def _in_arrival_order(
    columns: dict[str, pa.Array],
    t_s: Any,
    arrival_s: Any,
    start_us: int,
    rng: Any,
) -> pa.Table:
    """Rows in arrival order: ``columns``, then ``ts`` and ``arrival`` (numpy seconds
    after ``start_us``, as UTC timestamps) and a ``value`` from 0 to 99 (``rng``'s)."""
    import numpy as np

    order = np.argsort(arrival_s, kind="stable")
    ts = pa.timestamp("us", tz="UTC")
    return pa.table(
        {
            **{name: col.take(order) for name, col in columns.items()},
            "ts": pa.array(start_us + (t_s[order] * 1e6).astype(np.int64), ts),
            "arrival": pa.array(start_us + (arrival_s[order] * 1e6).astype(np.int64), ts),
            "value": pa.array(rng.integers(0, 100, len(order)), pa.int64()),
        }
    )


def batches(table: pa.Table, rows: int) -> list[pa.Table]:
    """Splits ``table`` into consecutive micro-batches of ``rows`` rows (zero-copy)."""
    if rows <= 0:
        raise ValueError("rows must be positive")
    return [table.slice(i, rows) for i in range(0, table.num_rows, rows)]
