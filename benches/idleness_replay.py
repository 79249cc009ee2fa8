"""Idleness in event time against idleness on the clock, replayed at two speeds.

The IoT stream of the progress issue (``tidemark_tools.datagen.iot_stream``: 12 partitions of
20 devices, one partition 60 s behind, two that fall silent after minute 8) is replayed
in micro-batches of ``--rows`` rows, through a per-partition watermark (5 s of delay,
partitions idle after ``--idle``, one-minute windows per device), with the clock
advancing ``--speeds`` seconds per micro-batch (a backfill read fast, a slower replay).
After the last micro-batch the stream goes quiet: ``--quiet`` calls without rows follow,
one a trigger interval (``--trigger`` seconds of clock) apart, as
``StreamProcessor.start``'s heartbeat runs them; then the flush.

For each idleness and speed it prints: the windows emitted while rows came, in the
quiet calls, and only at the flush (with the share before the flush), the largest
number emitted by one micro-batch, the events counted in their windows, and whether
the output equals the event-time run's. With ``--spark`` the event-time run also goes
through ``StreamProcessor`` (micro-batches called as ``foreachBatch`` calls them, in the
driver) and must give the same windows micro-batch by micro-batch.

    python benches/idleness_replay.py [--rows 2000] [--speeds 0.36 2.5] [--spark]
"""

from __future__ import annotations

import argparse
import tempfile
from typing import Any

import pyarrow as pa

import tidemark as tm
from record import documented, record
from tidemark_tools.datagen import batches, iot_stream


def pipeline(idleness: str, idle: str) -> tm.Pipeline:
    return tm.Pipeline(
        key="device",
        event_time="ts",
        window=tm.Tumbling("1m"),
        aggs={"n": tm.count(), "total": tm.sum("value")},
        watermark=tm.BoundedOutOfOrderness(
            "5s", per="partition", idle_timeout=idle, idleness=idleness
        ),
    )


def windows(t: pa.Table) -> list[tuple[Any, ...]]:
    if t.num_rows == 0:
        return []
    d = t.select(["device", "window_start", "n", "total"]).to_pydict()
    return sorted(zip(*d.values(), strict=True))


def run(
    pipe: tm.Pipeline, parts: list[pa.Table], step_ms: int, quiet: int, trigger_ms: int
) -> dict[str, Any]:
    """Windows per call: the micro-batches, the quiet calls, the flush."""
    clock = tm.ManualClock(0)
    op = pipe.operator(clock=clock)
    per_batch = []
    for t in parts:
        per_batch.append(windows(op.process(t).windows))
        clock.advance(step_ms)
    quiet_out = []
    for _ in range(quiet):
        clock.advance(trigger_ms)
        quiet_out.append(windows(op.tick().windows))
    flushed = windows(op.flush().windows)
    return {"batches": per_batch, "quiet": quiet_out, "flush": flushed}


def by_stream_processor(
    pipe: tm.Pipeline, parts: list[pa.Table], step_ms: int
) -> list[list[tuple[Any, ...]]]:
    """The windows of each micro-batch through ``StreamProcessor`` in the driver."""
    from tidemark.spark import StreamProcessor
    from tidemark_tools.session import local_session

    spark = local_session("local[2]", app_name="idleness-replay", shuffle_partitions=2)
    now = [0]
    got: dict[int, list[tuple[Any, ...]]] = {}
    with tempfile.TemporaryDirectory() as where:
        proc = StreamProcessor(
            pipe,
            where,
            num_partitions=2,
            sink=lambda t, b: got.__setitem__(b, windows(t)),
            arrow_sinks=True,
            on_driver=True,
            clock=lambda: now[0],
        )
        for b, t in enumerate(parts):
            proc(spark.createDataFrame(t), b)
            now[0] += step_ms
    return [got.get(b, []) for b in range(len(parts))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=2_000, help="rows per micro-batch")
    ap.add_argument("--speeds", type=float, nargs="+", default=[0.36, 2.5])
    ap.add_argument("--idle", default="1m", help="idle_timeout")
    ap.add_argument("--quiet", type=int, default=5, help="calls without rows after the data")
    ap.add_argument("--trigger", type=float, default=10.0, help="seconds between quiet calls")
    ap.add_argument("--spark", action="store_true", help="also run StreamProcessor")
    ap.add_argument("--record", action="store_true", help="record a run with other settings")
    args = ap.parse_args()

    stream = iot_stream()
    parts = batches(stream.drop_columns(["arrival"]), args.rows)
    events = stream.num_rows
    print(
        f"IoT stream: {events:,} events, {len(parts)} micro-batches of {args.rows} rows; "
        f"partitions idle after {args.idle}; {args.quiet} quiet calls {args.trigger:g} s apart"
    )
    header = (
        f"{'idleness':<11} {'s/batch':>7} {'while rows':>10} {'quiet':>6} {'at flush':>8} "
        f"{'before flush':>12} {'max/batch':>9} {'events counted':>14}  same as event time"
    )
    print(header)
    reference = None
    rows = []
    for idleness in ("event_time", "clock"):
        for speed in args.speeds:
            pipe = pipeline(idleness, args.idle)
            r = run(pipe, parts, int(speed * 1000), args.quiet, int(args.trigger * 1000))
            during = sum(len(w) for w in r["batches"])
            quiet = sum(len(w) for w in r["quiet"])
            total = during + quiet + len(r["flush"])
            counted = sum(w[2] for ws in [*r["batches"], *r["quiet"], r["flush"]] for w in ws)
            biggest = max(len(w) for w in [*r["batches"], *r["quiet"]])
            if reference is None:
                reference = r
            same = "yes" if r == reference else "no"
            print(
                f"{idleness:<11} {speed:>7g} {during:>10,} {quiet:>6,} {len(r['flush']):>8,} "
                f"{(during + quiet) / total:>12.1%} {biggest:>9,} {counted / events:>14.2%}  "
                f"{same}"
            )
            rows.append(
                [
                    idleness,
                    f"{speed:g}",
                    f"{during:,}",
                    f"{quiet:,}",
                    f"{len(r['flush']):,}",
                    f"{(during + quiet) / total:.1%}",
                    f"{biggest:,}",
                    f"{counted / events:.2%}",
                    same,
                ]
            )
    if documented(ap, args):
        record(
            "idleness_replay",
            title="Idleness in event time against the clock, replayed",
            what=(
                f"The IoT stream of `tidemark_tools.datagen.iot_stream` ({events:,} events: 12 "
                "partitions of 20 devices, one partition 60 s behind, two that fall silent "
                f"after minute 8) in {len(parts)} micro-batches of {args.rows:,} rows, a "
                f'per-partition watermark with 5 s of delay and `idle_timeout="{args.idle}"`, '
                "one-minute windows per device, with the clock advancing "
                + " or ".join(f"{v:g} s" for v in args.speeds)
                + f" per micro-batch, then {args.quiet} quiet micro-batches "
                f"{args.trigger:g} s apart: the windows emitted while rows came, in the quiet "
                "micro-batches and only at the flush, and the most in one micro-batch."
            ),
            command="python benches/idleness_replay.py",
            master=None,
            columns=[
                "idleness",
                "s per micro-batch",
                "windows while rows came",
                "in quiet micro-batches",
                "only at the flush",
                "before the flush",
                "most in one micro-batch",
                "events counted",
                "same as event time",
            ],
            rows=rows,
        )
    if args.spark:
        pipe = pipeline("event_time", args.idle)
        for speed in args.speeds:
            got = by_stream_processor(pipe, parts, int(speed * 1000))
            same = got == reference["batches"]  # type: ignore[index]
            print(f"StreamProcessor, event time, {speed:g} s/batch: same windows: {same}")


if __name__ == "__main__":
    main()
