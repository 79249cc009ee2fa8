"""A dirty IoT topic on a real broker: tidemark as a user writes it against Spark.

Run from the repository root (after ``make build jars``)::

    python benches/dirty_stream.py                    # the full topic: 300 devices, 20 minutes
    python benches/dirty_stream.py --devices 60 --minutes 6 --widths 5 60
    python benches/dirty_stream.py --bootstrap 127.0.0.1:9092   # a broker already running

The topic (:func:`tidemark_tools.datagen.dirty_iot`): 6 partitions, devices keyed by
confluent-kafka's default partitioner, a reading a second each; partition 2 arriving
90 s late, with 9 stray readings of its devices on time; partition 5 silent after
minute 12; 0.1% hostile records of five kinds (values that are not JSON, records with
no key and no device, event times in 2300, numbers sent as strings, 1969 event times),
one of each in the first second. The records are sent live, a slice of arrival time at
a time (``--widths``: seconds per slice), and after each slice every query reads what
arrived (one micro-batch per slice). Queries, side by side on one topic:

* ``tidemark``: ``StreamProcessor`` with the pipeline as a user writes it: 10 s windows
  per device, a watermark per Kafka partition with a 10 s delay and
  ``idle_timeout="2m"``, nothing else set (no bound, no filter, partitions not declared);
* ``spark``: Spark's ``withWatermark("ts", "10 seconds")`` + ``groupBy(window, device)``;
* ``spark + filter``: the same, after the filter a user writes against bad records
  (a device, an event time between 2020 and 2030);
* ``operator``: tidemark's operator on the same slices parsed in Python (the topic's
  partitions declared: the operator has no offsets);
* ``operator, rules off``: the same with no bounds on event times and one key's rows
  enough to move a watermark (``max_ahead=None, max_behind=None, quorum=1``): what
  tidemark did before it guarded against dirty data.

Each cell: the share of the readings counted in their window over the windows every
watermark should have closed by the end (less the lagging partition's lag), and the
share of those windows exact; then spurious windows (no device's, 1969's, 2300's) and
windows emitted twice.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from record import documented, record
from tidemark.spark import StreamProcessor
from tidemark_tools import dirty
from tidemark_tools.datagen import dirty_iot
from tidemark_tools.jars import kafka_delta_conf
from tidemark_tools.kafka import Broker
from tidemark_tools.session import local_session


def spark_query(stream: Any, out: list[pa.Table], chk: Path, filtered: bool) -> Any:
    from pyspark.sql import functions as F

    if filtered:
        stream = stream.where(
            "device IS NOT NULL AND ts >= TIMESTAMP'2020-01-01' AND ts < TIMESTAMP'2030-01-01'"
        )
    counts = (
        stream.withWatermark("ts", "10 seconds")
        .groupBy(F.window("ts", f"{dirty.WINDOW_S} seconds"), "device")
        .agg(F.count("*").alias("n"))
        .select("device", F.col("window.start").alias("window_start"), "n")
    )

    def sink(df: Any, _batch_id: int) -> None:
        out.append(df.toArrow())

    return (
        counts.writeStream.outputMode("append")
        .foreachBatch(sink)
        .option("checkpointLocation", str(chk))
        .start()
    )


def tidemark_query(stream: Any, out: list[pa.Table], work: Path) -> Any:
    proc = StreamProcessor(
        dirty.user_pipeline(),
        str(work / "state"),
        sink=lambda t, _b: out.append(t),
        late_sink=lambda t, _b: None,
        error_sink=lambda t, _b: None,
        arrow_sinks=True,
    )
    return (
        stream.writeStream.foreachBatch(proc)
        .option("checkpointLocation", str(work / "chk"))
        .start()
    )


def send(broker: Broker, topic: str, batch: pa.Table) -> None:
    producer = broker.producer(**{"linger.ms": 20})
    for key, value, p in zip(
        batch["key"].to_pylist(),
        batch["value"].to_pylist(),
        batch["partition"].to_pylist(),
        strict=True,
    ):
        while True:
            try:
                producer.produce(topic, value, key, partition=p)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(60):
        raise RuntimeError("records not delivered")


def run_width(
    spark: Any, broker: Broker, records: pa.Table, readings: pa.Table, width: float, work: Path
) -> dict[str, dirty.Score]:
    topic = f"dirty-{int(time.time() * 1000)}"
    broker.create_topic(topic, 6)
    stream = dirty.kafka_source(spark, broker.bootstrap, topic)
    outs: dict[str, list[pa.Table]] = {k: [] for k in ("tidemark", "spark", "spark + filter")}
    queries = {
        "tidemark": tidemark_query(stream, outs["tidemark"], work / "tidemark"),
        "spark": spark_query(stream, outs["spark"], work / "spark", False),
        "spark + filter": spark_query(stream, outs["spark + filter"], work / "filter", True),
    }
    t0 = time.monotonic()
    try:
        for i, batch in enumerate(dirty.slices(records, width)):
            send(broker, topic, batch)
            for q in queries.values():
                q.processAllAvailable()
            if i % 20 == 0:
                print(
                    f"    {width:g} s slices: {i} done, {time.monotonic() - t0:.0f} s", flush=True
                )
    finally:
        for q in queries.values():
            q.stop()
    until = dirty.closed_by(readings, 90)
    scores = {
        name: dirty.score(pa.concat_tables(out), readings, until)
        for name, out in outs.items()
        if out
    }
    op = dirty.operator_windows(dirty.user_pipeline(partitions=6), records, width)
    scores["operator"] = dirty.score(op["windows"], readings, until)
    off = dirty.user_pipeline(partitions=6, max_ahead=None, max_behind=None, quorum=1)
    op = dirty.operator_windows(off, records, width)
    scores["operator, rules off"] = dirty.score(op["windows"], readings, until)
    return scores


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--devices", type=int, default=300)
    ap.add_argument("--minutes", type=float, default=20.0)
    ap.add_argument("--widths", type=float, nargs="+", default=[7.0, 60.0])
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--bootstrap", help="a running broker (default: start one here)")
    ap.add_argument("--record", action="store_true", help="record even with other settings")
    args = ap.parse_args()
    silent_after = args.minutes * 0.6
    records, readings = dirty_iot(
        devices=args.devices, minutes=args.minutes, silent_after_min=silent_after, seed=args.seed
    )
    bad = pc.sum(pc.not_equal(records["kind"], "reading")).as_py()
    print(f"{readings.num_rows:,} readings, {bad} hostile records", flush=True)
    work = Path(tempfile.mkdtemp(prefix="tidemark-dirty-"))
    broker = Broker.connect(args.bootstrap) if args.bootstrap else Broker.start(work / "kafka")
    spark = local_session(args.master, "tidemark-dirty", 4, kafka_delta_conf())
    results = []
    try:
        for width in args.widths:
            t = time.monotonic()
            scores = run_width(spark, broker, records, readings, width, work / f"w{width:g}")
            results.append((width, scores))
            print(f"  {width:g} s slices: {time.monotonic() - t:.0f} s", flush=True)
    finally:
        spark.stop()
        if not args.bootstrap:
            broker.stop()
        shutil.rmtree(work, ignore_errors=True)
    names = ["tidemark", "operator", "operator, rules off", "spark", "spark + filter"]
    print()
    print(
        f"Dirty IoT topic ({args.devices} devices, {args.minutes:g} minutes, {bad} hostile "
        f"records, {args.master}): readings counted / windows exact"
    )
    rows = []
    for width, scores in results:
        cells = [
            f"{s.counted_share:.1%} / {s.exact_share:.1%}"
            + (f" ({s.spurious} spurious, {s.twice} twice)" if s.spurious or s.twice else "")
            for s in (scores[n] for n in names)
        ]
        rows.append([f"{width:g} s of arrival", *cells])
        print("| " + " | ".join(rows[-1]) + " |")
    if documented(ap, args):
        record(
            "dirty_stream",
            title="Dirty data",
            what=WHAT.format(devices=args.devices, minutes=args.minutes, bad=bad),
            command="python benches/dirty_stream.py",
            master=args.master,
            columns=["micro-batches", *names],
            rows=rows,
            notes=NOTES,
            headline=[
                {
                    "benchmark": f"dirty Kafka topic, {w:g} s micro-batches (readings counted)",
                    "spark": f"{sc['spark'].counted_share:.1%}",
                    "tidemark": f"{sc['tidemark'].counted_share:.1%}",
                }
                for w, sc in results
            ],
        )


WHAT = """Whether one bad record costs one record: a dirty IoT topic on a real Kafka broker
(`tidemark_tools.datagen.dirty_iot`: 6 partitions, {devices} devices keyed by
confluent-kafka's default partitioner, a reading a second each for {minutes:g} minutes;
partition 2 arriving 90 s late with stray readings of its devices arriving on time;
partition 5 falling silent; {bad} hostile records of five kinds: values that are not
JSON, records with no key and no device, event times in 2300, numbers sent as strings,
1969 event times, one of each in the first second), sent live and read after each slice
of arrival time. Each cell: the readings counted in their window over the windows every
watermark should have closed by the end / the share of those windows exact; spurious
windows (a null key's, 1969's, 2300's) and windows out twice where there are any.
`tidemark`: `StreamProcessor` with the pipeline as a user writes it (10 s windows per
device, a watermark per Kafka partition, 10 s delay, `idle_timeout="2m"`, nothing else
set); `operator`: tidemark's operator on the same slices (partitions declared);
`operator, rules off`: the same with `max_ahead=None, max_behind=None, quorum=1`;
`spark`: `withWatermark("ts", "10 seconds")` + `groupBy(window, device)`;
`spark + filter`: after the filter a user writes (a device, an event time in 2020-2030)."""

NOTES = """Spark's one watermark jumps to 2300 with the first second's record and drops
almost every reading after it; its filter saves it from the absurd years, but its one
watermark then follows the prompt partitions and drops the lagging partition's
readings."""


if __name__ == "__main__":
    main()
