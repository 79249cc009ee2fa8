"""Kafka -> tidemark -> Delta Lake against Kafka -> Spark native -> Delta Lake, in one run.

Run from the repository root (after ``make build jars``)::

    python benches/kafka_delta.py                          # 10K, 100K, 1M per micro-batch
    python benches/kafka_delta.py --sizes 10000 --batches 3
    python benches/kafka_delta.py --bootstrap 127.0.0.1:9092   # a broker already running

With no ``--bootstrap`` it starts one Apache Kafka broker here (``tidemark_tools.kafka``)
and stops it at the end. A topic of 8 partitions holds JSON readings (1,000 devices, keys
hashed to partitions by the producer, 10,000 readings a second of event time). Each
system reads it from the start with ``maxOffsetsPerTrigger`` = the micro-batch size, on
the same ``local[N]`` session, one after the other:

* ``floor``: ``foreachBatch`` + ``count()``: what reading and parsing a micro-batch costs;
* ``tidemark``: ``StreamProcessor`` in ``foreachBatch`` with its defaults, a watermark
  per Kafka partition, 10 s windows per device (count, sum) into a Delta table with
  ``delta_sink``, late rows dropped (``late="drop"``) as Spark's query drops them;
* ``spark``: Spark's own streaming aggregation of the same windows (``withWatermark`` +
  ``groupBy(window, device)``, append mode) into a Delta table.

Each cell: the median of Spark's ``triggerExecution`` time of the micro-batches after the
first (seconds), and events per second (the micro-batch size over that median); the
ratio column is tidemark's time over Spark's, both measured in this run.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

# A script's own directory is on sys.path: benches/stream_sources.py.
from stream_sources import run
from tidemark_tools.jars import kafka_delta_conf
from tidemark_tools.kafka import Broker
from tidemark_tools.session import local_session

EVENT = "device STRING, ts LONG, value LONG"
T0 = 1_767_225_600_000
DEVICES = 1_000
PER_SECOND = 10_000


def produce(broker: Broker, topic: str, n: int) -> None:
    """``n`` readings, in event-time order, keyed by device (one producer, no callback
    per record: the broker's acknowledgements are awaited at the end)."""
    producer = broker.producer(**{"linger.ms": 50, "batch.size": 1_000_000})
    step = 1000 / PER_SECOND
    for i in range(n):
        device = f"d{i % DEVICES:04d}"
        ts = T0 + int(i * step)
        value = f'{{"device": "{device}", "ts": {ts}, "value": {i % 100}}}'
        while True:
            try:
                producer.produce(topic, value.encode(), device.encode(), timestamp=ts)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 50_000 == 0:
            producer.poll(0)
    if producer.flush(120):
        raise RuntimeError("records not delivered")


def stream(spark: Any, bootstrap: str, topic: str, per_batch: int) -> Any:
    from pyspark.sql import functions as F

    ev = F.from_json(F.col("value").cast("string"), EVENT)
    return (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", per_batch)
        .load()
        .select(
            ev["device"].alias("device"),
            F.timestamp_millis(ev["ts"]).alias("ts"),
            ev["value"].alias("value"),
            "partition",
            "offset",
        )
    )


def writer(system: str, df: Any, work: Path) -> Any:
    """The system's ``writeStream``, its checkpoint and tables under ``work``."""
    import tidemark as tm
    from tidemark.spark import StreamProcessor, delta_sink

    if system == "floor":
        w = df.writeStream.foreachBatch(lambda d, _b: d.count())
    elif system == "tidemark":
        pipe = tm.Pipeline(
            key="device",
            event_time="ts",
            watermark=tm.BoundedOutOfOrderness("5s", per="partition"),
            window=tm.Tumbling("10s"),
            aggs={"n": tm.count(), "total": tm.sum("value")},
            late="drop",  # as Spark's query drops them: both write the windows table alone
        )
        proc = StreamProcessor(pipe, str(work / "state"), sink=delta_sink(work / "windows"))
        w = df.writeStream.foreachBatch(proc)
    else:
        from pyspark.sql import functions as F

        agg = (
            df.withWatermark("ts", "5 seconds")
            .groupBy(F.window("ts", "10 seconds"), "device")
            .agg(F.count("*").alias("n"), F.sum("value").alias("total"))
        )
        w = agg.writeStream.format("delta").outputMode("append").option("path", str(work / "out"))
    return w.option("checkpointLocation", str(work / "chk"))


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    ap.add_argument("--batches", type=int, default=4, help="micro-batches per run (first: warm-up)")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--bootstrap", help="a running broker (default: start one here)")
    ap.add_argument("--systems", default="floor,tidemark,spark")
    ap.add_argument("--record", action="store_true", help="record a run with other settings")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="tidemark-kafka-delta-"))
    broker = Broker.connect(args.bootstrap) if args.bootstrap else Broker.start(work / "kafka")
    spark = local_session(args.master, "tidemark-kafka-delta", 4, kafka_delta_conf())
    systems = args.systems.split(",")
    rows = []
    try:
        topic = f"bench-{int(time.time())}"
        broker.create_topic(topic, 8)
        # One micro-batch more than measured: the one that reads to the topic's end waits.
        total = max(args.sizes) * (args.batches + 1)
        t = time.monotonic()
        produce(broker, topic, total)
        print(f"produced {total:,} records in {time.monotonic() - t:.1f} s", flush=True)
        for size in args.sizes:
            cell: dict[str, float] = {}
            for system in systems:
                d = work / f"{system}-{size}"
                secs = run(
                    writer(system, stream(spark, broker.bootstrap, topic, size), d), args.batches
                )
                cell[system] = statistics.median(secs[1:] if len(secs) > 1 else secs)
                shutil.rmtree(d, ignore_errors=True)
                print(
                    f"  {size:,} {system}: {', '.join(f'{s:.2f}' for s in secs)} s per micro-batch",
                    flush=True,
                )
            rows.append((size, cell))
    finally:
        spark.stop()
        if not args.bootstrap:
            broker.stop()
        shutil.rmtree(work, ignore_errors=True)
    print()
    print(
        f"Kafka -> Delta Lake ({args.master}), median of micro-batches 2-{args.batches}: "
        "seconds per micro-batch (events/s)"
    )
    print(f"{'records/batch':>13} " + " ".join(f"{s:>22}" for s in systems) + "  tidemark/spark")
    for size, cell in rows:
        line = f"{size:>13,} " + " ".join(
            f"{cell[s]:>8.2f} s ({size / cell[s]:>9,.0f}/s)" for s in systems
        )
        if "tidemark" in cell and "spark" in cell:
            line += f"  {cell['tidemark'] / cell['spark']:>14.2f}"
        print(line)
    from record import documented, record

    if documented(ap, args):
        record(
            "kafka_delta",
            title="Kafka -> tidemark -> Delta against Kafka -> Spark -> Delta",
            what=(
                "JSON readings of 1,000 devices on an 8-partition topic of a broker started "
                "here, read with `maxOffsetsPerTrigger` = the micro-batch size: `floor` "
                "(`foreachBatch` + `count()`), `tidemark` (`StreamProcessor` with its defaults, "
                "a watermark per Kafka partition, 10 s windows per device into a Delta table "
                'with `delta_sink`, `late="drop"`), `spark` (Spark\'s own '
                "`withWatermark` + `groupBy(window, device)` into a Delta table). Seconds per "
                f"micro-batch, the median of {args.batches - 1} after the first; the ratio is "
                "tidemark's time over Spark's in the same run."
            ),
            command="python benches/kafka_delta.py",
            master=args.master,
            columns=["records per batch", *systems, "tidemark / spark"],
            rows=[
                [
                    f"{size:,}",
                    *(f"{cell[s]:.2f} s" for s in systems),
                    f"{cell['tidemark'] / cell['spark']:.2f}x",
                ]
                for size, cell in rows
            ],
        )


if __name__ == "__main__":
    main()
