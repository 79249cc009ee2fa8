"""Nexmark on Spark: Spark native Structured Streaming against tidemark, in one run.

Run from the repository root (after ``make build``)::

    python benches/nexmark/run.py                                  # the table below
    python benches/nexmark/run.py --events 100000 --batches 4 --queries q5,q11
    python benches/nexmark/run.py --check                           # equality only, small

For each query (see ``queries.py``), source and micro-batch size it runs, one after the
other on the same ``local[N]`` session:

* ``spark``: the query as Spark's own streaming aggregation (``withWatermark`` + window,
  append mode, ``noop`` sink);
* ``tidemark``: ``StreamProcessor`` in ``foreachBatch`` with its defaults (the sink
  writes the windows to ``noop``): Spark folds a micro-batch too large for one task per
  key and window pane before Python (q5, q7, q12; q11's sessions do not fold);
* ``executors``: the same with ``on_driver=False, read_files=False``: every micro-batch
  runs in Spark tasks, its rows fetched through Spark (the cluster path);
* ``raw``: the executors path with ``preaggregate=False``: every row goes into Python
  (the default before the fold was);
* ``floor``: q0, ``foreachBatch`` counting the rows: the cost of reading a micro-batch.

Sources: ``files``, one Parquet file per micro-batch (``maxFilesPerTrigger=1``),
``rate``, Spark's ``rate-micro-batch`` source (``rowsPerBatch`` events) whose ids the
generator turns into bids in a ``mapInArrow``: a source that is not a file, and ``kafka``:
the bids as JSON records on a topic of a broker started here, read by Spark's Kafka
source (``make jars`` first). All three by default (``--sources``).

Each cell is events per second per core: events in a micro-batch (persons, auctions and
bids, as Nexmark counts them; the queries read the bids, 46 of every 50) over the median
of Spark's ``triggerExecution`` time of the micro-batches after the first, divided by the
session's cores (on a cluster: its executors' cores; ``--master standalone`` starts one
here). No system is measured cold: each runs each query once per source, unmeasured, at
the first size before its measured runs (the JVM's JIT, Spark's generated code, the
Python workers warm up over the first few micro-batches, and the systems run in turn).
Flink's published figures (Nexmark reference run, Flink 1.13, 8 cores per worker)
stand beside them for scale: another engine on another machine.

``--check`` runs every event-time query on a small stream through Spark native and
tidemark, collecting their outputs, and asserts that both emitted the same rows and that
those are the exact answer for every window that closed (q12's processing-time windows
differ run to run: its per-bidder totals are checked against the bids instead).
"""

from __future__ import annotations

import argparse
import contextlib
import re
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).parent))

import generator as gen
import queries as qs

from tidemark.spark import StreamProcessor
from tidemark_tools.session import local_session

DELAY = "0 seconds"  # the generator's events arrive in event-time order


def bid_schema() -> Any:
    from pyspark.sql.types import LongType, StructField, StructType, TimestampType

    return StructType(
        [
            StructField("auction", LongType()),
            StructField("bidder", LongType()),
            StructField("price", LongType()),
            StructField("date_time", TimestampType()),
        ]
    )


class FileSource:
    """One Parquet file of bids per micro-batch."""

    name = "files"

    def __init__(self, work: Path, cfg: gen.Config, events: int, batches: int) -> None:
        self.dir = work / f"bids-{events}-{batches}"
        if not self.dir.exists():
            self.dir.mkdir(parents=True)
            for b, table in enumerate(gen.micro_batches(cfg, events, batches)):
                pq.write_table(table, self.dir / f"batch-{b:05d}.parquet")
        self.batches = batches

    def stream(self, spark: Any) -> Any:
        return (
            spark.readStream.schema(bid_schema())
            .option("maxFilesPerTrigger", 1)
            .parquet(str(self.dir))
        )

    def start(self, writer: Any) -> Any:
        return writer.trigger(availableNow=True).start()


class RateSource:
    """Spark's ``rate-micro-batch`` source: ``events`` ids per micro-batch, turned into
    bids by the generator in a ``mapInArrow``."""

    name = "rate"

    def __init__(self, cfg: gen.Config, events: int, batches: int, cores: int) -> None:
        self.cfg, self.events, self.batches, self.cores = cfg, events, batches, cores

    def stream(self, spark: Any) -> Any:
        cfg = self.cfg

        def bids(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            for b in batches:
                ids = b.column(0).to_numpy(zero_copy_only=False).astype(np.int64)
                keep = ids % gen.TOTAL_PROPORTION >= gen.PERSON_PROPORTION + gen.AUCTION_PROPORTION
                yield from gen.bids_of(cfg, ids[keep]).to_batches()

        src = (
            spark.readStream.format("rate-micro-batch")
            .option("rowsPerBatch", self.events)
            .option("numPartitions", self.cores)
            .load()
        )
        return src.select("value").mapInArrow(bids, bid_schema())

    def start(self, writer: Any) -> Any:
        return writer.trigger(processingTime="0 seconds").start()


class KafkaSource:
    """Bids as JSON records on a Kafka topic of 8 partitions (keyed by auction), read by
    Spark's Kafka source, ``maxOffsetsPerTrigger`` the bids of a micro-batch: the path a
    Kafka user runs, every row through Spark. The topic holds one micro-batch more than
    is measured: the micro-batch that reads a partition to its end waited seconds there
    (5 s in a run of three), for every system alike."""

    name = "kafka"

    def __init__(self, broker: Any, cfg: gen.Config, events: int, batches: int) -> None:
        import json
        import uuid

        self.broker, self.batches = broker, batches
        self.topic = f"nexmark-{events}-{uuid.uuid4().hex[:8]}"
        broker.create_topic(self.topic, 8)
        tables = list(gen.micro_batches(cfg, events, batches + 1))
        self.per_batch = max(t.num_rows for t in tables)

        def records() -> Iterator[tuple[bytes, bytes, int]]:
            for t in tables:
                ms = pc.cast(t["date_time"], pa.int64()).to_numpy() // 1000
                cols = [t[c].to_pylist() for c in ("auction", "bidder", "price")]
                for a, b, p, d in zip(*cols, ms.tolist(), strict=True):
                    value = json.dumps({"auction": a, "bidder": b, "price": p, "date_time": d})
                    yield str(a).encode(), value.encode(), d

        broker.produce(self.topic, records())

    def stream(self, spark: Any) -> Any:
        from pyspark.sql import functions as F

        schema = "auction LONG, bidder LONG, price LONG, date_time LONG"
        bid = F.from_json(F.col("value").cast("string"), schema)
        return (
            spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", self.broker.bootstrap)
            .option("subscribe", self.topic)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", self.per_batch)
            .load()
            .select(
                bid["auction"].alias("auction"),
                bid["bidder"].alias("bidder"),
                bid["price"].alias("price"),
                F.timestamp_micros(bid["date_time"] * 1000).alias("date_time"),
            )
        )

    def start(self, writer: Any) -> Any:
        return writer.trigger(processingTime="0 seconds").start()


def _batch_seconds(query: Any) -> list[float]:
    """``triggerExecution`` of each micro-batch so far, in batch order. (Not filtered on
    ``numInputRows``: a micro-batch tidemark reads from its files counts 0 rows in
    Spark's metrics. The micro-batch Spark adds after the input for its watermark is
    cut off by the caller.)"""
    progress = sorted(query.recentProgress, key=lambda p: p["batchId"])
    return [p["durationMs"]["triggerExecution"] / 1000 for p in progress]


def run_stream(source: Any, writer: Any, batches: int) -> list[float]:
    """Starts the query, waits for ``batches`` micro-batches with rows (a rate source
    never ends: it is stopped then) and returns their ``triggerExecution`` seconds."""
    query = source.start(writer)
    try:
        if isinstance(source, FileSource):
            query.awaitTermination()
        else:
            while len(_batch_seconds(query)) < batches:
                if query.exception() is not None:
                    raise RuntimeError(str(query.exception()))
                time.sleep(0.05)
    finally:
        query.stop()
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    return _batch_seconds(query)[:batches]


def noop(df: Any, batch_id: int) -> None:
    df.write.format("noop").mode("overwrite").save()


def system_writer(
    spark: Any,
    system: str,
    query: str,
    source: Any,
    chk: Path,
    partitions: int,
    sink: Callable[[Any, int], None] | None = None,
) -> tuple[Any, Callable[[], None]]:
    """The ``writeStream`` of one system on one query, and what to call after the run
    (a tidemark flush where its outputs are collected)."""
    bids = source.stream(spark)
    if system == "floor":
        return bids.writeStream.foreachBatch(lambda df, b: df.count()).option(
            "checkpointLocation", str(chk / "q")
        ), lambda: None
    if system == "spark":
        out = qs.spark_native(query, bids, DELAY).writeStream.outputMode("append")
        out = out.option("checkpointLocation", str(chk / "q"))
        if sink is None:
            return out.format("noop"), lambda: None
        return out.foreachBatch(sink), lambda: None
    pipe = qs.pipeline(query, DELAY.replace(" seconds", "s"))
    kwargs: dict[str, Any] = {}
    if system == "executors":
        kwargs = {"on_driver": False, "read_files": False}
    if system == "raw":
        kwargs = {"on_driver": False, "read_files": False, "preaggregate": False}
    proc = StreamProcessor(
        pipe,
        str(chk / "state"),
        num_partitions=partitions if pipe.key else 1,
        sink=sink or noop,
        **kwargs,
    )
    stream = qs.stamp(query, bids)
    writer = stream.writeStream.foreachBatch(proc).option("checkpointLocation", str(chk / "q"))
    return writer, lambda: None


def run_once(
    spark: Any, system: str, query: str, source: Any, partitions: int, batches: int, chk: Path
) -> list[float]:
    """One system's run of ``query`` over ``source`` (see :func:`run_stream`), its
    checkpoint and state under ``chk`` removed after it."""
    writer, _ = system_writer(spark, system, query, source, chk, partitions)
    try:
        return run_stream(source, writer, batches)
    finally:
        shutil.rmtree(chk, ignore_errors=True)


def measure(args: argparse.Namespace, spark: Any, work: Path, cores: int) -> list[list[str]]:
    """Runs every (size, source, query, system), prints the table and returns its rows
    (events per second per core)."""
    cfg = gen.Config(seed=args.seed, rate=args.rate, late_fraction=args.late_fraction)
    queries = [q for q in args.queries.split(",") if q]
    header = (
        f"{'query':<5} {'source':<6} {'events/batch':>12} {'spark':>10} {'tidemark':>10} "
        f"{'executors':>10} {'raw':>10} {'floor':>10} {'flink':>8}   (events/s per core)"
    )
    rows = []
    table: list[list[str]] = []
    warm: set[tuple[str, str, str]] = set()  # (query, source, system) run once unmeasured
    for events in args.events:
        for source_name in args.sources.split(","):
            for query in queries:
                source: Any
                if source_name == "files":
                    source = FileSource(work, cfg, events, args.batches)
                elif source_name == "kafka":
                    source = KafkaSource(args.broker, cfg, events, args.batches)
                else:
                    source = RateSource(cfg, events, args.batches, cores)
                systems = ["floor"] if query == "q0" else ["spark", "tidemark", "executors", "raw"]
                cell: dict[str, float] = {}
                for system in systems:
                    run = (spark, system, query, source, args.partitions, args.batches)
                    if (query, source_name, system) not in warm:
                        warm.add((query, source_name, system))
                        run_once(*run, work / f"warm-up-{query}-{source_name}-{system}")
                    secs = run_once(*run, work / f"chk-{query}-{source_name}-{events}-{system}")
                    steady = statistics.median(secs[1:] if len(secs) > 1 else secs)
                    cell[system] = events / steady / cores
                    print(
                        f"  {query} {source_name} {events:,} {system}: "
                        f"{', '.join(f'{s:.2f}' for s in secs)} s per micro-batch",
                        flush=True,
                    )

                def fmt(system: str, cell: dict[str, float] = cell) -> str:
                    return f"{cell[system]:10,.0f}" if system in cell else f"{'':>10}"

                flink = qs.FLINK_PER_CORE.get(query)
                table.append(
                    [
                        query,
                        source_name,
                        f"{events:,}",
                        *(
                            f"{cell[s]:,.0f}" if s in cell else ""
                            for s in ("spark", "tidemark", "executors", "raw", "floor")
                        ),
                        f"{flink:,}" if flink else "",
                    ]
                )
                rows.append(
                    f"{query:<5} {source_name:<6} {events:>12,} {fmt('spark')} "
                    f"{fmt('tidemark')} {fmt('executors')} {fmt('raw')} {fmt('floor')} "
                    f"{(f'{flink:,}' if flink else ''):>8}"
                )
    print()
    print(f"Nexmark on Spark ({args.master}, {cores} cores), {args.batches} micro-batches per run")
    print(header)
    for r in rows:
        print(r)
    return table


def check_query(
    spark: Any, work: Path, query: str, cfg: gen.Config, events: int, batches: int, partitions: int
) -> int:
    """Runs ``query`` through Spark native and tidemark on ``batches`` micro-batches of
    ``events`` events, collecting both outputs, and asserts they are the same rows: the
    exact answer for every window that closed (q12, whose windows follow the clock:
    each system's per-bidder totals within the bids). Returns tidemark's row count."""
    source = FileSource(work, cfg, events, batches)
    everything = pa.concat_tables(gen.micro_batches(cfg, events, batches))
    got: dict[str, list[pa.Table]] = {"spark": [], "tidemark": []}
    for system, into in got.items():

        def collect(df: Any, b: int, into: list[pa.Table] = into) -> None:
            into.append(df.toArrow())

        chk = work / f"check-{query}-{system}"
        writer, _ = system_writer(spark, system, query, source, chk, partitions, collect)
        run_stream(source, writer, batches)
    out = {s: qs.normalized(query, pa.concat_tables(t)) if t else [] for s, t in got.items()}
    spark_rows, tm_rows = out["spark"], out["tidemark"]
    if query == "q12":
        # Processing time differs run to run: each system's windows hold at most each
        # bidder's bids.
        values, counts = np.unique(everything.column("bidder").to_numpy(), return_counts=True)
        have = dict(zip(values.tolist(), counts.tolist(), strict=True))
        for rows in (spark_rows, tm_rows):
            per_bidder: dict[int, int] = {}
            for r in rows:
                per_bidder[r[0]] = per_bidder.get(r[0], 0) + r[-1]
            assert all(n <= have[b] for b, n in per_bidder.items()), query
        return len(tm_rows)
    # Spark runs one more micro-batch after the last one with rows (no rows: its
    # watermark closes windows); foreachBatch, which holds no Spark state, gets none.
    # Both are compared on the windows both could close.
    last = min(max((r[-2] for r in rows), default=0) for rows in (spark_rows, tm_rows))
    spark_rows, tm_rows = qs.closed_before(spark_rows, last), qs.closed_before(tm_rows, last)
    assert spark_rows == tm_rows, (
        f"{query}: Spark emitted {len(spark_rows)} rows, tidemark {len(tm_rows)}"
    )
    want = qs.exact(query, everything)
    assert want is not None
    assert tm_rows == qs.closed_before(want, last), f"{query}: not the exact answer"
    return len(tm_rows)


def check(args: argparse.Namespace, spark: Any, work: Path) -> None:
    """Every query on a small stream: Spark native and tidemark emit the same rows."""
    # 1,000 events per second of event time: 20 s per micro-batch, so windows close.
    cfg = gen.Config(seed=args.seed, rate=1_000)
    for query in [q for q in args.queries.split(",") if q not in ("", "q0")]:
        n = check_query(spark, work, query, cfg, 20_000, 4, args.partitions)
        print(f"  {query}: Spark native and tidemark emitted the same {n:,} rows")


def executor_cores(spark: Any) -> int:
    """The cores of the session's executors (a cluster's master: the driver's own do
    not run tasks), once the first has registered."""
    store = spark.sparkContext._jsc.sc().statusStore()
    for _ in range(600):
        seq = store.executorList(True)
        found = [seq.apply(i) for i in range(seq.size())]
        cores = sum(int(e.totalCores()) for e in found if e.id() != "driver")
        if cores:
            return cores
        time.sleep(0.2)
    raise RuntimeError("no executor registered")


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--events", type=int, nargs="+", default=[100_000, 1_000_000])
    ap.add_argument("--batches", type=int, default=4)
    ap.add_argument("--queries", default="q0,q5,q7,q11,q12")
    ap.add_argument(
        "--sources",
        default="files,rate,kafka",
        help="files, rate, kafka (a broker started here; needs `make jars`)",
    )
    ap.add_argument("--rate", type=int, default=10_000, help="events per second of event time")
    ap.add_argument("--late-fraction", type=float, default=0.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--partitions", type=int, default=4, help="state and shuffle partitions")
    ap.add_argument(
        "--master",
        default="local[2]",
        help="Spark master; 'standalone': a master and two one-core workers started here "
        "(benches/standalone.py)",
    )
    ap.add_argument("--check", action="store_true", help="check equality on a small stream")
    ap.add_argument("--record", action="store_true", help="record a run with other settings")
    args = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).parent.parent))
    from record import documented, record

    documented_run = documented(ap, args)
    master = args.master
    with contextlib.ExitStack() as stack:
        if args.master == "standalone":
            import standalone

            args.master = stack.enter_context(standalone.cluster(workers=2, cores=1)).url
        table = run_all(args)
    if table and documented_run:
        record(
            "nexmark_run",
            title="Nexmark q5, q7, q11, q12 against Spark",
            what=(
                "Nexmark's bids (`benches/nexmark/generator.py`, 10,000 events a second of "
                "event time) from one Parquet file per micro-batch (`files`), Spark's "
                "`rate-micro-batch` source turned into bids (`rate`) and a Kafka topic of a "
                "broker started here (`kafka`): Spark's own streaming aggregation of each "
                "query (`spark`), `StreamProcessor` with its defaults (`tidemark`), on the "
                "executors (`executors`: `on_driver=False, read_files=False`), on the "
                "executors without Spark's fold (`raw`), and q0 counting the rows (`floor`). "
                "Events per second per core: the events of a micro-batch over the median "
                f"of {args.batches - 1} micro-batch times after the first, over the cores; "
                "Flink's published figures (its reference run, Flink 1.13, 8 cores per "
                "worker) beside them for scale."
            ),
            command="python benches/nexmark/run.py",
            master=master,
            columns=[
                "query",
                "source",
                "events per batch",
                "spark",
                "tidemark",
                "executors",
                "raw",
                "floor",
                "flink (published)",
            ],
            rows=table,
        )


def run_all(args: argparse.Namespace) -> list[list[str]]:
    """The table of :func:`measure` (empty with ``--check``)."""
    extra = None
    if "kafka" in args.sources.split(","):
        from tidemark_tools.jars import kafka_delta_conf
        from tidemark_tools.kafka import Broker

        extra = kafka_delta_conf()
        args.broker = Broker.start(Path(tempfile.mkdtemp(prefix="tidemark-nexmark-kafka-")))
    try:
        return _run_all(args, extra)
    finally:
        if extra is not None:
            args.broker.stop()


def _run_all(args: argparse.Namespace, extra: dict[str, str] | None) -> list[list[str]]:
    spark = local_session(
        args.master,
        app_name="tidemark-nexmark",
        shuffle_partitions=args.partitions,
        extra_conf=extra,
    )
    spark.sparkContext.setLogLevel("FATAL")  # a stopped rate query aborts its last write
    # Workers unpickle the generator by value (this folder is not on their path).
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(gen)
    found = re.fullmatch(r"local\[(\d+)\]", args.master)
    cores = int(found.group(1)) if found else executor_cores(spark)
    work = Path(tempfile.mkdtemp(prefix="tidemark-nexmark-"))
    try:
        if args.check:
            check(args, spark, work)
            return []
        return measure(args, spark, work, cores)
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
