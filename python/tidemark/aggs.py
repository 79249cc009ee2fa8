"""The aggregates of a pipeline: :class:`Agg` and the functions that build one
(``tm.count()``, ``tm.sum("value")``, ...). The module's ``sum``, ``min`` and ``max``
are aggregates, not Python's builtins."""

from __future__ import annotations

from dataclasses import dataclass

from tidemark.errors import ConfigError

__all__ = [
    "Agg",
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
