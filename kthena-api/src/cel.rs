//! The CEL validation rules (`x-kubernetes-validations`) of Go Kthena's CRDs, added to the
//! generated schemas: the API server then rejects what Go Kthena's CRDs reject, with the same
//! messages, also where no admission webhook runs.
//!
//! Each rule sits at the schema node Go's controller-gen markers put it on (the paths below
//! are those of `charts/kthena/charts/*/crds/*.yaml`). Two rules differ in their text, not
//! in what they accept: Go's ModelRoute rule reads `self.modelName` and `self.loraAdapters`
//! without `has()`, which is an evaluation error ("no such key") when a field is left out,
//! since in our schema neither is required.

use serde_json::{Value, json};

/// One rule: the CRD's plural, the JSON pointer of its schema node below `openAPIV3Schema`,
/// the CEL expression and the message the API server returns when it is false.
struct Rule {
    plural: &'static str,
    path: &'static str,
    rule: &'static str,
    message: &'static str,
}

const METRIC_SOURCES_HOMOGENEOUS: &str = "/properties/spec/properties/homogeneousTarget/properties/target/properties/metricSources/additionalProperties";
const METRIC_SOURCES_HETEROGENEOUS: &str = "/properties/spec/properties/heterogeneousTarget/properties/params/items/properties/target/properties/metricSources/additionalProperties";
const METRIC_SOURCES_DISAGGREGATED: &str = "/properties/spec/properties/disaggregatedTarget/properties/roles/additionalProperties/properties/metricSources/additionalProperties";

const ONE_SOURCE: &str = "has(self.pod) || has(self.prometheus)";
const ONE_SOURCE_MESSAGE: &str = "one metric source backend config is required";
const EXCLUSIVE_SOURCES: &str = "!(has(self.pod) && has(self.prometheus))";
const EXCLUSIVE_SOURCES_MESSAGE: &str = "pod and prometheus configs are mutually exclusive";

/// `minReplicas ≤ maxReplicas` (Go Kthena's webhook message; Go's CRD has no such rule, so
/// without the webhook it accepted a policy that then scaled its target to the maximum).
const MIN_LE_MAX: &str =
    "!has(self.minReplicas) || !has(self.maxReplicas) || self.minReplicas <= self.maxReplicas";
const MIN_LE_MAX_MESSAGE: &str = "minReplicas must be <= maxReplicas";

const RULES: &[Rule] = &[
    Rule {
        plural: "autoscalingpolicies",
        path: "/properties/spec/properties/homogeneousTarget",
        rule: MIN_LE_MAX,
        message: MIN_LE_MAX_MESSAGE,
    },
    Rule {
        plural: "autoscalingpolicies",
        path: "/properties/spec/properties/heterogeneousTarget/properties/params/items",
        rule: MIN_LE_MAX,
        message: MIN_LE_MAX_MESSAGE,
    },
    Rule {
        plural: "autoscalingpolicies",
        path: "/properties/spec/properties/disaggregatedTarget/properties/roles/additionalProperties",
        rule: MIN_LE_MAX,
        message: MIN_LE_MAX_MESSAGE,
    },
    Rule {
        plural: "modelroutes",
        path: "/properties/spec",
        rule: "(has(self.modelName) && self.modelName != \"\") || \
               (has(self.loraAdapters) && size(self.loraAdapters) > 0)",
        message: "ModelName and LoraAdapters cannot both be empty",
    },
    Rule {
        plural: "modelroutes",
        path: "/properties/spec/properties/modelName",
        rule: "self == oldSelf",
        message: "modelName is immutable",
    },
    Rule {
        plural: "modelroutes",
        path: "/properties/spec/properties/rules/items/properties/targetModels/items",
        rule: "(has(self.modelServerName) && self.modelServerName != \"\") != \
               (has(self.externalModelProviderName) && self.externalModelProviderName != \"\")",
        message: "exactly one of modelServerName or externalModelProviderName must be set",
    },
    Rule {
        plural: "externalmodelproviders",
        path: "/properties/spec/properties/auth",
        rule: "!has(self.secretRef.optional) || !self.secretRef.optional",
        message: "secretRef.optional must be false or unset",
    },
    Rule {
        plural: "autoscalingpolicies",
        path: "/properties/spec/properties/disaggregatedTarget",
        rule: "!has(self.ratioConstraint) || size(self.roles) >= 2",
        message: "roles must contain at least two entries when ratioConstraint is configured",
    },
    Rule {
        plural: "autoscalingpolicies",
        path: "/properties/spec/properties/disaggregatedTarget/properties/ratioConstraint",
        rule: "self.numeratorRole != self.denominatorRole",
        message: "numeratorRole and denominatorRole must differ",
    },
    Rule {
        plural: "autoscalingpolicies",
        path: METRIC_SOURCES_DISAGGREGATED,
        rule: ONE_SOURCE,
        message: ONE_SOURCE_MESSAGE,
    },
    Rule {
        plural: "autoscalingpolicies",
        path: METRIC_SOURCES_DISAGGREGATED,
        rule: EXCLUSIVE_SOURCES,
        message: EXCLUSIVE_SOURCES_MESSAGE,
    },
    Rule {
        plural: "autoscalingpolicies",
        path: METRIC_SOURCES_HETEROGENEOUS,
        rule: ONE_SOURCE,
        message: ONE_SOURCE_MESSAGE,
    },
    Rule {
        plural: "autoscalingpolicies",
        path: METRIC_SOURCES_HETEROGENEOUS,
        rule: EXCLUSIVE_SOURCES,
        message: EXCLUSIVE_SOURCES_MESSAGE,
    },
    Rule {
        plural: "autoscalingpolicies",
        path: METRIC_SOURCES_HOMOGENEOUS,
        rule: ONE_SOURCE,
        message: ONE_SOURCE_MESSAGE,
    },
    Rule {
        plural: "autoscalingpolicies",
        path: METRIC_SOURCES_HOMOGENEOUS,
        rule: EXCLUSIVE_SOURCES,
        message: EXCLUSIVE_SOURCES_MESSAGE,
    },
    Rule {
        plural: "modelservings",
        path: "/properties/spec/properties/template",
        rule: "!has(oldSelf.gangPolicy) || has(self.gangPolicy)",
        message: "gangPolicy is required once set",
    },
    Rule {
        plural: "modelservings",
        path: "/properties/spec/properties/template/properties/gangPolicy/properties/minRoleReplicas",
        rule: "self == oldSelf",
        message: "minRoleReplicas is immutable",
    },
    Rule {
        plural: "modelservings",
        path: "/properties/spec/properties/template/properties/roles",
        rule: "self.all(x, self.exists_one(y, y.name == x.name))",
        message: "roles name must be unique",
    },
];

/// Adds the rules of the CRD `plural` to every version's schema of `crd` (a CRD as JSON).
/// A path that does not exist in the schema is skipped; the unit test below checks that
/// every one exists.
pub(crate) fn add_rules(crd: &mut Value, plural: &str) {
    let Some(versions) = crd
        .pointer_mut("/spec/versions")
        .and_then(Value::as_array_mut)
    else {
        return;
    };
    for version in versions {
        let Some(schema) = version.pointer_mut("/schema/openAPIV3Schema") else {
            continue;
        };
        for r in RULES.iter().filter(|r| r.plural == plural) {
            let Some(Value::Object(node)) = schema.pointer_mut(r.path) else {
                continue;
            };
            let rules = node
                .entry("x-kubernetes-validations")
                .or_insert_with(|| json!([]));
            if let Value::Array(list) = rules {
                list.push(json!({"message": r.message, "rule": r.rule}));
            }
        }
    }
}

#[cfg(test)]
mod tests;
