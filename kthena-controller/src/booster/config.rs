//! The ModelBooster controller's ConfigMap (Go `pkg/model-booster-controller/controller/model_booster_controller.go`
//! `loadConfigFromConfigMap`, defaults in `pkg/model-booster-controller/config/config.go`).

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;

use super::Images;

/// The ConfigMap's name (Go's `ConfigMapName`), in the controller's own namespace.
pub const CONFIG_MAP_NAME: &str = "model-booster-controller-config";
/// Its key of the downloader init container's image.
pub const DOWNLOADER_IMAGE_KEY: &str = "model_serving_downloader_image";
/// Its key of the runtime sidecar's image.
pub const RUNTIME_IMAGE_KEY: &str = "model_serving_runtime_image";

/// The images of `model-booster-controller-config` in `namespace`, read once when the
/// controller starts, as Go does (a changed ConfigMap takes effect at the next start). A
/// missing ConfigMap (or one that cannot be read), a missing key or an empty value leaves
/// that image at its default ([`Images::default`], Go's `kthena/downloader:latest` and
/// `kthena/runtime:latest`), with a warning in the log. Never fails.
pub async fn load_images(client: &kube::Client, namespace: &str) -> Images {
    let mut images = Images::default();
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let cm = match api.get_opt(CONFIG_MAP_NAME).await {
        Ok(Some(cm)) => cm,
        Ok(None) => {
            tracing::warn!(%namespace, name = CONFIG_MAP_NAME, "ConfigMap does not exist; default downloader and runtime images");
            return images;
        }
        Err(e) => {
            let error = kthena_api::error_chain(&e);
            tracing::warn!(%namespace, name = CONFIG_MAP_NAME, %error, "ConfigMap not readable; default downloader and runtime images");
            return images;
        }
    };
    let data = cm.data.unwrap_or_default();
    for (key, image) in [
        (DOWNLOADER_IMAGE_KEY, &mut images.downloader),
        (RUNTIME_IMAGE_KEY, &mut images.runtime),
    ] {
        match data.get(key).filter(|v| !v.is_empty()) {
            Some(v) => v.clone_into(image),
            None => {
                tracing::warn!(key, default = %image, "No image in the ModelBooster ConfigMap; using the default")
            }
        }
    }
    tracing::info!(downloader = %images.downloader, runtime = %images.runtime, "ModelBooster images");
    images
}
