//! Manifest loading: typed and foreign documents, JSON input, and where parse errors point.

use anyhow::{Result, bail};
use kthena_api::{
    Error, Object, ParseError, load_file, load_str, load_str_each, validate_manifests,
};

const MIXED: &str = r#"# a comment before the first document
---
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelServer
metadata:
  name: ds
  namespace: llm
spec:
  model: deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B
  inferenceEngine: vLLM
  workloadSelector:
    matchLabels: {app: ds}
  workloadPort: {port: 8000}
  trafficPolicy: {timeout: 10s}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: ds
spec:
  replicas: 2
---
---
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelRoute
metadata: {name: ds}
spec:
  modelName: deepseek
  rules:
  - targetModels:
    - modelServerName: ds
      weight: 30
"#;

fn parse_error(e: Error) -> Result<ParseError> {
    match e {
        Error::Parse(p) => Ok(*p),
        other => bail!("expected a parse error, got {other}"),
    }
}

#[test]
fn loads_typed_and_foreign_documents() -> Result<()> {
    let docs = load_str("mixed.yaml", MIXED)?;
    let summary: Vec<(usize, u64, &str, &str)> = docs
        .iter()
        .map(|d| (d.index, d.line, d.object.kind(), d.object.name()))
        .collect();
    assert_eq!(
        summary,
        [
            (1, 3, "ModelServer", "ds"),
            (2, 16, "Deployment", "ds"),
            (3, 24, "ModelRoute", "ds")
        ]
    );
    let Object::ModelServer(server) = &docs[0].object else {
        bail!("expected a ModelServer")
    };
    assert_eq!(server.spec.workload_port.port, 8000);
    assert_eq!(
        server.spec.model.as_deref(),
        Some("deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B")
    );
    let timeout = server
        .spec
        .traffic_policy
        .as_ref()
        .and_then(|t| t.timeout.as_ref())
        .map(|d| d.parse());
    assert_eq!(timeout, Some(Ok(std::time::Duration::from_secs(10))));
    assert_eq!(docs[0].object.namespace(), "llm");
    let Object::Foreign(deploy) = &docs[1].object else {
        bail!("expected a foreign object")
    };
    assert_eq!(deploy.data["spec"]["replicas"], 2);
    assert_eq!(docs[1].object.api_version(), "apps/v1");
    assert!(!docs[1].object.is_kthena());
    let Object::ModelRoute(route) = &docs[2].object else {
        bail!("expected a ModelRoute")
    };
    assert_eq!(route.spec.rules[0].target_models[0].weight, Some(30));
    assert_eq!(docs[2].object.namespace(), "default");
    Ok(())
}

#[test]
fn loads_json() -> Result<()> {
    let json = r#"{"apiVersion": "workload.serving.volcano.sh/v1alpha1", "kind": "AutoscalingPolicy",
        "metadata": {"name": "p"},
        "spec": {"metrics": [{"name": "kv", "targetValue": 10}],
                 "homogeneousTarget": {"target": {"targetRef": {"name": "ms"}}, "minReplicas": 1, "maxReplicas": 3}}}"#;
    let docs = load_str("p.json", json)?;
    let Object::AutoscalingPolicy(p) = docs[0].object.clone().with_defaults() else {
        bail!("expected a policy")
    };
    assert_eq!(p.spec.metrics[0].target_value.0, "10");
    assert_eq!(p.spec.tolerance_percent, Some(10));
    // Omitted behavior: the mutating webhook's defaults.
    let behavior = p.spec.behavior.clone().unwrap_or_default();
    let down = behavior.scale_down.unwrap_or_default();
    assert_eq!((down.instances, down.percent), (Some(0), Some(100)));
    assert_eq!(
        down.stabilization_window.map(|d| d.0),
        Some("5m".to_owned())
    );
    let up = behavior.scale_up.unwrap_or_default();
    assert_eq!(up.stable_policy.and_then(|s| s.instances), Some(4));
    assert_eq!(
        up.panic_policy.and_then(|p| p.panic_mode_hold).map(|d| d.0),
        Some("0s".to_owned())
    );
    Ok(())
}

#[test]
fn partial_behavior_gets_crd_defaults() -> Result<()> {
    let yaml = "
apiVersion: workload.serving.volcano.sh/v1alpha1
kind: AutoscalingPolicy
metadata: {name: p}
spec:
  behavior:
    scaleUp:
      panicPolicy: {period: 10s}
    scaleDown: {}
";
    let docs = load_str("p.yaml", yaml)?;
    let Object::AutoscalingPolicy(p) = docs[0].object.clone().with_defaults() else {
        bail!("expected a policy")
    };
    let b = p.spec.behavior.clone().unwrap_or_default();
    let down = b.scale_down.unwrap_or_default();
    assert_eq!((down.instances, down.percent), (Some(1), Some(100)));
    assert_eq!(down.period.map(|d| d.0), Some("15s".to_owned()));
    assert_eq!(
        down.stabilization_window.map(|d| d.0),
        Some("5m".to_owned())
    );
    let up = b.scale_up.unwrap_or_default();
    let panic = up.panic_policy.unwrap_or_default();
    assert_eq!(
        (panic.percent, panic.panic_threshold_percent),
        (Some(1000), Some(200))
    );
    assert_eq!(panic.panic_mode_hold.map(|d| d.0), Some("60s".to_owned()));
    assert_eq!(up.stable_policy.and_then(|s| s.instances), Some(4));
    Ok(())
}

#[test]
fn decode_error_names_file_document_line_column_and_path() -> Result<()> {
    let yaml = "apiVersion: v1
kind: Service
metadata: {name: svc}
---
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelRoute
metadata: {name: r}
spec:
  modelName: m
  rules:
  - targetModels:
    - modelServerName: s
      weight: heavy
";
    let err = parse_error(load_str("route.yaml", yaml).map(|_| ()).unwrap_err())?;
    assert_eq!(
        err,
        ParseError {
            source: "route.yaml".to_owned(),
            document: 2,
            line: 13,
            column: 15,
            path: "spec.rules[0].targetModels[0].weight".to_owned(),
            message: "invalid type: string \"heavy\", expected u32".to_owned(),
        }
    );
    assert_eq!(
        err.to_string(),
        "route.yaml: document 2, line 13, column 15, field spec.rules[0].targetModels[0].weight: invalid type: string \"heavy\", expected u32"
    );
    Ok(())
}

#[test]
fn unknown_enum_value_and_missing_field_are_located() -> Result<()> {
    let yaml = "apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelServer
metadata: {name: s}
spec:
  inferenceEngine: TGI
  workloadSelector: {}
  workloadPort: {port: 80}
---
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelServer
metadata: {name: s}
spec:
  inferenceEngine: SGLang
  workloadSelector: {}
";
    let results = load_str_each("s.yaml", yaml);
    assert_eq!(results.len(), 2);
    let mut errors = Vec::new();
    for r in results {
        errors.push(parse_error(r.map(|_| ()).unwrap_err())?);
    }
    assert_eq!(
        (errors[0].document, errors[0].line, errors[0].column),
        (1, 5, 20)
    );
    assert_eq!(errors[0].path, "spec.inferenceEngine");
    assert_eq!(
        errors[0].message,
        "unknown variant `TGI`, expected `vLLM` or `SGLang`"
    );
    assert_eq!(
        (errors[1].document, errors[1].line, errors[1].path.as_str()),
        (2, 13, "spec")
    );
    assert_eq!(errors[1].message, "missing field `workloadPort`");
    Ok(())
}

#[test]
fn yaml_syntax_error_is_located() -> Result<()> {
    let yaml = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\napiVersion: v1\nkind: [unclosed\n";
    let results = load_str_each("bad.yaml", yaml);
    assert_eq!(results.len(), 2);
    assert!(results[0].is_ok());
    let Some(Err(err)) = results.into_iter().nth(1) else {
        bail!("expected a failed second document")
    };
    let err = parse_error(err)?;
    assert_eq!(
        (err.source.as_str(), err.document, err.path.as_str()),
        ("bad.yaml", 2, "")
    );
    assert_eq!(err.line, 6);
    assert!(!err.message.is_empty());
    Ok(())
}

#[test]
fn document_without_kind_is_an_error() -> Result<()> {
    let err = parse_error(
        load_str("x.yaml", "apiVersion: v1\nmetadata: {name: a}\n")
            .map(|_| ())
            .unwrap_err(),
    )?;
    assert_eq!(
        (err.document, err.path.as_str(), err.message.as_str()),
        (1, "kind", "missing field `kind`")
    );
    Ok(())
}

#[test]
fn legacy_octal_numbers_read_as_kubernetes_does() -> Result<()> {
    let yaml = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\ndata: {}\nmode: 0777\n";
    let docs = load_str("cm.yaml", yaml)?;
    let Object::Foreign(cm) = &docs[0].object else {
        bail!("expected a foreign object")
    };
    assert_eq!(cm.data["mode"], 511);
    Ok(())
}

#[test]
fn missing_file_is_an_io_error() {
    let err = load_file("/nonexistent/kthena.yaml")
        .map(|_| ())
        .unwrap_err();
    assert!(matches!(err, Error::Io { .. }));
    assert!(
        err.to_string()
            .starts_with("cannot read /nonexistent/kthena.yaml: ")
    );
}

#[test]
fn validate_report_lines() {
    let yaml = format!(
        "{MIXED}---
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelRoute
metadata: {{name: bad}}
spec:
  loraAdapters: ['']
  rules:
  - targetModels: [{{modelServerName: a, externalModelProviderName: b}}]
---
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelServer
metadata: {{name: broken}}
spec: {{inferenceEngine: vLLM, workloadSelector: {{}}, workloadPort: {{port: eighty}}}}
"
    );
    let report = validate_manifests("all.yaml", &yaml);
    assert_eq!(
        report.lines,
        [
            "ok networking.serving.volcano.sh/v1alpha1 ModelServer llm/ds",
            "skip apps/v1 Deployment ds",
            "ok networking.serving.volcano.sh/v1alpha1 ModelRoute default/ds",
            "invalid ModelRoute bad: spec.loraAdapters[0]: lora adapter name cannot be an empty string",
            "invalid ModelRoute bad: spec.rules[0].targetModels[0]: exactly one of modelServerName or externalModelProviderName must be set",
            "invalid ModelRoute bad: spec.rules[0].targetModels[0].externalModelProviderName: LoRA routes cannot target an ExternalModelProvider",
            "error all.yaml: document 5, line 45, column 74, field spec.workloadPort.port: invalid type: string \"eighty\", expected i32",
        ]
    );
    assert!(report.failed);
    let ok = validate_manifests("mixed.yaml", MIXED);
    assert!(!ok.failed);
}

#[test]
fn unknown_fields_are_reported_not_rejected() -> Result<()> {
    let yaml = "apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelRoute
metadata: {name: r}
spec:
  modelName: m
  retries: 3
  rules:
  - targetModels:
    - modelServerName: s
      weigth: 20
";
    let docs = load_str("r.yaml", yaml)?;
    assert_eq!(
        docs[0].unknown_fields,
        ["spec.retries", "spec.rules[0].targetModels[0].weigth"]
    );
    let report = validate_manifests("r.yaml", yaml);
    assert_eq!(
        report.lines,
        ["ok networking.serving.volcano.sh/v1alpha1 ModelRoute default/r"]
    );
    assert_eq!(
        report.warnings,
        [
            "r.yaml: document 1: unknown field spec.retries",
            "r.yaml: document 1: unknown field spec.rules[0].targetModels[0].weigth"
        ]
    );
    assert!(!report.failed);
    Ok(())
}

#[test]
fn a_document_without_api_version_or_kind_is_an_error_not_a_skip() {
    // kubectl refuses such a document ("apiVersion not set"); reporting it as a skipped
    // foreign object would let a ModelRoute with a forgotten apiVersion pass unnoticed.
    let yaml = "kind: ModelRoute
metadata: {name: r}
spec: {modelName: m, rules: [{targetModels: [{modelServerName: s}]}]}
---
apiVersion: v1
metadata: {name: c}
";
    let report = validate_manifests("r.yaml", yaml);
    assert_eq!(
        report.lines,
        [
            "error r.yaml: document 1, line 1, column 1, field apiVersion: missing field `apiVersion`",
            "error r.yaml: document 2, line 5, column 1, field kind: missing field `kind`",
        ]
    );
    assert!(report.failed);
}
