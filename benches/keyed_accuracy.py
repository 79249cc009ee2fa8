"""Accuracy of global vs per-key watermarks on generated multi-tenant streams.

Run from the repository root (after ``make build``)::

    python benches/keyed_accuracy.py                 # the scenario table (about 1 min)
    python benches/keyed_accuracy.py --compact       # compact vs exact tracker, 1M keys
    python benches/keyed_accuracy.py --events 200000 # smaller
    python benches/keyed_accuracy.py --skew 1.2 --delay-range 10s,2m --burst-on 0.25
                                                     # one scenario of your own

Same as ``tidemark accuracy``; every flag is listed by ``--help``.
"""

from __future__ import annotations

import sys

from tidemark_tools.cli import main

if __name__ == "__main__":
    sys.exit(main(["accuracy", *sys.argv[1:]]))
