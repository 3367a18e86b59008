use super::*;
use kthena_api::workload::ModelServingStatus;
use std::collections::BTreeMap;

fn time(s: i64) -> Time {
    Time(k8s_openapi::jiff::Timestamp::from_second(s).unwrap_or_default())
}

fn meta(name: &str, rev: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_owned()),
        labels: Some(BTreeMap::from([(
            REVISION_LABEL.to_owned(),
            rev.to_owned(),
        )])),
        ..ObjectMeta::default()
    }
}

fn children() -> Children {
    let mut c = Children {
        serving: ModelServing::default(),
        server: ModelServer::default(),
        route: ModelRoute::default(),
    };
    c.serving.metadata = meta("b-be", "r1");
    c.server.metadata = meta("b-be", "s1");
    c.route.metadata = meta("b", "t1");
    c.route.spec.model_name = "m".to_owned();
    c
}

#[test]
fn only_missing_or_outdated_children_are_written() {
    let want = children();
    let none = writes(&want, &Existing::default());
    assert_eq!((none.serving, none.server, none.route), (true, true, true));
    let old = ModelServing {
        metadata: meta("b-old", "r0"),
        ..ModelServing::default()
    };
    let existing = Existing {
        servings: vec![want.serving.clone(), old],
        server: Some(want.server.clone()),
        route: Some(want.route.clone()),
        other_servers: vec!["b-old".to_owned()],
    };
    let w = writes(&want, &existing);
    assert_eq!(
        w,
        Writes {
            delete_servings: vec!["b-old".to_owned()],
            delete_servers: vec!["b-old".to_owned()],
            ..Writes::default()
        }
    );
    let mut renamed = want.route.clone();
    renamed.spec.model_name = "other".to_owned();
    let mut changed = want.server.clone();
    changed.metadata = meta("b-be", "s0");
    let existing = Existing {
        servings: vec![want.serving.clone()],
        server: Some(changed),
        route: Some(renamed),
        other_servers: Vec::new(),
    };
    let w = writes(&want, &existing);
    assert_eq!(
        (w.serving, w.server, w.recreate_route, w.route),
        (false, true, true, true)
    );
}

#[test]
fn conditions_follow_go() {
    let mut b = ModelBooster::default();
    b.metadata.generation = Some(3);
    let st = status(&b, &Outcome::Written(Some(false)), &time(10));
    let summary: Vec<_> = st
        .conditions
        .iter()
        .map(|c| (c.type_.as_str(), c.status.as_str(), c.reason.as_str()))
        .collect();
    assert_eq!(
        summary,
        [
            ("Initialized", "True", "ModelCreating"),
            ("Active", "False", "ModelProcessing")
        ]
    );
    assert_eq!(st.observed_generation, Some(3));
    b.status = Some(st);
    let st = status(&b, &Outcome::Failed("boom".to_owned()), &time(20));
    assert_eq!(st.conditions.len(), 3);
    assert_eq!(st.conditions[2].message, "boom");
    // Active stays False: its transition time is the first one.
    assert_eq!(st.conditions[1].last_transition_time, time(10));
    b.status = Some(st);
    let st = status(&b, &Outcome::Written(Some(true)), &time(30));
    let active = &st.conditions[1];
    assert_eq!(
        (active.status.as_str(), active.reason.as_str()),
        ("True", "ModelAvailable")
    );
    assert_eq!(active.last_transition_time, time(30));
    assert_eq!(st.conditions[2].status, "True", "Go never clears Failed");
    assert_eq!(st.conditions[0].last_transition_time, time(10));
}

#[test]
fn availability_is_the_available_condition() {
    let mut ms = ModelServing::default();
    assert!(!serving_available(&ms));
    ms.status = Some(ModelServingStatus {
        conditions: vec![condition("Available", true, "AllGroupsReady", "", &time(1))],
        ..ModelServingStatus::default()
    });
    assert!(serving_available(&ms));
}
