//! The ModelServing controller while the API server restarts: its own test binary (its own
//! control plane), so stopping kube-apiserver disturbs no other test.

mod ms_support;

use std::time::Duration;

use anyhow::Result;
use kthena_api::ModelServing;
use kube::api::{Patch, PatchParams};
use ms_support::{available, create_example, setup};
use serde_json::json;

/// Regression: after a restart every watch resumes with `410 Expired` and re-lists; each of
/// those errors paused all of the controller's watches with kube-runtime's default back-off
/// (up to 30 s, doubled by jitter), so a change made after the restart waited about two
/// minutes. Now it converges within the back-off of a few seconds.
#[tokio::test]
async fn a_change_after_an_api_server_restart_converges_within_seconds() -> Result<()> {
    let env_ = setup("ctl-restart").await?;
    let ns = &env_.ns;
    create_example(ns, "sample.yaml").await?;
    available(ns, "sample", 1).await?;

    let env = ns.env();
    env.stop_apiserver().await?;
    // Long enough for the watches to fail and back off several times.
    tokio::time::sleep(Duration::from_secs(10)).await;
    env.start_apiserver().await?;
    ns.api::<ModelServing>()
        .patch(
            "sample",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 2}})),
        )
        .await?;
    let started = tokio::time::Instant::now();
    available(ns, "sample", 2).await?;
    let took = started.elapsed();
    eprintln!("converged {took:?} after the restart");
    // Pods start in about a second on the simulated node; the old back-off took minutes.
    assert!(took < Duration::from_secs(45), "took {took:?}");
    Ok(())
}
