use k8s_openapi::api::core::v1::{ContainerStatus, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kthena_api::workload::PodMetricSource;

use super::*;

fn pod(phase: &str, restarts: i32) -> Pod {
    let mut p = Pod::default();
    p.metadata.labels = Some([("tier".to_owned(), "gpu".to_owned())].into());
    p.status = Some(PodStatus {
        phase: Some(phase.to_owned()),
        container_statuses: Some(vec![ContainerStatus {
            restart_count: restarts,
            ..ContainerStatus::default()
        }]),
        ..PodStatus::default()
    });
    p
}

#[test]
fn failed_restarted_or_deleted_pods_make_the_group_unusable() {
    assert!(!unusable(&pod("Running", 0)));
    assert!(!unusable(&pod("Pending", 0)));
    assert!(unusable(&pod("Failed", 0)));
    // Any restart, even of a pod that is Running and Ready again (as Go).
    assert!(unusable(&pod("Running", 1)));
    let mut deleted = pod("Running", 0);
    deleted.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::now()));
    assert!(unusable(&deleted));
}

#[test]
fn pod_sources_select_by_match_labels() {
    let source = |labels: &[(&str, &str)]| MetricSource {
        pod: Some(PodMetricSource {
            label_selector: Some(
                k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector {
                    match_labels: Some(
                        labels
                            .iter()
                            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                            .collect(),
                    ),
                    ..Default::default()
                },
            ),
            ..PodMetricSource::default()
        }),
        prometheus: None,
    };
    let p = pod("Running", 0);
    assert!(selected(&p, &MetricSource::default()));
    assert!(selected(&p, &source(&[("tier", "gpu")])));
    assert!(!selected(&p, &source(&[("tier", "cpu")])));
    assert!(!selected(&p, &source(&[("tier", "gpu"), ("zone", "a")])));
}

#[test]
fn match_expressions_select_as_kubernetes_label_selectors() {
    type Exprs<'a> = &'a [(&'a str, &'a str, &'a [&'a str])];
    type Pairs<'a> = &'a [(&'a str, &'a str)];
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;
    let sel = |exprs: Exprs<'_>, pairs: Pairs<'_>| LabelSelector {
        match_labels: (!pairs.is_empty()).then(|| {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect()
        }),
        match_expressions: Some(
            exprs
                .iter()
                .map(|(key, op, values)| LabelSelectorRequirement {
                    key: (*key).to_owned(),
                    operator: (*op).to_owned(),
                    values: (!values.is_empty())
                        .then(|| values.iter().map(|v| (*v).to_owned()).collect()),
                })
                .collect(),
        ),
    };
    let labels: BTreeMap<String, String> = [("tier", "gpu"), ("zone", "a")]
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .into();
    let cases: [(Exprs<'_>, Pairs<'_>, bool); 12] = [
        (&[("tier", "In", &["gpu", "tpu"])], &[], true),
        (&[("tier", "In", &["cpu"])], &[], false),
        (&[("absent", "In", &["x"])], &[], false),
        (&[("tier", "NotIn", &["cpu"])], &[], true),
        (&[("tier", "NotIn", &["gpu"])], &[], false),
        // NotIn matches a pod without the label.
        (&[("absent", "NotIn", &["x"])], &[], true),
        (&[("zone", "Exists", &[])], &[], true),
        (&[("absent", "Exists", &[])], &[], false),
        (&[("absent", "DoesNotExist", &[])], &[], true),
        (&[("zone", "DoesNotExist", &[])], &[], false),
        // Every requirement and every pair must hold.
        (&[("zone", "Exists", &[])], &[("tier", "cpu")], false),
        (&[("tier", "Gt", &["1"])], &[], false),
    ];
    for (exprs, pairs, want) in cases {
        assert_eq!(
            matches(&sel(exprs, pairs), &labels),
            want,
            "{exprs:?} {pairs:?}"
        );
    }
}
