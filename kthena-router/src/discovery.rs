//! Standalone discovery: the config file plus ModelRoute/ModelServer manifests become an
//! immutable routing [`Snapshot`], swapped atomically on every valid change.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use kthena_api::networking::InferenceEngine;
use kthena_api::{ModelRoute, ModelServer, Object};
use kthena_sched::Scheduler;

use crate::config::Config;
use crate::endpoint::Endpoint;
use crate::error::{Error, Result};
use crate::route::{CompiledRoute, RouteTable};

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
    /// Every configured endpoint.
    pub endpoints: Vec<Arc<Endpoint>>,
    /// The scheduler built from the config's `scheduler:` section.
    pub scheduler: Arc<Scheduler>,
    /// KV-cache-aware routing state: the shared KV index, tokenizers, KV-event sources.
    pub kv: Arc<crate::kv_cache::KvState>,
    /// The route manifests (for the debug dump), in route-table order.
    pub route_objects: Vec<ModelRoute>,
    /// Files the snapshot was built from (watched for changes).
    pub files: Vec<PathBuf>,
    /// Manifest folders named in the config (watched for new files).
    pub dirs: Vec<PathBuf>,
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
    endpoints: HashMap<String, Arc<Endpoint>>,
    first_seen: HashMap<String, (i128, u64)>,
    next_seq: u64,
    generation: u64,
    kv: crate::kv_cache::KvLoader,
}

impl Loader {
    /// A loader with no history.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Builds a snapshot from a validated config. On error nothing of the loader's history
    /// changes, so the caller keeps serving the previous snapshot.
    ///
    /// # Errors
    /// [`Error::ReadFile`] or [`Error::Manifest`] (file, document, kind/name, field path,
    /// reason), [`Error::Config`] for a scheduler the registry rejects.
    pub fn load(&mut self, cfg: &Config, config_path: Option<&Path>) -> Result<Snapshot> {
        let kv = self.kv.prepare(cfg).map_err(|reason| Error::Config {
            path: config_path.map(Path::to_path_buf).unwrap_or_default(),
            reason,
        })?;
        let scheduler = kv
            .build_scheduler(&cfg.scheduler)
            .map_err(|reason| Error::Config {
                path: config_path.map(Path::to_path_buf).unwrap_or_default(),
                reason: format!("scheduler: {reason}"),
            })?;
        let manifest_paths = cfg.manifest_paths();
        let dirs: Vec<PathBuf> = manifest_paths
            .iter()
            .filter(|p| p.is_dir())
            .cloned()
            .collect();
        let mut files = manifest_files(&manifest_paths)?;
        let mut routes = Vec::new();
        let mut servers_raw = Vec::new();
        let mut seen = HashSet::new();
        for f in &files {
            let docs = kthena_api::load_file(f).map_err(|e| Error::Manifest {
                path: f.clone(),
                reason: e.to_string(),
            })?;
            for doc in docs {
                let obj = doc.object.with_defaults();
                let id = format!("{} {}/{}", obj.kind(), obj.namespace(), obj.name());
                let what = format!("document {} (line {}) {id}", doc.index, doc.line);
                if let Err(errs) = obj.validate() {
                    let list: Vec<String> = errs.iter().map(ToString::to_string).collect();
                    return Err(Error::Manifest {
                        path: f.clone(),
                        reason: format!("{what}: {}", list.join("; ")),
                    });
                }
                match obj {
                    Object::ModelRoute(r) => {
                        if !seen.insert(id.clone()) {
                            return Err(Error::Manifest {
                                path: f.clone(),
                                reason: format!("{what}: defined twice"),
                            });
                        }
                        routes.push((f.clone(), what, *r));
                    }
                    Object::ModelServer(s) => {
                        if !seen.insert(id.clone()) {
                            return Err(Error::Manifest {
                                path: f.clone(),
                                reason: format!("{what}: defined twice"),
                            });
                        }
                        servers_raw.push((f.clone(), what, *s));
                    }
                    _ => {}
                }
            }
        }

        // Endpoints: reuse the live state of unchanged ones.
        let mut endpoints = Vec::with_capacity(cfg.standalone.endpoints.len());
        let mut new_registry = HashMap::new();
        for ec in &cfg.standalone.endpoints {
            let ep = match self.endpoints.get(&ec.name) {
                Some(e) if e.same_as(ec) => Arc::clone(e),
                _ => Arc::new(Endpoint::from_config(ec).map_err(|reason| Error::Config {
                    path: config_path.map(Path::to_path_buf).unwrap_or_default(),
                    reason: format!("standalone.endpoints {}: {reason}", ec.name),
                })?),
            };
            new_registry.insert(ec.name.clone(), Arc::clone(&ep));
            endpoints.push(ep);
        }

        let mut servers = HashMap::new();
        for (path, what, s) in servers_raw {
            let namespace = s
                .metadata
                .namespace
                .clone()
                .unwrap_or_else(|| "default".into());
            let name = s.metadata.name.clone().unwrap_or_default();
            let spec = &s.spec;
            let timeout = match spec
                .traffic_policy
                .as_ref()
                .and_then(|t| t.timeout.as_ref())
            {
                Some(d) => Some(d.parse().map_err(|r| Error::Manifest {
                    path: path.clone(),
                    reason: format!("{what}: spec.trafficPolicy.timeout: {r}"),
                })?),
                None => None,
            };
            let retry = match spec.traffic_policy.as_ref().and_then(|t| t.retry.as_ref()) {
                Some(r) => {
                    let pause = match &r.retry_interval {
                        Some(d) => d.parse().map_err(|e| Error::Manifest {
                            path: path.clone(),
                            reason: format!("{what}: spec.trafficPolicy.retry.retryInterval: {e}"),
                        })?,
                        None => Duration::from_millis(100),
                    };
                    let attempts = r.attempts.map_or(crate::service::DEFAULT_ATTEMPTS, |a| {
                        usize::try_from(a.max(1)).unwrap_or(1)
                    });
                    Some((attempts, pause))
                }
                None => None,
            };
            let selector = &spec.workload_selector.match_labels;
            if spec.workload_selector.pd_group.is_some() {
                tracing::warn!(server = %name, "Prefill/decode groups are not served in standalone mode yet; routing to all selected endpoints");
            }
            let selected: Vec<Arc<Endpoint>> = endpoints
                .iter()
                .filter(|e| e.namespace == namespace && labels_match(selector, &e.labels))
                .cloned()
                .collect();
            let key = format!("{namespace}/{name}");
            servers.insert(
                key.clone(),
                Arc::new(Server {
                    namespace,
                    name,
                    key,
                    model: spec.model.clone(),
                    engine: spec.inference_engine,
                    timeout,
                    retry,
                    endpoints: selected,
                    object: s,
                }),
            );
        }

        // Route ages: creationTimestamp when set, else the time this router first saw the
        // route; the sequence number breaks ties in load order.
        let mut first_seen = self.first_seen.clone();
        let mut next_seq = self.next_seq;
        let mut compiled = Vec::with_capacity(routes.len());
        let mut route_objects = Vec::with_capacity(routes.len());
        for (path, what, r) in routes {
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
            let c =
                CompiledRoute::compile(&r, (created, seq)).map_err(|reason| Error::Manifest {
                    path: path.clone(),
                    reason: format!("{what}: {reason}"),
                })?;
            compiled.push(c);
            route_objects.push(r);
        }
        let table = RouteTable::new(compiled);

        // Everything is valid: commit the history.
        let removed: Vec<Arc<Endpoint>> = self
            .endpoints
            .iter()
            .filter(|(n, e)| new_registry.get(*n).is_none_or(|ne| !Arc::ptr_eq(ne, e)))
            .map(|(_, e)| Arc::clone(e))
            .collect();
        for e in removed {
            scheduler.on_endpoint_removed(&e.id);
        }
        self.endpoints = new_registry;
        self.kv.commit(cfg, &kv);
        self.first_seen = first_seen;
        self.next_seq = next_seq;
        self.generation += 1;
        if let Some(p) = config_path {
            files.push(p.to_path_buf());
        }
        Ok(Snapshot {
            generation: self.generation,
            routes: table,
            servers,
            endpoints,
            scheduler: Arc::new(scheduler),
            kv: Arc::new(kv),
            route_objects,
            files,
            dirs,
        })
    }
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
