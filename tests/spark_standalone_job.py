"""Runs 500,000-row micro-batches through StreamProcessor's executor path on a Spark
standalone cluster (a master and two one-core workers started with ``spark-class``, see
``benches/standalone.py``) and checks that every micro-batch keeps both executors busy
and that the windows are exact (used by
tests/test_spark_pipeline.py::test_standalone_cluster_uses_both_executors).

Two runs: the rows shuffled to 4 state partitions (``on_driver=False``; 500,000 rows are
past the size that runs in one task), and Spark folding them first
(``preaggregate=True``); both give Spark's own batch ``groupBy``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent.parent / "benches"))

import profile_executor as profile
import standalone
from tidemark.spark import StreamProcessor

ROWS = 500_000  # per micro-batch
BATCHES = 2
TENANTS = 2_000


def events(spark: Any, batch: int) -> Any:
    """Micro-batch ``batch``: rows computed by the JVM (no file), 100 us apart."""
    return profile.events(spark.range(batch * ROWS, (batch + 1) * ROWS, 1, 4), "id", TENANTS)


def run(spark: Any, state: Path, preaggregate: bool) -> list[tuple]:
    got: list[tuple] = []

    def sink(df: Any, _batch_id: int) -> None:
        got.extend((r.tenant, r.window_start, r.n, r.total) for r in df.collect())

    proc = StreamProcessor(
        profile.pipeline(),
        str(state),
        num_partitions=4,
        sink=sink,
        on_driver=False,
        read_files=False,
        preaggregate=preaggregate,
    )
    for b in range(BATCHES):
        df = events(spark, b)
        before = standalone.task_seconds(spark)
        proc(df, b)
        after = standalone.task_seconds(spark)
        busy = {e: after[e] - before.get(e, 0.0) for e in after}
        total = sum(busy.values())
        assert len(busy) == 2 and min(busy.values()) > 0.1 * total, (
            f"micro-batch {b}: task seconds per executor {busy}"
        )
        progress = proc.last_progress
        assert progress is not None and progress["input_rows"] == ROWS, progress
        assert progress["layout"] == ("one task" if preaggregate else "shuffled"), progress
        assert progress["read"] == ("folds" if preaggregate else "spark"), progress
        print(f"preaggregate={preaggregate} batch {b}: task seconds per executor {busy}")
    proc.flush(spark, df.schema)
    return sorted(got)


def main(tmp: str) -> None:
    with standalone.cluster(workers=2, cores=1) as c:
        spark = standalone.session(c.url, executors=2)
        from pyspark.sql import functions as F

        everything = events(spark, 0)
        for b in range(1, BATCHES):
            everything = everything.union(events(spark, b))
        want = sorted(
            (r.tenant, r.window.start, r.n, r.total)
            for r in everything.groupBy(F.window("ts", "10 seconds"), "tenant")
            .agg(F.count("*").alias("n"), F.sum("amount").alias("total"))
            .collect()
        )
        raw = run(spark, Path(tmp) / "raw", preaggregate=False)
        assert raw == want, (len(raw), len(want))
        folded = run(spark, Path(tmp) / "folded", preaggregate=True)
        assert folded == want, (len(folded), len(want))
        spark.stop()
    print("STANDALONE OK", len(want), "windows")


if __name__ == "__main__":
    main(sys.argv[1])
