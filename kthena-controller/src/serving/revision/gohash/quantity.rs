//! `resource.Quantity` in Go's memory after `ParseQuantity` (k8s.io/apimachinery v0.34.2
//! `pkg/api/resource/quantity.go`): the struct `{i int64Amount{value, scale}; d
//! infDecAmount{*inf.Dec}; s string; Format}`. Small exact values take the fast path
//! (`int64Amount`, with the original text cached in `s` only when it is already canonical);
//! the rest (fractions of binary suffixes, scales below nano, very large values) become an
//! `inf.Dec` (`{unscaled big.Int{neg, abs []Word}; scale}`) rounded up to nano precision.

use super::{GoHashError, GoValue};

/// `maxInt64Factors`: decimal digits an int64 always holds.
const MAX_INT64_FACTORS: i32 = 18;
/// `Nano`, the smallest scale of the fast path.
const NANO: i32 = -9;

/// A parsed quantity text: `parseQuantityString`'s results.
struct Parts<'a> {
    positive: bool,
    /// Sign, digits and fraction (what `inf.Dec.SetString` reads on the slow path).
    value: &'a str,
    num: &'a str,
    denom: &'a str,
    suffix: &'a str,
}

fn digits_end(bytes: &[u8], from: usize) -> usize {
    (from..bytes.len())
        .find(|&i| !bytes[i].is_ascii_digit())
        .unwrap_or(bytes.len())
}

/// Go's `parseQuantityString`; `None` for `ErrFormatWrong`.
fn split(s: &str) -> Option<Parts<'_>> {
    let b = s.as_bytes();
    let mut pos = 0;
    let mut positive = true;
    match b.first() {
        Some(b'-') => (positive, pos) = (false, 1),
        Some(b'+') => pos = 1,
        _ => {}
    }
    while pos < b.len() && b[pos] == b'0' {
        pos += 1;
    }
    if pos >= b.len() {
        let zero = Parts {
            positive,
            value: "0",
            num: "0",
            denom: "",
            suffix: "",
        };
        return Some(zero);
    }
    let num_end = digits_end(b, pos);
    let num = if num_end == pos {
        "0"
    } else {
        &s[pos..num_end]
    };
    pos = num_end;
    let mut denom = "";
    if pos < b.len() && b[pos] == b'.' {
        let end = digits_end(b, pos + 1);
        denom = &s[pos + 1..end];
        pos = end;
    }
    let value = &s[..pos];
    let suffix_start = pos;
    while pos < b.len() && b"eEinumkKMGTP".contains(&b[pos]) {
        pos += 1;
    }
    if pos < b.len() && (b[pos] == b'-' || b[pos] == b'+') {
        pos += 1;
    }
    if digits_end(b, pos) != b.len() {
        return None;
    }
    Some(Parts {
        positive,
        value,
        num,
        denom,
        suffix: &s[suffix_start..],
    })
}

/// The format of a suffix: `DecimalSI`, `BinarySI` or `DecimalExponent`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Format {
    DecimalSi,
    BinarySi,
    DecimalExponent,
}

impl Format {
    fn go(self) -> &'static str {
        match self {
            Self::DecimalSi => "DecimalSI",
            Self::BinarySi => "BinarySI",
            Self::DecimalExponent => "DecimalExponent",
        }
    }
}

/// `quantitySuffixer.interpret`: (base, exponent, format).
fn interpret(suffix: &str) -> Option<(u32, i32, Format)> {
    let dec = ["n", "u", "m", "", "k", "M", "G", "T", "P", "E"];
    if let Some(i) = dec.iter().position(|&d| d == suffix) {
        let exponent = i32::try_from(i).ok()? * 3 - 9;
        return Some((10, exponent, Format::DecimalSi));
    }
    let bin = ["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
    if let Some(i) = bin.iter().position(|&d| d == suffix) {
        return Some((2, i32::try_from(i).ok()? * 10 + 10, Format::BinarySi));
    }
    let rest = suffix.strip_prefix(['e', 'E']).filter(|r| !r.is_empty())?;
    let exponent = rest.parse::<i64>().ok()?;
    Some((10, i32::try_from(exponent).ok()?, Format::DecimalExponent))
}

/// The Go value of `resource.Quantity` for `text` (already trimmed); `path` for errors.
pub(super) fn decode(text: &str, path: &str) -> Result<GoValue, GoHashError> {
    let refuse = || GoHashError::Quantity {
        path: path.to_owned(),
        value: text.to_owned(),
    };
    if text.is_empty() {
        return Err(refuse());
    }
    if text == "0" {
        return Ok(quantity(0, 0, GoValue::Nil, text, Format::DecimalSi));
    }
    let parts = split(text).ok_or_else(refuse)?;
    let (base, exponent, format) = interpret(parts.suffix).ok_or_else(refuse)?;
    if let Some(fast) = fast_path(text, &parts, exponent, format) {
        return Ok(fast);
    }
    slow_path(&parts, base, exponent, format).map_err(|e| match e {
        SlowError::Numeric => refuse(),
        SlowError::TooLarge => GoHashError::Unsupported {
            path: path.to_owned(),
            what: "a quantity beyond 128 bits",
        },
    })
}

fn quantity(value: i64, scale: i64, dec: GoValue, s: &str, format: Format) -> GoValue {
    GoValue::Struct(vec![
        GoValue::Struct(vec![GoValue::Int(value), GoValue::Int(scale)]),
        GoValue::Struct(vec![dec]),
        GoValue::Str(s.to_owned()),
        GoValue::Str(format.go().to_owned()),
    ])
}

/// `ParseQuantity`'s int64 path; `None` to go on with `inf.Dec`.
fn fast_path(text: &str, p: &Parts<'_>, exponent: i32, format: Format) -> Option<GoValue> {
    let digits = i32::try_from(p.num.len() + p.denom.len()).ok()?;
    let (mut scale, precision, mantissa) = match format {
        Format::BinarySi if exponent >= 0 && p.denom.is_empty() => {
            let precision = 15 - i32::try_from(p.num.len()).ok()? - exponent * 3 / 10 - 1;
            (
                0,
                precision,
                1_i64.checked_shl(u32::try_from(exponent).ok()?)?,
            )
        }
        Format::BinarySi => (0, -1, 1),
        _ => (exponent, MAX_INT64_FACTORS - digits, 1),
    };
    if precision < 0 {
        return None;
    }
    scale -= i32::try_from(p.denom.len()).ok()?;
    if scale < NANO {
        return None;
    }
    let shifted = format!("{}{}", p.num, p.denom);
    let value: i64 = shifted.parse().ok()?;
    let mut result = value.checked_mul(mantissa)?;
    if !p.positive {
        result = -result;
    }
    let canonical = match format {
        Format::BinarySi => exponent % 10 == 0 && value & 7 != 0,
        _ => scale % 3 == 0 && !shifted.ends_with("000") && !shifted.starts_with('0'),
    };
    let s = if canonical { text } else { "" };
    Some(quantity(result, i64::from(scale), GoValue::Nil, s, format))
}

enum SlowError {
    Numeric,
    TooLarge,
}

fn pow10(n: u32) -> Result<u128, SlowError> {
    10_u128.checked_pow(n).ok_or(SlowError::TooLarge)
}

/// `ParseQuantity`'s `inf.Dec` path, in u128 (enough for every quantity up to 2^128).
fn slow_path(
    p: &Parts<'_>,
    base: u32,
    exponent: i32,
    mut format: Format,
) -> Result<GoValue, SlowError> {
    let (negative, digits) = match p.value.as_bytes().first() {
        Some(b'-') => (true, &p.value[1..]),
        Some(b'+') => (false, &p.value[1..]),
        _ => (false, p.value),
    };
    let (int, frac) = digits.split_once('.').unwrap_or((digits, ""));
    if int.is_empty() || (digits.contains('.') && frac.is_empty()) {
        return Err(SlowError::Numeric);
    }
    let mut unscaled: u128 = format!("{int}{frac}")
        .parse()
        .map_err(|_| SlowError::TooLarge)?;
    let mut scale = i64::try_from(frac.len()).map_err(|_| SlowError::TooLarge)?;
    if base == 10 {
        scale -= i64::from(exponent);
    } else {
        let factor = 1_u128
            .checked_shl(exponent as u32)
            .ok_or(SlowError::TooLarge)?;
        unscaled = unscaled.checked_mul(factor).ok_or(SlowError::TooLarge)?;
    }
    if unscaled != 0 {
        // Round(amount, 9, RoundUp): rescale to exactly 9 fractional digits, away from zero.
        if scale <= 9 {
            let up = u32::try_from(9 - scale).map_err(|_| SlowError::TooLarge)?;
            unscaled = unscaled
                .checked_mul(pow10(up)?)
                .ok_or(SlowError::TooLarge)?;
        } else {
            let down = u32::try_from(scale - 9).map_err(|_| SlowError::TooLarge)?;
            unscaled = match pow10(down) {
                Ok(d) => unscaled / d + u128::from(!unscaled.is_multiple_of(d)),
                Err(_) => 1,
            };
        }
        scale = 9;
    }
    if format == Format::BinarySi {
        let max = u128::from(i64::MAX.unsigned_abs());
        let one = pow10(u32::try_from(scale).map_err(|_| SlowError::TooLarge)?)?;
        if unscaled > max.saturating_mul(one) {
            (unscaled, scale) = (max, 0);
        } else if unscaled != 0 && unscaled < one {
            format = Format::DecimalSi;
        }
    }
    let abs = if unscaled == 0 {
        GoValue::Nil
    } else {
        let lo = GoValue::Uint(unscaled as u64);
        let hi = (unscaled >> 64) as u64;
        GoValue::List(if hi == 0 {
            vec![lo]
        } else {
            vec![lo, GoValue::Uint(hi)]
        })
    };
    let int = GoValue::Struct(vec![GoValue::Bool(negative && unscaled != 0), abs]);
    let dec = GoValue::Ptr(Box::new(GoValue::Struct(vec![int, GoValue::Int(scale)])));
    Ok(quantity(0, 0, dec, "", format))
}
