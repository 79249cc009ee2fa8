"""Where a streaming micro-batch runs: pure functions of the batch's statistics, the
processor's history and its options (no Spark call), so that every rule is in one place
and is tested without Spark (``tests/test_layout.py``).

The caller (``StreamProcessor``, ``ReorderStream``) measures a micro-batch once
(:class:`Stats`: Spark's size estimate, the size the layout goes by, the cluster's cores,
whether this process routes its keys as Spark's shuffle does), asks :func:`choose_fold`
whether Spark folds it first (``preaggregate``), then :func:`place` where it runs, and
records what ran in its :class:`History`. The table of the streaming guide ("Where a
micro-batch runs") is this module's rules:

=================  ============================================================
micro-batch        runs
=================  ============================================================
pinned             where its first run did: a replayed micro-batch whose rows are
                   dealt out in turn (a reorder without ``partition_by``), which
                   Spark's shuffle deals otherwise than the driver and one task
quiet (no rows)    in the driver (one task with ``on_driver=False``), every state
                   partition together
flush              as the last micro-batch did: in the driver after one that ran
                   there (or ``on_driver=True``), one task after a one-task one,
                   else one task per state partition
first rows         one task, or the driver as for a small one, where Spark cannot
                   estimate their event times' quartiles (a string event time): a new
                   stream's first rows judge each other (the bounds on event times)
``shuffle=True``   one task per state partition (rows shuffled to them)
small              one task (``fits_one_task``) that routes the rows itself where
                   its hash is Spark's; in the driver (``on_driver`` default) up to
                   ``ON_DRIVER_BYTES``, or from its Parquet files up to
                   ``FILES_ON_DRIVER_BYTES`` (``read_files``)
large              one task per state partition; folded by Spark first where the
                   processor keeps folds (``preaggregate``) while folds keep at
                   most ``FOLD_SHARE`` of the rows (then raw for ``FOLD_RETRY``
                   large micro-batches, more after each fold that kept too many)
=================  ============================================================
"""

from __future__ import annotations

from dataclasses import dataclass, replace

#: On 2 cores, an input (or micro-batch) Spark estimates below this many bytes runs in
#: one task with no shuffle by default: a stage less, and too little work to gain from
#: parallel tasks (measured: one task stays faster up to about 20 MB of Parquet). More
#: cores gain more from parallel tasks: the bound shrinks in proportion
#: (:func:`fits_one_task`).
SINGLE_TASK_BYTES = 16 << 20

#: Spark's size estimate of a streaming micro-batch at most which a
#: :class:`~tidemark.spark.StreamProcessor` runs it in the driver's process by default,
#: if it would run in one task (its rows come back as Arrow; no Python worker takes
#: part). A cap on what the driver holds at once: Spark estimates a Parquet file by
#: its compressed size.
ON_DRIVER_BYTES = 8 << 20

#: The same for a micro-batch the driver reads from its Parquet files (see
#: ``StreamProcessor(read_files=...)``), shuffled or not: pyarrow reads the files
#: several times faster than Spark hands rows to a task, so the driver outruns the
#: tasks on small machines well beyond ``ON_DRIVER_BYTES``; the cap bounds what it
#: holds (about 4 million rows of a key, a timestamp and a number).
FILES_ON_DRIVER_BYTES = 32 << 20

#: The fold (``preaggregate``): a large micro-batch is folded while the last fold kept at
#: most this share of its input rows (10 rows per key and pane); else it runs raw, with
#: the fold tried again after ``FOLD_RETRY`` such micro-batches, twice as many after
#: each fold tried again that kept too many (up to ``FOLD_RETRY_MAX``): on a stream
#: whose keys have few rows per pane the fold costs one large micro-batch in 160.
#: Measured on 1M-row micro-batches (2 cores): the fold is 1.6x faster than the raw path
#: at a share of 0.02, 1.2x at 0.05, even at 0.1, and 1.2x slower at 0.2.
FOLD_SHARE = 0.1
FOLD_RETRY = 10
FOLD_RETRY_MAX = 160


@dataclass(frozen=True)
class Options:
    """A processor's settings that decide where its micro-batches run."""

    num_partitions: int
    #: ``True``: always shuffled; ``False``: never; ``None``: by size.
    shuffle: bool | None = None
    #: ``True``: in the driver; ``False``: never; ``None``: small ones.
    on_driver: bool | None = None
    #: Read a Parquet file stream's micro-batches from their files (driver).
    read_files: bool = False

    def reads_files(self, bare_scan: bool) -> bool:
        """Whether a stream whose micro-batches are a bare Parquet scan (``bare_scan``)
        is read from its files in the driver by default (up to
        ``FILES_ON_DRIVER_BYTES``): faster raw than folded, so such a processor keeps
        raw state by default."""
        return bare_scan and self.read_files and self.on_driver is not False and not self.shuffle


@dataclass(frozen=True)
class Stats:
    """One micro-batch, as measured before it runs."""

    #: ``"rows"``, ``"flush"`` (end of input: no rows) or ``"quiet"`` (Spark ran it
    #: without rows, for a heartbeat).
    kind: str = "rows"
    #: Spark's size estimate of the rows the batch runs on (``None``: none).
    size: int | None = None
    #: The size the layout goes by: the estimate, or where Spark has none the last
    #: micro-batch's rows at Spark's width of a row (``None``: nothing to go by).
    guess: int | None = None
    #: The cluster's cores (``SparkContext.defaultParallelism``, at least 2).
    cores: int = 2
    #: This process routes the keys to the state partitions Spark's shuffle gives them
    #: (or there is one state partition).
    routable: bool = True
    #: The rows are Spark's folds (``preaggregate``): few, whatever the batch's size.
    folds: bool = False
    #: The micro-batch is a bare scan of Parquet files (the driver may read them: see
    #: ``read_files``), resolved once where the layout may read them (else ``False``,
    #: and why in ``files_why``).
    files: bool = False
    files_why: str | None = None
    #: Spark cannot size the rows (its estimate is its placeholder: Kafka, ``rate``),
    #: so neither does its optimizer know them empty; also said of their folds.
    unsized: bool = False
    #: The stream has no event time yet and its first rows judge each other (the
    #: bounds on event times) where Spark cannot estimate their quartiles: every row
    #: of the micro-batch runs in one place.
    first: bool = False
    #: Where the micro-batch must run (see ``Layout.where``): a replay's first run's
    #: layout, where the layout decides which rows meet (``None``: by the rules).
    pinned: str | None = None


@dataclass(frozen=True)
class History:
    """What the processor's earlier micro-batches left for the next ones' layout."""

    last_on_driver: bool | None = None
    last_shuffled: bool | None = None
    #: The last micro-batch's input rows: the size of the next where Spark has none.
    last_rows: int | None = None
    #: The last fold's rows per input row (``preaggregate``).
    fold_share: float = 0.0
    #: Large micro-batches run raw since the last fold.
    raw_since: int = 0
    #: Folds in a row that kept more than ``FOLD_SHARE`` of their rows.
    fold_misses: int = 0

    def folded(self, share: float) -> History:
        """The history after a fold that kept ``share`` of its input rows."""
        misses = self.fold_misses + 1 if share > FOLD_SHARE else 0
        return replace(self, fold_share=share, fold_misses=misses)


@dataclass(frozen=True)
class Layout:
    """Where a micro-batch runs."""

    #: One task per state partition, the rows shuffled to them.
    shuffled: bool
    #: Not shuffled: the one task (or the driver) routes the rows to the state
    #: partitions itself, by Spark's hash of the keys (else Spark tags them).
    routes: bool
    #: In the driver's process (also where ``files``).
    driver: bool
    #: The driver reads the micro-batch's Parquet files (it runs there).
    files: bool
    #: Why not from the files, when ``files`` is not asked (for the progress).
    why_not_files: str | None = None

    @property
    def where(self) -> str:
        """``"driver"``, ``"shuffled"`` or ``"one task"``."""
        return "driver" if self.driver else "shuffled" if self.shuffled else "one task"


def fits_one_task(size: int | None, cores: int) -> bool:
    """Whether an input of ``size`` estimated bytes runs in one task with no shuffle:
    below ``SINGLE_TASK_BYTES`` with 2 cores, ``2 / cores`` of it with more; never
    without an estimate."""
    if size is None:
        return False
    return size * max(2, cores) < SINGLE_TASK_BYTES * 2


def choose_fold(stats: Stats, history: History, options: Options) -> tuple[bool, History]:
    """Where the processor keeps folds (``preaggregate``, a fold exact for the stream):
    whether Spark folds this micro-batch first, and the history after it. A micro-batch
    the driver reads from its files, or one task takes, runs raw (the fold's aggregation
    costs more than the rows it keeps out of Python); a larger one is folded, unless the
    last fold kept more than ``FOLD_SHARE`` of its rows: then large ones run raw, and
    after ``retry_after`` of them the fold is tried again (a stream's keys change). A
    flush or a quiet micro-batch has no rows to fold."""
    if stats.kind != "rows":
        return False, history
    if options.shuffle is not True and (
        fits_one_task(stats.guess, stats.cores)
        or (stats.files and why_not_files(stats, options) is None)
    ):
        return False, history
    if history.fold_share > FOLD_SHARE and history.raw_since < retry_after(history):
        return False, replace(history, raw_since=history.raw_since + 1)
    return True, replace(history, raw_since=0)


def retry_after(history: History) -> int:
    """Large micro-batches run raw after a fold that kept too many rows before the fold
    is tried again: ``FOLD_RETRY``, doubled for each such fold in a row after the first,
    at most ``FOLD_RETRY_MAX``."""
    return min(FOLD_RETRY << max(0, min(history.fold_misses - 1, 8)), FOLD_RETRY_MAX)


def runs_on_driver(
    on_driver: bool | None, last_on_driver: bool | None, flush: bool, routable: bool, small: bool
) -> bool:
    """Whether a micro-batch runs in the driver's process (``on_driver``): never with
    ``False``; a flush (no rows) with ``True`` or after a micro-batch that ran in the
    driver; a micro-batch only where ``routable`` (the driver puts its rows where
    Spark's shuffle would, or where the layout does not matter), then with ``True``, or
    by default where ``small``."""
    if on_driver is False:
        return False
    if flush:
        return on_driver is True or last_on_driver is True
    if not routable:
        return False
    return on_driver is True or small


def place(stats: Stats, history: History, options: Options) -> Layout:
    """Where a micro-batch runs (see the module's table)."""
    n = options.num_partitions
    if stats.pinned is not None:
        driver = stats.pinned == "driver"
        shuffled = stats.pinned == "shuffled"
        return Layout(shuffled=shuffled, routes=not shuffled, driver=driver, files=False)
    if stats.kind == "quiet":
        # Every state partition in one run (its calls combine their watermarks).
        driver = options.on_driver is not False
        return Layout(shuffled=False, routes=driver, driver=driver, files=False)
    if stats.kind == "flush":
        # No rows to route; its placeholders run every state partition, as the last
        # micro-batch ran: in one task after a one-task one (a warm worker).
        driver = runs_on_driver(options.on_driver, history.last_on_driver, True, True, False)
        shuffled = n > 1 and history.last_shuffled is not False
        return Layout(shuffled=shuffled and not driver, routes=driver, driver=driver, files=False)
    if n > 1 and options.shuffle is True and not stats.first:
        shuffled, routes = True, False
    else:
        # Spark's folds are few rows whatever the micro-batch's size (its aggregation
        # spreads the folding over its own tasks): one task takes them. A task routes
        # only where the input is not empty to the optimizer, which drops the coalesce
        # over an input it knows is empty (the batch would then run no task at all):
        # where the size is known and not 0, or Spark cannot size the rows (Kafka,
        # ``rate``, and their folds: the optimizer sizes an input it knows empty 0).
        shuffled = (
            n > 1
            and options.shuffle is None
            and not stats.folds
            and not stats.first
            and not fits_one_task(stats.guess, stats.cores)
        )
        routes = not shuffled and (bool(stats.size) or stats.unsized) and stats.routable
    small = not shuffled and stats.size is not None and stats.size <= ON_DRIVER_BYTES
    driver = runs_on_driver(options.on_driver, history.last_on_driver, False, stats.routable, small)
    # A micro-batch the driver reads from its files runs there.
    why = why_not_files(stats, options)
    driver = driver or why is None
    return Layout(
        shuffled=shuffled and not driver,
        routes=routes or driver,
        driver=driver,
        files=why is None,
        why_not_files=why,
    )


def why_not_files(stats: Stats, options: Options) -> str | None:
    """Why a micro-batch is not read from its Parquet files in the driver (``None``: it
    is tried): with ``on_driver=True``, or by default up to ``FILES_ON_DRIVER_BYTES`` of
    Spark's estimate, unless ``shuffle=True``; only where the driver routes the keys as
    Spark's shuffle would; never Spark's folds."""
    if not options.read_files or options.on_driver is False or options.shuffle is True:
        return "read_files=False, on_driver=False or shuffle=True"
    if stats.folds:
        return "Spark's folds of the rows (preaggregate)"
    if options.on_driver is None and (stats.size is None or stats.size > FILES_ON_DRIVER_BYTES):
        return "no size estimate, or above FILES_ON_DRIVER_BYTES"
    if not stats.routable:
        return "key types the driver does not hash as Spark does"
    if not stats.files:
        return stats.files_why or "not a bare scan of Parquet files"
    return None


def after(history: History, layout: Layout, stats: Stats, driver: bool) -> History:
    """The history after a micro-batch ran (``driver``: it ran in the driver, from its
    files or as ``layout`` said). A flush or a quiet micro-batch changes nothing: the
    next one is placed by the last with rows."""
    if stats.kind != "rows":
        return history
    return replace(history, last_on_driver=driver, last_shuffled=layout.shuffled and not driver)
