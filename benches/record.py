"""What a benchmark leaves behind: its results as JSON in ``benches/results/``, from which
``python benches/results.py`` writes ``docs/benchmarks.md`` and the README's table.

A bench calls :func:`record` once at its end, with the table it printed. A run with
other settings than the bench's defaults records nothing unless asked
(``--record``): the page shows the documented command's results.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def documented(ap: argparse.ArgumentParser, args: argparse.Namespace) -> bool:
    """Whether to record this run: ``--record`` given, or every setting that changes
    what is measured at its default (where it runs, ``--master`` or ``--bootstrap``,
    may differ: the page says the machine)."""
    where = {"record", "master", "bootstrap"}
    defaults = vars(ap.parse_args([]))
    return bool(args.record) or all(
        v == defaults[k] for k, v in vars(args).items() if k not in where
    )


def machine(master: str | None = None) -> str:
    """This machine in a few words: cores, memory, Spark's master."""
    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    words = f"{os.cpu_count()} cores ({platform.machine()}), {mem_gib:.0f} GiB"
    return f"{words}, `{master}`" if master else words


def record(
    bench: str,
    *,
    title: str,
    what: str,
    command: str,
    master: str | None,
    columns: list[str],
    rows: list[list[Any]],
    notes: str = "",
    headline: list[dict[str, str]] | None = None,
) -> Path:
    """Writes ``benches/results/<bench>.json``: the section of the benchmarks page
    (``title``, ``what`` it measures, the ``command``, the machine and today's date, the
    table, ``notes`` below it) and the ``headline`` rows the README shows
    (``{"benchmark", "spark", "tidemark"}``)."""
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"{bench}.json"
    doc = {
        "bench": bench,
        "title": title,
        "what": what.strip(),
        "command": command,
        "machine": machine(master),
        "date": dt.date.today().isoformat(),
        "columns": columns,
        "rows": [[str(c) for c in r] for r in rows],
        "notes": notes.strip(),
        "headline": headline or [],
    }
    out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"recorded {out.relative_to(RESULTS.parent.parent)}", flush=True)
    return out
