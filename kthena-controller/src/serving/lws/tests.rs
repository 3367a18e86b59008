use serde_json::{Value, json};

use super::*;
use kthena_api::workload::ModelServingStatus;

fn lws(spec: &Value) -> LeaderWorkerSet {
    let obj = json!({
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": "test-lws", "namespace": "default", "uid": "test-uid"},
        "spec": spec,
    });
    serde_json::from_value(obj).unwrap_or_default()
}

fn container(name: &str, image: &str) -> Value {
    json!({"spec": {"containers": [{"name": name, "image": image}]}})
}

/// Go `TestConstructModelServing` "basic translation with defaults", the whole object.
#[test]
fn basic_translation_with_defaults() {
    let ms = model_serving(&lws(
        &json!({"leaderWorkerTemplate": {"workerTemplate": container("worker", "nginx")}}),
    ));
    let template =
        json!({"metadata": {}, "spec": {"containers": [{"name": "worker", "image": "nginx"}]}});
    assert_eq!(
        serde_json::to_value(&ms).unwrap_or_default(),
        json!({
            "apiVersion": "workload.serving.volcano.sh/v1alpha1",
            "kind": "ModelServing",
            "metadata": {
                "name": "test-lws",
                "namespace": "default",
                "ownerReferences": [{
                    "apiVersion": "leaderworkerset.x-k8s.io/v1",
                    "kind": "LeaderWorkerSet",
                    "name": "test-lws",
                    "uid": "test-uid",
                    "controller": true,
                    "blockOwnerDeletion": true,
                }],
            },
            "spec": {
                "replicas": 1,
                "plugins": [{"name": "lws-standard-labels", "type": "BuiltIn"}],
                "template": {"roles": [{
                    "name": "default",
                    "replicas": 1,
                    "entryTemplate": template,
                    "workerReplicas": 0,
                    "workerTemplate": template,
                }]},
            },
        })
    );
}

/// Go's other cases: custom replicas and size, a separate leader template, template labels
/// and annotations, size 1.
#[test]
fn replicas_size_leader_template_and_metadata() {
    let ms = model_serving(&lws(&json!({"replicas": 3, "leaderWorkerTemplate": {
        "size": 4, "workerTemplate": container("worker", "nginx"),
    }})));
    assert_eq!(ms.spec.replicas, Some(3));
    assert_eq!(ms.spec.template.roles[0].worker_replicas, 3);

    let ms = model_serving(&lws(&json!({"leaderWorkerTemplate": {
        "size": 2,
        "leaderTemplate": container("leader", "leader-image"),
        "workerTemplate": container("worker", "worker-image"),
    }})));
    let role = &ms.spec.template.roles[0];
    assert_eq!(role.worker_replicas, 1);
    let image = |t: &k8s_openapi::api::core::v1::PodTemplateSpec| {
        t.spec.clone().unwrap_or_default().containers[0]
            .image
            .clone()
    };
    assert_eq!(image(&role.entry_template).as_deref(), Some("leader-image"));
    let worker = role.worker_template.as_ref().map(image);
    assert_eq!(worker.flatten().as_deref(), Some("worker-image"));

    let mut worker = container("worker", "nginx");
    worker["metadata"] =
        json!({"labels": {"app": "test"}, "annotations": {"note": "test"}, "name": "dropped"});
    let ms = model_serving(&lws(
        &json!({"leaderWorkerTemplate": {"workerTemplate": worker}}),
    ));
    let role = &ms.spec.template.roles[0];
    let meta = serde_json::to_value(&role.entry_template.metadata).unwrap_or_default();
    assert_eq!(
        meta,
        json!({"labels": {"app": "test"}, "annotations": {"note": "test"}})
    );
    assert_eq!(
        role.worker_template.as_ref().map(|t| &t.metadata),
        Some(&role.entry_template.metadata)
    );

    for size in [1, 0, -2] {
        let ms = model_serving(&lws(&json!({"leaderWorkerTemplate": {
            "size": size, "workerTemplate": container("worker", "nginx"),
        }})));
        assert_eq!(ms.spec.template.roles[0].worker_replicas, 0, "size {size}");
    }
}

#[test]
fn owned_and_unchanged_after_defaulting() {
    let set = lws(&json!({"leaderWorkerTemplate": {"workerTemplate": container("w", "i")}}));
    let desired = model_serving(&set);
    assert!(controlled_by(&desired, &set));
    let mut other = set;
    other.metadata.uid = Some("other".to_owned());
    assert!(!controlled_by(&desired, &other));
    // What the API server stores is the defaulted object: no update.
    let stored = desired.clone().with_defaults();
    assert!(!spec_differs(&stored, &desired));
    let mut scaled = stored;
    scaled.spec.replicas = Some(5);
    assert!(spec_differs(&scaled, &desired));
}

#[test]
fn status_counts_from_the_modelserving() {
    let mut set = lws(&json!({}));
    let mut ms = model_serving(&set);
    // Nothing yet on either side: nothing to write (0 is absent, Go's omitempty).
    assert_eq!(status_patch(&set, &ms), None);
    ms.status = Some(ModelServingStatus {
        replicas: 2,
        available_replicas: Some(1),
        ..ModelServingStatus::default()
    });
    assert_eq!(
        status_patch(&set, &ms),
        Some(json!({"status": {"replicas": 2, "readyReplicas": 1}}))
    );
    set.status = Some(LeaderWorkerSetStatus {
        ready_replicas: Some(1),
        replicas: Some(2),
    });
    assert_eq!(status_patch(&set, &ms), None);
    ms.status = Some(ModelServingStatus {
        replicas: 1,
        available_replicas: Some(0),
        ..ModelServingStatus::default()
    });
    assert_eq!(
        status_patch(&set, &ms),
        Some(json!({"status": {"replicas": 1, "readyReplicas": null}}))
    );
}
