//! `kthena-controller`: Kthena's ModelServing controller (Go `kthena-controller-manager`).

use std::net::SocketAddr;

use anyhow::Context as _;
use clap::Parser;
use kthena_controller::autoscaler::AutoscalerConfig;
use kthena_controller::booster::BoosterConfig;
use kthena_controller::manager::flags::Flags;
use kthena_controller::manager::{ControllerSet, Controllers, LeaderElection};
use kthena_controller::{autoscaler, booster, manager, serving, webhook};

/// How long the webhook waits for its mounted certificate files in cert-manager mode (Go's
/// `waitForCertsReady`).
const CERT_FILES_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// Starts the webhook server. In cert-manager mode (a webhook configuration carries
/// `cert-manager.io/inject-ca-from`, as Go's chart renders it with `certManagementMode:
/// cert-manager`): the mounted files (waited for up to 30 s), read again every
/// `CERT_RELOAD_PERIOD`, and no `caBundle` write (cert-manager's CA injector writes it).
/// Otherwise: the certificate from the files when both exist, else the shared Secret's (or
/// generated), patched as the caBundle of Go's webhook configurations.
async fn webhook(
    args: &Flags,
    client: &kube::Client,
) -> anyhow::Result<std::pin::Pin<Box<dyn Future<Output = ()> + Send>>> {
    let addr = SocketAddr::new(args.webhook_bind_address, args.port);
    let (validating, mutating) = (webhook::VALIDATING_WEBHOOK, webhook::MUTATING_WEBHOOK);
    if webhook::cert_manager_injects(client, validating, Some(mutating)).await? {
        let files = (
            args.tls_cert_file.as_path(),
            args.tls_private_key_file.as_path(),
        );
        webhook::wait_for_files(files.0, files.1, CERT_FILES_WAIT).await?;
        let (addr, server) = webhook::serve_webhook_files(
            addr,
            files,
            webhook::CERT_RELOAD_PERIOD,
            args.webhook_timeout,
            webhook::PATHS,
            webhook::review,
        )
        .await?;
        tracing::info!(%addr, cert = %files.0.display(), "serving admission webhooks; cert-manager injects the caBundle");
        return Ok(Box::pin(server));
    }
    let pod_namespace = std::env::var("POD_NAMESPACE").ok();
    let ns = Flags::webhook_namespace(pod_namespace.as_deref(), client.default_namespace());
    let hosts = webhook::service_hosts(&args.service_name, ns);
    let source = webhook::CertificateSource {
        files: (&args.tls_cert_file, &args.tls_private_key_file),
        secret: &args.cert_secret_name,
        namespace: ns,
        hosts: &hosts,
    };
    let cert = webhook::certificate(client, source).await?;
    let (addr, server) = webhook::serve_webhook(
        addr,
        &cert,
        args.webhook_timeout,
        webhook::PATHS,
        webhook::review,
    )
    .await?;
    tracing::info!(%addr, "serving admission webhooks");
    webhook::patch_ca_bundle(client, &cert.ca_pem, validating, Some(mutating)).await?;
    Ok(Box::pin(server))
}

async fn client(args: &Flags) -> anyhow::Result<kube::Client> {
    let mut config = match &args.kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("reading kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await?
        }
        None => kube::Config::infer().await?,
    };
    if let Some(master) = &args.master {
        config.cluster_url = master
            .parse()
            .with_context(|| format!("--master {master}"))?;
    }
    let builder = kube::client::ClientBuilder::try_from(config)?;
    Ok(
        match manager::rate_limit(args.kube_api_qps, args.kube_api_burst) {
            Some(layer) => builder.with_layer(&layer).build(),
            None => builder.build(),
        },
    )
}

/// `fut` when there is one; else a future that never completes (a disabled server).
async fn or_pending(fut: Option<impl Future<Output = ()>>) {
    match fut {
        Some(fut) => fut.await,
        None => std::future::pending().await,
    }
}

/// The controllers' configurations from the flags: what runs under leader election (the
/// ModelServing controller, and the autoscaler and the ModelBooster controller while the
/// Lease is held), the autoscaler's and the ModelBooster controller's (with `images`, from
/// its ConfigMap).
fn configs(
    args: &Flags,
    set: &ControllerSet,
    images: booster::Images,
) -> (Controllers, AutoscalerConfig, BoosterConfig) {
    let autoscaling = AutoscalerConfig {
        namespace: args.namespace.clone(),
        sync_period: args.autoscaling_sync_period(),
        router_metrics: args.router_metrics_service.clone(),
        ..AutoscalerConfig::default()
    };
    let boosting = BoosterConfig {
        namespace: args.namespace.clone(),
        workers: args.workers,
        images,
        ..BoosterConfig::default()
    };
    let config = Controllers {
        serving: serving::Config {
            namespace: args.namespace.clone(),
            workers: args.workers,
            ..serving::Config::default()
        },
        autoscaler: (set.autoscaler && args.leader_elect).then(|| autoscaling.clone()),
        booster: (set.modelbooster && args.leader_elect).then(|| boosting.clone()),
    };
    (config, autoscaling, boosting)
}

/// The debug server of `--debug-port` on 127.0.0.1, when it is not 0.
async fn debug_server(
    port: u16,
    cache: serving::ServingCache,
) -> anyhow::Result<Option<impl Future<Output = ()> + use<>>> {
    if port == 0 {
        return Ok(None);
    }
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let (addr, server) = serving::serve_debug(addr, cache).await?;
    tracing::info!(%addr, "serving {}", serving::CACHE_PATH);
    Ok(Some(server))
}

/// SIGTERM (how Kubernetes stops a pod) and Ctrl-C, listened for from the start of the
/// process, so that a signal that comes during start-up also stops the controller cleanly
/// (before, the default action killed it until the main loop first waited for a signal).
struct Signals(Option<tokio::signal::unix::Signal>);

impl Signals {
    /// Starts listening for SIGTERM (Ctrl-C is listened for on each wait).
    fn listen() -> Self {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(term) => Self(Some(term)),
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGTERM; only Ctrl-C stops the controller");
                Self(None)
            }
        }
    }

    /// The next SIGTERM or Ctrl-C (one received before this call counts).
    async fn recv(&mut self) {
        match &mut self.0 {
            Some(term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            None => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
        tracing::info!("shutting down");
    }
}

/// Logs to stdout at `RUST_LOG`, else the level of `--v`; one warning for the klog flags
/// that are accepted and ignored.
fn init_tracing(args: &Flags) {
    let filter = args.log_filter(std::env::var("RUST_LOG").ok().as_deref());
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_new(&filter)
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
        .init();
    if !args.klog.is_empty() {
        tracing::warn!("klog flags other than --v are accepted and ignored; logs go to stdout");
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Flags::parse();
    init_tracing(&args);
    let mut signals = Signals::listen();
    let set = args.controller_set()?;
    let client = client(&args).await?;
    let (addr, health) = manager::serve_health(args.healthz_bind_address).await?;
    tracing::info!(%addr, "serving /healthz");
    let webhooks = match args.enable_webhook {
        true => Some(webhook(&args, &client).await?),
        false => None,
    };
    let election = args.leader_elect.then(|| {
        let ns = args.leader_elect_namespace.clone();
        LeaderElection::go_defaults(ns.unwrap_or_else(|| client.default_namespace().to_owned()))
    });
    // Go reads the ModelBooster ConfigMap in its own namespace once, at start.
    let images = match set.modelbooster {
        true => {
            let pod_namespace = std::env::var("POD_NAMESPACE").ok();
            let ns = Flags::webhook_namespace(pod_namespace.as_deref(), client.default_namespace());
            booster::load_images(&client, ns).await
        }
        false => booster::Images::default(),
    };
    let (config, autoscaling, boosting) = configs(&args, &set, images);
    let debug = debug_server(args.debug_port, config.serving.cache.clone()).await?;
    // Without leader election the autoscaler and the ModelBooster controller run on their own.
    let alone = !args.leader_elect;
    let autoscaler = (set.autoscaler && alone)
        .then(|| autoscaler::run_autoscaler(client.clone(), autoscaling, std::future::pending()));
    let booster = (set.modelbooster && alone)
        .then(|| booster::run_booster(client.clone(), boosting, std::future::pending()));
    // The first SIGTERM / Ctrl-C asks the controllers to stop (a leader releases its Lease);
    // they get SHUTDOWN_GRACE to do so, and a second signal ends the process at once.
    let (stop_tx, mut stop_rx) = tokio::sync::watch::channel(false);
    let shutdown = async move {
        let _ = stop_rx.wait_for(|stop| *stop).await;
    };
    let controllers = async move {
        if !set.modelserving {
            tracing::warn!("the modelserving controller is disabled");
            shutdown.await;
            return Ok(());
        }
        match election {
            Some(election) => manager::run_leader_elected(client, config, election, shutdown).await,
            None => {
                serving::run(client, config.serving, shutdown).await;
                Ok(())
            }
        }
    };
    tokio::pin!(controllers);
    // The health server runs until the controllers stop.
    let servers = async {
        tokio::select! {
            () = health => {}
            () = or_pending(webhooks) => {}
            () = or_pending(debug) => {}
            () = or_pending(autoscaler) => {}
            () = or_pending(booster) => {}
        }
    };
    tokio::select! {
        () = servers => return Ok(()),
        res = &mut controllers => return Ok(res?),
        () = signals.recv() => {}
    }
    let _ = stop_tx.send(true);
    tokio::select! {
        res = &mut controllers => Ok(res?),
        () = tokio::time::sleep(SHUTDOWN_GRACE) => {
            tracing::warn!(grace = ?SHUTDOWN_GRACE, "the controllers did not stop in time; exiting");
            Ok(())
        }
        () = signals.recv() => {
            tracing::warn!("second shutdown signal; exiting");
            Ok(())
        }
    }
}

/// How long the controllers get to stop after SIGTERM (a leader releases its Lease): with
/// the API server unreachable a reconcile or the Lease release can wait on it, and the
/// process must still end well within Kubernetes' 30 s termination grace period.
const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(10);
