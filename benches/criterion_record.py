"""Runs a criterion bench of the Rust core and records its medians on the benchmarks page.

    python benches/criterion_record.py reorder                     # the reorder buffer
    python benches/criterion_record.py pipeline runtime/tumbling   # cores=1, 2, 4, ...

``cargo bench -p tidemark-benches --bench BENCH -- FILTER`` runs first (criterion's
``--noplot``); its estimates (``target/criterion/<id>/new/estimates.json``) give each
benchmark's median time and, where the bench declares its throughput, rows per second.
Lines a bench prints that start with ``memory:`` go below the table. The result is
``benches/results/criterion_<bench>[_<filter>].json`` (see ``benches/record.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from record import record

ROOT = Path(__file__).resolve().parent.parent
CRITERION = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target")) / "criterion"

#: What each bench measures (the page's sentence).
WHAT = {
    "reorder": (
        "The event-time reorder buffer alone (`ReorderOperator`, one core): 64K-row batches "
        "with 1%, 10% or 50% of their rows out of order, released in event-time order "
        "behind a 2 s tolerance, and the memory a buffered row takes."
    ),
    "pipeline": (
        "The pipeline operator in the Rust core (no Spark, no Python): tumbling 10 s "
        "count and sum over 10K keys with per-key watermarks, 8 batches of 64K rows, on "
        "1, 2, 4, ... cores of the thread-per-core runtime (as many as the machine has)."
    ),
}


def estimates(filter_: str) -> list[dict[str, Any]]:
    """Every benchmark under ``target/criterion`` whose id matches ``filter_``: its id,
    median (ns) and throughput (elements per iteration, or ``None``)."""
    found = []
    for bench in CRITERION.rglob("new/benchmark.json"):
        meta = json.loads(bench.read_text())
        full = meta["full_id"]
        if not re.search(filter_, full):
            continue
        est = json.loads((bench.parent / "estimates.json").read_text())
        throughput = meta.get("throughput") or {}
        found.append(
            {
                "id": full,
                "median_ns": est["median"]["point_estimate"],
                "elements": throughput.get("Elements"),
            }
        )
    return sorted(found, key=lambda e: _natural(e["id"]))


def _natural(s: str) -> list[Any]:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", s)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bench", choices=sorted(WHAT), help="the criterion bench")
    ap.add_argument("filter", nargs="?", default="", help="criterion's filter (a regex)")
    args = ap.parse_args()
    cmd = ["cargo", "bench", "-p", "tidemark-benches", "--bench", args.bench, "--"]
    cmd += [args.filter] if args.filter else []
    out = subprocess.run(
        [*cmd, "--noplot"], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout
    sys.stdout.write(out)
    found = estimates(args.filter or ".")
    if not found:
        raise SystemExit(f"no criterion estimates under {CRITERION} for {args.filter!r}")
    rows = []
    for e in found:
        ms = e["median_ns"] / 1e6
        rate = "" if e["elements"] is None else f"{e['elements'] / (ms / 1e3) / 1e6:.1f} M"
        rows.append([f"`{e['id']}`", f"{ms:.2f} ms", rate])
    notes = "\n".join(line for line in out.splitlines() if line.startswith("memory:"))
    slug = re.sub(r"[^a-z0-9]+", "_", args.filter.lower()).strip("_")
    name = f"criterion_{args.bench}" + (f"_{slug}" if slug else "")
    command = f"python benches/criterion_record.py {args.bench} {args.filter}".strip()
    record(
        name,
        title=f"Rust core: `{args.bench}`" + (f" `{args.filter}`" if args.filter else ""),
        what=WHAT[args.bench],
        command=command,
        master=None,
        columns=["benchmark", "median time", "rows/s"],
        rows=rows,
        notes=f"Criterion medians. {notes}".strip(),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
