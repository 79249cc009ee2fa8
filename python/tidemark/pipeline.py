"""The Pipeline: an event-time windowed GROUP BY that closes windows on the watermark.

>>> import datetime as dt, pyarrow as pa, tidemark as tm
>>> pipe = tm.Pipeline(
...     key="device_id",
...     event_time="event_time",
...     watermark=tm.BoundedOutOfOrderness("5s", per="key"),
...     window=tm.Tumbling("10s"),
...     aggs={"n": tm.count(), "total": tm.sum("value")},
... )
>>> op = pipe.operator()
>>> t0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
>>> batch = pa.table({
...     "device_id": ["a", "a", "b"],
...     "event_time": [t0, t0 + dt.timedelta(seconds=3), t0 + dt.timedelta(seconds=30)],
...     "value": [1, 2, 5],
... })
>>> out = op.process(batch)       # b's watermark is 25s; a's is -2s: nothing closes
>>> out.windows.num_rows
0
>>> out = op.flush()              # end of input: close everything
>>> out.windows.select(["device_id", "n", "total"]).to_pylist()
[{'device_id': 'a', 'n': 2, 'total': 3}, {'device_id': 'b', 'n': 1, 'total': 5}]

Semantics (DESIGN.md): a row is late only when the window it belongs to has closed
(``late_rule``). Under the default, ``"spark"``, each ``process`` call closes the
windows its starting watermark passed (``end + allowed_lateness <= W``, the
watermark of the scope: global, the source partitions combined, or the row's own
key), and a row is late when its window was closed by an earlier call: with a global
watermark the output is Spark's ``withWatermark`` + ``groupBy(window(...), key)``,
micro-batch by micro-batch. ``"flink"`` closes a window in the call whose rows moved
the watermark past it; ``"row"`` calls a row late when ``ts < W - allowed_lateness``.
"""

from __future__ import annotations

import copy as _copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import pyarrow as pa

from tidemark import _native
from tidemark._arrow import ArrowData, as_tabular
from tidemark._duration import Duration, to_micros, to_millis
from tidemark.aggs import Agg
from tidemark.clock import Clock
from tidemark.errors import ConfigError
from tidemark.event_time import resolve_event_time_type
from tidemark.lateness import LatenessReport
from tidemark.operator import Operator, OperatorOptions
from tidemark.windows import (
    AdaptiveOutOfOrderness,
    BoundedOutOfOrderness,
    Rows,
    Window,
    window_config,
)

if TYPE_CHECKING:
    from typing import Unpack  # 3.11; only read by type checkers

__all__ = ["Lookup", "Pipeline"]


class Pipeline:
    """An event-time windowed aggregation, validated when it is built.

    Parameters
    ----------
    key : str, list of str, or None
        Key columns (``None``: one global group): integer, float, decimal, boolean,
        date, time, timestamp, string, binary or dictionary columns.
    event_time : str
        The event-time column: an Arrow timestamp or date, or any column with an
        ``event_time_type``. Omitted with ``time="processing"`` (rows are stamped
        with the clock; a column named here is not read).
    event_time_type : str, optional
        A registered event-time type (``"unixtimestamp_ms"``, ``"iso8601"``, or one
        registered with :func:`tidemark.register_event_time_type`).
    watermark : BoundedOutOfOrderness
        How the watermark is computed and at which scope. Required for event-time
        windows (a :class:`ConfigError` without it, as Spark requires
        ``withWatermark``); ROWS windows and ``time="processing"`` have none.
    window : Tumbling, Sliding or Session
        The window.
    aggs : dict of str to Agg
        Output column name to aggregate, e.g. ``{"n": tm.count(), "p": tm.mean("price")}``.
    emit : str
        ``"on_window_close"`` (each window once, when the watermark passes
        ``end + allowed_lateness``) or ``"on_update"`` (every window a batch changed;
        an upsert changelog with a ``retract`` column for sessions merged away).
    allowed_lateness : str or timedelta
        Keep windows open this much longer, accepting rows up to this far behind the
        watermark.
    late : str
        ``"side_output"`` (late rows come back in ``Output.late``) or ``"drop"``
        (counted only).
    late_rule : str
        When a row is late (see docs/guide/late-data.md); ``W`` is the watermark a
        call began with, ``W_prev`` the one the call before began with, and
        ``allowed_lateness`` adds to every rule:

        * ``"spark"`` (default): Spark's rule, timing included. A call closes the
          windows with ``end + allowed_lateness <= W``; a row is late when its window
          has ``end + allowed_lateness <= W_prev`` (closed by an earlier call). With a
          global watermark the output equals Spark's ``withWatermark`` +
          ``groupBy(window(...) or session_window(...), key)`` in append mode, call by
          call (micro-batch by micro-batch). A session row is late when its own
          session ``[ts, ts + gap)`` is closed.
        * ``"flink"``: Flink's ``isWindowLate``: a row is late when its window has
          ``end + allowed_lateness <= W``; a window closes in the call whose rows
          moved the watermark past it (one call sooner than ``"spark"``). A session
          row is late when it merges into no open session and its own is closed.
        * ``"row"``: a row is late when ``ts < W - allowed_lateness``; windows close as
          under ``"flink"``.

        A sliding-window row goes into each of its windows still open, and is late
        only when all of them are closed. Processing time: no row is late, windows
        close as soon as the clock passes them.
    clock : SystemClock or ManualClock, optional
        The clock for processing time and for idleness on the clock
        (``BoundedOutOfOrderness(idleness="clock")``). Not for ``StreamProcessor``
        (a pipeline with a clock cannot be shipped to Spark's executors): give the
        processor ``clock=`` instead.
    max_keys : int, optional
        Bound on keys in state, per operator (a core, a Spark partition or state
        partition); when reached, the ``eviction`` policy picks a key whose windows are
        closed (and emitted) early. A forgotten key reopens no window it emitted: its
        rows up to the end of its last emitted window (per key: also behind its
        watermark) are late when it comes back (a bounded sketch remembers these
        floors; it errs only towards calling a row late). One call holding more
        keys than ``max_keys`` sends the rows of the keys evicted while it ran to
        ``errors`` (reason ``max_keys reached: ...``): feed smaller calls (Spark
        ``aggregate(order_by=..., batch_rows=...)``) or raise ``max_keys``.
    eviction : str
        ``"least_recently_active"``, ``"lowest_watermark"`` or ``"reject_new"`` (rows
        of new keys become error rows).
    time : str
        ``"event"`` (default) or ``"processing"``: rows are stamped with the clock at
        ingest and windows close in wall time.
    state_ttl : str or timedelta, optional
        Drop a key's state (watermark, activity, open windows) once it has had no rows
        for this long, measured as the watermark's ``idleness`` says (by default in
        event time: while the stream's event time moved on this much). Windows still
        open are emitted early, so nothing is lost (as after eviction, the key reopens
        none of them); ``metrics()`` counts ``keys_expired`` and ``windows_expired``. Bounds state
        for keys that stop reporting.
    lateness : tidemark.LatenessReport, optional
        Keep a lateness report per key and source partition (how far behind rows
        arrive, how many were late and by how much, what Spark's global watermark
        would have dropped): ``metrics()["lateness"]``.
    schema : pyarrow.Schema, optional
        The input schema, to check columns and types now rather than at the first batch.
    null_keys : str
        What a row whose key (any key column) is null becomes: ``"error"`` (default:
        an error row whose reason names the column; a keyed window of no key is
        rarely meant) or ``"group"`` (the nulls form one key, as in Spark's
        ``groupBy``).

    Raises
    ------
    ConfigError
        On any configuration mistake (unknown type, bad duration, bad aggregate, ...),
        and :class:`MissingColumnError` for columns missing from ``schema``.
    """

    def __init__(
        self,
        key: str | list[str] | None,
        event_time: str | None = None,
        *,
        aggs: Mapping[str, Agg],
        window: Window,
        watermark: BoundedOutOfOrderness | None = None,
        event_time_type: str | None = None,
        emit: str = "on_window_close",
        allowed_lateness: Duration = "0s",
        late: str = "side_output",
        late_rule: Literal["spark", "flink", "row"] = "spark",
        clock: Clock | None = None,
        max_keys: int | None = None,
        eviction: str = "least_recently_active",
        time: str = "event",
        schema: pa.Schema | None = None,
        state_ttl: Duration | None = None,
        lateness: LatenessReport | None = None,
        null_keys: Literal["error", "group"] = "error",
    ) -> None:
        # The arguments as given: a changed copy is built from them (see with_aggs).
        # The clock is the attribute's (a pipeline shipped to executors has none).
        self._args = {k: v for k, v in locals().items() if k not in ("self", "clock")}
        keys = [] if key is None else [key] if isinstance(key, str) else list(key)
        if not all(isinstance(k, str) for k in keys):
            raise ConfigError(f"key must be a column name, a list of names, or None, got {key!r}")
        if event_time is None and time == "processing":
            event_time = ""  # stamped with the clock: no column is read
        if not isinstance(event_time, str) or (not event_time and time != "processing"):
            raise ConfigError(
                f"event_time must be a column name, got {event_time!r} (only a "
                'time="processing" pipeline goes without one)'
            )
        if not isinstance(aggs, Mapping) or not aggs:
            raise ConfigError("aggs must be a non-empty dict of output name to tm.count(), ...")
        for name, agg in aggs.items():
            if not isinstance(agg, Agg):
                raise ConfigError(
                    f"aggs[{name!r}] must be an aggregate such as tm.sum('value'), got {agg!r}"
                )
        if watermark is None and time == "event" and not isinstance(window, Rows):
            # A default would drop rows silently (with 0 s of delay every row behind
            # the newest one is late); Spark too makes the user call withWatermark.
            raise ConfigError(
                "watermark is required: say how far behind the newest event a row may "
                'arrive, e.g. watermark=tm.BoundedOutOfOrderness("10s") (what Spark\'s '
                'df.withWatermark("ts", "10 seconds") says), with per="key" or '
                'per="partition" for one watermark per key or source partition; rows '
                "behind it go to the late output"
            )
        if max_keys is not None and (
            isinstance(max_keys, bool) or not isinstance(max_keys, int) or max_keys < 1
        ):
            raise ConfigError(f"max_keys must be an int >= 1 (or None), got {max_keys!r}")
        wm = watermark or BoundedOutOfOrderness()
        if not isinstance(wm, BoundedOutOfOrderness):
            raise ConfigError("watermark must be tm.BoundedOutOfOrderness(...)")
        self._parser = resolve_event_time_type(event_time_type)
        self.key = keys
        self.event_time = event_time
        self.event_time_type = event_time_type
        self.watermark = wm
        self.window = window
        self.aggs = dict(aggs)
        self.emit = emit
        self.allowed_lateness = allowed_lateness
        self.late = late
        if late_rule not in ("spark", "flink", "row"):
            raise ConfigError(
                f'late_rule must be "spark", "flink" or "row", got {late_rule!r} '
                "(see docs/guide/late-data.md)"
            )
        self.late_rule = late_rule
        self.clock = clock
        self.max_keys = max_keys
        self.eviction = eviction
        self.time = time
        self.state_ttl = state_ttl
        if lateness is not None and not isinstance(lateness, LatenessReport):
            raise ConfigError(f"lateness must be tm.LatenessReport(...), got {lateness!r}")
        self.lateness = lateness
        self.lookup: Lookup | None = None
        #: The input schema given when the pipeline was built (``None``: the first
        #: batch's).
        self.schema = schema
        self._config = {
            "keys": keys,
            "event_time": event_time,
            # User parsers run in Python; the core sees parsed times.
            "event_time_type": event_time_type if self._parser is None else None,
            "parsed_externally": self._parser is not None,
            "delay": to_micros(wm.delay, "watermark.delay"),
            "scope": wm.per,
            "partition_column": wm.partition_column,
            "source_partitions": wm.partitions,
            "idle_timeout_ms": None
            if wm.idle_timeout is None
            else to_millis(wm.idle_timeout, "watermark.idle_timeout"),
            "idleness": wm.idleness,
            "max_ahead": None
            if wm.max_ahead is None
            else to_micros(wm.max_ahead, "watermark.max_ahead"),
            "max_behind": None
            if wm.max_behind is None
            else to_micros(wm.max_behind, "watermark.max_behind"),
            "quorum": wm.quorum,
            "null_keys": null_keys,
            "window": window_config(window),
            "aggs": [
                (name, a.kind, a.column, a.ddof, a.by, a.quantile) for name, a in self.aggs.items()
            ],
            "emit": emit,
            "allowed_lateness": to_micros(allowed_lateness, "allowed_lateness"),
            "late": late,
            "late_rule": late_rule,
            "max_keys": max_keys,
            "eviction": eviction,
            "time": time,
            "state_ttl_ms": None if state_ttl is None else to_millis(state_ttl, "state_ttl"),
            "adaptive": wm.core_config() if isinstance(wm, AdaptiveOutOfOrderness) else None,
            "lateness": None if lateness is None else lateness.core_config(),
        }
        self.fingerprint: int = _native.validate_pipeline(self._config)
        if schema is not None:
            self.output_schema(schema)

    @property
    def config(self) -> dict[str, Any]:
        """The normalised configuration sent to the core: durations in microseconds,
        except those named ``_ms`` (clock ticks: milliseconds of the system clock)."""
        return dict(self._config)

    def output_schema(self, schema: pa.Schema) -> pa.Schema:
        """The ``windows`` schema for an input schema (checks columns and types)."""
        if self.lookup is not None:
            schema = self.lookup.enriched_schema(schema)
        return _native.pipeline_output_schema(self._config, schema)

    def without_clock(self) -> Pipeline:
        """This pipeline without its clock (one that can be shipped to Spark's
        executors)."""
        out = _copy.copy(self)
        out.clock = None
        return out

    def with_aggs(self, aggs: Mapping[str, Agg]) -> Pipeline:
        """This pipeline's settings with other aggregates, over another input (no
        input ``schema``, no lookup): every other argument it was built with carries
        over. Validated as a new pipeline is.

        >>> import tidemark as tm
        >>> pipe = tm.Pipeline("k", "ts", window=tm.Tumbling("1m"),
        ...                    watermark=tm.BoundedOutOfOrderness("5s", per="key"),
        ...                    aggs={"n": tm.count()})
        >>> p2 = pipe.with_aggs({"total": tm.sum("n")})
        >>> list(p2.aggs), p2.watermark.per, p2.config["delay"]
        (['total'], 'key', 5000000)
        """
        return Pipeline(**{**self._args, "aggs": aggs, "schema": None, "clock": self.clock})

    def unbounded(self) -> Pipeline:
        """This pipeline without bounds on event times (``max_ahead`` and
        ``max_behind`` ``None``): for a batch that is one arrival unit, which judges no
        row late and whose windows are its rows' own, as Spark's ``groupBy`` gives
        them. The same pipeline where it has none."""
        wm = self._args.get("watermark")
        if not isinstance(wm, BoundedOutOfOrderness) or (
            wm.max_ahead is None and wm.max_behind is None
        ):
            return self
        args = {**self._args, "watermark": wm.with_bounds(None, None), "clock": self.clock}
        out = Pipeline(**args)
        out.lookup = self.lookup
        return out

    def without_lookup(self) -> Pipeline:
        """This pipeline without its lookup (:meth:`enrich`)."""
        out = _copy.copy(self)
        out.lookup = None
        return out

    def enrich(
        self, table: ArrowData, on: str | list[str], how: str = "left", prefix: str | None = None
    ) -> Pipeline:
        """This pipeline with a broadcast lookup: every input row is joined with the
        small ``table`` on the ``on`` column(s) before it is aggregated, so ``aggs``
        (and keys) may use the table's columns (named ``prefix + name``).

        ``how="left"`` keeps rows without a match (lookup columns null);
        ``how="inner"`` drops them (counted as ``rows_unmatched``). Keys match by value
        (an ``int32`` input column finds ``int64`` table keys); table keys must be
        unique. One copy of the table serves all cores of an operator (its Arrow
        buffers are shared, not copied); :meth:`Operator.update_lookup` swaps in a new
        version. In Spark the table travels as a broadcast variable.

        >>> import pyarrow as pa, tidemark as tm
        >>> sites = pa.table({"device": [1, 2], "site": ["north", "south"]})
        >>> pipe = tm.Pipeline(key="site", event_time="ts", event_time_type="unixtimestamp_ms",
        ...                    window=tm.Tumbling("10s"), aggs={"n": tm.count()},
        ...                    watermark=tm.BoundedOutOfOrderness("5s"))
        >>> op = pipe.enrich(sites, on="device").operator()
        >>> out = op.process(pa.table({"device": [1, 2, 1], "ts": [1_000, 2_000, 3_000]}))
        >>> sorted((r["site"], r["n"]) for r in op.flush().windows.to_pylist())
        [('north', 2), ('south', 1)]
        """
        on_list = [on] if isinstance(on, str) else list(on)
        table = as_tabular(table, "the lookup table")
        if isinstance(table, pa.RecordBatch):
            table = pa.Table.from_batches([table])
        lookup = Lookup(table, on_list, how, prefix)
        # Validate now (unique keys, columns): the core indexes the table.
        _native.Operator(self._config).set_lookup(lookup.args)
        out = _copy.copy(self)
        out.lookup = lookup
        return out

    @classmethod
    def from_stream(
        cls,
        definition: Any,
        options: Mapping[str, Any] | None = None,
        *,
        key: str | list[str] | None,
        aggs: Mapping[str, Agg],
        window: Window,
        watermark: BoundedOutOfOrderness | None = None,
        schema: pa.Schema | None = None,
        **kwargs: Any,
    ) -> Pipeline:
        """A pipeline from a :class:`tidemark.StreamDefinition` (or its dict) and the
        options ``eventtime.enabled`` / ``eventtime.lateTolerance``.

        Event time on: the definition's column and type, and (unless ``watermark`` is
        given) a global watermark ``max event time - lateTolerance``. Event time off:
        ``time="processing"`` (rows stamped by the clock at ingest). Other keyword
        arguments go to :class:`Pipeline`.

        >>> import tidemark as tm
        >>> pipe = tm.Pipeline.from_stream(
        ...     {"name": "orders", "eventtime": {"column": "ts", "type": "unixtimestamp_ms"}},
        ...     {"eventtime.enabled": True, "eventtime.lateTolerance": "2s"},
        ...     key="shop", window=tm.Tumbling("1m"), aggs={"n": tm.count()})
        >>> pipe.event_time, pipe.config["delay"]
        ('ts', 2000000)
        """
        from tidemark.stream import resolve_stream

        if "time" in kwargs:
            raise ConfigError("time comes from eventtime.enabled in from_stream")
        opts, et = resolve_stream(definition, options, schema)
        if opts.enabled:
            assert et is not None
            return cls(
                key,
                et.column,
                event_time_type=et.type,
                aggs=aggs,
                window=window,
                watermark=watermark or BoundedOutOfOrderness(opts.late_tolerance),
                schema=schema,
                **kwargs,
            )
        return cls(
            key,
            et.column if et is not None else "processing_time",
            aggs=aggs,
            window=window,
            watermark=watermark,
            time="processing",
            schema=schema,
            **kwargs,
        )

    def operator(self, state: bytes | None = None, **options: Unpack[OperatorOptions]) -> Operator:
        """A stateful operator; ``state`` (from :meth:`Operator.snapshot`) restores one.
        The options are :class:`Operator`'s: ``clock`` (default: the pipeline's),
        ``cores=1``, ``queue_capacity=4``, ``hot_keys=None``, ``pin_cores=False``,
        ``ordered=True``.

        ``cores > 1`` shards the keyed state over that many worker threads (started
        now, stopped when the operator is garbage-collected): each owns the windows,
        timers and watermarks of its keys, fed by a hash router through bounded queues
        of ``queue_capacity`` messages. The output is identical to ``cores=1``; the GIL
        is released while the cores work. A snapshot restores with the same ``cores``.

        A global aggregate (``key=None``) on several cores is two-phase: rows go to the
        cores in turn, each keeps partial aggregates, and the partials of each window
        merge when it closes. ``hot_keys=share`` spreads any key carrying at least that
        share of a batch's rows over all cores the same way (exact results, for skewed
        input such as one key with half of the rows). Both need a global or partition
        watermark, tumbling or sliding windows and ``emit="on_window_close"``.

        ``pin_cores=True`` pins worker ``i`` to CPU core ``i`` (a dedicated machine;
        leave it off where cores are shared, as in Spark executors).

        ``ordered=True`` (default): each call's windows come sorted by window end,
        start and key. ``ordered=False`` lets them come in any order (with ``cores=1``:
        in the order they closed or changed, a call's retractions first): the same
        rows, built faster, for consumers that do not depend on the order, such as a
        Spark DataFrame (``tidemark.spark`` runs its operators this way).
        """
        if options.get("clock") is None:
            options["clock"] = self.clock
        return Operator(self, state, **options)

    def __repr__(self) -> str:
        when = (
            "time='processing'" if self.time == "processing" else f"event_time={self.event_time!r}"
        )
        return (
            f"Pipeline(key={self.key!r}, {when}, "
            f"window={self.window!r}, watermark={self.watermark!r}, aggs={list(self.aggs)!r}, "
            f"late_rule={self.late_rule!r})"
        )

    def __copy__(self) -> Pipeline:
        # A copy in this process (enrich, without_lookup) keeps the clock: only
        # pickling, which would take it to another process, refuses it.
        out = object.__new__(type(self))
        out.__dict__.update(self.__dict__)
        return out

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        if state.get("clock") is not None:
            raise TypeError(
                "a Pipeline with a clock cannot be pickled (clocks are process-local); "
                "build it with clock=None for Spark"
            )
        return state


@dataclass(frozen=True)
class Lookup:
    """A broadcast lookup attached by :meth:`Pipeline.enrich`."""

    table: pa.Table
    on: list[str]
    how: str
    prefix: str | None

    @property
    def args(self) -> tuple[pa.Table, list[str], str, str | None]:
        """The lookup as the core takes it: ``(table, on, how, prefix)``."""
        return (self.table, self.on, self.how, self.prefix)

    def enriched_schema(self, schema: pa.Schema) -> pa.Schema:
        """The input schema with the table's non-key columns appended (nullable), as
        the core joins them."""
        return _native.lookup_schema(self.table, self.on, self.how, self.prefix, schema)
