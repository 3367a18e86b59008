//! Template values of `kthena create manifest`: values file, `--set`, `--name`, namespace.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use crate::error::{Error, Result};

/// Parses one `--set` argument, `key1=val1,key2=val2` (pflag's `StringToString`), into
/// string pairs.
///
/// # Errors
/// [`Error::InvalidSet`] for an item without `=`.
pub fn parse_set(arg: &str) -> Result<Vec<(String, String)>> {
    arg.split(',')
        .filter(|item| !item.is_empty())
        .map(|item| {
            item.split_once('=')
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .ok_or_else(|| Error::InvalidSet {
                    item: item.to_owned(),
                })
        })
        .collect()
}

/// Reads a values file: a YAML mapping.
///
/// # Errors
/// [`Error::ValuesRead`], [`Error::ValuesParse`].
pub fn read_values_file(path: &Path) -> Result<BTreeMap<String, Value>> {
    let text = std::fs::read_to_string(path).map_err(|source| Error::ValuesRead {
        path: path.to_owned(),
        source,
    })?;
    if text.trim().is_empty() {
        return Ok(BTreeMap::new());
    }
    serde_saphyr::from_str(&text).map_err(|e| Error::ValuesParse {
        path: path.to_owned(),
        message: e.to_string(),
    })
}

/// Merges the values as Go Kthena does: the file, then each `--set` pair (strings) over
/// it, then `name` from `--name`; `namespace` from `-n` only when neither the file nor
/// `--set` gave one.
pub fn merge_values(
    file: BTreeMap<String, Value>,
    set: Vec<(String, String)>,
    name: Option<&str>,
    namespace: &str,
) -> BTreeMap<String, Value> {
    let mut values = file;
    for (k, v) in set {
        values.insert(k, Value::String(v));
    }
    if let Some(n) = name.filter(|n| !n.is_empty()) {
        values.insert("name".to_owned(), Value::String(n.to_owned()));
    }
    if values.get("namespace").is_none_or(Value::is_null) {
        values.insert("namespace".to_owned(), Value::String(namespace.to_owned()));
    }
    values
}

#[cfg(test)]
mod tests {
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
}
