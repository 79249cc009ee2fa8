"""The ``tidemark`` command line: ``tidemark demo``, ``tidemark --help``."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def _console() -> Any:
    from rich.console import Console

    # Wide enough for the tables when output is not a terminal (CI logs, pipes).
    return Console(width=None if sys.stdout.isatty() else 140)


def _count(text: str) -> int:
    """An argparse type for a count flag (events, keys, batches, partitions, ...): an
    int of at least 1, refused as a usage error before anything runs."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {n}")
    return n


def _writable_dir(path: str, flag: str) -> Path:
    """``path`` as a directory this process can write to (created if missing), checked
    before a run: a ConfigError naming ``flag`` otherwise, not a traceback after it."""
    from tidemark.errors import ConfigError

    out = Path(path)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"{flag} {path}: cannot create the directory ({e.strerror})") from None
    if not os.access(out, os.W_OK | os.X_OK):
        raise ConfigError(f"{flag} {path}: the directory is not writable")
    return out


def _demo(args: argparse.Namespace) -> int:
    from tidemark_tools.demo_streaming import render, run_demo, write_report
    from tidemark_tools.session import local_session

    out = _writable_dir(args.out, "--out")
    console = _console()
    console.rule("[bold]tidemark demo: half of the tenants report late")
    with console.status("starting local Spark..."):
        spark = local_session(
            args.master, app_name="tidemark-demo", shuffle_partitions=args.partitions
        )
    try:
        result = run_demo(
            spark,
            events=args.events,
            tenants=args.tenants,
            batches=args.batches,
            partitions=args.partitions,
            console=console,
            warm_up=not args.no_warm_up,
        )
    finally:
        spark.stop()
    render(result, console)
    page = write_report(result, out)
    console.print(f"report: {page}")
    return 0


def _partitions_demo(args: argparse.Namespace) -> int:
    from tidemark_tools.demo import render_partition_report, run_partition_demo
    from tidemark_tools.session import local_session

    console = _console()
    console.rule("[bold]tidemark demo: per-partition watermarks with idle detection on Spark")
    with console.status("starting local Spark..."):
        spark = local_session(args.master, app_name="tidemark-demo")
    try:
        result = run_partition_demo(
            spark,
            partitions=args.partitions,
            rounds=args.batches,
            rows_per_partition=args.rows,
            console=console,
        )
    finally:
        spark.stop()
    render_partition_report(result, console)
    return 0


_SCENARIO_FLAGS = {
    "skew": "skew",
    "delayed_fraction": "delayed_fraction",
    "delayed_selection": "delayed_selection",
    "jitter": "jitter_s",
    "burst_on": "burst_on_fraction",
    "burst_period": "burst_period_s",
    "duration": "duration_s",
    "seed": "seed",
}
"""``tidemark accuracy`` flags of a scenario of one's own, and the ``StreamSpec``
fields they set (``--delay-range`` sets two)."""


def _seconds(value: str, flag: str) -> float:
    from tidemark._duration import to_micros

    return to_micros(value, flag) / 1e6


def _scenario(args: argparse.Namespace) -> dict[str, Any]:
    """The ``StreamSpec`` fields the scenario flags set (empty: none given). Raises
    ``ConfigError`` naming the flag for a duration that does not parse."""
    from tidemark.errors import ConfigError

    got: dict[str, Any] = {}
    for flag, field in _SCENARIO_FLAGS.items():
        value = getattr(args, flag)
        if value is None:
            continue
        name = "--" + flag.replace("_", "-")
        if field.endswith("_s"):
            value = _seconds(value, name)
        got[field] = value
    if args.delay_range is not None:
        lo, sep, hi = args.delay_range.partition(",")
        if not sep:
            raise ConfigError(f"--delay-range: expected MIN,MAX such as 30s,5m, got {lo!r}")
        got["delay_min_s"] = _seconds(lo.strip(), "--delay-range")
        got["delay_max_s"] = _seconds(hi.strip(), "--delay-range")
    return got


def _check_flags(spec: Any) -> None:
    """Raises ``ConfigError`` for a stream the accuracy benchmark cannot measure
    (``datagen.spec_problem``, or no events), led by the flag that set the field."""
    from tidemark.errors import ConfigError
    from tidemark_tools.datagen import spec_problem

    problem = spec_problem(spec)
    if problem is None and spec.events < 1:
        problem = ("events", f"events must be at least 1 to measure, got {spec.events}")
    if problem is None:
        return
    field, why = problem
    flags = {field: "--" + flag.replace("_", "-") for flag, field in _SCENARIO_FLAGS.items()}
    flags.update(delay_min_s="--delay-range", delay_max_s="--delay-range")
    flags.update(keys="--keys", events="--events")
    raise ConfigError(f"{flags[field]}: {why}")


def _describe(fields: dict[str, Any]) -> str:
    """A scenario's label from the fields its flags set."""
    parts = []
    for field, value in fields.items():
        shown = f"{value:g}" if isinstance(value, float) else str(value)
        parts.append(f"{field}={shown}")
    return "your scenario: " + ", ".join(parts)


def _accuracy(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from tidemark_tools.accuracy import compare_compact, render_accuracy, run_scenarios
    from tidemark_tools.datagen import StreamSpec

    console = _console()
    custom = _scenario(args)
    size = {k: v for k, v in (("keys", args.keys), ("events", args.events)) if v is not None}
    if args.compact:
        spec = StreamSpec(keys=1_000_000, events=4_000_000, skew=1.0, jitter_s=10.0)
        spec = replace(spec, **size, **custom)
        _check_flags(spec)
        with console.status(
            f"exact vs compact tracker on {spec.keys:,} keys, {spec.events:,} events..."
        ):
            c = compare_compact(spec, exact_keys=args.exact_keys, bounded_delay=args.bounded_delay)
        console.print(
            f"{c.keys:,} keys ({c.distinct_keys:,} of them with events; HyperLogLog estimate "
            f"{c.estimated_distinct_keys:,.0f}), {c.events:,} events, jitter up to "
            f"{spec.jitter_s:g} s, bounded delay {args.bounded_delay}; compact tracker with "
            f"{c.exact_keys:,} exact slots"
        )
        console.print(
            f"late events: exact {c.exact_late:,}, compact {c.compact_late:,}; "
            f"compact called late what exact accepted: {c.false_late:,} "
            f"({c.false_late / c.events:.4%} of events); "
            f"compact accepted what exact called late: {c.missed_late:,} "
            f"({c.missed_late / c.events:.4%})"
        )
        console.print(
            f"memory: exact {c.exact_bytes / 2**20:,.1f} MiB, "
            f"compact {c.compact_bytes / 2**20:,.1f} MiB (keys' bytes included); {c.seconds:.1f}s"
        )
        return 0
    scenarios = None
    _check_flags(replace(StreamSpec(), **size, **custom))
    if custom:
        scenarios = {_describe(custom): replace(StreamSpec(), **custom)}
    render_accuracy(
        run_scenarios(
            scenarios,
            events=args.events,
            keys=args.keys,
            bounded_delay=args.bounded_delay,
            batch_rows=args.batch_rows,
        ),
        console,
    )
    return 0


def _crash_test(args: argparse.Namespace) -> int:
    import tempfile

    from tidemark_tools.crashtest import run

    console = _console()
    work = _writable_dir(args.workdir or tempfile.mkdtemp(prefix="tidemark-crash-"), "--workdir")
    with console.status(f"{args.kills} SIGKILLs of a streaming query in {work} ..."):
        r = run(work, kills=args.kills, batches=args.batches, rows=args.rows, seed=args.seed)
    console.print(
        f"{r.kills} kills (at {r.kill_after_start_s} s after the query started), "
        f"{r.restarts} starts, {r.batches} micro-batches"
        + (
            f" ({r.merged_batches} of them read two files or more after a restart, "
            "as Spark's file source may; the reference read them alike)"
            if r.merged_batches
            else ""
        )
        + f", {r.seconds:.0f}s: output "
        + (
            "[bold green]identical[/] to an uninterrupted run"
            if r.identical
            else "[bold red]DIFFERS[/]"
        )
    )
    return 0 if r.identical else 1


def _soak(args: argparse.Namespace) -> int:
    from tidemark_tools.soak import main_args

    return main_args(args)


def _live_soak(args: argparse.Namespace) -> int:
    from tidemark_tools.live_soak import main_args

    return main_args(args)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (every command and flag is documented in ``--help``)."""
    parser = argparse.ArgumentParser(
        prog="tidemark",
        description="tidemark: correct event time for Spark and Arrow.",
    )
    from tidemark import __version__

    parser.add_argument("--version", action="version", version=f"tidemark {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser(
        "demo",
        help="run the main job: Spark vs tidemark when half of the tenants report late",
        description=(
            "Generates a multi-tenant stream in which half of the tenants report late, "
            "feeds it to Spark Structured Streaming as files (one per micro-batch), and "
            "runs the same windowed count with Spark's withWatermark, with tidemark's "
            "global watermark and with tidemark's per-key watermarks. Prints events counted "
            "in their window, windows exactly right, late rows and events/s, and writes an "
            "HTML report with a chart."
        ),
    )
    demo.add_argument("--master", default="local[2]", help="Spark master (default: local[2])")
    demo.add_argument("--events", type=_count, default=200_000, help="events (default: 200000)")
    demo.add_argument("--tenants", type=_count, default=200, help="tenants (default: 200)")
    demo.add_argument("--batches", type=_count, default=20, help="micro-batches (default: 20)")
    demo.add_argument(
        "--partitions", type=_count, default=4, help="state / shuffle partitions (default: 4)"
    )
    demo.add_argument(
        "--out", default="demo-report", help="report directory (default: demo-report)"
    )
    demo.add_argument(
        "--no-warm-up",
        action="store_true",
        help="skip the unmeasured first run of each system (events/s then include start-up)",
    )
    demo.set_defaults(func=_demo)

    pdemo = sub.add_parser(
        "partitions-demo",
        help="per-source-partition watermarks with idle detection on Spark",
        description=(
            "Reads a generated Kafka-like topic micro-batch by micro-batch through Spark "
            "mapInArrow, tracks every source partition's watermark in the Rust core, and "
            "shows how idle detection keeps the combined watermark moving when a "
            "partition goes silent."
        ),
    )
    pdemo.add_argument("--master", default="local[2]", help="Spark master (default: local[2])")
    pdemo.add_argument(
        "--partitions", type=_count, default=4, help="source partitions (default: 4)"
    )
    pdemo.add_argument("--batches", type=_count, default=8, help="micro-batches (default: 8)")
    pdemo.add_argument(
        "--rows", type=_count, default=5_000, help="events per partition per batch (default: 5000)"
    )
    pdemo.set_defaults(func=_partitions_demo)

    acc = sub.add_parser(
        "accuracy",
        help="measure events kept by a global vs per-key watermark on generated streams",
        description=(
            "Generates multi-tenant streams in arrival order where a share of the keys "
            "reports late as a block, replays them in micro-batches, and prints the share "
            "of events counted in their window (not late) with one global watermark (what "
            "Spark does) and with per-key watermarks, at the same bounded delay. With "
            "--compact, compares the memory-bounded tracker against the exact one instead."
        ),
    )
    acc.add_argument("--events", type=int, default=None, help="events per scenario (1M)")
    acc.add_argument("--keys", type=int, default=None, help="distinct keys (1,000)")
    acc.add_argument("--batch-rows", type=_count, default=10_000, help="rows per micro-batch")
    acc.add_argument("--bounded-delay", default="5s", help="bounded delay (default: 5s)")
    acc.add_argument(
        "--compact",
        action="store_true",
        help="exact vs CompactKeyedWatermarkTracker (1M keys, 4M events by default)",
    )
    acc.add_argument(
        "--exact-keys", type=_count, default=10_000, help="exact slots of the compact tracker"
    )
    own = acc.add_argument_group(
        "a scenario of your own",
        "Any of these runs one scenario, the defaults of the table's first row (even rates, "
        "50%% of the keys delayed, delays 30s-5m, jitter 2s, always active, 1h of event "
        "time) with the values given, instead of the table. With --compact, they change "
        "the stream of the comparison.",
    )
    own.add_argument("--skew", type=float, help="Zipf exponent of per-key rates (0: even)")
    own.add_argument(
        "--delayed-fraction", type=float, help="share of keys late as a block (0 to 1)"
    )
    own.add_argument(
        "--delayed-selection",
        choices=["random", "median"],
        help="which keys are delayed: random ones, or those of median rate",
    )
    own.add_argument(
        "--delay-range", metavar="MIN,MAX", help="a delayed key's delay, uniform (e.g. 30s,5m)"
    )
    own.add_argument("--jitter", help="every event's extra delay, uniform up to this (e.g. 2s)")
    own.add_argument(
        "--burst-on",
        type=float,
        metavar="FRACTION",
        help="share of time a key sends (1: always; below 1: on/off bursts)",
    )
    own.add_argument("--burst-period", help="length of one on/off cycle (e.g. 10m)")
    own.add_argument("--duration", help="event-time span of the stream (e.g. 1h)")
    own.add_argument("--seed", type=int, help="random seed")
    acc.set_defaults(func=_accuracy)

    crash = sub.add_parser(
        "crash-test",
        help="kill a streaming query with SIGKILL many times; check exactly-once output",
        description=(
            "Runs a Structured Streaming query with tidemark state (one Parquet file per "
            "micro-batch), kills its driver (Python and JVM) with SIGKILL at random moments, "
            "restarts it from its checkpoints each time, and compares every batch's output "
            "with an uninterrupted run. Exit code 1 if they differ."
        ),
    )
    crash.add_argument("--kills", type=_count, default=10, help="SIGKILLs (default: 10)")
    crash.add_argument(
        "--batches", type=_count, default=None, help="micro-batches (default: 3 per kill)"
    )
    crash.add_argument("--rows", type=_count, default=300, help="rows per micro-batch (300)")
    crash.add_argument("--seed", type=int, default=1, help="seed of the kill times")
    crash.add_argument("--workdir", default=None, help="directory to use (default: a temp dir)")
    crash.set_defaults(func=_crash_test)

    soak = sub.add_parser(
        "soak",
        help="keys churning for a while: report RSS over time (must level off)",
        description=(
            "Feeds a pipeline operator a stream where new keys appear every (simulated) "
            "second and old ones go silent, at a fixed event rate, and prints the process "
            "RSS and the keys held in state over time. With max_keys and/or state_ttl the "
            "RSS must level off (exit code 1 if it does not)."
        ),
    )
    soak.add_argument("--seconds", type=int, default=300, help="simulated seconds (300)")
    soak.add_argument("--rate", type=int, default=100_000, help="events per second (100000)")
    soak.add_argument("--new-keys", type=int, default=2_000, help="new keys per second (2000)")
    soak.add_argument("--lifetime", type=int, default=5, help="seconds a key reports (5)")
    soak.add_argument("--max-keys", type=int, default=20_000, help="max_keys (20000; 0: unbounded)")
    soak.add_argument("--state-ttl", default="30s", help="state_ttl (30s; empty: none)")
    soak.set_defaults(func=_soak)

    live = sub.add_parser(
        "live-soak",
        help="a Kafka -> tidemark query for a while: memory, state, batch time, exactness",
        description=(
            "Starts a Kafka broker and a local Spark session, fills a topic in real time "
            "(keys churning, one partition going silent and coming back) and runs a "
            "StreamProcessor query over it, sampling the driver's and the Python workers' "
            "memory, the state's size and the micro-batch time; at the end every window is "
            "checked against an oracle. Exit code 1 unless the windows are exact and the "
            "samples flat after warm-up."
        ),
    )
    live.add_argument("--minutes", type=float, default=30, help="minutes of input (30)")
    live.add_argument("--rate", type=int, default=3_000, help="records a second (3000)")
    live.add_argument(
        "--executors",
        action="store_true",
        help="every micro-batch in Spark's Python workers (default: where StreamProcessor puts it)",
    )
    live.add_argument("--plot", help="write a PNG of the samples here")
    live.add_argument("--json", help="write the report as JSON here")
    live.add_argument("--workdir", default=None, help="directory to use (default: a temp dir)")
    live.set_defaults(func=_live_soak)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``tidemark`` command."""
    from tidemark.errors import ConfigError

    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
    except ConfigError as e:
        parser.error(str(e))  # exits 2, as for a bad flag
    return code


if __name__ == "__main__":
    sys.exit(main())
