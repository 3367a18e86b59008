use super::*;

#[test]
fn names_follow_go() {
    let g = group_name("sample", 0);
    assert_eq!(g, "sample-0");
    let r = role_id("prefill", 1);
    assert_eq!(r, "prefill-1");
    assert_eq!(pod_name(&g, &r, 3), "sample-0-prefill-1-3");
}

#[test]
fn ordinals_parse_like_go_regex() {
    assert_eq!(split_ordinal("vllm-sample-12"), Some(("vllm-sample", 12)));
    assert_eq!(split_ordinal("decode-0"), Some(("decode", 0)));
    assert_eq!(split_ordinal("sample"), None);
    assert_eq!(split_ordinal("sample-"), None);
    assert_eq!(split_ordinal("sample-1a"), None);
    assert_eq!(split_ordinal("sample-99999999999"), None);
}

#[test]
fn label_selector_is_gos() {
    assert_eq!(
        scale_label_selector("sample", "prefill"),
        "modelserving.volcano.sh/entry=true,modelserving.volcano.sh/name=sample,\
         modelserving.volcano.sh/role=prefill,modelserving.volcano.sh/role-id=prefill-0"
    );
}
