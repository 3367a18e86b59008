//! Homogeneous targets: `spec.replicas` of one ModelServing (Go
//! `pkg/autoscaler/autoscaler/scaler.go`).

use std::collections::HashMap;
use std::time::Duration;

use kthena_api::AutoscalingPolicy;
use kthena_api::workload::HomogeneousTarget;
use kthena_autoscale::{Observation, Scaler};
use kube::ResourceExt as _;
use kube::api::{Patch, PatchParams};
use serde_json::json;

use super::collect::{Clients, Problem, collect};
use super::outcome::{Outcome, entry_pods, target};
use super::state::{Kept, kept, key};
use crate::error::{Result, kube_err};

/// One round of a homogeneous policy: the target's metrics (its entry pods and sources), the
/// scaler, then a merge patch of `spec.replicas` when the decision differs from it.
///
/// # Errors
/// An invalid target ([`Outcome::from_error`] tells), a policy the math cannot use
/// ([`crate::Error::Autoscale`]), a failed API call ([`crate::Error::Kube`]).
pub(super) async fn homogeneous(
    client: &kube::Client,
    http: &Clients,
    states: &mut HashMap<String, Kept<Scaler>>,
    policy: &AutoscalingPolicy,
    h: &HomogeneousTarget,
    now: Duration,
    problems: &mut Vec<Problem>,
) -> Result<Outcome> {
    let (ms_api, ms) = target(client, policy, &h.target.target_ref).await?;
    let (ns, name) = (ms.namespace().unwrap_or_default(), ms.name_any());
    let current = ms.spec.replicas.unwrap_or(1);
    let state = kept(states, policy, |p| {
        Ok(Scaler::new(kthena_autoscale::behavior_from_api(p)?))
    })?;
    let targets = kthena_autoscale::metric_targets("spec.metrics", &policy.spec.metrics)?;
    let pods = entry_pods(client, &ms).await?;
    let collected = collect(
        http,
        &policy.namespace().unwrap_or_default(),
        &mut state.histograms,
        now,
        &pods,
        &h.target.metric_sources,
        problems,
    )
    .await;
    let ready = [collected.ready];
    let o = Observation {
        min_replicas: h.min_replicas,
        max_replicas: h.max_replicas,
        current,
        tolerance: kthena_autoscale::tolerance_from_api(policy),
        targets: &targets,
        unready: collected.unready,
        ready: &ready,
        external: &collected.external,
    };
    let Some(decision) = state.scaler.scale(now, &o) else {
        tracing::info!(policy = %key(policy), "No metric value; skipping this round");
        return Ok(Outcome::Skipped {
            target: name,
            current,
        });
    };
    let scaled = decision.corrected != current;
    // At INFO only when it scales: an unchanged decision every round is noise.
    if scaled {
        tracing::info!(policy = %key(policy), current, recommended = decision.recommended, corrected = decision.corrected, mode = decision.mode.as_str(), "Autoscaling decision");
    } else {
        tracing::debug!(policy = %key(policy), current, recommended = decision.recommended, corrected = decision.corrected, mode = decision.mode.as_str(), "Autoscaling decision");
    }
    if scaled {
        let patch = json!({"spec": {"replicas": decision.corrected}});
        ms_api
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(kube_err(format!("scaling ModelServing {ns}/{name}")))?;
    }
    Ok(Outcome::Decided {
        target: name,
        decision,
        scaled,
    })
}
