use super::GoDuration;

#[test]
fn durations_go_refuses_are_errors() {
    for text in ["", " ", "99999999999h", "2562048h"] {
        assert!(
            GoDuration::new(text).parse().is_err(),
            "{text:?} was accepted"
        );
    }
    for text in ["0", "0s", "100ms", "1m30s", "2562047h"] {
        assert!(
            GoDuration::new(text).parse().is_ok(),
            "{text:?} was refused"
        );
    }
}

/// Found by the `router_config` fuzz target: kube-core's parser panics on components
/// beyond `std::time::Duration`'s range and on a sign inside the text.
#[test]
fn huge_components_and_inner_signs_are_errors_not_panics() {
    let err = |text: &str| GoDuration::new(text).parse().unwrap_err().to_string();
    assert_eq!(
        err("88888888888888888888888888888h88888888888888888\"k"),
        "invalid duration \"88888888888888888888888888888h88888888888888888\\\"k\": larger than the maximum Go duration (2562047h47m16.854775807s)"
    );
    assert_eq!(
        err("2562047h47m17s"),
        "invalid duration \"2562047h47m17s\": larger than the maximum Go duration (2562047h47m16.854775807s)"
    );
    assert_eq!(
        err("1h-5m"),
        "invalid duration \"1h-5m\": a sign is allowed only at the start"
    );
    assert_eq!(err("-1s"), "invalid duration \"-1s\": must not be negative");
    assert_eq!(
        GoDuration::new("1h30m0.5s").parse().unwrap(),
        std::time::Duration::from_millis(5_400_500)
    );
}
