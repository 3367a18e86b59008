//! The `autoscaler` controller (Go `pkg/autoscaler/controller/autoscale_controller.go`):
//! every sync period, for each AutoscalingPolicy with a homogeneous, heterogeneous or
//! disaggregated target, collect the target's entry-pod metrics, compute with `kthena-autoscale`, patch the
//! ModelServing's `spec.replicas` (merge patch) or role replicas (JSON patch), then write the
//! policy's status. Targets that may go to zero replicas are also decided from the routers'
//! metrics (`routers`, `servers`, `zero`), and every [`WAKE_PERIOD`] a wake tick in the same
//! loop looks at the targets at zero only.

mod claims;
mod collect;
mod events;
mod hetero;
mod homogeneous;
mod metrics;
mod outcome;
mod prometheus;
mod roles;
mod routers;
mod servers;
mod state;
mod status;
mod zero;

use std::time::Duration;

use kthena_api::AutoscalingPolicy;
use kube::Client;
use kube::api::{Api, ListParams};
use kube::runtime::events::{Recorder, Reporter};

use crate::error::{Result, kube_err};
use collect::Clients;
use outcome::{Done, Outcome};
pub use routers::{HELD_FAMILY, IDLE_FAMILY, RouterMetrics};
use state::{States, key};
use zero::Pass;

/// Go's default `--autoscaling-sync-period-seconds`.
pub const DEFAULT_SYNC_PERIOD: Duration = Duration::from_secs(15);

/// Time between two wake ticks: checks of the targets at zero replicas against the routers'
/// held requests, between the full rounds.
pub const WAKE_PERIOD: Duration = Duration::from_secs(1);

/// What [`run_autoscaler`] watches and how often it decides.
#[derive(Debug, Clone)]
pub struct AutoscalerConfig {
    /// Only policies of this namespace (all when `None`).
    pub namespace: Option<String>,
    /// Time between two rounds (Go `--autoscaling-sync-period-seconds`, default 15 s).
    pub sync_period: Duration,
    /// Field manager of the writes.
    pub field_manager: String,
    /// The routers' metrics Service (`--router-metrics-service`): without it no target goes
    /// to zero replicas.
    pub router_metrics: Option<RouterMetrics>,
}

impl Default for AutoscalerConfig {
    fn default() -> Self {
        Self {
            namespace: None,
            sync_period: DEFAULT_SYNC_PERIOD,
            field_manager: "kthena-controller".to_owned(),
            router_metrics: None,
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
    let mut wake = tokio::time::interval(WAKE_PERIOD);
    wake.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    tokio::pin!(shutdown);
    loop {
        let wake_only = tokio::select! {
            () = &mut shutdown => return,
            _ = tick.tick() => false,
            _ = wake.tick(), if states.zero_capable => true,
        };
        let now = start.elapsed();
        let pass = Pass::new(
            &client,
            &http,
            now,
            wake_only,
            config.router_metrics.as_ref(),
        );
        if let Err(e) = round(&pass, &recorder, &config, &mut states).await {
            tracing::warn!(error = %e, "Autoscaling round failed");
        }
    }
}

/// One round over every policy (a wake tick: only those with a target at zero): a decision
/// per policy (by its kind of target), a Warning event per metric value that was no sample,
/// then its status.
async fn round(
    pass: &Pass<'_>,
    recorder: &Recorder,
    config: &AutoscalerConfig,
    states: &mut States,
) -> Result<()> {
    let client = pass.client;
    let api: Api<AutoscalingPolicy> = match &config.namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let policies = api
        .list(&ListParams::default())
        .await
        .map_err(kube_err("listing AutoscalingPolicies"))?;
    if !pass.wake_only {
        let live: Vec<String> = policies.items.iter().map(key).collect();
        states.retain(&live);
        states.zero_capable = policies.items.iter().any(|p| p.spec.allows_zero());
    }
    let mut conflicts = claims::conflicts(&policies.items);
    for policy in &policies.items {
        let spec = &policy.spec;
        let mut problems = Vec::new();
        let p = &mut problems;
        let done = if let Some(e) = conflicts.remove(&key(policy)) {
            if pass.wake_only {
                continue;
            }
            tracing::warn!(policy = %key(policy), error = %e, "Policy not applied");
            Ok(Some(Done {
                outcome: Outcome::Ambiguous(e),
                zero: None,
            }))
        } else if let Some(h) = &spec.homogeneous_target {
            homogeneous::homogeneous(pass, &mut states.single, policy, h, p).await
        } else if let Some(d) = &spec.disaggregated_target {
            roles::disaggregated(pass, &mut states.roles, policy, d, p).await
        } else if let Some(h) = &spec.heterogeneous_target {
            hetero::heterogeneous(pass, &mut states.hetero, policy, h, p).await
        } else {
            continue;
        };
        let done = match done {
            Ok(Some(done)) => done,
            Ok(None) => continue,
            Err(e) => Done {
                outcome: Outcome::from_error(e),
                zero: None,
            },
        };
        events::invalid_values(recorder, policy, &problems).await;
        let fm = &config.field_manager;
        if let Err(e) = status::write_status(client, fm, policy, done, &problems).await {
            tracing::warn!(policy = %key(policy), error = %e, "Writing the policy status failed");
        }
    }
    Ok(())
}
