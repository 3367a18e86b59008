use super::*;

#[test]
fn the_budget_is_taken_as_bytes_arrive_and_given_back_on_drop() {
    let gauge = Gauge::default();
    let budget = BodyBudget::new(100, gauge.clone());
    let mut a = budget.reservation();
    let mut b = budget.reservation();
    assert!(budget.grow(&mut a, 60));
    assert!(budget.grow(&mut b, 40));
    assert!(!budget.grow(&mut b, 1));
    assert_eq!(gauge.get(), 100);
    drop(a);
    assert_eq!(gauge.get(), 40);
    assert!(budget.grow(&mut b, 60));
    drop(b);
    assert_eq!((gauge.get(), budget.used.load(Ordering::Acquire)), (0, 0));
}

#[test]
fn the_default_budget_holds_at_least_one_largest_body() {
    assert!(default_body_budget(1 << 40) >= 1 << 40);
    assert!(default_body_budget(1) >= 1);
}
