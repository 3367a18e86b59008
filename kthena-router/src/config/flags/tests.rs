//! Tests of the command line: Go's forms of each flag, the default config file, notices.

use std::collections::HashMap;

use super::*;

/// The args Go's chart gives the router with its default values
/// (`charts/networking/templates/kthena-router/component/deployment.yaml`).
const GO_CHART_ARGS: &[&str] = &[
    "--port=8080",
    "--metrics-port=9090",
    "--expose-metrics-on-router-port=false",
    "--debug-port=15000",
    "--enable-webhook=true",
    "--enable-gateway-api=false",
    "--webhook-port=8443",
    "--webhook-tls-cert-file=/etc/tls/tls.crt",
    "--webhook-tls-private-key-file=/etc/tls/tls.key",
    "--cert-secret-name=kthena-router-webhook-certs",
    "--webhook-service-name=kthena-router-webhook",
];

fn parse(args: &[&str]) -> Flags {
    Flags::try_parse_from(std::iter::once("kthena-router").chain(args.iter().copied()))
        .unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

#[test]
fn go_chart_defaults_parse_with_go_meaning() {
    let f = parse(GO_CHART_ARGS);
    assert_eq!(f.port, Some(8080));
    assert_eq!(f.metrics_port, Some(9090));
    assert_eq!(f.expose_metrics_on_router_port, Some(false));
    assert_eq!(f.debug_port, Some(15000));
    assert!(!f.enable_gateway_api);
    assert!(f.go.enable_webhook);
    assert_eq!(f.go.webhook_port, 8443);
    assert_eq!(f.go.cert_secret_name, "kthena-router-webhook-certs");
    assert_eq!(f.go.webhook_service_name, "kthena-router-webhook");
    assert_eq!(f.config, None);
    let notices = f.notices();
    assert_eq!(notices.len(), 1, "{notices:?}");
    assert!(
        notices[0]
            .starts_with("--enable-webhook: the router serves no admission webhook (port 8443)"),
        "{notices:?}"
    );
}

#[test]
fn bool_flags_take_every_go_form() {
    for (arg, want) in [
        (&["--enable-gateway-api"][..], true),
        (&["--enable-gateway-api=true"], true),
        (&["--enable-gateway-api=false"], false),
        (&["--enable-gateway-api=1"], true),
        (&["--enable-gateway-api=F"], false),
        (&["--enable-gateway-api=True"], true),
        (&["--enable-gateway-api", "--port", "1"], true),
        (&[], false),
    ] {
        assert_eq!(parse(arg).enable_gateway_api, want, "{arg:?}");
    }
    assert_eq!(
        parse(&["--expose-metrics-on-router-port"]).expose_metrics_on_router_port,
        Some(true)
    );
    assert!(!parse(&["--enable-webhook=false"]).go.enable_webhook);
    // Given twice (the chart's args, then a user's): the last wins, as in Go's pflag.
    let twice = parse(&[
        "--expose-metrics-on-router-port=false",
        "--port=1",
        "--expose-metrics-on-router-port=true",
        "--port=2",
    ]);
    assert_eq!(twice.expose_metrics_on_router_port, Some(true));
    assert_eq!(twice.port, Some(2));
    assert!(parse(&["--enable-webhook"]).go.enable_webhook);
    let e = Flags::try_parse_from(["kthena-router", "--enable-gateway-api=yes"]).unwrap_err();
    assert!(
        e.to_string()
            .contains(r#"invalid boolean "yes": expected true or false"#),
        "{e}"
    );
}

#[test]
fn klog_flags_are_accepted() {
    let f = parse(&["--v=2", "--logtostderr", "--vmodule=x=4", "--log_dir=/tmp"]);
    assert_eq!(f.go.v, Some(2));
    assert_eq!(f.log_filter(None), "info,notify=error");
    assert_eq!(parse(&["--v", "4"]).log_filter(None), "debug,notify=error");
    assert_eq!(parse(&["--v=9"]).log_filter(None), "trace,notify=error");
    assert_eq!(parse(&["--v=9"]).log_filter(Some("warn")), "warn");
    assert_eq!(parse(&[]).log_filter(Some("")), "info,notify=error");
    let notices = parse(&["--enable-webhook=false", "--logtostderr"]).notices();
    assert_eq!(
        notices,
        ["klog flags other than --v are accepted and ignored; logs go to stderr"]
    );
}

#[test]
fn kube_api_limits_are_accepted_with_a_notice() {
    let f = parse(&[
        "--enable-webhook=false",
        "--kube-api-qps=50",
        "--kube-api-burst=100",
    ]);
    assert_eq!(f.go.kube_api_qps, 50.0);
    assert_eq!(f.go.kube_api_burst, 100);
    assert_eq!(
        f.notices(),
        [
            "--kube-api-qps=50 --kube-api-burst=100: accepted and ignored; the router's API \
          client (watches and status updates) has no client-side rate limit"
        ]
    );
}

#[test]
fn tls_flags_go_together() {
    let e = Flags::try_parse_from(["kthena-router", "--tls-cert=/c.pem"]).unwrap_err();
    assert!(e.to_string().contains("--tls-key"), "{e}");
    let f = parse(&["--tls-cert=/c.pem", "--tls-key=/k.pem"]);
    let (cfg, path) = f.load(&HashMap::new(), |_| false).unwrap();
    assert_eq!(path, None);
    assert_eq!(
        cfg.tls,
        Some(TlsFiles {
            cert_file: "/c.pem".into(),
            key_file: "/k.pem".into(),
        })
    );
}

#[test]
fn without_config_reads_go_path_else_defaults_with_env() {
    let f = parse(GO_CHART_ARGS);
    assert_eq!(
        f.config_path(|p| p == Path::new("/etc/config/routerConfiguration.yaml")),
        Some(PathBuf::from(DEFAULT_CONFIG_PATH))
    );
    assert_eq!(
        parse(&["--config=/x.yaml"]).config_path(|_| true),
        Some(PathBuf::from("/x.yaml"))
    );
    let env: HashMap<String, String> = [
        ("POD_NAMESPACE", "kthena-system"),
        ("ACCESS_LOG_ENABLED", "true"),
        ("ACCESS_LOG_FORMAT", "json"),
        ("ACCESS_LOG_OUTPUT", "stdout"),
        ("DRAIN_TIMEOUT", "5m"),
        ("REDIS_HOST", "redis.kthena-system"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    let (cfg, path) = f.load(&env, |_| false).unwrap();
    assert_eq!(path, None);
    assert!(cfg.is_cluster_mode());
    assert_eq!(cfg.port, 8080);
    assert_eq!(cfg.metrics_port, 9090);
    assert!(!cfg.expose_metrics_on_router_port);
    assert_eq!(cfg.access_log.format, crate::config::AccessLogFormat::Json);
    assert_eq!(cfg.drain_timeout, Duration::from_secs(300));
    assert_eq!(cfg.gateway_api.namespace.as_deref(), Some("kthena-system"));
    assert_eq!(
        cfg.on_flight_redis.as_deref(),
        Some("redis://redis.kthena-system:6379/0")
    );
    assert_eq!(cfg.scheduler, crate::config::SchedulerConfig::default());
}

#[test]
fn a_file_key_is_turned_off_by_an_explicit_false_flag() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("router.yaml");
    std::fs::write(&file, "exposeMetricsOnRouterPort: true\nport: 18080\n").unwrap();
    let config = format!("--config={}", file.display());
    let on = parse(&[&config]).load(&HashMap::new(), |_| false).unwrap();
    assert!(on.0.expose_metrics_on_router_port);
    assert_eq!(on.0.port, 18080);
    assert_eq!(on.1, Some(file));
    let off = parse(&[&config, "--expose-metrics-on-router-port=false"])
        .load(&HashMap::new(), |_| false)
        .unwrap();
    assert!(!off.0.expose_metrics_on_router_port);
}
