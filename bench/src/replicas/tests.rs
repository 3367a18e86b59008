use std::time::Duration;

use kthena_bench::scenario::Policy;

use super::{Replicas, SharedInflight, check, expand};

fn policy(name: &str) -> Policy {
    Policy {
        name: name.to_owned(),
        scheduler_yaml: String::new(),
        needs_kv_events: false,
    }
}

#[test]
fn rows_per_policy_router_count_and_sharing() {
    let ms = Duration::from_millis(50);
    let got = expand(
        &[policy("random"), policy("best")],
        &[1, 3],
        SharedInflight::Both,
        ms,
    );
    let names: Vec<&str> = got.iter().map(|(p, _)| p.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "random",
            "random ×3 routers, shared in-flight",
            "random ×3 routers, own in-flight",
            "best",
            "best ×3 routers, shared in-flight",
            "best ×3 routers, own in-flight",
        ]
    );
    assert_eq!(got[0].1.routers, 1);
    assert_eq!(
        got[1].1,
        Replicas {
            routers: 3,
            shared: Some(ms)
        }
    );
    assert_eq!(got[2].1.shared, None);
    assert!(got[1].1.board().is_some());
    assert!(got[2].1.board().is_none());
    // Without `--routers`: the usual rows, one router each.
    let plain = expand(&[policy("random")], &[], SharedInflight::On, ms);
    assert_eq!(plain.len(), 1);
    assert_eq!(plain[0].0.name, "random");
    assert!(plain[0].1.board().is_none());
    assert!(Replicas::ONE.board().is_none());
}

#[test]
fn several_routers_run_in_virtual_time_only() {
    assert!(check(&[1, 3], true, false).is_ok());
    assert!(check(&[1], false, true).is_ok());
    let e = check(&[3], false, false).unwrap_err();
    assert_eq!(
        e.to_string(),
        "--routers above 1 runs in virtual time only (drop --clock real)"
    );
    let e = check(&[1, 3], true, true).unwrap_err();
    assert_eq!(
        e.to_string(),
        "--routers above 1 cannot be combined with --peers (the peers run in real time)"
    );
    let e = check(&[0], true, false).unwrap_err();
    assert_eq!(e.to_string(), "--routers: every count must be at least 1");
}
