use std::sync::Arc;
use std::time::Duration;

use super::{BoardClient, InFlightBoard};
use crate::config::EndpointConfig;
use crate::upstream::endpoint::Endpoint;

/// One router's endpoints `ns/e0` and `ns/e1` (each router has its own objects).
fn endpoints() -> Vec<Arc<Endpoint>> {
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
    b.sync(&eb);
    assert_eq!(seen(&eb), [Some(1), Some(0)]);

    // A second booking by A: B's next refresh is not due before 50 ms.
    let mut g2 = ea[0].begin_request(0);
    a.track(&ea[0], &mut g2);
    tokio::time::advance(Duration::from_millis(49)).await;
    b.sync(&eb);
    assert_eq!(seen(&eb), [Some(1), Some(0)]);
    tokio::time::advance(Duration::from_millis(1)).await;
    b.sync(&eb);
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
    let (a, b) = (
        BoardClient::new(board.clone()),
        BoardClient::new(board.clone()),
    );
    let (ea, eb) = (endpoints(), endpoints());
    let mut guards = Vec::new();
    for expected in 1..=3 {
        let mut g = ea[1].begin_request(0);
        a.track(&ea[1], &mut g);
        guards.push(g);
        b.sync(&eb);
        assert_eq!(seen(&eb), [Some(0), Some(expected)]);
    }
    guards.clear();
    b.sync(&eb);
    assert_eq!(seen(&eb), [Some(0), Some(0)]);
}

#[test]
fn an_empty_board_counts_nothing() {
    let board = InFlightBoard::new(Duration::from_millis(5));
    assert_eq!(board.count("ns", "e0"), 0);
    assert_eq!(format!("{board:?}"), "InFlightBoard { refresh: 5ms, .. }");
}
