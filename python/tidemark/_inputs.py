"""What the watermark trackers accept as keys and event times, turned into what the
core reads: Arrow key columns (or a list of Python keys) and event times as Arrow
arrays or ints. The core parses every time (``_native.parse_event_time``); nothing
here judges a time by its type's name."""

from __future__ import annotations

import datetime as _dt
import numbers as _numbers
from typing import Any

import pyarrow as pa

from tidemark import _native
from tidemark._arrow import as_tabular
from tidemark._duration import Duration, ticks


def delay(value: Duration, setting: str) -> int:
    """Event-time durations: ints are ticks as given; strings/timedeltas are microseconds."""
    return ticks(value, setting)


def key_columns(keys: Any) -> list[Any] | None:
    """Arrow key columns for ``keys``, or ``None`` if ``keys`` is a sequence of Python keys.

    Accepted: one Arrow array / chunked array / polars Series / numpy array / pandas
    Series (one key column); a RecordBatch / Table / polars or pandas DataFrame or a
    2-D numpy array (every column is a key column); a list or tuple of Arrow arrays (several key
    columns).
    """
    if isinstance(keys, (pa.Array, pa.ChunkedArray)):
        return [keys]
    if isinstance(keys, (pa.RecordBatch, pa.Table)):
        return list(keys.columns)
    if hasattr(keys, "__arrow_c_stream__") or hasattr(keys, "__arrow_c_array__"):
        # A polars or pandas DataFrame (or other tabular exporter) has columns; a
        # Series / array does not.
        if hasattr(keys, "columns"):
            return list(as_tabular(keys, "keys").columns)
        return [keys]
    if _is_ndarray_like(keys):
        # A numpy array or pandas Series: one key column (a 2-D array: one per column).
        if getattr(keys, "ndim", 1) == 2:
            return [pa.array(keys[:, j]) for j in range(keys.shape[1])]
        return [pa.array(keys)]
    if (
        isinstance(keys, (list, tuple))
        and keys
        and all(isinstance(k, (pa.Array, pa.ChunkedArray)) for k in keys)
    ):
        return list(keys)
    return None


def keyed_call(inner: Any, method: str, keys: Any, event_times: Any) -> Any:
    """A native keyed tracker's batch ``method`` (``update``, ``is_late``) on any keys
    and event times the Python trackers take: Arrow key columns with Arrow times
    (``<method>_columns``), or a list of Python keys with ints or Arrow times
    (``<method>_pykeys``)."""
    cols = key_columns(keys)
    if cols is None:
        return getattr(inner, f"{method}_pykeys")(list(keys), _pykey_times(event_times))
    return getattr(inner, f"{method}_columns")(cols, _event_times(event_times))


def _is_ndarray_like(data: Any) -> bool:
    """A numpy array or pandas Series (not an Arrow object): typed values Arrow reads
    as they are (a sequence of numpy scalars would be read one Python object each)."""
    return hasattr(data, "__array__") and hasattr(data, "dtype") and hasattr(data, "shape")


def _event_times(times: Any) -> Any:
    if isinstance(times, (pa.Array, pa.ChunkedArray)) or hasattr(times, "__arrow_c_array__"):
        return times
    if hasattr(times, "__arrow_c_stream__"):
        return times
    if _is_ndarray_like(times):
        # int ticks stay int64; datetime64 values become Arrow timestamps.
        return pa.array(times)
    times = list(times)
    try:
        arr = pa.array(times)  # inferred: a float is not truncated into ticks
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):
        arr = None  # mixed ints and datetimes, or what is no time
    if arr is not None and (pa.types.is_integer(arr.type) or pa.types.is_timestamp(arr.type)):
        return arr
    if arr is not None and pa.types.is_null(arr.type):
        return arr.cast(pa.int64())
    return pa.array(_python_times(times), pa.int64())


def _pykey_times(times: Any) -> Any:
    """Event times paired with a sequence of Python keys: a list of ints as given (other
    times, such as datetimes, each as :func:`time_value` reads it), or (anything
    array-like) an Arrow array, whose timestamps the core reads as epoch microseconds."""
    if isinstance(times, (pa.Array, pa.ChunkedArray)) or _is_ndarray_like(times):
        return _event_times(times)
    if hasattr(times, "__arrow_c_array__") or hasattr(times, "__arrow_c_stream__"):
        return times
    times = list(times)
    if all(t is None or isinstance(t, _numbers.Integral) for t in times):
        return times
    return _python_times(times)


def _python_times(times: list[Any]) -> list[Any]:
    """A sequence of Python event times as ints (see :func:`time_value`); a missing one
    (``None``, NaT) is ``None``: a row the batch skips. What is no time raises naming
    its position."""
    out = []
    for i, t in enumerate(times):
        try:
            out.append(None if _missing(t) else time_value(t))
        except TypeError as e:
            raise TypeError(f"event_times[{i}]: {e}") from None
    return out


def _time_like(t: Any) -> bool:
    """A datetime, date, pandas Timestamp or NaT (each a ``datetime.date``) or a numpy
    scalar (``datetime64``): what Arrow may read as a timestamp or date."""
    return isinstance(t, _dt.date) or (hasattr(t, "dtype") and getattr(t, "shape", None) == ())


def _missing(t: Any) -> bool:
    """Whether a Python event time is missing: ``None``, or a time that is not equal to
    itself (pandas ``NaT``, numpy ``NaT``)."""
    return t is None or (_time_like(t) and bool(t != t))


def time_value(t: Any) -> Any:
    """One event time: an int as it is (ticks), a datetime, date, pandas Timestamp,
    numpy datetime64 or Arrow timestamp scalar as epoch microseconds (naive ones taken
    as UTC), as the batch methods read timestamp arrays. A missing time (``None``, NaT)
    is a ``TypeError``: one event needs a time (the batch methods skip rows without
    one); so is anything else (a float, a string), named in the message."""
    if isinstance(t, pa.Scalar):
        t = t.as_py()
    if _missing(t):
        raise TypeError(
            f"event_time is {t!r}: an event needs a time (update_batch skips rows whose "
            "time is null)"
        )
    if isinstance(t, _numbers.Integral):
        return t
    if _time_like(t):
        arr = pa.array([t])
        if pa.types.is_timestamp(arr.type) or pa.types.is_date(arr.type):
            # The core turns it into epoch microseconds exactly as it does a column.
            micros, _, _ = _native.parse_event_time(arr)
            return micros[0].as_py()
    raise TypeError(
        f"event_time is {t!r} ({type(t).__name__}): an event time is an int (ticks, "
        "e.g. epoch milliseconds) or a datetime"
    )
