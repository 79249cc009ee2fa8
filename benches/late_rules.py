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

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

import tidemark as tm
from tidemark.datagen import StreamSpec, multi_tenant_stream

WINDOW_US = 60_000_000
DELAY_US = 5_000_000


def batches_of(events: int, tenants: int, batches: int) -> list[pa.Table]:
    """The demo's stream (``tidemark demo``'s generator settings) in its micro-batches."""
    spec = StreamSpec(keys=tenants, events=events, duration_s=1_800, delayed_fraction=0.5, skew=0.8)
    stream = multi_tenant_stream(spec).select(["tenant", "event_time", "value"])
    rows = -(-stream.num_rows // batches)
    return [stream.slice(i * rows, rows) for i in range(batches)]


def window_end_rule(batches: list[pa.Table], lag: int) -> int:
    """Events counted when a row counts while its window ends after the watermark of
    ``lag`` batches before (1: the current one)."""
    marks: list[int] = []
    seen: int | None = None
    counted = 0
    for b in batches:
        us = pc.cast(b.column("event_time"), pa.int64()).to_numpy()
        end = (us // WINDOW_US + 1) * WINDOW_US
        mark = marks[-lag] if len(marks) >= lag else None
        counted += len(us) if mark is None else int(np.count_nonzero(end > mark))
        seen = int(us.max()) if seen is None else max(seen, int(us.max()))
        marks.append(seen - DELAY_US)
    return counted


def tidemark_rule(batches: list[pa.Table], per: str, lateness: str) -> int:
    """Events the pipeline counts in its windows (flushed at the end)."""
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
    return sum(pc.sum(o.windows.column("n")).as_py() or 0 for o in outs)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--events", type=int, default=200_000)
    ap.add_argument("--tenants", type=int, default=200)
    ap.add_argument("--batches", type=int, default=20)
    args = ap.parse_args()
    batches = batches_of(args.events, args.tenants, args.batches)
    total = sum(b.num_rows for b in batches)
    rules = [
        ("Spark: window end > the previous batch's watermark", window_end_rule(batches, 2)),
        ("window end > the current watermark", window_end_rule(batches, 1)),
        ('tidemark global, allowed_lateness="1m"', tidemark_rule(batches, "global", "1m")),
        ('tidemark global, allowed_lateness="0s"', tidemark_rule(batches, "global", "0s")),
        ('tidemark per key, allowed_lateness="0s"', tidemark_rule(batches, "key", "0s")),
    ]
    print(f"{total:,} events, {len(batches)} micro-batches, 1-minute windows, 5 s delay")
    for label, counted in rules:
        print(f"  {label:<52} {100 * counted / total:6.2f}% of events counted")


if __name__ == "__main__":
    main()
