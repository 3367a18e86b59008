//! Per-endpoint in-flight counts shared by every router through Redis (Go Kthena
//! `pkg/kthena-router/datastore/on_flight_counter.go`), so that routers in front of the same
//! engines balance as one.
//!
//! With `REDIS_HOST` set (and `REDIS_PORT`, `REDIS_PASSWORD`; DB 0) and a `PING` answered
//! within 2 s at start, every request sent to an endpoint is counted in the Redis hash
//! [`ON_FLIGHT_KEY`], field `<namespace>/<name>`: `HINCRBY +1` before it is sent, `-1` when
//! it ends (a negative result is reset to 0). The answer is the endpoint's global count the
//! scheduler sees. Before scheduling, one `HMGET` of every endpoint refreshes the counts,
//! at most once per [`SYNC_INTERVAL`]. Each Redis call has 100 ms (on the blocking pool, over
//! a few pooled connections); a failed call leaves the
//! endpoint on the router's own count until the next good answer. Without Redis (or when
//! the start-up `PING` fails) only the router's own count is used.
//!
//! Routers in one process can share the counts without Redis, through an [`InFlightBoard`]
//! (the [`board`] module, same semantics; `Router::start_in_memory_with`). A router uses
//! one backend or the other: [`InFlightShare`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use kthena_sched::{EndpointId, LoadGuard, Request};

use crate::kv::cache::KvState;

use crate::upstream::endpoint::Endpoint;

mod board;
pub(crate) mod routed;
pub(crate) use board::BoardClient;
pub use board::InFlightBoard;

/// Go Kthena's hash of per-pod in-flight counts.
pub const ON_FLIGHT_KEY: &str = "kthena:on-flight-requests";

/// Shortest time between two refreshes of every count (Go's `onFlightSyncInterval`).
pub const SYNC_INTERVAL: Duration = Duration::from_millis(50);

/// Time given to each Redis call.
const CALL_TIMEOUT: Duration = Duration::from_millis(100);

/// Where a router shares its in-flight counts with the other routers.
#[derive(Debug)]
pub(crate) enum InFlightShare {
    /// Go Kthena's Redis hash [`ON_FLIGHT_KEY`] (`REDIS_HOST`).
    Redis(Arc<SharedInFlight>),
    /// A board shared by routers of the same process.
    Board(board::BoardClient),
}

impl InFlightShare {
    /// Counts one more request to `ep` with every router, and gives it back when `guard`
    /// drops; the endpoint then schedules with the shared count.
    pub(crate) async fn track(&self, ep: &Arc<Endpoint>, guard: &mut LoadGuard) {
        match self {
            Self::Redis(r) => r.track(ep, guard).await,
            Self::Board(b) => b.track(ep, guard),
        }
    }

    /// Refreshes the shared counts of `endpoints`, at most once per refresh interval; a
    /// board also brings the other routers' routing decisions into `kv`'s index.
    pub(crate) async fn sync(&self, endpoints: &[Arc<Endpoint>], kv: &KvState) {
        match self {
            Self::Redis(r) => r.sync(endpoints, kv).await,
            Self::Board(b) => b.sync(endpoints, kv),
        }
    }

    /// The router is sending `req` to `endpoint`: the decision is passed on to the other
    /// routers' KV indexes (`routed`), on the board at once, through Redis with the next
    /// round trip (call it before [`track`](Self::track), which makes that round trip).
    pub(crate) fn routed(&self, kv: &KvState, endpoint: &EndpointId, req: &Request<'_>) {
        let Some(d) = routed::Decision::of(kv, endpoint, req) else {
            return;
        };
        match self {
            Self::Redis(r) => r.routed.push(d),
            Self::Board(b) => b.routed(d),
        }
    }
}

/// The shared counts (see the module docs). Calls run on the blocking pool over a small
/// pool of connections, each with [`CALL_TIMEOUT`].
pub(crate) struct SharedInFlight {
    client: redis::Client,
    idle: Mutex<Vec<redis::Connection>>,
    start: Instant,
    /// Milliseconds after `start` of the last refresh (+1; 0 = never).
    last_sync: AtomicU64,
    /// This router's side of the routing-decision stream.
    routed: routed::RedisRouted,
}

impl std::fmt::Debug for SharedInFlight {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedInFlight").finish_non_exhaustive()
    }
}

fn field(ep: &Endpoint) -> String {
    format!("{}/{}", ep.namespace, ep.name)
}

impl SharedInFlight {
    /// Connects to `url` and checks it with a `PING` within 2 s; `None` (logged) when Redis
    /// cannot be used.
    pub(crate) async fn connect(url: &str) -> Option<Arc<Self>> {
        let client = match redis::Client::open(url) {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "Invalid Redis address; in-flight counts stay local");
                return None;
            }
        };
        let c2 = client.clone();
        let ping = tokio::task::spawn_blocking(
            move || -> redis::RedisResult<(redis::Connection, String)> {
                let mut conn = c2.get_connection_with_timeout(Duration::from_secs(2))?;
                conn.set_read_timeout(Some(Duration::from_secs(2)))?;
                redis::cmd("PING").query::<String>(&mut conn)?;
                // Decisions are read from the newest entry on: older ones are history.
                let newest: redis::streams::StreamRangeReply = redis::cmd("XREVRANGE")
                    .arg(routed::ROUTED_STREAM)
                    .arg("+")
                    .arg("-")
                    .arg("COUNT")
                    .arg(1)
                    .query(&mut conn)?;
                let last = newest
                    .ids
                    .first()
                    .map_or_else(|| "0-0".to_owned(), |e| e.id.clone());
                Ok((conn, last))
            },
        )
        .await;
        match ping {
            Ok(Ok((conn, last))) => {
                tracing::info!("In-flight counts are shared through Redis ({ON_FLIGHT_KEY})");
                Some(Arc::new(Self {
                    client,
                    idle: Mutex::new(vec![conn]),
                    start: Instant::now(),
                    last_sync: AtomicU64::new(0),
                    routed: routed::RedisRouted::new(last),
                }))
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "Redis did not answer PING; in-flight counts stay local");
                None
            }
            Err(e) => {
                tracing::warn!(error = %e, "Redis PING failed; in-flight counts stay local");
                None
            }
        }
    }

    /// Runs `f` on a pooled connection off the async threads; `None` on any failure.
    async fn call<T: Send + 'static>(
        self: &Arc<Self>,
        f: impl FnOnce(&mut redis::Connection) -> redis::RedisResult<T> + Send + 'static,
    ) -> Option<T> {
        let this = Arc::clone(self);
        let got = tokio::task::spawn_blocking(move || {
            let pooled = this
                .idle
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .pop();
            let mut conn = match pooled {
                Some(c) => c,
                None => {
                    let c = this.client.get_connection_with_timeout(CALL_TIMEOUT)?;
                    c.set_read_timeout(Some(CALL_TIMEOUT))?;
                    c.set_write_timeout(Some(CALL_TIMEOUT))?;
                    c
                }
            };
            let _ = conn.set_read_timeout(Some(CALL_TIMEOUT));
            let r = f(&mut conn);
            if r.is_ok() {
                this.idle
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(conn);
            }
            r
        })
        .await;
        match got {
            Ok(Ok(v)) => Some(v),
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "Redis in-flight call failed; using the local count");
                None
            }
            Err(_) => None,
        }
    }

    /// `HINCRBY` of `ep`'s field by `by`, in one round trip with the routing decisions
    /// queued since the last one (`XADD`).
    async fn hincrby(self: &Arc<Self>, ep: &Endpoint, by: i64) -> Option<i64> {
        let f = field(ep);
        let this = Arc::clone(self);
        self.call(move |c| {
            let mut pipe = redis::pipe();
            this.routed.append_to(&mut pipe);
            pipe.cmd("HINCRBY").arg(ON_FLIGHT_KEY).arg(&f).arg(by);
            let (v,): (i64,) = pipe.query(c)?;
            if v < 0 {
                // A stale negative value (a router restarted mid-request): reset it.
                let _: i64 = redis::cmd("HSET")
                    .arg(ON_FLIGHT_KEY)
                    .arg(&f)
                    .arg(0)
                    .query(c)?;
                return Ok(0);
            }
            Ok(v)
        })
        .await
    }

    /// Counts one more request to `ep` (the guard of `begin_request`) in Redis, and gives it
    /// back there when the guard drops ([`LoadGuard::on_release`]). On a Redis failure only
    /// the local count moves.
    pub(crate) async fn track(self: &Arc<Self>, ep: &Arc<Endpoint>, guard: &mut LoadGuard) {
        let global = self.hincrby(ep, 1).await;
        ep.set_shared_in_flight(global);
        if global.is_some() {
            let (this, ep) = (Arc::clone(self), Arc::clone(ep));
            guard.on_release(move || this.released(ep));
        }
    }

    /// Refreshes every count of `endpoints` with one `HMGET`, and records the other routers'
    /// routing decisions since the last refresh in `kv`'s index (`XREAD`, same round trip),
    /// at most once per [`SYNC_INTERVAL`] over all callers (the others return at once).
    pub(crate) async fn sync(self: &Arc<Self>, endpoints: &[Arc<Endpoint>], kv: &KvState) {
        if endpoints.is_empty() {
            return;
        }
        let now = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX) + 1;
        let last = self.last_sync.load(Ordering::Relaxed);
        let interval = u64::try_from(SYNC_INTERVAL.as_millis()).unwrap_or(50);
        if last != 0 && now.saturating_sub(last) < interval {
            return;
        }
        if self
            .last_sync
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
        {
            return;
        }
        let fields: Vec<String> = endpoints.iter().map(|e| field(e)).collect();
        let this = Arc::clone(self);
        let got = self
            .call(move |c| {
                let mut pipe = redis::pipe();
                this.routed.append_to(&mut pipe);
                let hmget = pipe.cmd("HMGET").arg(ON_FLIGHT_KEY);
                for f in &fields {
                    hmget.arg(f);
                }
                this.routed.read_to(&mut pipe);
                pipe.query::<(Vec<Option<i64>>, Option<redis::streams::StreamReadReply>)>(c)
            })
            .await;
        if let Some((values, decisions)) = got {
            for (ep, v) in endpoints.iter().zip(values) {
                ep.set_shared_in_flight(Some(v.unwrap_or(0).max(0)));
            }
            if let Some(reply) = decisions {
                self.routed.apply(&reply, kv);
            }
        }
    }
}

impl SharedInFlight {
    /// The request to `endpoint` ended: `HINCRBY -1` in the background.
    fn released(self: Arc<Self>, endpoint: Arc<Endpoint>) {
        let tasks = tokio_util::task::TaskTracker::new();
        tasks.spawn(async move {
            let global = self.hincrby(&endpoint, -1).await;
            endpoint.set_shared_in_flight(global);
        });
        tasks.close();
    }
}

#[cfg(test)]
mod tests;
