//! Loads every document of Go Kthena's example manifests: counts, validates and round-trips.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};
use kthena_api::{Object, decode_value, load_str};
use serde_json::Value;

fn examples_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/kthena-manifests/examples")
}

fn manifest_files(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        if path.is_dir() {
            manifest_files(&path, out)?;
        } else if matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("yaml" | "yml" | "json")
        ) {
            out.push(path);
        }
    }
    out.sort();
    Ok(())
}

/// The documents of a file as plain JSON values, read independently of the typed loader.
fn raw_documents(text: &str) -> Result<Vec<Value>> {
    let opts = serde_saphyr::options! { legacy_octal_numbers: true };
    let docs: Vec<Value> = serde_saphyr::from_multiple_with_options(text, opts)?;
    Ok(docs.into_iter().filter(|d| !d.is_null()).collect())
}

/// Every leaf of `original` must be present in `after` with the same value. Empty lists,
/// empty maps and nulls carry no data and may be dropped; a number may come back as the
/// equal string (Kubernetes quantities serialize as strings).
fn missing_fields(original: &Value, after: &Value, path: &str, out: &mut Vec<String>) {
    match (original, after) {
        (Value::Object(o), Value::Object(a)) => {
            for (k, v) in o {
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                match a.get(k) {
                    Some(av) => missing_fields(v, av, &p, out),
                    None if is_empty(v) => {}
                    None => out.push(format!("{p}: missing")),
                }
            }
        }
        (Value::Array(o), Value::Array(a)) => {
            if o.len() != a.len() {
                out.push(format!("{path}: {} items became {}", o.len(), a.len()));
                return;
            }
            for (i, (v, av)) in o.iter().zip(a).enumerate() {
                missing_fields(v, av, &format!("{path}[{i}]"), out);
            }
        }
        (Value::Number(n), Value::String(s)) if n.to_string() == *s => {}
        (o, a) if o == a => {}
        (o, Value::Null | Value::Array(_) | Value::Object(_)) if is_empty(o) => {}
        (o, a) => out.push(format!("{path}: {o} became {a}")),
    }
}

fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        _ => false,
    }
}

#[test]
fn every_example_loads_validates_and_round_trips() -> Result<()> {
    let mut files = Vec::new();
    manifest_files(&examples_dir(), &mut files)?;
    assert_eq!(files.len(), 66, "manifest files under examples/");
    let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
    let mut foreign = 0;
    let mut problems = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file)?;
        let name = file.display().to_string();
        let docs = load_str(&name, &text)?;
        let raws = raw_documents(&text)?;
        if raws.len() != docs.len() {
            bail!(
                "{name}: {} documents read raw, {} loaded",
                raws.len(),
                docs.len()
            );
        }
        for (doc, raw) in docs.into_iter().zip(raws) {
            if !doc.unknown_fields.is_empty() {
                problems.push(format!(
                    "{name} document {}: unknown fields {:?}",
                    doc.index, doc.unknown_fields
                ));
            }
            let obj = doc.object;
            if !obj.is_kthena() {
                foreign += 1;
                continue;
            }
            *kinds.entry(obj.kind().to_owned()).or_default() += 1;
            let what = format!(
                "{name} document {} ({} {})",
                doc.index,
                obj.kind(),
                obj.name()
            );
            // parse -> serialize -> parse gives an equal object.
            let json = obj.to_json()?;
            let again = decode_value(&name, json)?;
            if again != obj {
                problems.push(format!(
                    "{what}: changed after a serialize/parse round trip"
                ));
            }
            // Defaulting and validation.
            let defaulted = obj.with_defaults();
            if let Err(errors) = defaulted.validate() {
                for e in errors {
                    problems.push(format!("{what}: invalid: {e}"));
                }
            }
            // No field of the original is lost.
            let mut lost = Vec::new();
            missing_fields(&raw, &defaulted.to_json()?, "", &mut lost);
            problems.extend(lost.into_iter().map(|l| format!("{what}: {l}")));
        }
    }
    assert_eq!(problems, Vec::<String>::new());
    let expected: BTreeMap<String, usize> = [
        ("AutoscalingPolicy", 3),
        ("ModelBooster", 5),
        ("ModelRoute", 12),
        ("ModelServer", 10),
        ("ModelServing", 22),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    assert_eq!(kinds, expected);
    assert_eq!(kinds.values().sum::<usize>(), 52, "documents of our kinds");
    assert_eq!(foreign, 28, "documents of other kinds");
    Ok(())
}

#[test]
fn defaults_are_applied_to_example_route() -> Result<()> {
    let path = examples_dir().join("kthena-router/ModelRouteSimple.yaml");
    let docs = kthena_api::load_file(&path)?;
    let Object::ModelRoute(route) = docs[0].object.clone().with_defaults() else {
        bail!("expected a ModelRoute");
    };
    assert_eq!(route.spec.model_name, "deepseek-simple");
    assert_eq!(
        route.spec.rules[0].target_models[0]
            .model_server_name
            .as_deref(),
        Some("deepseek-r1-1-5b")
    );
    assert!(
        route
            .spec
            .rules
            .iter()
            .flat_map(|r| &r.target_models)
            .all(|t| t.weight == Some(100))
    );
    Ok(())
}
