//! Sums of Kubernetes `resource.Quantity` values (a PodGroup's `minResources`), exact to
//! the nano-unit as Go's `resource.Quantity.Add`, printed in Go's canonical form.

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// A quantity in nano-units (`1` = `1n`, `1_000_000_000` = `1`), and whether it was written
/// with a binary suffix (`Ki`..`Ei`), which Go keeps when printing a sum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Amount {
    nanos: i128,
    binary: bool,
}

const NANO: i128 = 1_000_000_000;

impl Amount {
    /// Parses `"10"`, `"500m"`, `"0.1"`, `"4Gi"`, `"1e3"`; `None` outside the grammar.
    pub(crate) fn parse(q: &Quantity) -> Option<Self> {
        let s = q.0.trim();
        let split = s
            .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
            .unwrap_or(s.len());
        let (num, suffix) = s.split_at(split);
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
        let (pow1024, pow10): (u32, i32) = match suffix {
            "" => (0, 0),
            "n" => (0, -9),
            "u" => (0, -6),
            "m" => (0, -3),
            "k" => (0, 3),
            "M" => (0, 6),
            "G" => (0, 9),
            "T" => (0, 12),
            "P" => (0, 15),
            "E" => (0, 18),
            "Ki" => (1, 0),
            "Mi" => (2, 0),
            "Gi" => (3, 0),
            "Ti" => (4, 0),
            "Pi" => (5, 0),
            "Ei" => (6, 0),
            exp if exp.starts_with(['e', 'E']) => (0, exp[1..].parse().ok()?),
            _ => return None,
        };
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
    pub(crate) fn add(self, other: Self, times: i128, first: bool) -> Self {
        Self {
            nanos: self.nanos + other.nanos * times,
            binary: if first { other.binary } else { self.binary },
        }
    }

    /// Go's canonical text: binary sums as the largest exact `Ki`..`Ei` multiple, others
    /// as the largest exact decimal suffix (`600m`, `2k`, `1500M`).
    pub(crate) fn to_quantity(self) -> Quantity {
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
mod tests {
    use super::*;

    fn q(s: &str) -> Amount {
        Amount::parse(&Quantity(s.to_owned())).unwrap_or_default()
    }

    fn sum(items: &[(&str, i128)]) -> String {
        let mut total = Amount::default();
        for (i, (s, times)) in items.iter().enumerate() {
            total = total.add(q(s), *times, i == 0);
        }
        total.to_quantity().0
    }

    #[test]
    fn sums_print_like_go() {
        assert_eq!(sum(&[("0.1", 4), ("0.1", 2)]), "600m");
        assert_eq!(sum(&[("1", 2), ("500m", 2)]), "3");
        assert_eq!(sum(&[("4Gi", 2)]), "8Gi");
        assert_eq!(sum(&[("512Mi", 3)]), "1536Mi");
        assert_eq!(sum(&[("1k", 1), ("1000", 1)]), "2k");
        assert_eq!(sum(&[("1e3", 1)]), "1k");
        assert_eq!(sum(&[("1.5G", 1)]), "1500M");
        assert_eq!(sum(&[("8", 0)]), "0");
        assert_eq!(Amount::parse(&Quantity("abc".to_owned())), None);
    }
}
