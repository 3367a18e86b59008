use super::*;

/// A non-streamed answer of `content_len` bytes of content, cut into `chunk` byte pieces,
/// whose content mentions an escaped `"usage"` near its end.
fn pieces(content_len: usize, chunk: usize) -> Vec<Bytes> {
    let content = format!(
        "{}\\\"usage\\\": {{\\\"completion_tokens\\\": 99}}",
        "x".repeat(content_len)
    );
    let body = format!(
        r#"{{"id":"c","choices":[{{"index":0,"message":{{"role":"assistant","content":"{content}"}}}}],"usage":{{"prompt_tokens":8,"total_tokens":11,"completion_tokens":3}}}}"#
    );
    let body = Bytes::from(body);
    (0..body.len())
        .step_by(chunk)
        .map(|i| body.slice(i..body.len().min(i + chunk)))
        .collect()
}

/// Regression: answers over 4 MiB lost their usage (0 output tokens) because the chunks
/// past the limit were dropped while smaller later ones were kept.
#[test]
fn usage_is_read_from_answers_of_any_size() {
    for (len, chunk) in [
        (1_000, 100),
        (4_000_000, 65_536),
        (9_000_000, 65_536),
        (9_000_000, 7_777),
        (20_000_000, 1 << 20),
    ] {
        let mut j = JsonChunks::default();
        for p in pieces(len, chunk) {
            j.push(&p);
        }
        assert_eq!(
            j.output_tokens(),
            Some(3),
            "{len} bytes in {chunk} byte chunks"
        );
        assert!(j.len <= MAX_USAGE_COPY + chunk, "kept {} bytes", j.len);
    }
}

#[test]
fn a_tail_without_usage_gives_none() {
    assert_eq!(usage_in_tail(br#"xx"}}],"model":"m"}"#), None);
    assert_eq!(
        usage_in_tail(br#"x\"usage\": {\"completion_tokens\": 9}"}"#),
        None
    );
    assert_eq!(
        usage_in_tail(br#"x"}], "usage" : {"input_tokens": 2, "output_tokens": 5}}"#),
        Some(Usage {
            prompt_tokens: 2,
            completion_tokens: 5
        })
    );
}
