use tower::{Layer, ServiceExt};

use super::*;
use crate::pipeline::ctx::Tokens;
use crate::pipeline::test_util;

#[tokio::test]
async fn ranks_every_admitted_endpoint() {
    let (shared, _) = test_util::shared(&["127.0.0.1:1", "127.0.0.1:2"]);
    let (seen, inner) = test_util::recorder::<Ctx<Decided>>();
    let req = test_util::routed(&shared, test_util::accounting(&shared)).await;
    let req = req.map(|c| {
        let routed = c.at.clone();
        c.with(Tokenized {
            routed,
            tokens: Tokens(None),
        })
    });
    ScheduleLayer::new(Arc::clone(&shared))
        .layer(inner)
        .oneshot(req)
        .await
        .unwrap();
    let seen = seen.lock().unwrap().take().unwrap().at;
    assert!(seen.tokens.0.is_none());
    let Decision::Ranked(s) = seen.decision else {
        panic!("not a ranking")
    };
    assert_eq!(s.cands.len(), 2);
    let mut ranked = s.ranked.to_vec();
    ranked.sort_unstable();
    assert_eq!(ranked, [0, 1]);
}
