//! The AutoscalingPolicy status after a round: conditions `Ready` and `TargetFound` (Go's
//! reasons and messages) and the per-target scaling status of each kind of target.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kthena_api::AutoscalingPolicy;
use kthena_api::workload::{
    AutoscalingPolicyStatus, DisaggregatedStatus, RatioStatus, TargetScalingStatus,
};
use kthena_autoscale::{Mode, RolesDecision};
use kube::Client;
use kube::ResourceExt as _;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use super::collect::Problem;
use super::events::INVALID_METRIC_VALUE;
use super::outcome::{Done, Outcome, TargetPart};
use super::state::key;
use crate::error::{Result, kube_err};

const SERVING_FOUND: &str = "target model serving found";
const SERVINGS_FOUND: &str = "target model servings found";
const ROLES_FOUND: &str = "target model serving and roles found";
const KEPT: &str = "no metric value this round; replicas kept";

/// One condition's `(status, reason, message)`.
type Verdict = (bool, &'static str, String);

/// `Ready=True/Reconciled` with `message`, `TargetFound=True/TargetFound` with `found`.
fn reconciled(message: &str, found: &str) -> (Verdict, Verdict) {
    (
        (true, "Reconciled", message.to_owned()),
        (true, "TargetFound", found.to_owned()),
    )
}

/// Reason of `Ready=False` when a Prometheus query failed (and no value was refused).
const METRIC_UNAVAILABLE: &str = "MetricUnavailable";
/// Problems named in a condition message; the rest are counted.
const MAX_PROBLEMS_SHOWN: usize = 5;

/// Writes the status the round's outcome and `problems` lead to, with the `ScaleToZero`
/// condition of `done` when it has one, when it differs from the stored one, as
/// `field_manager`.
///
/// # Errors
/// [`crate::Error::Kube`] when the status patch fails.
pub(super) async fn write_status(
    client: &Client,
    field_manager: &str,
    policy: &AutoscalingPolicy,
    done: Done,
    problems: &[Problem],
) -> Result<()> {
    let mut st = next_status(policy, done.outcome, problems);
    if let Some((ok, reason, message)) = done.zero {
        let g = policy.metadata.generation;
        kthena_api::conditions::set_status_condition(
            &mut st.conditions,
            condition(super::zero::CONDITION, ok, reason, &message, g),
        );
    }
    if policy.status.as_ref() == Some(&st) {
        return Ok(());
    }
    let ns = policy.namespace().unwrap_or_default();
    let api: Api<AutoscalingPolicy> = Api::namespaced(client.clone(), &ns);
    let pp = PatchParams {
        field_manager: Some(field_manager.to_owned()),
        ..PatchParams::default()
    };
    api.patch_status(
        &policy.name_any(),
        &pp,
        &Patch::Merge(&json!({"status": st})),
    )
    .await
    .map_err(kube_err(format!(
        "writing the status of AutoscalingPolicy {}",
        key(policy)
    )))?;
    Ok(())
}

/// The new status: `observedGeneration`, the conditions, and the scaling status of the
/// target kind the outcome is about (`homogeneousStatus`, `heterogeneousStatus`,
/// `disaggregatedStatus`); a round without a decision keeps the last decision's fields.
/// `problems` (values that were no sample, failed Prometheus queries) turn an otherwise
/// ready round into `Ready=False` with reason `InvalidMetricValue` or `MetricUnavailable`,
/// the problems and then the round's own message.
fn next_status(
    policy: &AutoscalingPolicy,
    outcome: Outcome,
    problems: &[Problem],
) -> AutoscalingPolicyStatus {
    let g = policy.metadata.generation;
    let old = policy.status.clone().unwrap_or_default();
    let mut st = AutoscalingPolicyStatus {
        observed_generation: g,
        ..old.clone()
    };
    let (ready, found) = verdicts(policy, &old, &mut st, outcome);
    let ready = with_problems(ready, problems);
    for (type_, (ok, reason, message)) in [("Ready", ready), ("TargetFound", found)] {
        kthena_api::conditions::set_status_condition(
            &mut st.conditions,
            condition(type_, ok, reason, &message, g),
        );
    }
    st
}

/// `ready` with `problems`: unchanged when there are none or it is already `False`; else
/// `False`, reason `InvalidMetricValue` (a value was no sample) or `MetricUnavailable`, and
/// the message `<problems>; <ready's message>`.
fn with_problems(ready: Verdict, problems: &[Problem]) -> Verdict {
    if problems.is_empty() || !ready.0 {
        return ready;
    }
    let reason = if problems.iter().any(Problem::is_invalid_value) {
        INVALID_METRIC_VALUE
    } else {
        METRIC_UNAVAILABLE
    };
    let mut shown: Vec<String> = problems
        .iter()
        .take(MAX_PROBLEMS_SHOWN)
        .map(ToString::to_string)
        .collect();
    if problems.len() > MAX_PROBLEMS_SHOWN {
        shown.push(format!("and {} more", problems.len() - MAX_PROBLEMS_SHOWN));
    }
    (false, reason, format!("{}; {}", shown.join("; "), ready.2))
}

/// The `Ready` and `TargetFound` verdicts of `outcome`, writing its scaling status into `st`.
fn verdicts(
    policy: &AutoscalingPolicy,
    old: &AutoscalingPolicyStatus,
    st: &mut AutoscalingPolicyStatus,
    outcome: Outcome,
) -> (Verdict, Verdict) {
    match outcome {
        Outcome::Decided {
            target,
            decision,
            scaled,
        } => {
            let last = old
                .homogeneous_status
                .as_ref()
                .and_then(|s| s.last_scale_time.clone());
            st.homogeneous_status = Some(scaling_status(
                target,
                (decision.current, decision.recommended),
                decision.mode,
                scaled,
                last,
            ));
            reconciled("homogeneous autoscaling policy reconciled", SERVING_FOUND)
        }
        Outcome::Skipped { target, current } => {
            let mut status = old.homogeneous_status.clone().unwrap_or_default();
            status.name = Some(target);
            status.current_replicas = current;
            st.homogeneous_status = Some(status);
            reconciled(KEPT, SERVING_FOUND)
        }
        Outcome::Roles(d) => {
            st.disaggregated_status = Some(roles_status(policy, old, &d));
            reconciled("disaggregated autoscaling policy reconciled", ROLES_FOUND)
        }
        Outcome::Hetero(parts, mode) => {
            st.heterogeneous_status = hetero_status(old, &parts, mode);
            reconciled(
                "heterogeneous autoscaling policy reconciled",
                SERVINGS_FOUND,
            )
        }
        Outcome::HeteroSkipped => reconciled(KEPT, SERVINGS_FOUND),
        Outcome::RolesSkipped => reconciled(
            "a role has no metric value this round; replicas kept",
            ROLES_FOUND,
        ),
        Outcome::TargetInvalid(e) => (
            (false, "ReconcileFailed", e.to_string()),
            (false, "TargetInvalid", e.to_string()),
        ),
        Outcome::Ambiguous(e) => (
            (false, "AmbiguousTarget", e.to_string()),
            (true, "TargetFound", SERVING_FOUND.to_owned()),
        ),
        Outcome::Failed(e) => (
            (false, "ReconcileFailed", e.to_string()),
            (true, "TargetFound", SERVING_FOUND.to_owned()),
        ),
    }
}

fn condition(
    type_: &str,
    ok: bool,
    reason: &str,
    message: &str,
    generation: Option<i64>,
) -> Condition {
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    kthena_api::conditions::condition(type_, ok, reason, message.to_owned(), generation, now)
}

/// One target's (or role's) scaling status: `(current, desired)` replicas, the mode, and
/// `lastScaleTime` now when its replicas `changed`, else `last`.
fn scaling_status(
    name: String,
    (current, desired): (i32, i32),
    mode: Mode,
    changed: bool,
    last: Option<Time>,
) -> TargetScalingStatus {
    TargetScalingStatus {
        name: Some(name),
        current_replicas: current,
        desired_replicas: Some(desired),
        mode: Some(mode.as_str().to_owned()),
        last_scale_time: if changed {
            Some(Time(k8s_openapi::jiff::Timestamp::now()))
        } else {
            last
        },
    }
}

/// `lastScaleTime` of the entry named `name` in `statuses`.
fn last_scale_time(statuses: &[TargetScalingStatus], name: &str) -> Option<Time> {
    statuses
        .iter()
        .find(|s| s.name.as_deref() == Some(name))?
        .last_scale_time
        .clone()
}

/// `heterogeneousStatus` (declared by Go, never written there): per target its current
/// replicas, its share of the decision and the mode of the total.
fn hetero_status(
    old: &AutoscalingPolicyStatus,
    parts: &[TargetPart],
    mode: Mode,
) -> Vec<TargetScalingStatus> {
    parts
        .iter()
        .map(|p| {
            scaling_status(
                p.name.clone(),
                (p.current, p.replicas),
                mode,
                p.replicas != p.current,
                last_scale_time(&old.heterogeneous_status, &p.name),
            )
        })
        .collect()
}

/// `disaggregatedStatus` after a decision (Go: `desiredReplicas` is the recommendation,
/// `lastScaleTime` is set when the final replicas differ from the current ones).
fn roles_status(
    policy: &AutoscalingPolicy,
    old: &AutoscalingPolicyStatus,
    decision: &RolesDecision,
) -> DisaggregatedStatus {
    let old_roles = old
        .disaggregated_status
        .as_ref()
        .map(|d| d.roles.as_slice())
        .unwrap_or_default();
    let roles = decision
        .roles
        .iter()
        .map(|r| {
            scaling_status(
                r.name.clone(),
                (r.current, r.recommended),
                r.mode,
                r.replicas != r.current,
                last_scale_time(old_roles, &r.name),
            )
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

#[cfg(test)]
mod tests;
