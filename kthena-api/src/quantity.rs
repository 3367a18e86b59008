//! Kubernetes `resource.Quantity` values: as numbers ([`quantity_to_f64`]) and as exact sums
//! printed in Go's canonical form ([`QuantityAmount`], for a PodGroup's `minResources`). One
//! grammar for both: a number, then a suffix (`m`, `k`, `Gi`, ...) or a decimal exponent.

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// The quantity grammar of `k8s.io/apimachinery/pkg/api/resource` (the CRD `pattern` of
/// every Quantity field).
const QUANTITY_PATTERN: &str = r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$";

/// Each suffix with its power of 1024, its power of 10 and its factor.
const SUFFIXES: [(&str, u32, i32, f64); 16] = [
    ("", 0, 0, 1.0),
    ("n", 0, -9, 1e-9),
    ("u", 0, -6, 1e-6),
    ("m", 0, -3, 1e-3),
    ("k", 0, 3, 1e3),
    ("M", 0, 6, 1e6),
    ("G", 0, 9, 1e9),
    ("T", 0, 12, 1e12),
    ("P", 0, 15, 1e15),
    ("E", 0, 18, 1e18),
    ("Ki", 1, 0, 1024.0),
    ("Mi", 2, 0, 1024.0 * 1024.0),
    ("Gi", 3, 0, 1024.0 * 1024.0 * 1024.0),
    ("Ti", 4, 0, 1_099_511_627_776.0),
    ("Pi", 5, 0, 1_125_899_906_842_624.0),
    ("Ei", 6, 0, 1_152_921_504_606_846_976.0),
];

/// A quantity's text split into its number (sign included) and its scale: the powers of
/// 1024 and of 10 and the factor of its suffix (a decimal exponent `e<n>` is `(0, n, 10^n)`).
/// `None` for a suffix outside the grammar or an exponent that is not an integer.
fn split(s: &str) -> Option<(&str, u32, i32, f64)> {
    let at = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(s.len());
    let (num, suffix) = s.split_at(at);
    if let Some(&(_, p1024, p10, factor)) = SUFFIXES.iter().find(|(x, ..)| *x == suffix) {
        return Some((num, p1024, p10, factor));
    }
    let exp: i32 = suffix.strip_prefix(['e', 'E'])?.parse().ok()?;
    Some((num, 0, exp, 10f64.powi(exp)))
}

/// Converts a quantity (`"10"`, `"500m"`, `"1.5"`, `"2Ki"`, `"1e3"`) to `f64`.
///
/// # Errors
/// A message when the text does not follow the Kubernetes quantity grammar.
pub(crate) fn to_f64(q: &Quantity) -> Result<f64, String> {
    let s = q.0.trim();
    if !crate::common::matches_pattern(s, QUANTITY_PATTERN) {
        return Err(format!(
            "quantities must match the regular expression '{QUANTITY_PATTERN}'"
        ));
    }
    let (num, _, _, factor) = split(s).ok_or_else(|| format!("invalid quantity {s:?}"))?;
    let base: f64 = num.parse().map_err(|_| format!("invalid quantity {s:?}"))?;
    Ok(base * factor)
}

/// The value of a Kubernetes quantity (`"10"`, `"500m"`, `"1.5"`, `"2Ki"`, `"1e3"`) as `f64`;
/// `None` when the text does not follow the quantity grammar.
pub fn quantity_to_f64(q: &Quantity) -> Option<f64> {
    to_f64(q).ok()
}

/// A quantity in nano-units (`1` = `1n`, `1_000_000_000` = `1`), and whether it was written
/// with a binary suffix (`Ki`..`Ei`), which Go keeps when printing a sum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QuantityAmount {
    nanos: i128,
    binary: bool,
}

const NANO: i128 = 1_000_000_000;

impl QuantityAmount {
    /// Parses `"10"`, `"500m"`, `"0.1"`, `"4Gi"`, `"1e3"`; `None` outside the grammar.
    #[must_use]
    pub fn parse(q: &Quantity) -> Option<Self> {
        let s = q.0.trim();
        let (num, pow1024, pow10, _) = split(s)?;
        let (negative, num) = match num.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, num.strip_prefix('+').unwrap_or(num)),
        };
        let (int, frac) = num.split_once('.').unwrap_or((num, ""));
        if (int.is_empty() && frac.is_empty()) || frac.len() > 9 {
            return None;
        }
        let digits = |d: &str| -> Option<i128> {
            if d.is_empty() {
                Some(0)
            } else {
                d.parse().ok()
            }
        };
        let frac_nanos = digits(frac)? * 10i128.pow(9 - u32::try_from(frac.len()).ok()?);
        let mantissa = digits(int)?.checked_mul(NANO)? + frac_nanos;
        let mut nanos = mantissa.checked_mul(1024i128.checked_pow(pow1024)?)?;
        nanos = if pow10 >= 0 {
            nanos.checked_mul(10i128.checked_pow(pow10.unsigned_abs())?)?
        } else {
            nanos / 10i128.checked_pow(pow10.unsigned_abs())?
        };
        Some(Self {
            nanos: if negative { -nanos } else { nanos },
            binary: pow1024 > 0,
        })
    }

    /// `self + other × times`; the format is the first operand's, as Go's `Add`.
    #[must_use]
    pub fn add(self, other: Self, times: i128, first: bool) -> Self {
        Self {
            nanos: self.nanos + other.nanos * times,
            binary: if first { other.binary } else { self.binary },
        }
    }

    /// Go's canonical text: binary sums as the largest exact `Ki`..`Ei` multiple, others
    /// as the largest exact decimal suffix (`600m`, `2k`, `1500M`).
    #[must_use]
    pub fn to_quantity(self) -> Quantity {
        let n = self.nanos;
        if n == 0 {
            return Quantity("0".to_owned());
        }
        if self.binary && n % NANO == 0 {
            let units = n / NANO;
            let suffixes = ["Ei", "Pi", "Ti", "Gi", "Mi", "Ki"];
            for (i, suffix) in suffixes.iter().enumerate() {
                let base = 1024i128.pow(6 - u32::try_from(i).unwrap_or(6));
                if units % base == 0 {
                    return Quantity(format!("{}{suffix}", units / base));
                }
            }
            return Quantity(units.to_string());
        }
        let suffixes = [
            (18, "E"),
            (15, "P"),
            (12, "T"),
            (9, "G"),
            (6, "M"),
            (3, "k"),
            (0, ""),
            (-3, "m"),
            (-6, "u"),
        ];
        for (exp, suffix) in suffixes {
            let base = 10i128.pow(u32::try_from(exp + 9).unwrap_or(0));
            if n % base == 0 {
                return Quantity(format!("{}{suffix}", n / base));
            }
        }
        Quantity(format!("{n}n"))
    }
}

#[cfg(test)]
mod tests;
