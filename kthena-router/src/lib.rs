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
mod conditions;
mod config;
mod discovery;
mod epp;
mod error;
mod gateway;
mod kv;
mod lora;
mod pd;
mod pipeline;
mod provider;
mod queue;
mod ratelimit;
mod routing;
mod sched;
mod scrape;
mod server;
mod shared;
mod telemetry;
mod tokenize;
mod upstream;

pub use auth::AuthConfig;
pub use body::{BoxError, RespBody};
pub use config::duration::parse_go_duration;
pub use config::env::{Env, ProcessEnv};
pub use config::overrides::{Overrides, load_config};
pub use config::{
    AccessLogConfig, AccessLogFormat, Config, DEFAULT_ATTEMPTS, EndpointConfig,
    EndpointPickerConfig, SchedulerConfig, Standalone, UNSUPPORTED_SECTIONS, resolve_address,
};
pub use discovery::warnings::{ConfigWarning, WARNING_KINDS};
pub use discovery::{Loader, Server, Snapshot, manifest_files};
pub use error::DurationProblem;
pub use error::{Error, Result, Side, error_response, openai_error_body};
pub use kthena_engine_metrics::{
    EngineMetricNames, EngineSample, LLAMACPP_PREFIX, ModelList, SGLANG, VLLM, interval_mean_ms,
    llamacpp_sample, parse_metrics, parse_models,
};
pub use kthena_kvevents::{
    END_SEQ, IndexBatch, SeqStep, SeqTracker, decode_batch, event_type, split_frames,
};
pub use kthena_openai::{
    Message, ParsedRequest, Prompt, ResponseProbe, SseFilter, UpstreamBody, Usage, estimate_tokens,
    parse_request, parse_request_at, prompt_member, usage_of,
};
pub use kv::cache::{KvLoader, KvState};
pub use kv::config::{IndexBackend, KvCacheConfig, RedisConfig, TokenizerConfig};
pub use kv::events::{Ingest, KvSource, REPLAY_TIMEOUT, replay, subscribe};
pub use kv::metrics::{KvMetrics, TOKENIZE_BUCKETS};
pub use kv::redis::{KEY_PREFIX, RedisKvIndex, block_key, kthena_block_hash, owner_of};
pub use kv::supervise::{SUPERVISE_INTERVAL, supervise};
pub use pd::{Connector, PdEndpoint, PdLayout, PdMetrics};
pub use provider::{
    ALLOWED_HEADERS, ANTHROPIC_HEADERS, CREDENTIAL_LABEL, CredentialState, Provider,
    RESERVED_HEADERS, SecretSource, Secrets, read_secrets,
};
pub use queue::{
    FairnessConfig, QueueConfig, QueueMetrics, QueueMode, SessionBoostConfig, UserLabelConfig,
};
pub use routing::{
    CompiledRoute, CompiledRule, MatchError, RouteMatch, RouteTable, StringMatcher, TargetRef,
};
pub use sched::build_scheduler;
pub use scrape::{HttpClient, names_for, scrape_all, scrape_endpoint};
pub use server::listener::{ListenerConfig, ListenerMetrics};
pub use server::service::RouterService;
pub use server::{Router, run};
pub use shared::Shared;
pub use telemetry::accesslog::{
    ACCESS_LOG_QUEUE, AccessLog, Entry as AccessLogEntry, EntryError as AccessLogError,
};
pub use telemetry::metrics::{
    DURATION_BUCKETS, Destination, LabelValue, Metrics, RATIO_BUCKETS, RequestRecord,
};
pub use telemetry::plugin_metrics::{KVCACHE_BUCKETS, KvStage, PLUGIN_BUCKETS, PluginMetrics};
pub use tokenize::{
    BLOCKING_THRESHOLD_BYTES, CacheOutcome, MIN_CACHED_PREFIX_BYTES, ModelTokenizer, Tokenizers,
    remote_body, remote_tokenize,
};
pub use upstream::body::ProxyBody;
pub use upstream::endpoint::{DOWN_AFTER_FAILURES, Endpoint, EngineState};
pub use upstream::inflight::{ON_FLIGHT_KEY, SYNC_INTERVAL};
pub use upstream::overload::{Breaker, BreakerState, OverloadConfig, OverloadMetrics};
