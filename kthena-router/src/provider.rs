//! External model providers (Go Kthena
//! `pkg/apis/networking/v1alpha1/externalmodelprovider_types.go`, `pkg/kthena-router/providers/*`):
//! an `ExternalModelProvider` is an OpenAI- or Anthropic-shaped HTTPS API outside the cluster that
//! a ModelRoute target can name. This module resolves a provider manifest and its credential into a
//! [`Provider`]; [`forward`] proxies a request to it.
//!
//! A credential (`spec.auth.secretRef`, a Secret name and key) comes from [`Secrets`]: in
//! standalone mode `standalone.secrets` ([`SecretSource`], a file or an environment variable
//! standing in for the Secret's key), in cluster mode the Secrets labelled
//! [`CREDENTIAL_LABEL`]` = "true"` (Go Kthena's label); [`status`] writes the provider's
//! status conditions there.

// A leaf module (no `crate::` imports): config and discovery use its types; the request path
// reaches `forward` by its own path.
pub(crate) mod forward;
pub(crate) mod status;

use std::collections::BTreeMap;
use std::path::PathBuf;

use http::{HeaderName, HeaderValue, Uri};
use kthena_api::networking::{AuthScheme, ExternalModelProvider, ProviderType};
use serde::Deserialize;

/// Client headers passed on to every provider (Go Kthena's allow-list); others are dropped.
pub(crate) const ALLOWED_HEADERS: [&str; 11] = [
    "content-type",
    "accept",
    "x-request-id",
    "traceparent",
    "tracestate",
    "baggage",
    "x-b3-traceid",
    "x-b3-spanid",
    "x-b3-parentspanid",
    "x-b3-sampled",
    "x-b3-flags",
];

/// Client headers also passed on to Anthropic providers.
pub(crate) const ANTHROPIC_HEADERS: [&str; 2] = ["anthropic-version", "anthropic-beta"];

/// Header names `spec.headers` may not set (credentials and hop-by-hop headers).
pub(crate) const RESERVED_HEADERS: [&str; 13] = [
    "authorization",
    "proxy-authorization",
    "cookie",
    "x-api-key",
    "host",
    "content-length",
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "upgrade",
    "trailer",
    "te",
];

/// A standalone stand-in for one key of a Kubernetes Secret: `standalone.secrets[]`.
///
/// ```yaml
/// standalone:
///   secrets:
///   - {name: openai, key: api-key, file: keys/openai}      # file relative to the config
///   - {name: anthropic, key: api-key, env: ANTHROPIC_API_KEY}
/// ```
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SecretSource {
    /// The Secret's name (`secretRef.name`).
    pub name: String,
    /// The Secret's namespace (default `default`).
    #[serde(default = "default_namespace")]
    pub namespace: String,
    /// The key (`secretRef.key`).
    pub key: String,
    /// A file holding the value (read at every load; relative to the config file).
    #[serde(default)]
    pub file: Option<PathBuf>,
    /// An environment variable holding the value (read when the config is loaded).
    #[serde(default)]
    pub env: Option<String>,
    /// The value of `env`, filled in when the config is loaded.
    #[serde(skip)]
    pub env_value: Option<String>,
}

fn default_namespace() -> String {
    "default".into()
}

/// The label (value `"true"`) a Secret needs in cluster mode to be read as a credential
/// (Go Kthena's `ExternalModelProviderSecretLabelKey`): the router watches only those.
pub(crate) const CREDENTIAL_LABEL: &str =
    "networking.serving.volcano.sh/external-model-provider-credential";

/// Credential values by Secret (`namespace`, `name`) and key.
#[derive(Debug, Clone, Default)]
pub struct Secrets {
    by_secret: BTreeMap<(String, String), BTreeMap<String, String>>,
    /// Appended to the reason of a missing Secret (cluster mode: the label it needs).
    missing_hint: &'static str,
}

impl Secrets {
    /// No Secret; a missing Secret's reason is "not found" followed by `missing_hint`.
    #[must_use]
    pub fn new(missing_hint: &'static str) -> Self {
        Self {
            by_secret: BTreeMap::new(),
            missing_hint,
        }
    }

    /// Records Secret `namespace/name` (also when it has no key).
    pub fn add_secret(&mut self, namespace: &str, name: &str) {
        self.by_secret
            .entry((namespace.to_owned(), name.to_owned()))
            .or_default();
    }

    /// Records `key` of Secret `namespace/name`.
    pub fn insert(&mut self, namespace: &str, name: &str, key: &str, value: String) {
        self.by_secret
            .entry((namespace.to_owned(), name.to_owned()))
            .or_default()
            .insert(key.to_owned(), value);
    }

    fn lookup(&self, namespace: &str, name: &str, key: &str) -> Result<&str, CredentialState> {
        let secret = self
            .by_secret
            .get(&(namespace.to_owned(), name.to_owned()))
            .ok_or(CredentialState::NotFound)?;
        secret
            .get(key)
            .filter(|v| !v.is_empty())
            .map(String::as_str)
            .ok_or(CredentialState::KeyNotFound)
    }
}

/// Where a provider's credential stands: Go Kthena's `CredentialsResolved` reasons.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CredentialState {
    /// No `spec.auth` (`CredentialNotRequired`).
    NotRequired,
    /// The Secret and key hold a usable value (`CredentialResolved`).
    Resolved,
    /// No such Secret (`CredentialNotFound`).
    NotFound,
    /// The Secret lacks the key, or its value is empty (`CredentialKeyNotFound`).
    KeyNotFound,
    /// The value cannot be sent: blank after trimming, or not a header value
    /// (`CredentialInvalid`, with the reason).
    Invalid(String),
}

/// A resolved `ExternalModelProvider`.
#[derive(Debug, Clone)]
pub struct Provider {
    /// `namespace/name`.
    pub key: String,
    /// OpenAI or Anthropic.
    pub kind: ProviderType,
    /// `spec.baseURL` (an `https://` URL).
    pub base_url: String,
    /// `spec.model`: the model sent upstream instead of the request's.
    pub model: Option<String>,
    /// `spec.insecureSkipVerify`.
    pub insecure_skip_verify: bool,
    /// `spec.headers`, checked.
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// The credential header, `None` without `spec.auth`; `Err` with the reason the provider
    /// is not ready (Secret or key missing, invalid configuration).
    pub credential: Result<Option<(HeaderName, HeaderValue)>, String>,
    /// How the credential was resolved (the `CredentialsResolved` condition).
    pub credential_state: CredentialState,
    /// Why the spec cannot be used (`Ready=False`, `ConfigurationInvalid`): a reserved or
    /// invalid `spec.headers` name, an unparsable `baseURL`.
    pub config_error: Option<String>,
}

impl Provider {
    /// Resolves `p` (defaults applied) with its credential from `secrets`.
    #[must_use]
    pub fn resolve(p: &ExternalModelProvider, secrets: &Secrets) -> Self {
        let ns = p.metadata.namespace.as_deref().unwrap_or("default");
        let name = p.metadata.name.as_deref().unwrap_or_default();
        let s = &p.spec;
        let kind = s.provider_type.unwrap_or_default();
        let (headers, config_error) = check_spec(s);
        let (credential_state, header) = match &s.auth {
            None => (CredentialState::NotRequired, None),
            Some(auth) => {
                let r = &auth.secret_ref;
                let scheme = auth.scheme.unwrap_or(match kind {
                    ProviderType::OpenAI => AuthScheme::Bearer,
                    ProviderType::Anthropic => AuthScheme::ApiKey,
                });
                match secrets
                    .lookup(ns, &r.name, &r.key)
                    .and_then(|v| credential(v, scheme))
                {
                    Ok(h) => (CredentialState::Resolved, Some(h)),
                    Err(state) => (state, None),
                }
            }
        };
        let credential = match (&config_error, &credential_state, &s.auth) {
            (Some(reason), _, _) => Err(reason.clone()),
            (None, CredentialState::NotRequired | CredentialState::Resolved, _) => Ok(header),
            (None, state, Some(auth)) => {
                let why = match state {
                    CredentialState::NotFound => format!("not found{}", secrets.missing_hint),
                    CredentialState::KeyNotFound => "key not found or empty".into(),
                    CredentialState::Invalid(why) => why.clone(),
                    CredentialState::NotRequired | CredentialState::Resolved => String::new(),
                };
                let r = &auth.secret_ref;
                Err(format!("Secret {ns}/{} key {}: {why}", r.name, r.key))
            }
            (None, _, None) => Ok(None),
        };
        Self {
            key: format!("{ns}/{name}"),
            kind,
            base_url: s.base_url.clone(),
            model: s.model.clone(),
            insecure_skip_verify: s.insecure_skip_verify.unwrap_or(false),
            headers,
            credential,
            credential_state,
            config_error,
        }
    }

    /// The upstream URL of `path_and_query` (Go Kthena's rules): OpenAI drops the leading
    /// `/v1` of the path when the base URL has a path; Anthropic only when that path ends
    /// with `/v1`.
    #[must_use]
    pub fn upstream_url(&self, path_and_query: &str) -> String {
        let base = self.base_url.trim_end_matches('/');
        let base_path = base
            .strip_prefix("https://")
            .and_then(|r| r.find('/').map(|i| &r[i..]))
            .unwrap_or("");
        let strip = match self.kind {
            ProviderType::OpenAI => !base_path.is_empty(),
            ProviderType::Anthropic => base_path.ends_with("/v1"),
        };
        let rest = if strip {
            path_and_query
                .strip_prefix("/v1")
                .filter(|r| r.is_empty() || r.starts_with('/') || r.starts_with('?'))
                .unwrap_or(path_and_query)
        } else {
            path_and_query
        };
        format!("{base}{rest}")
    }

    /// Whether the provider serves `path`: OpenAI every inference path
    /// (`kthena_openai::Api::of_path`: chat, completions, responses, embeddings,
    /// audio, ...) but `/v1/messages`; Anthropic `/v1/messages` only.
    #[must_use]
    pub fn serves(&self, path: &str) -> bool {
        match self.kind {
            ProviderType::OpenAI => {
                path != "/v1/messages" && kthena_openai::Api::of_path(path).is_some()
            }
            ProviderType::Anthropic => path == "/v1/messages",
        }
    }
}

/// The checked `spec.headers`, and the first reason the spec is unusable.
fn check_spec(
    s: &kthena_api::networking::ExternalModelProviderSpec,
) -> (Vec<(HeaderName, HeaderValue)>, Option<String>) {
    let mut headers = Vec::new();
    let mut invalid = None;
    for (k, v) in &s.headers {
        match (
            HeaderName::try_from(k.as_str()),
            HeaderValue::try_from(v.as_str()),
        ) {
            (Ok(n), _) if RESERVED_HEADERS.contains(&n.as_str()) => {
                invalid = Some(format!("spec.headers: {k} may not be set here"));
            }
            (Ok(n), Ok(v)) => headers.push((n, v)),
            _ => invalid = Some(format!("spec.headers: {k} is not a valid header")),
        }
    }
    if s.base_url.parse::<Uri>().is_err() {
        invalid = Some(format!("spec.baseURL {:?} is not a URL", s.base_url));
    }
    (headers, invalid)
}

/// The credential header of a Secret value (trimmed, as Go Kthena does).
fn credential(
    value: &str,
    scheme: AuthScheme,
) -> Result<(HeaderName, HeaderValue), CredentialState> {
    let value = value.trim();
    if value.is_empty() {
        return Err(CredentialState::Invalid(
            "the value is only whitespace".into(),
        ));
    }
    let (name, text) = match scheme {
        AuthScheme::Bearer => (http::header::AUTHORIZATION, format!("Bearer {value}")),
        AuthScheme::ApiKey => (HeaderName::from_static("x-api-key"), value.to_owned()),
    };
    let mut v = HeaderValue::try_from(text)
        .map_err(|_| CredentialState::Invalid("not a valid header value".into()))?;
    v.set_sensitive(true);
    Ok((name, v))
}

/// The values of `standalone.secrets`: files are read now (relative to `base_dir`),
/// environment values were read with the config. A source whose file or variable is
/// missing leaves its key out.
#[must_use]
pub(crate) fn read_secrets(sources: &[SecretSource], base_dir: &std::path::Path) -> Secrets {
    let mut out = Secrets::new("");
    for s in sources {
        let value = match &s.file {
            Some(f) => std::fs::read_to_string(base_dir.join(f)).ok(),
            None => s.env_value.clone(),
        };
        if let Some(v) = value {
            out.insert(&s.namespace, &s.name, &s.key, v);
        }
    }
    out
}

#[cfg(test)]
mod tests;
