"""Which rows count: Spark's late-row rule against tidemark's, on the demo's stream.

Run from the repository root (after ``make build``)::

    python benches/late_rules.py                     # the demo's stream and batching
    python benches/late_rules.py --events 1000000 --batches 50

The demo (``make demo``) runs the same windowed count on Spark and on tidemark with
one bounded delay and window. With a global watermark Spark counts more events than
tidemark. This script replays the demo's stream, cut into the same micro-batches,
through each rule in plain Python (no Spark), and prints the share of events each one
counts. The watermark is the same for all of them: the largest event time of the
batches before, minus the delay.

* Spark: a row is dropped only when its window's end is at or before the watermark of
  the batch before (Spark judges late rows against the previous batch's watermark);
* the same window-end rule against the current watermark;
* tidemark's pipeline, global and per key, with and without ``allowed_lateness``:
  a row is late when ``ts < W - allowed_lateness``.

See docs/guide/late-data.md ("Compared with Spark").
"""

from __future__ import annotations

import argparse

import pyarrow as pa
import pyarrow.compute as pc

import tidemark as tm
from tidemark.demo_streaming import demo_stream, micro_batches, spark_rule_share


def tidemark_share(batches: list[pa.Table], per: str, lateness: str) -> float:
    """The share of events the pipeline counts in its windows (flushed at the end)."""
    pipe = tm.Pipeline(
        key="tenant",
        event_time="event_time",
        watermark=tm.BoundedOutOfOrderness("5s", per=per),
        window=tm.Tumbling("1m"),
        aggs={"n": tm.count()},
        allowed_lateness=lateness,
    )
    op = pipe.operator()
    outs = [op.process(b) for b in batches] + [op.flush()]
    counted = sum(pc.sum(o.windows.column("n")).as_py() or 0 for o in outs)
    return counted / sum(b.num_rows for b in batches)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--events", type=int, default=200_000)
    ap.add_argument("--tenants", type=int, default=200)
    ap.add_argument("--batches", type=int, default=20)
    args = ap.parse_args()
    batches = micro_batches(demo_stream(args.events, args.tenants), args.batches)
    total = sum(b.num_rows for b in batches)
    rules = [
        ("Spark: window end > the previous batch's watermark", spark_rule_share(batches, 2)),
        ("window end > the current watermark", spark_rule_share(batches, 1)),
        ('tidemark global, allowed_lateness="1m"', tidemark_share(batches, "global", "1m")),
        ('tidemark global, allowed_lateness="0s"', tidemark_share(batches, "global", "0s")),
        ('tidemark per key, allowed_lateness="0s"', tidemark_share(batches, "key", "0s")),
    ]
    print(f"{total:,} events, {len(batches)} micro-batches, 1-minute windows, 5 s delay")
    for label, share in rules:
        print(f"  {label:<52} {share:7.2%} of events counted")


if __name__ == "__main__":
    main()
