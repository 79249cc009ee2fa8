"""Accuracy of global vs per-key watermarks on generated multi-tenant streams.

Run from the repository root (after ``make build``)::

    python benches/keyed_accuracy.py                 # the scenario table (about 1 min)
    python benches/keyed_accuracy.py --compact       # compact vs exact tracker, 1M keys
    python benches/keyed_accuracy.py --events 200000 # smaller
    python benches/keyed_accuracy.py --skew 1.2 --delay-range 10s,2m --burst-on 0.25
                                                     # one scenario of your own

Same as ``tidemark accuracy``; every flag is listed by ``--help``. Run without flags, it
records the scenario table on the benchmarks page.
"""

from __future__ import annotations

import sys

from record import record
from tidemark_tools.accuracy import run_scenarios
from tidemark_tools.cli import main


def record_scenarios() -> None:
    """The default scenarios, measured and recorded (what ``tidemark accuracy`` prints)."""
    results = list(run_scenarios())
    rows = []
    for r in results:
        rows.append(
            [
                r.scenario,
                f"{r.events:,}",
                f"{r.global_kept:.1%}",
                f"{r.keyed_kept:.2%}",
                "-" if r.global_kept_delayed_keys is None else f"{r.global_kept_delayed_keys:.1%}",
                "-" if r.keyed_kept_delayed_keys is None else f"{r.keyed_kept_delayed_keys:.2%}",
            ]
        )
        print(" | ".join(rows[-1]), flush=True)
    record(
        "keyed_accuracy",
        title="Global against per-key watermarks on generated multi-tenant streams",
        what=(
            "The share of events counted in their window (not late) under one global "
            "watermark and under per-key watermarks with the same bounded delay (5 s), on "
            "`tidemark_tools.datagen.multi_tenant_stream`'s scenarios (skewed keys, delayed "
            "tenants, bursts), replayed in arrival order in batches of 10,000 rows through "
            "the trackers; for the delayed keys alone where a scenario has them."
        ),
        command="python benches/keyed_accuracy.py",
        master=None,
        columns=[
            "scenario",
            "events",
            "global watermark",
            "per-key watermarks",
            "delayed keys: global",
            "delayed keys: per-key",
        ],
        rows=rows,
    )


if __name__ == "__main__":
    if len(sys.argv) == 1:
        record_scenarios()
        sys.exit(0)
    sys.exit(main(["accuracy", *sys.argv[1:]]))
