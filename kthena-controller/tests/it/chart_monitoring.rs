//! The chart's monitoring objects (off by default): the ServiceMonitor selects the metrics
//! Service by Go Kthena's label, the PodMonitors select the router pods and the ModelServing
//! pods, and the Grafana ConfigMap holds every dashboard of `charts/kthena/dashboards/`.

use anyhow::{Result, ensure};
use serde_json::{Value, json};

use crate::chart_support::{chart, find, render, root};

const ALL_ON: &[&str] = &[
    "networking.kthenaRouter.metrics.serviceMonitor.enabled=true",
    "networking.kthenaRouter.metrics.serviceMonitor.interval=30s",
    "networking.kthenaRouter.metrics.serviceMonitor.labels.release=kube-prometheus-stack",
    "networking.kthenaRouter.metrics.podMonitor.enabled=true",
    "networking.kthenaRouter.metrics.enginePodMonitor.enabled=true",
    "networking.kthenaRouter.metrics.enginePodMonitor.port=serve",
    "networking.kthenaRouter.grafanaDashboards.enabled=true",
];

/// Whether every label of `selector` is among `labels`.
fn selects(selector: &Value, labels: &Value) -> bool {
    selector
        .as_object()
        .is_some_and(|m| m.iter().all(|(k, v)| &labels[k] == v))
}

#[test]
fn defaults_render_no_monitor_and_no_dashboard() -> Result<()> {
    let docs = render(&chart(), &[])?;
    for kind in ["ServiceMonitor", "PodMonitor"] {
        ensure!(!docs.iter().any(|d| d["kind"] == kind), "{kind} by default");
    }
    ensure!(find(&docs, "ConfigMap", "kthena-grafana-dashboards").is_err());
    Ok(())
}

#[test]
fn monitors_select_the_router_and_the_engines() -> Result<()> {
    let docs = render(&chart(), ALL_ON)?;
    let sm = find(&docs, "ServiceMonitor", "kthena-router")?;
    let svc = find(&docs, "Service", "kthena-router-metrics")?;
    ensure!(
        sm["spec"]["selector"]["matchLabels"]
            == json!({"app.kubernetes.io/component": "kthena-router-metrics"})
    );
    ensure!(selects(
        &sm["spec"]["selector"]["matchLabels"],
        &svc["metadata"]["labels"]
    ));
    ensure!(
        sm["spec"]["endpoints"]
            == json!([{"port": "metrics", "path": "/metrics", "interval": "30s"}])
    );
    ensure!(sm["spec"]["namespaceSelector"] == json!({"matchNames": ["kthena-system"]}));
    ensure!(sm["metadata"]["labels"]["release"] == "kube-prometheus-stack");
    ensure!(svc["spec"]["ports"][0]["name"] == "metrics");

    let pm = find(&docs, "PodMonitor", "kthena-router")?;
    let pod = &find(&docs, "Deployment", "kthena-router")?["spec"]["template"];
    ensure!(selects(
        &pm["spec"]["selector"]["matchLabels"],
        &pod["metadata"]["labels"]
    ));
    let ports = pod["spec"]["containers"][0]["ports"].as_array().cloned();
    ensure!(ports.into_iter().flatten().any(|p| p["name"] == "metrics"));

    let engines = find(&docs, "PodMonitor", "kthena-engines")?;
    ensure!(engines["spec"]["namespaceSelector"] == json!({"any": true}));
    ensure!(
        engines["spec"]["selector"]
            == json!({"matchExpressions": [{"key": "modelserving.volcano.sh/name", "operator": "Exists"}]})
    );
    ensure!(engines["spec"]["podMetricsEndpoints"][0]["port"] == "serve");
    Ok(())
}

#[test]
fn grafana_configmap_holds_every_dashboard() -> Result<()> {
    let docs = render(&chart(), ALL_ON)?;
    let cm = find(&docs, "ConfigMap", "kthena-grafana-dashboards")?;
    ensure!(cm["metadata"]["labels"]["grafana_dashboard"] == "1");
    let dir = root().join("charts/kthena/dashboards");
    let mut files: Vec<String> = std::fs::read_dir(&dir)?
        .map(|e| Ok(e?.file_name().to_string_lossy().into_owned()))
        .collect::<Result<_>>()?;
    files.sort();
    let data = cm["data"].as_object().cloned().unwrap_or_default();
    let keys: Vec<String> = data.keys().cloned().collect();
    ensure!(keys == files, "{keys:?} != {files:?}");
    for (name, text) in &data {
        let shipped = std::fs::read_to_string(dir.join(name))?;
        let text = text.as_str().unwrap_or_default();
        ensure!(text.trim_end() == shipped.trim_end(), "{name} differs");
        let v: Value = serde_json::from_str(text)?;
        ensure!(v["templating"]["list"][0]["name"] == "datasource", "{name}");
    }
    Ok(())
}
