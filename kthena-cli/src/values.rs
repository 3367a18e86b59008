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
mod tests;
