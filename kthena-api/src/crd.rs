//! CRD generation.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

use crate::{
    AutoscalingPolicy, ExternalModelProvider, ModelBooster, ModelRoute, ModelServer, ModelServing,
};

/// The CustomResourceDefinitions of all six kinds, in the order ModelRoute, ModelServer,
/// ExternalModelProvider, ModelServing, ModelBooster, AutoscalingPolicy.
///
/// ```
/// let crds = kthena_api::crds();
/// assert_eq!(crds[0].metadata.name.as_deref(), Some("modelroutes.networking.serving.volcano.sh"));
/// ```
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
