//! Scale to zero and back (not in Go Kthena v1.0.0, whose autoscaler keeps every target at
//! one replica or more: `pkg/autoscaler/autoscaler/scaler.go`).
//!
//! A target whose lower bound is 0 (a homogeneous `minReplicas: 0`, a heterogeneous policy
//! whose `params[i].minReplicas` are all 0, a disaggregated target whose roles' are all 0)
//! is decided from what the routers report about the ModelServers that serve it, read from
//! each router's `/metrics`:
//!
//! * `kthena_router_cold_start_held_requests{model, model_server}`: requests a router holds
//!   because the ModelServer has no ready endpoint (the demand signal);
//! * `kthena_router_model_server_idle_seconds{model_server}`: seconds since a request routed
//!   to the ModelServer last ended, `0` while one is held or in flight.
//!
//! [`plan`] turns them into a [`ZeroStep`]: at 0 replicas, wake when a request is held, else
//! stay (no metric round); running, go to 0 only when every router answered with an idle
//! series for every serving ModelServer and all of them reached the idle window, with no
//! request held anywhere; otherwise run the metric scaler with the lower bound raised to 1
//! (an idle engine's metrics say 0, which alone would drop the target to 0 at once).

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

/// What one router reported about ModelServers, keyed by `namespace/name` (the
/// `model_server` label).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RouterSample {
    /// Held requests per ModelServer, summed over the `model` label.
    pub held: BTreeMap<String, f64>,
    /// Idle seconds per ModelServer.
    pub idle: BTreeMap<String, f64>,
}

/// One router endpoint's answer this round.
#[derive(Clone, Debug, PartialEq)]
pub struct RouterAnswer {
    /// Where it was asked (`address:port`), for status messages.
    pub router: String,
    /// What it reported; `None` when the scrape failed (no answer, not 200, not metrics text).
    pub sample: Option<RouterSample>,
}

/// What the routers said this round.
#[derive(Clone, Copy, Debug)]
pub enum Routers<'a> {
    /// No router to ask: the controller was started without a router metrics Service.
    Unconfigured,
    /// One answer per ready router endpoint (possibly none).
    Answers(&'a [RouterAnswer]),
}

/// Why a running target may not go to zero although its lower bound allows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Blocked {
    /// No router metrics Service is configured.
    NoRouterService,
    /// The router metrics Service has no ready endpoint.
    NoRouterEndpoint,
    /// No ModelServer selects the target's pods.
    NoModelServer,
    /// A router endpoint did not answer (its `address:port`).
    RouterUnanswered(String),
    /// A router has no idle series for a serving ModelServer: `(router, model_server)`.
    MissingSeries(String, String),
}

impl fmt::Display for Blocked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoRouterService => f.write_str("no router metrics Service is configured"),
            Self::NoRouterEndpoint => f.write_str(
                "the router metrics Service has no ready endpoint (no EndpointSlice of that name with a ready address: is the Service name of --router-metrics-service right?)",
            ),
            Self::NoModelServer => f.write_str("no ModelServer selects the target's pods"),
            Self::RouterUnanswered(r) => write!(f, "router {r} did not answer"),
            Self::MissingSeries(r, s) => {
                write!(f, "router {r} reports no idle time for ModelServer {s}")
            }
        }
    }
}

/// Whether the ModelServers serving a target have been idle long enough.
#[derive(Clone, Debug, PartialEq)]
pub enum Idleness {
    /// Every router reports every serving ModelServer idle for at least the window (and
    /// more than 0 s: 0 means a request is in flight), and nothing is held.
    Idle,
    /// A router holds a request for a serving ModelServer.
    Held,
    /// The shortest idle time reported (seconds) is below the window (0: a request is in
    /// flight).
    Busy(f64),
    /// The routers cannot tell.
    Blocked(Blocked),
}

/// What the routers say about one target: demand and idleness.
#[derive(Clone, Debug, PartialEq)]
pub struct ZeroView {
    /// Some router holds a request for a serving ModelServer (whatever the other routers
    /// answered).
    pub demand: bool,
    /// Whether the target may go to zero.
    pub idleness: Idleness,
}

impl ZeroView {
    /// The view of a target served by `servers` (`namespace/name` of the ModelServers that
    /// select its pods), from the routers' answers, with idle window `window`.
    pub fn new(servers: &[String], routers: Routers<'_>, window: Duration) -> Self {
        let answers: &[RouterAnswer] = match routers {
            Routers::Unconfigured => &[],
            Routers::Answers(a) => a,
        };
        let demand = answers.iter().filter_map(|a| a.sample.as_ref()).any(|s| {
            servers
                .iter()
                .any(|m| s.held.get(m).is_some_and(|&v| v > 0.0))
        });
        let idleness = if demand {
            Idleness::Held
        } else {
            idleness(servers, routers, window)
        };
        Self { demand, idleness }
    }
}

/// [`Idleness`] without held requests.
fn idleness(servers: &[String], routers: Routers<'_>, window: Duration) -> Idleness {
    let answers = match routers {
        Routers::Unconfigured => return Idleness::Blocked(Blocked::NoRouterService),
        Routers::Answers([]) => return Idleness::Blocked(Blocked::NoRouterEndpoint),
        Routers::Answers(a) => a,
    };
    if servers.is_empty() {
        return Idleness::Blocked(Blocked::NoModelServer);
    }
    let mut shortest = f64::INFINITY;
    for a in answers {
        let Some(sample) = &a.sample else {
            return Idleness::Blocked(Blocked::RouterUnanswered(a.router.clone()));
        };
        for m in servers {
            let Some(&idle) = sample.idle.get(m) else {
                let b = Blocked::MissingSeries(a.router.clone(), m.clone());
                return Idleness::Blocked(b);
            };
            shortest = shortest.min(idle);
        }
    }
    // A router reports 0 while a request is in flight, so 0 is never idle (even with a
    // 0s window).
    if shortest >= window.as_secs_f64() && shortest > 0.0 {
        Idleness::Idle
    } else {
        Idleness::Busy(shortest)
    }
}

/// What to do with a target this round.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ZeroStep {
    /// At zero and nothing is held: stay at zero, no metric round.
    Stay,
    /// At zero and a router holds a request: write this many replicas (`max(min, 1)`; for a
    /// heterogeneous total it is distributed, for roles see
    /// [`RolesScaler::wake_replicas`](crate::RolesScaler::wake_replicas)).
    Wake(i32),
    /// Running and idle for the window everywhere: write 0.
    ToZero,
    /// The metric round, with the lower bound raised to at least `floor` (1 when the target
    /// may go to zero, 0 otherwise, which leaves `min` as it is).
    Scale {
        /// Lower bound of the metric round.
        floor: i32,
    },
}

/// The step for a target at `current` replicas (a heterogeneous policy's total, a
/// disaggregated target's roles summed) with lower bound `min` (summed the same way), from
/// `view` (`None` when the policy's lower bound is above 0: the routers are not asked).
///
/// * `min > 0` (or no view): [`ZeroStep::Scale`] with floor 0, as without scale to zero;
/// * `current ≤ 0`: [`ZeroStep::Wake`]`(max(min, 1))` on demand, else [`ZeroStep::Stay`];
/// * idle everywhere ([`Idleness::Idle`]): [`ZeroStep::ToZero`];
/// * otherwise [`ZeroStep::Scale`] with floor 1.
pub fn plan(current: i32, min: i32, view: Option<&ZeroView>) -> ZeroStep {
    let Some(view) = view.filter(|_| min <= 0) else {
        return ZeroStep::Scale { floor: 0 };
    };
    if current <= 0 {
        return if view.demand {
            ZeroStep::Wake(min.max(1))
        } else {
            ZeroStep::Stay
        };
    }
    if view.idleness == Idleness::Idle {
        ZeroStep::ToZero
    } else {
        ZeroStep::Scale { floor: 1 }
    }
}

#[cfg(test)]
mod tests;
