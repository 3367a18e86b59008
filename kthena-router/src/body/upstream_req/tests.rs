use std::time::Duration;

use http_body_util::{BodyExt, Full, Limited};
use tokio::time::Instant;

use super::*;
use crate::body::tail::TailLimits;

fn tail_of(rest: &'static [u8]) -> Tail {
    let body = Limited::new(Full::new(Bytes::from_static(rest)), 100)
        .map_err(Into::into)
        .boxed_unsync();
    let total = Duration::from_secs(5);
    let lim = TailLimits {
        max_bytes: 100,
        idle: total,
        total,
        deadline: Instant::now() + total,
    };
    Tail::new(body, lim)
}

#[tokio::test]
async fn held_bytes_are_one_exact_frame() {
    let b = ReqBody::from(Bytes::from_static(b"{}"));
    assert_eq!(b.size_hint().exact(), Some(2));
    assert_eq!(b.collect().await.unwrap().to_bytes(), "{}");
    assert!(ReqBody::default().is_end_stream());
}

#[tokio::test]
async fn the_head_then_the_tail_with_their_summed_length() {
    let tail = tail_of(b" world");
    let b = ReqBody::new(Bytes::from_static(b"hello"), Some(tail.clone()));
    assert_eq!(b.size_hint().exact(), Some(11));
    assert!(!tail.taken());
    assert_eq!(b.collect().await.unwrap().to_bytes(), "hello world");
    assert!(tail.taken());
    // A second attempt cannot send the tail again.
    let again = ReqBody::new(Bytes::from_static(b"hello"), Some(tail));
    let e = again.collect().await.unwrap_err();
    assert!(matches!(
        *e.downcast::<TailError>().unwrap(),
        TailError::Taken
    ));
}

#[tokio::test]
async fn a_body_dropped_before_its_tail_leaves_it_for_the_next_attempt() {
    let tail = tail_of(b"rest");
    let mut b = ReqBody::new(Bytes::from_static(b"head"), Some(tail.clone()));
    let first = b.frame().await.unwrap().unwrap().into_data().unwrap();
    assert_eq!(first, "head");
    drop(b);
    assert!(!tail.taken());
}
