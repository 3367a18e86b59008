//! Disaggregated targets: role replicas of one ModelServing, with the ratio constraint (Go
//! `pkg/autoscaler/autoscaler/disaggregated_scaler.go`).

use std::collections::{BTreeMap, HashMap};

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, PatchOperation, TestOperation};
use k8s_openapi::api::core::v1::Pod;
use kthena_api::workload::DisaggregatedTarget;
use kthena_api::{AutoscalingPolicy, ModelServing};
use kthena_autoscale::{
    Mode, RoleDecision, RoleObservation, RolesDecision, RolesScaler, ZeroStep, format_go_float,
};
use kube::ResourceExt as _;
use kube::api::{Patch, PatchParams};
use serde_json::json;

use super::collect::{Problem, collect};
use super::outcome::{Done, Outcome, entry_pods, target};
use super::state::{Kept, kept, key};
use super::zero::{Pass, condition};
use crate::error::{Error, Result, kube_err};
use crate::names::ROLE_LABEL;

/// One round of a disaggregated policy. With every role's `minReplicas` 0 the routers
/// decide first ([`kthena_autoscale::plan`] on the roles' sum): stay at zero, wake every role
/// to `max(minReplicas, 1)` with the ratio ([`RolesScaler::wake_replicas`]), or take every
/// role to zero; otherwise the metric round of [`metric_round`], each role's lower bound
/// raised to 1 while the target may go to zero. `None` in a wake tick when the roles are not
/// at zero.
///
/// # Errors
/// An invalid target or role ([`Outcome::from_error`] tells), a policy the math cannot use
/// ([`crate::Error::Autoscale`]), a failed API call ([`crate::Error::Kube`]).
pub(super) async fn disaggregated(
    pass: &Pass<'_>,
    states: &mut HashMap<String, Kept<RolesScaler>>,
    policy: &AutoscalingPolicy,
    d: &DisaggregatedTarget,
    problems: &mut Vec<Problem>,
) -> Result<Option<Done>> {
    let (api, ms) = target(pass.client, policy, &d.target_ref).await?;
    let (ns, name) = (ms.namespace().unwrap_or_default(), ms.name_any());
    let (index, current) = roles_of(&ms, d)?;
    let total = current.values().fold(0i32, |a, &c| a.saturating_add(c));
    let zero_capable = d.roles.values().all(|r| r.min_replicas == 0);
    if pass.wake_only && !(zero_capable && total <= 0) {
        return Ok(None);
    }
    let view = match zero_capable {
        true => Some(pass.view(policy, &[&ms]).await?),
        false => None,
    };
    let zero = view.as_ref().map(|v| condition(v, total));
    let state = kept(states, policy, kthena_autoscale::roles_scaler_from_api)?;
    let decision = match kthena_autoscale::plan(total, 0, view.as_ref()) {
        ZeroStep::Stay => fixed(d, &current, &current),
        ZeroStep::Wake(_) => {
            tracing::info!(policy = %key(policy), "Waking the roles from zero: a router holds a request");
            fixed(d, &current, &state.scaler.wake_replicas())
        }
        ZeroStep::ToZero => {
            tracing::info!(policy = %key(policy), "Scaling the roles to zero: every router reports them idle");
            let zeros = current.keys().map(|r| (r.clone(), 0)).collect();
            fixed(d, &current, &zeros)
        }
        ZeroStep::Scale { floor } => {
            let at = (&ms, &current);
            match metric_round(pass, state, policy, d, at, floor, problems).await? {
                Some(decision) => decision,
                None => {
                    return Ok(Some(Done {
                        outcome: Outcome::RolesSkipped,
                        zero,
                    }));
                }
            }
        }
    };
    let patch = role_patch(&decision, &index);
    if !patch.0.is_empty() {
        api.patch(&name, &PatchParams::default(), &Patch::<()>::Json(patch))
            .await
            .map_err(kube_err(format!(
                "scaling the roles of ModelServing {ns}/{name}"
            )))?;
    }
    Ok(Some(Done {
        outcome: Outcome::Roles(decision),
        zero,
    }))
}

/// The index of every role of `ms` by name, and the replicas of each role of the policy
/// (unset: 1).
///
/// # Errors
/// [`Error::TargetRoleMissing`] for a role of the policy that `ms` lacks.
#[expect(
    clippy::type_complexity,
    reason = "two maps by role name, read together"
)]
fn roles_of<'a>(
    ms: &'a ModelServing,
    d: &DisaggregatedTarget,
) -> Result<(BTreeMap<&'a str, usize>, BTreeMap<String, i32>)> {
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
            namespace: ms.namespace().unwrap_or_default(),
            name: ms.name_any(),
            role: missing.clone(),
        });
    }
    let current = d
        .roles
        .keys()
        .map(|r| {
            let replicas = ms.spec.template.roles[index[r.as_str()]].replicas;
            (r.clone(), replicas.unwrap_or(1))
        })
        .collect();
    Ok((index, current))
}

/// A decision that is not the metrics': every role from `current` to `replicas` (role-name
/// order), its ratio reported as Go formats it.
fn fixed(
    d: &DisaggregatedTarget,
    current: &BTreeMap<String, i32>,
    replicas: &BTreeMap<String, i32>,
) -> RolesDecision {
    let roles = current
        .iter()
        .map(|(name, &cur)| {
            let r = replicas.get(name).copied().unwrap_or(cur);
            RoleDecision {
                name: name.clone(),
                current: cur,
                recommended: r,
                corrected: r,
                replicas: r,
                mode: Mode::Stable,
            }
        })
        .collect();
    let current_ratio = d.ratio_constraint.as_ref().and_then(|c| {
        let n = *replicas.get(&c.numerator_role)?;
        let dn = *replicas.get(&c.denominator_role)?;
        (dn != 0).then(|| format_go_float(f64::from(n) / f64::from(dn)))
    });
    RolesDecision {
        roles,
        ratio_adjusted: false,
        ratio_satisfied: true,
        current_ratio,
    }
}

/// The metric round: per-role metrics (entry pods of the role), the role scaler with every
/// lower bound at least `floor`. `None` when a role has no metric value.
///
/// # Errors
/// [`crate::Error::Kube`] when the entry pods cannot be listed.
async fn metric_round(
    pass: &Pass<'_>,
    state: &mut Kept<RolesScaler>,
    policy: &AutoscalingPolicy,
    d: &DisaggregatedTarget,
    (ms, current): (&ModelServing, &BTreeMap<String, i32>),
    floor: i32,
    problems: &mut Vec<Problem>,
) -> Result<Option<RolesDecision>> {
    let pods = entry_pods(pass.client, ms).await?;
    let mut observed = BTreeMap::new();
    for (role, param) in &d.roles {
        let mut obs = RoleObservation {
            current: current[role],
            ..RoleObservation::default()
        };
        if !state.scaler.is_fixed(role) {
            let role_pods: Vec<Pod> = pods
                .iter()
                .filter(|p| p.labels().get(ROLE_LABEL) == Some(role))
                .cloned()
                .collect();
            let c = collect(
                pass.http,
                &policy.namespace().unwrap_or_default(),
                &mut state.histograms,
                pass.now,
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
    let Some(decision) = state
        .scaler
        .scale_with_floor(pass.now, tolerance, &observed, floor)
    else {
        tracing::info!(policy = %key(policy), "A role has no metric value; skipping this round");
        return Ok(None);
    };
    tracing::info!(policy = %key(policy), roles = ?decision.roles.iter().map(|r| (&r.name, r.current, r.recommended, r.replicas)).collect::<Vec<_>>(), ratio = ?decision.current_ratio, "Disaggregated autoscaling decision");
    Ok(Some(decision))
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
