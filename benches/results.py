"""Writes ``docs/benchmarks.md`` and the README's results table from the benches' own
results (``benches/results/*.json``, which :func:`benches.record.record` writes at the
end of each bench's run). No figure on the page is typed by hand.

    python benches/results.py            # rewrite both
    python benches/results.py --check    # exit status 1 where either is out of date (make lint)
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benches" / "results"
PAGE = ROOT / "docs" / "benchmarks.md"
README = ROOT / "README.md"
#: The page's order; a result not listed comes after, by name.
ORDER = [
    "demo",
    "dirty_stream",
    "late_rules",
    "adaptive_delay",
    "session_latency",
    "idleness_replay",
    "spark_compare_streaming",
    "spark_compare_batch",
    "spark_compare_reorder",
    "stream_sources",
    "kafka_delta",
    "nexmark_run",
    "state_cost",
    "pipeline_vs_polars",
    "keyed_accuracy",
    "profile_executor",
    "standalone",
]
BEGIN, END = "<!-- results: benches/results.py -->", "<!-- /results -->"

HEAD = """# Benchmarks

Each section: what a benchmark measures, the command that runs it, the machine and
date of its latest recorded run, and that run's results. Written by
`python benches/results.py` from the benches' own output (`benches/results/*.json`);
earlier runs are in git's history.
"""


def load() -> list[dict[str, Any]]:
    docs = [json.loads(p.read_text()) for p in sorted(RESULTS.glob("*.json"))]
    rank = {b: i for i, b in enumerate(ORDER)}
    return sorted(docs, key=lambda d: (rank.get(d["bench"], len(ORDER)), d["bench"]))


def _table(columns: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def page(docs: list[dict[str, Any]]) -> str:
    out = [HEAD]
    for d in docs:
        out += [
            f"## {d['title']}",
            "",
            f"**What it measures.** {d['what']}",
            "",
            f"**Command.** `{d['command']}`",
            "",
            f"**Machine.** {d['machine']}, {d['date']}.",
            "",
            _table(d["columns"], d["rows"]),
            "",
        ]
        if d["notes"]:
            out += [d["notes"], ""]
    return "\n".join(out).rstrip() + "\n"


def readme(docs: list[dict[str, Any]], text: str) -> str:
    rows = [[h["benchmark"], h["spark"], h["tidemark"]] for d in docs for h in d["headline"]]
    table = _table(["benchmark", "Spark", "tidemark"], rows)
    block = f"{BEGIN}\n{table}\n{END}"
    pattern = re.compile(re.escape(BEGIN) + ".*?" + re.escape(END), re.S)
    if not pattern.search(text):
        raise SystemExit(f"README.md has no {BEGIN} ... {END} block")
    return pattern.sub(lambda _m: block, text)


def unrecorded() -> list[str]:
    """The benches that record their results (they call ``record("<name>", ...)``) and
    have none in ``benches/results/``."""
    names = []
    for script in sorted((ROOT / "benches").rglob("*.py")):
        found = re.search(r'\brecord\(\s*"(\w+)"', script.read_text())
        if found and not (RESULTS / f"{found.group(1)}.json").exists():
            names.append(str(script.relative_to(ROOT)))
    return names


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="fail where a file is out of date")
    args = ap.parse_args()
    docs = load()
    want = {PAGE: page(docs), README: readme(docs, README.read_text())}
    stale = [p for p, text in want.items() if p.read_text() != text]
    if args.check:
        for p in stale:
            print(
                f"{p.relative_to(ROOT)} is out of date: python benches/results.py", file=sys.stderr
            )
        missing = unrecorded()
        for script in missing:
            print(f"{script} has no recorded result: run it", file=sys.stderr)
        return 1 if stale or missing else 0
    for p in stale:
        p.write_text(want[p])
        print(f"wrote {p.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
