//! Tests of the command line: the args of Go's chart, Go's bool forms, klog's `--v`.

use super::*;

fn parse(args: &[&str]) -> Flags {
    Flags::try_parse_from(std::iter::once("kthena-controller").chain(args.iter().copied()))
        .unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

/// The args Go's chart gives the controller-manager with its default values
/// (`controllerManager.image.args: ["--v=2"]`, then the webhook flags).
const GO_CHART_ARGS: &[&str] = &[
    "--v=2",
    "--enable-webhook=true",
    "--cert-secret-name=kthena-controller-manager-webhook-certs",
    "--service-name=kthena-controller-manager-webhook",
];

#[test]
fn go_chart_defaults_parse_with_go_meaning() {
    let f = parse(GO_CHART_ARGS);
    assert_eq!(f.v, Some(2));
    assert_eq!(f.log_filter(None), "info");
    assert!(f.enable_webhook);
    assert_eq!(
        f.cert_secret_name,
        "kthena-controller-manager-webhook-certs"
    );
    assert_eq!(f.service_name, "kthena-controller-manager-webhook");
    assert_eq!(f.port, 8443);
    assert_eq!(f.debug_port, 0);
    assert_eq!(
        f.controller_set().unwrap(),
        ControllerSet {
            modelserving: true,
            modelbooster: true,
            autoscaler: true,
        }
    );
    assert_eq!(
        f.autoscaling_sync_period(),
        std::time::Duration::from_secs(15)
    );
}

#[test]
fn every_optional_flag_of_the_chart_parses() {
    let f = parse(&[
        "--v=4",
        "--enable-webhook=false",
        "--cert-secret-name=c",
        "--service-name=s",
        "--controllers=modelserving,autoscaler",
        "--kube-api-qps=50",
        "--kube-api-burst=100",
        "--debug-port=15001",
        "--autoscaling-sync-period-seconds=5",
        "--router-metrics-service=kthena-system/kthena-router-metrics",
    ]);
    assert!(!f.enable_webhook);
    assert_eq!(f.log_filter(None), "debug");
    assert_eq!(f.log_filter(Some("warn")), "warn");
    assert_eq!(
        f.controller_set().unwrap(),
        ControllerSet {
            modelserving: true,
            modelbooster: false,
            autoscaler: true,
        }
    );
    assert_eq!(f.kube_api_qps, 50.0);
    assert_eq!(f.kube_api_burst, 100);
    assert_eq!(f.debug_port, 15001);
    assert_eq!(
        f.autoscaling_sync_period(),
        std::time::Duration::from_secs(5)
    );
    assert_eq!(
        parse(&["--autoscaling-sync-period-seconds=0"]).autoscaling_sync_period(),
        std::time::Duration::from_secs(15)
    );
    let svc = f.router_metrics_service.expect("set");
    assert_eq!(svc.to_string(), "kthena-system/kthena-router-metrics");
    assert_eq!(parse(&[]).router_metrics_service, None);
    let bad = Flags::try_parse_from(["kthena-controller", "--router-metrics-service=x"]);
    let e = bad.expect_err("no namespace").to_string();
    assert!(
        e.contains("--router-metrics-service \"x\": expected <namespace>/<name>"),
        "{e}"
    );
}

#[test]
fn bool_flags_take_every_go_form() {
    for (arg, webhook) in [
        (&["--enable-webhook"][..], true),
        (&["--enable-webhook=true"], true),
        (&["--enable-webhook=false"], false),
        (&["--enable-webhook=0"], false),
        (&["--enable-webhook", "--port=1"], true),
        (&[], true),
    ] {
        assert_eq!(parse(arg).enable_webhook, webhook, "{arg:?}");
    }
    assert!(parse(&["--leader-elect"]).leader_elect);
    assert!(parse(&["--leader-elect=true"]).leader_elect);
    assert!(!parse(&["--leader-elect=false"]).leader_elect);
    assert!(!parse(&[]).leader_elect);
    // The chart's args then a user's `controllerManager.image.args`: the last wins.
    assert!(!parse(&["--enable-webhook=true", "--enable-webhook=false"]).enable_webhook);
    let e = Flags::try_parse_from(["kthena-controller", "--enable-webhook=on"]).unwrap_err();
    assert!(
        e.to_string()
            .contains(r#"invalid boolean "on": expected true or false"#),
        "{e}"
    );
}

#[test]
fn go_controllers_lists_as_go_reads_them() {
    let set = |list: &str| parse(&[&format!("--controllers={list}")]).controller_set();
    let all = ControllerSet {
        modelserving: true,
        modelbooster: true,
        autoscaler: true,
    };
    assert_eq!(set("*").unwrap(), all);
    // None enabled: Go's parseControllers falls back to all of them.
    assert_eq!(set("").unwrap(), all);
    assert_eq!(set("-modelserving,-modelbooster,-autoscaler").unwrap(), all);
    assert_eq!(
        set("*,-autoscaler").unwrap(),
        ControllerSet {
            modelserving: true,
            modelbooster: true,
            autoscaler: false,
        }
    );
    assert!(set("lws").is_err());
}

#[test]
fn klog_flags_and_pod_namespace() {
    let f = parse(&["--v=7", "--logtostderr", "--log_dir=/tmp", "--vmodule=x=2"]);
    assert_eq!(f.log_filter(None), "trace");
    assert_eq!(f.klog.len(), 3);
    assert_eq!(
        Flags::webhook_namespace(Some("kthena-system"), "default"),
        "kthena-system"
    );
    assert_eq!(Flags::webhook_namespace(Some(""), "default"), "default");
    assert_eq!(Flags::webhook_namespace(None, "default"), "default");
}

#[test]
fn health_probe_address_takes_go_listen_forms() {
    let parse = |args: &[&str]| {
        Flags::try_parse_from(std::iter::once("kthena-controller").chain(args.iter().copied()))
            .map(|f| f.healthz_bind_address.to_string())
            .map_err(|e| e.to_string())
    };
    assert_eq!(
        parse(&["--health-probe-bind-address=:8081"]),
        Ok("0.0.0.0:8081".into())
    );
    assert_eq!(
        parse(&["--healthz-bind-address=127.0.0.1:9"]),
        Ok("127.0.0.1:9".into())
    );
    let e = parse(&["--health-probe-bind-address=8081"]).unwrap_err();
    assert!(
        e.contains(r#"invalid address "8081": expected host:port or :port"#),
        "{e}"
    );
}
