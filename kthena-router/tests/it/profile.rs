//! CPU profiles on the debug port of the `kthena-router` binary: under load from
//! kthena-sim engines, `GET /debug/pprof/profile?seconds=5` answers a gzipped pprof
//! protobuf whose hottest functions are the router's; one profile at a time, a bad
//! `seconds` is refused, heap profiles are 501, and the inference port serves none of it.
#![allow(
    clippy::unwrap_used,
    reason = "helpers of a test fail the test on any error"
)]

use std::collections::{HashMap, HashSet};
use std::io::Read as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt as _, Full};
use pprof::protos::Message as _;

use crate::common::*;

/// `GET url` → (status, body bytes).
async fn get_bytes(url: &str) -> (StatusCode, Bytes) {
    let resp = client()
        .request(Request::get(url).body(Full::new(Bytes::new())).unwrap())
        .await
        .unwrap();
    let status = resp.status();
    (status, resp.into_body().collect().await.unwrap().to_bytes())
}

/// Per function name: `(flat, cumulative)` sample counts of a profile. Flat counts the
/// samples whose leaf frame is the function, cumulative those with the function anywhere on
/// the stack (once per sample).
fn function_counts(p: &pprof::protos::Profile) -> HashMap<String, (i64, i64)> {
    let name = |id: u64| -> String {
        let f = p.function.iter().find(|f| f.id == id).unwrap();
        p.string_table[usize::try_from(f.name).unwrap()].clone()
    };
    let locs: HashMap<u64, Vec<String>> = p
        .location
        .iter()
        .map(|l| (l.id, l.line.iter().map(|x| name(x.function_id)).collect()))
        .collect();
    let mut out: HashMap<String, (i64, i64)> = HashMap::new();
    for s in &p.sample {
        let v = s.value[0];
        let frames: Vec<&String> = s.location_id.iter().flat_map(|id| &locs[id]).collect();
        if let Some(leaf) = frames.first() {
            out.entry((*leaf).clone()).or_default().0 += v;
        }
        let once: HashSet<&String> = frames.into_iter().collect();
        for f in once {
            out.entry(f.clone()).or_default().1 += v;
        }
    }
    out
}

/// Chat requests from `clients` tasks in a loop until `stop`; counts the 200s.
fn load(
    url: &str,
    clients: usize,
    stop: &Arc<AtomicBool>,
    ok: &Arc<AtomicU64>,
) -> tokio::task::JoinSet<()> {
    let mut set = tokio::task::JoinSet::new();
    for c in 0..clients {
        let (url, stop, ok) = (url.to_owned(), Arc::clone(stop), Arc::clone(ok));
        set.spawn(async move {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                i += 1;
                let text = format!(
                    "client {c} request {i}: {}",
                    "tell me about kthena. ".repeat(40)
                );
                let (status, _, _) = post(&url, chat("public", &text, false, 2), &[]).await;
                if status == StatusCode::OK {
                    ok.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
    }
    set
}

/// Starts the router binary in front of one kthena-sim engine; returns it with its
/// inference and debug ports once ready.
async fn start_router(dir: &std::path::Path, sim: SocketAddrOf) -> (Killed, u16, u16) {
    let mdir = dir.join("manifests");
    std::fs::create_dir_all(&mdir).unwrap();
    std::fs::write(
        mdir.join("s.yaml"),
        model_server("srv", "real-model", "demo", ""),
    )
    .unwrap();
    std::fs::write(mdir.join("r.yaml"), simple_route("route", "public", "srv")).unwrap();
    let router = spawn_router_process(dir, &[], |port, metrics, debug| {
        format!(
            "bindAddress: 127.0.0.1\nport: {port}\nmetricsPort: {metrics}\ndebugPort: {debug}\nmetricsScrapeInterval: 100ms\naccessLog: {{enabled: false}}\nstandalone:\n  manifests: [manifests]\n  endpoints:\n{}",
            endpoint("sim-a", sim, "demo")
        )
    })
    .await;
    (router.child, router.port, router.debug)
}

type SocketAddrOf = std::net::SocketAddr;

/// The profile parses, covers the requested time, and router functions lead it: among the
/// ten functions with the most cumulative samples (samples with the function anywhere on
/// the stack) outside the thread and async runtime (`std`, `core`, `alloc`, `tokio`,
/// `hyper`, the C library, generic instances named without their path), at least one is
/// `kthena_router::...`; some pipeline stage (`kthena_router::pipeline::...`) has samples;
/// and at least half of all samples have a router frame on their stack.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cpu_profile_under_load_names_router_code() {
    let sim = kthena_sim::spawn(sim_config("real-model")).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (_router, port, debug) = start_router(dir.path(), sim.addr()).await;
    let dbg = format!("http://127.0.0.1:{debug}/debug/pprof");

    // Refusals first: a bad duration, heap profiles, the inference port.
    let (status, body) = get_bytes(&format!("{dbg}/profile?seconds=0")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        body,
        r#"{"error":"seconds must be an integer from 1 to 300, got \"0\""}"#
    );
    let (status, body) = get_bytes(&format!("{dbg}/heap")).await;
    assert_eq!(status, StatusCode::NOT_IMPLEMENTED);
    assert!(
        String::from_utf8_lossy(&body).contains("mimalloc"),
        "{body:?}"
    );
    let (status, _) = get_bytes(&format!(
        "http://127.0.0.1:{port}/debug/pprof/profile?seconds=1"
    ))
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    let stop = Arc::new(AtomicBool::new(false));
    let ok = Arc::new(AtomicU64::new(0));
    let clients = load(
        &format!("http://127.0.0.1:{port}/v1/chat/completions"),
        16,
        &stop,
        &ok,
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let url = format!("{dbg}/profile?seconds=5");
    let taking = get_bytes(&url);
    let second = async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        get_bytes(&format!("{dbg}/profile?seconds=1")).await
    };
    let ((status, gz), (second, body)) = tokio::join!(taking, second);
    // One profile at a time.
    assert_eq!(second, StatusCode::CONFLICT, "{body:?}");
    stop.store(true, Ordering::Relaxed);
    clients.join_all().await;
    assert_eq!(status, StatusCode::OK, "{gz:?}");
    assert!(ok.load(Ordering::Relaxed) > 50, "too little load: {ok:?}");

    let mut raw = Vec::new();
    flate2::read::GzDecoder::new(&gz[..])
        .read_to_end(&mut raw)
        .unwrap();
    let p = pprof::protos::Profile::decode(&raw[..]).unwrap();
    assert!(p.duration_nanos >= 5_000_000_000, "{}", p.duration_nanos);
    assert_router_leads(&p);
}

/// The criteria of [`a_cpu_profile_under_load_names_router_code`] on a decoded profile.
fn assert_router_leads(p: &pprof::protos::Profile) {
    let counts = function_counts(p);
    let total: i64 = p.sample.iter().map(|s| s.value[0]).sum();
    let runtime = [
        "std::",
        "core::",
        "alloc::",
        "tokio::",
        "hyper::",
        "hyper_util::",
        "<",
        "__",
        "clone",
        "start_thread",
    ];
    let mut by_cum: Vec<(&String, i64)> = counts
        .iter()
        .filter(|(f, _)| {
            // Inlined generic instances are named without their path (`block_on<...>`).
            let pathed = f.split('<').next().is_some_and(|h| h.contains("::"));
            pathed && !runtime.iter().any(|r| f.starts_with(r))
        })
        .map(|(f, (_, cum))| (f, *cum))
        .collect();
    by_cum.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let top: Vec<_> = by_cum.iter().take(10).collect();
    let router_fns: Vec<_> = by_cum
        .iter()
        .filter(|(f, _)| f.starts_with("kthena_router::"))
        .take(15)
        .collect();
    // The request path itself shows: some pipeline stage has samples.
    assert!(
        counts
            .keys()
            .any(|f| f.starts_with("kthena_router::pipeline::")),
        "{router_fns:#?}"
    );
    assert!(
        top.iter().any(|(f, _)| f.starts_with("kthena_router::")),
        "{top:#?}"
    );
    let with_router = p
        .sample
        .iter()
        .filter(|s| {
            s.location_id.iter().any(|id| {
                let l = p.location.iter().find(|l| l.id == *id).unwrap();
                l.line.iter().any(|x| {
                    let f = p.function.iter().find(|f| f.id == x.function_id).unwrap();
                    p.string_table[usize::try_from(f.name).unwrap()].starts_with("kthena_router::")
                })
            })
        })
        .map(|s| s.value[0])
        .sum::<i64>();
    assert!(
        total > 0 && with_router * 2 >= total,
        "{with_router} of {total}"
    );
}
