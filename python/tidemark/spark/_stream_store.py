"""``StreamProcessor``'s steps on its state store, around a micro-batch: its started
record (:func:`prepare`), every state partition's report combined (:func:`summarize`)
into the watermark the next batch begins with (:func:`combine`), and the
state moved to another number of state partitions (:func:`rescale`). The records are
:class:`~tidemark.spark._records.StreamRecord`; the paths are the store's."""

from __future__ import annotations

import base64
from typing import Any

from tidemark import _native
from tidemark.errors import ConfigError, StateCorruptedError
from tidemark.pipeline import Pipeline
from tidemark.spark._args import spark_hash_matches
from tidemark.spark._records import StreamRecord
from tidemark.spark.state import StateStore, stream_goes_on_after_flush


def prepare(
    store: StateStore,
    batch_id: int,
    flush: bool,
    start_fresh: bool,
    clock_ms: int,
    source: tuple[list[int], list[int]] | None = None,
) -> StreamRecord:
    """Batch ``batch_id``'s started record: written before its job, from the last
    finished batch (reused as it is when the batch is Spark's replay); ``source``: what
    its source's offsets tell of its partitions (see ``StreamRecord.source``)."""
    replay: StreamRecord | None = store.replayed(batch_id, flush, start_fresh)
    if replay is not None:
        return replay
    earlier = [v for v in store.record_ids() if v < batch_id]
    prev: StreamRecord | None = store.read_record(earlier[-1]) if earlier else None
    if prev is not None and not prev.finished:
        raise StateCorruptedError(
            f"{store.path(store.record_file(earlier[-1]))}: batch {earlier[-1]} "
            "never finished and a later batch started; the state store is inconsistent"
        )
    if prev is not None and prev.flush and not flush:
        # The flush emitted every open window: going on from its state could emit
        # a window twice. Rows after it belong to the flush's own batch id (a
        # restarted query reuses it, and goes on from the batch before the flush).
        raise ConfigError(
            f"batch {batch_id} comes after batch {prev.batch_id}, an end-of-input "
            "flush that emitted every open window: a flushed stream takes no more "
            f"batches. A query that runs again after a flush goes on as batch "
            f"{prev.batch_id} (the next batch id Spark gives it), or start over "
            "in a new state_location"
        )
    if prev is None:
        store.start(batch_id, start_fresh)
        rec = StreamRecord(batch_id=batch_id, flush=flush, clock_ms=max(clock_ms, 0))
    else:
        rec = prev.follows(batch_id, clock_ms, flush)
    rec.source = source
    store.write_record(rec)
    return rec


def summarize(pipe: Pipeline, rec: StreamRecord, token: str, reports: list[bytes]) -> Any:
    """The batch as every state partition reported it (``_native.summarize_batch``: the
    next watermark, the scope after it, the row counts), or ``None`` if a report is
    another run's than ``token``. Starts from the scope recorded before the batch, so a
    replayed batch gives the same result."""
    scope = None if rec.scope is None else base64.b64decode(rec.scope)
    return _native.summarize_batch(pipe._config, reports, token, scope, rec.clock_ms, rec.source)


def combine(rec: StreamRecord, summary: dict[str, Any]) -> None:
    """Records the next batch's watermark, event time and scope from the batch's
    ``summary`` (see :func:`summarize`)."""
    rec.scope_after = base64.b64encode(summary["scope"]).decode()
    # A flush reads no rows: the watermark stays where it was (nothing follows it).
    rec.next_watermark = rec.watermark if rec.flush else summary["watermark"]
    rec.next_time = summary["time"]


def rescale(
    store: StateStore,
    pipe: Pipeline,
    fields: Any,
    old: int,
    new: int,
    batch_id: int,
    flush: bool,
    start_fresh: bool,
) -> None:
    """Redistributes the last committed state version from ``old`` state partitions
    to ``new`` (keys routed by Spark's hash, as the next batch's ``repartition``
    routes their rows). Later versions belong to the old layout and are dropped. When
    Spark replays batch ``batch_id`` and it had committed here (the driver died
    before Spark recorded it), the version redistributed is the one the batch started
    from, and the batch's own output is dropped with the rest of the old layout: it
    runs again from that base, as any replay does. ``fields``: the batch's schema
    (its key columns' types decide whether keys can be routed as Spark's shuffle
    routes their rows)."""
    if new > 1 and not spark_hash_matches(fields, pipe.key):
        # Routed by the wrong hash, a key's state would sit in one state partition
        # while Spark's shuffle sends its rows to another.
        raise ConfigError(
            f"{store.path('meta.json')}: the state has {old} state partitions, and "
            f"moving it to {new} routes each key by Spark's hash(), which tidemark "
            "reproduces for numbers, booleans, dates, timestamps, decimals, binary and "
            "strings without a collation, not for key columns "
            f"{', '.join(pipe.key)} as typed here: keep num_partitions={old}, use "
            "num_partitions=1, or start over in a new state_location"
        )
    committed = store.finished_ids()
    if not committed:
        return
    b = committed[-1]
    rec: StreamRecord | None = store.read_record(batch_id)
    if rec is not None and b >= batch_id:
        # A batch with rows after a flush starts, as a replay does, from the batch
        # before. Otherwise another query's state is refused before anything moves
        # (with start_fresh it is discarded: nothing left to move).
        if not stream_goes_on_after_flush(rec, flush) and (
            store.replayed(batch_id, flush, start_fresh) is None
        ):
            return
        base = rec.prev_batch
        if base is None:  # the replayed batch started from nothing
            for p in range(max(old, new)):
                store.prune_snapshots_after(p, batch_id - 1)
            return
        b = base
    for p in range(max(old, new)):
        store.prune_snapshots_after(p, b)
    snaps = []
    for p in range(old):
        data = store.read_snapshot(p, b)
        if data is None:
            raise StateCorruptedError(
                f"{store.path(store.snapshot_file(p, b))}: missing; cannot "
                f"rescale from {old} to {new} state partitions"
            )
        snaps.append(data)
    moved = _native.reshard_snapshots(pipe._config, snaps, new, "spark")
    for p, data in enumerate(moved):
        store.write_snapshot(p, b, data, None)
    for p in range(new, old):
        store.prune_snapshots_before(p, b + 1)
