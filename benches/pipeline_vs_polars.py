"""Pipeline throughput from Python, against polars group_by on the same data.

Run from the repository root (after ``make build``)::

    python benches/pipeline_vs_polars.py            # 30 batches of 64K rows, 10K keys
    python benches/pipeline_vs_polars.py --batches 10 --repeat 5
    python benches/pipeline_vs_polars.py --cores 1 2      # thread-per-core scaling

Workload (issue: Pipeline performance): tumbling 10 s count + sum and session (gap 30 s)
with per-key watermarks (bounded delay 5 s), 10K keys, 65,536-row batches. polars
computes the same tumbling GROUP BY as one batch computation with no watermark at all.
Prints the median of ``--repeat`` runs and the ratio against polars. With ``--cores``,
also the tumbling pipeline on each core count (``pipe.operator(cores=N)``) and the
scaling efficiency against one core, ``rate(N) / (N * rate(1))``.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import pyarrow as pa

try:
    import polars as pl
except ImportError:  # the comparison line is skipped without the polars extra
    pl = None

import tidemark as tm
from record import documented, record

ROWS, KEYS = 65_536, 10_000


def make_batches(n: int) -> list[pa.Table]:
    rng = np.random.default_rng(1)
    out = []
    for i in range(n):
        ts = np.sort(rng.integers(0, 10_000_000, ROWS)) + i * 10_000_000
        out.append(
            pa.table(
                {
                    "device": pa.array(rng.integers(0, KEYS, ROWS)),
                    "ts": pa.array(ts, pa.timestamp("us", tz="UTC")),
                    "value": pa.array(rng.normal(0, 1, ROWS)),
                }
            )
        )
    return out


def run_pipeline(window: object, data: list[pa.Table], cores: int = 1) -> float:
    pipe = tm.Pipeline(
        key="device",
        event_time="ts",
        watermark=tm.BoundedOutOfOrderness("5s", per="key"),
        window=window,  # type: ignore[arg-type]
        aggs={"n": tm.count(), "s": tm.sum("value")},
    )
    op = pipe.operator(cores=cores)
    t = time.perf_counter()
    for b in data:
        op.process(b)
    op.flush()
    return time.perf_counter() - t


def run_polars(data: list[pa.Table]) -> float:
    df = pl.from_arrow(pa.concat_tables(data))
    t = time.perf_counter()
    df.group_by([pl.col("device"), pl.col("ts").dt.truncate("10s")]).agg(
        pl.len(), pl.col("value").sum()
    )
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--batches", type=int, default=30)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--cores", type=int, nargs="*", default=[], help="core counts to compare")
    ap.add_argument("--record", action="store_true", help="record a run with other settings")
    args = ap.parse_args()
    data = make_batches(args.batches)
    n = ROWS * args.batches
    results = {}
    for label, fn in [
        (
            "tidemark tumbling 10s (per-key watermarks)",
            lambda: run_pipeline(tm.Tumbling("10s"), data),
        ),
        (
            "tidemark session gap 30s (per-key watermarks)",
            lambda: run_pipeline(tm.Session(gap="30s"), data),
        ),
        *([("polars group_by (tumbling, no watermark)", lambda: run_polars(data))] if pl else []),
    ]:
        secs = statistics.median(fn() for _ in range(args.repeat))
        results[label] = n / secs
    base = results.get("polars group_by (tumbling, no watermark)")
    print(f"{n:,} events, {KEYS:,} keys, {ROWS:,}-row batches; median of {args.repeat} runs")
    if base is None:
        print("  (polars is not installed: no comparison line)")
    rows = []
    for label, eps in results.items():
        ratio = f"   ({eps / base:.2f}x polars)" if base else ""
        print(f"  {label:<48} {eps / 1e6:8.2f} M events/s{ratio}")
        rows.append([label, f"{eps / 1e6:.2f} M", f"{eps / base:.2f}x" if base else "-"])
    if documented(ap, args) and base is not None:
        record(
            "pipeline_vs_polars",
            title="The operator against polars' group_by",
            what=(
                f"The pipeline from Python on pyarrow batches (no Spark): {n:,} events in "
                f"{ROWS:,}-row batches over {KEYS:,} keys, tumbling 10 s count + sum and "
                "sessions (30 s gap) with per-key watermarks (5 s delay), against polars "
                "computing the same tumbling GROUP BY as one batch computation with no "
                f"watermark. Medians of {args.repeat} runs, one core."
            ),
            command="python benches/pipeline_vs_polars.py",
            master=None,
            columns=["system", "events/s", "vs polars"],
            rows=rows,
        )
    one = None
    for cores in args.cores:
        secs = statistics.median(
            run_pipeline(tm.Tumbling("10s"), data, cores) for _ in range(args.repeat)
        )
        eps = n / secs
        one = one or (eps if cores == 1 else None)
        eff = f"   scaling efficiency {eps / (cores * one):.0%}" if one else ""
        print(f"  {f'tidemark tumbling 10s, cores={cores}':<48} {eps / 1e6:8.2f} M events/s{eff}")


if __name__ == "__main__":
    main()
