use super::*;

#[test]
fn outside_gateway_api_mode_lists_are_null_and_names_unknown() {
    for plural in ["gateways", "httproutes", "inferencepools"] {
        assert_eq!(
            config_dump(None, &[plural]),
            Some((true, json!({ plural: null })))
        );
    }
    assert_eq!(
        config_dump(None, &["namespaces", "ns", "httproutes", "x"]),
        Some((false, json!({"error": "HTTPRoute not found"})))
    );
    assert_eq!(
        config_dump(None, &["namespaces", "ns", "inferencepools", "x"]),
        Some((false, json!({"error": "InferencePool not found"})))
    );
    // Other kinds are the rest of the dump's.
    assert_eq!(config_dump(None, &["modelroutes"]), None);
    assert_eq!(config_dump(None, &["namespaces", "ns", "pods", "x"]), None);
}
