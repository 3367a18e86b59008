//! Tests of the router configuration: defaults, keys, validation.

use std::collections::HashMap;

use super::*;

const FILE: &str = r#"
port: 18080
metricsScrapeInterval: 250ms
accessLog: {format: json}
scheduler:
  pluginConfig:
  - name: least-request
    args: {maxWaitingRequests: 10}
  plugins:
    Filter:
      enabled: [least-request]
    Score:
      enabled:
      - {name: least-request, weight: 1}
standalone:
  manifests: [manifests/]
  endpoints:
  - name: sim-a
    address: 127.0.0.1:8001
    labels: {app: demo}
  - name: sim-b
    address: "[::1]:8002"
    labels: {app: demo}
    kvEvents: tcp://127.0.0.1:5557
"#;

#[test]
fn parses_file_env_and_defaults() {
    let path = Path::new("/etc/kthena/router.yaml");
    let cfg = Config::from_yaml(path, FILE)
        .unwrap()
        .validate(path)
        .unwrap();
    assert_eq!(cfg.port, 18080);
    assert_eq!(cfg.metrics_port, 9090);
    assert_eq!(cfg.debug_port, 15000);
    assert_eq!(cfg.metrics_scrape_interval, Duration::from_millis(250));
    assert_eq!(cfg.access_log.format, AccessLogFormat::Json);
    assert!(cfg.access_log.enabled);
    assert!(!cfg.is_cluster_mode());
    assert_eq!(cfg.endpoints()[1].address, "[::1]:8002");
    assert_eq!(cfg.endpoints()[1].namespace, "default");
    assert_eq!(
        cfg.endpoints()[1].kv_events.as_deref(),
        Some("tcp://127.0.0.1:5557")
    );
    assert_eq!(
        cfg.manifest_paths(),
        vec![PathBuf::from("/etc/kthena/manifests/")]
    );

    let env: HashMap<String, String> = [
        ("METRICS_SCRAPE_INTERVAL", "2s"),
        ("ACCESS_LOG_ENABLED", "false"),
        ("ACCESS_LOG_FORMAT", "text"),
        ("ACCESS_LOG_OUTPUT", "/tmp/x.log"),
        ("DRAIN_TIMEOUT", "1m30s"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    // The keys the file sets win (Go's chart sets the variables on every install); the
    // others take the variables.
    assert_eq!(cfg.file_keys, ["metricsScrapeInterval", "accessLog.format"]);
    let cfg = cfg.apply_env(&env).unwrap();
    assert_eq!(cfg.metrics_scrape_interval, Duration::from_millis(250));
    assert_eq!(cfg.access_log.format, AccessLogFormat::Json);
    assert!(!cfg.access_log.enabled);
    assert_eq!(cfg.access_log.output, "/tmp/x.log");
    assert_eq!(cfg.drain_timeout, Duration::from_secs(90));
    let cfg = Config::default().apply_env(&env).unwrap();
    assert_eq!(cfg.metrics_scrape_interval, Duration::from_secs(2));
    assert_eq!(cfg.access_log.format, AccessLogFormat::Text);
}

#[test]
fn rejects_bad_values() {
    let path = Path::new("r.yaml");
    let bad_env: HashMap<String, String> =
        [("METRICS_SCRAPE_INTERVAL".to_owned(), "0s".to_owned())]
            .into_iter()
            .collect();
    assert!(matches!(
        Config::default().apply_env(&bad_env),
        Err(Error::Env {
            name: "METRICS_SCRAPE_INTERVAL",
            ..
        })
    ));
    let bad_env: HashMap<String, String> = [("ACCESS_LOG_FORMAT".to_owned(), "xml".to_owned())]
        .into_iter()
        .collect();
    assert!(Config::default().apply_env(&bad_env).is_err());

    let dup = "standalone:\n  endpoints:\n  - {name: a, address: '127.0.0.1:1'}\n  - {name: a, address: '127.0.0.1:2'}\n";
    let e = Config::from_yaml(path, dup)
        .unwrap()
        .validate(path)
        .unwrap_err();
    assert!(
        e.to_string().contains("standalone.endpoints[1].name"),
        "{e}"
    );
    let noport = "standalone:\n  endpoints:\n  - {name: a, address: '127.0.0.1'}\n";
    let e = Config::from_yaml(path, noport)
        .unwrap()
        .validate(path)
        .unwrap_err();
    assert!(
        e.to_string().contains("standalone.endpoints[0].address"),
        "{e}"
    );
    assert!(Config::from_yaml(path, "port: [1]\n").is_err());
    assert!(
        Config::from_yaml(path, "port: 1\n")
            .unwrap()
            .is_cluster_mode()
    );
    assert!(Config::from_yaml(path, "").unwrap().is_cluster_mode());
    assert!(
        !Config::from_yaml(path, "standalone: {}\n")
            .unwrap()
            .is_cluster_mode()
    );
    assert!(Config::from_yaml(path, "metricsScrapeInterval: soon\n").is_err());
}

/// The reason of the error loading and validating `yaml` as `r.yaml`.
fn load_error(yaml: &str) -> String {
    let path = Path::new("r.yaml");
    match Config::from_yaml(path, yaml).and_then(|c| c.validate(path)) {
        Ok(_) => panic!("{yaml}: loaded"),
        Err(Error::Config { reason, .. }) => reason,
        Err(e) => panic!("{yaml}: {e:?}"),
    }
}

#[test]
fn misspelled_keys_at_every_level_name_path_and_suggestion() {
    let cases = [
        (
            "metricPort: 1\n",
            "unknown key `metricPort`: did you mean `metricsPort`?",
        ),
        (
            "accessLog: {formt: json}\n",
            "unknown key `accessLog.formt`: did you mean `format`?",
        ),
        (
            "standalone: {manifest: []}\n",
            "unknown key `standalone.manifest`: did you mean `manifests`?",
        ),
        (
            "standalone:\n  endpoints:\n  - {name: a, adress: '127.0.0.1:1'}\n",
            "unknown key `standalone.endpoints[0].adress`: did you mean `address`?",
        ),
        (
            "kvCache: {redis: {url: 'redis://127.0.0.1:1', timout: 1s}}\n",
            "unknown key `kvCache.redis.timout`: did you mean `timeout`?",
        ),
        (
            "kvCache:\n  tokenizers:\n  - {model: m, tokenizer: t.json, tokenizerConfg: c.json}\n",
            "unknown key `kvCache.tokenizers[0].tokenizerConfg`: did you mean `tokenizerConfig`?",
        ),
        (
            "scheduler:\n  plugins:\n    Score:\n      enabled:\n      - {name: gpu-usage, wieght: 1}\n",
            "unknown key `scheduler.plugins.Score.enabled[0].wieght`: did you mean `weight`?",
        ),
        (
            "scheduler:\n  pluginConfig:\n  - name: prefix-cache\n    args: {blockSizeToHas: 16}\n  plugins:\n    Score:\n      enabled: [{name: prefix-cache}]\n",
            "unknown key `scheduler.pluginConfig[0].args.blockSizeToHas`: did you mean `blockSizeToHash`?",
        ),
        (
            "standalon: {}\n",
            "unknown key `standalon`: did you mean `standalone`?",
        ),
        (
            "listeners: {}\n",
            "unknown key `listeners`: did you mean `listener`?",
        ),
        (
            "listener: {headerReadTimout: 5s}\n",
            "unknown key `listener.headerReadTimout`: did you mean `headerReadTimeout`?",
        ),
        (
            "standalone: {watch: true}\n",
            "unknown key `standalone.watch`: expected one of `manifests`, `endpoints`, `secrets`",
        ),
        (
            "accessLog: {format: jsn}\n",
            "unknown value `jsn` at `accessLog.format`: did you mean `json`?",
        ),
    ];
    for (yaml, want) in cases {
        assert_eq!(load_error(yaml), want, "{yaml}");
    }
    // The whole message names the file once.
    let e = Config::from_yaml(Path::new("/etc/kthena/router.yaml"), "metricPort: 1\n").unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid config /etc/kthena/router.yaml: unknown key `metricPort`: did you mean `metricsPort`?"
    );
}

#[test]
fn sections_of_features_not_built_are_rejected() {
    // `auth:` (Go's keys) is supported now.
    let cfg = Config::from_yaml(
        Path::new("r.yaml"),
        "auth:\n  issuer: https://issuer\n  audiences: [a]\n  jwksUri: https://issuer/jwks.json\n",
    )
    .unwrap();
    assert_eq!(cfg.auth.jwks_uri, "https://issuer/jwks.json");
    assert_eq!(cfg.auth.audiences, ["a"]);
    let env: HashMap<String, String> = [
        ("ENABLE_FAIRNESS_SCHEDULING".to_owned(), "true".to_owned()),
        ("ENABLE_SESSION_BOOST".to_owned(), "true".to_owned()),
    ]
    .into_iter()
    .collect();
    assert!(
        Config::default()
            .apply_env(&env)
            .unwrap_err()
            .to_string()
            .contains("mutually exclusive")
    );
}

#[test]
fn messages_a_user_can_act_on() {
    assert_eq!(
        load_error("port: 1\nport: 2\n"),
        "invalid YAML: duplicate mapping key `port` is not allowed here at line 2, column 1"
    );
    assert_eq!(
        load_error("metricsScrapeInterval: 10\n"),
        "`metricsScrapeInterval`: `10` has no unit: did you mean `10s`?"
    );
    assert_eq!(
        load_error("kvCache: {remoteTokenizeTimeout: 2.5}\n"),
        "`kvCache.remoteTokenizeTimeout`: `2.5` has no unit: did you mean `2.5s`?"
    );
    assert_eq!(
        load_error("drainTimeout: soon\n"),
        "`drainTimeout`: `soon` is not a duration: expected a number with a unit (`ns`, \
             `us`, `ms`, `s`, `m`, `h`), such as `500ms`, `10s` or `1m30s`"
    );
    let env: HashMap<String, String> = [("DRAIN_TIMEOUT".to_owned(), "30".to_owned())]
        .into_iter()
        .collect();
    assert_eq!(
        Config::default().apply_env(&env).unwrap_err().to_string(),
        "invalid environment variable DRAIN_TIMEOUT=\"30\": `30` has no unit: did you mean `30s`?"
    );
    assert_eq!(
        load_error("port: [1]\n"),
        "`port`: invalid type: sequence, expected u16"
    );
    // A file without `standalone:` (cluster mode) and an empty file stay valid.
    let path = Path::new("r.yaml");
    assert_eq!(Config::from_yaml(path, "port: 1\n").unwrap().port, 1);
    assert_eq!(Config::from_yaml(path, "").unwrap().port, 8080);
    assert!(
        Config::from_yaml(
            path,
            "standalone:\n  endpoints:\n  - {name: a, address: '127.0.0.1:1', labels: {gen: 2}}\n"
        )
        .is_ok()
    );
}

/// A reload names the start-only settings it cannot apply (they needed a restart and were
/// dropped silently).
#[test]
fn start_only_changes_are_named() {
    let path = Path::new("r.yaml");
    let old = Config::from_yaml(path, "port: 8080\nlistener: {maxConnections: 10}\n").unwrap();
    let same = Config::from_yaml(
        path,
        "port: 8080\nlistener: {maxConnections: 10}\nmetricsScrapeInterval: 5s\n",
    )
    .unwrap();
    assert!(old.start_only_changes(&same).is_empty());
    let new = Config::from_yaml(
        path,
        "port: 9000\nlistener: {maxConnections: 20}\naccessLog: {enabled: false}\n",
    )
    .unwrap();
    assert_eq!(
        old.start_only_changes(&new),
        ["port", "listener", "accessLog"]
    );
    let picker = Config::from_yaml(
        path,
        "port: 8080\nlistener: {maxConnections: 10}\ndrainTimeout: 10s\nendpointPicker: {address: \"127.0.0.1:9002\"}\n",
    )
    .unwrap();
    assert_eq!(
        old.start_only_changes(&picker),
        ["drainTimeout", "endpointPicker.address"]
    );
}

/// Values that parse but could never work are refused at load, naming the key.
#[test]
fn unusable_kv_cache_values_are_refused() {
    let path = Path::new("r.yaml");
    for (yaml, want) in [
        (
            "kvCache: {redis: {timeout: 0s}}",
            "kvCache.redis.timeout: must be greater than 0",
        ),
        (
            "kvCache: {redis: {gcInterval: 1ns}}",
            "kvCache.redis.gcInterval: must be 0s (off) or at least 100ms",
        ),
        (
            "kvCache: {redis: {gcScanKeys: 0}}",
            "kvCache.redis.gcScanKeys: must be at least 1",
        ),
        (
            "kvCache: {remoteTokenizeTimeout: 0s}",
            "kvCache.remoteTokenizeTimeout: must be greater than 0",
        ),
    ] {
        let e = Config::from_yaml(path, yaml)
            .unwrap()
            .validate(path)
            .unwrap_err();
        assert!(e.to_string().contains(want), "{yaml}: {e}");
    }
    let off = Config::from_yaml(path, "kvCache: {redis: {gcInterval: 0s}}").unwrap();
    assert!(off.validate(path).is_ok());
}

#[test]
fn cold_start_section_parses_checks_keys_and_validates() {
    let path = Path::new("r.yaml");
    let c = Config::from_yaml(
        path,
        "coldStart: {enabled: false, holdTimeout: 2s, maxHeldRequests: 2, retryAfter: 3s}\n",
    )
    .and_then(|c| c.validate(path))
    .unwrap();
    assert_eq!(
        c.cold_start,
        crate::config::ColdStartConfig {
            enabled: false,
            hold_timeout: std::time::Duration::from_secs(2),
            max_held_requests: 2,
            retry_after: std::time::Duration::from_secs(3),
        }
    );
    assert_eq!(
        Config::default().cold_start,
        crate::config::ColdStartConfig::default()
    );
    assert_eq!(
        load_error("coldStart: {holdTimout: 2s}\n"),
        "unknown key `coldStart.holdTimout`: did you mean `holdTimeout`?"
    );
    assert_eq!(
        load_error("coldStart: {maxHeldRequests: 0}\n"),
        "coldStart.maxHeldRequests: must be at least 1 (there is no unbounded hold)"
    );
    assert_eq!(
        load_error("coldStart: {retryAfter: 0s}\n"),
        "coldStart.retryAfter: must be at least 1s"
    );
}
