"""The jars tidemark's Kafka and Delta Lake paths need, resolved from Maven Central.

``python -m tidemark_tools.jars`` (``make jars``; ``make test`` runs it) resolves three
sets with Maven into ``.cache/jars/`` (git-ignored; Maven's own cache is
``.cache/m2``), each from its POM in ``scripts/maven/``:

- ``spark``: what a Spark session adds with ``spark.jars`` to read Kafka and write
  Delta tables: Spark's Kafka connector (``spark-sql-kafka-0-10_2.13``, the pinned
  pyspark's version) and Delta Lake (``delta-spark_<spark>_2.13``), with their
  dependencies, less every jar pyspark ships itself (an older copy of a jar Spark has
  would shadow Spark's);
- ``kafka``: Apache Kafka's broker, which :mod:`tidemark_tools.kafka` starts;
- ``s3proxy``: the S3-compatible server :mod:`tidemark_tools.s3` starts.

``TIDEMARK_JARS`` names another directory holding the sets.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

__all__ = ["jar_dir", "kafka_delta_conf", "resolve", "spark_jars"]

_REPO = Path(__file__).resolve().parents[2]
_POMS = {
    "spark": "spark-jars.xml",
    "kafka": "kafka-broker.xml",
    "s3proxy": "s3proxy.xml",
    "s3a": "s3a.xml",
}
# A jar file's version: from the first "-<digits>.<digit>" on
# (spark-sql-kafka-0-10_2.13-4.2.0 -> spark-sql-kafka-0-10_2.13, zstd-jni-1.5.7-3 -> zstd-jni).
_VERSION = re.compile(r"-\d+\.\d.*")


def _root() -> Path:
    return Path(os.environ.get("TIDEMARK_JARS") or _REPO / ".cache" / "jars")


def jar_dir(name: str) -> Path:
    """The directory of one resolved set (``"spark"``, ``"kafka"``, ``"s3proxy"``); raises
    ``FileNotFoundError`` saying how to resolve it where it is missing."""
    d = _root() / name
    if not (d / ".resolved").exists():
        raise FileNotFoundError(
            f"{d} holds no resolved jars: run `make jars` (or python -m tidemark_tools.jars) "
            "from the repository, or set TIDEMARK_JARS to a directory that has them"
        )
    return d


def spark_jars(name: str = "spark") -> list[str]:
    """The paths to pass as ``spark.jars`` (comma-joined) for Kafka and Delta Lake
    (``"s3a"``: for Hadoop's S3A connector)."""
    return sorted(str(p) for p in jar_dir(name).glob("*.jar"))


def kafka_delta_conf() -> dict[str, str]:
    """:func:`tidemark.spark.kafka_delta_conf` with the jars resolved here
    (``spark.jars``) in place of ``spark.jars.packages``: the tests' and benches'
    sessions start without Ivy resolving anything.

    >>> from tidemark_tools.session import local_session            # doctest: +SKIP
    >>> spark = local_session(extra_conf=kafka_delta_conf())         # doctest: +SKIP
    """
    conf = _connectors().kafka_delta_conf()
    del conf["spark.jars.packages"]
    return {"spark.jars": ",".join(spark_jars()), **conf}


def _connectors() -> Any:
    """``tidemark.spark.connectors``; from the repository's file where the library is
    not built yet (``make setup`` archives Spark's classes before the build)."""
    try:
        from tidemark.spark import connectors
    except ImportError:
        import importlib.util

        path = _REPO / "python" / "tidemark" / "spark" / "connectors.py"
        spec = importlib.util.spec_from_file_location("_tidemark_connectors", path)
        assert spec is not None and spec.loader is not None
        connectors = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(connectors)
    return connectors


def artifact(jar_name: str) -> str:
    """A jar file's artifact, its version taken off: ``kafka-clients-3.9.2.jar`` ->
    ``kafka-clients``."""
    stem = jar_name.removesuffix(".jar")
    for m in re.finditer(r"-\d", stem):
        if _VERSION.fullmatch(stem[m.start() :]):
            return stem[: m.start()]
    return stem


def _spark_shipped() -> set[str]:
    import pyspark

    return {artifact(p.name) for p in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}


def resolve(name: str, force: bool = False) -> Path:
    """Resolves one set with Maven (``mvn`` on the PATH) unless already resolved from
    the same POM; returns its directory."""
    pom = _REPO / "scripts" / "maven" / _POMS[name]
    out = _root() / name
    stamp = out / ".resolved"
    if not force and stamp.exists() and stamp.read_text() == pom.read_text():
        return out
    shutil.rmtree(out, ignore_errors=True)
    mvn = shutil.which("mvn")
    if mvn is None:
        raise FileNotFoundError("mvn (Apache Maven) is not on the PATH: it resolves the jars")
    subprocess.run(
        [
            mvn,
            "-q",
            "-B",
            f"-Dmaven.repo.local={_REPO / '.cache' / 'm2'}",
            "-f",
            str(pom),
            "dependency:copy-dependencies",
            f"-DoutputDirectory={out}",
            "-DincludeScope=runtime",
        ],
        check=True,
    )
    if name in ("spark", "s3a"):
        shipped = _spark_shipped()
        for jar in out.glob("*.jar"):
            if artifact(jar.name) in shipped:
                jar.unlink()
    stamp.write_text(pom.read_text())
    return out


def main(argv: list[str]) -> int:
    for name in argv or list(_POMS):
        d = resolve(name)
        print(f"{name}: {len(list(d.glob('*.jar')))} jars in {d}")
    return 0


if __name__ == "__main__":
    # Run as a file (make jars, before tidemark is built): this directory is not a
    # package root, and its modules must not shadow others.
    here = Path(__file__).resolve().parent
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != here]
    sys.exit(main(sys.argv[1:]))
