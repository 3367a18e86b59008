//! The `autoscaler` controller (Go `pkg/autoscaler/controller/autoscale_controller.go`):
//! every sync period, for each AutoscalingPolicy with a homogeneous, heterogeneous or
//! disaggregated target, collect the target's entry-pod metrics, compute with `kthena-autoscale`, patch the
//! ModelServing's `spec.replicas` (merge patch) or role replicas (JSON patch), then write the
//! policy's status.

mod claims;
mod collect;
mod events;
mod hetero;
mod homogeneous;
mod metrics;
mod outcome;
mod prometheus;
mod roles;
mod state;
mod status;

use std::time::Duration;

use kthena_api::AutoscalingPolicy;
use kube::Client;
use kube::api::{Api, ListParams};
use kube::runtime::events::{Recorder, Reporter};

use crate::error::{Result, kube_err};
use collect::Clients;
use outcome::Outcome;
use state::{States, key};

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

/// Runs the autoscaler until `shutdown` completes. Errors of one policy are logged and
/// written to its status; the loop goes on.
pub async fn run_autoscaler(
    client: Client,
    config: AutoscalerConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let http = Clients {
        http: hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .build_http(),
        tls: prometheus::access::TlsClients::default(),
        kube: client.clone(),
    };
    let reporter = Reporter {
        controller: config.field_manager.clone(),
        instance: None,
    };
    let recorder = Recorder::new(client.clone(), reporter);
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
        if let Err(e) = round(&client, &recorder, &config, &http, &mut states, now).await {
            tracing::warn!(error = %e, "Autoscaling round failed");
        }
    }
}

/// One round over every policy: a decision per policy (by its kind of target), a Warning
/// event per metric value that was no sample, then its status.
async fn round(
    client: &Client,
    recorder: &Recorder,
    config: &AutoscalerConfig,
    http: &Clients,
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
    states.retain(&live);
    let mut conflicts = claims::conflicts(&policies.items);
    for policy in &policies.items {
        let spec = &policy.spec;
        let mut problems = Vec::new();
        let p = &mut problems;
        let outcome = if let Some(e) = conflicts.remove(&key(policy)) {
            tracing::warn!(policy = %key(policy), error = %e, "Policy not applied");
            Ok(Outcome::Ambiguous(e))
        } else if let Some(h) = &spec.homogeneous_target {
            homogeneous::homogeneous(client, http, &mut states.single, policy, h, now, p).await
        } else if let Some(d) = &spec.disaggregated_target {
            roles::disaggregated(client, http, &mut states.roles, policy, d, now, p).await
        } else if let Some(h) = &spec.heterogeneous_target {
            hetero::heterogeneous(client, http, &mut states.hetero, policy, h, now, p).await
        } else {
            continue;
        };
        let outcome = outcome.unwrap_or_else(Outcome::from_error);
        events::invalid_values(recorder, policy, &problems).await;
        let fm = &config.field_manager;
        if let Err(e) = status::write_status(client, fm, policy, outcome, &problems).await {
            tracing::warn!(policy = %key(policy), error = %e, "Writing the policy status failed");
        }
    }
    Ok(())
}
