use super::*;

#[test]
fn go_identity_and_timings() {
    let id = identity();
    let (host, uuid) = id.rsplit_once('_').unwrap_or_default();
    assert!(!host.is_empty(), "{id}");
    assert!(uuid::Uuid::parse_str(uuid).is_ok(), "{id}");
    assert_ne!(identity(), id);
    let e = LeaderElection::go_defaults("kthena-system");
    assert_eq!(e.lease_name, "lease.kthena.controller-manager");
    assert_eq!(
        (e.duration, e.retry),
        (Duration::from_secs(15), Duration::from_secs(2))
    );
}
