use super::*;

fn threads(n: usize) -> ServingThreads {
    ServingThreads::start(n, crate::server::http_client).expect("serving threads")
}

/// Where a task ran, and a way to end it.
fn park(
    t: &ServingThreads,
) -> (
    std::sync::mpsc::Receiver<String>,
    tokio::sync::oneshot::Sender<()>,
) {
    let (name_tx, name_rx) = std::sync::mpsc::channel();
    let (end_tx, end_rx) = tokio::sync::oneshot::channel::<()>();
    t.spawn(move || async move {
        let name = std::thread::current().name().unwrap_or("").to_owned();
        let _ = name_tx.send(name);
        let _ = end_rx.await;
    });
    (name_rx, end_tx)
}

fn open(t: &ServingThreads) -> Vec<usize> {
    t.workers
        .iter()
        .map(|w| w.open.load(Ordering::Relaxed))
        .collect()
}

#[test]
fn connections_go_to_the_thread_with_the_fewest_open() {
    let t = threads(2);
    let (a, end_a) = park(&t);
    let (b, end_b) = park(&t);
    assert_eq!(a.recv().expect("ran"), "kthena-serve-0");
    assert_eq!(b.recv().expect("ran"), "kthena-serve-1");
    assert_eq!(open(&t), [1, 1]);
    drop(end_a);
    // The task ends on its own thread: wait for it (5 s at most).
    for _ in 0..5_000 {
        if open(&t) == [0, 1] {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    assert_eq!(open(&t), [0, 1]);
    let (c, _end_c) = park(&t);
    assert_eq!(c.recv().expect("ran"), "kthena-serve-0");
    drop(end_b);
    t.stop();
    // After `stop`, the threads are gone and a task left open was dropped with them.
    assert_eq!(open(&t), [0, 0]);
}

#[test]
fn each_thread_has_its_own_client() {
    let t = threads(1);
    let (tx, rx) = std::sync::mpsc::channel();
    t.spawn(move || async move {
        let _ = tx.send(CLIENT.with(|c| c.get().is_some()));
    });
    assert!(rx.recv().expect("ran"));
    assert!(
        !CLIENT.with(|c| c.get().is_some()),
        "not on the test's thread"
    );
    t.stop();
}
