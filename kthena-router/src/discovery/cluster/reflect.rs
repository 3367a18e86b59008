//! The reflectors of cluster mode and Gateway API mode, and how their watches retry.
//!
//! Each reflector is a kube-rs [`watcher`] (one list, then a watch from its
//! `resourceVersion`) feeding a [`Store`]. kube-rs' own back-off
//! (`WatchStreamExt::default_backoff`: 0.8 s doubling to 30 s, jitter adding up to the same
//! again, reset only after 2 minutes without an error) is not used: after an API server
//! restart every watch resumes with `410 Expired` (the new API server's watch cache starts
//! at the current revision), and that back-off made each of those expected errors one more
//! pause, so a router saw the cluster again about a minute after the API server returned.
//! [`Retry`] answers instead:
//!
//! * a watch that ends with `410 Expired` (a `WatchEvent::Error` of code 410, which kube-rs
//!   answers with a fresh list) re-lists at once; a second one within [`RETRY_RESET`] waits
//!   as any other error, so an API server that expires every watch is not listed in a loop;
//! * any other error (API server unreachable, 5xx, 403) waits [`RETRY_MIN`] doubling per
//!   error, with jitter, never more than [`RETRY_MAX`] (jitter included); the delay starts
//!   again from [`RETRY_MIN`] after [`RETRY_RESET`] without an error.
//!
//! The stores keep their last state while a watch fails, so the router keeps serving its
//! last snapshot.

use std::fmt::Debug;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use backon::BackoffBuilder;
use futures_util::StreamExt;
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher;
use kube::{Api, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// First delay after a watch error (before jitter, which adds up to as much again).
pub(crate) const RETRY_MIN: Duration = Duration::from_millis(100);
/// Longest delay between two attempts of a failing watch, jitter included.
pub(crate) const RETRY_MAX: Duration = Duration::from_secs(2);
/// Time without an error after which the delay starts again from [`RETRY_MIN`] and a
/// `410 Expired` re-lists at once again.
pub(crate) const RETRY_RESET: Duration = Duration::from_secs(10);

/// Runs a reflector for `K` on `api`, notifying `changed` after every watch event.
pub(crate) fn reflect<K>(
    api: Api<K>,
    changed: &Arc<Notify>,
    cancel: &CancellationToken,
    tasks: &TaskTracker,
) -> Store<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
{
    reflect_with(api, watcher::Config::default(), changed, cancel, tasks)
}

/// [`reflect`] with a watcher configuration (a label selector).
pub(crate) fn reflect_with<K>(
    api: Api<K>,
    config: watcher::Config,
    changed: &Arc<Notify>,
    cancel: &CancellationToken,
    tasks: &TaskTracker,
) -> Store<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
{
    let (store, writer) = reflector::store();
    let kind = K::kind(&K::DynamicType::default()).into_owned();
    let changed = Arc::clone(changed);
    let cancel = cancel.clone();
    tasks.spawn(async move {
        // The watcher makes requests only when polled: not polling it is the back-off.
        let stream = reflector::reflector(writer, watcher(api, config));
        let mut stream = std::pin::pin!(stream);
        let mut retry = Retry::new();
        loop {
            let ev = tokio::select! {
                () = cancel.cancelled() => return,
                ev = stream.next() => ev,
            };
            let err = match ev {
                Some(Ok(_)) => {
                    changed.notify_one();
                    continue;
                }
                Some(Err(err)) => err,
                None => return,
            };
            let delay = retry.delay(&err, Instant::now());
            if delay.is_zero() {
                tracing::info!(%kind, "Watch expired (410); re-listing");
                continue;
            }
            let err = watch_error_text(&kind, &err);
            tracing::warn!(%kind, %err, retry_in = ?delay, "Watch failed; serving the last snapshot and retrying");
            tokio::select! {
                () = cancel.cancelled() => return,
                () = tokio::time::sleep(delay) => {}
            }
        }
    });
    store
}

/// When a failing watch tries again (the module documentation has the policy).
#[derive(Debug)]
pub(crate) struct Retry {
    builder: backon::ExponentialBuilder,
    backoff: backon::ExponentialBackoff,
    /// When the last error came.
    last_error: Option<Instant>,
    /// When the last `410 Expired` re-listed at once.
    last_expired: Option<Instant>,
}

impl Retry {
    /// A policy with no error yet.
    pub(crate) fn new() -> Self {
        // backon's jitter adds up to the delay again: a cap of half RETRY_MAX keeps every
        // delay within RETRY_MAX.
        let builder = backon::ExponentialBuilder::default()
            .with_min_delay(RETRY_MIN)
            .with_max_delay(RETRY_MAX / 2)
            .with_factor(2.0)
            .with_jitter()
            .without_max_times();
        Self {
            builder,
            backoff: builder.build(),
            last_error: None,
            last_expired: None,
        }
    }

    /// How long to wait before polling the watch again after `err` came at `now`: zero
    /// for a `410 Expired` (kube-rs then lists afresh), else the next exponential delay.
    pub(crate) fn delay(&mut self, err: &watcher::Error, now: Instant) -> Duration {
        if self
            .last_error
            .is_some_and(|t| now.duration_since(t) >= RETRY_RESET)
        {
            self.backoff = self.builder.build();
        }
        self.last_error = Some(now);
        if is_expired(err) {
            let again = self
                .last_expired
                .is_some_and(|t| now.duration_since(t) < RETRY_RESET);
            if !again {
                self.last_expired = Some(now);
                return Duration::ZERO;
            }
        }
        self.backoff.next().unwrap_or(RETRY_MAX).min(RETRY_MAX)
    }
}

/// Whether `err` is the API server's `410 Expired` (`Gone`) on an open watch: the
/// `resourceVersion` it resumed from is older than the API server keeps, and kube-rs'
/// watcher re-lists on its next poll.
fn is_expired(err: &watcher::Error) -> bool {
    matches!(err, watcher::Error::WatchError(s) if s.code == 410)
}

/// What a watch error of `kind` means, for the log: a kind the API server does not serve
/// (404 on the list) names its missing CRD; an API error shows the server's message and code
/// (kube's text appends a debug dump of the whole `Status`).
fn watch_error_text(kind: &str, err: &watcher::Error) -> String {
    let status = match err {
        watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s))
        | watcher::Error::WatchFailed(kube::Error::Api(s))
        | watcher::Error::WatchError(s) => s,
        other => {
            // The innermost cause says what happened (`Connection refused (os error 111)`);
            // kube's own text stops at `client error (Connect)`.
            let text = other.to_string();
            let cause = std::error::Error::source(other)
                .map(|_| kthena_api::root_cause(other).to_string())
                .unwrap_or_default();
            if cause.is_empty() || text.contains(&cause) {
                return text;
            }
            return format!("{text}: {cause}");
        }
    };
    if status.code == 404 {
        return format!(
            "the API server does not serve {kind} (404): is its CRD installed? ({})",
            crd_hint(kind)
        );
    }
    format!("{} (HTTP {})", status.message.trim(), status.code)
}

/// Where the CRD of `kind` comes from: Kthena's in `deploy/crds/` (the Helm chart installs
/// them), the Gateway API's from its release, InferencePool's in `deploy/gateway-api/`.
fn crd_hint(kind: &str) -> &'static str {
    match kind {
        "Gateway" | "GatewayClass" | "HTTPRoute" | "GRPCRoute" | "ReferenceGrant" => {
            "the Gateway API's standard CRDs, from its release: \
             https://gateway-api.sigs.k8s.io/guides/#installing-gateway-api"
        }
        "InferencePool" => "kubectl apply --server-side -f deploy/gateway-api/",
        _ => "kubectl apply --server-side -f deploy/crds/",
    }
}

#[cfg(test)]
mod tests;
