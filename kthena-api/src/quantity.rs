//! Kubernetes `resource.Quantity` values as numbers.

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// The quantity grammar of `k8s.io/apimachinery/pkg/api/resource` (the CRD `pattern` of
/// every Quantity field).
const QUANTITY_PATTERN: &str = r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$";

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
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(s.len());
    let (num, suffix) = s.split_at(split);
    let base: f64 = num.parse().map_err(|_| format!("invalid quantity {s:?}"))?;
    let mult = match suffix {
        "" => 1.0,
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024.0,
        "Mi" => 1024.0 * 1024.0,
        "Gi" => 1024.0 * 1024.0 * 1024.0,
        "Ti" => 1024.0_f64.powi(4),
        "Pi" => 1024.0_f64.powi(5),
        "Ei" => 1024.0_f64.powi(6),
        exp => {
            let e: i32 = exp[1..]
                .parse()
                .map_err(|_| format!("invalid quantity {s:?}"))?;
            10f64.powi(e)
        }
    };
    Ok(base * mult)
}

/// The value of a Kubernetes quantity (`"10"`, `"500m"`, `"1.5"`, `"2Ki"`, `"1e3"`) as `f64`;
/// `None` when the text does not follow the quantity grammar.
pub fn quantity_to_f64(q: &Quantity) -> Option<f64> {
    to_f64(q).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_suffixes() {
        let q = |s: &str| to_f64(&Quantity(s.to_owned()));
        assert_eq!(q("10"), Ok(10.0));
        assert_eq!(q("500m"), Ok(0.5));
        assert_eq!(q("1.5"), Ok(1.5));
        assert_eq!(q("2Ki"), Ok(2048.0));
        assert_eq!(q("1e3"), Ok(1000.0));
        assert_eq!(q("-2k"), Ok(-2000.0));
        assert!(q("abc").is_err());
        assert!(q("").is_err());
    }
}
