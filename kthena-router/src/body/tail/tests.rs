use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Limited, StreamBody};

use super::*;

type Chunks = tokio::sync::mpsc::Sender<Result<Frame<Bytes>, BoxError>>;

/// A tail fed by the returned sender, limited to `max` bytes in all.
fn tail(max: usize, idle: Duration, total: Duration) -> (Tail, Chunks) {
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let stream =
        futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|f| (f, rx)) });
    let body = Limited::new(StreamBody::new(stream), max)
        .map_err(Into::into)
        .boxed_unsync();
    let lim = TailLimits {
        max_bytes: max,
        idle,
        total,
        deadline: Instant::now() + total,
    };
    (Tail::new(body, lim), tx)
}

#[tokio::test(start_paused = true)]
async fn is_taken_once_and_passes_the_bytes_on() {
    let (t, tx) = tail(10, Duration::from_secs(1), Duration::from_secs(5));
    assert!(!t.taken());
    let mut r = t.take().expect("first take");
    assert!(t.taken());
    assert!(t.take().is_none());
    tx.send(Ok(Frame::data(Bytes::from_static(b"abc"))))
        .await
        .unwrap();
    drop(tx);
    let got = r.frame().await.unwrap().unwrap().into_data().unwrap();
    assert_eq!(got, "abc");
    assert!(r.frame().await.is_none());
    assert!(t.failure().is_none());
}

#[tokio::test(start_paused = true)]
async fn too_many_bytes_fail_with_413_recorded() {
    let (t, tx) = tail(4, Duration::from_secs(1), Duration::from_secs(5));
    let mut r = t.take().unwrap();
    tx.send(Ok(Frame::data(Bytes::from_static(b"abcdef"))))
        .await
        .unwrap();
    let e = r.frame().await.unwrap().unwrap_err();
    assert!(e.to_string().contains("larger than 4 bytes"), "{e}");
    assert_eq!(t.failure().unwrap().status().as_u16(), 413);
    assert!(t.failure().is_none(), "the failure is handed out once");
}

#[tokio::test(start_paused = true)]
async fn a_silent_client_fails_with_the_idle_timeout() {
    let (t, _tx) = tail(100, Duration::from_secs(1), Duration::from_secs(5));
    let mut r = t.take().unwrap();
    let e = r.frame().await.unwrap().unwrap_err();
    assert!(matches!(
        *e.downcast::<TailError>().unwrap(),
        TailError::Client { .. }
    ));
    match t.failure().unwrap() {
        Error::BodyTimeout { idle, timeout } => {
            assert!(idle);
            assert_eq!(timeout, Duration::from_secs(1));
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn a_trickle_fails_with_the_total_timeout() {
    let (t, tx) = tail(100, Duration::from_secs(2), Duration::from_millis(4500));
    let mut r = t.take().unwrap();
    let feed = async move {
        loop {
            tokio::time::sleep(Duration::from_secs(1)).await;
            if tx
                .send(Ok(Frame::data(Bytes::from_static(b"x"))))
                .await
                .is_err()
            {
                break;
            }
        }
    };
    let read = async {
        let mut n = 0;
        loop {
            match r.frame().await.unwrap() {
                Ok(_) => n += 1,
                Err(_) => break n,
            }
        }
    };
    let frames = tokio::select! {
        n = read => n,
        () = feed => panic!("the feed never stops"),
    };
    // One byte a second: four in before the total of 4.5 seconds ends the read.
    assert_eq!(frames, 4);
    match t.failure().unwrap() {
        Error::BodyTimeout { idle, timeout } => {
            assert!(!idle);
            assert_eq!(timeout, Duration::from_millis(4500));
        }
        other => panic!("{other:?}"),
    }
}
