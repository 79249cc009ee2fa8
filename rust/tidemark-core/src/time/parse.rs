//! Event-time column parsing: the registry of event-time types (`EventtimeTypeRegistry`).
//!
//! An event-time column is turned into epoch microseconds (Spark's unit) by a parser
//! chosen by name. Arrow timestamp and date columns need no name. Built-in names:
//!
//! | name | column types | meaning |
//! |---|---|---|
//! | `unixtimestamp_s` / `_ms` / `_us` / `_ns` | integers, floats, numeric strings | Unix time in that unit |
//! | `iso8601` | strings | RFC 3339 / ISO 8601 (`2024-05-01T12:00:00.5Z`; no offset = UTC) |
//!
//! Integer columns with no type name are taken as raw ticks ([`EventTimeType::Ticks`])
//! where a caller allows it (the unit-agnostic trackers do; the pipeline does not).
//!
//! Row-level failures (null, NaN, unparseable, out of range) never abort: the row's
//! value is null and [`ParsedEventTime::errors`] says why. The reserved values
//! `i64::MIN` and `i64::MAX` (the "no watermark" and "no input" sentinels) are out of
//! range. Where no conversion is needed (a `timestamp[us]` or `int64` microsecond
//! column) the values buffer is shared with the input, not copied.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::*;
use arrow_array::{Array, ArrayRef, ArrowPrimitiveType, Int64Array, PrimitiveArray};
use arrow_buffer::{NullBuffer, ScalarBuffer};
use arrow_schema::{DataType, TimeUnit};

use crate::error::{Result, TidemarkError};

/// Names of the built-in event-time types, in the order they are listed to users.
pub const BUILTIN_EVENT_TIME_TYPES: &[&str] = &[
    "iso8601",
    "unixtimestamp_ms",
    "unixtimestamp_ns",
    "unixtimestamp_s",
    "unixtimestamp_us",
];

const MICROS_PER_DAY: i64 = 86_400_000_000;

/// How an event-time column is turned into epoch microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventTimeType {
    /// An Arrow `timestamp` or `date` column, converted from its own unit.
    Native,
    /// Numbers (or numeric strings) counting units since the Unix epoch.
    Unix(TimeUnit),
    /// RFC 3339 / ISO 8601 strings.
    Iso8601,
    /// Raw integer ticks, taken as they are (unit-agnostic trackers only).
    Ticks,
}

impl EventTimeType {
    /// The built-in type registered under `name`, or `None`.
    pub fn builtin(name: &str) -> Option<Self> {
        Some(match name {
            "unixtimestamp_s" => EventTimeType::Unix(TimeUnit::Second),
            "unixtimestamp_ms" => EventTimeType::Unix(TimeUnit::Millisecond),
            "unixtimestamp_us" => EventTimeType::Unix(TimeUnit::Microsecond),
            "unixtimestamp_ns" => EventTimeType::Unix(TimeUnit::Nanosecond),
            "iso8601" => EventTimeType::Iso8601,
            _ => return None,
        })
    }

    /// Chooses the parser for a column: by `name` if given, else from the column
    /// type (temporal columns parse natively; integer columns as ticks when
    /// `allow_ticks`). Fails with a configuration error naming the column when the
    /// name is unknown or does not fit the column's type.
    pub fn resolve(
        name: Option<&str>,
        column: &str,
        data_type: &DataType,
        allow_ticks: bool,
    ) -> Result<Self> {
        let dt = value_type(data_type);
        let ty = match name {
            Some(n) => Self::builtin(n).ok_or_else(|| TidemarkError::UnknownEventTimeType {
                name: n.to_string(),
                registered: BUILTIN_EVENT_TIME_TYPES.iter().map(|s| s.to_string()).collect(),
            })?,
            None if is_temporal(dt) => EventTimeType::Native,
            None if allow_ticks && dt.is_integer() => EventTimeType::Ticks,
            None => {
                return Err(TidemarkError::config(
                    "event_time_type",
                    format!(
                        "column {column:?} has type {data_type}; an event-time column must be an Arrow \
                         timestamp or date, or name its type: one of {}",
                        BUILTIN_EVENT_TIME_TYPES.join(", ")
                    ),
                ))
            }
        };
        ty.check(column, data_type)?;
        Ok(ty)
    }

    /// Checks that this parser can read a column of `data_type`.
    pub fn check(&self, column: &str, data_type: &DataType) -> Result<()> {
        let dt = value_type(data_type);
        let ok = match self {
            EventTimeType::Native => is_temporal(dt),
            EventTimeType::Unix(_) => dt.is_integer() || dt.is_floating() || is_string(dt),
            EventTimeType::Iso8601 => is_string(dt),
            EventTimeType::Ticks => dt.is_integer(),
        };
        if ok {
            return Ok(());
        }
        let expected = match self {
            EventTimeType::Native => "an Arrow timestamp or date column",
            EventTimeType::Unix(_) => "an integer, float or numeric string column",
            EventTimeType::Iso8601 => "a string column",
            EventTimeType::Ticks => "an integer column",
        };
        let hint = if is_temporal(dt) {
            "; Arrow timestamp and date columns need no event_time_type"
        } else {
            ""
        };
        Err(TidemarkError::config(
            "event_time_type",
            format!(
                "{} expects {expected}, but column {column:?} has type {data_type}{hint}",
                self.name()
            ),
        ))
    }

    /// The name users know this type by.
    pub fn name(&self) -> &'static str {
        match self {
            EventTimeType::Native => "native timestamp",
            EventTimeType::Unix(TimeUnit::Second) => "unixtimestamp_s",
            EventTimeType::Unix(TimeUnit::Millisecond) => "unixtimestamp_ms",
            EventTimeType::Unix(TimeUnit::Microsecond) => "unixtimestamp_us",
            EventTimeType::Unix(TimeUnit::Nanosecond) => "unixtimestamp_ns",
            EventTimeType::Iso8601 => "iso8601",
            EventTimeType::Ticks => "ticks",
        }
    }
}

fn value_type(dt: &DataType) -> &DataType {
    match dt {
        DataType::Dictionary(_, v) => v.as_ref(),
        other => other,
    }
}

fn is_temporal(dt: &DataType) -> bool {
    matches!(
        dt,
        DataType::Timestamp(_, _) | DataType::Date32 | DataType::Date64
    )
}

fn is_string(dt: &DataType) -> bool {
    matches!(
        dt,
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
    )
}

/// An event-time column converted to `i64` (epoch microseconds, or ticks).
#[derive(Debug, Clone)]
pub struct ParsedEventTime {
    /// One value per input row; null where the row could not be parsed.
    pub values: Int64Array,
    /// `(row, reason)` for every row that could not be parsed, in row order.
    pub errors: Vec<(usize, String)>,
}

impl ParsedEventTime {
    /// The largest valid value, if any.
    pub fn max(&self) -> Option<i64> {
        arrow_arith_max(&self.values)
    }
}

fn arrow_arith_max(a: &Int64Array) -> Option<i64> {
    match a.nulls() {
        None => a.values().iter().copied().max(),
        Some(n) => a
            .values()
            .iter()
            .zip(n.iter())
            .filter_map(|(&v, ok)| ok.then_some(v))
            .max(),
    }
}

/// Parses an event-time column with `ty`.
///
/// # Examples
///
/// ```
/// use arrow_array::{Array, StringArray};
/// use tidemark_core::time::{parse_event_time, EventTimeType};
///
/// let col = StringArray::from(vec![Some("1970-01-01T00:00:01Z"), Some("soon"), None]);
/// let parsed = parse_event_time(&col, EventTimeType::Iso8601).unwrap();
/// assert_eq!(parsed.values.value(0), 1_000_000);
/// assert!(parsed.values.is_null(1) && parsed.values.is_null(2));
/// assert_eq!(parsed.errors.len(), 2);
/// assert_eq!(parsed.errors[1].1, "event time is null");
/// ```
pub fn parse_event_time(array: &dyn Array, ty: EventTimeType) -> Result<ParsedEventTime> {
    if let DataType::Dictionary(_, v) = array.data_type() {
        let values = arrow_cast::cast(array, v)?;
        return parse_event_time(values.as_ref(), ty);
    }
    ty.check("event time", array.data_type())?;
    let mut errors = Vec::new();
    let values: Int64Array = match (ty, array.data_type()) {
        (EventTimeType::Native, DataType::Timestamp(unit, _)) => {
            let scale = unit_scale(*unit);
            let a: Int64Array = match unit {
                TimeUnit::Second => reinterpret::<TimestampSecondType>(array),
                TimeUnit::Millisecond => reinterpret::<TimestampMillisecondType>(array),
                TimeUnit::Microsecond => reinterpret::<TimestampMicrosecondType>(array),
                TimeUnit::Nanosecond => reinterpret::<TimestampNanosecondType>(array),
            };
            scale_ints(&a, scale, &mut errors)
        }
        (EventTimeType::Native, DataType::Date32) => {
            let a = array.as_primitive::<Date32Type>();
            // Days beyond about 292,000 years from 1970 do not fit in microseconds.
            map_checked(a, &mut errors, |d| {
                Scale::Mul(MICROS_PER_DAY).apply(d as i64)
            })
        }
        (EventTimeType::Native, DataType::Date64) => {
            let a: Int64Array = reinterpret::<Date64Type>(array);
            scale_ints(&a, Scale::Mul(1_000), &mut errors)
        }
        (EventTimeType::Unix(unit), dt) if dt.is_integer() => {
            scale_integers(array, unit_scale(unit), &mut errors)?
        }
        (EventTimeType::Unix(unit), dt) if dt.is_floating() => {
            let a = arrow_cast::cast(array, &DataType::Float64)?;
            let factor = match unit {
                TimeUnit::Second => 1e6,
                TimeUnit::Millisecond => 1e3,
                TimeUnit::Microsecond => 1.0,
                TimeUnit::Nanosecond => 1e-3,
            };
            map_checked(a.as_primitive::<Float64Type>(), &mut errors, |v| {
                float_micros(v, factor)
            })
        }
        (EventTimeType::Unix(unit), _) => {
            let factor = match unit {
                TimeUnit::Second => 1e6,
                TimeUnit::Millisecond => 1e3,
                TimeUnit::Microsecond => 1.0,
                TimeUnit::Nanosecond => 1e-3,
            };
            let scale = unit_scale(unit);
            map_strings(array, &mut errors, |s| {
                let s = s.trim();
                if let Ok(i) = s.parse::<i64>() {
                    scale.apply(i)
                } else if let Ok(f) = s.parse::<f64>() {
                    float_micros(f, factor)
                } else {
                    Err(format!("cannot parse {} as a number", quote(s)))
                }
            })
        }
        (EventTimeType::Iso8601, _) => map_strings(array, &mut errors, |s| {
            // Surrounding whitespace (a CSV field, a padded column) is not part of the
            // time, as for numbers above and in Spark's casts.
            arrow_cast::parse::string_to_datetime(&chrono::Utc, s.trim())
                .map_err(|_| format!("cannot parse {} as an ISO 8601 timestamp", quote(s)))
                .and_then(|d| {
                    let us = d.timestamp_micros();
                    in_range(us)
                })
        }),
        (EventTimeType::Ticks, _) => scale_integers(array, Scale::Identity, &mut errors)?,
        (_, dt) => {
            return Err(TidemarkError::config(
                "event_time_type",
                format!("{} cannot read a {dt} column", ty.name()),
            ))
        }
    };
    errors.sort_by_key(|e| e.0);
    Ok(ParsedEventTime { values, errors })
}

fn quote(s: &str) -> String {
    const MAX: usize = 64;
    if s.len() <= MAX {
        format!("{s:?}")
    } else {
        let mut end = MAX;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        format!("{:?}... ({} bytes)", &s[..end], s.len())
    }
}

#[derive(Debug, Clone, Copy)]
enum Scale {
    Identity,
    Mul(i64),
    DivFloor(i64),
}

impl Scale {
    #[inline]
    fn apply(self, v: i64) -> std::result::Result<i64, String> {
        let r = match self {
            Scale::Identity => Some(v),
            Scale::Mul(m) => v.checked_mul(m),
            Scale::DivFloor(d) => Some(v.div_euclid(d)),
        };
        r.ok_or_else(|| format!("event time {v} is out of range"))
            .and_then(in_range)
    }

    /// As [`Scale::apply`], for values that may not fit in `i64` before scaling.
    fn apply_wide(self, v: i128) -> std::result::Result<i64, String> {
        let r = match self {
            Scale::Identity => v,
            Scale::Mul(m) => v * m as i128,
            Scale::DivFloor(d) => v.div_euclid(d as i128),
        };
        i64::try_from(r)
            .map_err(|_| format!("event time {v} is out of range"))
            .and_then(in_range)
    }
}

/// Microseconds per unit of the built-in epoch types that scale by multiplying
/// (`unixtimestamp_s`, `_ms`, `_us`; `_ns` divides: any long of nanoseconds is in range).
pub fn epoch_unit_micros() -> Vec<(&'static str, i64)> {
    [
        TimeUnit::Second,
        TimeUnit::Millisecond,
        TimeUnit::Microsecond,
        TimeUnit::Nanosecond,
    ]
    .into_iter()
    .filter_map(|u| {
        let m = match unit_scale(u) {
            Scale::Mul(m) => m,
            Scale::Identity => 1,
            Scale::DivFloor(_) => return None,
        };
        Some((EventTimeType::Unix(u).name(), m))
    })
    .collect()
}

fn unit_scale(unit: TimeUnit) -> Scale {
    match unit {
        TimeUnit::Second => Scale::Mul(1_000_000),
        TimeUnit::Millisecond => Scale::Mul(1_000),
        TimeUnit::Microsecond => Scale::Identity,
        TimeUnit::Nanosecond => Scale::DivFloor(1_000),
    }
}

#[inline]
fn in_range(us: i64) -> std::result::Result<i64, String> {
    if us == i64::MIN || us == i64::MAX {
        Err(format!("event time {us} is out of range"))
    } else {
        Ok(us)
    }
}

fn float_micros(v: f64, factor: f64) -> std::result::Result<i64, String> {
    if v.is_nan() {
        return Err("event time is NaN".into());
    }
    if !v.is_finite() {
        return Err(format!("event time {v} is not finite"));
    }
    let us = (v * factor).round();
    // i64::MIN and i64::MAX are reserved; 2^63 itself is not representable.
    if us <= -9.223_372_036_854_775e18 || us >= 9.223_372_036_854_775e18 {
        return Err(format!("event time {v} is out of range"));
    }
    Ok(us as i64)
}

/// Views a 64-bit temporal array as `Int64Array`, sharing its buffers.
fn reinterpret<T: ArrowPrimitiveType<Native = i64>>(array: &dyn Array) -> Int64Array {
    let a = array.as_primitive::<T>();
    Int64Array::new(a.values().clone(), a.nulls().cloned())
}

/// Converts an integer column of any width with `scale`.
fn scale_integers(
    array: &dyn Array,
    scale: Scale,
    errors: &mut Vec<(usize, String)>,
) -> Result<Int64Array> {
    Ok(match array.data_type() {
        DataType::Int64 => scale_ints(array.as_primitive::<Int64Type>(), scale, errors),
        DataType::UInt64 => map_checked(array.as_primitive::<UInt64Type>(), errors, |v| {
            scale.apply_wide(v as i128)
        }),
        _ => {
            // Every other integer type fits in i64 losslessly.
            let c = arrow_cast::cast(array, &DataType::Int64)?;
            scale_ints(c.as_primitive::<Int64Type>(), scale, errors)
        }
    })
}

/// Applies `scale` to every valid value, nulling (and reporting) nulls and values out
/// of range. Shares the values buffer when nothing changes.
fn scale_ints(a: &Int64Array, scale: Scale, errors: &mut Vec<(usize, String)>) -> Int64Array {
    if let Scale::Identity = scale {
        let bad = a
            .values()
            .iter()
            .enumerate()
            .filter(|&(i, &v)| a.is_valid(i) && (v == i64::MIN || v == i64::MAX))
            .map(|(i, _)| i)
            .collect::<Vec<_>>();
        report_nulls(a.nulls(), errors);
        if bad.is_empty() {
            return a.clone();
        }
        let mut valid: Vec<bool> = (0..a.len()).map(|i| a.is_valid(i)).collect();
        for i in bad {
            valid[i] = false;
            errors.push((i, format!("event time {} is out of range", a.value(i))));
        }
        return Int64Array::new(a.values().clone(), Some(NullBuffer::from(valid)));
    }
    map_checked(a, errors, |v| scale.apply(v))
}

fn report_nulls(nulls: Option<&NullBuffer>, errors: &mut Vec<(usize, String)>) {
    if let Some(n) = nulls {
        errors.extend(
            n.iter()
                .enumerate()
                .filter(|(_, ok)| !ok)
                .map(|(i, _)| (i, "event time is null".to_string())),
        );
    }
}

fn map_checked<T: ArrowPrimitiveType>(
    a: &PrimitiveArray<T>,
    errors: &mut Vec<(usize, String)>,
    f: impl Fn(T::Native) -> std::result::Result<i64, String>,
) -> Int64Array {
    let mut validity: Option<Vec<bool>> = None;
    let mut invalid = |i: usize, reason: String, errors: &mut Vec<(usize, String)>| {
        validity.get_or_insert_with(|| vec![true; a.len()])[i] = false;
        errors.push((i, reason));
    };
    let mut values = Vec::with_capacity(a.len());
    for (i, &v) in a.values().iter().enumerate() {
        if a.is_null(i) {
            invalid(i, "event time is null".to_string(), errors);
            values.push(0);
            continue;
        }
        match f(v) {
            Ok(x) => values.push(x),
            Err(reason) => {
                invalid(i, reason, errors);
                values.push(0);
            }
        }
    }
    Int64Array::new(ScalarBuffer::from(values), validity.map(NullBuffer::from))
}

fn map_strings(
    array: &dyn Array,
    errors: &mut Vec<(usize, String)>,
    f: impl Fn(&str) -> std::result::Result<i64, String>,
) -> Int64Array {
    let strings: ArrayRef = match array.data_type() {
        DataType::Utf8View | DataType::LargeUtf8 | DataType::Utf8 => Arc::new(
            arrow_cast::cast(array, &DataType::Utf8View).expect("string types cast to utf8view"),
        ),
        _ => unreachable!("checked by EventTimeType::check"),
    };
    let s = strings.as_string_view();
    let mut values = Vec::with_capacity(s.len());
    let mut validity = vec![true; s.len()];
    for (i, v) in s.iter().enumerate() {
        match v {
            None => {
                validity[i] = false;
                errors.push((i, "event time is null".to_string()));
                values.push(0);
            }
            Some(text) => match f(text) {
                Ok(x) => values.push(x),
                Err(reason) => {
                    validity[i] = false;
                    errors.push((i, reason));
                    values.push(0);
                }
            },
        }
    }
    let nulls = validity
        .iter()
        .any(|v| !v)
        .then(|| NullBuffer::from(validity));
    Int64Array::new(ScalarBuffer::from(values), nulls)
}

/// Epoch microseconds as an RFC 3339 UTC timestamp (`2026-01-01T00:00:00Z`), for
/// messages; the number itself where it is out of chrono's range.
pub fn format_epoch_micros(us: i64) -> String {
    chrono::DateTime::from_timestamp_micros(us)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true))
        .unwrap_or_else(|| format!("{us} us since the epoch"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{
        Date32Array, Float64Array, Int32Array, StringArray, TimestampMicrosecondArray,
        TimestampNanosecondArray, TimestampSecondArray, UInt64Array,
    };

    fn ok_values(p: &ParsedEventTime) -> Vec<Option<i64>> {
        p.values.iter().collect()
    }

    #[test]
    fn timestamp_micros_is_zero_copy() {
        let a = TimestampMicrosecondArray::from(vec![1, 2, 3]).with_timezone("UTC");
        let p = parse_event_time(&a, EventTimeType::Native).unwrap();
        assert_eq!(p.values.values().as_ptr(), a.values().as_ptr());
        assert!(p.errors.is_empty());
    }

    #[test]
    fn units_are_normalised_to_micros() {
        let s = TimestampSecondArray::from(vec![Some(2), None]);
        let p = parse_event_time(&s, EventTimeType::Native).unwrap();
        assert_eq!(ok_values(&p), vec![Some(2_000_000), None]);
        assert_eq!(p.errors, vec![(1, "event time is null".to_string())]);

        let ns = TimestampNanosecondArray::from(vec![1_999, -1]);
        let p = parse_event_time(&ns, EventTimeType::Native).unwrap();
        assert_eq!(ok_values(&p), vec![Some(1), Some(-1)], "floor division");

        let d = Date32Array::from(vec![1, -1, i32::MAX, i32::MIN]);
        let p = parse_event_time(&d, EventTimeType::Native).unwrap();
        assert_eq!(
            ok_values(&p),
            vec![Some(MICROS_PER_DAY), Some(-MICROS_PER_DAY), None, None],
            "days that overflow microseconds are error rows, not wrapped values"
        );
        assert_eq!(
            p.errors[0],
            (2, format!("event time {} is out of range", i32::MAX))
        );

        let ms = Int32Array::from(vec![5]);
        let p = parse_event_time(&ms, EventTimeType::builtin("unixtimestamp_ms").unwrap()).unwrap();
        assert_eq!(ok_values(&p), vec![Some(5_000)]);
    }

    #[test]
    fn bad_rows_become_errors() {
        let f = Float64Array::from(vec![1.5, f64::NAN, f64::INFINITY, 1e300]);
        let p = parse_event_time(&f, EventTimeType::Unix(TimeUnit::Second)).unwrap();
        assert_eq!(p.values.value(0), 1_500_000);
        let reasons: Vec<&str> = p.errors.iter().map(|e| e.1.as_str()).collect();
        assert_eq!(reasons[0], "event time is NaN");
        assert!(reasons[1].contains("not finite"));
        assert!(reasons[2].contains("out of range"));

        let big = arrow_array::Int64Array::from(vec![i64::MAX / 10, i64::MIN, 7]);
        let p = parse_event_time(&big, EventTimeType::Unix(TimeUnit::Second)).unwrap();
        assert_eq!(p.errors.len(), 2);
        assert_eq!(p.values.value(2), 7_000_000);

        let ticks = arrow_array::Int64Array::from(vec![i64::MIN, 3]);
        let p = parse_event_time(&ticks, EventTimeType::Ticks).unwrap();
        assert_eq!(ok_values(&p), vec![None, Some(3)]);

        let u = UInt64Array::from(vec![u64::MAX]);
        let p = parse_event_time(&u, EventTimeType::Ticks).unwrap();
        assert_eq!(p.errors.len(), 1);
    }

    #[test]
    fn strings_parse_as_numbers_or_iso() {
        let s = StringArray::from(vec!["1500", "1.5", "x"]);
        let p = parse_event_time(&s, EventTimeType::Unix(TimeUnit::Millisecond)).unwrap();
        assert_eq!(ok_values(&p), vec![Some(1_500_000), Some(1_500), None]);
        assert_eq!(p.errors[0].1, "cannot parse \"x\" as a number");

        let s = StringArray::from(vec![
            "2024-01-01T00:00:00.25+01:00",
            "2024-01-01 00:00:00",
            " 2024-01-01T00:00:00Z\t",
            "2024-01-01 T00:00:00",
        ]);
        let p = parse_event_time(&s, EventTimeType::Iso8601).unwrap();
        assert_eq!(p.values.value(0), 1_704_063_600_250_000);
        assert_eq!(p.values.value(1), 1_704_067_200_000_000);
        assert_eq!(p.values.value(2), 1_704_067_200_000_000, "padding trimmed");
        assert_eq!(p.errors.len(), 1, "{:?}", p.errors);
        assert_eq!(p.errors[0].0, 3);
    }

    #[test]
    fn resolve_validates_at_configuration_time() {
        let e = EventTimeType::resolve(Some("nope"), "ts", &DataType::Int64, false).unwrap_err();
        assert!(e.to_string().contains("unixtimestamp_ms"), "{e}");
        let e = EventTimeType::resolve(None, "ts", &DataType::Int64, false).unwrap_err();
        assert!(e.to_string().contains("\"ts\""), "{e}");
        assert_eq!(
            EventTimeType::resolve(None, "ts", &DataType::Int64, true).unwrap(),
            EventTimeType::Ticks
        );
        let e = EventTimeType::resolve(Some("iso8601"), "ts", &DataType::Int64, false).unwrap_err();
        assert!(e.to_string().contains("string column"), "{e}");
        let ts = DataType::Timestamp(TimeUnit::Microsecond, None);
        let e = EventTimeType::resolve(Some("unixtimestamp_ms"), "ts", &ts, false).unwrap_err();
        assert!(e.to_string().contains("need no event_time_type"), "{e}");
    }
}
