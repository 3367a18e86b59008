//! The pieces of the generated ModelServing's pods that come from the backend (Go
//! `convert/model_serving.go`): the engine command from a worker's `config`, the engine env,
//! the cache volume and paths, the downloader init container.

use k8s_openapi::api::core::v1::{EnvFromSource, EnvVar};
use kthena_api::quantity_to_f64;
use kthena_api::workload::{ModelBackend, ModelWorker, ModelWorkerType};
use md5::{Digest as _, Md5};
use serde_json::{Value, json};

use super::server::worker_type;
use crate::error::{Error, Result};

/// Go's `VllmMultiNodeServingScriptPath` (inside the vLLM image).
pub(crate) const MULTI_NODE_SCRIPT: &str = "examples/online_serving/multi-node-serving.sh";
/// Extended resources counted as accelerators by Go's `GetDeviceNum`.
const XPUS: [&str; 2] = ["nvidia.com/gpu", "huawei.com/ascend-1980"];

/// Go's `GetEnvValueOrDefault` for strings: the value of the backend env var `name`.
pub(crate) fn env_value<'a>(backend: &'a ModelBackend, name: &str) -> Option<&'a str> {
    let var = backend.env.iter().find(|e| e.name == name)?;
    Some(var.value.as_deref().unwrap_or(""))
}

/// `RUNTIME_PORT` as an integer, else 8100 (Go falls back when it does not parse).
pub(crate) fn runtime_port(backend: &ModelBackend) -> i64 {
    env_value(backend, "RUNTIME_PORT")
        .and_then(|v| v.parse().ok())
        .unwrap_or(8100)
}

/// Go's `GetCachePath`: what follows `://`, trimmed of slashes, with one leading `/`
/// (`hostpath://tmp/cache/` → `/tmp/cache`); `""` when the URI is empty or has no `://`.
#[must_use]
pub fn cache_path(uri: &str) -> String {
    match uri.split_once("://") {
        Some((_, rest)) => format!(
            "/{}",
            rest.split("://").next().unwrap_or("").trim_matches('/')
        ),
        None => String::new(),
    }
}

/// Go's `GetMountPath`: `/` and the hex MD5 of the model URI (the model's directory in the
/// cache).
#[must_use]
pub fn model_dir(model_uri: &str) -> String {
    let digest = Md5::digest(model_uri.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("/{hex}")
}

/// Go's `buildCacheVolume`: `<backend>-weights`, an emptyDir without `cacheURI`, the PVC
/// of `pvc://<claim>`, or the `hostpath://` directory (`DirectoryOrCreate`).
pub(crate) fn cache_volume(backend: &ModelBackend) -> Result<Value> {
    let name = format!("{}-weights", backend.name);
    let uri = backend.cache_uri.as_deref().unwrap_or("");
    if uri.is_empty() {
        Ok(json!({"name": name, "emptyDir": {}}))
    } else if let Some(claim) = uri.strip_prefix("pvc://") {
        let claim = claim.trim_matches('/');
        Ok(json!({"name": name, "persistentVolumeClaim": {"claimName": claim}}))
    } else if uri.starts_with("hostpath://") {
        let path = cache_path(uri);
        Ok(json!({"name": name, "hostPath": {"path": path, "type": "DirectoryOrCreate"}}))
    } else {
        Err(Error::CacheUri(uri.to_owned()))
    }
}

/// Go's `buildModelDownloaderInitContainers`: `<booster>-model-downloader` downloading the
/// model into `<cache>/<md5(modelURI)>`, with the backend's `ENDPOINT`, `HF_ENDPOINT`,
/// `MS_TOKEN`, `MS_REVISION` (when set and not empty) and `envFrom`.
pub(crate) fn downloader(booster: &str, backend: &ModelBackend, image: &str) -> Result<Value> {
    let cache = cache_path(backend.cache_uri.as_deref().unwrap_or(""));
    let names = ["ENDPOINT", "HF_ENDPOINT", "MS_TOKEN", "MS_REVISION"];
    let env: Vec<&EnvVar> = names
        .iter()
        .filter_map(|n| backend.env.iter().find(|e| e.name == *n))
        .filter(|e| e.value.as_deref().is_some_and(|v| !v.is_empty()))
        .collect();
    let mut c = json!({
        "name": format!("{booster}-model-downloader"),
        "image": image,
        "args": ["--source", backend.model_uri, "--output-dir", format!("{cache}{}", model_dir(&backend.model_uri))],
        "resources": {},
        "volumeMounts": [{"name": cache_volume(backend)?["name"], "mountPath": cache}],
    });
    if !env.is_empty() {
        c["env"] = serde_json::to_value(env).map_err(Error::Encode)?;
    }
    if !backend.env_from.is_empty() {
        c["envFrom"] = env_from(&backend.env_from)?;
    }
    Ok(c)
}

pub(crate) fn env_from(sources: &[EnvFromSource]) -> Result<Value> {
    serde_json::to_value(sources).map_err(Error::Encode)
}

/// Go's `buildEngineEnvVars`: the backend's env, then `POD_NAME`, `NAMESPACE`,
/// `VLLM_USE_V1=1`, the optional `REDIS_HOST`/`REDIS_PORT` (ConfigMap `redis-config`) and
/// `REDIS_PASSWORD` (Secret `redis-secret`), then `extra`.
pub(crate) fn engine_env(backend: &ModelBackend, extra: &[Value]) -> Result<Value> {
    let field = |name: &str, path: &str| json!({"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}});
    let cm = |key: &str| json!({"name": key, "valueFrom": {"configMapKeyRef": {"name": "redis-config", "key": key, "optional": true}}});
    let mut env = serde_json::to_value(&backend.env).map_err(Error::Encode)?;
    let list = env
        .as_array_mut()
        .ok_or_else(|| Error::Template("env".to_owned()))?;
    list.extend([
        field("POD_NAME", "metadata.name"),
        field("NAMESPACE", "metadata.namespace"),
        json!({"name": "VLLM_USE_V1", "value": "1"}),
        cm("REDIS_HOST"),
        cm("REDIS_PORT"),
        json!({"name": "REDIS_PASSWORD", "valueFrom": {"secretKeyRef": {"name": "redis-secret", "key": "REDIS_PASSWORD", "optional": true}}}),
    ]);
    list.extend(extra.iter().cloned());
    Ok(env)
}

/// Go's `fmt.Sprint` of a JSON number decoded as `float64` (`%v` is `%g` with the shortest
/// digits: exponent form from 1e6 up or below 1e-4, `1e+06`, `2.5e-05`).
fn go_float(f: f64) -> String {
    let exp = if f == 0.0 {
        0
    } else {
        f.abs().log10().floor() as i32
    };
    if !(-4..6).contains(&exp) {
        let s = format!("{f:e}");
        let (mantissa, e) = s.split_once('e').unwrap_or((&s, "0"));
        let e: i32 = e.parse().unwrap_or(0);
        let sign = if e < 0 { '-' } else { '+' };
        return format!("{mantissa}e{sign}{:02}", e.abs());
    }
    format!("{f}")
}

/// Go's `ConvertEngineArgsFromJson`: `--key value` for each key of the config in sorted
/// order (`_` in keys becomes `-`), only `--key` for an empty string; numbers as Go prints
/// a `float64`, booleans `true`/`false`.
///
/// # Errors
/// [`Error::Template`] when the config is not a JSON object.
pub fn engine_args(config: Option<&Value>) -> Result<Vec<String>> {
    let Some(config) = config else {
        return Ok(Vec::new());
    };
    let map = config
        .as_object()
        .ok_or_else(|| Error::Template("worker config must be a JSON object".to_owned()))?;
    let mut keys: Vec<&String> = map.keys().collect();
    keys.sort();
    let mut args = Vec::with_capacity(keys.len() * 2);
    for key in keys {
        args.push(format!("--{}", key.replace('_', "-")));
        let value = match &map[key] {
            Value::String(s) => s.clone(),
            Value::Bool(b) => b.to_string(),
            Value::Number(n) => go_float(n.as_f64().unwrap_or(0.0)),
            Value::Null => "<nil>".to_owned(),
            other => other.to_string(),
        };
        if !value.is_empty() {
            args.push(value);
        }
    }
    Ok(args)
}

/// Go's `GetDeviceNum`: the `nvidia.com/gpu` and `huawei.com/ascend-1980` limits summed.
fn device_num(worker: &ModelWorker) -> i64 {
    let limits = worker.resources.as_ref().and_then(|r| r.limits.as_ref());
    XPUS.iter()
        .filter_map(|x| limits?.get(*x))
        .map(|q| quantity_to_f64(q).map_or(0, |v| v.ceil() as i64))
        .sum()
}

/// Go's `hasGPU`: some worker has a positive `nvidia.com/gpu` limit.
fn has_gpu(workers: &[ModelWorker]) -> bool {
    workers.iter().any(|w| {
        w.resources
            .as_ref()
            .and_then(|r| r.limits.as_ref())
            .and_then(|l| l.get("nvidia.com/gpu"))
            .and_then(quantity_to_f64)
            .is_some_and(|v| v > 0.0)
    })
}

/// The `kv_connector` of a worker's `kv-transfer-config`, `""` when there is none.
fn kv_connector_name(config: Option<&Value>) -> String {
    config
        .and_then(|c| c.get("kv-transfer-config"))
        .and_then(Value::as_str)
        .and_then(|s| serde_json::from_str::<Value>(s).ok())
        .and_then(|v| {
            v.get("kv_connector")
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
        .unwrap_or_default()
}

/// Go's `buildCommands`: `python3 -m vllm.entrypoints.openai.api_server --model <dir>` and
/// the config's args; with a `server` worker of more than one pod, Ray multi-node through
/// the image's `multi-node-serving.sh leader`; with a GPU and a `MooncakeConnector` or
/// `NixlConnector`, a `pip install` first (unless `KTHENA_SKIP_ENGINE_DEPENDENCY_INSTALL`
/// parses as true).
///
/// # Errors
/// As [`engine_args`].
pub fn engine_command(
    backend: &ModelBackend,
    config: Option<&Value>,
    model_dir: &str,
) -> Result<Vec<String>> {
    let mut cmd: Vec<String> = [
        "python3",
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
    ]
    .map(str::to_owned)
    .to_vec();
    cmd.push(model_dir.to_owned());
    cmd.extend(engine_args(config)?);
    let server = backend
        .workers
        .iter()
        .rfind(|w| worker_type(w) == ModelWorkerType::Server);
    if let Some(server) = server.filter(|s| s.pods.unwrap_or(0) > 1) {
        cmd.extend([
            "--distributed_executor_backend".to_owned(),
            "ray".to_owned(),
        ]);
        let script = MULTI_NODE_SCRIPT;
        let line = format!(
            "chmod u+x {script} && {script} leader --ray_cluster_size={} --num-gpus={} && {}",
            server.pods.unwrap_or(0),
            device_num(server),
            cmd.join(" ")
        );
        cmd = vec!["bash".to_owned(), "-c".to_owned(), line];
    }
    let skip =
        env_value(backend, "KTHENA_SKIP_ENGINE_DEPENDENCY_INSTALL").is_some_and(go_parse_bool_true);
    if has_gpu(&backend.workers) && !skip {
        let prefix = match kv_connector_name(config).as_str() {
            "MooncakeConnector" => Some("pip install mooncake-transfer-engine && "),
            "NixlConnector" => {
                Some("PIP_DISABLE_PIP_VERSION_CHECK=1 pip install -U --no-cache-dir nixl && ")
            }
            _ => None,
        };
        if let Some(prefix) = prefix {
            cmd = vec![
                "bash".to_owned(),
                "-c".to_owned(),
                format!("{prefix}{}", cmd.join(" ")),
            ];
        }
    }
    Ok(cmd)
}

/// Go's `strconv.ParseBool` giving `true`.
fn go_parse_bool_true(v: &str) -> bool {
    matches!(v, "1" | "t" | "T" | "TRUE" | "true" | "True")
}

#[cfg(test)]
mod tests;
