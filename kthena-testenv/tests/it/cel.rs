//! The CEL rules of our CRDs (those of Go Kthena's CRDs, `kthena-api`'s `cel` module), as the
//! real API server enforces them with no admission webhook installed: `kubectl apply` of an
//! object that breaks one fails with Go's message on the rule's field.

use anyhow::{Context as _, Result, bail};
use kthena_testenv::TestNamespace;
use serde_json::{Value, json};

/// `kubectl apply -f` of `doc` in `ns`: `Ok(())`, or the error kubectl printed.
fn apply(ns: &TestNamespace, doc: &Value) -> Result<std::result::Result<(), String>> {
    let tmp = tempfile::NamedTempFile::new()?;
    std::fs::write(tmp.path(), serde_json::to_vec(doc)?)?;
    let out = ns
        .kubectl()
        .arg("apply")
        .arg("-f")
        .arg(tmp.path())
        .output()
        .context("running kubectl")?;
    Ok(if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    })
}

/// Applies `doc` and expects the API server to refuse it on `field` with `message`.
fn refused(ns: &TestNamespace, doc: &Value, field: &str, message: &str) -> Result<()> {
    match apply(ns, doc)? {
        Ok(()) => bail!("accepted, expected `{field}: ... {message}`: {doc}"),
        Err(err) => {
            let want = format!("{field}: Invalid value");
            if !(err.contains(&want) && err.contains(message)) {
                bail!("expected `{want}` and `{message}`, got: {err}");
            }
            Ok(())
        }
    }
}

fn route(spec: &Value) -> Value {
    json!({
        "apiVersion": "networking.serving.volcano.sh/v1alpha1",
        "kind": "ModelRoute",
        "metadata": {"name": "r"},
        "spec": spec,
    })
}

#[tokio::test]
async fn model_route_rules() -> Result<()> {
    let ns = kthena_testenv::namespace("cel-route").await?;
    let to_server = json!([{"targetModels": [{"modelServerName": "s"}]}]);
    refused(
        &ns,
        &route(&json!({"rules": to_server})),
        "spec",
        "ModelName and LoraAdapters cannot both be empty",
    )?;
    refused(
        &ns,
        &route(&json!({"modelName": "", "loraAdapters": [], "rules": to_server})),
        "spec",
        "ModelName and LoraAdapters cannot both be empty",
    )?;
    let both = json!([{"targetModels": [
        {"modelServerName": "s", "externalModelProviderName": "openai"}
    ]}]);
    let neither = json!([{"targetModels": [{"weight": 100}]}]);
    for rules in [both, neither] {
        refused(
            &ns,
            &route(&json!({"modelName": "m", "rules": rules})),
            "spec.rules[0].targetModels[0]",
            "exactly one of modelServerName or externalModelProviderName must be set",
        )?;
    }
    // A LoRA-only route is valid; so is one to a provider.
    let provider = json!([{"targetModels": [{"externalModelProviderName": "openai"}]}]);
    if let Err(err) = apply(
        &ns,
        &route(&json!({"loraAdapters": ["a"], "rules": provider})),
    )? {
        bail!("a LoRA-only route to a provider was refused: {err}");
    }
    ns.kubectl().args(["delete", "modelroute", "r"]).output()?;
    if let Err(err) = apply(&ns, &route(&json!({"modelName": "m", "rules": to_server})))? {
        bail!("a valid route was refused: {err}");
    }
    refused(
        &ns,
        &route(&json!({"modelName": "other", "rules": to_server})),
        "spec.modelName",
        "modelName is immutable",
    )
}

#[tokio::test]
async fn external_model_provider_secret_must_not_be_optional() -> Result<()> {
    let ns = kthena_testenv::namespace("cel-provider").await?;
    let provider = |optional: bool| {
        json!({
            "apiVersion": "networking.serving.volcano.sh/v1alpha1",
            "kind": "ExternalModelProvider",
            "metadata": {"name": "openai"},
            "spec": {
                "providerType": "OpenAI",
                "baseURL": "https://api.openai.com/v1",
                "auth": {"secretRef": {"name": "k", "key": "api-key", "optional": optional}},
            },
        })
    };
    refused(
        &ns,
        &provider(true),
        "spec.auth",
        "secretRef.optional must be false or unset",
    )?;
    if let Err(err) = apply(&ns, &provider(false))? {
        bail!("optional: false was refused: {err}");
    }
    Ok(())
}

fn disaggregated(roles: &[&str], numerator: &str, source: &Value) -> Value {
    let roles: serde_json::Map<String, Value> = roles
        .iter()
        .map(|r| {
            let role = json!({
                "minReplicas": 1,
                "maxReplicas": 4,
                "metrics": [{"name": "rps", "targetValue": "1"}],
                "metricSources": {"rps": source},
            });
            ((*r).to_owned(), role)
        })
        .collect();
    json!({
        "apiVersion": "workload.serving.volcano.sh/v1alpha1",
        "kind": "AutoscalingPolicy",
        "metadata": {"name": "p"},
        "spec": {"disaggregatedTarget": {
            "targetRef": {"kind": "ModelServing", "name": "ms"},
            "roles": roles,
            "ratioConstraint": {
                "numeratorRole": numerator,
                "denominatorRole": "decode",
                "minRatio": "0.25",
                "maxRatio": "1",
            },
        }},
    })
}

#[tokio::test]
async fn autoscaling_policy_rules() -> Result<()> {
    let ns = kthena_testenv::namespace("cel-policy").await?;
    let prom = json!({"prometheus": {"serverURL": "http://prom:9090", "query": "up"}});
    refused(
        &ns,
        &disaggregated(&["decode"], "prefill", &prom),
        "spec.disaggregatedTarget",
        "roles must contain at least two entries when ratioConstraint is configured",
    )?;
    // The CRD's own limit (Go's `maxProperties: 2`), checked before the rules.
    match apply(
        &ns,
        &disaggregated(&["a", "decode", "prefill"], "prefill", &prom),
    )? {
        Ok(()) => bail!("three roles were accepted"),
        Err(err) => assert!(
            err.contains("spec.disaggregatedTarget.roles: Too many: 3: must have at most 2 items"),
            "{err}"
        ),
    }
    refused(
        &ns,
        &disaggregated(&["prefill", "decode"], "decode", &prom),
        "spec.disaggregatedTarget.ratioConstraint",
        "numeratorRole and denominatorRole must differ",
    )?;
    refused(
        &ns,
        &disaggregated(&["prefill", "decode"], "prefill", &json!({})),
        "spec.disaggregatedTarget.roles[decode].metricSources[rps]",
        "one metric source backend config is required",
    )?;
    let both = json!({"pod": {"port": 8000}, "prometheus": prom["prometheus"]});
    refused(
        &ns,
        &disaggregated(&["prefill", "decode"], "prefill", &both),
        "spec.disaggregatedTarget.roles[decode].metricSources[rps]",
        "pod and prometheus configs are mutually exclusive",
    )?;
    let homogeneous = json!({
        "apiVersion": "workload.serving.volcano.sh/v1alpha1",
        "kind": "AutoscalingPolicy",
        "metadata": {"name": "h"},
        "spec": {
            "metrics": [{"name": "rps", "targetValue": "1"}],
            "homogeneousTarget": {
                "target": {
                    "targetRef": {"kind": "ModelServing", "name": "ms"},
                    "metricSources": {"rps": both},
                },
                "minReplicas": 1,
                "maxReplicas": 4,
            },
        },
    });
    refused(
        &ns,
        &homogeneous,
        "spec.homogeneousTarget.target.metricSources[rps]",
        "pod and prometheus configs are mutually exclusive",
    )?;
    if let Err(err) = apply(
        &ns,
        &disaggregated(&["prefill", "decode"], "prefill", &prom),
    )? {
        bail!("a valid disaggregated policy was refused: {err}");
    }
    Ok(())
}

fn serving(roles: &[&str], gang: Option<Value>) -> Value {
    let roles: Vec<Value> = roles
        .iter()
        .map(|name| {
            json!({
                "name": name,
                "replicas": 1,
                "entryTemplate": {"spec": {"containers": [{"name": "engine", "image": "vllm"}]}},
                "workerReplicas": 0,
            })
        })
        .collect();
    let mut template = json!({"roles": roles});
    if let Some(g) = gang {
        template["gangPolicy"] = g;
    }
    json!({
        "apiVersion": "workload.serving.volcano.sh/v1alpha1",
        "kind": "ModelServing",
        "metadata": {"name": "ms"},
        "spec": {"replicas": 1, "template": template},
    })
}

#[tokio::test]
async fn model_serving_rules() -> Result<()> {
    let ns = kthena_testenv::namespace("cel-serving").await?;
    refused(
        &ns,
        &serving(&["decode", "decode"], None),
        "spec.template.roles",
        "roles name must be unique",
    )?;
    let gang = |n: u32| json!({"minRoleReplicas": {"decode": n}});
    if let Err(err) = apply(&ns, &serving(&["decode"], Some(gang(1))))? {
        bail!("a valid ModelServing was refused: {err}");
    }
    refused(
        &ns,
        &serving(&["decode"], Some(gang(2))),
        "spec.template.gangPolicy.minRoleReplicas",
        "minRoleReplicas is immutable",
    )?;
    // `kubectl apply` removes a field it set before when the new file leaves it out.
    refused(
        &ns,
        &serving(&["decode"], None),
        "spec.template",
        "gangPolicy is required once set",
    )
}

/// An AutoscalingPolicy named `name` whose target of `kind` has `minReplicas: 5` and
/// `maxReplicas: 2`.
fn min_above_max(name: &str, kind: &str) -> Value {
    let target = json!({"targetRef": {"kind": "ModelServing", "name": "ms"},
                        "metricSources": {"rps": {"pod": {"port": 8000}}}});
    let spec = match kind {
        "homogeneousTarget" => json!({"minReplicas": 5, "maxReplicas": 2, "target": target}),
        "heterogeneousTarget" => json!({"params": [
            {"minReplicas": 5, "maxReplicas": 2, "cost": 1, "target": target}
        ]}),
        _ => json!({"targetRef": {"kind": "ModelServing", "name": "ms"},
                    "roles": {"decode": {"minReplicas": 5, "maxReplicas": 2,
                                         "metricSources": {"rps": {"pod": {"port": 8000}}}}}}),
    };
    json!({
        "apiVersion": "workload.serving.volcano.sh/v1alpha1",
        "kind": "AutoscalingPolicy",
        "metadata": {"name": name},
        "spec": {"metrics": [{"name": "rps", "targetValue": "1"}], kind: spec},
    })
}

#[tokio::test]
async fn min_replicas_above_max_replicas_is_refused() -> Result<()> {
    let ns = kthena_testenv::namespace("cel-minmax").await?;
    for (name, kind, field) in [
        ("h", "homogeneousTarget", "spec.homogeneousTarget"),
        (
            "x",
            "heterogeneousTarget",
            "spec.heterogeneousTarget.params[0]",
        ),
        (
            "d",
            "disaggregatedTarget",
            "spec.disaggregatedTarget.roles[decode]",
        ),
    ] {
        refused(
            &ns,
            &min_above_max(name, kind),
            field,
            "minReplicas must be <= maxReplicas",
        )?;
    }
    Ok(())
}

/// `kubectl <verb...> -f` of `doc` in `ns`: `Ok(())`, or the error kubectl printed.
fn kubectl_file(
    ns: &TestNamespace,
    verb: &[&str],
    doc: &Value,
) -> Result<std::result::Result<(), String>> {
    let tmp = tempfile::NamedTempFile::new()?;
    std::fs::write(tmp.path(), serde_json::to_vec(doc)?)?;
    let out = ns
        .kubectl()
        .args(verb)
        .arg("-f")
        .arg(tmp.path())
        .output()
        .context("running kubectl")?;
    Ok(if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    })
}

/// `replicas: null` (an empty Helm value) is pruned by the API server and defaulted to 1, as
/// with Go Kthena's CRD, whether created or server-side applied (client-side `kubectl
/// apply` drops nulls itself). A created null optional object is pruned too (server-side
/// apply refuses a null object inside a list item, with Go's CRD as with ours).
#[tokio::test]
async fn null_replicas_is_accepted_and_defaulted() -> Result<()> {
    let ns = kthena_testenv::namespace("null-replicas").await?;
    for (name, verb) in [
        ("created", &["create"][..]),
        ("applied", &["apply", "--server-side"][..]),
    ] {
        let mut ms = serving(&["decode"], None);
        ms["metadata"]["name"] = json!(name);
        ms["spec"]["replicas"] = Value::Null;
        if name == "created" {
            ms["spec"]["template"]["roles"][0]["workerTemplate"] = Value::Null;
        }
        if let Err(err) = kubectl_file(&ns, verb, &ms)? {
            bail!("{verb:?}: replicas: null was refused: {err}");
        }
        let got: kthena_api::ModelServing = ns.api().get(name).await?;
        assert_eq!(got.spec.replicas, Some(1), "{verb:?}");
        assert!(got.spec.template.roles[0].worker_template.is_none());
    }
    Ok(())
}
