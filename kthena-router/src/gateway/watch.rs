//! The kube side of Gateway API mode: ensures the `kthena-router` GatewayClass and the
//! `default` Gateway, reflects Gateways, HTTPRoutes and (with the inference extension)
//! InferencePools, swaps the compiled [`GatewayState`] into the shared state after every
//! burst of events, and writes the Gateway and HTTPRoute statuses.

use std::sync::Arc;

use kthena_api::gateway::{Gateway, GatewayClass, GatewayClassSpec, GatewaySpec, HTTPRoute};
use kthena_api::thirdparty::InferencePool;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::reflector::Store;
use kube::{Api, Client};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::status;
use super::{DEFAULT_GATEWAY, GATEWAY_CLASS, GatewayApiConfig, GatewayState, GatewayTable};
use crate::cluster::{REBUILD_DEBOUNCE, reflect};

/// Where the request side reads the compiled state.
pub(crate) type StateSlot = Arc<arc_swap::ArcSwapOption<GatewayState>>;

struct Stores {
    gateways: Store<Gateway>,
    routes: Store<HTTPRoute>,
    pools: Option<Store<InferencePool>>,
}

/// Starts Gateway API mode for a router serving inference on `port`.
pub(crate) fn spawn(
    slot: StateSlot,
    client: &Client,
    cfg: &GatewayApiConfig,
    port: u16,
    cancel: &CancellationToken,
    tasks: &TaskTracker,
) {
    let changed = Arc::new(Notify::new());
    let stores = Stores {
        gateways: reflect(Api::all(client.clone()), &changed, cancel, tasks),
        routes: reflect(Api::all(client.clone()), &changed, cancel, tasks),
        pools: cfg
            .inference_extension
            .then(|| reflect(Api::all(client.clone()), &changed, cancel, tasks)),
    };
    let namespace = cfg.namespace.clone().unwrap_or_else(|| "default".into());
    let inference_extension = cfg.inference_extension;
    let client = client.clone();
    let cancel = cancel.clone();
    tasks.spawn(async move {
        ensure_defaults(&client, &namespace, port).await;
        loop {
            let table = compile(&stores);
            let kthena: Vec<String> = stores
                .gateways
                .state()
                .iter()
                .filter(|g| served(g, port))
                .map(|g| key(&g.metadata))
                .collect();
            let state = Arc::new(GatewayState {
                table,
                port,
                inference_extension,
            });
            slot.store(Some(Arc::clone(&state)));
            write_statuses(&client, &stores, &state.table, &kthena, port).await;
            tokio::select! {
                () = cancel.cancelled() => return,
                () = changed.notified() => {}
            }
            tokio::select! {
                () = cancel.cancelled() => return,
                () = tokio::time::sleep(REBUILD_DEBOUNCE) => {}
            }
        }
    });
}

fn key(m: &kube::core::ObjectMeta) -> String {
    format!(
        "{}/{}",
        m.namespace.as_deref().unwrap_or("default"),
        m.name.as_deref().unwrap_or("")
    )
}

/// Whether this router serves (and writes the status of) `gw`: class `kthena-router` and
/// a listener on the router's port. Gateways with listeners on other ports only are left
/// to the router that serves those ports.
fn served(gw: &Gateway, port: u16) -> bool {
    gw.spec.gateway_class_name == GATEWAY_CLASS
        && gw.spec.listeners.iter().any(|l| l.port == i32::from(port))
}

fn compile(s: &Stores) -> GatewayTable {
    let pools = s.pools.as_ref().map(Store::state).unwrap_or_default();
    GatewayTable::compile(&s.gateways.state(), &s.routes.state(), &pools)
}

/// Creates the GatewayClass `kthena-router` and the Gateway `default` (one HTTP listener
/// `default` on `port`, routes from all namespaces) unless they exist.
async fn ensure_defaults(client: &Client, namespace: &str, port: u16) {
    let mut class = GatewayClass::new(
        GATEWAY_CLASS,
        GatewayClassSpec {
            controller_name: super::CONTROLLER_NAME.into(),
        },
    );
    class.metadata.name = Some(GATEWAY_CLASS.into());
    create(&Api::<GatewayClass>::all(client.clone()), &class).await;
    let spec: GatewaySpec = match serde_json::from_value(serde_json::json!({
        "gatewayClassName": GATEWAY_CLASS,
        "listeners": [{"name": "default", "port": port, "protocol": "HTTP",
                       "allowedRoutes": {"namespaces": {"from": "All"}}}],
    })) {
        Ok(s) => s,
        Err(err) => return tracing::error!(%err, "Cannot build the default Gateway"),
    };
    let gw = Gateway::new(DEFAULT_GATEWAY, spec);
    create(&Api::<Gateway>::namespaced(client.clone(), namespace), &gw).await;
}

async fn create<K>(api: &Api<K>, obj: &K)
where
    K: kube::Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.create(&PostParams::default(), obj).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(err) => tracing::warn!(%err, "Cannot create a default Gateway API object"),
    }
}

async fn write_statuses(
    client: &Client,
    s: &Stores,
    table: &GatewayTable,
    kthena: &[String],
    port: u16,
) {
    let pp = PatchParams::default();
    for gw in s.gateways.state() {
        if !served(&gw, port) {
            continue;
        }
        let st = status::gateway_status(&gw, table, port);
        if !status::gateway_status_changed(&gw, &st) {
            continue;
        }
        let (Some(ns), Some(name)) = (&gw.metadata.namespace, &gw.metadata.name) else {
            continue;
        };
        let api = Api::<Gateway>::namespaced(client.clone(), ns);
        let patch = Patch::Merge(serde_json::json!({ "status": st }));
        if let Err(err) = api.patch_status(name, &pp, &patch).await {
            tracing::warn!(gateway = %key(&gw.metadata), %err, "Cannot write the Gateway status");
        }
    }
    for r in s.routes.state() {
        let Some(st) = status::route_status(&r, kthena, table) else {
            continue;
        };
        if !status::route_status_changed(&r, &st) {
            continue;
        }
        let (Some(ns), Some(name)) = (&r.metadata.namespace, &r.metadata.name) else {
            continue;
        };
        let api = Api::<HTTPRoute>::namespaced(client.clone(), ns);
        let patch = Patch::Merge(serde_json::json!({ "status": st }));
        if let Err(err) = api.patch_status(name, &pp, &patch).await {
            tracing::warn!(route = %key(&r.metadata), %err, "Cannot write the HTTPRoute status");
        }
    }
}
