use super::*;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

#[tokio::test]
async fn connections_reach_the_listener_in_order_and_carry_bytes_both_ways() {
    let net = MemNet::new();
    let mut l = net.listen(addr("10.0.0.1:80")).unwrap();
    let mut a = net.connect(addr("10.0.0.1:80")).unwrap();
    let mut b = net.connect(addr("10.0.0.1:80")).unwrap();
    a.write_all(b"a").await.unwrap();
    b.write_all(b"b").await.unwrap();
    let mut sa = l.accept().await.unwrap();
    let mut sb = l.accept().await.unwrap();
    let mut buf = [0u8; 1];
    sa.read_exact(&mut buf).await.unwrap();
    assert_eq!(&buf, b"a");
    sb.read_exact(&mut buf).await.unwrap();
    assert_eq!(&buf, b"b");
    sb.write_all(b"B").await.unwrap();
    b.read_exact(&mut buf).await.unwrap();
    assert_eq!(&buf, b"B");
}

#[test]
fn an_address_is_held_until_its_listener_is_dropped() {
    let net = MemNet::new();
    let l = net.listen(addr("10.0.0.1:80")).unwrap();
    assert!(matches!(
        net.listen(addr("10.0.0.1:80")),
        Err(Error::AddrInUse(a)) if a == addr("10.0.0.1:80")
    ));
    assert!(net.is_listening(addr("10.0.0.1:80")));
    drop(l);
    assert!(!net.is_listening(addr("10.0.0.1:80")));
    assert!(matches!(
        net.connect(addr("10.0.0.1:80")),
        Err(Error::ConnectionRefused(_))
    ));
    assert!(net.listen(addr("10.0.0.1:80")).is_ok());
}

#[tokio::test]
async fn subscribers_get_what_was_published_after_they_subscribed() {
    let net = MemNet::new();
    let p = net.publisher("tcp://10.0.0.1:5557");
    assert_eq!(p.send(&[Bytes::from_static(b"early")]), 0);
    let mut s1 = net.subscribe("tcp://10.0.0.1:5557");
    let mut other = net.subscribe("tcp://10.0.0.2:5557");
    assert_eq!(
        p.send(&[Bytes::from_static(b"t"), Bytes::from_static(b"1")]),
        1
    );
    let s2 = net.subscribe("tcp://10.0.0.1:5557");
    drop(s2);
    assert_eq!(p.send(&[Bytes::from_static(b"2")]), 1);
    assert_eq!(
        s1.recv().await.unwrap(),
        vec![Bytes::from_static(b"t"), Bytes::from_static(b"1")]
    );
    assert_eq!(s1.recv().await.unwrap(), vec![Bytes::from_static(b"2")]);
    assert!(other.rx.try_recv().is_err());
}

#[tokio::test]
async fn a_request_gets_every_reply_message_of_its_responder() {
    let net = MemNet::new();
    let ep = "tcp://10.0.0.1:5558";
    assert!(matches!(
        net.request(ep, vec![]).await,
        Err(Error::NoResponder(e)) if e == ep
    ));
    let mut r = net.respond(ep).unwrap();
    assert!(matches!(net.respond(ep), Err(Error::EndpointInUse(_))));
    let server = async move {
        let req = r.recv().await.unwrap();
        let n = req.frames()[0].clone();
        req.reply(vec![vec![n.clone(), Bytes::from_static(b"a")], vec![n]]);
        r
    };
    let (r, replies) = tokio::join!(server, net.request(ep, vec![Bytes::from_static(b"7")]));
    assert_eq!(
        replies.unwrap(),
        vec![
            vec![Bytes::from_static(b"7"), Bytes::from_static(b"a")],
            vec![Bytes::from_static(b"7")]
        ]
    );
    drop(r);
    assert!(matches!(
        net.request(ep, vec![]).await,
        Err(Error::NoResponder(_))
    ));
    assert!(net.respond(ep).is_ok());
}
