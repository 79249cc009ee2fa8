"""Structured Streaming with exactly-once operator state: ``StreamProcessor``.

>>> proc = tidemark.spark.StreamProcessor(                      # doctest: +SKIP
...     pipe, state_location="/chk/state", num_partitions=8,
...     sink=lambda windows_df, batch_id: windows_df.write.mode("append").parquet(
...         f"/out/windows/batch={batch_id}"),
... )
>>> q = (stream_df.writeStream.foreachBatch(proc)               # doctest: +SKIP
...      .option("checkpointLocation", "/chk/q").start())

With a windows sink alone, each micro-batch is one Spark job, the sink's own:

1. the driver fixes the batch's inputs: the watermark combined from earlier batches
   and a clock reading (for idleness), recorded under the batch id *before* the job,
   so a replayed batch (after a crash, Spark re-runs the last uncommitted batch id)
   sees exactly the same inputs;
2. in a shuffled micro-batch, every row is tagged with its state partition (Spark's
   hash of its keys), one placeholder row per state partition is added, and rows are
   repartitioned by the tag; a small micro-batch skips that shuffle: one task holds
   every row and routes them itself, with the same hash (or, for key types where
   tidemark's hash is not Spark's, the tagged rows are coalesced into that task);
   for each state partition ``p``, a task restores the operator
   from version ``b-1`` of the state store, processes the rows as one arrival unit,
   writes version ``b`` and its progress atomically, and emits its windows (with late
   or error sinks: the combined result, cached and split); by default a one-task
   micro-batch (Spark's estimate at most ``ON_DRIVER_BYTES``, 8 MiB) skips the task:
   its rows come back to the driver as Arrow, the driver runs the same steps in its
   own process, and the sinks get its outputs as local DataFrames; so does a
   micro-batch of a bare Parquet file stream up to ``FILES_ON_DRIVER_BYTES`` (32 MiB),
   whose rows the driver reads from its files;
3. the sinks run (their job runs the tasks); then the driver reads every state
   partition's progress (running the tasks a sink left unrun) and combines it into
   the watermark of the next batch with :class:`~tidemark.ScopeWatermark`, the rule
   every operator kind shares (global: the maximum event time; per source
   partition: the minimum over active partitions, with idleness; per key: the
   minimum over active keys). A task that holds every state partition (the driver,
   or one task) closes windows on the watermark this batch's rows reach, combined
   over its partitions, exactly as one operator does; one state partition of a
   shuffled batch closes on the watermark the batch started with.

No state lives in a Python worker: workers are forked and reused, and a state
partition may run in any of them. Replaying batch ``b`` restores version ``b-1`` and
produces the same output: exactly once together with an idempotent sink (e.g.
overwrite by batch id).
"""

from __future__ import annotations

import json
import os
import time
import uuid
import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from tidemark.errors import ConfigError, TidemarkWarning
from tidemark.pipeline import Pipeline
from tidemark.spark import _layout
from tidemark.spark._args import (
    ShippedPipeline,
    dropped_late_rows,
    ignored_spark_watermark,
    processor_partitions,
    spark_hash_matches,
    used_input,
)
from tidemark.spark._codec import (
    OutputCodec,
    check_columns,
    session_arrow_settings,
    to_arrow_schema,
)
from tidemark.spark._driver import (
    BatchRun,
    MicroBatchDriver,
    Sink,
)
from tidemark.spark._files import (
    batch_files,
    has_no_rows,
    heartbeat,
    micro_batch_plan,
    read_batch_files,
)
from tidemark.spark._kafka import partitions_known
from tidemark.spark._layout import Layout, Options, Stats
from tidemark.spark._preagg import WEIGHT, Preaggregation, processor_fold
from tidemark.spark._records import StreamRecord
from tidemark.spark._sizing import (
    cores_of,
    event_micros,
    event_quartiles,
    micro_batch_size,
    unused_columns_are_cheap,
)
from tidemark.spark._stream_store import combine, prepare, rescale, summarize
from tidemark.spark._stream_task import (
    StreamTask,
    batch_counts,
    driver_threads,
)

__all__ = ["StreamProcessor", "heartbeat"]


@dataclass(kw_only=True)
class _StreamRun(BatchRun):
    """A pipeline batch's run (its rows: the micro-batch, or Spark's folds of it with
    ``preaggregate``), and why its rows were not read from its files, if known."""

    record: StreamRecord
    read_why: str | None


class StreamProcessor(MicroBatchDriver):
    """A ``foreachBatch`` function that runs a pipeline with exactly-once state.

    Parameters
    ----------
    pipe : Pipeline
        The pipeline. Its ``clock``, if it has one, is the processor's (see ``clock``):
        the executors get the pipeline without it.
    state_location : str or os.PathLike
        Directory for operator state: a local path (shared by all executors) or any
        pyarrow filesystem URI (``s3://``, ``gs://``, ``hdfs://``, ...).
    num_partitions : int, optional
        State partitions (keys are hashed to them as ``df.repartition(n, *keys)``
        does); default 8, and 1 for a global aggregate (``key=None``), whose state
        cannot be split. Changing it between runs rescales the state: at the first
        batch the driver redistributes the last committed version's keyed state over
        the new partitions (by Spark's hash of each key).
    sink : callable
        ``sink(windows_df, batch_id)`` for every micro-batch. Alone, its job is the
        batch's job (``windows_df`` is not cached: persist it to run several actions).
    late_sink, error_sink : callable, optional
        ``f(df, batch_id)`` for late rows and error rows (the outputs then come from
        one cached result). A ``late_sink`` needs a pipeline that keeps its late rows
        (``late="side_output"``, the default): with ``late="drop"`` it is a
        :class:`ConfigError`.
    arrow_sinks : bool
        ``True``: the sinks get each output as a ``pyarrow.Table`` instead of a Spark
        DataFrame: the table ``toArrow()`` of that DataFrame gives (timestamps in UTC,
        ``large_string`` where ``useLargeVarTypes`` is on, every column nullable). For
        sinks that write from the driver's Python process (a database client, a
        message queue, a local file): a micro-batch that ran in the driver hands them
        the outputs it computed, without sending them to the JVM and back (30-50 ms
        of a 100,000-row micro-batch whose sink collects the windows, see the
        streaming guide); one that ran in Spark tasks hands them ``toArrow()`` of
        the output (the job that computes it). Default ``False``.
    read_files : bool
        ``True`` (default): a micro-batch that runs in the driver (see ``on_driver``:
        by default up to ``FILES_ON_DRIVER_BYTES`` this way) and is a bare scan of a
        Parquet file stream (``spark.readStream.schema(s).parquet(directory)``
        handed to ``foreachBatch`` as it is, or with plain columns selected: no
        filter or computed column) is read with pyarrow from the files Spark's source
        chose for it, instead of fetched with ``toArrow()``: the same rows in the same
        schema, without the Spark job that converts them to Arrow row by row (two
        thirds of a 400,000-row micro-batch, see the streaming guide). Wherever
        Spark's reading rules and pyarrow's could differ (a column Spark casts or
        matches by another case, INT96 timestamps, files that need calendar rebasing,
        partition columns, reading options such as ``mergeSchema``), or a file
        cannot be read from the driver, or the Spark release is not one whose plans
        tidemark was checked against (``tidemark.spark._files.SPARK_VERSIONS``), the
        rows come from Spark. A replay reads the same files. ``False``: always from
        Spark.
    retention : int
        Versions of state kept per partition (at least 2, so the last batch can be
        replayed).
    start_fresh : bool
        Discard state another query left at ``state_location`` (one whose batches are
        not this query's: a new checkpoint location counts batch ids from 0 again)
        and start empty, instead of raising :class:`StateCorruptedError`. This
        query's own state, replays included, is never discarded.
    clock : callable, optional
        Milliseconds since the epoch for idleness on the clock
        (``BoundedOutOfOrderness(idleness="clock")``) and a ``state_ttl`` measured so
        (default: ``time.time()``, or the pipeline's own ``clock``); read once per batch
        on the driver and recorded with the batch, so a replayed batch sees the same
        reading. A replay of recorded data can pass the data's own time here (see the
        watermark guide). Idleness in event time (the default) reads no clock.
    shuffle : bool, optional
        ``True``: rows are shuffled to their state partitions, one task each, in
        parallel. ``False``: no shuffle; one task (or the driver, see ``on_driver``)
        reads the micro-batch and runs every state partition in turn (a stage less:
        faster for small micro-batches).
        Default: no shuffle when Spark estimates the micro-batch below
        ``SINGLE_TASK_BYTES`` (16 MiB) on 2 cores, ``2 / cores`` of it with more
        (``SparkContext.defaultParallelism``); else a shuffle. Where Spark has no
        estimate (Kafka, ``rate``), the last micro-batch sizes the next: its input
        rows at Spark's default width of a row (8 bytes plus 20 per string, 8 per long
        or timestamp, ...); the first micro-batch this processor runs is shuffled.
        A new stream's first micro-batch is judged by its own rows' quartiles
        (``BoundedOutOfOrderness``'s bounds), which Spark estimates first (one more
        job, once); where it cannot (string event times), it runs in one task.
        Outputs and state are the same either way. The
        one task routes the rows to their state partitions itself (by Spark's hash of
        the keys, as a shuffle would) where tidemark hashes the key types as Spark
        does (numbers, booleans, dates, timestamps, decimals, binary, strings without
        a collation), which spares the driver a tagging expression per micro-batch. A
        :meth:`flush` runs in one task after a one-task micro-batch (in the driver
        after one run there), else in one task per state partition.
    on_driver : bool, optional
        Whether a micro-batch runs in the driver's process instead of a Spark task:
        its rows come back as Arrow (``df.toArrow()``), the driver restores, updates
        and writes the state partitions exactly as the one task would, and the sinks
        get the outputs as local DataFrames. This skips the round trip through a
        Python worker: 12-34% less time per micro-batch of 10,000 to 1,000,000 rows
        on a 2-core machine (see the streaming guide). Default: a micro-batch that
        would run in one task (see ``shuffle``) and that Spark estimates at most
        ``ON_DRIVER_BYTES`` (8 MiB; the driver holds the whole micro-batch in
        memory), and one the driver reads from its files (see ``read_files``) up to
        ``FILES_ON_DRIVER_BYTES`` (32 MiB), shuffled or not, unless ``shuffle=True``.
        ``True``: every micro-batch. ``False``: never. Either way only where
        tidemark routes the key types as Spark's hash does (see ``shuffle``). A
        :meth:`flush` runs in the driver with ``True``, or by default after a
        micro-batch that did. State, outputs and replays are the same either way.

    preaggregate : bool or None
        Whether Spark's ``groupBy`` may fold large micro-batches per key and window pane
        before Python, the pipeline merging the folds (see ``aggregate``'s
        ``preaggregate``), where that gives the same windows: ``count``, ``sum`` of
        8-32-bit integers, exact ``sum`` of floats, ``min`` / ``max`` of integers, dates
        and timestamps; tumbling or sliding windows of a Spark timestamp; a ``spark``
        or ``flink`` late rule; no ``max_keys`` or ``state_ttl``. Windows, watermarks
        and ``last_progress`` counts are the raw path's. Only micro-batches too large
        for one task and not read from their files are folded (all with
        ``shuffle=True``; the folds then run in one task); the others go in raw, each
        row its own fold, into the same state. Where a fold keeps more than
        ``FOLD_SHARE`` (a tenth) of its rows, the next large micro-batches run raw, the
        fold tried again after ``FOLD_RETRY`` (10) of them, then twice as many each
        time (at most ``FOLD_RETRY_MAX``, 160). Decided at the first micro-batch.
        ``last_progress["read"]`` is ``"folds"`` for a folded one.
        ``None`` (default): where it is exact, with no ``late_sink`` or ``error_sink``
        (folds keep no rows), unless the driver reads the stream from its files (faster
        raw) or the state location was written by the raw pipeline (it stays raw).
        ``True``: also warns where it is not exact, and refuses a late or error sink
        (late and error rows are counted, not kept). ``False``: never.
    kafka_offsets : bool
        Per source partition over Spark's Kafka source, ``True`` (default) knows the
        topic's partitions, and those with records left unread, from each micro-batch's
        offsets: the ``partition_column`` must be the source's own ``partition``, and
        another (renamed, or ``partition % 3``) is a :class:`ConfigError` at the first
        micro-batch. ``False``: what the column's values show, knowingly.

    Attributes
    ----------
    last_progress : dict or None
        The last batch, as Spark's ``query.lastProgress``, set once it is done:
        ``batch_id``, ``input_rows``, ``window_rows``, ``late_rows`` (Spark's
        ``numRowsDroppedByWatermark``), ``error_rows``, the ``watermark`` it ran with
        and ``next_watermark`` (epoch microseconds), ``layout``, where it ran:
        ``"driver"``, ``"one task"`` or ``"shuffled"``, and ``read``, how its rows
        were read: ``"files"`` (see ``read_files``), ``"spark"``, ``"folds"`` (Spark's
        folds of them: see ``preaggregate``), or ``"none"`` (a flush); where they came
        from Spark, ``read_why`` says why not from the files (for a Parquet stream
        Spark wrote with its defaults: INT96 timestamps, which
        ``spark.sql.parquet.outputTimestampType=TIMESTAMP_MICROS`` avoids). With a
        watermark per source partition, ``partitions`` says where the source's
        partitions are known from: ``"offsets"`` (a Kafka micro-batch's) or, where
        only the rows tell, why not (``"rows: ..."``). Counted by the
        batch's own job: reading it costs no Spark job. Also
        recorded in ``state_location``: see :meth:`progress`.
    """

    def __init__(
        self,
        pipe: Pipeline,
        state_location: str | os.PathLike[str],
        num_partitions: int | None = None,
        sink: Sink | None = None,
        late_sink: Sink | None = None,
        error_sink: Sink | None = None,
        *,
        retention: int = 3,
        start_fresh: bool = False,
        clock: Callable[[], int] | None = None,
        shuffle: bool | None = None,
        on_driver: bool | None = None,
        arrow_sinks: bool = False,
        read_files: bool = True,
        preaggregate: bool | None = None,
        kafka_offsets: bool = True,
    ) -> None:
        num_partitions = processor_partitions(
            pipe, num_partitions, (sink, late_sink, error_sink), shuffle, on_driver, preaggregate
        )
        if pipe.clock is not None:
            # The pipeline's clock, read once per micro-batch on the driver (a clock
            # does not travel to executors: the pipeline is shipped without it).
            if clock is not None:
                raise ConfigError(
                    "the pipeline has a clock and StreamProcessor(clock=...) was given "
                    "too: give one (the processor reads it once per micro-batch)"
                )
            clock = pipe.clock.now
            pipe = pipe.without_clock()
        self.pipe = pipe
        #: The pipeline as given (``self.pipe`` merges folds once preaggregate is on).
        self._raw_pipe = pipe
        self.preaggregate = preaggregate
        # With preaggregate: the fold, decided at the first micro-batch (from its
        # schema); self.pipe then merges folds.
        self._fold: Preaggregation | None = None
        self._fold_decided = False
        sinks = (sink, late_sink, error_sink)
        self._init_driver(
            state_location, num_partitions, sinks, retention, start_fresh, on_driver, arrow_sinks
        )
        if sink is None and late_sink is None and error_sink is None:
            raise ConfigError(
                "StreamProcessor() needs a sink: sink=f(windows_df, batch_id) writes each "
                "micro-batch's windows (late_sink and error_sink the late and error rows); "
                "without one nothing would be written"
            )
        #: The clock is the wall clock (none was given): an event time more than
        #: ``max_ahead`` past its reading comes from the future.
        self._wall_clock = clock is None
        self._clock = clock or (lambda: int(time.time() * 1000))
        self.shuffle = shuffle
        self.read_files = read_files
        self.kafka_offsets = kafka_offsets
        # The input schema checked against the pipeline (at the first micro-batch, and
        # again where it changes).
        self._columns_checked: Any = None
        # Where the last micro-batch's source partitions were known from (progress).
        self._partitions_from: str | None = None
        # Said once: late rows dropped for want of a late_sink; Spark's watermark ignored.
        self._warned: set[str] = set()
        self._shipped: ShippedPipeline | None = None
        # Whether a call without rows would change nothing (None: read the store).
        self._quiet_settled: bool | None = None
        wm = pipe.watermark
        self._clock_timeouts = wm.idleness == "clock" and (
            wm.idle_timeout is not None or pipe.state_ttl is not None
        )

    # --- driver-side state ---------------------------------------------------------

    RECORD = StreamRecord

    def _fingerprint(self) -> int | str:
        return self.pipe.fingerprint

    def _settings(self) -> dict[str, Any] | None:
        # As JSON keeps it (tuples as lists), in the units of Pipeline.config.
        settings: dict[str, Any] = json.loads(json.dumps(self.pipe.config))
        return settings

    def _mismatch(self, meta: dict[str, Any], want: dict[str, Any]) -> str:
        return (
            "it was written by a different pipeline configuration (a changed pipeline "
            "needs a new state_location, and a new checkpoint location)"
        )

    def _check_state(self, fields: Any, batch_id: int, flush: bool) -> None:
        """Checks ``meta.json`` against this processor once; rescales the state batch
        ``batch_id`` starts from to ``num_partitions`` where only that changed
        (see :func:`~tidemark.spark._stream_store.rescale`; ``fields``: the batch's
        schema)."""

        def moved(old: int) -> None:
            n = self.num_partitions
            rescale(self.store, self.pipe, fields, old, n, batch_id, flush, self.start_fresh)

        self._check_meta(moved)

    def _prepare(self, batch_id: int, flush: bool = False, plan: Any = None) -> StreamRecord:
        """The batch's recorded inputs (reused when the batch is replayed): with a
        watermark per source partition, what the micro-batch's Kafka offsets (its
        ``plan``) tell of the partitions."""
        wm = self.pipe.watermark
        view = None
        if wm.per == "partition" and plan is not None and not flush:
            view, self._partitions_from = partitions_known(
                plan, wm.partition_column, self.kafka_offsets
            )
        return prepare(self.store, batch_id, flush, self.start_fresh, self._clock(), view)

    # --- the foreachBatch function -------------------------------------------------

    def _folded(
        self, df: Any, stats: Stats, fields: Any, tz: str, large: bool, files: list[str] | str
    ) -> tuple[Any, Any, bool]:
        """With ``preaggregate``: the micro-batch as Spark's folds (see
        :mod:`tidemark.spark._preagg`) and their schema, where the fold is exact for
        this stream (decided at the first micro-batch: the pipeline is then the one
        merging folds, whose state this processor keeps) and the layout folds this
        micro-batch (:func:`tidemark.spark._layout.choose_fold`; else its raw rows go
        through that pipeline, each its own fold: see :meth:`Preaggregation.lift`);
        else ``df`` and ``fields``. Also whether the rows are Spark's folds. A flush or
        a quiet micro-batch reads no rows: only the schema is folded."""
        if self.preaggregate is False:
            return df, fields, False
        if not self._fold_decided:
            self._fold_decided = True
            pre = self._preaggregation(fields, tz, large, stats.kind == "rows", files)
            if pre is not None:
                self._fold = pre
                self.pipe = pre.pipe
        if self._fold is None:
            return df, fields, False
        if stats.kind != "rows":
            return df, self._fold.rows(df.sparkSession.createDataFrame([], fields)).schema, False
        fold, self._history = _layout.choose_fold(stats, self._history, self._options())
        if not fold:
            return df, fields, False
        folded = self._fold.rows(df, reuse=True)
        return folded, folded.schema, True

    def _preaggregation(
        self, fields: Any, tz: str, large: bool, rows: bool, files: list[str] | str
    ) -> Any:
        """The fold this processor keeps its state by (see :func:`processor_fold`;
        ``rows``: the first micro-batch has rows, and ``files`` are its files, or why
        not: is it read from its files?)."""
        meta = self.store.read_json("meta.json") if self.preaggregate is None else None
        raw = self.late_sink is not None or self.error_sink is not None
        if self.preaggregate is None and not raw and rows:
            raw = self._options().reads_files(isinstance(files, list))
        pre = processor_fold(self._raw_pipe, fields, tz, large, self.preaggregate, raw, meta)
        if pre is None and self.preaggregate is True:
            self._warn(
                "preaggregate",
                "preaggregate=True: Spark's fold would not give this pipeline's exact "
                "windows on this stream (see StreamProcessor's preaggregate): every "
                "row goes through the pipeline",
            )
        return pre

    def _options(self) -> Options:
        return Options(self.num_partitions, self.shuffle, self.on_driver, self.read_files)

    def _stats(self, df: Any, kind: str, plan: Any = None, rows: Stats | None = None) -> Stats:
        """Micro-batch ``df`` as measured for the layout (a flush or a quiet micro-batch
        reads no rows: nothing to measure); ``rows``: ``df`` is Spark's folds of the
        micro-batch so measured, which Spark cannot size where it cannot size the rows
        (from Kafka or ``rate`` its estimate of the folds is a scaled placeholder: not
        asked)."""
        if kind != "rows":
            return Stats(kind=kind)
        if rows is not None and rows.unsized:
            return replace(rows, size=None, guess=None, folds=True)
        size, guess, unsized = micro_batch_size(df, plan, self._history.last_rows)
        return Stats(
            size=size,
            guess=guess,
            cores=cores_of(df.sparkSession),
            routable=self._routable(df),
            folds=rows is not None,
            unsized=unsized,
        )

    def _with_files(self, df: Any, stats: Stats, plan: Any) -> tuple[Stats, list[str] | str]:
        """The micro-batch's Parquet files (or why it is not a bare file scan),
        resolved once (a walk of its plan) where the driver may read them
        (``read_files``: not for rows of Kafka or ``rate``, which Spark cannot size) or
        the first micro-batch decides the fold (a stream read from its files keeps raw
        state); and ``stats`` saying so."""
        options = self._options()
        readable = _layout.why_not_files(replace(stats, files=True), options) is None
        deciding = not self._fold_decided and self.preaggregate is None
        if stats.kind != "rows" or not (readable or (deciding and options.reads_files(True))):
            return stats, "not asked"
        files = batch_files(df, plan)
        why = files if isinstance(files, str) else None
        return replace(stats, files=why is None, files_why=why), files

    def _placement(self, df: Any, flush: bool = False, plan: Any = None) -> Layout:
        """Where micro-batch ``df`` (its raw rows) would run now (see ``_layout``)."""
        stats, _ = self._with_files(df, self._stats(df, "flush" if flush else "rows", plan), plan)
        return _layout.place(stats, self._history, self._options())

    def _plan_of(self, df: Any) -> Any:
        return micro_batch_plan(df)

    def _nothing_to_do(self, plan: Any) -> bool:
        # A quiet micro-batch (no rows: Spark ran it for a heartbeat) after one that
        # left nothing for a call without rows to do (see the core's ``MicroBatch``).
        return has_no_rows(plan) and self._settled()

    def _settled(self) -> bool:
        """Whether a call without rows would change nothing: the last batch was a
        quiet one that ended so (or a flush, or there was none), and no time-out runs
        on the clock (which moves while the stream is quiet)."""
        if self._clock_timeouts:
            return False
        if self._quiet_settled is None:
            last: StreamRecord | None = self.store.last_record()
            self._quiet_settled = last is None or (last.finished and (last.flush or last.settled))
        return self._quiet_settled

    def _begin(
        self, df: Any, batch_id: int, flush: bool, schema: Any, plan: Any = None
    ) -> _StreamRun:
        # A quiet micro-batch reads no rows (as a flush) and closes what the watermark
        # passed, in calls without rows until one changes nothing (see the core's ``MicroBatch``).
        quiet = not flush and has_no_rows(plan)
        rowless = flush or quiet
        kind = "flush" if flush else "quiet" if quiet else "rows"
        fields = schema if flush else df.schema
        if not flush:
            self._warn_spark_watermark(fields)
            if fields != self._columns_checked:
                check_columns(self._raw_pipe, fields, df.sparkSession)
                self._columns_checked = fields
        spark = df.sparkSession
        tz, large = session_arrow_settings(spark)
        # The micro-batch as the layout sees it, asked of Spark once (its size: a JVM
        # call) for the fold's choice and the layout of raw rows.
        stats, files = self._with_files(df, self._stats(df, kind, plan), plan)
        raw = df
        df, fields, folds = self._folded(df, stats, fields, tz, large, files)
        if folds:
            stats = self._stats(df, kind, rows=stats)
        # Raw rows of a processor that keeps merged folds: each row goes in as its own
        # fold (the task lifts it), read and encoded as the raw pipeline's input.
        lift = self._fold.lift() if self._fold is not None and not folds and not rowless else None
        pipe = self._raw_pipe if lift is not None else self.pipe
        self._check_state(fields, batch_id, flush)
        rec = self._prepare(batch_id, flush, plan)
        # With the windows as the only output, the sink's job is the batch's job: the
        # task emits the windows alone and nothing is cached. The task then reads only
        # the columns the windows need (late and error rows carry every column).
        windows_only = not flush and self.late_sink is None and self.error_sink is None
        if windows_only:
            used = used_input(pipe, fields)
            if WEIGHT in fields.fieldNames() and WEIGHT not in used.fieldNames():
                # The folds' weights count the batch's rows.
                used = type(used)([*used.fields, fields[WEIGHT]])
            fields = used
        codec = OutputCodec.build(pipe, fields, tz, large)
        # Tags this run's progress files: files of an earlier, failed run are ignored.
        token = uuid.uuid4().hex
        if self._shipped is None:
            self._shipped = ShippedPipeline(self.pipe, spark)  # one broadcast per query
        # A new stream's first rows judge each other (the bounds on event times): by
        # the quartiles Spark estimates (recorded: a replay judges alike), or in one run.
        cfg = self.pipe.config
        judged = cfg["max_behind"] is not None or (
            cfg["max_ahead"] is not None and not self._wall_clock
        )
        first = rec.time is None and kind == "rows" and judged
        micros = event_micros(self._raw_pipe, raw.schema) if first else None
        stats = replace(stats, first=first and micros is None)
        if micros is not None and rec.quartiles is None:
            rec.quartiles = event_quartiles(raw, micros)  # once; a replay reads it
            self.store.write_record(rec)
        placed = _layout.place(stats, self._history, self._options())
        table = None
        if placed.files:
            assert isinstance(files, list)
            got = read_batch_files(files, to_arrow_schema(codec.input_arrow))
            if isinstance(got, str):
                # A file pyarrow does not read as Spark does: placed again, knowing it.
                stats = replace(stats, files=False, files_why=got)
                placed = _layout.place(stats, self._history, self._options())
            else:
                table = got
        driver = placed.driver
        untagged = placed.routes  # the driver routes the rows as a one-task batch
        columns = fields.fieldNames() if windows_only else None
        size = stats.size
        if columns is not None and untagged and unused_columns_are_cheap(df.schema, columns, size):
            columns = None  # cheaper to send than to project away
        task = StreamTask(
            shipped=self._shipped,
            codec=codec,
            store=self.store,
            batch_id=batch_id,
            prev_batch=rec.prev_batch,
            retention=self.retention,
            token=token,
            num_partitions=self.num_partitions,
            flush=flush,
            windows_only=windows_only,
            untagged=untagged,
            threads=driver_threads() if driver else 1,
            record=replace(rec),  # as the batch began (the driver completes rec)
            lift=lift,
            settle=quiet,
            wall_clock=self._wall_clock,
        )
        return _StreamRun(
            quiet=quiet,
            stats=stats,
            placed=placed,
            layout=placed.where,
            record=rec,
            task=task,
            columns=columns,
            table=table,
            read="none" if rowless else "folds" if folds else "spark",
            read_why=placed.why_not_files,
            rows=df,
        )

    def _route(self) -> tuple[list[str], bool]:
        return self.pipe.key, False

    def _finish(self, run: BatchRun) -> dict[str, Any]:
        assert isinstance(run, _StreamRun)
        batch_id, rec = run.batch_id, run.record
        summary = self._summary(run, lambda got: summarize(self.pipe, rec, run.task.token, got))
        combine(rec, summary)
        # A quiet batch whose last call changed nothing leaves nothing for the next
        # quiet one; a batch with rows leaves what its watermark passed.
        settled = summary["settled"]
        rec.settled = run.flush or (settled is not None and settled[1])
        self._quiet_settled = rec.settled
        counts = batch_counts(batch_id, rec, summary, run.layout, run.read)
        if run.quiet:
            counts["quiet_calls"] = 0 if settled is None else settled[0]
        elif not run.flush:
            self._history = replace(self._history, last_rows=counts["input_rows"])
        if run.read == "folds":
            share = summary["read_rows"] / max(1, counts["input_rows"])
            self._history = self._history.folded(share)
        if run.read == "spark" and run.read_why is not None:
            counts["read_why"] = run.read_why
        if self.pipe.watermark.per == "partition" and not run.flush:
            counts["partitions"] = self._partitions_from
        self._warn_dropped(counts["late_rows"], batch_id)
        return counts

    def _warn(self, what: str, message: str) -> None:
        """Warns once per processor about ``what``."""
        if what not in self._warned:
            self._warned.add(what)
            warnings.warn(message, TidemarkWarning, stacklevel=3)

    def _warn_dropped(self, late_rows: int, batch_id: int) -> None:
        """Says once that late rows were dropped where the pipeline keeps them
        (``late="side_output"``) but no ``late_sink`` takes them."""
        if late_rows and self.late_sink is None and self.pipe.late == "side_output":
            self._warn("late", dropped_late_rows(late_rows, batch_id))

    def _warn_spark_watermark(self, schema: Any) -> None:
        """Says once that a ``withWatermark`` on the stream is not what judges its rows."""
        if (said := ignored_spark_watermark(schema, self.pipe.watermark)) is not None:
            self._warn("spark-watermark", said)

    def _routable(self, df: Any) -> bool:
        """Whether this process routes ``df``'s keys to the state partitions Spark's
        shuffle would give them (or there is one state partition)."""
        return self.num_partitions == 1 or spark_hash_matches(df.schema, self.pipe.key)

    def start(
        self,
        stream_df: Any,
        checkpoint_location: str | os.PathLike[str],
        *,
        trigger: str = "1 second",
        quiet_batches: bool = True,
        query_name: str | None = None,
    ) -> Any:
        """Starts the Structured Streaming query that runs this processor on
        ``stream_df``: ``foreachBatch(self)`` with a processing-time ``trigger`` and
        ``checkpoint_location``; returns the ``StreamingQuery``.

        With ``quiet_batches`` (the default) the stream gets a :func:`heartbeat`: when
        it goes quiet, the windows its watermark closed come out at the next trigger,
        without new data and without a flush (as Spark's own stateful queries emit
        them in a no-data micro-batch), once, and the same after a restart while
        quiet. With idleness on the clock, the windows an idle input held back come
        out within ``idle_timeout`` plus one trigger interval. The heartbeat's
        micro-batches never run out of data: ``processAllAvailable()`` does not return
        on such a query (wait with ``awaitTermination``, or start the query without it).

        Examples
        --------
        >>> q = proc.start(spark.readStream.schema(s).parquet("/in"),  # doctest: +SKIP
        ...                "/chk/q", trigger="10 seconds")
        """
        df = heartbeat(stream_df) if quiet_batches else stream_df
        writer = (
            df.writeStream.foreachBatch(self)
            .trigger(processingTime=trigger)
            .option("checkpointLocation", os.fspath(checkpoint_location))
        )
        if query_name is not None:
            writer = writer.queryName(query_name)
        return writer.start()

    def flush(self, spark: Any, schema: Any, batch_id: int | None = None) -> Any:
        """End of input: closes every open window of every state partition.

        Runs as batch ``batch_id`` with no input rows (``schema`` is the stream's: it
        gives the late and error outputs their columns), sends the windows to the sink
        and returns them: a ``pyarrow.Table`` with ``arrow_sinks``, else a DataFrame,
        cached as the batch's windows are (see ``sink``: built from the driver's rows
        when the flush ran in the driver, persisted with a late or error sink, else
        computed again by each action, which replays the flush and gives the same
        rows). The default batch id is one after the last processed batch, or the
        last batch again when that was a flush or did not finish (a driver that died
        mid-flush): a restarted job that flushes again replays the same flush, not a
        new one. A query that runs again with new input after a flush goes on from the
        batch before it: the windows the flush closed early come again, with the new
        rows (see the streaming guide).
        """
        if not hasattr(schema, "fieldNames"):
            raise ConfigError(
                "flush(spark, schema) needs the stream's schema (a StructType, e.g. "
                f"stream_df.schema) for the columns of its late and error outputs, got {schema!r}"
            )
        batch_id = self._flush_batch_id(batch_id)
        windows, _, _ = self._run(spark.range(0), batch_id, flush=True, schema=schema)
        return windows

    def watermark(self) -> int | None:
        """The watermark the next batch will use (epoch microseconds): after a batch
        that did not finish, the one its replay will use."""
        rec: StreamRecord | None = self.store.last_record()
        if rec is None:
            return None
        return rec.next_watermark if rec.finished else rec.watermark
