use super::*;

#[test]
fn sequence_steps() {
    let mut t = SeqTracker::default();
    assert_eq!(t.observe(4), SeqStep::First);
    assert_eq!(t.observe(5), SeqStep::InOrder);
    assert_eq!(t.observe(5), SeqStep::Duplicate);
    assert_eq!(t.observe(9), SeqStep::Gap { from: 6, missed: 3 });
    assert_eq!(t.observe(0), SeqStep::Rollback);
    assert_eq!(t.observe(1), SeqStep::InOrder);
    assert_eq!(t.last(), Some(1));
    t.reconnected();
    assert_eq!(t.observe(1), SeqStep::Rollback);
    assert_eq!(t.observe(1), SeqStep::Duplicate);
}

#[test]
fn splits_three_frames() {
    assert!(matches!(
        split_frames(&[&b""[..], b"1234567"]),
        Err(Error::FrameCount(2))
    ));
    assert!(matches!(
        split_frames(&[&b""[..], b"1234567", b""]),
        Err(Error::SeqLength(7))
    ));
    let seq = 5u64.to_be_bytes();
    let f = [&b"t"[..], &seq, b"p"];
    let (topic, seq, payload) = split_frames(&f).unwrap();
    assert_eq!((*topic, seq, *payload), (&b"t"[..], 5, &b"p"[..]));
}
