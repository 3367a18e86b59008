//! Strict deserialization of configuration values: a [`serde_json::Value`] (parsed from
//! YAML or JSON) into a typed config where an unknown key or enum value is an error naming
//! its path and the closest known name.
//!
//! serde's derived code reports an unknown key through `Error::unknown_field(key, expected)`;
//! deserializing from the value through a deserializer with our own error type keeps the key
//! and the expected names as data instead of a formatted message, and
//! `serde_path_to_error` adds the path.

use std::fmt;

use serde::Deserializer;
use serde::de::value::{MapAccessDeserializer, MapDeserializer, SeqDeserializer};
use serde::de::{self, DeserializeOwned, IntoDeserializer, Visitor};
use serde_json::Value;

use crate::{Error, Result};

/// The shortest Jaro-Winkler similarity (0..1, strsim) at which a known name is suggested
/// for an unknown one: `blockSizeToHas` → `blockSizeToHash`, `wieght` → `weight`, `standalon`
/// → `standalone`, but no suggestion for an unrelated name.
const SUGGEST_SIMILARITY: f64 = 0.8;

/// Deserializes `value` into `T`, rejecting unknown keys (types with
/// `#[serde(deny_unknown_fields)]`) and unknown enum values.
///
/// `prefix` is put before every path in errors (`""` for none, or `scheduler` so that paths
/// read from the top of a router file).
///
/// # Errors
/// * [`Error::UnknownKey`]: a key the type does not have, with a suggestion when a known key
///   is close (Jaro-Winkler similarity ≥ 0.8);
/// * [`Error::UnknownValue`]: a string that is none of an enum's values, likewise;
/// * [`Error::Field`]: a value of the wrong type or range, with its path.
pub fn from_value<T: DeserializeOwned>(value: &Value, prefix: &str) -> Result<T> {
    serde_path_to_error::deserialize(ValueDe(value)).map_err(|e| {
        let path = join(prefix, &e.path().to_string());
        match e.into_inner() {
            DeError::UnknownKey { key, expected } => Error::UnknownKey {
                suggestion: suggest(&key, expected),
                expected: expected.to_vec(),
                path,
            },
            DeError::UnknownValue { value, expected } => Error::UnknownValue {
                suggestion: suggest(&value, expected),
                expected: expected.to_vec(),
                value,
                path,
            },
            DeError::Custom(reason) => Error::Field { path, reason },
        }
    })
}

/// `prefix.path`, where `path` may be serde_path_to_error's `.` for the root.
pub(crate) fn join(prefix: &str, path: &str) -> String {
    match (prefix.is_empty(), path == "." || path.is_empty()) {
        (true, _) => path.to_owned(),
        (false, true) => prefix.to_owned(),
        (false, false) if path.starts_with('[') => format!("{prefix}{path}"),
        (false, false) => format!("{prefix}.{path}"),
    }
}

/// The known name most similar to `name`, if similar enough.
fn suggest(name: &str, known: &[&str]) -> Option<String> {
    known
        .iter()
        .map(|k| {
            let s = strsim::jaro_winkler(&name.to_lowercase(), &k.to_lowercase());
            (s, *k)
        })
        .filter(|(s, _)| *s >= SUGGEST_SIMILARITY)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, k)| k.to_owned())
}

/// `did you mean `x`?`, or the list of known names when none is close.
pub(crate) fn hint(suggestion: Option<&str>, expected: &[&str]) -> String {
    match suggestion {
        Some(s) => format!("did you mean `{s}`?"),
        None if expected.is_empty() => "this section takes no keys".to_owned(),
        None => {
            let list: Vec<String> = expected.iter().map(|k| format!("`{k}`")).collect();
            format!("expected one of {}", list.join(", "))
        }
    }
}

/// The deserializer's own error: unknown names stay data.
#[derive(Debug)]
enum DeError {
    UnknownKey {
        key: String,
        expected: &'static [&'static str],
    },
    UnknownValue {
        value: String,
        expected: &'static [&'static str],
    },
    Custom(String),
}

impl fmt::Display for DeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::UnknownKey { .. } => f.write_str("unknown key"),
            Self::UnknownValue { value, .. } => write!(f, "unknown value `{value}`"),
            Self::Custom(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for DeError {}

impl de::Error for DeError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        Self::Custom(msg.to_string())
    }
    fn unknown_field(field: &str, expected: &'static [&'static str]) -> Self {
        Self::UnknownKey {
            key: field.to_owned(),
            expected,
        }
    }
    fn unknown_variant(variant: &str, expected: &'static [&'static str]) -> Self {
        Self::UnknownValue {
            value: variant.to_owned(),
            expected,
        }
    }
}

/// A borrowed value as a deserializer.
#[derive(Clone, Copy)]
struct ValueDe<'a>(&'a Value);

impl<'de> IntoDeserializer<'de, DeError> for ValueDe<'_> {
    type Deserializer = Self;
    fn into_deserializer(self) -> Self {
        self
    }
}

impl<'de> Deserializer<'de> for ValueDe<'_> {
    type Error = DeError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        match self.0 {
            Value::Null => visitor.visit_unit(),
            Value::Bool(b) => visitor.visit_bool(*b),
            Value::Number(n) => {
                if let Some(u) = n.as_u64() {
                    visitor.visit_u64(u)
                } else if let Some(i) = n.as_i64() {
                    visitor.visit_i64(i)
                } else {
                    visitor.visit_f64(n.as_f64().unwrap_or(f64::NAN))
                }
            }
            Value::String(s) => visitor.visit_str(s),
            Value::Array(a) => {
                let mut seq = SeqDeserializer::new(a.iter().map(ValueDe));
                let v = visitor.visit_seq(&mut seq)?;
                seq.end()?;
                Ok(v)
            }
            Value::Object(m) => {
                let mut map = MapDeserializer::new(m.iter().map(|(k, v)| (k.as_str(), ValueDe(v))));
                let v = visitor.visit_map(&mut map)?;
                map.end()?;
                Ok(v)
            }
        }
    }

    /// A plain YAML scalar is text where text is wanted (`labels: {gen: 2}`).
    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        match self.0 {
            Value::Number(n) => visitor.visit_str(&n.to_string()),
            Value::Bool(b) => visitor.visit_str(if *b { "true" } else { "false" }),
            _ => self.deserialize_any(visitor),
        }
    }

    fn deserialize_string<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.deserialize_str(visitor)
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        match self.0 {
            Value::Null => visitor.visit_none(),
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, DeError> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DeError> {
        match self.0 {
            Value::String(s) => visitor.visit_enum(s.as_str().into_deserializer()),
            Value::Object(m) => visitor.visit_enum(MapAccessDeserializer::new(
                MapDeserializer::new(m.iter().map(|(k, v)| (k.as_str(), ValueDe(v)))),
            )),
            _ => self.deserialize_any(visitor),
        }
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        visitor.visit_unit()
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char bytes byte_buf unit
        unit_struct seq tuple tuple_struct map struct identifier
    }
}

#[cfg(test)]
mod tests;
