#![allow(clippy::unwrap_used, reason = "tests")]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::task::JoinSet;

use super::*;

use crate::telemetry::metrics::Metrics;

const SERVER: &str = "default/ms";

/// A snapshot with route `m` → ModelServer `default/ms` and `n` endpoints.
fn snapshot(n: usize) -> Arc<Snapshot> {
    let addrs: Vec<String> = (0..n).map(|i| format!("127.0.0.1:{}", 9000 + i)).collect();
    let addrs: Vec<&str> = addrs.iter().map(String::as_str).collect();
    Arc::new(crate::pipeline::test_util::snapshot(&addrs))
}

/// One waiting task.
struct Waiting(JoinSet<Result<Arc<Snapshot>, Error>>);

impl Waiting {
    /// The wait's result (`Err` when the task was aborted).
    async fn result(mut self) -> Result<Result<Arc<Snapshot>, Error>, tokio::task::JoinError> {
        self.0.join_next().await.unwrap()
    }
}

struct Fixture {
    metrics: Arc<Metrics>,
    hold: Arc<Hold>,
    snap: Arc<ArcSwap<Snapshot>>,
}

impl Fixture {
    fn new(cfg: ColdStartConfig) -> Self {
        let metrics = Arc::new(Metrics::new());
        let hold = Arc::new(Hold::new(metrics.cold_start.clone()));
        hold.set_config(cfg);
        Self {
            metrics,
            hold,
            snap: Arc::new(ArcSwap::new(snapshot(0))),
        }
    }

    /// Waits for `default/ms` as a request for `m` would, in a task of its own.
    fn spawn_wait(&self) -> Waiting {
        let (hold, snap) = (Arc::clone(&self.hold), Arc::clone(&self.snap));
        let mut set = JoinSet::new();
        set.spawn(async move {
            let mut stay = Stay::new(&hold, "m", None);
            hold_on(&mut stay, &snap).await
        });
        Waiting(set)
    }

    /// Publishes a snapshot with `n` endpoints, as `Shared::store_snapshot` does.
    fn publish(&self, n: usize) {
        let s = snapshot(n);
        self.snap.store(Arc::clone(&s));
        self.hold.on_snapshot(&s);
    }

    /// The value of the series `series` (0 when absent).
    fn metric(&self, series: &str) -> f64 {
        let text = self.metrics.encode();
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
            .map_or(0.0, |v| v.parse().unwrap())
    }
}

fn cfg() -> ColdStartConfig {
    ColdStartConfig {
        hold_timeout: Duration::from_secs(2),
        max_held_requests: 3,
        ..ColdStartConfig::default()
    }
}

const HELD: &str = r#"kthena_router_cold_start_held_requests{model="m",model_server="default/ms"}"#;

fn outcome(o: &str) -> String {
    format!(r#"kthena_router_cold_start_requests_total{{model="m",outcome="{o}"}}"#)
}

/// Waits as the route stage does: again after each snapshot that still leaves `default/ms`
/// without endpoints (the stay keeps its place).
async fn hold_on(stay: &mut Stay<'_>, snap: &ArcSwap<Snapshot>) -> Result<Arc<Snapshot>, Error> {
    loop {
        let s = stay.wait(|| snap.load_full(), SERVER, None).await?;
        if may_go(&s, SERVER) {
            stay.leave();
            return Ok(s);
        }
    }
}

/// Lets spawned tasks run until they wait.
async fn settle() {
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
}

#[tokio::test(start_paused = true)]
async fn released_in_arrival_order_when_an_endpoint_appears() {
    let f = Fixture::new(cfg());
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = JoinSet::new();
    for i in 0..3 {
        let (hold, snap, order) = (Arc::clone(&f.hold), Arc::clone(&f.snap), Arc::clone(&order));
        tasks.spawn(async move {
            let mut stay = Stay::new(&hold, "m", None);
            let s = hold_on(&mut stay, &snap).await.unwrap();
            order.lock().unwrap().push(i);
            s.servers[SERVER].endpoints.len()
        });
        settle().await;
    }
    assert_eq!(f.hold.held(SERVER), 3);
    assert_eq!(f.metric(HELD), 3.0);
    // A snapshot still without endpoints releases nothing.
    f.publish(0);
    settle().await;
    assert_eq!(f.hold.held(SERVER), 3);
    tokio::time::advance(Duration::from_millis(500)).await;
    f.publish(1);
    while let Some(t) = tasks.join_next().await {
        assert_eq!(t.unwrap(), 1, "released with the fresh snapshot");
    }
    assert_eq!(*order.lock().unwrap(), vec![0, 1, 2]);
    assert_eq!(f.hold.held(SERVER), 0);
    assert_eq!(f.metric(HELD), 0.0);
    assert_eq!(f.metric(&outcome("released")), 3.0);
    assert_eq!(
        f.metric(r#"kthena_router_cold_start_wait_seconds_count{model="m"}"#),
        3.0
    );
    assert_eq!(
        f.metric(r#"kthena_router_cold_start_wait_seconds_sum{model="m"}"#),
        1.5
    );
}

#[tokio::test(start_paused = true)]
async fn a_ready_server_does_not_wait() {
    let f = Fixture::new(cfg());
    f.publish(1);
    let snap = f.spawn_wait().result().await.unwrap().unwrap();
    assert_eq!(snap.servers[SERVER].endpoints.len(), 1);
    // Never held: no outcome, no wait.
    assert_eq!(f.metric(&outcome("released")), 0.0);
}

#[tokio::test(start_paused = true)]
async fn past_the_timeout_the_answer_is_503_with_retry_after() {
    let f = Fixture::new(cfg());
    let t = f.spawn_wait();
    settle().await;
    assert_eq!(f.metric(HELD), 1.0);
    let e = t.result().await.unwrap().unwrap_err();
    assert!(
        matches!(
            &e,
            Error::ColdStartTimeout { server, waited, retry_after }
                if server == SERVER && *waited == Duration::from_secs(2)
                    && *retry_after == Duration::from_secs(10)
        ),
        "{e:?}"
    );
    assert_eq!(e.status(), http::StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(e.code(), "cold_start_timeout");
    assert_eq!(e.retry_after(), Some(Duration::from_secs(10)));
    assert_eq!(
        e.to_string(),
        "model server default/ms has no ready endpoint: the request was held 2s waiting for one to start; retry after 10s"
    );
    assert_eq!(f.hold.held(SERVER), 0);
    assert_eq!(f.metric(HELD), 0.0);
    assert_eq!(f.metric(&outcome("timeout")), 1.0);
}

#[tokio::test(start_paused = true)]
async fn a_full_hold_refuses_at_once() {
    let f = Fixture::new(cfg());
    let held: Vec<_> = (0..3).map(|_| f.spawn_wait()).collect();
    settle().await;
    let e = f.spawn_wait().result().await.unwrap().unwrap_err();
    assert_eq!(e.code(), "cold_start_queue_full");
    assert_eq!(e.status(), http::StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(e.retry_after(), Some(Duration::from_secs(10)));
    assert_eq!(
        e.to_string(),
        "model server default/ms has no ready endpoint and 3 requests are already held for it; retry after 10s"
    );
    assert_eq!(f.metric(&outcome("rejected")), 1.0);
    assert_eq!(f.metric(HELD), 3.0);
    f.publish(1);
    for t in held {
        t.result().await.unwrap().unwrap();
    }
    assert_eq!(f.metric(HELD), 0.0);
}

#[tokio::test(start_paused = true)]
async fn a_client_that_leaves_is_dropped_from_the_hold() {
    let f = Fixture::new(cfg());
    let gone = f.spawn_wait();
    settle().await;
    let stays = f.spawn_wait();
    settle().await;
    assert_eq!(f.hold.held(SERVER), 2);
    let mut gone = gone;
    gone.0.abort_all();
    assert!(gone.result().await.unwrap_err().is_cancelled());
    assert_eq!(f.hold.held(SERVER), 1);
    assert_eq!(f.metric(HELD), 1.0);
    assert_eq!(f.metric(&outcome("client_disconnected")), 1.0);
    f.publish(1);
    stays.result().await.unwrap().unwrap();
    assert_eq!(f.metric(HELD), 0.0);
    assert_eq!(f.metric(&outcome("released")), 1.0);
}

#[tokio::test(start_paused = true)]
async fn a_stay_cut_at_the_drain_timeout_counts_as_timeout() {
    let f = Fixture::new(cfg());
    let cut = CancellationToken::new();
    let (hold, snap, c2) = (Arc::clone(&f.hold), Arc::clone(&f.snap), cut.clone());
    let mut set = JoinSet::new();
    set.spawn(async move {
        let mut stay = Stay::new(&hold, "m", None).with_drain_cut(c2);
        hold_on(&mut stay, &snap).await
    });
    settle().await;
    assert_eq!(f.metric(HELD), 1.0);
    cut.cancel();
    set.abort_all();
    assert!(set.join_next().await.unwrap().unwrap_err().is_cancelled());
    assert_eq!(f.hold.held(SERVER), 0);
    assert_eq!(f.metric(HELD), 0.0);
    assert_eq!(f.metric(&outcome("timeout")), 1.0);
    assert_eq!(f.metric(&outcome("client_disconnected")), 0.0);
}

#[tokio::test(start_paused = true)]
async fn idle_seconds_are_zero_while_active_and_grow_after() {
    let f = Fixture::new(cfg());
    let idle = r#"kthena_router_model_server_idle_seconds{model_server="default/ms"}"#;
    let refresh = || f.metrics.cold_start.refresh_idle([SERVER].into_iter());
    f.publish(0);
    tokio::time::advance(Duration::from_secs(4)).await;
    refresh();
    assert_eq!(
        f.metric(idle),
        4.0,
        "counted from when the server was first known"
    );
    let guard = f.metrics.cold_start.enter(SERVER);
    tokio::time::advance(Duration::from_secs(7)).await;
    refresh();
    assert_eq!(f.metric(idle), 0.0);
    drop(guard);
    tokio::time::advance(Duration::from_secs(30)).await;
    refresh();
    assert_eq!(f.metric(idle), 30.0);
    // A server gone from the snapshot loses its series.
    f.metrics.cold_start.refresh_idle(std::iter::empty());
    assert!(!f.metrics.encode().contains(idle));
}

#[test]
fn config_defaults_and_validation() {
    let c = ColdStartConfig::default();
    assert!(c.enabled);
    assert_eq!(c.hold_timeout, Duration::from_secs(300));
    assert_eq!(c.max_held_requests, 1000);
    assert_eq!(c.retry_after, Duration::from_secs(10));
    let bad = |c: ColdStartConfig| c.validate().unwrap_err();
    assert_eq!(
        bad(ColdStartConfig {
            max_held_requests: 0,
            ..c
        }),
        "coldStart.maxHeldRequests: must be at least 1 (there is no unbounded hold)"
    );
    assert_eq!(
        bad(ColdStartConfig {
            hold_timeout: Duration::ZERO,
            ..c
        }),
        "coldStart.holdTimeout: must be greater than 0"
    );
    assert_eq!(
        bad(ColdStartConfig {
            retry_after: Duration::from_millis(500),
            ..c
        }),
        "coldStart.retryAfter: must be at least 1s"
    );
    let frac = ColdStartConfig {
        retry_after: Duration::from_millis(1500),
        ..c
    };
    assert_eq!(frac.retry_after_secs(), Duration::from_secs(2));
}

#[tokio::test(start_paused = true)]
async fn shutting_down_answers_held_requests_at_once() {
    let f = Fixture::new(cfg());
    let held = f.spawn_wait();
    settle().await;
    assert_eq!(f.hold.held(SERVER), 1);
    f.hold.shut();
    let err = held.result().await.unwrap().unwrap_err();
    assert!(
        matches!(err, Error::ColdStartShuttingDown { ref server, .. } if server == SERVER),
        "{err:?}"
    );
    assert_eq!(f.hold.held(SERVER), 0);
    assert_eq!(f.metric(HELD), 0.0);
    assert_eq!(f.metric(&outcome("timeout")), 1.0);
    // A request that would be held from now on is answered at once too.
    let late = f.spawn_wait().result().await.unwrap().unwrap_err();
    assert!(
        matches!(late, Error::ColdStartShuttingDown { .. }),
        "{late:?}"
    );
    assert_eq!(f.hold.held(SERVER), 0);
}
