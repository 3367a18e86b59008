//! Which AutoscalingPolicy scales which ModelServing when several target the same one.
//!
//! Two policies writing the same `spec.replicas` (homogeneous and heterogeneous targets) or
//! the same roles' replicas (disaggregated targets) undo each other every round, so the
//! target flaps between their decisions. As the HorizontalPodAutoscaler controller does with
//! an ambiguous selector, only one of them is applied: the oldest (creation time, then
//! `namespace/name`); every other one gets [`Error::TargetClaimed`] in its status.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::ObjectReference;
use kthena_api::AutoscalingPolicy;
use kube::ResourceExt as _;

use super::state::key;
use crate::error::Error;

/// What a policy writes: the ModelServing (`namespace/name`) and whether it is the roles'
/// replicas (`true`) or `spec.replicas`.
type Claim = (String, bool);

/// The `namespace/name` of a target reference (its namespace defaulting to the policy's).
fn target_key(policy: &AutoscalingPolicy, r: &ObjectReference) -> String {
    let ns = r
        .namespace
        .clone()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| policy.namespace().unwrap_or_default());
    format!("{ns}/{}", r.name.as_deref().unwrap_or_default())
}

/// What `policy` writes.
fn claims_of(policy: &AutoscalingPolicy) -> Vec<Claim> {
    let spec = &policy.spec;
    if let Some(h) = &spec.homogeneous_target {
        vec![(target_key(policy, &h.target.target_ref), false)]
    } else if let Some(d) = &spec.disaggregated_target {
        vec![(target_key(policy, &d.target_ref), true)]
    } else if let Some(h) = &spec.heterogeneous_target {
        h.params
            .iter()
            .map(|p| (target_key(policy, &p.target.target_ref), false))
            .collect()
    } else {
        Vec::new()
    }
}

/// The policies (by `namespace/name`) that are not applied this round, each with the error
/// naming the older policy that scales its target.
pub(super) fn conflicts(policies: &[AutoscalingPolicy]) -> HashMap<String, Error> {
    let mut order: Vec<&AutoscalingPolicy> = policies.iter().collect();
    order.sort_by_key(|p| (p.creation_timestamp().map(|t| t.0), key(p)));
    let mut owner: BTreeMap<Claim, String> = BTreeMap::new();
    let mut out = HashMap::new();
    for p in order {
        let claims = claims_of(p);
        let taken = claims
            .iter()
            .find_map(|c| owner.get(c).map(|by| (c.0.clone(), by.clone())));
        if let Some((target, by)) = taken {
            out.insert(key(p), Error::TargetClaimed { target, by });
            continue;
        }
        for c in claims {
            owner.insert(c, key(p));
        }
    }
    out
}

#[cfg(test)]
mod tests;
