//! `pingora-gateway CONFIG.yaml`: the example gateway on pingora's server (signals, graceful
//! shutdown), with the KV-event subscriptions as a background service.

use pingora::server::Server;
use pingora::services::background::background_service;

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt().with_env_filter("info").init();
    let path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "gateway.yaml".to_owned());
    let config = pingora_gateway::Config::from_yaml(&std::fs::read_to_string(&path)?)?;
    let gateway = pingora_gateway::Gateway::new(&config)?;
    let mut server = Server::new(None)?;
    server.bootstrap();
    if let Some(kv) = gateway.kv_events() {
        server.add_service(background_service("kv events", kv));
    }
    let mut proxy = pingora::proxy::http_proxy_service(&server.configuration, gateway);
    proxy.add_tcp(&config.listen);
    server.add_service(proxy);
    tracing::info!(listen = %config.listen, engines = config.engines.len(), "gateway started");
    server.run(pingora::server::RunArgs::default());
    Ok(())
}
