//! Every validation rule (CRD limits, CEL rules, admission webhook rules) with a manifest that
//! passes it and one that breaks it, asserting the exact JSON paths and messages.

use anyhow::{Result, bail};
use kthena_api::{FieldError, Object, decode_value};
use serde_json::{Value, json};

/// Sets the value at a JSON pointer, creating objects on the way; `null` removes the field.
fn set(doc: &mut Value, pointer: &str, value: Value) {
    let mut cur = doc;
    let parts: Vec<&str> = pointer.trim_start_matches('/').split('/').collect();
    for (i, part) in parts.iter().enumerate() {
        let last = i + 1 == parts.len();
        if let Ok(n) = part.parse::<usize>()
            && cur.is_array()
        {
            let arr = cur.as_array_mut().expect("array");
            if last {
                if n < arr.len() {
                    arr[n] = value;
                } else {
                    arr.push(value);
                }
                return;
            }
            cur = &mut arr[n];
            continue;
        }
        if !cur.is_object() {
            *cur = json!({});
        }
        let obj = cur.as_object_mut().expect("object");
        if last {
            if value.is_null() {
                obj.remove(*part);
            } else {
                obj.insert((*part).to_owned(), value);
            }
            return;
        }
        cur = obj.entry((*part).to_owned()).or_insert_with(|| json!({}));
    }
}

fn edit(mut doc: Value, edits: &[(&str, Value)]) -> Value {
    for (p, v) in edits {
        set(&mut doc, p, v.clone());
    }
    doc
}

/// Decodes, defaults and validates; returns the problems as `(path, message)`.
fn problems(doc: Value) -> Result<Vec<(String, String)>> {
    let obj = decode_value("test", doc)?.with_defaults();
    Ok(match obj.validate() {
        Ok(()) => Vec::new(),
        Err(errors) => errors
            .into_iter()
            .map(|FieldError { path, message }| (path, message))
            .collect(),
    })
}

struct Case {
    rule: &'static str,
    pass: Vec<(&'static str, Value)>,
    fail: Vec<(&'static str, Value)>,
    expect: Vec<(&'static str, String)>,
}

fn case(
    rule: &'static str,
    pass: Vec<(&'static str, Value)>,
    fail: Vec<(&'static str, Value)>,
    expect: &[(&'static str, &str)],
) -> Case {
    Case {
        rule,
        pass,
        fail,
        expect: expect.iter().map(|(p, m)| (*p, (*m).to_owned())).collect(),
    }
}

fn run(base: &Value, cases: Vec<Case>) -> Result<()> {
    let base_problems = problems(base.clone())?;
    if !base_problems.is_empty() {
        bail!("base manifest is invalid: {base_problems:?}");
    }
    let mut failures = Vec::new();
    for c in cases {
        let passing = problems(edit(base.clone(), &c.pass))?;
        if !passing.is_empty() {
            failures.push(format!(
                "{}: passing manifest rejected: {passing:?}",
                c.rule
            ));
        }
        let failing = problems(edit(base.clone(), &c.fail))?;
        let expect: Vec<(String, String)> = c
            .expect
            .iter()
            .map(|(p, m)| ((*p).to_owned(), m.clone()))
            .collect();
        if failing != expect {
            failures.push(format!(
                "{}:\n  expected {expect:?}\n  got      {failing:?}",
                c.rule
            ));
        }
    }
    if !failures.is_empty() {
        bail!("{}", failures.join("\n"));
    }
    Ok(())
}

fn strings(n: usize, prefix: &str) -> Value {
    Value::Array((0..n).map(|i| json!(format!("{prefix}{i}"))).collect())
}

// ---------------------------------------------------------------------------------------------
// ModelRoute
// ---------------------------------------------------------------------------------------------

fn model_route() -> Value {
    json!({
        "apiVersion": "networking.serving.volcano.sh/v1alpha1",
        "kind": "ModelRoute",
        "metadata": {"name": "r", "namespace": "default"},
        "spec": {"modelName": "m", "rules": [{"name": "default", "targetModels": [{"modelServerName": "s"}]}]}
    })
}

fn target(name: &str) -> Value {
    json!({"modelServerName": name})
}

#[test]
fn model_route_rules() -> Result<()> {
    let t16: Vec<Value> = (0..16).map(|i| target(&format!("s{i}"))).collect();
    let t17: Vec<Value> = (0..17).map(|i| target(&format!("s{i}"))).collect();
    let rule = json!({"targetModels": [target("s")]});
    run(
        &model_route(),
        vec![
            case(
                "CEL modelName or loraAdapters",
                vec![
                    ("/spec/modelName", json!("")),
                    ("/spec/loraAdapters", json!(["a"])),
                ],
                vec![("/spec/modelName", json!(""))],
                &[("spec", "ModelName and LoraAdapters cannot both be empty")],
            ),
            case(
                "loraAdapters maxItems 10",
                vec![("/spec/loraAdapters", strings(10, "l"))],
                vec![("/spec/loraAdapters", strings(11, "l"))],
                &[("spec.loraAdapters", "must have at most 10 items")],
            ),
            case(
                "webhook: no empty LoRA name",
                vec![("/spec/loraAdapters", json!(["a"]))],
                vec![("/spec/loraAdapters", json!(["a", ""]))],
                &[(
                    "spec.loraAdapters[1]",
                    "lora adapter name cannot be an empty string",
                )],
            ),
            case(
                "parentRefs name required",
                vec![("/spec/parentRefs", json!([{"name": "gw"}]))],
                vec![("/spec/parentRefs", json!([{"name": ""}]))],
                &[("spec.parentRefs[0].name", "must not be empty")],
            ),
            case(
                "parentRefs port 1..65535",
                vec![("/spec/parentRefs", json!([{"name": "gw", "port": 65535}]))],
                vec![("/spec/parentRefs", json!([{"name": "gw", "port": 0}]))],
                &[("spec.parentRefs[0].port", "must be between 1 and 65535")],
            ),
            case(
                "rules maxItems 16",
                vec![("/spec/rules", Value::Array(vec![rule.clone(); 16]))],
                vec![("/spec/rules", Value::Array(vec![rule; 17]))],
                &[("spec.rules", "must have at most 16 items")],
            ),
            case(
                "targetModels minItems 1",
                vec![],
                vec![("/spec/rules/0/targetModels", json!([]))],
                &[("spec.rules[0].targetModels", "must have at least 1 item")],
            ),
            case(
                "targetModels maxItems 16",
                vec![("/spec/rules/0/targetModels", Value::Array(t16))],
                vec![("/spec/rules/0/targetModels", Value::Array(t17))],
                &[("spec.rules[0].targetModels", "must have at most 16 items")],
            ),
            case(
                "CEL exactly one target (both set)",
                vec![(
                    "/spec/rules/0/targetModels/0",
                    json!({"externalModelProviderName": "p"}),
                )],
                vec![(
                    "/spec/rules/0/targetModels/0",
                    json!({"modelServerName": "s", "externalModelProviderName": "p"}),
                )],
                &[(
                    "spec.rules[0].targetModels[0]",
                    "exactly one of modelServerName or externalModelProviderName must be set",
                )],
            ),
            case(
                "CEL exactly one target (none set)",
                vec![],
                vec![(
                    "/spec/rules/0/targetModels/0",
                    json!({"modelServerName": "", "weight": 10}),
                )],
                &[(
                    "spec.rules[0].targetModels[0]",
                    "exactly one of modelServerName or externalModelProviderName must be set",
                )],
            ),
            case(
                "webhook: LoRA routes cannot target external providers",
                vec![("/spec/loraAdapters", json!(["a"]))],
                vec![
                    ("/spec/loraAdapters", json!(["a"])),
                    (
                        "/spec/rules/0/targetModels/0",
                        json!({"externalModelProviderName": "p"}),
                    ),
                ],
                &[(
                    "spec.rules[0].targetModels[0].externalModelProviderName",
                    "LoRA routes cannot target an ExternalModelProvider",
                )],
            ),
            case(
                "weight maximum 100",
                vec![("/spec/rules/0/targetModels/0/weight", json!(100))],
                vec![("/spec/rules/0/targetModels/0/weight", json!(101))],
                &[(
                    "spec.rules[0].targetModels[0].weight",
                    "must be between 0 and 100",
                )],
            ),
            case(
                "webhook: weight sum > 0",
                vec![(
                    "/spec/rules/0/targetModels",
                    json!([{"modelServerName": "a", "weight": 0}, {"modelServerName": "b", "weight": 1}]),
                )],
                vec![(
                    "/spec/rules/0/targetModels",
                    json!([{"modelServerName": "a", "weight": 0}, {"modelServerName": "b", "weight": 0}]),
                )],
                &[(
                    "spec.rules[0].targetModels",
                    "the sum of target weights must be greater than 0",
                )],
            ),
            case(
                "webhook: header regex compiles",
                vec![(
                    "/spec/rules/0/modelMatch/headers/x-user/regex",
                    json!("^vip-[0-9]+$"),
                )],
                vec![("/spec/rules/0/modelMatch/headers/x-user/regex", json!("("))],
                &[(
                    "spec.rules[0].modelMatch.headers[x-user].regex",
                    "invalid regular expression \"(\": unclosed group",
                )],
            ),
            case(
                "webhook: uri regex compiles",
                vec![("/spec/rules/0/modelMatch/uri/regex", json!("^/v1/.*"))],
                vec![("/spec/rules/0/modelMatch/uri/regex", json!("a{2,1}"))],
                &[(
                    "spec.rules[0].modelMatch.uri.regex",
                    "invalid regular expression \"a{2,1}\": invalid repetition count range, the start must be <= the end",
                )],
            ),
            case(
                "rateLimit inputTokensPerUnit minimum 1",
                vec![("/spec/rateLimit", json!({"inputTokensPerUnit": 1}))],
                vec![("/spec/rateLimit", json!({"inputTokensPerUnit": 0}))],
                &[("spec.rateLimit.inputTokensPerUnit", "must be at least 1")],
            ),
            case(
                "rateLimit outputTokensPerUnit minimum 1",
                vec![(
                    "/spec/rateLimit",
                    json!({"outputTokensPerUnit": 1, "unit": "minute"}),
                )],
                vec![("/spec/rateLimit", json!({"outputTokensPerUnit": 0}))],
                &[("spec.rateLimit.outputTokensPerUnit", "must be at least 1")],
            ),
        ],
    )
}

#[test]
fn model_route_name_is_immutable() -> Result<()> {
    let old = decode_value("old", model_route())?;
    let new = decode_value(
        "new",
        edit(model_route(), &[("/spec/modelName", json!("other"))]),
    )?;
    let same = decode_value(
        "same",
        edit(model_route(), &[("/spec/rules/0/name", json!("renamed"))]),
    )?;
    let (Object::ModelRoute(old), Object::ModelRoute(new), Object::ModelRoute(same)) =
        (old, new, same)
    else {
        bail!("expected ModelRoutes");
    };
    assert_eq!(same.validate_update(&old), Ok(()));
    assert_eq!(
        new.validate_update(&old),
        Err(vec![FieldError::new(
            "spec.modelName",
            "modelName is immutable"
        )])
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// ModelServer
// ---------------------------------------------------------------------------------------------

fn model_server() -> Value {
    json!({
        "apiVersion": "networking.serving.volcano.sh/v1alpha1",
        "kind": "ModelServer",
        "metadata": {"name": "s"},
        "spec": {
            "inferenceEngine": "vLLM",
            "workloadSelector": {"matchLabels": {"app": "x"}},
            "workloadPort": {"port": 8000}
        }
    })
}

#[test]
fn model_server_rules() -> Result<()> {
    run(
        &model_server(),
        vec![
            case(
                "model maxLength 256",
                vec![("/spec/model", json!("m".repeat(256)))],
                vec![("/spec/model", json!("m".repeat(257)))],
                &[("spec.model", "must be at most 256 characters")],
            ),
            case(
                "workloadPort.port 1..65535",
                vec![("/spec/workloadPort/port", json!(1))],
                vec![("/spec/workloadPort/port", json!(65536))],
                &[("spec.workloadPort.port", "must be between 1 and 65535")],
            ),
            case(
                "trafficPolicy.timeout is a duration",
                vec![("/spec/trafficPolicy/timeout", json!("1m30s"))],
                vec![("/spec/trafficPolicy/timeout", json!("-5s"))],
                &[(
                    "spec.trafficPolicy.timeout",
                    "invalid duration \"-5s\": must not be negative",
                )],
            ),
            case(
                "retry.retryInterval is a duration",
                vec![("/spec/trafficPolicy/retry/retryInterval", json!("250ms"))],
                vec![("/spec/trafficPolicy/retry/retryInterval", json!("soon"))],
                &[(
                    "spec.trafficPolicy.retry.retryInterval",
                    "invalid duration \"soon\" (expected e.g. \"100ms\" or \"1m30s\"): invalid floating-point number: cannot parse float from empty string",
                )],
            ),
        ],
    )
}

// ---------------------------------------------------------------------------------------------
// ExternalModelProvider
// ---------------------------------------------------------------------------------------------

fn external_provider() -> Value {
    json!({
        "apiVersion": "networking.serving.volcano.sh/v1alpha1",
        "kind": "ExternalModelProvider",
        "metadata": {"name": "openai"},
        "spec": {"baseURL": "https://api.openai.com/v1", "auth": {"secretRef": {"name": "s", "key": "k"}}}
    })
}

#[test]
fn external_model_provider_rules() -> Result<()> {
    run(
        &external_provider(),
        vec![
            case(
                "model maxLength 256",
                vec![("/spec/model", json!("m".repeat(256)))],
                vec![("/spec/model", json!("m".repeat(257)))],
                &[("spec.model", "must be at most 256 characters")],
            ),
            case(
                "baseURL minLength 1",
                vec![],
                vec![("/spec/baseURL", json!(""))],
                &[("spec.baseURL", "must not be empty")],
            ),
            case(
                "baseURL pattern ^https://.+",
                vec![("/spec/baseURL", json!("https://x"))],
                vec![("/spec/baseURL", json!("http://api.openai.com"))],
                &[("spec.baseURL", "must match pattern ^https://.+")],
            ),
            case(
                "CEL secretRef.optional false or unset",
                vec![("/spec/auth/secretRef/optional", json!(false))],
                vec![("/spec/auth/secretRef/optional", json!(true))],
                &[("spec.auth", "secretRef.optional must be false or unset")],
            ),
        ],
    )
}

// ---------------------------------------------------------------------------------------------
// ModelServing
// ---------------------------------------------------------------------------------------------

fn model_serving() -> Value {
    json!({
        "apiVersion": "workload.serving.volcano.sh/v1alpha1",
        "kind": "ModelServing",
        "metadata": {"name": "ms"},
        "spec": {
            "replicas": 1,
            "template": {"roles": [role("prefill")]}
        }
    })
}

fn role(name: &str) -> Value {
    json!({
        "name": name,
        "replicas": 1,
        "workerReplicas": 0,
        "entryTemplate": {"spec": {"containers": [{"name": "engine", "image": "vllm/vllm-openai:v0.10.0"}]}}
    })
}

#[test]
fn model_serving_rules() -> Result<()> {
    let roles = |names: &[&str]| Value::Array(names.iter().map(|n| role(n)).collect());
    let role_rolling = (
        "/spec/rolloutStrategy",
        json!({"type": "RoleRollingUpdate"}),
    );
    let worker = json!({"spec": {"containers": [{"name": "w", "image": "vllm:1"}]}});
    run(
        &model_serving(),
        vec![
            case(
                "webhook: replicas >= 0",
                vec![("/spec/replicas", json!(0))],
                vec![("/spec/replicas", json!(-1))],
                &[("spec.replicas", "replicas must be a non-negative integer")],
            ),
            case(
                "roles minItems 1 / webhook roles non-empty",
                vec![],
                vec![("/spec/template/roles", json!([]))],
                &[("spec.template.roles", "roles must not be empty")],
            ),
            case(
                "roles maxItems 4",
                vec![("/spec/template/roles", roles(&["a", "b", "c", "d"]))],
                vec![("/spec/template/roles", roles(&["a", "b", "c", "d", "e"]))],
                &[("spec.template.roles", "must have at most 4 items")],
            ),
            case(
                "CEL role names unique",
                vec![("/spec/template/roles", roles(&["prefill", "decode"]))],
                vec![("/spec/template/roles", roles(&["prefill", "prefill"]))],
                &[("spec.template.roles", "roles name must be unique")],
            ),
            case(
                "role name maxLength 12",
                vec![("/spec/template/roles/0/name", json!("abcdefghijkl"))],
                vec![("/spec/template/roles/0/name", json!("abcdefghijklm"))],
                &[(
                    "spec.template.roles[0].name",
                    "must be at most 12 characters",
                )],
            ),
            case(
                "webhook: role name DNS-1035",
                vec![("/spec/template/roles/0/name", json!("p-1"))],
                vec![("/spec/template/roles/0/name", json!("1p"))],
                &[(
                    "spec.template.roles[0].name",
                    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character",
                )],
            ),
            case(
                "webhook: generated name is a DNS-1035 label",
                // "<ms>-1-prefill-1-0": 49 + 14 = 63 characters.
                vec![("/metadata/name", json!(format!("m{}", "s".repeat(48))))],
                vec![("/metadata/name", json!(format!("m{}", "s".repeat(49))))],
                &[(
                    "spec.template.roles[0].name",
                    &format!(
                        "generated name \"m{}-1-prefill-1-0\" is not valid: must be no more than 63 characters",
                        "s".repeat(49)
                    ),
                )],
            ),
            case(
                "webhook: role replicas >= 0",
                vec![("/spec/template/roles/0/replicas", json!(0))],
                vec![("/spec/template/roles/0/replicas", json!(-1))],
                &[(
                    "spec.template.roles[0].replicas",
                    "role replicas must be a non-negative integer",
                )],
            ),
            case(
                "webhook: workerReplicas >= 0",
                vec![("/spec/template/roles/0/workerReplicas", json!(0))],
                vec![("/spec/template/roles/0/workerReplicas", json!(-2))],
                &[(
                    "spec.template.roles[0].workerReplicas",
                    "workerReplicas must be a non-negative integer",
                )],
            ),
            case(
                "webhook: workerTemplate required when workerReplicas > 0",
                vec![
                    ("/spec/template/roles/0/workerReplicas", json!(2)),
                    ("/spec/template/roles/0/workerTemplate", worker),
                ],
                vec![("/spec/template/roles/0/workerReplicas", json!(2))],
                &[(
                    "spec.template.roles[0].workerTemplate",
                    "workerTemplate is required when workerReplicas > 0",
                )],
            ),
            case(
                "webhook: image not whitespace-only",
                vec![],
                vec![(
                    "/spec/template/roles/0/entryTemplate/spec/containers/0/image",
                    json!("  "),
                )],
                &[(
                    "spec.template.roles[0].entryTemplate.spec.containers[0].image",
                    "container image must not be empty or whitespace only",
                )],
            ),
            case(
                "webhook: image without spaces",
                vec![],
                vec![(
                    "/spec/template/roles/0/entryTemplate/spec/containers/0/image",
                    json!("vllm :latest"),
                )],
                &[(
                    "spec.template.roles[0].entryTemplate.spec.containers[0].image",
                    "container image must not contain spaces",
                )],
            ),
            case(
                "webhook: rollingUpdateConfiguration only with ServingGroupRollingUpdate",
                vec![(
                    "/spec/rolloutStrategy",
                    json!({"type": "ServingGroupRollingUpdate", "rollingUpdateConfiguration": {"maxUnavailable": 1}}),
                )],
                vec![(
                    "/spec/rolloutStrategy",
                    json!({"type": "RoleRollingUpdate", "rollingUpdateConfiguration": {"maxUnavailable": 1}}),
                )],
                &[(
                    "spec.rolloutStrategy.rollingUpdateConfiguration",
                    "rollingUpdateConfiguration is not allowed with RoleRollingUpdate",
                )],
            ),
            case(
                "webhook: maxUnavailable int >= 0",
                vec![],
                vec![(
                    "/spec/rolloutStrategy",
                    json!({"rollingUpdateConfiguration": {"maxUnavailable": -1}}),
                )],
                &[(
                    "spec.rolloutStrategy.rollingUpdateConfiguration.maxUnavailable",
                    "must be a non-negative integer",
                )],
            ),
            case(
                "webhook: maxUnavailable percent 0..100%",
                vec![(
                    "/spec/rolloutStrategy",
                    json!({"rollingUpdateConfiguration": {"maxUnavailable": "100%"}}),
                )],
                vec![(
                    "/spec/rolloutStrategy",
                    json!({"rollingUpdateConfiguration": {"maxUnavailable": "150%"}}),
                )],
                &[(
                    "spec.rolloutStrategy.rollingUpdateConfiguration.maxUnavailable",
                    "percentage must be between 0% and 100%",
                )],
            ),
            case(
                "webhook: maxUnavailable int or percent",
                vec![],
                vec![(
                    "/spec/rolloutStrategy",
                    json!({"rollingUpdateConfiguration": {"maxUnavailable": "half"}}),
                )],
                &[(
                    "spec.rolloutStrategy.rollingUpdateConfiguration.maxUnavailable",
                    "invalid value \"half\": must be an integer or a percentage",
                )],
            ),
            case(
                "webhook: maxUnavailable must not resolve to 0 (percent rounded down)",
                vec![
                    ("/spec/replicas", json!(2)),
                    (
                        "/spec/rolloutStrategy",
                        json!({"rollingUpdateConfiguration": {"maxUnavailable": "50%"}}),
                    ),
                ],
                vec![(
                    "/spec/rolloutStrategy",
                    json!({"rollingUpdateConfiguration": {"maxUnavailable": "50%"}}),
                )],
                &[(
                    "spec.rolloutStrategy.rollingUpdateConfiguration.maxUnavailable",
                    "maxUnavailable must not resolve to 0",
                )],
            ),
            case(
                "webhook: partition int >= 0",
                vec![(
                    "/spec/rolloutStrategy",
                    json!({"rollingUpdateConfiguration": {"partition": 0}}),
                )],
                vec![(
                    "/spec/rolloutStrategy",
                    json!({"rollingUpdateConfiguration": {"partition": -3}}),
                )],
                &[(
                    "spec.rolloutStrategy.rollingUpdateConfiguration.partition",
                    "must be a non-negative integer",
                )],
            ),
            case(
                "webhook: role partition only with RoleRollingUpdate",
                vec![
                    role_rolling.clone(),
                    ("/spec/template/roles/0/partition", json!(1)),
                ],
                vec![("/spec/template/roles/0/partition", json!(1))],
                &[(
                    "spec.template.roles[0].partition",
                    "partition is only allowed with RoleRollingUpdate",
                )],
            ),
            case(
                "webhook: role maxUnavailable resolves to 1..replicas",
                vec![
                    role_rolling.clone(),
                    ("/spec/template/roles/0/replicas", json!(2)),
                    ("/spec/template/roles/0/maxUnavailable", json!(2)),
                ],
                vec![
                    role_rolling.clone(),
                    ("/spec/template/roles/0/maxUnavailable", json!(2)),
                ],
                &[(
                    "spec.template.roles[0].maxUnavailable",
                    "maxUnavailable must resolve to between 1 and 1",
                )],
            ),
            case(
                "webhook: gangPolicy roles exist",
                vec![(
                    "/spec/template/gangPolicy/minRoleReplicas",
                    json!({"prefill": 1}),
                )],
                vec![(
                    "/spec/template/gangPolicy/minRoleReplicas",
                    json!({"decode": 1}),
                )],
                &[(
                    "spec.template.gangPolicy.minRoleReplicas[decode]",
                    "role \"decode\" does not exist",
                )],
            ),
            case(
                "webhook: gangPolicy value 0..role replicas",
                vec![(
                    "/spec/template/gangPolicy/minRoleReplicas",
                    json!({"prefill": 0}),
                )],
                vec![(
                    "/spec/template/gangPolicy/minRoleReplicas",
                    json!({"prefill": 2}),
                )],
                &[(
                    "spec.template.gangPolicy.minRoleReplicas[prefill]",
                    "must be between 0 and 1 (the role's replicas)",
                )],
            ),
            case(
                "webhook: recoveryPolicy / rolloutStrategy pair",
                vec![("/spec/recoveryPolicy", json!("ServingGroupRecreate"))],
                vec![
                    ("/spec/recoveryPolicy", json!("ServingGroupRecreate")),
                    role_rolling,
                ],
                &[(
                    "spec.recoveryPolicy",
                    "recoveryPolicy ServingGroupRecreate cannot be used with rolloutStrategy RoleRollingUpdate; valid pairs: (ServingGroupRecreate,ServingGroupRollingUpdate) or (RoleRecreate,RoleRollingUpdate)",
                )],
            ),
            case(
                "networkTopology highestTierAllowed minimum 0",
                vec![(
                    "/spec/template/networkTopology/groupPolicy",
                    json!({"highestTierAllowed": 0}),
                )],
                vec![(
                    "/spec/template/networkTopology/groupPolicy",
                    json!({"highestTierAllowed": -1}),
                )],
                &[(
                    "spec.template.networkTopology.groupPolicy.highestTierAllowed",
                    "must be at least 0",
                )],
            ),
            case(
                "networkTopology highestTierName maxLength 253",
                vec![(
                    "/spec/template/networkTopology/rolePolicy",
                    json!({"highestTierName": "t".repeat(253)}),
                )],
                vec![(
                    "/spec/template/networkTopology/rolePolicy",
                    json!({"highestTierName": "t".repeat(254)}),
                )],
                &[(
                    "spec.template.networkTopology.rolePolicy.highestTierName",
                    "must be at most 253 characters",
                )],
            ),
        ],
    )
}

#[test]
fn model_serving_without_replicas_is_an_error_not_a_panic() -> Result<()> {
    let doc = edit(
        model_serving(),
        &[
            ("/spec/replicas", Value::Null),
            ("/spec/template/roles/0/replicas", Value::Null),
        ],
    );
    let Object::ModelServing(ms) = decode_value("ms.yaml", doc)? else {
        bail!("expected a ModelServing")
    };
    assert_eq!(
        ms.validate(),
        Err(vec![
            FieldError::new("spec.replicas", "replicas must be set"),
            FieldError::new(
                "spec.template.roles[0].replicas",
                "role replicas must be set"
            ),
        ])
    );
    // Defaulting fills both.
    let ms = ms.with_defaults();
    assert_eq!(
        (ms.spec.replicas, ms.spec.template.roles[0].replicas),
        (Some(1), Some(1))
    );
    assert_eq!(ms.validate(), Ok(()));
    Ok(())
}

#[test]
fn model_serving_transition_rules() -> Result<()> {
    let with_gang = edit(
        model_serving(),
        &[(
            "/spec/template/gangPolicy/minRoleReplicas",
            json!({"prefill": 1}),
        )],
    );
    let decode = |v: Value| -> Result<kthena_api::ModelServing> {
        match decode_value("ms", v)? {
            Object::ModelServing(ms) => Ok(*ms),
            _ => bail!("expected a ModelServing"),
        }
    };
    let old = decode(with_gang.clone())?;
    let removed = decode(model_serving())?;
    let changed = decode(edit(
        with_gang.clone(),
        &[(
            "/spec/template/gangPolicy/minRoleReplicas/prefill",
            json!(0),
        )],
    ))?;
    let kept = decode(edit(with_gang, &[("/spec/replicas", json!(3))]))?;
    assert_eq!(kept.validate_update(&old), Ok(()));
    assert_eq!(
        removed.validate_update(&old),
        Err(vec![FieldError::new(
            "spec.template",
            "gangPolicy is required once set"
        )])
    );
    assert_eq!(
        changed.validate_update(&old),
        Err(vec![FieldError::new(
            "spec.template.gangPolicy.minRoleReplicas",
            "minRoleReplicas is immutable"
        )])
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// ModelBooster
// ---------------------------------------------------------------------------------------------

fn model_booster() -> Value {
    json!({
        "apiVersion": "workload.serving.volcano.sh/v1alpha1",
        "kind": "ModelBooster",
        "metadata": {"name": "qwen"},
        "spec": {
            "backend": {
                "name": "qwen-vllm",
                "type": "vLLM",
                "modelURI": "hf://Qwen/Qwen3-0.6B",
                "replicas": 1,
                "workers": [{"type": "server", "image": "vllm:1", "replicas": 1, "pods": 1}]
            }
        }
    })
}

fn pd_workers(prefill_cfg: &Value, decode_cfg: &Value) -> Vec<(&'static str, Value)> {
    vec![
        ("/spec/backend/type", json!("vLLMDisaggregated")),
        (
            "/spec/backend/workers",
            json!([
                {"type": "prefill", "image": "vllm:1", "replicas": 1, "pods": 1, "config": prefill_cfg},
                {"type": "decode", "image": "vllm:1", "replicas": 1, "pods": 1, "config": decode_cfg}
            ]),
        ),
    ]
}

#[test]
fn model_booster_rules() -> Result<()> {
    let kv = |connector: &str, role: &str| json!({"kv-transfer-config": format!("{{\"kv_connector\": \"{connector}\", \"kv_role\": \"{role}\"}}")});
    let dns = "must match pattern ^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";
    run(
        &model_booster(),
        vec![
            case(
                "name maxLength 64",
                vec![("/spec/name", json!("a".repeat(64)))],
                vec![("/spec/name", json!("a".repeat(65)))],
                &[("spec.name", "must be at most 64 characters")],
            ),
            case(
                "name pattern",
                vec![("/spec/name", json!("qwen-3"))],
                vec![("/spec/name", json!("Qwen_3"))],
                &[("spec.name", dns)],
            ),
            case(
                "backend.name pattern",
                vec![("/spec/backend/name", json!("b1"))],
                vec![("/spec/backend/name", json!("-b"))],
                &[("spec.backend.name", dns)],
            ),
            case(
                "modelURI pattern",
                vec![("/spec/backend/modelURI", json!("s3://bucket/model"))],
                vec![(
                    "/spec/backend/modelURI",
                    json!("https://huggingface.co/Qwen"),
                )],
                &[(
                    "spec.backend.modelURI",
                    "must match pattern ^(hf://|s3://|obs://|pvc://|ms://).+",
                )],
            ),
            case(
                "cacheURI pattern",
                vec![("/spec/backend/cacheURI", json!("hostpath://tmp/cache"))],
                vec![("/spec/backend/cacheURI", json!("/tmp/cache"))],
                &[(
                    "spec.backend.cacheURI",
                    "must match pattern ^(hostpath://|pvc://).+",
                )],
            ),
            case(
                "webhook: backend.replicas 0..1000000",
                vec![("/spec/backend/replicas", json!(1_000_000))],
                vec![("/spec/backend/replicas", json!(1_000_001))],
                &[("spec.backend.replicas", "must be between 0 and 1000000")],
            ),
            case(
                "workers minItems 1",
                vec![],
                vec![("/spec/backend/workers", json!([]))],
                &[
                    ("spec.backend.workers", "must have at least 1 item"),
                    (
                        "spec.backend.workers",
                        "backend type vLLM requires exactly one worker of type server",
                    ),
                ],
            ),
            case(
                "worker replicas 0..1000000",
                vec![("/spec/backend/workers/0/replicas", json!(0))],
                vec![("/spec/backend/workers/0/replicas", json!(-1))],
                &[(
                    "spec.backend.workers[0].replicas",
                    "must be between 0 and 1000000",
                )],
            ),
            case(
                "worker pods 0..1000000",
                vec![("/spec/backend/workers/0/pods", json!(1_000_000))],
                vec![("/spec/backend/workers/0/pods", json!(1_000_001))],
                &[(
                    "spec.backend.workers[0].pods",
                    "must be between 0 and 1000000",
                )],
            ),
            case(
                "webhook: worker image not whitespace-only",
                vec![],
                vec![("/spec/backend/workers/0/image", json!(" "))],
                &[(
                    "spec.backend.workers[0].image",
                    "container image must not be empty or whitespace only",
                )],
            ),
            case(
                "webhook: worker image without spaces",
                vec![],
                vec![("/spec/backend/workers/0/image", json!("vllm 1"))],
                &[(
                    "spec.backend.workers[0].image",
                    "container image must not contain spaces",
                )],
            ),
            case(
                "webhook: vLLM has exactly one server worker",
                vec![],
                vec![(
                    "/spec/backend/workers/1",
                    json!({"type": "server", "image": "vllm:1"}),
                )],
                &[(
                    "spec.backend.workers",
                    "backend type vLLM requires exactly one worker of type server",
                )],
            ),
            case(
                "webhook: vLLMDisaggregated has only prefill/decode workers",
                pd_workers(&json!({}), &json!({})),
                vec![("/spec/backend/type", json!("vLLMDisaggregated"))],
                &[(
                    "spec.backend.workers[0].type",
                    "backend type vLLMDisaggregated only allows workers of type prefill or decode",
                )],
            ),
            case(
                "webhook: engine port valid",
                vec![("/spec/backend/workers/0/config", json!({"port": 9000}))],
                vec![("/spec/backend/workers/0/config", json!({"port": 70000}))],
                &[(
                    "spec.backend.workers[0].config.port",
                    "port must be between 1 and 65535",
                )],
            ),
            case(
                "webhook: engine port is an integer",
                vec![("/spec/backend/workers/0/config", json!({"port": "9000"}))],
                vec![("/spec/backend/workers/0/config", json!({"port": "http"}))],
                &[(
                    "spec.backend.workers[0].config.port",
                    "port must be an integer",
                )],
            ),
            case(
                "webhook: engine ports agree",
                pd_workers(&json!({"port": 9000}), &json!({"port": 9000})),
                pd_workers(&json!({"port": 9000}), &json!({})),
                &[(
                    "spec.backend.workers[1].config.port",
                    "all server, prefill and decode workers must use the same port (9000)",
                )],
            ),
            case(
                "webhook: pvc modelURI needs a pvc cacheURI",
                vec![
                    ("/spec/backend/modelURI", json!("pvc://models/qwen")),
                    ("/spec/backend/cacheURI", json!("pvc://models")),
                ],
                vec![("/spec/backend/modelURI", json!("pvc://models/qwen"))],
                &[(
                    "spec.backend.cacheURI",
                    "cacheURI must be a pvc:// URI when modelURI is a pvc:// URI",
                )],
            ),
            case(
                "webhook: pvc cacheURI names a single claim",
                vec![],
                vec![
                    ("/spec/backend/modelURI", json!("pvc://models/qwen")),
                    ("/spec/backend/cacheURI", json!("pvc://models/sub")),
                ],
                &[(
                    "spec.backend.cacheURI",
                    "cacheURI must name a single PVC claim (pvc://<claim>)",
                )],
            ),
            case(
                "webhook: pvc model path under the claim",
                vec![],
                vec![
                    ("/spec/backend/modelURI", json!("pvc://other/qwen")),
                    ("/spec/backend/cacheURI", json!("pvc://models")),
                ],
                &[(
                    "spec.backend.modelURI",
                    "modelURI path must be under the cache claim /models",
                )],
            ),
            case(
                "webhook: pvc model path without ..",
                vec![],
                vec![
                    ("/spec/backend/modelURI", json!("pvc://models/../etc")),
                    ("/spec/backend/cacheURI", json!("pvc://models")),
                ],
                &[("spec.backend.modelURI", "modelURI must not contain '..'")],
            ),
            case(
                "webhook: kv-transfer-config is a JSON object",
                pd_workers(
                    &kv("NixlConnector", "kv_producer"),
                    &kv("NixlConnector", "kv_consumer"),
                ),
                pd_workers(&json!({"kv-transfer-config": "{not json"}), &json!({})),
                &[(
                    "spec.backend.workers[0].config.kv-transfer-config",
                    "kv-transfer-config must be a JSON object",
                )],
            ),
            case(
                "webhook: prefill kv_role producer or both",
                pd_workers(
                    &kv("NixlConnector", "kv_both"),
                    &kv("NixlConnector", "kv_both"),
                ),
                pd_workers(
                    &kv("NixlConnector", "kv_consumer"),
                    &kv("NixlConnector", "kv_consumer"),
                ),
                &[(
                    "spec.backend.workers[0].config.kv-transfer-config.kv_role",
                    "kv_role must be kv_producer or kv_both",
                )],
            ),
            case(
                "webhook: decode kv_role consumer or both",
                vec![],
                pd_workers(
                    &kv("NixlConnector", "kv_producer"),
                    &kv("NixlConnector", "kv_producer"),
                ),
                &[(
                    "spec.backend.workers[1].config.kv-transfer-config.kv_role",
                    "kv_role must be kv_consumer or kv_both",
                )],
            ),
            case(
                "webhook: prefill and decode use the same connector",
                vec![],
                pd_workers(
                    &kv("NixlConnector", "kv_producer"),
                    &kv("LMCacheConnectorV1", "kv_consumer"),
                ),
                &[(
                    "spec.backend.workers[1].config.kv-transfer-config.kv_connector",
                    "prefill and decode workers must use the same kv_connector (NixlConnector)",
                )],
            ),
        ],
    )
}

// ---------------------------------------------------------------------------------------------
// AutoscalingPolicy
// ---------------------------------------------------------------------------------------------

fn homogeneous_policy() -> Value {
    json!({
        "apiVersion": "workload.serving.volcano.sh/v1alpha1",
        "kind": "AutoscalingPolicy",
        "metadata": {"name": "p"},
        "spec": {
            "metrics": [{"name": "kv", "targetValue": "10"}],
            "homogeneousTarget": {
                "target": {"targetRef": {"kind": "ModelServing", "name": "ms"}, "metricSources": {"kv": {"pod": {}}}},
                "minReplicas": 1,
                "maxReplicas": 4
            }
        }
    })
}

fn disaggregated_policy() -> Value {
    json!({
        "apiVersion": "workload.serving.volcano.sh/v1alpha1",
        "kind": "AutoscalingPolicy",
        "metadata": {"name": "pd"},
        "spec": {
            "metrics": [{"name": "kv", "targetValue": "10"}],
            "disaggregatedTarget": {
                "targetRef": {"name": "ms"},
                "roles": {
                    "prefill": {"minReplicas": 1, "maxReplicas": 4, "metricSources": {"kv": {"pod": {}}}},
                    "decode": {"minReplicas": 1, "maxReplicas": 8, "metricSources": {"kv": {"pod": {}}}}
                },
                "ratioConstraint": {"numeratorRole": "prefill", "denominatorRole": "decode", "minRatio": "0.25", "maxRatio": "2"}
            }
        }
    })
}

#[test]
fn autoscaling_policy_rules() -> Result<()> {
    let h = "/spec/homogeneousTarget";
    let src = "/spec/homogeneousTarget/target/metricSources/kv";
    let hetero = json!({"params": [{"target": {"targetRef": {"name": "ms"}}, "cost": 10, "minReplicas": 0, "maxReplicas": 2}]});
    run(
        &homogeneous_policy(),
        vec![
            case(
                "tolerancePercent 0..100",
                vec![("/spec/tolerancePercent", json!(100))],
                vec![("/spec/tolerancePercent", json!(101))],
                &[("spec.tolerancePercent", "must be between 0 and 100")],
            ),
            case(
                "metric name minLength 1",
                vec![],
                vec![("/spec/metrics/0/name", json!(""))],
                &[("spec.metrics[0].name", "metric name must not be empty")],
            ),
            case(
                "webhook: metric names unique",
                vec![("/spec/metrics/1", json!({"name": "qps", "targetValue": 5}))],
                vec![("/spec/metrics/1", json!({"name": "kv", "targetValue": 5}))],
                &[("spec.metrics[1].name", "duplicate metric name \"kv\"")],
            ),
            case(
                "targetValue finite",
                vec![("/spec/metrics/0/targetValue", json!("1e300"))],
                vec![("/spec/metrics/0/targetValue", json!("1e400"))],
                &[("spec.metrics[0].targetValue", "targetValue must be finite")],
            ),
            case(
                "webhook: targetValue > 0",
                vec![("/spec/metrics/0/targetValue", json!("500m"))],
                vec![("/spec/metrics/0/targetValue", json!("0"))],
                &[(
                    "spec.metrics[0].targetValue",
                    "targetValue must be greater than 0",
                )],
            ),
            case(
                "targetValue is a quantity",
                vec![("/spec/metrics/0/targetValue", json!(3))],
                vec![("/spec/metrics/0/targetValue", json!("ten"))],
                &[(
                    "spec.metrics[0].targetValue",
                    r"quantities must match the regular expression '^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$'",
                )],
            ),
            case(
                "webhook: homogeneousTarget needs a metric",
                vec![],
                vec![("/spec/metrics", json!([]))],
                &[(
                    "spec.metrics",
                    "at least one metric is required for homogeneousTarget",
                )],
            ),
            case(
                "webhook: exactly one target type",
                vec![],
                vec![("/spec/heterogeneousTarget", hetero.clone())],
                &[(
                    "spec",
                    "exactly one of homogeneousTarget, heterogeneousTarget or disaggregatedTarget must be set",
                )],
            ),
            case(
                "webhook: targetRef.kind empty or ModelServing",
                vec![("/spec/homogeneousTarget/target/targetRef/kind", json!(""))],
                vec![(
                    "/spec/homogeneousTarget/target/targetRef/kind",
                    json!("Deployment"),
                )],
                &[(
                    "spec.homogeneousTarget.target.targetRef.kind",
                    "targetRef kind must be empty or ModelServing",
                )],
            ),
            case(
                "webhook: targetRef.name non-empty",
                vec![],
                vec![("/spec/homogeneousTarget/target/targetRef/name", Value::Null)],
                &[(
                    "spec.homogeneousTarget.target.targetRef.name",
                    "targetRef name must not be empty",
                )],
            ),
            case(
                "minReplicas 0..1000000",
                vec![("/spec/homogeneousTarget/minReplicas", json!(0))],
                vec![("/spec/homogeneousTarget/minReplicas", json!(-1))],
                &[(
                    "spec.homogeneousTarget.minReplicas",
                    "must be between 0 and 1000000",
                )],
            ),
            case(
                "maxReplicas 1..1000000",
                vec![("/spec/homogeneousTarget/maxReplicas", json!(1_000_000))],
                vec![("/spec/homogeneousTarget/maxReplicas", json!(0))],
                &[(
                    "spec.homogeneousTarget.maxReplicas",
                    "must be between 1 and 1000000",
                )],
            ),
            case(
                "CEL a metric source backend is required",
                vec![(
                    src,
                    json!({"prometheus": {"serverURL": "http://prom:9090", "query": "sum(x)"}}),
                )],
                vec![(src, json!({}))],
                &[(
                    "spec.homogeneousTarget.target.metricSources[kv]",
                    "one metric source backend config is required",
                )],
            ),
            case(
                "CEL pod and prometheus are exclusive",
                vec![],
                vec![(
                    src,
                    json!({"pod": {}, "prometheus": {"serverURL": "http://prom:9090", "query": "sum(x)"}}),
                )],
                &[(
                    "spec.homogeneousTarget.target.metricSources[kv]",
                    "pod and prometheus configs are mutually exclusive",
                )],
            ),
            case(
                "pod port 1..65535",
                vec![(src, json!({"pod": {"port": 65535}}))],
                vec![(src, json!({"pod": {"port": 0}}))],
                &[(
                    "spec.homogeneousTarget.target.metricSources[kv].pod.port",
                    "must be between 1 and 65535",
                )],
            ),
            case(
                "pod uri pattern ^/",
                vec![(src, json!({"pod": {"uri": "/stats"}}))],
                vec![(src, json!({"pod": {"uri": "metrics"}}))],
                &[(
                    "spec.homogeneousTarget.target.metricSources[kv].pod.uri",
                    "must match pattern ^/",
                )],
            ),
            case(
                "prometheus serverURL minLength 1",
                vec![],
                vec![(src, json!({"prometheus": {"serverURL": "", "query": "up"}}))],
                &[(
                    "spec.homogeneousTarget.target.metricSources[kv].prometheus.serverURL",
                    "must not be empty",
                )],
            ),
            case(
                "prometheus serverURL format uri",
                vec![(
                    src,
                    json!({"prometheus": {"serverURL": "/prometheus", "query": "up"}}),
                )],
                vec![(
                    src,
                    json!({"prometheus": {"serverURL": "prometheus", "query": "up"}}),
                )],
                &[(
                    "spec.homogeneousTarget.target.metricSources[kv].prometheus.serverURL",
                    "must be an absolute URI or path",
                )],
            ),
            case(
                "prometheus query minLength 1",
                vec![],
                vec![(
                    src,
                    json!({"prometheus": {"serverURL": "http://prom:9090", "query": ""}}),
                )],
                &[(
                    "spec.homogeneousTarget.target.metricSources[kv].prometheus.query",
                    "must not be empty",
                )],
            ),
            case(
                "heterogeneous params minItems 1",
                vec![
                    (h, Value::Null),
                    ("/spec/heterogeneousTarget", hetero.clone()),
                ],
                vec![
                    (h, Value::Null),
                    ("/spec/heterogeneousTarget", json!({"params": []})),
                ],
                &[(
                    "spec.heterogeneousTarget.params",
                    "must have at least 1 item",
                )],
            ),
            case(
                "heterogeneous cost minimum 0",
                vec![],
                vec![
                    (h, Value::Null),
                    ("/spec/heterogeneousTarget", hetero.clone()),
                    ("/spec/heterogeneousTarget/params/0/cost", json!(-1)),
                ],
                &[(
                    "spec.heterogeneousTarget.params[0].cost",
                    "must be at least 0",
                )],
            ),
            case(
                "heterogeneous costExpansionRatePercent minimum 0",
                vec![
                    (h, Value::Null),
                    ("/spec/heterogeneousTarget", hetero.clone()),
                    (
                        "/spec/heterogeneousTarget/costExpansionRatePercent",
                        json!(0),
                    ),
                ],
                vec![
                    (h, Value::Null),
                    ("/spec/heterogeneousTarget", hetero.clone()),
                    (
                        "/spec/heterogeneousTarget/costExpansionRatePercent",
                        json!(-5),
                    ),
                ],
                &[(
                    "spec.heterogeneousTarget.costExpansionRatePercent",
                    "must be at least 0",
                )],
            ),
            case(
                "webhook: heterogeneousTarget needs a metric",
                vec![],
                vec![
                    (h, Value::Null),
                    ("/spec/heterogeneousTarget", hetero),
                    ("/spec/metrics", json!([])),
                ],
                &[(
                    "spec.metrics",
                    "at least one metric is required for heterogeneousTarget",
                )],
            ),
            case(
                "webhook: durations within 30m",
                vec![(
                    "/spec/behavior/scaleDown",
                    json!({"period": "30m", "stabilizationWindow": "0s"}),
                )],
                vec![("/spec/behavior/scaleDown", json!({"period": "31m"}))],
                &[(
                    "spec.behavior.scaleDown.period",
                    "must be between 0s and 30m",
                )],
            ),
            case(
                "webhook: durations parse",
                vec![],
                vec![(
                    "/spec/behavior/scaleUp/stablePolicy",
                    json!({"stabilizationWindow": "1x"}),
                )],
                &[(
                    "spec.behavior.scaleUp.stablePolicy.stabilizationWindow",
                    "invalid duration \"1x\" (expected e.g. \"100ms\" or \"1m30s\"): invalid unit: expected one of 'ns', 'us', 'µs', 'ms', 's', 'm', or 'h'",
                )],
            ),
            case(
                "webhook: panic durations within 30m",
                vec![(
                    "/spec/behavior/scaleUp/panicPolicy",
                    json!({"period": "10s", "panicModeHold": "30m"}),
                )],
                vec![(
                    "/spec/behavior/scaleUp/panicPolicy",
                    json!({"period": "1h"}),
                )],
                &[(
                    "spec.behavior.scaleUp.panicPolicy.period",
                    "must be between 0s and 30m",
                )],
            ),
            case(
                "stable instances minimum 0",
                vec![("/spec/behavior/scaleDown", json!({"instances": 0}))],
                vec![("/spec/behavior/scaleDown", json!({"instances": -1}))],
                &[("spec.behavior.scaleDown.instances", "must be at least 0")],
            ),
            case(
                "stable percent 0..1000",
                vec![(
                    "/spec/behavior/scaleUp/stablePolicy",
                    json!({"percent": 1000}),
                )],
                vec![(
                    "/spec/behavior/scaleUp/stablePolicy",
                    json!({"percent": 1001}),
                )],
                &[(
                    "spec.behavior.scaleUp.stablePolicy.percent",
                    "must be between 0 and 1000",
                )],
            ),
            case(
                "panic percent 0..1000",
                vec![],
                vec![(
                    "/spec/behavior/scaleUp/panicPolicy",
                    json!({"period": "10s", "percent": 1001}),
                )],
                &[(
                    "spec.behavior.scaleUp.panicPolicy.percent",
                    "must be between 0 and 1000",
                )],
            ),
            case(
                "panicThresholdPercent 110..1000",
                vec![(
                    "/spec/behavior/scaleUp/panicPolicy",
                    json!({"period": "10s", "panicThresholdPercent": 110}),
                )],
                vec![(
                    "/spec/behavior/scaleUp/panicPolicy",
                    json!({"period": "10s", "panicThresholdPercent": 109}),
                )],
                &[(
                    "spec.behavior.scaleUp.panicPolicy.panicThresholdPercent",
                    "must be between 110 and 1000",
                )],
            ),
        ],
    )
}

#[test]
fn autoscaling_policy_disaggregated_rules() -> Result<()> {
    let rc = "/spec/disaggregatedTarget/ratioConstraint";
    let role = json!({"minReplicas": 1, "maxReplicas": 2, "metricSources": {"kv": {"pod": {}}}});
    let cp = "spec.disaggregatedTarget.ratioConstraint";
    run(
        &disaggregated_policy(),
        vec![
            case(
                "webhook: targetRef.name non-empty",
                vec![],
                vec![("/spec/disaggregatedTarget/targetRef/name", json!(""))],
                &[(
                    "spec.disaggregatedTarget.targetRef.name",
                    "targetRef name must not be empty",
                )],
            ),
            case(
                "roles minProperties 1",
                vec![
                    (rc, Value::Null),
                    ("/spec/disaggregatedTarget/roles/decode", Value::Null),
                ],
                vec![
                    (rc, Value::Null),
                    ("/spec/disaggregatedTarget/roles", json!({})),
                ],
                &[(
                    "spec.disaggregatedTarget.roles",
                    "must have at least 1 role",
                )],
            ),
            case(
                "roles maxProperties 2",
                vec![],
                vec![("/spec/disaggregatedTarget/roles/router", role.clone())],
                &[(
                    "spec.disaggregatedTarget.roles",
                    "must have at most 2 roles",
                )],
            ),
            case(
                "CEL ratioConstraint needs two roles",
                vec![
                    (rc, Value::Null),
                    ("/spec/disaggregatedTarget/roles/decode", Value::Null),
                ],
                vec![("/spec/disaggregatedTarget/roles/decode", Value::Null)],
                &[
                    (
                        "spec.disaggregatedTarget",
                        "roles must contain at least two entries when ratioConstraint is configured",
                    ),
                    (
                        "spec.disaggregatedTarget.ratioConstraint.denominatorRole",
                        "role \"decode\" is not in roles",
                    ),
                ],
            ),
            case(
                "webhook: role names non-empty",
                vec![],
                vec![
                    ("/spec/disaggregatedTarget/roles/decode", Value::Null),
                    ("/spec/disaggregatedTarget/roles/", role),
                    (rc, Value::Null),
                ],
                &[(
                    "spec.disaggregatedTarget.roles[]",
                    "role name must not be empty",
                )],
            ),
            case(
                "webhook: minReplicas <= maxReplicas",
                vec![(
                    "/spec/disaggregatedTarget/roles/prefill/minReplicas",
                    json!(4),
                )],
                vec![(
                    "/spec/disaggregatedTarget/roles/prefill/minReplicas",
                    json!(5),
                )],
                &[(
                    "spec.disaggregatedTarget.roles[prefill].minReplicas",
                    "minReplicas must be less than or equal to maxReplicas",
                )],
            ),
            case(
                "webhook: non-fixed roles need metrics",
                vec![
                    ("/spec/metrics", json!([])),
                    (
                        "/spec/disaggregatedTarget/roles/prefill",
                        json!({"minReplicas": 2, "maxReplicas": 2}),
                    ),
                    (
                        "/spec/disaggregatedTarget/roles/decode",
                        json!({"minReplicas": 3, "maxReplicas": 3}),
                    ),
                ],
                vec![("/spec/metrics", json!([]))],
                &[
                    (
                        "spec.disaggregatedTarget.roles[decode].metrics",
                        "a role that is not fixed (minReplicas != maxReplicas) needs role metrics or spec.metrics",
                    ),
                    (
                        "spec.disaggregatedTarget.roles[prefill].metrics",
                        "a role that is not fixed (minReplicas != maxReplicas) needs role metrics or spec.metrics",
                    ),
                ],
            ),
            case(
                "webhook: role metrics valid and unique",
                vec![(
                    "/spec/disaggregatedTarget/roles/prefill/metrics",
                    json!([{"name": "kv", "targetValue": "5"}]),
                )],
                vec![(
                    "/spec/disaggregatedTarget/roles/prefill/metrics",
                    json!([{"name": "kv", "targetValue": "5"}, {"name": "kv", "targetValue": "-1"}]),
                )],
                &[
                    (
                        "spec.disaggregatedTarget.roles[prefill].metrics[1].name",
                        "duplicate metric name \"kv\"",
                    ),
                    (
                        "spec.disaggregatedTarget.roles[prefill].metrics[1].targetValue",
                        "targetValue must be greater than 0",
                    ),
                ],
            ),
            case(
                "webhook: roles with metrics need metricSources",
                vec![],
                vec![(
                    "/spec/disaggregatedTarget/roles/prefill/metricSources",
                    Value::Null,
                )],
                &[(
                    "spec.disaggregatedTarget.roles[prefill].metricSources",
                    "metricSources is required for a role with metrics",
                )],
            ),
            case(
                "webhook: metricSources keys are effective metrics",
                vec![],
                vec![(
                    "/spec/disaggregatedTarget/roles/prefill/metricSources/qps",
                    json!({"pod": {}}),
                )],
                &[(
                    "spec.disaggregatedTarget.roles[prefill].metricSources[qps]",
                    "\"qps\" is not one of the role's metrics",
                )],
            ),
            case(
                "CEL numeratorRole and denominatorRole differ",
                vec![],
                vec![(
                    "/spec/disaggregatedTarget/ratioConstraint/denominatorRole",
                    json!("prefill"),
                )],
                &[(cp, "numeratorRole and denominatorRole must differ")],
            ),
            case(
                "webhook: ratio roles exist",
                vec![],
                vec![(
                    "/spec/disaggregatedTarget/ratioConstraint/numeratorRole",
                    json!("router"),
                )],
                &[(
                    "spec.disaggregatedTarget.ratioConstraint.numeratorRole",
                    "role \"router\" is not in roles",
                )],
            ),
            case(
                "webhook: minRatio <= maxRatio",
                vec![(
                    "/spec/disaggregatedTarget/ratioConstraint/minRatio",
                    json!("2"),
                )],
                vec![(
                    "/spec/disaggregatedTarget/ratioConstraint/minRatio",
                    json!("3"),
                )],
                &[(cp, "minRatio must be less than or equal to maxRatio")],
            ),
            case(
                "webhook: minRatio >= 0",
                vec![(
                    "/spec/disaggregatedTarget/ratioConstraint/minRatio",
                    json!(0),
                )],
                vec![(
                    "/spec/disaggregatedTarget/ratioConstraint/minRatio",
                    json!("-1"),
                )],
                &[(
                    "spec.disaggregatedTarget.ratioConstraint.minRatio",
                    "minRatio must be at least 0",
                )],
            ),
            case(
                "webhook: maxRatio > 0",
                vec![],
                vec![
                    (
                        "/spec/disaggregatedTarget/ratioConstraint/maxRatio",
                        json!("0"),
                    ),
                    (
                        "/spec/disaggregatedTarget/ratioConstraint/minRatio",
                        json!("0"),
                    ),
                ],
                &[
                    (
                        "spec.disaggregatedTarget.ratioConstraint.maxRatio",
                        "maxRatio must be greater than 0",
                    ),
                    (
                        cp,
                        "ratio constraint cannot be satisfied within the roles' minReplicas/maxReplicas",
                    ),
                ],
            ),
            case(
                "webhook: ratio bounds are quantities",
                vec![],
                vec![(
                    "/spec/disaggregatedTarget/ratioConstraint/maxRatio",
                    json!("two"),
                )],
                &[(
                    "spec.disaggregatedTarget.ratioConstraint.maxRatio",
                    r"quantities must match the regular expression '^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$'",
                )],
            ),
            case(
                "webhook: both roles scale to zero together",
                vec![
                    (
                        "/spec/disaggregatedTarget/roles/prefill/minReplicas",
                        json!(0),
                    ),
                    (
                        "/spec/disaggregatedTarget/roles/decode/minReplicas",
                        json!(0),
                    ),
                ],
                vec![(
                    "/spec/disaggregatedTarget/roles/prefill/minReplicas",
                    json!(0),
                )],
                &[(
                    cp,
                    "numerator and denominator roles must both allow scale to zero or neither",
                )],
            ),
            case(
                "webhook: ratio achievable",
                vec![
                    (
                        "/spec/disaggregatedTarget/ratioConstraint/minRatio",
                        json!("4"),
                    ),
                    (
                        "/spec/disaggregatedTarget/ratioConstraint/maxRatio",
                        json!("10"),
                    ),
                ],
                vec![
                    (
                        "/spec/disaggregatedTarget/ratioConstraint/minRatio",
                        json!("5"),
                    ),
                    (
                        "/spec/disaggregatedTarget/ratioConstraint/maxRatio",
                        json!("10"),
                    ),
                ],
                &[(
                    cp,
                    "ratio constraint cannot be satisfied within the roles' minReplicas/maxReplicas",
                )],
            ),
            case(
                "roles minReplicas/maxReplicas ranges",
                vec![],
                vec![(
                    "/spec/disaggregatedTarget/roles/decode/maxReplicas",
                    json!(1_000_001),
                )],
                &[(
                    "spec.disaggregatedTarget.roles[decode].maxReplicas",
                    "must be between 1 and 1000000",
                )],
            ),
        ],
    )
}
