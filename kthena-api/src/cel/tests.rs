use super::*;

/// Every rule lands on a node of the generated schema (none is skipped for a path
/// that drifted from the types), and the rules of each node keep Go's order.
#[test]
fn every_rule_lands_on_its_schema_node() {
    let crds: Vec<Value> = crate::crds()
        .into_iter()
        .map(|c| serde_json::to_value(c).expect("CRD serializes"))
        .collect();
    for r in RULES {
        let crd = crds
            .iter()
            .find(|c| c["spec"]["names"]["plural"] == r.plural)
            .expect("a CRD of the rule's plural");
        let node = crd
            .pointer(&format!(
                "/spec/versions/0/schema/openAPIV3Schema{}",
                r.path
            ))
            .unwrap_or_else(|| panic!("{}: no schema node {}", r.plural, r.path));
        let list = node["x-kubernetes-validations"]
            .as_array()
            .expect("rules on the node");
        assert!(
            list.iter()
                .any(|v| v["rule"] == r.rule && v["message"] == r.message),
            "{}{}: {} missing",
            r.plural,
            r.path,
            r.message
        );
    }
    let on_sources = &crds
        .iter()
        .find(|c| c["spec"]["names"]["plural"] == "autoscalingpolicies")
        .expect("AutoscalingPolicy CRD")
        .pointer(&format!(
            "/spec/versions/0/schema/openAPIV3Schema{METRIC_SOURCES_HOMOGENEOUS}"
        ))
        .expect("metricSources node")["x-kubernetes-validations"];
    assert_eq!(on_sources[0]["message"], ONE_SOURCE_MESSAGE);
    assert_eq!(on_sources[1]["message"], EXCLUSIVE_SOURCES_MESSAGE);
}
