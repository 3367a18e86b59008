//! Scale to zero in a round (not in Go Kthena v1.0.0): what the routers report about the
//! ModelServers serving a target ([`kthena_autoscale::ZeroView`]), read once per round or
//! wake tick, and the `ScaleToZero` condition that says whether the target can go to zero.

use std::collections::BTreeSet;
use std::time::Duration;

use kthena_api::{AutoscalingPolicy, ModelServing};
use kthena_autoscale::{Blocked, Idleness, RouterAnswer, Routers, ZeroView};
use kube::ResourceExt as _;
use tokio::sync::OnceCell;

use super::collect::Clients;
use super::routers::{RouterMetrics, scrape_routers};
use super::servers;
use crate::error::Result;

/// Type of the AutoscalingPolicy condition about scale to zero (only on policies with a
/// target whose lower bound is 0).
pub(super) const CONDITION: &str = "ScaleToZero";

/// What one round (or wake tick) works with: the API, the scrape clients, the time, whether
/// only targets at zero are looked at, and the routers' answers (scraped on first use).
pub(super) struct Pass<'a> {
    /// The API client.
    pub(super) client: &'a kube::Client,
    /// The scrape clients.
    pub(super) http: &'a Clients,
    /// Monotonic time of the round.
    pub(super) now: Duration,
    /// A wake tick: policies whose targets are not at zero are left alone.
    pub(super) wake_only: bool,
    /// The router metrics Service, when configured.
    pub(super) routers: Option<&'a RouterMetrics>,
    answers: OnceCell<Vec<RouterAnswer>>,
}

impl<'a> Pass<'a> {
    /// A pass at `now`; the routers are scraped on the first [`view`](Self::view).
    pub(super) fn new(
        client: &'a kube::Client,
        http: &'a Clients,
        now: Duration,
        wake_only: bool,
        routers: Option<&'a RouterMetrics>,
    ) -> Self {
        Self {
            client,
            http,
            now,
            wake_only,
            routers,
            answers: OnceCell::new(),
        }
    }

    /// The routers' answers, scraped once per pass. A failed EndpointSlice list counts as
    /// one router that did not answer (named after the Service).
    async fn routers(&self) -> Routers<'_> {
        let Some(svc) = self.routers else {
            return Routers::Unconfigured;
        };
        let answers = self
            .answers
            .get_or_init(|| async {
                match scrape_routers(self.client, &self.http.http, svc).await {
                    Ok(a) => a,
                    Err(e) => {
                        tracing::warn!(error = %e, "Reading the routers' endpoints failed");
                        vec![RouterAnswer {
                            router: format!("Service {svc}"),
                            sample: None,
                        }]
                    }
                }
            })
            .await;
        Routers::Answers(answers)
    }

    /// What the routers say about `targets` (the ModelServings of one policy): demand and
    /// idleness of the ModelServers that serve any of them, against the policy's idle window.
    ///
    /// # Errors
    /// [`crate::Error::Kube`] when the ModelServers cannot be listed,
    /// [`crate::Error::Autoscale`] for an idle window that is no duration.
    pub(super) async fn view(
        &self,
        policy: &AutoscalingPolicy,
        targets: &[&ModelServing],
    ) -> Result<ZeroView> {
        let window = idle_window(policy)?;
        let namespaces: BTreeSet<String> = targets
            .iter()
            .map(|ms| ms.namespace().unwrap_or_default())
            .collect();
        let mut serving = BTreeSet::new();
        for ns in namespaces {
            let all = servers::list(self.client, &ns).await?;
            for ms in targets
                .iter()
                .filter(|m| m.namespace().as_deref() == Some(&ns))
            {
                serving.extend(servers::serving(ms, &all));
            }
        }
        let serving: Vec<String> = serving.into_iter().collect();
        Ok(ZeroView::new(&serving, self.routers().await, window))
    }
}

/// `spec.behavior.scaleToZero.idleWindow` after defaulting (`5m`).
///
/// # Errors
/// [`kthena_autoscale::Error::InvalidDuration`] for text that is no duration.
fn idle_window(policy: &AutoscalingPolicy) -> kthena_autoscale::Result<Duration> {
    let p = policy.clone().with_defaults();
    let w = p
        .spec
        .behavior
        .and_then(|b| b.scale_to_zero)
        .and_then(|z| z.idle_window);
    let Some(w) = w else {
        return Ok(Duration::from_secs(300));
    };
    w.parse()
        .map_err(|source| kthena_autoscale::Error::InvalidDuration {
            path: "spec.behavior.scaleToZero.idleWindow".to_owned(),
            source,
        })
}

/// The `ScaleToZero` condition of a target at `current` replicas (a total for a
/// heterogeneous or disaggregated target): `(status, reason, message)`.
///
/// * the routers cannot tell: `False`, reason `Blocked`, why (no router metrics Service, no
///   ready router endpoint, no ModelServer selecting the target, a router that did not
///   answer or lacks the idle series);
/// * at zero: `True`, `AtZero`;
/// * running: `True`, `Enabled`.
pub(super) fn condition(view: &ZeroView, current: i32) -> (bool, &'static str, String) {
    match &view.idleness {
        Idleness::Blocked(b) => (false, "Blocked", blocked_message(b, current)),
        _ if current <= 0 => (
            true,
            "AtZero",
            "at 0 replicas; a request held by a router wakes the target".to_owned(),
        ),
        _ => (
            true,
            "Enabled",
            "scales to 0 replicas once every router reports the target's ModelServers idle for the idle window"
                .to_owned(),
        ),
    }
}

/// Why the routers cannot tell, and what it means: a running target is not scaled to zero;
/// a target at zero cannot be woken by the requests the routers hold.
fn blocked_message(b: &Blocked, current: i32) -> String {
    if current <= 0 {
        format!("{b}; requests held by the routers cannot wake the target while this lasts")
    } else {
        format!("{b}; the target is not scaled to 0 replicas while this lasts")
    }
}

#[cfg(test)]
mod tests;
