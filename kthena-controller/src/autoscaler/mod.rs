//! The `autoscaler` controller (Go `pkg/autoscaler/controller/autoscale_controller.go`, spec
//! §6.1): every sync period, for each AutoscalingPolicy with a homogeneous, heterogeneous or
//! disaggregated target, collect the target's entry-pod metrics, compute with `kthena-autoscale`, patch the
//! ModelServing's `spec.replicas` (merge patch) or role replicas (JSON patch), then write the
//! policy's status.

mod collect;
mod hetero;
mod metrics;
mod prometheus;
mod roles;

use std::collections::HashMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kthena_api::workload::{AutoscalingPolicyStatus, TargetScalingStatus};
use kthena_api::{AutoscalingPolicy, ModelServing};
use kthena_autoscale::{Decision, Observation, PodHistograms, Scaler};
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt as _};
use serde_json::json;

use crate::error::{Result, kube_err};
use crate::names::{ENTRY_LABEL, NAME_LABEL};
use collect::{HttpClient, collect};

/// Go's default `--autoscaling-sync-period-seconds`.
pub const DEFAULT_SYNC_PERIOD: Duration = Duration::from_secs(15);

/// What [`run_autoscaler`] watches and how often it decides.
#[derive(Debug, Clone)]
pub struct AutoscalerConfig {
    /// Only policies of this namespace (all when `None`).
    pub namespace: Option<String>,
    /// Time between two rounds (Go `--autoscaling-sync-period-seconds`, default 15 s).
    pub sync_period: Duration,
    /// Field manager of the writes.
    pub field_manager: String,
}

impl Default for AutoscalerConfig {
    fn default() -> Self {
        Self {
            namespace: None,
            sync_period: DEFAULT_SYNC_PERIOD,
            field_manager: "kthena-controller".to_owned(),
        }
    }
}

/// The state kept for one policy (Go: one scaler per policy key, recreated when the
/// policy's generation changes).
struct PolicyState {
    generation: Option<i64>,
    scaler: Scaler,
    histograms: PodHistograms,
}

/// Scaling state of every policy, by `namespace/name`.
#[derive(Default)]
struct States {
    single: HashMap<String, PolicyState>,
    roles: HashMap<String, roles::RolesState>,
    hetero: HashMap<String, hetero::HeteroState>,
}

/// Runs the autoscaler until `shutdown` completes. Errors of one policy are logged and
/// written to its status; the loop goes on.
pub async fn run_autoscaler(
    client: Client,
    config: AutoscalerConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let http: HttpClient =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .build_http();
    let start = tokio::time::Instant::now();
    let mut states = States::default();
    let mut tick = tokio::time::interval(config.sync_period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => return,
            _ = tick.tick() => {}
        }
        let now = start.elapsed();
        if let Err(e) = round(&client, &config, &http, &mut states, now).await {
            tracing::warn!(error = %e, "Autoscaling round failed");
        }
    }
}

async fn round(
    client: &Client,
    config: &AutoscalerConfig,
    http: &HttpClient,
    states: &mut States,
    now: Duration,
) -> Result<()> {
    let api: Api<AutoscalingPolicy> = match &config.namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let policies = api
        .list(&ListParams::default())
        .await
        .map_err(kube_err("listing AutoscalingPolicies"))?;
    let live: Vec<String> = policies.items.iter().map(key).collect();
    states.single.retain(|k, _| live.contains(k));
    states.roles.retain(|k, _| live.contains(k));
    states.hetero.retain(|k, _| live.contains(k));
    for policy in &policies.items {
        let outcome = if policy.spec.homogeneous_target.is_some() {
            homogeneous(client, http, &mut states.single, policy, now).await
        } else if policy.spec.disaggregated_target.is_some() {
            roles::disaggregated(client, http, &mut states.roles, policy, now).await
        } else if policy.spec.heterogeneous_target.is_some() {
            hetero::heterogeneous(client, http, &mut states.hetero, policy, now).await
        } else {
            continue;
        };
        if let Err(e) = write_status(client, config, policy, outcome).await {
            tracing::warn!(policy = %key(policy), error = %e, "Writing the policy status failed");
        }
    }
    Ok(())
}

fn key(p: &AutoscalingPolicy) -> String {
    format!("{}/{}", p.namespace().unwrap_or_default(), p.name_any())
}

/// What one policy's round produced, for its status.
enum Outcome {
    /// The target was scaled (or kept) by this decision.
    Decided {
        target: String,
        decision: Decision,
        scaled: bool,
    },
    /// No metric had a value: nothing changed.
    Skipped { target: String, current: i32 },
    /// The roles of a disaggregated target were scaled (or kept).
    Roles(kthena_autoscale::RolesDecision),
    /// A role had no metric value: nothing changed.
    RolesSkipped,
    /// The targets of a heterogeneous policy got their shares.
    Hetero(Vec<hetero::TargetPart>, kthena_autoscale::Mode),
    /// No metric of a heterogeneous policy had a value: nothing changed.
    HeteroSkipped,
    /// The target is missing or invalid.
    TargetInvalid(String),
    /// The policy cannot be used, or an API call failed.
    Failed(String),
}

async fn homogeneous(
    client: &Client,
    http: &HttpClient,
    states: &mut HashMap<String, PolicyState>,
    policy: &AutoscalingPolicy,
    now: Duration,
) -> Outcome {
    let Some(h) = &policy.spec.homogeneous_target else {
        return Outcome::Failed("no homogeneous target".to_owned());
    };
    let (ms_api, ms) = match target(client, policy, &h.target.target_ref).await {
        Ok(t) => t,
        Err(outcome) => return outcome,
    };
    let (ns, name) = (ms.namespace().unwrap_or_default(), ms.name_any());
    let current = ms.spec.replicas.unwrap_or(1);
    let state = match state_for(states, policy) {
        Ok(s) => s,
        Err(e) => return Outcome::Failed(e.to_string()),
    };
    let targets = match kthena_autoscale::metric_targets("spec.metrics", &policy.spec.metrics) {
        Ok(t) => t,
        Err(e) => return Outcome::Failed(e.to_string()),
    };
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let selector = format!("{NAME_LABEL}={name},{ENTRY_LABEL}=true");
    let pods = match pods.list(&ListParams::default().labels(&selector)).await {
        Ok(l) => l.items,
        Err(e) => return Outcome::Failed(e.to_string()),
    };
    let collected = collect(
        http,
        &mut state.histograms,
        now,
        &pods,
        &h.target.metric_sources,
    )
    .await;
    let external = collected.external;
    let ready = [collected.ready];
    let o = Observation {
        min_replicas: h.min_replicas,
        max_replicas: h.max_replicas,
        current,
        tolerance: kthena_autoscale::tolerance_from_api(policy),
        targets: &targets,
        unready: collected.unready,
        ready: &ready,
        external: &external,
    };
    let Some(decision) = state.scaler.scale(now, &o) else {
        tracing::info!(policy = %key(policy), "No metric value; skipping this round");
        return Outcome::Skipped {
            target: name,
            current,
        };
    };
    tracing::info!(policy = %key(policy), current, recommended = decision.recommended, corrected = decision.corrected, mode = decision.mode.as_str(), "Autoscaling decision");
    let scaled = decision.corrected != current;
    if scaled {
        let patch = json!({"spec": {"replicas": decision.corrected}});
        if let Err(e) = ms_api
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            return Outcome::Failed(e.to_string());
        }
    }
    Outcome::Decided {
        target: name,
        decision,
        scaled,
    }
}

/// The target ModelServing (kind empty or `ModelServing`, namespace defaulting to the
/// policy's).
async fn target(
    client: &Client,
    policy: &AutoscalingPolicy,
    r: &k8s_openapi::api::core::v1::ObjectReference,
) -> std::result::Result<(Api<ModelServing>, ModelServing), Outcome> {
    if !matches!(r.kind.as_deref(), None | Some("" | "ModelServing")) {
        return Err(Outcome::TargetInvalid(format!(
            "kind {:?} is not ModelServing",
            r.kind
        )));
    }
    let Some(name) = r.name.as_deref().filter(|n| !n.is_empty()) else {
        return Err(Outcome::TargetInvalid("targetRef.name is empty".to_owned()));
    };
    let ns = r
        .namespace
        .clone()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| policy.namespace().unwrap_or_default());
    let api: Api<ModelServing> = Api::namespaced(client.clone(), &ns);
    match api.get_opt(name).await {
        Ok(Some(ms)) => Ok((api, ms)),
        Ok(None) => Err(Outcome::TargetInvalid(format!(
            "ModelServing {ns}/{name} not found"
        ))),
        Err(e) => Err(Outcome::Failed(e.to_string())),
    }
}

/// The policy's scaling state, recreated when its generation changed.
fn state_for<'a>(
    states: &'a mut HashMap<String, PolicyState>,
    policy: &AutoscalingPolicy,
) -> kthena_autoscale::Result<&'a mut PolicyState> {
    kept_state(
        states,
        policy,
        |s| s.generation,
        || {
            Ok(PolicyState {
                generation: policy.metadata.generation,
                scaler: Scaler::new(kthena_autoscale::behavior_from_api(policy)?),
                histograms: PodHistograms::new(),
            })
        },
    )
}

/// The state kept in `states` for `policy` (by `namespace/name`): the stored one while its
/// generation (read by `generation_of`) equals the policy's `metadata.generation`, else a
/// fresh one from `make`, so a spec change restarts the windows.
///
/// # Errors
/// Whatever `make` returns (an AutoscalingPolicy the scaling math cannot use).
fn kept_state<'a, S>(
    states: &'a mut HashMap<String, S>,
    policy: &AutoscalingPolicy,
    generation_of: fn(&S) -> Option<i64>,
    make: impl FnOnce() -> kthena_autoscale::Result<S>,
) -> kthena_autoscale::Result<&'a mut S> {
    use std::collections::hash_map::Entry;
    let generation = policy.metadata.generation;
    Ok(match states.entry(key(policy)) {
        Entry::Occupied(e) if generation_of(e.get()) == generation => e.into_mut(),
        Entry::Occupied(mut e) => {
            e.insert(make()?);
            e.into_mut()
        }
        Entry::Vacant(e) => e.insert(make()?),
    })
}

fn condition(
    type_: &str,
    ok: bool,
    reason: &str,
    message: &str,
    generation: Option<i64>,
) -> Condition {
    Condition {
        type_: type_.to_owned(),
        status: if ok { "True" } else { "False" }.to_owned(),
        reason: reason.to_owned(),
        message: message.to_owned(),
        observed_generation: generation,
        last_transition_time: Time(k8s_openapi::jiff::Timestamp::now()),
    }
}

/// The new status: conditions `Ready` and `TargetFound` (Go's reasons), and
/// `homogeneousStatus` (which Go declares but never writes).
fn next_status(policy: &AutoscalingPolicy, outcome: Outcome) -> AutoscalingPolicyStatus {
    let g = policy.metadata.generation;
    let old = policy.status.clone().unwrap_or_default();
    let mut st = AutoscalingPolicyStatus {
        observed_generation: g,
        ..old.clone()
    };
    let (ready, found, homogeneous) = match outcome {
        Outcome::Decided {
            target,
            decision,
            scaled,
        } => {
            let last = old
                .homogeneous_status
                .as_ref()
                .and_then(|s| s.last_scale_time.clone());
            let status = TargetScalingStatus {
                name: Some(target),
                current_replicas: decision.current,
                desired_replicas: decision.recommended,
                mode: Some(decision.mode.as_str().to_owned()),
                last_scale_time: if scaled {
                    Some(Time(k8s_openapi::jiff::Timestamp::now()))
                } else {
                    last
                },
            };
            (
                (
                    true,
                    "Reconciled",
                    "homogeneous autoscaling policy reconciled".to_owned(),
                ),
                (true, "TargetFound", "target model serving found".to_owned()),
                Some(status),
            )
        }
        Outcome::Skipped { target, current } => {
            let mut status = old.homogeneous_status.unwrap_or_default();
            status.name = Some(target);
            status.current_replicas = current;
            (
                (
                    true,
                    "Reconciled",
                    "no metric value this round; replicas kept".to_owned(),
                ),
                (true, "TargetFound", "target model serving found".to_owned()),
                Some(status),
            )
        }
        Outcome::Roles(d) => {
            st.disaggregated_status = Some(roles::roles_status(policy, &old, &d));
            (
                (
                    true,
                    "Reconciled",
                    "disaggregated autoscaling policy reconciled".to_owned(),
                ),
                (
                    true,
                    "TargetFound",
                    "target model serving and roles found".to_owned(),
                ),
                old.homogeneous_status,
            )
        }
        Outcome::Hetero(parts, mode) => {
            st.heterogeneous_status = hetero::hetero_status(&old, &parts, mode);
            (
                (
                    true,
                    "Reconciled",
                    "heterogeneous autoscaling policy reconciled".to_owned(),
                ),
                (
                    true,
                    "TargetFound",
                    "target model servings found".to_owned(),
                ),
                old.homogeneous_status,
            )
        }
        Outcome::HeteroSkipped => (
            (
                true,
                "Reconciled",
                "no metric value this round; replicas kept".to_owned(),
            ),
            (
                true,
                "TargetFound",
                "target model servings found".to_owned(),
            ),
            old.homogeneous_status,
        ),
        Outcome::RolesSkipped => (
            (
                true,
                "Reconciled",
                "a role has no metric value this round; replicas kept".to_owned(),
            ),
            (
                true,
                "TargetFound",
                "target model serving and roles found".to_owned(),
            ),
            old.homogeneous_status,
        ),
        Outcome::TargetInvalid(m) => (
            (false, "ReconcileFailed", m.clone()),
            (false, "TargetInvalid", m),
            old.homogeneous_status,
        ),
        Outcome::Failed(m) => (
            (false, "ReconcileFailed", m),
            (true, "TargetFound", "target model serving found".to_owned()),
            old.homogeneous_status,
        ),
    };
    st.homogeneous_status = homogeneous;
    crate::set_condition(
        &mut st.conditions,
        condition("Ready", ready.0, ready.1, &ready.2, g),
    );
    crate::set_condition(
        &mut st.conditions,
        condition("TargetFound", found.0, found.1, &found.2, g),
    );
    st
}

async fn write_status(
    client: &Client,
    config: &AutoscalerConfig,
    policy: &AutoscalingPolicy,
    outcome: Outcome,
) -> Result<()> {
    let st = next_status(policy, outcome);
    if policy.status.as_ref() == Some(&st) {
        return Ok(());
    }
    let ns = policy.namespace().unwrap_or_default();
    let api: Api<AutoscalingPolicy> = Api::namespaced(client.clone(), &ns);
    let pp = PatchParams {
        field_manager: Some(config.field_manager.clone()),
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
