//! The ModelServing of a LeaderWorkerSet and the LeaderWorkerSet status from it, as pure
//! functions (Go `constructModelServing` and `updateLWSStatus` in
//! `pkg/model-serving-controller/controller/lws_controller.go`).

use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kthena_api::ModelServing;
use kthena_api::workload::{ModelServingSpec, PluginSpec, PluginType, Role, ServingGroup};
use kube::ResourceExt as _;
use serde_json::{Value, json};

use super::types::{API_VERSION, KIND, LeaderWorkerSet};
use crate::serving::plugins::LWS_LABELS;

/// The one role of a LeaderWorkerSet's ModelServing.
pub const ROLE: &str = "default";

/// The controller owner reference to `lws` (apiVersion `leaderworkerset.x-k8s.io/v1`, kind
/// `LeaderWorkerSet`, controller and blockOwnerDeletion true).
#[must_use]
pub fn owner_ref(lws: &LeaderWorkerSet) -> OwnerReference {
    OwnerReference {
        api_version: API_VERSION.to_owned(),
        kind: KIND.to_owned(),
        name: lws.name_any(),
        uid: lws.uid().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// True when `ms`'s controller owner reference is `lws` (by UID).
#[must_use]
pub fn controlled_by(ms: &ModelServing, lws: &LeaderWorkerSet) -> bool {
    ms.owner_references()
        .iter()
        .any(|r| r.controller == Some(true) && r.kind == KIND && Some(&r.uid) == lws.uid().as_ref())
}

/// Go's `convertTemplate`: the template's labels and annotations (metadata present, empty
/// when it has neither) and its spec.
fn template(src: &PodTemplateSpec) -> PodTemplateSpec {
    let meta = src.metadata.clone().unwrap_or_default();
    PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: meta.labels.filter(|l| !l.is_empty()),
            annotations: meta.annotations.filter(|a| !a.is_empty()),
            ..ObjectMeta::default()
        }),
        spec: src.spec.clone(),
    }
}

/// The ModelServing Go builds from `lws`: same name and namespace, the controller owner
/// reference to it, `replicas` = the LWS's (1 when unset), the plugin
/// [`lws-standard-labels`](LWS_LABELS), and one role `default` with 1 replica whose entry
/// template is `leaderTemplate` (`workerTemplate` when absent), whose worker template is
/// `workerTemplate` and whose `workerReplicas` is `size - 1` (size 1 when unset; never
/// negative). No labels of its own, and nothing else set: the CRD defaults the rest
/// (`schedulerName: volcano`, `recoveryPolicy: RoleRecreate`, ...).
#[must_use]
pub fn model_serving(lws: &LeaderWorkerSet) -> ModelServing {
    let t = &lws.spec.leader_worker_template;
    let size = t.size.unwrap_or(1);
    let leader = t.leader_template.as_ref().unwrap_or(&t.worker_template);
    let role = Role {
        name: ROLE.to_owned(),
        replicas: Some(1),
        entry_template: template(leader),
        worker_replicas: (size - 1).max(0),
        worker_template: Some(template(&t.worker_template)),
        ..Role::default()
    };
    let spec = ModelServingSpec {
        replicas: Some(lws.spec.replicas.unwrap_or(1)),
        plugins: vec![PluginSpec {
            name: LWS_LABELS.to_owned(),
            type_: PluginType::BuiltIn,
            ..PluginSpec::default()
        }],
        template: ServingGroup {
            roles: vec![role],
            ..ServingGroup::default()
        },
        ..ModelServingSpec::default()
    };
    let mut ms = ModelServing::new(&lws.name_any(), spec);
    ms.metadata.namespace = lws.namespace();
    ms.metadata.owner_references = Some(vec![owner_ref(lws)]);
    ms
}

/// True when the stored ModelServing's spec is not `desired`'s once defaulted: Go compares
/// the stored spec with the built one and writes the built one (an update the API server
/// then finds unchanged when only defaults differ); comparing with the defaulted spec skips
/// those writes.
#[must_use]
pub fn spec_differs(stored: &ModelServing, desired: &ModelServing) -> bool {
    stored.spec != desired.clone().with_defaults().spec
}

/// The merge patch of the LeaderWorkerSet status from its ModelServing's, `None` when it is
/// already so: `replicas` = the ModelServing's `status.replicas`, `readyReplicas` = its
/// `status.availableReplicas`; a 0 is written as absent (Go's `omitempty`), every other
/// status member is kept.
#[must_use]
pub fn status_patch(lws: &LeaderWorkerSet, ms: &ModelServing) -> Option<Value> {
    let st = ms.status.clone().unwrap_or_default();
    let nonzero = |v: Option<i32>| v.filter(|&v| v != 0);
    let want = (nonzero(Some(st.replicas)), nonzero(st.available_replicas));
    let have = lws.status.clone().unwrap_or_default();
    let have = (nonzero(have.replicas), nonzero(have.ready_replicas));
    (want != have).then(|| json!({"status": {"replicas": want.0, "readyReplicas": want.1}}))
}
