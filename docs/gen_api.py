"""Generates docs/api.md from the package's docstrings.

python docs/gen_api.py          # write docs/api.md
python docs/gen_api.py --check  # fail if docs/api.md is out of date (make lint runs this)
"""

from __future__ import annotations

import inspect
import re
import sys
from pathlib import Path

import tidemark as tm
import tidemark.metrics as tmm
import tidemark.spark as tms
import tidemark_tools.session as tts

OUT = Path(__file__).parent / "api.md"

SECTIONS: list[tuple[str, object, list[str]]] = [
    (
        "Pipelines",
        tm,
        [
            "Pipeline",
            "Operator",
            "Output",
            "BoundedOutOfOrderness",
            "AdaptiveOutOfOrderness",
            "LatenessReport",
            "ScopeWatermark",
            "Tumbling",
            "Sliding",
            "Session",
            "Rows",
        ],
    ),
    (
        "Aggregates",
        tm,
        [
            "count",
            "sum",
            "min",
            "max",
            "mean",
            "variance",
            "stddev",
            "first",
            "last",
            "count_distinct",
            "approx_count_distinct",
            "min_by",
            "max_by",
            "percentile_approx",
            "Agg",
        ],
    ),
    (
        "Watermark trackers",
        tm,
        ["PartitionedWatermarkTracker", "KeyedWatermarkTracker", "CompactKeyedWatermarkTracker"],
    ),
    ("Routing", tm, ["HashRouter", "Router"]),
    ("Metrics", tmm, ["prometheus_text", "PrometheusCollector"]),
    ("Timers and clocks", tm, ["TimerService", "SystemClock", "ManualClock"]),
    (
        "Event time",
        tm,
        ["parse_event_time", "register_event_time_type", "event_time_types", "ParsedEventTime"],
    ),
    ("Reordering and processing time", tm, ["Reorder", "ReorderOutput", "ProcessingTimeWatermark"]),
    (
        "Stream definitions",
        tm,
        ["StreamDefinition", "EventTimeColumn", "EventTimeOptions", "plan"],
    ),
    (
        "Spark",
        tms,
        [
            "aggregate",
            "AggregateResult",
            "StreamProcessor",
            "heartbeat",
            "delta_sink",
            "kafka_delta_conf",
            "spark_packages",
            "reorder",
            "ReorderResult",
            "ReorderStream",
            "observe_partitions",
        ],
    ),
    (
        "Errors",
        tm,
        [
            "TidemarkError",
            "TidemarkWarning",
            "ConfigError",
            "UnknownEventTimeTypeError",
            "MissingColumnError",
            "WatermarkError",
            "UnknownPartitionError",
            "SourceNotFoundError",
            "InvalidPartitionError",
            "MaxKeysReachedError",
            "StateCorruptedError",
            "ArrowDataError",
            "InternalError",
        ],
    ),
    ("Tools (tidemark_tools: tests, demos and benches; not the library)", tts, ["local_session"]),
]


def _sig(obj: object) -> str:
    try:
        sig = str(inspect.signature(obj))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return ""
    # NamedTuple fields annotated under ``from __future__ import annotations``.
    return re.sub(r"ForwardRef\(('[^']*')\)", r"\1", sig)


def _doc(obj: object) -> str:
    """The docstring as Markdown: numpy section headers in bold, examples fenced."""
    lines = inspect.cleandoc(obj.__doc__ or "").strip().splitlines()
    out: list[str] = []
    in_code = False
    i = 0
    while i < len(lines):
        line = lines[i]
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        if line.strip() and set(nxt.strip()) == {"-"} and len(nxt.strip()) >= 3:
            if in_code:
                out.append("```")
                in_code = False
            out += [f"**{line.strip()}**", ""]
            i += 2
            continue
        if line.lstrip().startswith(">>>") and not in_code:
            out.append("```python")
            in_code = True
        elif in_code and not line.strip():
            out.append("```")
            in_code = False
        out.append(line)
        i += 1
    if in_code:
        out.append("```")
    return "\n".join(out)


def render() -> str:
    out = [
        "# API reference",
        "",
        "Generated from the docstrings by `python docs/gen_api.py`; do not edit by hand.",
        "",
    ]
    for title, module, names in SECTIONS:
        out += [f"## {title}", ""]
        prefix = module.__name__ + "."  # type: ignore[attr-defined]
        for name in names:
            obj = getattr(module, name)
            kind = "class" if inspect.isclass(obj) else "function"
            sig = _sig(obj) if kind == "function" or not issubclass(obj, BaseException) else ""  # type: ignore[arg-type]
            out += [f"### `{prefix}{name}{sig}`", "", f"*{kind}*", "", _doc(obj), ""]
            if inspect.isclass(obj) and not issubclass(obj, BaseException):
                for mname, member in inspect.getmembers(obj):
                    if mname.startswith("_") or not (
                        _doc(member)
                        and (
                            inspect.isfunction(member)
                            or isinstance(member, (property, classmethod))
                            or inspect.ismethod(member)
                        )
                    ):
                        continue
                    msig = _sig(member) if not isinstance(member, property) else ""
                    out += [f"#### `{name}.{mname}{msig}`", "", _doc(member), ""]
    return "\n".join(out).rstrip() + "\n"


def undocumented() -> list[str]:
    """Public classes and functions (``__all__``) that no section lists. Constants and
    type aliases (``__version__``, ``Clock``, schemas) are left to the guides."""
    listed = {(id(module), name) for _, module, names in SECTIONS for name in names}
    return [
        f"{module.__name__}.{name}"  # type: ignore[attr-defined]
        for module in (tm, tms)
        for name in module.__all__  # type: ignore[attr-defined]
        if (id(module), name) not in listed
        and (inspect.isclass(getattr(module, name)) or inspect.isfunction(getattr(module, name)))
    ]


def main() -> int:
    missing = undocumented()
    if missing:
        print(f"docs/gen_api.py: add to SECTIONS: {', '.join(missing)}", file=sys.stderr)
        return 1
    text = render()
    if "--check" in sys.argv:
        if not OUT.exists() or OUT.read_text() != text:
            print("docs/api.md is out of date: run `python docs/gen_api.py`", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
