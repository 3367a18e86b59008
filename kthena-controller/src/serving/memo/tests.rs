use super::*;
use crate::testutil::sample;

#[test]
fn a_warning_is_first_once_per_note_and_generation() -> crate::testutil::TestResult {
    let mut ms = sample()?;
    let warned = Memo::<Warnings>::default();
    assert!(warned.first_warning(&ms, "FailedCreate", "a"));
    assert!(!warned.first_warning(&ms, "FailedCreate", "a"));
    assert!(warned.first_warning(&ms, "FailedCreate", "b"));
    assert!(warned.first_warning(&ms, "PluginFailed", "a"));
    // A note seen before in this generation stays published, whatever came between.
    assert!(!warned.first_warning(&ms, "FailedCreate", "a"));
    ms.metadata.generation = Some(4);
    assert!(warned.first_warning(&ms, "FailedCreate", "a"));
    // Another object (UID) of the same name is another entry; deleting the name forgets both.
    let mut other = ms.clone();
    other.metadata.uid = Some("uid-2".to_owned());
    assert!(warned.first_warning(&other, "FailedCreate", "a"));
    assert_eq!(warned.len(), 2);
    warned.forget(Some("ns2"), "sample");
    assert_eq!(warned.len(), 2);
    warned.forget(Some("ns1"), "sample");
    assert_eq!(warned.len(), 0);
    assert!(warned.first_warning(&ms, "FailedCreate", "a"));
    Ok(())
}

#[test]
fn not_created_pods_are_forgotten_once_seen_or_at_a_new_generation() -> crate::testutil::TestResult
{
    let mut ms = sample()?;
    let refused = Memo::<NotCreated>::default();
    assert!(refused.still_missing(&ms, []).is_empty());
    refused.not_created(&ms, ["p-1".to_owned(), "p-2".to_owned()]);
    let want: BTreeSet<String> = ["p-1".to_owned(), "p-2".to_owned()].into();
    assert_eq!(refused.still_missing(&ms, ["p-0"]), want);
    assert_eq!(
        refused.still_missing(&ms, ["p-0", "p-1"]),
        ["p-2".to_owned()].into()
    );
    // Seen once: forgotten, even when it is missing again later (then it is lost).
    assert_eq!(
        refused.still_missing(&ms, ["p-0"]),
        ["p-2".to_owned()].into()
    );
    ms.metadata.generation = Some(4);
    assert!(refused.still_missing(&ms, []).is_empty());
    Ok(())
}
