//! A small OpenAI gateway on [pingora] that embeds [`kthena_sched`] in-process, with
//! prefix-cache and KV-cache-aware routing: [`Gateway`] is the pingora proxy, [`KvEvents`]
//! the background service feeding the scheduler's KV index from the engines' KV events.
//! Not a production router: a static engine list, no metric scraping, no auth.
//! `docs/embedding.md` walks through it.

mod kv;
mod proxy;

use std::net::SocketAddr;

use serde::Deserialize;

pub use kv::KvEvents;
pub use proxy::{Ctx, Gateway};

/// The gateway's configuration file (YAML; `gateway.yaml` next to `Cargo.toml` is an example).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Config {
    /// Address to listen on, `host:port`.
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

impl Config {
    /// Parses the YAML text.
    ///
    /// # Errors
    /// serde-saphyr's error for invalid YAML, an unknown key or a missing field.
    pub fn from_yaml(text: &str) -> Result<Self, serde_saphyr::Error> {
        serde_saphyr::from_str(text)
    }
}
