//! Disaggregated targets: role replicas of one ModelServing, with the ratio constraint (Go
//! `pkg/autoscaler/autoscaler/disaggregated_scaler.go`).

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, PatchOperation, TestOperation};
use k8s_openapi::api::core::v1::Pod;
use kthena_api::AutoscalingPolicy;
use kthena_api::workload::DisaggregatedTarget;
use kthena_autoscale::{RoleObservation, RolesDecision, RolesScaler};
use kube::ResourceExt as _;
use kube::api::{Patch, PatchParams};
use serde_json::json;

use super::collect::{Clients, Problem, collect};
use super::outcome::{Outcome, entry_pods, target};
use super::state::{Kept, kept, key};
use crate::error::{Error, Result, kube_err};
use crate::names::ROLE_LABEL;

/// One round of a disaggregated policy: per-role metrics (entry pods of the role), the
/// role scaler, then one JSON patch of every changed role's `replicas` (each guarded by a
/// `test` of the role's name, as Go).
///
/// # Errors
/// An invalid target or role ([`Outcome::from_error`] tells), a policy the math cannot use
/// ([`crate::Error::Autoscale`]), a failed API call ([`crate::Error::Kube`]).
pub(super) async fn disaggregated(
    client: &kube::Client,
    http: &Clients,
    states: &mut HashMap<String, Kept<RolesScaler>>,
    policy: &AutoscalingPolicy,
    d: &DisaggregatedTarget,
    now: Duration,
    problems: &mut Vec<Problem>,
) -> Result<Outcome> {
    let (api, ms) = target(client, policy, &d.target_ref).await?;
    let (ns, name) = (ms.namespace().unwrap_or_default(), ms.name_any());
    let index: BTreeMap<&str, usize> = ms
        .spec
        .template
        .roles
        .iter()
        .enumerate()
        .map(|(i, r)| (r.name.as_str(), i))
        .collect();
    if let Some(missing) = d.roles.keys().find(|r| !index.contains_key(r.as_str())) {
        return Err(Error::TargetRoleMissing {
            namespace: ns,
            name,
            role: missing.clone(),
        });
    }
    let state = kept(states, policy, kthena_autoscale::roles_scaler_from_api)?;
    let pods = entry_pods(client, &ms).await?;
    let mut observed = BTreeMap::new();
    for (role, param) in &d.roles {
        let current = ms.spec.template.roles[index[role.as_str()]]
            .replicas
            .unwrap_or(1);
        let mut obs = RoleObservation {
            current,
            ..RoleObservation::default()
        };
        if !state.scaler.is_fixed(role) {
            let role_pods: Vec<Pod> = pods
                .iter()
                .filter(|p| p.labels().get(ROLE_LABEL) == Some(role))
                .cloned()
                .collect();
            let c = collect(
                http,
                &policy.namespace().unwrap_or_default(),
                &mut state.histograms,
                now,
                &role_pods,
                &param.metric_sources,
                problems,
            )
            .await;
            obs.unready = c.unready;
            obs.ready = c.ready;
            obs.external = c.external;
        }
        observed.insert(role.clone(), obs);
    }
    let tolerance = kthena_autoscale::tolerance_from_api(policy);
    let Some(decision) = state.scaler.scale(now, tolerance, &observed) else {
        tracing::info!(policy = %key(policy), "A role has no metric value; skipping this round");
        return Ok(Outcome::RolesSkipped);
    };
    tracing::info!(policy = %key(policy), roles = ?decision.roles.iter().map(|r| (&r.name, r.current, r.recommended, r.replicas)).collect::<Vec<_>>(), ratio = ?decision.current_ratio, "Disaggregated autoscaling decision");
    let patch = role_patch(&decision, &index);
    if !patch.0.is_empty() {
        api.patch(&name, &PatchParams::default(), &Patch::<()>::Json(patch))
            .await
            .map_err(kube_err(format!(
                "scaling the roles of ModelServing {ns}/{name}"
            )))?;
    }
    Ok(Outcome::Roles(decision))
}

/// Go's JSON patch of the changed roles: per role
/// `{"op":"test","path":"/spec/template/roles/<i>/name","value":<role>}` then
/// `{"op":"add","path":"/spec/template/roles/<i>/replicas","value":N}`, `i` from `index`.
fn role_patch(decision: &RolesDecision, index: &BTreeMap<&str, usize>) -> json_patch::Patch {
    let path = |i: usize, field: &str| {
        PointerBuf::from_tokens(["spec", "template", "roles", &i.to_string(), field])
    };
    let mut ops = Vec::new();
    for r in decision.roles.iter().filter(|r| r.replicas != r.current) {
        let i = index[r.name.as_str()];
        ops.push(PatchOperation::Test(TestOperation {
            path: path(i, "name"),
            value: json!(r.name),
        }));
        ops.push(PatchOperation::Add(AddOperation {
            path: path(i, "replicas"),
            value: json!(r.replicas),
        }));
    }
    json_patch::Patch(ops)
}
