//! Unit tests of `listener`: socket options, timeouts, connection limits and the drain cut.

use super::*;

#[tokio::test]
async fn keepalive_is_set_on_accepted_sockets() {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let _c = TcpStream::connect(addr).await.unwrap();
    let (s, _) = l.accept().await.unwrap();
    set_socket_options(&s, Duration::from_secs(15));
    let sock = socket2::SockRef::from(&s);
    assert!(sock.keepalive().unwrap());
    assert_eq!(sock.tcp_keepalive_time().unwrap(), Duration::from_secs(15));
    assert_eq!(
        sock.tcp_keepalive_interval().unwrap(),
        Duration::from_secs(15)
    );
    assert_eq!(sock.tcp_keepalive_retries().unwrap(), 9);
    assert!(s.nodelay().unwrap());

    let _c2 = TcpStream::connect(addr).await.unwrap();
    let (s2, _) = l.accept().await.unwrap();
    set_socket_options(&s2, Duration::ZERO);
    assert!(!socket2::SockRef::from(&s2).keepalive().unwrap());
}

/// Serves one request that never finishes on a listener with a 5 s drain, stops the
/// listener, and tells whether the router-wide cut (`Listener::cut`) fired.
async fn router_cut_after_drain(cuts_all: bool) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let router_cut = CancellationToken::new();
    let tcp = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = tcp.local_addr().expect("addr");
    let l = Listener {
        name: "inference",
        cfg: ListenerConfig::default(),
        metrics: ListenerMetrics::default(),
        drain: Duration::from_secs(5),
        cut: router_cut.clone(),
        serving: None,
        cuts_all,
        budget: ConnBudget::for_limit(1024),
        inference: true,
        tls: None,
    };
    let (called, mut was_called) = tokio::sync::mpsc::unbounded_channel();
    let svc = tower::service_fn(move |_req: Request<Incoming>| {
        let _ = called.send(());
        std::future::pending::<Result<Response<RespBody>, Infallible>>()
    });
    let cancel = CancellationToken::new();
    let tasks = TaskTracker::new();
    let mut server = tokio::task::JoinSet::new();
    server.spawn(serve(tcp, l, cancel.clone(), tasks.clone(), move || {
        svc.clone()
    }));
    let mut client = TcpStream::connect(addr).await.expect("connect");
    client
        .write_all(b"POST /v1/completions HTTP/1.1\r\nhost: a\r\ncontent-length: 0\r\n\r\n")
        .await
        .expect("write");
    was_called
        .recv()
        .await
        .expect("the request reached the service");
    cancel.cancel();
    server
        .join_next()
        .await
        .expect("serve ran")
        .expect("serve ended");
    tasks.close();
    tasks.wait().await;
    // The connection was closed either way.
    let mut rest = Vec::new();
    let _ = client.read_to_end(&mut rest).await;
    assert!(rest.is_empty(), "{}", String::from_utf8_lossy(&rest));
    router_cut.is_cancelled()
}

#[tokio::test(start_paused = true)]
async fn a_gateway_port_past_its_drain_closes_only_its_own_connections() {
    // A Gateway listener (named `inference` too) closed on its own: before the fix its
    // drain timeout fired the router-wide cut, and every later connection was dropped.
    assert!(!router_cut_after_drain(false).await);
}

#[tokio::test(start_paused = true)]
async fn the_router_listener_past_its_drain_closes_every_connection() {
    assert!(router_cut_after_drain(true).await);
}

#[test]
fn validate_names_the_field() {
    let mut c = ListenerConfig::default();
    assert_eq!(c.validate(), Ok(()));
    c.body_read_idle_timeout = Duration::ZERO;
    assert_eq!(
        c.validate().unwrap_err(),
        "listener.bodyReadIdleTimeout: must be greater than 0"
    );
    let c = ListenerConfig {
        max_connections: 0,
        ..ListenerConfig::default()
    };
    assert_eq!(
        c.validate().unwrap_err(),
        "listener.maxConnections: must be at least 1"
    );
}

#[test]
fn the_connection_budget_follows_the_open_files_limit() {
    let b = ConnBudget::for_limit(256);
    assert_eq!((b.size, b.others.available_permits()), (144, 14));
    let b = ConnBudget::for_limit(1_048_576);
    assert_eq!((b.size, b.others.available_permits()), (786_384, 78_638));
    let b = ConnBudget::for_limit(10);
    assert_eq!((b.size, b.others.available_permits()), (2, 1));
    let b = ConnBudget::for_limit(usize::MAX);
    assert_eq!(b.size, Semaphore::MAX_PERMITS);
}

#[test]
fn other_listeners_stop_at_their_tenth_and_inference_keeps_the_rest() {
    let b = ConnBudget::for_limit(104); // 30 connections, 3 for the others.
    let others: Vec<_> = (0..3).map(|_| b.try_take(false).unwrap()).collect();
    assert!(b.try_take(false).is_none());
    let inference: Vec<_> = (0..27).map(|_| b.try_take(true).unwrap()).collect();
    assert!(b.try_take(true).is_none());
    drop(others);
    // A slot an inference connection can take again; the others still wait for theirs.
    assert!(b.try_take(true).is_some());
    drop(inference);
    assert!(b.try_take(false).is_some());
}
