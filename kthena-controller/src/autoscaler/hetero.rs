//! Heterogeneous targets: one replica total over several ModelServings, cheapest capacity
//! first (Go `pkg/autoscaler/autoscaler/optimizer.go`).

use std::collections::HashMap;
use std::time::Duration;

use kthena_api::AutoscalingPolicy;
use kthena_api::workload::HeterogeneousTarget;
use kthena_autoscale::{Optimizer, TargetObservation};
use kube::ResourceExt as _;
use kube::api::{Patch, PatchParams};
use serde_json::json;

use super::collect::{Clients, Problem, collect};
use super::outcome::{Outcome, TargetPart, entry_pods, target};
use super::state::{Kept, kept, key};
use crate::error::{Result, kube_err};

/// One round of a heterogeneous policy: each target's metrics (its entry pods and sources),
/// the optimizer, then a merge patch of `spec.replicas` on every target whose share changed.
///
/// # Errors
/// An invalid target ([`Outcome::from_error`] tells), a policy the math cannot use
/// ([`crate::Error::Autoscale`]), a failed API call ([`crate::Error::Kube`]).
pub(super) async fn heterogeneous(
    client: &kube::Client,
    http: &Clients,
    states: &mut HashMap<String, Kept<Optimizer>>,
    policy: &AutoscalingPolicy,
    h: &HeterogeneousTarget,
    now: Duration,
    problems: &mut Vec<Problem>,
) -> Result<Outcome> {
    let mut targets = Vec::with_capacity(h.params.len());
    for p in &h.params {
        targets.push(target(client, policy, &p.target.target_ref).await?);
    }
    let metric_targets = kthena_autoscale::metric_targets("spec.metrics", &policy.spec.metrics)?;
    let state = kept(states, policy, kthena_autoscale::optimizer_from_api)?;
    let mut observed = Vec::with_capacity(targets.len());
    for ((_, ms), p) in targets.iter().zip(&h.params) {
        let pods = entry_pods(client, ms).await?;
        let c = collect(
            http,
            &policy.namespace().unwrap_or_default(),
            &mut state.histograms,
            now,
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
    let Some(d) = state
        .scaler
        .scale(now, tolerance, &metric_targets, &observed)
    else {
        tracing::info!(policy = %key(policy), "No metric value; skipping this round");
        return Ok(Outcome::HeteroSkipped);
    };
    tracing::info!(policy = %key(policy), recommended = d.total.recommended, corrected = d.total.corrected, replicas = ?d.replicas, "Heterogeneous autoscaling decision");
    let mut parts = Vec::with_capacity(targets.len());
    for (((api, ms), obs), &replicas) in targets.iter().zip(&observed).zip(&d.replicas) {
        let (ns, name) = (ms.namespace().unwrap_or_default(), ms.name_any());
        if replicas != obs.current {
            let patch = json!({"spec": {"replicas": replicas}});
            api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(kube_err(format!("scaling ModelServing {ns}/{name}")))?;
        }
        parts.push(TargetPart {
            name,
            current: obs.current,
            replicas,
        });
    }
    Ok(Outcome::Hetero(parts, d.total.mode))
}
