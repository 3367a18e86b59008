//! The thin Kubernetes layer: kubeconfig as kubectl finds it, list, get and create, and
//! API errors turned into [`Error`]s a person can act on.

use std::path::Path;
use std::time::Duration;

use kthena_api::{AutoscalingPolicy, ModelBooster, ModelRoute, ModelServer, ModelServing};
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::ApiResource;
use kube::{Client, Config};
use serde_json::Value;

use crate::error::{Error, Result};
use crate::kind::Kind;
use crate::rows::Scope;

/// A connection to the cluster of the selected kubeconfig context.
#[derive(Clone)]
pub struct Cluster {
    client: Client,
    server: String,
    namespace: String,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("server", &self.server)
            .field("namespace", &self.namespace)
            .finish()
    }
}

fn kubeconfig_error(e: impl std::error::Error + 'static) -> Error {
    Error::Kubeconfig {
        message: innermost(&e),
    }
}

/// The message of the deepest error in `e`'s source chain, with the outer one when the
/// inner one alone says little.
fn innermost(e: &(dyn std::error::Error + 'static)) -> String {
    kthena_api::root_cause(e).to_string()
}

/// One kubeconfig file; an error names it.
fn read_file(path: &Path) -> Result<Kubeconfig> {
    Kubeconfig::read_from(path).map_err(|e| Error::Kubeconfig {
        message: format!("{}: {}", path.display(), innermost(&e)),
    })
}

/// `$KUBECONFIG` as kubectl reads it: the `:`-separated files merged in order (the first
/// to set a value wins), files that do not exist skipped; an error when none exists.
fn read_list(list: &std::ffi::OsStr) -> Result<Kubeconfig> {
    let mut merged: Option<Kubeconfig> = None;
    for path in std::env::split_paths(list).filter(|p| p.exists()) {
        let next = read_file(&path)?;
        merged = Some(match merged {
            None => next,
            Some(m) => m.merge(next).map_err(|e| Error::Kubeconfig {
                message: format!("{}: {}", path.display(), innermost(&e)),
            })?,
        });
    }
    merged.ok_or_else(|| Error::Kubeconfig {
        message: format!("no file of KUBECONFIG={} exists", list.to_string_lossy()),
    })
}

/// `want` is a context of `kc`, else the error kubectl gives (`context "x" does not
/// exist`) with the contexts there are (kube's says `failed to load current context: x`).
fn check_context(kc: &Kubeconfig, want: &str) -> Result<()> {
    if kc.contexts.iter().any(|c| c.name == want) {
        return Ok(());
    }
    let names: Vec<&str> = kc.contexts.iter().map(|c| c.name.as_str()).collect();
    let there = if names.is_empty() {
        "the kubeconfig has none".to_owned()
    } else {
        format!("the kubeconfig has {}", names.join(", "))
    };
    Err(Error::Kubeconfig {
        message: format!("context \"{want}\" does not exist ({there})"),
    })
}

impl Cluster {
    /// Loads the kubeconfig as kubectl does (`kubeconfig`, else `$KUBECONFIG`, a
    /// `:`-separated list merged in order, else `~/.kube/config`; in-cluster
    /// configuration when none exists), selects `context` (default: current-context) and
    /// takes the default namespace from it (`default` when it names none). Nothing is sent
    /// to the server yet.
    ///
    /// # Errors
    /// [`Error::NoKubeconfig`], [`Error::Kubeconfig`].
    pub async fn connect(kubeconfig: Option<&Path>, context: Option<&str>) -> Result<Self> {
        let loaded = match (kubeconfig, std::env::var_os("KUBECONFIG")) {
            (Some(path), _) => Some(read_file(path)?),
            (None, Some(list)) if !list.is_empty() => Some(read_list(&list)?),
            (None, _) => Kubeconfig::read().ok(),
        };
        let mut config = match loaded {
            Some(kc) => {
                if let Some(want) = context {
                    check_context(&kc, want)?;
                }
                let options = KubeConfigOptions {
                    context: context.map(str::to_owned),
                    ..Default::default()
                };
                Config::from_custom_kubeconfig(kc, &options)
                    .await
                    .map_err(kubeconfig_error)?
            }
            None => Config::incluster().map_err(|_| Error::NoKubeconfig)?,
        };
        config.connect_timeout = Some(Duration::from_secs(10));
        let server = config
            .cluster_url
            .to_string()
            .trim_end_matches('/')
            .to_owned();
        let namespace = config.default_namespace.clone();
        let client = Client::try_from(config).map_err(kubeconfig_error)?;
        Ok(Self {
            client,
            server,
            namespace,
        })
    }

    /// The namespace of the selected context (`default` when it names none).
    pub fn default_namespace(&self) -> &str {
        &self.namespace
    }

    fn api(&self, kind: Kind, namespace: Option<&str>) -> Api<DynamicObject> {
        let ar = api_resource(kind);
        match namespace {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, &ar),
            None => Api::all_with(self.client.clone(), &ar),
        }
    }

    /// Every object of `kind` in `scope`, as the API server returned them (with
    /// `apiVersion` and `kind`).
    ///
    /// # Errors
    /// [`Error::Unreachable`], [`Error::CrdsMissing`], [`Error::Forbidden`], ...
    pub async fn list(&self, kind: Kind, scope: &Scope) -> Result<Vec<Value>> {
        let list = self
            .api(kind, scope.namespace())
            .list(&ListParams::default())
            .await
            .map_err(|e| classify(e, &self.server, kind, None))?;
        list.items.into_iter().map(|o| to_value(kind, &o)).collect()
    }

    /// The object `name` of `kind` in `namespace`.
    ///
    /// # Errors
    /// [`Error::NotFound`], [`Error::Unreachable`], [`Error::CrdsMissing`], ...
    pub async fn get(&self, kind: Kind, namespace: &str, name: &str) -> Result<Value> {
        let object = self
            .api(kind, Some(namespace))
            .get(name)
            .await
            .map_err(|e| classify(e, &self.server, kind, Some((namespace, name))))?;
        to_value(kind, &object)
    }

    /// Creates `object` (a JSON Kubernetes object of `kind`) in `namespace`.
    ///
    /// # Errors
    /// [`Error::AlreadyExists`], [`Error::Api`] (e.g. rejected by the CRD schema), ...
    pub async fn create(&self, kind: Kind, namespace: &str, object: Value) -> Result<()> {
        let name = object["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let dynamic: DynamicObject =
            serde_json::from_value(object).map_err(|e| Error::Serialize {
                message: e.to_string(),
            })?;
        self.api(kind, Some(namespace))
            .create(
                &PostParams {
                    field_manager: Some("kthena".to_owned()),
                    ..Default::default()
                },
                &dynamic,
            )
            .await
            .map_err(|e| match classify(e, &self.server, kind, None) {
                Error::Api { code: 409, .. } => Error::AlreadyExists {
                    kind: kind.kind().to_owned(),
                    name,
                    namespace: namespace.to_owned(),
                },
                other => other,
            })?;
        Ok(())
    }
}

/// Turns a kube error into the error a person can act on. A 404 whose details name no
/// object means the resource type itself is missing (no CRD); with a name, the object is.
fn classify(e: kube::Error, server: &str, kind: Kind, object: Option<(&str, &str)>) -> Error {
    match e {
        kube::Error::Api(status) => {
            let missing_type =
                status.code == 404 && status.details.as_ref().is_none_or(|d| d.name.is_empty());
            match (status.code, object) {
                (404, _) if missing_type => Error::CrdsMissing {
                    resource: resource_name(kind),
                },
                (404, Some((namespace, name))) => Error::NotFound {
                    kind: kind.kind(),
                    name: name.to_owned(),
                    namespace: namespace.to_owned(),
                },
                (403, _) => Error::Forbidden {
                    message: status.message,
                },
                (401, _) => Error::Unauthorized {
                    message: status.message,
                },
                (code, _) => Error::Api {
                    code,
                    message: status.message,
                },
            }
        }
        other @ (kube::Error::HyperError(_) | kube::Error::Service(_)) => Error::Unreachable {
            server: server.to_owned(),
            detail: innermost(&other),
        },
        other => Error::Client {
            message: innermost(&other),
        },
    }
}

/// `plural.group` of `kind`, e.g. `modelservings.workload.serving.volcano.sh`.
pub fn resource_name(kind: Kind) -> String {
    format!("{}.{}", kind.plural(), api_resource(kind).group)
}

fn api_resource(kind: Kind) -> ApiResource {
    match kind {
        Kind::ModelServing => ApiResource::erase::<ModelServing>(&()),
        Kind::ModelBooster => ApiResource::erase::<ModelBooster>(&()),
        Kind::AutoscalingPolicy => ApiResource::erase::<AutoscalingPolicy>(&()),
        Kind::ModelRoute => ApiResource::erase::<ModelRoute>(&()),
        Kind::ModelServer => ApiResource::erase::<ModelServer>(&()),
    }
}

/// The object as JSON, `apiVersion` and `kind` filled in when a list left them out.
fn to_value(kind: Kind, object: &DynamicObject) -> Result<Value> {
    let mut value = serde_json::to_value(object).map_err(|e| Error::Serialize {
        message: e.to_string(),
    })?;
    if let Some(map) = value.as_object_mut() {
        let ar = api_resource(kind);
        map.entry("apiVersion")
            .or_insert_with(|| Value::String(ar.api_version.clone()));
        map.entry("kind")
            .or_insert_with(|| Value::String(ar.kind.clone()));
    }
    Ok(value)
}

#[cfg(test)]
mod tests;

/// The kubeconfig selection of the command line; connected only when a command needs
/// the cluster.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ClusterTarget<'a> {
    pub(crate) kubeconfig: Option<&'a std::path::Path>,
    pub(crate) context: Option<&'a str>,
}

impl ClusterTarget<'_> {
    pub(crate) async fn connect(&self) -> Result<Cluster> {
        Cluster::connect(self.kubeconfig, self.context).await
    }
}
