//! Engine connections driven by their request, against a real HTTP/1.1 engine on loopback
//! that counts the connections it accepted and the ones that ended.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use futures_util::stream;
use http::{Request, Response, header};
use http_body_util::{BodyExt, Full, StreamBody, combinators::UnsyncBoxBody};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use super::*;

/// What the test engine saw.
#[derive(Default)]
struct Seen {
    accepted: AtomicUsize,
    closed: AtomicUsize,
    hosts: std::sync::Mutex<Vec<String>>,
}

type TestBody = UnsyncBoxBody<Bytes, Infallible>;

/// `/sse`: three SSE events, chunked; `/sized`: a JSON answer with a length; `/hang`: one
/// event, then nothing (the answer never ends).
fn answer(req: &Request<Incoming>) -> Response<TestBody> {
    let events = [
        "data: {\"n\":1}\n\n",
        "data: {\"n\":2}\n\n",
        "data: [DONE]\n\n",
    ];
    let body = match req.uri().path() {
        "/sse" => {
            let frames = events.map(|e| Ok(http_body::Frame::data(Bytes::from(e))));
            StreamBody::new(stream::iter(frames)).boxed_unsync()
        }
        "/hang" => {
            let first = stream::iter([Ok(http_body::Frame::data(Bytes::from(events[0])))]);
            StreamBody::new(futures_util::StreamExt::chain(first, stream::pending())).boxed_unsync()
        }
        _ => Full::new(Bytes::from_static(b"{\"ok\":true}")).boxed_unsync(),
    };
    Response::new(body)
}

/// Accepts connections on 127.0.0.1, counting them in [`Seen`], and serves each with
/// `serve`; a connection is counted closed when `serve` returns.
async fn accept_loop<F, Fut>(serve: F) -> (SocketAddr, Arc<Seen>)
where
    F: Fn(tokio::net::TcpStream, Arc<Seen>) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let seen = Arc::new(Seen::default());
    let s = Arc::clone(&seen);
    let tasks = tokio_util::task::TaskTracker::new();
    let conns = tasks.clone();
    tasks.spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            s.accepted.fetch_add(1, Ordering::SeqCst);
            let s = Arc::clone(&s);
            let served = serve(tcp, Arc::clone(&s));
            conns.spawn(async move {
                served.await;
                s.closed.fetch_add(1, Ordering::SeqCst);
            });
        }
    });
    (addr, seen)
}

/// Starts the engine on 127.0.0.1; `keep_alive: false` closes each connection after one
/// answer, as an engine with keep-alive off (or past its idle timeout) does.
async fn engine(keep_alive: bool) -> (SocketAddr, Arc<Seen>) {
    accept_loop(move |tcp, s| async move {
        let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
            let host = req.headers().get(header::HOST).cloned();
            let host = host.and_then(|h| h.to_str().ok().map(str::to_owned));
            s.hosts.lock().expect("lock").push(host.unwrap_or_default());
            std::future::ready(Ok::<_, Infallible>(answer(&req)))
        });
        let _ = hyper::server::conn::http1::Builder::new()
            .keep_alive(keep_alive)
            .serve_connection(TokioIo::new(tcp), svc)
            .await;
    })
    .await
}

fn post(addr: SocketAddr, path: &str) -> Request<crate::body::ReqBody> {
    Request::post(path)
        .header(header::HOST, addr.to_string())
        .body(Bytes::from_static(b"{}").into())
        .expect("request")
}

/// Sends and reads the whole answer, as the router's response path does.
async fn fetch(addr: SocketAddr, path: &str) -> Bytes {
    let resp = send(addr, post(addr, path)).await.expect("answer head");
    resp.into_body().collect().await.expect("body").to_bytes()
}

/// Runs `f` with this thread keeping connections, then forgets them (the test harness may
/// run the next test on this thread).
async fn keeping<F: std::future::Future<Output = ()>>(f: F) {
    enable_on_this_thread();
    f.await;
    disable_on_this_thread();
    assert!(!enabled());
}

/// Waits (paused time runs ahead when idle) until `cond` holds, 5 s at most.
async fn until(cond: impl Fn() -> bool) {
    for _ in 0..500 {
        if cond() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn sequential_answers_reuse_one_connection() {
    keeping(async {
        let (addr, seen) = engine(true).await;
        for path in ["/sse", "/sized", "/sse", "/sized", "/sse"] {
            let body = fetch(addr, path).await;
            if path == "/sse" {
                assert_eq!(
                    &body[..],
                    b"data: {\"n\":1}\n\ndata: {\"n\":2}\n\ndata: [DONE]\n\n"
                );
            } else {
                assert_eq!(&body[..], b"{\"ok\":true}");
            }
            assert_eq!(idle_count(addr), 1, "kept after {path}");
        }
        assert_eq!(seen.accepted.load(Ordering::SeqCst), 1);
        assert_eq!(seen.hosts.lock().expect("lock").len(), 5);
        assert!(
            seen.hosts
                .lock()
                .expect("lock")
                .iter()
                .all(|h| *h == addr.to_string())
        );
    })
    .await;
}

#[tokio::test]
async fn concurrent_streams_each_get_a_connection_and_all_are_kept() {
    keeping(async {
        let (addr, seen) = engine(true).await;
        let a = send(addr, post(addr, "/sse")).await.expect("a");
        let b = send(addr, post(addr, "/sse")).await.expect("b");
        // Neither waited for the other's answer to end.
        let (a, b) = tokio::join!(a.into_body().collect(), b.into_body().collect());
        assert_eq!(a.expect("a").to_bytes(), b.expect("b").to_bytes());
        assert_eq!(seen.accepted.load(Ordering::SeqCst), 2);
        assert_eq!(idle_count(addr), 2);
    })
    .await;
}

#[tokio::test]
async fn a_connection_the_engine_closed_is_replaced() {
    keeping(async {
        let (addr, seen) = engine(false).await;
        assert_eq!(&fetch(addr, "/sized").await[..], b"{\"ok\":true}");
        until(|| seen.closed.load(Ordering::SeqCst) == 1).await;
        // The kept connection is closed now: the next request goes out on a new one.
        let body = fetch(addr, "/sse").await;
        assert!(body.ends_with(b"data: [DONE]\n\n"), "{body:?}");
        assert_eq!(seen.accepted.load(Ordering::SeqCst), 2);
    })
    .await;
}

#[tokio::test]
async fn a_body_dropped_before_its_end_closes_the_connection() {
    keeping(async {
        let (addr, seen) = engine(true).await;
        let resp = send(addr, post(addr, "/hang")).await.expect("head");
        let mut body = resp.into_body();
        let first = body.frame().await.expect("frame").expect("data");
        assert_eq!(first.into_data().expect("data"), "data: {\"n\":1}\n\n");
        // The client went away: the engine must see its connection end (that stops its work).
        drop(body);
        until(|| seen.closed.load(Ordering::SeqCst) == 1).await;
        assert_eq!(seen.closed.load(Ordering::SeqCst), 1);
        assert_eq!(idle_count(addr), 0);
    })
    .await;
}

#[tokio::test]
async fn a_refused_connection_reads_as_the_pooled_clients_error() {
    keeping(async {
        // A port nothing listens on: bind one, then free it.
        let addr = TcpListener::bind("127.0.0.1:0")
            .await
            .and_then(|l| l.local_addr())
            .expect("port");
        let err = send(addr, post(addr, "/sse")).await.expect_err("refused");
        assert!(matches!(err, SendError::Connect(_)), "{err:?}");
        let chain = crate::error::error_chain(&err);
        assert_eq!(
            chain,
            "tcp connect error: Connection refused (os error 111)"
        );
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn idle_connections_are_closed_after_the_idle_timeout() {
    keeping(async {
        let (addr, seen) = engine(true).await;
        fetch(addr, "/sized").await;
        assert_eq!(idle_count(addr), 1);
        tokio::time::sleep(IDLE_TIMEOUT - Duration::from_secs(1)).await;
        sweep(Instant::now());
        assert_eq!(idle_count(addr), 1, "not yet expired");
        // The thread's sweep drops it; the engine sees the connection end.
        tokio::select! {
            () = tokio::time::sleep(SWEEP_EVERY + Duration::from_secs(1)) => {}
            () = sweep_idle() => unreachable!("the sweep runs for ever"),
        }
        assert_eq!(idle_count(addr), 0);
        until(|| seen.closed.load(Ordering::SeqCst) == 1).await;
        assert_eq!(seen.closed.load(Ordering::SeqCst), 1);
    })
    .await;
}

#[test]
fn off_the_serving_threads_nothing_is_kept() {
    assert!(!enabled());
    assert_eq!(idle_count("127.0.0.1:1".parse().expect("addr")), 0);
}

/// An engine that answers every request on a connection with `answer` written raw, and
/// with `close` closes the connection 50 ms after the first answer (which ends a body
/// delimited by the end of the connection).
async fn raw_engine(answer: &'static [u8], close: bool) -> (SocketAddr, Arc<Seen>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    accept_loop(move |mut tcp, _| async move {
        let mut buf = vec![0u8; 4096];
        // One request per read is enough here: the requests are small.
        while let Ok(n) = tcp.read(&mut buf).await {
            if n == 0 || tcp.write_all(answer).await.is_err() {
                break;
            }
            if close {
                // A moment later, as an engine's keep-alive timeout would.
                tokio::time::sleep(Duration::from_millis(50)).await;
                break;
            }
        }
    })
    .await
}

#[tokio::test]
async fn a_body_delimited_by_the_connections_end_is_read_whole_and_not_kept() {
    keeping(async {
        let answer = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\ndata: {\"n\":1}\n\ndata: [DONE]\n\n";
        let (addr, seen) = raw_engine(answer, true).await;
        for _ in 0..2 {
            let body = fetch(addr, "/sse").await;
            assert_eq!(&body[..], b"data: {\"n\":1}\n\ndata: [DONE]\n\n");
            assert_eq!(idle_count(addr), 0);
        }
        assert_eq!(seen.accepted.load(Ordering::SeqCst), 2);
    })
    .await;
}

/// A sized JSON answer with keep-alive, as an engine writes it.
const SIZED: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 11\r\n\r\n{\"ok\":true}";

#[tokio::test]
async fn an_answer_is_kept_unless_it_says_connection_close() {
    let close = b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 11\r\n\r\n{\"ok\":true}";
    // (answer, idle connections after each request, connections opened for three)
    for (answer, idle, opened) in [(SIZED, 1, 1), (&close[..], 0, 3)] {
        keeping(async {
            let (addr, seen) = raw_engine(answer, false).await;
            for _ in 0..3 {
                assert_eq!(&fetch(addr, "/sized").await[..], b"{\"ok\":true}");
                assert_eq!(idle_count(addr), idle);
            }
            assert_eq!(seen.accepted.load(Ordering::SeqCst), opened);
        })
        .await;
    }
}

#[tokio::test]
async fn a_kept_connection_the_engine_closed_later_is_not_used_again() {
    keeping(async {
        // Keep-alive as far as the answer says, then the engine closes (its idle timeout).
        let (addr, seen) = raw_engine(SIZED, true).await;
        assert_eq!(&fetch(addr, "/sized").await[..], b"{\"ok\":true}");
        until(|| seen.closed.load(Ordering::SeqCst) == 1).await;
        assert_eq!(seen.closed.load(Ordering::SeqCst), 1);
        // The kept connection is closed: the request goes out on a new one and succeeds.
        assert_eq!(&fetch(addr, "/sized").await[..], b"{\"ok\":true}");
        assert_eq!(seen.accepted.load(Ordering::SeqCst), 2);
    })
    .await;
}

/// Regression: a request sent on a kept connection whose engine had closed it cleanly (the
/// close not yet read) hung for ever: the connection future ended with the request still
/// queued, and the queued request is answered only when the connection is dropped. Now it
/// comes back unsent, for `send` to retry on a new connection.
#[tokio::test]
async fn a_request_queued_on_a_connection_that_ends_cleanly_comes_back() {
    keeping(async {
        let (addr, seen) = raw_engine(SIZED, true).await;
        let (mut sender, mut conn) = connect(addr).await.expect("connect");
        let first = exchange(addr, sender, conn, post(addr, "/sized"));
        let mut body = first.await.expect("answer").into_body();
        while body.frame().await.is_some() {}
        until(|| seen.closed.load(Ordering::SeqCst) == 1).await;
        // Take the kept connection without polling it (the engine's close stays unread, as
        // when the task's budget is spent while the pool checks it).
        let kept = POOL.with_borrow_mut(|p| p.as_mut()?.idle.get_mut(&addr)?.pop());
        let kept = kept.expect("kept");
        (sender, conn) = (kept.sender, kept.conn);
        let again = exchange(addr, sender, conn, post(addr, "/sized"));
        let out = tokio::time::timeout(Duration::from_secs(5), again).await;
        let Err((_, back)) = out.expect("the request came back, not hung") else {
            panic!("an answer on a closed connection");
        };
        assert_eq!(back.expect("unsent request").uri(), "/sized");
    })
    .await;
}

/// Regression: an answer whose trailers were its last frame was not kept (hyper's server
/// drops a body after its trailers without polling it again).
#[tokio::test]
async fn an_answer_read_up_to_its_trailers_is_kept() {
    keeping(async {
        let answer = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ntrailer: x-t\r\n\r\n5\r\nhello\r\n0\r\nx-t: 1\r\n\r\n";
        let (addr, seen) = raw_engine(answer, false).await;
        for _ in 0..2 {
            let mut body = send(addr, post(addr, "/t")).await.expect("head").into_body();
            let data = body.frame().await.expect("frame").expect("data");
            assert_eq!(data.into_data().expect("data"), "hello");
            let trailers = body.frame().await.expect("frame").expect("trailers");
            assert_eq!(trailers.trailers_ref().expect("trailers")["x-t"], "1");
            drop(body);
            assert_eq!(idle_count(addr), 1);
        }
        assert_eq!(seen.accepted.load(Ordering::SeqCst), 1);
    })
    .await;
}
