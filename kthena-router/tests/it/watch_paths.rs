//! Hot reload follows the paths the config lists, not only the folders that existed at the
//! last good load: a manifest folder deleted and made again is watched again, and a listed
//! path that does not exist yet (a volume mounted later) reloads once it appears.

#![allow(clippy::unwrap_used, reason = "tests fail on any unexpected error")]

use std::path::Path;
use std::time::Duration;

use crate::common::*;
use http::StatusCode;

const FAILURES: &str = r#"kthena_router_config_reloads_total{result="failure"}"#;

async fn wait_generation(r: &TestRouter, generation: u64) {
    for _ in 0..250 {
        if r.router.generation() >= generation {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!(
        "no reload to generation {generation} (still {})",
        r.router.generation()
    );
}

async fn wait_failures(r: &TestRouter, n: f64) {
    for _ in 0..250 {
        if r.metric(FAILURES).await >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("no rejected reload number {n}");
}

/// Makes folder `to` holding `files` in one rename, as a volume mount or `mv` does.
fn make_folder(to: &Path, files: &[(&str, String)]) {
    let staging = to.with_extension("staging");
    std::fs::create_dir_all(&staging).unwrap();
    for (name, text) in files {
        std::fs::write(staging.join(name), text).unwrap();
    }
    std::fs::rename(&staging, to).unwrap();
}

async fn served(r: &TestRouter, model: &str) -> StatusCode {
    let url = format!("{}/v1/chat/completions", r.url());
    post(&url, chat(model, "q", false, 1), &[]).await.0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manifest_folder_deleted_and_made_again_is_watched_again() {
    let sim = kthena_sim::spawn(sim_config("m")).await.unwrap();
    let server = ("s.yaml", model_server("srv", "m", "demo", ""));
    let route = |model: &str| ("r.yaml", simple_route("route", model, "srv"));
    let eps = endpoint("e1", sim.addr(), "demo");
    let r = TestRouter::start("", &eps, &[server.clone(), route("m1")]).await;
    assert_eq!(served(&r, "m1").await, StatusCode::OK);

    // Deleted: the config lists a missing folder, so the change is rejected and m1 serves.
    let generation = r.router.generation();
    std::fs::remove_dir_all(r.manifests()).unwrap();
    wait_failures(&r, 1.0).await;
    assert_eq!(r.router.generation(), generation);
    assert_eq!(served(&r, "m1").await, StatusCode::OK);

    // Made again: it loads, and an edit inside the new folder reloads too.
    make_folder(&r.manifests(), &[server, route("m2")]);
    wait_generation(&r, generation + 1).await;
    assert_eq!(served(&r, "m2").await, StatusCode::OK);
    std::fs::write(r.manifests().join("r.yaml"), route("m3").1).unwrap();
    wait_generation(&r, generation + 2).await;
    assert_eq!(served(&r, "m3").await, StatusCode::OK);
    assert_eq!(served(&r, "m2").await, StatusCode::NOT_FOUND);
    r.router.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listed_path_that_appears_later_reloads() {
    let sim = kthena_sim::spawn(sim_config("m")).await.unwrap();
    let eps = endpoint("e1", sim.addr(), "demo");
    let server = ("s.yaml", model_server("srv", "m", "demo", ""));
    let r = TestRouter::start(
        "",
        &eps,
        &[server, ("r.yaml", simple_route("r1", "m1", "srv"))],
    )
    .await;
    let path = r.dir.path().join("router.yaml");
    let config = std::fs::read_to_string(&path).unwrap();
    let generation = r.router.generation();

    // The config now lists `later/`, which does not exist yet: rejected, m1 still serves.
    let listed = config.replace("manifests: [manifests]", "manifests: [manifests, later]");
    assert_ne!(listed, config);
    std::fs::write(&path, listed).unwrap();
    wait_failures(&r, 1.0).await;
    assert_eq!(r.router.generation(), generation);
    assert_eq!(served(&r, "m2").await, StatusCode::NOT_FOUND);

    // It appears: the config loads without any further edit of it.
    make_folder(
        &r.dir.path().join("later"),
        &[("r2.yaml", simple_route("r2", "m2", "srv"))],
    );
    wait_generation(&r, generation + 1).await;
    assert_eq!(served(&r, "m2").await, StatusCode::OK);
    assert_eq!(served(&r, "m1").await, StatusCode::OK);
    r.router.shutdown().await;
}
