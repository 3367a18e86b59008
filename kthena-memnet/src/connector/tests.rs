use super::*;
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

#[test]
fn uris_name_socket_addresses() {
    let a = |s: &str| socket_addr(&s.parse().unwrap());
    assert_eq!(
        a("http://10.0.0.1:8000/v1"),
        Some("10.0.0.1:8000".parse().unwrap())
    );
    assert_eq!(a("http://10.0.0.1/x"), Some("10.0.0.1:80".parse().unwrap()));
    assert_eq!(a("http://[::1]:9/"), Some("[::1]:9".parse().unwrap()));
    assert_eq!(a("http://engine:8000/"), None);
}

#[tokio::test]
async fn only_http_uris_with_ip_addresses_are_connected() {
    use tower_service::Service as _;
    let net = MemNet::new();
    let _l = net.listen("10.0.0.1:443".parse().unwrap()).unwrap();
    let mut c = Connector::memory(net);
    for uri in ["https://10.0.0.1:443/", "http://engine:443/"] {
        let err = c.call(uri.parse().unwrap()).await.unwrap_err();
        assert!(matches!(err, Error::NoSocketAddr(_)), "{uri}: {err}");
    }
    assert!(
        c.call("http://10.0.0.1:443/".parse().unwrap())
            .await
            .is_ok()
    );
}

/// A hyper client reaches a hyper server over the in-memory network, keeps the
/// connection alive for the next request, and gets a refusal for an address nothing
/// listens at.
#[tokio::test(start_paused = true)]
async fn a_hyper_client_talks_http_to_a_server_on_the_network() {
    let net = MemNet::new();
    let mut l = net.listen("10.0.0.1:8000".parse().unwrap()).unwrap();
    let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = std::sync::Arc::clone(&accepted);
    let mut server = tokio::task::JoinSet::new();
    server.spawn(async move {
        let mut conns = tokio::task::JoinSet::new();
        while let Some(s) = l.accept().await {
            count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let svc = hyper::service::service_fn(
                |req: http::Request<hyper::body::Incoming>| async move {
                    Ok::<_, std::convert::Infallible>(http::Response::new(Full::new(Bytes::from(
                        req.uri().path().to_owned(),
                    ))))
                },
            );
            conns.spawn(
                hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(s), svc),
            );
        }
    });
    let client: Client<Connector, Full<Bytes>> =
        Client::builder(TokioExecutor::new()).build(Connector::memory(net));
    for path in ["/a", "/b"] {
        let resp = client
            .get(format!("http://10.0.0.1:8000{path}").parse().unwrap())
            .await
            .unwrap();
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(body, path.as_bytes());
    }
    assert_eq!(accepted.load(std::sync::atomic::Ordering::Relaxed), 1);
    let err = client
        .get("http://10.0.0.2:8000/".parse().unwrap())
        .await
        .unwrap_err();
    assert!(err.is_connect(), "{err:?}");
}
