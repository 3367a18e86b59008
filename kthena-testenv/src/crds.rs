//! Installing the CRDs and waiting for them to be Established.

use std::path::{Path, PathBuf};
use std::time::Duration;

use futures_util::future::try_join_all;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::wait::{await_condition, conditions};

use crate::error::{Error, Result, io_err, kube_err};

/// Field manager of the server-side applies of this crate.
pub const FIELD_MANAGER: &str = "kthena-testenv";

/// How long a CRD may take to become Established (s).
const ESTABLISH_TIMEOUT_S: u64 = 30;

/// Every CRD a test cluster gets: Kthena's six kinds, Volcano `PodGroup`, GIE
/// `InferencePool` (both generated from `kthena_api::thirdparty`) and the Gateway API
/// standard CRDs found in `gateway_dir` (`*.yaml`, one or more documents each).
pub(crate) fn all_crds(gateway_dir: &Path) -> Result<Vec<CustomResourceDefinition>> {
    let mut crds = kthena_api::crds();
    crds.extend(kthena_api::thirdparty::thirdparty_crds());
    crds.extend(gateway_api_crds(gateway_dir)?);
    Ok(crds)
}

/// The Gateway API CRDs copied by `kube-env.sh build` (`<cache>/crds/gateway-api/*.yaml`).
pub(crate) fn gateway_api_crds(dir: &Path) -> Result<Vec<CustomResourceDefinition>> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(io_err(format!(
            "listing {} (run scripts/kube-env.sh build)",
            dir.display()
        )))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
        .collect();
    paths.sort();
    let mut out = Vec::new();
    for path in paths {
        let text = std::fs::read_to_string(&path)
            .map_err(io_err(format!("reading {}", path.display())))?;
        let docs: Vec<Option<CustomResourceDefinition>> = serde_saphyr::from_multiple(&text)
            .map_err(|source| Error::Yaml {
                path: path.clone(),
                source,
            })?;
        out.extend(docs.into_iter().flatten());
    }
    Ok(out)
}

/// Server-side applies every CRD (forcing ownership: re-running is harmless), then waits
/// until each is Established.
pub(crate) async fn install(client: &Client, crds: &[CustomResourceDefinition]) -> Result<()> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let params = PatchParams::apply(FIELD_MANAGER).force();
    try_join_all(crds.iter().map(|crd| {
        let api = api.clone();
        let params = params.clone();
        async move {
            let name = crd.metadata.name.clone().unwrap_or_default();
            let mut crd = crd.clone();
            crd.metadata.managed_fields = None;
            crd.metadata.resource_version = None;
            crd.status = None;
            api.patch(&name, &params, &Patch::Apply(&crd))
                .await
                .map_err(kube_err(format!("applying CRD {name}")))?;
            established(&api, &name).await
        }
    }))
    .await?;
    Ok(())
}

/// Waits until the CRD `name` has the condition `Established=True`.
pub(crate) async fn established(api: &Api<CustomResourceDefinition>, name: &str) -> Result<()> {
    let wait = await_condition(api.clone(), name, conditions::is_crd_established());
    match tokio::time::timeout(Duration::from_secs(ESTABLISH_TIMEOUT_S), wait).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(source)) => Err(Error::Wait {
            what: format!("CRD {name} to be Established"),
            source,
        }),
        Err(_) => Err(Error::Timeout {
            what: format!("CRD {name} to be Established"),
            seconds: ESTABLISH_TIMEOUT_S,
        }),
    }
}
