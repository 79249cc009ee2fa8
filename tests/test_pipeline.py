"""The Pipeline API: configuration, outputs, aggregates, scopes, emit modes, state."""

from __future__ import annotations

import datetime as dt
import math
import pickle
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tidemark as tm
from tidemark_tools.datagen import StreamSpec, batches, multi_tenant_stream

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)


def events(rows: list[tuple[str, float, float]], unit: str = "us") -> pa.Table:
    """rows: (device, seconds after T0, value)."""
    base = int(T0.timestamp() * 1_000_000)
    us = [base + int(s * 1_000_000) for _, s, _ in rows]
    div = {"s": 1_000_000, "ms": 1_000, "us": 1, "ns": 1}[unit]
    mul = 1_000 if unit == "ns" else 1
    return pa.table(
        {
            "device_id": [r[0] for r in rows],
            "event_time": pa.array([u // div * mul for u in us], pa.timestamp(unit, tz="UTC")),
            "value": pa.array([r[2] for r in rows], pa.float64()),
        }
    )


def simple(**kw: object) -> tm.Pipeline:
    args: dict = dict(
        key="device_id",
        event_time="event_time",
        watermark=tm.BoundedOutOfOrderness("5s", per="key"),
        window=tm.Tumbling("10s"),
        aggs={"count": tm.count(), "sum": tm.sum("value")},
        # These tests pin windows that close in the call whose rows move the watermark
        # past them (Flink's timing; the default, Spark's, emits them a call later:
        # tests/test_late_rules.py).
        late_rule="flink",
    )
    args.update(kw)
    return tm.Pipeline(**args)  # type: ignore[arg-type]


def test_issue_example_pipeline() -> None:
    pipe = tm.Pipeline(
        key="device_id",
        event_time="event_time",
        event_time_type=None,
        watermark=tm.BoundedOutOfOrderness("5s", per="key", idle_timeout="60s"),
        window=tm.Tumbling("10s"),
        aggs={"count": tm.count(), "sum": tm.sum("value"), "p": tm.mean("value")},
        emit="on_window_close",
        allowed_lateness="0s",
        late="side_output",
        clock=None,
        # The seed's example closes the window in the call that moves the watermark
        # past it: Flink's timing (Spark's, the default, emits it at the next call).
        late_rule="flink",
    )
    op = pipe.operator()
    out = op.process(events([("a", 1, 1.0), ("a", 2, 3.0), ("a", 20, 5.0)]))
    assert out.windows.column_names == [
        "device_id",
        "window_start",
        "window_end",
        "count",
        "sum",
        "p",
    ]
    assert out.windows.to_pylist() == [
        {
            "device_id": "a",
            "window_start": T0,
            "window_end": T0 + dt.timedelta(seconds=10),
            "count": 2,
            "sum": 4.0,
            "p": 2.0,
        }
    ]
    assert isinstance(out.late, pa.Table) and isinstance(out.errors, pa.Table)
    m = op.metrics()
    assert m["windows_emitted"] == 1 and m["rows_in"] == 3 and m["late_dropped_count"] == 0
    assert op.watermark == int((T0 + dt.timedelta(seconds=15)).timestamp() * 1_000_000)
    assert op.watermark_datetime() == T0 + dt.timedelta(seconds=15)


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"window": tm.Tumbling("ten seconds")}, tm.ConfigError, "window.size"),
        ({"window": tm.Tumbling(dt.timedelta(0))}, tm.ConfigError, "positive"),
        ({"window": tm.Tumbling("1 month")}, tm.ConfigError, "no fixed length"),
        ({"window": tm.Sliding("5s", every="10s")}, tm.ConfigError, "slide"),
        ({"window": "10s"}, tm.ConfigError, "tm.Tumbling"),
        ({"event_time_type": "unix_days"}, tm.UnknownEventTimeTypeError, "registered types"),
        ({"aggs": {}}, tm.ConfigError, "non-empty"),
        ({"aggs": {"x": "sum"}}, tm.ConfigError, "aggregate"),
        ({"aggs": {"window_end": tm.count()}}, tm.ConfigError, "appears twice"),
        ({"aggs": {"device_id": tm.count()}}, tm.ConfigError, "appears twice"),
        ({"aggs": {"m": tm.Agg("median", "value")}}, tm.ConfigError, "unknown aggregate"),
        ({"aggs": {"m": tm.Agg("mean")}}, tm.ConfigError, "needs a column"),
        ({"emit": "always"}, tm.ConfigError, "on_window_close"),
        ({"late": "keep"}, tm.ConfigError, "side_output"),
        ({"allowed_lateness": "-1s"}, tm.ConfigError, "negative"),
        ({"key": None}, tm.ConfigError, "needs key columns"),
        ({"key": ["a", "a"]}, tm.ConfigError, "twice"),
        ({"key": "window_start"}, tm.ConfigError, "name of an output column"),
        ({"key": ["d", "retract"], "emit": "on_update"}, tm.ConfigError, "window_end, retract"),
        ({"max_keys": 0}, tm.ConfigError, "max_keys"),
        ({"eviction": "random"}, tm.ConfigError, "eviction"),
        ({"time": "wall"}, tm.ConfigError, "processing"),
    ],
)
def test_configuration_mistakes_fail_in_pipeline(kwargs: dict, exc: type, match: str) -> None:
    with pytest.raises(exc, match=match):
        simple(**kwargs)


def test_reprs_summarise_instead_of_printing_tables() -> None:
    op = simple().operator()
    out = op.process(events([("a", 1, 1.0), ("a", 30, 2.0), ("b", 2, 3.0)]))
    assert repr(out) == "Output(windows=1 rows, late=0 rows, errors=0 rows)"
    assert repr(op).startswith("Operator(Pipeline(key=['device_id']")
    # The watermark's delay shows (it printed only its scope).
    assert "watermark=BoundedOutOfOrderness(delay=" in repr(op.pipeline)
    assert repr(tm.BoundedOutOfOrderness("2s", per="key")) == (
        "BoundedOutOfOrderness(delay='2s', per='key')"
    )
    assert repr(tm.BoundedOutOfOrderness("5us", per="partition", idle_timeout="30s")) == (
        "BoundedOutOfOrderness(delay='5us', per='partition', idle_timeout='30s', "
        "partition_column='partition')"
    )
    assert "keys=2, windows_open=2" in repr(op)


def test_a_lazy_frame_is_refused_with_what_to_do() -> None:
    lazy = pl.from_arrow(events([("a", 1, 1.0)])).lazy()  # type: ignore[union-attr]
    with pytest.raises(TypeError, match=r"got LazyFrame; call \.collect\(\) on it first"):
        simple().operator().process(lazy)
    assert simple().operator().process(lazy.collect()).errors.num_rows == 0


def test_spark_interval_strings_are_durations() -> None:
    """The durations a Spark user writes for ``window`` and ``withWatermark`` mean what
    they mean there: the same windows as the short forms."""
    batch = events([("a", 1, 1.0), ("a", 12, 2.0), ("b", 65, 3.0), ("a", 200, 4.0)])
    short = simple(
        watermark=tm.BoundedOutOfOrderness("5s"),
        window=tm.Sliding("1m", every="30s"),
        allowed_lateness="1m30s",
    )
    spark_style = simple(
        watermark=tm.BoundedOutOfOrderness("5 seconds"),
        window=tm.Sliding("1 minute", every="interval 30 Seconds"),
        allowed_lateness="1 minute 30 seconds",
    )
    assert spark_style.config == short.config
    got = spark_style.operator().process(batch).windows
    assert got.equals(short.operator().process(batch).windows)
    # The watermark (195 s) less the allowed lateness (90 s) closes every window ending
    # by 105 s: a's [-30, 30) and [0, 60), b's [30, 90).
    assert got.column("count").to_pylist() == [2, 2, 1]


def test_watermark_scope_is_checked() -> None:
    with pytest.raises(tm.ConfigError, match="per="):
        tm.BoundedOutOfOrderness("5s", per="keys")


def test_schema_is_checked_when_given() -> None:
    schema = events([("a", 0, 1)]).schema
    simple(schema=schema)
    with pytest.raises(tm.MissingColumnError, match=r'"device".*available columns: device_id'):
        simple(key="device", schema=schema)
    with pytest.raises(tm.MissingColumnError, match='"amount"'):
        simple(aggs={"s": tm.sum("amount")}, schema=schema)
    with pytest.raises(tm.ConfigError, match="integer or float"):
        simple(aggs={"s": tm.sum("device_id")}, schema=schema)
    with pytest.raises(tm.ConfigError, match="must be an Arrow timestamp"):
        simple(
            schema=pa.schema(
                [("device_id", pa.string()), ("event_time", pa.int64()), ("value", pa.float64())]
            )
        )
    # Without a schema, the same mistake is reported at the first batch.
    with pytest.raises(tm.MissingColumnError):
        simple(key="device").operator().process(events([("a", 0, 1)]))


def test_output_types_follow_the_input() -> None:
    for unit in ["s", "ms", "us", "ns"]:
        out = simple().operator().process(events([("a", 1, 1), ("a", 40, 1)], unit=unit))
        assert out.windows.schema.field("window_start").type == pa.timestamp(unit, tz="UTC")
        assert out.windows.column("window_start")[0].as_py() == T0
    ints = pa.table({"d": pa.array([7, 7], pa.int16()), "ts": [1_000, 60_000], "v": [1, 2]})
    pipe = tm.Pipeline(
        watermark=tm.BoundedOutOfOrderness("0s"),
        key="d",
        event_time="ts",
        event_time_type="unixtimestamp_ms",
        window=tm.Tumbling("10s"),
        aggs={"s": tm.sum("v"), "mx": tm.max("v")},
        late_rule="flink",
    )
    out = pipe.operator().process(ints)
    assert out.windows.schema == pipe.output_schema(ints.schema)
    assert out.windows.schema.field("d").type == pa.int16()
    assert out.windows.schema.field("window_end").type == pa.timestamp("us", tz="UTC")
    assert out.windows.schema.field("s").type == pa.int64()
    assert out.windows.schema.field("mx").type == pa.int64()
    assert out.windows.to_pylist()[0]["s"] == 1


def test_key_types_round_trip() -> None:
    table = pa.table(
        {
            "region": pa.array(["eu", "eu", "us"]).dictionary_encode(),
            "id": pa.array([1, 1, 2], pa.uint8()),
            "name": pa.array(["x", "x", "y"], pa.large_string()),
            "ts": pa.array([1, 2, 3], pa.timestamp("us")),
            "v": [1, 2, 3],
        }
    )
    pipe = tm.Pipeline(
        watermark=tm.BoundedOutOfOrderness("0s"),
        key=["region", "id", "name"],
        event_time="ts",
        window=tm.Tumbling("1s"),
        aggs={"n": tm.count()},
    )
    out = pipe.operator().flush()
    op = pipe.operator()
    op.process(table)
    out = op.flush()
    assert out.windows.schema.field("region").type == pa.dictionary(pa.int32(), pa.string())
    assert out.windows.schema.field("id").type == pa.uint8()
    assert out.windows.schema.field("name").type == pa.large_string()
    assert out.windows.schema.field("window_start").type == pa.timestamp("us")
    assert out.windows.select(["region", "id", "name", "n"]).to_pylist() == [
        {"region": "eu", "id": 1, "name": "x", "n": 2},
        {"region": "us", "id": 2, "name": "y", "n": 1},
    ]


def test_a_stream_goes_on_across_arrow_layouts_and_refuses_other_values() -> None:
    """pyarrow gives strings, polars string views, Spark large strings under one
    setting, a Parquet reader dictionaries: one stream may mix them, and a restart may
    run in another time zone. Other values (floats for a mean of integers) are an
    error that names the aggregate and changes nothing."""
    first = events([("a", 1, 1), ("b", 2, 2)])
    polars = pl.from_arrow(events([("a", 12, 3), ("b", 14, 4)]))
    assert isinstance(polars, pl.DataFrame)
    as_dict = events([("a", 25, 5), ("b", 21, 6)])
    as_dict = as_dict.set_column(0, "device_id", as_dict.column(0).dictionary_encode())
    paris = events([("a", 38, 7)]).cast(
        pa.schema(
            [
                ("device_id", pa.large_string()),
                ("event_time", pa.timestamp("ms", tz="Europe/Paris")),
                ("value", pa.float64()),
            ]
        )
    )
    same = [
        first,
        *(
            events(r)
            for r in ([("a", 12, 3), ("b", 14, 4)], [("a", 25, 5), ("b", 21, 6)], [("a", 38, 7)])
        ),
    ]

    def windows(batches: list[Any]) -> list[dict[str, Any]]:
        op = simple().operator()
        outs = [op.process(b).windows for b in batches[:2]]
        op = simple().operator(state=op.snapshot())  # restored between layouts
        outs += [op.process(b).windows for b in batches[2:]] + [op.flush().windows]
        return [r for w in outs for r in w.to_pylist()]

    got = windows([first, polars, as_dict, paris])
    assert got == windows(same)
    assert sum(r["count"] for r in got) == 7

    op = simple(aggs={"avg": tm.mean("value")}).operator()
    ints = events([("a", 1, 1)]).set_column(2, "value", pa.array([1], pa.int64()))
    op.process(ints)
    with pytest.raises(tm.ConfigError, match='aggregate "avg" reads column "value"'):
        op.process(events([("a", 2, 2.5)]))
    op.process(events([("a", 3, 3)]).set_column(2, "value", pa.array([3], pa.int64())))
    assert op.flush().windows.column("avg").to_pylist() == [2.0]


def test_aggregates_match_polars() -> None:
    rng = np.random.default_rng(5)
    n = 5_000
    keys = rng.choice(["a", "b", "c", "d"], n)
    secs = rng.uniform(0, 60, n)
    vals = rng.normal(100, 15, n)
    vals[rng.random(n) < 0.05] = np.nan
    table = events([(k, s, v) for k, s, v in zip(keys, secs, vals, strict=True)])
    table = table.set_column(
        2, "value", pc.if_else(pc.is_nan(table["value"]), None, table["value"])
    )
    pipe = simple(
        window=tm.Tumbling("10s"),
        aggs={
            "n": tm.count(),
            "nv": tm.count("value"),
            "s": tm.sum("value"),
            "lo": tm.min("value"),
            "hi": tm.max("value"),
            "avg": tm.mean("value"),
            "var": tm.variance("value"),
            "sd": tm.stddev("value"),
            "sdp": tm.stddev("value", ddof=0),
            "first": tm.first("value"),
            "last": tm.last("value"),
        },
    )
    op = pipe.operator()
    closed = op.process(table).windows
    got = pl.from_arrow(pa.concat_tables([closed, op.flush().windows])).sort(
        ["device_id", "window_start"]
    )
    df = pl.from_arrow(table).with_columns(
        pl.col("event_time").dt.truncate("10s").alias("window_start")
    )
    want = (
        df.sort("event_time")
        .group_by(["device_id", "window_start"])
        .agg(
            pl.len().alias("n"),
            pl.col("value").count().alias("nv"),
            pl.col("value").sum().alias("s"),
            pl.col("value").min().alias("lo"),
            pl.col("value").max().alias("hi"),
            pl.col("value").mean().alias("avg"),
            pl.col("value").var().alias("var"),
            pl.col("value").std().alias("sd"),
            pl.col("value").std(ddof=0).alias("sdp"),
            pl.col("value").drop_nulls().first().alias("first"),
            pl.col("value").drop_nulls().last().alias("last"),
        )
        .sort(["device_id", "window_start"])
    )
    assert got["n"].to_list() == want["n"].to_list()
    assert got["nv"].to_list() == want["nv"].to_list()
    for c in ["s", "lo", "hi", "avg", "var", "sd", "sdp", "first", "last"]:
        for a, b in zip(got[c].to_list(), want[c].to_list(), strict=True):
            assert math.isclose(a, b, rel_tol=1e-9), (c, a, b)


def test_float_sums_are_exact_and_overflow_to_infinity_not_nan() -> None:
    # Exact in any order; a sum beyond the double range is inf, as Spark's and
    # Python's sum give, never NaN.
    big = 1.7976931348623157e308
    cases = {
        "cancel": [1e100, 1.0, -1e100],
        "overflow": [1e308, 1e308],
        "negative_overflow": [-big, -big, 1.0],
        "top": [big, -big, big],
    }
    rows = [(k, 1.0, v) for k, vals in cases.items() for v in vals]
    want = {"cancel": 1.0, "overflow": math.inf, "negative_overflow": -math.inf, "top": big}
    for order in (rows, rows[::-1]):
        op = simple(aggs={"sum": tm.sum("value")}).operator()
        op.process(events(order))
        out = op.flush().windows
        got = dict(zip(out["device_id"].to_pylist(), out["sum"].to_pylist(), strict=True))
        assert got == want


def test_decimal_aggregates_are_exact_typed_as_spark_and_survive_snapshots() -> None:
    import decimal

    D = decimal.Decimal
    rng = np.random.default_rng(11)
    n = 600
    keys = rng.choice(["a", "b", "c"], n).tolist()
    secs = rng.uniform(0, 30, n).tolist()
    amounts = [
        None if i % 17 == 0 else D(int(v)).scaleb(-2)
        for i, v in enumerate(rng.integers(-(10**9), 10**9, n))
    ]
    table = pa.table(
        {
            "device_id": keys,
            "event_time": pa.array(
                [T0 + dt.timedelta(seconds=s) for s in secs], pa.timestamp("us", tz="UTC")
            ),
            "amount": pa.array(amounts, pa.decimal128(12, 2)),
        }
    )
    aggs = {
        "total": tm.sum("amount"),
        "avg": tm.mean("amount"),
        "lo": tm.min("amount"),
        "hi": tm.max("amount"),
        "first": tm.first("amount"),
    }
    # No row is late in any order (30 s of events, 1 h bounded delay).
    pipe = simple(window=tm.Tumbling("10s"), aggs=aggs, watermark=tm.BoundedOutOfOrderness("1h"))
    schema = pipe.output_schema(table.schema)
    assert schema.field("total").type == pa.decimal128(22, 2)
    assert schema.field("avg").type == pa.decimal128(16, 6)
    assert schema.field("lo").type == pa.decimal128(12, 2)

    def run(t: pa.Table, snapshot_between: bool) -> list[dict[str, Any]]:
        op = pipe.operator()
        half = t.num_rows // 2
        op.process(t.slice(0, half))
        if snapshot_between:  # the partial sums travel through a snapshot
            op = pipe.operator(state=op.snapshot())
        op.process(t.slice(half))
        return sorted(
            op.flush().windows.to_pylist(), key=lambda r: (r["device_id"], r["window_start"])
        )

    got = run(table, snapshot_between=True)
    shuffled = table.take(pa.array(rng.permutation(n)))
    assert run(shuffled, snapshot_between=False) == got  # exact: any row order
    want: dict[tuple[str, dt.datetime], list[tuple[float, D]]] = {}
    for k, s, a in zip(keys, secs, amounts, strict=True):
        start = T0 + dt.timedelta(seconds=10 * (s // 10))
        if a is not None:
            want.setdefault((k, start), []).append((s, a))
    assert len(got) == len(want)
    for r in got:
        vals = want[(r["device_id"], r["window_start"])]
        xs = [a for _, a in vals]
        total = sum(xs, D(0))
        assert r["total"] == total
        mean = (total / len(xs)).quantize(D("0.000001"), rounding=decimal.ROUND_HALF_UP)
        assert r["avg"] == mean
        assert (r["lo"], r["hi"]) == (min(xs), max(xs))
        assert r["first"] == min(vals)[1]
    # polars Decimal columns are Arrow decimals: the same windows.
    frame = pl.from_arrow(table)
    op = pipe.operator()
    op.process(frame)
    from_polars = sorted(
        op.flush().windows.to_pylist(), key=lambda r: (r["device_id"], r["window_start"])
    )
    assert from_polars == got
    # Types a sum cannot read are still clear errors.
    wide = table.set_column(2, "amount", table["amount"].cast(pa.decimal256(40, 2)))
    with pytest.raises(tm.ConfigError, match="cannot read a Decimal256"):
        pipe.operator().process(wide)


def test_sliding_and_session_windows() -> None:
    rows = [("a", 1, 1), ("a", 7, 2), ("a", 30, 4)]
    pipe = simple(window=tm.Sliding("10s", every="5s"), watermark=tm.BoundedOutOfOrderness("0s"))
    op = pipe.operator()
    closed = op.process(events(rows)).windows
    out = pl.from_arrow(pa.concat_tables([closed, op.flush().windows]))
    starts = sorted(
        (int((r["window_start"] - T0).total_seconds()), r["count"])
        for r in out.iter_rows(named=True)
    )
    assert starts == [(-5, 1), (0, 2), (5, 1), (25, 1), (30, 1)]

    sess = simple(window=tm.Session(gap="5s"), watermark=tm.BoundedOutOfOrderness("0s"))
    op = sess.operator()
    out = op.process(events([("a", 0, 1), ("a", 3, 1), ("a", 20, 1)])).windows
    assert [(r["window_end"] - T0).total_seconds() for r in out.to_pylist()] == [8.0]
    assert op.metrics()["sessions_closed_by_timer"] == 1


def test_late_rows_side_output_drop_and_allowed_lateness() -> None:
    pipe = simple(watermark=tm.BoundedOutOfOrderness("0s"), late_rule="row")
    op = pipe.operator()
    op.process(events([("a", 50, 1)]))
    out = op.process(events([("a", 10, 2), ("a", 55, 3)]))
    assert out.late.num_rows == 1 and out.late.column("value").to_pylist() == [2.0]
    assert out.late.schema == events([("a", 0, 0)]).schema
    dropped = simple(
        watermark=tm.BoundedOutOfOrderness("0s"), late="drop", late_rule="row"
    ).operator()
    dropped.process(events([("a", 50, 1)]))
    out = dropped.process(events([("a", 10, 2)]))
    assert out.late.num_rows == 0 and dropped.metrics()["late_dropped_count"] == 1
    lenient = simple(
        watermark=tm.BoundedOutOfOrderness("0s"), allowed_lateness="10s", late_rule="row"
    ).operator()
    lenient.process(events([("a", 15, 1)]))
    out = lenient.process(events([("a", 7, 1), ("a", 4, 1)]))  # W=15: 7 >= 15-10 accepted, 4 late
    assert out.late.num_rows == 1
    out = lenient.process(events([("a", 21, 1)]))  # W=21 >= 10 + 10: [0,10) closes now
    assert out.windows.to_pylist()[0]["count"] == 1


def test_error_rows_never_abort() -> None:
    table = pa.table(
        {
            "device_id": ["a", "a", "b"],
            "event_time": ["1970-01-01T00:00:01Z", "not a time", None],
            "value": [1.0, 2.0, 3.0],
        }
    )
    op = simple(event_time_type="iso8601").operator()
    out = op.process(table)
    assert out.errors.column_names == ["device_id", "event_time", "value", "reason"]
    assert out.errors.column("reason").to_pylist() == [
        'cannot parse "not a time" as an ISO 8601 timestamp',
        "event time is null",
    ]
    assert op.metrics()["rows_error"] == 2
    assert op.flush().windows.num_rows == 1


def test_user_registered_event_time_type() -> None:
    tm.register_event_time_type(
        "tenths", lambda a: pc.multiply(pc.cast(a, pa.int64()), 100_000), replace=True
    )
    pipe = simple(event_time_type="tenths", watermark=tm.BoundedOutOfOrderness("0s"))
    op = pipe.operator()
    out = op.process(
        pa.table({"device_id": ["a", "a"], "event_time": [5, 250], "value": [1.0, 2.0]})
    )
    assert out.windows.to_pylist()[0]["count"] == 1
    # The parsed times travel with the rows to the cores (and through an inner lookup).
    rows = pa.table(
        {
            "device_id": [f"d{i % 7}" for i in range(60)],
            "event_time": [(i * 37) % 400 for i in range(60)],
            "value": [float(i) for i in range(60)],
        }
    )
    for p in (
        pipe,
        pipe.enrich(
            pa.table({"device_id": ["d1", "d2", "d3"], "w": [1, 2, 3]}), "device_id", "inner"
        ),
    ):
        one, many = p.operator(), p.operator(cores=3)
        assert one.process(rows).windows.equals(many.process(rows).windows)
        assert one.flush().windows.equals(many.flush().windows)
    assert pipe.output_schema(
        pa.schema([("device_id", pa.string()), ("event_time", pa.int64()), ("value", pa.float64())])
    ).field("window_start").type == pa.timestamp("us", tz="UTC")


def test_on_update_emits_a_changelog() -> None:
    op = simple(emit="on_update", watermark=tm.BoundedOutOfOrderness("0s")).operator()
    out = op.process(events([("a", 1, 1), ("a", 2, 1)]))
    assert out.windows.column_names[-1] == "retract"
    assert out.windows.select(["count", "retract"]).to_pylist() == [{"count": 2, "retract": False}]
    out = op.process(events([("a", 3, 1), ("b", 30, 1)]))
    assert out.windows.select(["device_id", "count"]).to_pylist() == [
        {"device_id": "a", "count": 3},
        {"device_id": "b", "count": 1},
    ]
    assert op.flush().windows.num_rows == 0, "every value was emitted already"
    assert op.metrics()["updates_emitted"] == 3


@pytest.mark.parametrize(
    ("window", "emit", "per"),
    [
        (tm.Tumbling("10s"), "on_window_close", "key"),
        (tm.Sliding("30s", every="10s"), "on_window_close", "global"),
        (tm.Session(gap="20s"), "on_update", "key"),
    ],
)
def test_unordered_output_has_the_same_rows(window: Any, emit: str, per: str) -> None:
    from collections import Counter

    stream = multi_tenant_stream(StreamSpec(keys=20, events=4_000, duration_s=600, seed=5))
    pipe = simple(
        key="tenant",
        window=window,
        emit=emit,
        watermark=tm.BoundedOutOfOrderness("5s", per=per),
        aggs={"count": tm.count(), "sum": tm.sum("value"), "hi": tm.max("value")},
    )
    ordered, free = pipe.operator(), pipe.operator(ordered=False)
    reordered = 0
    for a, b in [(ordered.process(p), free.process(p)) for p in batches(stream, 500)] + [
        (ordered.flush(), free.flush())
    ]:
        assert b.windows.schema == a.windows.schema
        rows_a, rows_b = a.windows.to_pylist(), b.windows.to_pylist()
        assert Counter(tuple(r.values()) for r in rows_b) == Counter(
            tuple(r.values()) for r in rows_a
        )
        reordered += rows_a != rows_b
        if emit == "on_update":
            # A call's retractions come before its updates, in either order.
            flags = [r["retract"] for r in rows_b]
            assert flags == sorted(flags, reverse=True)
        assert b.late.equals(a.late) and b.errors.equals(a.errors)
    assert reordered, "ordered=False returned every call's windows sorted"
    assert free.metrics() == ordered.metrics()


def test_ordered_must_be_a_bool() -> None:
    with pytest.raises(tm.ConfigError, match="ordered must be True or False"):
        simple().operator(ordered="no")  # type: ignore[arg-type]
    with pytest.raises(tm.ConfigError, match="ordered must be True or False"):
        simple().operator(cores=2, ordered=None)  # type: ignore[arg-type]
    # Any operator accepts ordered=False (several cores return their merged order).
    events_ = events([("a", 1, 1.0), ("b", 2, 2.0), ("a", 30, 3.0)])
    want = simple().operator().process(events_).windows
    got = simple().operator(cores=2, ordered=False).process(events_).windows
    assert got.sort_by("device_id").equals(want.sort_by("device_id"))


def test_partition_scope_with_idle_partitions() -> None:
    clock = tm.ManualClock()
    pipe = simple(
        watermark=tm.BoundedOutOfOrderness(
            "0s", per="partition", idle_timeout="1s", idleness="clock"
        ),
        clock=clock,
    )

    def part(rows: list[tuple[int, str, float]]) -> pa.Table:
        t = events([(d, s, 1.0) for _, d, s in rows])
        return t.append_column("partition", pa.array([p for p, _, _ in rows], pa.int32()))

    op = pipe.operator()
    out = op.process(part([(0, "a", 1), (1, "b", 40)]))
    assert out.windows.num_rows == 0, "partition 0 holds the watermark at 1s"
    clock.advance(1_001)
    out = op.process(part([(1, "b", 45)]))
    assert out.windows.column("device_id").to_pylist() == ["a"], "partition 0 idle"


def test_snapshot_restore_and_corruption() -> None:
    pipe = simple()
    op = pipe.operator()
    op.process(events([("a", 1, 1), ("b", 2, 2)]))
    blob = op.snapshot()
    restored = pipe.operator(state=blob)
    assert restored.flush().windows.to_pylist() == op.flush().windows.to_pylist()
    with pytest.raises(tm.StateCorruptedError, match="checksum"):
        pipe.operator(state=blob[:-5] + b"xxxxx")
    with pytest.raises(tm.StateCorruptedError, match="truncated"):
        pipe.operator(state=blob[:20])
    with pytest.raises(tm.StateCorruptedError, match="different configuration"):
        simple(window=tm.Tumbling("20s")).operator(state=blob)


def test_pipelines_pickle_for_spark() -> None:
    pipe = simple()
    clone = pickle.loads(pickle.dumps(pipe))
    assert clone.config == pipe.config
    op = clone.operator()
    assert op.process(events([("a", 1, 1), ("a", 99, 1)])).windows.num_rows == 1
    with pytest.raises(TypeError, match="clock"):
        pickle.dumps(simple(clock=tm.ManualClock()))


def test_keyed_scope_keeps_delayed_tenants() -> None:
    """Per-key watermarks keep >= 99% of events where a global one loses a large share."""
    stream = multi_tenant_stream(StreamSpec(keys=200, events=100_000, duration_s=1_800))
    kept = {}
    for per in ["global", "key"]:
        op = tm.Pipeline(
            key="tenant",
            event_time="event_time",
            watermark=tm.BoundedOutOfOrderness("5s", per=per),
            window=tm.Tumbling("1m"),
            aggs={"n": tm.count()},
            late="drop",
        ).operator()
        counted = 0
        for b in batches(stream, 5_000):
            counted += pc.sum(op.process(b).windows["n"]).as_py() or 0
        counted += pc.sum(op.flush().windows["n"]).as_py() or 0
        kept[per] = counted / stream.num_rows
    assert kept["key"] >= 0.99
    # A global watermark (Spark's rule, as Spark itself) loses about a fifth.
    assert kept["global"] < 0.85


def test_timer_service() -> None:
    ts = tm.TimerService()
    assert ts.register(30, ("dev", 1), namespace=2)
    assert not ts.register(30, ("dev", 1), namespace=2)
    ts.register(10, "x")
    ts.register(10, "a", kind="processing")
    assert ts.timers() == [(10, "x", 0), (30, ("dev", 1), 2)]
    assert ts.advance_watermark(20) == [(10, "x", 0)]
    assert ts.advance_watermark(20) == []
    assert ts.advance_processing_time(10) == [(10, "a", 0)]
    restored = tm.TimerService.restore(ts.snapshot())
    assert restored.timers() == [(30, ("dev", 1), 2)]
    assert restored.watermark == 20
    assert restored.delete(30, ("dev", 1), 2)
    assert len(restored) == 0
    with pytest.raises(tm.StateCorruptedError):
        tm.TimerService.restore(b"garbage")
    for call in (restored.register, restored.delete):
        with pytest.raises(tm.ConfigError, match='timer domain "wall"'):
            call(1, "x", kind="wall")
    assert repr(restored) == "TimerService(event=0, processing=0, watermark=20)"


@pytest.mark.parametrize("idleness", ["clock", "event_time"])
def test_state_ttl_bounds_state_of_keys_that_stop_reporting(idleness: str) -> None:
    clock = tm.ManualClock(0)
    pipe = tm.Pipeline(
        key="device",
        event_time="ts",
        event_time_type="unixtimestamp_ms",
        watermark=tm.BoundedOutOfOrderness("1s", per="key", idleness=idleness),
        window=tm.Tumbling("10s"),
        aggs={"n": tm.count()},
        state_ttl="1m",
        clock=clock,
    )
    op = pipe.operator()
    op.process(pa.table({"device": ["gone", "alive"], "ts": [1_000, 1_000]}))
    emitted = []
    for step in range(1, 4):
        clock.advance(40_000)
        out = op.process(pa.table({"device": ["alive"], "ts": [1_000 + step * 40_000]}))
        emitted.append([r["device"] for r in out.windows.to_pylist()].count("gone"))
    # "gone" had no rows for 80 s > 1 min (on the clock: after the second step; in event
    # time: the stream's time was 81 s as the third began): dropped, its open window
    # emitted early, once.
    assert emitted == ([0, 1, 0] if idleness == "clock" else [0, 0, 1])
    m = op.metrics()
    assert (m["keys_expired"], m["windows_expired"], m["keys"]) == (1, 1, 1)
    with pytest.raises(tm.ConfigError, match="state_ttl"):
        tm.Pipeline(
            watermark=tm.BoundedOutOfOrderness("0s"),
            key="device",
            event_time="ts",
            event_time_type="unixtimestamp_ms",
            window=tm.Tumbling("10s"),
            aggs={"n": tm.count()},
            state_ttl="0s",
        )


LOOKUP = pa.table(
    {"device": pa.array([1, 2, 3], pa.int64()), "site": ["n", "s", "n"], "w": [1.0, 2.0, 3.0]}
)


def _enrich_pipe(how: str = "left", null_keys: str = "group") -> tm.Pipeline:
    return tm.Pipeline(
        key="lk_site",
        event_time="ts",
        event_time_type="unixtimestamp_ms",
        watermark=tm.BoundedOutOfOrderness("1s"),
        window=tm.Tumbling("10s"),
        aggs={"n": tm.count(), "w": tm.sum("lk_w")},
        null_keys=null_keys,  # type: ignore[arg-type]
    ).enrich(LOOKUP, on="device", how=how, prefix="lk_")


def _events() -> pa.Table:
    return pa.table(
        {
            "device": pa.array([1, 2, 3, 4, 1], pa.int32()),  # 4: no lookup row
            "ts": [1_000, 2_000, 3_000, 4_000, 5_000],
        }
    )


@pytest.mark.parametrize("cores", [1, 3])
def test_enrich_joins_each_row_with_the_lookup_table(cores: int) -> None:
    left = _enrich_pipe("left").operator(cores=cores)
    left.process(_events())
    rows = {(r["lk_site"], r["n"], r["w"]) for r in left.flush().windows.to_pylist()}
    assert rows == {("n", 3, 5.0), ("s", 1, 2.0), (None, 1, None)}
    # By default a row the lookup left without a key is an error row.
    strict = _enrich_pipe("left", null_keys="error").operator(cores=cores)
    out = strict.process(_events())
    assert out.errors.column("device").to_pylist() == [4]
    assert out.errors.column("reason").to_pylist() == [
        'key column "lk_site" is null (null_keys="error"; "group" keeps such rows as one key)'
    ]
    inner = _enrich_pipe("inner").operator(cores=cores)
    inner.process(_events())
    rows = {(r["lk_site"], r["n"], r["w"]) for r in inner.flush().windows.to_pylist()}
    assert rows == {("n", 3, 5.0), ("s", 1, 2.0)}
    m = inner.metrics()
    assert (m["rows_unmatched"], m["rows_in"]) == (1, 5)


def test_update_lookup_swaps_the_table_between_batches() -> None:
    op = _enrich_pipe("inner").operator()
    op.process(_events())
    op.update_lookup(pa.table({"device": pa.array([4], pa.int64()), "site": ["e"], "w": [10.0]}))
    op.process(pa.table({"device": pa.array([4, 1], pa.int32()), "ts": [6_000, 7_000]}))
    rows = {(r["lk_site"], r["n"], r["w"]) for r in op.flush().windows.to_pylist()}
    assert rows == {("n", 3, 5.0), ("s", 1, 2.0), ("e", 1, 10.0)}
    assert op.metrics()["rows_unmatched"] == 2
    assert _enrich_pipe().output_schema(_events().schema).names == [
        "lk_site",
        "window_start",
        "window_end",
        "n",
        "w",
    ]


def test_a_pipeline_on_its_own_clock_takes_a_lookup() -> None:
    # enrich and without_lookup copy the pipeline in this process: the clock goes
    # with it (only pickling a pipeline with a clock is refused).
    clock = tm.ManualClock(1_000)
    pipe = tm.Pipeline(
        key="k",
        event_time="ts",
        window=tm.Tumbling("10s"),
        aggs={"n": tm.count(), "s": tm.sum("w")},
        time="processing",
        clock=clock,
    ).enrich(pa.table({"k": ["a", "b"], "w": [10, 20]}), on="k")
    assert pipe.without_lookup().clock is clock
    op = pipe.operator()
    op.process(pa.table({"k": ["a", "a", "z"], "ts": [0, 0, 0]}))
    clock.set(10_000)
    closed = sorted(op.tick().windows.select(["k", "n", "s"]).to_pylist(), key=lambda r: r["k"])
    assert closed == [{"k": "a", "n": 2, "s": 20}, {"k": "z", "n": 1, "s": None}]
    with pytest.raises(TypeError, match="clock cannot be pickled"):
        pickle.dumps(pipe)


def test_processing_time_pipelines_need_no_event_time_column() -> None:
    clock = tm.ManualClock(1_000)
    pipe = tm.Pipeline(
        key="k",
        window=tm.Tumbling("10s"),
        aggs={"n": tm.count()},
        time="processing",
        clock=clock,
        schema=pa.schema([("k", pa.string())]),  # checked now: no time column needed
    )
    assert repr(pipe).startswith("Pipeline(key=['k'], time='processing', window=")
    op = pipe.operator()
    op.process(pa.table({"k": ["a", "a", "b"]}))
    clock.set(10_000)
    assert sorted(op.tick().windows.column("n").to_pylist()) == [1, 2]
    # An event-time pipeline still names its column.
    with pytest.raises(tm.ConfigError, match=r"event_time must be a column name, got None"):
        tm.Pipeline(
            watermark=tm.BoundedOutOfOrderness("0s"),
            key="k",
            window=tm.Tumbling("10s"),
            aggs={"n": tm.count()},
        )


@pytest.mark.parametrize("cores", [1, 2])
def test_operators_pickle_with_their_state_clock_and_lookup(cores: int) -> None:
    clock = tm.ManualClock(1_000)
    pipe = tm.Pipeline(
        key="k",
        window=tm.Tumbling("10s"),
        aggs={"n": tm.count(), "s": tm.sum("w")},
        time="processing",
        clock=clock,
    ).enrich(pa.table({"k": ["a", "b"], "w": [10, 20]}), on="k")
    op = pipe.operator(cores=cores)
    op.update_lookup(pa.table({"k": ["a", "b"], "w": [1, 2]}))  # the newer table travels
    op.process(pa.table({"k": ["a", "a", "b"]}))
    back = pickle.loads(pickle.dumps(op))
    assert back.cores == cores
    assert back.pipeline.clock is not clock and back.pipeline.clock.now() == 1_000
    for o in (op, back):
        o.process(pa.table({"k": ["b"]}))
    clock.set(10_000)
    back.pipeline.clock.set(10_000)  # type: ignore[union-attr]

    def closed(o: tm.Operator) -> list[dict]:
        return sorted(o.tick().windows.select(["k", "n", "s"]).to_pylist(), key=lambda r: r["k"])

    assert closed(back) == closed(op) == [{"k": "a", "n": 2, "s": 2}, {"k": "b", "n": 2, "s": 4}]


def test_enrich_errors_are_clear() -> None:
    base = tm.Pipeline(
        watermark=tm.BoundedOutOfOrderness("0s"),
        key="device",
        event_time="ts",
        event_time_type="unixtimestamp_ms",
        window=tm.Tumbling("10s"),
        aggs={"n": tm.count()},
    )
    dup = pa.table({"device": [1, 1], "site": ["a", "b"]})
    with pytest.raises(tm.ConfigError, match="unique"):
        base.enrich(dup, on="device")
    with pytest.raises(tm.MissingColumnError, match="nope"):
        base.enrich(LOOKUP, on="nope")
    with pytest.raises(tm.ConfigError, match="how"):
        base.enrich(LOOKUP, on="device", how="outer")
    clash = base.enrich(pa.table({"device": [1], "ts": [5]}), on="device")
    with pytest.raises(tm.ConfigError, match="prefix"):
        clash.operator().process(_events())
    with pytest.raises(tm.ConfigError, match="no lookup"):
        base.operator().update_lookup(LOOKUP)


@settings(max_examples=40, deadline=None)
@given(
    batches=st.lists(
        st.lists(
            st.tuples(st.sampled_from("abc"), st.integers(0, 50), st.integers(-5, 5)),
            max_size=12,
        ),
        min_size=1,
        max_size=4,
    ),
    n=st.integers(1, 4),
    snapshot_at=st.integers(0, 4),
)
def test_rows_windows_aggregate_the_last_n_rows_of_each_key(
    batches: list[list[tuple[str, int, int]]], n: int, snapshot_at: int
) -> None:
    pipe = tm.Pipeline(
        key="k",
        event_time="ts",
        event_time_type="unixtimestamp_ms",
        window=tm.Rows(n),
        aggs={"n": tm.count(), "lo": tm.min("v"), "s": tm.sum("v")},
        emit="on_update",
    )
    op = pipe.operator()
    history: dict[str, list[tuple[int, int]]] = {}
    for i, rows in enumerate(batches):
        if i == snapshot_at:
            op = pipe.operator(op.snapshot())
        got = op.process(
            pa.table(
                {
                    "k": pa.array([r[0] for r in rows], pa.string()),
                    "ts": pa.array([r[1] for r in rows], pa.int64()),
                    "v": pa.array([r[2] for r in rows], pa.int64()),
                }
            )
        ).windows.to_pylist()
        want = []
        for k, ts, v in sorted(rows, key=lambda r: r[1]):  # stable: ties in input order
            h = history.setdefault(k, [])
            h.append((ts, v))
            last = h[-n:]
            want.append(
                (k, last[0][0], ts, len(last), min(x[1] for x in last), sum(x[1] for x in last))
            )
        assert [
            (
                r["k"],
                r["window_start"].timestamp() * 1000,
                r["window_end"].timestamp() * 1000,
                r["n"],
                r["lo"],
                r["s"],
            )
            for r in got
        ] == [(k, float(s), float(e), c, lo, sm) for k, s, e, c, lo, sm in want]
        assert all(r["retract"] is False for r in got)
    assert op.flush().windows.num_rows == 0


def test_rows_windows_configuration_errors() -> None:
    kw: dict[str, Any] = {
        "key": "k",
        "event_time": "ts",
        "event_time_type": "unixtimestamp_ms",
        "aggs": {"n": tm.count()},
    }
    with pytest.raises(tm.ConfigError, match="on_update"):
        tm.Pipeline(window=tm.Rows(3), **kw)
    with pytest.raises(tm.ConfigError, match="ROWS"):
        tm.Pipeline(window=tm.Rows(0), emit="on_update", **kw)
    pipe = tm.Pipeline(window=tm.Rows(3), emit="on_update", **kw)
    with pytest.raises(tm.ConfigError, match="one core"):
        pipe.operator(cores=2)


@settings(max_examples=60, deadline=None)
@given(
    batches=st.lists(
        st.lists(st.tuples(st.sampled_from("abc"), st.integers(0, 120)), max_size=15),
        min_size=1,
        max_size=6,
    ),
)
def test_a_window_of_allowed_lateness_counts_every_row_spark_would(
    batches: list[list[tuple[str, int]]],
) -> None:
    """docs/guide/late-data.md: Spark counts a row while its window ends after the
    watermark; with ``allowed_lateness`` of one window, tidemark's global watermark
    (the same one: the batches before, minus the delay) counts every such row, so each
    window's count is at least the count under Spark's rule."""
    pipe = tm.Pipeline(
        key="k",
        event_time="ts",
        event_time_type="unixtimestamp_s",
        watermark=tm.BoundedOutOfOrderness("5s", per="global"),
        window=tm.Tumbling("10s"),
        aggs={"n": tm.count()},
        allowed_lateness="10s",
    )
    op = pipe.operator()
    got: dict[tuple[str, int], int] = {}
    spark_rule: dict[tuple[str, int], int] = {}
    mark: int | None = None
    for rows in batches:
        table = pa.table(
            {
                "k": pa.array([r[0] for r in rows], pa.string()),
                "ts": pa.array([r[1] for r in rows], pa.int64()),
            }
        )
        for w in op.process(table).windows.to_pylist():
            got[(w["k"], int(w["window_start"].timestamp()))] = w["n"]
        for k, ts in rows:
            start = ts - ts % 10
            if mark is None or start + 10 > mark:
                spark_rule[(k, start)] = spark_rule.get((k, start), 0) + 1
        if rows:
            seen = max(ts for _, ts in rows) - 5
            mark = seen if mark is None else max(mark, seen)
    for w in op.flush().windows.to_pylist():
        got[(w["k"], int(w["window_start"].timestamp()))] = w["n"]
    for window, n in spark_rule.items():
        assert got.get(window, 0) >= n, (window, got, spark_rule)


@pytest.mark.parametrize(
    "window, cores",
    [(tm.Tumbling("10s"), 1), (tm.Tumbling("10s"), 2), (tm.Session("5s"), 1), (tm.Rows(2), 1)],
)
def test_every_call_returns_late_and_error_rows_in_one_schema(window: Any, cores: int) -> None:
    # A user collects every call's late and error rows into one table (or one Parquet
    # dataset): process, tick and flush must agree on the columns, `reason` included.
    pipe = simple(window=window, aggs={"n": tm.count()}, emit="on_update")
    op = pipe.operator(cores=cores)
    data = events([("a", 1, 1.0), ("b", 2, 2.0), ("a", 40, 3.0)]).append_column(
        "bad", pa.array([None, None, None], pa.int64())
    )
    late = events([("a", 0, 9.0)]).append_column("bad", pa.array([None], pa.int64()))
    outs = [op.process(data), op.process(late), op.tick(), op.flush()]
    if not isinstance(window, tm.Rows):
        assert outs[1].late.num_rows == 1
    all_late = pa.concat_tables([o.late for o in outs])
    all_errors = pa.concat_tables([o.errors for o in outs])
    assert all_late.column_names == ["device_id", "event_time", "value", "bad"]
    assert all_errors.column_names == ["device_id", "event_time", "value", "bad", "reason"]
