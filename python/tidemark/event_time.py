"""Event-time columns and the parser registry (``EventtimeTypeRegistry``).

An event-time column becomes int64 epoch microseconds (Spark's unit). Arrow
``timestamp`` and ``date`` columns need no type name; other columns name a parser:

=====================  ===========================================  =====================
name                   column types                                 meaning
=====================  ===========================================  =====================
``unixtimestamp_s``    integers, floats, numeric strings            seconds since epoch
``unixtimestamp_ms``   integers, floats, numeric strings            milliseconds
``unixtimestamp_us``   integers, floats, numeric strings            microseconds
``unixtimestamp_ns``   integers, floats, numeric strings            nanoseconds
``iso8601``            strings                                      RFC 3339 / ISO 8601
=====================  ===========================================  =====================

Register your own with :func:`register_event_time_type`. Rows that cannot be parsed
(null, NaN, garbage, out of range) never abort anything: they are reported with a
reason.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import pyarrow as pa
import pyarrow.compute as pc

from tidemark import _native
from tidemark._arrow import as_array, as_tabular, column
from tidemark.errors import ConfigError, TidemarkError, UnknownEventTimeTypeError

__all__ = [
    "EventTimeParser",
    "ParsedEventTime",
    "event_time_types",
    "parse_event_time",
    "register_event_time_type",
]

EventTimeParser = Callable[[Any], Any]
"""A vectorised parser: Arrow array in, int64 epoch-microsecond or timestamp array out
(same length; null where a value cannot be parsed)."""

_BUILTIN: tuple[str, ...] = tuple(_native.builtin_event_time_types())
_USER: dict[str, EventTimeParser] = {}


class ParsedEventTime(NamedTuple):
    """An event-time column parsed to epoch microseconds."""

    values: pa.Array | pa.ChunkedArray
    """int64 microseconds, one per input row, null where the row failed."""
    errors: pa.Table
    """``row`` (int64) and ``reason`` (string) for every row that failed."""


def register_event_time_type(name: str, parser: EventTimeParser, *, replace: bool = False) -> None:
    """Registers a vectorised event-time parser under ``name``.

    Parameters
    ----------
    name : str
        The name pipelines use as ``event_time_type``. Built-in names cannot be
        replaced.
    parser : callable
        Takes a pyarrow Array (or ChunkedArray) and returns an array of the same
        length: int64 epoch microseconds or any Arrow timestamp. Null where a value
        cannot be parsed; those rows become error rows.
    replace : bool
        Allow replacing a parser registered earlier under the same name.

    Examples
    --------
    >>> import pyarrow as pa, pyarrow.compute as pc, tidemark as tm
    >>> def yyyymmdd(arr):
    ...     return pc.strptime(arr, format="%Y%m%d", unit="us")
    >>> tm.register_event_time_type("yyyymmdd", yyyymmdd, replace=True)
    >>> "yyyymmdd" in tm.event_time_types()
    True
    >>> tm.parse_event_time(pa.array(["19700102"]), event_time_type="yyyymmdd").values
    <pyarrow.lib.Int64Array object at ...>
    [
      86400000000
    ]
    """
    if not isinstance(name, str) or not name:
        raise ConfigError(f"event time type name must be a non-empty string, got {name!r}")
    if not callable(parser):
        raise ConfigError(f"event time parser for {name!r} must be callable, got {parser!r}")
    if name in _BUILTIN:
        raise ConfigError(f"{name!r} is a built-in event time type and cannot be replaced")
    if name in _USER and not replace:
        raise ConfigError(
            f"event time type {name!r} is already registered; pass replace=True to replace it"
        )
    _USER[name] = parser


def event_time_types() -> list[str]:
    """Names of every registered event-time type, built-in and user, sorted."""
    return sorted((*_BUILTIN, *_USER))


def resolve_event_time_type(name: str | None) -> EventTimeParser | None:
    """The user parser registered as ``name``, ``None`` for built-ins (and for no name).

    Raises :class:`UnknownEventTimeTypeError` listing the registered names.
    """
    if name is None or name in _BUILTIN:
        return None
    if name in _USER:
        return _USER[name]
    raise UnknownEventTimeTypeError(
        f"unknown event time type {name!r}; registered types: {', '.join(event_time_types())}"
    )


def apply_user_parser(
    name: str, parser: EventTimeParser, values: pa.Array | pa.ChunkedArray
) -> tuple[pa.Array | pa.ChunkedArray, pa.Array, pa.Array]:
    """Runs a user parser and normalises its output (see :func:`parse_event_time`)."""
    try:
        out = parser(values)
    except Exception as e:
        raise TidemarkError(f"event time parser {name!r} failed: {e}") from e
    out = as_array(out, f"event time parser {name!r} output")
    if len(out) != len(values):
        raise ConfigError(
            f"event time parser {name!r} returned {len(out)} values for {len(values)} rows"
        )
    if not (pa.types.is_int64(out.type) or pa.types.is_timestamp(out.type)):
        raise ConfigError(
            f"event time parser {name!r} returned {out.type}; "
            "expected int64 epoch microseconds or a timestamp"
        )
    parsed, rows, reasons = _native.parse_event_time(out, None, True)
    if len(rows):
        # Say which failures were the parser's, not a null input.
        input_null = pc.is_null(pc.take(values, rows))
        reasons = pc.if_else(input_null, reasons, pa.scalar(f"{name} could not parse the value"))
    return parsed, rows, reasons


def parse_event_time(
    data: Any, column_name: str | None = None, *, event_time_type: str | None = None
) -> ParsedEventTime:
    """Parses an event-time column to int64 epoch microseconds.

    Parameters
    ----------
    data : Arrow array, chunked array, or tabular data
        The column itself, or a RecordBatch / Table / polars DataFrame together with
        ``column_name``.
    column_name : str, optional
        The column to parse when ``data`` is tabular.
    event_time_type : str, optional
        A registered type name (see :func:`event_time_types`); not needed for Arrow
        timestamp and date columns.

    Returns
    -------
    ParsedEventTime
        ``values`` (int64, null where a row failed) and ``errors`` (``row``,
        ``reason``). Where no conversion is needed (``timestamp[us]``) the values share
        the input's buffer.

    Examples
    --------
    >>> import pyarrow as pa, tidemark as tm
    >>> p = tm.parse_event_time(pa.array([1_500, None]), event_time_type="unixtimestamp_ms")
    >>> p.values.to_pylist(), p.errors.to_pylist()
    ([1500000, None], [{'row': 1, 'reason': 'event time is null'}])
    """
    if column_name is not None:
        if isinstance(data, (pa.Array, pa.ChunkedArray)):
            raise TypeError(
                f"column_name={column_name!r} names a column of tabular data, but data is "
                f"an array: parse it alone, e.g. parse_event_time(values, "
                f"event_time_type={column_name!r})"
            )
        values = column(as_tabular(data), column_name)
        label = column_name
    else:
        values = as_array(data, "event time")
        label = "event_time"
    parser = resolve_event_time_type(event_time_type)
    if parser is not None:
        assert event_time_type is not None
        parsed, rows, reasons = apply_user_parser(event_time_type, parser, values)
    else:
        parsed, rows, reasons = _native.parse_event_time(values, event_time_type, False, label)
    return ParsedEventTime(parsed, pa.table({"row": rows, "reason": reasons}))
