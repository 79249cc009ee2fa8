"""A versioned state store on any pyarrow filesystem.

Layout under the state location::

    meta.json                       pipeline fingerprint, number of state partitions
    driver/<batch_id>.json          per micro-batch: its driver record (see
                                    :mod:`tidemark.spark._records`: written before the
                                    job, completed after it; reused when a batch is
                                    replayed)
    partitions/<p>/<batch_id>.snap  operator snapshot of state partition p after a batch
    partitions/<p>/<batch_id>.progress
                                    its progress of the batch, tagged with the
                                    driver run that wrote it: StreamProcessor's the
                                    core's Report bytes (event times, counts),
                                    ReorderStream's JSON (watermark, counts)

Every file is written atomically. On a file system (local, HDFS): to a temporary name,
then renamed over the final one. On an object store (S3 and S3-compatible servers, GCS,
Azure Blob): straight to its final name, which a reader sees whole or not at all (a
PUT, or a multipart upload completed when the file closes; a writer killed before that
leaves nothing under the name); no rename, no directory objects. Old versions are
pruned after ``retention`` batches.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import uuid
from collections.abc import Iterator
from typing import Any

import pyarrow.fs as pafs

from tidemark.errors import StateCorruptedError
from tidemark.spark._records import BatchRecord

__all__ = ["StateStore"]

#: Snapshot, driver-record and progress file suffixes in the store.
SNAP = ".snap"
JSON = ".json"
PROGRESS = ".progress"


class StateStore:
    """Versioned snapshots under one location (a local path or a pyarrow URI).
    ``record``: the type of the driver records this store keeps (its processor's)."""

    def __init__(
        self, location: str | os.PathLike[str], record: type[BatchRecord] = BatchRecord
    ) -> None:
        if not isinstance(location, (str, os.PathLike)):
            raise TypeError(
                "state_location must be a path or a filesystem URI (str or os.PathLike), "
                f"got {type(location).__name__}"
            )
        location = os.fspath(location)
        if "://" in location:
            fs, root = pafs.FileSystem.from_uri(location)
        else:
            fs, root = pafs.LocalFileSystem(), os.path.abspath(location)
        # Resolved here, on the driver: pickled to executors, a relative path would
        # be read against each executor's own working directory.
        self.location = location if "://" in location else root
        self.fs: Any = fs
        self.root = root.rstrip("/")
        # A local store answers each read in microseconds (no request to overlap).
        self.is_local = isinstance(fs, pafs.LocalFileSystem)
        self.objects = is_object_store(fs)
        self.record = record

    def __getstate__(self) -> dict[str, Any]:
        return {"location": self.location, "record": self.record}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["location"], state["record"])  # type: ignore[misc]

    def path(self, *parts: str) -> str:
        """The full path of a file in the store."""
        return "/".join([self.root, *parts])

    def write(self, rel: str, data: bytes) -> None:
        """Writes ``data`` to ``rel`` atomically: an object store's object straight
        away, else a temporary file renamed over it."""
        final = self.path(rel)
        if self.objects:
            with self.fs.open_output_stream(final) as f:
                f.write(data)
            return
        parent = final.rsplit("/", 1)[0]
        self.fs.create_dir(parent, recursive=True)
        tmp = f"{parent}/.tmp-{uuid.uuid4().hex}"
        with self.fs.open_output_stream(tmp) as f:
            f.write(data)
        self.fs.move(tmp, final)

    def read(self, rel: str) -> bytes | None:
        """The bytes of ``rel``, or None if it does not exist."""
        p = self.path(rel)
        info = self.fs.get_file_info(p)
        if info.type == pafs.FileType.NotFound:
            return None
        # A random-access file reads its known size in one call; a stream reads in
        # chunks it then joins (twice as slow for a 100 MB snapshot).
        with self.fs.open_input_file(p) as f:
            data: bytes = f.read()
        return data

    def write_json(self, rel: str, obj: Any) -> None:
        """Writes a JSON document atomically."""
        self.write(rel, json.dumps(obj, sort_keys=True).encode())

    def read_json(self, rel: str) -> Any:
        """Reads a JSON document (None if missing; StateCorruptedError if unreadable)."""
        data = self.read(rel)
        if data is None:
            return None
        try:
            return json.loads(data)
        except ValueError as e:
            raise StateCorruptedError(f"{self.path(rel)}: not valid JSON ({e})") from None

    def listing(self, *rel_dir: str, recursive: bool = False) -> list[pafs.FileInfo]:
        """What ``rel_dir`` (the root without it) holds: nothing where it is missing. A
        directory another thread creates while it is listed (the stream's first write,
        while a caller polls progress) made pyarrow raise ``FileNotFoundError`` in CI in
        spite of ``allow_not_found``: it was missing when listed, so it holds nothing."""
        sel = pafs.FileSelector(self.path(*rel_dir), recursive=recursive, allow_not_found=True)
        try:
            return list(self.fs.get_file_info(sel))
        except FileNotFoundError:
            return []

    def versions(self, rel_dir: str, suffix: str) -> list[int]:
        """Batch ids that have a file ``<id><suffix>`` in ``rel_dir``, sorted."""
        out = []
        for info in self.listing(rel_dir):
            name = info.base_name
            if name.endswith(suffix) and name[: -len(suffix)].isdigit():
                out.append(int(name[: -len(suffix)]))
        return sorted(out)

    def prune(self, rel_dir: str, suffix: str, keep_from: int) -> None:
        """Deletes versions older than ``keep_from``."""
        for v in self.versions(rel_dir, suffix):
            if v < keep_from:
                self.fs.delete_file(self.path(rel_dir, f"{v}{suffix}"))

    def prune_after(self, rel_dir: str, suffix: str, keep_until: int) -> None:
        """Deletes versions newer than ``keep_until``."""
        for v in self.versions(rel_dir, suffix):
            if v > keep_until:
                self.fs.delete_file(self.path(rel_dir, f"{v}{suffix}"))

    # --- the layout: every path of the store is built here ------------------------

    @staticmethod
    def snapshot_file(p: int, batch_id: int | None) -> str:
        """State partition ``p``'s snapshot after batch ``batch_id`` (relative path)."""
        return f"partitions/{p}/{batch_id}{SNAP}"

    def read_snapshot(self, p: int, batch_id: int) -> bytes | None:
        """State partition ``p``'s snapshot after batch ``batch_id`` (``None``: none)."""
        return self.read(self.snapshot_file(p, batch_id))

    def snapshot_to_restore(self, p: int, version: int | None) -> bytes | None:
        """State partition ``p``'s snapshot of batch ``version``, the one a batch
        restores (``None`` for a batch with no version before it); a missing one is a
        :class:`StateCorruptedError` naming the file."""
        if version is None:
            return None
        data = self.read_snapshot(p, version)
        if data is None:
            raise StateCorruptedError(
                f"{self.path(self.snapshot_file(p, version))}: missing; state partition {p} "
                f"has no version {version} to restore (restore the file, or start over in a "
                "new state_location)"
            )
        return data

    @contextlib.contextmanager
    def restoring(self, p: int, version: int | None) -> Iterator[None]:
        """Names the snapshot file in a :class:`StateCorruptedError` its restore raises
        (damaged bytes, another format or pipeline)."""
        try:
            yield
        except StateCorruptedError as e:
            raise StateCorruptedError(f"{self.path(self.snapshot_file(p, version))}: {e}") from None

    def write_snapshot(self, p: int, batch_id: int, data: bytes, retention: int | None) -> None:
        """Writes state partition ``p``'s snapshot after batch ``batch_id``; with a
        ``retention``, prunes its versions older than the last ``retention``."""
        self.write(self.snapshot_file(p, batch_id), data)
        if retention is not None:
            self.prune(f"partitions/{p}", SNAP, batch_id - retention + 1)

    def prune_snapshots_after(self, p: int, keep_until: int) -> None:
        """Deletes state partition ``p``'s snapshots after batch ``keep_until``."""
        self.prune_after(f"partitions/{p}", SNAP, keep_until)

    def prune_snapshots_before(self, p: int, keep_from: int) -> None:
        """Deletes state partition ``p``'s snapshots before batch ``keep_from``."""
        self.prune(f"partitions/{p}", SNAP, keep_from)

    def read_progress(self, p: int, batch_id: int) -> bytes | None:
        """State partition ``p``'s report of batch ``batch_id`` (``None``: none)."""
        return self.read(f"partitions/{p}/{batch_id}{PROGRESS}")

    def read_reports(self, batch_id: int, n: int) -> list[bytes] | None:
        """Every state partition's report of batch ``batch_id`` (of ``n``), or ``None``
        if one has none. On a remote store the reports are read concurrently (one
        request each); local files in turn (a thread pool would cost more than the
        reads)."""
        from concurrent.futures import ThreadPoolExecutor

        def read(p: int) -> bytes | None:
            return self.read_progress(p, batch_id)

        if n == 1 or self.is_local:
            reports = [read(p) for p in range(n)]
        else:
            with ThreadPoolExecutor(max_workers=min(n, 16)) as pool:
                reports = list(pool.map(read, range(n)))
        got = [r for r in reports if r is not None]
        return got if len(got) == n else None

    def write_progress(self, p: int, batch_id: int, report: bytes, retention: int) -> None:
        """Writes state partition ``p``'s report of batch ``batch_id`` (the core's bytes),
        pruning its versions older than the last ``retention``."""
        self.write(f"partitions/{p}/{batch_id}{PROGRESS}", report)
        self.prune(f"partitions/{p}", PROGRESS, batch_id - retention + 1)

    @staticmethod
    def record_file(batch_id: int) -> str:
        """Batch ``batch_id``'s driver record (relative path)."""
        return f"driver/{batch_id}{JSON}"

    def record_ids(self) -> list[int]:
        """The batch ids with a driver record, sorted."""
        return self.versions("driver", JSON)

    def read_record(self, batch_id: int) -> Any:
        """Batch ``batch_id``'s driver record (``None``: none)."""
        doc = self.read_json(self.record_file(batch_id))
        return None if doc is None else self.record.from_json(doc)

    def write_record(self, record: BatchRecord, retention: int | None = None) -> None:
        """Writes a batch's driver record; with a ``retention``, prunes the records
        older than the last ``retention``."""
        self.write_json(self.record_file(record.batch_id), record.to_json())
        if retention is not None:
            self.prune("driver", JSON, record.batch_id - retention + 1)

    def last_record(self) -> Any:
        """The last batch's driver record (``None``: no batch yet)."""
        done = self.record_ids()
        return self.read_record(done[-1]) if done else None

    def finished_ids(self, before: int | None = None) -> list[int]:
        """The batch ids whose record says they finished (those before ``before``)."""
        ids = self.record_ids()
        if before is not None:
            ids = [v for v in ids if v < before]
        return [v for v in ids if (rec := self.read_record(v)) is not None and rec.finished]

    def replayed(self, batch_id: int, flush: bool, start_fresh: bool) -> Any:
        """Batch ``batch_id``'s driver record when this run is Spark's replay of it,
        else ``None`` (a new batch). Spark replays only its last batch, so a record
        with later batches recorded after it belongs to another query (a new
        checkpoint location starts from batch 0 again): a :class:`StateCorruptedError`
        rather than the new query's rows judged against the other query's recorded
        watermarks, or with ``start_fresh`` that query's state is discarded."""
        rec = self.read_record(batch_id)
        if rec is None or stream_goes_on_after_flush(rec, flush):
            return None
        later = [v for v in self.record_ids() if v > batch_id]
        if later and start_fresh:
            self.discard_batches()
            return None
        if later:
            raise StateCorruptedError(
                f"{self.path('driver')}: batch {batch_id} runs again, but this state "
                f"location holds batches up to {later[-1]}. Spark replays only its last "
                "batch, so this is another query (a new checkpoint location starts from "
                "batch 0): give each query its own state_location, delete this one, or "
                "pass start_fresh=True to discard its state"
            )
        return rec

    def start(self, batch_id: int, start_fresh: bool) -> None:
        """Called for a new batch with no finished batch before it: state another query
        left here (batches after this one, or any state version but this batch's own)
        is a :class:`StateCorruptedError`, or with ``start_fresh`` discarded."""
        later = [v for v in self.record_ids() if v > batch_id]
        stale = later or [v for v in self.versions("partitions/0", SNAP) if v != batch_id]
        if not stale:
            return
        if not start_fresh:
            raise StateCorruptedError(
                f"{self.path('driver')}: no finished batch before batch {batch_id} but "
                "state exists, from another query (pass start_fresh=True to discard it)"
            )
        self.discard_batches()

    def discard_batches(self) -> None:
        """Deletes every batch's driver record and state version (``start_fresh``);
        ``meta.json`` stays."""
        for rel in ("driver", "partitions"):
            for info in self.listing(rel, recursive=True):
                if info.type == pafs.FileType.File:
                    self.fs.delete_file(info.path)

    def batch_progress(self, batch_id: int | None = None) -> dict[str, Any] | None:
        """The ``progress`` of a finished batch's driver record (``driver/<id>.json``):
        batch ``batch_id``, or the last finished one; ``None`` if it did not finish
        or was pruned."""
        done = self.record_ids()
        if batch_id is not None:
            done = [v for v in done if v == batch_id]
        for v in reversed(done):
            rec = self.read_record(v)
            if rec is not None and rec.progress is not None:
                return dict(rec.progress)
        return None

    def clean_temp(self) -> None:
        """Deletes temporary files left by writers that died mid-write (call when no
        task is running)."""
        for info in self.listing(recursive=True):
            if info.type == pafs.FileType.File and info.base_name.startswith(".tmp-"):
                self.fs.delete_file(info.path)


def is_object_store(fs: Any) -> bool:
    """Whether ``fs`` stores objects (a write appears whole or not at all, a rename is
    a copy): pyarrow's S3, GCS and Azure file systems."""
    kinds = tuple(
        k
        for name in ("S3FileSystem", "GcsFileSystem", "AzureFileSystem")
        if (k := getattr(pafs, name, None)) is not None
    )
    return isinstance(fs, kinds)


def stream_goes_on_after_flush(rec: BatchRecord, flush: bool) -> bool:
    """Whether a batch with rows runs under the id of a recorded end-of-input flush
    (``rec``): the query ran again, with new input, after ``flush()``. Such a batch is
    not the flush's replay: it follows the batch before the flush, whose state it
    restores, and its record replaces the flush's. The windows the flush closed early
    come again when they close (with any rows added since), so an idempotent sink ends
    with their full counts; nothing is lost, whereas restoring the flushed state would
    drop open windows' rows and a later flush replaying this id would drop the batch's
    own."""
    return rec.flush and not flush


@contextlib.contextmanager
def state_errors_surface() -> Iterator[None]:
    """Re-raises a :class:`StateCorruptedError` that a Spark task raised (Spark wraps
    it in its own exception) as ``tidemark.StateCorruptedError`` on the driver, with
    the task's message: the file and what is wrong with it."""
    try:
        yield
    except StateCorruptedError:
        raise
    except Exception as e:
        m = re.search(r"StateCorruptedError: (.+)", str(e))
        if m is None:
            raise
        raise StateCorruptedError(m.group(1).strip()) from e
