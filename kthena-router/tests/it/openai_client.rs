//! The official `openai` Python client against the router in front of kthena-sim engines:
//! chat, completion, streaming and an error case, asserting what the client sees.

use crate::common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_python_client_sees_openai_answers() {
    let sims = kthena_sim::spawn_many(2, sim_config("served-model"))
        .await
        .unwrap();
    let eps: String = sims
        .iter()
        .enumerate()
        .map(|(i, s)| endpoint(&format!("sim-{i}"), s.addr(), "demo"))
        .collect();
    let r = TestRouter::start(
        "metricsScrapeInterval: 200ms",
        &eps,
        &[
            ("s.yaml", model_server("srv", "served-model", "demo", "")),
            ("r.yaml", simple_route("route", "public-model", "srv")),
        ],
    )
    .await;
    r.wait_ready().await;
    let v = run_python_client("openai_client.py", r.url(), "public-model").await;
    assert_eq!(v["models"], serde_json::json!(["public-model"]));
    assert_eq!(v["chat"]["model"], "served-model");
    assert_eq!(v["chat"]["completion_tokens"], 7);
    assert_eq!(v["chat"]["finish_reason"], "length");
    assert!(v["chat"]["content_len"].as_u64().unwrap() > 0);
    assert_eq!(v["completion"]["model"], "served-model");
    assert_eq!(v["completion"]["completion_tokens"], 5);
    // 9 content chunks plus the role chunk; the usage chunk the client did not ask for is
    // hidden by the router.
    assert_eq!(v["stream"]["usage_chunks"], 0);
    assert!(v["stream"]["chunks"].as_u64().unwrap() >= 9, "{v}");
    assert_eq!(v["stream"]["finish_reason"], "length");
    assert!(v["stream"]["text_len"].as_u64().unwrap() > 0);
    assert_eq!(v["error"]["status"], 404);
    assert_eq!(v["error"]["code"], "model_not_found");
    assert_eq!(v["error"]["type"], "invalid_request_error");
    assert_eq!(v["error"]["message_has_model"], true);
    r.router.shutdown().await;
}
