use super::*;
use crate::serving::desired::{RoleReplicaRef, role_replica_pods};
use crate::serving::observed::Observed;
use crate::testutil::{observed_pod, sample};

#[test]
fn missing_and_errored_pods() -> crate::testutil::TestResult {
    let ms = sample()?;
    let role = &ms.spec.template.roles[0];
    let at = RoleReplicaRef {
        group: "sample-0",
        role,
        ordinal: 0,
        revision: "rev1",
        role_hash: "h",
    };
    let mut pods: Vec<_> = (0..4)
        .map(|i| observed_pod("sample", "sample-0", "prefill", 0, i, true, None))
        .collect();
    let seen = Observed::new("sample", "uid-1", &pods, &[]);
    let now: Timestamp = "2026-01-01T00:01:00Z".parse()?;
    let none = BTreeSet::new();
    let ok = ReplicaCheck::new(
        role_replica_pods(&ms, &at),
        &seen.groups[&0].roles["prefill"][&0],
        &none,
        (60, now),
    );
    assert!(!ok.broken() && ok.wait.is_none());
    pods.remove(2);
    let status = pods[1].status.get_or_insert_default();
    status.phase = Some("Failed".to_owned());
    let ready = &mut status.conditions.get_or_insert_default()[0];
    ready.status = "False".to_owned();
    ready.last_transition_time = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        "2026-01-01T00:00:30Z".parse()?,
    ));
    let seen = Observed::new("sample", "uid-1", &pods, &[]);
    let replica = &seen.groups[&0].roles["prefill"][&0];
    let c = ReplicaCheck::new(role_replica_pods(&ms, &at), replica, &none, (60, now));
    let missing: Vec<_> = c.missing.iter().map(|p| p.name_any()).collect();
    assert_eq!(missing, ["sample-0-prefill-0-2"]);
    assert!(c.expired.is_empty());
    assert_eq!(c.wait, Some(Duration::from_secs(30)));
    let c = ReplicaCheck::new(role_replica_pods(&ms, &at), replica, &none, (30, now));
    assert_eq!(c.expired, ["sample-0-prefill-0-1"]);
    let c = ReplicaCheck::new(role_replica_pods(&ms, &at), replica, &none, (0, now));
    assert_eq!((c.expired.len(), c.wait), (1, None));
    Ok(())
}

#[test]
fn a_pod_whose_create_was_refused_is_missing_but_not_lost() -> crate::testutil::TestResult {
    let ms = sample()?;
    let role = &ms.spec.template.roles[0];
    let at = RoleReplicaRef {
        group: "sample-0",
        role,
        ordinal: 0,
        revision: "rev1",
        role_hash: "h",
    };
    let pods = vec![observed_pod(
        "sample", "sample-0", "prefill", 0, 0, true, None,
    )];
    let seen = Observed::new("sample", "uid-1", &pods, &[]);
    let replica = &seen.groups[&0].roles["prefill"][&0];
    let now: Timestamp = "2026-01-01T00:01:00Z".parse()?;
    let refused: BTreeSet<String> = ["sample-0-prefill-0-1", "sample-0-prefill-0-2"]
        .map(str::to_owned)
        .into();
    let c = ReplicaCheck::new(role_replica_pods(&ms, &at), replica, &refused, (0, now));
    let missing: Vec<_> = c.missing.iter().map(|p| p.name_any()).collect();
    assert_eq!(
        missing,
        [
            "sample-0-prefill-0-1",
            "sample-0-prefill-0-2",
            "sample-0-prefill-0-3"
        ]
    );
    // Worker 3 was never refused: it is lost, and the replica is broken.
    assert_eq!(c.lost, 1);
    assert!(c.broken());
    let refused: BTreeSet<String> = missing.into_iter().collect();
    let c = ReplicaCheck::new(role_replica_pods(&ms, &at), replica, &refused, (0, now));
    assert_eq!((c.missing.len(), c.lost, c.broken()), (3, 0, false));
    Ok(())
}
