use std::future::poll_fn;

use super::*;

/// One poll of a write of `offered` bytes: `true` when it may go out.
async fn offer(h: &mut Hold, offered: usize) -> bool {
    poll_fn(|cx| Poll::Ready(h.poll(cx, offered).is_ready())).await
}

#[tokio::test]
async fn events_queued_during_the_turn_leave_in_one_write() {
    let mut h = Hold::new();
    assert!(!offer(&mut h, 9).await, "held for a turn");
    tokio::task::yield_now().await;
    // Another event was queued behind it meanwhile: held for one more turn.
    assert!(!offer(&mut h, 18).await);
    tokio::task::yield_now().await;
    assert!(offer(&mut h, 18).await, "nothing more: written");
    // The socket took only part of it: the rest goes out without a new hold.
    h.written(10, 18);
    assert!(offer(&mut h, 8).await);
    h.written(8, 8);
    // The next write starts a new hold.
    assert!(!offer(&mut h, 9).await);
}

#[tokio::test]
async fn a_current_thread_runtime_wakes_the_task_itself() {
    let mut h = Hold::new();
    assert_eq!(h.how, Turn::SelfWake);
    // Held: the waker was woken already, so the task is queued without an I/O poll.
    let woke = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let waker = std::task::Waker::from(std::sync::Arc::new(Flag(woke.clone())));
    let mut cx = Context::from_waker(&waker);
    assert!(h.poll(&mut cx, 9).is_pending());
    assert!(woke.load(std::sync::atomic::Ordering::SeqCst));
    assert!(h.poll(&mut cx, 9).is_ready(), "the next poll ends the turn");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn a_multi_thread_runtime_yields() {
    assert_eq!(Hold::new().how, Turn::Yield);
    let mut h = Hold::new();
    assert!(!offer(&mut h, 9).await);
    tokio::task::yield_now().await;
    assert!(offer(&mut h, 9).await);
}

/// A waker that records that it was woken.
struct Flag(std::sync::Arc<std::sync::atomic::AtomicBool>);

impl std::task::Wake for Flag {
    fn wake(self: std::sync::Arc<Self>) {
        self.0.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

#[tokio::test]
async fn a_lone_event_goes_out_after_one_turn() {
    let mut h = Hold::new();
    assert!(!offer(&mut h, 9).await);
    tokio::task::yield_now().await;
    assert!(offer(&mut h, 9).await);
}

#[tokio::test]
async fn a_write_is_held_at_most_max_holds_turns_or_max_held_bytes() {
    let mut h = Hold::new();
    let mut offered = 10;
    let mut held = 0;
    while !offer(&mut h, offered).await {
        held += 1;
        tokio::task::yield_now().await;
        offered += 10;
    }
    assert_eq!(held, usize::from(MAX_HOLDS));
    h.written(offered, offered);
    assert!(
        offer(&mut h, MAX_HELD_BYTES).await,
        "a full buffer is written at once"
    );
}
