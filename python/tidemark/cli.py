"""The ``tidemark`` command line: ``tidemark demo``, ``tidemark --help``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def _demo(args: argparse.Namespace) -> int:
    from rich.console import Console

    from tidemark.demo import render_partition_report, run_partition_demo
    from tidemark.spark import local_session

    console = Console()
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


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (every command and flag is documented in ``--help``)."""
    parser = argparse.ArgumentParser(
        prog="tidemark",
        description="tidemark: correct event time for Spark and Arrow.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser(
        "demo",
        help="run the main job: a local Spark pipeline with per-partition watermarks",
        description=(
            "Reads a generated Kafka-like topic micro-batch by micro-batch through Spark "
            "mapInArrow, tracks every source partition's watermark in the Rust core, and "
            "shows how idle detection keeps the combined watermark moving when a "
            "partition goes silent."
        ),
    )
    demo.add_argument("--master", default="local[2]", help="Spark master (default: local[2])")
    demo.add_argument("--partitions", type=int, default=4, help="source partitions (default: 4)")
    demo.add_argument("--batches", type=int, default=8, help="micro-batches (default: 8)")
    demo.add_argument(
        "--rows", type=int, default=5_000, help="events per partition per batch (default: 5000)"
    )
    demo.set_defaults(func=_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``tidemark`` command."""
    args = build_parser().parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
