//! Hot reload of a Kubernetes ConfigMap volume: the kubelet updates a mounted ConfigMap by
//! writing a new data folder, pointing the `..data` link at it in one rename, and deleting
//! the old folder; the files are links through `..data`. Every such update must reload,
//! the config file's as well as the manifests', and the next one too.

#![allow(clippy::unwrap_used, reason = "tests fail on any unexpected error")]

use std::path::Path;
use std::time::Duration;

use crate::common::*;
use http::StatusCode;

/// Mounts `files` the way the kubelet does: `dir/..v0/<file>`, `dir/..data -> ..v0`,
/// `dir/<file> -> ..data/<file>`.
fn mount(dir: &Path, files: &[(&str, String)]) {
    std::fs::create_dir_all(dir.join("..v0")).unwrap();
    for (name, text) in files {
        std::fs::write(dir.join("..v0").join(name), text).unwrap();
        std::os::unix::fs::symlink(format!("..data/{name}"), dir.join(name)).unwrap();
    }
    std::os::unix::fs::symlink("..v0", dir.join("..data")).unwrap();
}

/// The kubelet's update of a mounted ConfigMap to `files` (same names), as version `v`.
fn update(dir: &Path, v: u32, files: &[(&str, String)]) {
    let data = dir.join(format!("..v{v}"));
    std::fs::create_dir_all(&data).unwrap();
    for (name, text) in files {
        std::fs::write(data.join(name), text).unwrap();
    }
    let old = std::fs::read_link(dir.join("..data")).unwrap();
    std::os::unix::fs::symlink(format!("..v{v}"), dir.join("..tmp")).unwrap();
    std::fs::rename(dir.join("..tmp"), dir.join("..data")).unwrap();
    std::fs::remove_dir_all(dir.join(old)).unwrap();
}

async fn wait_generation(r: &kthena_router::Router, generation: u64) {
    for _ in 0..250 {
        if r.generation() >= generation {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!(
        "no reload to generation {generation} (still {})",
        r.generation()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configmap_updates_of_manifests_and_config_reload_every_time() {
    let sim = kthena_sim::spawn(sim_config("m")).await.unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let (cfg_dir, cm) = (tmp.path().join("config"), tmp.path().join("manifests"));
    let server = ("s.yaml", model_server("srv", "m", "demo", ""));
    let route = |model: &str| ("r.yaml", simple_route("route", model, "srv"));
    let config = |interval: &str| {
        (
            "router.yaml",
            format!(
                "metricsScrapeInterval: {interval}\naccessLog: {{enabled: false}}\nstandalone:\n  manifests: [../manifests]\n  endpoints:\n{}",
                endpoint("e1", sim.addr(), "demo")
            ),
        )
    };
    mount(&cm, &[server.clone(), route("m1")]);
    mount(&cfg_dir, &[config("1h")]);
    let r = start_router_at(&cfg_dir.join("router.yaml")).await;
    let url = format!("http://{}/v1/chat/completions", r.addr);
    let served = |model: &'static str| {
        let url = url.clone();
        async move { post(&url, chat(model, "q", false, 1), &[]).await.0 }
    };
    assert_eq!(served("m1").await, StatusCode::OK);

    // Two manifest updates in a row: the second one proves the new data folder is watched.
    for (v, model) in [(1, "m2"), (2, "m3")] {
        let generation = r.generation();
        update(&cm, v, &[server.clone(), route(model)]);
        wait_generation(&r, generation + 1).await;
        assert_eq!(served(model).await, StatusCode::OK, "after update {v}");
        assert_eq!(served("m1").await, StatusCode::NOT_FOUND);
    }
    // The config file's ConfigMap, twice; then the manifests still reload.
    for v in [1, 2] {
        let generation = r.generation();
        update(&cfg_dir, v, &[config(&format!("{v}h"))]);
        wait_generation(&r, generation + 1).await;
    }
    let generation = r.generation();
    update(&cm, 3, &[server, route("m4")]);
    wait_generation(&r, generation + 1).await;
    assert_eq!(served("m4").await, StatusCode::OK);
    r.shutdown().await;
}
