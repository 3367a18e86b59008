//! JWT authentication over real sockets: a JWKS server, a kthena-sim engine and the router;
//! Go Kthena's 401 messages, the token's `sub` in the access log, and a JWKS server that is
//! down when the router starts (503 for `/v1/*` until the keys arrive, the router alive).

#![allow(
    clippy::unwrap_used,
    reason = "test helpers fail the test on any error"
)]

mod common;

use std::convert::Infallible;
use std::net::SocketAddr;

use base64::Engine as _;
use bytes::Bytes;
use common::*;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use tokio::net::TcpListener;
use tokio::task::JoinSet;

const ISSUER: &str = "https://issuer.test";

/// An ES256 signing key and its JWK.
struct Key {
    der: Vec<u8>,
    jwk: serde_json::Value,
}

impl Key {
    fn new(kid: &str) -> Self {
        let kp = rcgen::KeyPair::generate().unwrap();
        let raw = kp.public_key_raw();
        assert_eq!(raw.len(), 65, "uncompressed P-256 point");
        let b64 = |b: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b);
        let jwk = serde_json::json!({
            "kty": "EC", "crv": "P-256", "kid": kid, "use": "sig",
            "x": b64(&raw[1..33]), "y": b64(&raw[33..]),
        });
        Self {
            der: kp.serialize_der(),
            jwk,
        }
    }

    fn sign(&self, claims: &serde_json::Value) -> String {
        let mut h = Header::new(Algorithm::ES256);
        h.kid = self.jwk["kid"].as_str().map(str::to_owned);
        jsonwebtoken::encode(&h, claims, &EncodingKey::from_ec_der(&self.der)).unwrap()
    }
}

fn now() -> i64 {
    jiff::Timestamp::now().as_second()
}

fn claims(iss: &str, aud: &str, sub: &str, exp: i64) -> serde_json::Value {
    serde_json::json!({"iss": iss, "aud": aud, "sub": sub, "exp": exp, "iat": now()})
}

/// Serves `{"keys":[jwk]}` on `listener` until `tasks` is dropped.
fn serve_jwks(tasks: &mut JoinSet<()>, listener: TcpListener, jwk: &serde_json::Value) {
    let body = Bytes::from(serde_json::json!({ "keys": [jwk] }).to_string());
    tasks.spawn(async move {
        let mut conns = JoinSet::new();
        while let Ok((stream, _)) = listener.accept().await {
            let body = body.clone();
            conns.spawn(async move {
                let svc = hyper::service::service_fn(move |_req: Request<Incoming>| {
                    let body = body.clone();
                    async move { Ok::<_, Infallible>(Response::new(Full::new(body))) }
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
}

async fn start(jwks: SocketAddr, sim: SocketAddr) -> TestRouter {
    let head = format!(
        "metricsScrapeInterval: 100ms\nauth:\n  issuer: {ISSUER}\n  audiences: [kthena, other-app]\n  jwksUri: http://{jwks}/jwks.json\n  jwksRetryInterval: 100ms\n"
    );
    TestRouter::start(
        &head,
        &endpoint("sim-a", sim, "demo"),
        &[
            ("s.yaml", model_server("srv", "m", "demo", "")),
            ("r.yaml", simple_route("route", "m", "srv")),
        ],
    )
    .await
}

/// `(status, error.message, Retry-After)` of a chat request with `auth` as the
/// `Authorization` header (none when `None`).
async fn ask(r: &TestRouter, auth: Option<&str>) -> (StatusCode, String, Option<String>) {
    let h: Vec<(&str, &str)> = auth.map(|a| ("authorization", a)).into_iter().collect();
    let url = format!("{}/v1/chat/completions", r.url());
    let (s, headers, b) = post(&url, chat("m", "hi", false, 2), &h).await;
    let v: serde_json::Value = serde_json::from_slice(&b).unwrap_or_default();
    let msg = v["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let retry = headers
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_owned());
    (s, msg, retry)
}

/// Polls with a valid token until the router has the keys (bounded).
async fn wait_for_keys(r: &TestRouter, bearer: &str) {
    for _ in 0..100 {
        if ask(r, Some(bearer)).await.0 != StatusCode::SERVICE_UNAVAILABLE {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("the router never fetched the JWKS");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_are_checked_with_go_messages_and_sub_is_logged() {
    let key = Key::new("k1");
    let jwks = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let jwks_addr = jwks.local_addr().unwrap();
    let mut server = JoinSet::new();
    serve_jwks(&mut server, jwks, &key.jwk);
    let sim = kthena_sim::spawn(sim_config("m")).await.unwrap();
    let r = start(jwks_addr, sim.addr()).await;
    r.wait_ready().await;
    let valid = format!(
        "Bearer {}",
        key.sign(&claims(ISSUER, "kthena", "alice", now() + 600))
    );
    // The key set was fetched before the router started serving.
    let (s, msg, _) = ask(&r, Some(&valid)).await;
    assert_eq!((s, msg.as_str()), (StatusCode::OK, ""));

    let missing = "Authorization header missing or invalid";
    let raw = key.sign(&claims(ISSUER, "kthena", "alice", now() + 600));
    for header in [
        None,
        Some(raw.as_str()),
        Some("Basic abc"),
        Some("Bearer a b"),
    ] {
        assert_eq!(
            ask(&r, header).await,
            (StatusCode::UNAUTHORIZED, missing.into(), None),
            "{header:?}"
        );
    }
    let bearer = |c: serde_json::Value| format!("bearer  {}", key.sign(&c));
    let cases = [
        (
            bearer(claims(ISSUER, "kthena", "alice", now() - 10)),
            "Unauthorized: failed to validate claims: time claims validation failed: token has expired",
        ),
        (
            bearer(claims("https://evil.test", "kthena", "alice", now() + 600)),
            "Unauthorized: failed to validate claims: issuer validation failed: invalid issuer: expected https://issuer.test, got https://evil.test",
        ),
        (
            bearer(claims(ISSUER, "someone-else", "alice", now() + 600)),
            "Unauthorized: failed to validate claims: audience validation failed: audience mismatch: expected one of [kthena other-app], got [someone-else]",
        ),
        (
            bearer(serde_json::json!({"iss": ISSUER, "aud": "kthena", "sub": "alice"})),
            "Unauthorized: failed to validate claims: time claims validation failed: expiration claim (exp) missing",
        ),
        (
            format!(
                "Bearer {}",
                Key::new("k1").sign(&claims(ISSUER, "kthena", "alice", now() + 600))
            ),
            "Unauthorized: failed to parse jwt: could not verify message using any of the signatures or keys",
        ),
    ];
    for (header, message) in &cases {
        assert_eq!(
            ask(&r, Some(header)).await,
            (StatusCode::UNAUTHORIZED, (*message).to_owned(), None)
        );
    }
    // A list `aud` holding one accepted audience passes; its `sub` is the user id.
    let list_aud = serde_json::json!({
        "iss": ISSUER, "aud": ["x", "other-app"], "sub": "bob", "exp": now() + 600,
    });
    let (s, msg, _) = ask(&r, Some(&format!("Bearer {}", key.sign(&list_aud)))).await;
    assert_eq!((s, msg.as_str()), (StatusCode::OK, ""));
    let (s, msg, _) = ask(&r, Some(&valid)).await;
    assert_eq!((s, msg.as_str()), (StatusCode::OK, ""));
    // Every /v1/* path needs the token; health does not.
    assert_eq!(
        get(&format!("{}/v1/models", r.url())).await.0,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(get(&format!("{}/healthz", r.url())).await.0, StatusCode::OK);

    let log = r.access_log();
    let ok: Vec<&serde_json::Value> = log.iter().filter(|l| l["status_code"] == 200).collect();
    assert!(ok.len() >= 2, "{log:?}");
    let users: Vec<&str> = ok.iter().map(|l| l["user_id"].as_str().unwrap()).collect();
    assert_eq!(users[users.len() - 2..], ["bob", "alice"]);
    let denied = log
        .iter()
        .find(|l| l["status_code"] == 401)
        .expect("401s are logged");
    assert_eq!(denied["error"]["type"], "authentication");
    assert!(denied.get("user_id").is_none());
    r.router.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jwks_down_at_start_gives_503_until_the_keys_arrive() {
    let key = Key::new("k1");
    // A port with nothing listening yet.
    let reserved = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let jwks_addr = reserved.local_addr().unwrap();
    drop(reserved);
    let sim = kthena_sim::spawn(sim_config("m")).await.unwrap();
    let r = start(jwks_addr, sim.addr()).await;
    r.wait_ready().await;
    let valid = format!(
        "Bearer {}",
        key.sign(&claims(ISSUER, "kthena", "carol", now() + 600))
    );
    let (s, msg, retry) = ask(&r, Some(&valid)).await;
    assert_eq!(s, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        msg,
        format!(
            "no JWKS available for token validation: the key set of http://{jwks_addr}/jwks.json has not been fetched yet; retry after 1s"
        )
    );
    assert_eq!(retry.as_deref(), Some("1"));
    let models = Request::get(format!("{}/v1/models", r.url()))
        .header("authorization", &valid)
        .body(Full::new(Bytes::new()))
        .unwrap();
    assert_eq!(
        client().request(models).await.unwrap().status(),
        StatusCode::SERVICE_UNAVAILABLE
    );
    // The router is alive and serves what needs no authentication.
    assert_eq!(get(&format!("{}/healthz", r.url())).await.0, StatusCode::OK);
    assert_eq!(get(&format!("{}/readyz", r.url())).await.0, StatusCode::OK);

    let mut server = JoinSet::new();
    serve_jwks(
        &mut server,
        TcpListener::bind(jwks_addr).await.unwrap(),
        &key.jwk,
    );
    wait_for_keys(&r, &valid).await;
    let (s, msg, _) = ask(&r, Some(&valid)).await;
    assert_eq!((s, msg.as_str()), (StatusCode::OK, ""));
    r.router.shutdown().await;
}
