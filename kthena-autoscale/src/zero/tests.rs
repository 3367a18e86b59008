use std::collections::BTreeMap;
use std::time::Duration;

use super::*;
use crate::behavior::Behavior;
use crate::disagg::{RoleObservation, RoleParam, RoleRatio, RolesScaler};
use crate::hetero::{Optimizer, TargetObservation, TargetParam};
use crate::ratio::{Bounds, Ratio, RatioBounds};
use crate::recommend::Metrics;

const WINDOW: Duration = Duration::from_secs(300);
const MS: &str = "ns/llama";

fn servers() -> Vec<String> {
    vec![MS.to_owned()]
}

/// A router at `router` reporting `held` held requests and `idle` seconds for [`MS`].
fn answer(router: &str, held: f64, idle: Option<f64>) -> RouterAnswer {
    let mut s = RouterSample::default();
    s.held.insert(MS.to_owned(), held);
    if let Some(idle) = idle {
        s.idle.insert(MS.to_owned(), idle);
    }
    RouterAnswer {
        router: router.to_owned(),
        sample: Some(s),
    }
}

fn view(answers: &[RouterAnswer]) -> ZeroView {
    ZeroView::new(&servers(), Routers::Answers(answers), WINDOW)
}

#[test]
fn to_zero_exactly_when_every_router_reports_every_server_idle_for_the_window() {
    let both = [
        answer("r1", 0.0, Some(300.0)),
        answer("r2", 0.0, Some(301.5)),
    ];
    assert_eq!(view(&both).idleness, Idleness::Idle);
    assert_eq!(plan(3, 0, Some(&view(&both))), ZeroStep::ToZero);
    let short = [answer("r1", 0.0, Some(299.9)), answer("r2", 0.0, Some(1e6))];
    assert_eq!(view(&short).idleness, Idleness::Busy(299.9));
    assert_eq!(
        plan(1, 0, Some(&view(&short))),
        ZeroStep::Scale { floor: 1 }
    );
}

#[test]
fn never_to_zero_with_a_held_request() {
    // A held request makes the router's idle gauge 0, but even a stale idle value does not
    // count once another router holds a request.
    let v = view(&[answer("r1", 0.0, Some(1e4)), answer("r2", 1.0, Some(1e4))]);
    assert!(v.demand);
    assert_eq!(v.idleness, Idleness::Held);
    assert_eq!(plan(1, 0, Some(&v)), ZeroStep::Scale { floor: 1 });
}

#[test]
fn never_to_zero_with_a_request_in_flight() {
    let v = view(&[answer("r1", 0.0, Some(0.0)), answer("r2", 0.0, Some(1e4))]);
    assert!(!v.demand);
    assert_eq!(v.idleness, Idleness::Busy(0.0));
    assert_eq!(plan(2, 0, Some(&v)), ZeroStep::Scale { floor: 1 });
    // Even with a 0 s window: 0 is what a router reports while a request is in flight.
    let answers = [answer("r1", 0.0, Some(0.0))];
    let zero_window = ZeroView::new(&servers(), Routers::Answers(&answers), Duration::ZERO);
    assert_eq!(zero_window.idleness, Idleness::Busy(0.0));
    let answers = [answer("r1", 0.0, Some(0.5))];
    let ended = ZeroView::new(&servers(), Routers::Answers(&answers), Duration::ZERO);
    assert_eq!(ended.idleness, Idleness::Idle);
}

#[test]
fn never_to_zero_when_a_router_misses_the_series_or_fails() {
    let missing = view(&[answer("r1", 0.0, Some(1e4)), answer("r2", 0.0, None)]);
    assert_eq!(
        missing.idleness,
        Idleness::Blocked(Blocked::MissingSeries("r2".to_owned(), MS.to_owned()))
    );
    assert_eq!(plan(1, 0, Some(&missing)), ZeroStep::Scale { floor: 1 });
    let failed = [
        answer("r1", 0.0, Some(1e4)),
        RouterAnswer {
            router: "10.0.0.7:9090".to_owned(),
            sample: None,
        },
    ];
    let failed = view(&failed);
    let b = Blocked::RouterUnanswered("10.0.0.7:9090".to_owned());
    assert_eq!(b.to_string(), "router 10.0.0.7:9090 did not answer");
    assert_eq!(failed.idleness, Idleness::Blocked(b));
    assert_eq!(plan(1, 0, Some(&failed)), ZeroStep::Scale { floor: 1 });
}

#[test]
fn never_to_zero_without_routers_or_model_servers() {
    let none = ZeroView::new(&servers(), Routers::Unconfigured, WINDOW);
    assert_eq!(none.idleness, Idleness::Blocked(Blocked::NoRouterService));
    let empty = ZeroView::new(&servers(), Routers::Answers(&[]), WINDOW);
    assert_eq!(empty.idleness, Idleness::Blocked(Blocked::NoRouterEndpoint));
    let idle = [answer("r1", 0.0, Some(1e4))];
    let unserved = ZeroView::new(&[], Routers::Answers(&idle), WINDOW);
    assert_eq!(unserved.idleness, Idleness::Blocked(Blocked::NoModelServer));
    for v in [none, empty, unserved] {
        assert_eq!(plan(1, 0, Some(&v)), ZeroStep::Scale { floor: 1 });
    }
}

#[test]
fn a_server_the_target_does_not_use_is_ignored() {
    let mut other = answer("r1", 0.0, Some(1e4));
    let s = other.sample.as_mut().unwrap();
    s.held.insert("ns/other".to_owned(), 5.0);
    s.idle.insert("ns/other".to_owned(), 0.0);
    let v = view(&[other]);
    assert!(!v.demand);
    assert_eq!(v.idleness, Idleness::Idle);
}

#[test]
fn wake_from_zero_to_max_min_one_on_demand_else_stay() {
    let held = view(&[answer("r1", 2.0, Some(0.0))]);
    assert_eq!(plan(0, 0, Some(&held)), ZeroStep::Wake(1));
    // A failed router does not hide another one's demand.
    let mixed = [
        RouterAnswer {
            router: "r0".to_owned(),
            sample: None,
        },
        answer("r1", 1.0, Some(0.0)),
    ];
    assert_eq!(plan(0, 0, Some(&view(&mixed))), ZeroStep::Wake(1));
    let quiet = view(&[answer("r1", 0.0, Some(1e4))]);
    assert_eq!(plan(0, 0, Some(&quiet)), ZeroStep::Stay);
    let blind = ZeroView::new(&servers(), Routers::Unconfigured, WINDOW);
    assert_eq!(plan(0, 0, Some(&blind)), ZeroStep::Stay);
}

#[test]
fn a_lower_bound_above_zero_keeps_the_metric_round() {
    let idle = view(&[answer("r1", 0.0, Some(1e4))]);
    assert_eq!(plan(1, 1, Some(&idle)), ZeroStep::Scale { floor: 0 });
    assert_eq!(plan(0, 2, Some(&idle)), ZeroStep::Scale { floor: 0 });
    assert_eq!(plan(1, 0, None), ZeroStep::Scale { floor: 0 });
}

fn q(v: f64) -> Metrics {
    Metrics::from([("q".to_owned(), v)])
}

#[test]
fn heterogeneous_total_wakes_to_one_on_the_cheapest_target_and_keeps_one_while_running() {
    let params = vec![
        TargetParam {
            cost: 10,
            min_replicas: 0,
            max_replicas: 4,
        },
        TargetParam {
            cost: 1,
            min_replicas: 0,
            max_replicas: 2,
        },
    ];
    let mut o = Optimizer::new(params, 200, Behavior::default());
    assert_eq!(o.bounds(), (0, 6));
    let held = view(&[answer("r1", 1.0, Some(0.0))]);
    let ZeroStep::Wake(total) = plan(0, o.bounds().0, Some(&held)) else {
        panic!("a held request wakes the policy");
    };
    assert_eq!(o.distribute(total), [0, 1]);
    // Running with an idle engine (metric 0): the floor keeps one replica.
    let observed = [
        TargetObservation::default(),
        TargetObservation {
            current: 1,
            ready: Some(q(0.0)),
            ..TargetObservation::default()
        },
    ];
    let d = o
        .scale_with_floor(Duration::ZERO, 0.1, &q(10.0), &observed, 1)
        .expect("a metric value");
    assert_eq!((d.total.corrected, d.replicas), (1, vec![0, 1]));
    let unfloored = o.scale(Duration::from_secs(1), 0.1, &q(10.0), &observed);
    assert_eq!(unfloored.expect("a value").total.recommended, 0);
}

fn pd(min: i32, max: i32) -> RoleParam {
    RoleParam {
        bounds: Bounds { min, max },
        targets: q(10.0),
    }
}

#[test]
fn roles_wake_together_with_the_ratio_and_keep_one_each_while_running() {
    let roles = BTreeMap::from([
        ("decode".to_owned(), pd(0, 8)),
        ("prefill".to_owned(), pd(0, 8)),
    ]);
    let ratio = RoleRatio {
        numerator: "prefill".to_owned(),
        denominator: "decode".to_owned(),
        bounds: RatioBounds {
            min: Ratio::new(2, 1).unwrap(),
            max: Ratio::new(3, 1).unwrap(),
        },
    };
    let mut s = RolesScaler::new(roles, Some(ratio), Behavior::default()).unwrap();
    let woken = s.wake_replicas();
    assert_eq!(
        woken,
        BTreeMap::from([("decode".to_owned(), 1), ("prefill".to_owned(), 2)])
    );
    let idle = |current| RoleObservation {
        current,
        ready: q(0.0),
        ..RoleObservation::default()
    };
    let observed = BTreeMap::from([
        ("decode".to_owned(), idle(1)),
        ("prefill".to_owned(), idle(2)),
    ]);
    let d = s
        .scale_with_floor(Duration::ZERO, 0.1, &observed, 1)
        .expect("values");
    let replicas: Vec<i32> = d.roles.iter().map(|r| r.replicas).collect();
    assert_eq!(replicas, [1, 2]);
}
