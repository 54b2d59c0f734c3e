//! Go `time.Duration` strings: Knative's config keys and annotations are parsed with
//! `time.ParseDuration` and its error messages print durations with `Duration.String()`.

use std::fmt;

/// A signed duration in nanoseconds, as Go's `time.Duration`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GoDuration(pub i64);

/// Nanoseconds per unit.
pub const NANOSECOND: i64 = 1;
pub const MICROSECOND: i64 = 1_000;
pub const MILLISECOND: i64 = 1_000_000;
pub const SECOND: i64 = 1_000_000_000;
pub const MINUTE: i64 = 60 * SECOND;
pub const HOUR: i64 = 60 * MINUTE;

/// Why a duration string did not parse (Go's message).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("time: invalid duration {0:?}")]
pub struct ParseDurationError(pub String);

impl GoDuration {
    pub const fn from_secs(s: i64) -> Self {
        GoDuration(s * SECOND)
    }

    /// Whole seconds (truncated toward zero).
    pub fn as_secs(self) -> i64 {
        self.0 / SECOND
    }

    /// True if there is no sub-second part.
    pub fn is_whole_seconds(self) -> bool {
        self.0 % SECOND == 0
    }

    /// The std duration, or None when negative.
    pub fn to_std(self) -> Option<std::time::Duration> {
        u64::try_from(self.0)
            .ok()
            .map(std::time::Duration::from_nanos)
    }

    /// Parses like Go's `time.ParseDuration` (`"1h30m"`, `"1.5s"`, `"-2m"`, `"0"`).
    pub fn parse(input: &str) -> Result<Self, ParseDurationError> {
        let err = || ParseDurationError(input.to_string());
        let mut s = input;
        let mut neg = false;
        if let Some(rest) = s.strip_prefix('-') {
            neg = true;
            s = rest;
        } else if let Some(rest) = s.strip_prefix('+') {
            s = rest;
        }
        if s == "0" {
            return Ok(GoDuration(0));
        }
        if s.is_empty() {
            return Err(err());
        }
        let mut total: i128 = 0;
        while !s.is_empty() {
            let int_len = s.bytes().take_while(u8::is_ascii_digit).count();
            let int_part = &s[..int_len];
            s = &s[int_len..];
            let mut frac_part = "";
            if let Some(rest) = s.strip_prefix('.') {
                let n = rest.bytes().take_while(u8::is_ascii_digit).count();
                frac_part = &rest[..n];
                s = &rest[n..];
            }
            if int_part.is_empty() && frac_part.is_empty() {
                return Err(err());
            }
            let unit_len = s
                .char_indices()
                .find(|(_, c)| c.is_ascii_digit() || *c == '.')
                .map_or(s.len(), |(i, _)| i);
            let unit = match &s[..unit_len] {
                "ns" => NANOSECOND,
                "us" | "µs" | "μs" => MICROSECOND,
                "ms" => MILLISECOND,
                "s" => SECOND,
                "m" => MINUTE,
                "h" => HOUR,
                _ => return Err(err()),
            };
            s = &s[unit_len..];
            let whole: i128 = if int_part.is_empty() {
                0
            } else {
                int_part.parse().map_err(|_| err())?
            };
            let mut value = whole.checked_mul(unit as i128).ok_or_else(err)?;
            if !frac_part.is_empty() {
                let digits = &frac_part[..frac_part.len().min(18)];
                let frac: i128 = digits.parse().map_err(|_| err())?;
                value += frac * unit as i128 / 10i128.pow(digits.len() as u32);
            }
            total = total.checked_add(value).ok_or_else(err)?;
            if total > i64::MAX as i128 {
                return Err(err());
            }
        }
        Ok(GoDuration(if neg { -(total as i64) } else { total as i64 }))
    }
}

impl fmt::Display for GoDuration {
    /// Go's `Duration.String()`: `1h0m0s`, `6s`, `1.5s`, `100ms`, `0s`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let neg = self.0 < 0;
        let u = self.0.unsigned_abs();
        let sign = if neg { "-" } else { "" };
        if u == 0 {
            return f.write_str("0s");
        }
        if u < SECOND as u64 {
            let (unit, div) = if u < MICROSECOND as u64 {
                ("ns", 1u64)
            } else if u < MILLISECOND as u64 {
                ("µs", MICROSECOND as u64)
            } else {
                ("ms", MILLISECOND as u64)
            };
            return write!(f, "{sign}{}{unit}", frac(u, div));
        }
        let secs_total = u / SECOND as u64;
        let h = secs_total / 3600;
        let m = (secs_total / 60) % 60;
        let s_part = u - (h * 3600 + m * 60) * SECOND as u64;
        let s = frac(s_part, SECOND as u64);
        if h > 0 {
            write!(f, "{sign}{h}h{m}m{s}s")
        } else if m > 0 {
            write!(f, "{sign}{m}m{s}s")
        } else {
            write!(f, "{sign}{s}s")
        }
    }
}

/// `v / div` with the remainder as trailing-zero-free decimals.
fn frac(v: u64, div: u64) -> String {
    let whole = v / div;
    let rem = v % div;
    if rem == 0 {
        return whole.to_string();
    }
    let width = div.to_string().len() - 1;
    let digits = format!("{rem:0width$}");
    format!("{whole}.{}", digits.trim_end_matches('0'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_format_round_trip() {
        let cases = [
            ("60s", 60 * SECOND, "1m0s"),
            ("1h", HOUR, "1h0m0s"),
            ("6s", 6 * SECOND, "6s"),
            ("1.5s", 1_500 * MILLISECOND, "1.5s"),
            ("100ms", 100 * MILLISECOND, "100ms"),
            ("0", 0, "0s"),
            ("0s", 0, "0s"),
            ("-1m3s", -63 * SECOND, "-1m3s"),
            ("1h30m", 90 * MINUTE, "1h30m0s"),
            ("2us", 2 * MICROSECOND, "2µs"),
            ("1.25ms", 1_250 * MICROSECOND, "1.25ms"),
        ];
        for (input, nanos, shown) in cases {
            let d = GoDuration::parse(input).unwrap();
            assert_eq!(d.0, nanos, "{input}");
            assert_eq!(d.to_string(), shown, "{input}");
        }
    }

    #[test]
    fn rejects_garbage() {
        for bad in [
            "",
            "s",
            "10",
            "1x",
            "CLXXXIIIs",
            "1..2s",
            "--1s",
            ".s",
            "9999999999999h",
        ] {
            assert!(GoDuration::parse(bad).is_err(), "{bad}");
        }
    }
}
