//! Heterogeneous targets: one replica total over several ModelServings, cheapest capacity
//! first (Go `optimizer.go`, spec §6.5).

use std::collections::HashMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kthena_api::AutoscalingPolicy;
use kthena_api::workload::{AutoscalingPolicyStatus, TargetScalingStatus};
use kthena_autoscale::{Optimizer, PodHistograms, TargetObservation};
use kube::ResourceExt as _;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;

use super::collect::{HttpClient, collect};
use super::{Outcome, kept_state, key, target};
use crate::names::{ENTRY_LABEL, NAME_LABEL};

/// The state kept for one heterogeneous policy.
pub(super) struct HeteroState {
    generation: Option<i64>,
    optimizer: Optimizer,
    histograms: PodHistograms,
}

/// One target's part of a decision, for the status.
#[derive(Debug)]
pub(super) struct TargetPart {
    name: String,
    current: i32,
    replicas: i32,
}

fn state_for<'a>(
    states: &'a mut HashMap<String, HeteroState>,
    policy: &AutoscalingPolicy,
) -> kthena_autoscale::Result<&'a mut HeteroState> {
    kept_state(
        states,
        policy,
        |s| s.generation,
        || {
            Ok(HeteroState {
                generation: policy.metadata.generation,
                optimizer: kthena_autoscale::optimizer_from_api(policy)?,
                histograms: PodHistograms::new(),
            })
        },
    )
}

/// One round of a heterogeneous policy: each target's metrics (its entry pods and sources),
/// the optimizer, then a merge patch of `spec.replicas` on every target whose share changed.
pub(super) async fn heterogeneous(
    client: &kube::Client,
    http: &HttpClient,
    states: &mut HashMap<String, HeteroState>,
    policy: &AutoscalingPolicy,
    now: Duration,
) -> Outcome {
    let Some(h) = &policy.spec.heterogeneous_target else {
        return Outcome::Failed("no heterogeneous target".to_owned());
    };
    let mut targets = Vec::with_capacity(h.params.len());
    for p in &h.params {
        match target(client, policy, &p.target.target_ref).await {
            Ok(t) => targets.push(t),
            Err(outcome) => return outcome,
        }
    }
    let metric_targets =
        match kthena_autoscale::metric_targets("spec.metrics", &policy.spec.metrics) {
            Ok(t) => t,
            Err(e) => return Outcome::Failed(e.to_string()),
        };
    let state = match state_for(states, policy) {
        Ok(s) => s,
        Err(e) => return Outcome::Failed(e.to_string()),
    };
    let mut observed = Vec::with_capacity(targets.len());
    for ((_, ms), p) in targets.iter().zip(&h.params) {
        let (ns, name) = (ms.namespace().unwrap_or_default(), ms.name_any());
        let selector = format!("{NAME_LABEL}={name},{ENTRY_LABEL}=true");
        let pods = match Api::<Pod>::namespaced(client.clone(), &ns)
            .list(&ListParams::default().labels(&selector))
            .await
        {
            Ok(l) => l.items,
            Err(e) => return Outcome::Failed(e.to_string()),
        };
        let c = collect(
            http,
            &mut state.histograms,
            now,
            &pods,
            &p.target.metric_sources,
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
        .optimizer
        .scale(now, tolerance, &metric_targets, &observed)
    else {
        tracing::info!(policy = %key(policy), "No metric value; skipping this round");
        return Outcome::HeteroSkipped;
    };
    tracing::info!(policy = %key(policy), recommended = d.total.recommended, corrected = d.total.corrected, replicas = ?d.replicas, "Heterogeneous autoscaling decision");
    let mut parts = Vec::with_capacity(targets.len());
    for (((api, ms), obs), &replicas) in targets.iter().zip(&observed).zip(&d.replicas) {
        let name = ms.name_any();
        if replicas != obs.current {
            let patch = json!({"spec": {"replicas": replicas}});
            if let Err(e) = api
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                return Outcome::Failed(e.to_string());
            }
        }
        parts.push(TargetPart {
            name,
            current: obs.current,
            replicas,
        });
    }
    Outcome::Hetero(parts, d.total.mode)
}

/// `heterogeneousStatus` (declared by Go, never written there): per target its current
/// replicas, its share of the decision and the mode of the total.
pub(super) fn hetero_status(
    old: &AutoscalingPolicyStatus,
    parts: &[TargetPart],
    mode: kthena_autoscale::Mode,
) -> Vec<TargetScalingStatus> {
    let last = |name: &str| {
        old.heterogeneous_status
            .iter()
            .find(|s| s.name.as_deref() == Some(name))?
            .last_scale_time
            .clone()
    };
    parts
        .iter()
        .map(|p| TargetScalingStatus {
            name: Some(p.name.clone()),
            current_replicas: p.current,
            desired_replicas: p.replicas,
            mode: Some(mode.as_str().to_owned()),
            last_scale_time: if p.replicas != p.current {
                Some(Time(k8s_openapi::jiff::Timestamp::now()))
            } else {
                last(&p.name)
            },
        })
        .collect()
}
