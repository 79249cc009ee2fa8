"""The demo's stream (``make demo``), recorded for the benchmarks page: Spark's
``withWatermark`` + ``window`` against tidemark with a global and a per-key watermark.

Run from the repository root (after ``make build``)::

    python benches/demo.py                    # the demo's defaults, recorded
    python benches/demo.py --events 50000     # smaller, not recorded
"""

from __future__ import annotations

import argparse

from record import documented, record
from tidemark_tools.demo_streaming import DELAY, WINDOW, _versus_spark, run_demo
from tidemark_tools.session import local_session

DEFAULTS = {"events": 200_000, "tenants": 200, "batches": 20, "partitions": 4}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name, value in DEFAULTS.items():
        ap.add_argument(f"--{name}", type=int, default=value)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--record", action="store_true", help="record even with other settings")
    args = ap.parse_args()
    spark = local_session(args.master, "tidemark-demo-bench", args.partitions)
    try:
        result = run_demo(spark, **{k: getattr(args, k) for k in DEFAULTS})
    finally:
        spark.stop()
    rows = [
        [
            s.name,
            f"{s.events_counted:.2%}",
            f"{s.windows_right:.2%}",
            f"{s.late_rows:,}" if s.late_rows is not None else "-",
            _versus_spark(s),
            f"{s.events_per_s:,.0f}",
        ]
        for s in result.systems
    ]
    columns = ["system", "events counted", "windows exact", "late rows", "vs Spark", "events/s"]
    print(" | ".join(columns))
    for r in rows:
        print(" | ".join(r))
    if documented(ap, args):
        by = {s.name: s for s in result.systems}
        spark_s = by["Spark withWatermark + window"]
        keyed = by["tidemark, per-key watermarks"]
        record(
            "demo",
            title="The demo: half of the tenants report late",
            what=(
                f"The demo's stream (`make demo`): {result.events:,} events from "
                f"{result.tenants} tenants, half of which report 30-300 s late, read by "
                f"Structured Streaming in {result.batches} micro-batches of a file stream; "
                f"{WINDOW} tumbling windows per tenant, {DELAY} delay. Each system's windows "
                "against a batch GROUP BY over all events: the events counted in their "
                "window, the windows exactly right; tidemark with a global watermark is "
                "checked against Spark's own output in the same run."
            ),
            command="python benches/demo.py",
            master=args.master,
            columns=columns,
            rows=rows,
            headline=[
                {
                    "benchmark": f"demo: half of {result.tenants} tenants late (events counted)",
                    "spark": f"{spark_s.events_counted:.2%}",
                    "tidemark": f"{keyed.events_counted:.2%}",
                },
                {
                    "benchmark": "demo: events per second, whole run (per-key watermarks)",
                    "spark": f"{spark_s.events_per_s:,.0f}",
                    "tidemark": f"{keyed.events_per_s:,.0f}",
                },
            ],
        )


if __name__ == "__main__":
    main()
