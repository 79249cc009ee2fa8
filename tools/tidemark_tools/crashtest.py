"""Crash and restart: a Structured Streaming query killed with SIGKILL, restarted from
its checkpoints, must produce exactly the output of an uninterrupted run.

The job (``python -m tidemark_tools.crashtest job WORKDIR``) is a real driver process: a
local Spark session reading one Parquet file per micro-batch, a :class:`StreamProcessor`
with per-key watermarks over two state partitions, and sinks that write each batch's
windows and late rows to ``out/<kind>/batch=<id>`` (overwrite: idempotent, as an
exactly-once sink must be). At the end of input it flushes (as one more batch) and
writes a ``done`` marker.

:func:`run` starts the job again and again and kills its whole process group (Python
driver and JVM) with SIGKILL at a random moment after the query started: while a
batch is computed, while state snapshots and driver records are written, while sinks
write, or during the final flush. After ``kills`` kills it lets the job finish, then
compares every batch's output with a reference run that reads the same micro-batches.
Spark's file source may put two files into one micro-batch after a restart (when the
kill lands after its source log recorded a file but before its offset log recorded the
batch); the reference then reads the crash run's micro-batches as read
(:func:`micro_batches_read`), so the comparison is about tidemark's state, not Spark's
batching.

Long version (documented in the reliability guide)::

    tidemark crash-test --kills 40 --batches 120 --rows 2000
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from tidemark_tools.class_archive import JVM_OPTIONS, jvm_options, with_options

__all__ = [
    "CrashReport",
    "micro_batches_read",
    "outputs",
    "pipeline",
    "run",
    "run_job",
    "write_input",
]

STARTED = "TIDEMARK_QUERY_STARTED"


def pipeline() -> Any:
    """The pipeline under test: per-key watermarks, 10 s tumbling windows."""
    import tidemark as tm

    return tm.Pipeline(
        key="tenant",
        event_time="ts",
        event_time_type="unixtimestamp_ms",
        watermark=tm.BoundedOutOfOrderness("2s", per="key"),
        window=tm.Tumbling("10s"),
        aggs={"n": tm.count(), "total": tm.sum("value")},
    )


def write_input(inp: Path, batches: int, rows: int, seed: int = 7) -> None:
    """One Parquet file per micro-batch: 20 tenants, a quarter of them 30 s behind, a
    few rows far behind every watermark (late). File times give the order."""
    rng = random.Random(seed)
    inp.mkdir(parents=True, exist_ok=True)
    for b in range(batches):
        tenants, ts, values = [], [], []
        for i in range(rows):
            t = rng.randrange(20)
            base = (b * rows + i) * 20  # 20 ms per row
            lag = 30_000 if t < 5 else 0
            late = rng.random() < 0.01
            tenants.append(f"t{t:02d}")
            ts.append(max(0, base - lag - rng.randrange(1_500) - (60_000 if late else 0)))
            values.append(rng.randrange(100))
        f = inp / f"part-{b:05d}.parquet"
        pq.write_table(
            pa.table({"tenant": tenants, "ts": pa.array(ts, pa.int64()), "value": values}), f
        )
        os.utime(f, (1_700_000_000 + b, 1_700_000_000 + b))


def run_job(work: Path, spark: Any = None) -> None:
    """The streaming job over ``work/in``; resumes from ``work/chk`` and its state
    location: ``work/state``, or the one ``work/state-location`` names (an object store's
    URI: see :func:`run`)."""
    from tidemark.spark import StreamProcessor
    from tidemark_tools.session import local_session, stop_with_jvm

    own = spark is None
    if spark is None:
        # The driver's own JVM options (the class archive's dump: not spark-submit's).
        driver = os.environ.get(_DRIVER_OPTIONS)
        conf = {"spark.driver.extraJavaOptions": driver} if driver else None
        spark = local_session("local[1]", "tidemark-crash", 2, conf)
    out = work / "out"

    def sink(kind: str) -> Any:
        def write(df: Any, batch_id: int) -> None:
            df.write.mode("overwrite").parquet(str(out / kind / f"batch={batch_id}"))

        return write

    named = work / "state-location"
    proc = StreamProcessor(
        pipeline(),
        named.read_text() if named.exists() else str(work / "state"),
        num_partitions=2,
        sink=sink("windows"),
        late_sink=sink("late"),
    )
    schema = spark.read.parquet(str(work / "in")).schema
    q = (
        spark.readStream.schema(schema)
        .option("maxFilesPerTrigger", 1)
        .parquet(str(work / "in"))
        .writeStream.foreachBatch(proc)
        .option("checkpointLocation", str(work / "chk"))
        .trigger(availableNow=True)
        .start()
    )
    print(STARTED, flush=True)
    q.awaitTermination()
    proc.flush(spark, schema)
    (work / "done").write_text("ok")
    if own:
        stop_with_jvm(spark)  # the first run's JVM writes the class archive as it exits


def outputs(work: Path) -> dict[str, dict[int, list[tuple[Any, ...]]]]:
    """Every batch's rows per output kind, sorted (what the sinks wrote)."""
    result: dict[str, dict[int, list[tuple[Any, ...]]]] = {}
    for kind in ("windows", "late"):
        per: dict[int, list[tuple[Any, ...]]] = {}
        root = work / "out" / kind
        for d in sorted(root.glob("batch=*")) if root.exists() else []:
            files = sorted(d.glob("*.parquet"))
            t = pa.concat_tables([pq.read_table(f) for f in files]) if files else None
            rows = [] if t is None else [tuple(r.values()) for r in t.to_pylist()]
            per[int(d.name.split("=")[1])] = sorted(rows)
        result[kind] = per
    return result


def micro_batches_read(work: Path) -> list[list[str]]:
    """The input files (names) each micro-batch of the job in ``work`` read, from its
    checkpoint: the file source's log (``chk/sources/0``, compacted files included)
    gives each source offset's files, the offset log (``chk/offsets``) each batch's
    last source offset."""
    chk = work / "chk"
    files: dict[int, list[str]] = {}
    for f in sorted((chk / "sources" / "0").iterdir()):
        if f.name.startswith("."):
            continue  # checksums and temporary files
        for line in f.read_text().splitlines()[1:]:  # after the version line
            if line.strip():
                entry = json.loads(line)
                names = files.setdefault(entry["batchId"], [])
                name = Path(entry["path"]).name
                if name not in names:
                    names.append(name)
    out: list[list[str]] = []
    done = -1
    offsets = sorted(
        (f for f in (chk / "offsets").iterdir() if f.name.isdigit()), key=lambda f: int(f.name)
    )
    for f in offsets:
        end = json.loads(f.read_text().splitlines()[-1])["logOffset"]
        out.append([n for i in range(done + 1, end + 1) for n in files.get(i, [])])
        done = end
    return out


def _write_regrouped(src: Path, dst: Path, groups: list[list[str]]) -> None:
    """``dst``'s input: micro-batch ``b`` is one file holding ``groups[b]``'s files of
    ``src``."""
    dst.mkdir(parents=True, exist_ok=True)
    for b, names in enumerate(groups):
        table = pa.concat_tables([pq.read_table(src / n) for n in names])
        f = dst / f"part-{b:05d}.parquet"
        pq.write_table(table, f)
        os.utime(f, (1_700_000_000 + b, 1_700_000_000 + b))


@dataclass
class CrashReport:
    """What :func:`run` did and found."""

    kills: int = 0
    restarts: int = 0
    kill_after_start_s: list[float] = field(default_factory=list)
    batches: int = 0
    #: Micro-batches of the crash run that read more than one file (Spark's file
    #: source after some restarts): the reference read them the same way.
    merged_batches: int = 0
    identical: bool = False
    seconds: float = 0.0


#: The environment variable that gives the job's driver JVM options of its own.
_DRIVER_OPTIONS = "TIDEMARK_CRASH_DRIVER_JAVA_OPTIONS"


def _start(
    work: Path, log: Any, jvm_extra: str | None = None, driver: str | None = None
) -> subprocess.Popen[str]:
    # The job's JVMs (Spark's launcher and the driver) compile with the quick JIT only: a
    # job killed seconds after it starts is mostly start-up, which that made about a fifth
    # faster (17 s to 14 s to the query's start here, 50 s to 41 s for a whole 30-batch
    # run); one GC thread, as every test JVM (class_archive.JVM_OPTIONS).
    jvm = with_options(os.environ.get("JAVA_TOOL_OPTIONS", ""), JVM_OPTIONS, jvm_extra)
    extra = {_DRIVER_OPTIONS: driver} if driver else {}
    return subprocess.Popen(
        [sys.executable, "-m", "tidemark_tools.crashtest", "job", str(work)],
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
        start_new_session=True,  # its own process group: the JVM dies with it
        env={**os.environ, "PYSPARK_PYTHON": sys.executable, "JAVA_TOOL_OPTIONS": jvm, **extra},
    )


def _class_archive(work: Path, log: Any) -> str | None:
    """JVM options that map a class-data-sharing archive of the job's classes, dumped
    by one short job run to its end in ``work/cds``: a restart that maps it reaches its
    query's start in about 4 s instead of 8-10 here. ``None`` where no archive came
    out (a JVM without dynamic archives), or where the JVMs already map one
    (``JAVA_TOOL_OPTIONS``, as under ``make test``: :mod:`tidemark_tools.class_archive`):
    the restarts then start as the others do."""
    if "-XX:SharedArchiveFile=" in os.environ.get("JAVA_TOOL_OPTIONS", ""):
        return None
    warm = work / "cds"
    shutil.rmtree(warm, ignore_errors=True)
    write_input(warm / "in", 1, 10)
    archive = warm / "classes.jsa"
    p = _start(warm, log, driver=f"-XX:ArchiveClassesAtExit={archive}")
    _wait_started(p, 180)
    if p.wait() != 0 or not archive.exists():
        return None
    return jvm_options(archive)


def _wait_started(p: subprocess.Popen[str], timeout: float) -> bool:
    assert p.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = p.stdout.readline()
        if not line:
            return False  # exited
        if STARTED in line:
            return True
    return False


def run(
    work: Path,
    kills: int = 10,
    batches: int | None = None,
    rows: int = 300,
    seed: int = 1,
    max_delay_s: float = 2.5,
    reference: Path | None = None,
    state: str | None = None,
) -> CrashReport:
    """Kills the job ``kills`` times at random moments, then lets it finish, and checks
    its output against a reference run (``reference``: an already finished run's
    directory, used where the crash run read one file per micro-batch; default, or
    where it did not: run one here, uninterrupted, over the crash run's
    micro-batches). ``state``: the crash run's state location (default: a directory
    in ``work``), such as an ``s3://`` URI; the reference keeps its state locally."""
    rng = random.Random(seed)
    begin = time.monotonic()
    batches = batches if batches is not None else 3 * kills
    report = CrashReport(batches=batches)
    crash = work / "crash"
    shutil.rmtree(crash, ignore_errors=True)
    write_input(crash / "in", batches, rows)
    if state is not None:
        (crash / "state-location").write_text(state)
    with open(work / "crash.log", "a") as log:  # one log for every restart
        cds = _class_archive(work, log)
        while report.kills < kills and not (crash / "done").exists():
            p = _start(crash, log, cds)
            report.restarts += 1
            if not _wait_started(p, 180):
                code = p.wait()
                if code != 0 and not (crash / "done").exists():
                    raise RuntimeError(f"the job failed with exit code {code}; see {log.name}")
                continue
            delay = rng.uniform(0, max_delay_s)
            try:
                p.wait(timeout=delay)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
                report.kills += 1
                report.kill_after_start_s.append(round(delay, 2))
        # Run to completion.
        while not (crash / "done").exists():
            p = _start(crash, log, cds)
            report.restarts += 1
            _wait_started(p, 180)
            if p.wait() != 0:
                raise RuntimeError(f"the job failed after restarting; see {log.name}")
    groups = micro_batches_read(crash)
    report.merged_batches = sum(len(g) > 1 for g in groups)
    if reference is None or report.merged_batches:
        # Uninterrupted, over the micro-batches the crash run read.
        reference = work / "reference-run"
        shutil.rmtree(reference, ignore_errors=True)
        _write_regrouped(crash / "in", reference / "in", groups)
        with open(work / "reference.log", "w") as ref_log:
            p = _start(reference, ref_log, cds)
            _wait_started(p, 180)
            if p.wait() != 0:
                raise RuntimeError("the reference job failed; see reference.log")
    report.identical = outputs(crash) == outputs(reference)
    report.seconds = time.monotonic() - begin
    return report


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "job":
        run_job(Path(argv[1]))
        return 0
    print("usage: python -m tidemark_tools.crashtest job WORKDIR", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
