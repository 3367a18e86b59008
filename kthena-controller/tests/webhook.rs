//! The admission webhooks on a real API server: `deploy/controller/webhooks.yaml` registered
//! with `clientConfig.url` pointing at the webhook server on 127.0.0.1 and the generated CA
//! patched in, then `kubectl apply` of invalid manifests fails with Go's messages and valid
//! ones come back defaulted.

use std::io::Write as _;
use std::path::Path;

use anyhow::{Context as _, Result, bail};
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use kthena_api::{Object, load_file};
use kthena_controller::{
    MUTATING_WEBHOOK, SERVICE_NAME, VALIDATING_WEBHOOK, generate_certificate, patch_ca_bundle,
    serve_webhook, service_hosts,
};
use kthena_testenv::TestNamespace;
use kube::Api;
use kube::api::{DynamicObject, PostParams};
use serde_json::{Value, json};

/// Registers the deploy webhook configurations with URLs on `port`, only for namespace `ns`.
async fn register(ns: &TestNamespace, port: u16) -> Result<()> {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/controller/webhooks.yaml");
    for doc in load_file(&file)? {
        let Object::Foreign(obj) = doc.object else {
            bail!("unexpected Kthena kind in webhooks.yaml");
        };
        let mut value = serde_json::to_value(&*obj)?;
        let hooks = value["webhooks"].as_array_mut().context("webhooks")?;
        for hook in hooks {
            let path = hook["clientConfig"]["service"]["path"].clone();
            let path = path.as_str().context("path")?;
            hook["clientConfig"] = json!({"url": format!("https://127.0.0.1:{port}{path}")});
            hook["namespaceSelector"] =
                json!({"matchLabels": {"kubernetes.io/metadata.name": ns.name()}});
        }
        let client = ns.client().clone();
        match obj.types.as_ref().map(|t| t.kind.as_str()) {
            Some("ValidatingWebhookConfiguration") => {
                let api: Api<ValidatingWebhookConfiguration> = Api::all(client);
                api.create(&PostParams::default(), &serde_json::from_value(value)?)
                    .await?;
            }
            Some("MutatingWebhookConfiguration") => {
                let api: Api<MutatingWebhookConfiguration> = Api::all(client);
                api.create(&PostParams::default(), &serde_json::from_value(value)?)
                    .await?;
            }
            other => bail!("unexpected kind {other:?}"),
        }
    }
    Ok(())
}

/// `kubectl apply -f -` of `manifest` in the namespace: Ok(stdout) or Err(stderr).
fn apply(ns: &TestNamespace, manifest: &Value) -> Result<std::result::Result<String, String>> {
    let mut child = ns
        .kubectl()
        .args(["apply", "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()?;
    child
        .stdin
        .take()
        .context("stdin")?
        .write_all(&serde_json::to_vec(manifest)?)?;
    let out = child.wait_with_output()?;
    Ok(match out.status.success() {
        true => Ok(String::from_utf8_lossy(&out.stdout).into_owned()),
        false => Err(String::from_utf8_lossy(&out.stderr).into_owned()),
    })
}

fn serving(name: &str, worker_replicas: i64) -> Value {
    json!({
        "apiVersion": "workload.serving.volcano.sh/v1alpha1",
        "kind": "ModelServing",
        "metadata": {"name": name},
        "spec": {"replicas": 1, "template": {"roles": [{
            "name": "prefill", "replicas": 1, "workerReplicas": worker_replicas,
            "entryTemplate": {"spec": {"containers": [{"name": "c", "image": "vllm:1"}]}},
        }]}},
    })
}

fn policy(name: &str, second_metric: &str) -> Value {
    json!({
        "apiVersion": "workload.serving.volcano.sh/v1alpha1",
        "kind": "AutoscalingPolicy",
        "metadata": {"name": name},
        "spec": {
            "metrics": [{"name": "kv", "targetValue": "10"}, {"name": second_metric, "targetValue": "5"}],
            "homogeneousTarget": {
                "target": {"targetRef": {"kind": "ModelServing", "name": "ms"}, "metricSources": {"kv": {"pod": {}}, "qps": {"pod": {}}}},
                "minReplicas": 1, "maxReplicas": 4,
            },
        },
    })
}

fn booster(name: &str, servers: usize) -> Value {
    let worker = json!({"type": "server", "image": "vllm:1", "replicas": 1, "pods": 1});
    json!({
        "apiVersion": "workload.serving.volcano.sh/v1alpha1",
        "kind": "ModelBooster",
        "metadata": {"name": name},
        "spec": {"backend": {
            "name": "qwen-vllm", "type": "vLLM", "modelURI": "hf://Qwen/Qwen3-0.6B", "replicas": 1,
            "workers": vec![worker; servers],
        }},
    })
}

fn denied(out: std::result::Result<String, String>) -> Result<String> {
    match out {
        Ok(stdout) => bail!("applied, expected a rejection: {stdout}"),
        Err(stderr) => Ok(stderr),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_apply_is_validated_and_defaulted_by_the_webhooks() -> Result<()> {
    let ns = kthena_testenv::namespace("webhook").await?;
    let cert = generate_certificate(&service_hosts(SERVICE_NAME, ns.name()))?;
    let (addr, server) = serve_webhook("127.0.0.1:0".parse()?, &cert).await?;
    let mut tasks = tokio::task::JoinSet::new();
    tasks.spawn(server);
    register(&ns, addr.port()).await?;
    patch_ca_bundle(
        ns.client(),
        &cert.ca_pem,
        VALIDATING_WEBHOOK,
        MUTATING_WEBHOOK,
    )
    .await?;
    let vapi: Api<ValidatingWebhookConfiguration> = Api::all(ns.client().clone());
    let stored = vapi.get(VALIDATING_WEBHOOK).await?;
    for hook in stored.webhooks.unwrap_or_default() {
        let bundle = hook.client_config.ca_bundle.context("caBundle")?;
        assert_eq!(bundle.0, cert.ca_pem.as_bytes(), "{}", hook.name);
    }

    // ModelServing: a webhook rule (the CRD allows it).
    let stderr = denied(apply(&ns, &serving("bad", 1))?)?;
    assert!(
        stderr.contains(
            "admission webhook \"validate-modelserving.workload.serving.volcano.sh\" denied the request: validation failed:\n  - spec.template.roles[0].workerTemplate: workerTemplate is required when workerReplicas > 0"
        ),
        "{stderr}"
    );
    let out = apply(&ns, &serving("good", 0))?;
    assert_eq!(
        out,
        Ok("modelserving.workload.serving.volcano.sh/good created\n".to_owned())
    );

    // AutoscalingPolicy: validated, and an omitted behavior comes back with Go's defaults.
    let stderr = denied(apply(&ns, &policy("dup", "kv"))?)?;
    assert!(
        stderr.contains("denied the request: validation failed:\n  - spec.metrics[1].name: duplicate metric name \"kv\""),
        "{stderr}"
    );
    apply(&ns, &policy("p", "qps"))?.map_err(anyhow::Error::msg)?;
    let api: Api<DynamicObject> = Api::namespaced_with(
        ns.client().clone(),
        ns.name(),
        &kube::discovery::ApiResource::erase::<kthena_api::AutoscalingPolicy>(&()),
    );
    let stored = api.get("p").await?;
    assert_eq!(
        stored.data["spec"]["behavior"],
        json!({
            "scaleDown": {"instances": 0, "percent": 100, "period": "1m", "selectPolicy": "Or", "stabilizationWindow": "5m"},
            "scaleUp": {
                "stablePolicy": {"instances": 4, "percent": 100, "period": "1m", "selectPolicy": "Or", "stabilizationWindow": "0s"},
                "panicPolicy": {"percent": 0, "period": "0s", "panicThresholdPercent": 200, "panicModeHold": "0s"},
            },
        })
    );

    // ModelBooster: one server worker for vLLM.
    let stderr = denied(apply(&ns, &booster("two", 2))?)?;
    assert!(
        stderr.contains("validation failed:\n  - spec.backend.workers: backend type vLLM requires exactly one worker of type server"),
        "{stderr}"
    );
    apply(&ns, &booster("one", 1))?.map_err(anyhow::Error::msg)?;

    // ModelRoute: Go's e2e case (an empty LoRA adapter name).
    let route = json!({
        "apiVersion": "networking.serving.volcano.sh/v1alpha1",
        "kind": "ModelRoute",
        "metadata": {"name": "r"},
        "spec": {"loraAdapters": [""], "rules": [{"name": "d", "targetModels": [{"modelServerName": "s"}]}]},
    });
    let stderr = denied(apply(&ns, &route)?)?;
    assert!(
        stderr.contains("admission webhook \"validate-modelroute.networking.serving.volcano.sh\" denied the request: validation failed:\n  - spec.loraAdapters[0]: lora adapter name cannot be an empty string"),
        "{stderr}"
    );
    Ok(())
}
