"""Where a micro-batch's time goes on the executor path (``StreamProcessor(on_driver=False,
read_files=False)``), from a source that is not a file.

Run from the repository root (after ``make build``)::

    python benches/profile_executor.py                      # 100K, 400K and 1M rows
    python benches/profile_executor.py --rows 400000 --batches 6

The source is Spark's ``rate-micro-batch`` with the events computed in the JVM (Spark
SQL expressions over the row id: a key of ``--keys`` tenants, an event time 100 us
apart, a value), as a Kafka or Delta source hands rows to a query: nothing is read from
files and no Python runs before the query. Each step adds one piece to the one before,
so the differences of their micro-batch times (Spark's ``triggerExecution``, median of
the micro-batches after the first) are what each piece costs:

1. ``trigger``: ``foreachBatch`` doing nothing: Spark's own trigger, offsets and commit;
2. ``count``: ``df.count()``: the source computes its rows;
3. ``python``: ``mapInArrow`` counting the rows: every row converted to Arrow and sent to
   a Python worker (one task per source partition);
4. ``shuffle``: the same after ``repartition(P, key)``: the rows shuffled to P tasks;
5. ``tidemark``: ``StreamProcessor`` on the executors (shuffled by key to its P state
   partitions): restore, update and write the state, emit the windows (to ``noop``);
6. ``folded``: the same with ``preaggregate=True``: Spark folds the rows per tenant and
   window before Python (the pipeline merges the folds);
7. ``spark``: Spark's own ``withWatermark`` + ``groupBy(window, key)`` (``noop`` sink).

``benches/standalone.py`` also runs ``default``: ``StreamProcessor`` with its defaults
(a micro-batch Spark estimates small enough runs in the driver).

Besides, ``rust``: the operator's own work on one micro-batch of these rows, restore +
process + snapshot of each state partition, measured in this process.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa

import tidemark as tm
from tidemark.spark import StreamProcessor
from tidemark_tools.session import local_session


def events(ids: Any, id_column: str, keys: int) -> Any:
    """The events of a DataFrame of ids, computed by the JVM: a tenant of ``keys``, an
    event time 100 us per id, an amount."""
    return ids.selectExpr(
        f"concat('t', pmod(xxhash64({id_column}, 1), {keys})) AS tenant",
        f"timestamp_micros(1767225600000000 + {id_column} * 100) AS ts",
        f"CAST(pmod(xxhash64({id_column}, 2), 1000) AS INT) AS amount",
    )


def source(spark: Any, rows: int, keys: int, parts: int) -> Any:
    """The events, computed by the JVM from the rate source's ids."""
    ids = (
        spark.readStream.format("rate-micro-batch")
        .option("rowsPerBatch", rows)
        .option("numPartitions", parts)
        .load()
    )
    return events(ids, "value", keys)


def pipeline() -> tm.Pipeline:
    return tm.Pipeline(
        key="tenant",
        event_time="ts",
        window=tm.Tumbling("10s"),
        aggs={"n": tm.count(), "total": tm.sum("amount")},
        watermark=tm.BoundedOutOfOrderness("5s", per="key"),
    )


def count_rows(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    n = sum(b.num_rows for b in batches)
    yield pa.record_batch({"n": pa.array([n], pa.int64())})


def noop(df: Any, batch_id: int) -> None:
    df.write.format("noop").mode("overwrite").save()


def step_writer(spark: Any, step: str, rows: int, keys: int, parts: int, chk: Path) -> Any:
    df = source(spark, rows, keys, parts)
    if step == "spark":
        from pyspark.sql import functions as F

        agg = (
            df.withWatermark("ts", "5 seconds")
            .groupBy(F.window("ts", "10 seconds"), "tenant")
            .agg(F.count("*").alias("n"), F.sum("amount").alias("total"))
        )
        return agg.writeStream.outputMode("append").format("noop")
    if step == "default":
        proc = StreamProcessor(pipeline(), str(chk / "state"), parts, sink=noop)
        return df.writeStream.foreachBatch(proc)
    if step in ("tidemark", "folded"):
        proc = StreamProcessor(
            pipeline(),
            str(chk / "state"),
            parts,
            sink=noop,
            on_driver=False,
            read_files=False,
            preaggregate=step == "folded",
        )
        return df.writeStream.foreachBatch(proc)

    def each(batch: Any, batch_id: int) -> None:
        if step == "count":
            batch.count()
        elif step == "python":
            batch.mapInArrow(count_rows, "n long").collect()
        elif step == "shuffle":
            batch.repartition(parts, "tenant").mapInArrow(count_rows, "n long").collect()

    return df.writeStream.foreachBatch(each)


def run(spark: Any, step: str, rows: int, keys: int, parts: int, batches: int, work: Path) -> float:
    chk = work / f"{step}-{rows}"
    query = (
        step_writer(spark, step, rows, keys, parts, chk)
        .option("checkpointLocation", str(chk / "q"))
        .trigger(processingTime="0 seconds")
        .start()
    )
    try:
        while len(query.recentProgress) < batches:
            if query.exception() is not None:
                raise RuntimeError(str(query.exception()))
            time.sleep(0.05)
    finally:
        query.stop()
    progress = sorted(query.recentProgress, key=lambda p: p["batchId"])[:batches]
    secs = [p["durationMs"]["triggerExecution"] / 1000 for p in progress]
    shutil.rmtree(chk, ignore_errors=True)
    return statistics.median(secs[1:])


def rust_seconds(spark: Any, rows: int, keys: int, parts: int) -> float:
    """restore + process + snapshot of every state partition for one micro-batch of
    these rows (the second micro-batch: the state holds the first's keys)."""
    df = events(spark.range(0, 2 * rows, 1, 2), "id", keys).toArrow()
    pipe = pipeline()
    router = tm.HashRouter(parts, ["tenant"], hash="spark")
    first = [pa.Table.from_batches([b]) for b in router.route(df.slice(0, rows))]
    second = [pa.Table.from_batches([b]) for b in router.route(df.slice(rows, rows))]
    states = []
    for shard in first:
        op = pipe.operator(ordered=False)
        op.process(shard)
        states.append(op.snapshot())
    t = time.perf_counter()
    for state, shard in zip(states, second, strict=True):
        op = pipe.operator(state=state, ordered=False)
        op.process(shard)
        op.snapshot()
    return time.perf_counter() - t


STEPS = ("trigger", "count", "python", "shuffle", "tidemark", "folded", "spark")


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rows", type=int, nargs="+", default=[100_000, 400_000, 1_000_000])
    ap.add_argument("--keys", type=int, default=2_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--batches", type=int, default=5)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--steps", nargs="+", choices=STEPS, default=list(STEPS))
    ap.add_argument("--record", action="store_true", help="record a run with other settings")
    args = ap.parse_args()
    spark = local_session(args.master, app_name="tidemark-profile", shuffle_partitions=4)
    spark.sparkContext.setLogLevel("FATAL")  # a stopped query aborts its last write
    work = Path(tempfile.mkdtemp(prefix="tidemark-profile-"))
    table: list[list[str]] = []
    try:
        steps = [s for s in STEPS if s in args.steps]
        print(
            f"{'rows':>10} "
            + " ".join(f"{s:>9}" for s in (*steps, "rust"))
            + "  (s per micro-batch)"
        )
        for rows in args.rows:
            got = {
                s: run(spark, s, rows, args.keys, args.partitions, args.batches, work)
                for s in steps
            }
            got["rust"] = rust_seconds(spark, rows, args.keys, args.partitions)
            print(
                f"{rows:>10,} " + " ".join(f"{got[s]:9.3f}" for s in (*steps, "rust")), flush=True
            )
            table.append([f"{rows:,}", *(f"{got[s]:.3f}" for s in (*steps, "rust"))])
            if len(steps) < len(STEPS):
                continue  # the breakdown needs every step
            t = got
            parts = {
                "trigger": t["trigger"],
                "source": t["count"] - t["trigger"],
                "into Python": t["python"] - t["count"],
                "shuffle": t["shuffle"] - t["python"],
                "tidemark beyond the shuffle": t["tidemark"] - t["shuffle"],
                "of which Rust": t["rust"],
            }
            print(f"{'':>10} " + ", ".join(f"{k} {v:.3f}" for k, v in parts.items()))
            print(
                f"{'':>10} time over Spark's: tidemark {t['tidemark'] / t['spark']:.2f}, "
                f"folded {t['folded'] / t['spark']:.2f}; over the count floor: tidemark "
                f"{t['tidemark'] / t['count']:.2f}, folded {t['folded'] / t['count']:.2f}",
                flush=True,
            )
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    from record import documented, record

    if documented(ap, args):
        record(
            "profile_executor",
            title="Where an executor micro-batch's time goes",
            what=(
                "`StreamProcessor` on the executors (`on_driver=False, read_files=False`) "
                f"over Spark's `rate-micro-batch` source ({args.keys:,} tenants, "
                f"{args.partitions} state partitions), each step adding one piece to the one "
                "before: `trigger` (`foreachBatch` doing nothing), `count` (the source "
                "computes its rows), `python` (every row to a Python worker through "
                "`mapInArrow`), `shuffle` (the same after `repartition` by key), `tidemark` "
                "(restore, update, write the state, emit the windows), `folded` (the same "
                "with `preaggregate=True`), `spark` (Spark's own `withWatermark` + "
                "`groupBy(window, key)`); `rust`: the operator's own restore, process and "
                "snapshot of the same rows, in one process. Seconds per micro-batch, the "
                f"median of {args.batches - 1} after the first."
            ),
            command="python benches/profile_executor.py",
            master=args.master,
            columns=["rows per batch", *(s for s in (*STEPS, "rust"))],
            rows=table,
        )


if __name__ == "__main__":
    main()
