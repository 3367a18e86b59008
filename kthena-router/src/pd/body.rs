//! The prefill and decode bodies of one attempt (Go Kthena `connectors/transport.go`,
//! `nixl.go`, `sglang.go`). Every attempt builds its own from the request's upstream body,
//! so no two requests (or two pairs of one request) ever share a transformed body.

use bytes::Bytes;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

/// The `kv_transfer_params` a NIXL/Mooncake prefill request carries.
const PREFILL_KV_PARAMS: &str = r#"{"do_remote_decode":true,"do_remote_prefill":false}"#;

/// The decode body before any connector field: the client's body with `model` rewritten
/// and `stream_options.include_usage` added as for aggregated serving.
pub(super) type Base = Map<String, Value>;

/// The prefill body (`preparePrefillBody`): `stream` and `stream_options` removed,
/// `max_tokens` set to 1, and `max_completion_tokens` set to 1 when present.
pub(super) fn prefill(base: &Base) -> Base {
    let mut b = base.clone();
    b.remove("stream");
    b.remove("stream_options");
    b.insert("max_tokens".into(), Value::from(1));
    if b.contains_key("max_completion_tokens") {
        b.insert("max_completion_tokens".into(), Value::from(1));
    }
    b
}

/// The NIXL/Mooncake prefill body: [`prefill`] plus
/// `"kv_transfer_params": {"do_remote_decode": true, "do_remote_prefill": false}`.
pub(super) fn nixl_prefill(base: &Base) -> Bytes {
    with_raw(prefill(base), "kv_transfer_params", PREFILL_KV_PARAMS)
}

/// The NIXL/Mooncake decode body: `base` plus the prefill answer's `kv_transfer_params`,
/// byte for byte as the prefill engine wrote them.
pub(super) fn nixl_decode(base: &Base, params: &str) -> Bytes {
    with_raw(base.clone(), "kv_transfer_params", params)
}

/// The SGLang prefill body: [`prefill`] plus `bootstrap_room`.
pub(super) fn sglang_prefill(base: &Base, room: u64) -> Bytes {
    let mut b = prefill(base);
    b.insert("bootstrap_room".into(), Value::from(room));
    to_bytes(&b)
}

/// The SGLang decode body: `base` plus `bootstrap_room` and `bootstrap_host` (the prefill
/// engine's IP, without port).
pub(super) fn sglang_decode(base: &Base, room: u64, host: &str) -> Bytes {
    let mut b = base.clone();
    b.insert("bootstrap_room".into(), Value::from(room));
    b.insert("bootstrap_host".into(), Value::from(host));
    to_bytes(&b)
}

/// The JSON bytes of `b`.
pub(super) fn to_bytes(b: &Base) -> Bytes {
    // invariant: a map of JSON values always serializes.
    serde_json::to_vec(b).map(Bytes::from).unwrap_or_default()
}

/// The raw `kv_transfer_params` of a prefill answer (`null` when it has none).
///
/// # Errors
/// The decoder's error when the answer is not a JSON object.
pub(super) fn kv_transfer_params(answer: &[u8]) -> Result<String, serde_json::Error> {
    // A map, not a struct: serde would also read a struct from a JSON array.
    let a: std::collections::BTreeMap<String, &RawValue> = serde_json::from_slice(answer)?;
    Ok(a.get("kv_transfer_params")
        .map_or("null", |v| v.get())
        .to_owned())
}

/// `b` serialized with `key` set to the raw JSON `raw` (last, unchanged).
fn with_raw(mut b: Base, key: &str, raw: &str) -> Bytes {
    b.remove(key);
    let mut out = serde_json::to_vec(&b).unwrap_or_else(|_| b"{}".to_vec());
    out.pop(); // the closing brace
    if out.len() > 1 {
        out.push(b',');
    }
    out.extend_from_slice(&serde_json::to_vec(key).unwrap_or_default());
    out.push(b':');
    out.extend_from_slice(raw.as_bytes());
    out.push(b'}');
    Bytes::from(out)
}

#[cfg(test)]
mod tests;
