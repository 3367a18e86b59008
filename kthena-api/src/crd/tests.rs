use super::*;

/// Every integer format is one the API server knows (`kubectl apply` warned
/// `unrecognized format "uint32"` on route weights), and no description keeps rustdoc
/// link brackets.
#[test]
fn schemas_use_kubernetes_formats_and_plain_descriptions() {
    let all = crds()
        .into_iter()
        .chain(crate::thirdparty::thirdparty_crds())
        .map(|c| serde_json::to_string(&c).expect("CRD serializes"));
    let mut formats = std::collections::BTreeSet::new();
    for text in all {
        assert!(!text.contains("[`"), "rustdoc link left in a description");
        for part in text.split("\"format\":\"").skip(1) {
            formats.insert(part.split('"').next().unwrap_or_default().to_owned());
        }
    }
    let formats: Vec<&str> = formats.iter().map(String::as_str).collect();
    assert_eq!(formats, ["date-time", "int32", "int64", "uri"]);
}
