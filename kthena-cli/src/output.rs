//! `-o yaml|json` output and `kthena describe`'s text.

use jiff::Timestamp;
use serde::Serialize;
use serde_json::{Value, json};

use crate::age::{age, rfc3339};
use crate::error::{Error, Result};
use crate::kind::Kind;

/// The output format of `kthena get` (`-o`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    /// Go's column layout (the default).
    #[default]
    Table,
    /// YAML, keys sorted (as Go's `sigs.k8s.io/yaml`).
    Yaml,
    /// JSON, pretty-printed, keys sorted.
    Json,
}

/// An object as the API server returned it, without `metadata.managedFields` (kubectl's
/// default `--show-managed-fields=false`).
pub fn without_managed_fields(mut object: Value) -> Value {
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("managedFields");
    }
    object
}

/// `items` wrapped the way `kubectl get -o yaml` prints a list: `apiVersion: v1`,
/// `kind: List`.
pub fn list_object(items: Vec<Value>) -> Value {
    let mut list = serde_json::Map::new();
    list.insert("apiVersion".to_owned(), json!("v1"));
    list.insert("items".to_owned(), Value::Array(items));
    list.insert("kind".to_owned(), json!("List"));
    list.insert("metadata".to_owned(), json!({"resourceVersion": ""}));
    Value::Object(list)
}

/// YAML of `value`: block style, two-space indent, list items at their key's indent,
/// multi-line strings as `|` blocks, long strings never folded.
///
/// # Errors
/// [`Error::Serialize`].
pub fn to_yaml<T: Serialize>(value: &T) -> Result<String> {
    let options = serde_saphyr::ser_options! {
        indent_step: 2,
        compact_list_indent: true,
        folded_wrap_chars: usize::MAX / 2,
        min_fold_chars: usize::MAX / 2,
    };
    serde_saphyr::to_string_with_options(value, options).map_err(|e| Error::Serialize {
        message: e.to_string(),
    })
}

/// Pretty JSON of `value` with a final newline.
///
/// # Errors
/// [`Error::Serialize`].
pub fn to_json<T: Serialize>(value: &T) -> Result<String> {
    serde_json::to_string_pretty(value)
        .map(|s| s + "\n")
        .map_err(|e| Error::Serialize {
            message: e.to_string(),
        })
}

/// `value` in `format` (`Table` is not an object format: it gives YAML).
///
/// # Errors
/// [`Error::Serialize`].
pub fn format_object(value: &Value, format: OutputFormat) -> Result<String> {
    match format {
        OutputFormat::Json => to_json(value),
        OutputFormat::Yaml | OutputFormat::Table => to_yaml(value),
    }
}

/// `kthena describe <kind> NAME` as Go Kthena prints it: `<Label>: name`, a line of 16
/// `=`, `Namespace:`, `Created:` (RFC 3339), `Age:`, a blank line, `Resource Details:`, a
/// line of 17 `=`, then the object as YAML.
///
/// # Errors
/// [`Error::Serialize`].
pub fn describe_text(kind: Kind, object: &Value, now: Timestamp) -> Result<String> {
    let meta = &object["metadata"];
    let text = |k: &str| meta[k].as_str().unwrap_or_default().to_owned();
    let created: Option<Timestamp> = meta["creationTimestamp"]
        .as_str()
        .and_then(|s| s.parse().ok());
    let created_text = created.map(rfc3339).unwrap_or_default();
    let age_text = created.map_or_else(|| "0s".to_owned(), |c| age(c, now));
    let yaml = to_yaml(object)?;
    Ok(format!(
        "{}: {}\n================\nNamespace: {}\nCreated: {created_text}\nAge: {age_text}\n\n\
         Resource Details:\n=================\n{yaml}",
        kind.describe_label(),
        text("name"),
        text("namespace"),
    ))
}

#[cfg(test)]
mod tests;
