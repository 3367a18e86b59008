//! CRD generation.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

use crate::{
    AutoscalingPolicy, Error, ExternalModelProvider, ModelBooster, ModelRoute, ModelServer,
    ModelServing, Result,
};

/// The CustomResourceDefinitions of all six kinds, in the order ModelRoute, ModelServer,
/// ExternalModelProvider, ModelServing, ModelBooster, AutoscalingPolicy.
///
/// ```
/// let crds = kthena_api::crds();
/// assert_eq!(crds[0].metadata.name.as_deref(), Some("modelroutes.networking.serving.volcano.sh"));
/// ```
#[must_use]
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![
        ModelRoute::crd(),
        ModelServer::crd(),
        ExternalModelProvider::crd(),
        ModelServing::crd(),
        ModelBooster::crd(),
        AutoscalingPolicy::crd(),
    ]
}

/// The CRDs of [`crds`] as files: `(file name, YAML text)`, named as controller-gen names
/// them (`<group>_<plural>.yaml`), each one YAML document. These are the files under
/// `deploy/crds/` (written by `cargo run -p kthena-api --example crds -- deploy/crds`).
///
/// # Errors
/// [`Error::SerializeYaml`] if a CRD cannot be rendered (not expected for generated CRDs).
///
/// ```
/// let files = kthena_api::crd_files()?;
/// assert_eq!(files[0].0, "networking.serving.volcano.sh_modelroutes.yaml");
/// assert!(files[0].1.starts_with("apiVersion: apiextensions.k8s.io/v1\n"));
/// # Ok::<(), kthena_api::Error>(())
/// ```
pub fn crd_files() -> Result<Vec<(String, String)>> {
    crds()
        .into_iter()
        .map(|crd| {
            let name = format!("{}_{}.yaml", crd.spec.group, crd.spec.names.plural);
            let text = serde_saphyr::to_string(&crd).map_err(|source| Error::SerializeYaml {
                source: Box::new(source),
            })?;
            Ok((name, text))
        })
        .collect()
}
