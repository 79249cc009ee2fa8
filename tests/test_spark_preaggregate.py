"""``aggregate(preaggregate=True)`` gives the windows of the raw path on generated data.

Spark's ``groupBy`` folds the rows per key and window pane before they reach Python
(``spark/_preagg.py``); the pipeline merges the folds. Hypothesis generates inputs (keys
of several types with nulls, event times with nulls, out-of-range and far-apart values,
values with nulls, doubles of every magnitude and the non-finite ones) and pipelines
(tumbling and sliding windows with offsets, global, per-key and per-partition scopes,
every aggregate the fold supports), and the windows must equal those of
``preaggregate=False`` row for row, in the same schema (doubles bit for bit).
"""

from __future__ import annotations

import datetime as dt
import importlib
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import tidemark as tm
from tidemark.spark import StreamProcessor, aggregate
from tidemark.spark._driver import session_settings
from tidemark.spark._preagg import _MAIN_BITS, _MAIN_LOW, preaggregation
from tidemark.spark._sizing import estimated_bytes

pytestmark = pytest.mark.spark

T0 = 1_767_225_600_000_000
SCHEMA = pa.schema(
    [
        ("k", pa.string()),
        ("g", pa.int64()),
        ("part", pa.int32()),
        ("ts", pa.timestamp("us", tz="UTC")),
        ("i8", pa.int8()),
        ("i32", pa.int32()),
        ("i64", pa.int64()),
        ("d", pa.date32()),
        ("f", pa.float64()),
    ]
)

# Doubles whose exact sums the fold must keep: every binary order of magnitude (subnormal
# to 1e300, so that 60 of them cannot overflow), the fold's main window and its bounds,
# both zeros, the non-finite values, and values that cancel (Spark's own double sum
# depends on the order of these).
_LOW, _HIGH = 2.0**_MAIN_LOW, 2.0 ** (_MAIN_LOW + _MAIN_BITS)
floats = st.one_of(
    st.none(),
    st.floats(min_value=-1e300, max_value=1e300, allow_nan=False),
    st.floats(min_value=-_HIGH, max_value=_HIGH, allow_nan=False),
    st.sampled_from([0.0, -0.0, 5e-324, -5e-324, 2.0**-1022, 1e300, -1e300, 0.1, 0.2, -0.3]),
    st.sampled_from([_LOW, -_LOW, math.nextafter(_LOW, 0), -math.nextafter(_HIGH, 0), _HIGH]),
    st.sampled_from([float("inf"), float("-inf"), float("nan")]),
)

times = st.one_of(
    st.none(),
    st.integers(0, 30_000_000).map(lambda us: T0 + us),  # 30 s: many rows per window
    st.sampled_from([-(2**62), 2**62, 0]),  # far out (beyond the filter's range) and 1970
    # Next to the filter's bound (4e18 us: both in one window) and to the 64-bit bounds
    # (reserved values, windows that do not fit, an offset that does not fit).
    st.sampled_from([4 * 10**18, 4 * 10**18 + 1, -(2**63) + 1, -(2**63) + 2, 2**63 - 2]),
)
row = st.tuples(
    st.one_of(st.none(), st.sampled_from(["a", "é"])),
    st.one_of(st.none(), st.integers(0, 1)),
    st.integers(0, 2),
    times,
    st.one_of(st.none(), st.integers(-128, 127)),
    st.one_of(st.none(), st.integers(-(2**31), 2**31 - 1)),
    st.one_of(st.none(), st.integers(-(2**40), 2**40)),
    st.one_of(st.none(), st.integers(0, 30_000)),
    floats,
)
windows = st.sampled_from(
    [
        tm.Tumbling("10s"),
        tm.Tumbling("7s", offset="3s"),
        tm.Sliding("10s", "4s"),
        tm.Sliding("9s", "3s", offset="1s"),
    ]
)
aggs = st.sampled_from(
    [
        {"n": tm.count()},
        {"n": tm.count(), "c": tm.count("i32"), "s8": tm.sum("i8"), "s32": tm.sum("i32")},
        {"lo": tm.min("i64"), "hi": tm.max("i32"), "day": tm.max("d"), "first": tm.min("ts")},
        {"n": tm.count(), "fs": tm.sum("f"), "fs2": tm.sum("f"), "s32": tm.sum("i32")},
    ]
)
scopes = st.sampled_from(
    [
        (["k", "g"], tm.BoundedOutOfOrderness("2s", per="key")),
        ([], tm.BoundedOutOfOrderness("0s")),
        (["g"], tm.BoundedOutOfOrderness("1s", per="partition", partition_column="part")),
    ]
)


@contextmanager
def taken_as_large(module_name: str, large: Callable[[], bool]) -> Iterator[None]:
    """Inside the ``with``, module ``tidemark.spark.<module_name>`` takes an input of
    any size as too large for one task while ``large()`` says so."""
    module = importlib.import_module(f"tidemark.spark.{module_name}")
    fits = module.fits_one_task
    module.fits_one_task = lambda *given: not large() and fits(*given)
    try:
        yield
    finally:
        module.fits_one_task = fits


def generated(
    spark: Any, rows: list[tuple[Any, ...]], window: Any, agg: dict[str, Any], scope: Any
) -> tuple[tm.Pipeline, Any]:
    """The pipeline of a generated window, aggregates and scope (keys and watermark) over
    ``rows`` (see ``row``), and the rows as a Spark DataFrame."""
    keys, watermark = scope
    pipe = tm.Pipeline(keys, "ts", window=window, aggs=agg, watermark=watermark)
    return pipe, spark.createDataFrame(table(rows))


def table(rows: list[tuple[Any, ...]]) -> pa.Table:
    cols = list(zip(*rows, strict=True)) if rows else [[] for _ in SCHEMA]
    arrays = []
    for f, values in zip(SCHEMA, cols, strict=True):
        if f.name == "d":
            values = [None if v is None else dt.date(1970, 1, 1) + dt.timedelta(v) for v in values]
        arrays.append(pa.array(list(values), f.type))
    return pa.Table.from_arrays(arrays, schema=SCHEMA)


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    rows=st.lists(row, min_size=1, max_size=60),
    window=windows,
    agg=aggs,
    scope=scopes,
    one_task=st.booleans(),
)
def test_preaggregated_windows_equal_the_raw_paths(
    spark: Any,
    rows: list[tuple[Any, ...]],
    window: Any,
    agg: dict[str, Any],
    scope: Any,
    one_task: bool,
) -> None:
    pipe, df = generated(spark, rows, window, agg, scope)
    raw = aggregate(df, pipe).windows
    # A small input is folded in one task; a large one (as these are taken to be,
    # unless one_task) by Spark's aggregation over several.
    with taken_as_large("aggregate", lambda: not one_task):
        folded = aggregate(df, pipe, preaggregate=True).windows
    plan = folded._jdf.queryExecution().optimizedPlan().toString()
    assert "Aggregate" in plan, "the fold runs in Spark"
    # A tumbling window's fold is merged where Spark's aggregation left it: spread
    # over several tasks (no coalescing), each window must still come out once.
    # (Not with a float sum: its groups are split by the values' magnitudes.)
    floats = any(a.kind == "sum" and a.column == "f" for a in agg.values())
    in_place = isinstance(window, tm.Tumbling) and pipe.watermark.per != "partition" and not floats
    assert plan.count("Repartition 1, false") == (1 if one_task else 0)  # a coalesce
    reshuffled = "RepartitionByExpression" in plan or "Repartition 1, true" in plan
    assert reshuffled == (not in_place and not one_task)
    with session_settings(
        spark, {"spark.sql.adaptive.enabled": "false", "spark.sql.shuffle.partitions": "5"}
    ):
        b = folded.toArrow()
    a = raw.toArrow()
    assert a.schema == b.schema
    a, b = float_bits(a), float_bits(b)
    order = [(c, "ascending") for c in a.column_names]
    assert a.sort_by(order).equals(b.sort_by(order))


def float_bits(t: pa.Table) -> pa.Table:
    """``t`` with each double column as the bits of its values (one NaN): equal tables
    then hold the same zeros (``-0.0`` is not ``0.0``) and the same NaNs."""
    import numpy as np
    import pyarrow.compute as pc

    for i, f in enumerate(t.schema):
        if f.type == pa.float64():
            col = t.column(i).combine_chunks()
            nan = pc.fill_null(pc.is_nan(col), False)
            values = pc.if_else(nan, float("nan"), col).to_numpy(zero_copy_only=False)
            nulls = col.is_null().to_numpy(zero_copy_only=False)
            bits = pa.array(np.asarray(values, np.float64).view(np.int64), mask=nulls)
            t = t.set_column(i, f.name, bits)
    return t


def test_tumbling_folds_are_merged_where_sparks_aggregation_left_them(spark: Any) -> None:
    # Many windows of two keys over five tasks, and two rows in one window either side of
    # the filter's bound (4e18 us): each window comes out once, whole, with no shuffle
    # after Spark's aggregation.
    times = [T0 + i * 900_000 for i in range(200)] + [4 * 10**18, 4 * 10**18 + 1, None]
    df = spark.createDataFrame(
        pa.table(
            {
                "k": ["a", "b"] * 100 + ["a"] * 3,
                "ts": pa.array(times, pa.timestamp("us", tz="UTC")),
                "v": pa.array(range(len(times)), pa.int32()),
            }
        )
    )
    pipe = tm.Pipeline(
        "k",
        "ts",
        window=tm.Tumbling("7s", offset="3s"),
        aggs={"n": tm.count(), "s": tm.sum("v")},
        watermark=tm.BoundedOutOfOrderness("1s", per="key"),
    )
    with taken_as_large("aggregate", lambda: True):
        folded = aggregate(df, pipe, preaggregate=True).windows
    with session_settings(
        spark, {"spark.sql.adaptive.enabled": "false", "spark.sql.shuffle.partitions": "5"}
    ):
        plan = folded._jdf.queryExecution().executedPlan().toString()
        got = folded.toArrow()
    assert plan.count("Exchange") == 1, plan
    want = aggregate(df, pipe).windows.toArrow()
    order = [(c, "ascending") for c in want.column_names]
    assert got.sort_by(order).equals(want.sort_by(order))
    counts = got.column("n").to_pylist()
    starts = got.column("window_start").cast(pa.int64()).to_pylist()
    assert [n for s, n in zip(starts, counts, strict=True) if s > 10**18] == [2]
    assert sum(counts) == len(times) - 1  # all but the null time


@pytest.mark.parametrize("size", ["1us", "3us", "10s"])
def test_panes_and_unreadable_event_times_never_share_a_group(spark: Any, size: str) -> None:
    # Rows whose event time the core cannot read (the 64-bit bounds, a window end that
    # does not fit, null) group by their event time, other rows by their pane number,
    # with no flag to tell the two apart: the windows and errors are the raw path's
    # whatever the pane (a microsecond's pane number is the event time itself).
    times = [-(2**63), -(2**63) + 1, -(2**63) + 2, 2**63 - 2, 2**63 - 1, None, T0, T0 + 1, T0 + 5]
    times += [-(2**62), 2**62, 0, 1, 2, 3]
    df = spark.createDataFrame(
        pa.table(
            {
                "k": ["a"] * len(times),
                "ts": pa.array(times, pa.timestamp("us", tz="UTC")),
                "v": pa.array(range(len(times)), pa.int32()),
            }
        )
    )
    window = tm.Tumbling(size)
    watermark = tm.BoundedOutOfOrderness("1s")
    pipe = tm.Pipeline(
        "k", "ts", window=window, aggs={"n": tm.count(), "s": tm.sum("v")}, watermark=watermark
    )
    with taken_as_large("aggregate", lambda: True):
        folded = aggregate(df, pipe, preaggregate=True)
    raw = aggregate(df, pipe)
    for kind in ("windows", "errors"):
        a, b = getattr(raw, kind).toArrow(), getattr(folded, kind).toArrow()
        order = [(c, "ascending") for c in a.column_names]
        assert a.sort_by(order).equals(b.sort_by(order)), kind
        if kind == "errors":
            assert a.num_rows > 0


def test_float_folds_keep_every_bit_in_and_around_the_main_window(spark: Any) -> None:
    # Values in the fold's main window (split into limbs with no logarithm) and outside
    # it (bucketed by exponent) in one key and pane, at the window's bounds, zeros of
    # both signs, sums that cancel, a key's 50 largest values of the window: the
    # folded sums are the raw path's, bit for bit.
    up, low = math.nextafter(_HIGH, 0), _LOW
    groups = {
        "bounds": [low, -low, math.nextafter(low, 0), up, -up, _HIGH, -_HIGH],
        "largest": [up] * 50 + [math.nextafter(low, 1)],
        "negative": [-up] * 7 + [-0.0],
        "cancel": [0.1, -0.1],
        "zeros": [-0.0, 0.0, -0.0],
        "negative zeros": [-0.0, -0.0],
        "negative zero": [-0.0],
        "zero": [0.0],
        "cancel to zero": [1.0, -1.0, -0.0],
        "below and zero": [math.nextafter(low, 0), -0.0],
        "tiny and zero": [-0.0, 1e-300],
        "far apart": [-up, 1e30, -1e30, low * 3, 5e-324],
    }
    rows = [(k, v) for k, values in groups.items() for v in values]
    df = spark.createDataFrame(
        pa.table(
            {
                "k": [k for k, _ in rows],
                "ts": pa.array([T0] * len(rows), pa.timestamp("us", tz="UTC")),
                "f": pa.array([v for _, v in rows], pa.float64()),
            }
        )
    )
    pipe = tm.Pipeline(
        "k",
        "ts",
        window=tm.Tumbling("10s"),
        aggs={"n": tm.count(), "s": tm.sum("f")},
        watermark=tm.BoundedOutOfOrderness("1s"),
    )
    with taken_as_large("aggregate", lambda: True):
        folded = aggregate(df, pipe, preaggregate=True).windows.toArrow()
    raw = aggregate(df, pipe, preaggregate=False).windows.toArrow()
    assert folded.num_rows == len(groups)
    a, b = float_bits(raw).sort_by("k"), float_bits(folded).sort_by("k")
    assert a.equals(b)
    ordered = folded.sort_by("k")
    sums = dict(zip(ordered.column("k").to_pylist(), ordered.column("s").to_pylist(), strict=True))
    assert math.copysign(1, sums["negative zeros"]) == -1
    assert math.copysign(1, sums["zeros"]) == 1
    assert sums["largest"] == math.fsum(groups["largest"])


@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(rows=st.lists(row, min_size=1, max_size=60), window=windows, agg=aggs, scope=scopes)
def test_a_kept_fold_plan_folds_as_the_statement(
    spark: Any, rows: list[tuple[Any, ...]], window: Any, agg: dict[str, Any], scope: Any
) -> None:
    # A stream's later micro-batches (one output: here parts of one DataFrame) fold over
    # the plan the first one's statement was analyzed to: the same groups as the
    # statement over each. A micro-batch with another output takes the statement.
    pipe, df = generated(spark, rows, window, agg, scope)
    pre = preaggregation(pipe, df.schema, "UTC", False)
    assert pre is not None
    parts = [df.filter(df["g"] == 0), df.filter(df["g"] != 0), df, df.filter(df["i8"] < 0)]
    assert pre.template.reused == 0
    for i, part in enumerate(parts):
        got = pre.rows(part, reuse=True)
        assert pre.template.reused == i
        assert folded_rows(got) == folded_rows(pre._statement(part))
    other = spark.createDataFrame(table(rows))  # new attribute ids: the statement
    got = pre.rows(other, reuse=True)
    assert pre.template.reused == len(parts) - 1
    assert folded_rows(got) == folded_rows(pre._statement(other))


@settings(
    max_examples=6,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(rows=st.lists(row, min_size=1, max_size=20), window=windows, agg=aggs, scope=scopes)
def test_spark_sizes_the_folds_only_where_it_sizes_the_rows(
    spark: Any,
    tmp_path: Path,
    rows: list[tuple[Any, ...]],
    window: Any,
    agg: dict[str, Any],
    scope: Any,
) -> None:
    # A folded micro-batch Spark cannot size (Kafka, rate: here rows from an RDD) is
    # placed with no estimate of its folds, which are not asked for: Spark's estimate
    # of them would be its scaled placeholder (no estimate) too.
    pipe, sized = generated(spark, rows, window, agg, scope)
    unsized = spark.createDataFrame(sized.rdd, sized.schema)
    pre = preaggregation(pipe, sized.schema, "UTC", False)
    assert pre is not None
    proc = StreamProcessor(pipe, str(tmp_path / "state"), sink=lambda d, b: None)
    for df in (sized, unsized):
        stats, folds = proc._stats(df, "rows"), pre.rows(df)
        measured = replace(proc._stats(folds, "rows"), folds=True)
        assert stats.unsized == (estimated_bytes(df) is None) == (df is unsized)
        assert measured.unsized == (df is unsized)
        assert proc._stats(folds, "rows", rows=stats) == measured
        assert (measured.size is None) == (df is unsized)


def folded_rows(df: Any) -> list[str]:
    """``df``'s rows, doubles as their bits (``-0.0`` is not ``0.0``; NaN is NaN), in order."""

    def plain(v: Any) -> Any:
        if isinstance(v, float):
            return "nan" if math.isnan(v) else v.hex()  # -0.0: "-0x0.0p+0"
        if isinstance(v, list):
            return [plain(x) for x in v]
        return v

    t = df.toArrow()
    cols = [
        (c.cast(pa.int64()) if pa.types.is_timestamp(c.type) else c).to_pylist() for c in t.columns
    ]
    return sorted(repr([plain(v) for v in r]) for r in zip(*cols, strict=True))


def test_the_fold_takes_any_column_names(spark: Any) -> None:
    # The fold is one SQL statement that PySpark formats: names with braces, backticks
    # and dots (a key, the event time, a float and an integer column) stay names.
    key, ts, x, i = "k{0}", "t`s}", "x.{v}", "{{i}}"
    n = 60
    df = spark.createDataFrame(
        pa.table(
            {
                key: ["a", "b", "c"] * (n // 3),
                ts: pa.array([T0 + j * 700_000 for j in range(n)], pa.timestamp("us", tz="UTC")),
                x: [0.1 * j - 2.0 for j in range(n)],
                i: pa.array(range(n), pa.int32()),
            }
        )
    )
    pipe = tm.Pipeline(
        key,
        ts,
        window=tm.Tumbling("5s"),
        aggs={"n": tm.count(), "s": tm.sum(x), "s2": tm.sum(x), "t": tm.sum(i)},
        watermark=tm.BoundedOutOfOrderness("1s", per="key"),
    )
    assert preaggregation(pipe, df.schema, "UTC", False) is not None
    with taken_as_large("aggregate", lambda: True):
        got = aggregate(df, pipe, preaggregate=True).windows.toArrow()
    want = aggregate(df, pipe).windows.toArrow()
    order = [(c, "ascending") for c in [key, "window_start"]]
    assert got.num_rows > 3
    assert got.sort_by(order).equals(want.sort_by(order))


def test_preaggregate_changes_nothing_where_it_would_not_be_exact(spark: Any) -> None:
    # A sum of 64-bit integers (a group's partial sum could overflow a long), a session
    # window, max_keys: the raw path runs, with the same windows.
    df = spark.createDataFrame(
        pa.table(
            {
                "k": ["a", "a", "b"],
                "ts": pa.array([T0, T0 + 1, T0 + 2], pa.timestamp("us", tz="UTC")),
                "v": pa.array([1, 2, 3], pa.int64()),
            }
        )
    )
    for pipe in (
        tm.Pipeline(
            "k",
            "ts",
            window=tm.Tumbling("10s"),
            aggs={"s": tm.sum("v")},
            watermark=tm.BoundedOutOfOrderness("0s"),
        ),
        tm.Pipeline(
            "k",
            "ts",
            window=tm.Session("10s"),
            aggs={"n": tm.count()},
            watermark=tm.BoundedOutOfOrderness("0s"),
        ),
        tm.Pipeline(
            "k",
            "ts",
            window=tm.Tumbling("10s"),
            aggs={"n": tm.count()},
            watermark=tm.BoundedOutOfOrderness("0s"),
            max_keys=10,
        ),
    ):
        folded = aggregate(df, pipe, preaggregate=True).windows
        plan = folded._jdf.queryExecution().optimizedPlan().toString()
        assert "Aggregate" not in plan
        assert folded.count() == aggregate(df, pipe).windows.count() > 0


batch_rows = st.lists(
    st.tuples(
        st.sampled_from(["a", "b", "c"]),
        st.one_of(st.none(), st.integers(-6_000_000, 6_000_000)),  # behind or ahead
        st.one_of(st.none(), st.integers(-1000, 1000)),
    ),
    min_size=0,
    max_size=40,
)


@pytest.mark.slow(25)
@settings(
    max_examples=6,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    batches=st.lists(batch_rows, min_size=2, max_size=4),
    window=st.sampled_from([tm.Tumbling("5s"), tm.Sliding("6s", "2s")]),
    per=st.sampled_from(["key", "global"]),
    on_driver=st.booleans(),
    large=st.lists(st.booleans(), min_size=4, max_size=4),
    unsized=st.booleans(),
)
# Folds Spark knows are empty (a row without an event time: no fold), and folds of rows
# Spark cannot size, routed by their task.
@example(
    batches=[[], [], [], [("a", None, None)]],
    window=tm.Tumbling("5s"),
    per="key",
    on_driver=False,
    large=[False, False, False, True],
    unsized=False,
)
@example(
    batches=[[("a", 1_000_000, 1), ("b", 2_000_000, None)], [("a", 9_000_000, 2)]],
    window=tm.Sliding("6s", "2s"),
    per="key",
    on_driver=False,
    large=[True, True, False, False],
    unsized=True,
)
def test_a_preaggregating_stream_processor_equals_the_raw_one(
    spark: Any,
    tmp_path_factory: Any,
    batches: list[list[tuple[Any, ...]]],
    window: Any,
    per: str,
    on_driver: bool,
    large: list[bool],
    unsized: bool,
) -> None:
    # Micro-batches whose rows run behind and ahead of the stream (late rows, windows
    # closing), null times and values: windows and counts equal batch by batch. The
    # micro-batches taken as too large for one task (``large``) are folded by Spark, or
    # (after a fold that kept more than FOLD_SHARE of its rows, set to 0 here: every
    # other large one) shuffled raw; the others go through the same state raw.
    from tidemark.spark import StreamProcessor, _layout

    pipe = tm.Pipeline(
        "k",
        "ts",
        window=window,
        aggs={
            "n": tm.count(),
            "c": tm.count("v"),
            "s": tm.sum("v"),
            "hi": tm.max("v"),
            "fs": tm.sum("f"),
        },
        watermark=tm.BoundedOutOfOrderness("1s", per=per),
    )
    schema = pa.schema(
        [
            ("k", pa.string()),
            ("ts", pa.timestamp("us", tz="UTC")),
            ("v", pa.int32()),
            ("f", pa.float64()),
        ]
    )
    spark_schema = spark.createDataFrame(schema.empty_table()).schema
    tables = []
    for b, rows in enumerate(batches):
        base = T0 + b * 10_000_000
        t = pa.table(
            {
                "k": [r[0] for r in rows],
                "ts": pa.array(
                    [None if r[1] is None else base + r[1] for r in rows],
                    pa.timestamp("us", tz="UTC"),
                ),
                "v": pa.array([r[2] for r in rows], pa.int32()),
                # A float sum, exact whether folded or raw (rows lifted to folds).
                "f": pa.array([None if r[2] is None else r[2] / 7 for r in rows]),
            },
            schema=schema,
        )
        tables.append(t.append_column("b", pa.repeat(pa.scalar(b, pa.int32()), t.num_rows)))
    whole = spark.createDataFrame(pa.concat_tables(tables))
    if unsized:  # rows Spark cannot size (as Kafka's, rate's): one task routes the folds
        whole = spark.createDataFrame(whole.rdd, whole.schema)
    runs: dict[bool | None, tuple[list[Any], list[Any]]] = {}  # None: the default
    for pre in (False, True, None):
        where = tmp_path_factory.mktemp("state")
        got: list[Any] = []

        def sink(t: pa.Table, batch_id: int, got: list[Any] = got) -> None:
            order = [(c, "ascending") for c in t.column_names]
            got.append((batch_id, t.sort_by(order)))

        proc = StreamProcessor(
            pipe,
            str(where),
            2,
            sink=sink,
            on_driver=on_driver,
            arrow_sinks=True,
            preaggregate=pre,
        )
        share, retry = _layout.FOLD_SHARE, _layout.FOLD_RETRY
        progress, reads, routed = [], [], []
        place = _layout.place

        def placing(stats: Any, *a: Any, place: Any = place, routed: Any = routed) -> Any:
            got = place(stats, *a)
            if stats.kind == "rows" and not got.shuffled:
                routed.append((got.routes, stats.size, stats.folds))
            return got

        for b in range(len(batches)):
            _layout.FOLD_SHARE, _layout.FOLD_RETRY = 0.0, 1
            _layout.place = placing
            try:
                with taken_as_large("_layout", lambda b=b: large[b]):
                    # One output for every micro-batch, as a stream's: a later fold
                    # reuses the plan of the first (see FoldTemplate).
                    proc(whole.filter(whole["b"] == b).drop("b"), b)
            finally:
                _layout.FOLD_SHARE, _layout.FOLD_RETRY = share, retry
                _layout.place = place
            last = dict(proc.last_progress or {})
            reads.append(last["read"])
            for k in ("layout", "read", "read_why"):
                last.pop(k, None)
            progress.append(last)
        proc.flush(spark, spark_schema)
        runs[pre] = (got, progress)
        folded = [r == "folds" for r in reads]
        # The first unsized micro-batch has no size to go by: too large for one task.
        big = [x or (unsized and b == 0) for b, x in enumerate(large[: len(batches)])]
        assert all(pre is not False and big[b] for b, f in enumerate(folded) if f)
        # One task (or the driver) routes the rows or folds unless Spark sized them 0
        # (it knows them empty: its optimizer computes a filter over local rows); rows
        # Spark cannot size, and their folds, have no size, and are routed.
        assert sum(f for _, _, f in routed) == sum(folded)
        assert all(routes == (on_driver or size != 0) for routes, size, _ in routed)
        assert all((size is None) == unsized for _, size, _ in routed)
        if sum(folded) > 1:
            assert proc._fold is not None and proc._fold.template.reused == sum(folded) - 1
        first = pre is not False and any(big)
        assert any(folded) == first, "the first large one folds"
    for pre in (True, None):
        assert runs[pre][0] == runs[False][0], "windows, batch by batch and at the flush"
        assert runs[pre][1] == runs[False][1], "input, window, late and error counts"


def test_a_fold_that_keeps_most_rows_gives_way_to_the_raw_path(spark: Any, tmp_path: Path) -> None:
    # Large micro-batches (taken as too large for one task): with many rows per key and
    # pane each is folded; with one row per key the first fold keeps every row, and the
    # next micro-batches go raw to their state partitions' tasks.
    from tidemark.spark import StreamProcessor

    pipe = tm.Pipeline(
        "k",
        "ts",
        window=tm.Tumbling("10s"),
        aggs={"n": tm.count()},
        watermark=tm.BoundedOutOfOrderness("1s", per="key"),
    )
    for keys, want in ((1, ["folds"] * 3), (40, ["folds", "spark", "spark"])):
        proc = StreamProcessor(
            pipe,
            str(tmp_path / f"state-{keys}"),
            2,
            sink=lambda t, b: None,
            on_driver=False,
            preaggregate=True,
        )
        reads, layouts, counted = [], [], 0
        for b in range(3):
            t = pa.table(
                {
                    "k": [f"k{i % keys}" for i in range(40)],
                    "ts": pa.array(
                        [T0 + b * 10_000_000 + i for i in range(40)],
                        pa.timestamp("us", tz="UTC"),
                    ),
                }
            )
            with taken_as_large("_layout", lambda: True):
                proc(spark.createDataFrame(t), b)
            assert proc.last_progress is not None
            reads.append(proc.last_progress["read"])
            layouts.append(proc.last_progress["layout"])
            counted += proc.last_progress["input_rows"]
        assert reads == want
        assert layouts == ["shuffled" if r == "spark" else "one task" for r in reads]
        assert counted == 120


def test_by_default_the_fold_is_taken_where_the_state_location_allows_it(
    spark: Any, tmp_path: Path
) -> None:
    # A new state location folds large micro-batches; one the raw pipeline wrote goes
    # on raw (its state stays as written, and so do its windows); a processor with a
    # late sink keeps late rows, so it never folds.
    from tidemark.spark import StreamProcessor

    pipe = tm.Pipeline(
        "k",
        "ts",
        window=tm.Tumbling("10s"),
        aggs={"n": tm.count(), "s": tm.sum("f")},
        watermark=tm.BoundedOutOfOrderness("1s", per="key"),
    )

    def run(where: str, batches: range, **kw: Any) -> tuple[list[str], list[Any]]:
        got: list[Any] = []
        proc = StreamProcessor(
            pipe,
            str(tmp_path / where),
            2,
            sink=lambda t, b: got.extend(t.sort_by("k").to_pylist()),
            on_driver=False,
            arrow_sinks=True,
            **kw,
        )
        reads = []
        for b in batches:
            t = pa.table(
                {
                    "k": [f"k{i % 4}" for i in range(200)],
                    "ts": pa.array(
                        [T0 + b * 10_000_000 + i for i in range(200)],
                        pa.timestamp("us", tz="UTC"),
                    ),
                    "f": [i / 3 for i in range(200)],
                }
            )
            with taken_as_large("_layout", lambda: True):
                proc(spark.createDataFrame(t), b)
            assert proc.last_progress is not None
            reads.append(proc.last_progress["read"])
        return reads, got

    reads, want = run("new", range(4))
    assert reads == ["folds"] * 4
    assert run("raw", range(2), preaggregate=False)[0] == ["spark"] * 2
    reads, got = run("raw", range(2, 4))
    assert reads == ["spark"] * 2, "a location the raw pipeline wrote stays raw"
    assert run("folded", range(2))[0] == ["folds"] * 2
    reads, got2 = run("folded", range(2, 4))
    assert reads == ["folds"] * 2, "a location written with folds goes on folding"
    late: list[Any] = []
    reads, _ = run("late-sink", range(2), late_sink=lambda t, b: late.append(t))
    assert reads == ["spark"] * 2
    with pytest.raises(tm.ConfigError, match="late_sink"):
        run("late-sink-pre", range(1), preaggregate=True, late_sink=lambda t, b: None)
    assert got == got2 == want[-len(got) :] and len(got) > 0, "the same windows either way"
