use super::*;
use crate::testutil::sample;

#[test]
fn fnv1_matches_go_hash_fnv_new32() {
    // Go: fnv.New32() of "" is the offset basis; of "a" is 0x050c5d7e (FNV-1, not 1a).
    assert_eq!(fnv1_32(b""), 0x811c_9dc5);
    assert_eq!(fnv1_32(b"a"), 0x050c_5d7e);
    assert_eq!(fnv1_32(b"foobar"), 0x31f0_b262);
}

#[test]
fn safe_encode_matches_go() {
    // '0' is byte 48, 48 % 27 = 21 -> '4'; '9' is 57 % 27 = 3 -> 'f'.
    assert_eq!(safe_encode("09"), "4f");
    assert_eq!(safe_encode("123"), "567");
}

#[test]
fn scaling_is_not_a_new_revision() -> crate::testutil::TestResult {
    let ms = sample()?;
    let rev = model_serving_revision(&ms)?;
    assert!(rev.bytes().all(|b| SAFE_ALPHABET.contains(&b)), "{rev}");
    let mut scaled = ms.clone();
    scaled.spec.replicas = Some(5);
    scaled.spec.template.roles[0].replicas = Some(3);
    assert_eq!(model_serving_revision(&scaled)?, rev);
    let mut changed = ms.clone();
    changed.spec.template.roles[0].worker_replicas = 1;
    assert_ne!(model_serving_revision(&changed)?, rev);
    let r0 = role_template_hash(&ms.spec.template.roles[0])?;
    assert_eq!(role_template_hash(&scaled.spec.template.roles[0])?, r0);
    Ok(())
}

/// Loads a ModelServing of `testdata/`.
fn testdata(name: &str, text: &str) -> crate::testutil::TestResult<ModelServing> {
    crate::testutil::load(name, text)
}

#[test]
fn revisions_are_go_kthenas() -> crate::testutil::TestResult {
    // Printed by Go Kthena v1.0.0 utils.ModelServingRevision and utils.CalRoleTemplateHash
    // for each object, decoded from its YAML by sigs.k8s.io/yaml and
    // sigs.k8s.io/json.UnmarshalCaseSensitivePreserveInts as the informer decodes it. The
    // first four are Go Kthena's examples/model-serving/*.yaml at v1.0.0.
    let cases: [(&str, &str, &str, &[&str]); 6] = [
        (
            "sample",
            include_str!("testdata/sample.yaml"),
            "99467bbf4",
            &["c74686595", "6b784b4f65"],
        ),
        (
            "multi-node",
            include_str!("testdata/multi-node.yaml"),
            "77b64497cd",
            &["577b6c99bd"],
        ),
        (
            "prefill-decode-disaggregation",
            include_str!("testdata/prefill-decode-disaggregation.yaml"),
            "5fc94bdbd9",
            &["775985dbbc", "5574d4b7d6"],
        ),
        (
            "gpu-kvcache-aware",
            include_str!("testdata/gpu-kvcache-aware.yaml"),
            "84547cdf7",
            &["b6446c7ff"],
        ),
        (
            "edge-cases",
            include_str!("testdata/edge-cases.yaml"),
            "dbddb4ccd",
            &["7b7b95cb", "66bb895fcd"],
        ),
        (
            "takeover",
            include_str!("testdata/takeover.yaml"),
            "59fd9d9fb8",
            &["56f4b456c7", "85f9f7c947"],
        ),
    ];
    for (name, text, revision, roles) in cases {
        let ms = testdata(name, text)?;
        assert_eq!(model_serving_revision(&ms)?, revision, "{name}");
        let hashes = ms
            .spec
            .template
            .roles
            .iter()
            .map(role_template_hash)
            .collect::<Result<Vec<_>>>()?;
        assert_eq!(hashes, roles, "{name}");
    }
    Ok(())
}

#[test]
fn dump_of_edge_cases_is_gos_text() -> crate::testutil::TestResult {
    // Printed by Go: dump.ForHash of the roles utils.ModelServingRevision hashes (replicas
    // and maxUnavailable cleared) for testdata/edge-cases.yaml.
    let ms = testdata("edge-cases", include_str!("testdata/edge-cases.yaml"))?;
    let roles = ms
        .spec
        .template
        .roles
        .iter()
        .map(hashed_role)
        .collect::<Result<Vec<_>>>()?;
    let dump = gohash::dump_for_hash(ROLES_TYPE, &serde_json::Value::Array(roles))?;
    assert_eq!(dump, include_str!("testdata/edge-cases.dump.txt"));
    Ok(())
}

#[test]
fn go_test_roles_revision() -> crate::testutil::TestResult {
    // Printed by Go Kthena v1.0.0: utils.ModelServingRevision of a ModelServing with role1
    // and role2 of revision_util_test.go, and utils.CalRoleTemplateHash of each.
    let nginx =
        serde_json::json!({"spec": {"containers": [{"name": "nginx", "image": "nginx:1.14.2"}]}});
    let roles: Vec<Role> = serde_json::from_value(serde_json::json!([
        {"name": "prefill", "replicas": 1, "entryTemplate": nginx, "workerReplicas": 0},
        {"name": "decode", "replicas": 1, "entryTemplate": nginx, "workerReplicas": 2,
            "workerTemplate": nginx},
    ]))?;
    let mut ms = sample()?;
    ms.spec.template.roles = roles;
    assert_eq!(model_serving_revision(&ms)?, "5957bf9549");
    assert_eq!(
        role_template_hash(&ms.spec.template.roles[0])?,
        "5bbd8946b6"
    );
    assert_eq!(role_template_hash(&ms.spec.template.roles[1])?, "574c875");
    Ok(())
}

#[test]
fn controller_revision_shape() -> crate::testutil::TestResult {
    let ms = sample()?;
    let cr = controller_revision(&ms, "abc")?;
    assert_eq!(recorded_roles(&cr).as_ref(), Some(&ms.spec.template.roles));
    assert_eq!(cr.metadata.name.as_deref(), Some("sample-abc"));
    let labels = cr.metadata.labels.unwrap_or_default();
    assert_eq!(labels[NAME_LABEL], "sample");
    assert_eq!(labels[REVISION_LABEL], "abc");
    assert_eq!(cr.revision, Some(1));
    let data = cr.data.0;
    assert_eq!(data["data"][0]["name"], "prefill");
    assert_eq!(data["data"][1]["name"], "decode");
    let owner = &cr.metadata.owner_references.unwrap_or_default()[0];
    assert_eq!(owner.uid, "uid-1");
    Ok(())
}
