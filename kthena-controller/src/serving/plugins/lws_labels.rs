//! The `lws-standard-labels` plugin (Go `pkg/model-serving-controller/plugins/lws_labels_plugin.go`):
//! the pods of a ModelServing owned by a LeaderWorkerSet get the labels LeaderWorkerSet's own
//! controller puts on its pods (`sigs.k8s.io/lws` v0.7.0 `api/leaderworkerset/v1`), so
//! selectors and tools written for LWS pods keep working.

use std::fmt::Write as _;

use k8s_openapi::api::core::v1::Pod;
use kthena_api::workload::PluginSpec;
use kube::ResourceExt as _;
use sha1::{Digest as _, Sha1};

use super::{HookRequest, Plugin, PluginError};
use crate::names::split_ordinal;

/// Name of the plugin (Go `LWSLabelsPluginName`).
pub const LWS_LABELS: &str = "lws-standard-labels";
/// The owning LeaderWorkerSet's name (LWS `SetNameLabelKey`).
pub const SET_NAME_LABEL: &str = "leaderworkerset.sigs.k8s.io/name";
/// The ServingGroup ordinal (LWS `GroupIndexLabelKey`).
pub const GROUP_INDEX_LABEL: &str = "leaderworkerset.sigs.k8s.io/group-index";
/// 0 on the entry pod, the worker's index on a worker (LWS `WorkerIndexLabelKey`).
pub const WORKER_INDEX_LABEL: &str = "leaderworkerset.sigs.k8s.io/worker-index";
/// [`group_key`] of the group (LWS `GroupUniqueHashLabelKey`).
pub const GROUP_KEY_LABEL: &str = "leaderworkerset.sigs.k8s.io/group-key";

/// The plugin; it takes no config (any `config` is ignored, as Go's factory ignores it).
#[derive(Debug)]
struct LwsLabels {
    name: String,
}

/// Go `NewLWSLabelsPlugin`.
pub(super) fn new(spec: &PluginSpec) -> Result<Box<dyn Plugin>, PluginError> {
    Ok(Box::new(LwsLabels {
        name: spec.name.clone(),
    }))
}

/// The group key label value: the hex SHA-1 of `<lws>-<group index>` (LWS
/// `utils.Sha1Hash`), 40 characters.
#[must_use]
pub fn group_key(lws: &str, group_index: u32) -> String {
    let digest = Sha1::digest(format!("{lws}-{group_index}").as_bytes());
    digest.iter().fold(String::with_capacity(40), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

impl Plugin for LwsLabels {
    fn name(&self) -> &str {
        &self.name
    }

    /// Nothing unless an owner reference of the ModelServing has kind `LeaderWorkerSet`;
    /// then the four labels ([`SET_NAME_LABEL`], [`GROUP_INDEX_LABEL`],
    /// [`WORKER_INDEX_LABEL`], [`GROUP_KEY_LABEL`]) are set on the pod.
    fn on_pod_create(&self, req: &HookRequest<'_>, pod: &mut Pod) -> Result<(), PluginError> {
        let owners = req.model_serving.owner_references();
        let Some(lws) = owners
            .iter()
            .find(|r| r.kind == "LeaderWorkerSet" && !r.name.is_empty())
        else {
            return Ok(());
        };
        let Some((_, group_index)) = split_ordinal(req.serving_group) else {
            return Err(PluginError::InvalidGroup {
                group: req.serving_group.to_owned(),
                pod: pod.name_any(),
            });
        };
        let worker_index = if req.is_entry {
            0
        } else {
            worker_index(&pod.name_any())?
        };
        let labels = pod.labels_mut();
        labels.insert(SET_NAME_LABEL.to_owned(), lws.name.clone());
        labels.insert(GROUP_INDEX_LABEL.to_owned(), group_index.to_string());
        labels.insert(WORKER_INDEX_LABEL.to_owned(), worker_index.to_string());
        labels.insert(
            GROUP_KEY_LABEL.to_owned(),
            group_key(&lws.name, group_index),
        );
        Ok(())
    }
}

/// Go `deriveWorkerIndex` for a worker: the number after the pod name's last `-`.
fn worker_index(pod: &str) -> Result<u32, PluginError> {
    pod.rsplit_once('-')
        .and_then(|(_, n)| n.parse::<u32>().ok())
        .ok_or_else(|| PluginError::WorkerIndex(pod.to_owned()))
}
