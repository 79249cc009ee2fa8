"""``tidemark demo``: the main job.

A multi-tenant event stream in which half of the tenants report late (tidemark's own
generator) is written as files in arrival order and read by Spark Structured
Streaming, one file per micro-batch. The same windowed count runs three ways, with
the same bounded delay and window:

1. Spark's own ``withWatermark`` + ``window`` aggregation (update mode, the last value
   of each window kept);
2. tidemark with a global watermark (``per="global"``) and the default late rule,
   Spark's: its windows and counts must be Spark's (checked in the run);
3. tidemark with per-key watermarks (``per="key"``).

Every result is compared with the ground truth (a batch GROUP BY over all events):
the share of events counted in their correct window, the share of windows exactly
right, late rows, and throughput. A report with a chart is written to ``demo-report/``.
"""

from __future__ import annotations

import html
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tidemark_tools.datagen import StreamSpec, multi_tenant_stream
from tidemark_tools.datagen import batches as split_rows

__all__ = [
    "DemoResult",
    "SystemResult",
    "demo_stream",
    "micro_batches",
    "run_demo",
    "spark_rule_share",
]

WINDOW = "1 minute"
DELAY = "5 seconds"
WINDOW_US = 60_000_000
DELAY_US = 5_000_000
#: The one sentence under the table (docs/guide/late-data.md).
RULES_NOTE = (
    "With one global watermark tidemark judges late rows by Spark's own rule (the "
    'default, late_rule="spark"), so it gives Spark\'s windows and counts; per-key '
    "watermarks keep the late tenants' events that any global watermark drops "
    "(docs/guide/late-data.md)."
)


@dataclass
class SystemResult:
    """What one system produced, measured against the ground truth."""

    name: str
    counts: dict[tuple[str, int], int]
    seconds: float
    late_rows: int | None = None
    events_counted: float = 0.0
    windows_right: float = 0.0
    events_per_s: float = 0.0
    #: Seconds between the ends of consecutive micro-batches (the first from the start).
    batch_seconds: list[float] = field(default_factory=list)
    #: Where each micro-batch ran (tidemark: ``StreamProcessor.last_progress["layout"]``).
    layouts: list[str] = field(default_factory=list)
    #: How each micro-batch's rows were read (tidemark: ``last_progress["read"]``).
    reads: list[str] = field(default_factory=list)
    #: Windows (key, start) whose final count differs from Spark's in the same run
    #: (``None`` for Spark itself).
    differs_from_spark: int | None = None
    #: tidemark per key: its ``LatenessReport`` after the last micro-batch (every
    #: tenant; Spark's delay compared with).
    lateness: dict[str, Any] | None = None


@dataclass
class DemoResult:
    """The demo's measurements."""

    events: int
    tenants: int
    batches: int
    truth_windows: int
    systems: list[SystemResult] = field(default_factory=list)
    setup_seconds: float = 0.0
    #: The tenants that report late.
    late_tenants: set[str] = field(default_factory=set)
    #: Events per tenant.
    tenant_events: dict[str, int] = field(default_factory=dict)


def _full_stream(events: int, tenants: int) -> pa.Table:
    spec = StreamSpec(keys=tenants, events=events, duration_s=1_800, delayed_fraction=0.5, skew=0.8)
    return multi_tenant_stream(spec)


def demo_stream(events: int, tenants: int) -> pa.Table:
    """The demo's stream in arrival order: half of the tenants report late."""
    return _full_stream(events, tenants).select(["tenant", "event_time", "value"])


def _late_tenants(full: pa.Table) -> set[str]:
    """The tenants of the generator's stream (``delayed`` column kept) that report late."""
    return set(pc.unique(full.filter(full.column("delayed")).column("tenant")).to_pylist())


def micro_batches(stream: pa.Table, batches: int) -> list[pa.Table]:
    """The stream cut into (at most) ``batches`` micro-batches of equal row counts, in
    arrival order: the demo's files, one per micro-batch."""
    return split_rows(stream, max(1, -(-stream.num_rows // batches)))


def spark_rule_share(batches: list[pa.Table], lag: int = 2) -> float:
    """The share of events Spark's windowed count keeps, replayed without Spark: a row
    counts while its window ends after the watermark of ``lag`` batches before (2:
    Spark judges late rows against the previous batch's watermark; 1: the current
    one), the watermark being the largest event time of the batches before, minus the
    delay. On the demo's stream this reproduces Spark's own figure."""
    marks: list[int] = []
    seen: int | None = None
    counted = total = 0
    for b in batches:
        us = pc.cast(b.column("event_time"), pa.int64())
        total += len(us)
        if len(marks) >= lag:
            end = pc.multiply(pc.add(pc.divide(us, WINDOW_US), 1), WINDOW_US)
            counted += pc.sum(pc.greater(end, marks[-lag])).as_py() or 0
        else:
            counted += len(us)
        top = pc.max(us).as_py()
        seen = top if seen is None else max(seen, top)
        marks.append(seen - DELAY_US)
    return counted / total if total else 1.0


def _write_files(stream: pa.Table, directory: Path, batches: int) -> int:
    """Writes the stream in arrival order, one Parquet file per micro-batch."""
    directory.mkdir(parents=True)
    parts = micro_batches(stream.select(["tenant", "event_time", "value"]), batches)
    for i, part in enumerate(parts):
        f = directory / f"batch-{i:05d}.parquet"
        pq.write_table(part, f)
        # The file source orders files by modification time: make it the batch order.
        os.utime(f, (1_700_000_000 + i, 1_700_000_000 + i))
    return len(parts)


def _truth(stream: pa.Table) -> dict[tuple[str, int], int]:
    minute = WINDOW_US
    us = pc.cast(stream.column("event_time"), pa.int64())
    start = pc.multiply(pc.divide(us, minute), minute)
    t = pa.table({"tenant": stream.column("tenant"), "start": start})
    g = t.group_by(["tenant", "start"]).aggregate([([], "count_all")])
    return {
        (k, s): c
        for k, s, c in zip(
            g.column("tenant").to_pylist(),
            g.column("start").to_pylist(),
            g.column("count_all").to_pylist(),
            strict=True,
        )
    }


def _start_us(ts: Any) -> int:
    import datetime as dt

    if ts.tzinfo is None:
        ts = ts.replace(tzinfo=dt.timezone.utc)
    return int(ts.timestamp()) * 1_000_000


def _run_spark_native(spark: Any, source: Path, schema: Any, chk: Path) -> SystemResult:
    from pyspark.sql import functions as F

    counts: dict[tuple[str, int], int] = {}
    marks: list[float] = []

    def collect(df: Any, _batch_id: int) -> None:
        for r in df.collect():
            counts[(r.tenant, _start_us(r.window.start))] = r["count"]
        marks.append(time.perf_counter())

    stream = (
        spark.readStream.schema(schema)
        .option("maxFilesPerTrigger", 1)
        .parquet(str(source))
        .withWatermark("event_time", DELAY)
        .groupBy(F.window("event_time", WINDOW), "tenant")
        .count()
    )
    t = time.perf_counter()
    q = (
        stream.writeStream.outputMode("update")
        .foreachBatch(collect)
        .option("checkpointLocation", str(chk))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination()
    return SystemResult(
        "Spark withWatermark + window",
        counts,
        time.perf_counter() - t,
        batch_seconds=_intervals(t, marks),
    )


def _intervals(start: float, marks: list[float]) -> list[float]:
    return [b - a for a, b in zip([start, *marks], marks, strict=False)]


def _run_file_stream(
    spark: Any, source: Path, schema: Any, each_batch: Callable[[Any, int], None], chk: Path
) -> float:
    """Streams ``source``'s files, one a micro-batch, through ``each_batch`` until none
    is left; returns the ``perf_counter`` reading at the query's start."""
    t = time.perf_counter()
    q = (
        spark.readStream.schema(schema)
        .option("maxFilesPerTrigger", 1)
        .parquet(str(source))
        .writeStream.foreachBatch(each_batch)
        .option("checkpointLocation", str(chk))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination()
    return t


def _run_tidemark(
    spark: Any,
    source: Path,
    schema: Any,
    chk: Path,
    per: str,
    partitions: int,
    on_driver: bool | None = None,
    arrow_sinks: bool = False,
    read_files: bool = True,
    tenants: int = 0,
) -> SystemResult:
    import tidemark as tm
    from tidemark.spark import StreamProcessor

    pipe = tm.Pipeline(
        key="tenant",
        event_time="event_time",
        # Spark's own duration strings: the same settings as its query's.
        watermark=tm.BoundedOutOfOrderness(DELAY, per=per),
        window=tm.Tumbling(WINDOW),
        aggs={"count": tm.count()},
        # Per key, what Spark's one watermark would have dropped, tenant by tenant.
        lateness=tm.LatenessReport(top=tenants, spark_delay=DELAY) if tenants else None,
    )
    counts: dict[tuple[str, int], int] = {}
    late = [0]
    report: list[dict[str, Any] | None] = [None]
    marks: list[float] = []
    layouts: list[str] = []
    reads: list[str] = []

    def sink(out: Any, _batch_id: int) -> None:
        # A DataFrame, or with arrow_sinks the table toArrow() would give.
        rows = out.to_pylist() if arrow_sinks else out.collect()
        for r in rows:
            counts[(r["tenant"], _start_us(r["window_start"]))] = r["count"]
        marks.append(time.perf_counter())

    proc = StreamProcessor(
        pipe,
        str(chk / "state"),
        num_partitions=partitions,
        sink=sink,
        # Late rows are counted (last_progress["late_rows"]), as Spark counts its own.
        late_sink=lambda _rows, _batch_id: None,
        on_driver=on_driver,
        arrow_sinks=arrow_sinks,
        read_files=read_files,
    )

    def each_batch(df: Any, batch_id: int) -> None:
        proc(df, batch_id)
        # Late rows are counted by the batch's own job: no second Spark job for them.
        assert proc.last_progress is not None
        late[0] += proc.last_progress["late_rows"]
        report[0] = proc.last_progress.get("lateness")
        layouts.append(proc.last_progress["layout"])
        reads.append(proc.last_progress["read"])

    t = _run_file_stream(spark, source, schema, each_batch, chk / "query")
    proc.flush(spark, schema)  # end of input: close the windows still open
    label = "tidemark, per-key watermarks" if per == "key" else "tidemark, global watermark"
    return SystemResult(
        label,
        counts,
        time.perf_counter() - t,
        late_rows=late[0],
        batch_seconds=_intervals(t, marks),
        layouts=layouts,
        reads=reads,
        lateness=report[0],
    )


def _warm_up(spark: Any, source: Path, schema: Any, work: Path, partitions: int) -> None:
    """Runs Spark's query and tidemark's once each, unmeasured, over the first two
    files of ``source``: the first streaming query of a JVM pays class loading, code
    generation and JIT compilation (seconds here), and tidemark's first batch starts
    the Python workers. Without this, whichever system runs first is measured cold."""
    files = sorted(source.glob("*.parquet"))[:2]
    warm = work / "warm-up"
    (warm / "stream").mkdir(parents=True)
    for f in files:
        shutil.copy2(f, warm / "stream" / f.name)  # keeps the modification time
    _run_spark_native(spark, warm / "stream", schema, warm / "spark")
    _run_tidemark(spark, warm / "stream", schema, warm / "tm", "key", partitions)


def _differences(a: dict[tuple[str, int], int], b: dict[tuple[str, int], int]) -> int:
    """Windows whose final count differs between two runs (a window only one has
    counts as a difference)."""
    return sum(1 for k in a.keys() | b.keys() if a.get(k) != b.get(k))


def _score(r: SystemResult, truth: dict[tuple[str, int], int], events: int) -> None:
    counted = sum(min(c, truth.get(k, 0)) for k, c in r.counts.items())
    r.events_counted = counted / events
    r.windows_right = sum(1 for k, c in truth.items() if r.counts.get(k) == c) / len(truth)
    if r.late_rows is None:
        r.late_rows = events - counted
    r.events_per_s = events / r.seconds


def run_demo(
    spark: Any,
    *,
    events: int = 200_000,
    tenants: int = 200,
    batches: int = 20,
    partitions: int = 4,
    console: Any = None,
    warm_up: bool = True,
) -> DemoResult:
    """Runs the three systems on one generated stream and returns the measurements
    (``warm_up=False``: without the unmeasured first run of each, whose events/s then
    include the JVM's and the workers' start)."""
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    started = time.perf_counter()
    full = _full_stream(events, tenants)
    stream = full.select(["tenant", "event_time", "value"])  # demo_stream's
    work = Path(tempfile.mkdtemp(prefix="tidemark-demo-"))
    try:
        source = work / "stream"
        n_files = _write_files(stream, source, batches)
        schema = spark.read.parquet(str(source)).schema
        truth = _truth(stream)
        result = DemoResult(events, tenants, n_files, len(truth))
        result.late_tenants = _late_tenants(full)
        names = stream.column("tenant")
        counts = pc.value_counts(names).to_pylist()
        result.tenant_events = {c["values"]: c["counts"] for c in counts}
        result.setup_seconds = time.perf_counter() - started
        steps: list[tuple[str, Callable[[], SystemResult]]] = [
            (
                "Spark withWatermark + window",
                lambda: _run_spark_native(spark, source, schema, work / "spark"),
            ),
            (
                "tidemark, global watermark",
                lambda: _run_tidemark(spark, source, schema, work / "global", "global", partitions),
            ),
            (
                "tidemark, per-key watermarks",
                lambda: _run_tidemark(
                    spark, source, schema, work / "key", "key", partitions, tenants=tenants
                ),
            ),
        ]
        with Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            TimeElapsedColumn(),
            console=console,
            transient=False,
        ) as progress:
            if warm_up:
                task = progress.add_task("warming up Spark and the Python workers", total=1)
                _warm_up(spark, source, schema, work, partitions)
                progress.update(task, completed=1, description="warmed up (not measured)")
            for label, fn in steps:
                task = progress.add_task(f"{label}: {n_files} micro-batches", total=1)
                r = fn()
                _score(r, truth, events)
                if result.systems:
                    r.differs_from_spark = _differences(result.systems[0].counts, r.counts)
                result.systems.append(r)
                progress.update(
                    task,
                    completed=1,
                    description=f"{label}: {r.events_counted:.1%} of events counted",
                )
        return result
    finally:
        shutil.rmtree(work, ignore_errors=True)


def render(result: DemoResult, console: Any) -> None:
    """Prints the result table."""
    from rich.table import Table

    table = Table(
        title=(
            f"{result.events:,} events, {result.tenants} tenants (half of them late), "
            f"{result.batches} micro-batches; window {WINDOW}, bounded delay {DELAY}"
        )
    )
    table.add_column("system")
    table.add_column("events counted in their window", justify="right")
    table.add_column("windows exactly right", justify="right")
    table.add_column("late rows", justify="right")
    table.add_column("output vs Spark's", justify="right")
    table.add_column("events/s", justify="right")
    for r in result.systems:
        style = "green" if "per-key" in r.name else None
        table.add_row(
            r.name,
            f"{r.events_counted:.2%}",
            f"{r.windows_right:.2%}",
            f"{r.late_rows:,}",
            _versus_spark(r),
            f"{r.events_per_s:,.0f}",
            style=style,
        )
    console.print(table)
    line = _lateness_line(result)
    if line is not None:
        console.print(line)
    console.print(f"[dim]{RULES_NOTE}[/dim]")


@dataclass
class GroupLateness:
    """A group of tenants in the per-key run's ``LatenessReport``."""

    group: str
    tenants: int
    events: int
    #: Events Spark's one watermark would have dropped (``spark_dropped``).
    spark_would_drop: int
    #: Events tidemark's per-key watermarks dropped (``late_rows``).
    tidemark_dropped: int


def lateness_by_group(result: DemoResult) -> list[GroupLateness]:
    """The per-key run's lateness report summed over the tenants on time and the late
    ones (empty without a report)."""
    keyed = next((s for s in result.systems if s.lateness is not None), None)
    if keyed is None or keyed.lateness is None:
        return []
    groups = {g: GroupLateness(g, 0, 0, 0, 0) for g in ("tenants on time", "late tenants")}
    for k in keyed.lateness["keys"]:
        g = groups["late tenants" if k["key"] in result.late_tenants else "tenants on time"]
        g.tenants += 1
        g.events += k["rows"]
        g.spark_would_drop += k["spark_dropped"]
        g.tidemark_dropped += k["late_rows"]
    return list(groups.values())


def _lateness_line(result: DemoResult) -> str | None:
    groups = lateness_by_group(result)
    if not groups:
        return None
    parts = [
        f"{g.group}: {g.spark_would_drop:,} of {g.events:,} events "
        f"(tidemark per key: {g.tidemark_dropped:,})"
        for g in groups
    ]
    return "What Spark's one watermark would have dropped (LatenessReport): " + "; ".join(parts)


def _versus_spark(r: SystemResult) -> str:
    """The "output vs Spark's" cell: checked in this run."""
    if r.differs_from_spark is None:
        return "-"
    if r.differs_from_spark == 0:
        return "identical"
    return f"{r.differs_from_spark:,} windows differ"


def write_report(result: DemoResult, out_dir: Path) -> Path:
    """Writes ``index.html`` and ``accuracy.png`` to ``out_dir``; returns the page."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    _bar_pairs(
        plt,
        out_dir / "accuracy.png",
        [s.name for s in result.systems],
        [
            ("events counted in their window", [100 * s.events_counted for s in result.systems]),
            ("windows exactly right", [100 * s.windows_right for s in result.systems]),
        ],
        "Half of the tenants report late: what each watermark keeps",
        ("%", "lower right", 4.0),
    )
    lateness = _write_lateness_plot(result, out_dir, plt)
    rows = "".join(
        f"<tr><td>{html.escape(s.name)}</td><td>{s.events_counted:.2%}</td>"
        f"<td>{s.windows_right:.2%}</td><td>{s.late_rows:,}</td>"
        f"<td>{html.escape(_versus_spark(s))}</td><td>{s.events_per_s:,.0f}</td></tr>"
        for s in result.systems
    )
    page = out_dir / "index.html"
    page.write_text(
        f"""<!doctype html><html><head><meta charset="utf-8"><title>tidemark demo</title>
<style>body{{font-family:sans-serif;max-width:900px;margin:2em auto}}
td,th{{padding:4px 10px;text-align:right}}
td:first-child,th:first-child{{text-align:left}}</style></head><body>
<h1>tidemark demo</h1>
<p>{result.events:,} events from {result.tenants} tenants, half of which report late
(30 to 300 seconds), read by Spark Structured Streaming in {result.batches} micro-batches.
Tumbling window {WINDOW}, bounded delay {DELAY}, the same for every system.</p>
<table><tr><th>system</th><th>events counted in their window</th><th>windows exactly right</th>
<th>late rows</th><th>output vs Spark's</th><th>events/s</th></tr>{rows}</table>
<p><img src="accuracy.png" alt="accuracy chart"></p>{lateness}
<p>Ground truth: a batch GROUP BY over all {result.events:,} events
({result.truth_windows:,} windows). Events/s: all events over the query's time, start to
end (tidemark's end-of-input flush included), after one unmeasured run of each system
over two files (the JVM's and the Python workers' start-up).</p>
<p>{html.escape(RULES_NOTE)}</p>
</body></html>
"""
    )
    return page


def _write_lateness_plot(result: DemoResult, out_dir: Path, plt: Any) -> str:
    """``lateness.png``: per tenant group, the share of events Spark's watermark would
    have dropped and the share tidemark's per-key watermarks dropped; returns the HTML
    section ('' without a report)."""
    groups = lateness_by_group(result)
    if not groups:
        return ""
    _bar_pairs(
        plt,
        out_dir / "lateness.png",
        [f"{g.group} ({g.tenants})" for g in groups],
        [
            (label, [100 * getattr(g, f) / max(g.events, 1) for g in groups])
            for label, f in (
                ("Spark's one watermark would drop", "spark_would_drop"),
                ("tidemark per key dropped", "tidemark_dropped"),
            )
        ],
        "What Spark would have dropped, per tenant group (LatenessReport)",
        ("% of the group's events", "upper left", 3.5),
    )
    spark = next((s for s in result.systems if s.differs_from_spark is None), None)
    rows = "".join(
        f"<tr><td>{html.escape(g.group)}</td><td>{g.tenants}</td><td>{g.events:,}</td>"
        f"<td>{g.spark_would_drop:,}</td><td>{g.tidemark_dropped:,}</td></tr>"
        for g in groups
    )
    measured = (
        ""
        if spark is None
        else f" Spark itself, in this run, left {spark.late_rows:,} events uncounted."
    )
    return f"""
<h2>What Spark would have dropped</h2>
<p>The per-key run keeps a <code>tm.LatenessReport(spark_delay="{DELAY}")</code>: each
micro-batch's rows are also judged by Spark's one global watermark, tenant by
tenant.{measured}</p>
<table><tr><th>tenants</th><th>count</th><th>events</th><th>Spark would drop</th>
<th>tidemark per key dropped</th></tr>{rows}</table>
<p><img src="lateness.png" alt="what Spark would have dropped, per tenant group"></p>"""


def _bar_pairs(
    plt: Any,
    path: Path,
    labels: list[str],
    series: list[tuple[str, list[float]]],
    title: str,
    look: tuple[str, str, float],
) -> list[str]:
    """A chart of two bars (percentages) per label, written to ``path``; ``look``: the
    y axis's label, the legend's place, the height. Each bar carries its value, so a
    label whose values are all zero reads "0%", not as an empty place; returns those
    values as drawn."""
    ylabel, legend, height = look
    fig, ax = plt.subplots(figsize=(8, height))
    x = range(len(labels))
    drawn: list[str] = []
    for (name, values), shift in zip(series, (-0.2, 0.2), strict=True):
        bars = ax.bar([i + shift for i in x], values, 0.4, label=name)
        texts = [f"{v:.3g}%" for v in values]
        ax.bar_label(bars, labels=texts, fontsize=7, padding=1)
        drawn += texts
    ax.set_xticks(list(x))
    ax.set_xticklabels(labels, fontsize=8)
    ax.set_ylabel(ylabel)
    ax.set_ylim(0, 105)
    ax.set_title(title)
    ax.legend(loc=legend, fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return drawn
