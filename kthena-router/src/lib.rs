//! `kthena-router`: an OpenAI-compatible router for LLM inference engines.
//!
//! It picks an engine for every request by model name, ModelRoute rules and live load, and
//! streams the answer through without buffering. This crate is the router process: the
//! listeners, request parsing, route matching, the proxy with retries, the engine metrics
//! scraper, the access log and Prometheus metrics, and discovery: standalone (a config file
//! plus ModelRoute/ModelServer manifests, hot-reloaded) or cluster mode (kube-rs reflectors on
//! ModelRoutes, ModelServers and Pods; [`Router::start_in_cluster`]), both feeding one
//! snapshot builder ([`Loader`]). It is **not** the scheduler (that is `kthena-sched`, which
//! this crate feeds with candidates).
//!
//! Start with [`Router::start`] (or [`run`]) and a [`Config`]:
//!
//! ```no_run
//! # async fn demo() -> kthena_router::Result<()> {
//! use std::path::Path;
//! let path = Path::new("examples/standalone/router.yaml");
//! let cfg = kthena_router::load_config(path, &kthena_router::ProcessEnv, Default::default())?;
//! let router = kthena_router::Router::start(cfg, Some(path.to_path_buf()), Default::default()).await?;
//! println!("listening on {}", router.addr);
//! router.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! # Request path
//!
//! A stack of tower layers (`pipeline`): parse (bounded body) → ModelRoute match (model or
//! LoRA, rules, weights; oldest route wins) and the ModelServer's endpoints → admit
//! (in-flight caps, circuit breakers; 503 with `Retry-After` past them) → tokenize →
//! `kthena-sched` ranks the candidates → proxy to the best, retrying the next ranked
//! endpoint with the identical body on connect errors, 429 and 5xx before the first response
//! byte → stream the answer through. One module (`accounting`) settles each request's
//! metrics, access-log line and in-flight slots when the response body ends.
//!
//! # Cancel safety
//!
//! When a client disconnects, the router drops the upstream response body (or the pending
//! upstream request), which closes that upstream connection at once; the engine sees the
//! disconnect and stops generating. The endpoint's in-flight count is given back in the same
//! step, and the access log records status 499 `client_disconnect` (or the upstream status
//! with that error once streaming had started).

mod auth;
mod body;
mod coldstart;
mod conditions;
pub mod config;
pub mod discovery;
mod epp;
mod error;
mod gateway;
pub mod kv;
mod lora;
mod pd;
mod pipeline;
mod provider;
mod queue;
mod ratelimit;
pub mod routing;
pub mod sched;
mod scrape;
mod server;
mod shared;
mod telemetry;
pub mod tokenize;
pub mod upstream;

pub use body::ReqBody;
pub use config::{Config, Env, Overrides, ProcessEnv, load_config, parse_go_duration};
pub use error::{DurationProblem, Error, Result};
pub use server::service::RouterService;
pub use server::webhook::{ROUTER_VALIDATING_WEBHOOK, WebhookOptions, serve_router_webhook};
pub use server::{Router, run};
