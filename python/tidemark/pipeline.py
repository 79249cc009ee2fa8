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
import datetime as _dt
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

import pyarrow as pa

from tidemark import _native
from tidemark._arrow import ArrowData, as_tabular, column
from tidemark._duration import Duration, micros_datetime, to_micros, to_millis
from tidemark.clock import Clock, native_clock
from tidemark.errors import ConfigError
from tidemark.event_time import apply_user_parser, resolve_event_time_type

__all__ = [
    "Agg",
    "BoundedOutOfOrderness",
    "Operator",
    "Output",
    "Pipeline",
    "Session",
    "Sliding",
    "TimerService",
    "Tumbling",
    "approx_count_distinct",
    "count",
    "count_distinct",
    "first",
    "last",
    "max",
    "max_by",
    "mean",
    "min",
    "min_by",
    "percentile_approx",
    "stddev",
    "sum",
    "variance",
]

_SCOPES = ("global", "partition", "key")
_IDLENESS = ("event_time", "clock")
# Source partition ids a pipeline takes: 0 to 2**20 - 1 (the core's SOURCE_PARTITIONS).
_SOURCE_PARTITIONS = 1 << 20


@dataclass(frozen=True)
class BoundedOutOfOrderness:
    """Watermark ``W = max(event time) - delay``, per scope.

    Parameters
    ----------
    delay : str, timedelta or int
        Bounded out-of-orderness (ints are microseconds).
    per : str
        ``"global"`` (one watermark, Spark's behaviour), ``"partition"`` (one per source
        partition in ``partition_column``, combined by minimum over active partitions)
        or ``"key"`` (one per key: a key's windows close on its own watermark).
    idle_timeout : str, timedelta or int, optional
        Partitions (``per="partition"``) or keys (``per="key"``) that sent no rows
        while the stream moved on this much are idle: excluded from the combined
        watermark (an idle key's windows close on the global watermark), until they
        send again. Measured as ``idleness`` says. Ints are milliseconds.
    idleness : str
        What ``idle_timeout`` (and the pipeline's ``state_ttl``) is measured in:

        * ``"event_time"`` (default): the stream's **event time**, the largest event
          time the scope has seen. An input is idle at a batch when the stream's event
          time as the batch began is more than ``idle_timeout`` past the stream's
          event time when the last batch with its rows began. The data alone decides:
          a replay, a backfill or a restart with a backlog, read fast or slow, gives
          the same windows. A stream that goes quiet as a whole makes nothing idle
          (its event time stands still); what its watermark closed still comes out
          (see ``StreamProcessor``).
        * ``"clock"``: the pipeline's clock (``Pipeline(clock=...)``; in Spark, the
          driver's clock read once per micro-batch): an input is idle when it sent
          nothing for ``idle_timeout`` of wall time. For live sources whose inputs may
          fall silent while the others go quiet too; a replay at another speed gives
          other windows.

        See docs/guide/watermark-scopes.md for what each risks.
    max_ahead : str, timedelta or int, optional
        Rows whose event time is more than this ahead of the stream's event time (the
        largest event time the scope saw before the batch) go to the error output with
        the reason, so that one absurd event time (a clock set to 2300) moves no
        watermark and makes no input idle. The first batch has nothing to measure
        from. ``None`` (default): no bound; for a live stream, a bound a few times the
        longest gap between batches you expect is a sound choice (e.g. ``"1h"``).
        Ints are microseconds.
    partition_column : str
        The integer source-partition column for ``per="partition"``.
    partitions : int, optional
        ``per="partition"``: the source's partitions, ``0`` to ``partitions - 1``,
        declared up front (as a Kafka topic's partition count). Each holds the
        combined watermark back from the first batch until it reports rows or goes
        idle (``idle_timeout``), so a partition that starts late is not outrun by the
        others. Without it a partition counts from its first row on. Partitions
        outside the range are still tracked from their first row.

    Examples
    --------
    A Kafka source (``spark.readStream.format("kafka")``) gives each row its topic
    partition in the ``partition`` column: declare the topic's 8 partitions so that
    none is judged by the others' progress before it reports.

    >>> import tidemark as tm
    >>> wm = tm.BoundedOutOfOrderness("5s", per="partition", partitions=8, idle_timeout="1m")
    >>> wm.partitions, wm.partition_column
    (8, 'partition')
    """

    delay: Duration = "0s"
    per: str = "global"
    idle_timeout: Duration | None = None
    partition_column: str = "partition"
    partitions: int | None = None
    idleness: str = "event_time"
    max_ahead: Duration | None = None

    def __post_init__(self) -> None:
        if self.per not in _SCOPES:
            raise ConfigError(f"per={self.per!r}: use one of {', '.join(map(repr, _SCOPES))}")
        if self.idleness not in _IDLENESS:
            raise ConfigError(
                f"watermark.idleness={self.idleness!r}: use {_IDLENESS[0]!r} (idle when the "
                f"stream's event time moved on, the default) or {_IDLENESS[1]!r} (idle on the "
                "pipeline's clock, for live sources)"
            )
        if self.partitions is not None:
            if not isinstance(self.partitions, int) or isinstance(self.partitions, bool):
                raise ConfigError(
                    f"watermark.partitions must be an int (the source's partition count), "
                    f"got {self.partitions!r}"
                )
            if self.per != "partition":
                raise ConfigError(
                    f'watermark.partitions declares source partitions: use per="partition" '
                    f"(got per={self.per!r})"
                )
            if not 1 <= self.partitions <= _SOURCE_PARTITIONS:
                raise ConfigError(
                    f"watermark.partitions must be between 1 and {_SOURCE_PARTITIONS}, "
                    f"got {self.partitions}"
                )

    def __repr__(self) -> str:
        # The settings that mean something for this scope: the partition column only
        # per partition, the idle timeout only when set.
        out = f"BoundedOutOfOrderness(delay={self.delay!r}, per={self.per!r}"
        if self.idle_timeout is not None:
            out += f", idle_timeout={self.idle_timeout!r}"
        if self.idleness != _IDLENESS[0]:
            out += f", idleness={self.idleness!r}"
        if self.max_ahead is not None:
            out += f", max_ahead={self.max_ahead!r}"
        if self.per == "partition":
            out += f", partition_column={self.partition_column!r}"
        if self.partitions is not None:
            out += f", partitions={self.partitions!r}"
        return out + ")"


@dataclass(frozen=True)
class Tumbling:
    """Fixed, non-overlapping windows of ``size`` (aligned to the epoch plus ``offset``)."""

    size: Duration
    offset: Duration = "0s"


@dataclass(frozen=True)
class Sliding:
    """Windows of ``size`` starting ``every`` (``every <= size``)."""

    size: Duration
    every: Duration
    offset: Duration = "0s"


@dataclass(frozen=True)
class Session:
    """Per-key sessions: a session ends after ``gap`` without events; an event can
    bridge two sessions, which then merge. Events exactly ``gap`` apart are one session
    (sessions that touch merge, as in Spark's ``session_window`` and Flink)."""

    gap: Duration


@dataclass(frozen=True)
class Rows:
    """The last ``n`` rows of each key: a moving aggregate (e.g. a moving average),
    one output row per input row, with ``emit="on_update"``.

    Rows of a key are taken in arrival order across calls and in event-time order
    within a call. Each output row has ``window_start`` (event time of the oldest of
    the key's last ``n`` rows) and ``window_end`` (the row's own event time,
    inclusive). Count-based: no watermark, no late rows; state is ``n`` rows per key.

    >>> import pyarrow as pa, tidemark as tm
    >>> pipe = tm.Pipeline(key="k", event_time="ts", event_time_type="unixtimestamp_ms",
    ...                    window=tm.Rows(2), aggs={"avg": tm.mean("v")}, emit="on_update")
    >>> out = pipe.operator().process(pa.table({"k": ["a", "a", "a"], "ts": [1, 2, 3],
    ...                                         "v": [1.0, 3.0, 5.0]}))
    >>> out.windows.column("avg").to_pylist()
    [1.0, 2.0, 4.0]
    """

    n: int


@dataclass(frozen=True)
class Agg:
    """An aggregate: build with :func:`count`, :func:`sum`, :func:`mean`, ..."""

    kind: str
    column: str | None = None
    ddof: int = 1
    by: str | None = None
    #: ``percentile_approx``: the percentage and the accuracy.
    quantile: tuple[float, int] | None = None

    def __post_init__(self) -> None:
        if (
            isinstance(self.ddof, bool)
            or not isinstance(self.ddof, int)
            or not 0 <= self.ddof <= 255
        ):
            raise ConfigError(
                f"{self.kind}(ddof=...): ddof must be an int from 0 (population) to 255, "
                f"got {self.ddof!r}"
            )


def count(column: str | None = None) -> Agg:
    """Number of rows, or of non-null values of ``column``."""
    return Agg("count", column)


def sum(column: str) -> Agg:
    """Sum: int64 for integer columns, float64 for floats, ``decimal(min(38, p + 10),
    s)`` for ``decimal(p, s)`` (Spark's type for ``sum``). Exact and order
    independent; an integer or decimal sum beyond its output type is null, a float sum
    beyond the double range is ±inf."""
    return Agg("sum", column)


def min(column: str) -> Agg:
    """Smallest value (NaN is greatest, as in Spark)."""
    return Agg("min", column)


def max(column: str) -> Agg:
    """Largest value."""
    return Agg("max", column)


def mean(column: str) -> Agg:
    """Arithmetic mean: float64, or ``decimal(min(38, p + 4), min(38, s + 4))`` for
    ``decimal(p, s)`` (Spark's type for ``avg``), rounded half away from zero."""
    return Agg("mean", column)


def variance(column: str, ddof: int = 1) -> Agg:
    """Variance, float64 (``ddof=1``: sample, as Spark's ``variance``; ``0``:
    population)."""
    return Agg("variance", column, ddof)


def stddev(column: str, ddof: int = 1) -> Agg:
    """Standard deviation, float64 (``ddof=1``: sample; ``0``: population)."""
    return Agg("stddev", column, ddof)


def first(column: str) -> Agg:
    """The non-null value with the earliest event time (ties: the smallest value)."""
    return Agg("first", column)


def last(column: str) -> Agg:
    """The non-null value with the latest event time (ties: the largest value)."""
    return Agg("last", column)


def min_by(column: str, by: str) -> Agg:
    """The value of ``column`` in the row with the smallest ``by`` value: Spark's
    ``min_by``. Rows whose ``by`` is null are skipped; of rows with equal ``by``
    values, the smallest value is kept (null first), so the result never depends on
    row order (Spark keeps whichever comes first)."""
    return Agg("min_by", column, by=by)


def max_by(column: str, by: str) -> Agg:
    """The value of ``column`` in the row with the largest ``by`` value: Spark's
    ``max_by`` (ties: the largest value; rows with a null ``by`` skipped)."""
    return Agg("max_by", column, by=by)


def percentile_approx(column: str, percentage: float = 0.5, accuracy: int = 10_000) -> Agg:
    """The value at ``percentage`` (0 to 1) of the window's non-null values: Spark's
    ``percentile_approx(col, percentage, accuracy)``, with Spark's own algorithm (a
    Greenwald-Khanna summary whose answer's rank is off by at most about
    ``n / accuracy``). Up to ``accuracy / 2`` values it is exact and Spark's answer:
    the value at rank ``ceil(percentage * n)`` in sorted order. Numeric and temporal
    columns; the result has the column's type. Mergeable across cores, sessions and
    snapshots; its state grows with ``accuracy``, not with the window's rows."""
    if isinstance(percentage, bool) or not isinstance(percentage, (int, float)):
        raise ConfigError(f"percentile_approx: percentage must be a number, got {percentage!r}")
    if not 0.0 <= float(percentage) <= 1.0:
        raise ConfigError(
            f"percentile_approx: percentage must be between 0 and 1, got {percentage}"
        )
    if isinstance(accuracy, bool) or not isinstance(accuracy, int) or not 1 <= accuracy < 2**31:
        raise ConfigError(f"percentile_approx: accuracy must be a positive int, got {accuracy!r}")
    return Agg("percentile_approx", column, quantile=(float(percentage), accuracy))


def count_distinct(column: str) -> Agg:
    """Number of distinct non-null values, exact: Spark's ``count_distinct`` /
    ``count(DISTINCT col)`` (``NaN`` counts once, ``-0.0`` equals ``0.0``). The state
    holds every distinct value of the window; :func:`approx_count_distinct` bounds it."""
    return Agg("count_distinct", column)


def approx_count_distinct(column: str) -> Agg:
    """Number of distinct non-null values, estimated with HyperLogLog++ as Spark's
    ``approx_count_distinct(col)`` does at its default 5% relative standard deviation:
    the same hash of each value and the same 512 registers (512 bytes of state per
    window), so the same answer up to about 400 distinct values; above that Spark
    also subtracts an empirical bias, and the two may differ by about that bias."""
    return Agg("approx_count_distinct", column)


class Output(NamedTuple):
    """What one ``process`` / ``flush`` call produced (pyarrow Tables)."""

    windows: pa.Table
    """Key columns, ``window_start``, ``window_end``, one column per aggregate (and
    ``retract`` in ``on_update`` mode)."""
    late: pa.Table
    """Late input rows, with the input's columns."""
    errors: pa.Table
    """Input rows that could not be processed, with a ``reason`` column.

    Every call gives ``late`` and ``errors`` in the schemas of the latest batch, even
    empty (a ``flush`` reads no rows): the outputs of a stream's calls concatenate.
    Before any batch, the pipeline's schemas (:meth:`Operator.empty_output`); after a
    restore from a snapshot, until the next batch, they hold the columns the pipeline
    reads."""

    def __repr__(self) -> str:
        # Row counts, not the tables (print out.windows for those).
        return (
            f"Output(windows={self.windows.num_rows} rows, late={self.late.num_rows} rows, "
            f"errors={self.errors.num_rows} rows)"
        )


def _window_dict(window: Any) -> dict[str, Any]:
    if isinstance(window, Tumbling):
        return {
            "kind": "tumbling",
            "size": to_micros(window.size, "window.size"),
            "offset": to_micros(window.offset, "window.offset"),
        }
    if isinstance(window, Sliding):
        return {
            "kind": "sliding",
            "size": to_micros(window.size, "window.size"),
            "slide": to_micros(window.every, "window.every"),
            "offset": to_micros(window.offset, "window.offset"),
        }
    if isinstance(window, Session):
        return {"kind": "session", "gap": to_micros(window.gap, "window.gap")}
    if isinstance(window, Rows):
        if not isinstance(window.n, int) or isinstance(window.n, bool):
            raise ConfigError(f"tm.Rows(n) needs an int, got {window.n!r}")
        return {"kind": "rows", "n": window.n}
    raise ConfigError(
        "window must be tm.Tumbling, tm.Sliding, tm.Session or tm.Rows, "
        f"got {type(window).__name__}"
    )


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
    allowed_lateness : str, timedelta or int
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
    state_ttl : str, timedelta or int, optional
        Drop a key's state (watermark, activity, open windows) once it has had no rows
        for this long, measured as the watermark's ``idleness`` says (by default in
        event time: while the stream's event time moved on this much). Windows still
        open are emitted early, so nothing is lost (as after eviction, the key reopens
        none of them); ``metrics()`` counts ``keys_expired`` and ``windows_expired``. Bounds state
        for keys that stop reporting.
    schema : pyarrow.Schema, optional
        The input schema, to check columns and types now rather than at the first batch.

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
        window: Tumbling | Sliding | Session | Rows,
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
    ) -> None:
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
            "window": _window_dict(window),
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
        _native.Operator(self._config).set_lookup(table, on_list, how, prefix)
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
        window: Tumbling | Sliding | Session | Rows,
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

    def operator(
        self,
        state: bytes | None = None,
        *,
        clock: Clock | None = None,
        cores: int = 1,
        queue_capacity: int = 4,
        hot_keys: float | None = None,
        pin_cores: bool = False,
        ordered: bool = True,
    ) -> Operator:
        """A stateful operator; ``state`` (from :meth:`Operator.snapshot`) restores one.

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
        return Operator(
            self,
            state,
            clock=clock if clock is not None else self.clock,
            cores=cores,
            queue_capacity=queue_capacity,
            hot_keys=hot_keys,
            pin_cores=pin_cores,
            ordered=ordered,
        )

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

    def enriched_schema(self, schema: pa.Schema) -> pa.Schema:
        """The input schema with the table's non-key columns appended (nullable), as
        the core joins them."""
        return _native.lookup_schema(self.table, self.on, self.how, self.prefix, schema)


class Operator:
    """The stateful operator of a :class:`Pipeline` (see ``Pipeline.operator()``)."""

    __slots__ = ("_inner", "_lock", "_options", "_pipeline", "pinned")

    def __init__(
        self,
        pipeline: Pipeline,
        state: bytes | None = None,
        *,
        clock: Clock | None = None,
        cores: int = 1,
        queue_capacity: int = 4,
        hot_keys: float | None = None,
        pin_cores: bool = False,
        ordered: bool = True,
    ) -> None:
        self._pipeline = pipeline
        # One call at a time: a second thread waits for the first (the native operator
        # runs with the GIL released and refuses a concurrent call).
        self._lock = threading.Lock()
        # What a pickled copy is built with (see __reduce__).
        self._options: dict[str, Any] = {
            "clock": clock,
            "cores": cores,
            "queue_capacity": queue_capacity,
            "hot_keys": hot_keys,
            "pin_cores": pin_cores,
            "ordered": ordered,
        }
        if not isinstance(cores, int) or isinstance(cores, bool) or cores < 1:
            raise ConfigError(f"cores must be a positive int, got {cores!r}")
        if not isinstance(ordered, bool):
            raise ConfigError(f"ordered must be True or False, got {ordered!r}")
        self._inner: _native.Operator | _native.ShardedOperator | _native.RowsOperator
        if cores == 1 and hot_keys is not None:
            raise ConfigError("hot_keys spreads keys over cores: it needs cores > 1")
        if isinstance(pipeline.window, Rows):
            if cores != 1 or pipeline.lookup is not None:
                raise ConfigError("ROWS windows run on one core, without a lookup")
            self._inner = _native.RowsOperator(pipeline._config, state)
        elif cores == 1:
            self._inner = _native.Operator(pipeline._config, native_clock(clock), state)
        else:
            self._inner = _native.ShardedOperator(
                pipeline._config, cores, queue_capacity, native_clock(clock), state, hot_keys
            )
        if pipeline.lookup is not None and not isinstance(self._inner, _native.RowsOperator):
            lk = pipeline.lookup
            self._inner.set_lookup(lk.table, lk.on, lk.how, lk.prefix)
        if not ordered and isinstance(self._inner, _native.Operator):
            self._inner.set_sorted_output(False)
        # Workers pinned to a CPU core (pin_cores=True).
        self.pinned = 0
        if pin_cores and isinstance(self._inner, _native.ShardedOperator):
            self.pinned = self._inner.pin_cores()

    def update_lookup(self, table: ArrowData) -> None:
        """Swaps in a new version of the pipeline's lookup table (same ``on``, ``how``
        and ``prefix``); the next ``process`` call joins with it."""
        lookup = self._pipeline.lookup
        if lookup is None or isinstance(self._inner, _native.RowsOperator):
            raise ConfigError("this pipeline has no lookup: use Pipeline.enrich(...)")
        table = as_tabular(table, "the lookup table")
        self._inner.set_lookup(table, lookup.on, lookup.how, lookup.prefix)
        self._options["lookup_table"] = table

    @property
    def cores(self) -> int:
        """Worker threads (1: the calling thread does the work)."""
        return self._inner.cores if isinstance(self._inner, _native.ShardedOperator) else 1

    def __repr__(self) -> str:
        m = self._inner.metrics()
        return (
            f"Operator({self._pipeline!r}, cores={self.cores}, batches={m.get('batches', 0)}, "
            f"keys={m.get('keys', 0)}, windows_open={m.get('windows_open', 0)}, "
            f"watermark={m.get('watermark')})"
        )

    def _single(self, what: str) -> _native.Operator:
        if not isinstance(self._inner, _native.Operator):
            raise ConfigError(f"{what} needs an operator with cores=1 and time windows")
        return self._inner

    @property
    def pipeline(self) -> Pipeline:
        """The pipeline this operator runs."""
        return self._pipeline

    def _parsed(self, data: ArrowData) -> tuple[Any, Any]:
        """``data`` as Arrow, and its event times where a user parser reads them."""
        parsed = None
        p = self._pipeline
        table = as_tabular(data)
        if p._parser is not None and p.time == "event":
            assert p.event_time_type is not None
            parsed = apply_user_parser(p.event_time_type, p._parser, column(table, p.event_time))[0]
            if isinstance(parsed, pa.ChunkedArray):
                parsed = parsed.combine_chunks()
        return table, parsed

    def process(self, data: ArrowData) -> Output:
        """Processes one arrival unit (a batch; a Table counts as one batch).

        Returns the windows closed (or updated) by this call, the late rows and the
        error rows. ``data`` is any Arrow tabular object (pyarrow, polars, pandas, ...),
        or a batch Spark DataFrame, whose rows are fetched into this process with
        ``toArrow()`` (for work spread over a cluster, see :mod:`tidemark.spark`).
        A flushed operator takes no more rows (:class:`ConfigError`).
        """
        table, parsed = self._parsed(data)
        with self._lock:
            return Output(*self._inner.process(table, parsed))

    def ingest(self, data: ArrowData) -> None:
        """The first half of :meth:`process`, for operators that each hold part of a
        scope (the state partitions of a Spark micro-batch): judges and adds the rows
        and advances this operator's own watermarks (see :meth:`progress`), but closes
        nothing. Combine every operator's :meth:`progress` with
        :class:`ScopeWatermark`, then call :meth:`complete` on each."""
        table, parsed = self._parsed(data)
        with self._lock:
            self._single("ingest").ingest(table, parsed)

    def complete(self, close_watermark: int | None = None) -> Output:
        """The second half of :meth:`process`: closes the windows that
        ``close_watermark`` (combined over every operator of the scope; ``None``: this
        operator's own) passed and returns the call's output. Under Spark's late rule
        (the default) a call closes at the watermark it began with instead (the one
        given by :meth:`set_external_watermark` before :meth:`ingest`, else its own),
        and ``close_watermark`` is not used."""
        with self._lock:
            return Output(*self._single("complete").complete(close_watermark))

    def tick(self) -> Output:
        """A call without rows: time moves on by itself.

        With ``time="processing"`` the watermark follows the clock, so windows close
        in wall time even when no rows arrive (a processing-time ticker);
        with event time, keys and partitions that went idle on the clock release
        their windows. An operator restored from a snapshot does this before its
        first batch too; a fresh one has nothing to close (tables without columns).
        """
        with self._lock:
            return self._typed(Output(*self._inner.tick()))

    def flush(self) -> Output:
        """End of input: closes every open window and returns them. Before any batch,
        tables in the pipeline's schemas (see :meth:`empty_output`)."""
        with self._lock:
            return self._typed(Output(*self._inner.flush()))

    def empty_output(self) -> Output:
        """The outputs of a call that saw no batch yet: empty tables in the pipeline's
        schemas. With ``Pipeline(schema=...)`` exactly the schemas a batch of that
        schema gives; without it, the columns by name (keys, ``window_start``,
        ``window_end``, the aggregates; for late and error rows the columns the
        pipeline reads, and ``reason``), of type null until a batch brings the types.

        >>> import tidemark as tm
        >>> pipe = tm.Pipeline(key="k", event_time="ts", window=tm.Tumbling("10s"),
        ...                    aggs={"n": tm.count()}, watermark=tm.BoundedOutOfOrderness("1s"))
        >>> pipe.operator().flush().windows.column_names
        ['k', 'window_start', 'window_end', 'n']
        """
        p = self._pipeline
        if p.schema is not None and p.lookup is None:
            errors = p.schema.append(pa.field("reason", pa.string(), nullable=False))
            return Output(
                p.output_schema(p.schema).empty_table(),
                p.schema.empty_table(),
                errors.empty_table(),
            )
        names = [*p.key, "window_start", "window_end", *p.aggs]
        if p.emit == "on_update":
            names.append("retract")
        read = list(dict.fromkeys([*p.key, *([p.event_time] if p.time == "event" else [])]))
        if p.watermark.per == "partition":
            read.append(p.watermark.partition_column)
        read += [c for a in p.aggs.values() for c in (a.column, a.by) if c is not None]
        read = list(dict.fromkeys(read))

        def table(cols: list[str]) -> pa.Table:
            return pa.schema([(c, pa.null()) for c in cols]).empty_table()

        return Output(table(names), table(read), table([*read, "reason"]))

    def _typed(self, out: Output) -> Output:
        """``out``, or before any batch (tables without columns) :meth:`empty_output`."""
        return self.empty_output() if out.windows.num_columns == 0 else out

    def snapshot(self) -> bytes:
        """The whole state (windows, aggregates, timers, watermarks) as bytes:
        versioned, checksummed, tied to this pipeline's configuration."""
        with self._lock:
            return bytes(self._inner.snapshot())

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickles as its pipeline, snapshot and options. The clock travels in the
        # options (a ManualClock as a new clock at the same reading), not in the
        # pipeline, which refuses to pickle with one.
        pipe = _copy.copy(self._pipeline)
        pipe.clock = None
        return (_unpickle_operator, (pipe, self.snapshot(), dict(self._options)))

    @property
    def watermark(self) -> int | None:
        """The watermark in epoch microseconds (key scope: the highest global one)."""
        return self._inner.watermark

    def watermark_datetime(self) -> _dt.datetime | None:
        """:attr:`watermark` as a UTC datetime."""
        return micros_datetime(self._inner.watermark)

    def set_external_watermark(self, watermark: int | None) -> None:
        """Drives this operator, which holds part of a scope, with the watermark the
        scope's call began with, combined elsewhere (the Spark driver combines every
        task's :meth:`progress` with :class:`ScopeWatermark`): it judges the rows
        (global and partition scope) and, unless :meth:`complete` is given the
        combined watermark, closes windows (global scope: or this operator's own
        watermark, if higher; per key: idle keys' windows). ``None`` returns to the
        operator's own watermark."""
        self._single("set_external_watermark").set_external_watermark(watermark)

    def set_external_time(self, time: int | None) -> None:
        """Drives this operator, which holds part of a scope, with the scope's event
        time combined elsewhere (:attr:`ScopeWatermark.time` of every operator's
        :meth:`progress`, epoch microseconds): idleness in event time and
        ``max_ahead`` are measured from it, so every part of the scope judges alike.
        ``None`` returns to the operator's own."""
        self._single("set_external_time").set_external_time(time)

    def progress(self) -> dict[str, Any]:
        """What the last ``process`` call saw: ``max_event_time``, ``partition_max``
        (``[(partition, max event time)]``), ``key_global`` (per-key scope: the
        minimum watermark over active keys), ``on_time_max`` (the largest event time
        of its on-time rows) and ``key_parts`` (per key: the minimum watermark over
        active keys, and the highest key watermark seen): what
        :class:`ScopeWatermark` combines."""
        return self._inner.progress()

    def key_watermark(self, key: Any) -> int | None:
        """The watermark of one key (meaningful with ``per="key"``)."""
        return self._single("key_watermark").key_watermark(key)

    def metrics(self) -> dict[str, Any]:
        """Counters: ``rows_in``, ``late_dropped_count``, ``rows_error``,
        ``windows_emitted``, ``updates_emitted``, ``windows_open``,
        ``sessions_closed_by_timer``, ``sessions_closed_by_watermark``, keys, ...

        With ``cores > 1`` the counters are summed over cores and ``cores`` lists each
        core's ``records_processed``, ``processing_time_us``, ``queue_depth``,
        ``queue_capacity``, ``channel_utilization``, ``utilization``, ``backpressure``
        (``healthy`` < 0.7 <= ``warning`` < 0.85 <= ``critical`` < 0.95 <=
        ``saturated``), ``backpressure_events`` and ``latency_p50_us`` / ``p95`` /
        ``p99`` (per batch, from an HDR-style histogram); ``hot_rows_spread`` and
        ``hot_keys`` (in the last batch) count hot-key spreading."""
        return self._inner.metrics()


class ScopeWatermark:
    """The watermark of a pipeline's scope, combined over operators that each hold
    part of it (the rule one operator applies to itself, in one home).

    Global: ``max(on-time event time) - delay`` over every operator; per source
    partition: one watermark per partition (every row counting), the minimum over
    active ones (idle ones excluded; all idle: the maximum; declared partitions hold
    it back until they report or go idle); per key: the minimum over every operator's
    active keys (none active: the highest key watermark), which closes idle keys'
    windows. Under Flink's and the per-row rule the operators close at what ``advance``
    gives; under Spark's (the default) a call closes at the combined watermark it began
    with (give it to each operator with ``set_external_watermark`` before ``ingest``).

    >>> import pyarrow as pa, tidemark as tm
    >>> pipe = tm.Pipeline(key="k", event_time="ts", event_time_type="unixtimestamp_ms",
    ...                    window=tm.Tumbling("10s"), aggs={"n": tm.count()},
    ...                    watermark=tm.BoundedOutOfOrderness("0s"), late_rule="flink")
    >>> ops = [pipe.operator(), pipe.operator()]
    >>> ops[0].ingest(pa.table({"k": ["a"], "ts": [12_000]}))
    >>> ops[1].ingest(pa.table({"k": ["b"], "ts": [3_000]}))
    >>> scope = tm.ScopeWatermark(pipe)
    >>> w = scope.advance([op.progress() for op in ops])
    >>> w
    12000000
    >>> [op.complete(w).windows.num_rows for op in ops]
    [0, 1]
    """

    __slots__ = ("_inner",)

    def __init__(
        self, pipeline: Pipeline, state: bytes | None = None, *, clock: Clock | None = None
    ) -> None:
        self._inner = _native.ScopeWatermark(pipeline._config, native_clock(clock), state)

    def advance(self, progress: list[dict[str, Any]]) -> int | None:
        """Combines one call's :meth:`Operator.progress` of every operator; returns the
        watermark that closes windows after it (epoch microseconds, ``None``: none)."""
        return self._inner.advance(list(progress))

    @property
    def current(self) -> int | None:
        """The combined watermark so far (per key: the highest reported)."""
        return self._inner.current

    @property
    def time(self) -> int | None:
        """The scope's event time: the largest event time any operator reported
        (epoch microseconds, ``None``: none yet). Idleness in event time is measured
        on it (see :meth:`Operator.set_external_time`)."""
        return self._inner.time

    def to_bytes(self) -> bytes:
        """The state, for ``ScopeWatermark(pipeline, state)``."""
        return bytes(self._inner.to_bytes())

    def __repr__(self) -> str:
        return f"ScopeWatermark(current={self.current})"


def _unpickle_operator(pipe: Pipeline, state: bytes, options: dict[str, Any]) -> Operator:
    """An operator from :meth:`Operator.__reduce__`'s parts."""
    lookup_table = options.pop("lookup_table", None)
    if options["clock"] is not None:
        pipe = _copy.copy(pipe)
        pipe.clock = options["clock"]
    op = Operator(pipe, state, **options)
    if lookup_table is not None:
        op.update_lookup(lookup_table)
    return op


class TimerService:
    """Event-time and processing-time timers, unique per ``(timestamp, key, namespace)``.

    Timers fire exactly once, in ``(timestamp, key, namespace)`` order, when the
    watermark (or processing time) reaches them. Keys are any tidemark key (str,
    bytes, int, tuples); the namespace is an int (a window or session id).

    >>> import tidemark as tm
    >>> ts = tm.TimerService()
    >>> ts.register(2_000, "device-1", namespace=0)
    True
    >>> ts.register(1_000, "device-2")
    True
    >>> ts.advance_watermark(1_500)
    [(1000, 'device-2', 0)]
    >>> restored = tm.TimerService.restore(ts.snapshot())
    >>> restored.timers()
    [(2000, 'device-1', 0)]
    """

    __slots__ = ("_inner",)

    def __init__(self) -> None:
        self._inner = _native.TimerService()

    def register(self, timestamp: int, key: Any, namespace: int = 0, kind: str = "event") -> bool:
        """Registers a timer (``kind`` ``"event"`` or ``"processing"``); ``False`` if it
        existed already."""
        return self._inner.register(timestamp, key, namespace, kind)

    def delete(self, timestamp: int, key: Any, namespace: int = 0, kind: str = "event") -> bool:
        """Deletes a timer; ``False`` if there was none."""
        return self._inner.delete(timestamp, key, namespace, kind)

    def timers(self, kind: str = "event") -> list[tuple[int, Any, int]]:
        """Registered timers of ``kind`` (``"event"`` or ``"processing"``) in firing
        order."""
        return self._inner.timers(kind)

    def advance_watermark(self, watermark: int) -> list[tuple[int, Any, int]]:
        """Fires (and removes) every event-time timer with ``timestamp <= watermark``."""
        return self._inner.advance_watermark(watermark)

    def advance_processing_time(self, now: int) -> list[tuple[int, Any, int]]:
        """Fires every processing-time timer with ``timestamp <= now``."""
        return self._inner.advance_processing_time(now)

    @property
    def watermark(self) -> int | None:
        """The highest watermark seen."""
        return self._inner.watermark

    def __len__(self) -> int:
        return len(self._inner)

    def snapshot(self) -> bytes:
        """Every timer and the current times, as bytes."""
        return bytes(self._inner.snapshot())

    @classmethod
    def restore(cls, data: bytes) -> TimerService:
        """A timer service from :meth:`snapshot` bytes (raises StateCorruptedError)."""
        obj = cls.__new__(cls)
        obj._inner = _native.TimerService.restore(data)
        return obj

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickles as its snapshot.
        return (TimerService.restore, (self.snapshot(),))

    def __repr__(self) -> str:
        return (
            f"TimerService(event={len(self.timers('event'))}, "
            f"processing={len(self.timers('processing'))}, watermark={self.watermark})"
        )
