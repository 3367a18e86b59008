use super::*;

#[tokio::test(start_paused = true)]
async fn labels_are_hashed_capped_and_expire() {
    let l = UserLabels::default();
    l.configure(UserLabelConfig {
        max_users: 2,
        idle_timeout: Duration::from_secs(60),
        raw: false,
    });
    let (a, _) = l.label("m", "alice");
    assert_eq!(a, label_of("alice", &UserLabelConfig::default()));
    assert!(a.starts_with("u-") && a.len() == 18, "{a}");
    assert_eq!(l.label("m", "bob").0.len(), 18);
    assert_eq!(l.label("m", "carol").0, OTHER);
    assert_eq!(l.label("m2", "alice").0, a);
    tokio::time::advance(Duration::from_secs(30)).await;
    l.label("m", "bob");
    tokio::time::advance(Duration::from_secs(30)).await;
    // alice and `other` are idle for 60 s: gone, and carol fits.
    let mut gone = l.expire_idle();
    gone.sort();
    let mut want = [
        ("m".to_owned(), a.clone()),
        ("m".to_owned(), OTHER.to_owned()),
        ("m2".to_owned(), a),
    ];
    want.sort();
    assert_eq!(gone, want);
    assert_ne!(l.label("m", "carol").0, OTHER);
}

#[test]
fn raw_labels_are_cut_at_a_character_boundary() {
    let cfg = UserLabelConfig {
        raw: true,
        ..UserLabelConfig::default()
    };
    assert_eq!(label_of("bob", &cfg), "bob");
    let long = format!("{}é{}", "a".repeat(63), "b".repeat(4000));
    assert_eq!(label_of(&long, &cfg), "a".repeat(63));
}
