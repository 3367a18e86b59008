//! Cluster mode: kube-rs reflectors on ModelRoute, ModelServer, ExternalModelProvider, Pod
//! and the credential Secrets (label [`CREDENTIAL_LABEL`]` = "true"`; all namespaces) feed
//! the same routing [`Snapshot`](crate::discovery::Snapshot) as standalone mode. After each
//! rebuild the ExternalModelProviders' status conditions are written where they changed
//! (`crate::provider::status`).
//!
//! Go Kthena's semantics (`pkg/kthena-router/controller/modelserver_controller.go`): a pod is an
//! endpoint when it is `Running`, `Ready` and not being deleted, bound to every ModelServer of its
//! namespace whose `workloadSelector.matchLabels` selects it, at `podIP:workloadPort` (the port of
//! the first such ModelServer by `namespace/name`). Pods no ModelServer selects are not endpoints.
//!
//! A watch that expires (`410`, as every watch does after an API server restart) re-lists
//! at once; other watch errors are retried after 0.1 s doubling to at most 2 s (the
//! `reflect` submodule has the policy); the stores keep their last state meanwhile, so the
//! router keeps serving the last snapshot while the API server is away. Events are
//! coalesced for [`REBUILD_DEBOUNCE`] before a rebuild; endpoints that persist keep their state (in-flight counts, scraped
//! metrics, KV index entries). New endpoints are scraped at once. `/readyz` turns 200 once
//! all the reflectors have listed and the first snapshot's endpoints were scraped.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, Secret};
use kthena_api::{ExternalModelProvider, ModelRoute, ModelServer};
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use kube::{Api, Client};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::Config;
use crate::discovery::{ClusterObjects, Loader};
use crate::error::Result;
use crate::provider::{CREDENTIAL_LABEL, Secrets};
use crate::scrape::scrape_all;
use crate::shared::Shared;

mod pods;
mod reflect;

pub(crate) use pods::{PodEndpoints, pod_endpoints};

pub(crate) use reflect::{reflect, reflect_with};

/// Quiet time after a watch event before the snapshot is rebuilt: a burst of events (a
/// re-list, a scaled-up ModelServing) costs one rebuild.
pub(crate) const REBUILD_DEBOUNCE: Duration = Duration::from_millis(20);

/// Scrape settings for the immediate scrape of new endpoints.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ScrapeSettings {
    /// Most endpoints scraped at once.
    pub(crate) concurrency: usize,
    /// Bound on one scrape.
    pub(crate) timeout: Duration,
}

/// The client of the cluster named by kube config inference (`KUBECONFIG`,
/// `~/.kube/config`, then the in-cluster service account).
///
/// # Errors
/// [`crate::Error::Kube`] when no configuration is found or it is invalid.
pub(crate) async fn connect() -> Result<Client> {
    Ok(Client::try_default().await?)
}

/// The stores the snapshot is built from.
#[derive(Debug, Clone)]
struct Stores {
    routes: Store<ModelRoute>,
    servers: Store<ModelServer>,
    pods: Store<Pod>,
    providers: Store<ExternalModelProvider>,
    /// Only the Secrets labelled [`CREDENTIAL_LABEL`]` = "true"`.
    secrets: Store<Secret>,
}

/// Starts the reflectors and the rebuild task, which marks `shared` synced after the first
/// full sync.
pub(crate) fn spawn(
    shared: Arc<Shared>,
    loader: Loader,
    cfg: Config,
    client: &Client,
    scrape: ScrapeSettings,
    cancel: &CancellationToken,
    tasks: &TaskTracker,
) {
    let changed = Arc::new(Notify::new());
    let credentials = watcher::Config::default().labels(&format!("{CREDENTIAL_LABEL}=true"));
    let stores = Stores {
        routes: reflect(Api::all(client.clone()), &changed, cancel, tasks),
        servers: reflect(Api::all(client.clone()), &changed, cancel, tasks),
        pods: reflect(Api::all(client.clone()), &changed, cancel, tasks),
        providers: reflect(Api::all(client.clone()), &changed, cancel, tasks),
        secrets: reflect_with(
            Api::all(client.clone()),
            credentials,
            &changed,
            cancel,
            tasks,
        ),
    };
    let mut rebuilder = Rebuilder {
        client: client.clone(),
        shared,
        loader,
        cfg,
        stores,
        scrape,
        warned: HashSet::new(),
    };
    let cancel = cancel.clone();
    let tasks2 = tasks.clone();
    tasks.spawn(async move {
        tokio::select! {
            () = cancel.cancelled() => return,
            ready = rebuilder.stores.wait_until_ready() => if !ready { return },
        }
        rebuilder.rebuild(&tasks2, true).await;
        tracing::info!("Cluster discovery synced");
        loop {
            tokio::select! {
                () = cancel.cancelled() => return,
                () = changed.notified() => {}
            }
            tokio::select! {
                () = cancel.cancelled() => return,
                () = tokio::time::sleep(REBUILD_DEBOUNCE) => {}
            }
            rebuilder.rebuild(&tasks2, false).await;
        }
    });
}

impl Stores {
    /// Waits for the first list of every store; false when a reflector stopped first.
    async fn wait_until_ready(&self) -> bool {
        let (a, b, c, d, e) = tokio::join!(
            self.routes.wait_until_ready(),
            self.servers.wait_until_ready(),
            self.pods.wait_until_ready(),
            self.providers.wait_until_ready(),
            self.secrets.wait_until_ready()
        );
        a.is_ok() && b.is_ok() && c.is_ok() && d.is_ok() && e.is_ok()
    }

    /// The credential Secrets' values (UTF-8, lossy) by Secret and key.
    fn secrets(&self) -> Secrets {
        let mut out = Secrets::new(MISSING_HINT);
        for s in self.secrets.state() {
            let ns = s.metadata.namespace.as_deref().unwrap_or("default");
            let name = s.metadata.name.as_deref().unwrap_or("");
            out.add_secret(ns, name);
            for (k, v) in s.data.iter().flatten() {
                out.insert(ns, name, k, String::from_utf8_lossy(&v.0).into_owned());
            }
        }
        out
    }
}

/// What a request to a provider whose Secret is missing is told in cluster mode (the
/// label is [`CREDENTIAL_LABEL`]).
const MISSING_HINT: &str = " (the router reads only Secrets labelled \
     networking.serving.volcano.sh/external-model-provider-credential=true)";

/// Builds snapshots from the stores.
struct Rebuilder {
    /// Writes the providers' statuses.
    client: Client,
    shared: Arc<Shared>,
    loader: Loader,
    cfg: Config,
    stores: Stores,
    scrape: ScrapeSettings,
    /// `Kind ns/name@resourceVersion` of invalid objects already logged.
    warned: HashSet<String>,
}

impl std::fmt::Debug for Rebuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rebuilder")
            .field("stores", &self.stores)
            .field("warned", &self.warned.len())
            .finish_non_exhaustive()
    }
}

impl Rebuilder {
    /// Rebuilds and swaps the snapshot, then scrapes the new endpoints: awaited on the
    /// first sync (which then marks the router synced), in the background afterwards.
    async fn rebuild(&mut self, tasks: &TaskTracker, first: bool) {
        let routes = valid_objects(&self.stores.routes.state(), &mut self.warned);
        let servers = valid_objects(&self.stores.servers.state(), &mut self.warned);
        let provider_objects = self.stores.providers.state();
        let providers = valid_objects(&provider_objects, &mut self.warned);
        let pods = self.stores.pods.state();
        self.shared.snapshot.load().kv.owners.note_pods(&pods);
        let PodEndpoints {
            endpoints,
            kv_warnings,
        } = pod_endpoints(&pods, &servers);
        for (pod, reason) in kv_warnings {
            if self.warned.insert(format!("kv-events {pod}")) {
                tracing::warn!(%pod, %reason, "Not subscribing to the pod's KV events");
            }
        }
        let objects = ClusterObjects {
            routes,
            servers,
            endpoints,
            providers,
            secrets: self.stores.secrets(),
        };
        let snap = match self.loader.load_cluster_objects(&self.cfg, objects) {
            Ok(s) => s,
            Err(e) => {
                tracing::error!(error = %e, "Cannot build the routing snapshot");
                return;
            }
        };
        let generation = snap.generation;
        let fresh: Vec<_> = {
            let old = self.shared.snapshot.load_full();
            let known: HashSet<*const crate::upstream::endpoint::Endpoint> =
                old.endpoints.iter().map(Arc::as_ptr).collect();
            snap.scrape_targets()
                .into_iter()
                .filter(|(e, _)| !known.contains(&Arc::as_ptr(e)))
                .collect()
        };
        tracing::debug!(
            generation,
            endpoints = snap.endpoints.len(),
            new = fresh.len(),
            "Routing snapshot rebuilt"
        );
        self.shared.metrics.config_warnings(&snap.warnings);
        self.warn_unattached(&snap.route_objects);
        let snap = Arc::new(snap);
        self.shared.store_snapshot(Arc::clone(&snap));
        crate::provider::status::write_all(&self.client, &provider_objects, &snap.providers).await;
        let shared = Arc::clone(&self.shared);
        let ScrapeSettings {
            concurrency,
            timeout,
        } = self.scrape;
        let scrape = async move {
            if !fresh.is_empty() {
                scrape_all(&shared.client, fresh, concurrency, timeout).await;
            }
        };
        if first {
            scrape.await;
            self.shared.synced.store(true, Ordering::Release);
        } else {
            tasks.spawn(scrape);
        }
    }
}

impl Rebuilder {
    /// Gateway API mode: logs once per `resourceVersion` each ModelRoute no served Gateway
    /// listener takes (it answers 404 for every request through the Gateways; the 404 says
    /// why too). Nothing before the Gateway reflectors first compiled.
    fn warn_unattached(&mut self, routes: &[ModelRoute]) {
        let Some(gw) = self.shared.gateway.load_full() else {
            return;
        };
        for r in routes {
            let m = &r.metadata;
            let ns = m.namespace.as_deref().unwrap_or("default");
            let Some(reason) = crate::gateway::unattached(&gw, ns, &r.spec.parent_refs) else {
                continue;
            };
            let id = format!(
                "unattached ModelRoute {ns}/{}@{}",
                m.name.as_deref().unwrap_or(""),
                m.resource_version.as_deref().unwrap_or("")
            );
            if self.warned.insert(id) {
                tracing::warn!(
                    route = %format!("{ns}/{}", m.name.as_deref().unwrap_or("")),
                    %reason,
                    "ModelRoute is not attached to any Gateway listener: it serves no request"
                );
            }
        }
    }
}

/// The objects whose schema defaults and validation pass (logged once per resource
/// version otherwise).
fn valid_objects<K>(objects: &[Arc<K>], warned: &mut HashSet<String>) -> Vec<K>
where
    K: Clone + Validated,
{
    let mut out = Vec::with_capacity(objects.len());
    for o in objects {
        let o = K::clone(o).with_defaults();
        match o.check() {
            Ok(()) => out.push(o),
            Err(reason) => {
                let id = o.id();
                if warned.insert(id.clone()) {
                    tracing::warn!(object = %id, %reason, "Ignoring invalid object");
                }
            }
        }
    }
    out
}

/// The kinds [`valid_objects`] checks.
trait Validated: Sized {
    fn with_defaults(self) -> Self;
    fn check(&self) -> std::result::Result<(), String>;
    fn id(&self) -> String;
}

macro_rules! validated {
    ($t:ty, $kind:literal) => {
        impl Validated for $t {
            fn with_defaults(self) -> Self {
                <$t>::with_defaults(self)
            }
            fn check(&self) -> std::result::Result<(), String> {
                self.validate().map_err(|errs| {
                    errs.iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join("; ")
                })
            }
            fn id(&self) -> String {
                let m = &self.metadata;
                format!(
                    "{} {}/{}@{}",
                    $kind,
                    m.namespace.as_deref().unwrap_or("default"),
                    m.name.as_deref().unwrap_or(""),
                    m.resource_version.as_deref().unwrap_or("")
                )
            }
        }
    };
}
validated!(ModelRoute, "ModelRoute");
validated!(ModelServer, "ModelServer");
validated!(ExternalModelProvider, "ExternalModelProvider");
