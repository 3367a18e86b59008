//! Fixtures of the unit tests.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Pod, PodCondition, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kthena_api::{ModelServing, Object, load_str};

use crate::names::{
    GROUP_NAME_LABEL, NAME_LABEL, POD_DELETION_COST_ANNOTATION, REVISION_LABEL, ROLE_ID_LABEL,
    ROLE_LABEL, pod_name, role_id,
};

/// Result of a unit test.
pub(crate) type TestResult<T = ()> = Result<T, Box<dyn std::error::Error>>;

/// Loads the first ModelServing of `text` as [`sample`] does (namespace, UID, defaults).
pub(crate) fn load(name: &str, text: &str) -> TestResult<ModelServing> {
    let docs = load_str(name, text)?;
    let Some(Object::ModelServing(ms)) = docs.into_iter().next().map(|d| d.object.with_defaults())
    else {
        return Err(format!("{name} is not a ModelServing").into());
    };
    let mut ms = *ms;
    ms.metadata.namespace = Some("ns1".to_owned());
    ms.metadata.uid = Some("uid-1".to_owned());
    ms.metadata.generation = Some(3);
    Ok(ms)
}

/// Kthena's `examples/model-serving/sample.yaml` (prefill and decode, 3 workers each), in
/// namespace `ns1` with UID `uid-1`, generation 3, defaults applied.
pub(crate) fn sample() -> TestResult<ModelServing> {
    load("sample.yaml", include_str!("../tests/fixtures/sample.yaml"))
}

/// Kthena's `examples/model-serving/multi-node.yaml` (one role `llama-405b`, 2 role replicas
/// of 1 entry + 1 worker), as [`sample`].
pub(crate) fn multi_node() -> TestResult<ModelServing> {
    load(
        "multi-node.yaml",
        include_str!("../tests/fixtures/multi-node.yaml"),
    )
}

/// The template revision of [`sample`].
pub(crate) fn sample_revision() -> String {
    let ms = sample().ok();
    ms.and_then(|ms| crate::serving::revision::model_serving_revision(&ms).ok())
        .unwrap_or_default()
}

/// An owned pod of group `group`, role replica `<role>-<r>`, index `i`, revision
/// [`sample_revision`].
pub(crate) fn observed_pod(
    ms: &str,
    group: &str,
    role: &str,
    r: u32,
    i: u32,
    ready: bool,
    cost: Option<&str>,
) -> Pod {
    let id = role_id(role, r);
    let labels = BTreeMap::from([
        (NAME_LABEL.to_owned(), ms.to_owned()),
        (GROUP_NAME_LABEL.to_owned(), group.to_owned()),
        (ROLE_LABEL.to_owned(), role.to_owned()),
        (ROLE_ID_LABEL.to_owned(), id.clone()),
        (REVISION_LABEL.to_owned(), sample_revision()),
    ]);
    let annotations =
        cost.map(|c| BTreeMap::from([(POD_DELETION_COST_ANNOTATION.to_owned(), c.to_owned())]));
    let owner = k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
        api_version: kthena_api::workload::API_VERSION.to_owned(),
        kind: "ModelServing".to_owned(),
        name: ms.to_owned(),
        uid: "uid-1".to_owned(),
        ..Default::default()
    };
    let condition = PodCondition {
        type_: "Ready".to_owned(),
        status: if ready { "True" } else { "False" }.to_owned(),
        ..PodCondition::default()
    };
    Pod {
        metadata: ObjectMeta {
            name: Some(pod_name(group, &id, i)),
            labels: Some(labels),
            annotations,
            owner_references: Some(vec![owner]),
            ..ObjectMeta::default()
        },
        spec: None,
        status: Some(PodStatus {
            phase: Some("Running".to_owned()),
            conditions: Some(vec![condition]),
            ..PodStatus::default()
        }),
    }
}
