//! The admission webhooks on a real API server: the chart's webhook configurations
//! (`deploy/controller/webhooks.yaml`, with Go's webhook names) registered with
//! `clientConfig.url` pointing at the webhook server on 127.0.0.1 and the generated CA
//! patched in, then `kubectl apply` of invalid manifests fails with Go's messages (and, for
//! `spec.plugins` Go does not check, this controller's) and valid ones come back defaulted.

use std::io::Write as _;
use std::path::Path;

use anyhow::{Context as _, Result, bail};
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use kthena_api::{Object, load_file};
use kthena_controller::webhook::{
    MUTATING_WEBHOOK, PATHS, SERVICE_NAME, VALIDATING_WEBHOOK, WEBHOOK_TIMEOUT,
    generate_certificate, patch_ca_bundle, review, serve_webhook, service_hosts,
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

fn model_server(name: &str, timeout: &str) -> Value {
    json!({
        "apiVersion": "networking.serving.volcano.sh/v1alpha1",
        "kind": "ModelServer",
        "metadata": {"name": name},
        "spec": {
            "inferenceEngine": "vLLM", "workloadSelector": {"matchLabels": {"app": "x"}},
            "workloadPort": {"port": 8000}, "trafficPolicy": {"timeout": timeout},
        },
    })
}

fn provider(optional: bool) -> Value {
    json!({
        "apiVersion": "networking.serving.volcano.sh/v1alpha1",
        "kind": "ExternalModelProvider",
        "metadata": {"name": "openai"},
        "spec": {
            "baseURL": "https://api.openai.com/v1",
            "auth": {"secretRef": {"name": "s", "key": "k", "optional": optional}},
        },
    })
}

/// A ModelRoute of `model` (none when empty) with one LoRA adapter `lora` when `model` is
/// empty.
fn route(name: &str, model: &str, lora: &str) -> Value {
    let mut spec = json!({"rules": [{"name": "d", "targetModels": [{"modelServerName": "s"}]}]});
    match model.is_empty() {
        true => spec["loraAdapters"] = json!([lora]),
        false => spec["modelName"] = json!(model),
    }
    json!({
        "apiVersion": "networking.serving.volcano.sh/v1alpha1",
        "kind": "ModelRoute",
        "metadata": {"name": name},
        "spec": spec,
    })
}

/// `base` with the JSON pointers in `changes` set (missing objects on the way are created).
fn with(mut base: Value, changes: &[(&str, Value)]) -> Value {
    for (pointer, value) in changes {
        let mut at = &mut base;
        for key in pointer.trim_start_matches('/').split('/') {
            at = match at {
                Value::Array(items) => {
                    let i = key.parse::<usize>().unwrap_or_default();
                    if i == items.len() {
                        items.push(Value::Null);
                    }
                    &mut items[i]
                }
                other => &mut other[key],
            };
        }
        *at = value.clone();
    }
    base
}

/// The suffix of every webhook name (Go's chart: `validate-modelbooster.volcano.sh`, ...).
fn group(_kind: &str) -> &'static str {
    "volcano.sh"
}

/// The rejections of the CRDs' own CEL rules (`x-kubernetes-validations`), which the API
/// server checks before it calls the validating webhooks.
const CEL: &str = "";

/// Invalid manifests of every Kthena kind, the webhook that rejects each (without its group;
/// [`CEL`] for the CRD's own rule, which comes first) and Go's message (`kthena-api`
/// validation, `docs/api.md`).
fn rejections() -> Vec<(Value, &'static str, String)> {
    let ms = "validate-workload-ai-v1alpha1-modelserving";
    let role_rolling = (
        "/spec/rolloutStrategy",
        json!({"type": "RoleRollingUpdate"}),
    );
    let image = "/spec/template/roles/0/entryTemplate/spec/containers/0/image";
    vec![
        (
            serving("bad", 1),
            ms,
            "validation failed:\n  - spec.template.roles[0].workerTemplate: workerTemplate is required when workerReplicas > 0".into(),
        ),
        (
            with(serving("bad", 0), &[(image, json!("vllm :latest"))]),
            ms,
            format!("validation failed:\n  - {}: container image must not contain spaces", "spec.template.roles[0].entryTemplate.spec.containers[0].image"),
        ),
        (
            with(serving("bad", 0), &[(
                "/spec/template/roles/1",
                serving("x", 0)["spec"]["template"]["roles"][0].clone(),
            )]),
            CEL,
            "The ModelServing \"bad\" is invalid: spec.template.roles: Invalid value: roles name must be unique".into(),
        ),
        (
            with(serving("bad", 0), &[(
                "/spec/rolloutStrategy",
                json!({"type": "RoleRollingUpdate", "rollingUpdateConfiguration": {"maxUnavailable": 1}}),
            )]),
            ms,
            "validation failed:\n  - spec.rolloutStrategy.rollingUpdateConfiguration: rollingUpdateConfiguration is not allowed with RoleRollingUpdate".into(),
        ),
        (
            with(serving("bad", 0), &[
                ("/spec/recoveryPolicy", json!("ServingGroupRecreate")),
                role_rolling,
            ]),
            ms,
            "validation failed:\n  - spec.recoveryPolicy: recoveryPolicy ServingGroupRecreate cannot be used with rolloutStrategy RoleRollingUpdate; valid pairs: (ServingGroupRecreate,ServingGroupRollingUpdate) or (RoleRecreate,RoleRollingUpdate)".into(),
        ),
        (
            with(serving("bad", 0), &[(
                "/spec/template/gangPolicy",
                json!({"minRoleReplicas": {"decode": 1}}),
            )]),
            ms,
            "validation failed:\n  - spec.template.gangPolicy.minRoleReplicas[decode]: role \"decode\" does not exist".into(),
        ),
        (
            with(serving("bad", 0), &[(
                "/spec/plugins",
                json!([{"name": "lws-standard-labels"}, {"name": "foo"}]),
            )]),
            ms,
            "validation failed:\n  - spec.plugins[1].name: unknown plugin \"foo\"; built-in plugins: demo-pod-tweaks, lws-standard-labels".into(),
        ),
        (
            with(serving("bad", 0), &[(
                "/spec/plugins",
                json!([{"name": "demo-pod-tweaks", "config": {"env": "X=1"}}]),
            )]),
            ms,
            "validation failed:\n  - spec.plugins[0].config: plugin \"demo-pod-tweaks\" cannot decode its config: invalid type: string \"X=1\", expected a sequence".into(),
        ),
        (
            model_server("bad", "-5s"),
            "validate-modelserver",
            "validation failed: spec.trafficPolicy.timeout: invalid duration \"-5s\": must not be negative".into(),
        ),
        (
            provider(true),
            CEL,
            "The ExternalModelProvider \"openai\" is invalid: spec.auth: Invalid value: secretRef.optional must be false or unset".into(),
        ),
        (
            route("bad", "", ""),
            "validate-modelroute",
            "validation failed:\n  - spec.loraAdapters[0]: lora adapter name cannot be an empty string".into(),
        ),
        (
            policy("dup", "kv"),
            "validate-autoscalingpolicy",
            "validation failed:\n  - spec.metrics[1].name: duplicate metric name \"kv\"".into(),
        ),
        (
            booster("two", 2),
            "validate-modelbooster",
            "validation failed:\n  - spec.backend.workers: backend type vLLM requires exactly one worker of type server".into(),
        ),
    ]
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
    let (addr, server) = serve_webhook(
        "127.0.0.1:0".parse()?,
        &cert,
        WEBHOOK_TIMEOUT,
        PATHS,
        review,
    )
    .await?;
    let mut tasks = tokio::task::JoinSet::new();
    tasks.spawn(server);
    register(&ns, addr.port()).await?;
    patch_ca_bundle(
        ns.client(),
        &cert.ca_pem,
        VALIDATING_WEBHOOK,
        Some(MUTATING_WEBHOOK),
    )
    .await?;
    let vapi: Api<ValidatingWebhookConfiguration> = Api::all(ns.client().clone());
    let stored = vapi.get(VALIDATING_WEBHOOK).await?;
    for hook in stored.webhooks.unwrap_or_default() {
        let bundle = hook.client_config.ca_bundle.context("caBundle")?;
        assert_eq!(bundle.0, cert.ca_pem.as_bytes(), "{}", hook.name);
    }

    // Every rejection below is the webhook's or the CRD's CEL rule's, with Go's message.
    for (manifest, hook, message) in rejections() {
        let stderr = denied(apply(&ns, &manifest)?)?;
        let kind = manifest["kind"].as_str().unwrap_or_default();
        let expected = if hook == CEL {
            message
        } else {
            format!(
                "admission webhook \"{hook}.{}\" denied the request: {message}",
                group(kind)
            )
        };
        assert!(stderr.contains(&expected), "{kind}: {expected}\n{stderr}");
    }
    for (name, manifest) in [
        (
            "modelserving.workload.serving.volcano.sh/good",
            serving("good", 0),
        ),
        (
            "modelserving.workload.serving.volcano.sh/tweaked",
            with(
                serving("tweaked", 0),
                &[(
                    "/spec/plugins",
                    json!([{"name": "demo-pod-tweaks", "scope": {"target": "Worker"}, "config": {"annotations": {"a": "b"}}}]),
                )],
            ),
        ),
        (
            "modelserver.networking.serving.volcano.sh/s",
            model_server("s", "1m30s"),
        ),
        (
            "externalmodelprovider.networking.serving.volcano.sh/openai",
            provider(false),
        ),
        (
            "modelroute.networking.serving.volcano.sh/r",
            route("r", "qwen", ""),
        ),
    ] {
        assert_eq!(apply(&ns, &manifest)?, Ok(format!("{name} created\n")));
    }
    // An UPDATE rule: a ModelRoute's modelName is immutable (the CRD's CEL rule answers
    // before the webhook, which has the same rule).
    let stderr = denied(apply(&ns, &route("r", "llama", ""))?)?;
    assert!(
        stderr.contains("The ModelRoute \"r\" is invalid: spec.modelName: Invalid value: \"llama\": modelName is immutable"),
        "{stderr}"
    );

    // AutoscalingPolicy: an omitted behavior comes back with Go's defaults.
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

    // ModelBooster: the one valid booster is admitted (its rejection is in the table).
    apply(&ns, &booster("one", 1))?.map_err(anyhow::Error::msg)?;
    Ok(())
}

/// `--webhook-timeout`: a client that never starts its TLS handshake is disconnected.
#[tokio::test]
async fn a_silent_connection_is_closed_after_the_webhook_timeout() -> Result<()> {
    use tokio::io::AsyncReadExt as _;
    let cert = generate_certificate(&service_hosts(SERVICE_NAME, "default"))?;
    let timeout = std::time::Duration::from_millis(300);
    let (addr, server) =
        serve_webhook("127.0.0.1:0".parse()?, &cert, timeout, PATHS, review).await?;
    let mut tasks = tokio::task::JoinSet::new();
    tasks.spawn(server);
    let mut conn = tokio::net::TcpStream::connect(addr).await?;
    let mut buf = [0u8; 16];
    // EOF (or a reset) once the server gives up; without the timeout this waits forever.
    let read = tokio::time::timeout(std::time::Duration::from_secs(20), conn.read(&mut buf))
        .await
        .context("the connection stayed open")?;
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    Ok(())
}

/// Regression: `--webhook-timeout 0` gave every connection a zero timeout, so each was cut
/// before its TLS handshake and every admission call failed. As for Go's `http.Server`, 0
/// means no timeout: `GET /healthz` over TLS answers 200.
#[tokio::test]
async fn a_zero_webhook_timeout_means_no_timeout() -> Result<()> {
    use std::sync::Arc;

    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    use tokio_rustls::rustls;
    use tokio_rustls::rustls::pki_types::pem::PemObject as _;
    use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};

    let cert = generate_certificate(&service_hosts(SERVICE_NAME, "default"))?;
    let (addr, server) = serve_webhook(
        "127.0.0.1:0".parse()?,
        &cert,
        std::time::Duration::ZERO,
        PATHS,
        review,
    )
    .await?;
    let mut tasks = tokio::task::JoinSet::new();
    tasks.spawn(server);
    let mut roots = rustls::RootCertStore::empty();
    for der in CertificateDer::pem_slice_iter(cert.ca_pem.as_bytes()) {
        roots.add(der?)?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    // A client that takes its time (a zero timeout fired at the next timer tick, 1 ms, so a
    // client on loopback that starts its handshake at once could still get through).
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let mut tls = connector
        .connect(ServerName::try_from("localhost")?, tcp)
        .await
        .context("TLS handshake with a zero --webhook-timeout")?;
    tls.write_all(b"GET /healthz HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n")
        .await?;
    let mut answer = Vec::new();
    // The server may close without close_notify once it answered: keep what was read.
    let _ = tls.read_to_end(&mut answer).await;
    let text = String::from_utf8_lossy(&answer);
    assert!(text.starts_with("HTTP/1.1 200 OK"), "{text}");
    assert!(text.ends_with("ok"), "{text}");
    Ok(())
}
