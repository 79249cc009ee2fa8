"""Crash and restart: SIGKILL of a running Structured Streaming driver, twice per run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import tidemark as tm
from tidemark_tools.crashtest import micro_batches_read, outputs, run, run_job, write_input


@pytest.mark.slow(30)
@pytest.mark.parametrize(
    ("where", "kills", "batches"),
    # The state on a local disk, or on an S3-compatible server (a kill mid-upload:
    # twice the chances).
    [("local", 1, 5), ("s3", 2, 6)],
)
def test_sigkilled_streaming_query_restarts_to_identical_output(
    spark: Any, tmp_path: Path, state_in: Any, where: str, kills: int, batches: int
) -> None:
    # Reference: the same job, uninterrupted, in this test session's Spark.
    ref = tmp_path / "reference"
    write_input(ref / "in", batches, 300)
    run_job(ref, spark)
    want = outputs(ref)
    assert len(want["windows"]) == batches + 1 and sum(map(len, want["late"].values())) > 0
    # The checkpoint says which files each micro-batch read: one each here.
    assert micro_batches_read(ref) == [[f"part-{b:05d}.parquet"] for b in range(batches)]
    state = state_in("s3") if where == "s3" else None
    report = run(
        tmp_path, kills=kills, batches=batches, rows=300, seed=3, reference=ref, state=state
    )
    assert report.kills == kills, report  # `tidemark crash-test --kills 40`: the long run
    # A restart may make Spark's file source read two files in one micro-batch; the
    # reference then reads the crash run's micro-batches (report.merged_batches).
    assert report.identical, report


@pytest.mark.parametrize("cut", range(0, 9))
def test_operator_restored_from_any_snapshot_continues_identically(cut: int) -> None:
    pipe = tm.Pipeline(
        key="k",
        event_time="ts",
        event_time_type="unixtimestamp_ms",
        watermark=tm.BoundedOutOfOrderness("1s", per="key"),
        window=tm.Session("2s"),
        aggs={"n": tm.count(), "s": tm.sum("v")},
    )
    batches = [
        pa.table(
            {
                "k": [f"k{(b * 7 + i) % 5}" for i in range(12)],
                "ts": [b * 1_500 + (i * 337) % 2_000 for i in range(12)],
                "v": list(range(12)),
            }
        )
        for b in range(8)
    ]

    def drive(op: tm.Operator, bs: list[pa.Table]) -> list[Any]:
        outs = [op.process(b) for b in bs] + [op.flush()]
        return [(o.windows.to_pylist(), o.late.to_pylist()) for o in outs]

    whole = pipe.operator()
    for b in batches[:cut]:
        whole.process(b)
    snap = whole.snapshot()
    rest = drive(whole, batches[cut:])
    assert any(windows for windows, _ in rest), "the continuation emits windows"
    restored = pipe.operator(state=snap)
    assert drive(restored, batches[cut:]) == rest
