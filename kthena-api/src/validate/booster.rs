//! Defaulting and validation of ModelBooster (CRD schema and the validating webhook
//! `pkg/model-booster-controller/webhook`).

use super::{MAX_REPLICAS, image_rule};
use crate::common::{Errors, FieldError, idx};
use crate::workload::{ModelBackend, ModelBackendType, ModelBooster, ModelWorkerType};

/// JSON path of a ModelBooster's workers.
const WORKERS: &str = "spec.backend.workers";

// === impl ModelBooster ===

impl ModelBooster {
    /// Applies the CRD defaults: each worker's `type` defaults to `server`. (The mutating
    /// webhook is a no-op; `spec.name` falls back to `metadata.name` where it is used, it is
    /// not written.)
    #[must_use]
    pub fn with_defaults(mut self) -> Self {
        for w in &mut self.spec.backend.workers {
            w.type_.get_or_insert(ModelWorkerType::Server);
        }
        self
    }

    /// The request model name: `spec.name`, else `metadata.name`.
    pub fn model_name(&self) -> &str {
        self.spec
            .name
            .as_deref()
            .or(self.metadata.name.as_deref())
            .unwrap_or("")
    }

    /// Checks the CRD limits and the ModelBooster validating webhook rules.
    ///
    /// # Errors
    /// One [`FieldError`] per problem, with the JSON path of the field.
    pub fn validate(&self) -> std::result::Result<(), Vec<FieldError>> {
        let mut e = Errors::default();
        let s = &self.spec;
        if let Some(n) = &s.name {
            e.max_len("spec.name", Some(n), 64);
            e.pattern("spec.name", n, "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$");
        }
        let b = &s.backend;
        e.pattern(
            "spec.backend.name",
            &b.name,
            "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
        );
        e.pattern(
            "spec.backend.modelURI",
            &b.model_uri,
            "^(hf://|s3://|obs://|pvc://|ms://).+",
        );
        if let Some(c) = &b.cache_uri {
            e.pattern("spec.backend.cacheURI", c, "^(hostpath://|pvc://).+");
        }
        e.range_i64(
            "spec.backend.replicas",
            Some(i64::from(b.replicas)),
            0,
            MAX_REPLICAS,
        );
        let wp = WORKERS;
        if b.workers.is_empty() {
            e.push(wp, "must have at least 1 item");
        }
        if b.workers.len() > 1000 {
            e.push(wp, "must have at most 1000 items");
        }
        for (i, w) in b.workers.iter().enumerate() {
            let p = idx(wp, i);
            e.range_i64(
                &format!("{p}.replicas"),
                w.replicas.map(i64::from),
                0,
                MAX_REPLICAS,
            );
            e.range_i64(&format!("{p}.pods"), w.pods.map(i64::from), 0, MAX_REPLICAS);
            if let Some(img) = &w.image {
                image_rule(&mut e, &format!("{p}.image"), img);
            }
        }
        worker_types(&mut e, b);
        booster_ports(&mut e, self);
        booster_pvc(&mut e, self);
        booster_kv(&mut e, self);
        e.finish()
    }
}

/// The worker types the backend type allows: `vLLM` exactly one `server` worker,
/// `vLLMDisaggregated` only `prefill` and `decode` workers.
fn worker_types(e: &mut Errors, b: &ModelBackend) {
    let wp = WORKERS;
    let types: Vec<ModelWorkerType> = b
        .workers
        .iter()
        .map(|w| w.type_.unwrap_or_default())
        .collect();
    match b.type_ {
        ModelBackendType::VLlm => {
            let servers = types
                .iter()
                .filter(|t| **t == ModelWorkerType::Server)
                .count();
            if servers != 1 || types.len() != 1 {
                e.push(
                    wp,
                    "backend type vLLM requires exactly one worker of type server",
                );
            }
        }
        ModelBackendType::VLlmDisaggregated => {
            for (i, t) in types.iter().enumerate() {
                if !matches!(t, ModelWorkerType::Prefill | ModelWorkerType::Decode) {
                    e.push(
                        format!("{}.type", idx(wp, i)),
                        "backend type vLLMDisaggregated only allows workers of type prefill or decode",
                    );
                }
            }
        }
    }
}

/// Engine ports (worker config `port`, default 8000) must be valid and agree across the
/// server, prefill and decode workers.
fn booster_ports(e: &mut Errors, mb: &ModelBooster) {
    let mut first: Option<i64> = None;
    for (i, w) in mb.spec.backend.workers.iter().enumerate() {
        if !matches!(
            w.type_.unwrap_or_default(),
            ModelWorkerType::Server | ModelWorkerType::Prefill | ModelWorkerType::Decode
        ) {
            continue;
        }
        let p = format!("spec.backend.workers[{i}].config.port");
        let port = match w.config.as_ref().and_then(|c| c.get("port")) {
            None => 8000,
            Some(v) => match v
                .as_i64()
                .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
            {
                Some(n) => n,
                None => {
                    e.push(p, "port must be an integer");
                    continue;
                }
            },
        };
        if !(1..=65535).contains(&port) {
            e.push(p, "port must be between 1 and 65535");
            continue;
        }
        match first {
            None => first = Some(port),
            Some(f) if f != port => {
                e.push(
                    p,
                    format!("all server, prefill and decode workers must use the same port ({f})"),
                );
            }
            Some(_) => {}
        }
    }
}

/// A `pvc://` model URI needs a `pvc://` cache URI naming a single claim, the same claim as
/// the model path, without `..`.
fn booster_pvc(e: &mut Errors, mb: &ModelBooster) {
    let b = &mb.spec.backend;
    let Some(model_path) = b.model_uri.strip_prefix("pvc://") else {
        return;
    };
    if model_path.split('/').any(|seg| seg == "..") {
        e.push("spec.backend.modelURI", "modelURI must not contain '..'");
    }
    let Some(cache) = b
        .cache_uri
        .as_deref()
        .and_then(|c| c.strip_prefix("pvc://"))
    else {
        e.push(
            "spec.backend.cacheURI",
            "cacheURI must be a pvc:// URI when modelURI is a pvc:// URI",
        );
        return;
    };
    let claim = cache.trim_end_matches('/');
    if claim.is_empty() || claim.contains('/') {
        e.push(
            "spec.backend.cacheURI",
            "cacheURI must name a single PVC claim (pvc://<claim>)",
        );
        return;
    }
    let model_claim = model_path.split('/').next().unwrap_or("");
    if model_claim != claim {
        e.push(
            "spec.backend.modelURI",
            format!("modelURI path must be under the cache claim /{claim}"),
        );
    }
}

/// Prefill and decode `kv-transfer-config` must be JSON objects with matching connectors and
/// compatible roles.
fn booster_kv(e: &mut Errors, mb: &ModelBooster) {
    let mut connectors: Vec<(usize, String)> = Vec::new();
    for (i, w) in mb.spec.backend.workers.iter().enumerate() {
        let t = w.type_.unwrap_or_default();
        let Some(raw) = w.config.as_ref().and_then(|c| c.get("kv-transfer-config")) else {
            continue;
        };
        let p = format!("spec.backend.workers[{i}].config.kv-transfer-config");
        let parsed = match raw {
            serde_json::Value::String(s) => serde_json::from_str::<serde_json::Value>(s).ok(),
            other => Some(other.clone()),
        };
        let Some(cfg) = parsed.filter(serde_json::Value::is_object) else {
            e.push(p, "kv-transfer-config must be a JSON object");
            continue;
        };
        let role = cfg
            .get("kv_role")
            .and_then(serde_json::Value::as_str)
            .unwrap_or("");
        let ok = match t {
            ModelWorkerType::Prefill => matches!(role, "kv_producer" | "kv_both"),
            ModelWorkerType::Decode => matches!(role, "kv_consumer" | "kv_both"),
            _ => true,
        };
        if !ok {
            let want = if t == ModelWorkerType::Prefill {
                "kv_producer or kv_both"
            } else {
                "kv_consumer or kv_both"
            };
            e.push(format!("{p}.kv_role"), format!("kv_role must be {want}"));
        }
        if matches!(t, ModelWorkerType::Prefill | ModelWorkerType::Decode) {
            let c = cfg
                .get("kv_connector")
                .and_then(serde_json::Value::as_str)
                .unwrap_or("")
                .to_owned();
            connectors.push((i, c));
        }
    }
    if let Some((_, first)) = connectors.first() {
        for (i, c) in &connectors[1..] {
            if c != first {
                e.push(
                    format!("spec.backend.workers[{i}].config.kv-transfer-config.kv_connector"),
                    format!("prefill and decode workers must use the same kv_connector ({first})"),
                );
            }
        }
    }
}
