"""The one table of Spark's types as tidemark's Spark layer needs them: Spark's size
estimate of a value, whether a column is fixed-width, and how each type fares as a
key, an event time or a folded aggregate (see :func:`spark_type`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class SparkType:
    """What tidemark knows of one Spark type (one row of :data:`TYPES`)."""

    #: Spark's ``DataType.defaultSize`` (``None``: Spark's 20 bytes of a value it does
    #: not size by width, as a string; a decimal: 8 or 16 by its precision).
    size: int | None = None
    #: A fixed-width column: cheap to send to a task unread.
    fixed: bool = False
    #: An integer column (a source partition, an epoch count).
    integer: bool = False
    #: Its sum per group fits a long (the pipeline's sum of it is int64).
    small_int: bool = False
    #: Spark and tidemark order its values alike (min and max fold exactly).
    ordered: bool = False
    #: As a key: ``"fixed"`` (at most ``_native.MAX_FIXED_VALUE_BYTES``), ``"variable"``
    #: (its bytes and ``_native.VARIABLE_VALUE_OVERHEAD``), ``None``: not a key type
    #: the core takes.
    key: str | None = None
    #: Spark's ``groupBy`` and tidemark's keys tell its values apart alike.
    groups_alike: bool = False


def _integer(size: int, small: bool = True) -> SparkType:
    return SparkType(
        size=size,
        fixed=True,
        integer=True,
        small_int=small,
        ordered=True,
        key="fixed",
        groups_alike=True,
    )


def _time(size: int) -> SparkType:
    return SparkType(size=size, fixed=True, ordered=True, key="fixed", groups_alike=True)


#: Spark's types by their class name (``type(field.dataType).__name__``).
TYPES: dict[str, SparkType] = {
    "ByteType": _integer(1),
    "ShortType": _integer(2),
    "IntegerType": _integer(4),
    "LongType": _integer(8, small=False),
    "FloatType": SparkType(size=4, fixed=True, key="fixed"),
    "DoubleType": SparkType(size=8, fixed=True, key="fixed"),
    "BooleanType": SparkType(size=1, fixed=True, key="fixed", groups_alike=True),
    "DecimalType": SparkType(fixed=True, key="fixed"),
    "DateType": _time(4),
    "TimestampType": _time(8),
    "TimestampNTZType": _time(8),
    "StringType": SparkType(key="variable", groups_alike=True),
    "BinaryType": SparkType(key="variable", groups_alike=True),
    "CharType": SparkType(key="variable"),
    "VarcharType": SparkType(key="variable"),
    "DayTimeIntervalType": SparkType(size=8),
    "YearMonthIntervalType": SparkType(size=4),
}

_OTHER = SparkType()


def spark_type(data_type: Any) -> SparkType:
    """What tidemark knows of Spark ``data_type`` (nothing, for a type not listed)."""
    return TYPES.get(type(data_type).__name__, _OTHER)


def type_name(data_type: Any) -> str:
    """Spark ``data_type``'s class name (``"TimestampType"``), its key in :data:`TYPES`."""
    return type(data_type).__name__


def value_bytes(data_type: Any) -> int:
    """Spark's estimate of one value of ``data_type`` (``DataType.defaultSize``)."""
    if type_name(data_type) == "DecimalType":
        return 8 if data_type.precision <= 18 else 16
    size = spark_type(data_type).size
    return 20 if size is None else size
