"""HashRouter, round-robin, single and broadcast routing on Arrow data."""

from __future__ import annotations

import datetime as dt
import decimal
from typing import Any

import polars as pl
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tidemark as tm


def _batch(n: int = 1000) -> pa.RecordBatch:
    return pa.record_batch(
        {
            "device": [f"d{i % 37}" for i in range(n)],
            "region": [["eu", "us", None][i % 3] for i in range(n)],
            "v": list(range(n)),
        }
    )


@pytest.mark.parametrize("hash", ["xxh3", "spark"])
def test_equal_keys_share_a_partition_and_no_row_is_lost(hash: str) -> None:
    b = _batch()
    r = tm.HashRouter(7, ["device", "region"], hash=hash)
    ids = r.partition_ids(b).to_pylist()
    by_key: dict[tuple[Any, Any], int] = {}
    for d, g, p in zip(b["device"].to_pylist(), b["region"].to_pylist(), ids, strict=True):
        assert 0 <= p < 7
        assert by_key.setdefault((d, g), p) == p
    shards = r.route(b)
    assert len(shards) == 7
    for p, s in enumerate(shards):
        assert s.schema == b.schema
        vs = s["v"].to_pylist()
        assert vs == sorted(vs)  # input order kept inside a shard
        assert all(ids[v] == p for v in vs)
    assert sorted(v for s in shards for v in s["v"].to_pylist()) == list(range(len(b)))


def test_xxh3_routes_by_value_across_arrow_types_and_python_keys() -> None:
    vals = [1, 2, 3, 40_000, -5]
    r = tm.HashRouter(16, "k")
    as32 = r.partition_ids(pa.record_batch({"k": pa.array(vals, pa.int32())}))
    as64 = r.partition_ids(pa.record_batch({"k": pa.array(vals, pa.int64())}))
    assert as32 == as64
    assert as64.to_pylist() == [r.partition_of(v) for v in vals]
    s = pa.record_batch({"k": pa.array(["a", "bb", "ccc"], pa.string())})
    ls = pa.record_batch({"k": pa.array(["a", "bb", "ccc"], pa.large_string())})
    dic = pa.record_batch({"k": pa.array(["a", "bb", "ccc"]).dictionary_encode()})
    assert r.partition_ids(s) == r.partition_ids(ls) == r.partition_ids(dic)
    two = tm.HashRouter(16, ["a", "b"])
    t = pa.record_batch({"a": ["eu", "us"], "b": [7, 8]})
    assert two.partition_ids(t).to_pylist() == [
        two.partition_of(("eu", 7)),
        two.partition_of(("us", 8)),
    ]


def test_the_hash_is_stable_across_releases() -> None:
    # Pinned values: changing the hash would move keyed state between partitions
    # (snapshots, Spark state partitions). xxh3-64 of the canonical key encoding.
    r = tm.HashRouter(1024, "k")
    b = pa.record_batch({"k": pa.array([0, 1, 42], pa.int64())})
    assert r.partition_ids(b).to_pylist() == [196, 641, 246]
    assert r.partition_of("tenant-1") == 622
    assert tm.HashRouter(1024, ["a", "b"]).partition_of(("eu", 7)) == 443


def test_polars_and_tables_are_accepted() -> None:
    df = pl.DataFrame({"k": [1, 2, 3, 1], "v": [1.0, 2.0, 3.0, 4.0]})
    r = tm.HashRouter(3, "k")
    ids = r.partition_ids(df).to_pylist()
    assert ids[0] == ids[3]
    table = pa.Table.from_batches(df.to_arrow().to_batches() * 2)
    assert len(r.partition_ids(table)) == 8
    assert sum(s.num_rows for s in r.route(table)) == 8


def test_round_robin_single_and_broadcast() -> None:
    b = pa.record_batch({"v": list(range(5))})
    rr = tm.Router.round_robin(3)
    assert rr.partition_ids(b).to_pylist() == [0, 1, 2, 0, 1]
    assert rr.partition_ids(b).to_pylist() == [2, 0, 1, 2, 0]  # the turn continues
    assert tm.Router.single().partition_ids(b).to_pylist() == [0] * 5
    copies = tm.Router.broadcast(4).route(b)
    assert len(copies) == 4 and all(c.equals(b) for c in copies)
    with pytest.raises(tm.ConfigError, match="broadcast"):
        tm.Router.broadcast(4).partition_ids(b)


def test_system_fields_route_on_the_kafka_columns() -> None:
    b = pa.record_batch({"partition": [0, 1, 2, 0], "offset": [5, 6, 7, 8], "ts": [1, 2, 3, 4]})
    by_field = tm.HashRouter(4, "_PARTITION").partition_ids(b)
    by_column = tm.HashRouter(4, "partition").partition_ids(b)
    assert by_field == by_column
    assert tm.HashRouter(4, "_PARTITION").key_columns == ["partition"]
    assert tm.HashRouter(4, "_EVENT_TIME", event_time="ts").key_columns == ["ts"]
    with pytest.raises(tm.ConfigError, match="event_time"):
        tm.HashRouter(4, "_EVENT_TIME")


def test_configuration_and_input_errors_are_clear() -> None:
    with pytest.raises(tm.ConfigError, match="num_partitions"):
        tm.HashRouter(0, "k")
    with pytest.raises(tm.ConfigError, match="at least one key"):
        tm.HashRouter(2, [])
    with pytest.raises(tm.ConfigError, match="unknown hash"):
        tm.HashRouter(2, "k", hash="md5")
    with pytest.raises(tm.MissingColumnError, match=r"available columns.*v"):
        tm.HashRouter(2, "nope").partition_ids(pa.record_batch({"v": [1]}))
    with pytest.raises(tm.ConfigError, match="cannot hash"):
        tm.HashRouter(2, "k", hash="spark").partition_ids(
            pa.record_batch({"k": pa.array([1], pa.uint64())})
        )
    with pytest.raises(TypeError, match="Arrow tabular"):
        tm.HashRouter(2, "k").partition_ids([1, 2])
    for bad in (-1, 2.0, True):
        with pytest.raises(tm.ConfigError, match="num_partitions must be an int >= 1"):
            tm.HashRouter(bad, "k")  # type: ignore[arg-type]
    # A key of another arity than the router's columns: refused, not another partition.
    two = tm.HashRouter(16, ["t", "d"])
    rows = pa.record_batch({"t": ["a", "b"], "d": [1, 2]})
    assert two.partition_ids(rows).to_pylist() == [
        two.partition_of(("a", 1)),
        two.partition_of(("b", 2)),
    ]
    for key in ("a", ("a",), ("a", 1, 2)):
        with pytest.raises(tm.ConfigError, match=r"2 key column\(s\) \(t, d\); give a tuple of 2"):
            two.partition_of(key)
    one = tm.HashRouter(16, "t")
    assert one.partition_of("a") == one.partition_of(("a",))
    with pytest.raises(tm.ConfigError, match="give one value"):
        one.partition_of(("a", 1))


@settings(max_examples=50, deadline=None)
@given(
    keys=st.lists(st.one_of(st.integers(-(2**40), 2**40), st.none()), min_size=0, max_size=200),
    n=st.integers(1, 50),
)
def test_route_is_a_stable_partition_of_the_rows(keys: list[int | None], n: int) -> None:
    b = pa.record_batch({"k": pa.array(keys, pa.int64()), "i": list(range(len(keys)))})
    for hash in ("xxh3", "spark"):
        r = tm.HashRouter(n, "k", hash=hash)
        ids = r.partition_ids(b).to_pylist()
        shards = r.route(b)
        got = {i: p for p, s in enumerate(shards) for i in s["i"].to_pylist()}
        assert got == dict(enumerate(ids))


@pytest.mark.spark
def test_spark_mode_matches_spark_repartition_on_mixed_types(spark: Any) -> None:
    from pyspark.sql import functions as F

    base = dt.datetime(2024, 3, 1, tzinfo=dt.timezone.utc)
    rows = []
    for i in range(400):
        rows.append(
            (
                None if i % 17 == 0 else i * 7919 - 1000,
                None if i % 13 == 0 else f"tenant-{i % 53}" + "é" * (i % 4),
                [0.0, -0.0, float("nan"), 1.5, -2.25e10][i % 5],
                i % 3 == 0,
                dt.date(2020, 1, 1) + dt.timedelta(days=i),
                base + dt.timedelta(microseconds=i * 123_457),
                i % 120,
                bytes([i % 256, (i * 3) % 256, 7][: 1 + i % 3]),
                None if i % 19 == 0 else decimal.Decimal(i * 7919 - 1_500_000) / 100,
                decimal.Decimal(-(i**9) + 3 * i) / 10_000,  # up to 26 digits
            )
        )
    schema = (
        "l long, s string, d double, b boolean, dt date, ts timestamp, i int, bin binary, "
        "dec decimal(10,2), big decimal(30,4)"
    )
    df = (
        spark.createDataFrame(rows, schema)
        .withColumn("sh", F.col("i").cast("short"))
        .withColumn("by", (F.col("i") - 60).cast("byte"))
        .withColumn("f", F.col("d").cast("float"))
        .withColumn("ntz", F.col("ts").cast("timestamp_ntz"))
    )
    cols = ["l", "s", "d", "b", "dt", "ts", "i", "bin", "sh", "dec", "big", "by", "f", "ntz"]
    for keys in (
        cols,
        ["s"],
        ["l", "ts"],
        ["d", "b", "sh"],
        ["bin", "dt"],
        ["dec"],
        ["big"],
        ["by"],
        ["f"],
        ["ntz"],
    ):
        n = 7
        with_pid = df.repartition(n, *keys).withColumn("pid", F.spark_partition_id())
        table = with_pid.toArrow()
        ours = tm.HashRouter(n, keys, hash="spark").partition_ids(table).to_pylist()
        assert ours == table["pid"].to_pylist(), keys

    # Inside mapInArrow too: every row of Spark partition p routes to p.
    def check(batches: Any) -> Any:
        from pyspark import TaskContext

        pid = TaskContext.get().partitionId()
        r = tm.HashRouter(5, ["s", "l"], hash="spark")
        for batch in batches:
            ids = r.partition_ids(batch).to_pylist()
            yield pa.record_batch({"ok": [all(p == pid for p in ids)], "n": [len(ids)]})

    out = df.repartition(5, "s", "l").mapInArrow(check, "ok boolean, n long").collect()
    assert all(r.ok for r in out)
    assert sum(r.n for r in out) == 400
