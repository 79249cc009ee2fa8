"""``aggregate()`` lets Spark fold a batch by default where a sample of its input says
the fold pays (``Preaggregation.pays_on``): the first rows of a bare Parquet scan's
first file, their share of groups (key and pane) estimated for the whole file
(``fold_share``). The folded windows are the raw path's either way
(``tests/test_spark_preaggregate.py`` holds them equal on generated inputs); here the
choice itself, and the windows of both choices against ``preaggregate=False``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import tidemark as tm
from tidemark.spark import aggregate
from tidemark.spark._preagg import fold_share

T0 = 1_767_225_600_000_000
S = 1_000_000


def rows(n: int, keys: int, span_s: int, ordered: bool, seed: int = 5) -> pa.Table:
    rng = np.random.default_rng(seed)
    ts = T0 + rng.integers(0, span_s * S, n)
    if ordered:
        ts = np.sort(ts)
    return pa.table(
        {
            "k": pa.array(rng.integers(0, keys, n)),
            "ts": pa.array(ts, pa.timestamp("us", tz="UTC")),
            "v": pa.array(rng.integers(0, 100, n), pa.int32()),
        }
    )


def true_share(t: pa.Table, pane: int) -> float:
    ts = t.column("ts").cast(pa.int64()).to_numpy()
    keyed = pa.table({"k": t.column("k"), "p": ts // pane})
    return keyed.group_by(["k", "p"]).aggregate([]).num_rows / t.num_rows


def estimate(t: pa.Table, sample: int, pane: int = 10 * S) -> float:
    head = t.slice(0, sample)
    return fold_share(head.select(["k"]), head.column("ts").cast(pa.int64()), pane, 0, t.num_rows)


@pytest.mark.parametrize(
    ("keys", "span_s"),
    [(1_000, 100), (5_000, 100), (20_000, 100), (10_000, 3_600), (100, 10_000)],
)
def test_a_shuffled_samples_share_is_extrapolated_to_the_whole(keys: int, span_s: int) -> None:
    # Rows in random order: the first 20,000 of 200,000 are a random sample, whose own
    # share of groups is far above the whole's where keys have many rows per pane.
    t = rows(200_000, keys, span_s, ordered=False)
    want, got = true_share(t, 10 * S), estimate(t, 20_000)
    head = t.slice(0, 20_000)
    own = fold_share(head.select(["k"]), head.column("ts").cast(pa.int64()), 10 * S, 0, 0)
    assert own == pytest.approx(true_share(head, 10 * S))
    assert want / 2 <= got <= min(1.0, want * 2), (want, got)


@pytest.mark.parametrize(("keys", "span_s"), [(1_000, 100), (10_000, 3_600), (100, 10_000)])
def test_a_time_ordered_samples_share_is_its_own(keys: int, span_s: int) -> None:
    # Rows in event-time order: the sample is a stretch of time, as dense as the whole.
    t = rows(200_000, keys, span_s, ordered=True)
    head = t.slice(0, 20_000)
    assert estimate(t, 20_000) == pytest.approx(true_share(head, 10 * S))
    assert true_share(t, 10 * S) / 2 <= estimate(t, 20_000) <= 2 * true_share(t, 10 * S)


def folded(result: Any) -> bool:
    """Whether a result's windows come from Spark's fold (an aggregation in the plan)."""
    return "Aggregate" in str(result.windows._jdf.queryExecution().analyzed().toString())


def windows(df: Any) -> list[tuple[Any, ...]]:
    return sorted((r["k"], r["window_start"], r["n"], r["total"], r["top"]) for r in df.collect())


@pytest.mark.spark
def test_by_default_a_dense_parquet_input_folds_and_a_sparse_one_does_not(
    spark: Any, tmp_path: Path
) -> None:
    pipe = tm.Pipeline(
        key="k",
        event_time="ts",
        watermark=tm.BoundedOutOfOrderness("5s", per="key"),
        window=tm.Tumbling("10s"),
        aggs={"n": tm.count(), "total": tm.sum("v"), "top": tm.max("v")},
    )
    cases = {
        "dense": rows(100_000, 100, 100, ordered=False),  # 1,000 rows per key and pane
        "dense_in_order": rows(100_000, 100, 100, ordered=True),
        "sparse": rows(100_000, 10_000, 3_600, ordered=False),  # 0.03
    }
    for name, table in cases.items():
        path = tmp_path / f"{name}.parquet"
        pq.write_table(table, path, row_group_size=25_000)
        df = spark.read.parquet(str(path))
        if name == "dense":
            # 100,000 rows fit one task, where the default runs raw (no shuffle either
            # way); spread over 4 tasks (as a larger input is), the sample decides.
            assert not folded(aggregate(df, pipe)), name
        res = aggregate(df, pipe, 4)
        assert folded(res) == name.startswith("dense"), name
        raw = aggregate(df, pipe, 4, preaggregate=False)
        assert not folded(raw)
        assert windows(res.windows) == windows(raw.windows), name
    # Not a bare Parquet scan: nothing to sample, the raw path.
    dense = spark.read.parquet(str(tmp_path / "dense.parquet"))
    assert not folded(aggregate(dense.filter("v >= 0"), pipe, 4))
    assert not folded(aggregate(dense.selectExpr("k", "ts", "v * 2 AS v"), pipe, 4))
    assert not folded(aggregate(spark.createDataFrame(cases["dense"].slice(0, 1000)), pipe, 4))
