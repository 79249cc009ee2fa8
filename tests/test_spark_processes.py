"""What tidemark does to the processes Spark runs it in: a Python worker's import-time
objects frozen once (``tidemark.spark._args.settled``), and the JVMs of the tests mapping
the class archive ``make test`` made (``tidemark_tools.class_archive``)."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from tidemark.spark._args import map_in_arrow

pytestmark = pytest.mark.spark

ARCHIVE = Path(__file__).resolve().parents[1] / "target" / "jvm" / "spark.jsa"


def test_a_worker_freezes_its_imports_and_still_collects_what_a_task_leaves(spark: Any) -> None:
    def probe(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import gc
        import weakref

        rows = sum(b.num_rows for b in batches)

        class Node:
            pass

        node = Node()
        node.self = node  # type: ignore[attr-defined]  # a cycle: only the collector frees it
        gone = weakref.ref(node)
        del node
        gc.collect()
        yield pa.RecordBatch.from_pydict(
            {"rows": [rows], "frozen": [gc.get_freeze_count()], "collected": [gone() is None]}
        )

    df = spark.range(0, 100, 1, 2)
    out = map_in_arrow(df, probe, "rows long, frozen long, collected boolean").collect()
    assert sum(r.rows for r in out) == 100
    # pyarrow, pandas, PySpark and tidemark alone hold tens of thousands of objects.
    assert all(r.frozen > 10_000 for r in out), out
    assert all(r.collected for r in out), out


def test_the_sessions_jvm_maps_the_class_archive(spark: Any) -> None:
    if not ARCHIVE.is_file():
        pytest.skip("no class archive: `make test` (or make py-test) makes it")
    jcmd = shutil.which("jcmd")
    if jcmd is None:
        pytest.skip("no jcmd on the PATH")
    pid = spark._jvm.java.lang.ProcessHandle.current().pid()
    info = subprocess.run(
        [jcmd, str(pid), "VM.info"], capture_output=True, text=True, check=True
    ).stdout
    mapped = re.search(r"CDS archive\(s\) mapped at: \[[^\]]*\), size (\d+)", info)
    assert mapped, info[:2000]
    # The JDK's own archive is some 13 MB; with Spark's classes it is the archive's size more.
    assert int(mapped.group(1)) > ARCHIVE.stat().st_size
