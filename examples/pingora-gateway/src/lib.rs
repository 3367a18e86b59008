//! A small OpenAI gateway on [pingora] that embeds [`kthena_sched`] in-process, with
//! prefix-cache and KV-cache-aware routing: [`Gateway`] is the pingora proxy, [`KvEvents`]
//! the background service feeding the scheduler's KV index from the engines' KV events.
//! Not a production router: a static engine list, no metric scraping, no auth.
//! `docs/embedding.md` walks through it.

mod kv;
mod proxy;

use std::net::SocketAddr;
use std::sync::Arc;

use pingora::server::ShutdownWatch;
use pingora::server::configuration::ServerConf;
use pingora::services::listening::Service;
use serde::Deserialize;
use tokio::net::TcpListener;

pub use kv::KvEvents;
pub use proxy::{Ctx, Gateway};

/// The gateway's configuration file (YAML; `gateway.yaml` next to `Cargo.toml` is an example).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Config {
    /// Address to listen on, `host:port`. Default `127.0.0.1:8080`.
    #[serde(default = "default_listen")]
    pub listen: String,
    /// The model every engine serves: seeds the prefix-cache hash chain and keys the KV index.
    pub model: String,
    /// The engines requests are balanced over.
    pub engines: Vec<Engine>,
    /// The scheduler's plugins, weights and args ([`kthena_sched::Config`]); default: the
    /// Kthena Helm chart's default.
    #[serde(default)]
    pub scheduler: kthena_sched::Config,
}

/// One engine (an OpenAI-compatible vLLM or SGLang server).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Engine {
    /// HTTP address, `host:port`; also the engine's scheduler id.
    pub address: SocketAddr,
    /// The engine's KV-event publisher (vLLM `--kv-events-config` endpoint), `tcp://host:port`.
    #[serde(default)]
    pub kv_events: Option<String>,
}

fn default_listen() -> String {
    "127.0.0.1:8080".to_owned()
}

impl Config {
    /// Parses the YAML text.
    ///
    /// # Errors
    /// [`Error::Config`] for invalid YAML, an unknown key or a missing field.
    pub fn from_yaml(text: &str) -> Result<Self> {
        serde_saphyr::from_str(text).map_err(|e| Error::Config(Box::new(e)))
    }
}

/// Errors of the gateway.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The configuration text is invalid.
    #[error("invalid gateway configuration: {0}")]
    Config(#[source] Box<serde_saphyr::Error>),
    /// The scheduler section is invalid (unknown plugin, bad args, ...).
    #[error("invalid scheduler configuration: {0}")]
    Scheduler(#[from] kthena_sched::Error),
    /// Accepting a connection failed.
    #[error("accept failed: {0}")]
    Io(#[from] std::io::Error),
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Serves `gateway` on `listener` on the current Tokio runtime until `shutdown` turns true
/// (the binary uses pingora's `Server` instead; this is for tests and hosts with their own
/// runtime).
///
/// # Errors
/// [`Error::Io`] when accepting fails.
pub async fn serve(
    gateway: Gateway,
    listener: TcpListener,
    mut shutdown: ShutdownWatch,
) -> Result<()> {
    let conf = Arc::new(ServerConf::default());
    let app = Arc::new(pingora::proxy::http_proxy(&conf, gateway));
    let mut conns = tokio::task::JoinSet::new();
    loop {
        let (tcp, _) = tokio::select! {
            r = listener.accept() => r?,
            _ = shutdown.changed() => return Ok(()),
        };
        while conns.try_join_next().is_some() {}
        let stream = Box::new(pingora::protocols::l4::stream::Stream::from(tcp));
        conns.spawn(Service::handle_event(
            stream,
            Arc::clone(&app),
            shutdown.clone(),
        ));
    }
}
