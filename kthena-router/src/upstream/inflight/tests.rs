use std::collections::HashMap;
use std::sync::Arc;

use crate::config::EndpointConfig;
use crate::kv::cache::KvState;
use crate::upstream::endpoint::Endpoint;

use crate::config::redis_url_from_env;

#[test]
fn go_kthenas_variables_name_the_redis_server() {
    let env = |pairs: &[(&str, &str)]| -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    };
    assert_eq!(redis_url_from_env(&env(&[])), None);
    assert_eq!(
        redis_url_from_env(&env(&[("REDIS_HOST", "redis-server")])).as_deref(),
        Some("redis://redis-server:6379/0")
    );
    assert_eq!(
        redis_url_from_env(&env(&[
            ("REDIS_HOST", "10.0.0.5"),
            ("REDIS_PORT", "6380"),
            ("REDIS_PASSWORD", "pw"),
        ]))
        .as_deref(),
        Some("redis://:pw@10.0.0.5:6380/0")
    );
}

/// One router's endpoints `ns/e0` and `ns/e1` (each router has its own objects).
pub(crate) fn endpoints() -> Vec<Arc<Endpoint>> {
    (0..2)
        .map(|i| {
            let cfg = EndpointConfig {
                name: format!("e{i}"),
                address: format!("127.0.0.1:{}", 8000 + i),
                namespace: "ns".to_owned(),
                labels: Default::default(),
                kv_events: None,
                kv_events_replay: None,
                incarnation: None,
                container_started: None,
            };
            Arc::new(Endpoint::from_config(&cfg).unwrap())
        })
        .collect()
}

/// A snapshot's KV state with an in-memory index of 16-token blocks.
pub(crate) fn kv_state() -> KvState {
    let index = kthena_sched::InMemoryKvIndex::new(16, 1024).unwrap();
    KvState {
        index: Some(Arc::new(index)),
        ..KvState::default()
    }
}

/// Blocks of `tokens` that each endpoint of `eps` holds in `kv`'s index.
pub(crate) fn held(kv: &KvState, eps: &[Arc<Endpoint>], tokens: &[u32]) -> Vec<u32> {
    let mut hashes = Vec::new();
    kthena_sched::token_block_hashes(tokens, 16, 128, &mut hashes);
    let query = kthena_sched::KvQuery {
        model: "m",
        token_ids: tokens,
        block_size: 16,
        block_hashes: &hashes,
    };
    let cands: Vec<kthena_sched::Candidate> = eps
        .iter()
        .map(|e| kthena_sched::Candidate::new(e.id.clone(), "m"))
        .collect();
    let refs: Vec<&kthena_sched::Candidate> = cands.iter().collect();
    let mut out = vec![0; refs.len()];
    kv.index
        .as_ref()
        .unwrap()
        .match_prefix(&query, &refs, &mut out);
    out
}

/// Two routers sharing through a real Redis: a decision of A reaches B's index at B's next
/// refresh (provisional entry for the endpoint A chose), and A does not read its own back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routing_decisions_reach_the_other_router_through_redis() {
    const URL: &str = "redis://127.0.0.1:6379/12";
    let mut c = redis::Client::open(URL).unwrap().get_connection().unwrap();
    let _: () = redis::cmd("DEL")
        .arg(super::routed::ROUTED_STREAM)
        .arg(super::ON_FLIGHT_KEY)
        .query(&mut c)
        .unwrap();
    let a = super::SharedInFlight::connect(URL).await.unwrap();
    let b = super::SharedInFlight::connect(URL).await.unwrap();
    let share_a = super::InFlightShare::Redis(Arc::clone(&a));
    let (kva, kvb) = (kv_state(), kv_state());
    let (ea, eb) = (endpoints(), endpoints());
    // 70 tokens: 4 full blocks of 16.
    let tokens: Vec<u32> = (0..70).collect();
    let req = kthena_sched::Request::new("m").with_token_ids(&tokens);
    share_a.routed(&kva, &ea[1].id, &req);
    let mut guard = ea[1].begin_request(0);
    share_a.track(&ea[1], &mut guard).await;
    assert_eq!(ea[1].shared_in_flight(), Some(1));
    b.sync(&eb, &kvb).await;
    assert_eq!(held(&kvb, &eb, &tokens), [0, 4]);
    assert_eq!(eb[1].shared_in_flight(), Some(1));
    a.sync(&ea, &kva).await;
    assert_eq!(
        held(&kva, &ea, &tokens),
        [0, 0],
        "A's own decision is not read back"
    );
    // A router that starts later reads only what is published after it.
    let late = super::SharedInFlight::connect(URL).await.unwrap();
    let kvl = kv_state();
    let el = endpoints();
    late.sync(&el, &kvl).await;
    assert_eq!(held(&kvl, &el, &tokens), [0, 0]);
}
