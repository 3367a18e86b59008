use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::Path;

use k8s_openapi::api::core::v1::{Container, Pod};
use serde_json::json;

use super::env::{Sources, container_env, expand, field_ref};
use super::probe::{Probe, readiness};
use super::volumes::rewrite;
use super::{argv, backoff, binary_for_image, default_path_env, restarts};

const IP: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 0, 7));

fn pod(spec: &serde_json::Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": "r-0", "namespace": "kthena-system", "uid": "u-1",
                     "labels": {"app": "router"}, "annotations": {"a/b": "c"}},
        "spec": spec
    }))
    .unwrap()
}

fn container(c: serde_json::Value) -> Container {
    serde_json::from_value(c).unwrap()
}

#[test]
fn our_images_name_their_binary_with_any_registry_and_tag() {
    let cases = [
        (
            "ghcr.io/volcano-sh/kthena-router:v1.0.0",
            Some("kthena-router"),
        ),
        ("localhost:5000/kthena-router", Some("kthena-router")),
        (
            "ghcr.io/volcano-sh/kthena-controller-manager:latest",
            Some("kthena-controller"),
        ),
        (
            "example.com/a/b/kthena-controller@sha256:abc",
            Some("kthena-controller"),
        ),
        ("docker.io/library/kthena:1", Some("kthena")),
        ("ghcr.io/x/kthena-sim:dev", Some("kthena-sim")),
        ("kthena-sim", None),
        ("kthena-router:v1", None),
        ("vllm/vllm-openai", None),
        ("ghcr.io/x/kthena-routerx", None),
        ("/kthena-router", None),
    ];
    for (image, want) in cases {
        assert_eq!(binary_for_image(image), want, "{image}");
    }
}

#[test]
fn expansion_follows_kubernetes() {
    let lookup = |n: &str| (n == "A").then(|| "x".to_owned());
    assert_eq!(expand("$(A)-$(B)", &lookup), "x-$(B)");
    assert_eq!(expand("$$(A) $$ $", &lookup), "$(A) $ $");
    assert_eq!(expand("a$(A", &lookup), "a$(A");
    assert_eq!(expand("$A", &lookup), "$A");
}

#[test]
fn command_replaces_the_entrypoint_and_must_name_the_binary() {
    let vars = vec![("PORT".to_owned(), "8080".to_owned())];
    let c = container(json!({"name": "r", "args": ["--port=$(PORT)", "--x"]}));
    assert_eq!(
        argv(&c, "kthena-router", &vars).unwrap(),
        ["--port=8080", "--x"]
    );
    let c = container(
        json!({"name": "r", "command": ["/usr/local/bin/kthena-router", "--a"], "args": ["--b"]}),
    );
    assert_eq!(argv(&c, "kthena-router", &vars).unwrap(), ["--a", "--b"]);
    let c = container(json!({"name": "r", "command": ["sh", "-c", "x"]}));
    let err = argv(&c, "kthena-router", &vars).unwrap_err();
    assert!(err.contains("is not the image's binary"), "{err}");
}

#[test]
fn the_downward_api_reads_the_pod() {
    let p = pod(&json!({"containers": [], "serviceAccountName": "kthena-router"}));
    let get = |path: &str| field_ref(&p, IP, path).unwrap();
    assert_eq!(get("metadata.name"), "r-0");
    assert_eq!(get("metadata.namespace"), "kthena-system");
    assert_eq!(get("metadata.uid"), "u-1");
    assert_eq!(get("metadata.labels['app']"), "router");
    assert_eq!(get("metadata.annotations['a/b']"), "c");
    assert_eq!(get("spec.serviceAccountName"), "kthena-router");
    assert_eq!(get("status.podIP"), "127.0.0.7");
    assert_eq!(get("status.hostIP"), "127.0.0.1");
    assert!(field_ref(&p, IP, "spec.foo").is_err());
}

fn sources() -> Sources {
    let data = |kv: &[(&str, &str)]| {
        Some(
            kv.iter()
                .map(|(k, v)| ((*k).to_owned(), v.as_bytes().to_vec()))
                .collect::<BTreeMap<_, _>>(),
        )
    };
    Sources {
        config_maps: BTreeMap::from([
            (
                "redis-config".to_owned(),
                data(&[("REDIS_HOST", "redis"), ("REDIS_PORT", "6379")]),
            ),
            ("missing".to_owned(), None),
        ]),
        secrets: BTreeMap::from([("redis-secret".to_owned(), data(&[("password", "pw")]))]),
    }
}

#[test]
fn env_resolves_in_order_with_references_and_optional_keys() {
    let c = container(json!({"name": "r",
    "envFrom": [{"configMapRef": {"name": "redis-config"}, "prefix": "CM_"},
                {"configMapRef": {"name": "missing", "optional": true}}],
    "env": [
        {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "HOST", "valueFrom": {"configMapKeyRef": {"name": "redis-config", "key": "REDIS_HOST"}}},
        {"name": "PW", "valueFrom": {"secretKeyRef": {"name": "redis-secret", "key": "password"}}},
        {"name": "NOPE", "valueFrom": {"secretKeyRef": {"name": "absent", "key": "k", "optional": true}}},
        {"name": "NOKEY", "valueFrom": {"configMapKeyRef": {"name": "redis-config", "key": "x", "optional": true}}},
        {"name": "URL", "value": "redis://$(HOST):$(CM_REDIS_PORT)/$(NS)/$(LATER)"},
        {"name": "LATER", "value": "l"},
        {"name": "CM_REDIS_PORT", "value": "7000"}
    ]}));
    let p = pod(&json!({"containers": []}));
    let vars = container_env(&p, &c, IP, &sources()).unwrap();
    let got: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    assert_eq!(
        got,
        [
            ("CM_REDIS_HOST", "redis"),
            ("CM_REDIS_PORT", "7000"),
            ("NS", "kthena-system"),
            ("HOST", "redis"),
            ("PW", "pw"),
            ("URL", "redis://redis:6379/kthena-system/$(LATER)"),
            ("LATER", "l"),
        ]
    );
}

#[test]
fn a_missing_required_reference_fails_the_container() {
    let p = pod(&json!({"containers": []}));
    for (env, want) in [
        (
            json!({"name": "A", "valueFrom": {"secretKeyRef": {"name": "absent", "key": "k"}}}),
            "Secret absent not found",
        ),
        (
            json!({"name": "A", "valueFrom": {"configMapKeyRef": {"name": "redis-config", "key": "x"}}}),
            "key \"x\" not found in ConfigMap redis-config",
        ),
        (
            json!({"name": "A", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}}),
            "only value, configMapKeyRef",
        ),
    ] {
        let c = container(json!({"name": "r", "env": [env]}));
        let err = container_env(&p, &c, IP, &sources()).unwrap_err();
        assert!(err.contains(want), "{err}");
    }
}

#[test]
fn paths_under_a_mount_move_under_the_pod_root() {
    let mounts = vec![
        "/etc/config/routerConfiguration.yaml".to_owned(),
        "/etc/tls".to_owned(),
    ];
    let root = Path::new("/pods/p/root");
    assert_eq!(
        rewrite("/etc/tls/tls.crt", &mounts, root),
        "/pods/p/root/etc/tls/tls.crt"
    );
    assert_eq!(
        rewrite(
            "--config=/etc/config/routerConfiguration.yaml",
            &mounts,
            root
        ),
        "--config=/pods/p/root/etc/config/routerConfiguration.yaml"
    );
    assert_eq!(rewrite("/etc/tlsx/a", &mounts, root), "/etc/tlsx/a");
    assert_eq!(rewrite("--port=8080", &mounts, root), "--port=8080");
    assert_eq!(rewrite("a=/etc/tls/x", &mounts, root), "a=/etc/tls/x");
}

#[test]
fn readiness_probes_as_the_node_runs_them() {
    let c = container(
        json!({"name": "r", "ports": [{"name": "http", "containerPort": 8080}],
        "readinessProbe": {"httpGet": {"path": "/readyz", "port": "http"}, "timeoutSeconds": 2}}),
    );
    assert_eq!(
        readiness(&c),
        Some(Probe::Http {
            port: 8080,
            path: "/readyz".to_owned(),
            host: None,
            headers: Vec::new(),
            timeout: std::time::Duration::from_secs(2),
        })
    );
    let c = container(json!({"name": "r",
        "readinessProbe": {"httpGet": {"path": "/readyz", "port": 8443, "scheme": "HTTPS"}}}));
    assert_eq!(
        readiness(&c),
        Some(Probe::Tcp {
            port: 8443,
            host: None,
            timeout: std::time::Duration::from_secs(1)
        })
    );
    let c = container(json!({"name": "r", "readinessProbe": {"exec": {"command": ["true"]}}}));
    assert_eq!(readiness(&c), None);
}

#[test]
fn exited_processes_restart_by_policy_with_kubelets_back_off() {
    let with = |policy: Option<&str>| pod(&json!({"containers": [], "restartPolicy": policy}));
    assert!(restarts(&with(None), 0));
    assert!(restarts(&with(Some("Always")), 0));
    assert!(restarts(&with(Some("OnFailure")), 1));
    assert!(!restarts(&with(Some("OnFailure")), 0));
    assert!(!restarts(&with(Some("Never")), 1));
    let secs: Vec<u64> = (0..7).map(|n| backoff(n).as_secs()).collect();
    assert_eq!(secs, [10, 20, 40, 80, 160, 300, 300]);
}

#[test]
fn the_routers_default_config_path_is_named_when_a_mount_covers_it() {
    let root = Path::new("/pods/p/root");
    let file = vec!["/etc/config/routerConfiguration.yaml".to_owned()];
    let dir = vec!["/etc/config".to_owned()];
    let want = vec![(
        "KTHENA_ROUTER_CONFIG".to_owned(),
        "/pods/p/root/etc/config/routerConfiguration.yaml".to_owned(),
    )];
    assert_eq!(default_path_env("kthena-router", &file, root, &[]), want);
    assert_eq!(default_path_env("kthena-router", &dir, root, &[]), want);
    assert!(default_path_env("kthena-controller", &file, root, &[]).is_empty());
    assert!(default_path_env("kthena-router", &[], root, &[]).is_empty());
    let set = vec![("KTHENA_ROUTER_CONFIG".to_owned(), "/x".to_owned())];
    assert!(default_path_env("kthena-router", &file, root, &set).is_empty());
}
