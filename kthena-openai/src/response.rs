//! What the router reads from an engine's answer: the token usage of a JSON response or a
//! stream chunk (Chat Completions and Completions `usage`, the Responses API's
//! `response.usage`), without building a JSON tree for anything else.

use serde_json::Value;

/// Token usage reported by an engine (`usage` object).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// `prompt_tokens` (or Responses API `input_tokens`).
    pub prompt_tokens: u64,
    /// `completion_tokens` (or Responses API `output_tokens`).
    pub completion_tokens: u64,
}

/// Reads `usage` from a response or chunk object; `None` when absent or all zero.
#[must_use]
pub fn usage_of(v: &Value) -> Option<Usage> {
    let u = v
        .get("usage")
        .or_else(|| v.get("response").and_then(|r| r.get("usage")))?;
    usage_from(u)
}

/// The [`Usage`] of a `usage` object (`prompt_tokens`/`input_tokens`,
/// `completion_tokens`/`output_tokens`; a `usage` with only `total_tokens`, as vLLM's rerank
/// answers, is all prompt tokens); `None` when all zero.
#[must_use]
pub fn usage_from(u: &Value) -> Option<Usage> {
    let get = |a: &str, b: &str| {
        u.get(a)
            .or_else(|| u.get(b))
            .and_then(Value::as_u64)
            .unwrap_or(0)
    };
    let mut usage = Usage {
        prompt_tokens: get("prompt_tokens", "input_tokens"),
        completion_tokens: get("completion_tokens", "output_tokens"),
    };
    if usage == Usage::default() {
        usage.prompt_tokens = get("total_tokens", "total_tokens");
    }
    (usage != Usage::default()).then_some(usage)
}

/// What the router reads from an engine's JSON response or stream chunk: the `usage` object
/// (top-level, or the Responses API `response.usage`) and whether `choices` is an empty
/// array. Everything else is skipped without building a [`Value`] tree. Reads the same as
/// [`usage_of`] on the parsed [`Value`] (the last of duplicate keys wins).
#[derive(Debug, Default)]
pub struct ResponseProbe {
    usage: Option<Value>,
    response_usage: Option<Value>,
    choices_empty: bool,
}

impl ResponseProbe {
    /// Probes a JSON object; `None` when `bytes` is not valid UTF-8 JSON or not an object.
    #[must_use]
    pub fn parse(bytes: &[u8]) -> Option<Self> {
        serde_json::from_str(std::str::from_utf8(bytes).ok()?).ok()
    }

    /// The usage, as [`usage_of`] reads it.
    #[must_use]
    pub fn usage(&self) -> Option<Usage> {
        usage_from(self.usage.as_ref().or(self.response_usage.as_ref())?)
    }

    /// A usage-only chunk: non-null `usage` and `choices` an empty array.
    #[must_use]
    pub fn usage_only(&self) -> bool {
        self.usage.as_ref().is_some_and(|u| !u.is_null()) && self.choices_empty
    }
}

/// Top-level keys the probe looks at.
enum ProbeKey {
    Usage,
    Choices,
    Response,
    Other,
}

impl<'de> serde::Deserialize<'de> for ProbeKey {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = ProbeKey;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a key")
            }
            fn visit_str<E: serde::de::Error>(self, k: &str) -> std::result::Result<ProbeKey, E> {
                Ok(match k {
                    "usage" => ProbeKey::Usage,
                    "choices" => ProbeKey::Choices,
                    "response" => ProbeKey::Response,
                    _ => ProbeKey::Other,
                })
            }
        }
        d.deserialize_identifier(V)
    }
}

impl<'de> serde::Deserialize<'de> for ResponseProbe {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = ResponseProbe;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<ResponseProbe, A::Error> {
                let mut p = ResponseProbe::default();
                while let Some(k) = map.next_key::<ProbeKey>()? {
                    match k {
                        ProbeKey::Usage => p.usage = Some(map.next_value()?),
                        ProbeKey::Choices => p.choices_empty = map.next_value::<EmptyArray>()?.0,
                        ProbeKey::Response => p.response_usage = map.next_value::<InnerUsage>()?.0,
                        ProbeKey::Other => {
                            map.next_value::<Checked>()?;
                        }
                    }
                }
                Ok(p)
            }
        }
        d.deserialize_map(V)
    }
}

/// Visitor methods for the JSON values a probe field skips (anything but its own shape).
macro_rules! skip_scalars {
    ($out:expr) => {
        fn visit_unit<E: serde::de::Error>(self) -> std::result::Result<Self::Value, E> {
            Ok($out)
        }
        fn visit_bool<E: serde::de::Error>(self, _: bool) -> std::result::Result<Self::Value, E> {
            Ok($out)
        }
        fn visit_i64<E: serde::de::Error>(self, _: i64) -> std::result::Result<Self::Value, E> {
            Ok($out)
        }
        fn visit_u64<E: serde::de::Error>(self, _: u64) -> std::result::Result<Self::Value, E> {
            Ok($out)
        }
        fn visit_f64<E: serde::de::Error>(self, _: f64) -> std::result::Result<Self::Value, E> {
            Ok($out)
        }
        fn visit_str<E: serde::de::Error>(self, _: &str) -> std::result::Result<Self::Value, E> {
            Ok($out)
        }
    };
}

/// A value the probe does not look at, read as serde_json reads it into a [`Value`]: unlike
/// [`serde::de::IgnoredAny`], a number outside `f64`'s range (`1e400`) is an error, so the
/// probe and [`usage_of`] agree on what is JSON (found by the `sse_filter` fuzz target).
struct Checked;

impl<'de> serde::Deserialize<'de> for Checked {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        d.deserialize_any(Self)
    }
}

impl<'de> serde::de::Visitor<'de> for Checked {
    type Value = Self;
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }
    skip_scalars!(Checked);
    fn visit_seq<A: serde::de::SeqAccess<'de>>(
        self,
        mut seq: A,
    ) -> std::result::Result<Self, A::Error> {
        while seq.next_element::<Self>()?.is_some() {}
        Ok(Self)
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(
        self,
        mut map: A,
    ) -> std::result::Result<Self, A::Error> {
        while map.next_entry::<Self, Self>()?.is_some() {}
        Ok(Self)
    }
}

/// `true` when the value is an empty array.
struct EmptyArray(bool);

impl<'de> serde::Deserialize<'de> for EmptyArray {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = EmptyArray;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON value")
            }
            skip_scalars!(EmptyArray(false));
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> std::result::Result<EmptyArray, A::Error> {
                let mut empty = true;
                while seq.next_element::<Checked>()?.is_some() {
                    empty = false;
                }
                Ok(EmptyArray(empty))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> std::result::Result<EmptyArray, A::Error> {
                Checked.visit_map(map)?;
                Ok(EmptyArray(false))
            }
        }
        d.deserialize_any(V)
    }
}

/// The `usage` of an object value (`None` for other values or without `usage`).
struct InnerUsage(Option<Value>);

impl<'de> serde::Deserialize<'de> for InnerUsage {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = InnerUsage;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON value")
            }
            skip_scalars!(InnerUsage(None));
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                seq: A,
            ) -> std::result::Result<InnerUsage, A::Error> {
                Checked.visit_seq(seq)?;
                Ok(InnerUsage(None))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<InnerUsage, A::Error> {
                let mut usage = None;
                while let Some(k) = map.next_key::<ProbeKey>()? {
                    if matches!(k, ProbeKey::Usage) {
                        usage = Some(map.next_value()?);
                    } else {
                        map.next_value::<Checked>()?;
                    }
                }
                Ok(InnerUsage(usage))
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests;
