"""tidemark.spark.aggregate and StreamProcessor on a local SparkSession."""

from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import tidemark as tm
from tidemark.spark import StreamProcessor, aggregate
from tidemark.spark.state import StateStore

pytestmark = pytest.mark.spark


def NO_SINK(df: Any, batch_id: int) -> None:
    """A sink that writes nothing (the batch's tasks still run, for its state)."""


T0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)


def rows_of(df: Any, cols: list[str]) -> list[tuple]:
    return sorted(tuple(r[c] for c in cols) for r in df.collect())


def local_result(pipe: tm.Pipeline, tables: list[pa.Table]) -> list[tuple]:
    op = pipe.operator()
    out = []
    for t in tables:
        out += op.process(t).windows.to_pylist()
    out += op.flush().windows.to_pylist()
    return sorted(
        (r["device"], r["window_start"].replace(tzinfo=None), r["n"], r["s"]) for r in out
    )


def make_events(n: int = 300) -> list[tuple[str, dt.datetime | None, float]]:
    rows = []
    for i in range(n):
        rows.append((f"d{i % 7}", T0 + dt.timedelta(seconds=(i * 37) % 600), float(i % 13)))
    rows.append(("d1", None, 1.0))
    return rows


def pipeline(
    per: str = "key",
    aggs: dict[str, Any] | None = None,
    delay: str = "5s",
    late_rule: str = "spark",
) -> tm.Pipeline:
    return tm.Pipeline(
        key="device",
        event_time="ts",
        watermark=tm.BoundedOutOfOrderness(delay, per=per),
        window=tm.Tumbling("1m"),
        aggs={"n": tm.count(), "s": tm.sum("value")} if aggs is None else aggs,
        late_rule=late_rule,
    )


def test_batch_aggregate_matches_local(spark: Any) -> None:
    rows = make_events()
    df = spark.createDataFrame(rows, "device string, ts timestamp, value double")
    pipe = pipeline()
    res = aggregate(df, pipe, num_partitions=3)
    got = rows_of(res.windows, ["device", "window_start", "n", "s"])
    table = pa.table(
        {
            "device": [r[0] for r in rows],
            "ts": pa.array([r[1] for r in rows], pa.timestamp("us", tz="UTC")),
            "value": [r[2] for r in rows],
        }
    )
    assert got == local_result(pipe, [table])
    assert res.late.count() == 0
    errors = res.errors.collect()
    assert [(e.device, e.reason) for e in errors] == [("d1", "event time is null")]
    assert res.windows.schema["window_start"].dataType.typeName() == "timestamp"
    # Whatever the number of partitions, the same windows.
    again = aggregate(df, pipe, num_partitions=5)
    assert rows_of(again.windows, ["device", "window_start", "n", "s"]) == got
    # Whatever the number of cores per task (thread-per-core runtime), the same windows.
    threaded = aggregate(df, pipe, num_partitions=2, cores=3)
    assert rows_of(threaded.windows, ["device", "window_start", "n", "s"]) == got
    assert [(e.device, e.reason) for e in threaded.errors.collect()] == [
        ("d1", "event time is null")
    ]
    # One key over six partitions: five zero-row partitions, each flushed empty.
    sparse = aggregate(df.filter("device = 'd3'"), pipe, num_partitions=6)
    assert rows_of(sparse.windows, ["device", "window_start", "n", "s"]) == [
        r for r in got if r[0] == "d3"
    ]
    assert sparse.errors.count() == 0 and sparse.late.count() == 0
    res.unpersist()
    again.unpersist()
    threaded.unpersist()
    sparse.unpersist()
    # cache=False: the same three outputs, each its own job with its own schema.
    lean = aggregate(df, pipe, num_partitions=3, cache=False)
    assert lean.combined is None
    assert lean.late is lean.late, "built when first read, once"
    assert rows_of(lean.windows, ["device", "window_start", "n", "s"]) == got
    assert lean.windows.schema == res.windows.schema
    assert [(e.device, e.reason) for e in lean.errors.collect()] == [("d1", "event time is null")]
    assert lean.errors.schema == res.errors.schema
    assert lean.late.count() == 0 and lean.late.schema == res.late.schema
    lean.unpersist()
    # A column the windows do not read: the windows job leaves it out, the error rows
    # keep it.
    wide = aggregate(df.selectExpr("'x' AS note", "*"), pipe, num_partitions=3, cache=False)
    assert rows_of(wide.windows, ["device", "window_start", "n", "s"]) == got
    assert [(e.note, e.device) for e in wide.errors.collect()] == [("x", "d1")]


def test_error_rows_known_from_the_input_match_the_pipelines(spark: Any) -> None:
    """Without a replay no row is late, and for Spark timestamp or date event times a
    row fails only for a null event time or a key longer than the core accepts: the
    default then reads the error rows off the input (no persist) and runs the pipeline
    once, for the windows. They are the rows and reasons the pipeline itself gives
    (``cache=False`` runs it for each output), at the key-length limit too."""
    limit = tm._native.MAX_KEY_BYTES
    fits = limit - 5 - 9  # a string key column and an int one: 5 + len + 9 bytes
    big = ["x" * fits, "y" * (fits + 1)]
    rows = [
        ("a", 1, T0, 1.0, "r"),
        ("a", None, T0 + dt.timedelta(seconds=70), 2.0, None),
        (None, 2, T0, 3.0, "r"),
        ("b", 2, None, 4.0, "r"),
        (None, None, None, 5.0, None),
        (big[0], 3, T0, 6.0, "r"),
        (big[1], 3, T0, 7.0, "r"),
        (big[1], 3, None, 8.0, "r"),
    ]
    # A column already named "reason" (the reason becomes _tidemark_reason) and a
    # dotted key name.
    df = spark.createDataFrame(
        rows, "`dev.id` string, k2 int, ts timestamp, value double, reason string"
    )
    pipe = tm.Pipeline(
        watermark=tm.BoundedOutOfOrderness("0s"),
        key=["dev.id", "k2"],
        event_time="ts",
        window=tm.Tumbling("1m"),
        aggs={"n": tm.count(), "s": tm.sum("value")},
    )

    def short(v: Any) -> Any:
        return f"<{len(v)} x {v[0]}>" if isinstance(v, str) and len(v) > 99 else v

    def outputs(res: Any) -> list[Any]:
        """Each output's sorted rows (long keys shortened) and its schema."""
        return [
            out.schema
            if i % 2
            else sorted((tuple(short(v) for v in r) for r in out.collect()), key=str)
            for out in (res.windows, res.late, res.errors)
            for i in (0, 1)
        ]

    fast = aggregate(df, pipe, num_partitions=2)
    assert fast.combined is None, "nothing persisted"
    # Built when first read, once.
    assert fast.errors is fast.errors and fast.late is fast.late
    ran = aggregate(df, pipe, num_partitions=2, cache=False)
    got = outputs(fast)
    assert got == outputs(ran)
    reasons = sorted((r["value"], r["_tidemark_reason"]) for r in fast.errors.collect())
    null_key = 'key column "{}" is null (null_keys="error"; "group" keeps such rows as one key)'
    assert reasons == [
        (2.0, null_key.format("k2")),
        (3.0, null_key.format("dev.id")),
        (4.0, "event time is null"),
        (5.0, "event time is null"),
        (7.0, f"a key of {limit + 1} bytes is longer than the supported {limit} bytes"),
        (8.0, "event time is null"),
    ]
    assert got[2] == [] and fast.late.schema == df.schema
    # A date event time: nulls only.
    dates = df.selectExpr("`dev.id`", "k2", "CAST(ts AS DATE) AS day", "value").filter(
        "length(`dev.id`) < 10 OR `dev.id` IS NULL"
    )
    daily = tm.Pipeline(
        watermark=tm.BoundedOutOfOrderness("0s"),
        key=["dev.id", "k2"],
        event_time="day",
        window=tm.Tumbling("1d"),
        aggs={"n": tm.count()},
    )
    by_day = aggregate(dates, daily, num_partitions=2)
    assert by_day.combined is None
    assert outputs(by_day) == outputs(aggregate(dates, daily, num_partitions=2, cache=False))
    # Epoch integers: nulls, and values whose microseconds overflow, at the edges.
    edge = 2**63 // 1000
    for unit, per_s in (("ms", 10**3), ("us", 10**6), ("s", 1), ("ns", 10**9)):
        now = 1_767_225_600 * per_s
        epoch = spark.createDataFrame(
            [("a", v) for v in (now, None, edge, edge + 1, -edge, -edge - 1, 7)],
            "device string, ms long",
        )
        by_ms = tm.Pipeline(
            watermark=tm.BoundedOutOfOrderness("0s"),
            key="device",
            event_time="ms",
            event_time_type=f"unixtimestamp_{unit}",
            window=tm.Tumbling("1d"),
            aggs={"n": tm.count()},
        )
        known = aggregate(epoch, by_ms, num_partitions=2)
        assert known.combined is None
        assert outputs(known) == outputs(aggregate(epoch, by_ms, num_partitions=2, cache=False))
        if unit == "ms":
            # Out of range in microseconds, and in range but with no window bounds.
            assert sorted((r["ms"] or 0, r["reason"]) for r in known.errors.collect()) == [
                (-edge - 1, f"event time {-edge - 1} is out of range"),
                (-edge, "event time out of range for the window"),
                (0, "event time is null"),
                (edge, "event time out of range for the window"),
                (edge + 1, f"event time {edge + 1} is out of range"),
            ]
    # Source-partition scope: partitions out of the core's range are error rows too.
    parts = spark.createDataFrame(
        [("a", p, T0) for p in (-1, 0, 2**20 - 1, 2**20, None)] + [("a", 1, None)],
        "device string, part long, ts timestamp",
    )
    per_part = tm.Pipeline(
        key="device",
        event_time="ts",
        window=tm.Tumbling("1m"),
        aggs={"n": tm.count()},
        watermark=tm.BoundedOutOfOrderness("1s", per="partition", partition_column="part"),
    )
    known = aggregate(parts, per_part, num_partitions=2)
    assert known.combined is None
    assert outputs(known) == outputs(aggregate(parts, per_part, num_partitions=2, cache=False))
    assert sorted((r["part"] or 0, r["reason"]) for r in known.errors.collect()) == [
        (-1, "partition -1 is out of range (0 to 1048575)"),
        (0, "partition is null"),
        (1, "event time is null"),
        (2**20, "partition 1048576 is out of range (0 to 1048575)"),
    ]
    # Where the pipeline can fail a row for more, its result is persisted as before.
    for other in (
        tm.Pipeline(
            watermark=tm.BoundedOutOfOrderness("0s"),
            key="k2",
            event_time="ts",
            window=tm.Tumbling("1m"),
            aggs={"n": tm.count()},
            max_keys=10,
        ),
    ):
        res = aggregate(df, other, num_partitions=2)
        assert res.combined is not None
        res.unpersist()
    as_text = epoch.selectExpr("device", "CAST(ms AS STRING) AS ms")  # only a parse tells
    res = aggregate(as_text, by_ms, num_partitions=2)
    assert res.combined is not None
    res.unpersist()


@pytest.mark.parametrize("large", [False, True])
def test_packed_outputs_unpack_to_each_output_exactly(large: bool) -> None:
    """The persisted form of ``aggregate``: each output's batches as Arrow IPC blobs
    of at most ``rows`` rows, which unpack to the very batches Spark expects."""
    from pyspark.sql.types import DoubleType, StringType, StructField, StructType, TimestampType

    from tidemark.operator import Output
    from tidemark.spark._codec import KIND_ERROR, KIND_LATE, KIND_WINDOW, OutputCodec, unpack

    schema = StructType(
        [
            StructField("device", StringType()),
            StructField("ts", TimestampType()),
            StructField("value", DoubleType()),
        ]
    )
    # Flink's timing: the window closes in the call that moves the watermark.
    pipe = pipeline("global", {"n": tm.count()}, delay="0s", late_rule="flink")
    plan = OutputCodec.build(pipe, schema, "UTC", large)
    op = pipe.operator()
    ts = pa.timestamp("us", tz="UTC")
    first = pa.table(
        {
            "device": [f"d{i}" for i in range(5)] + ["d0"],
            "ts": pa.array([T0] * 5 + [None], ts),
            "value": [1.0] * 6,
        }
    )
    op.process(first)
    # The 2-minute row closes the first window of every device (when this call ends);
    # in the next call the 0-minute rows are late, the null-time row an error.
    closed = op.process(
        pa.table(
            {
                "device": ["d0"],
                "ts": pa.array([T0 + dt.timedelta(minutes=2)], ts),
                "value": [2.0],
            }
        )
    )
    after = pa.table(
        {"device": ["d1", "d2", "d3"], "ts": pa.array([T0, T0, None], ts), "value": [3.0] * 3}
    )
    late = op.process(after)
    out = Output(closed.windows, late.late, late.errors)
    assert (out.windows.num_rows, out.late.num_rows, out.errors.num_rows) == (5, 2, 1)
    packed = list(plan.encode_packed(out, rows=2))
    kinds = [b.column(0)[0].as_py() for b in packed]
    assert kinds == [KIND_WINDOW] * 3 + [KIND_LATE] + [KIND_ERROR]
    for kind in (KIND_WINDOW, KIND_LATE, KIND_ERROR):
        got = list(unpack(iter(b for b, k in zip(packed, kinds, strict=True) if k == kind)))
        assert all(b.schema == plan.single_arrow[kind] for b in got)
        want = pa.Table.from_batches(list(plan.encode_one(out, kind)))
        assert pa.Table.from_batches(got, plan.single_arrow[kind]).equals(want)
    # Wide rows: fewer rows per blob (here one each), whatever the row limit.
    assert len(list(plan.encode_packed(out, rows=1_000, max_bytes=1))) == 8
    assert not list(plan.encode_packed(op.process(after.slice(0, 0))))


def test_small_inputs_run_in_one_task_with_the_same_outputs(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``num_partitions=None`` (and no ``order_by``) an input Spark estimates below
    ``SINGLE_TASK_BYTES`` runs in one task, with no shuffle; a larger one, or an
    explicit ``num_partitions``, is shuffled by key. The outputs are the same."""
    import importlib

    from pyspark.sql import functions as F

    plan = importlib.import_module("tidemark.spark._layout")
    rows = make_events()
    pq.write_table(
        pa.table(
            {
                "device": [r[0] for r in rows],
                "ts": pa.array([r[1] for r in rows], pa.timestamp("us", tz="UTC")),
                "value": [r[2] for r in rows],
            }
        ),
        tmp_path / "in.parquet",
    )
    df = spark.read.parquet(str(tmp_path / "in.parquet"))
    cols = ["device", "window_start", "n", "s"]

    def run(**kw: Any) -> tuple[int, list[Any]]:
        """Spark partitions holding windows, and the outputs (cached and not)."""
        got: list[Any] = []
        for cache in (True, False):
            res = aggregate(df, pipeline(), cache=cache, **kw)
            tasks = res.windows.select(F.spark_partition_id()).distinct().count()
            got += [rows_of(res.windows, cols), sorted(tuple(r) for r in res.errors.collect())]
            res.unpersist()
        return tasks, got

    one, want = run()
    assert one == 1
    assert want[0] == local_result(pipeline(), [pq.read_table(tmp_path / "in.parquet")])
    assert run(num_partitions=3) == (3, want)
    monkeypatch.setattr(plan, "SINGLE_TASK_BYTES", 1)
    assert run() == (2, want)  # spark.sql.shuffle.partitions


def test_small_and_large_inputs_persist_differently_with_the_same_outputs(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A small input persists combined rows (no Python stage per output read), a large
    one packed blobs: the same three outputs either way."""
    import importlib

    # The module (``tidemark.spark.aggregate`` the attribute is the function).
    agg = importlib.import_module("tidemark.spark.aggregate")

    rows = [("a", 0, 10.0), ("a", 1, 100.0), ("a", 2, 12.0), ("b", 3, 5.0), ("b", 4, None)]
    pq.write_table(
        pa.table(
            {
                "device": [r[0] for r in rows],
                "arrival": [r[1] for r in rows],
                "ts": pa.array(
                    [None if s is None else T0 + dt.timedelta(seconds=s) for *_, s in rows],
                    pa.timestamp("us", tz="UTC"),
                ),
            }
        ),
        tmp_path / "in.parquet",
    )
    df = spark.read.parquet(str(tmp_path / "in.parquet"))
    pipe = tm.Pipeline(
        key="device",
        event_time="ts",
        watermark=tm.BoundedOutOfOrderness("1s"),
        window=tm.Tumbling("1m"),
        aggs={"n": tm.count()},
        # Flink's rule: a row is late once the watermark its call began with passed
        # its window (Spark's would judge it by the call before).
        late_rule="flink",
    )

    def outputs() -> tuple[bool, list[list[tuple]]]:
        res = aggregate(df, pipe, num_partitions=2, order_by="arrival", batch_rows=1)
        got = [
            sorted(tuple(r) for r in out.collect()) for out in (res.windows, res.late, res.errors)
        ]
        packed = "__tm_blob" in res.combined.columns
        res.unpersist()
        return packed, got

    small, small_out = outputs()
    monkeypatch.setattr(agg, "PACK_FROM_BYTES", 0)
    large, large_out = outputs()
    assert (small, large) == (False, True)
    assert large_out == small_out
    windows, late, errors = small_out
    assert [w[-1] for w in windows] == [1, 1, 1] and [r[1] for r in late] == [2]
    assert [(e[0], e[1]) for e in errors] == [("b", 4)]


def test_batch_aggregate_with_a_broadcast_lookup(spark: Any) -> None:
    rows = make_events()
    df = spark.createDataFrame(rows, "device string, ts timestamp, value double")
    weights = pa.table({"device": [f"d{i}" for i in range(6)], "w": [1.0, 2.0] * 3})
    pipe = tm.Pipeline(
        key="device",
        event_time="ts",
        watermark=tm.BoundedOutOfOrderness("5s"),
        window=tm.Tumbling("1m"),
        aggs={"n": tm.count(), "s": tm.sum("w")},
    ).enrich(weights, on="device", how="inner")
    res = aggregate(df, pipe, num_partitions=2)
    got = rows_of(res.windows, ["device", "window_start", "n", "s"])
    op = pipe.operator()
    table = pa.table(
        {
            "device": [r[0] for r in rows],
            "ts": pa.array([r[1] for r in rows], pa.timestamp("us", tz="UTC")),
            "value": [r[2] for r in rows],
        }
    )
    out = op.process(table).windows.to_pylist() + op.flush().windows.to_pylist()
    want = sorted(
        (r["device"], r["window_start"].replace(tzinfo=None), r["n"], r["s"]) for r in out
    )
    assert got == want
    assert "d6" not in {g[0] for g in got}  # no lookup row: dropped by the inner join
    res.unpersist()
    by_site = pipe.without_lookup().enrich(pa.table({"device": ["d0"], "site": ["n"]}), on="device")
    site_key = tm.Pipeline(
        watermark=tm.BoundedOutOfOrderness("0s"),
        key="site",
        event_time="ts",
        window=tm.Tumbling("1m"),
        aggs={"n": tm.count()},
    ).enrich(by_site.lookup.table, on="device")  # type: ignore[union-attr]
    with pytest.raises(tm.ConfigError, match="keys must be input columns"):
        aggregate(df, site_key)


def test_batch_replay_in_arrival_order_reports_late_rows(spark: Any) -> None:
    rows = [("a", 0, 10.0, 1.0), ("a", 1, 100.0, 1.0), ("a", 2, 12.0, 1.0), ("a", 3, 200.0, 1.0)]
    df = spark.createDataFrame(
        [(d, arr, T0 + dt.timedelta(seconds=s), v) for d, arr, s, v in rows],
        "device string, arrival long, ts timestamp, value double",
    )
    pipe = tm.Pipeline(
        key="device",
        event_time="ts",
        watermark=tm.BoundedOutOfOrderness("1s"),
        window=tm.Tumbling("1m"),
        aggs={"n": tm.count(), "s": tm.sum("value")},
        # Flink's rule: the 12 s row is late in the call after the 100 s row (Spark's
        # rule judges it against the watermark of the call before: on time).
        late_rule="flink",
    )
    for cache in (True, False):
        res = aggregate(df, pipe, num_partitions=2, order_by="arrival", batch_rows=1, cache=cache)
        assert [r.arrival for r in res.late.collect()] == [2]
        assert sorted(r.n for r in res.windows.collect()) == [1, 1, 1]
        res.unpersist()


def test_decimal_aggregates_match_spark(spark: Any) -> None:
    """sum, mean, min and max of a DecimalType column give Spark's own result types
    and values (``avg`` rounded half up at 4 more places); stddev reads decimals as
    doubles, as Spark does. The key is a decimal too (an account number as JDBC
    sources deliver one)."""
    import decimal

    from pyspark.sql import functions as F

    rows = [
        (
            decimal.Decimal((i % 3) * 10**15 + 7),
            T0 + dt.timedelta(seconds=(i * 53) % 300),
            None if i % 11 == 0 else decimal.Decimal((i * 7919) % 200_001 - 100_000) / 100,
        )
        for i in range(400)
    ]
    df = spark.createDataFrame(rows, "device decimal(18,0), ts timestamp, amount decimal(10,2)")
    pipe = tm.Pipeline(
        key="device",
        event_time="ts",
        watermark=tm.BoundedOutOfOrderness("1h"),  # batch input in any order: none late
        window=tm.Tumbling("1m"),
        aggs={
            "total": tm.sum("amount"),
            "avg": tm.mean("amount"),
            "lo": tm.min("amount"),
            "hi": tm.max("amount"),
            "sd": tm.stddev("amount"),
        },
    )
    got = aggregate(df, pipe, num_partitions=2, cache=False).windows
    native = df.groupBy(F.window("ts", "1 minute"), "device").agg(
        F.sum("amount").alias("total"),
        F.avg("amount").alias("avg"),
        F.min("amount").alias("lo"),
        F.max("amount").alias("hi"),
        F.stddev("amount").alias("sd"),
    )
    native = native.select("device", F.col("window.start").alias("window_start"), "*")
    for name in ("device", "total", "avg", "lo", "hi", "sd"):
        assert got.schema[name].dataType == native.schema[name].dataType, name
    assert str(got.schema["total"].dataType) == "DecimalType(20,2)"
    assert str(got.schema["avg"].dataType) == "DecimalType(14,6)"
    cols = ["device", "window_start", "total", "avg", "lo", "hi", "sd"]
    mine, theirs = rows_of(got, cols), rows_of(native, cols)
    assert [r[:-1] for r in mine] == [r[:-1] for r in theirs]
    assert len(mine) == 15
    assert any(r[3] != r[3].quantize(decimal.Decimal("0.01")) for r in mine)  # avg rounds
    for a, b in zip(mine, theirs, strict=True):
        assert a[-1] == pytest.approx(b[-1], rel=1e-12)


def test_large_strings_and_session_time_zone(spark: Any) -> None:
    old_tz = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "America/New_York")
    spark.conf.set("spark.sql.execution.arrow.useLargeVarTypes", "true")
    try:
        df = spark.createDataFrame(
            [("x", T0, 1.0), ("x", T0 + dt.timedelta(seconds=30), 2.0)],
            "device string, ts timestamp, value double",
        )
        res = aggregate(df, pipeline())
        (row,) = res.windows.collect()
        assert row.n == 2 and row.s == 3.0
        # Each output alone must match Spark's exact Arrow types too (large strings).
        (lean,) = aggregate(df, pipeline(), cache=False).windows.collect()
        assert lean == row
        assert row.window_start.astimezone(
            dt.timezone.utc
        ) == T0 or row.window_start == T0.astimezone().replace(tzinfo=None)
    finally:
        spark.conf.set("spark.sql.session.timeZone", old_tz)
        spark.conf.unset("spark.sql.execution.arrow.useLargeVarTypes")


def write_stream_files(path: Path, batches: list[pa.Table]) -> None:
    path.mkdir(parents=True)
    for i, t in enumerate(batches):
        f = path / f"part-{i:05d}.parquet"
        pq.write_table(t, f)
        os.utime(f, (1_700_000_000 + i, 1_700_000_000 + i))  # file order = batch order


def stream_batches() -> list[pa.Table]:
    out = []
    for b in range(5):
        rows = [
            (f"d{k}", b * 40 + (k * 7 + j * 11) % 45, float(j)) for k in range(4) for j in range(6)
        ]
        if b == 3:
            rows += [("d0", 5, 100.0)]  # late for d0 by then
        out.append(
            pa.table(
                {
                    "device": [r[0] for r in rows],
                    "ts": pa.array(
                        [T0 + dt.timedelta(seconds=r[1]) for r in rows],
                        pa.timestamp("us", tz="UTC"),
                    ),
                    "value": [r[2] for r in rows],
                }
            )
        )
    return out


@pytest.mark.parametrize(
    ("per", "shuffle", "on_driver", "layout", "where"),
    # Small micro-batches run in the driver by default; on_driver=False runs them in
    # one task; shuffle=True shuffles them to one task per state partition. The state
    # on a local disk, or on an S3-compatible server (written by the driver, or by
    # Spark's Python workers).
    [
        ("key", None, None, "driver", "local"),
        ("key", None, False, "one task", "local"),
        ("key", True, None, "shuffled", "local"),
        ("global", None, None, "driver", "local"),
        ("key", None, None, "driver", "s3"),
        ("key", True, None, "shuffled", "s3"),
    ],
)
def test_streaming_matches_local_operator_and_replays_exactly(
    spark: Any,
    tmp_path: Path,
    state_in: Any,
    per: str,
    shuffle: bool | None,
    on_driver: bool | None,
    layout: str,
    where: str,
) -> None:
    batches = stream_batches()
    inp = tmp_path / "in"
    write_stream_files(inp, batches)
    schema = spark.read.parquet(str(inp)).schema
    pipe = pipeline(per)
    got: dict[int, list[tuple]] = {}
    late: list[Any] = []
    progress: dict[int, dict[str, Any]] = {}
    late_per_batch: dict[int, int] = {}

    def sink(df: Any, batch_id: int) -> None:
        got[batch_id] = rows_of(df, ["device", "window_start", "n", "s"])

    def late_sink(df: Any, batch_id: int) -> None:
        rows = df.collect()
        late.extend(rows)
        late_per_batch[batch_id] = len(rows)

    proc = StreamProcessor(
        pipe,
        state_in(where),
        num_partitions=3,
        sink=sink,
        late_sink=late_sink,
        shuffle=shuffle,
        on_driver=on_driver,
    )

    def each_batch(df: Any, batch_id: int) -> None:
        proc(df, batch_id)
        # Set once the batch is done, from the batch's own job.
        assert proc.last_progress is not None
        progress[batch_id] = dict(proc.last_progress)
        assert progress[batch_id]["layout"] == layout
        # A bare Parquet file stream run in the driver is read from its files.
        assert progress[batch_id]["read"] == ("files" if layout == "driver" else "spark")

    q = (
        spark.readStream.schema(schema)
        .option("maxFilesPerTrigger", 1)
        .parquet(str(inp))
        .writeStream.foreachBatch(each_batch)
        .option("checkpointLocation", str(tmp_path / "chk"))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination()
    # Replay the last streamed batch (as Spark does after a crash, before any other
    # batch): the same windows, late rows and counts, here with its rows read through
    # Spark (a batch DataFrame is not a file stream's micro-batch).
    last = len(batches) - 1
    before, late_before = got[last], len(late)
    proc(spark.read.parquet(str(inp / f"part-{last:05d}.parquet")), last)
    assert got[last] == before
    assert len(late) - late_before == late_per_batch[last]
    del late[late_before:]
    replayed = dict(proc.last_progress or {})
    # Read through Spark, and the progress says why not from the files.
    why = {"read_why": replayed["read_why"]}
    if layout == "driver":
        assert "not foreachBatch's DataFrame" in why["read_why"]
    assert replayed == {**progress[last], **why, "read": "spark"}
    final = rows_of(proc.flush(spark, schema), ["device", "window_start", "n", "s"])
    assert proc.last_progress is not None
    progress[len(batches)] = dict(proc.last_progress)
    assert got[max(got)] == final, "flush runs as the next batch and goes to the sink"
    streamed = [r for rs in got.values() for r in rs]

    # The local operator, driven the way Spark drives it: the watermark of each batch
    # comes from the previous batches (global scope); per key, each key's own.
    want_windows, want_late = local_spark_like(pipe, batches)
    assert sorted(streamed) == sorted(want_windows)
    assert sorted(r.value for r in late) == sorted(want_late)
    if per == "key":
        assert [r.value for r in late] == [100.0]
    assert len(got) == len(batches) + 1
    # Per-batch counts without a job: input, windows, late and error rows.
    for b, t in enumerate(batches):
        pr = progress[b]
        assert pr["batch_id"] == b and pr["input_rows"] == t.num_rows
        assert pr["window_rows"] == len(got[b])
        assert pr["late_rows"] == late_per_batch[b]
        assert pr["error_rows"] == 0
    assert progress[len(batches)]["input_rows"] == 0  # the flush
    assert progress[len(batches)]["read"] == "none"
    # The flush runs as the batches did.
    assert progress[len(batches)]["layout"] == layout
    assert progress[len(batches)]["window_rows"] == len(final)
    # The same counts, recorded in the state store for other processes (the last
    # `retention` batches; older records are pruned).
    assert proc.progress() == progress[len(batches)]
    assert proc.progress(last) == {**progress[last], **why, "read": "spark"}  # the replay's
    assert proc.progress(0) is None and proc.progress(99) is None


@pytest.mark.parametrize("on_driver", [None, False], ids=["driver", "tasks"])
def test_a_stream_that_goes_on_after_a_flush_loses_nothing(
    spark: Any, tmp_path: Path, on_driver: bool | None
) -> None:
    """A query run again with new input after ``flush()`` (its batch takes the flush's
    id): the batch follows the one before the flush, so the windows still open then
    get its rows, and a second flush closes them; the windows the first flush closed
    early come again. Every event ends up counted in the last value of its window."""
    batches = stream_batches()
    schema = spark.createDataFrame(batches[0].to_pandas()).schema
    pipe = pipeline()
    last: dict[tuple, tuple] = {}

    def sink(df: Any, _b: int) -> None:
        for r in df.collect():
            last[(r.device, r.window_start)] = (r.n, r.s)

    def run() -> StreamProcessor:
        return StreamProcessor(
            pipe, str(tmp_path / "state"), num_partitions=2, sink=sink, on_driver=on_driver
        )

    proc = run()
    for b, t in enumerate(batches[:3]):
        proc(spark.createDataFrame(t.to_pandas(), schema), b)
    proc.flush(spark, schema)  # as batch 3
    # The query again, twice, with one new batch each time (Spark's batch 3, then 4),
    # each run ending with a flush (as batch 4, then 5).
    for b in (3, 4):
        proc = run()
        proc(spark.createDataFrame(batches[b].to_pandas(), schema), b)
        proc.flush(spark, schema)
        assert proc.progress()["batch_id"] == b + 1  # type: ignore[index]
    want = {(d, ws.replace(tzinfo=None)): (n, s) for d, ws, n, s in local_result(pipe, batches)}
    assert last == want


def test_state_partition_tags_land_in_their_spark_partition(spark: Any) -> None:
    """Rows tagged for state partition p go to Spark partition p (one task per state
    partition when nothing merges partitions)."""
    from pyspark.sql import functions as F

    from tidemark.spark._stream_task import tags

    for n in (1, 3, 8):
        data, placeholder = tags(n)
        both = spark.createDataFrame(
            [(v, p) for p, v in enumerate(data + placeholder)], "t int, p int"
        )
        got = both.repartition(n, "t").select("p", F.spark_partition_id().alias("s")).collect()
        assert sorted((r.p % n, r.s) for r in got) == sorted((p % n, p % n) for p in range(2 * n))


def test_tagged_rows_go_where_repartition_by_keys_sends_them(spark: Any) -> None:
    """Every row is tagged with the state partition ``repartition(n, *keys)`` gives it
    (rescaling redistributes keys by that hash), whatever the key columns are called,
    and lands in that Spark partition; each state partition gets one placeholder."""
    from pyspark.sql import functions as F

    from tidemark.spark._stream_task import SP, tagged, tags

    keys = ["ten ant.`x`", "id"]
    df = spark.createDataFrame(
        [(f"t{i % 7}", i % 5, i) for i in range(200)],
        f"`{keys[0].replace('`', '``')}` string, id int, v int",
    )
    n = 3
    data, placeholder = tags(n)
    want = {
        r.v: r.p
        for r in df.repartition(n, *[F.col(f"`{k.replace('`', '``')}`") for k in keys])
        .select("v", F.spark_partition_id().alias("p"))
        .collect()
    }
    got = (
        tagged(df, keys, n, flush=False)
        .select("v", SP, F.spark_partition_id().alias("p"))
        .collect()
    )
    rows = [r for r in got if r.v is not None]
    assert {r.v: r[SP] for r in rows} == {v: data[p] for v, p in want.items()}
    assert all(r.p == want[r.v] for r in rows)
    assert sorted((r[SP], r.p) for r in got if r.v is None) == [
        (placeholder[p], p) for p in range(n)
    ]


def test_the_one_task_bound_shrinks_with_more_cores() -> None:
    """Below ``SINGLE_TASK_BYTES`` with 1 or 2 cores, ``2 / cores`` of it with more
    (more cores gain more from parallel tasks); never without an estimate."""
    from types import SimpleNamespace

    from tidemark.spark._layout import SINGLE_TASK_BYTES
    from tidemark.spark._sizing import fits_one_task

    def spark(cores: int) -> Any:
        return SimpleNamespace(sparkContext=SimpleNamespace(defaultParallelism=cores))

    assert fits_one_task(spark(2), SINGLE_TASK_BYTES - 1)
    assert not fits_one_task(spark(2), SINGLE_TASK_BYTES)
    assert fits_one_task(spark(1), SINGLE_TASK_BYTES - 1)
    assert fits_one_task(spark(16), SINGLE_TASK_BYTES // 8 - 1)
    assert not fits_one_task(spark(16), SINGLE_TASK_BYTES // 8)
    assert not fits_one_task(spark(2), None)


def test_small_micro_batches_run_in_one_task_without_a_shuffle(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """By default a micro-batch Spark estimates below ``SINGLE_TASK_BYTES`` runs every
    state partition in one task (no shuffle stage); a larger one, or ``shuffle=True``,
    is shuffled to one task per state partition; ``shuffle=False`` never is."""
    import importlib

    from pyspark.sql import functions as F

    _stream_task = importlib.import_module("tidemark.spark._stream_task")
    inp = tmp_path / "in"
    write_stream_files(inp, stream_batches())
    df = spark.read.parquet(str(inp / "part-00000.parquet"))

    def tasks(proc: StreamProcessor) -> set[int]:
        """The Spark partitions the batch's tagged rows land in."""
        shuffle = proc._placement(df).shuffled
        tagged = _stream_task.tagged(df, proc.pipe.key, proc.num_partitions, False, shuffle)
        return {r.p for r in tagged.select(F.spark_partition_id().alias("p")).collect()}

    def proc(**kw: Any) -> StreamProcessor:
        return StreamProcessor(
            pipeline("key"), str(tmp_path / "s"), num_partitions=3, sink=NO_SINK, **kw
        )

    assert tasks(proc()) == {0}
    assert tasks(proc(shuffle=True)) == {0, 1, 2}
    monkeypatch.setattr(importlib.import_module("tidemark.spark._layout"), "SINGLE_TASK_BYTES", 1)
    assert tasks(proc()) == {0, 1, 2}
    assert tasks(proc(shuffle=False)) == {0}


def test_small_micro_batches_run_on_the_driver(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """By default a micro-batch Spark estimates at most ``ON_DRIVER_BYTES`` that would
    run in one task runs in the driver; ``on_driver=True`` runs any micro-batch there,
    ``on_driver=False`` none; a flush runs there with ``on_driver=True`` or after a
    batch that did; a batch whose keys tidemark cannot route as Spark does never does."""
    import importlib

    streaming = importlib.import_module("tidemark.spark.streaming")
    inp = tmp_path / "in"
    write_stream_files(inp, stream_batches())
    df = spark.read.parquet(str(inp / "part-00000.parquet"))

    def proc(**kw: Any) -> StreamProcessor:
        return StreamProcessor(
            pipeline("key"), str(tmp_path / "s"), num_partitions=3, sink=NO_SINK, **kw
        )

    def on_driver(p: StreamProcessor, flush: bool = False) -> bool:
        return p._placement(df, flush).driver

    assert on_driver(proc()) and on_driver(proc(shuffle=False))
    assert not on_driver(proc(on_driver=False)) and not on_driver(proc(shuffle=True))
    assert on_driver(proc(on_driver=True), flush=True)
    assert not on_driver(proc(), flush=True)  # no batch has run in this process
    assert not on_driver(proc(on_driver=False), flush=True)
    monkeypatch.setattr(importlib.import_module("tidemark.spark._layout"), "ON_DRIVER_BYTES", 1)
    assert not on_driver(proc())
    assert on_driver(proc(on_driver=True))
    # A key type whose Spark hash tidemark does not reproduce: Spark's shuffle routes it.
    monkeypatch.setattr(streaming, "spark_hash_matches", lambda schema, keys: False)
    assert not on_driver(proc(on_driver=True))
    with pytest.raises(tm.ConfigError, match="choose one"):
        proc(shuffle=True, on_driver=True)


def test_driver_and_task_agree_under_a_session_time_zone_and_large_strings(
    spark: Any, tmp_path: Path
) -> None:
    """``toArrow`` hands the driver its timestamps in UTC, where a task gets them in the
    session's zone; strings arrive as ``large_string`` under ``useLargeVarTypes``.
    Windows, late rows (every input column), error rows (a null event time) and the
    flush must come out the same, in the same schemas, from a run in the driver and a
    run in one task; and with ``arrow_sinks``, as ``pyarrow`` tables holding the rows
    of those DataFrames in their Arrow schema (``toArrow``), from either run."""
    inp = tmp_path / "in"
    write_stream_files(inp, stream_batches())
    old_tz = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "America/New_York")
    spark.conf.set("spark.sql.execution.arrow.useLargeVarTypes", "true")
    try:
        dfs = [spark.read.parquet(str(p)) for p in sorted(inp.glob("*.parquet"))]
        # From Arrow, so that Spark knows its size (the batch still runs in the driver).
        bad = spark.createDataFrame(
            pa.table(
                {
                    "device": ["d1"],
                    "ts": pa.array([None], pa.timestamp("us", tz="UTC")),
                    "value": [7.0],
                }
            ),
            dfs[2].schema,
        )
        dfs[2] = dfs[2].unionByName(bad)
        schemas: dict[tuple[bool | None, bool], list[Any]] = {}
        # Each sink's output as Arrow rows: toArrow() of a DataFrame, or the table.
        as_arrow: dict[tuple[bool | None, bool], list[list[Any]]] = {}

        def run(
            on_driver: bool | None, arrow: bool = False
        ) -> tuple[list[Any], list[Any], list[Any]]:
            windows: list[Any] = []
            late: list[Any] = []
            errors: list[Any] = []
            tables: list[list[Any]] = [[], [], []]
            as_arrow[(on_driver, arrow)] = tables

            def keep(out: list[Any], rows: list[Any]) -> Any:
                def sink(df: Any, b: int) -> None:
                    table = df if arrow else df.toArrow()
                    assert isinstance(table, pa.Table)
                    schemas.setdefault((on_driver, arrow), []).append(table.schema)
                    rows.extend(table.to_pylist())
                    if not arrow:
                        schemas[(on_driver, arrow)].append(df.schema)
                        out.extend(df.collect())

                return sink

            proc = StreamProcessor(
                pipeline("key"),
                str(tmp_path / f"state-{on_driver}-{arrow}"),
                num_partitions=3,
                sink=keep(windows, tables[0]),
                late_sink=keep(late, tables[1]),
                error_sink=keep(errors, tables[2]),
                on_driver=on_driver,
                arrow_sinks=arrow,
            )
            for b, df in enumerate(dfs):
                proc(df, b)
                assert proc.last_progress is not None
                assert proc.last_progress["layout"] == (
                    "one task" if on_driver is False else "driver"
                )
            flushed = proc.flush(spark, dfs[0].schema)
            assert isinstance(flushed, pa.Table) == arrow
            return sorted(windows), sorted(late), errors

        in_driver, in_task = run(None), run(False)
        assert in_driver == in_task
        assert schemas[(None, False)] == schemas[(False, False)]
        run(None, arrow=True)
        run(False, arrow=True)
        for arrow_run in ((None, True), (False, True)):
            assert schemas[arrow_run] == schemas[(None, False)][::2]
            got = [sorted(rows, key=repr) for rows in as_arrow[arrow_run]]
            assert got == [sorted(rows, key=repr) for rows in as_arrow[(None, False)]]
        assert [r.value for r in in_driver[1]] == [100.0]  # the late row, every column
        assert [(r.device, r.ts, r.value) for r in in_driver[2]] == [("d1", None, 7.0)]
        assert "event time" in in_driver[2][0].reason
        assert sum(r.n for r in in_driver[0]) == sum(t.num_rows for t in stream_batches()) - 1
    finally:
        spark.conf.set("spark.sql.session.timeZone", old_tz)
        spark.conf.unset("spark.sql.execution.arrow.useLargeVarTypes")


@pytest.mark.parametrize("on_driver", [None, False])
def test_a_restart_under_another_time_zone_and_string_layout_goes_on(
    spark: Any, tmp_path: Path, on_driver: bool | None
) -> None:
    """The state of a query stopped under one session time zone, with strings as
    ``string``, goes on after a restart in another zone with ``useLargeVarTypes``:
    the windows are those of a run that never stopped."""
    pipe = pipeline()
    dfs = [spark.createDataFrame(t) for t in stream_batches()]

    def run(switch_at: int | None, path: Path) -> list[tuple]:
        got: list[tuple] = []

        def sink(df: Any, _batch_id: int) -> None:
            got.extend(rows_of(df, ["device", "window_start", "n", "s"]))

        proc = StreamProcessor(pipe, str(path), num_partitions=2, sink=sink, on_driver=on_driver)
        old_tz = spark.conf.get("spark.sql.session.timeZone")
        try:
            for i, df in enumerate(dfs):
                if i == switch_at:
                    spark.conf.set("spark.sql.session.timeZone", "Asia/Kolkata")
                    spark.conf.set("spark.sql.execution.arrow.useLargeVarTypes", "true")
                    proc = StreamProcessor(
                        pipe, str(path), num_partitions=2, sink=sink, on_driver=on_driver
                    )
                proc(df, i)
            proc.flush(spark, dfs[0].schema)
        finally:
            spark.conf.set("spark.sql.session.timeZone", old_tz)
            spark.conf.unset("spark.sql.execution.arrow.useLargeVarTypes")
        return sorted(got)

    expect = run(None, tmp_path / "once")
    assert len(expect) >= 4
    assert run(1, tmp_path / "restarted") == expect


def test_placeholder_rows_run_under_the_session_that_asks_for_them(spark: Any) -> None:
    """The placeholder rows of a flush or a tagged micro-batch are built once per
    session: another session (another query's, as ``foreachBatch`` hands out) gets its
    own, which runs under its own settings (the Arrow string types, the time zone)."""
    from tidemark.spark._stream_task import placeholder_rows

    other = spark.newSession()
    other.conf.set("spark.sql.execution.arrow.useLargeVarTypes", "true")
    theirs, ours = placeholder_rows(other, 3, 1), placeholder_rows(spark, 3, 1)
    assert theirs.sparkSession._jsparkSession.equals(other._jsparkSession)
    assert ours.sparkSession._jsparkSession.equals(spark._jsparkSession)
    assert placeholder_rows(spark, 3, 1) is ours, "reused by the same session"
    strings = ours.selectExpr("'x' AS s")
    assert strings.toArrow().schema.field("s").type == pa.string()
    assert theirs.selectExpr("'x' AS s").toArrow().schema.field("s").type == pa.large_string()


def test_a_windows_only_flush_in_a_task_gives_the_same_rows_to_each_action(
    spark: Any, tmp_path: Path
) -> None:
    """With only a windows sink, a batch run in a Spark task is not cached: the sink's
    action is its job, and each further action on the DataFrame :meth:`flush` returns
    replays the flush from the same stored state. Every action gets the rows the sink
    got, and the replays leave the state as one flush does: a restarted processor's
    next flush (the same batch id again, see ``next_flush_batch``) closes nothing new
    and counts the same windows."""
    inp = tmp_path / "in"
    write_stream_files(inp, stream_batches())
    dfs = [spark.read.parquet(str(p)) for p in sorted(inp.glob("*.parquet"))]
    cols = ["device", "window_start", "n", "s"]
    got: dict[int, list[tuple]] = {}

    def sink(df: Any, batch_id: int) -> None:
        got[batch_id] = rows_of(df, cols)

    def processor() -> StreamProcessor:
        return StreamProcessor(
            pipeline("key"),
            str(tmp_path / "state"),
            num_partitions=2,
            sink=sink,
            on_driver=False,
        )

    proc = processor()
    for b, df in enumerate(dfs):
        proc(df, b)
    flushed = proc.flush(spark, dfs[0].schema)
    assert proc.last_progress is not None and proc.last_progress["layout"] == "one task"
    first = rows_of(flushed, cols)
    assert first == got[len(dfs)] and first, "the sink's rows, and windows to close"
    assert rows_of(flushed, cols) == first, "a second action replays the same flush"
    windows = proc.last_progress["window_rows"]

    again = processor()
    assert rows_of(again.flush(spark, dfs[0].schema), cols) == first
    assert again.last_progress is not None and again.last_progress["window_rows"] == windows


@pytest.mark.parametrize("on_driver", [None, False])
def test_a_windows_only_arrow_sink_gets_the_windows_of_a_dataframe_sink(
    spark: Any, tmp_path: Path, on_driver: bool | None
) -> None:
    """With the windows sink alone (the task emits the windows, nothing is cached),
    ``arrow_sinks=True`` hands the sink a table per micro-batch holding the rows of
    ``toArrow()`` of the DataFrame a DataFrame sink gets, in the driver and in a task,
    and a batch's progress is still read from the job that computed them."""
    inp = tmp_path / "in"
    write_stream_files(inp, stream_batches())
    dfs = [spark.read.parquet(str(p)) for p in sorted(inp.glob("*.parquet"))]

    def run(arrow: bool) -> list[list[dict[str, Any]]]:
        got: list[list[dict[str, Any]]] = []

        def sink(out: Any, _b: int) -> None:
            table = out if arrow else out.toArrow()
            assert isinstance(table, pa.Table)
            got.append(sorted(table.to_pylist(), key=repr))

        proc = StreamProcessor(
            pipeline("key"),
            str(tmp_path / f"state-{arrow}"),
            num_partitions=3,
            sink=sink,
            on_driver=on_driver,
            arrow_sinks=arrow,
        )
        for b, df in enumerate(dfs):
            proc(df, b)
            assert proc.last_progress is not None
            assert proc.last_progress["window_rows"] == len(got[-1])
        return got

    arrow, frames = run(True), run(False)
    assert arrow == frames
    assert sum(len(b) for b in arrow) > 0


def test_a_task_routes_keys_of_every_spark_type_as_a_shuffle_does(
    spark: Any, tmp_path: Path
) -> None:
    """A small micro-batch's one task (or the driver) routes its rows to state
    partitions itself (no tagging expression in the JVM); a shuffled batch is routed by
    Spark's ``hash()``. All must put a key in the same state partition, or the key's
    state splits: here batches alternate between them, over a key of every Spark type
    the task hashes (and 0.0 / -0.0, which Spark hashes alike), and the windows must
    equal those of a run whose every batch is shuffled. With an hour of delay nothing closes before
    the flush, so a split key shows as one window emitted twice. The task also reads
    the unused fixed-width column of the small batches instead of a projection."""
    import decimal

    from tidemark.spark._sizing import micro_batch_size, unused_columns_are_cheap

    schema = (
        "by byte, sh short, i int, l long, f float, d double, bo boolean, bin binary, "
        "day date, at timestamp, ntz timestamp_ntz, dec decimal(10,2), big decimal(30,4), "
        "s string, ts timestamp, value double, unused long"
    )
    keys = ["by", "sh", "i", "l", "f", "d", "bo", "bin", "day", "at", "ntz", "dec", "big", "s"]

    def key(k: int) -> tuple:
        zero = -0.0 if k % 2 else 0.0
        return (
            k - 12,
            k * 1000 - 7,
            k * 100_003,
            (k * 7919) << 36,
            zero if k % 5 == 0 else k / 4,
            zero if k % 3 == 0 else k * 1e10 + 0.5,
            k % 2 == 0,
            bytes([k, 255 - k, 7][: 1 + k % 3]),
            dt.date(2020, 1, 1) + dt.timedelta(days=k * 37),
            T0 + dt.timedelta(microseconds=k * 123_457),
            dt.datetime(2021, 6, 1) + dt.timedelta(seconds=k * 3_601),
            decimal.Decimal(k * 7919 - 150_000) / 100,
            decimal.Decimal(-(k**9) + 3 * k) / 10_000,
            f"tenant-{k}" + "é" * (k % 3),
        )

    batches = []
    for b in range(4):
        rows = [
            (*key(k), T0 + dt.timedelta(seconds=b * 40 + (k * 7 + j * 11) % 45), float(j), j)
            for k in range(24)
            for j in range(3)
        ]
        # Read back from Parquet: Spark then estimates the batch's size (one task).
        spark.createDataFrame(rows, schema).write.parquet(str(tmp_path / f"in{b}"))
        batches.append(spark.read.parquet(str(tmp_path / f"in{b}")))
    pipe = tm.Pipeline(
        key=keys,
        event_time="ts",
        watermark=tm.BoundedOutOfOrderness("1h", per="key"),
        window=tm.Tumbling("1m"),
        aggs={"n": tm.count(), "total": tm.sum("value")},
    )
    cols = [*keys, "window_start", "n", "total"]

    def run(name: str, alternate: bool) -> list[tuple]:
        windows: list[tuple] = []
        proc = StreamProcessor(
            pipe,
            str(tmp_path / name),
            num_partitions=3,
            sink=lambda df, b: windows.extend(rows_of(df, cols)),
            shuffle=True,
        )
        for b, df in enumerate(batches):
            # Shuffled, in the driver, shuffled, in one task (or every one shuffled).
            mode = (0, 1, 0, 2)[b] if alternate else 0
            proc.shuffle = True if mode == 0 else None
            proc.on_driver = False if mode == 2 else None
            placed, size = proc._placement(df), micro_batch_size(df, None, None)[0]
            shuffled, untagged = placed.shuffled, placed.routes
            assert (shuffled, untagged) == (proc.shuffle is True, proc.shuffle is None)
            assert not untagged or unused_columns_are_cheap(df.schema, [*keys, "ts", "value"], size)
            proc(df, b)
            assert proc.last_progress is not None
            assert proc.last_progress["layout"] == ("shuffled", "driver", "one task")[mode]
        # The flush runs as the last batch did: one task, or one per state partition.
        assert proc._placement(batches[0], flush=True).shuffled == (not alternate)
        proc.flush(spark, batches[0].schema)
        return sorted(windows)

    shuffled = run("shuffled", alternate=False)
    assert sum(r[-2] for r in shuffled) == 4 * 24 * 3
    assert len({r[: len(keys) + 1] for r in shuffled}) == len(shuffled)
    assert run("alternating", alternate=True) == shuffled


def test_only_small_fixed_width_unused_columns_travel_unprojected() -> None:
    from pyspark.sql import types as T

    from tidemark.spark._sizing import CHEAP_INPUT_BYTES, unused_columns_are_cheap

    schema = T.StructType(
        [
            T.StructField("k", T.StringType()),
            T.StructField("n", T.LongType()),
            T.StructField("when", T.TimestampType()),
            T.StructField("payload", T.StringType()),
        ]
    )
    assert unused_columns_are_cheap(schema, ["k", "payload", "when"], 10_000)
    assert unused_columns_are_cheap(schema, ["k", "payload", "when"], CHEAP_INPUT_BYTES)
    assert not unused_columns_are_cheap(schema, ["k", "payload", "when"], CHEAP_INPUT_BYTES + 1)
    assert not unused_columns_are_cheap(schema, ["k", "payload", "when"], None)
    assert not unused_columns_are_cheap(schema, ["k", "n", "when"], 10_000)


def test_a_task_routes_only_key_types_it_hashes_as_spark_does() -> None:
    """Strings with a collation (Spark hashes their collation key) and types outside
    the checked set keep the routing in the JVM."""
    from pyspark.sql import types as T

    from tidemark.spark._args import spark_hash_matches

    schema = T.StructType(
        [
            T.StructField("l", T.LongType()),
            T.StructField("s", T.StringType()),
            T.StructField("ci", T.StringType("UTF8_LCASE")),
            T.StructField("arr", T.ArrayType(T.IntegerType())),
            T.StructField("dec", T.DecimalType(30, 4)),
        ]
    )
    assert spark_hash_matches(schema, ["l", "s", "dec"])
    assert not spark_hash_matches(schema, ["l", "ci"])
    assert not spark_hash_matches(schema, ["arr"])
    assert not spark_hash_matches(schema, ["missing"])


def test_a_windows_only_task_reads_the_columns_the_windows_need() -> None:
    """Keys, event time, source partition (partition scope) and aggregate inputs, in
    input order; with a lookup every column (its columns meet the input's)."""
    from pyspark.sql.types import (
        DoubleType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    from tidemark.spark._args import used_input

    schema = StructType(
        [
            StructField("note", StringType()),
            StructField("value", DoubleType()),
            StructField("partition", LongType()),
            StructField("ts", TimestampType()),
            StructField("device", StringType()),
        ]
    )
    assert used_input(pipeline("key"), schema).fieldNames() == ["value", "ts", "device"]
    assert used_input(pipeline("partition"), schema).fieldNames() == [
        "value",
        "partition",
        "ts",
        "device",
    ]
    counting = pipeline(aggs={"n": tm.count()})
    assert used_input(counting, schema).fieldNames() == ["ts", "device"]
    lookup = pa.table({"device": ["d0"], "site": ["s"]})
    assert used_input(counting.enrich(lookup, on="device"), schema) == schema


def test_streaming_state_is_right_whatever_the_sink_does(spark: Any, tmp_path: Path) -> None:
    """With a windows sink alone, the sink's own job runs the state partitions'
    tasks. A sink that coalesces its DataFrame (so one Spark task runs several state
    partitions), reads only part of it, or nothing at all: the same windows, counts
    and watermarks as the cached combined result (used when a late sink is set)."""
    batches = stream_batches()
    inp = tmp_path / "in"
    write_stream_files(inp, batches)
    cols = ["device", "window_start", "n", "s"]
    # A column the windows do not read: a windows-only run leaves it out of the task.
    dfs = [
        spark.read.parquet(str(inp / f"part-{i:05d}.parquet")).selectExpr("'x' AS note", "*")
        for i in range(len(batches))
    ]
    schema = dfs[0].schema
    seen: dict[str, dict[int, list[tuple]]] = {"ref": {}, "coalesced": {}}

    def run(name: str, sink: Any, late_sink: Any = None) -> tuple[list[Any], list[tuple]]:
        proc = StreamProcessor(
            pipeline("key"),
            str(tmp_path / name),
            num_partitions=3,
            sink=sink,
            late_sink=late_sink,
        )
        progress = []
        for b, df in enumerate(dfs):
            proc(df, b)
            progress.append(proc.last_progress)
        final = rows_of(proc.flush(spark, schema), cols)
        progress.append(proc.last_progress)
        return progress, final

    def ref(df: Any, b: int) -> None:
        seen["ref"][b] = rows_of(df, cols)

    def coalesced(df: Any, b: int) -> None:
        seen["coalesced"][b] = rows_of(df.coalesce(1), cols)

    def partial(df: Any, b: int) -> None:
        df.limit(1).collect()

    want = run("ref", ref, late_sink=lambda df, b: None)
    assert want[0][3]["late_rows"] == 1  # the late row of batch 3 (per-key watermarks)
    assert run("coalesced", coalesced) == want
    assert seen["coalesced"] == seen["ref"]
    assert run("partial", partial) == want
    assert run("none", NO_SINK) == want  # a sink that reads nothing


@pytest.mark.parametrize("shuffle", [None, True])
def test_an_empty_micro_batch_carries_every_state_partition(
    spark: Any, tmp_path: Path, shuffle: bool | None
) -> None:
    """A micro-batch with no rows (one task with no input, or placeholders alone when
    shuffled) writes a new state version for every state partition: the batches
    after it restore from it and the stream's windows and late rows are those of the
    stream without it. That run keeps its state under a ``file://`` URI (a pyarrow
    filesystem, as for ``s3://``)."""
    batches = stream_batches()
    inp = tmp_path / "in"
    write_stream_files(inp, batches)
    dfs = [spark.read.parquet(str(inp / f"part-{i:05d}.parquet")) for i in range(len(batches))]
    schema = dfs[0].schema
    cols = ["device", "window_start", "n", "s"]

    def run(name: str, inputs: list[Any], uri: bool = False) -> tuple[list[tuple], int]:
        windows: list[tuple] = []
        proc = StreamProcessor(
            pipeline("key"),
            (tmp_path / name).as_uri() if uri else str(tmp_path / name),
            num_partitions=3,
            sink=lambda df, b: windows.extend(rows_of(df, cols)),
            shuffle=shuffle,
        )
        late = 0
        for b, df in enumerate(inputs):
            proc(df, b)
            assert proc.last_progress is not None
            assert proc.last_progress["input_rows"] == df.count()
            late += proc.last_progress["late_rows"]
            for p in range(3):
                assert (tmp_path / name / "partitions" / str(p) / f"{b}.snap").exists()
        proc.flush(spark, schema)
        return sorted(windows), late

    want = run("ref", dfs)
    assert want[1] == 1
    assert run("empty", [*dfs[:2], dfs[0].limit(0), *dfs[2:]], uri=True) == want


@pytest.mark.parametrize("where", ["local", "s3"])
def test_streaming_rescales_state_partitions_between_runs(
    spark: Any, tmp_path: Path, state_in: Any, where: str
) -> None:
    batches = stream_batches()
    inp = tmp_path / "in"
    write_stream_files(inp, batches[:3])
    schema = spark.read.parquet(str(inp)).schema
    pipe = pipeline("key")
    streamed: list[tuple] = []

    def sink(df: Any, batch_id: int) -> None:
        streamed.extend(rows_of(df, ["device", "window_start", "n", "s"]))

    location = state_in(where)

    def run(num_partitions: int) -> StreamProcessor:
        proc = StreamProcessor(pipe, location, num_partitions, sink=sink)
        q = (
            spark.readStream.schema(schema)
            .option("maxFilesPerTrigger", 1)
            .parquet(str(inp))
            .writeStream.foreachBatch(proc)
            .option("checkpointLocation", str(tmp_path / "chk"))
            .trigger(availableNow=True)
            .start()
        )
        q.awaitTermination()
        return proc

    run(3)
    for i, t in enumerate(batches[3:], start=3):
        f = inp / f"part-{i:05d}.parquet"
        pq.write_table(t, f)
        os.utime(f, (1_700_000_000 + i, 1_700_000_000 + i))
    proc = run(2)  # the same query and state, now on 2 state partitions
    proc.flush(spark, schema)  # runs as the next batch: its windows go to the sink
    want_windows, _ = local_spark_like(pipe, batches)
    assert sorted(streamed) == sorted(want_windows)
    # State partition 2 of the old layout kept nothing newer than the rescaled version.
    assert StateStore(location).versions("partitions/2", ".snap") == []


@pytest.mark.parametrize(("old", "new", "where"), [(4, 2, "local"), (2, 3, "local"), (4, 2, "s3")])
def test_a_batch_replayed_on_another_layout_runs_from_its_base(
    spark: Any, state_in: Any, old: int, new: int, where: str
) -> None:
    """The driver died after tidemark finished batch 2 but before Spark recorded it;
    the query restarts on another number of state partitions and Spark replays batch
    2. The state it runs from is the one before it, redistributed (not batch 2's own
    output, whose old-layout version 1 the replay would otherwise restore: keys of a
    removed partition lost, or a new partition's snapshot missing)."""
    batches = stream_batches()
    schema = spark.createDataFrame(batches[0].to_pandas()).schema
    pipe = pipeline()
    streamed: set[tuple] = set()

    def sink(df: Any, _b: int) -> None:
        streamed.update(rows_of(df, ["device", "window_start", "n", "s"]))

    location = state_in(where)

    def run(n: int, ids: range) -> StreamProcessor:
        proc = StreamProcessor(pipe, location, n, sink=sink)
        for b in ids:
            proc(spark.createDataFrame(batches[b].to_pandas(), schema), b)
        return proc

    run(old, range(3))
    run(new, range(2, len(batches))).flush(spark, schema)  # batch 2 replayed first
    want_windows, _ = local_spark_like(pipe, batches)
    assert sorted(streamed) == sorted(set(want_windows))
    for p in range(new, old):
        assert StateStore(location).versions(f"partitions/{p}", ".snap") == []


def test_state_is_not_rescaled_by_a_hash_spark_does_not_use(spark: Any, tmp_path: Path) -> None:
    """Rescaling routes each key by tidemark's copy of Spark's ``hash()``, which it
    has only for the key types ``spark_hash_matches`` admits (not for a day-time
    interval key): moving other keys would put a key's state in one state partition
    while the shuffle sends its rows to another. The processor refuses and touches
    nothing; the old layout still runs, and so does one state partition (no hash)."""
    from tidemark.errors import ConfigError

    rows = [
        (dt.timedelta(seconds=i % 5), T0 + dt.timedelta(seconds=i * 7), float(i)) for i in range(40)
    ]
    df = spark.createDataFrame(rows, "device interval day to second, ts timestamp, value double")
    pipe = pipeline("key")
    state = tmp_path / "state"
    got: list[int] = []

    def proc(n: int) -> StreamProcessor:
        return StreamProcessor(
            pipe, str(state), n, sink=lambda d, b: got.extend(r.n for r in d.collect())
        )

    proc(2)(df.filter("value < 20"), 0)
    meta = (state / "meta.json").read_text()
    with pytest.raises(ConfigError, match="num_partitions=2"):
        proc(3)(df.filter("value >= 20"), 1)
    assert (state / "meta.json").read_text() == meta
    assert not (state / "partitions" / "2").exists()
    proc(2)(df.filter("(value >= 20) AND (value < 30)"), 1)  # the old layout runs
    one = proc(1)  # every key in one state partition: no hash involved
    one(df.filter("value >= 30"), 2)
    one.flush(spark, df.schema)
    assert sum(got) == 40
    assert list((state / "partitions" / "1").glob("*.snap")) == []


def test_keys_with_a_collation_are_a_clear_error(spark: Any, tmp_path: Path) -> None:
    """Spark groups a string with a collation by its collation key ('A' and 'a' are
    one key under UTF8_LCASE); tidemark compares keys byte for byte. Rather than
    split what Spark would group, every entry point says how to choose."""
    from pyspark.sql import functions as F

    from tidemark.errors import ConfigError

    rows = [("Dev" if i % 2 else "dev", T0 + dt.timedelta(seconds=i), 1.0) for i in range(4)]
    df = spark.createDataFrame(rows, "device string, ts timestamp, value double")
    collated = df.withColumn("device", F.collate("device", "UTF8_LCASE"))
    pipe = pipeline("key")
    with pytest.raises(ConfigError, match=r"F.collate\(F.lower"):
        aggregate(collated, pipe)
    with pytest.raises(ConfigError, match="UTF8_LCASE"):
        StreamProcessor(pipe, str(tmp_path / "state"), 2, sink=NO_SINK)(collated, 0)
    # Either way the user means works.
    lower = collated.withColumn("device", F.collate(F.lower("device"), "UTF8_BINARY"))
    assert {r.device: r.n for r in aggregate(lower, pipe).windows.collect()} == {"dev": 4}
    exact = collated.withColumn("device", F.collate("device", "UTF8_BINARY"))
    assert sorted(r.n for r in aggregate(exact, pipe).windows.collect()) == [2, 2]


def test_column_names_with_dots_spaces_and_backticks(spark: Any, tmp_path: Path) -> None:
    """Flattened JSON gives columns such as ``user.id``: Spark reads a bare dotted
    name as a struct field, and PySpark's own ``mapInArrow`` cannot resolve one. Every
    Spark entry point takes such names, and its outputs keep them."""
    from tidemark.spark import observe_partitions, reorder

    rows = [(f"u{i % 3}", "x", T0 + dt.timedelta(seconds=i * 7), float(i), 0) for i in range(40)]
    rows.append(("u1", "x", None, 1.0, 0))
    schema = "`user.id` string, `a b` string, `event.time` timestamp, `v``x` double, `src.p` int"
    df = spark.createDataFrame(rows, schema)
    pipe = tm.Pipeline(
        key=["user.id", "a b"],
        event_time="event.time",
        watermark=tm.BoundedOutOfOrderness("10s", per="key"),
        window=tm.Tumbling("1m"),
        aggs={"n": tm.count(), "s": tm.sum("v`x")},
    )
    table = df.toArrow()
    op = pipe.operator()
    local = op.process(table.filter(pa.compute.is_valid(table["event.time"]))).windows.to_pylist()
    local += op.flush().windows.to_pylist()
    want = sorted(
        (r["user.id"], r["window_start"].replace(tzinfo=None), r["n"], r["s"]) for r in local
    )
    cols = ["user.id", "window_start", "n", "s"]
    for kw in ({}, {"num_partitions": 3}, {"cache": False}):
        res = aggregate(df, pipe, **kw)
        assert res.windows.columns[:2] == ["user.id", "a b"]
        assert rows_of(res.windows, cols) == want, kw
        (err,) = res.errors.collect()
        assert (err["user.id"], err["v`x"], err["reason"]) == ("u1", 1.0, "event time is null")
    proc = StreamProcessor(pipe, str(tmp_path / "state"), num_partitions=2, sink=NO_SINK)
    proc(df.filter("`event.time` IS NOT NULL"), 0)
    assert proc.last_progress["input_rows"] == 40
    r = tm.Reorder("event.time", late_tolerance="1m")
    out = reorder(df, r, partition_by=["user.id"], num_partitions=2)
    assert out.rows.count() == 40 and out.rows.columns == df.columns
    marks = observe_partitions(df, partition_column="src.p", event_time="event.time").collect()
    assert {m.partition for m in marks} == {0}


def test_rows_windows_on_spark_batch_and_streaming(spark: Any, tmp_path: Path) -> None:
    pipe = tm.Pipeline(
        key="device",
        event_time="ts",
        window=tm.Rows(2),
        aggs={"n": tm.count(), "s": tm.sum("value")},
        emit="on_update",
    )
    rows = [("a", T0 + dt.timedelta(seconds=i), float(i)) for i in range(4)]
    schema = "device string, ts timestamp, value double"
    res = aggregate(spark.createDataFrame(rows, schema), pipe, num_partitions=2)
    assert sorted(r.s for r in res.windows.collect()) == [0.0, 1.0, 3.0, 5.0]
    res.unpersist()
    got: list[float] = []
    proc = StreamProcessor(
        pipe, str(tmp_path / "state"), 2, sink=lambda df, b: got.extend(r.s for r in df.collect())
    )
    proc(spark.createDataFrame(rows[:2], schema), 0)
    proc(spark.createDataFrame(rows[2:], schema), 1)  # state carries over between batches
    assert sorted(got) == [0.0, 1.0, 3.0, 5.0]


def test_global_aggregate_streams_on_one_state_partition(tmp_path: Path) -> None:
    glob = tm.Pipeline(
        watermark=tm.BoundedOutOfOrderness("0s"),
        key=None,
        event_time="ts",
        window=tm.Tumbling("1m"),
        aggs={"n": tm.count()},
    )
    assert StreamProcessor(glob, str(tmp_path / "a"), sink=NO_SINK).num_partitions == 1
    assert StreamProcessor(pipeline(), str(tmp_path / "b"), sink=NO_SINK).num_partitions == 8
    with pytest.raises(tm.ConfigError, match="num_partitions=1"):
        StreamProcessor(glob, str(tmp_path / "c"), num_partitions=3)


def local_spark_like(pipe: tm.Pipeline, batches: list[pa.Table]) -> tuple[list[tuple], list[float]]:
    """Operators per state partition are equivalent to one operator when the
    watermark is external (global) or per key; replicate the one-batch delay of the
    external global watermark."""
    op = pipe.operator()
    out = []
    late: list[float] = []
    per = pipe.watermark.per
    ext = None
    gmax = None
    for t in batches:
        if per == "global":
            op.set_external_watermark(ext)
        res = op.process(t)
        out += res.windows.to_pylist()
        late += res.late.column("value").to_pylist()
        p = op.progress()
        if p["max_event_time"] is not None:
            gmax = p["max_event_time"] if gmax is None else max(gmax, p["max_event_time"])
            ext = gmax - pipe.config["delay"]
    out += op.flush().windows.to_pylist()
    return [
        (r["device"], r["window_start"].replace(tzinfo=None), r["n"], r["s"]) for r in out
    ], late


def test_streaming_state_errors(spark: Any, tmp_path: Path) -> None:
    batches = stream_batches()[:2]
    pipe = pipeline()
    proc = StreamProcessor(
        pipe, str(tmp_path / "state"), num_partitions=2, sink=lambda df, b: df.count()
    )
    schema = spark.createDataFrame(batches[0].to_pandas()).schema
    for i, t in enumerate(batches):
        proc(spark.createDataFrame(t.to_pandas(), schema), i)
    # A changed pipeline is a configuration error that names the setting.
    with pytest.raises(
        tm.ConfigError, match=r"another configuration \(scope: 'key' -> 'global'\).*new state_loc"
    ):
        StreamProcessor(pipeline("global"), str(tmp_path / "state"), 2, sink=NO_SINK)(
            spark.createDataFrame(batches[0].to_pandas(), schema), 2
        )
    # A second query (a new checkpoint: batch ids from 0 again) on this state is told
    # so, not run as a replay against the first query's recorded watermarks.
    with pytest.raises(tm.StateCorruptedError, match=r"holds batches up to 1.*another query"):
        StreamProcessor(pipe, str(tmp_path / "state"), num_partitions=2, sink=NO_SINK)(
            spark.createDataFrame(batches[0].to_pandas(), schema), 0
        )
    df = spark.createDataFrame(batches[0].to_pandas(), schema)
    snap = tmp_path / "state" / "partitions" / "1" / "1.snap"
    good = snap.read_bytes()
    # Each damaged state file is reported on the driver as tm.StateCorruptedError
    # naming the file and what is wrong; the batch never runs on a fresh state.
    for damaged, why in [
        (good[:-10], "truncated"),
        (good[:40] + bytes([good[40] ^ 0xFF]) + good[41:], "checksum"),
        (good[:4] + b"\x09\x00" + good[6:], "a newer tidemark: snapshot format version 9"),
        (good[:4] + b"\x01\x00" + good[6:], "an older tidemark: snapshot format version 1"),
        (b"", "not a tidemark snapshot"),
    ]:
        snap.write_bytes(damaged)
        with pytest.raises(tm.StateCorruptedError, match=f"{snap}.*{why}"):
            proc(df, 2)
    snap.unlink()
    with pytest.raises(tm.StateCorruptedError, match=f"{snap}: missing"):
        proc(df, 2)
    # A state location another tidemark wrote in another layout: named, with what to do.
    meta_file = tmp_path / "state" / "meta.json"
    meta = json.loads(meta_file.read_text())
    assert meta["tidemark"] == tm.__version__ and meta["format"] == 1
    for fmt, why in [
        (2, r"tidemark 9\.9\.9 in state format 2; .* reads format 1: run the query with that"),
        (0, r"tidemark 9\.9\.9 in state format 0; .* does not convert older state"),
    ]:
        meta_file.write_text(json.dumps({**meta, "format": fmt, "tidemark": "9.9.9"}))
        with pytest.raises(tm.StateCorruptedError, match=f"{meta_file}: written by {why}"):
            StreamProcessor(pipe, str(tmp_path / "state"), num_partitions=2, sink=NO_SINK)(df, 2)
    meta_file.write_text(json.dumps(meta))
    # A streaming DataFrame handed to the batch API: told what to use instead.
    inp = tmp_path / "in"
    write_stream_files(inp, batches)
    stream = spark.readStream.schema(schema).parquet(str(inp))
    with pytest.raises(tm.ConfigError, match=r"batch DataFrame.*StreamProcessor.*foreachBatch"):
        aggregate(stream, pipe)
    from tidemark.spark import reorder

    with pytest.raises(tm.ConfigError, match=r"reorder\(\) takes a batch.*ReorderStream"):
        reorder(stream, tm.Reorder("ts"))


def test_start_fresh_discards_another_querys_state(spark: Any, tmp_path: Path) -> None:
    """A new query (batch ids from 0 again) on a state location another query used:
    refused, or with ``start_fresh=True`` that state is discarded, so the new query's
    replays, flush, progress and watermark are its own."""
    batches = stream_batches()
    schema = spark.createDataFrame(batches[0].to_pandas()).schema
    pipe = pipeline()
    state = str(tmp_path / "state")

    def frame(b: int) -> Any:
        return spark.createDataFrame(batches[b].to_pandas(), schema)

    old = StreamProcessor(pipe, state, 2, sink=NO_SINK)
    for b in range(5):  # retention 3: records of batches 2..4 remain
        old(frame(b), b)
    got: list[tuple] = []

    def new(start_fresh: bool) -> StreamProcessor:
        return StreamProcessor(
            pipe,
            state,
            2,
            start_fresh=start_fresh,
            sink=lambda df, _b: got.extend(rows_of(df, ["device", "window_start", "n", "s"])),
        )

    with pytest.raises(tm.StateCorruptedError, match="no finished batch before batch 0"):
        new(False)(frame(0), 0)
    proc = new(True)
    proc(frame(0), 0)
    proc(frame(1), 1)
    proc(frame(1), 1)  # Spark's replay of the new query's last batch
    proc.flush(spark, schema)
    assert proc.progress()["batch_id"] == 2  # type: ignore[index]  # the flush, after 1
    # Exactly the windows of a fresh run over the same two batches (the replay gives
    # its windows again).
    fresh: list[tuple] = []
    ref = StreamProcessor(
        pipe,
        str(tmp_path / "fresh"),
        2,
        sink=lambda df, _b: fresh.extend(rows_of(df, ["device", "window_start", "n", "s"])),
    )
    ref(frame(0), 0)
    ref(frame(1), 1)
    ref.flush(spark, schema)
    assert sorted(set(got)) == sorted(set(fresh))
    # Batch 0 again while the new query holds batch 1 and 2: another query once more.
    with pytest.raises(tm.StateCorruptedError, match="start_fresh=True to discard"):
        new(False)(frame(0), 0)


def test_watermark_after_a_batch_that_did_not_finish_is_its_replays(
    spark: Any, tmp_path: Path, switchable_sink: Any
) -> None:
    batches = stream_batches()
    schema = spark.createDataFrame(batches[0].to_pandas()).schema
    sink = switchable_sink
    proc = StreamProcessor(pipeline("global"), str(tmp_path / "state"), 2, sink=sink)
    for b in range(2):
        proc(spark.createDataFrame(batches[b].to_pandas(), schema), b)
    after_1 = proc.watermark()
    assert after_1 is not None
    sink.down = True
    with pytest.raises(RuntimeError, match="sink down"):
        proc(spark.createDataFrame(batches[2].to_pandas(), schema), 2)
    assert proc.watermark() == after_1  # batch 2's replay runs at batch 1's output
    sink.down = False
    proc(spark.createDataFrame(batches[2].to_pandas(), schema), 2)
    assert proc.watermark() is not None and proc.watermark() > after_1  # type: ignore[operator]


def test_entry_points_refuse_wrong_arguments_when_called(spark: Any, tmp_path: Path) -> None:
    # Each wrong argument is named when the call is made, not inside a Spark job later
    # (or, for num_partitions=0, silently replaced by the default).
    from tidemark.spark import ReorderStream, reorder

    pipe = pipeline()
    df = spark.createDataFrame(make_events(20), ["device", "ts", "value"])
    with pytest.raises(TypeError, match=r"aggregate\(\) takes a pyspark.sql.DataFrame, got list"):
        aggregate([1, 2], pipe)
    with pytest.raises(TypeError, match=r"aggregate\(\): pipe must be a Pipeline, got str"):
        aggregate(df, "pipe")  # type: ignore[arg-type]
    # A Spark DataFrame handed to a local operator is fetched into this process, its
    # timestamps included (PySpark's own Arrow export fails on them); a streaming one
    # says where it goes instead.
    flink = pipeline(late_rule="flink")  # windows close in the one call
    local = flink.operator().process(df)
    assert local.windows.equals(flink.operator().process(df.toArrow()).windows)
    assert local.windows.num_rows > 0
    stream = spark.readStream.format("rate").load()
    with pytest.raises(TypeError, match="streaming Spark DataFrame: run the pipeline with"):
        pipe.operator().process(stream)
    for kw, name in [
        ({"num_partitions": 0}, "num_partitions"),
        ({"cores": -1}, "cores"),
        ({"order_by": "ts", "batch_rows": 0}, "batch_rows"),
    ]:
        with pytest.raises(tm.ConfigError, match=rf"aggregate\(\): {name} must be an int >= 1"):
            aggregate(df, pipe, **kw)  # type: ignore[arg-type]
    with pytest.raises(tm.ConfigError, match="reorder\\(\\): batch_rows must be an int >= 1"):
        reorder(df, tm.Reorder("ts"), batch_rows=0)
    with pytest.raises(TypeError, match=r"reorder\(\): r must be a Reorder"):
        reorder(df, pipe)  # type: ignore[arg-type]
    state = tmp_path / "state"
    with pytest.raises(TypeError, match="StreamProcessor\\(\\): sink must be a function"):
        StreamProcessor(pipe, state, sink=5)  # type: ignore[arg-type]
    with pytest.raises(tm.ConfigError, match="num_partitions must be an int >= 1, got 0"):
        StreamProcessor(pipe, state, num_partitions=0)
    with pytest.raises(TypeError, match="state_location must be a path"):
        StreamProcessor(pipe, None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="late_sink must be a function"):
        ReorderStream(tm.Reorder("ts"), state, late_sink="table")  # type: ignore[arg-type]
    # A late sink of an operator that drops late rows would only ever get empty tables.
    with pytest.raises(
        tm.ConfigError, match=r'late_sink gets no rows from a r built with late="drop"'
    ):
        ReorderStream(tm.Reorder("ts"), state, late_sink=lambda d, b: None)
    dropping = tm.Pipeline(
        watermark=tm.BoundedOutOfOrderness("0s"),
        key="device",
        event_time="ts",
        window=tm.Tumbling("1m"),
        aggs={"n": tm.count()},
        late="drop",
    )
    with pytest.raises(tm.ConfigError, match="late_sink gets no rows from a pipe"):
        StreamProcessor(dropping, state, late_sink=lambda d, b: None)
    arrival = tm.Pipeline(
        key="device", window=tm.Tumbling("1m"), aggs={"n": tm.count()}, time="processing"
    )
    with pytest.raises(tm.ConfigError, match=r"F.current_timestamp\(\)"):
        StreamProcessor(arrival, state)
    # A pathlib.Path is a state location like its string.
    seen: list[int] = []
    proc = StreamProcessor(pipe, state, num_partitions=2, sink=lambda d, b: seen.append(b))
    proc(df, 0)
    assert seen == [0]
    assert (state / "driver").is_dir()


@pytest.mark.slow(28)
def test_standalone_cluster_uses_both_executors(
    run_job: Callable[..., str], tmp_path: Path
) -> None:
    """A master and two workers started with ``spark-class``: each 500,000-row
    micro-batch of the executor path (raw rows shuffled, or Spark's folds) keeps both
    executors busy, and the windows equal Spark's own ``groupBy``."""
    assert "STANDALONE OK" in run_job("spark_standalone_job.py", tmp_path)


@pytest.mark.parametrize("kind", ["pipeline", "reorder"])
@pytest.mark.parametrize("on_driver", [True, False])
def test_both_drivers_restart_after_a_failed_sink_to_the_uninterrupted_output(
    spark: Any, tmp_path: Path, kind: str, on_driver: bool
) -> None:
    # StreamProcessor and ReorderStream share one micro-batch life cycle: a batch whose
    # sink fails is replayed by a new driver (a restarted query) from the same record,
    # and every batch's outputs, progress and watermark equal an uninterrupted run's,
    # in the driver and in Spark tasks, with Arrow sinks.
    from tidemark.spark import ReorderStream

    batches = stream_batches()
    schema = spark.createDataFrame(batches[0].to_pandas()).schema

    def run(where: Path, fail_at: int | None) -> tuple[dict[int, Any], list[Any]]:
        got: dict[int, Any] = {}
        down = [fail_at]

        def sink(out: pa.Table, batch_id: int) -> None:
            if down[0] == batch_id:
                down[0] = None
                raise RuntimeError("sink down")
            got[batch_id] = out.sort_by([(c, "ascending") for c in out.column_names])

        def driver() -> Any:
            if kind == "pipeline":
                return StreamProcessor(
                    pipeline(), str(where), 2, sink=sink, on_driver=on_driver, arrow_sinks=True
                )
            r = tm.Reorder("ts", late_tolerance="20s")
            return ReorderStream(
                r,
                str(where),
                2,
                sink=sink,
                partition_by=["device"],
                on_driver=on_driver,
                arrow_sinks=True,
            )

        d = driver()
        marks = []
        for b, rows in enumerate(batches):
            df = spark.createDataFrame(rows.to_pandas(), schema)
            try:
                d(df, b)
            except RuntimeError as e:
                assert "sink down" in str(e)
                d = driver()  # the query restarts: Spark replays the batch
                d(df, b)
            marks.append((d.watermark(), d.progress(b)))
        flushed = d.flush(spark, schema)
        got[len(batches)] = flushed.sort_by([(c, "ascending") for c in flushed.column_names])
        return got, marks

    want, want_marks = run(tmp_path / "once", None)
    assert sum(t.num_rows for t in want.values()) > 0
    for fail_at in (3,):
        got, marks = run(tmp_path / f"failed{fail_at}", fail_at)
        assert got == want, f"outputs after a failure at batch {fail_at}"
        assert marks == want_marks, f"progress and watermarks after a failure at {fail_at}"


def test_a_source_spark_cannot_size_runs_in_one_task_after_a_small_micro_batch(
    spark: Any, tmp_path: Path
) -> None:
    """A ``rate-micro-batch`` source has no size estimate (as Kafka): the first
    micro-batch is shuffled; each later one is sized by the last one's rows, and runs
    in one task while those are few, shuffled once they are many. The windows and
    watermarks are those of every micro-batch shuffled."""
    from tidemark.spark._layout import SINGLE_TASK_BYTES
    from tidemark.spark._sizing import estimated_bytes, row_bytes

    def stream(rows: int) -> Any:
        return (
            spark.readStream.format("rate-micro-batch")
            .option("rowsPerBatch", rows)
            .option("numPartitions", 2)
            .load()
            .selectExpr(
                "concat('d', pmod(xxhash64(value, 1), 50)) AS device",
                "timestamp_micros(1767225600000000 + value * 10000) AS ts",
            )
        )

    pipe = tm.Pipeline(
        key="device",
        event_time="ts",
        window=tm.Tumbling("10s"),
        aggs={"n": tm.count()},
        watermark=tm.BoundedOutOfOrderness("2s", per="key"),
    )

    def run(name: str, rows: int, batches: int, **kw: Any) -> tuple[list, list, list]:
        got: list[tuple] = []
        layouts: list[str] = []
        marks: list[Any] = []
        sizes: list[int | None] = []
        proc = StreamProcessor(
            pipe,
            str(tmp_path / name / "state"),
            3,
            sink=lambda df, b: got.extend(
                tuple(r)
                for r in df.selectExpr("device", "unix_seconds(window_start)", "n").collect()
            ),
            on_driver=False,
            # The raw rows' layout (by default Spark folds a micro-batch it cannot size).
            preaggregate=False,
            **kw,
        )

        def each(df: Any, batch_id: int) -> None:
            sizes.append(estimated_bytes(df))
            proc(df, batch_id)
            assert proc.last_progress is not None
            layouts.append(proc.last_progress["layout"])
            marks.append(proc.last_progress["next_watermark"])

        q = (
            stream(rows)
            .writeStream.foreachBatch(each)
            .option("checkpointLocation", str(tmp_path / name / "chk"))
            .trigger(processingTime="0 seconds")
            .start()
        )
        try:
            while len(layouts) < batches:
                assert q.exception() is None, q.exception()
                q.awaitTermination(0.05)
        finally:
            q.stop()
        assert sizes[:batches] == [None] * batches  # Spark cannot size the source
        return sorted(got), layouts[:batches], marks[:batches]

    few = 2_000
    got, layouts, marks = run("few", few, 4)
    assert layouts == ["shuffled", "one task", "one task", "one task"]
    want, shuffled, want_marks = run("shuffled", few, 4, shuffle=True)
    assert shuffled == ["shuffled"] * 4

    # 20 s of event time a micro-batch: the windows before 50 s closed within the first
    # 4 in both runs (a stopped query may have run more, closing later ones).
    def early(windows: list) -> list:
        return [w for w in windows if w[1] < 1767225600 + 50]

    assert len(early(want)) == 50 * 5 and early(got) == early(want)
    assert marks == want_marks
    # Many rows: the last micro-batch's rows at Spark's width are above the bound.
    many = SINGLE_TASK_BYTES // row_bytes(stream(1).schema) + 1
    _, layouts, _ = run("many", many, 2)
    assert layouts == ["shuffled", "shuffled"]
