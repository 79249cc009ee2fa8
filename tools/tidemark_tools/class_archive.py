"""A class-data-sharing archive of Spark's JVM classes, for a run that starts many JVMs.

Every Spark JVM parses, verifies and links thousands of classes from Spark's jars while
it starts; the test suite starts dozens of them (its sessions, the clusters' masters,
workers and executors, the crash tests' drivers). ``make test`` runs
``python tools/tidemark_tools/class_archive.py target/jvm/spark.jsa`` while Rust
compiles: one short Spark job (a session with the Kafka and Delta jars, Arrow
transfers, a Python ``mapInArrow``, a file stream through ``foreachBatch``, Parquet and
Delta writes) in a JVM that dumps the classes it loaded at its exit
(``-XX:ArchiveClassesAtExit``). A JVM started with :func:`jvm_options` maps them
instead of loading them again; one whose Java or classpath differs from the
archive's ignores it, silently (``-Xlog:cds=off``), and starts as before.

The job needs pyspark and the resolved jars (:mod:`tidemark_tools.jars`), not tidemark's
native module: it runs before that is built.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["JVM_OPTIONS", "dump", "jvm_options", "with_options"]

#: The options of every JVM the tests start (and of the dump: an archive maps only
#: into a JVM with the same heap layout). They run small jobs, many of them once: with
#: the quick JIT alone and one GC thread they spend less of the machine compiling
#: and collecting.
JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def jvm_options(archive: str | Path) -> str:
    """The JVM options that map ``archive`` where it exists (else none)."""
    path = Path(archive)
    if not path.is_file():
        return ""
    return f"-XX:SharedArchiveFile={path.resolve()} -Xlog:cds=off -Xlog:cds+dynamic=off"


def with_options(java_options: str, *options: str | None) -> str:
    """``java_options`` (a ``JAVA_TOOL_OPTIONS`` value) with each of ``options`` added
    where it is not there yet (``None`` and empty ones skipped): a process that passes its options
    on to its children adds them once, however often it is asked.

    >>> with_options("-Xmx1g", "-XX:+UseSerialGC", None, "-Xmx1g")
    '-Xmx1g -XX:+UseSerialGC'
    """
    for option in options:
        if option and option not in java_options:
            java_options = f"{java_options} {option}".strip()
    return java_options


def _stamp() -> str:
    """What the archive was made from: Java, pyspark, the jars, this file and the
    session it configures (its settings decide which classes the job loads)."""
    import pyspark

    java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr
    jars = sorted(p.name for p in (Path(pyspark.__file__).parent / "jars").glob("*.jar"))
    jars += sorted(_jars().spark_jars())
    sources = [Path(__file__), Path(__file__).with_name("session.py")]
    parts = [java, pyspark.__version__, *jars, *(p.read_text() for p in sources)]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def dump(archive: str | Path, force: bool = False) -> bool:
    """Makes ``archive`` unless it was made from the same Java, pyspark and jars;
    ``False`` where this Java made none (then JVMs start without one)."""
    path = Path(archive)
    stamp = path.with_suffix(".stamp")
    want = _stamp()
    if not force and path.is_file() and stamp.is_file() and stamp.read_text() == want:
        return True
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    partial = path.with_suffix(".partial")
    partial.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(prefix="tidemark-cds-") as work:
        # The driver's JVM dumps (its options), not spark-submit's launcher JVM.
        env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "JAVA_TOOL_OPTIONS": JVM_OPTIONS}
        log = Path(work) / "job.log"
        with open(log, "w") as out:
            code = subprocess.run(
                [sys.executable, __file__, "--job", work, str(partial)],
                env=env,
                stdout=out,
                stderr=out,
            ).returncode
        if code != 0:
            raise RuntimeError(f"the class archive's job failed:\n{log.read_text()[-3000:]}")
    if not partial.is_file():
        return False
    partial.rename(path)
    stamp.write_text(want)
    return True


def _tool(name: str) -> Any:
    """A module of this directory, loaded from its file (tidemark is not built yet)."""
    spec = importlib.util.spec_from_file_location(
        f"_tidemark_tools_{name}", Path(__file__).with_name(f"{name}.py")
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _jars() -> Any:
    """:mod:`tidemark_tools.jars`."""
    return _tool("jars")


def _job(work: Path, archive: Path) -> None:
    """What the tests' JVMs do, in short; the driver's JVM dumps its classes to
    ``archive`` at its exit."""
    import pyarrow as pa

    session = _tool("session")
    conf = {
        **_jars().kafka_delta_conf(),
        "spark.driver.extraJavaOptions": f"-XX:ArchiveClassesAtExit={archive}",
    }
    spark = session.local_session("local[2]", "tidemark-class-archive", 2, conf)
    data = pa.table({"k": ["a", "b"] * 50, "ts": list(range(100)), "v": list(range(100))})
    df = spark.createDataFrame(data.to_pandas())
    df.write.parquet(str(work / "in"))

    def same(batches):  # type: ignore[no-untyped-def]
        yield from batches

    def each(batch, batch_id):  # type: ignore[no-untyped-def]
        rows = batch.mapInArrow(same, batch.schema).repartition(2, "k")
        rows.write.format("delta").mode("append").save(str(work / "delta"))
        rows.groupBy("k").count().toArrow()

    query = (
        spark.readStream.schema(df.schema)
        .option("maxFilesPerTrigger", 1)
        .parquet(str(work / "in"))
        .writeStream.foreachBatch(each)
        .option("checkpointLocation", str(work / "chk"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    spark.read.format("delta").load(str(work / "delta")).groupBy("k").sum("v").collect()
    spark.sql(f"DESCRIBE HISTORY delta.`{work / 'delta'}`").collect()
    session.stop_with_jvm(spark)  # the archive is written as the JVM exits


def main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[0] == "--job":
        _job(Path(argv[1]), Path(argv[2]))
        return 0
    if len(argv) != 1:
        print("usage: python tools/tidemark_tools/class_archive.py ARCHIVE", file=sys.stderr)
        return 2
    if shutil.which("java") is None:
        print("no java on the PATH: no class archive", file=sys.stderr)
        return 0
    made = dump(argv[0])
    print(f"class archive: {argv[0] if made else 'none (this Java cannot make one)'}")
    return 0


if __name__ == "__main__":
    # Run as a file (make test, before tidemark is built): this directory is not a
    # package root, and its modules must not shadow others.
    here = Path(__file__).resolve().parent
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != here]
    sys.exit(main(sys.argv[1:]))
