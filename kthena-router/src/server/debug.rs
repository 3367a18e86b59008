//! The debug listener (localhost only): `/debug/config_dump/*` (Go Kthena
//! `pkg/kthena-router/debug/handlers.go`).
//!
//! * `GET /debug/config_dump/{modelroutes|modelservers|pods}` → `{"<plural>": [...]}`;
//! * `GET /debug/config_dump/warnings` → `{"warnings": [{"kind", "message"}]}`, what the
//!   loaded configuration leaves unserved (see `warnings`);
//! * `GET /debug/config_dump/kvevents` → `{"kvevents": [{"endpoint", "address", "replay",
//!   "state", "lastSeq", "batches", "uncertain"}]}`, each KV-event subscription (`state` is
//!   `connecting` or `subscribed`; not in Go Kthena);
//! * `GET /debug/config_dump/namespaces/{ns}/{modelroutes|modelservers|pods}/{name}` → one
//!   object, or 404 `{"error":"ModelRoute not found"}`.
//!
//! * `GET /debug/config_dump/{gateways|httproutes|inferencepools}` and their
//!   `namespaces/{ns}/{plural}/{name}` forms: the Gateway API objects
//!   (`crate::gateway::config_dump`; lists are `null` when empty, as Go's, and always outside
//!   Gateway API mode);
//! * `GET /debug/pprof/profile?seconds=N` (a CPU profile), `GET /debug/pprof/heap` (501):
//!   see `profile`.

mod profile;

use http::{Response, StatusCode};
use serde_json::{Value, json};

use std::sync::Arc;

use crate::body::{RespBody, full};
use crate::discovery::Snapshot;
use crate::shared::Shared;
use crate::upstream::endpoint::Endpoint;

fn answer(status: StatusCode, v: &Value) -> Response<RespBody> {
    let mut r = Response::new(full(v.to_string()));
    *r.status_mut() = status;
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    r
}

fn route_json(snap: &Snapshot, r: &kthena_api::ModelRoute) -> Value {
    json!({
        "name": r.metadata.name,
        "namespace": r.metadata.namespace.as_deref().unwrap_or("default"),
        "spec": serde_json::to_value(&r.spec).unwrap_or(Value::Null),
        "generation": snap.generation,
    })
}

fn server_json(s: &crate::discovery::Server) -> Value {
    json!({
        "name": s.name,
        "namespace": s.namespace,
        "spec": serde_json::to_value(&s.object.spec).unwrap_or(Value::Null),
        "associatedPods": s.endpoints.iter().map(|e| format!("{}/{}", e.namespace, e.name)).collect::<Vec<_>>(),
        "decodePods": s.decode_endpoints.iter().map(|e| format!("{}/{}", e.namespace, e.name)).collect::<Vec<_>>(),
        "prefillPods": s.prefill_endpoints.iter().map(|e| format!("{}/{}", e.namespace, e.name)).collect::<Vec<_>>(),
    })
}

fn pod_json(shared: &Shared, snap: &Snapshot, e: &Endpoint, detail: bool) -> Value {
    let st = e.state().clone();
    let servers: Vec<String> = {
        let mut v: Vec<String> = snap
            .servers
            .values()
            .filter(|s| s.endpoints.iter().any(|x| x.name == e.name))
            .map(|s| s.key.clone())
            .collect();
        v.sort();
        v
    };
    let mut v = json!({
        "name": e.name,
        "namespace": e.namespace,
        "engine": st.engine.map(|x| x.as_str()),
        "metrics": {
            "gpuCacheUsage": st.kv_cache_usage,
            "requestWaitingNum": st.waiting,
            "requestRunningNum": st.running,
            "tpot": st.tpot_ms.unwrap_or(0.0),
            "ttft": st.ttft_ms.unwrap_or(0.0),
            "stale": st.stale,
            "inFlight": e.in_flight(),
            "awaitingFirstToken": e.awaiting_first_token(),
            "pendingPrefillTokens": e.pending_prefill_tokens(),
        },
        "models": st.models,
        "loraAdapters": st.lora_adapters,
        "modelServers": servers,
    });
    if detail {
        v["podInfo"] = json!({
            "address": e.address,
            "labels": e.labels,
            "kvEvents": e.kv_events,
            "kvEventsReplay": e.kv_events_replay,
            "kvEventsSubscription": shared.metrics.kv.subscription(e.id.as_str()),
        });
    }
    v
}

/// Answers a `GET` on the debug listener: profiles (`/debug/pprof/...`), else
/// [`config_dump`].
pub(crate) async fn answer_get(shared: Arc<Shared>, uri: http::Uri) -> Response<RespBody> {
    match uri.path() {
        "/debug/pprof/profile" => profile::cpu(uri.query().map(str::to_owned)).await,
        "/debug/pprof/heap" => profile::heap(),
        path => config_dump(&shared, path),
    }
}

/// Answers a debug path.
pub(crate) fn config_dump(shared: &Shared, path: &str) -> Response<RespBody> {
    let snap = shared.snapshot.load();
    let Some(rest) = path.strip_prefix("/debug/config_dump/") else {
        return answer(StatusCode::NOT_FOUND, &json!({"error": "not found"}));
    };
    let parts: Vec<&str> = rest.split('/').filter(|p| !p.is_empty()).collect();
    let gateway = shared.gateway.load_full();
    if let Some((found, v)) = crate::gateway::config_dump(gateway.as_deref(), &parts) {
        let status = if found {
            StatusCode::OK
        } else {
            StatusCode::NOT_FOUND
        };
        return answer(status, &v);
    }
    match parts.as_slice() {
        ["modelroutes"] => {
            let list: Vec<Value> = snap
                .route_objects
                .iter()
                .map(|r| route_json(&snap, r))
                .collect();
            answer(StatusCode::OK, &json!({ "modelroutes": list }))
        }
        ["modelservers"] => {
            let mut keys: Vec<&String> = snap.servers.keys().collect();
            keys.sort();
            let list: Vec<Value> = keys
                .into_iter()
                .map(|k| server_json(&snap.servers[k]))
                .collect();
            answer(StatusCode::OK, &json!({ "modelservers": list }))
        }
        ["pods"] => {
            let list: Vec<Value> = snap
                .endpoints
                .iter()
                .map(|e| pod_json(shared, &snap, e, false))
                .collect();
            answer(StatusCode::OK, &json!({ "pods": list }))
        }
        ["warnings"] => answer(StatusCode::OK, &json!({ "warnings": snap.warnings })),
        ["kvevents"] => answer(
            StatusCode::OK,
            &json!({ "kvevents": shared.metrics.kv.subscriptions() }),
        ),
        ["namespaces", ns, kind, name] => {
            let found = match *kind {
                "modelroutes" => snap
                    .route_objects
                    .iter()
                    .find(|r| {
                        r.metadata.namespace.as_deref().unwrap_or("default") == *ns
                            && r.metadata.name.as_deref() == Some(*name)
                    })
                    .map(|r| route_json(&snap, r)),
                "modelservers" => snap
                    .servers
                    .get(&format!("{ns}/{name}"))
                    .map(|s| server_json(s)),
                "pods" => snap
                    .endpoints
                    .iter()
                    .find(|e| e.namespace == *ns && e.name == *name)
                    .map(|e| pod_json(shared, &snap, e, true)),
                _ => None,
            };
            let kind_name = match *kind {
                "modelroutes" => "ModelRoute",
                "modelservers" => "ModelServer",
                "pods" => "Pod",
                _ => "Resource",
            };
            match found {
                Some(v) => answer(StatusCode::OK, &v),
                None => answer(
                    StatusCode::NOT_FOUND,
                    &json!({"error": format!("{kind_name} not found")}),
                ),
            }
        }
        _ => answer(StatusCode::NOT_FOUND, &json!({"error": "not found"})),
    }
}
