"""What a pipeline computes over: its watermark strategy (:class:`BoundedOutOfOrderness`:
the delay, the scope, idleness) and its window (:class:`Tumbling`, :class:`Sliding`,
:class:`Session`, :class:`Rows`), as the core's configuration reads them."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from tidemark import _native
from tidemark._duration import Duration, to_micros
from tidemark.errors import ConfigError

__all__ = [
    "AdaptiveOutOfOrderness",
    "BoundedOutOfOrderness",
    "Rows",
    "Session",
    "Sliding",
    "Tumbling",
]

# Source partition ids a pipeline takes: 0 to 2**20 - 1 (the core's SOURCE_PARTITIONS).
_SOURCE_PARTITIONS = 1 << 20


@dataclass(frozen=True)
class BoundedOutOfOrderness:
    """Watermark ``W = max(event time) - delay``, per scope.

    Parameters
    ----------
    delay : str or timedelta
        Bounded out-of-orderness.
    per : str
        ``"global"`` (one watermark, Spark's behaviour), ``"partition"`` (one per source
        partition in ``partition_column``, combined by minimum over active partitions)
        or ``"key"`` (one per key: a key's windows close on its own watermark).
    idle_timeout : str or timedelta, optional
        Partitions (``per="partition"``) or keys (``per="key"``) that sent no rows
        that were progress for them (rows behind their own watermark are not) while
        the stream moved on this much are idle: excluded from the combined watermark
        (an idle key's windows close on the global watermark), until they send again.
        Measured as ``idleness`` says. A global watermark has no inputs to idle: refused
        with ``per="global"``.
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
    max_ahead, max_behind : str, timedelta or None
        Rows whose event time lies more than ``max_ahead`` (default one day) in the
        future of the clock the batch began at, or more than ``max_behind`` (default
        30 days) before the stream's event time, go to the error output with the
        reason, so that one absurd event time (a device clock set to 2300, or reset to
        1970) moves no watermark, makes no input idle and opens no window. On a manual
        clock (a replay) ``max_ahead`` bounds rows ahead of the stream's event time. In
        the stream's first batch its rows judge each other (a row far outside their
        interquartile range). ``None``: no bound. See docs/guide/late-data.md.
    quorum : int
        How many keys' rows must reach an event time before it counts as the stream's
        event time or a source partition's progress (default 3): per batch, a
        partition's watermark follows the ``quorum``-th highest of its keys' largest
        event times, so a few keys with wrong clocks, or stray rows on a partition that
        lags, cannot move it while the partition's other keys are behind. Where fewer
        keys sent rows, all of them must agree. ``1``: the largest event time counts
        (Flink's and earlier tidemark's rule). ``per="global"`` keeps Spark's watermark
        (its largest on-time event time); the stream's event time, which idleness and
        the bounds above measure from, follows the quorum in every scope.
    partition_column : str
        The integer source-partition column for ``per="partition"``.
    partitions : int, optional
        ``per="partition"``: the source's partitions, ``0`` to ``partitions - 1``,
        declared up front (as a Kafka topic's partition count). Each holds the
        combined watermark back from the first batch until it reports rows or goes
        idle (``idle_timeout``), so a partition that starts late is not outrun by the
        others. Without it a partition counts from its first row on. Partitions
        outside the range are still tracked from their first row. A Kafka stream in
        ``StreamProcessor`` needs none: each micro-batch's offsets name every
        partition of the topic, and a partition whose records wait unread there is
        not idle (see docs/guide/watermark-scopes.md).

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
    max_ahead: Duration | None = "1d"
    max_behind: Duration | None = "30d"
    quorum: int = 3

    def __post_init__(self) -> None:
        _native.check_name("per", self.per)
        if self.idle_timeout is not None and self.per == "global":
            raise ConfigError(
                f"idle_timeout={self.idle_timeout!r} with per='global': one global watermark "
                "has no inputs that could go idle; use per='partition' (idle source "
                "partitions) or per='key' (idle keys), or drop idle_timeout"
            )
        if isinstance(self.quorum, bool) or not isinstance(self.quorum, int) or self.quorum < 1:
            raise ConfigError(
                f"watermark.quorum must be an int >= 1 (keys that must agree on progress; "
                f"1: the largest event time counts), got {self.quorum!r}"
            )
        for name in ("delay", "idle_timeout", "max_ahead", "max_behind"):
            value = getattr(self, name)
            if value is not None:
                to_micros(value, f"watermark.{name}")
        # "event_time" (idle when the stream's event time moved on, the default) or
        # "clock" (idle on the pipeline's clock, for live sources).
        _native.check_name("idleness", self.idleness)
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
        out += self._idle_repr()
        if self.per == "partition":
            out += f", partition_column={self.partition_column!r}"
        if self.partitions is not None:
            out += f", partitions={self.partitions!r}"
        return out + ")"

    def with_bounds(self, max_ahead: Duration | None, max_behind: Duration | None) -> Any:
        """This strategy with other bounds on event times (see ``max_ahead``)."""
        out = copy.copy(self)
        object.__setattr__(out, "max_ahead", max_ahead)
        object.__setattr__(out, "max_behind", max_behind)
        out.__post_init__()
        return out

    def _idle_repr(self) -> str:
        """The idleness, bounds and quorum settings of ``repr``, where not defaults."""
        out = ""
        if self.idle_timeout is not None:
            out += f", idle_timeout={self.idle_timeout!r}"
        if self.idleness != "event_time":
            out += f", idleness={self.idleness!r}"
        if self.max_ahead != "1d":
            out += f", max_ahead={self.max_ahead!r}"
        if self.max_behind != "30d":
            out += f", max_behind={self.max_behind!r}"
        if self.quorum != 3:
            out += f", quorum={self.quorum!r}"
        return out


def _ppb(quantile: float) -> int:
    """``quantile`` in parts per billion, as the core reads it."""
    return round(quantile * 1_000_000_000)


def _rows_for(quantile: float) -> int:
    """The rows a ``quantile`` of lateness is learned from: ``q / (1 - q)``, rounded up
    (in parts per billion, as the core reads the quantile; at most 2**32 - 1)."""
    ppb = _ppb(quantile)
    return min(max(1, -(-ppb // max(1, 1_000_000_000 - ppb))), 2**32 - 1)


@dataclass(frozen=True, init=False, repr=False)
class AdaptiveOutOfOrderness(BoundedOutOfOrderness):
    """A watermark per key whose delay each key learns from its own lateness.

    A row's lateness is how far its event time lies behind its key's largest event
    time as the row's batch began. Each key keeps a small histogram of its rows'
    lateness over the last ``horizon`` of its event time; after each batch that
    touched it, its delay is the ``quantile`` of that histogram (rounded up to a
    bucket bound, at most 1.41x above; from fewer than ``1 / (1 - quantile)`` rows, the
    largest lateness seen), clamped to ``[min_delay, max_delay]``. A key with fewer
    than ``min_rows`` rows in its histogram waits ``max_delay``: by default the rows
    its quantile needs, ``quantile / (1 - quantile)`` (999 for 0.999: the largest
    lateness of ``n`` rows keeps on average ``n / (n + 1)`` of a key's rows on time).
    Its watermark is then ``max(its
    watermark, max event time - delay)``: never moved back, so a longer delay holds it
    until the key's events pass it.

    Learned per batch (every row of a batch is judged with the delays as they stood
    when the batch began), so the same batches give the same windows whatever the
    order of their rows, the cores or the state partitions. Every window kind, late
    rule, ``max_keys`` and idleness work as with :class:`BoundedOutOfOrderness`
    ``(per="key")``; Spark's fold (``preaggregate``) does not apply (it keeps no
    row's own event time). State: about 180 bytes per key with the defaults (see
    docs/guide/watermark-scopes.md).

    Parameters
    ----------
    per : str
        ``"key"`` (the only scope a delay is learned for).
    quantile : float
        The share of a key's rows its delay should keep on time (0 < quantile < 1).
    min_delay, max_delay : str or timedelta
        Bounds of every key's delay; ``max_delay`` is also the delay of a key not seen
        enough yet.
    horizon : str or timedelta
        How much of a key's event time its lateness is learned over (between
        ``horizon / 2`` and ``horizon``): how fast a key's delay follows a change.
    min_rows : int, optional
        Rows a key's histogram must hold before its delay is learned (default:
        ``quantile / (1 - quantile)``, rounded up). The horizon must hold that many of
        a key's rows for it to learn (999 rows in 30 minutes with the defaults: a row
        every 1.8 s); for sparser keys lower ``quantile`` or ``min_rows``, or lengthen
        ``horizon``.
    idle_timeout, idleness, max_ahead, max_behind, quorum
        As for :class:`BoundedOutOfOrderness`.

    Examples
    --------
    >>> import tidemark as tm
    >>> wm = tm.AdaptiveOutOfOrderness(quantile=0.999, min_delay="1s", max_delay="10m")
    >>> wm.per, wm.delay, wm.horizon, wm.min_rows
    ('key', '10m', '1h', 999)
    >>> tm.AdaptiveOutOfOrderness(quantile=0.99).min_rows
    99
    """

    quantile: float = 0.999
    min_delay: Duration = "1s"
    max_delay: Duration = "10m"
    horizon: Duration = "1h"
    min_rows: int = 999

    def __init__(
        self,
        per: str = "key",
        *,
        quantile: float = 0.999,
        min_delay: Duration = "1s",
        max_delay: Duration = "10m",
        horizon: Duration = "1h",
        min_rows: int | None = None,
        idle_timeout: Duration | None = None,
        idleness: str = "event_time",
        max_ahead: Duration | None = "1d",
        max_behind: Duration | None = "30d",
        quorum: int = 3,
    ) -> None:
        if per != "key":
            raise ConfigError(
                f'AdaptiveOutOfOrderness learns a delay per key: use per="key" (got {per!r}); '
                "for one watermark per source partition or globally use BoundedOutOfOrderness"
            )
        if isinstance(quantile, bool) or not isinstance(quantile, (int, float)):
            raise ConfigError(f"quantile must be a number between 0 and 1, got {quantile!r}")
        if not 0.0 < float(quantile) < 1.0:
            raise ConfigError(f"quantile must be between 0 and 1 (exclusive), got {quantile!r}")
        lo = to_micros(min_delay, "watermark.min_delay")
        hi = to_micros(max_delay, "watermark.max_delay")
        if not 0 <= lo <= hi:
            raise ConfigError(
                f"AdaptiveOutOfOrderness needs 0 <= min_delay <= max_delay, got "
                f"min_delay={min_delay!r}, max_delay={max_delay!r}"
            )
        if to_micros(horizon, "watermark.horizon") < 2:
            raise ConfigError(f"horizon must be positive, got {horizon!r}")
        if min_rows is None:
            min_rows = _rows_for(float(quantile))
        if isinstance(min_rows, bool) or not isinstance(min_rows, int) or min_rows < 1:
            raise ConfigError(f"min_rows must be an int >= 1, got {min_rows!r}")
        values = {
            "delay": max_delay,
            "per": per,
            "idle_timeout": idle_timeout,
            "partition_column": "partition",
            "partitions": None,
            "idleness": idleness,
            "max_ahead": max_ahead,
            "max_behind": max_behind,
            "quorum": quorum,
            "quantile": float(quantile),
            "min_delay": min_delay,
            "max_delay": max_delay,
            "horizon": horizon,
            "min_rows": min_rows,
        }
        for name, value in values.items():
            object.__setattr__(self, name, value)
        self.__post_init__()

    def core_config(self) -> tuple[int, int, int, int]:
        """``(quantile in parts per billion, min_delay, horizon, min_rows)`` as the core
        reads them (durations in microseconds)."""
        return (
            _ppb(self.quantile),
            to_micros(self.min_delay, "watermark.min_delay"),
            to_micros(self.horizon, "watermark.horizon"),
            self.min_rows,
        )

    def __repr__(self) -> str:
        out = (
            f"AdaptiveOutOfOrderness(quantile={self.quantile!r}, min_delay={self.min_delay!r}, "
            f"max_delay={self.max_delay!r}, horizon={self.horizon!r}"
        )
        if self.min_rows != _rows_for(self.quantile):
            out += f", min_rows={self.min_rows!r}"
        return out + self._idle_repr() + ")"


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


#: A pipeline's window.
Window = Tumbling | Sliding | Session | Rows


def window_config(window: Any) -> dict[str, Any]:
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
