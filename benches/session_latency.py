"""How late per-key sessions close, and what the remedies cost.

Mobile users (``tidemark_tools.datagen.mobile_sessions``: 5,000 users over 24 hours, a tenth
of whom upload each session 2-6 hours late) in micro-batches of one minute of arrival
time, 30-minute session windows. Per key, a user's session closes when the user's own
watermark passes its end: when the user sends again, which may be hours later. The
remedies: idleness in event time (an idle user's session closes on the global
watermark, the minimum over the active users) and allowed lateness (an idle user's
session waits that much longer, so a late upload still joins it).

For each set-up it prints the sessions exactly right (bounds and count, against the
sessions of all the data), the events counted in a session, the late rows, the
sessions only the flush emitted, and the latency of a session's emission (from its
end in event time to the arrival time of the micro-batch that emitted it: median and
99th percentile, for every user and for the offline ones).

    python benches/session_latency.py [--users 5000] [--idle 30m] [--lateness 6h]
"""

from __future__ import annotations

import argparse
from collections import Counter
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

import tidemark as tm
from record import documented, record
from tidemark_tools.datagen import mobile_sessions

GAP_S = 30 * 60


def truth(stream: pa.Table) -> Counter[tuple[str, int, int]]:
    """Each user's sessions over all the data: (user, start, end) -> events."""
    d = stream.select(["user", "ts"]).to_pydict()
    by_user: dict[str, list[int]] = {}
    for u, t in zip(d["user"], d["ts"], strict=True):
        by_user.setdefault(u, []).append(int(t.timestamp() * 1e6))
    out: Counter[tuple[str, int, int]] = Counter()
    for u, ts in by_user.items():
        ts.sort()
        start, last, n = ts[0], ts[0], 1
        for t in ts[1:]:
            if t - last > GAP_S * 1_000_000:  # touching sessions merge: gap <= 30 min
                out[(u, start, last + GAP_S * 1_000_000)] = n
                start, n = t, 0
            last, n = t, n + 1
        out[(u, start, last + GAP_S * 1_000_000)] = n
    return out


def pipeline(per: str, idle: str | None, lateness: str) -> tm.Pipeline:
    return tm.Pipeline(
        key="user",
        event_time="ts",
        window=tm.Session(gap="30m"),
        aggs={"n": tm.count()},
        watermark=tm.BoundedOutOfOrderness("1m", per=per, idle_timeout=idle),
        allowed_lateness=lateness,
    )


def percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def run(pipe: tm.Pipeline, stream: pa.Table, offline: set[str]) -> dict[str, Any]:
    minute = pc.divide(pc.cast(stream["arrival"], pa.int64()), 60_000_000)
    op = pipe.operator()
    emitted: list[tuple[tuple[str, int, int], int, float | None]] = []
    late = 0
    bounds = pc.unique(minute).to_pylist()
    data = stream.select(["user", "ts"])
    for m in bounds:
        out = op.process(data.filter(pc.equal(minute, m)))
        late += out.late.num_rows
        now = (m + 1) * 60.0  # the micro-batch's arrival time, in seconds
        for r in out.windows.to_pylist():
            key = (
                r["user"],
                int(r["window_start"].timestamp() * 1e6),
                int(r["window_end"].timestamp() * 1e6),
            )
            emitted.append((key, r["n"], now - key[2] / 1e6))
    for r in op.flush().windows.to_pylist():
        key = (
            r["user"],
            int(r["window_start"].timestamp() * 1e6),
            int(r["window_end"].timestamp() * 1e6),
        )
        emitted.append((key, r["n"], None))
    return {"emitted": emitted, "late": late}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--users", type=int, default=5_000)
    ap.add_argument("--idle", default="30m", help="idle_timeout of the remedies")
    ap.add_argument("--lateness", default="6h", help="allowed_lateness of the last remedy")
    ap.add_argument("--record", action="store_true", help="record a run with other settings")
    args = ap.parse_args()
    stream = mobile_sessions(users=args.users)
    offline = set(stream.filter(stream["offline"])["user"].to_pylist())
    want = truth(stream)
    events = stream.num_rows
    print(
        f"{args.users:,} users, {events:,} events, {len(want):,} sessions; "
        f"{len(offline):,} users upload 2-6 h late; micro-batches of one minute of arrival"
    )
    print(
        f"{'set-up':<38} {'exact':>7} {'counted':>8} {'late':>6} {'at flush':>8} "
        f"{'median':>8} {'p99':>8} {'offline median':>14} {'offline p99':>11}"
    )
    setups = [
        ("global watermark (Spark's)", pipeline("global", None, "0s")),
        ("per key", pipeline("key", None, "0s")),
        (f"per key, idle after {args.idle}", pipeline("key", args.idle, "0s")),
        (
            f"per key, idle {args.idle}, lateness {args.lateness}",
            pipeline("key", args.idle, args.lateness),
        ),
    ]
    rows = []
    for name, pipe in setups:
        r = run(pipe, stream, offline)
        exact = sum(1 for k, n, _ in r["emitted"] if want.get(k) == n)
        counted = sum(n for _, n, _ in r["emitted"])
        flushed = sum(1 for *_, lat in r["emitted"] if lat is None)
        lat = [x / 60 for _, _, x in r["emitted"] if x is not None]
        off = [x / 60 for k, _, x in r["emitted"] if x is not None and k[0] in offline]
        print(
            f"{name:<38} {exact / len(want):>7.2%} {counted / events:>8.2%} {r['late']:>6,} "
            f"{flushed:>8,} {percentile(lat, 0.5):>7.1f}m {percentile(lat, 0.99):>7.1f}m "
            f"{percentile(off, 0.5):>13.1f}m {percentile(off, 0.99):>10.1f}m"
        )
        rows.append(
            [
                name,
                f"{exact / len(want):.2%}",
                f"{counted / events:.2%}",
                f"{r['late']:,}",
                f"{flushed:,}",
                f"{percentile(lat, 0.5):.1f} / {percentile(lat, 0.99):.1f} min",
                (
                    f"{percentile(off, 0.5):.1f} / {percentile(off, 0.99):.1f} min"
                    if off
                    else "none emitted (dropped as late)"
                ),
            ]
        )
    if documented(ap, args):
        record(
            "session_latency",
            title="How late per-key sessions close",
            what=(
                f"`tidemark_tools.datagen.mobile_sessions`: {args.users:,} users over 24 hours "
                f"({events:,} events, {len(want):,} sessions of 30 minutes' gap; "
                f"{len(offline):,} users upload each session 2-6 hours late), in micro-batches "
                "of one minute of arrival time. The sessions exactly right (bounds and count), "
                "the events counted, the late rows, the sessions only the flush emitted, and "
                "the latency of a session: from its end in event time to the arrival time of "
                "the micro-batch that emitted it (median / p99; for every user and for the "
                "offline ones)."
            ),
            command="python benches/session_latency.py",
            master=None,
            columns=[
                "set-up",
                "sessions exactly right",
                "events counted",
                "late rows",
                "only at the flush",
                "latency, median / p99",
                "offline users, median / p99",
            ],
            rows=rows,
        )


if __name__ == "__main__":
    main()
