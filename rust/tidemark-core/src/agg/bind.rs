//! Binding an aggregate to its input column: the input's class, reading it, and
//! finishing accumulators into the output column.

use std::sync::Arc;

use arrow_array::builder::{BinaryBuilder, Decimal128Builder, Float64Builder, Int64Builder};
use arrow_array::cast::AsArray;
use arrow_array::types::*;
use arrow_array::{ArrayRef, BooleanArray, Float64Array, Int64Array, UInt64Array};
use arrow_schema::{DataType, Field, Schema};

use super::decimal::WideSum;
use super::exact::ExactSum;
use super::quantile::QuantileSketch;
use super::{decimal, hll, Acc, AggKind, AggSpec, Input, Scalar};
use crate::error::{Result, TidemarkError};
use crate::key::{int_like, same_values, temporal};

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
    /// A list of `Float64` (`sum` alone): every element of a row's list is added to the
    /// sum, exactly; a null list adds nothing. Spark's exact fold of a float sum hands
    /// each group's sum over as such a list (see [`float_parts_type`]).
    FloatParts,
}

/// The type a [`Class::FloatParts`] column is read as: a large list of nullable
/// `Float64` (a list of another layout is cast to it).
pub fn float_parts_type() -> DataType {
    DataType::LargeList(Arc::new(Field::new_list_field(DataType::Float64, true)))
}

fn float_list(dt: &DataType) -> bool {
    matches!(dt, DataType::List(f) | DataType::LargeList(f) if f.data_type() == &DataType::Float64)
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
        dt if float_list(dt) => Class::FloatParts,
        dt if int_like(dt) => Class::Int,
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
        let mut dt = schema.field(idx).data_type().clone();
        let class = if spec.kind == AggKind::Count {
            Class::Rows
        } else {
            class_of(&dt)
                .filter(|c| *c != Class::FloatParts || spec.kind == AggKind::Sum)
                .ok_or_else(|| {
                    TidemarkError::config(
                        format!("aggs[{:?}]", spec.name),
                        format!("{}({col:?}) cannot read a {dt} column", spec.kind.name()),
                    )
                })?
        };
        if class == Class::FloatParts {
            dt = float_parts_type();
        }
        let numeric = matches!(
            class,
            Class::Int | Class::UInt | Class::Float | Class::Decimal | Class::FloatParts
        );
        let temporal = temporal(value_type(&dt));
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
            (AggKind::Sum, Class::Float | Class::FloatParts) => Acc::SumF(ExactSum::default(), 0),
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
        let mut col = &columns[idx];
        let parts;
        if self.class == Class::FloatParts && float_list(col.data_type()) {
            parts = arrow_cast::cast(col, &self.input_type)?;
            col = &parts;
        }
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
            Class::FloatParts => Input::FloatParts(col.as_list::<i64>().clone()),
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
    // One array of a fixed-width class: each scalar is of the class's variant.
    macro_rules! typed {
        ($array:ty, $variant:path, $what:literal) => {
            Arc::new(<$array>::from_iter(scalars.map(|s| {
                s.map(|s| match s {
                    $variant(v) => *v,
                    _ => unreachable!($what),
                })
            })))
        };
    }
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
        Class::Int => typed!(Int64Array, Scalar::I, "int column"),
        Class::UInt => typed!(UInt64Array, Scalar::U, "uint column"),
        Class::Float => typed!(Float64Array, Scalar::F, "float column"),
        Class::Bool => typed!(BooleanArray, Scalar::Bool, "bool column"),
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
        Class::FloatParts => unreachable!("only sum reads float parts"),
    })
}
