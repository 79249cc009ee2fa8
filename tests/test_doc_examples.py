"""Every Python block of ``README.md`` and ``docs/guide/`` runs.

A block runs as written, in a fresh namespace, in a scratch directory (the docs'
paths are relative; with Spark, the JVM's working directory, where Spark resolves
them). A block that continues an earlier one, or stands for what a
user already has (their stream, their sink, their database), says so in a comment
line before it::

    <!-- example: needs df, stream_df -->

and this test supplies those names (see ``SUPPLIED``: small generated inputs). A
block that needs what this machine cannot run says why instead
(``<!-- example: not run: ... -->``); those are listed here by name, so none is
added silently. Streaming queries a block starts must make progress, then stop.
"""

from __future__ import annotations

import datetime as dt
import re
import shutil
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import tidemark as tm

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs" / "guide").glob("*.md"))]
BLOCK = re.compile(r"(?:<!-- example: (.*?) -->\n)?```python\n(.*?)```", re.S)

#: Blocks this machine cannot run, and why (each says so in its marker).
NOT_RUN = {
    "README.md#0": "from the installed wheel",
    "deployment.md#0": "Maven Central",
    "deployment.md#1": "Spark Connect",
    "watermark-scopes.md#2": "Kafka",
    "streaming-state.md#4": "S3 endpoint",
}


def _blocks() -> list[tuple[str, str, str]]:
    out = []
    for doc in DOCS:
        for i, m in enumerate(BLOCK.finditer(doc.read_text())):
            out.append((f"{doc.name}#{i}", m.group(1) or "", m.group(2)))
    return out


BLOCKS = _blocks()

_T0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)


def _rows() -> pa.Table:
    """A small event stream with every column the docs' examples name."""
    n = 24
    ts = [_T0 + dt.timedelta(seconds=17 * i) for i in range(n)]
    return pa.table(
        {
            "device_id": [f"d{i % 3}" for i in range(n)],
            "device": [i % 2 + 1 for i in range(n)],
            "user": [f"u{i % 4}" for i in range(n)],
            "tenant": [f"t{i % 2}" for i in range(n)],
            "event_time": pa.array(ts, pa.timestamp("us", tz="UTC")),
            "ts": pa.array(ts, pa.timestamp("us", tz="UTC")),
            "value": [float(i) for i in range(n)],
        }
    )


class _Store:
    """A user's key-value store (``upsert``, ``delete``)."""

    def __init__(self) -> None:
        self.rows: dict[Any, Any] = {}

    def upsert(self, key: Any, value: Any, batch: int | None = None) -> None:
        self.rows[key if batch is None else (key, batch)] = value

    def delete(self, key: Any) -> None:
        self.rows.pop(key, None)


def _pipe() -> tm.Pipeline:
    return tm.Pipeline(
        key="tenant",
        event_time="event_time",
        watermark=tm.BoundedOutOfOrderness("5s", per="key", idle_timeout="5m"),
        window=tm.Tumbling("1m"),
        aggs={"n": tm.count()},
    )


def _stream_df(ns: dict[str, Any]) -> Any:
    path = Path("landing/events")  # where the docs' streams land
    path.mkdir(parents=True, exist_ok=True)
    pq.write_table(_rows(), path / "part-0.parquet")
    schema = ns["spark"].createDataFrame(_rows()).schema
    return ns["spark"].readStream.schema(schema).parquet(str(path))


def _write(df: Any, batch_id: int) -> None:
    # A user's sink; two queries of one block may both use it at once.
    df.write.parquet(f"out/written/batch_id={batch_id}/{uuid.uuid4().hex}")


#: What a block may ask for (``needs``), built in the block's namespace.
SUPPLIED: dict[str, Callable[[dict[str, Any]], Any]] = {
    "df": lambda ns: ns["spark"].createDataFrame(_rows()),
    "schema": lambda ns: _stream_df(ns).schema,
    "stream_df": _stream_df,
    "write": lambda ns: _write,
    "sink": lambda ns: _write,
    "chk": lambda ns: "chk/query",
    "pipe": lambda ns: _pipe(),
    "op": lambda ns: _pipe().operator(),
    "proc": lambda ns: tm_spark().StreamProcessor(_pipe(), "chk/state", sink=_write),
    "batch": lambda ns: _rows(),
    "batches": lambda ns: _rows().to_batches(max_chunksize=8),
    "clock": lambda ns: tm.ManualClock(),
    "db": lambda ns: _Store(),
    "store": lambda ns: _Store(),
    "new_sites": lambda ns: pa.table(
        {"device": [1, 2], "site": ["east", "west"], "weight": [2.0, 1.0]}
    ),
}
#: Names every block gets, as a user's session has them imported.
IMPORTS = {"tm": tm, "pa": pa}


def tm_spark() -> Any:
    import tidemark.spark

    return tidemark.spark


def _needs(marker: str) -> list[str]:
    m = re.fullmatch(r"needs (.*)", marker.strip())
    return [] if m is None else [n.strip() for n in m.group(1).split(",")]


#: What a block may ask for that is a test fixture's (a Kafka broker's address).
FIXTURES = {"bootstrap": lambda request: request.getfixturevalue("kafka").bootstrap}


def _uses_spark(code: str, needs: list[str]) -> bool:
    spark_names = {"df", "schema", "stream_df", "proc", "spark"}
    return "tidemark.spark" in code or "pyspark" in code or bool(spark_names & set(needs))


def _await_and_stop(spark: Any) -> None:
    """Each streaming query a block started: its first micro-batch done, then stopped."""
    for q in spark.streams.active:
        deadline = time.monotonic() + 120
        while q.isActive and q.lastProgress is None and time.monotonic() < deadline:
            time.sleep(0.2)
        err = q.exception()
        q.stop()
        assert err is None, err
        assert q.lastProgress is not None, f"query {q.name or q.id} made no progress"


def test_every_block_is_run_or_named_here() -> None:
    """Markers say what they mean: ``needs`` names what ``SUPPLIED`` has; a block
    left unrun is one of ``NOT_RUN``, and each of those is marked so."""
    unrun = {}
    for name, marker, _ in BLOCKS:
        if marker.startswith("not run:"):
            unrun[name] = marker
            continue
        assert marker == "" or marker.startswith("needs "), (name, marker)
        missing = [
            n for n in _needs(marker) if n not in SUPPLIED and n not in FIXTURES and n != "spark"
        ]
        assert not missing, (name, missing)
    assert set(unrun) == set(NOT_RUN)
    for name, why in NOT_RUN.items():
        assert why in unrun[name], (name, unrun[name])


@pytest.mark.parametrize(
    ("name", "marker", "code"),
    [b for b in BLOCKS if not b[1].startswith("not run:")],
    ids=[b[0] for b in BLOCKS if not b[1].startswith("not run:")],
)
def test_doc_block_runs(
    name: str,
    marker: str,
    code: str,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    needs = _needs(marker)
    ns: dict[str, Any] = {"__name__": f"doc_{name}"}
    if needs:
        ns.update(IMPORTS)  # a continuation: the reader's session has these
    if not _uses_spark(code, needs):
        for n in needs:
            ns[n] = SUPPLIED[n](ns)
        exec(compile(code, name, "exec"), ns)
        return
    from pyspark.sql import functions as F

    spark = request.getfixturevalue("spark")
    # Spark resolves the docs' relative paths in its JVM's working directory: the
    # block runs there, after what an earlier block left is gone.
    workdir = request.getfixturevalue("spark_workdir")
    for q in spark.streams.active:
        q.stop()
    for d in ("chk", "out", "data", "landing", "tables"):
        shutil.rmtree(workdir / d, ignore_errors=True)
    monkeypatch.chdir(workdir)
    ns.update(spark=spark, F=F)
    for n in needs:
        if n in FIXTURES:
            ns[n] = FIXTURES[n](request)
        elif n != "spark":
            ns[n] = SUPPLIED[n](ns)
    exec(compile(code, name, "exec"), ns)
    _await_and_stop(spark)
