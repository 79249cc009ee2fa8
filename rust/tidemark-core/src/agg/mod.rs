//! Aggregates with mergeable partial states.
//!
//! Every aggregate keeps a partial state ([`Acc`]) that can be updated row by row,
//! merged with another partial state (session merges, two-phase aggregation across
//! cores) and finalised into one output value. Results never depend on row order:
//! integer sums are exact (`i128`), float sums are exactly rounded ([`ExactSum`]),
//! min/max use a total order (NaN is greatest, `-0.0 == 0.0`, as in Spark), and
//! `first`/`last` break event-time ties by value.
//!
//! | aggregate | input | output |
//! |---|---|---|
//! | `count()` | none (rows) | int64 |
//! | `count(col)` | any | int64 (non-null values) |
//! | `sum(col)` | integer / float | int64 / float64 (null if no values or on int64 overflow) |
//! | `sum(col)` | `decimal(p, s)` | `decimal(min(38, p + 10), s)` (null if no values or beyond that precision) |
//! | `mean(col)` | integer / float | float64 |
//! | `mean(col)` | `decimal(p, s)` | `decimal(min(38, p + 4), min(38, s + 4))`, rounded half away from zero |
//! | `variance(col, ddof)`, `stddev(col, ddof)` | integer / float / decimal | float64 (null if fewer than `ddof + 1` values) |
//! | `min`, `max`, `first`, `last` | integer, float, decimal, boolean, temporal, string, binary | the input type |
//! | `count_distinct(col)` | any of those | int64 (distinct non-null values; `NaN` once, `-0.0 == 0.0`) |
//! | `approx_count_distinct(col)` | any of those | int64 (HyperLogLog++ as Spark's, 5% standard error) |
//! | `min_by(col, by)`, `max_by(col, by)` | any of those (both) | the type of `col` (ties in `by`: the smaller / larger value) |
//! | `percentile_approx(col, p, accuracy)` | integer, float, decimal, temporal | the input type (Spark's algorithm; exact up to `accuracy / 2` values) |
//!
//! Decimal sums and means are exact ([`WideSum`]) and follow Spark's result types for
//! `sum` and `avg` of a `DecimalType` column.

mod acc;
mod bind;
pub(crate) mod codec;
mod decimal;
mod exact;
mod hll;
mod quantile;

pub use quantile::QuantileSketch;
pub(crate) use quantile::Sample;

pub use decimal::{Unscaled, WideSum};

/// Fresh registers of `approx_count_distinct` (for reading them from a snapshot).
pub(crate) fn hll_registers() -> Box<[u8]> {
    hll::registers()
}
pub use acc::{Acc, ByValue, Input, Scalar};
pub use bind::BoundAgg;
pub use exact::ExactSum;

use crate::error::{Result, TidemarkError};

/// What an aggregate computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AggKind {
    /// Number of rows (`column: None`) or of non-null values.
    Count,
    /// Sum of non-null values.
    Sum,
    /// Smallest non-null value.
    Min,
    /// Largest non-null value.
    Max,
    /// Arithmetic mean.
    Mean,
    /// Variance with `ddof` delta degrees of freedom (1: sample, 0: population).
    Variance {
        /// Delta degrees of freedom.
        ddof: u8,
    },
    /// Standard deviation with `ddof` delta degrees of freedom.
    Stddev {
        /// Delta degrees of freedom.
        ddof: u8,
    },
    /// The non-null value with the smallest event time (ties: the smallest value).
    First,
    /// The non-null value with the largest event time (ties: the largest value).
    Last,
    /// Number of distinct non-null values, exact (Spark's `count(DISTINCT col)`).
    CountDistinct,
    /// Number of distinct non-null values, estimated with HyperLogLog++ at Spark's
    /// default relative standard deviation of 5% (Spark's `approx_count_distinct`).
    ApproxCountDistinct,
    /// The value of the row with the smallest `by` value (Spark's `min_by`; ties: the
    /// smallest value, null first).
    MinBy,
    /// The value of the row with the largest `by` value (Spark's `max_by`; ties: the
    /// largest value).
    MaxBy,
    /// The value at a quantile, with rank error `n / accuracy` (Spark's
    /// `percentile_approx(col, percentage, accuracy)`; exact below `2 * accuracy`
    /// values).
    PercentileApprox {
        /// The quantile in `[0, 1]`, as `f64` bits (so that the kind stays `Eq`).
        percentage_bits: u64,
        /// Spark's `accuracy` (relative rank error `1 / accuracy`).
        accuracy: u32,
    },
}

impl AggKind {
    /// Parses the names used by the Python API.
    pub fn from_name(name: &str, ddof: u8) -> Result<Self> {
        Ok(match name {
            "count" => AggKind::Count,
            "sum" => AggKind::Sum,
            "min" => AggKind::Min,
            "max" => AggKind::Max,
            "mean" | "avg" => AggKind::Mean,
            "variance" | "var" => AggKind::Variance { ddof },
            "stddev" | "std" => AggKind::Stddev { ddof },
            "first" => AggKind::First,
            "last" => AggKind::Last,
            "count_distinct" => AggKind::CountDistinct,
            "approx_count_distinct" => AggKind::ApproxCountDistinct,
            "min_by" => AggKind::MinBy,
            "max_by" => AggKind::MaxBy,
            "percentile_approx" => AggKind::PercentileApprox {
                percentage_bits: 0.5f64.to_bits(),
                accuracy: 10_000,
            },
            other => {
                return Err(TidemarkError::config(
                    "aggs",
                    format!(
                        "unknown aggregate {other:?}; use count, sum, min, max, mean, variance, \
                         stddev, first, last, count_distinct, approx_count_distinct, min_by, max_by or percentile_approx"
                    ),
                ))
            }
        })
    }

    /// The name users know this aggregate by.
    pub fn name(&self) -> &'static str {
        match self {
            AggKind::Count => "count",
            AggKind::Sum => "sum",
            AggKind::Min => "min",
            AggKind::Max => "max",
            AggKind::Mean => "mean",
            AggKind::Variance { .. } => "variance",
            AggKind::Stddev { .. } => "stddev",
            AggKind::First => "first",
            AggKind::Last => "last",
            AggKind::CountDistinct => "count_distinct",
            AggKind::ApproxCountDistinct => "approx_count_distinct",
            AggKind::MinBy => "min_by",
            AggKind::MaxBy => "max_by",
            AggKind::PercentileApprox { .. } => "percentile_approx",
        }
    }

    /// `percentile_approx` with `percentage` in `[0, 1]` and `accuracy >= 1`.
    pub fn percentile_approx(percentage: f64, accuracy: u32) -> Result<Self> {
        if !(0.0..=1.0).contains(&percentage) {
            return Err(TidemarkError::config(
                "percentile_approx",
                format!("percentage must be between 0 and 1, got {percentage}"),
            ));
        }
        if accuracy == 0 {
            return Err(TidemarkError::config(
                "percentile_approx",
                "accuracy must be at least 1",
            ));
        }
        Ok(AggKind::PercentileApprox {
            percentage_bits: percentage.to_bits(),
            accuracy,
        })
    }
}

/// One aggregate of a pipeline: output name, kind, input column.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AggSpec {
    /// Output column name.
    pub name: String,
    /// What to compute.
    pub kind: AggKind,
    /// Input column (`None` only for `count()` of rows).
    pub column: Option<String>,
    /// The column `min_by` / `max_by` order by (`None` for every other aggregate).
    pub by: Option<String>,
}

impl AggSpec {
    /// An aggregate named `name` of `kind` over `column` (`None`: count rows).
    pub fn new(name: &str, kind: AggKind, column: Option<&str>) -> Self {
        Self {
            name: name.to_string(),
            kind,
            column: column.map(str::to_string),
            by: None,
        }
    }

    /// `min_by` / `max_by` of `column` ordered by `by`.
    pub fn ordered(name: &str, kind: AggKind, column: &str, by: &str) -> Self {
        Self {
            by: Some(by.to_string()),
            ..Self::new(name, kind, Some(column))
        }
    }
}

#[cfg(test)]
mod tests;
