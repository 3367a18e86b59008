//! Gateway API mode on the real API server (kthena-testenv): Kthena's example Gateway,
//! HTTPRoute and InferencePool manifests route to kthena-sim pods; hostnames and listener
//! `allowedRoutes` (Same, All, Selector) decide which HTTPRoutes serve a request; listeners
//! on other ports are opened; ModelRoute `parentRefs` bind routes to their Gateway; the
//! router writes Gateway and HTTPRoute statuses that `kubectl get` shows.

#![allow(clippy::unwrap_used, reason = "tests fail on any error")]

use std::path::Path;
use std::time::Duration;

use crate::cluster_support::{ClusterRouter, Node, apply, model_route, model_server};
use kthena_api::gateway::{Gateway, HTTPRoute};
use kthena_api::thirdparty::InferencePool;
use kthena_testenv::TestNamespace;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::time::Instant;

use crate::common;
use crate::common::{chat, post};

fn example(name: &str) -> String {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/kthena-manifests/examples/kthena-router");
    std::fs::read_to_string(dir.join(name)).unwrap()
}

async fn start(ns: &TestNamespace) -> ClusterRouter {
    let extra = format!(
        "metricsScrapeInterval: 100ms\ngatewayApi: {{enabled: true, inferenceExtension: true, namespace: {0}, gatewayNamespaces: [{0}]}}",
        ns.name()
    );
    let r = ClusterRouter::start_with(ns, &extra).await;
    r.wait_ready().await;
    r
}

/// `(status, body)` of a chat request with `Host: host` to the router's main port.
async fn ask(r: &ClusterRouter, host: &str, path: &str, model: &str) -> (u16, Value) {
    ask_at(&r.url(), host, path, model).await
}

/// `(status, body)` of a chat request with `Host: host` to `base` (`http://addr`).
async fn ask_at(base: &str, host: &str, path: &str, model: &str) -> (u16, Value) {
    let (status, _, body) = post(
        &format!("{base}{path}"),
        chat(model, "hi", false, 4),
        &[("host", host)],
    )
    .await;
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    (status.as_u16(), body)
}

/// The last access-log line.
fn last_log(r: &ClusterRouter) -> Value {
    r.router.flush_access_log();
    let text = std::fs::read_to_string(r.dir.path().join("access.log")).unwrap_or_default();
    text.lines()
        .last()
        .map_or(Value::Null, |l| serde_json::from_str(l).unwrap())
}

/// Polls `ask` until its status is `want` (5 s at most); returns the last access-log line.
async fn until(r: &ClusterRouter, host: &str, path: &str, model: &str, want: u16) -> Value {
    until_at(r, &r.url(), host, path, model, want).await
}

/// [`until`] against `base` (another listener port of the router).
async fn until_at(
    r: &ClusterRouter,
    base: &str,
    host: &str,
    path: &str,
    model: &str,
    want: u16,
) -> Value {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let (status, body) = ask_at(base, host, path, model).await;
        if status == want {
            return last_log(r);
        }
        assert!(
            Instant::now() < deadline,
            "still {status} for {host}{path}: {body}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn create<K>(ns: &TestNamespace, obj: Value)
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::Serialize
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let api: Api<K> = ns.api();
    let obj: K = serde_json::from_value(obj).unwrap();
    api.create(&PostParams::default(), &obj).await.unwrap();
}

fn yaml(text: &str) -> Value {
    serde_saphyr::from_str(text).unwrap()
}

/// A ModelServer `ms-<app>` (pods are only pool members when some ModelServer selects
/// them, as in Go) and one pod `pod-<app>` serving `model`.
async fn pods(ns: &TestNamespace, node: &Node, app: &str, model: &str) {
    node.pod(&format!("pod-{app}"), app, model).await;
    let n = ns.name();
    apply(
        ns,
        &[model_server(n, &format!("ms-{app}"), model, app, node.port)],
        &[],
    )
    .await;
}

fn pool(name: &str, app: &str, port: u16) -> Value {
    json!({
        "apiVersion": "inference.networking.k8s.io/v1", "kind": "InferencePool",
        "metadata": {"name": name},
        "spec": {"targetPorts": [{"number": port}], "selector": {"matchLabels": {"app": app}},
                 "endpointPickerRef": {"name": name, "port": {"number": 8080}}},
    })
}

fn route(name: &str, gateway_ns: &str, gateway: &str, hosts: &[&str], pool: (&str, &str)) -> Value {
    json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": {"name": name},
        "spec": {
            "parentRefs": [{"name": gateway, "namespace": gateway_ns}],
            "hostnames": hosts,
            "rules": [{"backendRefs": [{"group": "inference.networking.k8s.io", "kind": "InferencePool",
                                        "name": pool.1, "namespace": pool.0}]}],
        },
    })
}

/// Kthena's example HTTPRoute `llm-route` (PathPrefix `/` to InferencePool
/// `deepseek-r1-1-5b`, parent the `default` Gateway) serves a model no ModelRoute knows;
/// a PathPrefix `/v1` rule does not match `/v10`; the statuses read as Go writes them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn example_manifests_route_through_the_default_gateway() {
    let ns = kthena_testenv::namespace("gw-example").await.unwrap();
    let n = ns.name().to_owned();
    let model = format!("{n}-ds");
    let node = Node::start(&ns);
    pods(&ns, &node, "deepseek-r1-1-5b", &model).await;
    let mut p = yaml(&example("InferencePool.yaml"));
    p["spec"]["targetPorts"][0]["number"] = json!(node.port);
    create::<InferencePool>(&ns, p).await;
    let route_text = example("HTTPRoute.yaml").replace("kthena-system", &n);
    create::<HTTPRoute>(&ns, yaml(&route_text)).await;
    let r = start(&ns).await;

    let log = until(&r, "127.0.0.1", "/v1/chat/completions", &model, 200).await;
    assert_eq!(log["backend_type"], "inference_pool", "{log}");
    assert_eq!(
        log["backend_name"],
        format!("{n}/deepseek-r1-1-5b"),
        "{log}"
    );
    assert_eq!(log["selected_pod"], "pod-deepseek-r1-1-5b", "{log}");
    assert_eq!(log["gateway"], format!("{n}/default"), "{log}");
    assert_eq!(log["http_route"], format!("{n}/llm-route"), "{log}");
    assert_eq!(
        log["inference_pool"],
        format!("{n}/deepseek-r1-1-5b"),
        "{log}"
    );

    // PathPrefix `/v1` is segment-based: a rule for it does not take `/v10`.
    let routes: Api<HTTPRoute> = ns.api();
    let patch = json!({"spec": {"rules": [{
        "matches": [{"path": {"type": "PathPrefix", "value": "/v1"}}],
        "backendRefs": [{"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": "deepseek-r1-1-5b"}]}]}});
    routes
        .patch("llm-route", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    until(&r, "127.0.0.1", "/v10/chat/completions", &model, 404).await;
    let (status, body) = ask(&r, "127.0.0.1", "/v1/chat/completions", &model).await;
    assert_eq!(status, 200, "{body}");

    // Statuses: the default Gateway is Programmed, the route Accepted with resolved refs.
    let out = wait_kubectl(&ns, &["get", "gateway", "default"], "True").await;
    let header: Vec<&str> = out.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        ["NAME", "CLASS", "ADDRESS", "PROGRAMMED", "AGE"],
        "{out}"
    );
    let row: Vec<&str> = out.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(&row[..3], ["default", "kthena-router", "True"], "{out}");
    let gws: Api<Gateway> = ns.api();
    let st = gws.get("default").await.unwrap().status.unwrap();
    let c: Vec<_> = st
        .conditions
        .iter()
        .map(|c| (c.type_.as_str(), c.status.as_str(), c.reason.as_str()))
        .collect();
    assert_eq!(
        c,
        [
            ("Accepted", "True", "Accepted"),
            ("Programmed", "True", "Programmed")
        ]
    );
    assert_eq!(st.listeners[0].name, "default");
    assert_eq!(st.listeners[0].attached_routes, 1);
    let hr = routes.get("llm-route").await.unwrap().status.unwrap();
    assert_eq!(hr.parents.len(), 1);
    assert_eq!(hr.parents[0].controller_name, "volcano.sh/kthena-router");
    let c: Vec<_> = hr.parents[0]
        .conditions
        .iter()
        .map(|c| {
            (
                c.type_.as_str(),
                c.status.as_str(),
                c.reason.as_str(),
                c.message.as_str(),
            )
        })
        .collect();
    assert_eq!(
        c,
        [
            (
                "Accepted",
                "True",
                "Accepted",
                "HTTPRoute has been accepted by kthena-router"
            ),
            (
                "ResolvedRefs",
                "True",
                "ResolvedRefs",
                "All references resolved"
            ),
        ]
    );
    r.router.shutdown().await;
}

/// `kubectl <args>` until its output contains `want` (5 s at most).
async fn wait_kubectl(ns: &TestNamespace, args: &[&str], want: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let out = ns.kubectl().args(args).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        if text.contains(want) {
            return text;
        }
        assert!(
            Instant::now() < deadline,
            "kubectl {args:?} never showed {want:?}: {text}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A route restricted to `api.example.com` takes only that host (and wins over a
/// catch-all route for it); other hosts go to the catch-all, and 404 without it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostname_restricted_route_ignores_other_hosts() {
    let ns = kthena_testenv::namespace("gw-host").await.unwrap();
    let n = ns.name().to_owned();
    let model = format!("{n}-m");
    let node = Node::start(&ns);
    pods(&ns, &node, "a", &model).await;
    pods(&ns, &node, "b", &model).await;
    create::<InferencePool>(&ns, pool("pool-a", "a", node.port)).await;
    create::<InferencePool>(&ns, pool("pool-b", "b", node.port)).await;
    create::<HTTPRoute>(
        &ns,
        route(
            "api-only",
            &n,
            "default",
            &["api.example.com"],
            (&n, "pool-a"),
        ),
    )
    .await;
    create::<HTTPRoute>(&ns, route("any-host", &n, "default", &[], (&n, "pool-b"))).await;
    let r = start(&ns).await;

    let path = "/v1/chat/completions";
    let log = until(&r, "api.example.com", path, &model, 200).await;
    assert_eq!(log["backend_name"], format!("{n}/pool-a"), "{log}");
    let log = until(&r, "API.example.com:80", path, &model, 200).await;
    assert_eq!(log["backend_name"], format!("{n}/pool-a"), "{log}");
    let log = until(&r, "other.example.com", path, &model, 200).await;
    assert_eq!(log["backend_name"], format!("{n}/pool-b"), "{log}");

    let routes: Api<HTTPRoute> = ns.api();
    routes
        .delete("any-host", &DeleteParams::default())
        .await
        .unwrap();
    let log = until(&r, "other.example.com", path, &model, 404).await;
    assert_eq!(log["error"]["type"], "route_not_found", "{log}");
    let log = until(&r, "api.example.com", path, &model, 200).await;
    assert_eq!(log["backend_name"], format!("{n}/pool-a"), "{log}");

    // Regression: an absolute-form target was matched by its `Host` header, which RFC 9112
    // section 3.2.2 says to ignore (a proxy in front routes by the target): the target's
    // host decides.
    let body = chat(&model, "hi", false, 4);
    let req = format!(
        "POST http://api.example.com{path} HTTP/1.1\r\nHost: other.example.com\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let mut s = tokio::net::TcpStream::connect(r.router.addr).await.unwrap();
    s.write_all(req.as_bytes()).await.unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).await.unwrap();
    assert!(resp.starts_with("HTTP/1.1 200 OK"), "{resp}");
    assert_eq!(last_log(&r)["backend_name"], format!("{n}/pool-a"));
    r.router.shutdown().await;
}

/// A listener with the default `allowedRoutes` (`Same`) does not take an HTTPRoute of
/// another namespace; `from: All` does. A listener on a port the router cannot open (taken)
/// makes its Gateway `Programmed=False`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allowed_routes_exclude_routes_of_other_namespaces() {
    let ns = kthena_testenv::namespace("gw-allowed").await.unwrap();
    let other = kthena_testenv::namespace("gw-allowed-other").await.unwrap();
    let n = ns.name().to_owned();
    let model = format!("{n}-m");
    let node = Node::start(&ns);
    pods(&ns, &node, "a", &model).await;
    create::<InferencePool>(&ns, pool("pool-a", "a", node.port)).await;
    create::<HTTPRoute>(&other, route("foreign", &n, "gw", &[], (&n, "pool-a"))).await;
    let r = start(&ns).await;
    let port = r.router.addr.port();
    create::<Gateway>(
        &ns,
        json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
            "metadata": {"name": "gw"},
            "spec": {"gatewayClassName": "kthena-router", "listeners": [
                {"name": "api", "hostname": "api.example.com", "port": port, "protocol": "HTTP"}]},
        }),
    )
    .await;

    let path = "/v1/chat/completions";
    // The listener is found (not "No matching listener found"), but no route attaches.
    wait_kubectl(&ns, &["get", "gateway", "gw"], "True").await;
    let log = until(&r, "api.example.com", path, &model, 404).await;
    assert_eq!(log["error"]["type"], "route_not_found", "{log}");
    let msg = log["error"]["message"].as_str().unwrap_or_default();
    assert!(msg.ends_with("not found: no ModelRoute serves it"), "{log}");
    let gws: Api<Gateway> = ns.api();
    let st = gws.get("gw").await.unwrap().status.unwrap();
    assert_eq!(st.listeners[0].attached_routes, 0);
    let patch = json!({"spec": {"listeners": [{"name": "api", "hostname": "api.example.com", "port": port,
        "protocol": "HTTP", "allowedRoutes": {"namespaces": {"from": "All"}}}]}});
    gws.patch("gw", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    let log = until(&r, "api.example.com", path, &model, 200).await;
    assert_eq!(log["backend_name"], format!("{n}/pool-a"), "{log}");

    // A second listener on a port something else holds.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken_port = taken.local_addr().unwrap().port();
    let patch = json!({"spec": {"listeners": [
        {"name": "api", "hostname": "api.example.com", "port": port, "protocol": "HTTP",
         "allowedRoutes": {"namespaces": {"from": "All"}}},
        {"name": "elsewhere", "port": taken_port, "protocol": "HTTP"}]}});
    gws.patch("gw", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    let out = wait_kubectl(&ns, &["get", "gateway", "gw"], "False").await;
    let row: Vec<&str> = out.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(&row[..3], ["gw", "kthena-router", "False"], "{out}");
    let st = gws.get("gw").await.unwrap().status.unwrap();
    let prog = st
        .conditions
        .iter()
        .find(|c| c.type_ == "Programmed")
        .unwrap();
    assert_eq!(prog.reason, "Invalid");
    assert!(
        prog.message.starts_with(&format!(
            "Listener \"elsewhere\" failed: listen tcp 127.0.0.1:{taken_port}: "
        )),
        "{}",
        prog.message
    );
    let l = &st.listeners[1].conditions[0];
    assert_eq!(
        (l.status.as_str(), l.reason.as_str()),
        ("False", "PortUnavailable")
    );
    drop(taken);
    r.router.shutdown().await;
}

/// A Gateway whose only listener is on another port: the router opens that port and
/// serves it. A ModelRoute whose `parentRefs` name that Gateway serves only there; one
/// without parentRefs serves the Gateways of its namespace. An HTTPRoute of another
/// namespace attaches through `allowedRoutes.namespaces.from: Selector` once that namespace
/// carries the selected label. Deleting the Gateway closes its port.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_ports_parent_refs_and_namespace_selectors() {
    let ns = kthena_testenv::namespace("gw-ports").await.unwrap();
    let other = kthena_testenv::namespace("gw-ports-other").await.unwrap();
    let n = ns.name().to_owned();
    let node = Node::start(&ns);
    let (bound, plain, pooled) = (
        format!("{n}-bound"),
        format!("{n}-plain"),
        format!("{n}-pool"),
    );
    node.pod("pod-a", "a", &bound).await;
    node.pod("pod-b", "b", &pooled).await;
    let mut bound_route = model_route(&n, "bound", &bound, "ms-a");
    bound_route.spec.parent_refs = vec![kthena_api::networking::ParentReference {
        name: "side".into(),
        ..Default::default()
    }];
    apply(
        &ns,
        &[
            model_server(&n, "ms-a", &bound, "a", node.port),
            model_server(&n, "ms-b", &pooled, "b", node.port),
        ],
        &[bound_route, model_route(&n, "plain", &plain, "ms-a")],
    )
    .await;
    create::<InferencePool>(&ns, pool("pool-b", "b", node.port)).await;
    create::<HTTPRoute>(&other, route("foreign", &n, "side", &[], (&n, "pool-b"))).await;
    let r = start(&ns).await;
    let side_port = common::free_port();
    create::<Gateway>(
        &ns,
        json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
            "metadata": {"name": "side"},
            "spec": {"gatewayClassName": "kthena-router", "listeners": [
                {"name": "http", "port": side_port, "protocol": "HTTP",
                 "allowedRoutes": {"namespaces": {"from": "Selector",
                     "selector": {"matchLabels": {"kthena-test": n.clone()}}}}}]},
        }),
    )
    .await;
    let side = format!("http://127.0.0.1:{side_port}");
    let path = "/v1/chat/completions";
    // The router opens the port once it sees the Gateway.
    let deadline = Instant::now() + Duration::from_secs(5);
    while tokio::net::TcpStream::connect(("127.0.0.1", side_port))
        .await
        .is_err()
    {
        assert!(Instant::now() < deadline, "port {side_port} never opened");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // The bound route serves on the side Gateway's port only.
    until_at(&r, &side, "x", path, &bound, 200).await;
    // The default Gateway (which the router creates at start) may come after the side one:
    // until the router sees it, the default port answers `no_matching_listener`.
    let deadline = Instant::now() + Duration::from_secs(5);
    let (status, body) = loop {
        let (status, body) = ask(&r, "x", path, &bound).await;
        if body["error"]["code"] != "no_matching_listener" || Instant::now() > deadline {
            break (status, body);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(status, 404, "{body}");
    assert_eq!(
        body["error"]["message"],
        format!(
            "ModelRoute {n}/bound for model `{bound}` exists but is not attached to any Gateway \
             listener serving this request: its parentRefs ({n}/side) do not name listener \
             \"default\" of Gateway {n}/default, which this request came through"
        ),
        "{body}"
    );
    // Without parentRefs: the Gateways of the route's namespace, both ports.
    until(&r, "x", path, &plain, 200).await;
    until_at(&r, &side, "x", path, &plain, 200).await;
    let out = wait_kubectl(&ns, &["get", "gateway", "side"], "True").await;
    let row: Vec<&str> = out.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(&row[..3], ["side", "kthena-router", "True"], "{out}");

    // The foreign HTTPRoute: not admitted until its namespace carries the label.
    let (status, _) = ask_at(&side, "x", path, &pooled).await;
    assert_eq!(status, 404);
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(ns.client().clone());
    let patch = json!({"metadata": {"labels": {"kthena-test": n.clone()}}});
    namespaces
        .patch(other.name(), &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    let log = until_at(&r, &side, "x", path, &pooled, 200).await;
    assert_eq!(
        log["http_route"],
        format!("{}/foreign", other.name()),
        "{log}"
    );
    assert_eq!(log["gateway"], format!("{n}/side"), "{log}");
    assert_eq!(log["selected_pod"], "pod-b", "{log}");
    let gws: Api<Gateway> = ns.api();
    let st = gws.get("side").await.unwrap().status.unwrap();
    assert_eq!(st.listeners[0].attached_routes, 1);

    // Deleting the Gateway closes its port.
    gws.delete("side", &DeleteParams::default()).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while tokio::net::TcpStream::connect(("127.0.0.1", side_port))
        .await
        .is_ok()
    {
        assert!(Instant::now() < deadline, "port {side_port} still open");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    r.router.shutdown().await;
}

/// Regression: a ModelRoute without `parentRefs` outside the Gateway's namespace serves
/// nothing in Gateway API mode, and the 404 said "no rule of the ModelRoutes ... matches",
/// blaming its rules. It now names the route and says why it is not attached; a parentRef
/// to the Gateway attaches it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_route_outside_the_gateway_namespace_is_reported_not_attached() {
    let ns = kthena_testenv::namespace("gw-detached").await.unwrap();
    let app = kthena_testenv::namespace("gw-detached-app").await.unwrap();
    let (n, a) = (ns.name().to_owned(), app.name().to_owned());
    let model = format!("{a}-model");
    let node = Node::start(&app);
    node.pod("pod-a", "a", &model).await;
    apply(
        &app,
        &[model_server(&a, "ms", &model, "a", node.port)],
        &[model_route(&a, "route", &model, "ms")],
    )
    .await;
    let r = start(&ns).await;
    r.wait_endpoints(&a, "ms", &["pod-a"], Duration::from_secs(10))
        .await;
    let path = "/v1/chat/completions";
    // Until the Gateway reflectors have listed, the router routes as outside Gateway API
    // mode, then finds no listener (`/readyz` does not wait for them).
    let deadline = Instant::now() + Duration::from_secs(5);
    let (status, body) = loop {
        let (status, body) = ask(&r, "x", path, &model).await;
        if body["error"]["code"] == "model_not_found" || Instant::now() > deadline {
            break (status, body);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(status, 404, "{body}");
    assert_eq!(
        body["error"]["message"],
        format!(
            "ModelRoute {a}/route for model `{model}` exists but is not attached to any Gateway \
             listener serving this request: it has no parentRefs, so it attaches only to \
             Gateways of its own namespace \"{a}\", and this request came through listener \
             \"default\" of Gateway {n}/default (add a parentRef naming Gateway {n}/default)"
        ),
        "{body}"
    );
    assert_eq!(body["error"]["code"], "model_not_found", "{body}");
    assert_eq!(last_log(&r)["error"]["type"], "model_route_matching");

    let patch = json!({"spec": {"parentRefs": [{"name": "default", "namespace": n}]}});
    app.api::<kthena_api::ModelRoute>()
        .patch("route", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    let log = until(&r, "x", path, &model, 200).await;
    assert_eq!(log["selected_pod"], "pod-a", "{log}");
    r.router.shutdown().await;
}

/// Regression: the GatewayClass `kthena-router` stayed `Accepted: Unknown` ("Waiting for
/// controller"). The router, its controller (`controllerName: volcano.sh/kthena-router`),
/// accepts it for its current generation, as the Gateway API asks, and again after the
/// class changes; it leaves the class of another controller alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_router_accepts_its_gateway_class() {
    let ns = kthena_testenv::namespace("gw-class").await.unwrap();
    let r = start(&ns).await;
    let accepted = |v: &Value| -> Option<(String, String, String, i64, i64)> {
        let c = v["status"]["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == "Accepted")?;
        Some((
            c["status"].as_str()?.to_owned(),
            c["reason"].as_str()?.to_owned(),
            c["message"].as_str()?.to_owned(),
            c["observedGeneration"].as_i64().unwrap_or(-1),
            v["metadata"]["generation"].as_i64().unwrap_or(0),
        ))
    };
    let class = wait_class(&ns, "kthena-router", |v| {
        accepted(v).is_some_and(|a| a.0 == "True" && a.3 == a.4)
    })
    .await;
    let (status, reason, message, observed, generation) = accepted(&class).unwrap();
    assert_eq!(
        (status.as_str(), reason.as_str(), message.as_str()),
        (
            "True",
            "Accepted",
            "GatewayClass has been accepted by kthena-router"
        ),
        "{class}"
    );
    assert_eq!(observed, generation);

    // A new generation is accepted again.
    let out = ns
        .kubectl()
        .args([
            "patch",
            "gatewayclass",
            "kthena-router",
            "--type=merge",
            "-p",
        ])
        .arg(r#"{"spec":{"description":"kthena-router test"}}"#)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_class(&ns, "kthena-router", |v| {
        accepted(v).is_some_and(|a| a.0 == "True" && a.3 == a.4 && a.4 > generation)
    })
    .await;

    // Another controller's class is not ours to accept.
    let foreign = format!("{}-foreign", ns.name());
    let obj = json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
        "metadata": {"name": foreign},
        "spec": {"controllerName": "example.com/other"},
    });
    let out = ns
        .kubectl()
        .args(["apply", "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin
                .take()
                .unwrap()
                .write_all(obj.to_string().as_bytes())?;
            c.wait_with_output()
        })
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let v = wait_class(&ns, &foreign, |_| true).await;
    assert_eq!(accepted(&v).map(|a| a.0), Some("Unknown".to_owned()), "{v}");
    r.router.shutdown().await;
}

/// `kubectl get gatewayclass <name> -o json` until `ok` holds (5 s at most).
async fn wait_class(ns: &TestNamespace, name: &str, ok: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let out = ns
            .kubectl()
            .args(["get", "gatewayclass", name, "-o", "json"])
            .output()
            .unwrap();
        let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        if ok(&v) {
            return v;
        }
        assert!(Instant::now() < deadline, "GatewayClass {name}: {v}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
