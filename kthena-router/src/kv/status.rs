//! The state of each KV-event subscription, as the debug dump shows it
//! (`GET /debug/config_dump/kvevents`): kept beside the metrics, updated by the subscription.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use serde::Serialize;

/// One subscription, keyed by endpoint id in [`Subscriptions`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SubscriptionStatus {
    /// The endpoint id, `namespace/name`.
    pub endpoint: String,
    /// The PUB address subscribed to, `tcp://host:port`.
    pub address: String,
    /// The replay address, if any.
    pub replay: Option<String>,
    /// `connecting` until the SUB socket is connected, then `subscribed`.
    pub state: &'static str,
    /// Sequence number of the last batch received.
    pub last_seq: Option<u64>,
    /// Batches received since the subscription started.
    pub batches: u64,
    /// Whether the endpoint's entries may be incomplete (a gap that was not replayed).
    pub uncertain: bool,
}

/// The subscriptions' states (cheap to clone: a shared handle).
#[derive(Debug, Clone, Default)]
pub(crate) struct Subscriptions(Arc<Mutex<BTreeMap<String, SubscriptionStatus>>>);

impl Subscriptions {
    fn with(&self, endpoint: &str, f: impl FnOnce(&mut SubscriptionStatus)) {
        let mut g = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(s) = g.get_mut(endpoint) {
            f(s);
        }
    }

    /// A subscription of `endpoint` to `address` starts (replacing any earlier state).
    pub(crate) fn start(&self, endpoint: &str, address: &str, replay: Option<&str>) {
        let s = SubscriptionStatus {
            endpoint: endpoint.to_owned(),
            address: address.to_owned(),
            replay: replay.map(str::to_owned),
            state: "connecting",
            ..SubscriptionStatus::default()
        };
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(endpoint.to_owned(), s);
    }

    pub(crate) fn connected(&self, endpoint: &str, on: bool) {
        self.with(endpoint, |s| {
            s.state = if on { "subscribed" } else { "connecting" };
        });
    }

    pub(crate) fn batch(&self, endpoint: &str, seq: u64) {
        self.with(endpoint, |s| {
            s.last_seq = Some(seq);
            s.batches += 1;
        });
    }

    pub(crate) fn uncertain(&self, endpoint: &str, on: bool) {
        self.with(endpoint, |s| s.uncertain = on);
    }

    pub(crate) fn remove(&self, endpoint: &str) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(endpoint);
    }

    /// Every subscription, by endpoint id.
    pub(crate) fn list(&self) -> Vec<SubscriptionStatus> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .cloned()
            .collect()
    }

    /// One endpoint's subscription.
    pub(crate) fn get(&self, endpoint: &str) -> Option<SubscriptionStatus> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(endpoint)
            .cloned()
    }
}
