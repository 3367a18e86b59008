//! What a JSON body will cost in memory once parsed, counted before it is parsed.
//!
//! The shared body budget ([`super::BodyBudget`]) counts the bytes a client sent, but the
//! parsed tree costs more than its text: `[0,0,0,...]` is two bytes a value on the wire and
//! a 32-byte `serde_json::Value` (up to 64 with a vector's spare capacity) once parsed, so
//! four 10 MB bodies of small numbers under a 50 MB budget took the router past 1 GB. A
//! large body is therefore counted first, value by value, with serde's visitor (nothing is
//! allocated but serde_json's scratch buffer for escaped strings), and its parsed cost is
//! reserved on the same budget before the real parse.

use std::fmt;

use serde::de::{Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// Bodies shorter than this many bytes are not counted: their parse is bounded by their
/// size and lasts only while one worker thread runs it.
pub(crate) const COUNT_FROM_BYTES: usize = 64 * 1024;

/// Bytes reserved per parsed JSON value (every scalar, array, object and object key): a
/// `serde_json::Value` is 32 bytes, and a vector's or map's spare room and nodes can double
/// that.
pub(crate) const BYTES_PER_VALUE: usize = 64;

/// The bytes to reserve for parsing `raw` besides `raw` itself: [`BYTES_PER_VALUE`] per JSON
/// value, or 0 for a body under [`COUNT_FROM_BYTES`] or one that is not valid JSON (the
/// real parse then answers 400 without building a tree).
pub(crate) fn parse_cost(raw: &[u8]) -> usize {
    if raw.len() < COUNT_FROM_BYTES {
        return 0;
    }
    let mut de = serde_json::Deserializer::from_slice(raw);
    match Count::deserialize(&mut de) {
        Ok(Count(n)) => n.saturating_mul(BYTES_PER_VALUE),
        Err(_) => 0,
    }
}

/// The number of JSON values of a document.
struct Count(usize);

impl<'de> Deserialize<'de> for Count {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(CountVisitor)
    }
}

struct CountVisitor;

impl<'de> Visitor<'de> for CountVisitor {
    type Value = Count;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<Count, E> {
        Ok(Count(1))
    }

    fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<Count, E> {
        Ok(Count(1))
    }

    fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<Count, E> {
        Ok(Count(1))
    }

    fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<Count, E> {
        Ok(Count(1))
    }

    fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<Count, E> {
        Ok(Count(1))
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Count, E> {
        Ok(Count(1))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Count, A::Error> {
        let mut n: usize = 1;
        while let Some(Count(c)) = seq.next_element::<Count>()? {
            n = n.saturating_add(c);
        }
        Ok(Count(n))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Count, A::Error> {
        let mut n: usize = 1;
        while map.next_key::<IgnoredAny>()?.is_some() {
            let Count(c) = map.next_value::<Count>()?;
            n = n.saturating_add(1).saturating_add(c);
        }
        Ok(Count(n))
    }
}

#[cfg(test)]
mod tests;
