"""tidemark vs Spark on Spark: batch and Structured Streaming, measured in one run.

Run from the repository root (after ``make build``)::

    python benches/spark_compare.py                      # every part but reorder, local[2]
    python benches/spark_compare.py --part sources --sizes 10000 100000 400000 1000000
    python benches/spark_compare.py --part batch --rows 2000000 --repeat 5
    python benches/spark_compare.py --part streaming --batch-rows 100000 --batches 10
    python benches/spark_compare.py --part reorder --batch-rows 10000 --batches 10

Batch (same Parquet data, each run forced with the ``noop`` sink):

* ``tidemark.spark.aggregate``: tumbling 10 s count + sum per key, per-key watermarks.
  No row is late in a batch run and each row fails or not on its own: the pipeline
  runs once over all rows, for the windows, and nothing is persisted (only the windows
  are written);
* the same with ``cache=False`` (each output its own job: the same windows job);
* the same pipeline with ``max_keys`` set, whose error rows only a run can tell: one
  job computes all three outputs and persists them (only the windows are written);
* Spark's own ``groupBy(window(ts, "10 seconds"), key).agg(count, sum)``;
* the floor of the path: ``mapInArrow`` with a function that only counts rows (the
  unavoidable JVM <-> Python transfer). Goal: tidemark within 1.3x of the floor;
* for reference, ``mapInArrow`` returning every row it reads: the floor plus the
  transfer back into the JVM, which tidemark pays for its windows;
* aggregates Spark's ``groupBy`` folds exactly (count, max, float sum), on dense data (1,000 keys
  over 100 s: 200 rows per key and window) and on the sparse data above: Spark's own,
  tidemark's with ``preaggregate=True`` (folded by Spark before Python), without
  (``False``) and by default (``None``: folded where a sample of the input says so).
  Their "x its Spark" is against Spark's run on the same data and aggregates.

Streaming (the demo's generator: half of the tenants report late; one file per
micro-batch of ``--batch-rows`` events): Spark ``withWatermark`` + ``window`` (update
mode) vs tidemark with per-key watermarks, and the floor of the ``mapInArrow`` path
(the same stream and trigger, each micro-batch one ``mapInArrow`` job that counts its
rows); events/s and the share of events counted, over the whole run (query start and
tidemark's end-of-input flush included) and in the steady state (the median
micro-batch after the first). By default tidemark runs a one-task micro-batch that
Spark estimates at most 8 MiB in the driver (``StreamProcessor(on_driver=None)``): no
Python worker, so it can beat the floor of the ``mapInArrow`` path; and it reads a
micro-batch of this bare Parquet file stream from its files (``read_files=True``), up
to 32 MiB in the driver. tidemark also runs with ``arrow_sinks=True`` and with
``read_files=False`` (its rows fetched with ``toArrow()``, or sent to its task, by
Spark). ``--on-driver no`` measures the one-task path, ``--on-driver yes`` runs every
micro-batch in the driver.

Sources (``--part sources``): ``benches/stream_sources.py``'s table: Spark native,
``StreamProcessor`` with its defaults, on the executors (``on_driver=False,
read_files=False``), with ``preaggregate=True``, and the count floor (``foreachBatch`` +
``count()``), from a Parquet file stream, Kafka (a broker started here) and Spark's
``rate-micro-batch`` source, at ``--sizes`` rows per micro-batch; count and float sum
per tenant in 10 s windows.

Reorder (``--part reorder``, not part of ``all``): ``ReorderStream`` over the same kind
of stream, 4 state partitions routed by tenant (then round robin), its micro-batches in
one task (the default at these sizes), in the driver (``on_driver=True``, and with Arrow
sinks, where the driver is the default) and shuffled to one task per state partition
(``shuffle=True``); steady micro-batch times, runs alternating.

Batch: ``--repeat`` rounds, each running every variant once in turn (a drifting
machine moves them alike); times are medians over rounds and ratios the median of
each round's ratio. Streaming: medians of ``--repeat`` runs, alternating systems,
after one unmeasured run of each over two files (JVM and Python worker start-up).
"""

from __future__ import annotations

import argparse
import collections
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

import tidemark as tm

# A script's own directory is on sys.path: benches/stream_sources.py.
from record import documented, record
from stream_sources import SYSTEMS, compare
from tidemark.spark import aggregate
from tidemark_tools.jars import kafka_delta_conf
from tidemark_tools.session import local_session


def _interleaved(fns: dict[str, Callable[[], None]], repeat: int) -> dict[str, list[float]]:
    """Seconds per run of each function, ``repeat`` rounds after one warm-up round
    (JIT, Python workers). Every round runs each function once, in turn, so a
    machine that drifts (a noisy VM) moves all of them alike: ratios taken within a
    round hold where ratios of separate blocks of runs do not."""
    times: dict[str, list[float]] = {k: [] for k in fns}
    for r in range(repeat + 1):
        for k, fn in fns.items():
            t = time.perf_counter()
            fn()
            if r:
                times[k].append(time.perf_counter() - t)
    return times


def batch_part(
    spark: Any, rows: int, keys: int, repeat: int, work: Path, keep: bool = False
) -> None:
    from pyspark.sql import functions as F

    rng = np.random.default_rng(3)
    path = work / "batch.parquet"
    pq.write_table(
        pa.table(
            {
                "device": pa.array(rng.integers(0, keys, rows)),
                "ts": pa.array(
                    1_767_225_600_000_000 + rng.integers(0, 3_600_000_000, rows),
                    pa.timestamp("us", tz="UTC"),
                ),
                "value": pa.array(rng.normal(0, 1, rows)),
            }
        ),
        path,
        row_group_size=128_000,
    )
    df = spark.read.parquet(str(path))
    # Dense: 1,000 keys over 100 s, 200 rows per key and 10 s window (the fold's case).
    dense_path = work / "dense.parquet"
    pq.write_table(
        pa.table(
            {
                "device": pa.array(rng.integers(0, 1_000, rows)),
                "ts": pa.array(
                    1_767_225_600_000_000 + rng.integers(0, 100_000_000, rows),
                    pa.timestamp("us", tz="UTC"),
                ),
                "amount": pa.array(rng.integers(0, 1000, rows).astype(np.int32)),
                "value": pa.array(rng.normal(0, 1, rows)),
            }
        ),
        dense_path,
        row_group_size=128_000,
    )
    dense = spark.read.parquet(str(dense_path))

    def pipeline(aggs: dict[str, Any], max_keys: int | None = None) -> tm.Pipeline:
        return tm.Pipeline(
            key="device",
            event_time="ts",
            watermark=tm.BoundedOutOfOrderness("5s", per="key"),
            window=tm.Tumbling("10s"),
            aggs=aggs,
            max_keys=max_keys,
        )

    def spark_groupby(data: Any, *aggs: Any) -> None:
        """Spark's own windowed aggregation of ``data``, run into the ``noop`` sink."""
        (
            data.groupBy(F.window("ts", "10 seconds"), "device")
            .agg(*aggs)
            .write.format("noop")
            .mode("overwrite")
            .save()
        )

    count_sum = {"n": tm.count(), "s": tm.sum("value")}

    pipe = pipeline(count_sum)
    # max_keys: which rows fail depends on the others, so the result is persisted.
    capped = pipeline(count_sum, max_keys=1 << 30)

    def windows_of(p: tm.Pipeline) -> None:
        res = aggregate(df, p)
        res.windows.write.format("noop").mode("overwrite").save()
        res.unpersist()

    def tidemark_run() -> None:
        windows_of(pipe)

    def tidemark_persisted_run() -> None:
        windows_of(capped)

    def tidemark_windows_run() -> None:
        # Only the windows are read: no persist, a windows-only job.
        aggregate(df, pipe, cache=False).windows.write.format("noop").mode("overwrite").save()

    # Aggregates Spark's groupBy folds exactly (count, max, float sum), on data with
    # many rows per key and window and on the sparse data above: Spark's own, tidemark
    # with preaggregate=True, and without.
    folded = pipeline({"n": tm.count(), "top": tm.max("device"), "s": tm.sum("value")})
    # The same without the float sum (count and max: an integer fold), on dense data.
    counted = pipeline({"n": tm.count(), "top": tm.max("device")})

    def folded_runs(data: Any) -> tuple[Callable[[], None], ...]:
        def spark_folded() -> None:
            spark_groupby(
                data,
                F.count("*").alias("n"),
                F.max("device").alias("top"),
                F.sum("value").alias("s"),
            )

        def tidemark(pre: bool | None) -> Callable[[], None]:
            def run() -> None:
                res = aggregate(data, folded, preaggregate=pre)
                res.windows.write.format("noop").mode("overwrite").save()

            return run

        return spark_folded, tidemark(True), tidemark(False), tidemark(None)

    dense_runs, sparse_runs = folded_runs(dense), folded_runs(df)

    def spark_counted() -> None:
        spark_groupby(dense, F.count("*").alias("n"), F.max("device").alias("top"))

    def tidemark_counted() -> None:
        aggregate(dense, counted).windows.write.format("noop").mode("overwrite").save()

    def spark_run() -> None:
        spark_groupby(df, F.count("*").alias("n"), F.sum("value").alias("s"))

    def count_rows(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        n = sum(b.num_rows for b in batches)
        yield pa.record_batch({"n": pa.array([n], pa.int64())})

    def floor_run() -> None:
        n = int(spark.conf.get("spark.sql.shuffle.partitions"))
        (
            df.repartition(n, "device")
            .mapInArrow(count_rows, "n long")
            .write.format("noop")
            .mode("overwrite")
            .save()
        )

    def echo_run() -> None:
        # The floor plus the way back: every input row returns to the JVM (tidemark
        # returns about as many windows as it reads rows here).
        n = int(spark.conf.get("spark.sql.shuffle.partitions"))
        (
            df.repartition(n, "device")
            .mapInArrow(lambda batches: batches, df.schema)
            .write.format("noop")
            .mode("overwrite")
            .save()
        )

    floor_label, spark_label = "mapInArrow counting rows (floor)", "Spark groupBy(window, key)"
    times = _interleaved(
        {
            floor_label: floor_run,
            "mapInArrow returning every row": echo_run,
            spark_label: spark_run,
            "tidemark.spark.aggregate": tidemark_run,
            "tidemark aggregate(cache=False)": tidemark_windows_run,
            "tidemark, persisted (max_keys)": tidemark_persisted_run,
            "dense: Spark groupBy count, max, sum": dense_runs[0],
            "dense: tidemark preaggregate=True": dense_runs[1],
            "dense: tidemark preaggregate=False": dense_runs[2],
            "dense: tidemark default (sampled)": dense_runs[3],
            "sparse: Spark groupBy count, max, sum": sparse_runs[0],
            "sparse: tidemark preaggregate=True": sparse_runs[1],
            "sparse: tidemark preaggregate=False": sparse_runs[2],
            "sparse: tidemark default (sampled)": sparse_runs[3],
            "dense: Spark groupBy count, max": spark_counted,
            "dense: tidemark default, count, max": tidemark_counted,
        },
        repeat,
    )

    def ratio(label: str, base: str) -> float:
        """Median over rounds of the round's ratio (both measured minutes apart at most)."""
        return statistics.median(a / b for a, b in zip(times[label], times[base], strict=True))

    print(
        f"\nBatch: {rows:,} rows, {keys:,} keys, local[2]; median of {repeat} interleaved "
        "rounds (ratios: median of each round's ratio)"
    )
    # Each row's Spark: Spark's own run on the same data with the same aggregates.
    counted_spark = "dense: Spark groupBy count, max"
    own_spark = {
        label: f"{label.split(':')[0]}: Spark groupBy count, max, sum"
        for label in times
        if label.startswith(("dense: ", "sparse: "))
    }
    own_spark[counted_spark] = own_spark["dense: tidemark default, count, max"] = counted_spark
    table = []
    for label, secs in times.items():
        med = statistics.median(secs)
        base = own_spark.get(label, spark_label)
        print(
            f"  {label:<36} {med:7.2f} s  {rows / med / 1e6:6.2f} M rows/s  "
            f"{ratio(label, floor_label):5.2f}x floor  {ratio(label, base):5.2f}x its Spark"
        )
        table.append(
            [
                label,
                f"{med:.2f} s",
                f"{rows / med / 1e6:.2f} M",
                f"{ratio(label, floor_label):.2f}x",
                f"{ratio(label, base):.2f}x",
            ]
        )
    if keep:
        record(
            "spark_compare_batch",
            title="Batch: tidemark.spark.aggregate against Spark's groupBy",
            what=(
                f"A Parquet input of {rows:,} rows over {keys:,} keys, each run forced with "
                "the `noop` sink: `aggregate` (tumbling 10 s count + sum per key, per-key "
                "watermarks) by default, with `cache=False` and with `max_keys` (its three "
                "outputs persisted), Spark's own `groupBy(window, key)`, the floor of the "
                "path (`mapInArrow` counting rows) and the floor returning every row; and "
                "aggregates Spark folds exactly (count, max, float sum) on dense data (200 "
                "rows per key and window) and on the sparse data, Spark's own against "
                "tidemark's with `preaggregate` True, False and by default. Medians of "
                f"{repeat} interleaved rounds; ratios are the median of each round's ratio, "
                "each against its own Spark run."
            ),
            command="python benches/spark_compare.py --part batch",
            master=spark.sparkContext.master,
            columns=["run", "time", "rows/s", "x the floor", "x its Spark"],
            rows=table,
        )


def _run_floor(spark: Any, source: Path, schema: Any, chk: Path) -> Any:
    """The floor of the ``mapInArrow`` path (tidemark's with ``on_driver=False``): the
    same file stream and trigger, and a ``foreachBatch`` function that runs one
    ``mapInArrow`` job counting the batch's rows and collects the count (no state, no
    windows). It reads the columns tidemark's pipeline reads (the key and the event
    time)."""
    from tidemark_tools.demo_streaming import SystemResult, _intervals, _run_file_stream

    marks: list[float] = []
    seen = [0]

    def count_rows(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        n = sum(b.num_rows for b in batches)
        yield pa.record_batch({"n": pa.array([n], pa.int64())})

    def each_batch(df: Any, _batch_id: int) -> None:
        used = df.select("tenant", "event_time").coalesce(1)
        seen[0] += sum(r.n for r in used.mapInArrow(count_rows, "n long").collect())
        marks.append(time.perf_counter())

    t = _run_file_stream(spark, source, schema, each_batch, chk)
    r = SystemResult("floor", {}, time.perf_counter() - t, batch_seconds=_intervals(t, marks))
    r.events_per_s = seen[0] / r.seconds
    return r


def streaming_part(
    spark: Any,
    batch_rows: int,
    batches: int,
    repeat: int,
    work: Path,
    on_driver: bool | None = None,
    keep: bool = False,
) -> None:
    from tidemark_tools.datagen import StreamSpec, multi_tenant_stream
    from tidemark_tools.demo_streaming import (
        _run_spark_native,
        _run_tidemark,
        _score,
        _truth,
        _warm_up,
        _write_files,
    )

    events = batch_rows * batches
    stream = multi_tenant_stream(
        StreamSpec(
            keys=1_000,
            events=events,
            duration_s=90 * batches,  # the demo's 90 s of event time per micro-batch
            delayed_fraction=0.5,
            skew=0.8,
        )
    )
    source = work / "stream"
    _write_files(stream, source, batches)
    schema = spark.read.parquet(str(source)).schema
    truth = _truth(stream)
    parts = int(spark.conf.get("spark.sql.shuffle.partitions"))
    runs: dict[str, list[Any]] = {
        "spark": [],
        "floor": [],
        "tidemark": [],
        "arrow": [],
        "toarrow": [],
    }
    # Neither system's first run pays the JVM's (or the Python workers') start-up.
    _warm_up(spark, source, schema, work, parts)
    for i in range(repeat):
        r = _run_spark_native(spark, source, schema, work / f"spark-{i}")
        _score(r, truth, events)
        runs["spark"].append(r)
        runs["floor"].append(_run_floor(spark, source, schema, work / f"floor-{i}"))
        r = _run_tidemark(spark, source, schema, work / f"tm-{i}", "key", parts, on_driver)
        _score(r, truth, events)
        runs["tidemark"].append(r)
        r = _run_tidemark(
            spark, source, schema, work / f"tma-{i}", "key", parts, on_driver, arrow_sinks=True
        )
        _score(r, truth, events)
        runs["arrow"].append(r)
        r = _run_tidemark(
            spark, source, schema, work / f"tmt-{i}", "key", parts, on_driver, read_files=False
        )
        _score(r, truth, events)
        runs["toarrow"].append(r)
    med = {k: statistics.median(r.events_per_s for r in v) for k, v in runs.items()}
    # Steady state: micro-batches 2..N (not the first, which starts the Python workers
    # and compiles the plans; not tidemark's end-of-input flush).
    steady = {
        k: statistics.median(x for r in v for x in r.batch_seconds[1:batches])
        for k, v in runs.items()
    }
    print(
        f"\nStreaming: {events:,} events, {batches} micro-batches of {batch_rows:,}, 1,000 tenants "
        f"(half late); median of {repeat} runs"
    )
    systems = [
        ("spark", "Spark withWatermark + window"),
        ("floor", "floor: foreachBatch + mapInArrow counting rows"),
        ("tidemark", "tidemark per-key"),
        ("arrow", "tidemark per-key, arrow_sinks=True"),
        ("toarrow", "tidemark per-key, read_files=False"),
    ]
    for key, label in systems:
        counted = "" if key == "floor" else f"events counted {runs[key][0].events_counted:.2%}"
        print(
            f"  {label:<47} {med[key]:10,.0f} events/s  {med[key] / med['spark']:5.2f}x Spark  "
            f"{counted}"
        )
    ran = collections.Counter(x for r in runs["tidemark"] for x in r.layouts)
    read = collections.Counter(x for r in runs["tidemark"] for x in r.reads)
    where = ", ".join(f"{k} {v}" for k, v in sorted(ran.items()))
    print(f"  tidemark's micro-batches ran: {where}")
    how = ", ".join(f"{k} {v}" for k, v in sorted(read.items()))
    print(f"  tidemark's micro-batches were read from: {how}")
    print("  steady state (median micro-batch after the first):")
    table = []
    for key, label in systems:
        print(
            f"  {label:<47} {batch_rows / steady[key]:10,.0f} events/s  "
            f"{steady['spark'] / steady[key]:5.2f}x Spark  ({steady[key]:.3f} s per micro-batch)"
        )
        counted = "-" if key == "floor" else f"{runs[key][0].events_counted:.2%}"
        table.append(
            [
                label,
                f"{med[key]:,.0f}",
                f"{med[key] / med['spark']:.2f}x",
                f"{steady[key]:.3f} s",
                f"{steady['spark'] / steady[key]:.2f}x",
                counted,
            ]
        )
    if keep:
        record(
            "spark_compare_streaming",
            title="Structured Streaming: tidemark against Spark's withWatermark",
            what=(
                f"The demo's generator (1,000 tenants, half of them late), {batches} "
                f"micro-batches of {batch_rows:,} events, one Parquet file each: Spark's "
                "`withWatermark` + `window` (update mode), the floor of the path "
                "(`foreachBatch` + `mapInArrow` counting rows) and `StreamProcessor` with "
                "per-key watermarks (its defaults; with `arrow_sinks=True`; with "
                "`read_files=False`). Events/s over the whole run (query start and "
                "tidemark's flush included) and the steady micro-batch (the median after "
                f"the first); medians of {repeat} runs, systems alternating."
            ),
            command="python benches/spark_compare.py --part streaming",
            master=spark.sparkContext.master,
            columns=[
                "system",
                "events/s, whole run",
                "x Spark",
                "steady micro-batch",
                "x Spark, steady",
                "events counted",
            ],
            rows=table,
        )
    print(
        f"  tidemark's micro-batch is {steady['tidemark'] / steady['floor']:.2f}x the floor's: "
        f"the floor is {steady['spark'] / steady['floor']:.2f}x Spark"
    )

    # Each run's own ratios (the runs alternate Spark, floor and tidemark): the spread says
    # how much of a difference between builds or days is noise.
    def steady_of(r: Any) -> float:
        return float(statistics.median(r.batch_seconds[1:batches]))

    for key, label in (
        ("tidemark", "tidemark"),
        ("arrow", "tidemark, arrow_sinks"),
        ("toarrow", "tidemark, read_files=False"),
    ):
        pairs = list(zip(runs["spark"], runs[key], strict=True))
        whole = ", ".join(f"{t.events_per_s / s.events_per_s:.2f}x" for s, t in pairs)
        each = ", ".join(f"{steady_of(s) / steady_of(t):.2f}x" for s, t in pairs)
        print(f"  each run, {label} vs Spark: whole run {whole}; steady {each}")
    above = ", ".join(
        f"{steady_of(t) / steady_of(f):.2f}x"
        for f, t in zip(runs["floor"], runs["tidemark"], strict=True)
    )
    print(f"  each run, tidemark's steady micro-batch over the floor's: {above}")


#: ReorderStream's runs: where its micro-batches run (``last_progress["layout"]``), and
#: the settings that put them there.
LAYOUTS = {
    "one task (default)": ("one task", {}),
    "driver": ("driver", {"on_driver": True}),
    "driver, Arrow sinks (default)": ("driver", {"arrow_sinks": True}),
    "shuffled": ("shuffled", {"shuffle": True}),
}


def reorder_part(
    spark: Any, batch_rows: int, batches: int, repeat: int, work: Path, keep: bool
) -> None:
    """``ReorderStream`` (4 state partitions, routed by tenant, then round robin) over
    the streaming part's data: micro-batches run in the driver (the default at these
    sizes: one task), in the driver (with and without Arrow sinks) and shuffled to one
    task per state partition, runs alternating; the sink counts the released rows.
    ``keep``: record the table."""
    from tidemark.spark import ReorderStream
    from tidemark_tools.datagen import StreamSpec, multi_tenant_stream
    from tidemark_tools.demo_streaming import _intervals, _run_file_stream, _write_files

    stream = multi_tenant_stream(
        StreamSpec(
            keys=1_000,
            events=batch_rows * batches,
            duration_s=90 * batches,
            delayed_fraction=0.5,
            skew=0.8,
        )
    )
    source = work / "reorder-stream"
    _write_files(stream, source, batches)
    schema = spark.read.parquet(str(source)).schema
    print(
        f"\nReorderStream: {batches} micro-batches of {batch_rows:,} rows, 1,000 tenants, "
        f"4 state partitions; steady micro-batch, median of {repeat} runs each (alternating)"
    )
    table = []
    for routing, by in (("by tenant", ["tenant"]), ("round robin", None)):
        steady: dict[str, list[float]] = {label: [] for label in LAYOUTS}
        released: dict[str, int] = {}
        for i in range(repeat + 1):  # the first round warms up the JVM and the workers
            for k, (label, (layout, settings)) in enumerate(LAYOUTS.items()):
                marks: list[float] = []
                n = [0]

                def sink(
                    df: Any, _batch_id: int, n: list[int] = n, marks: list[float] = marks
                ) -> None:
                    n[0] += df.num_rows if isinstance(df, pa.Table) else df.count()
                    marks.append(time.perf_counter())

                name = f"{k}-{'rr' if by is None else 'key'}-{i}"
                rs = ReorderStream(
                    tm.Reorder("event_time", late_tolerance="5s"),
                    str(work / f"reorder-{name}"),
                    num_partitions=4,
                    sink=sink,
                    partition_by=by,
                    **settings,
                )
                t = _run_file_stream(spark, source, schema, rs, work / f"reorder-q-{name}")
                assert rs.last_progress is not None
                assert rs.last_progress["layout"] == layout, rs.last_progress
                if i:
                    steady[label].append(statistics.median(_intervals(t, marks)[1:]))
                released[label] = n[0]
        if by is not None:  # routed alike: the same rows released
            assert len(set(released.values())) == 1, released
        print(f"  routed {routing}:")
        default = statistics.median(steady["one task (default)"])
        for label, secs in steady.items():
            med = statistics.median(secs)
            runs = ", ".join(f"{x:.3f}" for x in secs)
            print(
                f"    {label:<30} {med:6.3f} s  {batch_rows / med:10,.0f} rows/s  "
                f"(runs: {runs}; {released[label]:,} rows released)"
            )
            rate, vs = f"{batch_rows / med:,.0f}", f"{med / default:.2f}x"
            table.append([routing, label, f"{med:.3f} s", rate, vs])
    if keep:
        record(
            "spark_compare_reorder",
            title="ReorderStream: where a micro-batch runs",
            what=(
                f"`ReorderStream` over a Parquet file stream of {batches} micro-batches of "
                f"{batch_rows:,} rows (1,000 tenants, half of them late), 4 state partitions "
                "routed by tenant and then dealt out in turn, 5 s of tolerance; its "
                "micro-batches in one task (the default at this size), in the driver "
                "(`on_driver=True`; with Arrow sinks, the default), and shuffled to one task "
                "per state partition (`shuffle=True`); the sink counts the released rows "
                "(a DataFrame's `count()`, or an Arrow table's rows). The steady micro-batch "
                f"time is the median after the first, then the median of {repeat} runs, "
                "runs alternating."
            ),
            command="python benches/spark_compare.py --part reorder",
            master=spark.sparkContext.master,
            columns=["routing", "run", "steady micro-batch", "rows/s", "time vs the default"],
            rows=table,
        )


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--part",
        choices=["batch", "streaming", "sources", "both", "all", "reorder"],
        default="all",
        help="all: batch, streaming and sources; both: batch and streaming; sources: "
        "benches/stream_sources.py (file, Kafka and rate sources by micro-batch size); "
        "reorder: ReorderStream in the driver vs in tasks",
    )
    ap.add_argument(
        "--sizes",
        type=int,
        nargs="+",
        default=[10_000, 100_000, 400_000],
        help="rows per micro-batch of the sources part",
    )
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--keys", type=int, default=10_000)
    ap.add_argument("--batch-rows", type=int, default=100_000)
    ap.add_argument("--batches", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument(
        "--on-driver",
        choices=["auto", "yes", "no"],
        default="auto",
        help="StreamProcessor(on_driver=...): auto (None, the default), yes (True), no (False)",
    )
    ap.add_argument("--record", action="store_true", help="record a run with other settings")
    args = ap.parse_args()
    sources = args.part in ("sources", "all")
    conf = kafka_delta_conf() if sources else None
    spark = local_session(args.master, "tidemark-bench", 4, conf)
    work = Path(tempfile.mkdtemp(prefix="tidemark-bench-"))
    try:
        # A part's table is recorded where every setting but the part is the default.
        keep = documented(ap, argparse.Namespace(**{**vars(args), "part": "all"}))
        if args.part in ("batch", "both", "all"):
            batch_part(spark, args.rows, args.keys, args.repeat, work, keep)
        if args.part in ("streaming", "both", "all"):
            on_driver = {"auto": None, "yes": True, "no": False}[args.on_driver]
            streaming_part(spark, args.batch_rows, args.batches, args.repeat, work, on_driver, keep)
        if sources:
            # One batch-size in five micro-batches per (source, size, system).
            compare(spark, args.sizes, 5, ["file", "kafka", "rate"], list(SYSTEMS), work)
        if args.part == "reorder":
            reorder_part(spark, args.batch_rows, args.batches, args.repeat, work, keep)
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
