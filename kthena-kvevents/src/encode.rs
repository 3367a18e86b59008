//! [`EventBatch`] → msgpack payload.

use rmpv::Value;

use crate::wire::{BlockHash, BlockRemoved, BlockStored, Encoding, Event, EventBatch, ExtraKey};

impl EventBatch {
    /// Encodes the batch as msgpack bytes in `encoding`: `[ts, [event, ...]]` followed by
    /// `data_parallel_rank` when it is set (vLLM always sets it; SGLang's `attn_dp_rank` is
    /// omitted when unset). The output of [`Encoding::VllmMap`] for a batch decoded from vLLM
    /// 0.32 is byte-for-byte the payload vLLM sent.
    #[must_use]
    pub fn encode(&self, encoding: Encoding) -> Vec<u8> {
        let mut batch = vec![
            Value::F64(self.ts),
            Value::Array(self.events.iter().map(|e| event(e, encoding)).collect()),
        ];
        if let Some(rank) = self.data_parallel_rank {
            batch.push(Value::from(rank));
        }
        let mut out = Vec::new();
        // Writing into a Vec cannot fail: the only errors rmpv reports are the writer's.
        if rmpv::encode::write_value(&mut out, &Value::Array(batch)).is_err() {
            out.clear();
        }
        out
    }
}

fn s(v: &str) -> Value {
    Value::from(v)
}

fn opt_str(v: Option<&str>) -> Value {
    v.map_or(Value::Nil, s)
}

fn opt<T: Into<Value> + Copy>(v: Option<T>) -> Value {
    v.map_or(Value::Nil, Into::into)
}

fn hash(h: &BlockHash, encoding: Encoding) -> Value {
    match (h, encoding) {
        // SGLang's hashes are Python ints in the signed 64-bit range.
        (BlockHash::Int(v), Encoding::Sglang) => Value::from(*v as i64),
        (BlockHash::Int(v), _) => Value::from(*v),
        (BlockHash::Bytes(b), _) => Value::Binary(b.clone()),
    }
}

fn hashes(h: &[BlockHash], encoding: Encoding) -> Value {
    Value::Array(h.iter().map(|x| hash(x, encoding)).collect())
}

fn extra_key(k: &ExtraKey) -> Value {
    match k {
        ExtraKey::Str(s) => Value::from(s.as_str()),
        ExtraKey::Mm { identifier, offset } => {
            Value::Array(vec![Value::from(identifier.as_str()), Value::from(*offset)])
        }
        ExtraKey::Int(i) => Value::from(*i),
        ExtraKey::Bytes(b) => Value::Binary(b.clone()),
    }
}

fn extra_keys(keys: Option<&[Vec<ExtraKey>]>) -> Value {
    let Some(keys) = keys else {
        return Value::Nil;
    };
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

/// Keys and values of a map event, in vLLM's field order.
type Fields = Vec<(&'static str, Value)>;

fn event(e: &Event, encoding: Encoding) -> Value {
    let (tag, fields): (&str, Fields) = match e {
        Event::BlockStored(b) => ("BlockStored", stored(b, encoding)),
        Event::BlockRemoved(b) => ("BlockRemoved", removed(b, encoding)),
        Event::AllBlocksCleared => ("AllBlocksCleared", Vec::new()),
        Event::Unknown(tag) => (tag.as_str(), Vec::new()),
    };
    match encoding {
        Encoding::VllmMap => Value::Map(
            std::iter::once((s("type"), s(tag)))
                .chain(fields.into_iter().map(|(k, v)| (s(k), v)))
                .collect(),
        ),
        Encoding::VllmArray | Encoding::Sglang => Value::Array(
            std::iter::once(s(tag))
                .chain(fields.into_iter().map(|(_, v)| v))
                .collect(),
        ),
    }
}

/// Drops trailing nil fields beyond the first `keep` (msgspec's `omit_defaults` for arrays).
fn trim(mut fields: Fields, keep: usize) -> Fields {
    while fields.len() > keep && fields.last().is_some_and(|(_, v)| v.is_nil()) {
        fields.pop();
    }
    fields
}

fn stored(b: &BlockStored, encoding: Encoding) -> Fields {
    let mut f: Fields = vec![
        ("block_hashes", hashes(&b.block_hashes, encoding)),
        (
            "parent_block_hash",
            b.parent_block_hash
                .as_ref()
                .map_or(Value::Nil, |h| hash(h, encoding)),
        ),
        (
            "token_ids",
            Value::Array(b.token_ids.iter().map(|t| Value::from(*t)).collect()),
        ),
        ("block_size", Value::from(b.block_size as u64)),
        ("lora_id", opt(b.lora_id)),
    ];
    if encoding == Encoding::Sglang {
        return f;
    }
    f.extend([
        ("medium", opt_str(b.medium.as_deref())),
        ("lora_name", opt_str(b.lora_name.as_deref())),
        ("extra_keys", extra_keys(b.extra_keys.as_deref())),
        ("group_idx", opt(b.group_idx)),
        (
            "kv_cache_spec_kind",
            opt_str(b.kv_cache_spec_kind.as_deref()),
        ),
    ]);
    if let Some(w) = b.kv_cache_spec_sliding_window {
        f.push(("kv_cache_spec_sliding_window", Value::from(w)));
    }
    match encoding {
        Encoding::VllmArray => trim(f, 7),
        Encoding::VllmMap | Encoding::Sglang => f,
    }
}

fn removed(b: &BlockRemoved, encoding: Encoding) -> Fields {
    let mut f: Fields = vec![("block_hashes", hashes(&b.block_hashes, encoding))];
    if encoding == Encoding::Sglang {
        return f;
    }
    f.extend([
        ("medium", opt_str(b.medium.as_deref())),
        ("group_idx", opt(b.group_idx)),
    ]);
    match encoding {
        Encoding::VllmArray => trim(f, 2),
        Encoding::VllmMap | Encoding::Sglang => f,
    }
}
