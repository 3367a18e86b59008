//! JWT authentication over real sockets: a JWKS server, a kthena-sim engine and the router;
//! Go Kthena's 401 messages, the token's `sub` in the access log, and a JWKS server that is
//! down when the router starts (503 for `/v1/*` until the keys arrive, the router alive).

#![allow(
    clippy::unwrap_used,
    reason = "test helpers fail the test on any error"
)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::common::*;
use base64::Engine as _;
use bytes::Bytes;
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
    // Refusals are counted by reason: four without a bearer token plus `/v1/models`, five
    // tokens refused.
    assert_eq!(
        r.metric(r#"kthena_router_auth_failures_total{reason="missing_token"}"#)
            .await,
        5.0
    );
    assert_eq!(
        r.metric(r#"kthena_router_auth_failures_total{reason="invalid_token"}"#)
            .await,
        5.0
    );

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

/// A JWKS server whose document can be replaced (a key rotation); counts its fetches.
struct RotatingJwks {
    addr: SocketAddr,
    doc: Arc<Mutex<Bytes>>,
    fetches: Arc<AtomicUsize>,
    _tasks: JoinSet<()>,
}

impl RotatingJwks {
    async fn start(jwk: &serde_json::Value) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let doc = Arc::new(Mutex::new(Bytes::new()));
        let fetches = Arc::new(AtomicUsize::new(0));
        let mut tasks = JoinSet::new();
        let (d, f) = (Arc::clone(&doc), Arc::clone(&fetches));
        tasks.spawn(async move {
            let mut conns = JoinSet::new();
            while let Ok((stream, _)) = listener.accept().await {
                let (d, f) = (Arc::clone(&d), Arc::clone(&f));
                conns.spawn(async move {
                    let svc = hyper::service::service_fn(move |_req: Request<Incoming>| {
                        f.fetch_add(1, Ordering::SeqCst);
                        let body = d.lock().unwrap().clone();
                        async move { Ok::<_, Infallible>(Response::new(Full::new(body))) }
                    });
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        let me = Self {
            addr,
            doc,
            fetches,
            _tasks: tasks,
        };
        me.publish(jwk);
        me
    }

    fn publish(&self, jwk: &serde_json::Value) {
        *self.doc.lock().unwrap() = Bytes::from(serde_json::json!({ "keys": [jwk] }).to_string());
    }
}

/// An engine that answers chats with a fixed completion and records the `Authorization`
/// headers it receives (one entry per request: all its values).
async fn header_engine(tasks: &mut JoinSet<()>) -> (SocketAddr, Arc<Mutex<Vec<Vec<String>>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen: Arc<Mutex<Vec<Vec<String>>>> = Arc::default();
    let s2 = Arc::clone(&seen);
    tasks.spawn(async move {
        let mut conns = JoinSet::new();
        while let Ok((stream, _)) = listener.accept().await {
            let seen = Arc::clone(&s2);
            conns.spawn(async move {
                let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                    let seen = Arc::clone(&seen);
                    async move {
                        let body = match req.uri().path() {
                            "/metrics" => "vllm:num_requests_waiting 0\n".to_owned(),
                            "/v1/models" => r#"{"data":[{"id":"m"}]}"#.to_owned(),
                            _ => {
                                let auth = ["authorization", "x-api-key", "cookie"]
                                    .into_iter()
                                    .flat_map(|name| {
                                        req.headers()
                                            .get_all(name)
                                            .iter()
                                            .map(move |v| {
                                                format!("{name}: {}", v.to_str().unwrap())
                                            })
                                            .collect::<Vec<_>>()
                                    })
                                    .collect();
                                seen.lock().unwrap().push(auth);
                                r#"{"id":"c","object":"chat.completion","choices":[]}"#.to_owned()
                            }
                        };
                        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from(body))))
                    }
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    (addr, seen)
}

/// The issuer rotates its key: a token signed with the new key (a `kid` the router has
/// not seen) makes the router fetch the key set at once and is accepted on that request;
/// tokens of the retired key are refused from then on; made-up `kid`s fetch at most once
/// per `jwksMinRefreshInterval`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_jwks_is_fetched_on_an_unknown_kid() {
    let old = Key::new("old");
    let new = Key::new("new");
    let jwks = RotatingJwks::start(&old.jwk).await;
    let sim = kthena_sim::spawn(sim_config("m")).await.unwrap();
    let head = format!(
        "metricsScrapeInterval: 100ms\nauth:\n  issuer: {ISSUER}\n  audiences: [kthena]\n  jwksUri: http://{}/jwks.json\n  jwksMinRefreshInterval: 1h\n",
        jwks.addr
    );
    let r = TestRouter::start(
        &head,
        &endpoint("sim-a", sim.addr(), "demo"),
        &[
            ("s.yaml", model_server("srv", "m", "demo", "")),
            ("r.yaml", simple_route("route", "m", "srv")),
        ],
    )
    .await;
    r.wait_ready().await;
    let token = |k: &Key| {
        format!(
            "Bearer {}",
            k.sign(&claims(ISSUER, "kthena", "dave", now() + 600))
        )
    };
    assert_eq!(ask(&r, Some(&token(&old))).await.0, StatusCode::OK);
    assert_eq!(jwks.fetches.load(Ordering::SeqCst), 1);

    jwks.publish(&new.jwk);
    let rotated = tokio::time::Instant::now();
    let (s, msg, _) = ask(&r, Some(&token(&new))).await;
    let took = rotated.elapsed();
    assert_eq!((s, msg.as_str()), (StatusCode::OK, ""));
    assert_eq!(jwks.fetches.load(Ordering::SeqCst), 2);
    eprintln!("new-key token accepted {took:?} after the rotation");
    assert!(took < std::time::Duration::from_secs(2), "{took:?}");

    // The retired key's tokens are refused; no fetch within the interval (1h here).
    let refused = "Unauthorized: failed to parse jwt: could not verify message using any of the signatures or keys";
    for _ in 0..3 {
        assert_eq!(
            ask(&r, Some(&token(&old))).await,
            (StatusCode::UNAUTHORIZED, refused.to_owned(), None)
        );
        assert_eq!(
            ask(&r, Some(&token(&Key::new("made-up")))).await,
            (StatusCode::UNAUTHORIZED, refused.to_owned(), None)
        );
    }
    assert_eq!(jwks.fetches.load(Ordering::SeqCst), 2);
    assert_eq!(ask(&r, Some(&token(&new))).await.0, StatusCode::OK);
    r.router.shutdown().await;
}

/// Starts a router with authentication on, an engine `e` (a [`header_engine`] or a sim) and
/// `extra` config lines.
async fn auth_router(jwks: SocketAddr, engine: SocketAddr, extra: &str) -> TestRouter {
    let head = format!(
        "metricsScrapeInterval: 100ms\nauth:\n  issuer: {ISSUER}\n  audiences: [kthena]\n  jwksUri: http://{jwks}/jwks.json\n{extra}"
    );
    let r = TestRouter::start(
        &head,
        &endpoint("e", engine, "demo"),
        &[
            ("s.yaml", model_server("srv", "m", "demo", "")),
            ("r.yaml", simple_route("route", "m", "srv")),
        ],
    )
    .await;
    r.wait_ready().await;
    r
}

/// Two `Authorization` headers are refused (400, whichever is valid); the client's
/// credentials (`Authorization`, and since a regression `x-api-key` and `Cookie` too) are
/// not forwarded to the engine unless `auth.forwardAuthorization` is set; `GET /models`
/// needs a token as `/v1/models` does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn authorization_is_single_checked_and_stays_at_the_router() {
    let key = Key::new("k1");
    let mut tasks = JoinSet::new();
    let jwks = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let jwks_addr = jwks.local_addr().unwrap();
    serve_jwks(&mut tasks, jwks, &key.jwk);
    let (engine, seen) = header_engine(&mut tasks).await;
    let valid = format!(
        "Bearer {}",
        key.sign(&claims(ISSUER, "kthena", "erin", now() + 600))
    );
    let url = |r: &TestRouter| format!("{}/v1/chat/completions", r.url());

    let r = auth_router(jwks_addr, engine, "").await;
    for pair in [
        [valid.as_str(), "Bearer forged"],
        ["Bearer forged", valid.as_str()],
    ] {
        let h = [("authorization", pair[0]), ("authorization", pair[1])];
        let (s, _, b) = post(&url(&r), chat("m", "hi", false, 2), &h).await;
        assert_eq!(s, StatusCode::BAD_REQUEST);
        assert_eq!(
            String::from_utf8_lossy(&b),
            r#"{"error":{"message":"invalid Authorization header: more than one","type":"invalid_request_error","param":null,"code":"invalid_header"}}"#
        );
    }
    assert!(seen.lock().unwrap().is_empty());
    let creds = [
        ("authorization", valid.as_str()),
        ("x-api-key", "sk-client"),
        ("cookie", "session=abc"),
    ];
    let (s, _, b) = post(&url(&r), chat("m", "hi", false, 2), &creds).await;
    assert_eq!(s, StatusCode::OK, "{}", String::from_utf8_lossy(&b));
    assert_eq!(*seen.lock().unwrap(), vec![Vec::<String>::new()]);
    // The bare model list needs the token too.
    for path in ["/models", "/v1/models"] {
        let (s, text) = get(&format!("{}{path}", r.url())).await;
        assert_eq!(s, StatusCode::UNAUTHORIZED, "{path}");
        assert!(text.contains("missing_authorization"), "{path}: {text}");
        let req = Request::get(format!("{}{path}", r.url()))
            .header("authorization", &valid)
            .body(Full::new(Bytes::new()))
            .unwrap();
        assert_eq!(
            client().request(req).await.unwrap().status(),
            StatusCode::OK,
            "{path}"
        );
    }
    r.router.shutdown().await;

    let r = auth_router(jwks_addr, engine, "  forwardAuthorization: true\n").await;
    let (s, _, _) = post(&url(&r), chat("m", "hi", false, 2), &creds).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(
        seen.lock().unwrap().last().unwrap(),
        &vec![
            format!("authorization: {valid}"),
            "x-api-key: sk-client".to_owned(),
            "cookie: session=abc".to_owned(),
        ]
    );
    r.router.shutdown().await;
}

/// The LoRA admin calls need a token with the admin scope (`scope` or `scp`): none gives
/// 401, a token without the scope 403 (nothing reaches the engine), the scope 200.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lora_admin_needs_the_admin_scope() {
    let key = Key::new("k1");
    let mut tasks = JoinSet::new();
    let jwks = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let jwks_addr = jwks.local_addr().unwrap();
    serve_jwks(&mut tasks, jwks, &key.jwk);
    let mut cfg = sim_config("m");
    cfg.lora_modules = vec!["sql-lora".to_owned()];
    let sim = kthena_sim::spawn(cfg).await.unwrap();
    let r = auth_router(jwks_addr, sim.addr(), "").await;
    let url = format!("{}/v1/unload_lora_adapter", r.url());
    let body = r#"{"lora_name":"sql-lora"}"#;
    let with = |extra: serde_json::Value| {
        let mut c = claims(ISSUER, "kthena", "frank", now() + 600);
        c.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        format!("Bearer {}", key.sign(&c))
    };
    let ask_admin = |auth: Option<String>| {
        let url = url.clone();
        async move {
            let mut h = vec![("x-kthena-endpoint", "e".to_owned())];
            h.extend(auth.map(|a| ("authorization", a)));
            let h: Vec<(&str, &str)> = h.iter().map(|(k, v)| (*k, v.as_str())).collect();
            let (s, _, b) = post(&url, body, &h).await;
            (s, String::from_utf8_lossy(&b).into_owned())
        }
    };
    let (s, text) = ask_admin(None).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED, "{text}");
    for wrong in [
        serde_json::json!({}),
        serde_json::json!({"scope": "openid kthena:lora-admins"}),
        serde_json::json!({"scp": ["kthena:read"]}),
    ] {
        let (s, text) = ask_admin(Some(with(wrong))).await;
        assert_eq!(s, StatusCode::FORBIDDEN, "{text}");
        assert_eq!(
            text,
            r#"{"error":{"message":"the token of `frank` lacks the scope `kthena:lora-admin` that LoRA adapter administration needs","type":"invalid_request_error","param":null,"code":"permission_denied"}}"#
        );
    }
    let (_, models) = get(&format!("http://{}/v1/models", sim.addr())).await;
    assert!(models.contains("sql-lora"), "{models}");
    let (s, text) = ask_admin(Some(with(
        serde_json::json!({"scope": "openid kthena:lora-admin"}),
    )))
    .await;
    assert_eq!(s, StatusCode::OK, "{text}");
    let (_, models) = get(&format!("http://{}/v1/models", sim.addr())).await;
    assert!(!models.contains("sql-lora"), "{models}");
    let (s, text) = ask_admin(Some(with(
        serde_json::json!({"scp": ["kthena:lora-admin"]}),
    )))
    .await;
    assert_eq!(s, StatusCode::NOT_FOUND, "already unloaded: {text}");
    r.router.shutdown().await;
}
