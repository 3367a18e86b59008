//! Running the binary and seeding the cluster with Kthena's example manifests.
#![expect(
    clippy::unwrap_used,
    reason = "test helpers: a failure is a test failure"
)]

use std::path::{Path, PathBuf};
use std::process::Stdio;

use kthena_api::{AutoscalingPolicy, ModelBooster, ModelRoute, ModelServer, ModelServing};
use kthena_testenv::TestNamespace;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::ApiResource;
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;

/// What one run printed and its exit code.
#[derive(Debug)]
pub(crate) struct Run {
    pub(crate) code: i32,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

/// Runs `kthena ARGS` with `KUBECONFIG=kubeconfig` (none when `None`), an empty `HOME`,
/// and `stdin` as its input.
pub(crate) async fn kthena(kubeconfig: Option<&Path>, args: &[&str], stdin: &str) -> Run {
    let home = tempfile::tempdir().unwrap();
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_kthena"));
    cmd.args(args)
        .env("HOME", home.path())
        .env_remove("KUBECONFIG")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(k) = kubeconfig {
        cmd.env("KUBECONFIG", k);
    }
    let mut child = cmd.spawn().unwrap();
    let mut input = child.stdin.take().unwrap();
    input.write_all(stdin.as_bytes()).await.unwrap();
    drop(input);
    let out = child.wait_with_output().await.unwrap();
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8(out.stdout).unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
    }
}

/// `kthena ARGS` on the shared test cluster; asserts exit 0 and an empty stderr.
pub(crate) async fn ok(ns: &TestNamespace, args: &[&str]) -> String {
    let run = kthena(Some(ns.env().kubeconfig()), args, "").await;
    assert_eq!(
        (run.code, run.stderr.as_str()),
        (0, ""),
        "kthena {args:?}: {}",
        run.stdout
    );
    run.stdout
}

/// An example manifest of Go Kthena.
pub(crate) fn example(rel: &str) -> PathBuf {
    Path::new("/work/shared/kthena-manifests/examples").join(rel)
}

pub(crate) fn api_resource(kind: &str) -> ApiResource {
    match kind {
        "ModelServing" => ApiResource::erase::<ModelServing>(&()),
        "ModelBooster" => ApiResource::erase::<ModelBooster>(&()),
        "AutoscalingPolicy" => ApiResource::erase::<AutoscalingPolicy>(&()),
        "ModelRoute" => ApiResource::erase::<ModelRoute>(&()),
        "ModelServer" => ApiResource::erase::<ModelServer>(&()),
        other => panic!("unexpected kind {other}"),
    }
}

pub(crate) fn dynamic(client: &kube::Client, ns: &str, kind: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), ns, &api_resource(kind))
}

/// Creates the Kthena objects of example file `rel` in namespace `ns` (their own
/// namespace replaced), renamed to `name` when given; returns the kind of the last one.
pub(crate) async fn create_example(
    client: &kube::Client,
    ns: &str,
    rel: &str,
    name: Option<&str>,
) -> String {
    let docs = kthena_api::load_file(example(rel)).unwrap();
    let mut kind = String::new();
    for doc in docs.into_iter().filter(|d| d.object.is_kthena()) {
        kind = doc.object.kind().to_owned();
        let mut value = doc.object.to_json().unwrap();
        value["metadata"]["namespace"] = json!(ns);
        if let Some(n) = name {
            value["metadata"]["name"] = json!(n);
        }
        let obj: DynamicObject = serde_json::from_value(value).unwrap();
        dynamic(client, ns, &kind)
            .create(&PostParams::default(), &obj)
            .await
            .unwrap();
    }
    kind
}

/// Replaces the status of `kind/name` (status subresource).
pub(crate) async fn set_status(
    client: &kube::Client,
    ns: &str,
    kind: &str,
    name: &str,
    status: Value,
) {
    let patch = Patch::Merge(json!({ "status": status }));
    dynamic(client, ns, kind)
        .patch_status(name, &PatchParams::default(), &patch)
        .await
        .unwrap();
}

/// A condition as the controllers write it.
pub(crate) fn condition(type_: &str, status: &str) -> Value {
    json!({"type": type_, "status": status, "reason": "Test", "message": "set by the test",
           "lastTransitionTime": "2026-01-01T00:00:00Z"})
}

/// The objects of `kind` in `ns` as the API server returns them, without managedFields.
pub(crate) async fn server_objects(client: &kube::Client, ns: &str, kind: &str) -> Vec<Value> {
    let list = dynamic(client, ns, kind)
        .list(&ListParams::default())
        .await
        .unwrap();
    list.items
        .into_iter()
        .map(|o| {
            let mut v = serde_json::to_value(o).unwrap();
            v["metadata"]
                .as_object_mut()
                .unwrap()
                .remove("managedFields");
            v
        })
        .collect()
}

/// Seconds of a Go duration string (`1h2m3s`, `4s`).
pub(crate) fn go_seconds(text: &str) -> i64 {
    let mut total = 0;
    let mut n = String::new();
    for c in text.chars() {
        match c {
            '0'..='9' => n.push(c),
            'h' | 'm' | 's' => {
                let mult = match c {
                    'h' => 3600,
                    'm' => 60,
                    _ => 1,
                };
                total += n.parse::<i64>().unwrap() * mult;
                n.clear();
            }
            _ => panic!("not a Go duration: {text}"),
        }
    }
    assert!(n.is_empty(), "not a Go duration: {text}");
    total
}

/// The table with each row's AGE (the last cell) replaced by `<age>`, after checking
/// that it is a Go duration of at most `max_age_s` seconds.
pub(crate) fn mask_ages(table: &str, max_age_s: i64) -> String {
    let mut out = String::new();
    for (i, line) in table.lines().enumerate() {
        if i == 0 {
            assert!(line.ends_with("AGE"), "header without AGE: {line}");
            out.push_str(line);
        } else {
            let (rest, age) = line.rsplit_once(' ').unwrap();
            let secs = go_seconds(age);
            assert!(
                (0..=max_age_s).contains(&secs),
                "AGE {age} not in 0..={max_age_s}s: {line}"
            );
            out.push_str(rest);
            out.push_str(" <age>");
        }
        out.push('\n');
    }
    out
}

/// A copy of the test kubeconfig, edited by `edit` (a JSON view of the YAML).
pub(crate) fn edited_kubeconfig(src: &Path, dir: &Path, edit: impl FnOnce(&mut Value)) -> PathBuf {
    let text = std::fs::read_to_string(src).unwrap();
    let mut value: Value = serde_saphyr::from_str(&text).unwrap();
    edit(&mut value);
    let path = dir.join("kubeconfig");
    std::fs::write(&path, serde_json::to_string(&value).unwrap()).unwrap();
    path
}
