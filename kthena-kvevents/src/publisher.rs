//! Where an engine publishes its KV events, read from what its container already says: the
//! `--kv-events-config` JSON of vLLM (`vllm/config/kv_events.py`, `KVEventsConfig`) and
//! SGLang (`sglang/srt/disaggregation/kv_events.py`, same flag and keys), or a pod
//! annotation ([`ENDPOINT_ANNOTATION`], [`REPLAY_ANNOTATION`]) for engines started otherwise.
//!
//! The keys read (others, such as `buffer_steps` or `hwm`, are ignored):
//!
//! | key | default | meaning |
//! |---|---|---|
//! | `enable_kv_cache_events` | `false` | vLLM: the engine emits events at all |
//! | `publisher` | `zmq` when `enable_kv_cache_events`, else `null` | `zmq` publishes on a PUB socket; `null` publishes nothing |
//! | `endpoint` | `tcp://*:5557` | the PUB socket: bound when it contains `*` or `::` (or is `ipc://`/`inproc://`), else the engine connects to it |
//! | `replay_endpoint` | none | the ROUTER socket that resends buffered batches (always bound) |
//! | `topic` | `""` | the first frame of each message |
//!
//! The flag is found in the container's command and args as `--kv-events-config JSON`,
//! `--kv-events-config=JSON`, or vLLM's dotted form `--kv-events-config.KEY VALUE`; a script
//! run with `sh -c` (or bash, dash, ash, zsh) is split as the shell would (`shlex`), so
//! Kthena's own examples (`examples/model-serving/gpu-kvcache-aware.yaml`) are read.
//!
//! ```
//! use kthena_kvevents::PublisherConfig;
//!
//! let script = r#"vllm serve Qwen/Qwen3-8B \
//!   --kv-events-config '{"enable_kv_cache_events":true,"replay_endpoint":"tcp://*:5558"}'"#;
//! let cfg = PublisherConfig::from_command(&["sh", "-c", script])?.expect("publishes");
//! let ip = "10.0.0.7".parse()?;
//! assert_eq!(cfg.address_at(ip)?, "tcp://10.0.0.7:5557");
//! assert_eq!(cfg.replay_address_at(ip)?.as_deref(), Some("tcp://10.0.0.7:5558"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::net::IpAddr;

use serde::Deserialize;

use crate::{Error, Result};

/// The engine flag that carries the KV-event configuration (vLLM and SGLang).
pub const KV_EVENTS_FLAG: &str = "--kv-events-config";

/// The PUB endpoint of an engine whose configuration names none (vLLM's and SGLang's default).
pub const DEFAULT_ENDPOINT: &str = "tcp://*:5557";

/// Pod annotation naming the KV-event PUB endpoint when the container's arguments do not:
/// a port (`"5557"`) or an endpoint (`"tcp://*:5557"`).
pub const ENDPOINT_ANNOTATION: &str = "kthena.io/kv-events-endpoint";

/// Pod annotation naming the KV-event replay (ROUTER) endpoint, in the same forms as
/// [`ENDPOINT_ANNOTATION`]; read only with that annotation.
pub const REPLAY_ANNOTATION: &str = "kthena.io/kv-events-replay-endpoint";

/// Where one engine publishes its KV events, as configured (addresses as the engine sees
/// them; [`address_at`](Self::address_at) turns them into what a subscriber dials).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublisherConfig {
    /// The PUB endpoint, for example `tcp://*:5557`.
    pub endpoint: String,
    /// The replay (ROUTER) endpoint, for example `tcp://*:5558`.
    pub replay_endpoint: Option<String>,
    /// The topic frame of every message.
    pub topic: String,
}

/// The JSON keys read from `--kv-events-config`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Json {
    enable_kv_cache_events: bool,
    publisher: Option<String>,
    endpoint: Option<String>,
    replay_endpoint: Option<String>,
    topic: Option<String>,
}

impl PublisherConfig {
    /// Reads a container's command line (`command` then `args`): `Ok(None)` when it has no
    /// `--kv-events-config` or the publisher it names is `null`.
    ///
    /// # Errors
    /// [`Error::KvEventsConfig`] when the flag's value is not a JSON object of the expected
    /// shape or a `sh -c` script cannot be split.
    pub fn from_command<S: AsRef<str>>(words: &[S]) -> Result<Option<Self>> {
        let words = shell_words(words)?;
        let mut json: Option<serde_json::Map<String, serde_json::Value>> = None;
        let mut it = words.iter().map(String::as_str);
        while let Some(w) = it.next() {
            // vLLM's argument parser also takes the underscore spelling.
            let Some(rest) = w
                .strip_prefix(KV_EVENTS_FLAG)
                .or_else(|| w.strip_prefix("--kv_events_config"))
            else {
                continue;
            };
            if rest.is_empty() || rest.starts_with('=') {
                let value = match rest.strip_prefix('=') {
                    Some(v) => v,
                    None => it.next().unwrap_or_default(),
                };
                json = Some(parse_object(value)?);
            } else if let Some(dotted) = rest.strip_prefix('.') {
                let (key, value) = match dotted.split_once('=') {
                    Some((k, v)) => (k, v),
                    None => (dotted, it.next().unwrap_or_default()),
                };
                let value = match value.to_ascii_lowercase().as_str() {
                    "true" => serde_json::Value::Bool(true),
                    "false" => serde_json::Value::Bool(false),
                    _ => serde_json::from_str(value)
                        .unwrap_or_else(|_| serde_json::Value::String(value.to_owned())),
                };
                json.get_or_insert_with(Default::default)
                    .insert(key.to_owned(), value);
            }
        }
        match json {
            Some(map) => Self::from_json_value(serde_json::Value::Object(map)),
            None => Ok(None),
        }
    }

    /// Reads the JSON value of `--kv-events-config`: `Ok(None)` when the publisher is `null`.
    ///
    /// # Errors
    /// [`Error::KvEventsConfig`] when `json` is not an object of the expected shape.
    pub fn from_json(json: &str) -> Result<Option<Self>> {
        Self::from_json_value(serde_json::Value::Object(parse_object(json)?))
    }

    fn from_json_value(v: serde_json::Value) -> Result<Option<Self>> {
        let j: Json = serde_json::from_value(v).map_err(|e| Error::KvEventsConfig {
            reason: e.to_string(),
        })?;
        let publisher = j.publisher.unwrap_or_else(|| {
            if j.enable_kv_cache_events {
                "zmq".to_owned()
            } else {
                "null".to_owned()
            }
        });
        if publisher != "zmq" {
            return Ok(None);
        }
        Ok(Some(Self {
            endpoint: j.endpoint.unwrap_or_else(|| DEFAULT_ENDPOINT.to_owned()),
            replay_endpoint: j.replay_endpoint,
            topic: j.topic.unwrap_or_default(),
        }))
    }

    /// The configuration the annotations give: `endpoint` and `replay` are a port
    /// (`"5557"`, meaning `tcp://*:5557`) or an endpoint; the topic is empty. An annotation
    /// states where the engine listens, so `tcp://0.0.0.0:PORT` and `tcp://[::]:PORT` mean
    /// every address (vLLM's connect-or-bind rule applies to its own flag only).
    ///
    /// # Errors
    /// [`Error::KvEventsEndpoint`] when a value is neither a port nor a `tcp://`, `ipc://` or
    /// `inproc://` endpoint.
    pub fn from_annotations(endpoint: &str, replay: Option<&str>) -> Result<Self> {
        let norm = |v: &str| -> Result<String> {
            let v = v.trim();
            if let Ok(port) = v.parse::<u16>() {
                return Ok(format!("tcp://*:{port}"));
            }
            if let Some(port) = v.strip_prefix("tcp://0.0.0.0:") {
                return Ok(format!("tcp://*:{port}"));
            }
            if ["tcp://", "ipc://", "inproc://"]
                .iter()
                .any(|s| v.starts_with(s))
            {
                return Ok(v.to_owned());
            }
            Err(endpoint_error(v, "is neither a port nor a tcp:// endpoint"))
        };
        Ok(Self {
            endpoint: norm(endpoint)?,
            replay_endpoint: replay.map(norm).transpose()?,
            topic: String::new(),
        })
    }

    /// Whether the engine binds its PUB socket (vLLM's rule: the endpoint contains `*` or
    /// `::`, or is `ipc://` or `inproc://`); otherwise it connects to a listener elsewhere.
    #[must_use]
    pub fn binds(&self) -> bool {
        let e = &self.endpoint;
        e.contains('*') || e.contains("::") || e.starts_with("ipc://") || e.starts_with("inproc://")
    }

    /// The PUB socket's TCP port.
    ///
    /// # Errors
    /// [`Error::KvEventsEndpoint`] when the endpoint is not `tcp://host:port`.
    pub fn port(&self) -> Result<u16> {
        tcp_parts(&self.endpoint).map(|(_, p)| p)
    }

    /// The replay socket's TCP port, if there is one.
    ///
    /// # Errors
    /// [`Error::KvEventsEndpoint`] when the replay endpoint is not `tcp://host:port`.
    pub fn replay_port(&self) -> Result<Option<u16>> {
        self.replay_endpoint
            .as_deref()
            .map(|e| tcp_parts(e).map(|(_, p)| p))
            .transpose()
    }

    /// The address a subscriber outside the pod dials, `tcp://{ip}:{port}` (IPv6 in
    /// brackets), for an engine at `ip`.
    ///
    /// # Errors
    /// [`Error::KvEventsEndpoint`] when the engine connects instead of binding (nothing
    /// listens in the pod), or the endpoint is not TCP.
    pub fn address_at(&self, ip: IpAddr) -> Result<String> {
        let (_, port) = tcp_parts(&self.endpoint)?;
        if !self.binds() {
            return Err(endpoint_error(
                &self.endpoint,
                "is not bound by the engine (it connects to that address); bind it with tcp://*:PORT",
            ));
        }
        Ok(tcp_address(ip, port))
    }

    /// The replay address a subscriber outside the pod dials, for an engine at `ip`: the
    /// engine's own address for a wildcard host (`*`, `0.0.0.0`, `::`), else the host as
    /// configured.
    ///
    /// # Errors
    /// [`Error::KvEventsEndpoint`] when the replay endpoint is not TCP or is bound to a
    /// loopback address (unreachable from outside the pod).
    pub fn replay_address_at(&self, ip: IpAddr) -> Result<Option<String>> {
        let Some(e) = self.replay_endpoint.as_deref() else {
            return Ok(None);
        };
        let (host, port) = tcp_parts(e)?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if matches!(host, "*" | "0.0.0.0" | "::" | "") {
            return Ok(Some(tcp_address(ip, port)));
        }
        let loopback = host == "localhost" || host.parse::<IpAddr>().is_ok_and(|a| a.is_loopback());
        if loopback {
            return Err(endpoint_error(
                e,
                "is bound to loopback, unreachable from outside the pod",
            ));
        }
        Ok(Some(e.to_owned()))
    }
}

/// `tcp://{ip}:{port}`, IPv6 in brackets.
fn tcp_address(ip: IpAddr, port: u16) -> String {
    match ip {
        IpAddr::V4(a) => format!("tcp://{a}:{port}"),
        IpAddr::V6(a) => format!("tcp://[{a}]:{port}"),
    }
}

/// The host and port of `tcp://host:port`.
fn tcp_parts(endpoint: &str) -> Result<(&str, u16)> {
    let rest = endpoint
        .strip_prefix("tcp://")
        .ok_or_else(|| endpoint_error(endpoint, "is not a tcp:// endpoint"))?;
    let (host, port) = rest
        .rsplit_once(':')
        .ok_or_else(|| endpoint_error(endpoint, "has no port"))?;
    let port = port
        .parse::<u16>()
        .map_err(|_| endpoint_error(endpoint, "has an invalid port"))?;
    Ok((host, port))
}

fn endpoint_error(endpoint: &str, reason: &'static str) -> Error {
    Error::KvEventsEndpoint {
        endpoint: endpoint.to_owned(),
        reason,
    }
}

fn parse_object(value: &str) -> Result<serde_json::Map<String, serde_json::Value>> {
    match serde_json::from_str::<serde_json::Value>(value) {
        Ok(serde_json::Value::Object(m)) => Ok(m),
        Ok(_) => Err(Error::KvEventsConfig {
            reason: format!("{KV_EVENTS_FLAG} is not a JSON object: {value}"),
        }),
        Err(e) => Err(Error::KvEventsConfig {
            reason: format!("{KV_EVENTS_FLAG} is not valid JSON ({e}): {value}"),
        }),
    }
}

/// The words of a command line (`command` then `args`), with the script of `sh -c SCRIPT`
/// (or bash, dash, ash, zsh) split as the shell would (`shlex`), as engines started by a
/// script see their flags.
///
/// # Errors
/// [`Error::KvEventsConfig`] when the script cannot be split (unbalanced quotes).
pub fn shell_words<S: AsRef<str>>(words: &[S]) -> Result<Vec<String>> {
    let words: Vec<&str> = words.iter().map(AsRef::as_ref).collect();
    let is_shell = words.first().is_some_and(|w| {
        let base = w.rsplit('/').next().unwrap_or(w);
        matches!(base, "sh" | "bash" | "dash" | "ash" | "zsh")
    });
    let mut out = Vec::with_capacity(words.len());
    let mut script_next = false;
    for w in words {
        if script_next {
            let split = shlex::split(w).ok_or_else(|| Error::KvEventsConfig {
                reason: "the shell script of the command cannot be split (unbalanced quotes)"
                    .to_owned(),
            })?;
            out.extend(split);
            script_next = false;
            continue;
        }
        script_next = is_shell && w.starts_with('-') && !w.starts_with("--") && w.contains('c');
        out.push(w.to_owned());
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
