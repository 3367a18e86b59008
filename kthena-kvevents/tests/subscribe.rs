//! The shared SUB loop against a real ZMQ publisher: it connects, reports the connection,
//! hands over every message whole and ends when cancelled.
#![cfg(feature = "subscribe")]

use std::time::Duration;

use bytes::Bytes;
use kthena_kvevents::{Subscriber, split_frames, subscribe};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use zeromq::{Socket, SocketSend, ZmqMessage};

/// Forwards what the loop reports to the test.
struct Probe(mpsc::UnboundedSender<Option<u64>>);

impl Subscriber for Probe {
    async fn message(&mut self, frames: &[Bytes]) {
        let seq = split_frames(frames).map(|(_, seq, _)| seq).ok();
        let _ = self.0.send(seq);
    }

    fn connected(&mut self, on: bool) {
        assert!(on, "the publisher stays up");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hands_over_each_message_until_cancelled() {
    let mut publisher = zeromq::PubSocket::new();
    let endpoint = publisher.bind("tcp://127.0.0.1:0").await.unwrap();
    let address = endpoint.to_string();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let cancel = CancellationToken::new();
    let mut tasks = tokio::task::JoinSet::new();
    {
        let cancel = cancel.clone();
        tasks.spawn(async move {
            subscribe("engine-0", &address, &mut Probe(tx), &cancel).await;
        });
    }
    let message = |seq: u64| {
        let mut m = ZmqMessage::from(Bytes::from_static(b"kv"));
        m.push_back(Bytes::copy_from_slice(&seq.to_be_bytes()));
        m.push_back(Bytes::from_static(b"\x90"));
        m
    };
    // Until the subscription is live, messages are lost (ZMQ's slow joiner): repeat.
    let first = loop {
        publisher.send(message(7)).await.unwrap();
        if let Ok(Some(seq)) = tokio::time::timeout(Duration::from_millis(50), rx.recv()).await {
            break seq;
        }
    };
    assert_eq!(first, Some(7));
    publisher.send(message(8)).await.unwrap();
    let next = loop {
        let seq = rx.recv().await.unwrap();
        if seq != Some(7) {
            break seq;
        }
    };
    assert_eq!(next, Some(8));
    cancel.cancel();
    tokio::time::timeout(Duration::from_secs(5), tasks.join_all())
        .await
        .unwrap();
}
