use super::unique_name;

#[test]
fn names_are_dns_labels() {
    let pid = std::process::id();
    let a = unique_name("Apply_Examples");
    assert!(a.starts_with("apply-examples-"), "{a}");
    assert!(a.contains(&format!("-{pid}-")), "{a}");
    assert_ne!(a, unique_name("Apply_Examples"));
    let long = unique_name(&"x".repeat(100));
    assert!(long.len() <= 63, "{long}");
    assert!(unique_name("_").starts_with("t-"));
}
