//! The `demo-pod-tweaks` plugin (Go `pkg/model-serving-controller/plugins/demo_plugin.go`,
//! registered at start like every Go built-in and documented by Kthena as the plugin to try
//! the framework with): sets the pods' `runtimeClassName`, merges annotations and appends
//! environment variables to every container and init container.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{EnvVar, Pod};
use kthena_api::workload::PluginSpec;
use serde::{Deserialize, Serialize};

use super::{HookRequest, Plugin, PluginError};

/// Name of the plugin (Go `DemoPluginName`).
pub const DEMO: &str = "demo-pod-tweaks";

/// The plugin's `config` (Go `DemoConfig`); unknown members are ignored, as Go's
/// `json.Unmarshal` ignores them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DemoConfig {
    /// Set as the pod's `spec.runtimeClassName` (when not empty).
    #[serde(default)]
    pub runtime_class_name: String,
    /// Merged into the pod's annotations (the config wins).
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
    /// Appended to the env of every container and init container (after the controller's
    /// `GROUP_SIZE`, `ENTRY_ADDRESS`, `WORKER_INDEX`; same-named variables are not removed).
    #[serde(default)]
    pub env: Vec<EnvVar>,
}

#[derive(Debug)]
struct Demo {
    name: String,
    config: DemoConfig,
}

/// Go `NewDemoPlugin`: decodes the config, a JSON object (none, or `null`, is the empty
/// config).
pub(super) fn new(spec: &PluginSpec) -> Result<Box<dyn Plugin>, PluginError> {
    let config = match &spec.config {
        None | Some(serde_json::Value::Null) => DemoConfig::default(),
        // Only an object: serde would also fill a struct from an array, by position, where
        // Go's `json.Unmarshal` refuses one.
        Some(v) => serde_json::Map::deserialize(v)
            .and_then(|_| DemoConfig::deserialize(v))
            .map_err(|source| PluginError::Config {
                name: spec.name.clone(),
                source,
            })?,
    };
    Ok(Box::new(Demo {
        name: spec.name.clone(),
        config,
    }))
}

impl Plugin for Demo {
    fn name(&self) -> &str {
        &self.name
    }

    fn on_pod_create(&self, _req: &HookRequest<'_>, pod: &mut Pod) -> Result<(), PluginError> {
        let c = &self.config;
        if !c.annotations.is_empty() {
            let annotations = pod.metadata.annotations.get_or_insert_default();
            annotations.extend(c.annotations.clone());
        }
        let spec = pod.spec.get_or_insert_default();
        if !c.runtime_class_name.is_empty() {
            spec.runtime_class_name = Some(c.runtime_class_name.clone());
        }
        if !c.env.is_empty() {
            let init = spec.init_containers.iter_mut().flatten();
            for container in spec.containers.iter_mut().chain(init) {
                container
                    .env
                    .get_or_insert_default()
                    .extend(c.env.iter().cloned());
            }
        }
        Ok(())
    }
}
