use super::*;

fn q(s: &str) -> QuantityAmount {
    QuantityAmount::parse(&Quantity(s.to_owned())).unwrap_or_default()
}

fn sum(items: &[(&str, i128)]) -> String {
    let mut total = QuantityAmount::default();
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
    assert_eq!(QuantityAmount::parse(&Quantity("abc".to_owned())), None);
}

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
