//! Prefill/decode ratio enforcement (Go `pkg/autoscaler/algorithm/disaggregated_ratio.go`
//! `EnforceRoleRatio`), in exact rational arithmetic.

use std::cmp::Ordering;
use std::fmt;

use crate::{Error, Result};

/// A non-negative exact rational `num / den` (`den > 0`), for ratio bounds written as
/// Kubernetes quantities (`"0.7"`, `"1.5"`, `"2"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ratio {
    num: u64,
    den: u64,
}

impl Ratio {
    /// `num / den`.
    ///
    /// # Errors
    /// [`Error::InvalidRatio`] when `den` is zero.
    pub fn new(num: u64, den: u64) -> Result<Self> {
        if den == 0 {
            return Err(Error::InvalidRatio(format!("{num}/0")));
        }
        Ok(Self { num, den })
    }

    /// The decimal value of a finite, non-negative `f64`, read from its shortest round-trip
    /// decimal form (so `0.7` is exactly 7/10, not the binary float just below it). At most 18
    /// fractional digits are kept.
    ///
    /// # Errors
    /// [`Error::InvalidRatio`] for negative, NaN, infinite or too-large (≥ 1.8e19) values.
    pub fn from_f64(v: f64) -> Result<Self> {
        if !(0.0..1.8e19).contains(&v) {
            return Err(Error::InvalidRatio(v.to_string()));
        }
        let text = format!("{v}");
        let (int, frac) = text.split_once('.').unwrap_or((&text, ""));
        let frac = &frac[..frac.len().min(18)];
        let den = 10u64.pow(frac.len() as u32);
        let parse = |s: &str| {
            if s.is_empty() {
                Ok(0)
            } else {
                s.parse::<u64>()
                    .map_err(|_| Error::InvalidRatio(text.clone()))
            }
        };
        let int = parse(int)?;
        let frac_value = parse(frac)?;
        let num = u128::from(int) * u128::from(den) + u128::from(frac_value);
        let num = u64::try_from(num).map_err(|_| Error::InvalidRatio(text.clone()))?;
        Self::new(num, den)
    }

    /// The value as `f64` (for display).
    pub fn to_f64(self) -> f64 {
        self.num as f64 / self.den as f64
    }

    fn is_zero(self) -> bool {
        self.num == 0
    }

    /// The ordering of `a / b` (`b > 0`) relative to this ratio (`Less`: `a / b` is smaller).
    fn cmp_frac(self, a: i32, b: i32) -> Ordering {
        (i128::from(a) * i128::from(self.den)).cmp(&(i128::from(self.num) * i128::from(b)))
    }

    /// `ceil(self × n)`, saturated to i32.
    fn ceil_mul(self, n: i32) -> i32 {
        let p = i128::from(self.num) * i128::from(n);
        sat(div_ceil(p, i128::from(self.den)))
    }

    /// `floor(self × n)`, saturated to i32.
    fn floor_mul(self, n: i32) -> i32 {
        let p = i128::from(self.num) * i128::from(n);
        sat(p.div_euclid(i128::from(self.den)))
    }

    /// `ceil(n / self)` for a non-zero ratio, saturated to i32.
    fn ceil_div(self, n: i32) -> i32 {
        let p = i128::from(n) * i128::from(self.den);
        sat(div_ceil(p, i128::from(self.num)))
    }

    /// `floor(n / self)` for a non-zero ratio, saturated to i32.
    fn floor_div(self, n: i32) -> i32 {
        let p = i128::from(n) * i128::from(self.den);
        sat(p.div_euclid(i128::from(self.num)))
    }
}

impl fmt::Display for Ratio {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.to_f64())
    }
}

fn div_ceil(a: i128, b: i128) -> i128 {
    let q = a.div_euclid(b);
    if a.rem_euclid(b) == 0 { q } else { q + 1 }
}

fn sat(v: i128) -> i32 {
    v.clamp(i128::from(i32::MIN), i128::from(i32::MAX)) as i32
}

/// Inclusive replica bounds of a role.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bounds {
    /// Lower bound.
    pub min: i32,
    /// Upper bound.
    pub max: i32,
}

impl Bounds {
    fn clamp(self, v: i32) -> i32 {
        crate::clamp(v, self.min, self.max)
    }

    /// `v` within the bounds (Go's `min(max(v, lo), hi)`: `max` wins when `min > max`).
    pub fn clamp_value(self, v: i32) -> i32 {
        self.clamp(v)
    }
}

/// `minRatio ≤ replicas[numerator] / replicas[denominator] ≤ maxRatio` (whenever the
/// denominator is not zero).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RatioBounds {
    /// Lower bound (≥ 0).
    pub min: Ratio,
    /// Upper bound (> 0, ≥ `min`).
    pub max: Ratio,
}

/// The result of [`enforce_role_ratio`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Enforced {
    /// Final numerator replicas.
    pub numerator: i32,
    /// Final denominator replicas.
    pub denominator: i32,
    /// Whether the ratio (or a zero side) changed the bounded inputs.
    pub adjusted: bool,
    /// Whether the final pair satisfies the constraint (or both sides are zero). `false` only
    /// for unreachable constraints (which the validating webhook rejects).
    pub satisfied: bool,
    /// `numerator / denominator` as Go's `FormatFloat(v, 'f', -1, 64)` prints it (shortest
    /// decimal, no exponent); `None` when the denominator is zero.
    pub current_ratio: Option<String>,
}

fn within(c: &RatioBounds, n: i32, d: i32) -> bool {
    if d == 0 {
        return n == 0;
    }
    c.min.cmp_frac(n, d) != Ordering::Less && c.max.cmp_frac(n, d) != Ordering::Greater
}

/// Brings a (numerator, denominator) pair into its bounds and the ratio constraint, biased
/// towards scaling up (Go `EnforceRoleRatio` at v1.0.0):
///
/// 1. clamp both to their bounds; both zero ⇒ kept (coupled scale-to-zero);
/// 2. a zero side is seeded to `clamp(1)` (adjusted);
/// 3. `n/d < minRatio`: `raised = ceil(minRatio × d)`; if `raised ≤ maxN`, `n = max(raised,
///    minN)`; else, if `minRatio > 0`, `n = maxN` and `d = clamp(floor(n / minRatio))`;
/// 4. `n/d > maxRatio`: `raised = ceil(n / maxRatio)`; if `raised ≤ maxD`, `d = max(raised,
///    minD)`; else `d = maxD` and `n = clamp(floor(maxRatio × d))`;
/// 5. clamp both again.
///
/// FIX (documented): Go computes steps 3–4 in `f64`, so `0.7 × 10` ceils to 8; here every
/// product and quotient is exact. And when one repair pass still leaves the pair outside the
/// constraint (bounds forcing a side, or no integer between `minRatio × d` and
/// `maxRatio × d`), the feasible pair closest to it is searched the way Go's later releases
/// do: denominators from the repaired one upwards, then downwards, each with the numerator
/// nearest to the repaired one. If there is no feasible pair at all, the repaired pair is
/// returned with `satisfied = false`.
pub fn enforce_role_ratio(
    numerator: i32,
    denominator: i32,
    nb: Bounds,
    db: Bounds,
    c: &RatioBounds,
) -> Enforced {
    let mut n = nb.clamp(numerator);
    let mut d = db.clamp(denominator);
    let mut adjusted = false;
    if n != 0 || d != 0 {
        if n == 0 {
            n = nb.clamp(1);
            adjusted = true;
        }
        if d == 0 {
            d = db.clamp(1);
            adjusted = true;
        }
        if d > 0 {
            (n, d, adjusted) = repair(n, d, nb, db, c, adjusted);
        }
        n = nb.clamp(n);
        d = db.clamp(d);
        if !within(c, n, d)
            && let Some((sn, sd)) = search(n, d, nb, db, c)
        {
            (n, d, adjusted) = (sn, sd, true);
        }
    }
    Enforced {
        numerator: n,
        denominator: d,
        adjusted,
        satisfied: (n == 0 && d == 0) || within(c, n, d),
        current_ratio: (d != 0).then(|| format_go_float(f64::from(n) / f64::from(d))),
    }
}

fn repair(
    mut n: i32,
    mut d: i32,
    nb: Bounds,
    db: Bounds,
    c: &RatioBounds,
    mut adjusted: bool,
) -> (i32, i32, bool) {
    if c.min.cmp_frac(n, d) == Ordering::Less {
        let raised = c.min.ceil_mul(d);
        if raised <= nb.max {
            n = raised.max(nb.min);
        } else if !c.min.is_zero() {
            n = nb.max;
            d = db.clamp(c.min.floor_div(n));
        }
        adjusted = true;
    } else if c.max.cmp_frac(n, d) == Ordering::Greater {
        if c.max.is_zero() {
            n = 0;
        } else {
            let raised = c.max.ceil_div(n);
            if raised <= db.max {
                d = raised.max(db.min);
            } else {
                d = db.max;
                n = nb.clamp(c.max.floor_mul(d));
            }
        }
        adjusted = true;
    }
    (n, d, adjusted)
}

/// The feasible pair nearest to `(n, d)`: denominators from `d` up to the largest feasible one,
/// then below `d`; for each, the numerator range `[max(minN, ceil(minRatio·d')),
/// min(maxN, floor(maxRatio·d'))]`, taking the value closest to `n`.
fn search(n: i32, d: i32, nb: Bounds, db: Bounds, c: &RatioBounds) -> Option<(i32, i32)> {
    if c.max.is_zero() {
        return None;
    }
    let lo = 1.max(db.min).max(c.max.ceil_div(nb.min));
    let mut hi = db.max;
    if !c.min.is_zero() {
        hi = hi.min(c.min.floor_div(nb.max));
    }
    if lo > hi {
        return None;
    }
    let candidate = |cd: i32| {
        let min_n = nb.min.max(c.min.ceil_mul(cd));
        let max_n = nb.max.min(c.max.floor_mul(cd));
        (min_n <= max_n).then(|| (n.clamp(min_n, max_n), cd))
    };
    let start = d.clamp(lo, hi);
    (start..=hi)
        .find_map(candidate)
        .or_else(|| (lo..start).rev().find_map(candidate))
}

/// Go's `strconv.FormatFloat(v, 'f', -1, 64)`: the shortest decimal that round-trips, without
/// an exponent (`1.5`, `2`, `0.3333333333333333`).
pub fn format_go_float(v: f64) -> String {
    // Rust's `Display` for f64 is the shortest round-trip form and never uses an exponent.
    format!("{v}")
}

#[cfg(test)]
mod tests;
