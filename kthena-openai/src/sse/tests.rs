//! Unit tests of `sse`: pass-through, the hidden usage chunk, long lines, error events.

use super::*;

fn push(f: &mut SseFilter, s: &'static [u8]) -> Bytes {
    f.push(Bytes::from_static(s))
}

#[test]
fn a_cut_stream_counts_its_events_and_a_usage_chunk_wins() {
    let mut f = SseFilter::new(false);
    push(
        &mut f,
        b"data: {\"choices\":[{\"text\":\"a\"}]}\n\ndata: {\"cho",
    );
    push(
        &mut f,
        b"ices\":[{\"text\":\"b\"}]}\r\n\r\ndata: {\"choices\":[]}\n\n",
    );
    assert_eq!((f.data_events, f.streamed_output_tokens()), (3, 3));
    push(&mut f, b"data: [DONE]\n\n");
    assert_eq!((f.data_events, f.streamed_output_tokens()), (4, 3));
    let mut f = SseFilter::new(false);
    push(&mut f, b"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":9,\"total_tokens\":10}}\n\n");
    assert_eq!(f.streamed_output_tokens(), 9);
}

#[test]
fn sse_filter_hides_injected_usage_chunk() {
    let mut f = SseFilter::new(true);
    let a = push(
        &mut f,
        b"data: {\"choices\":[{\"text\":\"hi\"}],\"usage\":null}\n\ndata: {\"cho",
    );
    assert_eq!(
        &a[..],
        b"data: {\"choices\":[{\"text\":\"hi\"}],\"usage\":null}\n\n"
    );
    let b = push(
        &mut f,
        b"ices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":7}}\n\ndata: [DONE]\n\n",
    );
    assert_eq!(&b[..], b"data: [DONE]\n\n");
    assert_eq!(f.output_tokens, 7);
    assert_eq!(
        f.usage,
        Some(Usage {
            prompt_tokens: 3,
            completion_tokens: 7
        })
    );
    assert!(f.saw_done);
    assert!(f.flush().is_empty());

    let mut keep = SseFilter::new(false);
    let c = push(
        &mut keep,
        b"data: {\"choices\":[],\"usage\":{\"completion_tokens\":2}}\n\n",
    );
    assert_eq!(
        &c[..],
        b"data: {\"choices\":[],\"usage\":{\"completion_tokens\":2}}\n\n"
    );
    assert_eq!(keep.output_tokens, 2);
    assert!(push(&mut keep, b"data: partial").is_empty());
    assert_eq!(&keep.flush()[..], b"data: partial");
}

#[test]
fn a_token_chunk_is_forwarded_as_the_same_bytes() {
    let mut f = SseFilter::new(true);
    let chunk = Bytes::from(
        b"data: {\"choices\":[{\"delta\":{\"content\":\"\\\"usage\\\": 1\"}}],\"usage\":null}\n\n"
            .to_vec(),
    );
    let out = f.push(chunk.clone());
    assert_eq!(out.as_ptr(), chunk.as_ptr(), "no copy");
    assert_eq!(out.len(), chunk.len());
    assert_eq!(f.usage, None);
}

#[test]
fn the_blank_line_of_a_dropped_chunk_in_the_next_read_is_dropped() {
    let mut f = SseFilter::new(true);
    let a = push(
        &mut f,
        b"data: {\"choices\":[],\"usage\" : {\"completion_tokens\":5}}\r\n",
    );
    assert!(a.is_empty());
    assert_eq!(
        &push(&mut f, b"\r\ndata: [DONE]\r\n\r\n")[..],
        b"data: [DONE]\r\n\r\n"
    );
    assert_eq!(f.output_tokens, 5);
    assert!(f.saw_done);
}

#[test]
fn a_usage_chunk_amid_token_chunks_is_cut_out() {
    let mut f = SseFilter::new(true);
    let out = push(
        &mut f,
        b"data: {\"choices\":[{\"text\":\"a\"}]}\n\ndata: {\"choices\":[],\"usage\":{\"completion_tokens\":1}}\n\ndata: [DONE]\n\n",
    );
    assert_eq!(
        &out[..],
        b"data: {\"choices\":[{\"text\":\"a\"}]}\n\ndata: [DONE]\n\n"
    );
    assert_eq!(f.output_tokens, 1);
}

#[test]
fn finds_usage_keys_with_values() {
    assert!(has_usage(b"{\"usage\":{\"a\":1}}"));
    assert!(has_usage(b"{\"usage\" :\t{}}"));
    assert!(!has_usage(b"{\"usage\":null}"));
    assert!(!has_usage(b"{\"usage\" : null,\"x\":\"usage\"}"));
    assert!(!has_usage(b"{\"text\":\"\\\"usage\\\"\"}"));
    assert!(has_usage(b"{\"usage\":null,\"response\":{\"usage\":{}}}"));
}

/// Regression: a line without an end was held whole (300 MiB of an engine's endless
/// line made the router 791 MiB resident, and the client got nothing of it).
#[test]
fn a_line_longer_than_the_carry_cap_is_forwarded_as_it_arrives() {
    let mut f = SseFilter::new(true);
    let piece = Bytes::from(vec![b'x'; 1000]);
    let mut sent = push(&mut f, b"data: {\"choices\":[{\"text\":\"").len();
    for _ in 0..200 {
        sent += f.push(piece.clone()).len();
        assert!(f.carry.len() <= MAX_CARRY, "{}", f.carry.len());
    }
    // Everything but the last part under the cap has gone out already.
    assert!(sent > 200 * 1000 - MAX_CARRY, "{sent}");
    let end =
        b"\"}]}\n\ndata: {\"choices\":[],\"usage\":{\"completion_tokens\":4}}\n\ndata: [DONE]\n\n";
    let out = f.push(Bytes::from_static(end));
    // The long line ends and the usage chunk after it is still read and hidden.
    assert_eq!(&out[..], b"\"}]}\n\ndata: [DONE]\n\n");
    assert_eq!((f.output_tokens, f.saw_done, f.data_events), (4, true, 3));
    assert!(f.flush().is_empty());
}

#[test]
fn an_error_event_is_noted_and_forwarded() {
    let mut f = SseFilter::new(true);
    let ev = b"data: {\"choices\":[{\"text\":\"a\"}]}\n\ndata: {\"error\": {\"message\": \"engine exploded\", \"code\": 500}}\n\n";
    assert_eq!(&push(&mut f, ev)[..], ev);
    assert_eq!(f.error_event.as_deref(), Some("engine exploded"));
    let mut old = SseFilter::new(false);
    push(
        &mut old,
        b"data: {\"object\":\"error\",\"message\":\"boom\"}\n\n",
    );
    assert_eq!(old.error_event.as_deref(), Some("boom"));
    // An "error" in the text, or deeper than the top level, is no error event.
    let mut text = SseFilter::new(false);
    push(
        &mut text,
        b"data: {\"choices\":[{\"text\":\"\\\"error\\\": 1\",\"x\":{\"error\":{}}}]}\n\n",
    );
    assert_eq!(text.error_event, None);
}

#[test]
fn trims_line_ends() {
    assert_eq!(trim_eol(b"data: x\r\n"), b"data: x");
    assert_eq!(trim_eol(b"data: x\n"), b"data: x");
    assert_eq!(trim_eol(b"x"), b"x");
}
