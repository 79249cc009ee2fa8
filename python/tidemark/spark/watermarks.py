"""Per-source-partition progress computed inside Spark tasks."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from tidemark._duration import Duration, to_micros
from tidemark.spark._args import map_in_arrow
from tidemark.watermarks import PartitionedWatermarkTracker

__all__ = ["PARTITION_PROGRESS_SCHEMA", "observe_partitions"]

PARTITION_PROGRESS_SCHEMA = "source_id long, partition long, max_event_time long, watermark long"
"""Schema (Spark DDL) of :func:`observe_partitions`' output; times in epoch microseconds."""

_ARROW_SCHEMA = pa.schema(
    [
        ("source_id", pa.int64()),
        ("partition", pa.int64()),
        ("max_event_time", pa.int64()),
        ("watermark", pa.int64()),
    ]
)


def _observe_task(
    source_id: int,
    partition_column: str,
    event_time: str,
    event_time_type: str | None,
    max_lateness: int,
) -> Any:
    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        tracker = PartitionedWatermarkTracker()
        tracker.register_source(source_id, 0)
        for batch in batches:
            tracker.observe(
                batch,
                source_id,
                partition_column,
                event_time,
                max_lateness,
                event_time_type=event_time_type,
                add_missing=True,
            )
        rows = [(p, tracker.partition_state(source_id, p)) for (_, p) in tracker.partitions()]
        yield pa.record_batch(
            [
                pa.array([source_id] * len(rows), pa.int64()),
                pa.array([p for p, _ in rows], pa.int64()),
                pa.array([s["last_event_time"] for _, s in rows], pa.int64()),
                pa.array([s["watermark"] for _, s in rows], pa.int64()),
            ],
            schema=_ARROW_SCHEMA,
        )

    return run


def observe_partitions(
    df: Any,
    *,
    partition_column: str = "partition",
    event_time: str = "event_time",
    event_time_type: str | None = None,
    max_lateness: Duration = 0,
    source_id: int = 0,
) -> Any:
    """Per-source-partition event-time progress of a Spark DataFrame.

    Each Spark task runs a :class:`~tidemark.PartitionedWatermarkTracker` over its
    Arrow batches (``observe``) inside ``mapInArrow`` and reports, for every source
    partition it saw, the largest event time and the resulting watermark
    (``max_event_time - max_lateness``), in epoch microseconds. Feed the rows to a
    driver-side tracker with ``update_partition`` to combine them with idleness.

    Several tasks may report the same source partition: take the maximum per
    partition (``update_partition`` ignores lower values, so feeding every row works).

    Examples
    --------
    >>> rows = observe_partitions(df, max_lateness="5s").collect()   # doctest: +SKIP
    >>> for r in rows:                                               # doctest: +SKIP
    ...     tracker.update_partition(r.source_id, r.partition, r.watermark)
    """
    from tidemark._arrow import require_column

    # Named now, not by a failed Spark task.
    names = df.schema.fieldNames()
    for name in (partition_column, event_time):
        require_column(names, name)
    lateness = to_micros(max_lateness, "max_lateness")
    fn = _observe_task(source_id, partition_column, event_time, event_time_type, lateness)
    return map_in_arrow(df, fn, PARTITION_PROGRESS_SCHEMA)
