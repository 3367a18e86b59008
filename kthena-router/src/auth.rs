//! JWT authentication of `/v1/*` requests, as Go Kthena's `pkg/kthena-router/filters/auth`.
//!
//! Enabled when the config's `auth.jwksUri` is set. Every `/v1/*` request needs an
//! `Authorization` header of exactly two whitespace-separated fields, the first `Bearer`
//! (any case), the second a JWT signed by a key of the JWKS; then `iss` must equal
//! `auth.issuer`, `aud` (a string or a list) must hold one of `auth.audiences` when any are
//! configured, `exp` must be present and not passed, `nbf` (if present) passed, `iat` (if
//! present) at most one minute ahead, and `sub` present. `sub` becomes the request's user id
//! ([`UserId`], the access log's `user_id`).
//!
//! The key set is fetched in the background ([`Authenticator::run`]): at start, then every
//! `auth.jwksRefreshInterval` (7 days, as Go). A failed fetch is retried every
//! `auth.jwksRetryInterval` and keeps the keys already fetched. Until the first fetch
//! succeeds, requests needing authentication get 503 with `Retry-After`
//! ([`Error::AuthUnavailable`]); health, readiness and `/metrics` are served as usual. A
//! token naming a `kid` the set does not hold (the issuer rotated its keys) makes the set be
//! fetched at once, at most once per `auth.jwksMinRefreshInterval`.
//!
//! The token's `scope`/`scp` claims ([`Principal::scopes`]) decide who may call the LoRA
//! admin paths (`auth.adminScope`, see `lora::may_administer`).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwapOption;
use bytes::Bytes;
use http::HeaderMap;
use http_body_util::{BodyExt, Full, Limited};
use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use crate::error::Error;

/// The `auth:` section of the router config (Go Kthena's `AuthenticationConfig`).
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct AuthConfig {
    /// The `iss` every token must carry.
    pub issuer: String,
    /// Accepted `aud` values; empty: `aud` is not checked.
    pub audiences: Vec<String>,
    /// Where the JWKS is fetched (`http://` or `https://`); empty: authentication off.
    pub jwks_uri: String,
    /// How often the key set is fetched again after a success (default `168h`, Go's 7 days).
    #[serde(with = "crate::config::duration::go_duration")]
    pub jwks_refresh_interval: Duration,
    /// Pause before fetching again after a failed fetch (default `5s`; Go waits for the next
    /// 7-day refresh).
    #[serde(with = "crate::config::duration::go_duration")]
    pub jwks_retry_interval: Duration,
    /// A token naming a `kid` the key set does not hold makes the router fetch the set at
    /// once (a key rotation), at most once per this interval (default `10s`; Go has no
    /// such fetch).
    #[serde(with = "crate::config::duration::go_duration")]
    pub jwks_min_refresh_interval: Duration,
    /// The scope a token needs for `POST /v1/load_lora_adapter` and
    /// `/v1/unload_lora_adapter` (default `kthena:lora-admin`), found in the token's `scope`
    /// claim (space-separated, RFC 8693 section 4.2) or `scp` (a list or a string).
    pub admin_scope: String,
    /// Without authentication (`jwksUri` empty), serve the LoRA load/unload calls on the
    /// inference port to anyone who reaches it (default `false`: answered 403).
    pub allow_unauthenticated_admin: bool,
    /// Pass the client's `Authorization` header on to engines (default `false`: it is
    /// removed before forwarding, so a client's token never reaches an engine).
    pub forward_authorization: bool,
}

impl Default for AuthConfig {
    /// Off (no `jwksUri`), refresh every 7 days, retry every 5 s, a fetch for an unknown
    /// `kid` at most every 10 s, admin scope `kthena:lora-admin`, no unauthenticated admin
    /// calls, the client's `Authorization` not forwarded.
    fn default() -> Self {
        Self {
            issuer: String::new(),
            audiences: Vec::new(),
            jwks_uri: String::new(),
            jwks_refresh_interval: Duration::from_secs(7 * 24 * 3600),
            jwks_retry_interval: Duration::from_secs(5),
            jwks_min_refresh_interval: Duration::from_secs(10),
            admin_scope: DEFAULT_ADMIN_SCOPE.to_owned(),
            allow_unauthenticated_admin: false,
            forward_authorization: false,
        }
    }
}

/// The default `auth.adminScope`.
pub(crate) const DEFAULT_ADMIN_SCOPE: &str = "kthena:lora-admin";

/// An authenticated caller: the token's `sub` and scopes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Principal {
    /// The `sub` claim.
    pub(crate) sub: String,
    /// The `scope` (space-separated) and `scp` (list or string) claims' values.
    pub(crate) scopes: Vec<String>,
}

impl Principal {
    /// Whether the caller holds `scope`.
    pub(crate) fn has_scope(&self, scope: &str) -> bool {
        self.scopes.iter().any(|s| s == scope)
    }
}

/// The authenticated user of a request: the token's `sub` (a request extension).
#[derive(Debug, Clone)]
#[allow(dead_code, reason = "read by the stages that order requests per user")]
pub(crate) struct UserId(pub(crate) Arc<str>);

/// Largest JWKS document read, bytes.
const MAX_JWKS_BYTES: usize = 1024 * 1024;

/// Timeout of one JWKS fetch.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

/// Timeout of the fetch awaited at start (Go waits up to 3 × 30 s).
const FIRST_FETCH_TIMEOUT: Duration = Duration::from_secs(3);

/// Go's allowance for `iat` in the future, seconds.
const IAT_SKEW_SECS: f64 = 60.0;

/// Validates bearer tokens against the fetched key set.
#[derive(Debug)]
pub(crate) struct Authenticator {
    cfg: AuthConfig,
    keys: ArcSwapOption<Vec<Jwk>>,
    /// When the last fetch for an unknown `kid` started (one at a time).
    on_demand: tokio::sync::Mutex<Option<tokio::time::Instant>>,
}

impl Authenticator {
    /// An authenticator for `cfg`, `None` when `jwksUri` is empty (authentication off).
    pub(crate) fn new(cfg: &AuthConfig) -> Option<Arc<Self>> {
        (!cfg.jwks_uri.is_empty()).then(|| {
            Arc::new(Self {
                cfg: cfg.clone(),
                keys: ArcSwapOption::empty(),
                on_demand: tokio::sync::Mutex::new(None),
            })
        })
    }

    /// Replaces the key set (the keys of a fetched JWKS document).
    pub(crate) fn set_keys(&self, keys: Vec<Jwk>) {
        self.keys.store(Some(Arc::new(keys)));
    }

    /// The caller of the request's valid bearer token. A token whose `kid` the key set
    /// does not hold first makes the set be fetched again (at most once per
    /// `jwksMinRefreshInterval`; see [`Authenticator::refresh_for`]).
    ///
    /// # Errors
    /// [`Error::AuthHeaderInvalid`] without a `Bearer <token>` header,
    /// [`Error::AuthUnavailable`] before the key set arrived, [`Error::Unauthorized`] with
    /// Go's reason for a token that fails signature or claim checks.
    pub(crate) async fn authenticate(&self, headers: &HeaderMap) -> Result<Principal, Error> {
        let token = bearer_token(headers).ok_or(Error::AuthHeaderInvalid)?;
        let mut keys = self.current_keys()?;
        if let Some(kid) = unknown_kid(token, &keys) {
            self.refresh_for(&kid).await;
            keys = self.current_keys()?;
        }
        let claims =
            verify(token, &keys).map_err(|e| unauthorized(format!("failed to parse jwt: {e}")))?;
        let now = jiff::Timestamp::now().as_millisecond() as f64 / 1000.0;
        let sub = check_claims(&self.cfg, &claims, now)
            .map_err(|e| unauthorized(format!("failed to validate claims: {e}")))?;
        Ok(Principal {
            sub,
            scopes: scopes(&claims),
        })
    }

    /// The key set, [`Error::AuthUnavailable`] before the first fetch succeeded.
    fn current_keys(&self) -> Result<Arc<Vec<Jwk>>, Error> {
        self.keys.load_full().ok_or_else(|| Error::AuthUnavailable {
            jwks_uri: self.cfg.jwks_uri.clone(),
            retry_after: whole_secs(self.cfg.jwks_retry_interval),
        })
    }

    /// Fetches the key set for a token naming `kid`, which it does not hold (the issuer
    /// rotated its keys): one fetch at a time, waited for (at most [`FIRST_FETCH_TIMEOUT`]);
    /// none when `kid` arrived meanwhile or the last such fetch started less than
    /// `jwksMinRefreshInterval` ago, so that tokens with made-up `kid`s cannot make the
    /// router hammer the JWKS server.
    async fn refresh_for(&self, kid: &str) {
        let mut last = self.on_demand.lock().await;
        let known = self
            .keys
            .load()
            .as_ref()
            .is_some_and(|k| k.iter().any(|j| j.common.key_id.as_deref() == Some(kid)));
        let recent = last.is_some_and(|t| t.elapsed() < self.cfg.jwks_min_refresh_interval);
        if known || recent {
            return;
        }
        *last = Some(tokio::time::Instant::now());
        tracing::info!(
            kid,
            "A token names a key the JWKS does not hold; fetching it again"
        );
        let _ = self.fetch_once(&jwks_client(), FIRST_FETCH_TIMEOUT).await;
    }

    /// Fetches the key set every refresh interval (every retry interval after a failure)
    /// until `cancel`.
    pub(crate) async fn run(self: Arc<Self>, cancel: CancellationToken) {
        let client = jwks_client();
        // After the start-up fetch (`first_fetch`): refresh, or retry when it failed.
        let mut pause = if self.keys.load().is_some() {
            self.cfg.jwks_refresh_interval
        } else {
            self.cfg.jwks_retry_interval
        };
        loop {
            tokio::select! {
                () = cancel.cancelled() => return,
                () = tokio::time::sleep(pause) => {}
            }
            tokio::select! {
                () = cancel.cancelled() => return,
                p = self.fetch_once(&client, FETCH_TIMEOUT) => pause = p,
            }
        }
    }

    /// The first fetch, awaited before the router listens so that its first requests find
    /// the keys (bounded by [`FIRST_FETCH_TIMEOUT`]; [`Authenticator::run`] goes on after
    /// a failure).
    pub(crate) async fn first_fetch(&self) {
        let _ = self.fetch_once(&jwks_client(), FIRST_FETCH_TIMEOUT).await;
    }

    /// One fetch; the pause before the next one.
    async fn fetch_once(&self, client: &JwksClient, timeout: Duration) -> Duration {
        match fetch(client, &self.cfg.jwks_uri, timeout).await {
            Ok(keys) => {
                tracing::info!(uri = %self.cfg.jwks_uri, keys = keys.len(), "JWKS fetched");
                self.set_keys(keys);
                self.cfg.jwks_refresh_interval
            }
            Err(reason) => {
                tracing::error!(uri = %self.cfg.jwks_uri, %reason, retry_in = ?self.cfg.jwks_retry_interval, "Failed to fetch JWKS");
                self.cfg.jwks_retry_interval
            }
        }
    }
}

fn unauthorized(reason: String) -> Error {
    Error::Unauthorized { reason }
}

/// `d` rounded up to whole seconds, at least 1 s.
fn whole_secs(d: Duration) -> Duration {
    Duration::from_secs(d.as_secs() + u64::from(d.subsec_nanos() > 0)).max(Duration::from_secs(1))
}

/// The token of `Authorization: Bearer <token>` (Go's `extractTokenFromHeader`: exactly two
/// whitespace-separated fields, scheme compared without case).
pub(crate) fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let v = headers.get(http::header::AUTHORIZATION)?.to_str().ok()?;
    let mut fields = v.split_whitespace();
    let (scheme, token) = (fields.next()?, fields.next()?);
    (fields.next().is_none() && scheme.eq_ignore_ascii_case("Bearer")).then_some(token)
}

/// The algorithms a key may verify: its `alg` when set, else those of its type and curve
/// (jwx's `WithInferAlgorithmFromKey`).
fn key_algorithms(jwk: &Jwk) -> Vec<Algorithm> {
    use Algorithm::{
        ES256, ES384, EdDSA, HS256, HS384, HS512, PS256, PS384, PS512, RS256, RS384, RS512,
    };
    if let Some(alg) = jwk.common.key_algorithm {
        return [
            RS256, RS384, RS512, PS256, PS384, PS512, ES256, ES384, EdDSA, HS256, HS384, HS512,
        ]
        .into_iter()
        .filter(|a| format!("{a:?}") == format!("{alg:?}"))
        .collect();
    }
    match &jwk.algorithm {
        AlgorithmParameters::RSA(_) => vec![RS256, RS384, RS512, PS256, PS384, PS512],
        AlgorithmParameters::EllipticCurve(p) => match p.curve {
            EllipticCurve::P256 => vec![ES256],
            EllipticCurve::P384 => vec![ES384],
            _ => Vec::new(),
        },
        AlgorithmParameters::OctetKeyPair(_) => vec![EdDSA],
        AlgorithmParameters::OctetKey(_) => vec![HS256, HS384, HS512],
    }
}

/// The token's `kid` when it names one the key set does not hold.
fn unknown_kid(token: &str, keys: &[Jwk]) -> Option<String> {
    let kid = jsonwebtoken::decode_header(token).ok()?.kid?;
    (!keys
        .iter()
        .any(|k| k.common.key_id.as_deref() == Some(kid.as_str())))
    .then_some(kid)
}

/// The scopes of `scope` (a space-separated string, RFC 8693 section 4.2) and `scp` (a
/// list of strings or one space-separated string, as Azure AD and Okta issue it).
fn scopes(claims: &Map<String, Value>) -> Vec<String> {
    let mut out = Vec::new();
    for name in ["scope", "scp"] {
        match claims.get(name) {
            Some(Value::String(s)) => out.extend(s.split_whitespace().map(str::to_owned)),
            Some(Value::Array(a)) => {
                out.extend(a.iter().filter_map(Value::as_str).map(str::to_owned))
            }
            _ => {}
        }
    }
    out
}

/// Verifies the signature with the keys of the set (those with the token's `kid` when it
/// names one) and returns the claims. Claims are checked by [`check_claims`].
fn verify(token: &str, keys: &[Jwk]) -> Result<Map<String, Value>, String> {
    let header = jsonwebtoken::decode_header(token).map_err(|e| e.to_string())?;
    let mut validation = Validation::new(header.alg);
    validation.required_spec_claims = HashSet::new();
    validation.validate_exp = false;
    validation.validate_nbf = false;
    validation.validate_aud = false;
    validation.leeway = 0;
    let candidates = keys
        .iter()
        .filter(|k| header.kid.is_none() || k.common.key_id.as_deref() == header.kid.as_deref());
    for jwk in candidates {
        if !key_algorithms(jwk).contains(&header.alg) {
            continue;
        }
        let Ok(key) = DecodingKey::from_jwk(jwk) else {
            continue;
        };
        if let Ok(data) = jsonwebtoken::decode::<Map<String, Value>>(token, &key, &validation) {
            return Ok(data.claims);
        }
    }
    Err("could not verify message using any of the signatures or keys".into())
}

/// Go's `validateClaims` (issuer, audiences, time claims) plus the required `sub`; returns
/// the `sub`. `now` is Unix seconds.
fn check_claims(cfg: &AuthConfig, claims: &Map<String, Value>, now: f64) -> Result<String, String> {
    let iss = claims
        .get("iss")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if iss != cfg.issuer {
        return Err(format!(
            "issuer validation failed: invalid issuer: expected {}, got {iss}",
            cfg.issuer
        ));
    }
    check_audience(cfg, claims).map_err(|e| format!("audience validation failed: {e}"))?;
    check_times(claims, now).map_err(|e| format!("time claims validation failed: {e}"))?;
    match claims.get("sub").and_then(Value::as_str) {
        Some(sub) if !sub.is_empty() => Ok(sub.to_owned()),
        _ => Err("subject claim (sub) missing".into()),
    }
}

/// Go's `%v` of a string list: `[a b]`.
fn go_list(v: &[String]) -> String {
    format!("[{}]", v.join(" "))
}

fn check_audience(cfg: &AuthConfig, claims: &Map<String, Value>) -> Result<(), String> {
    if cfg.audiences.is_empty() {
        return Ok(());
    }
    let aud: Vec<String> = match claims.get("aud") {
        None | Some(Value::Null) => return Err("audience claim missing".into()),
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect(),
        Some(other) => vec![other.to_string()],
    };
    if aud.iter().any(|a| cfg.audiences.contains(a)) {
        return Ok(());
    }
    Err(format!(
        "audience mismatch: expected one of {}, got {}",
        go_list(&cfg.audiences),
        go_list(&aud)
    ))
}

/// A NumericDate claim in seconds, `Err` for a non-number.
fn numeric(claims: &Map<String, Value>, name: &str) -> Result<Option<f64>, String> {
    match claims.get(name) {
        None => Ok(None),
        Some(v) => v
            .as_f64()
            .map(|s| Some(s.trunc()))
            .ok_or_else(|| format!("invalid {name} value: {v}")),
    }
}

fn check_times(claims: &Map<String, Value>, now: f64) -> Result<(), String> {
    let Some(exp) = numeric(claims, "exp")? else {
        return Err("expiration claim (exp) missing".into());
    };
    if now > exp {
        return Err("token has expired".into());
    }
    if numeric(claims, "nbf")?.is_some_and(|nbf| now < nbf) {
        return Err("token not yet valid".into());
    }
    if numeric(claims, "iat")?.is_some_and(|iat| now + IAT_SKEW_SECS < iat) {
        return Err("token issued in the future".into());
    }
    Ok(())
}

/// The client of JWKS fetches: plain HTTP always, HTTPS through the router's one TLS
/// client builder (`upstream::tls`; an error when the system has no root certificates).
struct JwksClient {
    http: hyper_util::client::legacy::Client<
        hyper_util::client::legacy::connect::HttpConnector,
        Full<Bytes>,
    >,
    https: Result<&'static crate::upstream::tls::HttpsClient, crate::upstream::tls::TlsError>,
}

fn jwks_client() -> JwksClient {
    let exec = hyper_util::rt::TokioExecutor::new();
    let builder = hyper_util::client::legacy::Client::builder(exec);
    JwksClient {
        http: builder.build_http(),
        https: crate::upstream::tls::client(crate::upstream::tls::Scheme::HttpsOrHttp, false),
    }
}

/// The keys of the JWKS at `uri`; keys of types the verifier does not know are skipped.
async fn fetch(client: &JwksClient, uri: &str, timeout: Duration) -> Result<Vec<Jwk>, String> {
    let uri: http::Uri = uri.parse().map_err(|e| format!("invalid URI: {e}"))?;
    let get = match uri.scheme_str() {
        Some("https") => client.https.as_ref().map_err(ToString::to_string)?.get(uri),
        _ => client.http.get(uri),
    };
    let resp = tokio::time::timeout(timeout, get)
        .await
        .map_err(|_| format!("no answer within {timeout:?}"))?
        .map_err(|e| e.to_string())?;
    let status = resp.status();
    let body = tokio::time::timeout(
        timeout,
        Limited::new(resp.into_body(), MAX_JWKS_BYTES).collect(),
    )
    .await
    .map_err(|_| format!("body not received within {timeout:?}"))?
    .map_err(|e| e.to_string())?
    .to_bytes();
    if !status.is_success() {
        return Err(format!("answered {status}"));
    }
    parse_jwks(&body)
}

/// The usable keys of a JWKS document `{"keys":[...]}`.
pub(crate) fn parse_jwks(body: &[u8]) -> Result<Vec<Jwk>, String> {
    #[derive(Deserialize)]
    struct Doc {
        keys: Vec<Value>,
    }
    let doc: Doc = serde_json::from_slice(body).map_err(|e| format!("invalid JWKS: {e}"))?;
    let keys: Vec<Jwk> = doc
        .keys
        .into_iter()
        .filter_map(|k| serde_json::from_value(k).ok())
        .collect();
    if keys.is_empty() {
        return Err("the JWKS holds no usable key".into());
    }
    Ok(keys)
}

#[cfg(test)]
mod tests;
