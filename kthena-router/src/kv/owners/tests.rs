use super::*;

fn pod(ns: &str, name: &str, starts: &[Option<&str>]) -> Arc<Pod> {
    let statuses: Vec<serde_json::Value> = starts
        .iter()
        .enumerate()
        .map(|(i, s)| match s {
            Some(t) => serde_json::json!({"name": format!("c{i}"), "image": "x", "ready": true,
                "restartCount": 0, "state": {"running": {"startedAt": t}}}),
            None => serde_json::json!({"name": format!("c{i}"), "image": "x", "ready": false,
                "restartCount": 0, "state": {"waiting": {"reason": "CrashLoopBackOff"}}}),
        })
        .collect();
    Arc::new(
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": ns},
            "status": {"containerStatuses": statuses},
        }))
        .unwrap_or_default(),
    )
}

#[test]
fn container_start_is_the_newest_running_one() {
    let p = pod(
        "ns",
        "a",
        &[
            Some("2026-01-01T00:00:10Z"),
            None,
            Some("2026-01-01T00:01:00Z"),
        ],
    );
    assert_eq!(pod_container_started(&p), Some(1_767_225_660));
    assert_eq!(pod_container_started(&pod("ns", "b", &[None])), None);
    assert_eq!(pod_container_started(&pod("ns", "c", &[])), None);
}

#[test]
fn starts_come_from_endpoints_then_pods() {
    let view = OwnerView::new();
    assert_eq!(view.started("a.ns"), None);
    assert!(view.pod_list().is_none());
    view.note_pods(&[
        pod("ns", "a", &[Some("2026-01-01T00:00:10Z")]),
        pod("ns", "b", &[None]),
    ]);
    assert_eq!(view.started("a.ns"), Some(1_767_225_610));
    assert_eq!(view.started("b.ns"), None);
    assert_eq!(view.starts().get("a.ns"), Some(1_767_225_610));
    // An endpoint's own start wins over its pod's.
    let mut cfg: crate::config::EndpointConfig = serde_json::from_value(
        serde_json::json!({"name": "a", "namespace": "ns", "address": "127.0.0.1:8000"}),
    )
    .unwrap();
    cfg.container_started = Some(42);
    let ep = crate::upstream::endpoint::Endpoint::from_config(&cfg).unwrap();
    view.note_endpoints(&[Arc::new(ep)]);
    assert_eq!(view.started("a.ns"), Some(42));
    assert_eq!(view.starts().get("a.ns"), Some(42));
    let list = view.pod_list().unwrap_or_default();
    assert!(list.by_in_flight_owner.contains("ns/b"));
    assert!(!list.by_in_flight_owner.contains("ns/c"));
    assert_eq!(list.by_block_owner.len(), 2);
}
