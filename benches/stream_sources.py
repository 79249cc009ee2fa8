"""Structured Streaming by source and micro-batch size: Spark native, tidemark's defaults,
tidemark in executors, and the count floor, in one run (issue 58's table).

Run from the repository root (after ``make build jars``)::

    python benches/stream_sources.py                        # file, kafka, rate; 10K-400K
    python benches/stream_sources.py --sizes 10000 100000 400000 1000000 --batches 5
    python benches/stream_sources.py --sources kafka --systems floor,tidemark,spark
    python benches/stream_sources.py --sum ivalue --systems spark,tidemark,raw,floor
    python benches/spark_compare.py --part sources          # the same, from the compare

The stream: the multi-tenant generator of the demo (2,000 tenants, half of them report
30-300 s late as a block, Zipf-skewed rates, 90 s of event time per micro-batch), with
the value as a double. Every system computes count and float sum per tenant in 10 s
tumbling windows and writes them to Spark's ``noop`` sink (tidemark's sink:
``df.write.format("noop")``, which runs its job):

* ``spark``: Spark's ``withWatermark("event_time", "5 seconds")`` + ``groupBy(window,
  tenant)`` in append mode (one global watermark: the late half is dropped);
* ``tidemark``: ``StreamProcessor`` with default settings (per-key watermarks,
  5 s delay, ``late="drop"`` as Spark's query drops its late rows): Spark folds the
  rows per tenant and window pane before Python in micro-batches too large for one task
  (count and an exact float sum fold);
* ``executors``: the same with ``on_driver=False, read_files=False``: every micro-batch
  in Spark tasks, its rows from Spark (a cluster's path);
* ``floor``: ``foreachBatch`` + ``count()``: what reading a micro-batch costs;
* ``raw``: the defaults with ``preaggregate=False``: every row goes into Python (the
  default before the fold was).

Sources, each giving every system the same micro-batches:

* ``file``: one Parquet file per micro-batch (``maxFilesPerTrigger=1``);
* ``kafka``: the same rows as JSON on an 8-partition topic, keyed (and so partitioned) by
  tenant, read with ``maxOffsetsPerTrigger``; a broker is started here
  (``tidemark_tools.kafka``) unless ``--bootstrap`` names one;
* ``rate``: Spark's ``rate-micro-batch`` source (``rowsPerBatch``), the rows made from
  its counter in SQL: 2,000 tenants, 90 s of event time per micro-batch, every other
  tenant 60 s late.

Each cell: the median of Spark's ``triggerExecution`` over the micro-batches after the
first (seconds), then throughput (events per second per core); ratios are against
Spark native and the floor of the same source and size, measured in this run.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

TENANTS = 2_000
SPAN_S = 90  # event time per micro-batch
SYSTEMS = ("spark", "tidemark", "executors", "raw", "floor")
#: The column summed (``--sum``): ``value`` (a double) or ``ivalue`` (the same, a long).
SUM_COLUMN = ["value"]


def make_stream(size: int, batches: int) -> pa.Table:
    """The multi-tenant stream (arrival order) of ``batches`` micro-batches of ``size``
    rows, ``SPAN_S`` of event time each, with ``value`` a double and ``ivalue`` the same
    number before it was divided (an int)."""
    from tidemark_tools.datagen import StreamSpec, multi_tenant_stream

    t = multi_tenant_stream(
        StreamSpec(
            keys=TENANTS,
            events=size * batches,
            duration_s=SPAN_S * batches,
            delayed_fraction=0.5,
            skew=0.8,
        )
    )
    ivalue = pc.cast(t.column("value"), pa.int32())
    value = pc.divide(pc.cast(ivalue, pa.float64()), 7.0)
    return pa.table(
        {
            "tenant": t.column("tenant"),
            "event_time": t.column("event_time"),
            "value": value,
            "ivalue": ivalue,
        }
    )


def file_source(spark: Any, stream: pa.Table, size: int, work: Path) -> Any:
    import os

    import pyarrow.parquet as pq

    d = work / f"files-{size}"
    d.mkdir(parents=True, exist_ok=True)
    for i, off in enumerate(range(0, stream.num_rows, size)):
        f = d / f"batch-{i:05d}.parquet"
        pq.write_table(stream.slice(off, size), f)
        os.utime(f, (1_700_000_000 + i, 1_700_000_000 + i))
    schema = spark.read.parquet(str(d)).schema

    def read() -> Any:
        return spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(str(d))

    return read


def kafka_source(spark: Any, stream: pa.Table, size: int, broker: Any) -> Any:
    """The stream on a new topic (its last micro-batch is not measured: a Kafka task that
    reads to a partition's end waits ``fetch.max.wait.ms`` there)."""
    from pyspark.sql import functions as F

    topic = f"sources-{size}-{time.time_ns()}"
    broker.create_topic(topic, 8)
    us = pc.cast(stream.column("event_time"), pa.int64()).to_pylist()
    cols = [stream.column(c).to_pylist() for c in ("tenant", "value", "ivalue")]

    def records() -> Iterator[tuple[bytes, bytes, None]]:
        for tenant, ts, value, ivalue in zip(cols[0], us, cols[1], cols[2], strict=True):
            body = json.dumps({"tenant": tenant, "ts": ts, "value": value, "ivalue": ivalue})
            yield tenant.encode(), body.encode(), None

    broker.produce(topic, records())
    ev = F.from_json(
        F.col("value").cast("string"), "tenant STRING, ts LONG, value DOUBLE, ivalue INT"
    )

    def read() -> Any:
        return (
            spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", broker.bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", size)
            .load()
            .select(
                ev["tenant"].alias("tenant"),
                F.timestamp_micros(ev["ts"]).alias("event_time"),
                ev["value"].alias("value"),
                ev["ivalue"].alias("ivalue"),
                "partition",
            )
        )

    return read


def rate_source(spark: Any, size: int) -> Any:
    from pyspark.sql import functions as F

    step = SPAN_S * 1_000_000 // size  # microseconds of event time per row
    t0 = 1_767_225_600_000_000

    def read() -> Any:
        r = spark.readStream.format("rate-micro-batch").option("rowsPerBatch", size).load()
        tenant = F.expr(f"value % {TENANTS}")
        late = F.when(tenant % 2 == 1, F.lit(60_000_000)).otherwise(F.lit(0))
        return r.select(
            F.format_string("tenant-%07d", tenant).alias("tenant"),
            F.timestamp_micros(F.lit(t0) + F.col("value") * step - late).alias("event_time"),
            ((F.col("value") * 7919) % 1000 / 7.0).alias("value"),
            ((F.col("value") * 7919) % 1000).cast("int").alias("ivalue"),
        )

    return read


def query(system: str, df: Any, work: Path, layouts: list[str] | None = None) -> Any:
    """The system's ``writeStream`` over micro-batch stream ``df`` (tidemark's: where
    each micro-batch ran and how it was read go to ``layouts``)."""
    import tidemark as tm
    from tidemark.spark import StreamProcessor

    if system == "floor":
        w = df.writeStream.foreachBatch(lambda d, _b: d.count())
    elif system == "spark":
        from pyspark.sql import functions as F

        agg = (
            df.withWatermark("event_time", "5 seconds")
            .groupBy(F.window("event_time", "10 seconds"), "tenant")
            .agg(F.count("*").alias("n"), F.sum(SUM_COLUMN[0]).alias("total"))
        )
        w = agg.writeStream.format("noop").outputMode("append")
    else:
        pipe = tm.Pipeline(
            key="tenant",
            event_time="event_time",
            watermark=tm.BoundedOutOfOrderness("5s", per="key"),
            window=tm.Tumbling("10s"),
            aggs={"n": tm.count(), "total": tm.sum(SUM_COLUMN[0])},
            late="drop",
        )
        kw: dict[str, Any] = {}
        if system == "executors":
            kw = {"on_driver": False, "read_files": False}
        elif system == "raw":
            kw = {"preaggregate": False}
        proc = StreamProcessor(
            pipe,
            str(work / "state"),
            sink=lambda d, _b: d.write.format("noop").mode("overwrite").save(),
            **kw,
        )

        def each(d: Any, b: int) -> None:
            proc(d, b)
            if layouts is not None and proc.last_progress is not None:
                p = proc.last_progress
                layouts.append(f"{p['layout']}/{p['read']}")

        w = df.writeStream.foreachBatch(each)
    return w.option("checkpointLocation", str(work / "chk"))


def _has_data(progress: dict[str, Any]) -> bool:
    """Whether a micro-batch got new input: its source's offsets moved (its
    ``numInputRows`` is 0 where tidemark read the rows from the files itself)."""
    src = progress["sources"][0]
    return bool(src["startOffset"] != src["endOffset"])


def run(w: Any, batches: int) -> list[float]:
    """Runs until ``batches`` micro-batches with rows finished; their seconds
    (``triggerExecution``)."""
    q = w.trigger(processingTime="0 seconds").start()
    try:
        while True:
            if q.exception() is not None:
                raise RuntimeError(str(q.exception()))
            done = [p for p in q.recentProgress if _has_data(p)]
            if len(done) >= batches:
                break
            time.sleep(0.02)
    finally:
        q.stop()
    done.sort(key=lambda p: p["batchId"])
    return [p["durationMs"]["triggerExecution"] / 1000 for p in done[:batches]]


def compare(
    spark: Any,
    sizes: list[int],
    batches: int,
    sources: list[str],
    systems: list[str],
    work: Path,
    bootstrap: str | None = None,
) -> dict[tuple[str, int], dict[str, float]]:
    """Runs every (source, size, system), prints the table and returns its cells:
    seconds per micro-batch by system, per (source, size)."""
    from tidemark_tools.kafka import Broker

    broker = None
    if "kafka" in sources:
        broker = Broker.connect(bootstrap) if bootstrap else Broker.start(work / "kafka")
    import re

    m = re.fullmatch(r"local\[(\d+)\]", spark.sparkContext.master)
    cores = int(m.group(1)) if m else spark.sparkContext.defaultParallelism
    cells: dict[tuple[str, int], dict[str, float]] = {}
    try:
        for size in sizes:
            stream = make_stream(size, batches + 1)
            for source in sources:
                if source == "file":
                    read = file_source(spark, stream, size, work)
                elif source == "kafka":
                    read = kafka_source(spark, stream, size, broker)
                else:
                    read = rate_source(spark, size)
                if not cells:  # JIT, Python workers: no system measured cold
                    for system in systems:
                        d = work / f"warm-up-{system}"
                        run(query(system, read(), d), 3)
                        shutil.rmtree(d, ignore_errors=True)
                cell = cells[(source, size)] = {}
                for system in systems:
                    d = work / f"{source}-{size}-{system}"
                    ran: list[str] = []
                    secs = run(query(system, read(), d, ran), batches)
                    cell[system] = statistics.median(secs[1:] if len(secs) > 1 else secs)
                    shutil.rmtree(d, ignore_errors=True)
                    print(
                        f"  {source} {size:,} {system}: "
                        + ", ".join(f"{s:.2f}" for s in secs)
                        + " s per micro-batch"
                        + (f" ({', '.join(sorted(set(ran[1:])))})" if ran else ""),
                        flush=True,
                    )
    finally:
        if broker is not None and not bootstrap:
            broker.stop()
    print(
        f"\nStreaming by source ({cores} cores): median micro-batch after the first, seconds "
        "(events/s per core); x Spark = Spark's time over this one's, x floor = this one's "
        "time over the floor's"
    )
    head = f"{'source':<6} {'rows/batch':>10} " + " ".join(f"{s:>27}" for s in systems)
    print(head)
    for (source, size), cell in cells.items():
        parts = []
        for s in systems:
            t = cell[s]
            extra = ""
            if s not in ("spark", "floor") and "spark" in cell:
                extra += f" {cell['spark'] / t:4.2f}xS"
            if s != "floor" and "floor" in cell:
                extra += f" {t / cell['floor']:4.2f}xF"
            parts.append(f"{t:6.2f} s {size / t / cores:>8,.0f}/s{extra}".rjust(27))
        print(f"{source:<6} {size:>10,} " + " ".join(parts))
    return cells


def main() -> None:
    from tidemark_tools.jars import kafka_delta_conf
    from tidemark_tools.session import local_session

    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 400_000])
    ap.add_argument("--batches", type=int, default=5, help="micro-batches per run (first: warm-up)")
    ap.add_argument("--sources", default="file,kafka,rate")
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--master", default="local[2]")
    ap.add_argument(
        "--sum",
        choices=["value", "ivalue"],
        default="value",
        help="the column summed: value (a double) or ivalue (the same numbers as an int)",
    )
    ap.add_argument("--bootstrap", help="a running Kafka broker (default: start one here)")
    ap.add_argument("--record", action="store_true", help="record a run with other settings")
    args = ap.parse_args()
    SUM_COLUMN[0] = args.sum
    sources = args.sources.split(",")
    conf = kafka_delta_conf() if "kafka" in sources else None
    spark = local_session(args.master, "tidemark-sources", 4, conf)
    work = Path(tempfile.mkdtemp(prefix="tidemark-sources-"))
    systems = args.systems.split(",")
    try:
        cells = compare(spark, args.sizes, args.batches, sources, systems, work, args.bootstrap)
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    from record import documented, record

    if documented(ap, args):
        record(
            "stream_sources",
            title="Structured Streaming by source and micro-batch size",
            what=(
                "The demo's multi-tenant stream (2,000 tenants, half of them 30-300 s late "
                "as a block, 90 s of event time per micro-batch): count and float sum per "
                "tenant in 10 s windows to Spark's `noop` sink, from one Parquet file per "
                "micro-batch (`file`), an 8-partition Kafka topic of JSON (`kafka`), and "
                "Spark's `rate-micro-batch` source (`rate`). `spark`: `withWatermark` + "
                "`groupBy(window, tenant)`; `tidemark`: `StreamProcessor` with its defaults "
                '(`late="drop"`); `executors`: the same on the executors '
                "(`on_driver=False, read_files=False`); `floor`: `foreachBatch` + `count()`; "
                "`raw`: the defaults with `preaggregate=False`. Seconds per micro-batch, the "
                f"median of {args.batches - 1} after the first; `x Spark` is Spark's time "
                "over tidemark's defaults' in the same run."
            ),
            command="python benches/stream_sources.py",
            master=args.master,
            columns=["source", "rows per batch", *systems, "x Spark"],
            rows=[
                [
                    source,
                    f"{size:,}",
                    *(f"{cell[s]:.2f} s" for s in systems),
                    f"{cell['spark'] / cell['tidemark']:.2f}x",
                ]
                for (source, size), cell in cells.items()
            ],
        )


if __name__ == "__main__":
    main()
