//! msgpack payload → [`EventBatch`].

use rmpv::Value;

use crate::wire::{BlockHash, BlockRemoved, BlockStored, Event, EventBatch, ExtraKey};
use crate::{Error, Result};

/// Positions of the `BlockStored` fields in the array form (after the tag).
const STORED_LAYOUT: &[&str] = &[
    "",
    "block_hashes",
    "parent_block_hash",
    "token_ids",
    "block_size",
    "lora_id",
    "medium",
    "lora_name",
    "extra_keys",
    "group_idx",
    "kv_cache_spec_kind",
    "kv_cache_spec_sliding_window",
];

/// Positions of the `BlockRemoved` fields in the array form.
const REMOVED_LAYOUT: &[&str] = &["", "block_hashes", "medium", "group_idx"];

impl EventBatch {
    /// Decodes one msgpack `EventBatch`: a batch array or map, events as arrays or maps.
    ///
    /// # Errors
    /// [`Error::Msgpack`] for invalid msgpack, [`Error::TrailingBytes`] when bytes follow the
    /// batch, [`Error::Field`] for a batch or a known event whose required fields are missing
    /// or of the wrong type (`block_hashes`, `token_ids`, `block_size`, a hash that is neither
    /// an integer nor non-empty bytes).
    pub fn decode(payload: &[u8]) -> Result<Self> {
        let mut rd = payload;
        let value = rmpv::decode::read_value(&mut rd)?;
        if !rd.is_empty() {
            return Err(Error::TrailingBytes(rd.len()));
        }
        let (ts, events, rank) = match &value {
            Value::Array(items) => (items.first(), items.get(1), items.get(2)),
            Value::Map(_) => (
                map_get(&value, "ts"),
                map_get(&value, "events"),
                map_get(&value, "data_parallel_rank").or_else(|| map_get(&value, "attn_dp_rank")),
            ),
            other => return Err(field_err(None, "batch", "an array or a map", Some(other))),
        };
        let ts = match ts {
            None | Some(Value::Nil) => 0.0,
            Some(v) => number(v).ok_or_else(|| field_err(None, "ts", "a number", Some(v)))?,
        };
        let raw_events = match events {
            Some(Value::Array(items)) => items,
            other => return Err(field_err(None, "events", "a list", other)),
        };
        let events = raw_events
            .iter()
            .enumerate()
            .map(|(i, ev)| decode_event(i, ev))
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            ts,
            events,
            data_parallel_rank: rank.and_then(Value::as_i64),
        })
    }
}

/// The msgpack type name of a value (for errors).
pub(crate) fn kind(v: Option<&Value>) -> &'static str {
    match v {
        None => "missing",
        Some(Value::Nil) => "nil",
        Some(Value::Boolean(_)) => "bool",
        Some(Value::Integer(_)) => "int",
        Some(Value::F32(_) | Value::F64(_)) => "float",
        Some(Value::String(_)) => "str",
        Some(Value::Binary(_)) => "bin",
        Some(Value::Array(_)) => "array",
        Some(Value::Map(_)) => "map",
        Some(Value::Ext(..)) => "ext",
    }
}

fn field_err(
    event: Option<usize>,
    field: &'static str,
    expected: &'static str,
    found: Option<&Value>,
) -> Error {
    Error::Field {
        event,
        field,
        expected,
        found: kind(found),
    }
}

fn map_get<'v>(v: &'v Value, key: &str) -> Option<&'v Value> {
    v.as_map()?
        .iter()
        .find(|(k, _)| k.as_str() == Some(key))
        .map(|(_, v)| v)
}

fn number(v: &Value) -> Option<f64> {
    match v {
        Value::F64(f) => Some(*f),
        Value::F32(f) => Some(f64::from(*f)),
        Value::Integer(i) => i.as_f64(),
        _ => None,
    }
}

/// The fields of one event, positional or by name.
struct Fields<'v> {
    index: usize,
    value: &'v Value,
    layout: &'static [&'static str],
}

impl<'v> Fields<'v> {
    fn get(&self, name: &str) -> Option<&'v Value> {
        match self.value {
            Value::Array(items) => self
                .layout
                .iter()
                .position(|n| *n == name)
                .and_then(|i| items.get(i)),
            _ => map_get(self.value, name),
        }
    }

    /// A field that may be absent or nil.
    fn opt(&self, name: &str) -> Option<&'v Value> {
        self.get(name).filter(|v| !v.is_nil())
    }

    fn opt_str(&self, name: &str) -> Option<String> {
        self.opt(name).and_then(Value::as_str).map(str::to_owned)
    }

    fn err(&self, field: &'static str, expected: &'static str) -> Error {
        field_err(Some(self.index), field, expected, self.get(field))
    }

    fn hash(&self, field: &'static str, v: &Value) -> Result<BlockHash> {
        match v {
            Value::Integer(i) => i
                .as_u64()
                .or_else(|| i.as_i64().map(|s| s as u64))
                .map(BlockHash::Int)
                .ok_or_else(|| self.err(field, "a 64-bit hash")),
            Value::Binary(b) if !b.is_empty() => Ok(BlockHash::Bytes(b.clone())),
            other => Err(field_err(
                Some(self.index),
                field,
                "int or non-empty bytes",
                Some(other),
            )),
        }
    }

    fn hashes(&self) -> Result<Vec<BlockHash>> {
        match self.get("block_hashes") {
            Some(Value::Array(items)) => {
                items.iter().map(|h| self.hash("block_hashes", h)).collect()
            }
            _ => Err(self.err("block_hashes", "a list")),
        }
    }
}

fn decode_event(index: usize, ev: &Value) -> Result<Event> {
    let tag = match ev {
        Value::Array(items) => items.first().and_then(Value::as_str),
        Value::Map(_) => map_get(ev, "type").and_then(Value::as_str),
        other => {
            return Err(field_err(
                Some(index),
                "event",
                "an array or a map",
                Some(other),
            ));
        }
    };
    let Some(tag) = tag else {
        return Err(field_err(Some(index), "type", "a string tag", None));
    };
    let layout = match tag {
        "BlockStored" => STORED_LAYOUT,
        "BlockRemoved" => REMOVED_LAYOUT,
        _ => &[],
    };
    let f = Fields {
        index,
        value: ev,
        layout,
    };
    match tag {
        "BlockStored" => stored(&f).map(Event::BlockStored),
        "BlockRemoved" => Ok(Event::BlockRemoved(BlockRemoved {
            block_hashes: f.hashes()?,
            medium: f.opt_str("medium"),
            group_idx: f.opt("group_idx").and_then(Value::as_u64),
        })),
        "AllBlocksCleared" => Ok(Event::AllBlocksCleared),
        other => Ok(Event::Unknown(other.to_owned())),
    }
}

fn stored(f: &Fields<'_>) -> Result<BlockStored> {
    let block_hashes = f.hashes()?;
    let parent_block_hash = match f.opt("parent_block_hash") {
        None => None,
        Some(v) => Some(f.hash("parent_block_hash", v)?),
    };
    let token_ids = match f.get("token_ids") {
        Some(Value::Array(items)) => items
            .iter()
            .map(|t| t.as_u64().and_then(|t| u32::try_from(t).ok()))
            .collect::<Option<Vec<u32>>>()
            .ok_or_else(|| f.err("token_ids", "a list of u32"))?,
        _ => return Err(f.err("token_ids", "a list")),
    };
    let block_size = f
        .get("block_size")
        .and_then(Value::as_u64)
        .and_then(|b| usize::try_from(b).ok())
        .ok_or_else(|| f.err("block_size", "an unsigned int"))?;
    Ok(BlockStored {
        block_hashes,
        parent_block_hash,
        token_ids,
        block_size,
        lora_id: f.opt("lora_id").and_then(Value::as_i64),
        medium: f.opt_str("medium"),
        lora_name: f.opt_str("lora_name"),
        extra_keys: f.opt("extra_keys").and_then(extra_keys),
        group_idx: f.opt("group_idx").and_then(Value::as_u64),
        kv_cache_spec_kind: f.opt_str("kv_cache_spec_kind"),
        kv_cache_spec_sliding_window: f
            .opt("kv_cache_spec_sliding_window")
            .and_then(Value::as_u64),
    })
}

/// `extra_keys`: per block, nil or a list of keys; `None` for any other shape.
fn extra_keys(v: &Value) -> Option<Vec<Vec<ExtraKey>>> {
    v.as_array()?
        .iter()
        .map(|block| match block {
            Value::Nil => Some(Vec::new()),
            Value::Array(keys) => keys.iter().map(extra_key).collect(),
            _ => None,
        })
        .collect()
}

fn extra_key(v: &Value) -> Option<ExtraKey> {
    match v {
        Value::String(s) => s.as_str().map(|s| ExtraKey::Str(s.to_owned())),
        Value::Integer(i) => i.as_i64().map(ExtraKey::Int),
        Value::Binary(b) => Some(ExtraKey::Bytes(b.clone())),
        Value::Array(pair) => match pair.as_slice() {
            [id, offset] => Some(ExtraKey::Mm {
                identifier: id.as_str()?.to_owned(),
                offset: offset.as_i64()?,
            }),
            _ => None,
        },
        _ => None,
    }
}
