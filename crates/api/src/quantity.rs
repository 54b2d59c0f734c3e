//! Kubernetes resource quantities (`500m`, `1Gi`, `1e3`), parsed as apimachinery's
//! `resource.ParseQuantity` parses them and written back in its canonical form.
//!
//! A port of the rules of `staging/src/k8s.io/apimachinery/pkg/api/resource/quantity.go`
//! (`parseQuantityString`, `ParseQuantity`, `CanonicalizeBytes`), `suffix.go` (the suffix
//! tables) and `amount.go` (`AsCanonicalBytes`, `AsCanonicalBase1024Bytes`):
//!
//! - a quantity is a signed decimal number and a suffix: binary (`Ki` … `Ei`), decimal
//!   (`n u m "" k M G T P E`) or a decimal exponent (`e3`, `E-2`);
//! - the value is exact (no floating point); a non-zero value is rounded away from zero to
//!   a whole number of nano units, and a binary one is capped at 2^63-1;
//! - the written form keeps the suffix family (binary, decimal, exponent) with no fractional
//!   digits and the largest suffix that loses nothing (`1000m` → `1`, `1024Mi` → `1Gi`,
//!   `0.5` → `500m`, `1.5Gi` → `1536Mi`); a binary value below 1024 or not a whole number is
//!   written as decimal;
//! - a string that is already canonical is kept as written (`1e3` stays `1e3`).
//!
//! The value is kept as a decimal coefficient (its digits) and a power of ten, so any
//! quantity Kubernetes accepts is represented exactly whatever its size.

use std::fmt;

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};

/// apimachinery's `ErrFormatWrong`.
pub const ERR_FORMAT_WRONG: &str =
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";
/// apimachinery's `ErrNumeric`.
pub const ERR_NUMERIC: &str = "unable to parse numeric part of quantity";
/// apimachinery's `ErrSuffix`.
pub const ERR_SUFFIX: &str = "unable to parse quantity's suffix";

/// A parse failure; displays as apimachinery's error text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuantityError {
    FormatWrong,
    Numeric,
    Suffix,
}

impl fmt::Display for QuantityError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            QuantityError::FormatWrong => ERR_FORMAT_WRONG,
            QuantityError::Numeric => ERR_NUMERIC,
            QuantityError::Suffix => ERR_SUFFIX,
        })
    }
}

impl std::error::Error for QuantityError {}

/// The suffix family a quantity is written with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    DecimalExponent,
    BinarySI,
    DecimalSI,
}

/// A parsed quantity: its sign, value and canonical string.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Quantity {
    sign: i8,
    format: Format,
    canonical: String,
}

/// kube's structural schema of `resource.Quantity` (`apimachinery/pkg/api/resource`):
/// a number or a string.
impl schemars::JsonSchema for Quantity {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Quantity".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "pattern": "^(\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))))?$",
            "x-kubernetes-int-or-string": true,
        })
    }
}

impl Quantity {
    /// `resource.ParseQuantity`.
    pub fn parse(s: &str) -> Result<Quantity, QuantityError> {
        parse(s)
    }

    /// -1, 0 or 1.
    pub fn sign(&self) -> i8 {
        self.sign
    }

    pub fn is_zero(&self) -> bool {
        self.sign == 0
    }

    pub fn format(&self) -> Format {
        self.format
    }

    /// The canonical form, as apimachinery serializes it.
    pub fn as_str(&self) -> &str {
        &self.canonical
    }

    /// The value times 10^`scale`, rounded up ([`scaled`]): `MilliValue()` is scale 3.
    pub fn scaled_value(&self, scale: u32) -> Option<i64> {
        scaled(&self.canonical, scale)
    }
}

/// A canonical quantity times 10^`scale`, rounded up as apimachinery's `ScaledValue` does
/// (`128Mi` → bytes with scale 0, `500m` → 500 with scale 3). None on overflow or nonsense.
pub fn scaled(q: &str, scale: u32) -> Option<i64> {
    let split = q
        .find(|ch: char| !(ch.is_ascii_digit() || ch == '.' || ch == '-' || ch == '+'))
        .unwrap_or(q.len());
    let (number, suffix) = q.split_at(split);
    let (mult_num, exp10): (i128, i32) = match suffix {
        "" => (1, 0),
        "Ki" => (1 << 10, 0),
        "Mi" => (1 << 20, 0),
        "Gi" => (1 << 30, 0),
        "Ti" => (1 << 40, 0),
        "Pi" => (1 << 50, 0),
        "Ei" => (1 << 60, 0),
        "n" => (1, -9),
        "u" => (1, -6),
        "m" => (1, -3),
        "k" => (1, 3),
        "M" => (1, 6),
        "G" => (1, 9),
        "T" => (1, 12),
        "P" => (1, 15),
        "E" => (1, 18),
        s if s.starts_with(['e', 'E']) => (1, s[1..].parse().ok()?),
        _ => return None,
    };
    let (int, frac) = number.split_once('.').unwrap_or((number, ""));
    let negative = int.starts_with('-');
    let int = int.trim_start_matches(['-', '+']);
    let digits = format!("{int}{frac}");
    let mantissa: i128 = if digits.is_empty() {
        0
    } else {
        digits.parse().ok()?
    };
    // value = mantissa * mult * 10^(exp10 - frac.len() + scale)
    let exp = exp10 - frac.len() as i32 + scale as i32;
    let base = mantissa.checked_mul(mult_num)?;
    let value = if exp >= 0 {
        base.checked_mul(10i128.checked_pow(exp as u32)?)?
    } else {
        let div = 10i128.checked_pow((-exp) as u32)?;
        (base + div - 1) / div
    };
    let value = if negative { -value } else { value };
    i64::try_from(value).ok()
}

impl fmt::Display for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.canonical)
    }
}

impl std::str::FromStr for Quantity {
    type Err = QuantityError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse(s)
    }
}

impl Serialize for Quantity {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.canonical)
    }
}

/// `UnmarshalJSON`: a string or a bare number, surrounding whitespace trimmed; `null` is
/// zero.
impl<'de> Deserialize<'de> for Quantity {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Quantity;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a quantity")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Quantity, E> {
                parse(v.trim()).map_err(E::custom)
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Quantity, E> {
                self.visit_str(&v.to_string())
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Quantity, E> {
                self.visit_str(&v.to_string())
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Quantity, E> {
                self.visit_str(&v.to_string())
            }
            /// `null` is the zero quantity, written `"0"`.
            fn visit_unit<E: de::Error>(self) -> Result<Quantity, E> {
                Ok(zero(Format::DecimalSI))
            }
        }
        d.deserialize_any(V)
    }
}

/// What `parseQuantityString` splits a quantity into.
struct Scanned<'a> {
    positive: bool,
    /// The signed number (`-1.5` of `-1.5Gi`).
    value: &'a str,
    /// The integer digits, leading zeros removed (`"0"` when there are none).
    num: &'a str,
    /// The fractional digits.
    denom: &'a str,
    suffix: &'a str,
}

/// `parseQuantityString`: a fast scanner that splits off the number and the suffix; the
/// suffix is checked afterwards.
fn scan(s: &str) -> Result<Scanned<'_>, QuantityError> {
    let b = s.as_bytes();
    let end = b.len();
    let mut positive = true;
    let mut pos = 0;
    match b.first() {
        Some(b'-') => {
            positive = false;
            pos += 1;
        }
        Some(b'+') => pos += 1,
        _ => {}
    }
    let done = |value: &'static str, num: &'static str| Scanned {
        positive,
        value,
        num,
        denom: "",
        suffix: "",
    };
    // Leading zeros.
    while pos < end && b[pos] == b'0' {
        pos += 1;
    }
    if pos >= end {
        return Ok(done("0", "0"));
    }
    // The integer part.
    let start = pos;
    while pos < end && b[pos].is_ascii_digit() {
        pos += 1;
    }
    if pos >= end {
        return Ok(Scanned {
            positive,
            value: s,
            num: &s[start..],
            denom: "",
            suffix: "",
        });
    }
    let num = if pos == start { "0" } else { &s[start..pos] };
    // The fractional part (`1.` is allowed).
    let mut denom = "";
    if b[pos] == b'.' {
        pos += 1;
        let dstart = pos;
        while pos < end && b[pos].is_ascii_digit() {
            pos += 1;
        }
        denom = &s[dstart..pos];
        if pos >= end {
            return Ok(Scanned {
                positive,
                value: s,
                num,
                denom,
                suffix: "",
            });
        }
    }
    let value = &s[..pos];
    // The suffix: letters of the suffix alphabet, an optional sign, digits.
    let suffix_start = pos;
    while pos < end && b"eEinumkKMGTP".contains(&b[pos]) {
        pos += 1;
    }
    if pos < end && matches!(b[pos], b'-' | b'+') {
        pos += 1;
    }
    while pos < end && b[pos].is_ascii_digit() {
        pos += 1;
    }
    if pos < end {
        return Err(QuantityError::FormatWrong);
    }
    Ok(Scanned {
        positive,
        value,
        num,
        denom,
        suffix: &s[suffix_start..],
    })
}

/// `quantitySuffixer.interpret`: (base, exponent, format).
fn interpret(suffix: &str) -> Option<(u32, i32, Format)> {
    let dec = |e| Some((10, e, Format::DecimalSI));
    let bin = |e| Some((2, e, Format::BinarySI));
    match suffix {
        "" => dec(0),
        "n" => dec(-9),
        "u" => dec(-6),
        "m" => dec(-3),
        "k" => dec(3),
        "M" => dec(6),
        "G" => dec(9),
        "T" => dec(12),
        "P" => dec(15),
        "E" => dec(18),
        "Ki" => bin(10),
        "Mi" => bin(20),
        "Gi" => bin(30),
        "Ti" => bin(40),
        "Pi" => bin(50),
        "Ei" => bin(60),
        s if s.len() > 1 && s.starts_with(['e', 'E']) => {
            // Go's `strconv.ParseInt(s, 10, 64)`, then bounded to ±MaxInt32 (the scale is
            // an int32 that is negated later).
            let exp: i64 = s[1..].parse().ok()?;
            if exp.unsigned_abs() > i32::MAX as u64 {
                return None;
            }
            Some((10, exp as i32, Format::DecimalExponent))
        }
        _ => None,
    }
}

/// An exact non-negative decimal: `digits × 10^exp`, digits most significant first with no
/// leading zeros (empty for zero).
#[derive(Clone, Debug)]
struct Dec {
    digits: Vec<u8>,
    exp: i64,
}

impl Dec {
    fn from_digits(s: &str, exp: i64) -> Dec {
        let digits: Vec<u8> = s
            .bytes()
            .skip_while(|&c| c == b'0')
            .map(|c| c - b'0')
            .collect();
        Dec { digits, exp }.trimmed()
    }

    fn is_zero(&self) -> bool {
        self.digits.is_empty()
    }

    /// Moves trailing zero digits into the exponent.
    fn trimmed(mut self) -> Dec {
        while self.digits.last() == Some(&0) {
            self.digits.pop();
            self.exp += 1;
        }
        if self.digits.is_empty() {
            self.exp = 0;
        }
        self
    }

    fn mul_small(mut self, m: u64) -> Dec {
        let mut carry = 0u64;
        for d in self.digits.iter_mut().rev() {
            let v = u64::from(*d) * m + carry;
            *d = (v % 10) as u8;
            carry = v / 10;
        }
        while carry > 0 {
            self.digits.insert(0, (carry % 10) as u8);
            carry /= 10;
        }
        self.trimmed()
    }

    /// Rounds away from zero to a multiple of 10^-9 (`inf.RoundUp` at nano scale).
    fn round_up_to_nano(mut self) -> Dec {
        if self.is_zero() || self.exp >= -9 {
            return self;
        }
        let drop = (-9 - self.exp) as u64;
        if drop >= self.digits.len() as u64 {
            return Dec {
                digits: vec![1],
                exp: -9,
            };
        }
        let keep = self.digits.len() - drop as usize;
        let dropped_nonzero = self.digits[keep..].iter().any(|&d| d != 0);
        self.digits.truncate(keep);
        self.exp = -9;
        if dropped_nonzero {
            self = self.add_one_ulp();
        }
        self.trimmed()
    }

    /// Adds one unit of the last digit.
    fn add_one_ulp(mut self) -> Dec {
        for d in self.digits.iter_mut().rev() {
            if *d == 9 {
                *d = 0;
            } else {
                *d += 1;
                return self;
            }
        }
        self.digits.insert(0, 1);
        self
    }

    /// The number of integer digits, or `None` when the value has a fractional part.
    /// (Only called on trimmed values: `exp < 0` means a fraction.)
    fn integer_digits(&self) -> Option<Vec<u8>> {
        if self.exp < 0 {
            return None;
        }
        let mut d = self.digits.clone();
        d.extend(std::iter::repeat_n(0, self.exp as usize));
        Some(d)
    }

    /// Compares with a non-negative integer given by its decimal digits.
    fn cmp_int(&self, int: &str) -> std::cmp::Ordering {
        use std::cmp::Ordering;
        if self.is_zero() {
            return if int.trim_start_matches('0').is_empty() {
                Ordering::Equal
            } else {
                Ordering::Less
            };
        }
        // Magnitude: the position of the most significant digit.
        let mag = self.digits.len() as i64 + self.exp;
        let other = Dec::from_digits(int, 0);
        let omag = other.digits.len() as i64 + other.exp;
        if other.is_zero() || mag != omag {
            return if other.is_zero() {
                Ordering::Greater
            } else {
                mag.cmp(&omag)
            };
        }
        // Same magnitude: compare digit by digit (missing digits are zeros).
        let n = self.digits.len().max(other.digits.len());
        for i in 0..n {
            let a = self.digits.get(i).copied().unwrap_or(0);
            let b = other.digits.get(i).copied().unwrap_or(0);
            if a != b {
                return a.cmp(&b);
            }
        }
        Ordering::Equal
    }
}

/// `ParseQuantity`.
fn parse(s: &str) -> Result<Quantity, QuantityError> {
    if s.is_empty() {
        return Err(QuantityError::FormatWrong);
    }
    if s == "0" {
        return Ok(zero(Format::DecimalSI));
    }
    let sc = scan(s)?;
    let (base, exponent, format) = interpret(sc.suffix).ok_or(QuantityError::Suffix)?;

    // The int64 fast path: when the digits surely fit, the value is exact and a string
    // already in canonical form is kept as written.
    let digits = sc.num.len() + sc.denom.len();
    let precision: i64 = match format {
        Format::DecimalExponent | Format::DecimalSI => 18 - digits as i64,
        Format::BinarySI if sc.denom.is_empty() => {
            15 - sc.num.len() as i64 - (exponent as f32 * 3.0 / 10.0) as i64 - 1
        }
        Format::BinarySI => -1,
    };
    if precision >= 0 {
        let scale = i64::from(if base == 10 { exponent } else { 0 }) - sc.denom.len() as i64;
        if scale >= -9 {
            let shifted = format!("{}{}", sc.num, sc.denom);
            let value: i64 = shifted.parse().map_err(|_| QuantityError::Numeric)?;
            let mantissa: i64 = if base == 2 { 1 << exponent } else { 1 };
            if let Some(result) = value.checked_mul(mantissa) {
                let keep = match format {
                    Format::BinarySI => exponent % 10 == 0 && value & 0x07 != 0,
                    _ => scale % 3 == 0 && !shifted.ends_with("000") && !shifted.starts_with('0'),
                };
                let sign = if result == 0 {
                    0
                } else if sc.positive {
                    1
                } else {
                    -1
                };
                if keep {
                    return Ok(Quantity {
                        sign,
                        format,
                        canonical: s.to_string(),
                    });
                }
                let amount = Dec::from_digits(&result.unsigned_abs().to_string(), scale);
                return Ok(canonical(sign, amount, format));
            }
        }
    }

    // The exact decimal path.
    let number = sc.value.trim_start_matches(['+', '-']);
    let (int, frac) = number.split_once('.').unwrap_or((number, ""));
    if !int.bytes().chain(frac.bytes()).all(|c| c.is_ascii_digit()) {
        return Err(QuantityError::Numeric);
    }
    let mut amount = Dec::from_digits(&format!("{int}{frac}"), -(frac.len() as i64));
    if base == 10 {
        amount.exp += i64::from(exponent);
        amount = amount.trimmed();
    } else {
        // 2^exponent, in steps that fit a u64 multiplier.
        let mut left = exponent;
        while left > 0 {
            let step = left.min(32);
            amount = amount.mul_small(1u64 << step);
            left -= step;
        }
    }
    amount = amount.round_up_to_nano();
    let mut format = format;
    if format == Format::BinarySI && amount.cmp_int(&i64::MAX.to_string()).is_gt() {
        amount = Dec::from_digits(&i64::MAX.to_string(), 0);
    }
    if format == Format::BinarySI && !amount.is_zero() && amount.cmp_int("1").is_lt() {
        format = Format::DecimalSI;
    }
    let sign = if amount.is_zero() {
        0
    } else if sc.positive {
        1
    } else {
        -1
    };
    Ok(canonical(sign, amount, format))
}

fn zero(format: Format) -> Quantity {
    Quantity {
        sign: 0,
        format,
        canonical: "0".to_string(),
    }
}

/// `CanonicalizeBytes`: the written form of `sign × amount` in `format`.
fn canonical(sign: i8, amount: Dec, format: Format) -> Quantity {
    if amount.is_zero() {
        return zero(format);
    }
    let minus = if sign < 0 { "-" } else { "" };
    if format == Format::BinarySI
        && amount.cmp_int("1024").is_ge()
        && let Some(int) = amount.integer_digits()
        && let Some((number, k)) = base_1024(int)
    {
        const BIN: [&str; 7] = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
        if let Some(suffix) = BIN.get(k) {
            return Quantity {
                sign,
                format,
                canonical: format!("{minus}{number}{suffix}"),
            };
        }
    }
    // Decimal: the exponent lowered to a multiple of 3, the coefficient grown to match.
    let pad = amount.exp.rem_euclid(3);
    let exp = amount.exp - pad;
    let mut number: String = amount.digits.iter().map(|d| char::from(b'0' + d)).collect();
    number.extend(std::iter::repeat_n('0', pad as usize));
    let suffix = match (format, exp) {
        (Format::DecimalExponent, 0) => String::new(),
        (Format::DecimalExponent, e) => format!("e{e}"),
        (_, -9) => "n".into(),
        (_, -6) => "u".into(),
        (_, -3) => "m".into(),
        (_, 0) => String::new(),
        (_, 3) => "k".into(),
        (_, 6) => "M".into(),
        (_, 9) => "G".into(),
        (_, 12) => "T".into(),
        (_, 15) => "P".into(),
        (_, 18) => "E".into(),
        // No decimal suffix this large or small: exponent notation keeps the magnitude.
        (_, e) => format!("e{e}"),
    };
    Quantity {
        sign,
        format,
        canonical: format!("{minus}{number}{suffix}"),
    }
}

/// Divides an integer (decimal digits) by 1024 while it divides evenly: the quotient's
/// digits and how many times it divided.
fn base_1024(mut int: Vec<u8>) -> Option<(String, usize)> {
    let mut k = 0;
    loop {
        let mut q = Vec::with_capacity(int.len());
        let mut rem = 0u32;
        for &d in &int {
            let cur = rem * 10 + u32::from(d);
            q.push((cur / 1024) as u8);
            rem = cur % 1024;
        }
        if rem != 0 {
            break;
        }
        let first = q.iter().position(|&d| d != 0)?;
        int = q.split_off(first);
        k += 1;
    }
    Some((int.iter().map(|d| char::from(b'0' + d)).collect(), k))
}

#[cfg(test)]
mod tests;
