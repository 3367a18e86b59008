//! kthena-router in cluster mode, in process, in front of a ModelServing's engines.

use anyhow::Result;
use bytes::Bytes;
use http_body_util::Full;
use kthena_api::{ModelRoute, ModelServer};
use kthena_testenv::TestNamespace;
use kube::api::PostParams;
use serde_json::{Value, json};

use super::{eventually, http};

/// How the router's ModelServer serves the target's pods.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Serving {
    /// Every pod serves whole requests.
    Aggregated,
    /// Prefill/decode disaggregation over the `prefill` and `decode` roles
    /// (`workloadSelector.pdGroup` by `modelserving.volcano.sh/group-name`, the `http`
    /// connector: prefill with `max_tokens: 1`, then decode with the client's body).
    Disaggregated,
}

/// The router in cluster mode (`kthena_router::Router::start_in_cluster`) routing model `m`
/// of `ns` to the pods of ModelServing `target` (port 8100), through a ModelServer and a
/// ModelRoute named `target`; returns once a request for `m` is answered 200 through it.
pub(crate) async fn cluster_router(
    ns: &TestNamespace,
    target: &str,
    serving: Serving,
) -> Result<kthena_router::Router> {
    let mut selector = json!({"matchLabels": {"modelserving.volcano.sh/name": target}});
    if serving == Serving::Disaggregated {
        selector["pdGroup"] = json!({
            "groupKey": "modelserving.volcano.sh/group-name",
            "prefillLabels": {"modelserving.volcano.sh/role": "prefill"},
            "decodeLabels": {"modelserving.volcano.sh/role": "decode"},
        });
    }
    let server: ModelServer = serde_json::from_value(json!({
        "apiVersion": "networking.serving.volcano.sh/v1alpha1",
        "kind": "ModelServer",
        "metadata": {"name": target, "namespace": ns.name()},
        "spec": {
            "model": "m",
            "inferenceEngine": "vLLM",
            "workloadSelector": selector,
            "workloadPort": {"port": 8100},
        },
    }))?;
    ns.api::<ModelServer>()
        .create(&PostParams::default(), &server)
        .await?;
    let route: ModelRoute = serde_json::from_value(json!({
        "apiVersion": "networking.serving.volcano.sh/v1alpha1",
        "kind": "ModelRoute",
        "metadata": {"name": target, "namespace": ns.name()},
        "spec": {"modelName": "m", "rules": [{"name": "default", "targetModels": [{"modelServerName": target}]}]},
    }))?;
    ns.api::<ModelRoute>()
        .create(&PostParams::default(), &route)
        .await?;
    let text = "port: 0\nmetricsPort: 0\ndebugPort: 0\nbindAddress: 127.0.0.1\naccessLog: {enabled: false}\n";
    let path = std::path::Path::new("router.yaml");
    let cfg = kthena_router::Config::from_yaml(path, text)?.validate(path)?;
    let router = kthena_router::Router::start_in_cluster(cfg, ns.client().clone()).await?;
    let addr = router.addr.to_string();
    eventually("the router routing model m", || async {
        let body = json!({"model": "m", "prompt": "hi", "max_tokens": 1});
        Ok(completion(&addr, &body)
            .await
            .is_ok_and(|s| s == 200)
            .then_some(()))
    })
    .await?;
    Ok(router)
}

/// Status of `POST http://<addr>/v1/completions` with `body`; the answer is not read.
async fn completion(addr: &str, body: &Value) -> Result<u16> {
    let req = http::Request::post(format!("http://{addr}/v1/completions"))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())))?;
    Ok(http().request(req).await?.status().as_u16())
}
