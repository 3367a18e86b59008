use super::*;

fn ip() -> IpAddr {
    "10.1.2.3".parse().unwrap()
}

#[test]
fn kthenas_vllm_example_is_read_through_sh_c() {
    // examples/model-serving/gpu-kvcache-aware.yaml (Go Kthena): a multi-line script with
    // backslash continuations, the JSON in single quotes.
    let script = "python3 -m vllm.entrypoints.openai.api_server \\\n--host \"0.0.0.0\" \\\n--port \"8000\" \\\n--served-model-name Qwen/Qwen3-0.6B \\\n--kv-events-config '{\"enable_kv_cache_events\":true,\"topic\":\"kv-events\"}'\n";
    let cfg = PublisherConfig::from_command(&["sh", "-c", script])
        .unwrap()
        .unwrap();
    assert_eq!(cfg.endpoint, "tcp://*:5557");
    assert_eq!(cfg.topic, "kv-events");
    assert_eq!(cfg.replay_endpoint, None);
    assert_eq!(cfg.address_at(ip()).unwrap(), "tcp://10.1.2.3:5557");
    assert_eq!(cfg.port().unwrap(), 5557);
}

#[test]
fn kthenas_sglang_example_names_the_publisher() {
    let args = [
        "python3",
        "-m",
        "sglang.launch_server",
        "--kv-events-config",
        r#"{"publisher":"zmq","endpoint":"tcp://*:6000","topic":"","replay_endpoint":"tcp://*:6001"}"#,
    ];
    let cfg = PublisherConfig::from_command(&args).unwrap().unwrap();
    assert_eq!(cfg.address_at(ip()).unwrap(), "tcp://10.1.2.3:6000");
    assert_eq!(
        cfg.replay_address_at(ip()).unwrap().as_deref(),
        Some("tcp://10.1.2.3:6001")
    );
    assert_eq!(cfg.replay_port().unwrap(), Some(6001));
}

#[test]
fn equals_and_dotted_forms_are_read() {
    let eq = PublisherConfig::from_command(&[
        "vllm",
        "serve",
        "m",
        r#"--kv-events-config={"enable_kv_cache_events":true,"endpoint":"tcp://*:7000"}"#,
    ])
    .unwrap()
    .unwrap();
    assert_eq!(eq.port().unwrap(), 7000);
    let dotted = PublisherConfig::from_command(&[
        "vllm",
        "serve",
        "m",
        "--kv-events-config.enable_kv_cache_events",
        "true",
        "--kv-events-config.endpoint=tcp://*:7001",
    ])
    .unwrap()
    .unwrap();
    assert_eq!(dotted.endpoint, "tcp://*:7001");
}

#[test]
fn a_null_or_disabled_publisher_publishes_nothing() {
    for json in [
        r#"{"enable_kv_cache_events":false}"#,
        r#"{}"#,
        r#"{"publisher":"null","enable_kv_cache_events":true}"#,
    ] {
        assert_eq!(PublisherConfig::from_json(json).unwrap(), None, "{json}");
    }
    assert_eq!(
        PublisherConfig::from_command(&["vllm", "serve", "m"]).unwrap(),
        None
    );
}

#[test]
fn bad_values_are_errors_naming_the_value() {
    let e = PublisherConfig::from_json("{not json").unwrap_err();
    assert!(e.to_string().contains("{not json"), "{e}");
    let e = PublisherConfig::from_json("[1]").unwrap_err();
    assert!(e.to_string().contains("not a JSON object"), "{e}");
    let e = PublisherConfig::from_json(r#"{"publisher":"zmq","endpoint":5}"#).unwrap_err();
    assert!(matches!(e, Error::KvEventsConfig { .. }), "{e}");
    let e = PublisherConfig::from_command(&["sh", "-c", "vllm serve 'unbalanced"]).unwrap_err();
    assert!(e.to_string().contains("unbalanced"), "{e}");
}

#[test]
fn a_connecting_or_local_endpoint_cannot_be_subscribed_to() {
    let connect = PublisherConfig::from_json(
        r#"{"enable_kv_cache_events":true,"endpoint":"tcp://relay.example:5557"}"#,
    )
    .unwrap()
    .unwrap();
    assert!(!connect.binds());
    let e = connect.address_at(ip()).unwrap_err();
    assert!(e.to_string().contains("tcp://*:PORT"), "{e}");
    let ipc =
        PublisherConfig::from_json(r#"{"enable_kv_cache_events":true,"endpoint":"ipc:///tmp/kv"}"#)
            .unwrap()
            .unwrap();
    assert!(ipc.binds());
    assert!(ipc.address_at(ip()).is_err());
    let local = PublisherConfig::from_json(
        r#"{"enable_kv_cache_events":true,"replay_endpoint":"tcp://127.0.0.1:5558"}"#,
    )
    .unwrap()
    .unwrap();
    assert!(local.replay_address_at(ip()).is_err());
}

#[test]
fn ipv6_engines_get_bracketed_addresses() {
    let cfg = PublisherConfig::from_json(
        r#"{"enable_kv_cache_events":true,"endpoint":"tcp://[::]:5557","replay_endpoint":"tcp://[::]:5558"}"#,
    )
    .unwrap()
    .unwrap();
    let ip: IpAddr = "fd00::7".parse().unwrap();
    assert_eq!(cfg.address_at(ip).unwrap(), "tcp://[fd00::7]:5557");
    assert_eq!(
        cfg.replay_address_at(ip).unwrap().as_deref(),
        Some("tcp://[fd00::7]:5558")
    );
}

#[test]
fn annotations_take_a_port_or_an_endpoint() {
    let cfg = PublisherConfig::from_annotations("5557", Some("tcp://*:5558")).unwrap();
    assert_eq!(cfg.address_at(ip()).unwrap(), "tcp://10.1.2.3:5557");
    assert_eq!(
        cfg.replay_address_at(ip()).unwrap().as_deref(),
        Some("tcp://10.1.2.3:5558")
    );
    assert!(PublisherConfig::from_annotations("five", None).is_err());
}

#[test]
fn vllm_spellings_underscores_and_capitalised_booleans_are_read() {
    let cfg = PublisherConfig::from_command(&[
        "vllm",
        "serve",
        "m",
        "--kv_events_config",
        r#"{"enable_kv_cache_events":true,"endpoint":"tcp://*:7100"}"#,
    ])
    .unwrap()
    .unwrap();
    assert_eq!(cfg.port().unwrap(), 7100);
    let cfg = PublisherConfig::from_command(&[
        "vllm",
        "serve",
        "m",
        "--kv-events-config.enable_kv_cache_events=True",
    ])
    .unwrap()
    .unwrap();
    assert_eq!(cfg.endpoint, DEFAULT_ENDPOINT);
}

#[test]
fn an_annotation_on_0_0_0_0_means_every_address() {
    let cfg = PublisherConfig::from_annotations("tcp://0.0.0.0:5557", None).unwrap();
    assert!(cfg.binds());
    assert_eq!(cfg.address_at(ip()).unwrap(), "tcp://10.1.2.3:5557");
}
