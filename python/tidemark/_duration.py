"""Duration arguments: ``"250ms"``, ``"5s"``, ``"2m"``, ``"1h"``, ``"1d"``, Spark's
``"10 seconds"`` / ``"1 minute"`` / ``"interval 2 hours"``, or a timedelta. A bare
int names no unit (the same number is microseconds of event time in one setting and
milliseconds of a clock in another), so the pipeline's settings refuse it, but ``0``;
the low-level trackers, which count in their caller's own ticks, take ints."""

from __future__ import annotations

import datetime as _dt

from tidemark import _native
from tidemark.errors import ConfigError

Duration = str | _dt.timedelta | int
"""A duration: a string such as ``"5s"``, ``"1h30m"`` or Spark's ``"10 seconds"``, or a
:class:`datetime.timedelta`. The pipeline's settings take no bare int but ``0``
(:func:`to_micros`, :func:`to_millis`); the trackers take ints as their own ticks."""


_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)


def micros_datetime(micros: int | None) -> _dt.datetime | None:
    """Epoch microseconds as a UTC datetime, exactly (no float on the way).

    >>> micros_datetime(1_700_000_000_123_457)
    datetime.datetime(2023, 11, 14, 22, 13, 20, 123457, tzinfo=datetime.timezone.utc)
    """
    return None if micros is None else _EPOCH + _dt.timedelta(microseconds=micros)


def timedelta_micros(value: _dt.timedelta) -> int:
    """A timedelta in whole microseconds (exact: no float on the way)."""
    return (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds


def to_micros(value: Duration, setting: str) -> int:
    """Converts an event-time span (a window size, a delay, a lateness) to microseconds.

    Raises :class:`ConfigError` naming ``setting`` for a bare int other than ``0`` (it
    names no unit), for anything that is not a duration, or for a negative one.
    """
    if isinstance(value, int) and not isinstance(value, bool) and value != 0:
        raise ConfigError(
            f"{setting}={value!r}: a bare int names no unit; write it with one, e.g. "
            f"'{value}us', '{value}ms' or '{value}s', or as a datetime.timedelta"
        )
    return _micros(value, setting)


def ticks(value: Duration, setting: str) -> int:
    """A span in the caller's own ticks (the trackers'): an int as given, a string or
    timedelta in microseconds."""
    return _micros(value, setting)


def _micros(value: Duration, setting: str) -> int:
    if isinstance(value, bool):
        raise ConfigError(f"{setting}: expected a duration such as '5s', got {value!r}")
    if isinstance(value, int):
        micros = value
    elif isinstance(value, _dt.timedelta):
        micros = timedelta_micros(value)
    elif isinstance(value, str):
        try:
            micros = _native.parse_duration(value)
        except ConfigError as e:
            raise ConfigError(f"{setting}: {e}") from None
    else:
        raise ConfigError(
            f"{setting}: expected a duration such as '5s' or a datetime.timedelta, "
            f"got {type(value).__name__}"
        )
    if micros < 0:
        raise ConfigError(f"{setting}: must not be negative, got {value!r}")
    return micros


def to_millis(value: Duration, setting: str) -> int:
    """Converts a clock span (``idle_timeout``, ``state_ttl``) to milliseconds, the
    ticks of tidemark's clocks; a bare int is refused as by :func:`to_micros`."""
    return to_micros(value, setting) // 1000


def clock_ticks(value: Duration, setting: str) -> int:
    """A clock span for the trackers: an int as clock ticks (milliseconds), a string or
    timedelta converted to them."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 0:
            raise ConfigError(f"{setting}: must not be negative, got {value!r}")
        return value
    return to_micros(value, setting) // 1000
