use super::*;

#[test]
fn suggestions_are_close_names_only() {
    let known = &["blockSizeToHash", "maxBlocksToMatch", "maxHashCacheSize"];
    assert_eq!(
        suggest("blockSizeToHas", known).as_deref(),
        Some("blockSizeToHash")
    );
    assert_eq!(
        suggest("maxblockstomatch", known).as_deref(),
        Some("maxBlocksToMatch")
    );
    assert_eq!(suggest("port", known), None);
    assert_eq!(join("", "."), ".");
    assert_eq!(join("scheduler", "."), "scheduler");
    assert_eq!(
        join("scheduler", "plugins.Score"),
        "scheduler.plugins.Score"
    );
}
