"""Clocks: every time-dependent decision (idleness, processing time) reads one.

tidemark never reads the wall clock behind your back. Trackers and pipelines take
``clock=``: :class:`SystemClock` (the default) or :class:`ManualClock`, which only
moves when told to and makes idle detection and processing-time windows
deterministic in tests and replays.
"""

from __future__ import annotations

from tidemark import _native

__all__ = ["Clock", "ManualClock", "SystemClock"]


class SystemClock:
    """Monotonic wall clock in milliseconds since the Unix epoch.

    Readings start at the epoch time when the process first reads the clock and then
    advance monotonically, so they never jump back when the system time is adjusted.

    Examples
    --------
    >>> import tidemark as tm
    >>> c = tm.SystemClock()
    >>> c.now() > 1_600_000_000_000
    True
    """

    __slots__ = ("_inner",)

    def __init__(self) -> None:
        self._inner = _native.SystemClock()

    def now(self) -> int:
        """The current time in milliseconds."""
        return self._inner.now()

    def __reduce__(self) -> tuple[type[SystemClock], tuple[()]]:
        return (SystemClock, ())

    def __repr__(self) -> str:
        return "SystemClock()"


class ManualClock:
    """A clock that only moves when told to (ticks; by convention milliseconds).

    Copies of a tracker's clock are shared: advancing it is seen by every tracker and
    pipeline built with it.

    Parameters
    ----------
    start : int
        The initial reading.

    Examples
    --------
    >>> import tidemark as tm
    >>> c = tm.ManualClock(start=1_000)
    >>> c.advance(500)
    1500
    >>> c.set(2_000)
    >>> c.now()
    2000
    """

    __slots__ = ("_inner",)

    def __init__(self, start: int = 0) -> None:
        self._inner = _native.ManualClock(start)

    def now(self) -> int:
        """The current reading."""
        return self._inner.now()

    def advance(self, ticks: int) -> int:
        """Moves the clock forward by ``ticks`` (>= 0) and returns the new reading."""
        return self._inner.advance(ticks)

    def set(self, t: int) -> None:
        """Sets the clock to ``t``; raises ``ValueError`` if ``t`` is earlier than now."""
        self._inner.set(t)

    def __reduce__(self) -> tuple[type[ManualClock], tuple[int]]:
        # A pickled clock is a new clock at the same reading (not shared with this one).
        return (ManualClock, (self.now(),))

    def __repr__(self) -> str:
        return f"ManualClock(now={self.now()})"


Clock = SystemClock | ManualClock
"""Either clock."""


def native_clock(clock: Clock | None) -> _native.SystemClock | _native.ManualClock | None:
    """The native object behind ``clock`` (None: the system clock)."""
    if clock is None:
        return None
    if isinstance(clock, (SystemClock, ManualClock)):
        return clock._inner
    raise TypeError(f"clock must be tidemark.SystemClock or tidemark.ManualClock, got {clock!r}")
