//! The generated `ModelServer` (Go `convert.BuildModelServer`): served model name, engine
//! port, PD group and kv connector from the booster's workers.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kthena_api::GoDuration;
use kthena_api::networking::{
    InferenceEngine, KvConnector, KvConnectorType, ModelServerSpec, PdGroup, Retry, TrafficPolicy,
    WorkloadPort, WorkloadSelector,
};
use kthena_api::workload::{ModelBackend, ModelBackendType, ModelWorker, ModelWorkerType};
use kthena_api::{ModelBooster, ModelServer};
use kube::ResourceExt as _;

use super::{
    MODEL_UID_LABEL, backend_resource_name, booster_owner_ref, child_labels, config_field,
};
use crate::error::{Error, Result};
use crate::names::{GROUP_NAME_LABEL, ROLE_LABEL};
use crate::serving::revision::hash_json;

/// vLLM's default port, the engine port when no worker sets `port`.
const DEFAULT_ENGINE_PORT: i32 = 8000;

pub(crate) fn worker_type(w: &ModelWorker) -> ModelWorkerType {
    w.type_.unwrap_or_default()
}

fn type_name(t: ModelWorkerType) -> &'static str {
    match t {
        ModelWorkerType::Server => "server",
        ModelWorkerType::Prefill => "prefill",
        ModelWorkerType::Decode => "decode",
        ModelWorkerType::Controller => "controller",
        ModelWorkerType::Coordinator => "coordinator",
    }
}

/// Go's `GetEnginePort`: the `port` of the server, prefill and decode workers' `config`
/// (default 8000 each), which must agree.
///
/// # Errors
/// [`Error::EnginePort`] for a value that is not 1..=65535, [`Error::EnginePortMismatch`]
/// when two workers differ.
pub fn engine_port(backend: &ModelBackend) -> Result<i32> {
    let mut port: Option<i32> = None;
    let serving = [
        ModelWorkerType::Server,
        ModelWorkerType::Prefill,
        ModelWorkerType::Decode,
    ];
    for w in backend
        .workers
        .iter()
        .filter(|w| serving.contains(&worker_type(w)))
    {
        let this = match config_field(w, "port") {
            None => DEFAULT_ENGINE_PORT,
            Some(v) => {
                // Go formats the value with `fmt.Sprint` and parses it as an integer.
                let text = v.as_str().map_or_else(|| v.to_string(), str::to_owned);
                text.parse::<i32>()
                    .ok()
                    .filter(|p| (1..=65535).contains(p))
                    .ok_or_else(|| Error::EnginePort {
                        worker: type_name(worker_type(w)).to_owned(),
                        port: text.clone(),
                    })?
            }
        };
        if let Some(first) = port.filter(|&p| p != this) {
            return Err(Error::EnginePortMismatch {
                first,
                second: this,
            });
        }
        port = Some(this);
    }
    Ok(port.unwrap_or(DEFAULT_ENGINE_PORT))
}

/// Go's `getServedModelName`: the first `served-model-name` string of a server or decode
/// worker's config, else the booster's name.
#[must_use]
pub fn served_model_name(booster: &ModelBooster) -> String {
    let workers = booster.spec.backend.workers.iter();
    workers
        .filter(|w| {
            matches!(
                worker_type(w),
                ModelWorkerType::Server | ModelWorkerType::Decode
            )
        })
        .find_map(|w| {
            config_field(w, "served-model-name")?
                .as_str()
                .map(str::to_owned)
        })
        .unwrap_or_else(|| booster.name_any())
}

/// A parsed `kv-transfer-config`: the connector's name, its type.
struct WorkerConnector {
    name: String,
    type_: KvConnectorType,
}

/// Go's `VLLMKvConnectorType`.
fn connector_type(name: &str) -> Option<KvConnectorType> {
    match name {
        "MooncakeConnector" | "MooncakeConnectorV1" => Some(KvConnectorType::Mooncake),
        "NixlConnector" => Some(KvConnectorType::Nixl),
        "LMCacheConnectorV1" => Some(KvConnectorType::Lmcache),
        _ => None,
    }
}

/// Go's `parseKvWorkerConnector` for a prefill or decode worker.
fn worker_connector(w: &ModelWorker, worker: &'static str) -> Result<Option<WorkerConnector>> {
    let Some(config) = config_field(w, "kv-transfer-config") else {
        return Ok(None);
    };
    let text = config
        .as_str()
        .ok_or_else(|| Error::InvalidKvTransferConfig {
            worker,
            reason: "must be a JSON string".to_owned(),
        })?;
    let parsed: serde_json::Value =
        serde_json::from_str(text).map_err(|e| Error::InvalidKvTransferConfig {
            worker,
            reason: e.to_string(),
        })?;
    let field = |key: &'static str| {
        parsed
            .get(key)
            .and_then(serde_json::Value::as_str)
            .filter(|s| !s.is_empty())
            .ok_or(Error::KvTransferFieldMissing { worker, field: key })
    };
    let name = field("kv_connector")?;
    let type_ = connector_type(name).ok_or_else(|| Error::UnsupportedKvConnector {
        worker,
        connector: name.to_owned(),
    })?;
    let role = field("kv_role")?;
    let allowed: &[&str] = if worker == "prefill" {
        &["kv_producer", "kv_both"]
    } else {
        &["kv_consumer", "kv_both"]
    };
    if !allowed.contains(&role) {
        return Err(Error::InvalidKvRole {
            worker,
            role: role.to_owned(),
            allowed: if worker == "prefill" {
                "kv_producer, kv_both"
            } else {
                "kv_consumer, kv_both"
            },
        });
    }
    Ok(Some(WorkerConnector {
        name: name.to_owned(),
        type_,
    }))
}

/// The single worker of `t`, if any.
fn single_worker(backend: &ModelBackend, t: ModelWorkerType) -> Result<Option<&ModelWorker>> {
    let all: Vec<&ModelWorker> = backend
        .workers
        .iter()
        .filter(|w| worker_type(w) == t)
        .collect();
    if all.len() > 1 {
        return Err(Error::DuplicateWorkers {
            backend: backend.name.clone(),
            worker: type_name(t),
            count: all.len(),
        });
    }
    Ok(all.first().copied())
}

/// Go's `GetKvConnectorSpec`: the connector type named by the prefill and decode workers'
/// `kv-transfer-config` (`MooncakeConnector`/`MooncakeConnectorV1` → `mooncake`,
/// `NixlConnector` → `nixl`, `LMCacheConnectorV1` → `lmcache`); `None` when neither names
/// one.
///
/// # Errors
/// Go's: duplicate workers, a config that is not JSON or lacks `kv_connector`/`kv_role`,
/// an unknown connector, a role that does not fit the worker, only one side configured, or
/// the two sides naming different connector types.
pub fn kv_connector(backend: &ModelBackend) -> Result<Option<KvConnector>> {
    let prefill = single_worker(backend, ModelWorkerType::Prefill)?;
    let decode = single_worker(backend, ModelWorkerType::Decode)?;
    let p = prefill
        .map(|w| worker_connector(w, "prefill"))
        .transpose()?
        .flatten();
    let d = decode
        .map(|w| worker_connector(w, "decode"))
        .transpose()?
        .flatten();
    let one_sided = |side, c: WorkerConnector, other| Error::KvConnectorOneSided {
        backend: backend.name.clone(),
        side,
        connector: c.name,
        other,
    };
    match (p, d) {
        (None, None) => Ok(None),
        (None, Some(d)) => Err(one_sided("decode", d, "prefill")),
        (Some(p), None) => Err(one_sided("prefill", p, "decode")),
        (Some(p), Some(d)) if p.type_ != d.type_ => Err(Error::KvConnectorMismatch {
            backend: backend.name.clone(),
            prefill: p.name,
            decode: d.name,
        }),
        (Some(p), Some(_)) => Ok(Some(KvConnector {
            type_: Some(p.type_),
        })),
    }
}

/// Go's `getPdGroup`: for vLLMDisaggregated, pods grouped by ServingGroup with prefill and
/// decode told apart by their role label.
fn pd_group(backend: &ModelBackend) -> Option<PdGroup> {
    let role = |r: &str| BTreeMap::from([(ROLE_LABEL.to_owned(), r.to_owned())]);
    (backend.type_ == ModelBackendType::VLlmDisaggregated).then(|| PdGroup {
        group_key: GROUP_NAME_LABEL.to_owned(),
        prefill_labels: role("prefill"),
        decode_labels: role("decode"),
    })
}

/// The ModelServer of `booster`: name `<booster>-<backend>`; `model` =
/// [`served_model_name`]; `inferenceEngine: vLLM`; workload selector {model-uid: the
/// booster's UID} with the PD group for vLLMDisaggregated; `workloadPort.port` =
/// [`engine_port`]; `trafficPolicy.retry {attempts: 5, retryInterval: 0s}`;
/// `kvConnector` = [`kv_connector`]; labels of [`crate::booster::child_labels`] with the
/// hash of the spec as revision; the booster as controller owner.
///
/// # Errors
/// Those of [`engine_port`] and [`kv_connector`]; [`Error::Encode`] if the spec cannot be
/// hashed.
pub fn model_server(booster: &ModelBooster) -> Result<ModelServer> {
    let backend = &booster.spec.backend;
    let spec = ModelServerSpec {
        model: Some(served_model_name(booster)),
        inference_engine: InferenceEngine::VLlm,
        workload_selector: WorkloadSelector {
            match_labels: BTreeMap::from([(
                MODEL_UID_LABEL.to_owned(),
                booster.uid().unwrap_or_default(),
            )]),
            pd_group: pd_group(backend),
        },
        workload_port: WorkloadPort {
            port: engine_port(backend)?,
            protocol: None,
        },
        traffic_policy: Some(TrafficPolicy {
            timeout: None,
            retry: Some(Retry {
                attempts: Some(5),
                retry_interval: Some(GoDuration::new("0s")),
            }),
        }),
        kv_connector: kv_connector(backend)?,
    };
    let revision = hash_json(&spec)?;
    Ok(ModelServer {
        metadata: ObjectMeta {
            name: Some(backend_resource_name(&booster.name_any(), &backend.name)),
            namespace: booster.namespace(),
            labels: Some(child_labels(booster, &backend.name, &revision)),
            owner_references: Some(vec![booster_owner_ref(booster)]),
            ..ObjectMeta::default()
        },
        spec,
        status: None,
    })
}
