//! Scale from zero: requests whose ModelServer has no ready endpoint (scaled to zero, or
//! its engines still loading) are held instead of answered 503, and go on, in arrival
//! order, as soon as a routing snapshot gives the ModelServer endpoints (`docs/router.md`,
//! "Scale from zero: held requests"). Go Kthena's router answers 503 at once
//! (`pkg/kthena-router/router/router.go`); this is the router half of scale-to-zero, the
//! autoscaler reads the families of [`ColdStartMetrics`] as its demand signal.
//!
//! [`Hold`] lives in the shared state: the `coldStart:` settings and the FIFO of held
//! requests per ModelServer; the snapshot publisher calls [`Hold::on_snapshot`]. A request
//! waits through a [`Stay`], which counts its outcome once, also when the client goes away
//! and its future is dropped, or the drain timeout cuts it at shutdown.

pub(crate) mod config;
pub(crate) mod metrics;
mod queue;

use std::sync::{Arc, Mutex, MutexGuard};

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

pub(crate) use config::ColdStartConfig;
pub(crate) use metrics::ColdStartMetrics;
pub(crate) use metrics::Outcome;

use crate::discovery::{Server, Snapshot};
use crate::error::Error;
use crate::telemetry::accounting::Accounting;
use queue::Waiters;

/// Whether requests for `server` must wait: it has no endpoint, or (with a `pdGroup`) no
/// prefill or no decode endpoint.
#[must_use]
pub(crate) fn waiting(server: &Server) -> bool {
    server.endpoints.is_empty()
        || (server.pd.is_some()
            && (server.prefill_endpoints.is_empty() || server.decode_endpoints.is_empty()))
}

/// Whether `snap` lets the requests held for `server` go on: it has endpoints, or it is
/// gone (the route is resolved again and answers what it now answers).
fn may_go(snap: &Snapshot, server: &str) -> bool {
    snap.servers.get(server).is_none_or(|s| !waiting(s))
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

/// The hold: settings, held requests, metrics.
#[derive(Debug)]
pub(crate) struct Hold {
    cfg: Mutex<ColdStartConfig>,
    waiters: Mutex<Waiters>,
    metrics: ColdStartMetrics,
    /// The generation of the newest snapshot: every held request resolves its route again
    /// when it changes (a route removed or pointed at another ModelServer).
    generation: tokio::sync::watch::Sender<u64>,
    /// Cancelled when the router begins to shut down: held requests are answered at once.
    closing: CancellationToken,
}

impl Hold {
    /// An empty hold with the default settings, counting into `metrics`.
    pub(crate) fn new(metrics: ColdStartMetrics) -> Self {
        Self {
            cfg: Mutex::new(ColdStartConfig::default()),
            waiters: Mutex::default(),
            metrics,
            generation: tokio::sync::watch::Sender::new(0),
            closing: CancellationToken::new(),
        }
    }

    /// The router began to shut down: every held request is answered 503
    /// `cold_start_shutting_down` with `Retry-After` at once (its client may retry another
    /// replica; nothing releases it while the router drains), and so is any request that
    /// would be held from now on.
    pub(crate) fn shut(&self) {
        self.closing.cancel();
    }

    /// The current settings.
    pub(crate) fn config(&self) -> ColdStartConfig {
        *lock(&self.cfg)
    }

    /// Replaces the settings (start and hot reload); held requests keep their deadline.
    pub(crate) fn set_config(&self, cfg: ColdStartConfig) {
        *lock(&self.cfg) = cfg;
    }

    /// A new snapshot was stored: releases, in arrival order, the requests held for every
    /// ModelServer that now has endpoints (or is gone), and has every other held request
    /// resolve its route again (it keeps its place when it still waits for the same
    /// ModelServer).
    pub(crate) fn on_snapshot(&self, snap: &Snapshot) {
        self.metrics.know(snap.servers.keys().map(String::as_str));
        let n = lock(&self.waiters).release(|server| may_go(snap, server));
        self.generation.send_replace(snap.generation);
        if n > 0 {
            tracing::info!(
                released = n,
                generation = snap.generation,
                "Released held requests: their model server has endpoints or is gone"
            );
        }
    }

    /// Requests held now for `server`.
    #[cfg(test)]
    pub(crate) fn held(&self, server: &str) -> usize {
        lock(&self.waiters).len(server)
    }
}

/// One request's stay in the hold, from its first wait until it goes on or fails. Dropped
/// while waiting (the client went away): the waiter leaves the FIFO, the outcome is
/// `client_disconnected` and the request's accounting settles as a fairness-queue
/// disconnect does.
#[derive(Debug)]
pub(crate) struct Stay<'a> {
    hold: &'a Hold,
    model: Arc<str>,
    cfg: ColdStartConfig,
    start: Instant,
    /// The ModelServer and waiter id while held (kept while the route is resolved again).
    at: Option<(Arc<str>, u64)>,
    /// The release of the waiter `at`.
    rx: Option<tokio::sync::oneshot::Receiver<()>>,
    acct: Option<Accounting>,
    /// Cancelled when the drain timeout cuts the requests left at shutdown.
    drain_cut: Option<CancellationToken>,
    /// Waited at least once (a stay that never waited counts nothing).
    waited: bool,
    /// The outcome was counted.
    counted: bool,
}

impl<'a> Stay<'a> {
    /// A stay for a request for `model`, under the current settings.
    pub(crate) fn new(hold: &'a Hold, model: &str, acct: Option<Accounting>) -> Self {
        Self {
            hold,
            model: Arc::from(model),
            cfg: hold.config(),
            start: Instant::now(),
            at: None,
            rx: None,
            acct,
            drain_cut: None,
            waited: false,
            counted: false,
        }
    }

    /// Tells the stay the router's drain-timeout cut: a stay dropped once it is cancelled
    /// was cut by the router (503 `drain_timeout`, settled by the front service, outcome
    /// `timeout`), not left by its client.
    pub(crate) fn with_drain_cut(mut self, cut: CancellationToken) -> Self {
        self.drain_cut = Some(cut);
        self
    }

    fn count(&mut self, outcome: Outcome) {
        if !self.counted {
            self.counted = true;
            let waited = self.waited.then(|| self.start.elapsed().as_secs_f64());
            self.hold.metrics.left(&self.model, outcome, waited);
        }
    }

    /// Leaves the hold without failing: the route no longer waits for the ModelServer held
    /// for (it resolves elsewhere, or the ModelServer is gone). Counted `released`.
    pub(crate) fn leave(&mut self) {
        if let Some((server, id)) = self.at.take() {
            lock(&self.hold.waiters).remove(&server, id);
            self.hold.metrics.held(&self.model, &server, -1);
        }
        self.rx = None;
    }

    /// Holds the request for `server` (or keeps its place when it is held for `server`
    /// already) until the ModelServer may go on, the route should be resolved again (a new
    /// snapshot, or every `poll` when set), and returns the snapshot to resolve against (at
    /// once when the current one lets `server` go on and no `poll` is asked).
    ///
    /// # Errors
    /// [`Error::ColdStartQueueFull`] when `coldStart.maxHeldRequests` requests are held for
    /// `server`; [`Error::ColdStartTimeout`] when `coldStart.holdTimeout` passed since the
    /// stay began; [`Error::ColdStartShuttingDown`] when the router shuts down.
    pub(crate) async fn wait(
        &mut self,
        current: impl Fn() -> Arc<Snapshot>,
        server: &str,
        poll: Option<std::time::Duration>,
    ) -> Result<Arc<Snapshot>, Error> {
        let server: Arc<str> = Arc::from(server);
        if self.at.as_ref().is_some_and(|(s, _)| *s != server) {
            self.leave();
        }
        let mut recheck = self.hold.generation.subscribe();
        if let Some(snap) = self.enter(&current, &server, poll.is_some())? {
            return Ok(snap);
        }
        self.waited = true;
        let deadline = self.start + self.cfg.hold_timeout;
        let closing = self.hold.closing.clone();
        let mut rx = self.rx.take();
        let woke = tokio::select! {
            // Sent by a release, which took the waiter out of the FIFO.
            _ = released(rx.as_mut()) => Woke::Released,
            _ = recheck.changed() => Woke::Recheck,
            () = poll_sleep(poll) => Woke::Recheck,
            () = tokio::time::sleep_until(deadline) => Woke::Timeout,
            () = closing.cancelled() => Woke::Closing,
        };
        match woke {
            Woke::Released => {
                // The release took the waiter out of the FIFO.
                self.at = None;
                self.hold.metrics.held(&self.model, &server, -1);
                Ok(current())
            }
            Woke::Recheck => {
                self.rx = rx;
                Ok(current())
            }
            Woke::Timeout | Woke::Closing => {
                self.leave();
                self.count(Outcome::Timeout);
                Err(self.failure(matches!(woke, Woke::Closing), &server))
            }
        }
    }

    /// Takes a place in `server`'s FIFO unless the request holds one already: the current
    /// snapshot when it lets `server` go on (unless `polling`), else `None`.
    fn enter(
        &mut self,
        current: &impl Fn() -> Arc<Snapshot>,
        server: &Arc<str>,
        polling: bool,
    ) -> Result<Option<Arc<Snapshot>>, Error> {
        if self.hold.closing.is_cancelled() {
            self.leave();
            self.count(Outcome::Timeout);
            return Err(self.failure(true, server));
        }
        let mut w = lock(&self.hold.waiters);
        let snap = current();
        if !polling && may_go(&snap, server) {
            drop(w);
            self.leave();
            return Ok(Some(snap));
        }
        if self.at.is_some() {
            return Ok(None);
        }
        let Some((id, rx)) = w.push(server, self.cfg.max_held_requests) else {
            drop(w);
            self.count(Outcome::Rejected);
            return Err(Error::ColdStartQueueFull {
                server: server.to_string(),
                limit: self.cfg.max_held_requests,
                retry_after: self.cfg.retry_after_secs(),
            });
        };
        drop(w);
        self.at = Some((Arc::clone(server), id));
        self.rx = Some(rx);
        self.hold.metrics.held(&self.model, server, 1);
        Ok(None)
    }

    /// The 503 of a stay that ends without an endpoint: timed out, or cut by shutdown.
    fn failure(&self, closing: bool, server: &str) -> Error {
        let retry_after = self.cfg.retry_after_secs();
        if closing {
            return Error::ColdStartShuttingDown {
                server: server.to_owned(),
                retry_after,
            };
        }
        Error::ColdStartTimeout {
            server: server.to_owned(),
            waited: self.start.elapsed(),
            retry_after,
        }
    }
}

/// What ended one wait.
enum Woke {
    /// The ModelServer has endpoints (or is gone).
    Released,
    /// A new snapshot or the poll period: resolve the route again.
    Recheck,
    /// `coldStart.holdTimeout` passed.
    Timeout,
    /// The router shuts down.
    Closing,
}

/// Completes when the waiter's release is sent (or its sender is gone), never without one.
async fn released(rx: Option<&mut tokio::sync::oneshot::Receiver<()>>) {
    match rx {
        Some(rx) => {
            let _ = rx.await;
        }
        None => std::future::pending().await,
    }
}

/// Sleeps `poll`, or forever without one.
async fn poll_sleep(poll: Option<std::time::Duration>) {
    match poll {
        Some(d) => tokio::time::sleep(d).await,
        None => std::future::pending().await,
    }
}

impl Drop for Stay<'_> {
    fn drop(&mut self) {
        let Some((server, id)) = self.at.take() else {
            // Left the hold: released (a stay that failed counted already).
            if self.waited {
                self.count(Outcome::Released);
            }
            return;
        };
        lock(&self.hold.waiters).remove(&server, id);
        self.hold.metrics.held(&self.model, &server, -1);
        if self
            .drain_cut
            .as_ref()
            .is_some_and(CancellationToken::is_cancelled)
        {
            self.count(Outcome::Timeout);
            return;
        }
        self.count(Outcome::ClientDisconnected);
        if let Some(a) = self.acct.take() {
            a.failed(&Error::QueueClientDisconnected);
            a.settle();
        }
    }
}

#[cfg(test)]
mod tests;
