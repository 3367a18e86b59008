//! The kube side of Gateway API mode: ensures the `kthena-router` GatewayClass and the
//! `default` Gateway, reflects Gateways, HTTPRoutes, Namespaces (for `allowedRoutes`
//! selectors) and (with the inference extension) InferencePools, opens the served
//! Gateways' listener ports ([`Ports`]), swaps the compiled [`GatewayState`] into the shared
//! state after every burst of events, and writes the statuses: `Accepted` of the
//! GatewayClasses whose `controllerName` is the router's, and those of the served Gateways
//! and their HTTPRoutes.

use std::collections::BTreeSet;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Namespace;
use kthena_api::gateway::{Gateway, GatewayClass, GatewayClassSpec, GatewaySpec, HTTPRoute};
use kthena_api::thirdparty::InferencePool;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::reflector::Store;
use kube::{Api, Client};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::ports::{Ports, Serving};
use super::status;
use super::{
    DEFAULT_GATEWAY, GATEWAY_CLASS, GatewayApiConfig, GatewayObjects, GatewayState, GatewayTable,
};
use crate::discovery::cluster::{REBUILD_DEBOUNCE, reflect};

/// Where the request side reads the compiled state.
pub(crate) type StateSlot = Arc<arc_swap::ArcSwapOption<GatewayState>>;

struct Stores {
    classes: Store<GatewayClass>,
    gateways: Store<Gateway>,
    routes: Store<HTTPRoute>,
    namespaces: Store<Namespace>,
    pools: Option<Store<InferencePool>>,
}

/// Starts Gateway API mode for a router serving as `serving` says.
pub(crate) fn spawn(
    slot: StateSlot,
    client: &Client,
    cfg: &GatewayApiConfig,
    serving: Serving,
    cancel: &CancellationToken,
    tasks: &TaskTracker,
) {
    let changed = Arc::new(Notify::new());
    let stores = Stores {
        classes: reflect(Api::all(client.clone()), &changed, cancel, tasks),
        gateways: reflect(Api::all(client.clone()), &changed, cancel, tasks),
        routes: reflect(Api::all(client.clone()), &changed, cancel, tasks),
        namespaces: reflect(Api::all(client.clone()), &changed, cancel, tasks),
        pools: cfg
            .inference_extension
            .then(|| reflect(Api::all(client.clone()), &changed, cancel, tasks)),
    };
    let namespace = cfg.namespace.clone().unwrap_or_else(|| "default".into());
    let scope = cfg.gateway_namespaces.clone();
    let inference_extension = cfg.inference_extension;
    let client = client.clone();
    let cancel = cancel.clone();
    tasks.spawn(async move {
        ensure_defaults(&client, &namespace, serving.port).await;
        let mut ports = Ports::default();
        loop {
            let served: Vec<Arc<Gateway>> = stores
                .gateways
                .state()
                .into_iter()
                .filter(|g| served(g, &scope))
                .collect();
            let table = compile(&stores, &served);
            let objects = objects(&stores, &served);
            let wanted: BTreeSet<u16> = table.listeners.iter().map(|l| l.port).collect();
            let bind_errors = ports.reconcile(&wanted, &serving, &cancel);
            let state = Arc::new(GatewayState {
                table,
                objects,
                port: serving.port,
                inference_extension,
                bind_errors,
            });
            slot.store(Some(Arc::clone(&state)));
            let keys: Vec<String> = served.iter().map(|g| key(&g.metadata)).collect();
            write_statuses(&client, &stores, &served, &state, &keys).await;
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

/// Whether this router serves (opens the ports of, writes the status of) `gw`: class
/// `kthena-router`, in one of `scope` (every namespace when empty).
fn served(gw: &Gateway, scope: &[String]) -> bool {
    let ns = gw.metadata.namespace.as_deref().unwrap_or("default");
    gw.spec.gateway_class_name == GATEWAY_CLASS
        && (scope.is_empty() || scope.iter().any(|s| s == ns))
}

fn compile(s: &Stores, gateways: &[Arc<Gateway>]) -> GatewayTable {
    let pools = s.pools.as_ref().map(Store::state).unwrap_or_default();
    GatewayTable::compile(gateways, &s.routes.state(), &pools, &s.namespaces.state())
}

/// The objects of the debug dump: `served` Gateways, the HTTPRoutes naming one of them in a
/// parentRef (Go Kthena's HTTPRoute controller keeps only those,
/// `pkg/kthena-router/controller/httproute_controller.go`) and the InferencePools.
fn objects(s: &Stores, served: &[Arc<Gateway>]) -> GatewayObjects {
    let gateways: BTreeSet<String> = served.iter().map(|g| key(&g.metadata)).collect();
    let mut routes: Vec<Arc<HTTPRoute>> = s
        .routes
        .state()
        .into_iter()
        .filter(|r| {
            let ns = r.metadata.namespace.as_deref().unwrap_or("default");
            r.spec.parent_refs.iter().any(|p| {
                p.kind.as_deref().unwrap_or("Gateway") == "Gateway"
                    && gateways.contains(&format!(
                        "{}/{}",
                        p.namespace.as_deref().unwrap_or(ns),
                        p.name
                    ))
            })
        })
        .collect();
    routes.sort_by_key(|r| key(&r.metadata));
    let mut gateways = served.to_vec();
    gateways.sort_by_key(|g| key(&g.metadata));
    let mut pools = s.pools.as_ref().map(Store::state).unwrap_or_default();
    pools.sort_by_key(|p| key(&p.metadata));
    GatewayObjects {
        gateways,
        routes,
        pools,
    }
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

/// Writes `Accepted=True` on the GatewayClasses the router controls where it is missing
/// or of an older generation.
async fn write_class_statuses(client: &Client, s: &Stores, pp: &PatchParams) {
    let api = Api::<GatewayClass>::all(client.clone());
    for class in s.classes.state() {
        let Some(st) = status::gateway_class_status(&class) else {
            continue;
        };
        let Some(name) = &class.metadata.name else {
            continue;
        };
        let patch = Patch::Merge(serde_json::json!({ "status": st }));
        if let Err(err) = api.patch_status(name, pp, &patch).await {
            tracing::warn!(gateway_class = %name, %err, "Cannot write the GatewayClass status");
        }
    }
}

/// Writes the status of every served Gateway and of every HTTPRoute with a served parent
/// (`served_keys`, `namespace/name`), where it changed.
async fn write_statuses(
    client: &Client,
    s: &Stores,
    served: &[Arc<Gateway>],
    state: &GatewayState,
    served_keys: &[String],
) {
    let pp = PatchParams::default();
    write_class_statuses(client, s, &pp).await;
    let table = &state.table;
    for gw in served {
        let st = status::gateway_status(gw, table, &state.bind_errors);
        if !status::gateway_status_changed(gw, &st) {
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
        let Some(st) = status::route_status(&r, served_keys, table) else {
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
