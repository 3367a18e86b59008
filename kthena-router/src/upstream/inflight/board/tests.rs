use std::sync::Arc;
use std::time::Duration;

use super::{BoardClient, InFlightBoard, lock};
use crate::kv::cache::KvState;
use crate::upstream::endpoint::Endpoint;
use crate::upstream::inflight::tests::{endpoints, held, kv_state};
use kthena_sched::{EndpointId, Request};

use crate::upstream::inflight::routed::Decision;

/// A snapshot's KV state without an index (no `kvcache-aware`).
fn none() -> KvState {
    KvState::default()
}

fn seen(eps: &[Arc<Endpoint>]) -> Vec<Option<u32>> {
    eps.iter().map(|e| e.shared_in_flight()).collect()
}

#[tokio::test(start_paused = true)]
async fn own_bookings_at_once_others_at_the_next_refresh() {
    let board = InFlightBoard::default();
    assert_eq!(board.refresh(), Duration::from_millis(50));
    let (a, b) = (
        BoardClient::new(board.clone()),
        BoardClient::new(board.clone()),
    );
    let (ea, eb) = (endpoints(), endpoints());
    assert_eq!(seen(&eb), [None, None]);

    let mut g1 = ea[0].begin_request(0);
    a.track(&ea[0], &mut g1);
    assert_eq!(seen(&ea), [Some(1), None]);
    b.sync(&eb, &none());
    assert_eq!(seen(&eb), [Some(1), Some(0)]);

    // A second booking by A: B's next refresh is not due before 50 ms.
    let mut g2 = ea[0].begin_request(0);
    a.track(&ea[0], &mut g2);
    tokio::time::advance(Duration::from_millis(49)).await;
    b.sync(&eb, &none());
    assert_eq!(seen(&eb), [Some(1), Some(0)]);
    tokio::time::advance(Duration::from_millis(1)).await;
    b.sync(&eb, &none());
    assert_eq!(seen(&eb), [Some(2), Some(0)]);

    // B's own booking answers with every router's count, as HINCRBY does.
    let mut g3 = eb[0].begin_request(0);
    b.track(&eb[0], &mut g3);
    assert_eq!(seen(&eb), [Some(3), Some(0)]);
    assert_eq!(board.count("ns", "e0"), 3);

    drop(g1);
    assert_eq!(seen(&ea), [Some(2), None]);
    drop(g3);
    assert_eq!(seen(&eb), [Some(1), Some(0)]);
    drop(g2);
    assert_eq!(board.count("ns", "e0"), 0);
    assert_eq!(board.count("ns", "e1"), 0);
    assert_eq!(seen(&ea), [Some(0), None]);
}

#[tokio::test(start_paused = true)]
async fn a_zero_refresh_reads_the_board_every_time() {
    let board = InFlightBoard::new(Duration::ZERO);
    let (a, b) = (BoardClient::new(board.clone()), BoardClient::new(board));
    let (ea, eb) = (endpoints(), endpoints());
    let mut guards = Vec::new();
    for expected in 1..=3 {
        let mut g = ea[1].begin_request(0);
        a.track(&ea[1], &mut g);
        guards.push(g);
        b.sync(&eb, &none());
        assert_eq!(seen(&eb), [Some(0), Some(expected)]);
    }
    guards.clear();
    b.sync(&eb, &none());
    assert_eq!(seen(&eb), [Some(0), Some(0)]);
}

#[test]
fn an_empty_board_counts_nothing() {
    let board = InFlightBoard::new(Duration::from_millis(5));
    assert_eq!(board.count("ns", "e0"), 0);
    assert_eq!(format!("{board:?}"), "InFlightBoard { refresh: 5ms, .. }");
}

/// Each router's KV state with its own in-memory index (blocks of 16 tokens).

#[tokio::test(start_paused = true)]
async fn routing_decisions_reach_the_other_routers_indexes_at_their_refresh() {
    let board = InFlightBoard::default();
    let (a, b, c) = (
        BoardClient::new(board.clone()),
        BoardClient::new(board.clone()),
        BoardClient::new(board.clone()),
    );
    let (kva, kvb, kvc) = (kv_state(), kv_state(), kv_state());
    let (ea, eb) = (endpoints(), endpoints());
    // 70 tokens: 4 full blocks of 16, the rest is not a block.
    let tokens: Vec<u32> = (0..70).collect();
    b.sync(&eb, &kvb);
    publish(
        &a,
        &kva,
        &ea[1].id,
        &Request::new("m").with_token_ids(&tokens),
    );
    // A request without token ids publishes nothing.
    publish(&a, &kva, &ea[0].id, &Request::new("m"));
    assert_eq!(held(&kvb, &eb, &tokens), [0, 0]);
    b.sync(&eb, &kvb);
    assert_eq!(held(&kvb, &eb, &tokens), [0, 0], "before B's next refresh");
    tokio::time::advance(Duration::from_millis(50)).await;
    b.sync(&eb, &kvb);
    assert_eq!(held(&kvb, &eb, &tokens), [0, 4]);
    // The decision stays on the board until C, which has not refreshed yet, reads it.
    assert_eq!(lock(&board.routed).entries.len(), 1);
    c.sync(&eb, &kvc);
    assert_eq!(held(&kvc, &eb, &tokens), [0, 4]);
    a.sync(&ea, &kva);
    assert_eq!(lock(&board.routed).entries.len(), 0);
    // A's own decisions are not replayed into its index (its plugin records them).
    assert_eq!(held(&kva, &ea, &tokens), [0, 0]);
    // A stopped router does not hold decisions back.
    drop(c);
    publish(
        &a,
        &kva,
        &ea[0].id,
        &Request::new("m").with_token_ids(&tokens),
    );
    tokio::time::advance(Duration::from_millis(50)).await;
    b.sync(&eb, &kvb);
    a.sync(&ea, &kva);
    assert_eq!(held(&kvb, &eb, &tokens), [4, 4]);
    assert_eq!(lock(&board.routed).entries.len(), 0);
}

/// What `InFlightShare::routed` does for a board.
fn publish(client: &BoardClient, kv: &KvState, endpoint: &EndpointId, req: &Request<'_>) {
    if let Some(d) = Decision::of(kv, endpoint, req) {
        client.routed(d);
    }
}
