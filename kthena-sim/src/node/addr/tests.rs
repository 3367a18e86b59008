use super::*;

#[tokio::test]
async fn taken_ports_move_to_the_next_address_and_leases_are_reused() {
    let config = Config::default().with_ephemeral_port();
    let (a, la) = spawn_on_free_ip(config.clone()).await.unwrap();
    let port = a.addr().port();
    // Same port again: the address of `a` is taken, so the next free one is used.
    let (b, lb) = spawn_on_free_ip(Config {
        port,
        ..config.clone()
    })
    .await
    .unwrap();
    assert_ne!(la.ip(), lb.ip());
    assert_eq!((b.addr().ip(), b.addr().port()), (lb.ip(), port));
    let first = la.ip();
    a.kill().await;
    drop(la);
    // Another process (here: a bare socket) holds the port on the freed address.
    let blocker = std::net::TcpListener::bind((first, port)).unwrap();
    let (c, lc) = spawn_on_free_ip(Config {
        port,
        ..config.clone()
    })
    .await
    .unwrap();
    assert!(lc.ip() != first && lc.ip() != lb.ip());
    drop(blocker);
    // Freed and unblocked: the lowest address is handed out again.
    let (d, ld) = spawn_on_free_ip(Config { port, ..config }).await.unwrap();
    assert_eq!(ld.ip(), first);
    for h in [b, c, d] {
        h.kill().await;
    }
}
