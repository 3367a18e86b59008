//! The Helm chart `charts/kthena` with the real helm (`scripts/helm.sh`): `helm lint` is
//! clean; `helm template` gives the objects, args and environment users rely on, for the
//! default values and for session boost, fairness, Gateway API, cert-manager and Redis; the
//! router and controller-manager containers get exactly the args and env Go Kthena's chart
//! gives for the same values; values Go's chart forbids or we do not take are rejected; and
//! `deploy/` is what the chart renders.

use anyhow::{Result, ensure};
use serde_json::{Value, json};

use crate::chart_support::{
    APP_VERSION, args_of, chart, container, env_of, find, go_chart, helm_output, literal_env,
    objects, render, root, strings,
};

const SESSION_BOOST: &[&str] = &[
    "networking.kthenaRouter.sessionBoost.enabled=true",
    "networking.kthenaRouter.sessionBoost.header=X-Conversation",
    "networking.kthenaRouter.sessionBoost.gracePeriod=2s",
    "networking.kthenaRouter.sessionBoost.inflightPerPod=0",
];
const FAIRNESS: &[&str] = &[
    "networking.kthenaRouter.fairness.enabled=true",
    "networking.kthenaRouter.fairness.windowSize=10m",
    "networking.kthenaRouter.fairness.maxConcurrent=64",
];
const GATEWAY_API: &[&str] = &[
    "networking.kthenaRouter.gatewayAPI.enabled=true",
    "networking.kthenaRouter.gatewayAPI.inferenceExtension=true",
    "networking.kthenaRouter.kubeAPIQPS=50",
    "networking.kthenaRouter.kubeAPIBurst=100",
];
const CERT_MANAGER: &[&str] = &[
    "global.certManagementMode=cert-manager",
    "networking.kthenaRouter.tls.enabled=true",
];
const OPTIONS: &[&str] = &[
    "workload.controllerManager.controllers=modelserving\\,autoscaler",
    "workload.controllerManager.debugPort=15001",
    "workload.controllerManager.autoscalingSyncPeriodSeconds=5",
    "workload.controllerManager.kubeAPIQPS=20",
    "workload.controllerManager.webhook.enabled=false",
    "networking.kthenaRouter.webhook.enabled=false",
    "networking.kthenaRouter.metrics.exposeOnRouterPort=true",
    "networking.kthenaRouter.accessLog.format=json",
    "networking.kthenaRouter.drainTimeout=90s",
];

/// The router's env up to its access-log and drain variables: the pod namespace and Go's
/// Redis references (`redis-config`, `redis-secret`, all optional).
fn base_env() -> Vec<Value> {
    let cm = |key: &str| json!({"name": "redis-config", "key": key, "optional": true});
    vec![
        json!({"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}),
        json!({"name": "REDIS_HOST", "valueFrom": {"configMapKeyRef": cm("REDIS_HOST")}}),
        json!({"name": "REDIS_PORT", "valueFrom": {"configMapKeyRef": cm("REDIS_PORT")}}),
        json!({"name": "REDIS_PASSWORD", "valueFrom": {"secretKeyRef": {"name": "redis-secret", "key": "password", "optional": true}}}),
    ]
}

#[test]
fn lint_is_clean_for_every_mode() -> Result<()> {
    let chart = chart();
    let chart = chart.to_str().unwrap_or_default();
    for sets in [
        &[][..],
        SESSION_BOOST,
        FAIRNESS,
        GATEWAY_API,
        CERT_MANAGER,
        OPTIONS,
    ] {
        let mut args = vec!["lint", "--strict", chart];
        for set in sets {
            args.extend(["--set", set]);
        }
        let out = helm_output(&args)?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        ensure!(out.status.success(), "{sets:?}: {text}");
        ensure!(
            text.contains("1 chart(s) linted, 0 chart(s) failed")
                && !text.contains("[WARNING]")
                && !text.contains("[ERROR]"),
            "{sets:?}: {text}"
        );
    }
    Ok(())
}

#[test]
fn default_values_install_the_release_objects() -> Result<()> {
    let docs = render(&chart(), &[])?;
    let names: Vec<(String, String)> = [
        ("ClusterRole", "kthena-controller-manager"),
        ("ClusterRole", "kthena-router"),
        ("ClusterRoleBinding", "kthena-controller-manager"),
        ("ClusterRoleBinding", "kthena-router"),
        ("ConfigMap", "kthena-router-config"),
        ("ConfigMap", "model-booster-controller-config"),
        ("Deployment", "kthena-controller-manager"),
        ("Deployment", "kthena-router"),
        (
            "MutatingWebhookConfiguration",
            "kthena-controller-manager-mutating-webhook",
        ),
        ("Role", "kthena-controller-manager"),
        ("RoleBinding", "kthena-controller-manager"),
        ("Secret", "downloader-secrets"),
        ("Service", "kthena-controller-manager-webhook"),
        ("Service", "kthena-router"),
        ("Service", "kthena-router-metrics"),
        ("ServiceAccount", "kthena-controller-manager"),
        ("ServiceAccount", "kthena-router"),
        (
            "ValidatingWebhookConfiguration",
            "kthena-controller-manager-validating-webhook",
        ),
    ]
    .iter()
    .map(|(k, n)| ((*k).to_owned(), (*n).to_owned()))
    .collect();
    assert_eq!(objects(&docs), names);
    Ok(())
}

#[test]
fn default_router_container_is_gos() -> Result<()> {
    let docs = render(&chart(), &[])?;
    let router = find(&docs, "Deployment", "kthena-router")?;
    let c = container(router);
    assert_eq!(c["image"], format!("kthena-rs/kthena-router:{APP_VERSION}"));
    assert_eq!(
        args_of(&docs, "kthena-router")?,
        [
            "--port=8080",
            "--metrics-port=9090",
            "--expose-metrics-on-router-port=false",
            "--debug-port=15000",
            "--enable-webhook=false",
            "--enable-gateway-api=false",
            "--webhook-port=8443",
            "--webhook-tls-cert-file=/etc/tls/tls.crt",
            "--webhook-tls-private-key-file=/etc/tls/tls.key",
            "--cert-secret-name=kthena-router-webhook-certs",
            "--webhook-service-name=kthena-router-webhook",
        ]
    );
    let mut env = base_env();
    env.extend([
        json!({"name": "ACCESS_LOG_ENABLED", "value": "true"}),
        json!({"name": "ACCESS_LOG_FORMAT", "value": "text"}),
        json!({"name": "ACCESS_LOG_OUTPUT", "value": "stdout"}),
        json!({"name": "DRAIN_TIMEOUT", "value": "5m"}),
    ]);
    assert_eq!(env_of(&docs, "kthena-router")?, env);
    assert_eq!(
        c["volumeMounts"][0],
        json!({"name": "scheduler-config", "mountPath": "/etc/config/routerConfiguration.yaml", "subPath": "routerConfiguration", "readOnly": true})
    );
    assert_eq!(
        c["readinessProbe"]["httpGet"],
        json!({"path": "/readyz", "port": 8080})
    );
    assert_eq!(
        router["spec"]["template"]["spec"]["serviceAccountName"],
        "kthena-router"
    );
    assert_eq!(
        router["spec"]["template"]["spec"]["terminationGracePeriodSeconds"],
        330
    );

    // The router configuration is one our router loads, in cluster mode.
    let text = find(&docs, "ConfigMap", "kthena-router-config")?["data"]["routerConfiguration"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let path = std::path::Path::new("/etc/config/routerConfiguration.yaml");
    let cfg = kthena_router::Config::from_yaml(path, &text)?.validate(path)?;
    assert!(cfg.is_cluster_mode());
    Ok(())
}

#[test]
fn default_controller_manager_container_is_gos() -> Result<()> {
    let docs = render(&chart(), &[])?;
    let cm = find(&docs, "Deployment", "kthena-controller-manager")?;
    let c = container(cm);
    assert_eq!(
        c["image"],
        format!("kthena-rs/kthena-controller-manager:{APP_VERSION}")
    );
    assert_eq!(
        strings(&c["args"]),
        [
            "--v=2",
            "--enable-webhook=true",
            "--cert-secret-name=kthena-controller-manager-webhook-certs",
            "--service-name=kthena-controller-manager-webhook",
            "--router-metrics-service=kthena-system/kthena-router-metrics",
        ]
    );
    assert_eq!(
        c["env"],
        json!([{"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}])
    );
    assert_eq!(
        c["readinessProbe"]["httpGet"],
        json!({"path": "/healthz", "port": 8443, "scheme": "HTTPS"})
    );
    assert_eq!(
        find(&docs, "ConfigMap", "model-booster-controller-config")?["data"],
        json!({
            "model_serving_downloader_image": "ghcr.io/volcano-sh/downloader:latest",
            "model_serving_runtime_image": "ghcr.io/volcano-sh/runtime:latest",
        })
    );
    Ok(())
}

/// `(name, path, API group)` of each webhook of configuration `kind/name`, checking that
/// each is at the controller-manager's Service with Go's policy, no caBundle (written by the
/// controller-manager in `auto` mode) and no cert-manager annotation.
fn webhook_rows(docs: &[Value], kind: &str, name: &str) -> Result<Vec<(String, String, String)>> {
    let doc = find(docs, kind, name)?;
    assert!(doc["metadata"]["annotations"].is_null(), "{name}");
    let list = doc["webhooks"].as_array().cloned().unwrap_or_default();
    Ok(list
        .iter()
        .map(|h| {
            let svc = &h["clientConfig"]["service"];
            assert!(h["clientConfig"]["caBundle"].is_null());
            assert_eq!(
                (&svc["name"], &svc["namespace"], &svc["port"]),
                (
                    &json!("kthena-controller-manager-webhook"),
                    &json!("kthena-system"),
                    &json!(443)
                )
            );
            assert_eq!(h["failurePolicy"], "Fail");
            let s = |v: &Value| v.as_str().unwrap_or_default().to_owned();
            let group = s(&h["rules"][0]["apiGroups"][0]);
            (s(&h["name"]), s(&svc["path"]), group)
        })
        .collect())
}

/// The webhook configurations: Go's names and paths, at the controller-manager's Service
/// (also for the router's kinds: the router serves no webhook).
#[test]
fn webhooks_are_gos_at_the_controller_manager() -> Result<()> {
    let docs = render(&chart(), &[])?;
    let hooks = |kind: &str, name: &str| webhook_rows(&docs, kind, name);
    let hook = |n: &str, p: &str, g: &str| {
        (
            n.to_owned(),
            p.to_owned(),
            format!("{g}.serving.volcano.sh"),
        )
    };
    let router = |k: &str| {
        hook(
            &format!("validate-{k}.volcano.sh"),
            &format!("/validate/{k}"),
            "networking",
        )
    };
    assert_eq!(
        hooks(
            "ValidatingWebhookConfiguration",
            "kthena-controller-manager-validating-webhook"
        )?,
        [
            hook(
                "validate-modelbooster.volcano.sh",
                "/validate/modelbooster",
                "workload"
            ),
            hook(
                "validate-autoscalingpolicy.volcano.sh",
                "/validate/autoscalingpolicy",
                "workload"
            ),
            hook(
                "validate-workload-ai-v1alpha1-modelserving.volcano.sh",
                "/validate-workload-ai-v1alpha1-modelserving",
                "workload"
            ),
            router("modelroute"),
            router("modelserver"),
            router("externalmodelprovider"),
        ]
    );
    assert_eq!(
        hooks(
            "MutatingWebhookConfiguration",
            "kthena-controller-manager-mutating-webhook"
        )?,
        [
            hook(
                "mutate-modelbooster.volcano.sh",
                "/mutate/modelbooster",
                "workload"
            ),
            hook(
                "mutate-autoscalingpolicy.volcano.sh",
                "/mutate/autoscalingpolicy",
                "workload"
            ),
        ]
    );
    Ok(())
}

/// Without the router's webhook, only the workload kinds are validated.
#[test]
fn router_webhook_disabled_leaves_the_workload_kinds() -> Result<()> {
    let docs = render(&chart(), &["networking.kthenaRouter.webhook.enabled=false"])?;
    let cfg = find(
        &docs,
        "ValidatingWebhookConfiguration",
        "kthena-controller-manager-validating-webhook",
    )?;
    assert_eq!(cfg["webhooks"].as_array().map(Vec::len), Some(3));
    Ok(())
}

#[test]
fn session_boost_and_fairness_set_go_environment() -> Result<()> {
    let tail = [
        "ACCESS_LOG_ENABLED=true",
        "ACCESS_LOG_FORMAT=text",
        "ACCESS_LOG_OUTPUT=stdout",
        "DRAIN_TIMEOUT=5m",
    ];
    let docs = render(&chart(), SESSION_BOOST)?;
    let mut expected = vec![
        "ENABLE_SESSION_BOOST=true",
        "SESSION_BOOST_HEADER=X-Conversation",
        "SESSION_BOOST_MAX_SESSIONS=4096",
        "SESSION_BOOST_GRACE_PERIOD=2s",
        "SESSION_BOOST_TIMEOUT=30s",
    ];
    expected.extend(tail);
    assert_eq!(literal_env(&docs, "kthena-router")?, expected);
    assert_eq!(env_of(&docs, "kthena-router")?[..4], base_env()[..]);

    let docs = render(&chart(), FAIRNESS)?;
    let mut expected = vec![
        "ENABLE_FAIRNESS_SCHEDULING=true",
        "FAIRNESS_WINDOW_SIZE=10m",
        "FAIRNESS_INPUT_TOKEN_WEIGHT=1",
        "FAIRNESS_OUTPUT_TOKEN_WEIGHT=2",
        "FAIRNESS_MAX_CONCURRENT=64",
    ];
    expected.extend(tail);
    assert_eq!(literal_env(&docs, "kthena-router")?, expected);
    Ok(())
}

#[test]
fn gateway_api_sets_the_flags_and_the_rights() -> Result<()> {
    let groups = |docs: &[Value]| -> Result<Vec<String>> {
        let rules = find(docs, "ClusterRole", "kthena-router")?["rules"].clone();
        let mut all: Vec<String> = rules
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .flat_map(|r| strings(&r["resources"]))
            .collect();
        all.sort();
        Ok(all)
    };
    let docs = render(&chart(), GATEWAY_API)?;
    let args = args_of(&docs, "kthena-router")?;
    assert_eq!(
        args[4..8],
        [
            "--enable-webhook=false",
            "--enable-gateway-api=true",
            "--enable-gateway-api-inference-extension=true",
            "--webhook-port=8443",
        ]
    );
    assert_eq!(
        args[args.len() - 2..],
        ["--kube-api-qps=50", "--kube-api-burst=100"]
    );
    let with = groups(&docs)?;
    for r in [
        "gatewayclasses",
        "gateways",
        "httproutes",
        "gateways/status",
        "httproutes/status",
        "inferencepools",
        "namespaces",
    ] {
        assert!(with.iter().any(|x| x == r), "{r} missing from {with:?}");
    }
    let without = groups(&render(&chart(), &[])?)?;
    assert!(
        !without
            .iter()
            .any(|r| r.contains("gateway") || r.contains("inference"))
    );
    Ok(())
}

#[test]
fn cert_manager_mode_creates_issuers_certificates_and_injection() -> Result<()> {
    let docs = render(&chart(), CERT_MANAGER)?;
    let cert = |name: &str| -> Result<(Vec<String>, String, String)> {
        let spec = &find(&docs, "Certificate", name)?["spec"];
        let s = |v: &Value| v.as_str().unwrap_or_default().to_owned();
        Ok((
            strings(&spec["dnsNames"]),
            s(&spec["issuerRef"]["name"]),
            s(&spec["secretName"]),
        ))
    };
    let svc = |s: &str| {
        vec![
            format!("{s}.kthena-system.svc"),
            format!("{s}.kthena-system.svc.cluster.local"),
        ]
    };
    assert_eq!(
        cert("kthena-controller-manager-webhook-cert")?,
        (
            svc("kthena-controller-manager-webhook"),
            "kthena-controller-manager-webhook-issuer".into(),
            "kthena-controller-manager-webhook-certs".into()
        )
    );
    assert_eq!(
        cert("kthena-router-cert")?,
        (
            vec!["kthena-router.kthena-system.svc".into()],
            "kthena-router-issuer".into(),
            "kthena-router-tls".into()
        )
    );
    for issuer in [
        "kthena-controller-manager-webhook-issuer",
        "kthena-router-issuer",
    ] {
        assert_eq!(
            find(&docs, "Issuer", issuer)?["spec"],
            json!({"selfSigned": {}})
        );
    }
    for (kind, name, from) in [
        (
            "ValidatingWebhookConfiguration",
            "kthena-controller-manager-validating-webhook",
            "kthena-controller-manager-webhook-cert",
        ),
        (
            "MutatingWebhookConfiguration",
            "kthena-controller-manager-mutating-webhook",
            "kthena-controller-manager-webhook-cert",
        ),
    ] {
        assert_eq!(
            find(&docs, kind, name)?["metadata"]["annotations"],
            json!({"cert-manager.io/inject-ca-from": format!("kthena-system/{from}")})
        );
    }
    Ok(())
}

#[test]
fn cert_manager_tls_serves_the_router_over_https() -> Result<()> {
    let docs = render(&chart(), CERT_MANAGER)?;
    let args = args_of(&docs, "kthena-router")?;
    assert_eq!(
        args[args.len() - 2..],
        [
            "--tls-cert=/etc/router-tls/tls.crt",
            "--tls-key=/etc/router-tls/tls.key"
        ]
    );
    let c = container(find(&docs, "Deployment", "kthena-router")?);
    assert_eq!(
        c["livenessProbe"]["httpGet"],
        json!({"path": "/healthz", "port": 8080, "scheme": "HTTPS"})
    );
    assert_eq!(
        c["volumeMounts"][1],
        json!({"name": "router-tls-certs", "mountPath": "/etc/router-tls", "readOnly": true})
    );
    // Without `tls.enabled`, cert-manager mode leaves the router on plain HTTP.
    let docs = render(&chart(), &CERT_MANAGER[..1])?;
    assert!(
        !args_of(&docs, "kthena-router")?
            .iter()
            .any(|a| a.starts_with("--tls-"))
    );
    assert!(find(&docs, "Certificate", "kthena-router-cert").is_err());
    Ok(())
}

#[test]
fn redis_and_image_values() -> Result<()> {
    // Redis is Go's: an optional `redis-config` ConfigMap and `redis-secret` Secret of the
    // release namespace, whatever the other values.
    for sets in [&[][..], SESSION_BOOST, GATEWAY_API, CERT_MANAGER] {
        assert_eq!(
            env_of(&render(&chart(), sets)?, "kthena-router")?[..4],
            base_env()[..]
        );
    }
    let image = |sets: &[&str], name: &str| -> Result<Value> {
        Ok(container(find(&render(&chart(), sets)?, "Deployment", name)?)["image"].clone())
    };
    assert_eq!(
        image(
            &["global.imageRegistry=registry.local:5000/kthena"],
            "kthena-router"
        )?,
        format!("registry.local:5000/kthena/kthena-router:{APP_VERSION}")
    );
    // A Go values file's full repository is used as it is.
    let go = [
        "workload.controllerManager.image.repository=ghcr.io/volcano-sh/kthena-controller-manager",
        "workload.controllerManager.image.tag=v1.0.0",
    ];
    assert_eq!(
        image(&go, "kthena-controller-manager")?,
        "ghcr.io/volcano-sh/kthena-controller-manager:v1.0.0"
    );
    Ok(())
}

/// The router's and the controller-manager's args, env and probes are what Go's chart gives
/// for the same values (Go's templates: charts/networking/.../kthena-router/component/
/// deployment.yaml and charts/workload/.../kthena-controller-manager/component/deployment.yaml).
#[test]
fn containers_match_go_chart_for_the_same_values() -> Result<()> {
    for sets in [
        &[][..],
        SESSION_BOOST,
        FAIRNESS,
        GATEWAY_API,
        CERT_MANAGER,
        OPTIONS,
    ] {
        let ours = render(&chart(), sets)?;
        let go = render(&go_chart(), sets)?;
        for name in ["kthena-router", "kthena-controller-manager"] {
            let (a, b) = (
                container(find(&ours, "Deployment", name)?),
                container(find(&go, "Deployment", name)?),
            );
            for key in ["args", "env", "livenessProbe", "readinessProbe"] {
                let mut want = b[key].clone();
                if name == "kthena-router" && key == "args" {
                    // One difference: the controller-manager validates the router's
                    // kinds in this chart, so the router serves no webhook.
                    for arg in want.as_array_mut().into_iter().flatten() {
                        if arg == "--enable-webhook=true" {
                            *arg = "--enable-webhook=false".into();
                        }
                    }
                }
                if name == "kthena-controller-manager" && key == "args" {
                    // The other: scale to zero reads the routers' metrics Service.
                    if let Some(args) = want.as_array_mut() {
                        let svc = "--router-metrics-service=kthena-system/kthena-router-metrics";
                        args.push(svc.into());
                    }
                }
                assert_eq!(a[key], want, "{name} {key} with {sets:?}");
            }
            let mounts = |c: &Value| -> Vec<Value> {
                let list = c["volumeMounts"].as_array().cloned().unwrap_or_default();
                list.iter().map(|m| m["mountPath"].clone()).collect()
            };
            assert_eq!(mounts(a), mounts(b), "{name} mounts with {sets:?}");
        }
    }
    // A Go values file is accepted unchanged.
    let file = go_chart().join("values.yaml");
    let chart = chart();
    let args = [
        "template",
        "kthena",
        chart.to_str().unwrap_or_default(),
        "-f",
        file.to_str().unwrap_or_default(),
    ];
    let out = helm_output(&args)?;
    ensure!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

#[test]
fn values_go_forbids_or_we_do_not_take_are_rejected() -> Result<()> {
    let chart = chart();
    let chart = chart.to_str().unwrap_or_default();
    for (sets, message) in [
        (
            &["networking.kthenaRouter.replica=2"][..],
            "at '/networking/kthenaRouter': additional properties 'replica' not allowed",
        ),
        (
            &["netwrking.enabled=false"][..],
            "at '': additional properties 'netwrking' not allowed",
        ),
        (
            &["global.certManagementMode=vault"][..],
            "at '/global/certManagementMode'",
        ),
        (
            &[
                "networking.kthenaRouter.fairness.enabled=true",
                "networking.kthenaRouter.sessionBoost.enabled=true",
            ][..],
            "networking.kthenaRouter.fairness.enabled and networking.kthenaRouter.sessionBoost.enabled are mutually exclusive",
        ),
        (
            &["global.certManagementMode=manual"][..],
            "A caBundle is required for the kthena-controller-manager validating webhook when certManagementMode is set to 'manual' (global.webhook.caBundle)",
        ),
        (
            &["networking.kthenaRouter.drainTimeout=5 minutes"][..],
            "at '/networking/kthenaRouter/drainTimeout'",
        ),
    ] {
        let mut args = vec!["template", "kthena", chart];
        for set in sets {
            args.extend(["--set", set]);
        }
        let out = helm_output(&args)?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        ensure!(!out.status.success(), "{sets:?} rendered");
        ensure!(stderr.contains(message), "{sets:?}: {stderr}");
    }
    // Manual mode with a CA bundle puts it into every webhook.
    let docs = render(
        &crate::chart_support::chart(),
        &[
            "global.certManagementMode=manual",
            "global.webhook.caBundle=Q0E=",
        ],
    )?;
    for (kind, name, n) in [
        (
            "ValidatingWebhookConfiguration",
            "kthena-controller-manager-validating-webhook",
            6,
        ),
        (
            "MutatingWebhookConfiguration",
            "kthena-controller-manager-mutating-webhook",
            2,
        ),
    ] {
        let hooks = find(&docs, kind, name)?["webhooks"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert_eq!(hooks.len(), n);
        assert!(
            hooks
                .iter()
                .all(|h| h["clientConfig"]["caBundle"] == "Q0E="),
            "{name}"
        );
    }
    Ok(())
}

/// `deploy/` is the chart rendered by `scripts/deploy-manifests.sh` (regenerate it with that
/// script after changing the chart).
#[test]
fn deploy_is_generated_from_the_chart() -> Result<()> {
    let out = std::process::Command::new("bash")
        .arg(root().join("scripts/deploy-manifests.sh"))
        .arg("--check")
        .output()?;
    ensure!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}
