"""A Spark standalone cluster on this machine, and a micro-batch of 1M rows on one
executor against two.

Run from the repository root (after ``make build``)::

    python benches/standalone.py                    # 1M rows per micro-batch
    python benches/standalone.py --rows 400000 --batches 6

:func:`cluster` starts a master and ``workers`` workers with PySpark's own
``spark-class`` launcher (each a separate JVM, as on a real cluster: executors in their
own processes, rows between them through the shuffle service, the driver apart);
``tests/spark_standalone_job.py`` uses it to check the executor path there. ``main``
runs the steps of ``benches/profile_executor.py`` (the count floor, tidemark's
defaults, tidemark on the executors, tidemark with Spark's fold, Spark's own
aggregation) with one executor (``spark.cores.max=1``) and with two, after a warm-up,
and prints the median micro-batch time of each and the speed-up of two over one.
``python benches/nexmark/run.py --master standalone`` runs Nexmark on such a cluster.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _spark_class() -> str:
    import pyspark

    return str(Path(pyspark.__file__).parent / "bin" / "spark-class")


class Cluster:
    """A running standalone cluster: its master's :attr:`url` and its workers, each a
    JVM whose executors (and their Python workers) are processes under it."""

    def __init__(self, work: Path, port: int, cores: int, memory: str, env: dict[str, str]):
        self.work = work
        self.url = f"spark://127.0.0.1:{port}"
        self._cores, self._memory, self._env = cores, memory, env
        self.master: subprocess.Popen[bytes] | None = None
        self.workers: list[subprocess.Popen[bytes]] = []

    def _spawn(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        log = open(self.work / f"{name}.log", "ab")  # noqa: SIM115 (closed with the process)
        return subprocess.Popen(
            [_spark_class(), *args], env=self._env, stdout=log, stderr=subprocess.STDOUT
        )

    def _worker(self, w: int) -> subprocess.Popen[bytes]:
        return self._spawn(
            f"worker{w}",
            "org.apache.spark.deploy.worker.Worker",
            "--cores", str(self._cores), "--memory", self._memory,
            "--webui-port", str(_free_port()), "--work-dir", str(self.work / f"work{w}"),
            self.url,
        )  # fmt: skip

    def worker_of(self, pid: int) -> int | None:
        """The worker whose processes include ``pid`` (an executor's Python worker,
        say), or ``None``."""
        for w, p in enumerate(self.workers):
            if pid in _descendants(p.pid):
                return w
        return None

    def kill_worker(self, w: int) -> list[int]:
        """SIGKILLs worker ``w`` and every process under it (its executors and their
        Python workers) at once, as a machine lost; the pids killed."""
        pids = [self.workers[w].pid, *_descendants(self.workers[w].pid)]
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.workers[w].wait()
        return pids

    def restart_worker(self, w: int) -> None:
        """Starts worker ``w`` again (a new JVM, registering with the master), as a
        cluster manager replaces a lost node."""
        if self.workers[w].poll() is None:
            raise RuntimeError(f"worker {w} is running")
        self.workers[w] = self._worker(w)

    def stop(self) -> None:
        procs = [p for p in (self.master, *self.workers) if p is not None]
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()


def _descendants(pid: int) -> set[int]:
    """Every process under ``pid`` (from ``/proc``)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            text = stat.read_text()
            ppid = int(text[text.rindex(")") + 2 :].split()[1])
            children.setdefault(ppid, []).append(int(stat.parent.name))
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


@contextlib.contextmanager
def cluster(workers: int = 2, cores: int = 1, memory: str = "2g") -> Iterator[Cluster]:
    """A standalone master and ``workers`` workers of ``cores`` cores each, started with
    ``spark-class`` (logs under a temporary directory); yields the :class:`Cluster`
    (its master's URL: ``.url``) and stops every process on exit."""
    work = Path(tempfile.mkdtemp(prefix="tidemark-standalone-"))
    port = _free_port()
    env = dict(
        os.environ,
        SPARK_LOCAL_IP="127.0.0.1",
        SPARK_LOG_DIR=str(work),
        SPARK_WORKER_DIR=str(work / "work"),
        PYSPARK_PYTHON=sys.executable,
    )
    c = Cluster(work, port, cores, memory, env)
    try:
        c.master = c._spawn(
            "master",
            "org.apache.spark.deploy.master.Master",
            "--host", "127.0.0.1", "--port", str(port), "--webui-port", str(_free_port()),
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while True:  # the master listens before the workers register with it
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                break
            if time.monotonic() > deadline or c.master.poll() is not None:
                raise RuntimeError("the master did not start: " + _tail(work / "master.log"))
            time.sleep(0.2)
        c.workers = [c._worker(w) for w in range(workers)]
        yield c
    finally:
        c.stop()
        shutil.rmtree(work, ignore_errors=True)


def _tail(path: Path) -> str:
    return path.read_text(errors="replace")[-3000:] if path.exists() else "(no log)"


def session(
    url: str,
    executors: int,
    app_name: str = "tidemark-standalone",
    extra_conf: dict[str, str] | None = None,
) -> Any:
    """A SparkSession on the cluster at ``url`` with ``executors`` one-core executors
    (``spark.cores.max``), once they have all registered; ``extra_conf``: more
    settings (a job's connectors)."""
    from tidemark_tools.session import local_session

    spark = local_session(
        url,
        app_name=app_name,
        shuffle_partitions=4,
        extra_conf={
            "spark.cores.max": str(executors),
            "spark.executor.cores": "1",
            "spark.executor.memory": "1g",
            "spark.driver.host": "127.0.0.1",
            **(extra_conf or {}),
        },
    )
    deadline = time.monotonic() + 120
    while len(executor_ids(spark)) < executors:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{executors} executors did not register")
        time.sleep(0.2)
    return spark


def executor_ids(spark: Any) -> list[str]:
    """The ids of the session's live executors (not the driver)."""
    store = spark.sparkContext._jsc.sc().statusStore()
    seq = store.executorList(True)
    ids = [seq.apply(i).id() for i in range(seq.size())]
    return [i for i in ids if i != "driver"]


def task_seconds(spark: Any) -> dict[str, float]:
    """Each live executor's task time so far (its ``totalDuration``), in seconds."""
    store = spark.sparkContext._jsc.sc().statusStore()
    seq = store.executorList(True)
    got = {}
    for i in range(seq.size()):
        e = seq.apply(i)
        if e.id() != "driver":
            got[e.id()] = e.totalDuration() / 1000
    return got


STEPS = ("count", "default", "tidemark", "folded", "spark")


def main() -> None:
    import profile_executor as prof

    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--keys", type=int, default=2_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--batches", type=int, default=5)
    ap.add_argument("--steps", nargs="+", choices=STEPS, default=list(STEPS))
    ap.add_argument("--record", action="store_true", help="record a run with other settings")
    args = ap.parse_args()
    times: dict[int, dict[str, float]] = {}
    with cluster(workers=2) as c:
        for executors in (1, 2):
            spark = session(c.url, executors)
            spark.sparkContext.setLogLevel("FATAL")  # a stopped query aborts its last write
            work = Path(tempfile.mkdtemp(prefix="tidemark-standalone-run-"))
            try:
                # Warm up: the executors' Python workers start and import tidemark
                # before any step is timed (the first step would pay it otherwise).
                prof.run(spark, "tidemark", args.rows, args.keys, args.partitions, 2, work)
                times[executors] = {
                    s: prof.run(spark, s, args.rows, args.keys, args.partitions, args.batches, work)
                    for s in args.steps
                }
            finally:
                spark.stop()
                shutil.rmtree(work, ignore_errors=True)
            print(
                f"{executors} executor(s): "
                + ", ".join(f"{s} {times[executors][s]:.3f} s" for s in args.steps),
                flush=True,
            )
    print(
        f"{args.rows:,} rows per micro-batch; two executors over one (speed-up): "
        + ", ".join(f"{s} {times[1][s] / times[2][s]:.2f}x" for s in args.steps)
    )
    from record import documented, record

    if documented(ap, args):
        record(
            "standalone",
            title="A standalone cluster: one executor against two",
            what=(
                "A Spark standalone cluster on this machine (a master and two one-core "
                "workers started with `spark-class`, each a JVM of its own), micro-batches of "
                f"{args.rows:,} rows over {args.keys:,} keys, {args.partitions} state "
                "partitions: the steps of `benches/profile_executor.py` (the count floor, "
                "tidemark's defaults, tidemark on the executors, tidemark with Spark's fold, "
                "Spark's own aggregation) on one executor and on two, after a warm-up: the "
                f"median of {args.batches} micro-batch times."
            ),
            command="python benches/standalone.py",
            master="standalone, 2 workers of 1 core",
            columns=["step", "one executor", "two executors", "speed-up"],
            rows=[
                [
                    s,
                    f"{times[1][s]:.3f} s",
                    f"{times[2][s]:.3f} s",
                    f"{times[1][s] / times[2][s]:.2f}x",
                ]
                for s in args.steps
            ],
        )


if __name__ == "__main__":
    main()
