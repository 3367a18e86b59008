use super::*;
use crate::ratio::Ratio;

fn q(v: f64) -> Metrics {
    Metrics::from([("q".to_owned(), v)])
}

fn role(min: i32, max: i32) -> RoleParam {
    RoleParam {
        bounds: Bounds { min, max },
        targets: q(10.0),
    }
}

fn pd_ratio(min: u64, max: u64, den: u64) -> Option<RoleRatio> {
    Some(RoleRatio {
        numerator: "prefill".to_owned(),
        denominator: "decode".to_owned(),
        bounds: RatioBounds {
            min: Ratio::new(min, den).unwrap(),
            max: Ratio::new(max, den).unwrap(),
        },
    })
}

fn observe(current: i32, load: f64) -> RoleObservation {
    RoleObservation {
        current,
        unready: 0,
        ready: q(load),
        external: Metrics::new(),
    }
}

fn scaler(decode: RoleParam, ratio: Option<RoleRatio>) -> RolesScaler {
    let roles = BTreeMap::from([
        ("decode".to_owned(), decode),
        ("prefill".to_owned(), role(1, 10)),
    ]);
    RolesScaler::new(roles, ratio, Behavior::default()).unwrap()
}

fn summary(d: &RolesDecision) -> Vec<(&str, i32, i32, i32, i32)> {
    d.roles
        .iter()
        .map(|r| {
            (
                r.name.as_str(),
                r.current,
                r.recommended,
                r.corrected,
                r.replicas,
            )
        })
        .collect()
}

#[test]
fn roles_scale_independently_then_the_ratio_raises_the_deficient_role() {
    let mut s = scaler(role(1, 10), pd_ratio(1, 2, 2));
    let observed = BTreeMap::from([
        ("decode".to_owned(), observe(2, 80.0)),
        ("prefill".to_owned(), observe(2, 10.0)),
    ]);
    let d = s.scale(Duration::ZERO, 0.1, &observed).expect("metrics");
    // decode: 8 recommended, limited to Or(2 + 4, 2 + 2) = 6; prefill: 1 (unlimited
    // scale-down). 1/6 < 0.5 ⇒ prefill raised to ceil(0.5 × 6) = 3.
    assert_eq!(
        summary(&d),
        vec![("decode", 2, 8, 6, 6), ("prefill", 2, 1, 1, 3)]
    );
    assert_eq!((d.ratio_adjusted, d.ratio_satisfied), (true, true));
    assert_eq!(d.current_ratio.as_deref(), Some("0.5"));
    assert!(d.roles.iter().all(|r| r.mode == Mode::Stable));
    assert_eq!(
        s.role_names().collect::<Vec<_>>(),
        vec!["decode", "prefill"]
    );
}

#[test]
fn histories_record_the_pre_ratio_values() {
    let mut s = scaler(role(1, 10), pd_ratio(1, 2, 2));
    let round = |s: &mut RolesScaler, t, prefill_current| {
        let observed = BTreeMap::from([
            ("decode".to_owned(), observe(6, 60.0)),
            ("prefill".to_owned(), observe(prefill_current, 10.0)),
        ]);
        s.scale(Duration::from_secs(t), 0.1, &observed)
            .expect("metrics")
    };
    round(&mut s, 0, 2);
    // prefill was patched to 3 by the ratio; its own history holds recommendation 1 and
    // corrected 1, so its scale-down is not held at 3 by the stabilization window.
    let d = round(&mut s, 15, 3);
    assert_eq!(summary(&d)[1], ("prefill", 3, 1, 1, 3));
}

#[test]
fn a_role_without_metrics_skips_the_whole_round() {
    let mut s = scaler(role(1, 10), pd_ratio(1, 2, 2));
    let only_decode = BTreeMap::from([("decode".to_owned(), observe(2, 80.0))]);
    assert_eq!(s.scale(Duration::ZERO, 0.1, &only_decode), None);
    let no_value = BTreeMap::from([
        ("decode".to_owned(), observe(2, 80.0)),
        (
            "prefill".to_owned(),
            RoleObservation {
                current: 2,
                ..RoleObservation::default()
            },
        ),
    ]);
    assert_eq!(s.scale(Duration::ZERO, 0.1, &no_value), None);
}

#[test]
fn fixed_roles_are_not_autoscaled_and_need_no_metrics() {
    let mut s = scaler(role(4, 4), None);
    assert!(s.is_fixed("decode") && !s.is_fixed("prefill"));
    let observed = BTreeMap::from([("prefill".to_owned(), observe(1, 30.0))]);
    let d = s.scale(Duration::ZERO, 0.1, &observed).expect("metrics");
    assert_eq!(
        summary(&d),
        vec![("decode", 0, 4, 4, 4), ("prefill", 1, 3, 3, 3)]
    );
    assert_eq!(
        (d.ratio_adjusted, d.ratio_satisfied, d.current_ratio),
        (false, true, None)
    );
}

#[test]
fn unknown_ratio_roles_are_errors() {
    let roles = BTreeMap::from([("decode".to_owned(), role(1, 4))]);
    let err = RolesScaler::new(roles, pd_ratio(1, 2, 2), Behavior::default()).unwrap_err();
    assert_eq!(err, Error::UnknownRole("prefill".to_owned()));
}
