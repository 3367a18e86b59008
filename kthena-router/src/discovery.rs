//! Discovery: ModelRoutes, ModelServers and endpoints become an immutable routing
//! [`Snapshot`], swapped atomically on every valid change. Two sources feed the one
//! [`Loader`]: standalone mode (the config file plus manifest files, [`Loader::load`]) and
//! cluster mode (the API server's objects and Pods, see `cluster.rs`).

pub(crate) mod cluster;
pub(crate) mod warnings;
pub(crate) mod watch;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use kthena_api::networking::InferenceEngine;
use kthena_api::{ModelRoute, ModelServer, Object};
use kthena_sched::Scheduler;

use crate::config::{Config, EndpointConfig};
use crate::discovery::warnings::ConfigWarning;
use crate::error::{Error, Result};
use crate::routing::{CompiledRoute, RouteTable};
use crate::upstream::endpoint::Endpoint;

/// A ModelServer resolved against the endpoints.
#[derive(Debug)]
pub struct Server {
    /// `metadata.namespace`.
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
    /// `namespace/name`.
    pub key: String,
    /// `spec.model`: the model name sent upstream for non-LoRA requests.
    pub model: Option<String>,
    /// `spec.inferenceEngine`.
    pub engine: InferenceEngine,
    /// `trafficPolicy.timeout`: bound on connect + send + response headers.
    pub timeout: Option<Duration>,
    /// `trafficPolicy.retry`: `(attempts, pause between attempts)`.
    pub retry: Option<(usize, Duration)>,
    /// Endpoints selected by `workloadSelector.matchLabels` in the same namespace.
    pub endpoints: Vec<Arc<Endpoint>>,
    /// Of those, the prefill endpoints of its `pdGroup` (empty without one).
    pub prefill_endpoints: Vec<Arc<Endpoint>>,
    /// Of those, the decode endpoints of its `pdGroup` (empty without one).
    pub decode_endpoints: Vec<Arc<Endpoint>>,
    /// With a `pdGroup`: requests go through prefill/decode disaggregation (`crate::pd`).
    pub pd: Option<crate::pd::PdLayout>,
    /// The manifest object (for the debug dump).
    pub object: ModelServer,
}

/// Everything a request needs, immutable once built.
#[derive(Debug)]
pub struct Snapshot {
    /// Increases with every accepted load.
    pub generation: u64,
    /// Routes by model and LoRA name.
    pub routes: RouteTable,
    /// ModelServers by `namespace/name`.
    pub servers: HashMap<String, Arc<Server>>,
    /// ExternalModelProviders by `namespace/name`.
    pub providers: HashMap<String, Arc<crate::provider::Provider>>,
    /// Every configured endpoint.
    pub endpoints: Vec<Arc<Endpoint>>,
    /// The scheduler built from the config's `scheduler:` section.
    pub scheduler: Arc<Scheduler>,
    /// KV-cache-aware routing state: the shared KV index, tokenizers, KV-event sources.
    pub kv: Arc<crate::kv::cache::KvState>,
    /// The route manifests (for the debug dump), in route-table order.
    pub route_objects: Vec<ModelRoute>,
    /// Files the snapshot was built from (watched for changes).
    pub files: Vec<PathBuf>,
    /// Manifest folders named in the config (watched for new files).
    pub dirs: Vec<PathBuf>,
    /// What the snapshot leaves unserved (missing servers, unselected endpoints, ...),
    /// logged when it is built.
    pub warnings: Vec<crate::discovery::warnings::ConfigWarning>,
}

impl Snapshot {
    /// Endpoints to scrape with the engine to read them as (that of the first ModelServer
    /// selecting each; vLLM for endpoints no server selects).
    #[must_use]
    pub fn scrape_targets(&self) -> Vec<(Arc<Endpoint>, InferenceEngine)> {
        let mut keys: Vec<&String> = self.servers.keys().collect();
        keys.sort();
        let mut engine_of: HashMap<&str, InferenceEngine> = HashMap::new();
        for k in keys {
            let s = &self.servers[k];
            for e in &s.endpoints {
                engine_of.entry(e.name.as_str()).or_insert(s.engine);
            }
        }
        self.endpoints
            .iter()
            .map(|e| {
                (
                    Arc::clone(e),
                    engine_of.get(e.name.as_str()).copied().unwrap_or_default(),
                )
            })
            .collect()
    }
}

/// Builds snapshots, keeping endpoint state and route ages across reloads.
#[derive(Debug, Default)]
pub struct Loader {
    /// Live endpoints by `namespace/name`.
    endpoints: HashMap<String, Arc<Endpoint>>,
    first_seen: HashMap<String, (i128, u64)>,
    next_seq: u64,
    generation: u64,
    kv: crate::kv::cache::KvLoader,
    /// Cluster mode: the scheduler and KV state built once from the config and kept across
    /// rebuilds (the config does not change, and the scheduler's state must survive).
    fixed: Option<(Arc<Scheduler>, Arc<crate::kv::cache::KvState>)>,
    /// Standalone mode: the scheduler of the last snapshot, whose plugin state (prefix-cache
    /// store, KV index) the next reload carries over ([`Scheduler::rebuild`]).
    scheduler: Option<Arc<Scheduler>>,
    /// Cluster mode: the warnings of the last snapshot (logged when they first appear).
    logged_warnings: Vec<crate::discovery::warnings::ConfigWarning>,
}

/// A ModelRoute or ModelServer with where it came from, for error messages.
#[derive(Debug)]
struct Sourced<T> {
    /// The manifest file (empty for objects from the API server).
    path: PathBuf,
    /// `document N (line L) Kind ns/name` or `Kind ns/name`.
    what: String,
    object: T,
}

/// The API server's objects a cluster-mode snapshot is built from (valid ones only).
#[derive(Debug, Default)]
pub(crate) struct ClusterObjects {
    /// ModelRoutes.
    pub(crate) routes: Vec<ModelRoute>,
    /// ModelServers.
    pub(crate) servers: Vec<ModelServer>,
    /// The ready pods some ModelServer selects.
    pub(crate) endpoints: Vec<EndpointConfig>,
    /// ExternalModelProviders.
    pub(crate) providers: Vec<kthena_api::networking::ExternalModelProvider>,
    /// The labelled credential Secrets.
    pub(crate) secrets: crate::provider::Secrets,
}

/// What a snapshot is built from, whatever the discovery source.
#[derive(Debug, Default)]
struct Inputs {
    routes: Vec<Sourced<ModelRoute>>,
    servers: Vec<Sourced<ModelServer>>,
    endpoints: Vec<EndpointConfig>,
    files: Vec<PathBuf>,
    dirs: Vec<PathBuf>,
    /// ExternalModelProvider manifests and the credentials standing in for their Secrets.
    providers: Vec<kthena_api::networking::ExternalModelProvider>,
    secrets: crate::provider::Secrets,
    /// Warnings found while reading the manifests (unknown fields).
    warnings: Vec<crate::discovery::warnings::ConfigWarning>,
    /// Gateway API mode: ModelRoutes with `parentRefs` can be served.
    gateway_api: bool,
}

/// An endpoint with the labels ModelServers select it by.
type Labelled<'a> = (Arc<Endpoint>, &'a BTreeMap<String, String>);

/// Endpoints by `namespace/name`.
type Registry = HashMap<String, Arc<Endpoint>>;

/// How an invalid object is handled: a manifest file rejects the whole change, an object
/// from the API server is skipped (logged) so the others keep serving.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OnInvalid {
    Reject,
    Skip,
}

impl Loader {
    /// A loader with no history.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// A loader whose Redis KV index records into `metrics` (Go's kvcache-aware families).
    #[must_use]
    pub fn with_metrics(metrics: &crate::telemetry::metrics::Metrics) -> Self {
        let mut l = Self::default();
        l.kv.metrics = Some(metrics.plugins.clone());
        l
    }

    /// Builds a snapshot from a validated standalone config. On error nothing of the
    /// loader's history changes, so the caller keeps serving the previous snapshot.
    ///
    /// # Errors
    /// [`Error::ReadFile`] or [`Error::Manifest`] (file, document, kind/name, field path,
    /// reason), [`Error::Config`] for a scheduler the registry rejects.
    pub fn load(&mut self, cfg: &Config, config_path: Option<&Path>) -> Result<Snapshot> {
        let config_err = |e: Error| Error::Config {
            path: config_path.map(Path::to_path_buf).unwrap_or_default(),
            reason: e.to_string(),
        };
        let kv = self.kv.prepare(cfg).map_err(config_err)?;
        let scheduler = kv
            .build_scheduler(&cfg.scheduler, self.scheduler.as_deref(), cfg.random_seed)
            .map_err(config_err)?;
        checks::manifest_paths_exist(cfg, config_path)?;
        let mut inputs = read_manifests(cfg)?;
        inputs.endpoints = cfg.endpoints().to_vec();
        // Gateways are read only from the cluster: standalone, a route bound to one serves
        // nothing whatever gatewayApi.enabled says, and is warned about.
        inputs.gateway_api = false;
        inputs.secrets = crate::provider::read_secrets(cfg.secrets(), &cfg.base_dir);
        if let Some(p) = config_path {
            inputs.files.push(p.to_path_buf());
        }
        let snap = self.build(
            inputs,
            OnInvalid::Reject,
            Arc::new(scheduler),
            Arc::new(kv),
            config_path,
        )?;
        self.kv.commit(cfg, &snap.kv);
        self.scheduler = Some(Arc::clone(&snap.scheduler));
        Ok(snap)
    }

    /// Builds a snapshot from the objects of the API server (cluster mode). Invalid
    /// objects are skipped with a warning; the scheduler and KV state are built from `cfg`
    /// at the first call and kept afterwards.
    ///
    /// # Errors
    /// [`Error::Config`] when the scheduler section is rejected (first call only).
    pub(crate) fn load_cluster(
        &mut self,
        cfg: &Config,
        routes: Vec<ModelRoute>,
        servers: Vec<ModelServer>,
        endpoints: Vec<EndpointConfig>,
    ) -> Result<Snapshot> {
        let objects = ClusterObjects {
            routes,
            servers,
            endpoints,
            ..ClusterObjects::default()
        };
        self.load_cluster_objects(cfg, objects)
    }

    /// [`Loader::load_cluster`] with every kind of object, providers and Secrets included.
    ///
    /// # Errors
    /// [`Error::Config`] when the scheduler section is rejected (first call only).
    pub(crate) fn load_cluster_objects(
        &mut self,
        cfg: &Config,
        objects: ClusterObjects,
    ) -> Result<Snapshot> {
        let ClusterObjects {
            routes,
            servers,
            endpoints,
            providers,
            secrets,
        } = objects;
        let (scheduler, kv) = match &self.fixed {
            Some((s, k)) => (Arc::clone(s), Arc::clone(k)),
            None => {
                let config_err = |e: Error| Error::Config {
                    path: PathBuf::new(),
                    reason: e.to_string(),
                };
                let kv = self.kv.prepare(cfg).map_err(config_err)?;
                let s = kv
                    .build_scheduler(&cfg.scheduler, None, cfg.random_seed)
                    .map_err(config_err)?;
                self.kv.commit(cfg, &kv);
                let fixed = (Arc::new(s), Arc::new(kv));
                self.fixed = Some(fixed.clone());
                fixed
            }
        };
        let sourced = |kind: &str, m: &kube::core::ObjectMeta| {
            format!(
                "{kind} {}/{}",
                m.namespace.as_deref().unwrap_or("default"),
                m.name.as_deref().unwrap_or("")
            )
        };
        let inputs = Inputs {
            routes: routes
                .into_iter()
                .map(|r| Sourced {
                    path: PathBuf::new(),
                    what: sourced("ModelRoute", &r.metadata),
                    object: r,
                })
                .collect(),
            servers: servers
                .into_iter()
                .map(|s| Sourced {
                    path: PathBuf::new(),
                    what: sourced("ModelServer", &s.metadata),
                    object: s,
                })
                .collect(),
            endpoints,
            providers,
            secrets,
            gateway_api: cfg.gateway_api.enabled,
            ..Inputs::default()
        };
        self.build(inputs, OnInvalid::Skip, scheduler, kv, None)
    }

    /// The one snapshot builder of both discovery sources.
    fn build(
        &mut self,
        inputs: Inputs,
        on_invalid: OnInvalid,
        scheduler: Arc<Scheduler>,
        kv: Arc<crate::kv::cache::KvState>,
        config_path: Option<&Path>,
    ) -> Result<Snapshot> {
        let (endpoints, new_registry) =
            self.compile_endpoints(&inputs.endpoints, on_invalid, config_path)?;
        let servers = self.compile_servers(inputs.servers, &endpoints, on_invalid)?;
        let (table, route_objects, first_seen, next_seq) =
            self.compile_routes(inputs.routes, on_invalid)?;
        let providers: HashMap<String, Arc<crate::provider::Provider>> = inputs
            .providers
            .iter()
            .map(|p| crate::provider::Provider::resolve(p, &inputs.secrets))
            .map(|p| (p.key.clone(), Arc::new(p)))
            .collect();

        // Everything is valid: commit the history.
        self.commit_endpoints(new_registry, &scheduler);
        self.first_seen = first_seen;
        self.next_seq = next_seq;
        self.generation += 1;
        let endpoints: Vec<Arc<Endpoint>> = endpoints.into_iter().map(|(e, _)| e).collect();
        let mut warnings = inputs.warnings;
        warnings.extend(checks::check(
            &route_objects,
            &servers,
            &providers,
            &endpoints,
        ));
        if !inputs.gateway_api {
            warnings.extend(route_objects.iter().filter_map(checks::needs_gateway));
        }
        self.log_warnings(&warnings, on_invalid);
        Ok(Snapshot {
            generation: self.generation,
            routes: table,
            servers,
            providers,
            endpoints,
            scheduler,
            kv,
            route_objects,
            files: inputs.files,
            dirs: inputs.dirs,
            warnings,
        })
    }

    /// The endpoints with their labels, reusing the live state of unchanged ones, and the
    /// registry by `namespace/name` they become once the snapshot is committed.
    fn compile_endpoints<'a>(
        &self,
        configs: &'a [EndpointConfig],
        on_invalid: OnInvalid,
        config_path: Option<&Path>,
    ) -> Result<(Vec<Labelled<'a>>, Registry)> {
        let mut endpoints = Vec::with_capacity(configs.len());
        let mut registry = HashMap::new();
        for ec in configs {
            let key = format!("{}/{}", ec.namespace, ec.name);
            let ep = match self.endpoints.get(&key) {
                Some(e) if e.same_as(ec) => Arc::clone(e),
                _ => match Endpoint::from_config(ec) {
                    Ok(e) => Arc::new(e),
                    Err(reason) if on_invalid == OnInvalid::Reject => {
                        return Err(Error::Config {
                            path: config_path.map(Path::to_path_buf).unwrap_or_default(),
                            reason: format!("standalone.endpoints {}: {reason}", ec.name),
                        });
                    }
                    Err(reason) => {
                        tracing::warn!(endpoint = %key, %reason, "Skipping endpoint");
                        continue;
                    }
                },
            };
            registry.insert(key, Arc::clone(&ep));
            endpoints.push((ep, &ec.labels));
        }
        Ok((endpoints, registry))
    }

    /// The ModelServers by `namespace/name`, resolved against `endpoints`.
    fn compile_servers(
        &mut self,
        sources: Vec<Sourced<ModelServer>>,
        endpoints: &[Labelled<'_>],
        on_invalid: OnInvalid,
    ) -> Result<HashMap<String, Arc<Server>>> {
        let mut servers = HashMap::new();
        for src in sources {
            match self.compile_server(&src.object, endpoints) {
                Ok(parts) => {
                    let key = format!("{}/{}", parts.namespace, parts.name);
                    servers.insert(key, Arc::new(Server::new(parts, src.object)));
                }
                Err(reason) if on_invalid == OnInvalid::Reject => {
                    return Err(Error::Manifest {
                        path: src.path,
                        reason: format!("{}: {reason}", src.what),
                    });
                }
                Err(reason) => {
                    tracing::warn!(object = %src.what, %reason, "Skipping invalid ModelServer");
                }
            }
        }
        Ok(servers)
    }

    /// Replaces the endpoint registry; the scheduler forgets the endpoints that left (or
    /// were replaced by a changed one).
    fn commit_endpoints(&mut self, registry: Registry, scheduler: &Scheduler) {
        let removed: Vec<Arc<Endpoint>> = self
            .endpoints
            .iter()
            .filter(|(n, e)| registry.get(*n).is_none_or(|ne| !Arc::ptr_eq(ne, e)))
            .map(|(_, e)| Arc::clone(e))
            .collect();
        for e in removed {
            scheduler.on_endpoint_removed(&e.id);
        }
        self.endpoints = registry;
    }

    /// Logs the warnings of a snapshot: all of them for a config file, only the new ones in
    /// cluster mode (which rebuilds on every watch event).
    fn log_warnings(&mut self, warnings: &[ConfigWarning], on_invalid: OnInvalid) {
        if on_invalid == OnInvalid::Reject {
            crate::discovery::warnings::log(warnings);
        } else {
            let new: Vec<_> = warnings
                .iter()
                .filter(|w| !self.logged_warnings.contains(w))
                .cloned()
                .collect();
            crate::discovery::warnings::log(&new);
            self.logged_warnings = warnings.to_vec();
        }
    }

    /// Resolves one ModelServer against the endpoints: traffic policy, selected endpoints
    /// (by the endpoints' current labels) and their prefill/decode roles.
    fn compile_server(
        &mut self,
        s: &ModelServer,
        endpoints: &[(Arc<Endpoint>, &BTreeMap<String, String>)],
    ) -> std::result::Result<ServerParts, String> {
        let namespace = s
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into());
        let name = s.metadata.name.clone().unwrap_or_default();
        let spec = &s.spec;
        let policy = spec.traffic_policy.as_ref();
        let timeout = match policy.and_then(|t| t.timeout.as_ref()) {
            Some(d) => Some(
                d.parse()
                    .map_err(|r| format!("spec.trafficPolicy.timeout: {r}"))?,
            ),
            None => None,
        };
        let retry = match policy.and_then(|t| t.retry.as_ref()) {
            Some(r) => {
                let pause = match &r.retry_interval {
                    Some(d) => d
                        .parse()
                        .map_err(|e| format!("spec.trafficPolicy.retry.retryInterval: {e}"))?,
                    None => Duration::from_millis(100),
                };
                let attempts = r.attempts.map_or(crate::config::DEFAULT_ATTEMPTS, |a| {
                    usize::try_from(a.max(1)).unwrap_or(1)
                });
                Some((attempts, pause))
            }
            None => None,
        };
        let selector = &spec.workload_selector.match_labels;
        let selected: Vec<(Arc<Endpoint>, &BTreeMap<String, String>)> = endpoints
            .iter()
            .filter(|(e, labels)| e.namespace == namespace && labels_match(selector, labels))
            .map(|(e, l)| (Arc::clone(e), *l))
            .collect();
        let (mut prefill, mut decode, mut pd_members) = (Vec::new(), Vec::new(), Vec::new());
        if let Some(pd) = &spec.workload_selector.pd_group {
            for (e, labels) in &selected {
                let role = pd_role(pd, labels);
                match role {
                    Some(PdRole::Decode) => decode.push(Arc::clone(e)),
                    Some(PdRole::Prefill) => prefill.push(Arc::clone(e)),
                    None => {}
                }
                if let (Some(role), Some(group)) = (role, labels.get(&pd.group_key)) {
                    pd_members.push(crate::pd::PdEndpoint {
                        id: e.id.clone(),
                        role: match role {
                            PdRole::Prefill => kthena_sched::PdRole::Prefill,
                            PdRole::Decode => kthena_sched::PdRole::Decode,
                        },
                        group: group.clone(),
                    });
                }
            }
        }
        Ok(ServerParts {
            namespace,
            name,
            timeout,
            retry,
            endpoints: selected.into_iter().map(|(e, _)| e).collect(),
            prefill,
            decode,
            pd_members,
        })
    }

    /// Compiles the routes with their ages: creationTimestamp when set, else the time this
    /// router first saw the route; the sequence number breaks ties in load order. Returns
    /// the table, the route objects and the new age history (committed by the caller).
    #[expect(clippy::type_complexity, reason = "private helper returning its parts")]
    fn compile_routes(
        &self,
        routes: Vec<Sourced<ModelRoute>>,
        on_invalid: OnInvalid,
    ) -> Result<(
        RouteTable,
        Vec<ModelRoute>,
        HashMap<String, (i128, u64)>,
        u64,
    )> {
        let mut first_seen = self.first_seen.clone();
        let mut next_seq = self.next_seq;
        let mut compiled = Vec::with_capacity(routes.len());
        let mut route_objects = Vec::with_capacity(routes.len());
        for src in routes {
            let r = src.object;
            let key = format!(
                "{}/{}",
                r.metadata.namespace.as_deref().unwrap_or("default"),
                r.metadata.name.as_deref().unwrap_or("")
            );
            let (seen_at, seq) = *first_seen.entry(key).or_insert_with(|| {
                next_seq += 1;
                (jiff::Timestamp::now().as_nanosecond(), next_seq)
            });
            let created = r
                .metadata
                .creation_timestamp
                .as_ref()
                .map_or(seen_at, |t| t.0.as_nanosecond());
            let compiled_route = CompiledRoute::compile(&r, (created, seq));
            match compiled_route {
                Ok(c) => {
                    compiled.push(c);
                    route_objects.push(r);
                }
                Err(reason) if on_invalid == OnInvalid::Reject => {
                    return Err(Error::Manifest {
                        path: src.path,
                        reason: format!("{}: {reason}", src.what),
                    });
                }
                Err(reason) => {
                    tracing::warn!(object = %src.what, %reason, "Skipping invalid ModelRoute");
                }
            }
        }
        Ok((
            RouteTable::new(compiled),
            route_objects,
            first_seen,
            next_seq,
        ))
    }
}

/// A ModelServer's resolved parts, before the [`Server`] is assembled.
#[derive(Debug)]
struct ServerParts {
    namespace: String,
    name: String,
    timeout: Option<Duration>,
    retry: Option<(usize, Duration)>,
    endpoints: Vec<Arc<Endpoint>>,
    prefill: Vec<Arc<Endpoint>>,
    decode: Vec<Arc<Endpoint>>,
    pd_members: Vec<crate::pd::PdEndpoint>,
}

impl Server {
    fn new(p: ServerParts, object: ModelServer) -> Self {
        Self {
            key: format!("{}/{}", p.namespace, p.name),
            namespace: p.namespace,
            name: p.name,
            model: object.spec.model.clone(),
            engine: object.spec.inference_engine,
            timeout: p.timeout,
            retry: p.retry,
            endpoints: p.endpoints,
            prefill_endpoints: p.prefill,
            decode_endpoints: p.decode,
            pd: object
                .spec
                .workload_selector
                .pd_group
                .as_ref()
                .map(|_| crate::pd::PdLayout {
                    connector: crate::pd::Connector::of(&object.spec),
                    members: p.pd_members,
                }),
            object,
        }
    }
}

/// A pod's role in a prefill/decode group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PdRole {
    Prefill,
    Decode,
}

/// Go Kthena's categorisation (`categorizePodForPDGroup` in
/// `pkg/kthena-router/datastore/model_server.go`): a pod without the `groupKey` label has no role;
/// decode when it matches all `decodeLabels` (checked first), else prefill when it matches
/// all `prefillLabels`; an empty label map never matches.
fn pd_role(
    pd: &kthena_api::networking::PdGroup,
    labels: &BTreeMap<String, String>,
) -> Option<PdRole> {
    if !labels.contains_key(&pd.group_key) {
        return None;
    }
    let matches = |want: &BTreeMap<String, String>| !want.is_empty() && labels_match(want, labels);
    if matches(&pd.decode_labels) {
        Some(PdRole::Decode)
    } else if matches(&pd.prefill_labels) {
        Some(PdRole::Prefill)
    } else {
        None
    }
}

/// Reads and validates the manifests a standalone config names.
fn read_manifests(cfg: &Config) -> Result<Inputs> {
    let manifest_paths = cfg.manifest_paths();
    let dirs: Vec<PathBuf> = manifest_paths
        .iter()
        .filter(|p| p.is_dir())
        .cloned()
        .collect();
    let files = manifest_files(&manifest_paths)?;
    let mut inputs = Inputs::default();
    let mut seen = HashSet::new();
    for f in &files {
        let docs = kthena_api::load_file(f).map_err(|e| {
            // The loader's message starts with the file too: name it once.
            let text = e.to_string();
            let prefix = format!("{}: ", f.display());
            Error::Manifest {
                path: f.clone(),
                reason: text.strip_prefix(&prefix).unwrap_or(&text).to_owned(),
            }
        })?;
        for doc in docs {
            let obj = doc.object.with_defaults();
            let id = format!("{} {}/{}", obj.kind(), obj.namespace(), obj.name());
            let what = format!("document {} (line {}) {id}", doc.index, doc.line);
            let reject = |reason: String| Error::Manifest {
                path: f.clone(),
                reason: format!("{what}: {reason}"),
            };
            if let Err(errs) = obj.validate() {
                let list: Vec<String> = errs.iter().map(ToString::to_string).collect();
                return Err(reject(list.join("; ")));
            }
            let named = matches!(
                obj,
                Object::ModelRoute(_) | Object::ModelServer(_) | Object::ExternalModelProvider(_)
            );
            if named && !seen.insert(id) {
                return Err(reject("defined twice".into()));
            }
            for field in &doc.unknown_fields {
                inputs
                    .warnings
                    .push(crate::discovery::warnings::ConfigWarning {
                        kind: "unknown_field",
                        message: format!(
                            "{}: {what}: unknown field `{field}` is ignored",
                            f.display()
                        ),
                    });
            }
            let path = f.clone();
            match obj {
                Object::ModelRoute(r) => inputs.routes.push(Sourced {
                    path,
                    what,
                    object: *r,
                }),
                Object::ModelServer(s) => inputs.servers.push(Sourced {
                    path,
                    what,
                    object: *s,
                }),
                Object::ExternalModelProvider(p) => inputs.providers.push(*p),
                _ => {}
            }
        }
    }
    inputs.files = files;
    inputs.dirs = dirs;
    Ok(inputs)
}

fn labels_match(selector: &BTreeMap<String, String>, labels: &BTreeMap<String, String>) -> bool {
    selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

/// Expands manifest paths: files as given, folders to their `*.yaml`, `*.yml`, `*.json`
/// files (sorted, not recursive).
///
/// # Errors
/// [`Error::ReadFile`] when a path does not exist or a folder cannot be listed.
pub fn manifest_files(paths: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for p in paths {
        let meta = std::fs::metadata(p).map_err(|source| Error::ReadFile {
            path: p.clone(),
            source,
        })?;
        if meta.is_dir() {
            let mut files: Vec<PathBuf> = std::fs::read_dir(p)
                .map_err(|source| Error::ReadFile {
                    path: p.clone(),
                    source,
                })?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|f| {
                    f.is_file()
                        && f.extension()
                            .and_then(|x| x.to_str())
                            .is_some_and(|x| matches!(x, "yaml" | "yml" | "json"))
                })
                .collect();
            files.sort();
            out.extend(files);
        } else {
            out.push(p.clone());
        }
    }
    Ok(out)
}

mod checks;

pub(crate) use checks::unready_models;

#[cfg(test)]
mod tests;
