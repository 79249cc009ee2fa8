"""Arrow input handling shared by every entry point.

Anything that exports the Arrow PyCapsule interface is accepted: pyarrow RecordBatch and
Table, polars DataFrame, duckdb results, nanoarrow, arro3. Conversions here never copy
buffers: pyarrow imports the capsules zero-copy.
"""

from __future__ import annotations

from typing import Any, TypeAlias

import pyarrow as pa

from tidemark.errors import ConfigError, MissingColumnError

ArrowData = Any
"""Tabular Arrow data: any object with ``__arrow_c_array__`` or ``__arrow_c_stream__``."""

Tabular: TypeAlias = "pa.RecordBatch | pa.Table"


def as_tabular(data: ArrowData, what: str = "data") -> Tabular:
    """Views ``data`` as a pyarrow RecordBatch or Table without copying (a Spark
    DataFrame's rows are fetched into this process with ``toArrow()``)."""
    if isinstance(data, (pa.RecordBatch, pa.Table)):
        return data
    spark_rows = _spark_rows(data, what)
    if spark_rows is not None:
        return spark_rows
    try:
        if hasattr(data, "__arrow_c_array__"):
            return pa.record_batch(data)
        if hasattr(data, "__arrow_c_stream__"):
            return pa.table(data)
    except pa.ArrowInvalid as e:
        # A column (an array, a polars Series) exports a non-struct type.
        raise TypeError(
            f"{what} must be Arrow tabular data with named columns, got "
            f"{type(data).__name__} ({e}); wrap a single column in a table, e.g. "
            "pa.table({'name': array})"
        ) from None
    raise TypeError(
        f"{what} must be Arrow tabular data (a pyarrow RecordBatch or Table, a polars "
        f"DataFrame, or any object with __arrow_c_array__ / __arrow_c_stream__), "
        f"got {type(data).__name__}{_hint(data)}"
    )


def _hint(data: Any) -> str:
    """What to do with a lazy frame that holds no rows yet."""
    if (type(data).__module__ or "").startswith("polars") and type(data).__name__ == "LazyFrame":
        return "; call .collect() on it first"
    return ""


def _spark_rows(data: Any, what: str) -> pa.Table | None:
    """A Spark DataFrame's rows, fetched into this process with ``toArrow()`` (timestamps
    in UTC, as Spark's session time zone gives them); ``None`` for anything else. (Its
    own ``__arrow_c_stream__`` runs an extra job and fails on timestamp columns.)"""
    if not (type(data).__module__ or "").startswith("pyspark") or not hasattr(data, "toArrow"):
        return None
    if getattr(data, "isStreaming", False):
        raise TypeError(
            f"{what} is a streaming Spark DataFrame: run the pipeline with "
            "tidemark.spark.StreamProcessor in foreachBatch"
        )
    table: pa.Table = data.toArrow()
    return table


def as_array(data: Any, what: str = "values") -> pa.Array | pa.ChunkedArray:
    """Views ``data`` as a pyarrow Array or ChunkedArray (sequences are converted)."""
    if isinstance(data, (pa.Array, pa.ChunkedArray)):
        return data
    if hasattr(data, "__arrow_c_array__"):
        return pa.array(data)
    if hasattr(data, "__arrow_c_stream__"):
        return pa.chunked_array(data)
    try:
        return pa.array(data)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError) as e:
        raise ConfigError(f"{what}: cannot convert to an Arrow array: {e}") from None


def require_column(names: list[str], name: str) -> None:
    """:class:`MissingColumnError` listing ``names`` unless ``name`` is one of them."""
    if name not in names:
        raise MissingColumnError(
            f"column {name!r} not found; available columns: {', '.join(names)}"
        )


def column(data: Tabular, name: str) -> pa.Array | pa.ChunkedArray:
    """The column ``name``, or :class:`MissingColumnError` listing the columns."""
    require_column(data.schema.names, name)
    return data.column(name)
