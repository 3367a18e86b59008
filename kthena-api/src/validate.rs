//! Defaulting and validation of the workload kinds, one module a kind.
//!
//! Sources: the CRD schemas and CEL rules of `pkg/apis/workload/v1alpha1`, the ModelServing
//! webhook (`pkg/model-serving-controller/webhook/validator.go`), the ModelBooster webhook
//! (`pkg/model-booster-controller/webhook`), and the AutoscalingPolicy webhooks
//! (`pkg/autoscaler/webhook/autoscalingpolicy_{validator,mutator}.go`).

use crate::common::Errors;

mod autoscaling;
mod booster;
mod serving;

/// Upper bound of replica counts in the workload CRDs.
const MAX_REPLICAS: i64 = 1_000_000;

/// Container images must not be blank or contain spaces.
fn image_rule(e: &mut Errors, path: &str, image: &str) {
    if image.trim().is_empty() {
        e.push(path, "container image must not be empty or whitespace only");
    } else if image.contains(char::is_whitespace) {
        e.push(path, "container image must not contain spaces");
    }
}
