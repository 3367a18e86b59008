use serde_json::json;

use super::*;

fn base() -> Base {
    match json!({"model": "m", "prompt": "p", "stream": true,
                     "stream_options": {"include_usage": true}, "max_tokens": 50,
                     "max_completion_tokens": 40})
    {
        Value::Object(m) => m,
        _ => unreachable!(),
    }
}

#[test]
fn prefill_body_follows_go_rules() {
    let p = prefill(&base());
    assert_eq!(
        Value::Object(p),
        json!({"model": "m", "prompt": "p", "max_tokens": 1, "max_completion_tokens": 1})
    );
    let mut b = base();
    b.remove("max_completion_tokens");
    assert!(!prefill(&b).contains_key("max_completion_tokens"));
}

#[test]
fn nixl_bodies_carry_the_handshake_verbatim() {
    let pre: Value = serde_json::from_slice(&nixl_prefill(&base())).unwrap();
    assert_eq!(
        pre["kv_transfer_params"],
        json!({"do_remote_decode": true, "do_remote_prefill": false})
    );
    let answer =
        br#"{"id":"x","kv_transfer_params":{"z":1, "a":[1,2],"remote_host":"h"},"usage":{}}"#;
    let raw = kv_transfer_params(answer).unwrap();
    assert_eq!(raw, r#"{"z":1, "a":[1,2],"remote_host":"h"}"#);
    let dec = nixl_decode(&base(), &raw);
    let text = std::str::from_utf8(&dec).unwrap();
    assert!(
        text.ends_with(r#","kv_transfer_params":{"z":1, "a":[1,2],"remote_host":"h"}}"#),
        "{text}"
    );
    let v: Value = serde_json::from_slice(&dec).unwrap();
    assert_eq!(v["stream"], true);
    assert_eq!(kv_transfer_params(b"{}").unwrap(), "null");
    assert!(kv_transfer_params(b"[1]").is_err());
    assert_eq!(&with_raw(Map::new(), "k", "null")[..], br#"{"k":null}"#);
}

#[test]
fn sglang_bodies_share_the_room() {
    let pre: Value = serde_json::from_slice(&sglang_prefill(&base(), 7)).unwrap();
    let dec: Value = serde_json::from_slice(&sglang_decode(&base(), 7, "10.0.0.2")).unwrap();
    assert_eq!(pre["bootstrap_room"], 7);
    assert_eq!(pre.get("bootstrap_host"), None);
    assert_eq!(pre["max_tokens"], 1);
    assert_eq!(dec["bootstrap_room"], 7);
    assert_eq!(dec["bootstrap_host"], "10.0.0.2");
    assert_eq!(dec["max_tokens"], 50);
}
