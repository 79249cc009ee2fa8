"""``LatenessReport``: lateness per key and source partition, and what Spark's one
global watermark would have dropped.

A plain Python model of the report (the module docs of the core's
``pipeline/watch.rs``, written again without its data layout) is held equal to the
operator on generated streams, for every key; "what Spark would have dropped" is held
equal to the late rows of a pipeline with one global watermark under Spark's rule (which
other suites hold equal to Spark itself). The same batches give the same report
whatever the order of their rows, the cores, a snapshot restored mid-stream, and the
state partitions of a ``StreamProcessor``.
"""

from __future__ import annotations

import math
import random
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tidemark as tm
from tidemark.errors import ConfigError
from tidemark.metrics import prometheus_text

S = 1_000_000  # a second in microseconds
WINDOW = 10 * S
BOUNDS = [0] + [m * 10**e * 1_000 for e in range(8) for m in (1, 2, 5)]

Rows = list[tuple[str, int, int, int]]  # key, event time, row id, source partition


def stream(seed: int, batches: int, keys: int) -> list[Rows]:
    """Keys of differing lateness (in order, seconds of jitter, a key a minute behind
    the others), 5 s of event time per batch, two source partitions."""
    rnd = random.Random(seed)
    out, i = [], 0
    for b in range(batches):
        rows = []
        for k in range(keys):
            spread, lag = [(0, 0), (3 * S, 0), (40 * S, 0), (S, 60 * S)][k % 4]
            for _ in range(rnd.randint(0, 10)):
                now = b * 5 * S + rnd.randrange(5 * S)
                behind = rnd.randrange(spread + 1) if rnd.random() < 0.3 else 0
                rows.append((f"k{k}", max(0, now - behind - lag), i, k % 2))
                i += 1
        rnd.shuffle(rows)
        out.append(rows)
    return out


def table(rows: Rows) -> pa.Table:
    return pa.table(
        {
            "k": pa.array([r[0] for r in rows], pa.string()),
            "ts": pa.array([r[1] for r in rows], pa.timestamp("us", tz="UTC")),
            "i": pa.array([r[2] for r in rows], pa.int64()),
            "p": pa.array([r[3] for r in rows], pa.int64()),
        }
    )


def pipeline(
    per: str = "key",
    late_rule: str = "spark",
    spark_delay: int | None = 5 * S,
    top: int | None = 100,
    delay: int = 10 * S,
    window: Any = None,
) -> tm.Pipeline:
    wm = (
        tm.BoundedOutOfOrderness(f"{delay}us", per="partition", partition_column="p")
        if per == "partition"
        else tm.BoundedOutOfOrderness(f"{delay}us", per=per)
    )
    return tm.Pipeline(
        "k",
        "ts",
        window=window or tm.Tumbling("10s"),
        aggs={"n": tm.count()},
        watermark=wm,
        late_rule=late_rule,  # type: ignore[arg-type]
        lateness=tm.LatenessReport(
            top=top, spark_delay=None if spark_delay is None else f"{spark_delay}us"
        ),
    )


def quantile(counts: list[int], biggest: int, q: float) -> float | None:
    total = sum(counts)
    if not total:
        return None
    rank = min(max(1, math.ceil(total * q)), total)
    seen = 0
    for b, n in enumerate(counts):
        seen += n
        if seen >= rank:
            return (min(BOUNDS[b], biggest) if b < len(BOUNDS) else biggest) / S
    return biggest / S


def bucket(v: int) -> int:
    return sum(1 for b in BOUNDS if b < v)


class Model:
    """The report, key by key, as the module docs state it; late rows are the
    operator's own (what the report counts of them is modelled, not the rule)."""

    def __init__(self, spark_delay: int | None) -> None:
        self.delay = spark_delay
        self.stream_max: int | None = None
        self.spark_prev: int | None = None
        self.key_max: dict[str, int] = {}
        self.keys: dict[str, dict[str, Any]] = {}

    def batch(self, rows: Rows, late: set[int]) -> None:
        start = None if self.stream_max is None or self.delay is None else self.stream_max
        spark_start = None if start is None else start - (self.delay or 0)
        judged = self.spark_prev
        for k, ts, i, _ in rows:
            st = self.keys.setdefault(
                k, {"behind": [0] * 26, "max": 0, "late": 0, "dropped": 0, "kept": 0}
            )
            before = self.key_max.get(k)
            behind = 0 if before is None else max(before - ts, 0)
            st["behind"][bucket(behind)] += 1
            st["max"] = max(st["max"], behind)
            st["late"] += i in late
            # Spark: the window ends at or before the watermark the previous batch
            # began with.
            if judged is not None and (ts // WINDOW + 1) * WINDOW <= judged:
                st["dropped"] += 1
                st["kept"] += i not in late
        for k, ts, _, _ in rows:
            self.key_max[k] = max(self.key_max.get(k, ts), ts)
            self.stream_max = max(self.stream_max if self.stream_max is not None else ts, ts)
        if spark_start is not None:
            self.spark_prev = max(self.spark_prev or spark_start, spark_start)

    def report(self, k: str) -> dict[str, Any]:
        st = self.keys[k]
        return {
            "rows": sum(st["behind"]),
            "late_rows": st["late"],
            "behind_p50_s": quantile(st["behind"], st["max"], 0.5),
            "behind_p90_s": quantile(st["behind"], st["max"], 0.9),
            "behind_p99_s": quantile(st["behind"], st["max"], 0.99),
            "behind_p999_s": quantile(st["behind"], st["max"], 0.999),
            "behind_max_s": st["max"] / S,
            "spark_dropped": st["dropped"],
            "spark_kept": st["kept"],
        }


def late_ids(out: Any) -> set[int]:
    return set(out.late.column("i").to_pylist()) if out.late.num_rows else set()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**32 - 1),
    batches=st.integers(1, 25),
    keys=st.integers(1, 6),
    per=st.sampled_from(["key", "global"]),
    late_rule=st.sampled_from(["spark", "flink"]),
    spark_delay=st.sampled_from([None, 0, 5 * S, 30 * S]),
)
def test_the_report_follows_the_model(
    seed: int, batches: int, keys: int, per: str, late_rule: str, spark_delay: int | None
) -> None:
    op = pipeline(per, late_rule, spark_delay).operator()
    model = Model(spark_delay)
    for rows in stream(seed, batches, keys):
        out = op.process(table(rows))
        model.batch(rows, late_ids(out))
        rep = op.metrics()["lateness"]
        got = {r["key"]: {k: r[k] for k in model.report(r["key"])} for r in rep["keys"]}
        assert got == {k: model.report(k) for k in got}
        assert set(got) == {k for k in model.keys if sum(model.keys[k]["behind"])}
        assert rep["rows"] == op.metrics()["rows_in"]
        assert rep["late_rows"] == op.metrics()["late_dropped_count"]
        assert rep["spark_kept"] == sum(st["kept"] for st in model.keys.values())


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), delay=st.sampled_from([0, 5 * S, 30 * S]))
def test_what_spark_would_drop_is_what_one_global_watermark_drops(seed: int, delay: int) -> None:
    # The comparison judges by tidemark's Spark rule with one global watermark, which
    # the Spark suites hold equal to Spark's withWatermark + groupBy(window) itself.
    per_key = pipeline("key", spark_delay=delay, top=0).operator()
    spark_like = tm.Pipeline(
        "k",
        "ts",
        window=tm.Tumbling("10s"),
        aggs={"n": tm.count()},
        watermark=tm.BoundedOutOfOrderness(f"{delay}us"),
    ).operator()
    mine: set[int] = set()
    sparks: set[int] = set()
    for rows in stream(seed, 20, 5):
        mine |= late_ids(per_key.process(table(rows)))
        sparks |= late_ids(spark_like.process(table(rows)))
    rep = per_key.metrics()["lateness"]
    assert rep["keys"] == []  # top=0: totals only
    assert rep["late_rows"] == len(mine)
    assert rep["spark_dropped"] == len(sparks)
    assert rep["spark_kept"] == len(sparks - mine)


def report(op: Any, batches: list[Rows]) -> list[Any]:
    got = []
    for rows in batches:
        op.process(table(rows))
        got.append(op.metrics()["lateness"])
    return got


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**32 - 1),
    cores=st.integers(2, 4),
    cut=st.integers(1, 15),
    per=st.sampled_from(["key", "partition"]),
)
def test_row_order_cores_and_a_restore_change_nothing(
    seed: int, cores: int, cut: int, per: str
) -> None:
    data = stream(seed, 16, 6)
    pipe = pipeline(per, top=3)
    want = report(pipe.operator(), data)
    rnd = random.Random(seed)
    assert report(pipe.operator(), [rnd.sample(r, len(r)) for r in data]) == want, "row order"
    assert report(pipe.operator(cores=cores), data) == want, "cores"
    op = pipe.operator()
    first = report(op, data[:cut])
    back = pipe.operator(state=op.snapshot())
    assert first + report(back, data[cut:]) == want, "restored mid-stream"


def test_a_source_partition_that_lags_shows_how_far_behind_the_stream_it_is() -> None:
    op = pipeline("partition", delay=S, spark_delay=S).operator()
    rows: Rows = []
    for b in range(10):
        # Partition 1's devices send their events 90 s after partition 0's.
        rows = [("a", b * 10 * S + 100 * S, 2 * b, 0), ("b", b * 10 * S + 10 * S, 2 * b + 1, 1)]
        op.process(table(rows))
    rep = op.metrics()["lateness"]
    parts = {p["partition"]: p for p in rep["partitions"]}
    assert parts[0]["behind_max_s"] == 0.0
    assert parts[1]["behind_max_s"] == 80.0 and parts[1]["behind_p50_s"] == 80.0
    # Per source partition nothing was late; one global watermark (1 s behind the
    # newest event) would have dropped every row of partition 1 after the first two
    # batches.
    assert rep["late_rows"] == 0
    assert parts[1]["spark_dropped"] == parts[1]["spark_kept"] == 8
    assert parts[0]["spark_dropped"] == 0
    assert rep["rows"] == 20
    assert op.metrics()["lateness_state_bytes"] == 2 * 232


def test_late_by_is_how_far_behind_its_watermark_a_late_row_was() -> None:
    op = pipeline("global", late_rule="row", delay=5 * S, spark_delay=None).operator()
    op.process(table([("a", 100 * S, 0, 0)]))  # the watermark becomes 95 s
    op.process(table([("a", 94 * S, 1, 0), ("a", 85 * S, 2, 0), ("b", 30 * S, 3, 0)]))
    rep = op.metrics()["lateness"]
    assert rep["late_rows"] == 3
    assert rep["late_by_max_s"] == 65.0
    assert rep["late_by_p50_s"] == 10.0  # 1 s, 10 s, 65 s: the middle one's bucket
    assert rep["spark_dropped"] == rep["spark_kept"] == 0
    keys = {k["key"]: k for k in rep["keys"]}
    assert keys["a"]["late_rows"] == 2 and keys["a"]["behind_max_s"] == 15.0
    assert keys["b"]["behind_max_s"] == 0.0  # its first row: behind nothing of its own


def test_prometheus_shows_the_stream_the_top_keys_and_the_partitions() -> None:
    op = pipeline("partition", delay=S, spark_delay=S, top=1).operator()
    for b in range(5):
        op.process(table([("a", b * S + 100 * S, 2 * b, 0), ("b", b * S + 10 * S, 2 * b + 1, 1)]))
    text = prometheus_text(op)
    assert "tidemark_lateness_rows_total 10" in text
    # Spark's watermark (1 s behind a's events) drops b's rows from the third batch on.
    assert "tidemark_lateness_spark_kept_total 3" in text
    assert 'tidemark_key_lateness_spark_kept_total{key="b"} 3' in text
    assert 'key="a"' not in text  # top=1: the key furthest behind only
    assert 'tidemark_source_partition_lateness_behind_seconds{partition="1",quantile="0.99"}' in (
        text
    )


@pytest.mark.parametrize("cores", [1, 3])
def test_top_none_lists_every_key_that_lost_rows_to_sparks_rule(cores: int) -> None:
    """Beyond the default ten: 25 keys 60 s behind the stream, whose rows Spark's one
    watermark would drop, and 5 prompt ones; ``top=None`` lists all 30, the 25 among
    them with Spark's drops."""
    ops = [pipeline(top=None).operator(cores=cores), pipeline(top=10).operator(cores=cores)]
    for b in range(4):
        rows: Rows = [(f"ok{i}", b * 10 * S + 70 * S, 1, 0) for i in range(5)]
        if b:  # the stream's newest event is 70 s in: Spark's watermark 65 s
            rows += [(f"late{i:02}", b * 10 * S, 1, 0) for i in range(25)]
        for op in ops:
            op.process(table(rows))
    every, default = ops
    keys = every.metrics()["lateness"]["keys"]
    assert len(keys) == 30
    lost = sorted(k["key"] for k in keys if k["spark_dropped"])
    assert lost == [f"late{i:02}" for i in range(25)]
    assert len(default.metrics()["lateness"]["keys"]) == 10
    assert every.metrics()["lateness"]["late_rows"] == 0  # per key, none is late


def test_configuration_errors_say_what_to_set() -> None:
    with pytest.raises(ConfigError, match="top"):
        tm.LatenessReport(top=-1)
    with pytest.raises(ConfigError, match="spark_delay"):
        tm.LatenessReport(spark_delay="soon")
    with pytest.raises(ConfigError, match="LatenessReport"):
        tm.Pipeline(
            "k",
            "ts",
            window=tm.Tumbling("1s"),
            aggs={"n": tm.count()},
            watermark=tm.BoundedOutOfOrderness("1s"),
            lateness=True,  # type: ignore[arg-type]
        )
    with pytest.raises(ConfigError, match="time window"):
        tm.Pipeline(
            "k",
            "ts",
            window=tm.Rows(3),
            aggs={"n": tm.count()},
            emit="on_update",
            lateness=tm.LatenessReport(),
        )
    a, b = pipeline(), pipeline(top=5)
    assert a.fingerprint == b.fingerprint, "top shapes reports, not state"
    assert a.fingerprint != pipeline(spark_delay=None).fingerprint


@pytest.mark.spark
def test_a_stream_processor_reports_what_one_operator_does(spark: Any, tmp_path: Any) -> None:
    # Spark micro-batches through StreamProcessor, on 3 state partitions and then (the
    # state redistributed: each key's record moves with it, the source partitions'
    # sums go to one) on 2: last_progress has the report of one operator.
    from tidemark.spark import StreamProcessor

    data = stream(7, 8, 6)
    pipe = pipeline("partition", top=4)
    op = pipe.operator()
    want = report(op, data)
    schema = spark.createDataFrame(table(data[0])).schema
    got = []

    def run(n: int, ids: range) -> Any:
        proc = StreamProcessor(pipe, str(tmp_path / "state"), n, sink=lambda t, _b: None)
        for b in ids:
            proc(spark.createDataFrame(table(data[b]), schema), b)
            assert proc.last_progress is not None
            got.append(proc.last_progress["lateness"])
        return proc

    run(3, range(4))
    proc = run(2, range(4, len(data)))
    assert got == want
    # Prometheus reads a StreamProcessor's last micro-batch and report.
    text = prometheus_text(proc)
    assert f"tidemark_stream_batch_id {len(data) - 1}" in text
    assert f"tidemark_lateness_rows_total {want[-1]['rows']}" in text
    assert "tidemark_source_partition_lateness_behind_seconds{partition=" in text
