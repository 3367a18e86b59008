use super::*;
use serde_json::json;

#[test]
fn set_pairs_split_on_commas() {
    assert_eq!(
        parse_set("a=1,b=x=y").unwrap(),
        vec![("a".into(), "1".into()), ("b".into(), "x=y".into())]
    );
    assert!(matches!(parse_set("a"), Err(Error::InvalidSet { item }) if item == "a"));
}

#[test]
fn merge_order_is_gos() {
    let file = BTreeMap::from([
        ("name".to_owned(), json!("from-file")),
        ("replicas".to_owned(), json!(2)),
        ("namespace".to_owned(), json!("file-ns")),
    ]);
    let v = merge_values(
        file,
        vec![("replicas".into(), "3".into())],
        Some("cli"),
        "flag-ns",
    );
    assert_eq!(v["name"], json!("cli"));
    assert_eq!(v["replicas"], json!("3"));
    assert_eq!(v["namespace"], json!("file-ns"));
    let v = merge_values(BTreeMap::new(), vec![], None, "flag-ns");
    assert_eq!(v["namespace"], json!("flag-ns"));
    assert!(!v.contains_key("name"));
}

#[test]
fn values_file_is_a_mapping() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("v.yaml");
    std::fs::write(&p, "name: my-model\nreplicas: 2\n").unwrap();
    let v = read_values_file(&p).unwrap();
    assert_eq!(v["name"], json!("my-model"));
    assert_eq!(v["replicas"], json!(2));
    std::fs::write(&p, "- a\n").unwrap();
    assert!(matches!(
        read_values_file(&p),
        Err(Error::ValuesParse { .. })
    ));
    assert!(matches!(
        read_values_file(&dir.path().join("none")),
        Err(Error::ValuesRead { .. })
    ));
}
