//! KV events over ZMQ PUB in vLLM's wire format (`engines-and-peers.md` §5.5).
//!
//! Each message has three frames: the topic, the sequence number as 8 bytes big-endian
//! (0, 1, 2, ... per publisher, gap-free; vLLM counts batches even when no subscriber is
//! connected), and a msgpack `EventBatch` `[ts, [event, ...], data_parallel_rank]` with `ts` in
//! Unix seconds (float) and rank 0, as in the captured vLLM 0.32 frame. Events are either maps
//! with a `"type"` key (vLLM 0.32) or positional arrays (older vLLM, SGLang):
//!
//! | event | map keys | array layout |
//! |---|---|---|
//! | BlockStored | type, block_hashes, parent_block_hash, token_ids, block_size, lora_id, medium, lora_name, extra_keys, group_idx, kv_cache_spec_kind | `["BlockStored", hashes, parent, token_ids, block_size, lora_id, medium, lora_name]` |
//! | BlockRemoved | type, block_hashes, medium, group_idx | `["BlockRemoved", hashes, medium]` |
//! | AllBlocksCleared | type | `["AllBlocksCleared"]` |
//!
//! Block hashes are unsigned 64-bit integers, the digest's low 64 bits (vLLM's default,
//! `VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=1`), or the digest bytes as msgpack `bin` when
//! `int_hashes` is false. `extra_keys` has one entry per block: nil, or the block's hash extra
//! keys as an array (a LoRA name or cache salt as a string, a multimodal item as
//! `[identifier, offset]`).

use bytes::Bytes;
use rmpv::Value;
use tokio::sync::mpsc;
use zeromq::{Socket, SocketSend, ZmqMessage};

use crate::config::KvEventsFormat;
use crate::hash::{BlockHash, ExtraKey};
use crate::kv::KvEvent;
use crate::{Error, Result};

fn s(v: &str) -> Value {
    Value::from(v)
}

fn hash(h: &BlockHash, int_hashes: bool) -> Value {
    if int_hashes {
        Value::from(h.to_u64())
    } else {
        Value::Binary(h.as_bytes().to_vec())
    }
}

fn extra_key(k: &ExtraKey) -> Value {
    match k {
        ExtraKey::Str(s) => Value::from(s.as_str()),
        ExtraKey::Mm { identifier, offset } => {
            Value::Array(vec![Value::from(identifier.as_str()), Value::from(*offset)])
        }
        ExtraKey::Bytes(b) => Value::Binary(b.clone()),
    }
}

fn extra_keys(keys: &[Vec<ExtraKey>]) -> Value {
    Value::Array(
        keys.iter()
            .map(|k| {
                if k.is_empty() {
                    Value::Nil
                } else {
                    Value::Array(k.iter().map(extra_key).collect())
                }
            })
            .collect(),
    )
}

/// One event as a msgpack value in `format`, with int block hashes if `int_hashes`, else the
/// digest bytes.
#[must_use]
pub fn event_value(ev: &KvEvent, format: KvEventsFormat, int_hashes: bool) -> Value {
    let hashes = |h: &[BlockHash]| Value::Array(h.iter().map(|x| hash(x, int_hashes)).collect());
    match (ev, format) {
        (
            KvEvent::BlockStored {
                block_hashes,
                parent_block_hash,
                token_ids,
                block_size,
                lora_name,
                extra_keys: keys,
            },
            fmt,
        ) => {
            let parent = parent_block_hash
                .as_ref()
                .map_or(Value::Nil, |h| hash(h, int_hashes));
            let tokens = Value::Array(token_ids.iter().map(|t| Value::from(*t)).collect());
            let lora = lora_name.as_deref().map_or(Value::Nil, s);
            let bs = Value::from(*block_size as u64);
            match fmt {
                KvEventsFormat::Map => Value::Map(vec![
                    (s("type"), s("BlockStored")),
                    (s("block_hashes"), hashes(block_hashes)),
                    (s("parent_block_hash"), parent),
                    (s("token_ids"), tokens),
                    (s("block_size"), bs),
                    (s("lora_id"), Value::Nil),
                    (s("medium"), s("GPU")),
                    (s("lora_name"), lora),
                    (s("extra_keys"), extra_keys(keys)),
                    (s("group_idx"), Value::from(0)),
                    (s("kv_cache_spec_kind"), s("full_attention")),
                ]),
                KvEventsFormat::Array => Value::Array(vec![
                    s("BlockStored"),
                    hashes(block_hashes),
                    parent,
                    tokens,
                    bs,
                    Value::Nil,
                    s("GPU"),
                    lora,
                ]),
            }
        }
        (KvEvent::BlockRemoved { block_hashes }, KvEventsFormat::Map) => Value::Map(vec![
            (s("type"), s("BlockRemoved")),
            (s("block_hashes"), hashes(block_hashes)),
            (s("medium"), s("GPU")),
            (s("group_idx"), Value::from(0)),
        ]),
        (KvEvent::BlockRemoved { block_hashes }, KvEventsFormat::Array) => {
            Value::Array(vec![s("BlockRemoved"), hashes(block_hashes), s("GPU")])
        }
        (KvEvent::AllBlocksCleared, KvEventsFormat::Map) => {
            Value::Map(vec![(s("type"), s("AllBlocksCleared"))])
        }
        (KvEvent::AllBlocksCleared, KvEventsFormat::Array) => {
            Value::Array(vec![s("AllBlocksCleared")])
        }
    }
}

/// Encodes one batch `[ts, [events], 0]` as msgpack bytes (hashes as in [`event_value`]).
///
/// # Errors
/// [`Error::Encode`] if msgpack serialisation fails (it cannot for in-memory buffers).
pub fn encode_batch(
    ts: f64,
    events: &[KvEvent],
    format: KvEventsFormat,
    int_hashes: bool,
) -> Result<Vec<u8>> {
    let batch = Value::Array(vec![
        Value::F64(ts),
        Value::Array(
            events
                .iter()
                .map(|e| event_value(e, format, int_hashes))
                .collect(),
        ),
        Value::from(0),
    ]);
    let mut out = Vec::new();
    rmpv::encode::write_value(&mut out, &batch).map_err(Error::Encode)?;
    Ok(out)
}

/// A bound PUB socket.
pub(crate) struct Publisher {
    socket: zeromq::PubSocket,
    topic: Bytes,
    format: KvEventsFormat,
    int_hashes: bool,
    seq: u64,
}

impl std::fmt::Debug for Publisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Publisher")
            .field("topic", &self.topic)
            .field("seq", &self.seq)
            .finish_non_exhaustive()
    }
}

impl Publisher {
    /// Binds `tcp://host:port`; returns the publisher and the bound port.
    pub(crate) async fn bind(
        host: std::net::IpAddr,
        port: u16,
        topic: String,
        format: KvEventsFormat,
        int_hashes: bool,
    ) -> Result<(Self, u16)> {
        let endpoint = match host {
            std::net::IpAddr::V4(a) => format!("tcp://{a}:{port}"),
            std::net::IpAddr::V6(a) => format!("tcp://[{a}]:{port}"),
        };
        let mut socket = zeromq::PubSocket::new();
        let bound = socket
            .bind(&endpoint)
            .await
            .map_err(|source| Error::KvEvents {
                endpoint: endpoint.clone(),
                source,
            })?;
        let port = match bound {
            zeromq::Endpoint::Tcp(_, p) => p,
            _ => port,
        };
        Ok((
            Self {
                socket,
                topic: Bytes::from(topic),
                format,
                int_hashes,
                seq: 0,
            },
            port,
        ))
    }

    /// Publishes batches until the channel closes.
    pub(crate) async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Vec<KvEvent>>) {
        while let Some(events) = rx.recv().await {
            let ts = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs_f64())
                .unwrap_or(0.0);
            let Ok(payload) = encode_batch(ts, &events, self.format, self.int_hashes) else {
                continue;
            };
            let mut msg = ZmqMessage::from(self.topic.clone());
            msg.push_back(Bytes::copy_from_slice(&self.seq.to_be_bytes()));
            msg.push_back(Bytes::from(payload));
            self.seq += 1;
            if let Err(e) = self.socket.send(msg).await {
                tracing::warn!(error = %e, "Dropping a KV-event batch.");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn map_encoding_matches_the_vllm_sample_layout() {
        let ev = KvEvent::BlockStored {
            block_hashes: vec![
                BlockHash::from_digest(&[1; 32]),
                BlockHash::from_digest(&[2; 32]),
            ],
            parent_block_hash: None,
            token_ids: vec![7; 4],
            block_size: 2,
            lora_name: None,
            extra_keys: vec![vec![], vec![]],
        };
        let bytes = encode_batch(1.5, &[ev], KvEventsFormat::Map, true).unwrap();
        let v = rmpv::decode::read_value(&mut bytes.as_slice()).unwrap();
        let arr = v.as_array().unwrap();
        assert_eq!(arr.len(), 3);
        assert_eq!(arr[0].as_f64(), Some(1.5));
        let ev = &arr[1].as_array().unwrap()[0];
        let keys: Vec<&str> = ev
            .as_map()
            .unwrap()
            .iter()
            .map(|(k, _)| k.as_str().unwrap())
            .collect();
        // Same keys, same order as the captured vLLM 0.32 frame (kv-events.json).
        assert_eq!(
            keys,
            [
                "type",
                "block_hashes",
                "parent_block_hash",
                "token_ids",
                "block_size",
                "lora_id",
                "medium",
                "lora_name",
                "extra_keys",
                "group_idx",
                "kv_cache_spec_kind"
            ]
        );
        // The captured frame starts with fixarray(3), float64 ts, fixarray(1), fixmap(11).
        assert_eq!(bytes[0], 0x93);
        assert_eq!(bytes[1], 0xcb);
        assert_eq!(bytes[10], 0x91);
        assert_eq!(bytes[11], 0x8b);
    }
}
