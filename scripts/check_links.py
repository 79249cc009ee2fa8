"""Checks the links of the README and the docs: every relative link names a file of the
repository, and every ``#anchor`` a heading of its page (GitHub's anchors: lower case,
punctuation dropped, spaces to hyphens, a repeated heading numbered ``-1``, ``-2``...).

    python scripts/check_links.py        # exit status 1 and one line per broken link

External links (``http(s)://``, ``mailto:``) are not fetched.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
FENCE = re.compile(r"^(```|~~~)")


def _prose(text: str) -> list[str]:
    """The page's lines outside fenced code blocks."""
    out, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line.lstrip()):
            fenced = not fenced
            continue
        if not fenced:
            out.append(line)
    return out


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link: its text
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for line in _prose(page.read_text()):
        m = HEADING.match(line)
        if not m:
            continue
        s = slug(m.group(2))
        n = seen.get(s, 0)
        seen[s] = n + 1
        out.add(s if n == 0 else f"{s}-{n}")
    return out


def broken(page: Path) -> list[str]:
    out = []
    for line in _prose(page.read_text()):
        for target in LINK.findall(line):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists():
                out.append(f"{page.relative_to(ROOT)}: {target}: no such file")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                out.append(f"{page.relative_to(ROOT)}: {target}: no such heading")
    return out


def main() -> int:
    problems = [p for page in PAGES for p in broken(page)]
    for p in problems:
        print(p, file=sys.stderr)
    print(f"links: {len(PAGES)} pages, {len(problems)} broken")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
