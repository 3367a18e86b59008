use tower::{Layer, ServiceExt};

use super::*;
use crate::pipeline::test_util;

#[tokio::test]
async fn matches_the_route_and_resolves_the_server() {
    let (shared, _) = test_util::shared(&["127.0.0.1:1", "127.0.0.1:2"]);
    let (seen, inner) = test_util::recorder::<Ctx<Routed>>();
    let svc = RouteLayer::new(Arc::clone(&shared)).layer(inner);
    let req = test_util::parsed(&shared, "/v1/completions", r#"{"model":"m","prompt":"x"}"#);
    svc.clone().oneshot(req).await.unwrap();
    let routed = seen.lock().unwrap().take().unwrap().at;
    assert_eq!(routed.server.key, "default/ms");
    assert_eq!(routed.upstream_model, "served-m");
    assert_eq!(routed.lora, None);
    assert_eq!(routed.pool.len(), 2);

    let req = test_util::parsed(
        &shared,
        "/v1/completions",
        r#"{"model":"nope","prompt":"x"}"#,
    );
    let e = svc.oneshot(req).await.unwrap_err();
    assert!(
        matches!(e, Error::ModelNotFound { ref model } if model == "nope"),
        "{e}"
    );
    assert!(seen.lock().unwrap().is_none());
}
