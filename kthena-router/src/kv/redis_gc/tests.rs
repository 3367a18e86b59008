use super::*;

use k8s_openapi::api::core::v1::Pod;

fn pod(ns: &str, name: &str, started: Option<&str>) -> Arc<Pod> {
    let statuses = match started {
        Some(t) => serde_json::json!([{"name": "engine", "image": "x", "ready": true,
            "restartCount": 1, "state": {"running": {"startedAt": t}}}]),
        None => serde_json::json!([]),
    };
    Arc::new(
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": ns},
            "status": {"containerStatuses": statuses},
        }))
        .unwrap(),
    )
}

/// 2026-01-01T00:00:00Z.
const T0: i64 = 1_767_225_600;

#[test]
fn time_rules_apply_without_a_pod_list() {
    let view = OwnerView::new();
    let at = Instant::now();
    let mut r = GcRules::new(view, T0, at, Duration::ZERO, HashMap::new());
    // Go: deleted when now - written > 24 h.
    assert_eq!(
        r.block_field("a.ns", &(T0 - 86_401).to_string()),
        GcVerdict::Expired
    );
    assert_eq!(
        r.block_field("a.ns", &(T0 - 86_400).to_string()),
        GcVerdict::Keep
    );
    assert_eq!(r.block_field("a.ns", "not-a-number"), GcVerdict::Keep);
    // No pod list (standalone, or before the Pod store synced): nobody is deleted.
    assert_eq!(r.block_field("gone.ns", &T0.to_string()), GcVerdict::Keep);
    assert_eq!(r.in_flight_field("ns/gone"), GcVerdict::Keep);
    assert!(r.into_missing().is_empty());
}

#[test]
fn restarted_and_deleted_pods_with_grace() {
    let view = OwnerView::new();
    // pod a's container started at T0 - 100 (2025-12-31T23:58:20Z); pod b runs nothing.
    view.note_pods(&[
        pod("ns", "a", Some("2025-12-31T23:58:20Z")),
        pod("ns", "b", None),
    ]);
    let at = Instant::now();
    let grace = Duration::from_secs(30);
    let mut r = GcRules::new(Arc::clone(&view), T0, at, grace, HashMap::new());
    assert_eq!(
        r.block_field("a.ns", &(T0 - 100).to_string()),
        GcVerdict::Restarted
    );
    assert_eq!(
        r.block_field("a.ns", &(T0 - 99).to_string()),
        GcVerdict::Keep
    );
    assert_eq!(
        r.block_field("b.ns", &(T0 - 5000).to_string()),
        GcVerdict::Keep
    );
    assert_eq!(r.in_flight_field("ns/a"), GcVerdict::Keep);
    // Missing pods are kept for the grace, from the first round that missed them.
    assert_eq!(r.block_field("c.ns", &T0.to_string()), GcVerdict::Keep);
    assert_eq!(r.in_flight_field("ns/c"), GcVerdict::Keep);
    let missing = r.into_missing();
    assert_eq!(missing.len(), 2);

    let later = at + Duration::from_secs(29);
    let mut r = GcRules::new(Arc::clone(&view), T0 + 29, later, grace, missing);
    assert_eq!(r.block_field("c.ns", &T0.to_string()), GcVerdict::Keep);
    let missing = r.into_missing();
    let later = at + Duration::from_secs(30);
    let mut r = GcRules::new(Arc::clone(&view), T0 + 30, later, grace, missing.clone());
    assert_eq!(
        r.block_field("c.ns", &T0.to_string()),
        GcVerdict::DeletedPod
    );
    assert_eq!(r.in_flight_field("ns/c"), GcVerdict::DeletedPod);
    // An unparsable value does not protect a deleted pod's field.
    assert_eq!(r.block_field("c.ns", "x"), GcVerdict::DeletedPod);

    // The pod shows up (the watch was late): it is not missing any more.
    view.note_pods(&[pod("ns", "c", None)]);
    let mut r = GcRules::new(Arc::clone(&view), T0 + 30, later, grace, missing);
    assert_eq!(r.block_field("c.ns", &T0.to_string()), GcVerdict::Keep);
    assert_eq!(r.in_flight_field("ns/c"), GcVerdict::Keep);
    assert!(r.into_missing().is_empty());
}

#[test]
fn old_missing_entries_are_forgotten() {
    let view = OwnerView::new();
    view.note_pods(&[]);
    let at = Instant::now();
    let mut r = GcRules::new(Arc::clone(&view), T0, at, Duration::ZERO, HashMap::new());
    assert_eq!(r.in_flight_field("ns/x"), GcVerdict::DeletedPod);
    let missing = r.into_missing();
    assert_eq!(missing.len(), 1);
    let two_days = at + Duration::from_secs(2 * 86_400);
    let r = GcRules::new(view, T0, two_days, Duration::ZERO, missing);
    assert!(r.into_missing().is_empty());
}

#[test]
fn reasons_are_metric_labels() {
    assert_eq!(GcVerdict::Keep.reason(), None);
    assert_eq!(GcVerdict::Expired.reason(), Some("expired"));
    assert_eq!(GcVerdict::Restarted.reason(), Some("restarted"));
    assert_eq!(GcVerdict::DeletedPod.reason(), Some("deleted_pod"));
}

#[test]
fn mapping_keys_name_their_pod() {
    assert_eq!(
        mapping_owner("vllm:kv:block:vllm-0.prod@123"),
        Some("vllm-0.prod")
    );
    assert_eq!(mapping_owner("sglang:kv:block:a.b.ns@-5"), Some("a.b.ns"));
    assert_eq!(mapping_owner("matrix:kv:block:m@1"), None);
    assert_eq!(mapping_owner("vllm:kv:block:no-hash"), None);
    let view = OwnerView::new();
    view.note_pods(&[pod("prod", "vllm-0", None)]);
    let mut r = GcRules::new(view, T0, Instant::now(), Duration::ZERO, HashMap::new());
    assert_eq!(r.mapping_key("vllm-0.prod"), GcVerdict::Keep);
    assert_eq!(r.mapping_key("vllm-1.prod"), GcVerdict::DeletedPod);
}
