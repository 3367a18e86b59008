//! Leader election on a `coordination.k8s.io/v1` Lease (Go Kthena `--leader-elect`), with
//! `kube-lease-manager`: only the holder of the Lease runs the controllers.

use std::time::Duration;

use futures_util::FutureExt as _;
use kube::Client;
use kube_lease_manager::LeaseManagerBuilder;

use super::Controllers;
use crate::error::{Error, Result};

/// Go's Lease name.
pub const LEASE_NAME: &str = "lease.kthena.controller-manager";

/// Where and how to hold the Lease.
#[derive(Debug, Clone)]
pub struct LeaderElection {
    /// Lease name (Go: [`LEASE_NAME`]).
    pub lease_name: String,
    /// Namespace of the Lease (Go: the controller's own namespace).
    pub namespace: String,
    /// Holder identity, unique per replica (Go: `<hostname>_<uuid>`, see [`identity`]).
    pub identity: String,
    /// Lease duration: another replica may take the Lease this long after the last renewal
    /// (Go: 15 s).
    pub duration: Duration,
    /// How often the holder renews (and a candidate retries) (Go: retry period 2 s).
    pub retry: Duration,
}

impl LeaderElection {
    /// Go's settings: Lease [`LEASE_NAME`] in `namespace`, duration 15 s, renewal every 2 s,
    /// identity [`identity`].
    #[must_use]
    pub fn go_defaults(namespace: impl Into<String>) -> Self {
        Self {
            lease_name: LEASE_NAME.to_owned(),
            namespace: namespace.into(),
            identity: identity(),
            duration: Duration::from_secs(15),
            retry: Duration::from_secs(2),
        }
    }
}

/// `<hostname>_<uuid v4>` (Go's identity); the hostname from `$HOSTNAME`, else
/// `/etc/hostname`, else `kthena-controller`.
#[must_use]
pub fn identity() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "kthena-controller".to_owned());
    format!("{host}_{}", uuid::Uuid::new_v4())
}

/// Waits to hold the Lease, then runs the controllers (the ModelServing controller, the
/// autoscaler when `config.autoscaler` is set, the ModelBooster controller when
/// `config.booster` is set) while holding it.
///
/// Returns `Ok` when `shutdown` completes (the Lease is released for the next replica), and
/// [`Error::LostLease`] as soon as the Lease is lost: the controllers stop at once and the
/// process should exit, as Go's does.
///
/// # Errors
/// [`Error::Lease`] if the Lease cannot be read or created, [`Error::LostLease`].
pub async fn run_leader_elected(
    client: Client,
    config: Controllers,
    election: LeaderElection,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<()> {
    let secs = |d: Duration| d.as_secs().max(1);
    let duration = secs(election.duration);
    let grace = duration
        .saturating_sub(secs(election.retry))
        .clamp(1, duration - 1);
    let manager = LeaseManagerBuilder::new(client.clone(), &election.lease_name)
        .with_namespace(&election.namespace)
        .with_identity(&election.identity)
        .with_duration(duration)
        .with_grace(grace)
        .build()
        .await
        .map_err(Error::Lease)?;
    let (mut leader, task) = manager.watch().await;
    let shutdown = shutdown.boxed().shared();
    tracing::info!(lease = %election.lease_name, identity = %election.identity, "waiting for the lease");
    while !*leader.borrow_and_update() {
        tokio::select! {
            () = shutdown.clone() => return Ok(()),
            changed = leader.changed() => changed.map_err(|_| Error::LostLease)?,
        }
    }
    tracing::info!(identity = %election.identity, "holding the lease: starting controllers");
    let lost = async { while leader.changed().await.is_ok() && *leader.borrow() {} };
    let autoscaler = {
        let (client, autoscaler) = (client.clone(), config.autoscaler.clone());
        async move {
            match autoscaler {
                Some(a) => {
                    crate::autoscaler::run_autoscaler(client, a, std::future::pending()).await
                }
                None => std::future::pending().await,
            }
        }
    };
    let booster = {
        let (client, booster) = (client.clone(), config.booster.clone());
        async move {
            match booster {
                Some(b) => crate::booster::run_booster(client, b, std::future::pending()).await,
                None => std::future::pending().await,
            }
        }
    };
    tokio::select! {
        () = crate::serving::run(client, config.serving, shutdown) => {}
        () = autoscaler => {}
        () = booster => {}
        () = lost => return Err(Error::LostLease),
    }
    drop(leader);
    // The lease manager's task releases the Lease when the channel closes.
    let _ = task.await;
    Ok(())
}

#[cfg(test)]
mod tests;
