use std::time::Duration;

use http_body_util::{BodyExt, StreamBody};

use super::*;
use crate::config::{AccessLogConfig, AccessLogFormat};

/// The access log and its file.
struct Logged {
    log: Arc<AccessLog>,
    path: std::path::PathBuf,
}

fn setup(dir: &tempfile::TempDir) -> (Arc<Metrics>, Accounting, Logged) {
    let path = dir.path().join("access.log");
    let log = AccessLog::open(
        &AccessLogConfig {
            enabled: true,
            format: AccessLogFormat::Json,
            output: path.display().to_string(),
        },
        prometheus_client::metrics::counter::Counter::default(),
    )
    .unwrap();
    let log = Arc::new(log);
    let metrics = Arc::new(Metrics::new());
    let entry = Entry {
        path: "/v1/completions".into(),
        ..Entry::default()
    };
    let acct = Accounting::start(
        Arc::clone(&metrics),
        Arc::clone(&log),
        entry,
        Arc::from("test-request"),
    );
    (metrics, acct, Logged { log, path })
}

fn lines(logged: &Logged) -> Vec<serde_json::Value> {
    logged.log.flush();
    std::fs::read_to_string(&logged.path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn gauge(metrics: &Metrics, name: &str) -> String {
    let text = metrics.encode();
    text.lines()
        .find(|l| l.starts_with(name))
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test(start_paused = true)]
async fn settles_once_when_the_last_frame_leaves() {
    let dir = tempfile::tempdir().unwrap();
    let (metrics, acct, path) = setup(&dir);
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, BoxError>>(4);
    let inner = StreamBody::new(tokio_stream_shim(rx)).boxed_unsync();
    let mut body = AccountedBody::new(inner, acct.clone());
    assert_eq!(
        gauge(&metrics, "kthena_router_active_requests"),
        "kthena_router_active_requests 1"
    );

    tx.send(Ok(Frame::data(Bytes::from_static(b"a"))))
        .await
        .unwrap();
    let f = body.frame().await.unwrap().unwrap();
    assert_eq!(f.into_data().unwrap(), "a");
    tokio::time::advance(Duration::from_millis(1_500)).await;
    assert!(lines(&path).is_empty(), "not settled mid-body");
    acct.finish(200, None, "", 7);
    drop(tx);
    assert!(body.frame().await.is_none());
    let log = lines(&path);
    assert_eq!(log.len(), 1);
    assert_eq!(log[0]["status_code"], 200);
    assert_eq!(log[0]["output_tokens"], 7);
    assert_eq!(log[0]["duration_total"], 1500);
    assert_eq!(
        gauge(&metrics, "kthena_router_active_requests"),
        "kthena_router_active_requests 0"
    );
    drop(body);
    acct.settle();
    assert_eq!(lines(&path).len(), 1, "settled exactly once");
}

#[tokio::test(start_paused = true)]
async fn a_dropped_body_settles_as_client_disconnect_and_frees_the_slots() {
    let dir = tempfile::tempdir().unwrap();
    let (_metrics, acct, path) = setup(&dir);
    let sem = Arc::new(tokio::sync::Semaphore::new(1));
    acct.admitted(Arc::clone(&sem).try_acquire_owned().unwrap());
    let (_tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, BoxError>>(1);
    let body = AccountedBody::new(StreamBody::new(tokio_stream_shim(rx)).boxed_unsync(), acct);
    tokio::time::advance(Duration::from_millis(250)).await;
    assert_eq!(sem.available_permits(), 0);
    drop(body);
    assert_eq!(sem.available_permits(), 1);
    let log = lines(&path);
    assert_eq!(log.len(), 1);
    assert_eq!(log[0]["status_code"], 499);
    assert_eq!(log[0]["error"]["type"], "client_disconnect");
    assert_eq!(log[0]["duration_total"], 250);
}

#[tokio::test]
async fn an_error_answer_settles_with_the_error_before_its_bytes_leave() {
    let dir = tempfile::tempdir().unwrap();
    let (_metrics, acct, path) = setup(&dir);
    let e = Error::ModelNotFound { model: "x".into() };
    acct.failed(&e);
    let mut body = AccountedBody::new(crate::body::full(e.to_body()), acct);
    let frame = body.frame().await.unwrap().unwrap();
    assert!(frame.is_data());
    let log = lines(&path);
    assert_eq!(log.len(), 1, "settled with the last frame");
    assert_eq!(log[0]["status_code"], 404);
    assert_eq!(log[0]["error"]["type"], "route_not_found");
    assert_eq!(log[0]["error_origin"], "downstream");
    assert!(body.is_end_stream());
}

#[test]
fn output_tokens_are_told_once_as_they_grow() {
    let dir = tempfile::tempdir().unwrap();
    let (_metrics, acct, _path) = setup(&dir);
    let told = Arc::new(Mutex::new(Vec::new()));
    let t2 = Arc::clone(&told);
    acct.on_output_tokens(Box::new(move |n| t2.lock().unwrap().push(n)));
    acct.usage(3);
    acct.usage(3);
    acct.usage(5);
    acct.finish(200, None, "", 8);
    acct.finish(200, None, "", 9);
    assert_eq!(*told.lock().unwrap(), [3, 2, 3]);
}

/// An `mpsc::Receiver` as a `Stream` (without tokio-stream).
fn tokio_stream_shim<T>(
    mut rx: tokio::sync::mpsc::Receiver<T>,
) -> impl futures_util::Stream<Item = T> {
    futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

/// A scheduler with `kvcache-aware` on blocks of 2 tokens, its index, and two candidates.
fn kv_scheduler() -> (Arc<Scheduler>, Vec<kthena_sched::Candidate>) {
    let config = kthena_sched::Config::from_yaml(
        "pluginConfig: [{name: kvcache-aware, args: {blockSizeToHash: 2}}]\n\
         plugins: {Score: {enabled: [{name: kvcache-aware, weight: 1}]}}",
    )
    .unwrap();
    let sched = Arc::new(Scheduler::builder(config).build().unwrap());
    let cands = vec![
        kthena_sched::Candidate::new("a", "m"),
        kthena_sched::Candidate::new("b", "m"),
    ];
    (sched, cands)
}

/// Blocks of `tokens` that `kvcache-aware`'s index says candidate 0 holds.
fn held_by_a(sched: &Scheduler, cands: &[kthena_sched::Candidate], tokens: &[u32]) -> u32 {
    let mut hashes = Vec::new();
    kthena_sched::token_block_hashes(tokens, 2, usize::MAX, &mut hashes);
    let query = kthena_sched::KvQuery {
        model: "m",
        token_ids: tokens,
        block_size: 2,
        block_hashes: &hashes,
    };
    let mut out = [0u32];
    let index = sched.kv_index().unwrap();
    index.match_prefix(&query, &[&cands[0]], &mut out);
    out[0]
}

#[test]
fn an_abandoned_request_releases_its_pinned_blocks() {
    let (sched, cands) = kv_scheduler();
    let tokens = [1, 2, 3, 4];
    let index = Arc::clone(sched.kv_index().unwrap());
    let a = kthena_sched::EndpointId::from("a");
    // The engine reports the prefix, then a request for it is sent to a.
    let stored = kthena_sched::KvEvent::BlockStored {
        block_hashes: vec![11, 12],
        parent_block_hash: None,
        token_ids: tokens.to_vec(),
        block_size: 2,
    };
    index.apply(&a, &stored).unwrap();
    let req = kthena_sched::Request::new("m").with_token_ids(&tokens);
    let done = SchedDone::new(Arc::clone(&sched), sched.on_scheduled(&req, &cands[0]));
    let removed = kthena_sched::KvEvent::BlockRemoved {
        block_hashes: vec![11, 12],
    };
    index.apply(&a, &removed).unwrap();
    // Still held: the request runs there.
    assert_eq!(held_by_a(&sched, &cands, &tokens), 2);
    // The request is abandoned (its future dropped at an await): the pins go with it.
    drop(done);
    assert_eq!(held_by_a(&sched, &cands, &tokens), 0);
    // A completed request releases them once.
    index.apply(&a, &stored).unwrap();
    let done = SchedDone::new(Arc::clone(&sched), sched.on_scheduled(&req, &cands[0]));
    index.apply(&a, &removed).unwrap();
    assert_eq!(held_by_a(&sched, &cands, &tokens), 2);
    done.complete(true);
    assert_eq!(held_by_a(&sched, &cands, &tokens), 0);
}
