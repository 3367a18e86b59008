//! Heterogeneous targets: one replica total over several ModelServings, cheapest capacity
//! first (Go `pkg/autoscaler/autoscaler/optimizer.go`), with scale to zero when every
//! `params[i].minReplicas` is 0.

use std::collections::HashMap;

use kthena_api::workload::HeterogeneousTarget;
use kthena_api::{AutoscalingPolicy, ModelServing};
use kthena_autoscale::{Mode, Optimizer, TargetObservation, ZeroStep};
use kube::ResourceExt as _;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use super::collect::{Problem, collect};
use super::outcome::{Done, Outcome, TargetPart, entry_pods, target};
use super::state::{Kept, kept, key};
use super::zero::{Pass, condition};
use crate::error::{Result, kube_err};

type Targets = Vec<(Api<ModelServing>, ModelServing)>;

/// One round of a heterogeneous policy. With every `minReplicas` 0 the routers decide first
/// ([`kthena_autoscale::plan`] on the total): stay at zero, wake to a total of 1 (on the
/// cheapest target), or go to zero; otherwise the metric round of [`metric_round`], its
/// total raised to at least 1 while the policy may go to zero. `None` in a wake tick when
/// the total is not zero.
///
/// # Errors
/// An invalid target ([`Outcome::from_error`] tells), a policy the math cannot use
/// ([`crate::Error::Autoscale`]), a failed API call ([`crate::Error::Kube`]).
pub(super) async fn heterogeneous(
    pass: &Pass<'_>,
    states: &mut HashMap<String, Kept<Optimizer>>,
    policy: &AutoscalingPolicy,
    h: &HeterogeneousTarget,
    problems: &mut Vec<Problem>,
) -> Result<Option<Done>> {
    let mut targets = Vec::with_capacity(h.params.len());
    for p in &h.params {
        targets.push(target(pass.client, policy, &p.target.target_ref).await?);
    }
    let current: Vec<i32> = targets
        .iter()
        .map(|(_, ms)| ms.spec.replicas.unwrap_or(1))
        .collect();
    let total = current.iter().fold(0i32, |a, &c| a.saturating_add(c));
    let zero_capable = h.params.iter().all(|p| p.min_replicas == 0);
    if pass.wake_only && !(zero_capable && total <= 0) {
        return Ok(None);
    }
    let view = match zero_capable {
        true => {
            let mss: Vec<&ModelServing> = targets.iter().map(|(_, ms)| ms).collect();
            Some(pass.view(policy, &mss).await?)
        }
        false => None,
    };
    let zero = view.as_ref().map(|v| condition(v, total));
    let state = kept(states, policy, kthena_autoscale::optimizer_from_api)?;
    let outcome = match kthena_autoscale::plan(total, 0, view.as_ref()) {
        ZeroStep::Stay => Outcome::Hetero(apply(&targets, &current, &current).await?, Mode::Stable),
        ZeroStep::Wake(n) => {
            let replicas = state.scaler.distribute(n);
            tracing::info!(policy = %key(policy), ?replicas, "Waking from zero: a router holds a request");
            Outcome::Hetero(apply(&targets, &current, &replicas).await?, Mode::Stable)
        }
        ZeroStep::ToZero => {
            tracing::info!(policy = %key(policy), "Scaling to zero: every router reports the targets idle");
            let replicas = vec![0; targets.len()];
            Outcome::Hetero(apply(&targets, &current, &replicas).await?, Mode::Stable)
        }
        ZeroStep::Scale { floor } => {
            metric_round(pass, state, policy, h, &targets, floor, problems).await?
        }
    };
    Ok(Some(Done { outcome, zero }))
}

/// Merge-patches `spec.replicas` of every target whose share differs from its current
/// replicas; the parts for the status.
///
/// # Errors
/// [`crate::Error::Kube`] when a patch fails.
async fn apply(targets: &Targets, current: &[i32], replicas: &[i32]) -> Result<Vec<TargetPart>> {
    let mut parts = Vec::with_capacity(targets.len());
    for (((api, ms), &cur), &replicas) in targets.iter().zip(current).zip(replicas) {
        let (ns, name) = (ms.namespace().unwrap_or_default(), ms.name_any());
        if replicas != cur {
            let patch = json!({"spec": {"replicas": replicas}});
            api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(kube_err(format!("scaling ModelServing {ns}/{name}")))?;
        }
        parts.push(TargetPart {
            name,
            current: cur,
            replicas,
        });
    }
    Ok(parts)
}

/// The metric round: each target's metrics (its entry pods and sources), the optimizer with
/// the total at least `floor`, then [`apply`].
///
/// # Errors
/// As [`heterogeneous`].
async fn metric_round(
    pass: &Pass<'_>,
    state: &mut Kept<Optimizer>,
    policy: &AutoscalingPolicy,
    h: &HeterogeneousTarget,
    targets: &Targets,
    floor: i32,
    problems: &mut Vec<Problem>,
) -> Result<Outcome> {
    let metric_targets = kthena_autoscale::metric_targets("spec.metrics", &policy.spec.metrics)?;
    let mut observed = Vec::with_capacity(targets.len());
    for ((_, ms), p) in targets.iter().zip(&h.params) {
        let pods = entry_pods(pass.client, ms).await?;
        let c = collect(
            pass.http,
            &policy.namespace().unwrap_or_default(),
            &mut state.histograms,
            pass.now,
            &pods,
            &p.target.metric_sources,
            problems,
        )
        .await;
        observed.push(TargetObservation {
            current: ms.spec.replicas.unwrap_or(1),
            unready: c.unready,
            ready: Some(c.ready),
            external: c.external,
        });
    }
    let tolerance = kthena_autoscale::tolerance_from_api(policy);
    let Some(d) =
        state
            .scaler
            .scale_with_floor(pass.now, tolerance, &metric_targets, &observed, floor)
    else {
        tracing::info!(policy = %key(policy), "No metric value; skipping this round");
        return Ok(Outcome::HeteroSkipped);
    };
    tracing::info!(policy = %key(policy), recommended = d.total.recommended, corrected = d.total.corrected, replicas = ?d.replicas, "Heterogeneous autoscaling decision");
    let current: Vec<i32> = observed.iter().map(|o| o.current).collect();
    let parts = apply(targets, &current, &d.replicas).await?;
    Ok(Outcome::Hetero(parts, d.total.mode))
}
