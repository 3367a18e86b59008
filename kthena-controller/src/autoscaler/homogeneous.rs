//! Homogeneous targets: `spec.replicas` of one ModelServing (Go
//! `pkg/autoscaler/autoscaler/scaler.go`), with scale to zero when `minReplicas` is 0.

use std::collections::HashMap;

use kthena_api::workload::HomogeneousTarget;
use kthena_api::{AutoscalingPolicy, ModelServing};
use kthena_autoscale::{Decision, Mode, Observation, Scaler, ZeroStep};
use kube::ResourceExt as _;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use super::collect::{Problem, collect};
use super::outcome::{Done, Outcome, entry_pods, target};
use super::state::{Kept, kept, key};
use super::zero::{Pass, condition};
use crate::error::{Result, kube_err};

/// One round of a homogeneous policy. With `minReplicas: 0` the routers decide first
/// ([`kthena_autoscale::plan`]): stay at zero, wake to 1, or go to zero; otherwise (and in
/// every other case) the metric round of [`metric_round`], its lower bound raised to 1 while
/// the target may go to zero. `None` in a wake tick when the target is not at zero.
///
/// # Errors
/// An invalid target ([`Outcome::from_error`] tells), a policy the math cannot use
/// ([`crate::Error::Autoscale`]), a failed API call ([`crate::Error::Kube`]).
pub(super) async fn homogeneous(
    pass: &Pass<'_>,
    states: &mut HashMap<String, Kept<Scaler>>,
    policy: &AutoscalingPolicy,
    h: &HomogeneousTarget,
    problems: &mut Vec<Problem>,
) -> Result<Option<Done>> {
    let (ms_api, ms) = target(pass.client, policy, &h.target.target_ref).await?;
    let current = ms.spec.replicas.unwrap_or(1);
    let zero_capable = h.min_replicas == 0;
    if pass.wake_only && !(zero_capable && current <= 0) {
        return Ok(None);
    }
    let view = match zero_capable {
        true => Some(pass.view(policy, &[&ms]).await?),
        false => None,
    };
    let zero = view.as_ref().map(|v| condition(v, current));
    let fixed = |replicas: i32| Decision {
        current,
        recommended: replicas,
        corrected: replicas,
        mode: Mode::Stable,
    };
    let outcome = match kthena_autoscale::plan(current, h.min_replicas, view.as_ref()) {
        ZeroStep::Stay => Outcome::Decided {
            target: ms.name_any(),
            decision: fixed(current),
            scaled: false,
        },
        ZeroStep::Wake(n) => write(&ms_api, &ms, policy, fixed(n)).await?,
        ZeroStep::ToZero => write(&ms_api, &ms, policy, fixed(0)).await?,
        ZeroStep::Scale { floor } => {
            metric_round(pass, states, policy, h, (&ms_api, &ms), floor, problems).await?
        }
    };
    Ok(Some(Done { outcome, zero }))
}

/// Merge-patches `spec.replicas` to `decision.corrected` when it differs from the current
/// replicas.
///
/// # Errors
/// [`crate::Error::Kube`] when the patch fails.
async fn write(
    api: &Api<ModelServing>,
    ms: &ModelServing,
    policy: &AutoscalingPolicy,
    decision: Decision,
) -> Result<Outcome> {
    let (ns, name) = (ms.namespace().unwrap_or_default(), ms.name_any());
    let scaled = decision.corrected != decision.current;
    // At INFO only when it scales: an unchanged decision every round is noise.
    if scaled {
        tracing::info!(policy = %key(policy), current = decision.current, recommended = decision.recommended, corrected = decision.corrected, mode = decision.mode.as_str(), "Autoscaling decision");
        let patch = json!({"spec": {"replicas": decision.corrected}});
        api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(kube_err(format!("scaling ModelServing {ns}/{name}")))?;
    } else {
        tracing::debug!(policy = %key(policy), current = decision.current, recommended = decision.recommended, corrected = decision.corrected, mode = decision.mode.as_str(), "Autoscaling decision");
    }
    Ok(Outcome::Decided {
        target: name,
        decision,
        scaled,
    })
}

/// The metric round: the target's metrics (its entry pods and sources), the scaler with
/// lower bound `max(minReplicas, floor)`, then [`write`].
///
/// # Errors
/// As [`homogeneous`].
async fn metric_round(
    pass: &Pass<'_>,
    states: &mut HashMap<String, Kept<Scaler>>,
    policy: &AutoscalingPolicy,
    h: &HomogeneousTarget,
    (ms_api, ms): (&Api<ModelServing>, &ModelServing),
    floor: i32,
    problems: &mut Vec<Problem>,
) -> Result<Outcome> {
    let current = ms.spec.replicas.unwrap_or(1);
    let state = kept(states, policy, |p| {
        Ok(Scaler::new(kthena_autoscale::behavior_from_api(p)?))
    })?;
    let targets = kthena_autoscale::metric_targets("spec.metrics", &policy.spec.metrics)?;
    let pods = entry_pods(pass.client, ms).await?;
    let collected = collect(
        pass.http,
        &policy.namespace().unwrap_or_default(),
        &mut state.histograms,
        pass.now,
        &pods,
        &h.target.metric_sources,
        problems,
    )
    .await;
    let ready = [collected.ready];
    let o = Observation {
        min_replicas: h.min_replicas.max(floor),
        max_replicas: h.max_replicas,
        current,
        tolerance: kthena_autoscale::tolerance_from_api(policy),
        targets: &targets,
        unready: collected.unready,
        ready: &ready,
        external: &collected.external,
    };
    let Some(decision) = state.scaler.scale(pass.now, &o) else {
        tracing::info!(policy = %key(policy), "No metric value; skipping this round");
        return Ok(Outcome::Skipped {
            target: ms.name_any(),
            current,
        });
    };
    write(ms_api, ms, policy, decision).await
}
