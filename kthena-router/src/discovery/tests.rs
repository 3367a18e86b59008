//! Tests of `discovery`: manifests and endpoints into a routing snapshot.

use super::*;

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn server(yaml_spec: &str) -> ModelServer {
    let text = format!(
        "apiVersion: networking.serving.volcano.sh/v1alpha1\nkind: ModelServer\nmetadata: {{name: s, namespace: ns}}\nspec:\n  inferenceEngine: vLLM\n{yaml_spec}"
    );
    serde_saphyr::from_str(&text).unwrap()
}

fn endpoint(name: &str, l: &[(&str, &str)]) -> EndpointConfig {
    EndpointConfig {
        name: name.to_owned(),
        address: "127.0.0.1:1".to_owned(),
        namespace: "ns".to_owned(),
        labels: labels(l),
        kv_events: None,
        kv_events_replay: None,
        incarnation: None,
        container_started: None,
    }
}

#[test]
fn pd_roles_follow_go_kthena() {
    let pd = kthena_api::networking::PdGroup {
        group_key: "group".into(),
        prefill_labels: labels(&[("role", "prefill")]),
        decode_labels: labels(&[("role", "decode")]),
    };
    let role = |l: &[(&str, &str)]| pd_role(&pd, &labels(l));
    assert_eq!(
        role(&[("group", "g"), ("role", "decode")]),
        Some(PdRole::Decode)
    );
    assert_eq!(
        role(&[("group", "g"), ("role", "prefill")]),
        Some(PdRole::Prefill)
    );
    assert_eq!(role(&[("role", "decode")]), None, "no group label");
    assert_eq!(role(&[("group", "g")]), None);
    let mut both = pd.clone();
    both.prefill_labels = labels(&[("role", "decode")]);
    assert_eq!(
        pd_role(&both, &labels(&[("group", "g"), ("role", "decode")])),
        Some(PdRole::Decode),
        "decode is checked first"
    );
    let mut empty = pd;
    empty.decode_labels.clear();
    assert_eq!(
        pd_role(&empty, &labels(&[("group", "g"), ("role", "decode")])),
        None,
        "an empty label map never matches"
    );
}

/// Regression: an endpoint whose labels change (same name and address) is selected by
/// its new labels, and keeps its state.
#[test]
fn relabelled_endpoint_is_reselected_and_keeps_its_state() {
    let cfg = Config::default();
    let mut loader = Loader::new();
    let ms = server("  workloadSelector: {matchLabels: {app: a}}\n  workloadPort: {port: 1}\n");
    let first = loader
        .load_cluster(
            &cfg,
            vec![],
            vec![ms.clone()],
            vec![endpoint("e", &[("app", "a")])],
        )
        .unwrap();
    assert_eq!(first.servers["ns/s"].endpoints.len(), 1);
    let second = loader
        .load_cluster(&cfg, vec![], vec![ms], vec![endpoint("e", &[("app", "b")])])
        .unwrap();
    assert!(second.servers["ns/s"].endpoints.is_empty());
    assert!(Arc::ptr_eq(&first.endpoints[0], &second.endpoints[0]));
}

#[test]
fn pd_group_servers_list_prefill_and_decode_endpoints() {
    let cfg = Config::default();
    let ms = server(
        "  workloadSelector:\n    matchLabels: {app: a}\n    pdGroup: {groupKey: group, prefillLabels: {role: p}, decodeLabels: {role: d}}\n  workloadPort: {port: 1}\n",
    );
    let snap = Loader::new()
        .load_cluster(
            &cfg,
            vec![],
            vec![ms],
            vec![
                endpoint("d", &[("app", "a"), ("group", "g"), ("role", "d")]),
                endpoint("p", &[("app", "a"), ("group", "g"), ("role", "p")]),
                endpoint("x", &[("app", "a")]),
            ],
        )
        .unwrap();
    let s = &snap.servers["ns/s"];
    let names = |v: &[Arc<Endpoint>]| v.iter().map(|e| e.name.clone()).collect::<Vec<_>>();
    assert_eq!(names(&s.endpoints), ["d", "p", "x"]);
    assert_eq!(names(&s.decode_endpoints), ["d"]);
    assert_eq!(names(&s.prefill_endpoints), ["p"]);
}

/// Regression: a missing manifest path was reported as `cannot read ./nothere/: ...`, without
/// the config file or the field.
#[test]
fn a_missing_manifest_path_names_the_config_and_the_field() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("here")).unwrap();
    let path = dir.path().join("c.yaml");
    let yaml = "standalone:\n  manifests: [here, nothere/]\n  endpoints: []\n";
    let cfg = Config::from_yaml(&path, yaml)
        .unwrap()
        .validate(&path)
        .unwrap();
    let e = Loader::new().load(&cfg, Some(&path)).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "invalid config {}: standalone.manifests[1]: cannot read {}: No such file or directory (os error 2)",
            path.display(),
            dir.path().join("nothere/").display()
        )
    );
}
