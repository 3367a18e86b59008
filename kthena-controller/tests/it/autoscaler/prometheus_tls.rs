//! The `prometheus` metric source over HTTPS with credentials: the real Prometheus behind
//! its own TLS and basic authentication (`--web.config.file`), and behind a TLS reverse
//! proxy that requires a bearer token (Prometheus has no token check of its own).

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Result, bail};
use base64::Engine as _;
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kthena_api::AutoscalingPolicy;
use kthena_testenv::TestNamespace;
use kube::api::{Patch, PatchParams, PostParams};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::json;
use tokio::task::JoinSet;

use super::prometheus::{WebConfig, start_prometheus, start_prometheus_with};
use super::{SYNC, WAIT, WAITING, create_policy, create_serving, http, replicas, setup};

type HttpsClient = Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>;

/// An HTTPS client trusting only the CA `ca_pem`.
pub(crate) fn tls_client(ca_pem: &str) -> Result<HttpsClient> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert?)?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let conn = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(config)
        .https_only()
        .enable_http1()
        .build();
    Ok(Client::builder(hyper_util::rt::TokioExecutor::new()).build(conn))
}

/// The `Authorization` value of basic authentication.
pub(crate) fn basic(user: &str, password: &str) -> String {
    let encoded = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    format!("Basic {encoded}")
}

/// Creates the Secret `name` with `data` (text values).
async fn secret(ns: &TestNamespace, name: &str, data: &[(&str, &str)]) -> Result<()> {
    let data: serde_json::Map<String, serde_json::Value> = data
        .iter()
        .map(|(k, v)| ((*k).to_owned(), json!(v)))
        .collect();
    let s: Secret = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": ns.name()},
        "stringData": data,
    }))?;
    ns.api::<Secret>()
        .create(&PostParams::default(), &s)
        .await?;
    Ok(())
}

/// The policy's `Ready` condition as `(status, reason, message)`, once `ok` holds for it.
async fn ready_where(
    ns: &TestNamespace,
    policy: &str,
    ok: impl Fn(&str, &str, &str) -> bool,
) -> Result<(String, String, String)> {
    let deadline = tokio::time::Instant::now() + WAIT;
    let mut last = None;
    loop {
        let st = ns.api::<AutoscalingPolicy>().get(policy).await?.status;
        let ready = st.and_then(|s| {
            let c = s.conditions.iter().find(|c| c.type_ == "Ready")?.clone();
            Some((c.status, c.reason, c.message))
        });
        if let Some((s, r, m)) = &ready
            && ok(s, r, m)
        {
            return Ok((s.clone(), r.clone(), m.clone()));
        }
        last = ready.or(last);
        if tokio::time::Instant::now() > deadline {
            bail!("the Ready condition of {policy} never matched; last {last:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until `name` has `n` replicas, within two sync periods and a margin.
async fn scaled_to(ns: &TestNamespace, name: &str, n: i32) -> Result<()> {
    let deadline = tokio::time::Instant::now() + SYNC * 2 + Duration::from_millis(1500);
    while replicas(ns, name).await? != n {
        if tokio::time::Instant::now() > deadline {
            bail!("{name} not scaled to {n} within two sync periods");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

#[tokio::test]
async fn an_https_prometheus_with_basic_auth_and_a_ca_from_a_secret_scales() -> Result<()> {
    let env = setup("as-prom-tls").await?;
    let ns = &env.ns;
    let cert = kthena_webhook::generate_certificate(&["127.0.0.1".to_owned()])?;
    let web = WebConfig {
        cert_pem: cert.cert_pem,
        key_pem: cert.key_pem,
        ca_pem: cert.ca_pem.clone(),
        user: "kthena".to_owned(),
        password: "s3cret-Pa55".to_owned(),
    };
    let prom = start_prometheus_with(ns.name(), None, Some(&web)).await?;
    create_serving(ns, "tq").await?;
    secret(ns, "prom-ca", &[("ca.crt", &cert.ca_pem)]).await?;
    // The password's Secret does not exist yet.
    secret(ns, "prom-user", &[("username", "kthena")]).await?;
    let source = json!({"prometheus": {
        "serverURL": prom.url, "query": "vector(8)",
        "auth": {"basicAuth": {"username": {"name": "prom-user", "key": "username"},
                               "password": {"name": "prom-password", "key": "password"}}},
        "tlsConfig": {"ca": {"secret": {"name": "prom-ca", "key": "ca.crt"}}},
    }});
    create_policy(ns, "tq", source).await?;
    let missing = format!(
        "metric {WAITING} from Prometheus {}: Secret {}/prom-password not found",
        prom.url,
        ns.name()
    );
    let (_, reason, _) = ready_where(ns, "tq-policy", |s, _, m| {
        s == "False" && m.starts_with(&missing)
    })
    .await?;
    assert_eq!(reason, "MetricUnavailable");
    assert_eq!(replicas(ns, "tq").await?, 1);
    // With the password (a trailing line break, as `echo` writes it, is not part of it):
    // 8 per 2 per replica ⇒ 4 replicas.
    secret(ns, "prom-password", &[("password", "s3cret-Pa55\n")]).await?;
    scaled_to(ns, "tq", 4).await?;
    ready_where(ns, "tq-policy", |s, _, _| s == "True").await?;
    Ok(())
}

/// A TLS reverse proxy on 127.0.0.1 in front of `backend` (plain HTTP) that forwards only
/// requests carrying `Authorization: Bearer <token>` and answers 401 to the others.
async fn bearer_proxy(
    cert_pem: &str,
    key_pem: &str,
    backend: String,
    token: &'static str,
) -> Result<(String, JoinSet<()>)> {
    let chain = CertificateDer::pem_slice_iter(cert_pem.as_bytes()).collect::<Result<_, _>>()?;
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes())?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(chain, key)?;
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("https://127.0.0.1:{}", listener.local_addr()?.port());
    let mut set = JoinSet::new();
    set.spawn(async move {
        let mut conns = JoinSet::new();
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, backend) = (acceptor.clone(), backend.clone());
            conns.spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let svc =
                    hyper::service::service_fn(move |req| forward(req, backend.clone(), token));
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(tls), svc)
                    .await;
            });
        }
    });
    Ok((url, set))
}

/// One request of [`bearer_proxy`].
async fn forward(
    req: http::Request<hyper::body::Incoming>,
    backend: String,
    token: &'static str,
) -> Result<http::Response<Full<Bytes>>> {
    let want = format!("Bearer {token}");
    if req.headers().get("authorization").map(|v| v.as_bytes()) != Some(want.as_bytes()) {
        return Ok(http::Response::builder()
            .status(http::StatusCode::UNAUTHORIZED)
            .body(Full::new(Bytes::from_static(b"Unauthorized\n")))?);
    }
    let (parts, body) = req.into_parts();
    let body = body.collect().await?.to_bytes();
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let mut out = http::Request::builder()
        .method(parts.method)
        .uri(format!("{backend}{path}"));
    if let Some(ct) = parts.headers.get("content-type") {
        out = out.header("content-type", ct);
    }
    let resp = http().request(out.body(Full::new(body))?).await?;
    let status = resp.status();
    let body = resp.into_body().collect().await?.to_bytes();
    Ok(http::Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Full::new(body))?)
}

#[tokio::test]
async fn a_bearer_token_behind_a_tls_proxy_scales_and_a_wrong_one_is_reported() -> Result<()> {
    let env = setup("as-prom-bearer").await?;
    let ns = &env.ns;
    // Plain Prometheus behind the proxy, scraping nothing (the query is a constant).
    let prom = start_prometheus(ns.name(), "127.0.0.1:9").await?;
    // The proxy's certificate names only prometheus.kthena.test: the policy's serverName.
    let cert = kthena_webhook::generate_certificate(&["prometheus.kthena.test".to_owned()])?;
    let (url, _proxy) =
        bearer_proxy(&cert.cert_pem, &cert.key_pem, prom.url.clone(), "t0ken").await?;
    let cm: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "prom-ca", "namespace": ns.name()},
        "data": {"ca.crt": cert.ca_pem},
    }))?;
    ns.api::<ConfigMap>()
        .create(&PostParams::default(), &cm)
        .await?;
    secret(ns, "prom-token", &[("token", "wrong")]).await?;
    create_serving(ns, "bq").await?;
    let source = json!({"prometheus": {
        "serverURL": url, "query": "vector(8)",
        "auth": {"authorization": {"credentials": {"name": "prom-token", "key": "token"}}},
        "tlsConfig": {"ca": {"configMap": {"name": "prom-ca", "key": "ca.crt"}},
                      "serverName": "prometheus.kthena.test"},
    }});
    create_policy(ns, "bq", source).await?;
    let refused = format!(
        "metric {WAITING} from Prometheus {url}: HTTP status 401 Unauthorized: the server refused access (check the source's auth)"
    );
    let (_, reason, _) = ready_where(ns, "bq-policy", |s, _, m| {
        s == "False" && m.starts_with(&refused)
    })
    .await?;
    assert_eq!(reason, "MetricUnavailable");
    // A few more rounds: still no scale.
    tokio::time::sleep(SYNC * 2).await;
    assert_eq!(replicas(ns, "bq").await?, 1);
    // The right token (read again each round): 8 per 2 per replica ⇒ 4 replicas.
    let fix = json!({"stringData": {"token": "t0ken"}});
    ns.api::<Secret>()
        .patch("prom-token", &PatchParams::default(), &Patch::Merge(&fix))
        .await?;
    scaled_to(ns, "bq", 4).await?;
    ready_where(ns, "bq-policy", |s, _, _| s == "True").await?;
    Ok(())
}
