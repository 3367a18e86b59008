//! Shared setup of the controller's end-to-end tests: the controllers and a simulated node in
//! a fresh namespace of the real API server (kthena-testenv), an HTTP client, polling and
//! sampling.
#![allow(
    dead_code,
    reason = "each test binary uses a different subset of the helpers"
)]

pub(crate) mod engines;
pub(crate) mod prometheus;
pub(crate) mod router;

use std::time::Duration;

use anyhow::{Result, bail};
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use kthena_controller::{
    AutoscalerConfig, Config, LEASE_NAME, LeaderElection, run, run_autoscaler, run_leader_elected,
};
use kthena_sim::node::{NodeConfig, SimNode};
use kthena_testenv::TestNamespace;
use tokio::task::JoinSet;

/// Upper bound for things that have no deadline of their own (a timeout, not a latency).
pub(crate) const WAIT: Duration = Duration::from_secs(60);

/// A test namespace with the controllers and a simulated node watching only it; all of it
/// stops when dropped.
pub(crate) struct Env {
    pub(crate) ns: TestNamespace,
    _tasks: JoinSet<()>,
    _node: SimNode,
}

/// Which controllers [`setup`] runs next to the ModelServing controller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Controllers {
    /// The ModelServing controller alone.
    ModelServing,
    /// And the autoscaler with this sync period, as its own task.
    Autoscaler(Duration),
    /// Both under `run_leader_elected` (the autoscaler through `Config::autoscaler`), with this
    /// sync period.
    LeaderElected(Duration),
}

/// The controllers in a fresh namespace `<prefix>-...`, two workers, and a simulated node
/// (health checks every 100 ms).
pub(crate) async fn setup(prefix: &str, controllers: Controllers) -> Result<Env> {
    let ns = kthena_testenv::namespace(prefix).await?;
    let mut tasks = JoinSet::new();
    let mut config = Config {
        namespace: Some(ns.name().to_owned()),
        workers: 2,
        ..Config::default()
    };
    let autoscaler = |sync_period| AutoscalerConfig {
        namespace: Some(ns.name().to_owned()),
        sync_period,
        ..AutoscalerConfig::default()
    };
    match controllers {
        Controllers::ModelServing => {
            tasks.spawn(run(ns.client().clone(), config, std::future::pending()));
        }
        Controllers::Autoscaler(sync) => {
            tasks.spawn(run(ns.client().clone(), config, std::future::pending()));
            let client = ns.client().clone();
            tasks.spawn(run_autoscaler(
                client,
                autoscaler(sync),
                std::future::pending(),
            ));
        }
        Controllers::LeaderElected(sync) => {
            config.autoscaler = Some(autoscaler(sync));
            let election = LeaderElection {
                lease_name: LEASE_NAME.to_owned(),
                namespace: ns.name().to_owned(),
                identity: "autoscaler-test".to_owned(),
                duration: Duration::from_secs(3),
                retry: Duration::from_secs(1),
            };
            let client = ns.client().clone();
            tasks.spawn(async move {
                let _ = run_leader_elected(client, config, election, std::future::pending()).await;
            });
        }
    }
    let node = SimNode::start(
        ns.client().clone(),
        NodeConfig {
            namespace: Some(ns.name().to_owned()),
            health_interval: Duration::from_millis(100),
            ..NodeConfig::default()
        },
    );
    Ok(Env {
        ns,
        _tasks: tasks,
        _node: node,
    })
}

/// An HTTP/1 client over plain TCP.
pub(crate) type Client = hyper_util::client::legacy::Client<
    hyper_util::client::legacy::connect::HttpConnector,
    Full<Bytes>,
>;

pub(crate) fn http() -> Client {
    hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new()).build_http()
}

/// Sends `req` and reads the whole answer body, whatever its status.
pub(crate) async fn body_of(req: http::Request<Full<Bytes>>) -> Result<Bytes> {
    Ok(http()
        .request(req)
        .await?
        .into_body()
        .collect()
        .await?
        .to_bytes())
}

/// Polls `check` (every 100 ms) until it returns `Some`, or fails after [`WAIT`].
pub(crate) async fn eventually<T, F, Fut>(what: &str, mut check: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Option<T>>>,
{
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if let Some(v) = check().await? {
            return Ok(v);
        }
        if tokio::time::Instant::now() > deadline {
            bail!("timed out waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Values read once a second, each with the time since sampling started.
#[derive(Debug)]
pub(crate) struct Samples<T>(pub(crate) Vec<(Duration, T)>);

impl<T: Clone + PartialEq> Samples<T> {
    /// The values alone, in order.
    pub(crate) fn values(&self) -> Vec<T> {
        self.0.iter().map(|(_, v)| v.clone()).collect()
    }

    /// Time of the first sample equal to `v`.
    pub(crate) fn first(&self, v: &T) -> Option<Duration> {
        self.0.iter().find(|(_, x)| x == v).map(|(t, _)| *t)
    }
}

/// Reads `read` once a second for `d` (the first read at once). The controllers run on the
/// real clock, so this does too.
pub(crate) async fn every_second<T, F, Fut>(d: Duration, mut read: F) -> Result<Samples<T>>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let start = tokio::time::Instant::now();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let mut out = Vec::new();
    while start.elapsed() < d {
        tick.tick().await;
        let at = start.elapsed();
        out.push((at, read().await?));
    }
    Ok(Samples(out))
}
