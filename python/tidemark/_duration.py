"""Duration arguments: ``"250ms"``, ``"5s"``, ``"2m"``, ``"1h"``, ``"1d"``, Spark's
``"10 seconds"`` / ``"1 minute"`` / ``"interval 2 hours"``, timedelta, or int."""

from __future__ import annotations

import datetime as _dt

from tidemark import _native
from tidemark.errors import ConfigError

Duration = str | _dt.timedelta | int
"""A duration: a string such as ``"5s"``, ``"1h30m"`` or Spark's ``"10 seconds"``, a
:class:`datetime.timedelta`, or an int, taken in the unit of what the duration is
measured against: event-time units for event-time spans (:func:`to_micros`:
microseconds for timestamp columns), clock ticks for clock spans (:func:`to_millis`:
milliseconds)."""


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

    Ints are taken as event-time units (microseconds for timestamp columns). Raises
    :class:`ConfigError` naming ``setting`` for anything else, or for a negative
    duration.
    """
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
            f"{setting}: expected a duration such as '5s', a datetime.timedelta or an int, "
            f"got {type(value).__name__}"
        )
    if micros < 0:
        raise ConfigError(f"{setting}: must not be negative, got {value!r}")
    return micros


def to_millis(value: Duration, setting: str) -> int:
    """Converts a clock span (``idle_timeout``, ``state_ttl``) to milliseconds, the
    ticks of tidemark's clocks; ints are taken as milliseconds."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 0:
            raise ConfigError(f"{setting}: must not be negative, got {value!r}")
        return value
    return to_micros(value, setting) // 1000
