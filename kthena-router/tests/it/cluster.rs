//! Cluster mode on the real API server (kthena-testenv): ModelServers, ModelRoutes and Pods
//! made real by kthena-sim engines on their own loopback addresses; requests through the
//! router reach them and follow every change of the cluster.

use std::time::Duration;

use crate::cluster_support::{
    ClusterRouter, Node, TwoPods, apply, deploy_dir, model_route, model_server, two_pods,
};
use crate::common;
use kthena_api::ModelRoute;
use kube::Api;
use kube::api::{Patch, PatchParams};

/// Two ready Pods of one ModelServer both receive requests; a deleted Pod leaves routing
/// within 2 s and gets no request after that.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_reach_both_pods_and_a_deleted_pod_leaves_within_2s() {
    let ns = kthena_testenv::namespace("cluster-delete").await.unwrap();
    let TwoPods {
        n,
        model,
        node,
        router: r,
    } = two_pods(&ns).await;

    let served = r.send(&model, 10).await;
    assert_eq!(
        served.iter().filter(|p| *p == "pod-a").count(),
        5,
        "{served:?}"
    );
    assert_eq!(
        served.iter().filter(|p| *p == "pod-b").count(),
        5,
        "{served:?}"
    );

    node.delete("pod-a").await;
    let took = r
        .wait_endpoints(&n, "ms", &["pod-b"], Duration::from_secs(2))
        .await;
    eprintln!("deleted pod left routing after {took:?}");
    let served = r.send(&model, 10).await;
    assert_eq!(served, vec!["pod-b"; 10]);
    r.router.shutdown().await;
}

/// Changing the ModelRoute's target moves every request to the other ModelServer's Pod.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changing_the_route_target_swaps_routing() {
    let ns = kthena_testenv::namespace("cluster-target").await.unwrap();
    let n = ns.name().to_owned();
    let model = format!("{n}-model");
    let node = Node::start(&ns);
    node.pod("pod-a", "a", &model).await;
    node.pod("pod-b", "b", &model).await;
    apply(
        &ns,
        &[
            model_server(&n, "ms-a", &model, "a", node.port),
            model_server(&n, "ms-b", &model, "b", node.port),
        ],
        &[model_route(&n, "route", &model, "ms-a")],
    )
    .await;
    let r = ClusterRouter::start(&ns).await;
    r.wait_ready().await;
    r.wait_endpoints(&n, "ms-b", &["pod-b"], Duration::from_secs(10))
        .await;
    assert_eq!(r.send(&model, 4).await, vec!["pod-a"; 4]);

    let routes: Api<ModelRoute> = ns.api();
    let patch = serde_json::json!({"spec": {"rules": [{"name": "default", "targetModels": [{"modelServerName": "ms-b"}]}]}});
    routes
        .patch("route", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    r.wait_route(&model, &n, "ms-b", Duration::from_secs(5))
        .await;
    assert_eq!(r.send(&model, 4).await, vec!["pod-b"; 4]);
    r.router.shutdown().await;
}

/// A Pod whose Ready condition turns False gets no more traffic; back to Ready, it does
/// again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_turning_not_ready_stops_receiving_traffic() {
    let ns = kthena_testenv::namespace("cluster-ready").await.unwrap();
    let TwoPods {
        n,
        model,
        node,
        router: r,
    } = two_pods(&ns).await;

    node.set_ready("pod-b", false).await;
    r.wait_endpoints(&n, "ms", &["pod-a"], Duration::from_secs(5))
        .await;
    assert_eq!(r.send(&model, 6).await, vec!["pod-a"; 6]);

    node.set_ready("pod-b", true).await;
    r.wait_endpoints(&n, "ms", &["pod-a", "pod-b"], Duration::from_secs(5))
        .await;
    let served = r.send(&model, 6).await;
    assert!(served.iter().any(|p| p == "pod-b"), "{served:?}");
    r.router.shutdown().await;
}

/// A new endpoint is scraped at once (the scrape interval here is an hour), and an
/// endpoint that persists across rebuilds keeps its state: the same `Arc` (in-flight count,
/// scraped metrics) after another Pod joins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_endpoints_are_scraped_at_once_and_keep_their_state() {
    let ns = kthena_testenv::namespace("cluster-keep").await.unwrap();
    let n = ns.name().to_owned();
    let model = format!("{n}-model");
    let node = Node::start(&ns);
    node.pod("pod-a", "sim", &model).await;
    apply(
        &ns,
        &[model_server(&n, "ms", &model, "sim", node.port)],
        &[model_route(&n, "route", &model, "ms")],
    )
    .await;
    let r = ClusterRouter::start_with(&ns, "metricsScrapeInterval: 1h").await;
    r.wait_ready().await;
    r.wait_endpoints(&n, "ms", &["pod-a"], Duration::from_secs(10))
        .await;
    let before = r.router.snapshot();
    let ep = std::sync::Arc::clone(&before.endpoints[0]);
    r.wait_scraped("pod-a", Duration::from_secs(5)).await;
    assert_eq!(ep.state().models, vec![model.clone()]);

    node.pod("pod-b", "sim", &model).await;
    r.wait_endpoints(&n, "ms", &["pod-a", "pod-b"], Duration::from_secs(10))
        .await;
    r.wait_scraped("pod-b", Duration::from_secs(5)).await;
    let after = r.router.snapshot();
    assert!(after.generation > before.generation);
    let kept = after.endpoints.iter().find(|e| e.name == "pod-a").unwrap();
    assert!(std::sync::Arc::ptr_eq(kept, &ep));
    r.router.shutdown().await;
}

/// `deploy/` is accepted by the real API server, and its RBAC is what the router needs (`kubectl apply --server-side
/// --dry-run=server`; server-side because the ModelServing CRD is too large for the
/// last-applied annotation of a client-side apply).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deploy_manifests_pass_server_side_dry_run() {
    let env = kthena_testenv::TestEnv::get().await.unwrap();
    let dir = deploy_dir();
    // The namespace must exist for a dry run of the namespaced objects.
    let out = env
        .kubectl()
        .args(["apply", "-f"])
        .arg(dir.join("router/00-namespace.yaml"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = env
        .kubectl()
        .args([
            "apply",
            "--server-side",
            "--force-conflicts",
            "--dry-run=server",
            "-R",
            "-f",
        ])
        .arg(&dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for obj in [
        "serviceaccount/kthena-router",
        "namespace/kthena-system",
        "clusterrole.rbac.authorization.k8s.io/kthena-router",
        "clusterrolebinding.rbac.authorization.k8s.io/kthena-router",
        "configmap/kthena-router-config",
        "deployment.apps/kthena-router",
        "service/kthena-router",
        "service/kthena-router-metrics",
        "customresourcedefinition.apiextensions.k8s.io/modelroutes.networking.serving.volcano.sh",
        "customresourcedefinition.apiextensions.k8s.io/modelservings.workload.serving.volcano.sh",
    ] {
        assert!(stdout.contains(obj), "{obj} missing from:\n{stdout}");
    }

    // The RBAC is enough: a router with the ServiceAccount's token syncs and routes, and
    // the token may not write.
    let out = env
        .kubectl()
        .args(["apply", "-f"])
        .arg(dir.join("router/rbac.yaml"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ns = kthena_testenv::namespace("cluster-rbac").await.unwrap();
    let n = ns.name().to_owned();
    let model = format!("{n}-model");
    let node = Node::start(&ns);
    node.pod("pod-a", "sim", &model).await;
    apply(
        &ns,
        &[model_server(&n, "ms", &model, "sim", node.port)],
        &[model_route(&n, "route", &model, "ms")],
    )
    .await;
    let sa_client = service_account_client(env, "kthena-system", "kthena-router").await;
    let denied = Api::<k8s_openapi::api::core::v1::Pod>::namespaced(sa_client.clone(), &n)
        .delete("pod-a", &Default::default())
        .await;
    assert!(
        matches!(&denied, Err(kube::Error::Api(e)) if e.code == 403),
        "{denied:?}"
    );
    let r = ClusterRouter::start_as(&ns, sa_client).await;
    r.wait_ready().await;
    r.wait_endpoints(&n, "ms", &["pod-a"], Duration::from_secs(10))
        .await;
    assert_eq!(r.send(&model, 2).await, vec!["pod-a"; 2]);
    r.router.shutdown().await;
}

/// A client of the control plane authenticated as ServiceAccount `ns/name` (a token from
/// the TokenRequest API).
async fn service_account_client(
    env: &kthena_testenv::TestEnv,
    ns: &str,
    name: &str,
) -> kube::Client {
    use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
    use k8s_openapi::api::core::v1::ServiceAccount;
    let admin = env.client().await.expect("admin client");
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(3600),
            ..TokenRequestSpec::default()
        }),
        ..TokenRequest::default()
    };
    let token = Api::<ServiceAccount>::namespaced(admin, ns)
        .create_token_request(name, &Default::default(), &request)
        .await
        .expect("a token")
        .status
        .expect("a token status")
        .token
        .expect("a token");
    let mut kc = kube::config::Kubeconfig::read_from(env.kubeconfig()).expect("kubeconfig");
    for named in &mut kc.auth_infos {
        named.auth_info = Some(kube::config::AuthInfo {
            token: Some(token.clone().into()),
            ..kube::config::AuthInfo::default()
        });
    }
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .expect("client config");
    kube::Client::try_from(cfg).expect("client")
}

/// The example of docs/router.md ("Cluster mode on a laptop") is accepted by the real API
/// server, and its router config is a valid cluster-mode config.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_example_is_accepted() {
    let env = kthena_testenv::TestEnv::get().await.unwrap();
    let dir = deploy_dir().join("../examples/cluster");
    let out = env
        .kubectl()
        .args(["apply", "--dry-run=server", "-f"])
        .arg(dir.join("demo.yaml"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(stdout.matches("(server dry run)").count(), 4, "{stdout}");
    let out = env
        .kubectl()
        .args(["apply", "--dry-run=server", "-f"])
        .arg(dir.join("kv-events.yaml"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert_eq!(stdout.matches("(server dry run)").count(), 4, "{stdout}");
    for file in ["router.yaml", "router-kv.yaml"] {
        let path = dir.join(file);
        let cfg = kthena_router::load_config(
            &path,
            &std::collections::HashMap::<String, String>::new(),
            kthena_router::Overrides::default(),
        )
        .unwrap();
        assert!(cfg.is_cluster_mode(), "{file}");
    }
}

/// The ConfigMap's `routerConfiguration` is a valid config in cluster mode.
#[test]
fn deploy_configmap_is_a_cluster_mode_config() {
    let path = deploy_dir().join("router/configmap.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    let cm: serde_json::Value = serde_saphyr::from_str(&text).unwrap();
    let inner = cm["data"]["routerConfiguration"].as_str().unwrap();
    let cfg = kthena_router::Config::from_yaml(&path, inner)
        .unwrap()
        .validate(&path)
        .unwrap();
    assert!(cfg.is_cluster_mode());
    assert_eq!(cfg.port, 8080);
    // The shipped scheduler is the combination the benchmark measured best.
    assert_eq!(
        cfg.scheduler,
        kthena_router::config::SchedulerConfig::recommended()
    );
}

/// With the API server unreachable from the start, the router serves (`/healthz` 200, an
/// unknown model 404) but `/readyz` stays 503: it has no first sync.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_is_503_until_the_first_sync() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url: http::Uri = format!("http://{}", closed.local_addr().unwrap())
        .parse()
        .unwrap();
    drop(closed);
    let client = kube::Client::try_from(kube::Config::new(url)).unwrap();
    let text = "port: 0\nmetricsPort: 0\ndebugPort: 0\nbindAddress: 127.0.0.1\naccessLog: {enabled: false}\n";
    let path = std::path::Path::new("router.yaml");
    let cfg = kthena_router::Config::from_yaml(path, text)
        .unwrap()
        .validate(path)
        .unwrap();
    let router = kthena_router::Router::start_in_cluster(cfg, client)
        .await
        .unwrap();
    let url = format!("http://{}", router.addr);
    assert_eq!(common::get(&format!("{url}/healthz")).await.0, 200);
    for _ in 0..10 {
        let (status, body) = common::get(&format!("{url}/readyz")).await;
        assert_eq!(status, 503);
        assert_eq!(body, r#"{"message":"router is not ready"}"#);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (status, _, _) = common::post(
        &format!("{url}/v1/chat/completions"),
        common::chat("nothing", "hi", false, 1),
        &[],
    )
    .await;
    assert_eq!(status, 404);
    router.shutdown().await;
}

/// Cluster mode without any cluster configuration: the binary exits with code 1 and says
/// where it looked.
#[test]
fn binary_without_a_cluster_exits_1_naming_the_kubeconfig() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("router.yaml");
    std::fs::write(&cfg, "port: 0\nmetricsPort: 0\ndebugPort: 0\n").unwrap();
    let missing = dir.path().join("no-kubeconfig");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kthena-router"))
        .arg("--config")
        .arg(&cfg)
        .env("KUBECONFIG", &missing)
        .env("HOME", dir.path())
        .env_remove("KUBERNETES_SERVICE_HOST")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("cannot reach the Kubernetes API"),
        "{stderr}"
    );
    assert!(stderr.contains(&missing.display().to_string()), "{stderr}");
}
