//! Disaggregated targets: role replicas of one ModelServing, with the ratio constraint (Go
//! `disaggregated_scaler.go`, spec §6.6).

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kthena_api::AutoscalingPolicy;
use kthena_api::workload::{
    AutoscalingPolicyStatus, DisaggregatedStatus, RatioStatus, TargetScalingStatus,
};
use kthena_autoscale::{PodHistograms, RoleObservation, RolesDecision, RolesScaler};
use kube::ResourceExt as _;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;

use super::collect::{HttpClient, collect};
use super::{Outcome, kept_state, key, target};
use crate::names::{ENTRY_LABEL, NAME_LABEL, ROLE_LABEL};

/// The state kept for one disaggregated policy.
pub(super) struct RolesState {
    generation: Option<i64>,
    scaler: RolesScaler,
    histograms: PodHistograms,
}

fn state_for<'a>(
    states: &'a mut HashMap<String, RolesState>,
    policy: &AutoscalingPolicy,
) -> kthena_autoscale::Result<&'a mut RolesState> {
    kept_state(
        states,
        policy,
        |s| s.generation,
        || {
            Ok(RolesState {
                generation: policy.metadata.generation,
                scaler: kthena_autoscale::roles_scaler_from_api(policy)?,
                histograms: PodHistograms::new(),
            })
        },
    )
}

/// One round of a disaggregated policy: per-role metrics (entry pods of the role), the
/// role scaler, then one JSON patch of every changed role's `replicas` (each guarded by a
/// `test` of the role's name, as Go).
pub(super) async fn disaggregated(
    client: &kube::Client,
    http: &HttpClient,
    states: &mut HashMap<String, RolesState>,
    policy: &AutoscalingPolicy,
    now: Duration,
) -> Outcome {
    let Some(d) = &policy.spec.disaggregated_target else {
        return Outcome::Failed("no disaggregated target".to_owned());
    };
    let (api, ms) = match target(client, policy, &d.target_ref).await {
        Ok(t) => t,
        Err(outcome) => return outcome,
    };
    let (ns, name) = (ms.namespace().unwrap_or_default(), ms.name_any());
    let roles = &ms.spec.template.roles;
    let index: BTreeMap<&str, usize> = roles
        .iter()
        .enumerate()
        .map(|(i, r)| (r.name.as_str(), i))
        .collect();
    if let Some(missing) = d.roles.keys().find(|r| !index.contains_key(r.as_str())) {
        return Outcome::TargetInvalid(format!("ModelServing {ns}/{name} has no role {missing}"));
    }
    let state = match state_for(states, policy) {
        Ok(s) => s,
        Err(e) => return Outcome::Failed(e.to_string()),
    };
    let selector = format!("{NAME_LABEL}={name},{ENTRY_LABEL}=true");
    let pods = match Api::<Pod>::namespaced(client.clone(), &ns)
        .list(&ListParams::default().labels(&selector))
        .await
    {
        Ok(l) => l.items,
        Err(e) => return Outcome::Failed(e.to_string()),
    };
    let mut observed = BTreeMap::new();
    for (role, param) in &d.roles {
        let current = roles[index[role.as_str()]].replicas.unwrap_or(1);
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
                &mut state.histograms,
                now,
                &role_pods,
                &param.metric_sources,
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
        return Outcome::RolesSkipped;
    };
    let mut ops = Vec::new();
    for r in decision.roles.iter().filter(|r| r.replicas != r.current) {
        let i = index[r.name.as_str()];
        ops.push(json!({"op": "test", "path": format!("/spec/template/roles/{i}/name"), "value": r.name}));
        ops.push(json!({"op": "add", "path": format!("/spec/template/roles/{i}/replicas"), "value": r.replicas}));
    }
    tracing::info!(policy = %key(policy), roles = ?decision.roles.iter().map(|r| (&r.name, r.current, r.recommended, r.replicas)).collect::<Vec<_>>(), ratio = ?decision.current_ratio, "Disaggregated autoscaling decision");
    if !ops.is_empty() {
        let patch: json_patch::Patch = match serde_json::from_value(json!(ops)) {
            Ok(p) => p,
            Err(e) => return Outcome::Failed(e.to_string()),
        };
        if let Err(e) = api
            .patch(&name, &PatchParams::default(), &Patch::<()>::Json(patch))
            .await
        {
            return Outcome::Failed(e.to_string());
        }
    }
    Outcome::Roles(decision)
}

/// `disaggregatedStatus` after a decision (Go: `desiredReplicas` is the recommendation,
/// `lastScaleTime` is set when the final replicas differ from the current ones).
pub(super) fn roles_status(
    policy: &AutoscalingPolicy,
    old: &AutoscalingPolicyStatus,
    decision: &RolesDecision,
) -> DisaggregatedStatus {
    let last = |name: &str| {
        old.disaggregated_status
            .as_ref()?
            .roles
            .iter()
            .find(|r| r.name.as_deref() == Some(name))?
            .last_scale_time
            .clone()
    };
    let roles = decision
        .roles
        .iter()
        .map(|r| TargetScalingStatus {
            name: Some(r.name.clone()),
            current_replicas: r.current,
            desired_replicas: r.recommended,
            mode: Some(r.mode.as_str().to_owned()),
            last_scale_time: if r.replicas != r.current {
                Some(Time(k8s_openapi::jiff::Timestamp::now()))
            } else {
                last(&r.name)
            },
        })
        .collect();
    let constraint = policy
        .spec
        .disaggregated_target
        .as_ref()
        .and_then(|d| d.ratio_constraint.as_ref());
    DisaggregatedStatus {
        roles,
        ratio_status: constraint.map(|c| RatioStatus {
            numerator_role: c.numerator_role.clone(),
            denominator_role: c.denominator_role.clone(),
            current_ratio: decision.current_ratio.clone(),
        }),
        ratio_adjusted: constraint.map(|_| decision.ratio_adjusted),
    }
}
