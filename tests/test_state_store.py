"""The versioned state store behind ``StreamProcessor``, on a local path and on
pyarrow filesystem URIs (``file://``; ``mock://``, an in-memory filesystem that is not
the local one; ``s3://`` on a real S3-compatible server started for the test run)."""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs
import pytest

from tidemark.errors import StateCorruptedError
from tidemark.spark.state import StateStore


@pytest.fixture(params=["path", "file-uri", "mock-uri", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> StateStore:
    if request.param == "s3":
        return StateStore(request.getfixturevalue("s3_location"))
    return StateStore(
        {
            "path": str(tmp_path / "state"),
            "file-uri": (tmp_path / "state").as_uri(),
            "mock-uri": "mock:///state",
        }[request.param]
    )


def names(store: StateStore, rel_dir: str) -> list[str]:
    import pyarrow.fs as pafs

    sel = pafs.FileSelector(store.path(rel_dir), allow_not_found=True)
    return sorted(i.base_name for i in store.fs.get_file_info(sel))


def test_files_round_trip_replace_and_leave_no_temporary_files(store: StateStore) -> None:
    assert store.read("partitions/0/1.snap") is None
    assert store.read_json("driver/1.json") is None
    store.write("partitions/0/1.snap", b"first")
    store.write("partitions/0/1.snap", b"second")  # a replayed batch writes again
    assert store.read("partitions/0/1.snap") == b"second"
    store.write_json("driver/1.json", {"b": [1, None], "a": "x"})
    assert store.read_json("driver/1.json") == {"a": "x", "b": [1, None]}
    # Only the final names: every temporary file was renamed over its target.
    assert names(store, "partitions/0") == ["1.snap"]
    assert names(store, "driver") == ["1.json"]


def test_versions_sort_as_numbers_and_prune_both_ways(store: StateStore) -> None:
    for v in [2, 10, 9, 1]:
        store.write(f"partitions/3/{v}.snap", str(v).encode())
    store.write("partitions/3/9.progress", b"{}")
    store.write("partitions/3/x.snap", b"not a version")
    assert store.versions("partitions/3", ".snap") == [1, 2, 9, 10]
    assert store.versions("partitions/3", ".progress") == [9]
    assert store.versions("partitions/4", ".snap") == []  # no such directory
    store.prune("partitions/3", ".snap", 2)
    assert store.versions("partitions/3", ".snap") == [2, 9, 10]
    store.prune_after("partitions/3", ".snap", 9)
    assert store.versions("partitions/3", ".snap") == [2, 9]
    assert store.versions("partitions/3", ".progress") == [9]
    assert store.read("partitions/3/9.snap") == b"9"


def test_leftover_temporary_files_are_cleaned(store: StateStore) -> None:
    store.write("partitions/0/1.snap", b"kept")
    with store.fs.open_output_stream(store.path("partitions/0/.tmp-dead")) as f:
        f.write(b"a writer died here")
    store.clean_temp()
    assert names(store, "partitions/0") == ["1.snap"]


def test_unreadable_json_names_the_file(store: StateStore) -> None:
    store.write("driver/4.json", b"{not json")
    with pytest.raises(StateCorruptedError, match=r"driver/4\.json: not valid JSON"):
        store.read_json("driver/4.json")


@pytest.mark.parametrize("uri", [False, True])
def test_a_pickled_store_reopens_the_same_location(tmp_path: Path, uri: bool) -> None:
    """Tasks receive the store pickled: the copy opens the same files."""
    loc = (tmp_path / "s").as_uri() if uri else str(tmp_path / "s")
    store = StateStore(loc)
    store.write("meta.json", b"{}")
    copy = pickle.loads(pickle.dumps(store))
    assert copy.location == loc
    assert copy.read("meta.json") == b"{}"
    assert copy.path("meta.json") == str(tmp_path / "s" / "meta.json")


def test_a_directory_created_while_it_is_listed_has_no_versions(tmp_path: Path) -> None:
    # A directory another thread creates while it is listed (the stream's first write):
    # pyarrow raised FileNotFoundError in CI in spite of allow_not_found. A progress
    # poll then sees no batch yet, and a listing of the root nothing.
    store = StateStore(str(tmp_path / "state"))

    class Racing:
        def __init__(self, fs: Any) -> None:
            self._fs = fs

        def __getattr__(self, name: str) -> Any:
            return getattr(self._fs, name)

        def get_file_info(self, sel: Any) -> Any:
            raise FileNotFoundError(f"[Errno 2] Cannot list directory '{sel.base_dir}'")

    store.fs = Racing(store.fs)
    assert store.versions("driver", ".json") == []
    assert store.batch_progress() is None
    assert store.listing(recursive=True) == []


def test_an_object_store_is_written_in_place_with_no_directory_objects(s3_location: str) -> None:
    store = StateStore(s3_location)
    assert store.objects and not StateStore(s3_location.replace("s3://", "mock://")).objects
    store.write("partitions/0/1.snap", b"one")
    store.write("partitions/0/1.snap", b"two")  # a replay (or a duplicate task) again
    assert store.read("partitions/0/1.snap") == b"two"
    bucket = store.root.split("/", 1)[0]
    listed = store.fs.get_file_info(pafs.FileSelector(bucket, recursive=True))
    # The one object under its final name; no temporary object, no directory marker.
    assert [i.path for i in listed if i.type == pafs.FileType.File] == [
        store.path("partitions/0/1.snap")
    ]


_WRITER = """
import os, sys, threading, time
from tidemark.spark.state import StateStore
store = StateStore(sys.argv[1])
big = os.urandom(32 << 20)
threading.Timer(0.2, lambda: os.kill(os.getpid(), 9)).start()
store.write("partitions/0/2.snap", big)
print("finished", flush=True)
"""


def test_a_writer_killed_mid_upload_leaves_the_previous_version_alone(
    s3_location: str, tmp_path: Path
) -> None:
    """A task SIGKILLed while it uploads a snapshot: nothing appears under the new
    version's name (a multipart upload never completed is not an object), the previous
    version still reads, and the replayed batch writes the version whole."""
    import subprocess
    import sys

    store = StateStore(s3_location)
    store.write("partitions/0/1.snap", b"version 1")
    script = tmp_path / "writer.py"
    script.write_text(_WRITER)
    proc = subprocess.run([sys.executable, str(script), s3_location], capture_output=True)
    assert proc.returncode == -9 and b"finished" not in proc.stdout, proc
    assert store.read("partitions/0/2.snap") is None
    assert store.versions("partitions/0", ".snap") == [1]
    assert store.read_snapshot(0, 1) == b"version 1"
    store.write("partitions/0/2.snap", b"version 2")
    assert store.versions("partitions/0", ".snap") == [1, 2]


def test_duplicate_writers_of_a_version_leave_one_whole_copy(s3_location: str) -> None:
    """Two attempts of one task (a speculative duplicate, or a retry racing a task
    thought lost) write the same version at once: a reader sees one whole copy (the
    attempts compute the same bytes; a partial mix of two uploads never shows)."""
    from concurrent.futures import ThreadPoolExecutor

    data = os.urandom(12 << 20)
    stores = [StateStore(s3_location) for _ in range(4)]
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda st: st.write("partitions/1/5.snap", data), stores))
    assert stores[0].read("partitions/1/5.snap") == data
    assert stores[0].versions("partitions/1", ".snap") == [5]
