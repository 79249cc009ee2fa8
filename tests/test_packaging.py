"""What a user installs: each extra brings what its code imports, the supported versions
are declared once, and the connectors' coordinates are the ones Spark and Delta name.
(The built wheels themselves are checked by ``scripts/check_wheel.py``, which
``make test`` runs on them in fresh virtual environments.)"""

from __future__ import annotations

import ast
import re
import sys
from importlib import metadata
from pathlib import Path

import pytest
import tomllib
from packaging.requirements import Requirement

from tidemark.errors import ConfigError
from tidemark.spark import connectors

ROOT = Path(__file__).resolve().parent.parent
#: The distribution each third-party import comes from.
DIST = {
    "pyarrow": "pyarrow",
    "pyspark": "pyspark",
    "numpy": "pandas",  # pandas requires numpy; PySpark's Arrow path requires pandas
    "prometheus_client": "prometheus_client",
    "rich": "rich",
    "matplotlib": "matplotlib",
    "confluent_kafka": "confluent-kafka",
}


def _project(path: Path) -> dict[str, object]:
    project: dict[str, object] = tomllib.loads(path.read_text())["project"]
    return project


def _requirements(project: dict[str, object]) -> dict[str, set[str]]:
    """Per extra ("" for the base), the distributions it installs."""
    deps: list[str] = project.get("dependencies", [])  # type: ignore[assignment]
    out = {"": {Requirement(r).name for r in deps}}
    extras: dict[str, list[str]] = project.get("optional-dependencies", {})  # type: ignore[assignment]
    for extra, reqs in extras.items():
        out[extra] = {Requirement(r).name for r in reqs}
    return out


def _imports(package: Path) -> dict[str, set[str]]:
    """Per third-party top-level module, the files that import it (anywhere in them)."""
    out: dict[str, set[str]] = {}
    own = {"tidemark", "tidemark_tools"}
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top not in own:
                    out.setdefault(top, set()).add(path.name)
    return out


def test_each_extra_installs_what_its_code_imports() -> None:
    lib = _requirements(_project(ROOT / "pyproject.toml"))
    declared = set().union(*lib.values())
    for module, files in _imports(ROOT / "python" / "tidemark").items():
        assert module in DIST, f"{module} (imported by {sorted(files)}) comes from no known dist"
        assert DIST[module] in declared, f"no extra installs {DIST[module]} for {sorted(files)}"
    # The library's modules import only pyarrow at their top (the rest where it is used).
    for path in (ROOT / "python" / "tidemark").rglob("*.py"):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Import | ast.ImportFrom) and not getattr(node, "level", 0):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
                top = (getattr(node, "module", None) or names[0]).split(".")[0]
                assert top in sys.stdlib_module_names or top in ("tidemark", "pyarrow"), (
                    f"{path.name} imports {top} at its top"
                )
    tools = _requirements(_project(ROOT / "tools" / "pyproject.toml"))
    have = set().union(*tools.values()) | lib[""] | lib["spark"]
    for module, files in _imports(ROOT / "tools" / "tidemark_tools").items():
        assert DIST.get(module) in have, f"tidemark-tools installs no {module} for {sorted(files)}"
    assert "tidemark-engine" in {
        Requirement(r).name for r in _project(ROOT / "tools" / "pyproject.toml")["dependencies"]
    }  # type: ignore[attr-defined]
    assert lib["demo"] == {"tidemark-tools"}


def test_the_supported_pyspark_range_is_declared_once_and_tested_at_both_ends() -> None:
    """pyproject's ``spark`` extra declares the range; the tests' pin is its top minor
    version, and the wheel check (Makefile) installs its lowest version."""
    (spec,) = [
        Requirement(r).specifier
        for r in _project(ROOT / "pyproject.toml")["optional-dependencies"]["spark"]  # type: ignore[index]
        if Requirement(r).name == "pyspark"
    ]
    pinned = re.search(r"^pyspark==(\S+)$", (ROOT / "requirements-dev.txt").read_text(), re.M)
    assert pinned and pinned.group(1) in spec
    assert metadata.version("pyspark") == pinned.group(1)
    low = min(s.version for s in spec if s.operator == ">=")
    assert low in spec
    makefile = (ROOT / "Makefile").read_text()
    assert "check_wheel.py target/wheel-check --spark $(PYSPARK_LOW)" in makefile
    assert "PYSPARK_LOW := $(shell sed -n 's/.*\"pyspark>=" in makefile
    # Nothing above the range: the next minor version is outside it.
    major, minor = pinned.group(1).split(".")[:2]
    assert f"{major}.{int(minor) + 1}.0" not in spec


def test_spark_packages_are_those_delta_and_spark_name() -> None:
    """The coordinates equal what Delta's own pip helper puts in ``spark.jars.packages``
    for the installed versions, beside Spark's Kafka connector at PySpark's version."""
    from delta.pip_utils import configure_spark_with_delta_pip
    from pyspark.sql import SparkSession

    kafka = f"org.apache.spark:spark-sql-kafka-0-10_2.13:{metadata.version('pyspark')}"
    builder = configure_spark_with_delta_pip(SparkSession.Builder(), extra_packages=[kafka])
    delta_says = builder._options["spark.jars.packages"].split(",")
    assert sorted(connectors.spark_packages()) == sorted(delta_says)
    conf = connectors.kafka_delta_conf()
    assert sorted(conf["spark.jars.packages"].split(",")) == sorted(delta_says)
    assert conf["spark.sql.extensions"] == "io.delta.sql.DeltaSparkSessionExtension"
    assert connectors.spark_packages(delta=False) == [kafka]
    assert "spark.sql.extensions" not in connectors.kafka_delta_conf(delta=False)


def test_delta_without_its_package_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    real = metadata.version

    def version(dist: str) -> str:
        if dist == "delta-spark":
            raise metadata.PackageNotFoundError(dist)
        return real(dist)

    monkeypatch.setattr(connectors.metadata, "version", version)
    with pytest.raises(ConfigError, match=r"tidemark-engine\[delta\]"):
        connectors.spark_packages()
    assert len(connectors.spark_packages(delta=False)) == 1
    # Delta before 4.1 has one artifact for every Spark minor version.
    monkeypatch.setattr(
        connectors.metadata, "version", lambda d: "4.0.1" if d == "delta-spark" else real(d)
    )
    assert connectors.spark_packages(kafka=False) == ["io.delta:delta-spark_2.13:4.0.1"]


def test_pyspark_40s_arrow_schema_carries_the_session_zone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """PySpark 4.0's ``to_arrow_schema`` has no ``timezone`` and names every zoned
    timestamp UTC; ``mapInArrow``'s batches carry the session's zone, nested ones too.
    The schema built the 4.0 way equals the one 4.2 builds (the wheel check runs the
    README's example and the demo on PySpark 4.0.1 itself)."""
    import pyspark.sql.pandas.types as types
    from pyspark.sql.types import (
        ArrayType,
        MapType,
        StringType,
        StructField,
        StructType,
        TimestampNTZType,
        TimestampType,
    )

    from tidemark.spark._codec import arrow_schema_of

    schema = StructType(
        [
            StructField("ts", TimestampType()),
            StructField("ntz", TimestampNTZType()),
            StructField("k", StringType()),
            StructField("s", StructType([StructField("t", TimestampType())])),
            StructField("a", ArrayType(TimestampType())),
            StructField("m", MapType(StringType(), TimestampType())),
        ]
    )
    want = arrow_schema_of(schema, "Europe/Berlin", True)
    assert want.field("ts").type.tz == "Europe/Berlin"
    real = types.to_arrow_schema

    def pyspark_40(
        schema: object,
        error_on_duplicated_field_names_in_struct: bool = False,
        timestamp_utc: bool = True,
        prefers_large_types: bool = False,
    ) -> object:
        return real(schema, timezone="UTC", prefers_large_types=prefers_large_types)

    monkeypatch.setattr(types, "to_arrow_schema", pyspark_40)
    assert arrow_schema_of(schema, "Europe/Berlin", True) == want
