use super::*;
use crate::testutil::observed_pod;

#[test]
fn groups_pods_by_labels_and_owner() {
    let pods = vec![
        observed_pod("sample", "sample-1", "prefill", 0, 0, true, None),
        observed_pod("sample", "sample-1", "prefill", 0, 1, false, Some("5")),
        observed_pod("sample", "sample-1", "decode", 2, 0, true, Some("bad")),
        observed_pod("other", "other-0", "decode", 0, 0, true, None),
    ];
    let mut foreign = observed_pod("sample", "sample-3", "decode", 0, 0, true, None);
    foreign.metadata.owner_references.get_or_insert_default()[0].uid = "uid-old".to_owned();
    let mut all = pods;
    all.push(foreign);
    let seen = Observed::new("sample", "uid-1", &all, &[]);
    assert_eq!(seen.groups.keys().copied().collect::<Vec<_>>(), [1]);
    let g = &seen.groups[&1];
    assert_eq!(g.name, "sample-1");
    assert_eq!(g.revision, crate::testutil::sample_revision());
    let prefill = &g.roles["prefill"][&0];
    assert_eq!(
        (prefill.pods.len(), prefill.ready, prefill.deletion_cost),
        (2, 1, 5)
    );
    assert_eq!(g.roles["decode"][&2].deletion_cost, 0);
    assert_eq!(g.deletion_cost(), 5);
    assert_eq!(
        seen.foreign.iter().collect::<Vec<_>>(),
        ["sample-3-decode-0-0"]
    );
}
