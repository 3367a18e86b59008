//! What a person sees when the cluster is not there, has no Kthena CRDs, or denies access:
//! one line on stderr, nothing on stdout, exit code 1.

use std::path::Path;
use std::process::Command;

use serde_json::json;

use super::support::{edited_kubeconfig, kthena};

fn one_line_error(run: &super::support::Run) -> &str {
    assert_eq!(run.code, 1, "stdout: {}", run.stdout);
    assert_eq!(run.stdout, "");
    assert_eq!(run.stderr.lines().count(), 1, "{}", run.stderr);
    run.stderr.trim_end()
}

#[tokio::test]
async fn no_cluster_at_the_address() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:{port}\n    insecure-skip-tls-verify: true\nusers:\n- name: u\n  user:\n    token: t\ncontexts:\n- name: x\n  context:\n    cluster: c\n    user: u\ncurrent-context: x\n"
    );
    std::fs::write(&kubeconfig, text).unwrap();
    for args in [
        &["get", "ms"][..],
        &["describe", "mroute", "x"][..],
        &["get", "mserver", "-A", "-o", "yaml"][..],
    ] {
        let run = kthena(Some(&kubeconfig), args, "").await;
        let line = one_line_error(&run);
        assert!(
            line.starts_with(&format!(
                "error: cannot reach the Kubernetes API server at https://127.0.0.1:{port}: "
            )),
            "{line}"
        );
        assert!(line.contains("onnection refused"), "{line}");
        assert!(
            line.ends_with("(is the cluster running, and is the right context selected?)"),
            "{line}"
        );
    }
}

/// Regression: `--context zzz` said `failed to load current context: zzz`, although `zzz`
/// is the context asked for, not the current one.
#[tokio::test]
async fn a_context_that_does_not_exist_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    let text = "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:1\nusers:\n- name: u\n  user:\n    token: t\ncontexts:\n- name: x\n  context:\n    cluster: c\n    user: u\n- name: y\n  context:\n    cluster: c\n    user: u\ncurrent-context: x\n";
    std::fs::write(&kubeconfig, text).unwrap();
    let run = kthena(Some(&kubeconfig), &["--context", "zzz", "get", "ms"], "").await;
    assert_eq!(
        one_line_error(&run),
        "error: cannot use the kubeconfig: context \"zzz\" does not exist (the kubeconfig has x, y)"
    );
}

#[tokio::test]
async fn no_kubeconfig_at_all() {
    let run = kthena(None, &["get", "ms"], "").await;
    assert_eq!(
        one_line_error(&run),
        "error: no Kubernetes configuration: set KUBECONFIG, pass --kubeconfig or create ~/.kube/config"
    );
}

/// A control plane without any CRD, stopped on drop.
struct BarePlane(tempfile::TempDir);

impl Drop for BarePlane {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(script())
            .arg("down")
            .arg(self.0.path())
            .status();
    }
}

fn script() -> &'static Path {
    Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../scripts/kube-env.sh"
    ))
}

#[tokio::test]
async fn cluster_without_kthena_crds() {
    let dir = tempfile::tempdir().unwrap();
    let plane = BarePlane(dir);
    let up = tokio::process::Command::new("bash")
        .arg(script())
        .arg("up")
        .arg(plane.0.path())
        .output()
        .await
        .unwrap();
    assert!(
        up.status.success(),
        "{}",
        String::from_utf8_lossy(&up.stderr)
    );
    let kc = plane.0.path().join("kubeconfig");
    let cases = [
        (
            &["get", "ms"][..],
            "modelservings.workload.serving.volcano.sh",
        ),
        (
            &["get", "model-boosters", "-A"][..],
            "modelboosters.workload.serving.volcano.sh",
        ),
        (
            &["get", "asp", "-o", "json"][..],
            "autoscalingpolicies.workload.serving.volcano.sh",
        ),
        (
            &["describe", "mroute", "x"][..],
            "modelroutes.networking.serving.volcano.sh",
        ),
        (
            &["describe", "mserver", "x"][..],
            "modelservers.networking.serving.volcano.sh",
        ),
    ];
    for (args, resource) in cases {
        let run = kthena(Some(&kc), args, "").await;
        assert_eq!(
            one_line_error(&run),
            format!(
                "error: the cluster has no {resource} resource: is Kthena installed? (its CRDs are missing)"
            )
        );
    }
}

#[tokio::test]
async fn forbidden_names_the_user_and_the_resource() {
    let ns = kthena_testenv::namespace("cli-rbac").await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    // The admin impersonates a user without any RBAC binding.
    let kc = edited_kubeconfig(ns.env().kubeconfig(), dir.path(), |k| {
        k["users"][0]["user"]["as"] = json!("nobody");
    });
    let run = kthena(Some(&kc), &["get", "ms", "-n", ns.name()], "").await;
    assert_eq!(
        one_line_error(&run),
        format!(
            "error: forbidden: modelservings.workload.serving.volcano.sh is forbidden: User \"nobody\" cannot list resource \"modelservings\" in API group \"workload.serving.volcano.sh\" in the namespace \"{}\" (ask a cluster administrator for access)",
            ns.name()
        )
    );
}
