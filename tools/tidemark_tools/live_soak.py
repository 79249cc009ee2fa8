"""A soak on a live Kafka topic through Spark: a Structured Streaming query with
``StreamProcessor`` reads a topic that a producer fills in real time for a while, keys
churning (each reports a few times, then never again) and one partition going silent
and coming back every few minutes. As it runs, the driver's memory (its Python process
and its JVM), Spark's Python workers' memory, the state's size and each micro-batch's
time are sampled; at the end every window is checked against an oracle computed from
the records produced.

    tidemark live-soak --minutes 30 --plot soak.png      # the long run (its own broker)

The stream: ``rate`` records a second over ``partitions`` partitions, event time the
wall clock. Every second ``rate * every_s / lifetime_s`` keys appear; each sends a record
every ``every_s`` seconds for ``lifetime_s`` seconds (a million distinct keys in half an
hour at the defaults). The last partition sends nothing for ``idle_for_s`` seconds of
every ``idle_every_s``. The pipeline: a watermark per Kafka partition (2 s delay, idle
after 20 s), 10 s windows per key (count), ``state_ttl`` bounding the keys held. A
window's records all arrive before its partition's watermark passes it, so every
window must come out exactly once with every record: none late, none in error.

The verdict (:attr:`LiveSoakReport.flat`): after the first fifth of the run (warm-up),
the median of each memory series and of the state's size over the last third is at
most 15% (and 32 MiB for memory) above its median over the middle third, and so is the
median micro-batch time (50%: a micro-batch's time varies more).
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

__all__ = ["LiveSoakReport", "Stream", "live_soak"]

BASE_MS = 1_767_225_600_000


@dataclass(frozen=True)
class Stream:
    """The records of a live soak, second by second of its run."""

    rate: int = 3_000
    partitions: int = 4
    lifetime_s: int = 20
    every_s: int = 4
    idle_every_s: int = 240
    idle_for_s: int = 60

    @property
    def new_keys_per_s(self) -> int:
        return max(1, self.rate * self.every_s // self.lifetime_s)

    def second(self, s: int, start_ms: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Second ``s``'s records: key ids, event times (ms), partitions."""
        new = self.new_keys_per_s
        ids = np.arange(max(0, (s - self.lifetime_s + 1) * new), (s + 1) * new, dtype=np.int64)
        ids = ids[ids % self.every_s == s % self.every_s]
        parts = ids % self.partitions
        if s % self.idle_every_s >= self.idle_every_s - self.idle_for_s:
            keep = parts != self.partitions - 1  # the last partition is silent
            ids, parts = ids[keep], parts[keep]
        ts = start_ms + s * 1000 + (ids * 37) % 1000
        return ids, ts, parts


@dataclass
class LiveSoakReport:
    """What a live soak saw: its samples and the check of its windows."""

    seconds: int
    records: int = 0
    keys: int = 0
    batches: int = 0
    #: (second, driver Python MiB, driver JVM MiB, Python workers MiB, state MiB,
    #: micro-batch seconds)
    samples: list[tuple[float, float, float, float, float, float]] = field(default_factory=list)
    windows: int = 0
    exact: bool = False
    late_rows: int = 0
    error_rows: int = 0
    mismatch: str = ""

    SERIES = ("driver", "jvm", "workers", "state", "batch")

    def series(self, name: str) -> list[float]:
        i = self.SERIES.index(name) + 1
        return [s[i] for s in self.samples]

    def growth(self, name: str) -> tuple[float, float]:
        """The medians of ``name`` over the middle and the last third of the samples
        after the first fifth."""
        values = self.series(name)[len(self.samples) // 5 :]
        third = max(1, len(values) // 3)
        return statistics.median(values[third : 2 * third]), statistics.median(values[-third:])

    @property
    def flat(self) -> bool:
        if len(self.samples) < 15:
            return False
        for name in self.SERIES:
            middle, last = self.growth(name)
            slack = 0.5 if name == "batch" else 0.15
            extra = 32.0 if name in ("driver", "jvm", "workers") else 0.0
            if last > middle * (1 + slack) + extra:
                return False
        return True

    def lines(self) -> list[str]:
        out = [
            f"{self.seconds} s, {self.records:,} records, {self.keys:,} distinct keys, "
            f"{self.batches} micro-batches, {self.windows:,} windows",
            f"{'second':>7} {'driver':>8} {'JVM':>8} {'workers':>8} {'state':>8} {'batch s':>8}"
            "   (MiB)",
        ]
        step = max(1, len(self.samples) // 12)
        for s in self.samples[::step]:
            out.append(f"{s[0]:7.0f} " + " ".join(f"{v:8.1f}" for v in s[1:5]) + f" {s[5]:8.2f}")
        for name in self.SERIES:
            middle, last = self.growth(name) if self.samples else (0.0, 0.0)
            out.append(f"{name}: median {middle:.2f} over the middle third, {last:.2f} the last")
        out.append(
            "windows exact against the oracle: "
            + ("yes" if self.exact else f"NO ({self.mismatch})")
            + f"; late rows {self.late_rows}, error rows {self.error_rows}"
        )
        out.append("flat after warm-up: " + ("yes" if self.flat else "NO"))
        return out

    def plot(self, path: str | os.PathLike[str]) -> None:
        """Memory, state size and micro-batch time over the run, as a PNG."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        t = [s[0] / 60 for s in self.samples]
        fig, axes = plt.subplots(3, 1, figsize=(8, 7), sharex=True)
        for name, label in (("driver", "driver (Python)"), ("jvm", "driver (JVM)")):
            axes[0].plot(t, self.series(name), label=label)
        axes[0].plot(t, self.series("workers"), label="Python workers")
        axes[0].set_ylabel("RSS, MiB")
        axes[0].legend(loc="upper left", fontsize=8)
        axes[1].plot(t, self.series("state"), color="tab:green")
        axes[1].set_ylabel("state, MiB")
        axes[2].plot(t, self.series("batch"), color="tab:red")
        axes[2].set_ylabel("micro-batch, s")
        axes[2].set_xlabel("minutes")
        for ax in axes:
            ax.set_ylim(bottom=0)
            ax.grid(alpha=0.3)
        fig.suptitle(
            f"live soak: {self.records:,} records, {self.keys:,} keys, {self.seconds // 60} min"
        )
        fig.tight_layout()
        fig.savefig(path, dpi=80)
        plt.close(fig)


def _rss_mib(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        return 0.0


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        kids.setdefault(ppid, []).append(int(entry))
    return kids


def _memory() -> tuple[float, float, float]:
    """This process's RSS, its JVM's (its ``java`` child) and that of the Python
    processes under the JVM (Spark's daemon and workers), in MiB."""
    kids = _children()
    jvm, workers = 0.0, 0.0
    todo = list(kids.get(os.getpid(), []))
    while todo:
        pid = todo.pop()
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if b"java" in cmd.split(b"\0", 1)[0]:
            jvm += _rss_mib(pid)
            workers += sum(_rss_mib(w) for w in _descendants(pid, kids))
        else:
            todo.extend(kids.get(pid, []))
    return _rss_mib(os.getpid()), jvm, workers


def _descendants(pid: int, kids: dict[int, list[int]]) -> list[int]:
    out, todo = [], list(kids.get(pid, []))
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(kids.get(p, []))
    return out


def _state_mib(state: Path) -> float:
    """The size of each state partition's newest snapshot, summed (MiB)."""
    total = 0
    for part in (state / "partitions").glob("*"):
        snaps = sorted(part.glob("*.snap"), key=lambda p: int(p.stem))
        if snaps:
            total += snaps[-1].stat().st_size
    return total / 2**20


def live_soak(
    spark: Any,
    broker: Any,
    work: Path,
    seconds: int,
    stream: Stream | None = None,
    sample_s: float = 5.0,
    state_ttl: str = "60s",
    trigger: str = "5 seconds",
    on_driver: bool | None = None,
    log: Callable[[str], None] | None = None,
) -> LiveSoakReport:
    """Runs the soak for ``seconds`` of wall time on ``spark`` and ``broker`` (a
    :class:`~tidemark_tools.kafka.Broker`), its files in ``work``; then checks every
    window against the oracle. ``on_driver``: ``StreamProcessor``'s (``False``: every
    micro-batch in Spark's Python workers, a cluster's path)."""
    from pyspark.sql import functions as F

    import tidemark as tm
    from tidemark.spark import StreamProcessor
    from tidemark_tools.kafka import read_topic

    stream = stream or Stream()
    topic = f"soak-{int(time.time())}"
    broker.create_topic(topic, stream.partitions)
    out = work / "windows"
    out.mkdir(parents=True, exist_ok=True)
    counts = {"late": 0, "errors": 0}

    def windows_sink(t: pa.Table, batch_id: int) -> None:
        import pyarrow.parquet as pq

        pq.write_table(t, out / f"{batch_id}.parquet")

    def counter(kind: str) -> Callable[[pa.Table, int], None]:
        def sink(t: pa.Table, _batch_id: int) -> None:
            counts[kind] += t.num_rows

        return sink

    pipe = tm.Pipeline(
        key="key",
        event_time="ts",
        watermark=tm.BoundedOutOfOrderness("2s", per="partition", idle_timeout="20s"),
        window=tm.Tumbling("10s"),
        aggs={"n": tm.count()},
        state_ttl=state_ttl,
    )
    proc = StreamProcessor(
        pipe,
        str(work / "state"),
        num_partitions=2,
        sink=windows_sink,
        late_sink=counter("late"),
        error_sink=counter("errors"),
        arrow_sinks=True,
        on_driver=on_driver,
    )
    records = read_topic(spark, broker.bootstrap, topic).select(
        "partition",
        F.col("key").cast("string").alias("key"),
        F.timestamp_millis(F.col("value").cast("string").cast("long")).alias("ts"),
    )
    query = (
        records.writeStream.foreachBatch(proc)
        .option("checkpointLocation", str(work / "chk"))
        .trigger(processingTime=trigger)
        .start()
    )
    report = LiveSoakReport(seconds=seconds)
    # What was produced: the seconds sent, from the start time (the oracle makes their
    # records again at the end; kept, they would grow this process's memory).
    produced = {"start_ms": 0, "seconds": 0}
    stop = threading.Event()
    failure: list[BaseException] = []

    def produce() -> None:
        producer = broker.producer()
        start_ms = produced["start_ms"] = int(time.time() * 1000)
        begin = time.monotonic()
        try:
            for s in range(seconds):
                ids, ts, parts = stream.second(s, start_ms)
                for k, t, p in zip(ids.tolist(), ts.tolist(), parts.tolist(), strict=True):
                    while True:
                        try:
                            producer.produce(topic, key=str(k), value=str(t), partition=p)
                            break
                        except BufferError:
                            producer.poll(0.05)
                producer.poll(0)
                produced["seconds"] = s + 1
                report.keys = int(ids.max()) + 1 if len(ids) else report.keys
                if stop.is_set():
                    break
                time.sleep(max(0.0, begin + s + 1 - time.monotonic()))
            producer.flush(60)
        except BaseException as e:
            failure.append(e)

    producer = threading.Thread(target=produce, name="soak-producer", daemon=True)
    begin = time.monotonic()
    producer.start()
    try:
        while producer.is_alive():
            producer.join(sample_s)
            progress = query.lastProgress
            batch_s = (progress or {}).get("durationMs", {}).get("triggerExecution", 0) / 1000
            driver, jvm, workers = _memory()
            sample = (time.monotonic() - begin, driver, jvm, workers, _state_mib(work / "state"))
            report.samples.append((*sample, batch_s))
            if log is not None and len(report.samples) % 12 == 1:
                log(f"  {sample[0]:6.0f} s: " + ", ".join(f"{v:.1f}" for v in sample[1:]))
            if query.exception() is not None:
                stop.set()
                raise RuntimeError(f"the query failed: {query.exception()}")
        if failure:
            raise RuntimeError(f"the producer failed: {failure[0]!r}")
        query.processAllAvailable()
    finally:
        stop.set()
        query.stop()
    report.batches = proc.last_batch_id + 1 if proc.last_batch_id is not None else 0
    proc.flush(spark, records.schema)
    report.late_rows, report.error_rows = counts["late"], counts["errors"]
    _check(report, stream, produced["start_ms"], produced["seconds"], out)
    return report


def _check(report: LiveSoakReport, stream: Stream, start_ms: int, seconds: int, out: Path) -> None:
    """Every window against the oracle: the records produced, counted per key and
    10 s window."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    made = [stream.second(s, start_ms)[:2] for s in range(seconds)]
    ids = np.concatenate([m[0] for m in made]) if made else np.zeros(0, np.int64)
    ts = np.concatenate([m[1] for m in made]) if made else np.zeros(0, np.int64)
    report.records = len(ids)
    want = (
        pa.table({"key": pa.array(ids.astype(str)), "start": pa.array(ts - ts % 10_000)})
        .group_by(["key", "start"])
        .aggregate([("start", "count")])
        .rename_columns(["key", "start", "n"])
    )
    tables = [pq.read_table(f) for f in sorted(out.glob("*.parquet"))]
    got = pa.concat_tables(tables) if tables else None
    if got is None:
        report.mismatch = "no windows"
        return
    start = pc.cast(pc.cast(got["window_start"], pa.timestamp("ms")), pa.int64())
    key = pc.cast(got["key"], pa.string())
    got = pa.table({"key": key, "start": start, "n": pc.cast(got["n"], pa.int64())})
    report.windows = got.num_rows
    twice = got.group_by(["key", "start"]).aggregate([("n", "count")])
    if pc.max(twice["n_count"]).as_py() != 1:
        report.mismatch = "a window came out twice"
        return
    order = [("key", "ascending"), ("start", "ascending")]
    a, b = want.sort_by(order), got.sort_by(order)
    if not a.equals(b):
        both = a.join(b, ["key", "start"], join_type="full outer", left_suffix="_want")
        differ = both.filter(pc.fill_null(pc.not_equal(both["n_want"], both["n"]), True))
        report.mismatch = f"{differ.num_rows} of {a.num_rows} windows differ from the oracle"
        return
    report.exact = report.late_rows == 0 and report.error_rows == 0
    if not report.exact:
        report.mismatch = "late or error rows"


def main_args(args: Any) -> int:
    """``tidemark live-soak`` (see :mod:`tidemark_tools.cli`)."""
    import shutil
    import tempfile

    from tidemark_tools.jars import kafka_delta_conf
    from tidemark_tools.kafka import Broker
    from tidemark_tools.session import local_session, stop_with_jvm

    work = Path(args.workdir or tempfile.mkdtemp(prefix="tidemark-live-soak-"))
    broker = Broker.start(work / "kafka")
    spark = local_session("local[2]", "tidemark-live-soak", 2, kafka_delta_conf())
    spark.sparkContext.setLogLevel("ERROR")
    stream = Stream(rate=args.rate)
    try:
        report = live_soak(
            spark,
            broker,
            work / "run",
            int(args.minutes * 60),
            stream,
            on_driver=False if args.executors else None,
            log=print,
        )
    finally:
        stop_with_jvm(spark)
        broker.stop()
    for line in report.lines():
        print(line)
    if args.json:
        Path(args.json).write_text(json.dumps(dataclasses.asdict(report)) + "\n")
    if args.plot:
        report.plot(args.plot)
        print(f"plot: {args.plot}")
    if not args.workdir:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if report.exact and report.flat else 1
