use super::*;

#[test]
fn owner_and_key_layout() {
    assert_eq!(owner_of(&EndpointId::new("prod/vllm-0")), "vllm-0.prod");
    assert_eq!(owner_of(&EndpointId::new("plain")), "plain");
    assert_eq!(block_key("qwen", 42), "matrix:kv:block:qwen@42");
    // hashlib.sha256(struct.pack(">II", 1, 2)) starts with 0f585dd518ed0644.
    assert_eq!(kthena_block_hash(&[1, 2]), 0x0f58_5dd5_18ed_0644);
    // sha256(00000001) starts with b40711a88c703975: the top bit is cleared.
    assert_eq!(kthena_block_hash(&[1]), 0x3407_11a8_8c70_3975);
}

fn pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
    v.iter()
        .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
        .collect()
}

#[test]
fn owners_written_at_or_before_the_container_start_are_dropped() {
    let started = |owner: &str| match owner {
        "a.ns" => Some(1_000),
        "zero.ns" => Some(0),
        _ => None,
    };
    let fields = pairs(&[
        ("a.ns", "999"),     // before the restart: dropped
        ("a.ns", "1000"),    // the same second: dropped (may precede the restart)
        ("a.ns", "1001"),    // after: kept
        ("a.ns", "1e3"),     // unparsable: kept, as Go
        ("zero.ns", "5"),    // a start of 0 is no start
        ("unknown.ns", "1"), // no known start: kept
    ]);
    assert_eq!(
        fresh_owners(fields, started),
        ["a.ns", "a.ns", "zero.ns", "unknown.ns"]
    );
    assert!(written_before_start("-1", Some(1)));
    assert!(!written_before_start(" 1", Some(5)));
}
