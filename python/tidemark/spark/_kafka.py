"""A Kafka micro-batch's offsets, read from its plan: where each partition of the
subscribed topics started and ended in this micro-batch, and the latest offsets Spark's
Kafka source saw when it planned it.

The micro-batch's DataFrame holds only the rows; a partition that sent none in it is
absent from them. Spark's Kafka source (``KafkaMicroBatchStream``) knows every partition
of the subscribed topics: the micro-batch's scan (``MicroBatchScanExec``) carries its
start and end offsets (``{"topic": {"0": 120, ...}}``), and the stream reports the latest
offsets it fetched from the brokers (``reportLatestOffset``), which is more than the end
offset where ``maxOffsetsPerTrigger`` throttled the micro-batch. This is what the
per-partition watermark needs to know the topic's partitions without the user typing
them, and to tell a partition that is quiet from one whose records are still waiting.

The plan is read as :func:`tidemark.spark._files.micro_batch_plan` reads it (through
the JVM, on the Spark releases it was checked against); anywhere else the answer is a
reason (a ``str``) and nothing is assumed. The latest offsets are known only where
Spark planned the micro-batch in this run: a micro-batch replayed after a restart was
planned by the run that died, and its latest offsets are ``None``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from tidemark.spark._files import micro_batch_plan, simple_name

__all__ = [
    "KafkaOffsets",
    "NotKafkaPartition",
    "kafka_offsets",
    "kafka_records",
    "partitions_known",
    "source_view",
]

_SCAN = "MicroBatchScanExec"
_KAFKA_STREAM = "KafkaMicroBatchStream"

#: (topic, partition) -> offset
Offsets = dict[tuple[str, int], int]


@dataclass(frozen=True)
class KafkaOffsets:
    """One Kafka micro-batch's offsets per (topic, partition)."""

    start: Offsets
    end: Offsets
    #: What Spark's source saw at the brokers when it planned the micro-batch; ``None``
    #: for a micro-batch planned by an earlier run (a replay after a restart).
    latest: Offsets | None

    def partitions(self) -> list[tuple[str, int]]:
        """Every partition of the subscribed topics, sorted."""
        return sorted(self.end)

    def unread(self, topic: str, partition: int) -> int | None:
        """Records of the partition that Spark saw and this micro-batch left for later
        (``maxOffsetsPerTrigger``); ``None`` where the latest offsets are unknown."""
        if self.latest is None:
            return None
        key = (topic, partition)
        return max(0, self.latest.get(key, 0) - self.end.get(key, 0))


def _offsets(offset_json: str) -> Offsets:
    return {
        (topic, int(p)): int(o)
        for topic, parts in json.loads(offset_json).items()
        for p, o in parts.items()
    }


def _nodes(plan: Any) -> list[tuple[str, Any]]:
    """Every node of a physical plan, with its class's simple name."""
    out = []
    todo = [plan]
    while todo:
        node = todo.pop()
        out.append((simple_name(node), node))
        it = node.children().iterator()
        while it.hasNext():
            todo.append(it.next())
    return out


def _kafka_scan(plan: Any, nodes: list[tuple[str, Any]] | None = None) -> Any:
    """The one Kafka scan of a micro-batch's physical plan (``nodes``: its nodes, if
    listed), else why not (a ``str``)."""
    scans = [n for name, n in (nodes or _nodes(plan)) if name == _SCAN]
    # One Kafka source; others (a heartbeat's) may sit beside it.
    kafka = [s for s in scans if simple_name(s.stream()) == _KAFKA_STREAM]
    if len(kafka) != 1:
        return f"the micro-batch reads {len(kafka)} Kafka sources"
    return kafka[0]


def _offsets_of(scan: Any) -> KafkaOffsets:
    latest = scan.stream().reportLatestOffset()
    return KafkaOffsets(
        start=_offsets(scan.start().json()),
        end=_offsets(scan.end().json()),
        latest=None if latest is None else _offsets(latest.json()),
    )


#: Physical operators that give at most one row per row they read.
_AT_MOST_A_ROW_EACH = frozenset(
    {
        "ProjectExec",
        "FilterExec",
        "MicroBatchScanExec",
        "WholeStageCodegenExec",
        "InputAdapter",
        "ColumnarToRowExec",
    }
)


def kafka_records(plan: Any) -> int | None:
    """The records a Kafka micro-batch reads (the sum of its offset ranges), known
    before it runs where Spark has no size estimate of the source; where its physical
    ``plan`` (see :func:`~tidemark.spark._files.micro_batch_plan`) is one Kafka scan
    under projections and filters, which give at most a row per record (a filter or a
    compacted topic gives fewer). ``None`` anywhere else."""
    if isinstance(plan, str):
        return None
    try:
        nodes = _nodes(plan)
        if any(name not in _AT_MOST_A_ROW_EACH for name, _ in nodes):
            return None
        scan = _kafka_scan(plan, nodes)
        if isinstance(scan, str):
            return None
        start, end = _offsets(scan.start().json()), _offsets(scan.end().json())
    except Exception:  # Spark internals it does not promise: no count, not an error
        return None
    return sum(max(0, e - start.get(k, 0)) for k, e in end.items())


def _expr_id(attributes: Any, name: str) -> int | None:
    it = attributes.iterator()
    while it.hasNext():
        a = it.next()
        if a.name() == name:
            return int(a.exprId().id())
    return None


def kafka_offsets(df: Any) -> KafkaOffsets | str:
    """The offsets of ``df``'s micro-batch (``foreachBatch``'s DataFrame) where it reads
    one Kafka source; else why not (a ``str``)."""
    plan = micro_batch_plan(df)
    if isinstance(plan, str):
        return plan
    try:
        scan = _kafka_scan(plan)
        return scan if isinstance(scan, str) else _offsets_of(scan)
    except Exception as e:  # Spark internals it does not promise
        return f"Spark's Kafka offsets could not be read ({type(e).__name__})"


class NotKafkaPartition(str):
    """Why not (:func:`source_view`): the micro-batch reads one Kafka source, but the
    partition column is not that source's own ``partition`` column."""


def source_view(plan: Any, column: str) -> tuple[list[int], list[int]] | str:
    """What a micro-batch's Kafka offsets tell the per-partition watermark (the core's
    ``SourceView``): every partition of the subscribed topics, and those with records
    this micro-batch left unread, where ``column`` of the micro-batch (its physical
    ``plan``, see :func:`~tidemark.spark._files.micro_batch_plan`) is the Kafka source's
    own ``partition`` column; else why not (a ``str``; :class:`NotKafkaPartition` where
    the column is another than that one). Partitions are numbers: several
    topics share them, as they share the column. Where Spark's latest offsets are
    unknown (a micro-batch planned by a run that died), every partition counts as
    waiting: none goes idle in it."""
    if isinstance(plan, str):
        return plan
    try:
        scan = _kafka_scan(plan)
        if isinstance(scan, str):
            return scan
        theirs = _expr_id(scan.output(), "partition")
        if theirs is None or _expr_id(plan.output(), column) != theirs:
            return NotKafkaPartition(
                f"column {column!r} is not the Kafka source's partition column"
            )
        offsets = _offsets_of(scan)
    except Exception as e:  # Spark internals it does not promise
        return f"Spark's Kafka offsets could not be read ({type(e).__name__})"
    every = sorted({p for _, p in offsets.end})
    if offsets.latest is None:
        return every, every
    return every, sorted({p for t, p in offsets.end if (offsets.unread(t, p) or 0) > 0})


def partitions_known(
    plan: Any, column: str, kafka_offsets: bool
) -> tuple[tuple[list[int], list[int]] | None, str]:
    """What a per-partition watermark knows of a micro-batch's source partitions
    besides its rows (:func:`source_view`), and where from (``"offsets"``, or
    ``"rows: "`` and why not). A column that is not the Kafka source's own
    ``partition`` is a :class:`ConfigError` unless ``kafka_offsets`` is ``False``."""
    from tidemark.errors import ConfigError

    got = source_view(plan, column)
    if isinstance(got, NotKafkaPartition) and kafka_offsets:
        raise ConfigError(
            f"per-partition watermark on Spark's Kafka source: {got} (renamed or "
            "computed), so the topic's partitions and their unread records cannot be "
            "known from the offsets: a partition that sends nothing would not hold the "
            "watermark, and one whose records wait could go idle. Select the source's "
            "`partition` column as it is and name it in partition_column, or pass "
            "StreamProcessor(kafka_offsets=False) to use the column's values knowingly"
        )
    if isinstance(got, str):
        return None, f"rows: {got}"
    return got, "offsets"
