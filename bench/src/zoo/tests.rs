use super::*;

#[test]
fn registry_names_are_unique_and_build() {
    let names = names();
    let mut sorted = names.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), names.len());
    assert_eq!(
        names,
        [
            "long",
            "short",
            "both",
            "agent",
            "zipf",
            "saturation",
            "wide8",
            "wide16",
            "hetero",
            "pd",
            "overhead",
            "soak",
            "prompt-cost"
        ]
    );
    for e in REGISTRY {
        assert!(!(e.build)(true, 1).is_empty(), "{}", e.name);
    }
    let sat: Vec<String> = (find("saturation").unwrap().build)(true, 1)
        .into_iter()
        .map(|s| s.name)
        .collect();
    assert_eq!(sat, ["saturation-near", "saturation-over"]);
}
