//! The request path to an external provider: checks, URL, allow-listed headers, body
//! (`model` from `spec.model`; OpenAI streams get `stream_options.include_usage`), one
//! HTTPS call without retries, and the answer streamed back through the router's
//! [`ProxyBody`](crate::proxy::ProxyBody) (usage read for the access log and metrics,
//! an injected usage chunk hidden, non-2xx answers passed through).

use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Request, Response};
use http_body_util::Full;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use kthena_api::networking::ProviderType;

use super::{ALLOWED_HEADERS, ANTHROPIC_HEADERS, Provider};
use crate::accounting::Accounting;
use crate::body::RespBody;
use crate::error::Error;
use crate::error::error_chain;
use crate::pipeline::{Parsed, RequestId, ext, stream_response};
use crate::shared::Shared;

type HttpsClient = Client<HttpsConnector<HttpConnector>, Full<Bytes>>;

/// Sends the request to `provider` and streams its answer.
///
/// # Errors
/// [`Error::ProviderPath`] for a path the provider type does not serve,
/// [`Error::ProviderNotReady`] when its credential or configuration is unusable,
/// [`Error::ProviderTransport`] when the call fails before an answer.
pub(crate) async fn forward(
    shared: Arc<Shared>,
    req: Request<()>,
    provider: Arc<Provider>,
) -> Result<Response<RespBody>, Error> {
    let parsed = ext::<Parsed>(&req, "parsed request")?;
    let acct = ext::<Accounting>(&req, "accounting")?;
    let request_id = ext::<RequestId>(&req, "request id")?;
    let path = req.uri().path();
    if !provider.serves(path) {
        return Err(Error::ProviderPath {
            provider_type: match provider.kind {
                ProviderType::OpenAI => "OpenAI",
                ProviderType::Anthropic => "Anthropic",
            },
            path: path.to_owned(),
        });
    }
    let credential = provider
        .credential
        .clone()
        .map_err(|reason| Error::ProviderNotReady {
            provider: provider.key.clone(),
            reason,
        })?;
    let inject = provider.kind == ProviderType::OpenAI && path != "/v1/responses";
    let body = if inject {
        parsed.req.upstream_body(provider.model.as_deref())
    } else {
        parsed
            .req
            .upstream_responses_body(provider.model.as_deref())
    };
    let path_and_query = req.uri().path_and_query().map_or(path, |p| p.as_str());
    let url = provider.upstream_url(path_and_query);
    let mut up = Request::builder().method(Method::POST).uri(&url);
    if let Some(h) = up.headers_mut() {
        *h = headers(&provider, req.headers(), &request_id.0, credential);
    }
    let up = up
        .body(Full::new(body.bytes.clone()))
        .map_err(|e| Error::ProviderNotReady {
            provider: provider.key.clone(),
            reason: format!("upstream request {url}: {e}"),
        })?;
    acct.upstream_begin();
    acct.attempt(&provider.key, 1);
    let client =
        client(provider.insecure_skip_verify).map_err(|reason| Error::ProviderNotReady {
            provider: provider.key.clone(),
            reason: format!("TLS client: {reason}"),
        })?;
    let resp = client.request(up).await.map_err(|e| {
        acct.upstream_end();
        Error::ProviderTransport {
            provider: provider.key.clone(),
            reason: error_chain(&e),
        }
    })?;
    acct.upstream_status(resp.status().as_u16());
    acct.upstream_end();
    Ok(stream_response(
        resp.map(crate::upstream::UpBody::from),
        acct,
        &parsed.req,
        body.injected_usage,
        &shared,
    ))
}

/// The allow-listed client headers, then `spec.headers`, then the credential; JSON by
/// default.
fn headers(
    provider: &Provider,
    client: &HeaderMap,
    request_id: &str,
    credential: Option<(HeaderName, HeaderValue)>,
) -> HeaderMap {
    let mut h = HeaderMap::new();
    let anthropic = provider.kind == ProviderType::Anthropic;
    for (name, value) in client {
        let n = name.as_str();
        if ALLOWED_HEADERS.contains(&n) || (anthropic && ANTHROPIC_HEADERS.contains(&n)) {
            h.append(name.clone(), value.clone());
        }
    }
    if let Ok(v) = HeaderValue::from_str(request_id) {
        h.insert(HeaderName::from_static("x-request-id"), v);
    }
    for (n, v) in &provider.headers {
        h.insert(n.clone(), v.clone());
    }
    if !h.contains_key(header::CONTENT_TYPE) {
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
    }
    if let Some((n, v)) = credential {
        h.insert(n, v);
    }
    h
}

/// The process's HTTPS clients: certificate-verifying (the system's roots) and, for
/// `insecureSkipVerify`, one that accepts any certificate. Redirects are not followed.
///
/// # Errors
/// The TLS library's reason when the client cannot be built.
fn client(insecure: bool) -> Result<&'static HttpsClient, String> {
    static VERIFYING: OnceLock<Result<HttpsClient, String>> = OnceLock::new();
    static INSECURE: OnceLock<Result<HttpsClient, String>> = OnceLock::new();
    let cell = if insecure { &INSECURE } else { &VERIFYING };
    cell.get_or_init(|| build_client(insecure))
        .as_ref()
        .map_err(Clone::clone)
}

fn build_client(insecure: bool) -> Result<HttpsClient, String> {
    let p = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(Arc::clone(&p))
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let tls = if insecure {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCertificate(p)))
            .with_no_client_auth()
    } else {
        let mut roots = rustls::RootCertStore::empty();
        let found = rustls_native_certs::load_native_certs();
        for e in &found.errors {
            tracing::warn!(error = %e, "Reading the system's TLS root certificates");
        }
        roots.add_parsable_certificates(found.certs);
        builder.with_root_certificates(roots).with_no_client_auth()
    };
    let conn = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_only()
        .enable_http1()
        .build();
    Ok(Client::builder(TokioExecutor::new()).build(conn))
}

/// `insecureSkipVerify`: accepts any server certificate, still checks handshake signatures.
#[derive(Debug)]
struct AnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
