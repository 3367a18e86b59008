//! How an [`Error`] answers: status, side, OpenAI `type`/`code`/`param`, access-log finish
//! reason, `Retry-After`, and the JSON error body (the one place errors become responses).

use std::time::Duration;

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Response, StatusCode};

use super::{Error, Side};
use crate::body::{RespBody, full};

impl Error {
    /// The HTTP status this error answers with.
    #[must_use]
    pub fn status(&self) -> StatusCode {
        match self {
            Self::BadJson { .. }
            | Self::MissingModel
            | Self::InvalidField { .. }
            | Self::PromptNotFound
            | Self::BodyRead { .. }
            | Self::ProviderPath { .. }
            | Self::InvalidHeader { .. }
            | Self::EndpointRequired => StatusCode::BAD_REQUEST,
            Self::AdminForbidden { .. } => StatusCode::FORBIDDEN,
            Self::ProviderTransport { .. } => StatusCode::BAD_GATEWAY,
            Self::NotPickable { .. } => StatusCode::NOT_IMPLEMENTED,
            Self::ClientClosedRequest { .. } => {
                StatusCode::from_u16(499).unwrap_or(StatusCode::BAD_REQUEST)
            }
            Self::EndpointNotFound { .. } => StatusCode::NOT_FOUND,
            Self::AuthHeaderInvalid | Self::Unauthorized { .. } => StatusCode::UNAUTHORIZED,
            Self::RateLimited { .. } | Self::RateLimitTooLarge { .. } => {
                StatusCode::TOO_MANY_REQUESTS
            }
            Self::ModelNotFound { .. }
            | Self::NoRuleMatched { .. }
            | Self::RouteNotAttached { .. }
            | Self::ServerNotFound { .. }
            | Self::ProviderNotFound { .. }
            | Self::NoMatchingListener
            | Self::PoolNotFound { .. }
            | Self::UnknownPath { .. } => StatusCode::NOT_FOUND,
            Self::MethodNotAllowed { .. } => StatusCode::METHOD_NOT_ALLOWED,
            Self::BodyTimeout { .. } => StatusCode::REQUEST_TIMEOUT,
            Self::BodyTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Self::UnsupportedEncoding { .. } => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Self::NoReadyEndpoint { .. }
            | Self::NoPoolBackend { .. }
            | Self::LoraAdapterNotLoaded { .. }
            | Self::Scheduling { .. }
            | Self::PdUnavailable { .. }
            | Self::ProviderNotReady { .. }
            | Self::AllUpstreamsFailed { .. }
            | Self::PdAttemptsFailed { .. }
            | Self::Overloaded { .. }
            | Self::AuthUnavailable { .. }
            | Self::BodyBudgetExhausted { .. }
            | Self::RateLimitUnavailable { .. }
            | Self::QueueClientDisconnected
            | Self::ColdStartTimeout { .. }
            | Self::ColdStartShuttingDown { .. }
            | Self::ColdStartQueueFull { .. }
            | Self::DrainCut
            | Self::CircuitOpen { .. } => StatusCode::SERVICE_UNAVAILABLE,
            Self::UpstreamTimeout { .. }
            | Self::UpstreamIdle { .. }
            | Self::QueueTimeout { .. } => StatusCode::GATEWAY_TIMEOUT,
            Self::ReadFile { .. }
            | Self::AccessLogOpen { .. }
            | Self::Config { .. }
            | Self::Manifest { .. }
            | Self::Env { .. }
            | Self::Bind { .. }
            | Self::ServingThreads(_)
            | Self::Watch(_)
            | Self::Kube(_)
            | Self::Webhook(_)
            | Self::Io(_)
            | Self::KvEventDecode { .. }
            | Self::Tokenizer { .. }
            | Self::Redis { .. }
            | Self::InvalidDuration { .. }
            | Self::InvalidRegex { .. }
            | Self::Scheduler { .. }
            | Self::KvCacheConfig { .. }
            | Self::BadAddress { .. }
            | Self::AddressUnresolved { .. }
            | Self::EngineMetrics(_)
            | Self::ScrapeTransport { .. }
            | Self::ScrapeUri { .. }
            | Self::ScrapeBody { .. }
            | Self::ScrapeTimeout { .. }
            | Self::ScrapeStatus { .. }
            | Self::ScrapeNotUtf8 { .. }
            | Self::Enqueue { .. }
            | Self::PipelineMissing { .. } => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// Which side caused the error: the client for request errors (4xx), an engine for
    /// failed or late answers, the router itself for everything else, among them a
    /// ModelServer with no ready endpoint, a scheduling failure and a route to a missing
    /// ModelServer (what the router knows of its engines, not an engine's answer).
    #[must_use]
    pub fn side(&self) -> Side {
        match self {
            Self::AllUpstreamsFailed { .. }
            | Self::PdAttemptsFailed { .. }
            | Self::ProviderTransport { .. }
            | Self::UpstreamTimeout { .. }
            | Self::UpstreamIdle { .. } => Side::Upstream,
            Self::NoReadyEndpoint { .. }
            | Self::Scheduling { .. }
            | Self::PdUnavailable { .. }
            | Self::ProviderNotFound { .. }
            | Self::ProviderNotReady { .. }
            | Self::ServerNotFound { .. }
            | Self::Overloaded { .. }
            | Self::AuthUnavailable { .. }
            | Self::BodyBudgetExhausted { .. }
            | Self::RateLimitUnavailable { .. }
            | Self::QueueTimeout { .. }
            | Self::ColdStartTimeout { .. }
            | Self::ColdStartShuttingDown { .. }
            | Self::ColdStartQueueFull { .. }
            | Self::CircuitOpen { .. } => Side::Internal,
            Self::QueueClientDisconnected => Side::Downstream,
            e if e.status().is_client_error() => Side::Downstream,
            _ => Side::Internal,
        }
    }

    /// The access-log `error_origin` of [`Error::side`]: `downstream`, `upstream` or
    /// `internal`.
    #[must_use]
    pub fn origin(&self) -> &'static str {
        match self.side() {
            Side::Downstream => "downstream",
            Side::Upstream => "upstream",
            Side::Internal => "internal",
        }
    }

    /// Whether another endpoint may be tried with the same body (connect errors only; the
    /// proxy classifies 429/5xx answers itself).
    #[must_use]
    pub fn is_retryable(&self) -> bool {
        matches!(self, Self::AllUpstreamsFailed { .. })
    }

    /// The OpenAI error `type` string.
    #[must_use]
    pub fn openai_type(&self) -> &'static str {
        if matches!(
            self,
            Self::RateLimited { .. } | Self::RateLimitTooLarge { .. }
        ) {
            // OpenAI's type of a token rate limit answer.
            return "tokens";
        }
        match self.status().as_u16() {
            400..=499 => "invalid_request_error",
            503 => "service_unavailable_error",
            504 => "timeout_error",
            502 => "api_error",
            _ => "server_error",
        }
    }

    /// The OpenAI error `code` string, stable for clients to match on.
    #[must_use]
    pub fn code(&self) -> &'static str {
        match self {
            Self::BadJson { .. } => "invalid_json",
            Self::ClientClosedRequest { .. } => "client_disconnect",
            Self::MissingModel => "missing_model",
            Self::InvalidField { .. } => "invalid_value",
            Self::PromptNotFound => "missing_prompt",
            Self::BodyRead { .. } => "body_read_error",
            Self::BodyTimeout { .. } => "request_timeout",
            Self::BodyBudgetExhausted { .. } => "request_buffer_full",
            Self::InvalidHeader { .. } => "invalid_header",
            Self::AdminForbidden { .. } => "permission_denied",
            Self::ModelNotFound { .. }
            | Self::NoRuleMatched { .. }
            | Self::RouteNotAttached { .. } => "model_not_found",
            Self::ServerNotFound { .. } => "model_server_not_found",
            Self::NoMatchingListener => "no_matching_listener",
            Self::PoolNotFound { .. } => "inference_pool_not_found",
            Self::NoPoolBackend { .. } => "no_inference_pool_backend",
            Self::UnknownPath { .. } => "unknown_url",
            Self::MethodNotAllowed { .. } => "method_not_allowed",
            Self::BodyTooLarge { .. } => "request_too_large",
            Self::UnsupportedEncoding { .. } => "unsupported_content_encoding",
            Self::NoReadyEndpoint { .. } => "no_ready_endpoint",
            Self::LoraAdapterNotLoaded { .. } => "lora_adapter_not_loaded",
            Self::EndpointRequired => "missing_endpoint",
            Self::EndpointNotFound { .. } => "endpoint_not_found",
            Self::Scheduling { .. } => "scheduling_failed",
            Self::PdUnavailable { .. } => "no_prefill_decode_pair",
            Self::NotPickable { .. } => "not_pickable",
            Self::ProviderNotFound { .. } => "external_provider_not_found",
            Self::ProviderNotReady { .. } => "external_provider_not_ready",
            Self::ProviderPath { .. } => "unsupported_path",
            Self::ProviderTransport { .. } => "upstream_unavailable",
            Self::AllUpstreamsFailed { .. } | Self::PdAttemptsFailed { .. } => {
                "upstream_unavailable"
            }
            Self::UpstreamTimeout { .. } => "upstream_timeout",
            Self::Overloaded { .. } => "server_overloaded",
            Self::CircuitOpen { .. } => "circuit_open",
            Self::AuthHeaderInvalid => "missing_authorization",
            Self::Unauthorized { .. } => "invalid_token",
            Self::AuthUnavailable { .. } => "auth_unavailable",
            Self::RateLimited { .. } | Self::RateLimitTooLarge { .. } => "rate_limit_exceeded",
            Self::RateLimitUnavailable { .. } => "rate_limit_unavailable",
            Self::QueueTimeout { .. } => "queue_timeout",
            Self::QueueClientDisconnected => "client_disconnect",
            Self::ColdStartTimeout { .. } => "cold_start_timeout",
            Self::ColdStartShuttingDown { .. } => "cold_start_shutting_down",
            Self::ColdStartQueueFull { .. } => "cold_start_queue_full",
            Self::DrainCut => "drain_timeout",
            _ => "internal_error",
        }
    }

    /// The OpenAI error `param`, when one field is to blame.
    #[must_use]
    pub fn param(&self) -> Option<&'static str> {
        match self {
            Self::MissingModel
            | Self::ModelNotFound { .. }
            | Self::NoRuleMatched { .. }
            | Self::RouteNotAttached { .. }
            | Self::LoraAdapterNotLoaded { .. } => Some("model"),
            Self::InvalidField { param, .. } => Some(param),
            _ => None,
        }
    }

    /// The access-log `error` type (Go Kthena's `accesslog.SetError` types in
    /// `pkg/kthena-router/router/router.go`).
    #[must_use]
    pub fn finish_reason(&self) -> &'static str {
        match self {
            Self::ClientClosedRequest { .. } | Self::QueueClientDisconnected => "client_disconnect",
            Self::BadJson { .. }
            | Self::MissingModel
            | Self::InvalidField { .. }
            | Self::BodyTooLarge { .. }
            | Self::UnsupportedEncoding { .. }
            | Self::BodyRead { .. } => "request_parsing",
            Self::PromptNotFound => "prompt_parsing",
            Self::BodyTimeout { .. } => "request_timeout",
            Self::ModelNotFound { .. } | Self::UnknownPath { .. } | Self::NoMatchingListener => {
                "route_not_found"
            }
            Self::NoPoolBackend { .. } => "inference_pool_selection",
            Self::PoolNotFound { .. } => "inference_pool_discovery",
            Self::NoRuleMatched { .. } | Self::RouteNotAttached { .. } => "model_route_matching",
            Self::ServerNotFound { .. }
            | Self::NoReadyEndpoint { .. }
            | Self::LoraAdapterNotLoaded { .. }
            | Self::EndpointNotFound { .. } => "pod_discovery",
            Self::Scheduling { .. } | Self::PdUnavailable { .. } | Self::NotPickable { .. } => {
                "scheduling"
            }
            Self::AllUpstreamsFailed { .. } | Self::PdAttemptsFailed { .. } => "proxy",
            Self::UpstreamTimeout { .. } | Self::UpstreamIdle { .. } => "upstream_transport",
            Self::MethodNotAllowed { .. } | Self::ProviderPath { .. } => "request_protocol",
            Self::ProviderNotFound { .. } => "provider_discovery",
            Self::ProviderNotReady { .. } => "provider_config",
            Self::ProviderTransport { .. } => "upstream_transport",
            Self::Overloaded { .. }
            | Self::CircuitOpen { .. }
            | Self::BodyBudgetExhausted { .. } => "overload",
            Self::InvalidHeader { .. } => "request_protocol",
            Self::AdminForbidden { .. } => "authentication",
            Self::AuthHeaderInvalid | Self::Unauthorized { .. } | Self::AuthUnavailable { .. } => {
                "authentication"
            }
            Self::RateLimited { kind: "input", .. }
            | Self::RateLimitTooLarge { kind: "input", .. } => "input_rate_limit",
            Self::RateLimited { .. } | Self::RateLimitTooLarge { .. } => "output_rate_limit",
            Self::RateLimitUnavailable { .. } => "rate_limit",
            Self::QueueTimeout { .. } => "queue_timeout",
            Self::ColdStartTimeout { .. } => "cold_start_timeout",
            Self::ColdStartShuttingDown { .. } => "cold_start_shutting_down",
            Self::ColdStartQueueFull { .. } => "cold_start_queue_full",
            Self::DrainCut => "drain_timeout",
            _ => "request_failed",
        }
    }

    /// The `Retry-After` of the answer: overload, authentication and cold-start 503s, rate
    /// limit 429s.
    #[must_use]
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::Overloaded { retry_after, .. }
            | Self::CircuitOpen { retry_after, .. }
            | Self::AuthUnavailable { retry_after, .. }
            | Self::RateLimited { retry_after, .. }
            | Self::ColdStartTimeout { retry_after, .. }
            | Self::ColdStartShuttingDown { retry_after, .. }
            | Self::ColdStartQueueFull { retry_after, .. } => Some(*retry_after),
            Self::RateLimitUnavailable { .. } | Self::BodyBudgetExhausted { .. } => {
                Some(Duration::from_secs(1))
            }
            _ => None,
        }
    }

    /// The OpenAI-shaped JSON body: `{"error":{"message","type","param","code"}}`.
    #[must_use]
    pub fn to_body(&self) -> Bytes {
        openai_error_body(
            &self.to_string(),
            self.openai_type(),
            self.param(),
            self.code(),
        )
    }
}

/// Builds an OpenAI error body `{"error":{"message","type","param","code"}}`.
#[must_use]
///
/// The keys come in OpenAI's order (`message`, `type`, `param`, `code`), as OpenAI and vLLM
/// write them, so logs and byte-level comparisons match theirs.
pub(crate) fn openai_error_body(
    message: &str,
    kind: &str,
    param: Option<&str>,
    code: &str,
) -> Bytes {
    #[derive(serde::Serialize)]
    struct Body<'a> {
        error: Inner<'a>,
    }
    #[derive(serde::Serialize)]
    struct Inner<'a> {
        message: &'a str,
        #[serde(rename = "type")]
        kind: &'a str,
        param: Option<&'a str>,
        code: &'a str,
    }
    let body = Body {
        error: Inner {
            message,
            kind,
            param,
            code,
        },
    };
    // Serializing plain strings and options into a Vec cannot fail.
    Bytes::from(serde_json::to_vec(&body).unwrap_or_default())
}

/// A JSON answer with `status` and `application/json`.
pub(crate) fn json_response(status: StatusCode, body: impl Into<Bytes>) -> Response<RespBody> {
    let mut r = Response::new(full(body));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

/// The OpenAI-shaped error answer for an error. A 408 (or a 503 for a full body budget)
/// also closes the connection: the rest of the body is never read; a 405 names the allowed method (`Allow: POST`,
/// or `GET` on `/v1/models`).
#[must_use]
pub(crate) fn error_response(e: &Error) -> Response<RespBody> {
    let mut r = json_response(e.status(), e.to_body());
    if matches!(
        e,
        Error::BodyTimeout { .. } | Error::BodyBudgetExhausted { .. }
    ) {
        r.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    if let Error::MethodNotAllowed { path, .. } = e {
        // RFC 9110 §15.5.6: a 405 must name the allowed method. `/v1/models` is GET only,
        // every other path that answers 405 is POST only.
        let allow = if path == "/v1/models" { "GET" } else { "POST" };
        r.headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static(allow));
    }
    if let Some(after) = e.retry_after() {
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(after.as_secs()));
    }
    r
}
