"""tidemark's distinct counts against Spark's own functions, on the same rows."""

from __future__ import annotations

import datetime as dt
import decimal
import random
from typing import Any

import pyarrow as pa
import pytest

import tidemark as tm
from tidemark.spark import aggregate

pytestmark = pytest.mark.spark

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
COLUMNS = ["i", "l", "d", "s", "b", "day", "t", "small", "wide"]


def rows(n: int, seed: int = 3) -> list[tuple[Any, ...]]:
    """Keys a-c over three 10 s windows; values with repeats, nulls, NaN and -0.0."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        v = rng.randrange(400)
        out.append(
            (
                "abc"[i % 3],
                T0 + dt.timedelta(seconds=rng.randrange(30)),
                None if v % 17 == 0 else v - 200,
                v * 1_000_003,
                [float("nan"), -0.0, 0.0, v / 7][v % 4],
                f"s{v}",
                v % 2 == 0,
                dt.date(2026, 1, 1) + dt.timedelta(days=v % 50),
                T0 + dt.timedelta(microseconds=v * 1_001),
                decimal.Decimal(v) / 100,
                decimal.Decimal(v) * 10**20,
                None if i % 11 == 0 else rng.random(),  # unique, some null: to order by
            )
        )
    return out


SCHEMA = (
    "k string, ts timestamp, i int, l long, d double, s string, b boolean, day date, "
    "t timestamp, small decimal(10, 2), wide decimal(30, 0), u double"
)


def both(
    df: Any, window: Any, spark_window: Any, aggs: dict[str, tm.Agg], spark_aggs: list[Any]
) -> tuple[dict[Any, Any], dict[Any, Any]]:
    """The windows of ``aggs`` through tidemark's ``aggregate`` and of ``spark_aggs``
    through Spark's ``groupBy(key, window)``, each by (key, window start)."""
    pipe = tm.Pipeline(
        key="k",
        event_time="ts",
        window=window,
        aggs=aggs,
        watermark=tm.BoundedOutOfOrderness("1m"),
    )
    ours = {(r["k"], r["window_start"]): r for r in aggregate(df, pipe).windows.collect()}
    theirs = {
        (r["k"], r["w"].start): r
        for r in df.groupBy("k", spark_window.alias("w")).agg(*spark_aggs).collect()
    }
    assert ours.keys() == theirs.keys()
    return ours, theirs


def same(a: Any, b: Any) -> bool:
    """Equal, NaN equal to NaN."""
    return bool(a == b or (a != a and b != b))


@pytest.mark.parametrize("n", [60, 1_500])
def test_distinct_counts_equal_sparks(spark: Any, n: int) -> None:
    from pyspark.sql import functions as F

    df = spark.createDataFrame(rows(n), SCHEMA)
    aggs: dict[str, tm.Agg] = {}
    spark_aggs = []
    for c in COLUMNS:
        aggs[f"cd_{c}"] = tm.count_distinct(c)
        aggs[f"acd_{c}"] = tm.approx_count_distinct(c)
        spark_aggs += [
            F.count_distinct(c).alias(f"cd_{c}"),
            F.approx_count_distinct(c).alias(f"acd_{c}"),
        ]
    ours, theirs = both(df, tm.Tumbling("10s"), F.window("ts", "10 seconds"), aggs, spark_aggs)
    for key, want in theirs.items():
        got = ours[key]
        for c in COLUMNS:
            assert got[f"cd_{c}"] == want[f"cd_{c}"], (key, c)
            if n <= 100:
                # Linear counting (Spark's estimate below 400): the same registers give
                # the same count, which proves the hash of every type is Spark's.
                assert got[f"acd_{c}"] == want[f"acd_{c}"], (key, c)
            else:
                # Above that, Spark subtracts an empirical bias this sketch lacks.
                assert abs(got[f"acd_{c}"] - want[f"acd_{c}"]) <= 0.1 * want[f"acd_{c}"] + 2


def test_distinct_counts_merge_across_cores_sessions_and_snapshots() -> None:
    t = pa.table(
        {
            "k": ["a"] * 6 + ["b"],
            "ts": pa.array([1, 2, 3, 6, 10, 11, 1], pa.timestamp("s", "UTC")),
            "v": [1.0, 1.0, float("nan"), float("nan"), -0.0, 0.0, 3.0],
        }
    )
    pipe = tm.Pipeline(
        key="k",
        event_time="ts",
        window=tm.Session("5s"),
        aggs={"d": tm.count_distinct("v"), "a": tm.approx_count_distinct("v")},
        watermark=tm.BoundedOutOfOrderness("1m"),
    )
    # Two halves of one session (the row at 6 extends the first half's), on a
    # restored operator and on two cores: the same counts as one pass.
    one = pipe.operator()
    one.process(t)
    want = one.flush().windows.to_pylist()
    assert sorted((r["k"], r["d"], r["a"]) for r in want) == [("a", 3, 3), ("b", 1, 1)]
    first = pipe.operator()
    first.process(t.filter(pa.compute.less(t["ts"], pa.scalar(6, pa.timestamp("s", "UTC")))))
    again = pipe.operator(state=first.snapshot(), cores=2)
    again.process(
        t.filter(pa.compute.greater_equal(t["ts"], pa.scalar(6, pa.timestamp("s", "UTC"))))
    )
    assert again.flush().windows.to_pylist() == want


def test_min_by_and_max_by_equal_sparks(spark: Any) -> None:
    from pyspark.sql import functions as F

    df = spark.createDataFrame(rows(300), SCHEMA)
    aggs: dict[str, tm.Agg] = {}
    spark_aggs = []
    for c in COLUMNS:
        aggs[f"lo_{c}"] = tm.min_by(c, "u")
        aggs[f"hi_{c}"] = tm.max_by(c, "u")
        spark_aggs += [F.min_by(c, "u").alias(f"lo_{c}"), F.max_by(c, "u").alias(f"hi_{c}")]
    sliding = F.window("ts", "10 seconds", "5 seconds")
    ours, theirs = both(df, tm.Sliding("10s", "5s"), sliding, aggs, spark_aggs)
    for key, want in theirs.items():
        for c in COLUMNS:
            for f in ("lo", "hi"):
                got = ours[key][f"{f}_{c}"]
                assert same(got, want[f"{f}_{c}"]), (key, f, c, got, want[f"{f}_{c}"])


def test_percentile_approx_equals_sparks(spark: Any) -> None:
    from pyspark.sql import functions as F

    df = spark.createDataFrame(rows(600), SCHEMA)
    # Doubles without NaN: Spark sorts NaN by IEEE comparisons, which place it
    # arbitrarily (tidemark: NaN is greatest). A decimal wider than a double's 53 bits
    # differs too (Spark reads every value as a double).
    df = df.withColumn("dn", F.when(F.isnan("d"), F.lit(None)).otherwise(F.col("d")))
    cols = ["i", "l", "dn", "day", "t", "small"]
    aggs: dict[str, tm.Agg] = {}
    spark_aggs = []
    for c in cols:
        for p in (0.0, 0.25, 0.5, 0.9, 1.0):
            name = f"p{int(p * 100)}_{c}"
            aggs[name] = tm.percentile_approx(c, p)
            spark_aggs.append(F.percentile_approx(c, p).alias(name))
    session = F.session_window("ts", "3 seconds")
    ours, theirs = both(df, tm.Session("3s"), session, aggs, spark_aggs)
    for key, want in theirs.items():
        for name in aggs:
            assert same(ours[key][name], want[name]), (key, name, ours[key][name], want[name])
    with pytest.raises(tm.ConfigError, match="percentage"):
        tm.percentile_approx("v", 1.5)
    with pytest.raises(tm.ConfigError, match="accuracy"):
        tm.percentile_approx("v", 0.5, accuracy=0)
