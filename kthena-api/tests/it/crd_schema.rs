//! Compares the generated CRDs with Go Kthena's CRD YAMLs: every property path their schema
//! accepts must exist in ours with the same type; printer columns and subresources must match.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};
use serde_json::Value;

/// Go Kthena's chart directory: `$KTHENA_GO_CHARTS`, else the `shared/kthena-manifests`
/// checkout beside the repository.
fn charts_dir() -> PathBuf {
    std::env::var_os("KTHENA_GO_CHARTS").map_or_else(
        || {
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../shared/kthena-manifests/charts/kthena/charts")
        },
        PathBuf::from,
    )
}

/// Differences accepted on purpose, by CRD name and property path, each with its reason.
/// See `docs/api.md` ("Schema differences").
const EXCEPTIONS: &[(&str, &str, &str)] = &[
    (
        "*",
        ".apiVersion",
        "the API server accepts apiVersion, kind and metadata on every custom resource; \
         kube-derive leaves them out of the root schema",
    ),
    ("*", ".kind", "as .apiVersion"),
    ("*", ".metadata", "as .apiVersion"),
    (
        "*",
        ".spec!required",
        "kube-derive always marks `spec` required; an object without `spec` has no meaning for \
         any Kthena controller (Go Kthena's webhooks reject the ModelServing and \
         AutoscalingPolicy ones anyway)",
    ),
];

/// Subtrees made of Kubernetes core types (k8s-openapi): their schemas carry no `default`
/// and no `enum`, so only the property paths and base types are compared there. The API
/// server applies the core defaults itself when it creates the Pods, Secrets lookups, etc.
const CORE_TYPE_SUBTREES: &[&str] = &[
    ".spec.template.roles[].entryTemplate.metadata.",
    ".spec.template.roles[].workerTemplate.metadata.",
    ".spec.template.roles[].entryTemplate.spec.",
    ".spec.template.roles[].workerTemplate.spec.",
    ".spec.backend.env[].",
    ".spec.backend.envFrom[].",
    ".spec.auth.secretRef.",
    ".status.conditions[].",
];

/// The type of a schema node: its `type`, or `int-or-string`, or `any` for
/// `x-kubernetes-preserve-unknown-fields` nodes without a type.
fn node_type(s: &Value) -> String {
    let mut t = base_type(s);
    if let Some(e) = s.get("enum") {
        t.push_str(&format!(" enum {e}"));
    }
    if let Some(d) = s.get("default") {
        t.push_str(&format!(" default {d}"));
    }
    t
}

fn base_type(s: &Value) -> String {
    if s.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true)) {
        return "int-or-string".to_owned();
    }
    match s.get("type").and_then(Value::as_str) {
        Some(t) => t.to_owned(),
        None if s.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true)) => {
            "any".to_owned()
        }
        None => "untyped".to_owned(),
    }
}

/// Flattens a schema into `path -> type`; `[]` marks list items, `{}` map values.
fn flatten(s: &Value, path: &str, out: &mut BTreeMap<String, String>) {
    out.insert(path.to_owned(), node_type(s));
    if let Some(req) = s.get("required").and_then(Value::as_array) {
        let names: Vec<&str> = req.iter().filter_map(Value::as_str).collect();
        out.insert(format!("{path}!required"), names.join(","));
    }
    if let Some(props) = s.get("properties").and_then(Value::as_object) {
        for (k, v) in props {
            flatten(v, &format!("{path}.{k}"), out);
        }
    }
    if let Some(items) = s.get("items") {
        flatten(items, &format!("{path}[]"), out);
    }
    if let Some(ap) = s.get("additionalProperties").filter(|v| v.is_object()) {
        flatten(ap, &format!("{path}{{}}"), out);
    }
}

/// Whether our node type `mine` matches theirs: same base type, and the same enum and default
/// wherever theirs has one (an enum of ours where theirs has none only narrows an `allOf`).
fn same(theirs: &str, mine: &str) -> bool {
    if theirs == mine {
        return true;
    }
    !theirs.contains(" enum ") && strip_enum(mine) == theirs
}

fn base(t: &str) -> &str {
    t.split(' ').next().unwrap_or(t)
}

fn strip_enum(t: &str) -> String {
    match (t.find(" enum "), t.find(" default ")) {
        (Some(e), Some(d)) => format!("{}{}", &t[..e], &t[d..]),
        (Some(e), None) => t[..e].to_owned(),
        _ => t.to_owned(),
    }
}

fn version(crd: &Value) -> Result<&Value> {
    crd.pointer("/spec/versions/0")
        .context("CRD without versions")
}

fn schema_of(crd: &Value) -> Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    let s = version(crd)?
        .pointer("/schema/openAPIV3Schema")
        .context("no openAPIV3Schema")?;
    flatten(s, "", &mut out);
    Ok(out)
}

#[test]
fn generated_schemas_accept_everything_go_kthena_accepts() -> Result<()> {
    let ours: BTreeMap<String, Value> = kthena_api::crds()
        .into_iter()
        .map(|c| {
            Ok((
                c.metadata.name.clone().unwrap_or_default(),
                serde_json::to_value(&c)?,
            ))
        })
        .collect::<Result<_>>()?;
    let mut checked = 0;
    let mut diffs = Vec::new();
    for group in ["networking", "workload"] {
        let dir = charts_dir().join(group).join("crds");
        let mut files: Vec<_> = std::fs::read_dir(&dir)?
            .map(|e| e.map(|e| e.path()))
            .collect::<Result<_, _>>()?;
        files.sort();
        for file in files {
            let theirs: Value = serde_saphyr::from_str(&std::fs::read_to_string(&file)?)?;
            let name = theirs
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned();
            let Some(mine) = ours.get(&name) else {
                diffs.push(format!("{name}: not generated"));
                continue;
            };
            checked += 1;
            for field in [
                "/spec/group",
                "/spec/names/kind",
                "/spec/names/plural",
                "/spec/scope",
            ] {
                if theirs.pointer(field) != mine.pointer(field) {
                    diffs.push(format!("{name}: {field} differs"));
                }
            }
            let (tv, mv) = (version(&theirs)?, version(mine)?);
            for field in ["name", "subresources", "additionalPrinterColumns"] {
                if tv.get(field) != mv.get(field) {
                    diffs.push(format!(
                        "{name}: version {field}: theirs {:?}, ours {:?}",
                        tv.get(field),
                        mv.get(field)
                    ));
                }
            }
            let (ts, ms) = (schema_of(&theirs)?, schema_of(mine)?);
            // Ours must not require a field theirs leaves optional (it would reject their
            // manifests).
            for (path, ty) in &ms {
                if let Some(req) = path.strip_suffix("!required") {
                    let theirs_req = ts.get(path).map_or("", String::as_str);
                    for f in ty.split(',').filter(|f| !f.is_empty()) {
                        let full = format!("{req}.{f}");
                        let core = CORE_TYPE_SUBTREES.iter().any(|p| full.starts_with(p));
                        let excepted = EXCEPTIONS.iter().any(|(n, p, _)| {
                            (*n == name || *n == "*") && *p == format!("{full}!required")
                        });
                        if !core && !excepted && !theirs_req.split(',').any(|t| t == f) {
                            diffs.push(format!("{name}: {req}.{f}: required by ours only"));
                        }
                    }
                }
            }
            for (path, ty) in ts.iter().filter(|(p, _)| !p.ends_with("!required")) {
                let got = ms.get(path);
                if got.is_some_and(|g| same(ty, g)) {
                    continue;
                }
                if CORE_TYPE_SUBTREES.iter().any(|p| path.starts_with(p))
                    && got.is_some_and(|g| base(g) == base(ty))
                {
                    continue;
                }
                if EXCEPTIONS
                    .iter()
                    .any(|(n, p, _)| (*n == name || *n == "*") && p == path)
                {
                    continue;
                }
                diffs.push(format!(
                    "{name}: {path}: theirs {ty}, ours {}",
                    got.map_or("missing", String::as_str)
                ));
            }
        }
    }
    assert_eq!(diffs, Vec::<String>::new());
    assert_eq!(checked, 6);
    Ok(())
}

#[test]
fn crds_round_trip_through_yaml() -> Result<()> {
    for crd in kthena_api::crds() {
        let yaml = serde_saphyr::to_string(&crd)?;
        let back: Value = serde_saphyr::from_str(&yaml)?;
        assert_eq!(back, serde_json::to_value(&crd)?);
    }
    let names: Vec<String> = kthena_api::crds()
        .into_iter()
        .filter_map(|c| c.metadata.name)
        .collect();
    assert_eq!(
        names,
        [
            "modelroutes.networking.serving.volcano.sh",
            "modelservers.networking.serving.volcano.sh",
            "externalmodelproviders.networking.serving.volcano.sh",
            "modelservings.workload.serving.volcano.sh",
            "modelboosters.workload.serving.volcano.sh",
            "autoscalingpolicies.workload.serving.volcano.sh",
        ]
    );
    Ok(())
}

/// Paths of the schema nodes marked `nullable: true` below `s`.
fn nullable_paths(s: &Value, path: &str, out: &mut Vec<String>) {
    if s.get("nullable") == Some(&Value::Bool(true)) {
        out.push(path.to_owned());
    }
    if let Some(props) = s.get("properties").and_then(Value::as_object) {
        for (k, v) in props {
            nullable_paths(v, &format!("{path}.{k}"), out);
        }
    }
    if let Some(items) = s.get("items") {
        nullable_paths(items, &format!("{path}[]"), out);
    }
    if let Some(ap) = s.get("additionalProperties").filter(|v| v.is_object()) {
        nullable_paths(ap, &format!("{path}{{}}"), out);
    }
}

/// A field Go's CRD does not mark `nullable` must not be nullable in ours: the API server
/// prunes a `null` in a non-nullable field (so `replicas: null`, as Helm and GitOps tools
/// render an empty value, gets the default), but keeps it in a nullable one and then fails
/// with `accessor error: <nil> is of the type <nil>`.
#[test]
fn nullable_fields_are_those_of_go_kthena() -> Result<()> {
    let mut theirs = BTreeMap::new();
    for group in ["networking", "workload"] {
        for entry in std::fs::read_dir(charts_dir().join(group).join("crds"))? {
            let crd: Value = serde_saphyr::from_str(&std::fs::read_to_string(entry?.path())?)?;
            let name = crd["metadata"]["name"].as_str().unwrap_or("").to_owned();
            let mut paths = Vec::new();
            let schema = version(&crd)?.pointer("/schema/openAPIV3Schema");
            nullable_paths(schema.context("no schema")?, "", &mut paths);
            theirs.insert(name, paths);
        }
    }
    let mut ours = BTreeMap::new();
    for crd in kthena_api::crds() {
        let crd = serde_json::to_value(&crd)?;
        let name = crd["metadata"]["name"].as_str().unwrap_or("").to_owned();
        let mut paths = Vec::new();
        let schema = version(&crd)?.pointer("/schema/openAPIV3Schema");
        nullable_paths(schema.context("no schema")?, "", &mut paths);
        ours.insert(name, paths);
    }
    assert_eq!(theirs.len(), 6);
    assert_eq!(ours, theirs);
    Ok(())
}
