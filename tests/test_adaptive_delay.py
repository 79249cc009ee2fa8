"""``AdaptiveOutOfOrderness``: each key's delay learned from its own lateness.

A plain Python model of the rule (``Model``: the module docs of the core's
``pipeline/adaptive.rs``, written again without its data layout) is held equal to the
operator on generated streams: late rows batch by batch, every key's watermark after
each batch, and the windows. The same batches give the same output whatever the order
of their rows, the cores, and a snapshot restored mid-stream.
"""

from __future__ import annotations

import random
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tidemark as tm
from tidemark.errors import ConfigError

S = 1_000_000  # a second in microseconds
WINDOW = 10 * S
BILLION = 1_000_000_000


class Model:
    """The adaptive delay, key by key, as the module docs state it."""

    def __init__(
        self, quantile_ppb: int, min_delay: int, max_delay: int, horizon: int, min_rows: int
    ):
        self.q, self.lo, self.hi = quantile_ppb, min_delay, max_delay
        self.half = max(horizon // 2, 1)
        self.bounds: list[int] = []
        b = max(min_delay, 1)
        while True:
            self.bounds.append(min(b, max(max_delay, 1)))
            if b >= max_delay:
                break
            b = min(b + max(b // 100 * 41, 1), max_delay)
        self.warmup = min_rows
        self.keys: dict[str, dict[str, Any]] = {}

    def _key(self, k: str) -> dict[str, Any]:
        nb = len(self.bounds) + 1
        return self.keys.setdefault(
            k,
            {
                "max": None,
                "wm": None,
                "delay": self.hi,
                "half": None,
                "cur": [0] * nb,
                "old": [0] * nb,
            },
        )

    def _bucket(self, late: int) -> int:
        return sum(1 for b in self.bounds if b < late)

    def _target(self, st: dict[str, Any]) -> int:
        per = [a + b for a, b in zip(st["cur"], st["old"], strict=True)]
        total = sum(per)
        if total < self.warmup:
            return self.hi
        rank = max(1, -(-(total * self.q) // BILLION))
        seen = 0
        for b, n in enumerate(per):
            seen += n
            if seen >= rank:
                d = self.lo if b == 0 else (self.bounds[b] if b < len(self.bounds) else self.hi)
                return min(max(d, self.lo), self.hi)
        return self.hi

    def batch(self, rows: list[tuple[str, int]]) -> list[int]:
        """Indexes of the late rows (Flink's rule: a row whose window ends at or before
        its key's watermark as the batch began); then every key learns."""
        late = []
        by_key: dict[str, list[int]] = {}
        for i, (k, ts) in enumerate(rows):
            st = self._key(k)
            end = (ts // WINDOW + 1) * WINDOW
            if st["wm"] is not None and end <= st["wm"]:
                late.append(i)
            by_key.setdefault(k, []).append(ts)
        for k, times in by_key.items():
            st = self.keys[k]
            before = st["max"]
            new_max = max(times + ([before] if before is not None else []))
            h = new_max // self.half
            if st["half"] is None:
                st["half"] = h
            elif h > st["half"]:
                st["old"] = st["cur"] if h == st["half"] + 1 else [0] * len(st["cur"])
                st["cur"] = [0] * len(st["cur"])
                st["half"] = h
            for t in times:
                lateness = 0 if before is None else max(before - t, 0)
                st["cur"][self._bucket(lateness)] += 1
            target = self._target(st)
            wm_before = None if before is None else before - st["delay"]
            held = target if wm_before is None else new_max - wm_before
            st["delay"] = max(min(held, target), 0)
            st["max"] = new_max
            st["wm"] = new_max - st["delay"]
        return late


def pipeline(horizon: int = 120 * S, min_rows: int = 10) -> tm.Pipeline:
    return tm.Pipeline(
        "k",
        "ts",
        window=tm.Tumbling("10s"),
        aggs={"n": tm.count()},
        watermark=tm.AdaptiveOutOfOrderness(
            quantile=0.9,
            min_delay=f"{S // 2}us",
            max_delay=f"{60 * S}us",
            horizon=f"{horizon}us",
            min_rows=min_rows,
        ),
        late_rule="flink",
    )


def table(rows: list[tuple[str, int, int]]) -> pa.Table:
    return pa.table(
        {
            "k": pa.array([r[0] for r in rows], pa.string()),
            "ts": pa.array([r[1] for r in rows], pa.timestamp("us", tz="UTC")),
            "i": pa.array([r[2] for r in rows], pa.int64()),
        }
    )


def stream(seed: int, batches: int, keys: int) -> list[list[tuple[str, int, int]]]:
    """Keys of differing lateness (in order, a second of jitter, up to 40 s behind),
    one of them changing halfway; 5 s of event time per batch."""
    rnd = random.Random(seed)
    out, i = [], 0
    for b in range(batches):
        rows = []
        for k in range(keys):
            spread = [0, 1 * S, 40 * S][k % 3]
            if k == 0 and b >= batches // 2:
                spread = 20 * S  # a key whose behaviour changes
            for _ in range(rnd.randint(0, 12)):
                now = b * 5 * S + rnd.randrange(5 * S)
                behind = rnd.randrange(spread + 1) if rnd.random() < 0.3 else 0
                rows.append((f"k{k}", max(0, now - behind), i))
                i += 1
        rnd.shuffle(rows)
        out.append(rows)
    return out


def run(op: Any, batches: list[list[tuple[str, int, int]]], keys: int = 5) -> list[Any]:
    """Per batch: the late rows' ids, the windows, every key's watermark (with one
    core: a multi-core operator keeps them in its cores)."""
    got = []
    for rows in batches:
        out = op.process(table(rows))
        late = sorted(out.late.column("i").to_pylist()) if out.late.num_rows else []
        wins = sorted(
            out.windows.select(["k", "window_start", "n"]).to_pylist(),
            key=lambda r: (r["k"], r["window_start"]),
        )
        names = [f"k{k}" for k in range(keys)]
        marks = {k: op.key_watermark(k) for k in names} if op.cores == 1 else None
        got.append((late, wins, marks))
    return got


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**32 - 1),
    batches=st.integers(2, 30),
    keys=st.integers(1, 6),
    horizon=st.sampled_from([20 * S, 120 * S]),
    min_rows=st.sampled_from([1, 10, 100]),
)
def test_the_operator_follows_the_model(
    seed: int, batches: int, keys: int, horizon: int, min_rows: int
) -> None:
    data = stream(seed, batches, keys)
    pipe = pipeline(horizon, min_rows)
    op = pipe.operator()
    q, lo, h, rows = pipe.watermark.core_config()
    model = Model(q, lo, 60 * S, h, rows)
    counted: dict[tuple[str, int], int] = {}
    emitted = []
    for rows in data:
        out = op.process(table(rows))
        emitted.append(out.windows)
        want_late = sorted(rows[i][2] for i in model.batch([(r[0], r[1]) for r in rows]))
        got_late = sorted(out.late.column("i").to_pylist()) if out.late.num_rows else []
        assert got_late == want_late
        for k, state in model.keys.items():
            assert op.key_watermark(k) == state["wm"], k
        late_ids = set(want_late)
        for k, ts, i in rows:
            if i not in late_ids:
                w = ts // WINDOW * WINDOW
                counted[(k, w)] = counted.get((k, w), 0) + 1
    emitted.append(op.flush().windows)
    # Every window, emitted along the way or at the flush, holds its on-time rows.
    wins: dict[tuple[str, int], int] = {}
    for t in emitted:
        for r in t.select(["k", "window_start", "n"]).to_pylist():
            start = round(r["window_start"].timestamp() * S)
            wins[(r["k"], start)] = wins.get((r["k"], start), 0) + r["n"]
    assert wins == counted


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), cores=st.integers(2, 4), cut=st.integers(1, 15))
def test_row_order_cores_and_a_restore_change_nothing(seed: int, cores: int, cut: int) -> None:
    data = stream(seed, 16, 5)
    pipe = pipeline()
    want = run(pipe.operator(), data)
    rnd = random.Random(seed)
    shuffled = [rnd.sample(rows, len(rows)) for rows in data]
    assert run(pipe.operator(), shuffled) == want, "row order"
    without_marks = [(late, wins, None) for late, wins, _ in want]
    assert run(pipe.operator(cores=cores), data) == without_marks, "cores"
    op = pipe.operator()
    first = run(op, data[:cut])
    back = pipe.operator(state=op.snapshot())
    assert first + run(back, data[cut:]) == want, "restored mid-stream"


def test_a_jittery_key_waits_longer_than_an_orderly_one() -> None:
    # Two keys, 4,000 rows each: one in order, one up to 30 s behind. Before a key has
    # min_rows rows (by default 999 for the 0.999 quantile) it waits max_delay; then the
    # orderly key's windows close half a second after their end, the jittery key's
    # within 30 s x 1.41.
    wm = tm.AdaptiveOutOfOrderness(quantile=0.999, min_delay="500ms", max_delay="5m", horizon="1h")
    assert wm.min_rows == 999
    pipe = tm.Pipeline("k", "ts", window=tm.Tumbling("10s"), aggs={"n": tm.count()}, watermark=wm)
    op = pipe.operator()
    rnd = random.Random(7)
    i = 0
    for b in range(40):
        rows = []
        for _ in range(100):
            now = b * 10 * S + rnd.randrange(10 * S)
            rows.append(("calm", now, i))
            rows.append(("jittery", max(0, now - rnd.randrange(30 * S)), i + 1))
            i += 2
        op.process(table(rows))
        if b in (3, 8):
            # 400 and 900 rows: still max_delay (5 minutes) behind its newest event.
            calm_early = op.key_watermark("calm")
            assert calm_early is not None and calm_early <= (b + 1) * 10 * S - 5 * 60 * S
        if b == 9:
            # 1,000 rows: learned.
            calm_learned = op.key_watermark("calm")
            assert calm_learned is not None and calm_learned > 100 * S - 2 * S
    calm, jittery = op.key_watermark("calm"), op.key_watermark("jittery")
    assert calm is not None and jittery is not None
    assert calm > 400 * S - 2 * S, "the orderly key: about min_delay behind"
    assert 400 * S - 45 * S < jittery < 400 * S - 20 * S, "the jittery key: about 30 s"
    m = op.metrics()
    assert m["keys"] == 2 and m["delay_state_bytes"] == 2 * (176 + 8)
    from tidemark.metrics import prometheus_text

    assert "tidemark_delay_state_bytes 368" in prometheus_text(op)


def test_configuration_errors_say_what_to_set() -> None:
    with pytest.raises(ConfigError, match='per="key"'):
        tm.AdaptiveOutOfOrderness(per="global")
    with pytest.raises(ConfigError, match="between 0 and 1"):
        tm.AdaptiveOutOfOrderness(quantile=1.0)
    with pytest.raises(ConfigError, match="min_delay <= max_delay"):
        tm.AdaptiveOutOfOrderness(min_delay="1m", max_delay="1s")
    wm = tm.AdaptiveOutOfOrderness(max_delay="2m")
    assert wm.delay == "2m" and wm.per == "key"
    assert "AdaptiveOutOfOrderness(quantile=0.999" in repr(wm)
    a = tm.Pipeline("k", "ts", window=tm.Tumbling("1s"), aggs={"n": tm.count()}, watermark=wm)
    b = tm.Pipeline(
        "k",
        "ts",
        window=tm.Tumbling("1s"),
        aggs={"n": tm.count()},
        watermark=tm.BoundedOutOfOrderness("2m", per="key"),
    )
    assert a.fingerprint != b.fingerprint and b.config["adaptive"] is None


@pytest.mark.spark
def test_a_stream_processor_rescaled_mid_stream_keeps_each_keys_delay(
    spark: Any, tmp_path: Any
) -> None:
    # Spark micro-batches through StreamProcessor, on 3 state partitions and then (the
    # state redistributed: delays and histograms move with their keys) on 2: the late
    # rows and windows of one operator.
    from tidemark.spark import StreamProcessor

    data = stream(5, 16, 5)
    pipe = pipeline()
    op = pipe.operator()
    want_late: list[int] = []
    want_wins: list[tuple[Any, ...]] = []

    def rows(t: pa.Table) -> list[tuple[Any, ...]]:
        return sorted(tuple(r.values()) for r in t.select(["k", "window_start", "n"]).to_pylist())

    for b in data:
        out = op.process(table(b))
        want_late += out.late.column("i").to_pylist() if out.late.num_rows else []
        want_wins += rows(out.windows)
    want_wins += rows(op.flush().windows)
    got_late: list[int] = []
    got_wins: list[tuple[Any, ...]] = []
    schema = spark.createDataFrame(table(data[0])).schema

    def run(n: int, ids: range) -> Any:
        proc = StreamProcessor(
            pipe,
            str(tmp_path / "state"),
            n,
            sink=lambda t, _b: got_wins.extend(rows(t)),
            late_sink=lambda t, _b: got_late.extend(t.column("i").to_pylist()),
            arrow_sinks=True,
        )
        for b in ids:
            proc(spark.createDataFrame(table(data[b]), schema), b)
        return proc

    run(3, range(8))
    run(2, range(8, len(data))).flush(spark, schema)
    assert sorted(got_late) == sorted(want_late) and want_late, "late rows, none lost"
    assert sorted(got_wins) == sorted(want_wins)


@pytest.mark.spark
def test_aggregate_replayed_in_arrival_order_learns_as_one_operator(spark: Any) -> None:
    # Spark's batch aggregate, one partition replayed in arrival order 40 rows at a time:
    # each key's delay is learned call by call, as by one operator given those calls.
    from tidemark.spark import aggregate

    rows = [r for batch in stream(11, 16, 5) for r in batch]
    t = table(rows).append_column("seq", pa.array(range(len(rows)), pa.int64()))
    pipe = pipeline()
    op = pipe.operator()
    want_late: list[int] = []
    want_wins: list[tuple[Any, ...]] = []

    def wins(t: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
        # Spark gives naive datetimes in its session time zone (UTC here).
        return [(r["k"], r["window_start"].replace(tzinfo=None), r["n"]) for r in t]

    for at in range(0, len(rows), 40):
        out = op.process(table(rows[at : at + 40]))
        want_late += out.late.column("i").to_pylist() if out.late.num_rows else []
        want_wins += wins(out.windows.to_pylist())
    want_wins += wins(op.flush().windows.to_pylist())
    res = aggregate(spark.createDataFrame(t), pipe, num_partitions=1, order_by="seq", batch_rows=40)
    got_wins = wins([r.asDict() for r in res.windows.collect()])
    got_late = [r["i"] for r in res.late.collect()]
    res.unpersist()
    assert want_late, "the stream has late rows"
    assert sorted(got_late) == sorted(want_late)
    assert sorted(got_wins) == sorted(want_wins)
