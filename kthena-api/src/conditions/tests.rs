use super::*;

fn at(secs: i64) -> Time {
    Time(k8s_openapi::jiff::Timestamp::from_second(secs).unwrap_or_default())
}

#[test]
fn set_status_condition_keeps_the_time_while_the_status_stays() {
    let mut list = vec![condition(
        "Ready",
        true,
        "Ok",
        "fine".into(),
        Some(1),
        at(1),
    )];
    set_status_condition(
        &mut list,
        condition("Ready", true, "Still", "still fine".into(), Some(2), at(2)),
    );
    assert_eq!(list.len(), 1);
    assert_eq!(
        (list[0].reason.as_str(), list[0].message.as_str()),
        ("Still", "still fine")
    );
    assert_eq!(
        (list[0].observed_generation, &list[0].last_transition_time),
        (Some(2), &at(1))
    );
    set_status_condition(
        &mut list,
        condition("Ready", false, "Down", "down".into(), None, at(3)),
    );
    assert_eq!(
        (list[0].status.as_str(), &list[0].last_transition_time),
        ("False", &at(3))
    );
    set_status_condition(
        &mut list,
        condition("Other", true, "R", String::new(), None, at(4)),
    );
    assert_eq!(list.len(), 2);
}

#[test]
fn keep_transition_times_only_for_unchanged_conditions() {
    let old = vec![
        condition("A", true, "R", "m".into(), None, at(1)),
        condition("B", true, "R", "m".into(), None, at(1)),
    ];
    let new = vec![
        condition("A", true, "R", "m".into(), Some(3), at(5)),
        condition("B", true, "R", "other".into(), None, at(5)),
    ];
    let kept = keep_transition_times(&old, new);
    assert_eq!(kept[0].last_transition_time, at(1));
    assert_eq!(kept[1].last_transition_time, at(5));
    assert!(same_conditions(&old[..1], &kept[..1]));
    assert!(!same_conditions(&old, &kept));
}
