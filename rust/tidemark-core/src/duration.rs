//! Human-readable durations: `"250ms"`, `"5s"`, `"2m"`, `"1h30m"`, `"1.5d"`, and Spark's
//! interval strings: `"10 seconds"`, `"1 minute"`, `"interval 2 hours 30 minutes"`.

use crate::error::{Result, TidemarkError};

/// Parses a duration string into microseconds.
///
/// Units: `us` (or `µs`), `ms`, `s`, `m` (or `min`), `h`, `d`, `w`, and the words
/// Spark's `window` and `withWatermark` take, singular or plural: `microsecond`,
/// `millisecond`, `second`, `minute`, `hour`, `day`, `week` (also `sec`, `secs`,
/// `mins`, `hr`, `hrs`). Units are case-insensitive. Parts may be combined (`"1h30m"`,
/// `"1 hour 30 minutes"`) and may have a fraction (`"1.5s"`); whitespace between parts
/// is allowed, and so is a leading `interval` (`"interval 10 seconds"`, as in Spark
/// SQL). A bare `"0"` is zero. Negative durations are rejected, and so are months and
/// years, which have no fixed length.
///
/// # Examples
///
/// ```
/// use tidemark_core::duration::parse_duration_micros;
/// assert_eq!(parse_duration_micros("250ms").unwrap(), 250_000);
/// assert_eq!(parse_duration_micros("1h30m").unwrap(), 5_400_000_000);
/// assert_eq!(parse_duration_micros("1.5s").unwrap(), 1_500_000);
/// assert_eq!(parse_duration_micros("10 seconds").unwrap(), 10_000_000);
/// assert_eq!(parse_duration_micros("interval 1 minute").unwrap(), 60_000_000);
/// assert!(parse_duration_micros("5 parsecs").is_err());
/// ```
pub fn parse_duration_micros(text: &str) -> Result<i64> {
    let err = |why: &str| {
        TidemarkError::config(
            "duration",
            format!("cannot parse {text:?} as a duration ({why}); use e.g. \"250ms\", \"5s\", \"2m\", \"1h\", \"1d\" or \"10 seconds\""),
        )
    };
    let mut s = text.trim();
    // Spark SQL's interval literal: `interval 10 seconds`.
    if s.len() > 8 && s.is_char_boundary(8) && s[..8].eq_ignore_ascii_case("interval") {
        let after = &s[8..];
        if after.starts_with(char::is_whitespace) {
            s = after.trim_start();
        }
    }
    if s.is_empty() {
        return Err(err("empty"));
    }
    if s == "0" {
        return Ok(0);
    }
    if s.starts_with('-') {
        return Err(err("negative"));
    }
    let mut total: i128 = 0;
    let mut rest = s;
    while !rest.is_empty() {
        rest = rest.trim_start();
        let num_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if num_end == 0 {
            return Err(err("expected a number"));
        }
        let number = &rest[..num_end];
        rest = rest[num_end..].trim_start();
        let unit_end = rest
            .find(|c: char| !c.is_alphabetic())
            .unwrap_or(rest.len());
        let raw_unit = &rest[..unit_end];
        if raw_unit == "M" {
            // "1M" reads as a month in some tools and a minute in others.
            return Err(err(
                "\"M\" is ambiguous: write \"m\" or \"min\" for minutes (months have no fixed length)",
            ));
        }
        let unit = raw_unit.to_lowercase();
        rest = &rest[unit_end..];
        let micros_per: i128 = match unit.as_str() {
            "us" | "µs" | "μs" | "microsecond" | "microseconds" => 1,
            "ms" | "millisecond" | "milliseconds" => 1_000,
            "s" | "sec" | "secs" | "second" | "seconds" => 1_000_000,
            "m" | "min" | "mins" | "minute" | "minutes" => 60_000_000,
            "h" | "hr" | "hrs" | "hour" | "hours" => 3_600_000_000,
            "d" | "day" | "days" => 86_400_000_000,
            "w" | "week" | "weeks" => 604_800_000_000,
            "month" | "months" | "mon" | "mons" | "year" | "years" | "y" | "yr" | "yrs" => {
                return Err(err("months and years have no fixed length"))
            }
            "" => return Err(err("missing unit")),
            _ => return Err(err("unknown unit")),
        };
        let part: i128 = if let Some((whole, frac)) = number.split_once('.') {
            let whole: i128 = if whole.is_empty() {
                0
            } else {
                whole.parse().map_err(|_| err("bad number"))?
            };
            if frac.is_empty() || frac.contains('.') || frac.len() > 12 {
                return Err(err("bad number"));
            }
            let frac_val: i128 = frac.parse().map_err(|_| err("bad number"))?;
            let scale = 10i128.pow(frac.len() as u32);
            whole * micros_per + frac_val * micros_per / scale
        } else {
            number
                .parse::<i128>()
                .map_err(|_| err("bad number"))?
                .checked_mul(micros_per)
                .ok_or_else(|| err("too large"))?
        };
        total = total.checked_add(part).ok_or_else(|| err("too large"))?;
        if total > i64::MAX as i128 {
            return Err(err("too large"));
        }
    }
    Ok(total as i64)
}

/// A duration in microseconds as the shortest exact string [`parse_duration_micros`]
/// reads back (`"1h30m"`, `"250ms"`, `"0s"`), for messages.
///
/// # Examples
///
/// ```
/// use tidemark_core::duration::format_micros;
/// assert_eq!(format_micros(5_400_000_000), "1h30m");
/// assert_eq!(format_micros(250_000), "250ms");
/// assert_eq!(format_micros(86_400_000_001), "1d1us");
/// assert_eq!(format_micros(0), "0s");
/// ```
pub fn format_micros(us: i64) -> String {
    if us == 0 {
        return "0s".into();
    }
    let mut out = String::new();
    if us < 0 {
        out.push('-');
    }
    let mut rest = us.unsigned_abs();
    for (unit, size) in [
        ("d", 86_400_000_000u64),
        ("h", 3_600_000_000),
        ("m", 60_000_000),
        ("s", 1_000_000),
        ("ms", 1_000),
        ("us", 1),
    ] {
        if rest >= size {
            out.push_str(&format!("{}{unit}", rest / size));
            rest %= size;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units() {
        for (s, us) in [
            ("1us", 1),
            ("1µs", 1),
            ("7ms", 7_000),
            ("5s", 5_000_000),
            ("2m", 120_000_000),
            ("2min", 120_000_000),
            ("1h", 3_600_000_000),
            ("1d", 86_400_000_000),
            ("1w", 604_800_000_000),
            (" 1m 30s ", 90_000_000),
            (".5s", 500_000),
            ("10 seconds", 10_000_000),
            ("1 second", 1_000_000),
            ("10 Seconds", 10_000_000),
            ("5S", 5_000_000),
            ("1 minute", 60_000_000),
            ("1MIN", 60_000_000),
            ("2 hours 30 minutes", 9_000_000_000),
            ("1 day", 86_400_000_000),
            ("1 week", 604_800_000_000),
            ("500 milliseconds", 500_000),
            ("3 microseconds", 3),
            ("1.5 hours", 5_400_000_000),
            ("interval 10 seconds", 10_000_000),
            ("INTERVAL 1 hour", 3_600_000_000),
            ("2 hrs 5 mins", 7_500_000_000),
            ("0", 0),
            ("0s", 0),
        ] {
            assert_eq!(parse_duration_micros(s).unwrap(), us, "{s}");
        }
    }

    #[test]
    fn rejects() {
        for s in [
            "",
            "5",
            "-5s",
            "5x",
            "s",
            "1..5s",
            "1.s",
            "99999999999999999999d",
            "1 month",
            "1 year",
            "interval",
            "interval ",
            "intervals 5s",
            "interval5s",
            "5 fortnights",
            "1M",
            "2 M",
        ] {
            assert!(parse_duration_micros(s).is_err(), "{s}");
        }
    }
}
