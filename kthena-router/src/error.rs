//! The router's error type and its mapping to OpenAI-style HTTP answers.

mod messages;
mod response;

use std::path::PathBuf;
use std::time::Duration;

pub(crate) use response::json_response;
pub(crate) use response::{error_response, openai_error_body};

pub use messages::DurationProblem;
pub(crate) use messages::error_chain;
use messages::scheduler_message;

/// Which side of the proxy an error comes from (pingora's `ErrorSource`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The client sent something the router cannot serve.
    Downstream,
    /// An engine failed or answered with an error.
    Upstream,
    /// The router itself (configuration, I/O, bugs).
    Internal,
}

/// Every error of this crate.
///
/// Request-path variants map to an HTTP status with [`Error::status`] and to an OpenAI error
/// body with [`Error::to_body`]; configuration variants name the file and the reason.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The request body is not valid JSON, or not a JSON object (400).
    #[error("invalid JSON body: {reason}")]
    BadJson {
        /// The decoder's message.
        reason: String,
    },
    /// The body has no non-blank string `model` field (400).
    #[error("missing or empty `model` field")]
    MissingModel,
    /// A field has the wrong shape (400).
    #[error("invalid field `{param}`: {reason}")]
    InvalidField {
        /// The JSON field name.
        param: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// The body carries none of `prompt`, `messages`, `input` (400).
    #[error("no prompt found: the body needs `prompt`, `messages` or `input`")]
    PromptNotFound,
    /// No ModelRoute serves this model name (404).
    #[error("model `{model}` not found: no ModelRoute serves it")]
    ModelNotFound {
        /// The request's `model`.
        model: String,
    },
    /// A route matched but no rule or weighted target could be chosen (404).
    #[error("no rule of the ModelRoutes for `{model}` matches this request")]
    NoRuleMatched {
        /// The request's `model`.
        model: String,
    },
    /// ModelRoutes serve the model, but none serves the request's Gateway listener
    /// (Gateway API mode: `parentRefs`, or a route without them outside the Gateway's
    /// namespace), or one has `parentRefs` and Gateway API mode is off (404).
    #[error(
        "ModelRoute {route} for model `{model}` exists but is not attached to any Gateway \
         listener serving this request: {reason}"
    )]
    RouteNotAttached {
        /// The request's `model`.
        model: String,
        /// `namespace/name` of the first (oldest) such ModelRoute.
        route: String,
        /// Why it is not attached, and what would attach it.
        reason: String,
    },
    /// Gateway API mode: no listener of the router's port serves the request's host (404).
    #[error("No matching listener found")]
    NoMatchingListener,
    /// The matched HTTPRoute rule names an InferencePool that does not exist (404).
    #[error("can't find inference pool: {pool}")]
    PoolNotFound {
        /// `namespace/name` of the InferencePool.
        pool: String,
    },
    /// The matched HTTPRoute rule has no InferencePool backend with weight (503).
    #[error("no InferencePool backend in the matched rule of HTTPRoute {route}")]
    NoPoolBackend {
        /// `namespace/name` of the HTTPRoute.
        route: String,
    },
    /// The chosen route names a ModelServer that does not exist (404).
    #[error("can't find model server: {server}")]
    ServerNotFound {
        /// `namespace/name` of the missing ModelServer.
        server: String,
    },
    /// The body has a `Content-Encoding` (gzip, ...) the router cannot read (415).
    #[error("unsupported Content-Encoding {encoding:?}: send the JSON body uncompressed")]
    UnsupportedEncoding {
        /// The header's value.
        encoding: String,
    },
    /// The body is larger than the configured limit (413).
    #[error("request body larger than {limit} bytes")]
    BodyTooLarge {
        /// The limit in bytes.
        limit: usize,
    },
    /// The client sent the request body too slowly (408, connection closed after the
    /// answer): no data for `listener.bodyReadIdleTimeout`, or the whole body not within
    /// `listener.bodyReadTimeout`.
    #[error("{}", if *idle {
        format!("request body stalled: no data for {timeout:?}")
    } else {
        format!("request body not received within {timeout:?}")
    })]
    BodyTimeout {
        /// True for the idle timeout, false for the total one.
        idle: bool,
        /// The timeout that expired.
        timeout: Duration,
    },
    /// Reading the request body failed (400).
    #[error("failed to read the request body: {reason}")]
    BodyRead {
        /// The transport's message.
        reason: String,
    },
    /// The client closed the connection before its request body was complete (499, nginx's
    /// "client closed request"; nobody reads the answer, the access log records it).
    #[error("client closed the connection before the request body was complete: {reason}")]
    ClientClosedRequest {
        /// The transport's message.
        reason: String,
    },
    /// The request bodies the router holds already fill `listener.maxBufferedBodyBytes`
    /// (503 with `Retry-After: 1`, connection closed after the answer).
    #[error("the router is holding too many request bodies ({budget} bytes); retry after 1s")]
    BodyBudgetExhausted {
        /// The budget, bytes.
        budget: usize,
    },
    /// A header the router must read unambiguously is missing or repeated (400): two
    /// `Authorization` headers, or an HTTP/1.1 request without exactly one `Host`
    /// (RFC 9112 section 3.2).
    #[error("invalid {name} header: {reason}")]
    InvalidHeader {
        /// The header's name.
        name: &'static str,
        /// What is wrong.
        reason: &'static str,
    },
    /// A LoRA load/unload call the caller may not make (403): administration is off on the
    /// inference port, or the token lacks the admin scope.
    #[error("{reason}")]
    AdminForbidden {
        /// Why, and how to allow it.
        reason: String,
    },
    /// The ModelServer has no ready endpoint (503).
    #[error("no ready endpoint for model server: {server}")]
    NoReadyEndpoint {
        /// `namespace/name` of the ModelServer.
        server: String,
    },
    /// A request for a LoRA adapter whose target ModelServer has no endpoint listing that
    /// adapter as loaded (503: loading it on an endpoint fixes it).
    #[error("LoRA adapter `{adapter}` is not loaded on any endpoint of model server {server}")]
    LoraAdapterNotLoaded {
        /// The adapter (the request's `model`).
        adapter: String,
        /// `namespace/name` of the ModelServer.
        server: String,
    },
    /// A LoRA load/unload call through the router without the `x-kthena-endpoint` header
    /// naming the endpoint to send it to (400).
    #[error("LoRA load/unload calls need the header x-kthena-endpoint naming one endpoint")]
    EndpointRequired,
    /// The `x-kthena-endpoint` header names no configured endpoint (404).
    #[error("no endpoint named `{name}`")]
    EndpointNotFound {
        /// The header's value.
        name: String,
    },
    /// The scheduler filtered every candidate out or has no active plugin (503).
    #[error("can't schedule to an endpoint of {server}: {reason}")]
    Scheduling {
        /// `namespace/name` of the ModelServer.
        server: String,
        /// The scheduler's reason.
        reason: String,
    },
    /// A ModelServer with a `pdGroup` has no usable prefill/decode pair: no ready prefill
    /// endpoint, no ready decode endpoint, or no decode endpoint with a prefill endpoint of
    /// its group (503).
    #[error("prefill/decode disaggregation can't serve model server {server}: {reason}")]
    PdUnavailable {
        /// `namespace/name` of the ModelServer.
        server: String,
        /// Which role is missing, for people.
        reason: String,
    },
    /// Endpoint-picker mode: the request's route cannot be served by naming one endpoint
    /// to Envoy (an external provider, a prefill/decode ModelServer) (501).
    #[error("the endpoint picker can't route this request: {reason}")]
    NotPickable {
        /// Why, for people.
        reason: String,
    },
    /// Every prefill/decode pair failed before an answer reached the client (503).
    #[error("all prefill/decode attempts of {server} failed after {pairs} pair(s): {last}")]
    PdAttemptsFailed {
        /// `namespace/name` of the ModelServer.
        server: String,
        /// Pairs tried.
        pairs: usize,
        /// The last failure, with its phase (`prefill` or `decode`), for people.
        last: String,
    },
    /// The route names an `ExternalModelProvider` that does not exist (404).
    #[error("can't find external model provider: {provider}")]
    ProviderNotFound {
        /// `namespace/name` of the missing provider.
        provider: String,
    },
    /// The provider's credential or configuration is unusable: Secret or key missing, a
    /// reserved static header (503).
    #[error("external provider {provider} is not ready: {reason}")]
    ProviderNotReady {
        /// `namespace/name` of the provider.
        provider: String,
        /// Why, for people.
        reason: String,
    },
    /// The provider type does not serve the request path (400).
    #[error("provider type \"{provider_type}\" does not support path \"{path}\"")]
    ProviderPath {
        /// `OpenAI` or `Anthropic`.
        provider_type: &'static str,
        /// The request path.
        path: String,
    },
    /// The call to the provider failed before an answer (502).
    #[error("external provider {provider} request failed: {reason}")]
    ProviderTransport {
        /// `namespace/name` of the provider.
        provider: String,
        /// The transport's reason.
        reason: String,
    },
    /// Every attempt failed to connect or was refused (503).
    #[error("request to all endpoints of {server} failed after {attempts} attempt(s): {last}")]
    AllUpstreamsFailed {
        /// `namespace/name` of the ModelServer.
        server: String,
        /// Number of attempts made.
        attempts: usize,
        /// The last failure, for humans.
        last: String,
    },
    /// The upstream did not send response headers within `trafficPolicy.timeout` (504).
    #[error("upstream {endpoint} did not answer within {timeout:?}")]
    UpstreamTimeout {
        /// Endpoint name.
        endpoint: String,
        /// The configured timeout.
        timeout: Duration,
    },
    /// Overload protection: `overload.maxInFlight` requests are in flight in the router,
    /// or every candidate endpoint has `overload.maxInFlightPerEndpoint` (503 with
    /// `Retry-After`).
    #[error("the router is overloaded: {scope} has {limit} requests in flight; retry after {}s", retry_after.as_secs())]
    Overloaded {
        /// `the router` or `every endpoint of namespace/server`.
        scope: String,
        /// The cap that was reached.
        limit: usize,
        /// The `Retry-After` given (whole seconds).
        retry_after: Duration,
    },
    /// Every candidate endpoint's circuit breaker is open (503 with `Retry-After`).
    #[error("every endpoint of model server {server} is failing (circuit breaker open); retry after {}s", retry_after.as_secs())]
    CircuitOpen {
        /// `namespace/name` of the ModelServer.
        server: String,
        /// Until the first breaker lets a probe through (whole seconds).
        retry_after: Duration,
    },
    /// JWT authentication is on and the request has no `Authorization: Bearer <token>`
    /// header (401, Go's message).
    #[error("Authorization header missing or invalid")]
    AuthHeaderInvalid,
    /// The bearer token fails signature or claim checks (401; `reason` is Go's, for
    /// example `failed to validate claims: time claims validation failed: token has expired`).
    #[error("Unauthorized: {reason}")]
    Unauthorized {
        /// Why the token is refused.
        reason: String,
    },
    /// JWT authentication is on but the key set has not been fetched yet (503 with
    /// `Retry-After`).
    #[error("no JWKS available for token validation: the key set of {jwks_uri} has not been fetched yet; retry after {}s", retry_after.as_secs())]
    AuthUnavailable {
        /// The configured `auth.jwksUri`.
        jwks_uri: String,
        /// The `Retry-After` given (whole seconds).
        retry_after: Duration,
    },
    /// The ModelRoute's token rate limit is spent (429 with `Retry-After`; Go's messages
    /// `input token rate limit exceeded` and `output token rate limit exceeded`).
    #[error("{kind} token rate limit exceeded")]
    RateLimited {
        /// `input` or `output`.
        kind: &'static str,
        /// Until enough tokens are back (whole seconds, at least 1).
        retry_after: Duration,
    },
    /// The request alone needs more tokens than its ModelRoute's rate limit holds in a
    /// whole unit, so it can never be admitted: 429 without `Retry-After` (as OpenAI's
    /// "Request too large" answer), so that clients do not wait and retry for ever.
    #[error(
        "{kind} token rate limit exceeded: the request needs {requested} {kind} tokens, more than the limit of {limit} per {unit}; it can never be admitted"
    )]
    RateLimitTooLarge {
        /// `input` or `output`.
        kind: &'static str,
        /// The tokens the request needs (the router's estimate).
        requested: u64,
        /// The limit, tokens per unit.
        limit: u32,
        /// The limit's unit (`second`, `minute`, `hour`, `day`, `month`).
        unit: &'static str,
    },
    /// The Redis of a global token rate limit failed or timed out: the request is refused,
    /// never served unlimited (503 with `Retry-After: 1`).
    #[error("token rate limit store unavailable: {reason}")]
    RateLimitUnavailable {
        /// The client's reason.
        reason: String,
    },
    /// The request waited in the fairness or session-boost queue longer than its bound
    /// (504, Go Kthena's message).
    #[error("Request processing timed out in queue")]
    QueueTimeout {
        /// The bound that expired.
        timeout: Duration,
    },
    /// The client went away while its request waited in a queue (503, Go Kthena's
    /// message; recorded in the access log, nobody reads the answer).
    #[error("Client disconnected while waiting in queue")]
    QueueClientDisconnected,
    /// A request held while its ModelServer had no ready endpoint waited
    /// `coldStart.holdTimeout` (503 with `Retry-After`, code `cold_start_timeout`).
    #[error("model server {server} has no ready endpoint: the request was held {}s waiting for one to start; retry after {}s", waited.as_secs(), retry_after.as_secs())]
    ColdStartTimeout {
        /// `namespace/name` of the ModelServer.
        server: String,
        /// How long the request was held.
        waited: Duration,
        /// The `Retry-After` given (`coldStart.retryAfter`, whole seconds).
        retry_after: Duration,
    },
    /// The router began shutting down while the request was held: answered at once so that
    /// the client retries another router replica (503 with `Retry-After`, code
    /// `cold_start_shutting_down`).
    #[error("model server {server} has no ready endpoint and this router is shutting down; retry after {}s", retry_after.as_secs())]
    ColdStartShuttingDown {
        /// `namespace/name` of the ModelServer.
        server: String,
        /// The `Retry-After` given (`coldStart.retryAfter`, whole seconds).
        retry_after: Duration,
    },
    /// The ModelServer has no ready endpoint and `coldStart.maxHeldRequests` requests are
    /// held for it already (503 with `Retry-After` at once, code `cold_start_queue_full`).
    #[error("model server {server} has no ready endpoint and {limit} requests are already held for it; retry after {}s", retry_after.as_secs())]
    ColdStartQueueFull {
        /// `namespace/name` of the ModelServer.
        server: String,
        /// `coldStart.maxHeldRequests`.
        limit: usize,
        /// The `Retry-After` given (`coldStart.retryAfter`, whole seconds).
        retry_after: Duration,
    },
    /// The request could not be queued (500).
    #[error("failed to enqueue request: {reason}")]
    Enqueue {
        /// Why.
        reason: String,
    },
    /// A pipeline stage ran without what an earlier stage provides (a wiring bug; 500).
    #[error("request pipeline misconfigured: no {missing} for this stage")]
    PipelineMissing {
        /// The request extension that was missing.
        missing: &'static str,
    },
    /// The router shut down with the response unfinished: it was still streaming when
    /// `drainTimeout` ran out (the client stream ends with an error; 503 is only its
    /// classification).
    #[error("the router shut down with the response unfinished (drainTimeout)")]
    DrainCut,
    /// The engine sent no response body data for `upstreamIdleTimeout` after its headers
    /// (the client stream ends with an error; 504 is only its classification).
    #[error("no data from the engine for {}ms", .timeout.as_millis())]
    UpstreamIdle {
        /// The configured timeout.
        timeout: Duration,
    },
    /// Only `/v1/chat/completions`, `/v1/completions`, `/v1/responses`, `/v1/messages` and
    /// `GET /v1/models` are served (404).
    #[error("unknown path {path}")]
    UnknownPath {
        /// The request path.
        path: String,
    },
    /// The method is not allowed on this path (405).
    #[error("method {method} not allowed on {path}")]
    MethodNotAllowed {
        /// The request method.
        method: String,
        /// The request path.
        path: String,
    },
    /// A configuration or manifest file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    ReadFile {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The access log's `output` file cannot be opened for appending.
    #[error("cannot open the access log {} (accessLog.output) for writing: {source}", path.display())]
    AccessLogOpen {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A configuration file is invalid.
    #[error("invalid config {}: {reason}", path.display())]
    Config {
        /// The file (empty for flag or environment errors).
        path: PathBuf,
        /// What is wrong, with the field path where known.
        reason: String,
    },
    /// A manifest file holds an invalid document.
    #[error("invalid manifest {}: {reason}", path.display())]
    Manifest {
        /// The file.
        path: PathBuf,
        /// `kind namespace/name` and field path where known, and the reason.
        reason: String,
    },
    /// An environment variable has an invalid value.
    #[error("invalid environment variable {name}={value:?}: {reason}")]
    Env {
        /// Variable name.
        name: &'static str,
        /// Its value.
        value: String,
        /// Why it is rejected.
        reason: String,
    },
    /// A listener could not bind.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The serving threads (`Config::serving_threads`) could not be started.
    #[error("cannot start the serving threads: {0}")]
    ServingThreads(#[source] std::io::Error),
    /// The file watcher failed.
    #[error("file watcher: {0}")]
    Watch(#[from] notify::Error),
    /// No usable Kubernetes client configuration (cluster mode): no `KUBECONFIG`, no
    /// `~/.kube/config`, not in a cluster, or an invalid one.
    #[error("cannot reach the Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// The validating webhook (`--enable-webhook`) could not start: its certificate or its
    /// port.
    #[error("webhook: {0}")]
    Webhook(#[from] kthena_webhook::Error),
    /// An I/O error while serving.
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    /// A KV-event message from an engine could not be decoded (counted per endpoint in
    /// `kthena_router_kv_events_decode_errors_total`; the message is skipped).
    #[error("undecodable KV event: {reason}")]
    KvEventDecode {
        /// What is wrong with the frame or the msgpack payload.
        reason: String,
    },
    /// A tokenizer or chat template could not be loaded or applied.
    #[error("tokenizer for model {model:?}: {reason}")]
    Tokenizer {
        /// The model the tokenizer is configured for.
        model: String,
        /// The loader's or renderer's reason.
        reason: String,
    },
    /// The Redis-backed KV index failed (connection, timeout, unexpected reply).
    #[error("redis KV index: {reason}")]
    Redis {
        /// The client's reason.
        reason: String,
    },
    /// A Go duration (`1s`, `500ms`, `1h30m`) in the config, the environment or a flag
    /// that does not parse; the message names the value and how to write it.
    #[error("{}", problem.describe(value))]
    InvalidDuration {
        /// The value as written.
        value: String,
        /// What is wrong with it.
        problem: DurationProblem,
    },
    /// An endpoint address that is not `host:port` (or whose host lookup failed).
    #[error("{address:?} is not host:port: {source}")]
    BadAddress {
        /// The address as written.
        address: String,
        /// The resolver's error.
        #[source]
        source: std::io::Error,
    },
    /// An endpoint address whose host resolves to no address.
    #[error("{address:?} resolves to no address")]
    AddressUnresolved {
        /// The address as written.
        address: String,
    },
    /// A ModelRoute regex (`modelMatch.headers[..].regex`, `modelMatch.uri.regex`) that does
    /// not compile; `path` is its JSON path in the object.
    #[error("{path}: {source}")]
    InvalidRegex {
        /// The field, such as `spec.rules[0].modelMatch.uri.regex`.
        path: String,
        /// The regex compiler's error.
        #[source]
        source: regex::Error,
    },
    /// The `scheduler:` section was rejected (unknown plugin, invalid args, no score
    /// plugin). The message has the path from the top of the router file: ``unknown key
    /// `scheduler.pluginConfig[0].args.blockSizeToHas`: did you mean `blockSizeToHash`?``,
    /// or `scheduler: <reason>` for errors without a path.
    #[error("{}", scheduler_message(source))]
    Scheduler {
        /// The scheduler's error.
        #[source]
        source: kthena_sched::Error,
    },
    /// A KV-cache setting was rejected: `kvcache-aware` args, `kvCache.redis.url`, or a
    /// `kvCache.tokenizers` entry that cannot be loaded.
    #[error("{field}: {source}")]
    KvCacheConfig {
        /// The setting: `scheduler: kvcache-aware args`, `kvCache.redis.url`,
        /// `kvCache.tokenizers[0]`, ...
        field: String,
        /// Why it was rejected.
        #[source]
        source: crate::body::BoxError,
    },
    /// An engine's metrics or `/v1/models` answer could not be read (scrape; the endpoint
    /// keeps its last values, marked stale, as for every scrape error below).
    #[error(transparent)]
    EngineMetrics(#[from] kthena_engine_metrics::Error),
    /// A scrape request could not be sent or no answer came (connect error, reset).
    #[error("GET {url}: {}", error_chain(source))]
    ScrapeTransport {
        /// The URL scraped.
        url: String,
        /// The client's error.
        #[source]
        source: hyper_util::client::legacy::Error,
    },
    /// A scrape URL is not a valid request target.
    #[error("GET {url}: {source}")]
    ScrapeUri {
        /// The URL scraped.
        url: String,
        /// Why the request could not be built.
        #[source]
        source: http::Error,
    },
    /// A scrape answer's body could not be read (reset, or over the 16 MiB limit).
    #[error("GET {url}: reading the answer: {source}")]
    ScrapeBody {
        /// The URL scraped.
        url: String,
        /// The body's error.
        #[source]
        source: crate::body::BoxError,
    },
    /// No whole scrape answer within the scrape timeout.
    #[error("GET {url}: timed out after {timeout:?}")]
    ScrapeTimeout {
        /// The URL scraped.
        url: String,
        /// The scrape timeout.
        timeout: Duration,
    },
    /// An engine answered a scrape with a status other than 2xx.
    #[error("GET {url} answered {status}")]
    ScrapeStatus {
        /// The URL scraped.
        url: String,
        /// The answer's status.
        status: http::StatusCode,
    },
    /// The metrics answer is not UTF-8.
    #[error("GET {url}: the answer is not UTF-8: {source}")]
    ScrapeNotUtf8 {
        /// The URL scraped.
        url: String,
        /// Where the text stops being UTF-8.
        #[source]
        source: std::str::Utf8Error,
    },
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A request body `kthena_openai` cannot parse, as the same-named 400 variant: the same
/// message, status and OpenAI error body.
impl From<kthena_openai::Error> for Error {
    fn from(e: kthena_openai::Error) -> Self {
        match e {
            kthena_openai::Error::BadJson { reason } => Self::BadJson { reason },
            kthena_openai::Error::MissingModel => Self::MissingModel,
            kthena_openai::Error::InvalidField { param, reason } => {
                Self::InvalidField { param, reason }
            }
            kthena_openai::Error::PromptNotFound => Self::PromptNotFound,
        }
    }
}

#[cfg(test)]
mod tests;
