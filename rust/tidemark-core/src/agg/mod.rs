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

pub(crate) mod codec;
mod decimal;
mod exact;
mod hll;
mod quantile;

pub use quantile::QuantileSketch;
pub(crate) use quantile::Sample;

use std::cmp::Ordering;
use std::sync::Arc;

use arrow_array::builder::{
    BinaryBuilder, BooleanBuilder, Decimal128Builder, Float64Builder, Int64Builder, UInt64Builder,
};
use arrow_array::cast::AsArray;
use arrow_array::types::*;
use arrow_array::{
    Array, ArrayRef, BinaryViewArray, BooleanArray, Decimal128Array, Float64Array, Int64Array,
    UInt64Array,
};
use arrow_buffer::NullBuffer;
use arrow_schema::{DataType, Field, Schema};

pub use decimal::{Unscaled, WideSum};

/// Fresh registers of `approx_count_distinct` (for reading them from a snapshot).
pub(crate) fn hll_registers() -> Box<[u8]> {
    hll::registers()
}
pub use exact::ExactSum;

use crate::error::{Result, TidemarkError};
use crate::key::same_values;

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

/// How an input column is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    Rows,
    Int,
    UInt,
    Float,
    Bool,
    Bytes,
    /// `Decimal128`: unscaled `i128` values.
    Decimal,
}

fn class_of(dt: &DataType) -> Option<Class> {
    Some(match dt {
        DataType::UInt64 => Class::UInt,
        DataType::Float16 | DataType::Float32 | DataType::Float64 => Class::Float,
        DataType::Boolean => Class::Bool,
        DataType::Decimal128(_, _) => Class::Decimal,
        DataType::Utf8
        | DataType::LargeUtf8
        | DataType::Utf8View
        | DataType::Binary
        | DataType::LargeBinary
        | DataType::BinaryView => Class::Bytes,
        DataType::Dictionary(_, v) => class_of(v)?,
        dt if dt.is_integer()
            || matches!(
                dt,
                DataType::Date32
                    | DataType::Date64
                    | DataType::Timestamp(_, _)
                    | DataType::Time32(_)
                    | DataType::Time64(_)
                    | DataType::Duration(_)
            ) =>
        {
            Class::Int
        }
        _ => return None,
    })
}

fn value_type(dt: &DataType) -> &DataType {
    match dt {
        DataType::Dictionary(_, v) => v,
        other => other,
    }
}

/// An aggregate bound to an input schema.
#[derive(Debug, Clone)]
pub struct BoundAgg {
    /// The specification.
    pub spec: AggSpec,
    column: Option<usize>,
    /// `min_by` / `max_by`: the column ordered by, and how it is read.
    by: Option<(usize, Class)>,
    class: Class,
    input_type: DataType,
    output_type: DataType,
}

impl BoundAgg {
    /// Whether the result is the same in whatever order a window's rows are added.
    /// Only `min` and `max` of floats depend on it: of values that compare equal
    /// (`-0.0` and `0.0`, NaNs with different payloads) they keep the first.
    pub fn order_free(&self) -> bool {
        !(matches!(self.spec.kind, AggKind::Min | AggKind::Max) && self.class == Class::Float)
    }

    /// Binds `spec` to `schema`, checking that the column exists and fits.
    pub fn bind(spec: &AggSpec, schema: &Schema) -> Result<Self> {
        let Some(col) = &spec.column else {
            if spec.kind != AggKind::Count {
                return Err(TidemarkError::config(
                    format!("aggs[{:?}]", spec.name),
                    format!("{} needs a column", spec.kind.name()),
                ));
            }
            return Ok(BoundAgg {
                spec: spec.clone(),
                column: None,
                by: None,
                class: Class::Rows,
                input_type: DataType::Null,
                output_type: DataType::Int64,
            });
        };
        let idx = crate::error::column_index(schema, col)?;
        let dt = schema.field(idx).data_type().clone();
        let class = if spec.kind == AggKind::Count {
            Class::Rows
        } else {
            class_of(&dt).ok_or_else(|| {
                TidemarkError::config(
                    format!("aggs[{:?}]", spec.name),
                    format!("{}({col:?}) cannot read a {dt} column", spec.kind.name()),
                )
            })?
        };
        let numeric = matches!(
            class,
            Class::Int | Class::UInt | Class::Float | Class::Decimal
        );
        let temporal = matches!(
            value_type(&dt),
            DataType::Date32
                | DataType::Date64
                | DataType::Timestamp(_, _)
                | DataType::Time32(_)
                | DataType::Time64(_)
                | DataType::Duration(_)
        );
        let output_type = match spec.kind {
            AggKind::Count => DataType::Int64,
            AggKind::Sum | AggKind::Mean | AggKind::Variance { .. } | AggKind::Stddev { .. } => {
                if !numeric || temporal {
                    return Err(TidemarkError::config(
                        format!("aggs[{:?}]", spec.name),
                        format!(
                            "{}({col:?}) needs an integer or float column, got {dt}",
                            spec.kind.name()
                        ),
                    ));
                }
                match (spec.kind, class, value_type(&dt)) {
                    (AggKind::Sum, Class::Int | Class::UInt, _) => DataType::Int64,
                    (AggKind::Sum, Class::Decimal, &DataType::Decimal128(p, s)) => {
                        let (p, s) = decimal::sum_type(p, s);
                        DataType::Decimal128(p, s)
                    }
                    (AggKind::Mean, Class::Decimal, &DataType::Decimal128(p, s)) => {
                        let (p, s) = decimal::mean_type(p, s);
                        DataType::Decimal128(p, s)
                    }
                    _ => DataType::Float64,
                }
            }
            AggKind::Min
            | AggKind::Max
            | AggKind::First
            | AggKind::Last
            | AggKind::MinBy
            | AggKind::MaxBy => value_type(&dt).clone(),
            AggKind::PercentileApprox { .. } => {
                if !numeric && !temporal {
                    return Err(TidemarkError::config(
                        format!("aggs[{:?}]", spec.name),
                        format!(
                            "percentile_approx({col:?}) needs a numeric or temporal column, got {dt}"
                        ),
                    ));
                }
                value_type(&dt).clone()
            }
            AggKind::CountDistinct | AggKind::ApproxCountDistinct => DataType::Int64,
        };
        // Variance and stddev read decimals as doubles (as Spark does).
        let class = match (spec.kind, class) {
            (AggKind::Variance { .. } | AggKind::Stddev { .. }, Class::Decimal) => Class::Float,
            _ => class,
        };
        let by = match &spec.by {
            None => None,
            Some(b) => {
                let i = crate::error::column_index(schema, b)?;
                let bt = schema.field(i).data_type();
                let c = class_of(bt).ok_or_else(|| {
                    TidemarkError::config(
                        format!("aggs[{:?}]", spec.name),
                        format!("{} cannot order by a {bt} column", spec.kind.name()),
                    )
                })?;
                Some((i, c))
            }
        };
        Ok(BoundAgg {
            spec: spec.clone(),
            column: Some(idx),
            by,
            class,
            input_type: dt,
            output_type,
        })
    }

    /// Why the partial states of `self` cannot go on under `next`, the same aggregate
    /// bound to a later batch's schema (`None`: they can). They can where the column
    /// is read into the same kind of state and gives the same output values: another
    /// layout of the same type (see [`same_values`]), or another integer width for
    /// `sum` and `mean`.
    pub fn cannot_follow(&self, next: &BoundAgg) -> Option<String> {
        let state = |c: Class| if c == Class::UInt { Class::Int } else { c };
        if state(self.class) == state(next.class)
            && same_values(&self.output_type, &next.output_type)
        {
            return None;
        }
        Some(format!(
            "aggregate {:?} reads column {:?}, which changed type from {} to {} (the open \
             windows hold state built from {} values): give the column one type for the \
             whole stream, e.g. cast it before the pipeline",
            self.spec.name,
            self.spec.column.as_deref().unwrap_or(""),
            self.input_type,
            next.input_type,
            self.input_type,
        ))
    }

    /// The output field.
    pub fn output_field(&self) -> Field {
        Field::new(&self.spec.name, self.output_type.clone(), true)
    }

    /// A fresh partial state.
    pub fn new_acc(&self) -> Acc {
        match (self.spec.kind, self.class) {
            (AggKind::Count, _) => Acc::Count(0),
            (AggKind::Sum, Class::Float) => Acc::SumF(ExactSum::default(), 0),
            (AggKind::Sum | AggKind::Mean, Class::Decimal) => Acc::Dec(WideSum::default(), 0),
            (AggKind::Sum, _) => Acc::SumI(0, 0),
            (AggKind::Mean, Class::Float) => Acc::MeanF(ExactSum::default(), 0),
            (AggKind::Mean, _) => Acc::MeanI(0, 0),
            (AggKind::Variance { .. } | AggKind::Stddev { .. }, _) => {
                Acc::Moments(Box::default(), 0)
            }
            (AggKind::Min, _) => Acc::Min(None),
            (AggKind::Max, _) => Acc::Max(None),
            (AggKind::First, _) => Acc::First(None),
            (AggKind::Last, _) => Acc::Last(None),
            (AggKind::CountDistinct, _) => Acc::Distinct(Vec::new()),
            (AggKind::ApproxCountDistinct, _) => Acc::Hll(hll::registers()),
            (AggKind::MinBy, _) => Acc::MinBy(None),
            (AggKind::MaxBy, _) => Acc::MaxBy(None),
            (AggKind::PercentileApprox { accuracy, .. }, _) => {
                Acc::Quantiles(Box::new(QuantileSketch::new(accuracy)))
            }
        }
    }

    /// Reads this aggregate's input column from a batch.
    pub fn input(&self, columns: &[ArrayRef]) -> Result<Input> {
        let Some(idx) = self.column else {
            return Ok(Input::Rows);
        };
        let col = &columns[idx];
        if col.data_type() != &self.input_type {
            return Err(TidemarkError::config(
                format!("aggs[{:?}]", self.spec.name),
                format!(
                    "column {:?} changed type from {} to {} mid-stream",
                    self.spec.column.as_deref().unwrap_or(""),
                    self.input_type,
                    col.data_type()
                ),
            ));
        }
        let col = match col.data_type() {
            DataType::Dictionary(_, v) => arrow_cast::cast(col, v)?,
            _ => col.clone(),
        };
        if self.spec.kind == AggKind::ApproxCountDistinct {
            return Ok(Input::Hash(hll::spark_hashes(&col)?));
        }
        if let Some((i, class)) = self.by {
            let by = match columns[i].data_type() {
                DataType::Dictionary(_, v) => arrow_cast::cast(&columns[i], v)?,
                _ => columns[i].clone(),
            };
            return Ok(Input::By(
                Box::new(read_input(&col, self.class)?),
                Box::new(read_input(&by, class)?),
            ));
        }
        read_input(&col, self.class)
    }

    /// Finalises partial states into an output column.
    pub fn finish<'a>(&self, accs: impl Iterator<Item = &'a Acc>) -> Result<ArrayRef> {
        self.finish_states(accs)
    }
}

/// A column (dictionaries decoded) read as `class` for the accumulators.
fn read_input(col: &ArrayRef, class: Class) -> Result<Input> {
    {
        let col = col.clone();
        Ok(match class {
            Class::Rows => Input::NonNull(col.logical_nulls()),
            Class::Int => Input::Int(int64(&col)?.as_primitive::<Int64Type>().clone()),
            Class::UInt => Input::UInt(col.as_primitive::<UInt64Type>().clone()),
            Class::Float => Input::Float(
                arrow_cast::cast(&col, &DataType::Float64)?
                    .as_primitive::<Float64Type>()
                    .clone(),
            ),
            Class::Bool => Input::Bool(col.as_boolean().clone()),
            Class::Decimal => Input::Dec(col.as_primitive::<Decimal128Type>().clone()),
            Class::Bytes => Input::Bytes(
                arrow_cast::cast(&col, &DataType::BinaryView)?
                    .as_binary_view()
                    .clone(),
            ),
        })
    }
}

impl BoundAgg {
    fn finish_states<'a>(&self, accs: impl Iterator<Item = &'a Acc>) -> Result<ArrayRef> {
        // Sized up front: builders grown by doubling copy the column again and again.
        let rows = accs.size_hint().0;
        let arr: ArrayRef = match self.spec.kind {
            AggKind::Count => {
                let mut b = Int64Builder::with_capacity(rows);
                for a in accs {
                    b.append_value(a.count());
                }
                Arc::new(b.finish())
            }
            AggKind::Sum | AggKind::Mean if self.class == Class::Decimal => {
                let DataType::Decimal128(p, s) = self.output_type else {
                    unreachable!("decimal sums and means output decimals")
                };
                // A mean has 4 more decimal places than its input (fewer at scale 38).
                let extra = match value_type(&self.input_type) {
                    DataType::Decimal128(_, in_s) => (s - in_s) as u32,
                    _ => 0,
                };
                let mut b = Decimal128Builder::with_capacity(rows);
                for a in accs {
                    let v = match a {
                        Acc::Dec(sum, n) if *n > 0 => match self.spec.kind {
                            AggKind::Mean => sum.scaled_div(extra, *n as u64),
                            _ => sum.get(),
                        },
                        _ => None,
                    };
                    b.append_option(v.filter(|v| decimal::fits(*v, p)));
                }
                Arc::new(b.finish().with_precision_and_scale(p, s)?)
            }
            AggKind::Sum if self.output_type == DataType::Int64 => {
                let mut b = Int64Builder::with_capacity(rows);
                for a in accs {
                    b.append_option(a.int_sum());
                }
                Arc::new(b.finish())
            }
            AggKind::Sum | AggKind::Mean | AggKind::Variance { .. } | AggKind::Stddev { .. } => {
                let mut b = Float64Builder::with_capacity(rows);
                for a in accs {
                    b.append_option(a.float_value(self.spec.kind));
                }
                Arc::new(b.finish())
            }
            AggKind::CountDistinct | AggKind::ApproxCountDistinct => {
                let mut b = Int64Builder::with_capacity(rows);
                for a in accs {
                    b.append_value(match a {
                        Acc::Distinct(v) => v.len() as i64,
                        Acc::Hll(r) => hll::estimate(r),
                        _ => 0,
                    });
                }
                Arc::new(b.finish())
            }
            AggKind::Min
            | AggKind::Max
            | AggKind::First
            | AggKind::Last
            | AggKind::MinBy
            | AggKind::MaxBy => {
                let scalars = accs.map(|a| a.scalar());
                let arr = scalars_to_array(scalars, self.class, &self.output_type)?;
                return Ok(arrow_cast::cast(&arr, &self.output_type)?);
            }
            AggKind::PercentileApprox {
                percentage_bits, ..
            } => {
                let p = f64::from_bits(percentage_bits);
                let values: Vec<Option<Scalar>> = accs
                    .map(|a| match a {
                        Acc::Quantiles(q) => q.query(p),
                        _ => None,
                    })
                    .collect();
                let arr = scalars_to_array(
                    values.iter().map(Option::as_ref),
                    self.class,
                    &self.output_type,
                )?;
                return Ok(arrow_cast::cast(&arr, &self.output_type)?);
            }
        };
        Ok(arr)
    }
}

fn int64(col: &ArrayRef) -> Result<ArrayRef> {
    Ok(match col.data_type() {
        DataType::Int64 => col.clone(),
        DataType::Date32 | DataType::Time32(_) => {
            arrow_cast::cast(&arrow_cast::cast(col, &DataType::Int32)?, &DataType::Int64)?
        }
        _ => arrow_cast::cast(col, &DataType::Int64)?,
    })
}

fn scalars_to_array<'a>(
    scalars: impl Iterator<Item = Option<&'a Scalar>>,
    class: Class,
    output: &DataType,
) -> Result<ArrayRef> {
    Ok(match class {
        Class::Decimal => {
            let DataType::Decimal128(p, s) = *output else {
                unreachable!("decimal column")
            };
            let mut b = Decimal128Builder::new();
            for v in scalars {
                b.append_option(v.map(|v| match v {
                    Scalar::D(v) => v.get(),
                    _ => unreachable!("decimal column"),
                }));
            }
            Arc::new(b.finish().with_precision_and_scale(p, s)?)
        }
        Class::Int => {
            let mut b = Int64Builder::new();
            for s in scalars {
                b.append_option(s.map(|s| match s {
                    Scalar::I(v) => *v,
                    _ => unreachable!("int column"),
                }));
            }
            Arc::new(b.finish())
        }
        Class::UInt => {
            let mut b = UInt64Builder::new();
            for s in scalars {
                b.append_option(s.map(|s| match s {
                    Scalar::U(v) => *v,
                    _ => unreachable!("uint column"),
                }));
            }
            Arc::new(b.finish())
        }
        Class::Float => {
            let mut b = Float64Builder::new();
            for s in scalars {
                b.append_option(s.map(|s| match s {
                    Scalar::F(v) => *v,
                    _ => unreachable!("float column"),
                }));
            }
            Arc::new(b.finish())
        }
        Class::Bool => {
            let mut b = BooleanBuilder::new();
            for s in scalars {
                b.append_option(s.map(|s| match s {
                    Scalar::Bool(v) => *v,
                    _ => unreachable!("bool column"),
                }));
            }
            Arc::new(b.finish())
        }
        Class::Bytes => {
            let mut b = BinaryBuilder::new();
            for s in scalars {
                match s {
                    Some(Scalar::B(v)) => b.append_value(v),
                    Some(_) => unreachable!("bytes column"),
                    None => b.append_null(),
                }
            }
            let bin: ArrayRef = Arc::new(b.finish());
            // Strings come back as strings (the caller casts to the exact input type).
            bin
        }
        Class::Rows => unreachable!("count has no scalar"),
    })
}

/// One aggregate's input column for a batch, normalised to a few concrete types.
#[derive(Debug, Clone)]
pub enum Input {
    /// `count()` of rows.
    Rows,
    /// `count(col)`: the column's validity.
    NonNull(Option<NullBuffer>),
    /// Integers and temporal values as `Int64`.
    Int(Int64Array),
    /// `UInt64`.
    UInt(UInt64Array),
    /// Floats as `Float64`.
    Float(Float64Array),
    /// Booleans.
    Bool(BooleanArray),
    /// Decimals (unscaled values).
    Dec(Decimal128Array),
    /// Strings and binary as `BinaryView`.
    Bytes(BinaryViewArray),
    /// Spark's 64-bit hash of each value (`approx_count_distinct`).
    Hash(UInt64Array),
    /// `min_by` / `max_by`: the values and the column they are ordered by.
    By(Box<Input>, Box<Input>),
}

impl Input {
    /// Hints the CPU to bring `row`'s value into cache (rows are visited grouped by
    /// key, so in an order unrelated to memory).
    #[inline]
    pub fn prefetch(&self, row: usize) {
        match self {
            Input::Int(a) => crate::prefetch_at(a.values(), row),
            Input::UInt(a) => crate::prefetch_at(a.values(), row),
            Input::Float(a) => crate::prefetch_at(a.values(), row),
            Input::Dec(a) => crate::prefetch_at(a.values(), row),
            _ => {}
        }
    }

    /// The value of `row` (`None` for null; `Rows` / `NonNull` yield a dummy value).
    #[inline]
    fn value(&self, row: usize) -> Option<Scalar> {
        match self {
            Input::Rows => Some(Scalar::Bool(true)),
            Input::NonNull(n) => n
                .as_ref()
                .is_none_or(|n| n.is_valid(row))
                .then_some(Scalar::Bool(true)),
            Input::Int(a) => a.is_valid(row).then(|| Scalar::I(a.value(row))),
            Input::UInt(a) => a.is_valid(row).then(|| Scalar::U(a.value(row))),
            Input::Float(a) => a.is_valid(row).then(|| Scalar::F(a.value(row))),
            Input::Bool(a) => a.is_valid(row).then(|| Scalar::Bool(a.value(row))),
            Input::Dec(a) => a
                .is_valid(row)
                .then(|| Scalar::D(Unscaled::new(a.value(row)))),
            Input::Bytes(a) => a.is_valid(row).then(|| Scalar::B(a.value(row).to_vec())),
            Input::Hash(a) => a.is_valid(row).then(|| Scalar::U(a.value(row))),
            Input::By(v, _) => v.value(row),
        }
    }
}

/// The state of `min_by` / `max_by`: the `by` value kept and its row's value.
pub type ByValue = (Scalar, Option<Scalar>);

/// A single value of an aggregate input.
#[derive(Debug, Clone, PartialEq)]
pub enum Scalar {
    /// Integer or temporal value.
    I(i64),
    /// Unsigned 64-bit integer.
    U(u64),
    /// Float.
    F(f64),
    /// Boolean.
    Bool(bool),
    /// String or binary bytes.
    B(Vec<u8>),
    /// Unscaled decimal value.
    D(Unscaled),
}

impl Scalar {
    /// Total order within one type (NaN greatest, `-0.0 == 0.0`).
    pub fn total_cmp(&self, other: &Scalar) -> Ordering {
        fn norm(f: f64) -> f64 {
            if f.is_nan() {
                f64::NAN
            } else if f == 0.0 {
                0.0
            } else {
                f
            }
        }
        match (self, other) {
            (Scalar::I(a), Scalar::I(b)) => a.cmp(b),
            (Scalar::U(a), Scalar::U(b)) => a.cmp(b),
            (Scalar::F(a), Scalar::F(b)) => norm(*a).total_cmp(&norm(*b)),
            (Scalar::Bool(a), Scalar::Bool(b)) => a.cmp(b),
            (Scalar::B(a), Scalar::B(b)) => a.cmp(b),
            (Scalar::D(a), Scalar::D(b)) => a.get().cmp(&b.get()),
            _ => Ordering::Equal,
        }
    }

    fn as_f64(&self) -> f64 {
        match self {
            Scalar::I(v) => *v as f64,
            Scalar::U(v) => *v as f64,
            Scalar::F(v) => *v,
            Scalar::Bool(v) => *v as u8 as f64,
            Scalar::B(_) | Scalar::D(_) => f64::NAN,
        }
    }

    fn as_i128(&self) -> i128 {
        match self {
            Scalar::I(v) => *v as i128,
            Scalar::U(v) => *v as i128,
            Scalar::D(v) => v.get(),
            _ => 0,
        }
    }
}

/// A mergeable partial aggregate state.
#[derive(Debug, Clone, PartialEq)]
pub enum Acc {
    /// Count.
    Count(i64),
    /// Exact integer sum and number of values.
    SumI(i128, i64),
    /// Exact float sum and number of values.
    SumF(ExactSum, i64),
    /// Integer sum for a mean.
    MeanI(i128, i64),
    /// Float sum for a mean.
    MeanF(ExactSum, i64),
    /// Exact sum of unscaled decimal values and their number (decimal sum and mean).
    Dec(WideSum, i64),
    /// Sum, sum of squares and count (variance, stddev).
    Moments(Box<[ExactSum; 2]>, i64),
    /// Smallest value.
    Min(Option<Scalar>),
    /// Largest value.
    Max(Option<Scalar>),
    /// Value at the smallest event time.
    First(Option<(i64, Scalar)>),
    /// Value at the largest event time.
    Last(Option<(i64, Scalar)>),
    /// The distinct values, sorted by [`Scalar::total_cmp`].
    Distinct(Vec<Scalar>),
    /// HyperLogLog++ registers.
    Hll(Box<[u8]>),
    /// The smallest `by` value so far and its row's value (null: `None`), boxed:
    /// two values would double every state's size.
    MinBy(Option<Box<ByValue>>),
    /// The largest `by` value so far and its row's value.
    MaxBy(Option<Box<ByValue>>),
    /// A quantile sketch (`percentile_approx`).
    Quantiles(Box<QuantileSketch>),
}

impl Acc {
    /// Adds the value of `row` of `input` (an event at `ts`).
    #[inline]
    pub fn update(&mut self, input: &Input, row: usize, ts: i64) {
        match (&mut *self, input) {
            (Acc::Count(c), Input::Rows) => *c += 1,
            (Acc::Count(c), Input::NonNull(n)) => {
                if n.as_ref().is_none_or(|n| n.is_valid(row)) {
                    *c += 1
                }
            }
            (Acc::SumF(s, n) | Acc::MeanF(s, n), Input::Float(a)) => {
                if a.is_valid(row) {
                    s.add(a.value(row));
                    *n += 1;
                }
            }
            (Acc::SumI(s, n) | Acc::MeanI(s, n), Input::Int(a)) => {
                if a.is_valid(row) {
                    *s += a.value(row) as i128;
                    *n += 1;
                }
            }
            (Acc::Dec(s, n), Input::Dec(a)) => {
                if a.is_valid(row) {
                    s.add(a.value(row));
                    *n += 1;
                }
            }
            (Acc::Hll(r), Input::Hash(h)) => {
                if h.is_valid(row) {
                    hll::add(r, h.value(row));
                }
            }
            (Acc::MinBy(_) | Acc::MaxBy(_), Input::By(v, by)) => {
                // Rows whose `by` value is null are skipped (as in Spark).
                if let Some(o) = by.value(row) {
                    self.offer_by(o, v.value(row));
                }
            }
            _ => {
                if let Some(v) = input.value(row) {
                    self.update_value(v, ts);
                }
            }
        }
    }

    fn update_value(&mut self, v: Scalar, ts: i64) {
        match self {
            Acc::Count(c) => *c += 1,
            Acc::SumI(s, n) | Acc::MeanI(s, n) => {
                *s += v.as_i128();
                *n += 1;
            }
            Acc::SumF(s, n) | Acc::MeanF(s, n) => {
                s.add(v.as_f64());
                *n += 1;
            }
            Acc::Dec(s, n) => {
                s.add(v.as_i128());
                *n += 1;
            }
            Acc::Moments(m, n) => {
                let [s, q] = &mut **m;
                let x = v.as_f64();
                s.add(x);
                q.add_product(x, x);
                *n += 1;
            }
            Acc::Min(m) => {
                if m.as_ref()
                    .is_none_or(|cur| v.total_cmp(cur) == Ordering::Less)
                {
                    *m = Some(v);
                }
            }
            Acc::Max(m) => {
                if m.as_ref()
                    .is_none_or(|cur| v.total_cmp(cur) == Ordering::Greater)
                {
                    *m = Some(v);
                }
            }
            Acc::First(f) => {
                let better = f.as_ref().is_none_or(|(t, cur)| {
                    ts < *t || (ts == *t && v.total_cmp(cur) == Ordering::Less)
                });
                if better {
                    *f = Some((ts, v));
                }
            }
            Acc::Last(l) => {
                let better = l.as_ref().is_none_or(|(t, cur)| {
                    ts > *t || (ts == *t && v.total_cmp(cur) == Ordering::Greater)
                });
                if better {
                    *l = Some((ts, v));
                }
            }
            Acc::Distinct(d) => {
                if let Err(i) = d.binary_search_by(|x| x.total_cmp(&v)) {
                    d.insert(i, v);
                }
            }
            Acc::Hll(r) => {
                if let Scalar::U(h) = v {
                    hll::add(r, h);
                }
            }
            Acc::MinBy(_) | Acc::MaxBy(_) => {}
            Acc::Quantiles(q) => q.add(v),
        }
    }

    /// `min_by` / `max_by`: the row ordered by `by` with value `v` replaces the one
    /// kept if its `by` value is smaller (larger), or equal with a smaller (larger)
    /// value, a null value being the smallest: the result never depends on row order.
    fn offer_by(&mut self, by: Scalar, v: Option<Scalar>) {
        let value_cmp = |a: &Option<Scalar>, b: &Option<Scalar>| match (a, b) {
            (None, None) => Ordering::Equal,
            (None, Some(_)) => Ordering::Less,
            (Some(_), None) => Ordering::Greater,
            (Some(a), Some(b)) => a.total_cmp(b),
        };
        let (slot, want) = match self {
            Acc::MinBy(s) => (s, Ordering::Less),
            Acc::MaxBy(s) => (s, Ordering::Greater),
            _ => return,
        };
        let better = slot.as_ref().is_none_or(|cur| match by.total_cmp(&cur.0) {
            Ordering::Equal => value_cmp(&v, &cur.1) == want,
            o => o == want,
        });
        if better {
            *slot = Some(Box::new((by, v)));
        }
    }

    /// Merges another partial state of the same aggregate into this one.
    pub fn merge(&mut self, other: &Acc) {
        match (self, other) {
            (Acc::Count(a), Acc::Count(b)) => *a += b,
            (Acc::SumI(s, n), Acc::SumI(s2, n2)) | (Acc::MeanI(s, n), Acc::MeanI(s2, n2)) => {
                *s += s2;
                *n += n2;
            }
            (Acc::SumF(s, n), Acc::SumF(s2, n2)) | (Acc::MeanF(s, n), Acc::MeanF(s2, n2)) => {
                s.merge(s2);
                *n += n2;
            }
            (Acc::Dec(s, n), Acc::Dec(s2, n2)) => {
                s.merge(s2);
                *n += n2;
            }
            (Acc::Moments(m, n), Acc::Moments(m2, n2)) => {
                m[0].merge(&m2[0]);
                m[1].merge(&m2[1]);
                *n += n2;
            }
            (me @ Acc::Min(_), Acc::Min(Some(v))) | (me @ Acc::Max(_), Acc::Max(Some(v))) => {
                me.update_value(v.clone(), 0)
            }
            (me @ Acc::First(_), Acc::First(Some((t, v))))
            | (me @ Acc::Last(_), Acc::Last(Some((t, v)))) => me.update_value(v.clone(), *t),
            (Acc::Distinct(a), Acc::Distinct(b)) => {
                // Both sorted: one merge pass, equal values once.
                let mut out = Vec::with_capacity(a.len() + b.len());
                let (mut i, mut j) = (0, 0);
                while i < a.len() && j < b.len() {
                    match a[i].total_cmp(&b[j]) {
                        Ordering::Less => {
                            out.push(a[i].clone());
                            i += 1;
                        }
                        Ordering::Greater => {
                            out.push(b[j].clone());
                            j += 1;
                        }
                        Ordering::Equal => {
                            out.push(a[i].clone());
                            i += 1;
                            j += 1;
                        }
                    }
                }
                out.extend_from_slice(&a[i..]);
                out.extend_from_slice(&b[j..]);
                *a = out;
            }
            (Acc::Hll(a), Acc::Hll(b)) => hll::merge(a, b),
            (Acc::Quantiles(a), Acc::Quantiles(b)) => a.merge(b),
            (me @ Acc::MinBy(_), Acc::MinBy(Some(b)))
            | (me @ Acc::MaxBy(_), Acc::MaxBy(Some(b))) => me.offer_by(b.0.clone(), b.1.clone()),
            _ => {}
        }
    }

    fn count(&self) -> i64 {
        match self {
            Acc::Count(c) => *c,
            _ => 0,
        }
    }

    fn int_sum(&self) -> Option<i64> {
        match self {
            Acc::SumI(s, n) if *n > 0 => i64::try_from(*s).ok(),
            _ => None,
        }
    }

    fn float_value(&self, kind: AggKind) -> Option<f64> {
        match (self, kind) {
            (Acc::SumF(s, n), _) => (*n > 0).then(|| s.value()),
            (Acc::SumI(s, n), _) => (*n > 0).then_some(*s as f64),
            (Acc::MeanF(s, n), _) => (*n > 0).then(|| s.value() / *n as f64),
            (Acc::MeanI(s, n), _) => (*n > 0).then(|| (*s as f64) / *n as f64),
            (Acc::Moments(m, n), AggKind::Variance { ddof } | AggKind::Stddev { ddof }) => {
                let [s, q] = &**m;
                let n = *n;
                if n <= ddof as i64 {
                    return None;
                }
                // n^2 * var_pop = n*Q - S^2, computed exactly from the exact sums
                // (S = S_hat + S_lo; every product split into two exact parts), then
                // rounded once: accurate even when the mean dwarfs the spread.
                let nf = n as f64;
                let s_hat = s.value();
                let mut rest = s.clone();
                rest.add(-s_hat);
                let s_lo = rest.value();
                let mut d = ExactSum::default();
                let (qparts, qspecial) = q.parts();
                if let Some(sp) = qspecial {
                    d.add(sp);
                }
                for &p in &qparts {
                    d.add_product(p, nf);
                }
                d.add_product(-s_hat, s_hat);
                d.add_product(-2.0 * s_hat, s_lo);
                d.add_product(-s_lo, s_lo);
                let m2 = d.value().max(0.0);
                let var = m2 / (nf * (n - ddof as i64) as f64);
                Some(if matches!(kind, AggKind::Stddev { .. }) {
                    var.sqrt()
                } else {
                    var
                })
            }
            _ => None,
        }
    }

    fn scalar(&self) -> Option<&Scalar> {
        match self {
            Acc::Min(m) | Acc::Max(m) => m.as_ref(),
            Acc::First(f) | Acc::Last(f) => f.as_ref().map(|(_, v)| v),
            Acc::MinBy(b) | Acc::MaxBy(b) => b.as_ref().and_then(|b| b.1.as_ref()),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Float64Array, Int32Array, StringArray};

    fn schema() -> Schema {
        Schema::new(vec![
            Field::new("i", DataType::Int32, true),
            Field::new("f", DataType::Float64, true),
            Field::new("s", DataType::Utf8, true),
        ])
    }

    fn cols() -> Vec<ArrayRef> {
        vec![
            Arc::new(Int32Array::from(vec![Some(3), None, Some(-1), Some(7)])),
            Arc::new(Float64Array::from(vec![
                Some(1.5),
                Some(f64::NAN),
                None,
                Some(-0.0),
            ])),
            Arc::new(StringArray::from(vec![
                Some("b"),
                Some("a"),
                None,
                Some("c"),
            ])),
        ]
    }

    fn run(kind: AggKind, col: Option<&str>, times: &[i64]) -> ArrayRef {
        let spec = AggSpec {
            name: "x".into(),
            kind,
            column: col.map(Into::into),
            by: None,
        };
        let b = BoundAgg::bind(&spec, &schema()).unwrap();
        let input = b.input(&cols()).unwrap();
        let mut acc = b.new_acc();
        for (row, &t) in times.iter().enumerate() {
            acc.update(&input, row, t);
        }
        b.finish(std::iter::once(&acc)).unwrap()
    }

    #[test]
    fn values() {
        let t = [10, 20, 30, 40];
        let c = run(AggKind::Count, None, &t);
        assert_eq!(c.as_primitive::<Int64Type>().value(0), 4);
        let c = run(AggKind::Count, Some("i"), &t);
        assert_eq!(c.as_primitive::<Int64Type>().value(0), 3);
        let s = run(AggKind::Sum, Some("i"), &t);
        assert_eq!(s.as_primitive::<Int64Type>().value(0), 9);
        let m = run(AggKind::Max, Some("f"), &t);
        assert!(
            m.as_primitive::<Float64Type>().value(0).is_nan(),
            "NaN is greatest"
        );
        let m = run(AggKind::Min, Some("i"), &t);
        assert_eq!(m.data_type(), &DataType::Int32);
        assert_eq!(m.as_primitive::<Int32Type>().value(0), -1);
        let f = run(AggKind::First, Some("s"), &t);
        assert_eq!(f.as_string::<i32>().value(0), "b");
        let l = run(AggKind::Last, Some("s"), &t);
        assert_eq!(l.as_string::<i32>().value(0), "c");
        let v = run(AggKind::Variance { ddof: 1 }, Some("i"), &t);
        let mean = 3.0;
        let expect =
            ((3.0f64 - mean).powi(2) + (-1.0f64 - mean).powi(2) + (7.0f64 - mean).powi(2)) / 2.0;
        assert!((v.as_primitive::<Float64Type>().value(0) - expect).abs() < 1e-12);
    }

    #[test]
    fn bind_errors() {
        let s = schema();
        let e = BoundAgg::bind(
            &AggSpec {
                name: "x".into(),
                kind: AggKind::Sum,
                column: Some("s".into()),
                by: None,
            },
            &s,
        )
        .unwrap_err();
        assert!(e.to_string().contains("integer or float"), "{e}");
        let e = BoundAgg::bind(
            &AggSpec {
                name: "x".into(),
                kind: AggKind::Sum,
                column: Some("zz".into()),
                by: None,
            },
            &s,
        )
        .unwrap_err();
        assert!(matches!(e, TidemarkError::MissingColumn { .. }));
        let e = BoundAgg::bind(
            &AggSpec {
                name: "x".into(),
                kind: AggKind::Mean,
                column: None,
                by: None,
            },
            &s,
        )
        .unwrap_err();
        assert!(e.to_string().contains("needs a column"), "{e}");
    }

    #[test]
    fn decimals_follow_spark_types_and_stay_exact() {
        use arrow_array::Decimal128Array;
        let sch = Schema::new(vec![Field::new("d", DataType::Decimal128(10, 2), true)]);
        // 1.25, -0.50, null, 3.00, 0.01
        let col: ArrayRef = Arc::new(
            Decimal128Array::from(vec![Some(125), Some(-50), None, Some(300), Some(1)])
                .with_precision_and_scale(10, 2)
                .unwrap(),
        );
        let out = |kind: AggKind| {
            let b = BoundAgg::bind(&AggSpec::new("x", kind, Some("d")), &sch).unwrap();
            let input = b.input(std::slice::from_ref(&col)).unwrap();
            let (mut l, mut r) = (b.new_acc(), b.new_acc());
            for row in 0..5 {
                let acc = if row % 2 == 0 { &mut l } else { &mut r };
                acc.update(&input, row, row as i64);
            }
            l.merge(&r);
            (
                b.output_field().data_type().clone(),
                b.finish(std::iter::once(&l)).unwrap(),
            )
        };
        let dec = |a: &ArrayRef| a.as_primitive::<Decimal128Type>().value(0);
        let (t, a) = out(AggKind::Sum);
        assert_eq!((t, dec(&a)), (DataType::Decimal128(20, 2), 376));
        // 3.76 / 4 = 0.94 at 4 more places.
        let (t, a) = out(AggKind::Mean);
        assert_eq!((t, dec(&a)), (DataType::Decimal128(14, 6), 940_000));
        let (t, a) = out(AggKind::Min);
        assert_eq!((t, dec(&a)), (DataType::Decimal128(10, 2), -50));
        let (_, a) = out(AggKind::Max);
        assert_eq!(dec(&a), 300);
        let (_, a) = out(AggKind::Last);
        assert_eq!(dec(&a), 1);
        let (t, a) = out(AggKind::Variance { ddof: 0 });
        assert_eq!(t, DataType::Float64);
        let v = a.as_primitive::<Float64Type>().value(0);
        let xs = [1.25f64, -0.5, 3.0, 0.01];
        let m = xs.iter().sum::<f64>() / 4.0;
        let want = xs.iter().map(|x| (x - m).powi(2)).sum::<f64>() / 4.0;
        assert!((v - want).abs() < 1e-12, "{v} vs {want}");

        // The aggregate of `n` copies of one decimal(38, 0) value.
        let sch = Schema::new(vec![Field::new("d", DataType::Decimal128(38, 0), true)]);
        let over_copies = |kind: AggKind, v: i128, n: usize| {
            let col: ArrayRef = Arc::new(
                Decimal128Array::from(vec![v; n])
                    .with_precision_and_scale(38, 0)
                    .unwrap(),
            );
            let b = BoundAgg::bind(&AggSpec::new("x", kind, Some("d")), &sch).unwrap();
            let input = b.input(&[col]).unwrap();
            let mut acc = b.new_acc();
            (0..n).for_each(|row| acc.update(&input, row, 0));
            b.finish(std::iter::once(&acc)).unwrap()
        };
        // A sum beyond the output precision is null, not a wrapped value.
        assert!(over_copies(AggKind::Sum, decimal::pow10(38) - 1, 3).is_null(0));
        // The mean of 20,000 copies of 10^34 - 1 (a decimal(38, 4) mean) is that value,
        // though their sum leaves the i128 range.
        let mean = over_copies(AggKind::Mean, decimal::pow10(34) - 1, 20_000);
        assert_eq!(mean.data_type(), &DataType::Decimal128(38, 4));
        assert_eq!(dec(&mean), (decimal::pow10(34) - 1) * 10_000);
    }

    /// Every open window holds one state per aggregate: decimal states (128-bit values)
    /// must not make all of them larger.
    #[test]
    fn states_stay_small() {
        assert!(std::mem::size_of::<Acc>() <= 48);
        assert!(std::mem::size_of::<Scalar>() <= 24);
    }

    #[test]
    fn merge_equals_single_pass() {
        let spec = AggSpec {
            name: "x".into(),
            kind: AggKind::Stddev { ddof: 1 },
            column: Some("f".into()),
            by: None,
        };
        let sch = Schema::new(vec![Field::new("f", DataType::Float64, true)]);
        let b = BoundAgg::bind(&spec, &sch).unwrap();
        let vals: Vec<f64> = (0..100).map(|i| 1e6 + (i as f64) * 0.37).collect();
        let input = b
            .input(&[Arc::new(Float64Array::from(vals.clone())) as ArrayRef])
            .unwrap();
        let mut all = b.new_acc();
        let (mut l, mut r) = (b.new_acc(), b.new_acc());
        for i in 0..100 {
            all.update(&input, i, 0);
            if i % 3 == 0 {
                l.update(&input, i, 0)
            } else {
                r.update(&input, i, 0)
            }
        }
        r.merge(&l);
        assert_eq!(
            all.float_value(spec.kind).unwrap().to_bits(),
            r.float_value(spec.kind).unwrap().to_bits()
        );
        let mean = vals.iter().sum::<f64>() / 100.0;
        let sd = (vals.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / 99.0).sqrt();
        assert!((all.float_value(spec.kind).unwrap() - sd).abs() / sd < 1e-9);
    }

    /// The int64 result of an aggregate over `input`'s rows in one pass, and over two
    /// parts (`left[i]`: row `i` in the first) merged in either order.
    fn one_pass_and_merged(b: &BoundAgg, input: &Input, left: &[bool]) -> [Option<i64>; 3] {
        let (mut all, mut l, mut r) = (b.new_acc(), b.new_acc(), b.new_acc());
        for (i, &first) in left.iter().enumerate() {
            all.update(input, i, 0);
            if first {
                l.update(input, i, 0)
            } else {
                r.update(input, i, 0)
            }
        }
        let mut lr = l.clone();
        lr.merge(&r);
        r.merge(&l);
        [all, lr, r].map(|a| {
            let arr = b.finish(std::iter::once(&a)).unwrap();
            let arr = arr.as_primitive::<Int64Type>();
            arr.is_valid(0).then(|| arr.value(0))
        })
    }

    proptest::proptest! {
        /// Distinct counts, exact and estimated, are the same from one pass as from
        /// two parts merged in either order.
        #[test]
        fn distinct_counts_merge_as_one_pass(
            vals in proptest::collection::vec(proptest::option::of(-50i64..50), 0..300),
            split in proptest::collection::vec(proptest::bool::ANY, 300),
        ) {
            let sch = Schema::new(vec![Field::new("v", DataType::Int64, true)]);
            let col: ArrayRef = Arc::new(Int64Array::from(vals.clone()));
            for kind in [AggKind::CountDistinct, AggKind::ApproxCountDistinct] {
                let spec = AggSpec::new("x", kind, Some("v"));
                let b = BoundAgg::bind(&spec, &sch).unwrap();
                let input = b.input(std::slice::from_ref(&col)).unwrap();
                let [all, lr, rl] = one_pass_and_merged(&b, &input, &split[..vals.len()]);
                proptest::prop_assert_eq!(lr, all);
                proptest::prop_assert_eq!(rl, all);
                if kind == AggKind::CountDistinct {
                    let mut want: Vec<i64> = vals.iter().flatten().copied().collect();
                    want.sort_unstable();
                    want.dedup();
                    proptest::prop_assert_eq!(all, Some(want.len() as i64));
                }
            }
        }

        /// `min_by` / `max_by` keep the same row from one pass as from two parts
        /// merged in either order, ties in the ordering column included.
        #[test]
        fn ordered_values_merge_as_one_pass(
            rows in proptest::collection::vec(
                (proptest::option::of(0i64..5), proptest::option::of(0i64..20)), 0..60),
            split in proptest::collection::vec(proptest::bool::ANY, 60),
        ) {
            let sch = Schema::new(vec![
                Field::new("o", DataType::Int64, true),
                Field::new("v", DataType::Int64, true),
            ]);
            let o: ArrayRef = Arc::new(Int64Array::from(rows.iter().map(|r| r.0).collect::<Vec<_>>()));
            let v: ArrayRef = Arc::new(Int64Array::from(rows.iter().map(|r| r.1).collect::<Vec<_>>()));
            for kind in [AggKind::MinBy, AggKind::MaxBy] {
                let b = BoundAgg::bind(&AggSpec::ordered("x", kind, "v", "o"), &sch).unwrap();
                let input = b.input(&[o.clone(), v.clone()]).unwrap();
                let [all, lr, rl] = one_pass_and_merged(&b, &input, &split[..rows.len()]);
                proptest::prop_assert_eq!(lr, all);
                proptest::prop_assert_eq!(rl, all);
            }
        }
    }
}
