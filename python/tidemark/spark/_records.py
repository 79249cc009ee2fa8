"""A micro-batch's driver record (``driver/<id>.json`` in the state store, see
:class:`~tidemark.spark.state.StateStore`): what the driver fixed before the batch's
job, written before the job so that Spark's replay of the batch sees the same inputs,
and, once the batch finished, what it produced (the next batch starts from it).

One record type per processor, its fields named; the JSON layout of each is its
``to_json`` / ``from_json`` alone. :class:`StreamRecord` is ``StreamProcessor``'s,
:class:`ReorderRecord` ``ReorderStream``'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar

_R = TypeVar("_R", bound="BatchRecord")


@dataclass
class BatchRecord:
    """The fields every processor's record has."""

    #: The micro-batch (Spark's batch id).
    batch_id: int
    #: The batch whose state this one restores (``None``: it starts from nothing).
    prev_batch: int | None = None
    #: An end-of-input flush (no rows; every open window closes).
    flush: bool = False
    #: A finished batch's counts (``last_progress``; ``None`` while it runs).
    progress: dict[str, Any] | None = None

    @property
    def finished(self) -> bool:
        """Whether the batch finished (a started one is replayed as it started)."""
        raise NotImplementedError

    def _started_json(self) -> dict[str, Any]:
        raise NotImplementedError

    def _finished_json(self) -> dict[str, Any]:
        raise NotImplementedError

    def to_json(self) -> dict[str, Any]:
        """The record as the state store keeps it."""
        doc: dict[str, Any] = {"batch_id": self.batch_id, "prev_batch": self.prev_batch}
        doc.update(self._started_json())
        if self.flush:
            doc["flush"] = True
        if self.finished:
            doc.update(self._finished_json())
        if self.progress is not None:
            doc["progress"] = self.progress
        return doc

    @classmethod
    def from_json(cls: type[_R], doc: dict[str, Any]) -> _R:
        raise NotImplementedError


@dataclass
class StreamRecord(BatchRecord):
    """``StreamProcessor``'s record. Started: the watermark combined from earlier
    batches, the stream's event time (idleness in event time), a clock reading, and
    the driver's scope state before the batch; finished: the scope state after it and
    the next batch's watermark and event time."""

    #: The clock as the batch began (milliseconds; never behind the batch before).
    clock_ms: int = 0
    #: The watermark the batch starts from (``None``: none yet).
    watermark: int | None = None
    #: The stream's event time as the batch begins (``None``: none yet).
    time: int | None = None
    #: The driver's scope state before the batch (``ScopeWatermark.to_bytes``, base64).
    scope: str | None = None
    #: The scope state after the batch (``None``: the batch did not finish).
    scope_after: str | None = None
    #: The watermark and event time the next batch starts from.
    next_watermark: int | None = None
    next_time: int | None = None
    #: A call without rows after this batch would change nothing (see the core's ``MicroBatch``).
    settled: bool = False
    #: What the batch's source offsets told of its partitions as it began (every
    #: partition, and those with records left unread: the core's ``SourceView``);
    #: ``None``: only what the rows show.
    source: tuple[list[int], list[int]] | None = None
    #: A new stream's first micro-batch: the lower and upper quartiles of its event
    #: times (epoch microseconds) as Spark estimated them, by which its rows are
    #: judged (the core's bounds on event times); recorded so that a replay, in any
    #: layout, decides the same. ``None``: not estimated (a string event time: the
    #: batch runs in one task, which finds them in its rows).
    quartiles: tuple[int, int] | None = None

    @property
    def finished(self) -> bool:
        return self.scope_after is not None

    def follows(self, batch_id: int, clock_ms: int, flush: bool) -> StreamRecord:
        """The started record of batch ``batch_id`` after this finished one."""
        return StreamRecord(
            batch_id=batch_id,
            prev_batch=self.batch_id,
            flush=flush,
            clock_ms=max(clock_ms, self.clock_ms),
            watermark=self.next_watermark,
            time=self.next_time,
            scope=self.scope_after,
        )

    def _started_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "clock_ms": self.clock_ms,
            "watermark": self.watermark,
            "time": self.time,
            "state": {"scope": self.scope},
        }
        if self.source is not None:
            doc["source"] = {"partitions": self.source[0], "waiting": self.source[1]}
        if self.quartiles is not None:
            doc["quartiles"] = list(self.quartiles)
        return doc

    def _finished_json(self) -> dict[str, Any]:
        return {
            "state_after": {"scope": self.scope_after},
            "next_watermark": self.next_watermark,
            "next_time": self.next_time,
            "settled": self.settled,
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> StreamRecord:
        after = doc.get("state_after")
        src = doc.get("source")
        q = doc.get("quartiles")
        return cls(
            batch_id=doc["batch_id"],
            prev_batch=doc.get("prev_batch"),
            flush=bool(doc.get("flush")),
            progress=doc.get("progress"),
            clock_ms=doc.get("clock_ms", 0),
            watermark=doc.get("watermark"),
            time=doc.get("time"),
            scope=(doc.get("state") or {}).get("scope"),
            scope_after=None if after is None else after["scope"],
            next_watermark=doc.get("next_watermark"),
            next_time=doc.get("next_time"),
            settled=bool(doc.get("settled")),
            source=None if src is None else (list(src["partitions"]), list(src["waiting"])),
            quartiles=None if q is None else (int(q[0]), int(q[1])),
        )


@dataclass
class ReorderRecord(BatchRecord):
    """``ReorderStream``'s record. Started: where the batch runs (a replay of a
    round-robin batch runs where its first run did); finished: the watermark every
    state partition released up to."""

    #: Where the batch runs (``"driver"``, ``"one task"``, ``"shuffled"``).
    layout: str | None = None
    #: Whether the batch finished (its released watermark may be ``None``).
    done: bool = False
    #: The stream's watermark after the batch: the minimum over partitions.
    released: int | None = None

    @property
    def finished(self) -> bool:
        return self.done

    def _started_json(self) -> dict[str, Any]:
        return {"layout": self.layout}

    def _finished_json(self) -> dict[str, Any]:
        return {"watermark": self.released}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> ReorderRecord:
        return cls(
            batch_id=doc["batch_id"],
            prev_batch=doc.get("prev_batch"),
            flush=bool(doc.get("flush")),
            progress=doc.get("progress"),
            layout=doc.get("layout"),
            done="watermark" in doc,
            released=doc.get("watermark"),
        )
