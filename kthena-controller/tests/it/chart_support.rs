//! Support code of the Helm chart tests (`chart_render`, `chart_install`): helm itself (built by
//! `scripts/helm.sh`), rendering a chart into JSON documents, and reading what the rendered
//! or installed objects say (containers, args, env).

use std::path::{Path, PathBuf};
use std::process::Output;

use anyhow::{Context as _, Result, bail};
use serde_json::Value;

/// The release name of every test (Go's docs: `helm install kthena ...`).
pub(crate) const RELEASE: &str = "kthena";
/// The release namespace of every test (Go's docs: `--namespace kthena-system`).
pub(crate) const NAMESPACE: &str = "kthena-system";
/// The chart's appVersion: the workspace version, the images' default tag.
pub(crate) const APP_VERSION: &str = env!("CARGO_PKG_VERSION");

/// The workspace root.
pub(crate) fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root")
        .to_owned()
}

/// `charts/kthena`.
pub(crate) fn chart() -> PathBuf {
    root().join("charts/kthena")
}

/// Go Kthena's chart (`../shared/kthena-manifests/charts/kthena`).
pub(crate) fn go_chart() -> PathBuf {
    root().join("../shared/kthena-manifests/charts/kthena")
}

/// The helm binary of `scripts/helm.sh path`.
///
/// # Errors
/// If the script fails or helm is not built (`bash scripts/helm.sh build`).
pub(crate) fn helm_path() -> Result<PathBuf> {
    let out = std::process::Command::new("bash")
        .arg(root().join("scripts/helm.sh"))
        .arg("path")
        .output()?;
    let path = PathBuf::from(String::from_utf8(out.stdout)?.trim());
    if !out.status.success() || !path.is_file() {
        bail!(
            "no helm at {} (run `bash scripts/helm.sh build`)",
            path.display()
        );
    }
    Ok(path)
}

/// Runs helm with `args`; the whole output, whatever the exit status.
pub(crate) fn helm_output(args: &[&str]) -> Result<Output> {
    Ok(std::process::Command::new(helm_path()?)
        .args(args)
        .current_dir(root())
        .output()?)
}

/// Runs helm with `args`: its stdout, or an error with its stderr.
pub(crate) fn helm(args: &[&str]) -> Result<String> {
    let out = helm_output(args)?;
    if !out.status.success() {
        bail!(
            "helm {args:?} failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8(out.stdout)?)
}

/// The documents of a multi-document YAML stream as JSON (empty documents dropped).
pub(crate) fn parse_docs(text: &str) -> Result<Vec<Value>> {
    let docs: Vec<Option<Value>> = serde_saphyr::from_multiple(text)?;
    Ok(docs
        .into_iter()
        .flatten()
        .filter(|d| !d.is_null())
        .collect())
}

/// `helm template kthena CHART --namespace kthena-system` with `--set` of each of `sets`.
pub(crate) fn render(chart: &Path, sets: &[&str]) -> Result<Vec<Value>> {
    let chart = chart.to_str().context("chart path")?;
    let mut args = vec!["template", RELEASE, chart, "--namespace", NAMESPACE];
    for set in sets {
        args.extend(["--set", set]);
    }
    parse_docs(&helm(&args)?)
}

/// The document of `kind` named `name`.
pub(crate) fn find<'a>(docs: &'a [Value], kind: &str, name: &str) -> Result<&'a Value> {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .with_context(|| format!("no {kind} {name} among {:?}", objects(docs)))
}

/// `(kind, name)` of every document, sorted.
pub(crate) fn objects(docs: &[Value]) -> Vec<(String, String)> {
    let mut all: Vec<(String, String)> = docs
        .iter()
        .map(|d| {
            let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
            (text(&d["kind"]), text(&d["metadata"]["name"]))
        })
        .collect();
    all.sort();
    all
}

/// The first container of a Deployment (JSON).
pub(crate) fn container(deployment: &Value) -> &Value {
    &deployment["spec"]["template"]["spec"]["containers"][0]
}

/// The strings of a JSON array (`args`, `command`).
pub(crate) fn strings(list: &Value) -> Vec<String> {
    list.as_array()
        .map(|a| {
            a.iter()
                .map(|s| s.as_str().unwrap_or_default().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// The container's args of Deployment `name`.
pub(crate) fn args_of(docs: &[Value], name: &str) -> Result<Vec<String>> {
    Ok(strings(&container(find(docs, "Deployment", name)?)["args"]))
}

/// The container's env of Deployment `name`, each variable as its JSON object.
pub(crate) fn env_of(docs: &[Value], name: &str) -> Result<Vec<Value>> {
    Ok(container(find(docs, "Deployment", name)?)["env"]
        .as_array()
        .cloned()
        .unwrap_or_default())
}

/// The literal env of Deployment `name`: `NAME=value` of each variable with a `value`.
pub(crate) fn literal_env(docs: &[Value], name: &str) -> Result<Vec<String>> {
    Ok(env_of(docs, name)?
        .iter()
        .filter_map(|e| Some(format!("{}={}", e["name"].as_str()?, e["value"].as_str()?)))
        .collect())
}

/// A port free on 127.0.0.1 now (the OS may hand it out again later; the tests use it at
/// once).
pub(crate) fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}
