"""Which rows count under each late rule, on the demo's stream.

Run from the repository root (after ``make build``)::

    python benches/late_rules.py                     # the demo's stream and batching
    python benches/late_rules.py --events 1000000 --batches 50

The demo (``make demo``) runs the same windowed count on Spark and on tidemark with
one bounded delay and window. This script replays the demo's stream, cut into the same
micro-batches, through tidemark's operator under each ``late_rule`` (global and per
key), next to Spark's rule replayed in plain Python (no Spark; the demo and
tests/test_spark_parity.py check that tidemark's ``"spark"`` rule gives Spark's own
output), and prints the share of events each one counts:

* ``"spark"``: a row is late when its window ended by the watermark the previous
  micro-batch began with; a micro-batch closes what its starting watermark passed;
* ``"flink"``: a row is late when its window ended by the watermark its micro-batch
  began with; windows close as soon as the watermark passes them;
* ``"row"``: a row is late when ``ts < W - allowed_lateness``.

See docs/guide/late-data.md.
"""

from __future__ import annotations

import argparse

import pyarrow as pa
import pyarrow.compute as pc

import tidemark as tm
from record import documented, record
from tidemark_tools.demo_streaming import demo_stream, micro_batches, spark_rule_share


def tidemark_share(batches: list[pa.Table], per: str, lateness: str, rule: str) -> float:
    """The share of events the pipeline counts in its windows (flushed at the end)."""
    pipe = tm.Pipeline(
        key="tenant",
        event_time="event_time",
        watermark=tm.BoundedOutOfOrderness("5s", per=per),
        window=tm.Tumbling("1m"),
        aggs={"n": tm.count()},
        allowed_lateness=lateness,
        late_rule=rule,  # type: ignore[arg-type]
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
    ap.add_argument("--record", action="store_true", help="record even with other settings")
    args = ap.parse_args()
    batches = micro_batches(demo_stream(args.events, args.tenants), args.batches)
    total = sum(b.num_rows for b in batches)
    rules = [
        (
            "Spark itself, replayed: window end > the previous batch's watermark",
            spark_rule_share(batches, 2),
        )
    ]
    for per in ("global", "key"):
        for rule in ("spark", "flink", "row"):
            for lateness in ("0s", "1m") if per == "global" else ("0s",):
                label = f'tidemark {per}, late_rule="{rule}", allowed_lateness="{lateness}"'
                rules.append((label, tidemark_share(batches, per, lateness, rule)))
    print(f"{total:,} events, {len(batches)} micro-batches, 1-minute windows, 5 s delay")
    for label, share in rules:
        print(f"  {label:<70} {share:7.2%} of events counted")
    if documented(ap, args):
        record(
            "late_rules",
            title="Late rules on the demo's stream",
            what=(
                f"Which events each late rule counts: the demo's stream ({total:,} events, "
                f"{args.tenants} tenants, half of them 30-300 s late, {len(batches)} "
                "micro-batches, 1-minute windows, 5 s delay) through tidemark's operator "
                "under each `late_rule`, global and per key, beside Spark's rule replayed "
                "in plain Python (no Spark: the demo and `tests/test_spark_parity.py` hold "
                "tidemark's `\"spark\"` rule to Spark's own output)."
            ),
            command="python benches/late_rules.py",
            master=None,
            columns=["rule", "events counted"],
            rows=[[label, f"{share:.2%}"] for label, share in rules],
        )


if __name__ == "__main__":
    main()
