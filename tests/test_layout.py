"""Where a streaming micro-batch runs: ``tidemark.spark._layout``'s rules, without Spark.

Each test is a row of the table in the module's text (and the streaming guide's). The
Spark tests (``test_spark_pipeline.py``, ``test_spark_files.py``,
``test_spark_preaggregate.py``) check the same rules on real micro-batches.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from tidemark.spark._layout import (
    FILES_ON_DRIVER_BYTES,
    FOLD_RETRY,
    FOLD_RETRY_MAX,
    FOLD_SHARE,
    ON_DRIVER_BYTES,
    SINGLE_TASK_BYTES,
    History,
    Options,
    Stats,
    after,
    choose_fold,
    fits_one_task,
    place,
)

MB = 1 << 20
SMALL = Stats(size=MB, guess=MB)
LARGE = Stats(size=100 * MB, guess=100 * MB)
FILES = Stats(size=MB, guess=MB, files=True)
N = Options(num_partitions=8, read_files=True)


def test_one_task_takes_what_its_share_of_the_cores_would():
    assert fits_one_task(SINGLE_TASK_BYTES - 1, 2)
    assert not fits_one_task(SINGLE_TASK_BYTES, 2)
    assert fits_one_task(SINGLE_TASK_BYTES - 1, 1), "at least 2 cores"
    assert fits_one_task(SINGLE_TASK_BYTES // 8 - 1, 16)
    assert not fits_one_task(SINGLE_TASK_BYTES // 8, 16)
    assert not fits_one_task(None, 2), "no estimate: never one task"


def test_a_small_micro_batch_runs_in_the_driver_or_one_task_that_routes_its_rows():
    got = place(SMALL, History(), Options(num_partitions=8))
    assert (got.where, got.routes, got.files) == ("driver", True, False)
    got = place(SMALL, History(), Options(num_partitions=8, on_driver=False))
    assert (got.where, got.routes) == ("one task", True)
    above = Stats(size=ON_DRIVER_BYTES + 1, guess=ON_DRIVER_BYTES + 1)
    got = place(above, History(), Options(num_partitions=8))
    assert (got.where, got.routes) == ("one task", True)
    # Keys this process does not hash as Spark does: Spark tags the rows.
    foreign = Stats(size=MB, guess=MB, routable=False)
    got = place(foreign, History(), Options(num_partitions=8, on_driver=True))
    assert (got.where, got.routes) == ("one task", False)
    # An estimate of 0 (an input the optimizer knows is empty, or a Kafka micro-batch
    # of no records): Spark tags the rows.
    assert not place(Stats(size=0, guess=0), History(), Options(8, on_driver=False)).routes
    # Rows Spark cannot size (rate) that the last micro-batch's fit in one task: routed
    # (the optimizer sizes an input it knows is empty 0), never in the driver (no size).
    unsized = Stats(size=None, guess=MB, unsized=True)
    got = place(unsized, History(), Options(num_partitions=8))
    assert (got.where, got.routes) == ("one task", True)
    assert not place(replace(unsized, routable=False), History(), N).routes
    # No estimate read (Spark's API failed): maybe an input known empty, so tagged.
    assert not place(replace(unsized, unsized=False), History(), N).routes


def test_a_large_micro_batch_is_shuffled_unless_its_rows_are_spark_folds():
    got = place(LARGE, History(), N)
    assert (got.where, got.routes) == ("shuffled", False)
    folds = Stats(size=100 * MB, guess=100 * MB, folds=True)
    assert place(folds, History(), Options(num_partitions=8)).where == "one task"
    # Folds of rows Spark cannot size (Kafka, rate): one task routes them (the optimizer
    # sizes an input it knows is empty: 0); folds Spark sizes 0 it tags.
    unsized_folds = Stats(size=None, guess=None, folds=True, unsized=True)
    got = place(unsized_folds, History(), Options(num_partitions=8))
    assert (got.where, got.routes) == ("one task", True)
    assert not place(replace(unsized_folds, routable=False), History(), N).routes
    empty_folds = Stats(size=0, guess=0, folds=True)
    assert not place(empty_folds, History(), Options(8, on_driver=False)).routes
    assert place(LARGE, History(), Options(num_partitions=8, shuffle=False)).where == "one task"
    assert place(LARGE, History(), Options(num_partitions=1)).where == "one task"
    # Where Spark has no estimate the last micro-batch's rows go by (the guess).
    unsized = Stats(size=None, guess=100 * MB)
    assert place(unsized, History(), N).where == "shuffled"
    assert place(Stats(size=None, guess=None), History(), N).where == "shuffled"


def test_shuffle_true_shuffles_every_micro_batch_with_rows():
    got = place(SMALL, History(), Options(num_partitions=8, shuffle=True, read_files=True))
    assert (got.where, got.routes, got.files) == ("shuffled", False, False)
    assert got.why_not_files == "read_files=False, on_driver=False or shuffle=True"


@pytest.mark.parametrize(
    ("stats", "options", "why"),
    [
        (FILES, N, None),
        (SMALL, N, "not a bare scan of Parquet files"),
        (replace(SMALL, files_why="the query computes columns"), N, "the query computes"),
        (LARGE, N, "no size estimate, or above FILES_ON_DRIVER_BYTES"),
        (replace(LARGE, files=True), Options(8, on_driver=True, read_files=True), None),
        (Stats(size=None, guess=MB), N, "no size estimate, or above FILES_ON_DRIVER_BYTES"),
        (Stats(size=MB, guess=MB, routable=False), N, "key types the driver does not hash"),
        (Stats(size=MB, guess=MB, folds=True), N, "Spark's folds"),
        (SMALL, Options(8), "read_files=False"),
        (SMALL, Options(8, on_driver=False, read_files=True), "read_files=False"),
    ],
)
def test_a_file_stream_is_read_from_its_files_up_to_their_own_bound(
    stats: Stats, options: Options, why: str | None
):
    got = place(stats, History(), options)
    assert got.files == (why is None)
    assert why is None or (got.why_not_files or "").startswith(why)
    if why is None:
        # Between the driver's two bounds: read from the files (in the driver), else
        # a task's.
        assert got.driver and got.where == "driver"
        between = Stats(size=FILES_ON_DRIVER_BYTES, guess=FILES_ON_DRIVER_BYTES, files=True)
        assert place(between, History(), N).where == "driver"


def test_a_flush_runs_where_the_last_micro_batch_ran():
    flush = Stats(kind="flush")
    assert place(flush, History(), N).where == "shuffled", "no micro-batch yet"
    assert place(flush, History(last_shuffled=False), N).where == "one task"
    assert place(flush, History(last_on_driver=True, last_shuffled=False), N).where == "driver"
    assert place(flush, History(), Options(8, on_driver=True)).where == "driver"
    assert place(flush, History(last_on_driver=True), Options(8, on_driver=False)).where != "driver"
    assert place(flush, History(), Options(num_partitions=1)).where == "one task"
    assert not place(flush, History(), N).files


def test_a_quiet_micro_batch_runs_every_state_partition_together():
    quiet = Stats(kind="quiet")
    got = place(quiet, History(last_shuffled=True), N)
    assert (got.where, got.routes, got.files) == ("driver", True, False)
    got = place(quiet, History(), Options(num_partitions=8, on_driver=False))
    assert (got.where, got.routes) == ("one task", False)


def test_the_fold_is_taken_for_large_micro_batches_while_it_keeps_few_rows():
    fold, h = choose_fold(SMALL, History(), N)
    assert not fold and h == History(), "one task takes it raw, faster"
    fold, h = choose_fold(LARGE, History(), N)
    assert fold and h.raw_since == 0
    assert choose_fold(SMALL, History(), Options(8, shuffle=True))[0], "shuffle=True: any size"
    # The driver reads a micro-batch of 20 MiB from its files: faster than any fold.
    files = Stats(size=20 * MB, guess=20 * MB, cores=16, files=True)
    assert not fits_one_task(files.guess, files.cores)
    assert not choose_fold(files, History(), N)[0]
    assert choose_fold(replace(files, files=False), History(), N)[0], "not from files"
    assert choose_fold(files, History(), Options(8))[0], "read_files=False: folded"
    assert choose_fold(files, History(), Options(8, read_files=True, on_driver=False))[0]
    # A fold that kept more than FOLD_SHARE of its rows: large micro-batches run raw,
    # and after FOLD_RETRY of them the fold is tried again; after each such fold that
    # keeps too many again, twice as many run raw (up to FOLD_RETRY_MAX).
    h = History().folded(FOLD_SHARE * 2)
    assert h.fold_misses == 1
    gaps = []
    for _ in range(7):
        raw = 0
        while not (got := choose_fold(LARGE, h, N))[0]:
            h, raw = got[1], raw + 1
        gaps.append(raw)
        h = got[1].folded(FOLD_SHARE * 2)
    assert gaps == [FOLD_RETRY * 2**i for i in range(5)] + [FOLD_RETRY_MAX] * 2
    assert FOLD_RETRY_MAX == FOLD_RETRY * 16
    # A fold that kept few rows again: folded from then on, the count starts over.
    h = h.folded(FOLD_SHARE / 2)
    assert h.fold_misses == 0 and choose_fold(LARGE, h, N)[0]
    assert not choose_fold(Stats(kind="flush"), History(), N)[0]
    assert not choose_fold(Stats(kind="quiet"), History(), N)[0]


def test_the_history_follows_micro_batches_with_rows_only():
    small = place(SMALL, History(), N)
    h = after(History(), small, SMALL, driver=True)
    assert (h.last_on_driver, h.last_shuffled) == (True, False)
    large = place(LARGE, h, N)
    h = after(h, large, LARGE, driver=False)
    assert (h.last_on_driver, h.last_shuffled) == (False, True)
    for kind in ("flush", "quiet"):
        stats = Stats(kind=kind)
        assert after(h, place(stats, h, N), stats, driver=True) == h


def test_a_stream_read_from_its_files_keeps_raw_state_by_default():
    # The driver reads a bare Parquet scan from its files, faster raw than any fold
    # (measured at 1M rows: 0.23-0.30 s raw against 0.47-0.56 s through the folding
    # pipeline), unless read_files=False, on_driver=False or shuffle=True.
    assert Options(8, read_files=True).reads_files(True)
    assert not Options(8, read_files=True).reads_files(False), "not a bare file scan"
    assert not Options(8).reads_files(True)
    assert not Options(8, read_files=True, on_driver=False).reads_files(True)
    assert not Options(8, shuffle=True, read_files=True).reads_files(True)
    assert Options(8, shuffle=False, read_files=True, on_driver=True).reads_files(True)
