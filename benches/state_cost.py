"""What the size of the state costs a streaming micro-batch.

Every micro-batch of ``tidemark.spark.StreamProcessor`` restores each state partition
from its last snapshot and writes a new one, so a micro-batch's cost grows with the
state it carries, not only with its rows. This measures one state partition's work per
micro-batch, outside Spark, with the state store on local disk: read the snapshot file,
restore the operator, process the batch, take the snapshot, write the file (and prune).

Run from the repository root (after ``make build``)::

    python benches/state_cost.py                          # 10K, 100K and 1M keys
    python benches/state_cost.py --keys 100000 --batch-rows 50000

The pipeline is a per-key tumbling count + sum; the state holds every key with one
open window (the keys' event times spread over 50 s of a 1-minute window).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import numpy as np
import pyarrow as pa

import tidemark as tm
from record import documented, record
from tidemark.spark.state import StateStore

T0 = 1_767_225_600_000_000  # 2026-01-01, in microseconds
PHASES = ("read", "restore", "process", "snapshot", "write")


def _rows(rng: np.random.Generator, keys: int, n: int, start: int) -> pa.Table:
    return pa.table(
        {
            "k": pa.array(rng.integers(0, keys, n)),
            "ts": pa.array(start + rng.integers(0, 50_000_000, n), pa.timestamp("us", tz="UTC")),
            "v": rng.normal(0, 1, n),
        }
    )


def measure(keys: int, batch_rows: int, batches: int) -> tuple[int, dict[str, float]]:
    """Snapshot bytes and the median seconds of each phase over ``batches`` batches."""
    rng = np.random.default_rng(1)
    pipe = tm.Pipeline(
        key="k",
        event_time="ts",
        watermark=tm.BoundedOutOfOrderness("5s", per="key"),
        window=tm.Tumbling("1m"),
        aggs={"n": tm.count(), "s": tm.sum("v")},
    )
    store = StateStore(tempfile.mkdtemp(prefix="tidemark-state-cost-"))
    op = pipe.operator()
    op.process(_rows(rng, keys, 2 * keys, T0))
    store.write("p/0.snap", op.snapshot())
    del op
    inputs = [_rows(rng, keys, batch_rows, T0 + 10_000_000 * (i + 1)) for i in range(batches)]
    times: dict[str, list[float]] = {p: [] for p in PHASES}
    size = 0
    for i, rows in enumerate(inputs):
        t = [time.perf_counter()]
        data = store.read(f"p/{i}.snap")
        t.append(time.perf_counter())
        op = pipe.operator(state=data)
        t.append(time.perf_counter())
        op.process(rows)
        t.append(time.perf_counter())
        snap = op.snapshot()
        t.append(time.perf_counter())
        store.write(f"p/{i + 1}.snap", snap)
        store.prune("p", ".snap", i)
        t.append(time.perf_counter())
        size = len(snap)
        del op, data, snap
        for phase, a, b in zip(PHASES, t[:-1], t[1:], strict=True):
            times[phase].append(b - a)
    return size, {p: statistics.median(v) for p, v in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keys", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    ap.add_argument("--batch-rows", type=int, default=10_000)
    ap.add_argument("--batches", type=int, default=9, help="micro-batches measured (median)")
    ap.add_argument("--record", action="store_true", help="record a run with other settings")
    args = ap.parse_args()
    print(
        f"One state partition per micro-batch of {args.batch_rows:,} rows, local disk; "
        f"medians of {args.batches} micro-batches (ms)\n"
    )
    print("| keys in state | snapshot size | total | " + " | ".join(PHASES) + " |")
    print("|---" * (len(PHASES) + 3) + "|")
    rows = []
    for keys in args.keys:
        size, med = measure(keys, args.batch_rows, args.batches)
        total = sum(med.values())
        cells = [f"{med[p] * 1e3:.0f}" for p in PHASES]
        rows.append([f"{keys:,}", f"{size / 1e6:.1f} MB", f"{total * 1e3:.0f}", *cells])
        print("| " + " | ".join(rows[-1]) + " |", flush=True)
    if documented(ap, args):
        record(
            "state_cost",
            title="What the state's size costs a micro-batch",
            what=(
                "One state partition's work per micro-batch of a `StreamProcessor`, outside "
                f"Spark, state store on local disk: a micro-batch of {args.batch_rows:,} rows "
                "on a state of N keys (a per-key tumbling count + sum, one open window a key): "
                "read the snapshot, restore the operator, process the rows, take the snapshot, "
                f"write it. Medians of {args.batches} micro-batches, in milliseconds."
            ),
            command="python benches/state_cost.py",
            master=None,
            columns=["keys in state", "snapshot size", "total ms", *(f"{p} ms" for p in PHASES)],
            rows=rows,
        )


if __name__ == "__main__":
    main()
