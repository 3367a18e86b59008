//! The generated `ModelServing` (Go `convert.BuildModelServing` with the templates
//! `convert/templates/vllm.yaml` and `vllm-pd.yaml`), built as JSON in the templates'
//! shape and decoded into the typed object, as Go does.

use kthena_api::ModelBooster;
use kthena_api::ModelServing;
use kthena_api::workload::{ModelBackend, ModelBackendType, ModelWorker, ModelWorkerType};
use kube::ResourceExt as _;
use serde_json::{Value, json};

use super::engine::{
    MULTI_NODE_SCRIPT, cache_path, cache_volume, downloader, engine_command, engine_env, env_from,
    env_value, model_dir, runtime_port,
};
use super::server::{engine_port, worker_type};
use super::{backend_resource_name, booster_owner_ref, child_labels};
use crate::error::{Error, Result};
use crate::serving::revision::hash_json;

/// Images of the generated pods' helper containers (Go's ConfigMap
/// `model-booster-controller-config`, keys `model_serving_downloader_image` and
/// `model_serving_runtime_image`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Images {
    /// The model downloader init container (default `kthena/downloader:latest`).
    pub downloader: String,
    /// The `runtime` sidecar (default `kthena/runtime:latest`).
    pub runtime: String,
}

impl Default for Images {
    fn default() -> Self {
        Self {
            downloader: "kthena/downloader:latest".to_owned(),
            runtime: "kthena/runtime:latest".to_owned(),
        }
    }
}

/// The engine container's preStop hook of `vllm.yaml`: wait until vLLM reports no running
/// and no waiting request.
const PRE_STOP: &str = r#"while true; do
  RUNNING=$(curl -s http://localhost:8000/metrics | grep 'vllm:num_requests_running' | grep -v '#' | awk '{print $2}')
  WAITING=$(curl -s http://localhost:8000/metrics | grep 'vllm:num_requests_waiting' | grep -v '#' | awk '{print $2}')
  if [ "$RUNNING" = "0.0" ] && [ "$WAITING" = "0.0" ]; then
    echo "Terminating: No active or waiting requests, safe to terminate" >> /proc/1/fd/1
    exit 0
  else
    echo "Terminating: Running: $RUNNING, Waiting: $WAITING" >> /proc/1/fd/1
    sleep 5
  fi
done
"#;

/// The revision label of the generated ModelServing: the hash of the booster's backend (Go
/// `Revision(backend)`), so the ModelServing is rewritten only when the backend changes.
///
/// # Errors
/// [`Error::Encode`] if the backend cannot be serialized.
pub fn serving_revision(backend: &ModelBackend) -> Result<String> {
    hash_json(backend)
}

/// The last worker of type `t` (Go's `mapWorkers` keeps the last one of each type).
fn worker(backend: &ModelBackend, t: ModelWorkerType) -> Option<&ModelWorker> {
    backend.workers.iter().rfind(|w| worker_type(w) == t)
}

fn missing(backend: &ModelBackend, worker: &'static str) -> Error {
    Error::MissingWorker {
        backend: backend.name.clone(),
        worker,
    }
}

/// What both templates share: metadata, labels, volumes, the downloader, the runtime
/// sidecar's args.
struct Common {
    labels: Value,
    model_dir: String,
    cache: Value,
    mount: Value,
    init: Value,
    runtime_args: Value,
    runtime_port: i64,
    engine_port: i32,
}

fn common(booster: &ModelBooster, images: &Images) -> Result<Common> {
    let backend = &booster.spec.backend;
    let name = booster.name_any();
    let revision = serving_revision(backend)?;
    let labels = serde_json::to_value(child_labels(booster, &backend.name, &revision))
        .map_err(Error::Encode)?;
    let cache = cache_volume(backend)?;
    let cache_dir = cache_path(backend.cache_uri.as_deref().unwrap_or(""));
    let engine_port = engine_port(backend)?;
    let port = runtime_port(backend);
    let default_url = format!("http://localhost:{engine_port}");
    let runtime_args = json!([
        "--port",
        port.to_string(),
        "--engine",
        engine_name(backend.type_),
        "--engine-base-url",
        env_value(backend, "RUNTIME_URL").unwrap_or(&default_url),
        "--engine-metrics-path",
        env_value(backend, "RUNTIME_METRICS_PATH").unwrap_or("/metrics"),
        "--pod",
        "$(POD_NAME).$(NAMESPACE)",
        "--model",
        name,
    ]);
    Ok(Common {
        labels,
        model_dir: format!("{cache_dir}{}", model_dir(&backend.model_uri)),
        mount: json!({"name": cache["name"], "mountPath": cache_dir}),
        cache,
        init: downloader(&name, backend, &images.downloader)?,
        runtime_args,
        runtime_port: port,
        engine_port,
    })
}

/// Go's `runtimeEngineName`: the backend type in lower case.
fn engine_name(t: ModelBackendType) -> &'static str {
    match t {
        ModelBackendType::VLlm => "vllm",
        ModelBackendType::VLlmDisaggregated => "vllmdisaggregated",
    }
}

/// The ModelServing of `booster`: `<booster>-<backend>`, labels of [`child_labels`] with
/// the backend's hash ([`serving_revision`]) as revision, the booster as controller owner,
/// `replicas` = the backend's; for `vLLM` one role `leader` (Go's `vllm.yaml`), for
/// `vLLMDisaggregated` the roles `prefill` and `decode` (`vllm-pd.yaml`). See
/// `docs/model-booster.md` for every field.
///
/// # Errors
/// [`Error::MissingWorker`] without the `server` (or `prefill`/`decode`) worker,
/// [`Error::CacheUri`] for a cache URI that is neither `pvc://` nor `hostpath://`, the
/// engine-port errors of [`engine_port`], [`Error::Template`] for a worker `config` that is
/// not an object.
pub fn model_serving(booster: &ModelBooster, images: &Images) -> Result<ModelServing> {
    let backend = &booster.spec.backend;
    let c = common(booster, images)?;
    let template = match backend.type_ {
        ModelBackendType::VLlm => vllm_template(booster, images, &c)?,
        ModelBackendType::VLlmDisaggregated => vllm_pd_template(booster, images, &c)?,
    };
    let mut spec = json!({"replicas": backend.replicas, "template": template});
    if let Some(s) = backend.scheduler_name.as_ref().filter(|s| !s.is_empty()) {
        spec["schedulerName"] = json!(s);
    }
    let ms = json!({
        "apiVersion": kthena_api::workload::API_VERSION,
        "kind": "ModelServing",
        "metadata": {
            "name": backend_resource_name(&booster.name_any(), &backend.name),
            "namespace": booster.namespace(),
            "labels": c.labels,
            "ownerReferences": [booster_owner_ref(booster)],
        },
        "spec": spec,
    });
    serde_json::from_value(ms).map_err(|e| Error::Template(e.to_string()))
}

/// Sets the worker's `affinity` and `tolerations` and the backend's `runtimeClassName` on
/// a pod spec when they are set (recent Go templates carry them).
fn placement(spec: &mut Value, backend: &ModelBackend, w: &ModelWorker) -> Result<()> {
    if let Some(rc) = backend
        .runtime_class_name
        .as_ref()
        .filter(|s| !s.is_empty())
    {
        spec["runtimeClassName"] = json!(rc);
    }
    if let Some(a) = &w.affinity {
        spec["affinity"] = serde_json::to_value(a).map_err(Error::Encode)?;
    }
    if !w.tolerations.is_empty() {
        spec["tolerations"] = serde_json::to_value(&w.tolerations).map_err(Error::Encode)?;
    }
    Ok(())
}

fn resources(w: &ModelWorker) -> Result<Value> {
    serde_json::to_value(w.resources.clone().unwrap_or_default()).map_err(Error::Encode)
}

/// The runtime sidecar: `--port <RUNTIME_PORT> --engine ... --model <booster>`.
fn runtime(images: &Images, c: &Common, env: &Value) -> Value {
    json!({
        "name": "runtime",
        "image": images.runtime,
        "ports": [{"containerPort": c.runtime_port}],
        "env": env,
        "args": c.runtime_args,
        "resources": {},
    })
}

/// `vllm.yaml`: one role `leader` with `server.replicas` replicas and `pods - 1` Ray
/// workers, the runtime sidecar and the engine, cache and `/dev/shm` volumes.
fn vllm_template(booster: &ModelBooster, images: &Images, c: &Common) -> Result<Value> {
    let backend = &booster.spec.backend;
    let server =
        worker(backend, ModelWorkerType::Server).ok_or_else(|| missing(backend, "server"))?;
    let first = backend
        .workers
        .first()
        .ok_or_else(|| missing(backend, "server"))?;
    let command = engine_command(backend, first.config.as_ref(), &c.model_dir)?;
    let env = engine_env(backend, &[])?;
    let replicas = server.replicas.unwrap_or(0);
    let volumes = json!([c.cache, {"name": "dshm", "emptyDir": {"medium": "Memory"}}]);
    let mounts = json!([c.mount, {"name": "dshm", "mountPath": "/dev/shm"}]);
    let mut runtime = runtime(images, c, &env);
    if !backend.env_from.is_empty() {
        runtime["envFrom"] = env_from(&backend.env_from)?;
    }
    runtime["readinessProbe"] = json!({
        "httpGet": {"path": "/health", "port": c.runtime_port},
        "initialDelaySeconds": 5, "periodSeconds": 10,
    });
    let engine = json!({
        "name": "engine",
        "image": server.image,
        "command": command,
        "env": env,
        "resources": resources(server)?,
        "volumeMounts": mounts,
        "readinessProbe": {
            "failureThreshold": 3,
            "httpGet": {"path": "/health", "port": c.engine_port, "scheme": "HTTP"},
            "initialDelaySeconds": 180, "periodSeconds": 5, "successThreshold": 1, "timeoutSeconds": 1,
        },
        "lifecycle": {"preStop": {"exec": {"command": ["/bin/sh", "-c", PRE_STOP]}}},
    });
    let mut entry = json!({
        "initContainers": [c.init],
        "terminationGracePeriodSeconds": 300,
        "volumes": volumes,
        "containers": [runtime, engine],
    });
    placement(&mut entry, backend, server)?;
    let ray = format!(
        "chmod u+x {MULTI_NODE_SCRIPT} && {MULTI_NODE_SCRIPT} worker --ray_address=$(ENTRY_ADDRESS)"
    );
    let mut ray_worker = json!({
        "name": format!("{}-{}-worker", backend.name.to_lowercase(), engine_name(backend.type_)),
        "image": server.image,
        "command": ["bash", "-c", ray],
        "resources": resources(server)?,
        "volumeMounts": mounts,
    });
    if !backend.env.is_empty() {
        ray_worker["env"] = serde_json::to_value(&backend.env).map_err(Error::Encode)?;
    }
    let mut worker_spec =
        json!({"volumes": volumes, "initContainers": [c.init], "containers": [ray_worker]});
    placement(&mut worker_spec, backend, server)?;
    Ok(json!({
        "restartGracePeriodSeconds": 60,
        "gangPolicy": {"minRoleReplicas": {"leader": replicas}},
        "roles": [{
            "name": "leader",
            "replicas": replicas,
            "entryTemplate": {"metadata": {"labels": c.labels}, "spec": entry},
            "workerReplicas": (server.pods.unwrap_or(0) - 1).max(0),
            "workerTemplate": {"metadata": {"labels": c.labels}, "spec": worker_spec},
        }],
    }))
}

/// One role of `vllm-pd.yaml` (`prefill` or `decode`): the runtime sidecar and the `vllm`
/// container, no Ray workers.
fn pd_role(
    booster: &ModelBooster,
    images: &Images,
    c: &Common,
    t: ModelWorkerType,
    extra_env: &[Value],
) -> Result<Value> {
    let backend = &booster.spec.backend;
    let role = if t == ModelWorkerType::Prefill {
        "prefill"
    } else {
        "decode"
    };
    let w = worker(backend, t).ok_or_else(|| missing(backend, role))?;
    let env = engine_env(backend, extra_env)?;
    let mut runtime = runtime(images, c, &env);
    // Go's template gives the decode sidecar the backend's envFrom, not the prefill one.
    if t == ModelWorkerType::Decode && !backend.env_from.is_empty() {
        runtime["envFrom"] = env_from(&backend.env_from)?;
    }
    let probe = |delay: i32| {
        json!({
            "initialDelaySeconds": delay, "periodSeconds": 5, "failureThreshold": 3,
            "httpGet": {"path": "/health", "port": c.engine_port},
        })
    };
    let vllm = json!({
        "name": "vllm",
        "image": w.image,
        "ports": [{"containerPort": c.engine_port}],
        "env": env,
        "command": engine_command(backend, w.config.as_ref(), &c.model_dir)?,
        "imagePullPolicy": "IfNotPresent",
        "resources": resources(w)?,
        "readinessProbe": probe(5),
        "livenessProbe": probe(180),
        "volumeMounts": [c.mount],
    });
    let mut spec = json!({
        "initContainers": [c.init],
        "containers": [runtime, vllm],
        "volumes": [c.cache],
    });
    placement(&mut spec, backend, w)?;
    Ok(json!({
        "name": role,
        "replicas": w.replicas.unwrap_or(0),
        "entryTemplate": {"metadata": {"labels": c.labels}, "spec": spec},
        "workerReplicas": 0,
        "workerTemplate": {"spec": {"containers": []}},
    }))
}

/// `vllm-pd.yaml`: roles `prefill` (env adds `HF_HUB_OFFLINE=1`, `HCCL_IF_IP` = the pod
/// IP) and `decode` (env adds `HF_HUB_OFFLINE=1` and `eth0` as Gloo, TP and HCCL socket
/// interface), both in the gang's `minRoleReplicas`.
fn vllm_pd_template(booster: &ModelBooster, images: &Images, c: &Common) -> Result<Value> {
    let offline = json!({"name": "HF_HUB_OFFLINE", "value": "1"});
    let prefill_env = [
        offline.clone(),
        json!({"name": "HCCL_IF_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}),
    ];
    let eth0 = |n: &str| json!({"name": n, "value": "eth0"});
    let decode_env = [
        offline,
        eth0("GLOO_SOCKET_IFNAME"),
        eth0("TP_SOCKET_IFNAME"),
        eth0("HCCL_SOCKET_IFNAME"),
    ];
    let prefill = pd_role(booster, images, c, ModelWorkerType::Prefill, &prefill_env)?;
    let decode = pd_role(booster, images, c, ModelWorkerType::Decode, &decode_env)?;
    Ok(json!({
        "restartGracePeriodSeconds": 60,
        "gangPolicy": {"minRoleReplicas": {"prefill": prefill["replicas"], "decode": decode["replicas"]}},
        "roles": [prefill, decode],
    }))
}
