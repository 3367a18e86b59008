//! Queue: the fairness or session-boost queue (`crate::queue`) between admission
//! and scheduling. Off (the default) it passes requests through. On, the request waits for
//! its turn in its model's queue; the turn ([`crate::queue::Ticket`]) is held by the
//! request's [`Accounting`] until the response body ends. After a wait the pool is narrowed
//! again (caps and breakers may have changed meanwhile).
//!
//! The user is the JWT `sub` when authentication found one ([`UserId`](crate::auth::UserId)), else
//! the body's `user` field; the session is the `SESSION_BOOST_HEADER` header.

use std::sync::{Arc, Weak};

use http::{Request, Response};
use tower::Service;

use super::ctx::{Ctx, Routed};
use super::stage;
use crate::body::RespBody;
use crate::error::Error;
use crate::queue::{Capacity, QueueConfig, Queues, Waiting};
use crate::shared::Shared;
use crate::telemetry::accounting::Accounting;

stage!(
    /// Waits for the request's turn in its model's queue.
    QueueLayer,
    Queue,
    Request<Ctx<Routed>> => Request<Ctx<Routed>>,
    run
);

/// Creates the queues of `cfg` for `shared` (nothing when both queues are off).
pub(crate) fn install(shared: &Arc<Shared>, cfg: &QueueConfig) {
    let weak: Weak<Shared> = Arc::downgrade(shared);
    let capacity: Capacity = Arc::new(move |model: &str| capacity(&weak, model));
    if let crate::queue::QueueMode::Fairness(f) = &cfg.mode {
        shared.metrics.queue.configure_users(f.user_labels.clone());
    }
    if let Some(q) = Queues::new(cfg.mode.clone(), shared.metrics.queue.clone(), capacity) {
        let _ = shared.queues.set(q);
    }
}

/// `(pods whose model list has `model`, whether one of them has no waiting request or
/// there is none)`, from the current snapshot's scraped engine state.
fn capacity(shared: &Weak<Shared>, model: &str) -> (usize, bool) {
    let Some(shared) = shared.upgrade() else {
        return (0, true);
    };
    let snap = shared.snapshot.load();
    let (mut pods, mut idle) = (0usize, false);
    for e in &snap.endpoints {
        let st = e.state();
        if st.models.iter().any(|m| m == model) {
            pods += 1;
            idle |= st.waiting == 0;
        }
    }
    (pods, idle || pods == 0)
}

/// Settles a request whose client left while it was queued (503 in the access log, Go's
/// status and message; nobody reads the answer).
struct LeftWhileQueued(Option<Accounting>);

impl Drop for LeftWhileQueued {
    fn drop(&mut self) {
        if let Some(a) = self.0.take() {
            a.failed(&Error::QueueClientDisconnected);
            a.settle();
        }
    }
}

async fn run<S>(
    shared: Arc<Shared>,
    mut req: Request<Ctx<Routed>>,
    mut inner: S,
) -> Result<Response<RespBody>, Error>
where
    S: Service<Request<Ctx<Routed>>, Response = Response<RespBody>, Error = Error>,
{
    let Some(queues) = shared.queues.get() else {
        return inner.call(req).await;
    };
    let ctx = req.body();
    let parsed = &ctx.parsed;
    let snap = &parsed.snap;
    queues.on_snapshot(snap.generation, |m| snap.routes.knows(m));
    let user = ctx
        .meta
        .user
        .as_ref()
        .map(|u| Arc::clone(&u.0))
        .or_else(|| parsed.req.user.as_deref().map(Arc::from));
    let session = queues
        .session_header()
        .and_then(|h| req.headers().get(h))
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty())
        .map(Arc::from);
    let who = Waiting {
        model: Arc::from(parsed.req.model.as_str()),
        user,
        session,
    };
    let acct = ctx.meta.acct.clone();
    let mut left = LeftWhileQueued(Some(acct.clone()));
    let ticket = queues.wait(who).await;
    left.0 = None;
    acct.queued(ticket?);
    let routed = &mut req.body_mut().at;
    routed.pool = Arc::new(super::admit::admit_endpoints(&shared, routed)?);
    inner.call(req).await
}
