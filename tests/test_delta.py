"""Delta Lake tables as sinks (``tidemark.spark.delta_sink``), real Delta (``delta-spark``
and its jars in the test session)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from tidemark.errors import ConfigError
from tidemark.spark import StreamProcessor, delta_sink
from tidemark_tools.crashtest import pipeline

pytestmark = pytest.mark.spark


def batches() -> list[pa.Table]:
    """Four micro-batches of four tenants; one row of the last is 30 s behind its tenant."""
    return [
        pa.table(
            {
                "tenant": [f"t{(b * 3 + i) % 4}" for i in range(10)],
                "ts": [
                    100_000 + b * 6_000 + (i * 1_373) % 9_000 - (30_000 if (b, i) == (3, 7) else 0)
                    for i in range(10)
                ],
                "value": [b * 10 + i for i in range(10)],
            }
        )
        for b in range(4)
    ]


def rows(df: Any) -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for r in df.collect())


def test_a_replayed_micro_batch_is_written_to_delta_once(spark: Any, tmp_path: Path) -> None:
    data = batches()
    schema = spark.createDataFrame(data[0].to_pandas()).schema
    frames = [spark.createDataFrame(b.to_pandas(), schema) for b in data]

    # Uninterrupted, into a list.
    want: dict[str, list[Any]] = {"windows": [], "late": []}
    ref = StreamProcessor(
        pipeline(),
        str(tmp_path / "ref-state"),
        2,
        sink=lambda df, _b: want["windows"].extend(df.collect()),
        late_sink=lambda df, _b: want["late"].extend(df.collect()),
    )
    for b, df in enumerate(frames):
        ref(df, b)

    # Into Delta tables, every micro-batch run twice (a query that died after its sinks
    # wrote and before Spark committed the batch runs it again).
    tables = {kind: str(tmp_path / kind) for kind in ("windows", "late")}
    proc = StreamProcessor(
        pipeline(),
        str(tmp_path / "state"),
        2,
        sink=delta_sink(tables["windows"]),
        late_sink=delta_sink(tables["late"]),
    )
    emitted = []
    for b, df in enumerate(frames):
        proc(df, b)
        proc(df, b)
        emitted.append(proc.last_progress["window_rows"])
    for kind, where in tables.items():
        got = spark.read.format("delta").load(where)
        assert rows(got) == sorted(tuple(r) for r in want[kind]), kind
        assert want[kind], f"the stream has {kind}"
    # One Delta commit per micro-batch with windows (and the first, which created the
    # table): the replays committed nothing.
    history = spark.sql(f"DESCRIBE HISTORY delta.`{tables['windows']}`").collect()
    with_rows = {b for b, n in enumerate(emitted) if n}
    assert len(history) == len(with_rows | {0})
    # The late table: its first write, and the micro-batch with the late row.
    late_history = spark.sql(f"DESCRIBE HISTORY delta.`{tables['late']}`").collect()
    assert len(late_history) == 2
    # A restarted query's sink (a new one) finds the table: an empty micro-batch the
    # driver computed commits nothing; rows do.
    none = spark.read.format("delta").load(tables["late"]).limit(0).toArrow()
    again = delta_sink(tables["late"])
    again(spark.createDataFrame(none), 4)  # rows on the driver, as StreamProcessor's
    assert len(spark.sql(f"DESCRIBE HISTORY delta.`{tables['late']}`").collect()) == 2
    again(spark.read.format("delta").load(tables["late"]), 5)
    assert len(spark.sql(f"DESCRIBE HISTORY delta.`{tables['late']}`").collect()) == 3


def test_delta_sink_refuses_what_it_cannot_write() -> None:
    with pytest.raises(ConfigError, match="txnVersion"):
        delta_sink("/tmp/x", options={"txnVersion": "3"})
    with pytest.raises(ConfigError, match="arrow_sinks"):
        delta_sink("/tmp/x")(pa.table({"a": [1]}), 0)
