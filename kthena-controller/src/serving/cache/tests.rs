use k8s_openapi::jiff::Timestamp;

use super::*;
use crate::testutil::{TestResult, observed_pod, sample};

#[test]
fn dump_shows_observed_and_planned_replicas_as_gos_json() -> TestResult {
    let mut ms = sample()?;
    ms.spec.replicas = Some(2);
    let mut pods: Vec<_> = (0..4)
        .map(|i| observed_pod("sample", "sample-0", "prefill", 0, i, true, None))
        .collect();
    pods.push(observed_pod(
        "sample", "sample-0", "decode", 0, 0, false, None,
    ));
    let seen = Observed::new("sample", "uid-1", &pods, &[]);
    let plan = crate::serving::plan::plan(&ms, &seen, Timestamp::UNIX_EPOCH)?;
    let cache = ServingCache::default();
    let events = cache.record(&ms, &seen, &plan);
    let reasons: Vec<_> = events
        .iter()
        .map(|e| (e.reason, e.message.as_str()))
        .collect();
    assert_eq!(
        reasons,
        [
            // decode-0 lost 3 of its 4 pods: recovery deletes the role replica.
            (
                "RoleDeleting",
                "Role decode/decode-0 in ServingGroup sample-0 is now Deleting"
            ),
            (
                "RoleRunning",
                "Role prefill/prefill-0 in ServingGroup sample-0 is now Running"
            ),
            (
                "RoleCreating",
                "Role decode/decode-0 in ServingGroup sample-1 is now Creating"
            ),
            (
                "RoleCreating",
                "Role prefill/prefill-0 in ServingGroup sample-1 is now Creating"
            ),
        ]
    );
    assert_eq!(events[0].entry_pod, "sample-0-decode-0-0");
    assert_eq!(events[1].entry_pod, "sample-0-prefill-0-0");
    // The same view again: nothing changed, no event.
    assert_eq!(cache.record(&ms, &seen, &plan), []);
    let json = serde_json::to_value(cache.dump())?;
    let rev = crate::testutil::sample_revision();
    let g0 = &json["ns1/sample"]["sample-0"];
    assert_eq!(g0["name"], "sample-0");
    assert_eq!(g0["status"], "Creating");
    assert_eq!(g0["revision"], rev.as_str());
    let running: Vec<String> = (0..4).map(|i| format!("sample-0-prefill-0-{i}")).collect();
    assert_eq!(g0["runningPods"], serde_json::json!(running));
    let prefill = &g0["roles"]["prefill"]["prefill-0"];
    assert_eq!(
        (&prefill["name"], &prefill["status"], &prefill["revision"]),
        (&"prefill-0".into(), &"Running".into(), &rev.as_str().into())
    );
    assert_eq!(prefill["roleTemplateHash"], "");
    // decode-0 lost 3 of its 4 pods: RoleRecreate deletes it.
    assert_eq!(g0["roles"]["decode"]["decode-0"]["status"], "Deleting");
    // Group 1 is planned: its role replicas are Creating, with the new revision.
    let g1 = &json["ns1/sample"]["sample-1"];
    assert_eq!(g1["status"], "Creating");
    assert_eq!(g1["runningPods"], serde_json::json!([]));
    let decode = &g1["roles"]["decode"]["decode-0"];
    assert_eq!(decode["status"], "Creating");
    assert_eq!(decode["revision"], rev.as_str());
    let hash = crate::serving::revision::role_template_hash(&ms.spec.template.roles[1])?;
    assert_eq!(decode["roleTemplateHash"], hash.as_str());
    Ok(())
}
