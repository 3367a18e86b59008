//! The prompts of vLLM's pooling APIs: embeddings (`input`, or chat `messages`), rerank
//! (`query`, `documents`) and score (`text_1`, `text_2`), as vLLM's request models read
//! them (`vllm/entrypoints/openai/protocol.py`: `EmbeddingCompletionRequest`,
//! `EmbeddingChatRequest`, `RerankRequest`, `ScoreRequest`).

use serde_json::{Map, Value};

use super::{invalid, parse_member};
use crate::{Prompt, Result};

#[cfg(test)]
mod tests;

/// An embeddings request's prompt and its text: `input` (a string; strings joined with
/// `\n`; token ids and arrays of token ids as their JSON text, so that prefix hashing sees
/// the same text for the same ids), else chat `messages`; `Ok(None)` without either.
///
/// # Errors
/// `InvalidField` for an `input` that is neither a string nor an array.
pub(super) fn embeddings_prompt(body: &Map<String, Value>) -> Result<Option<(Prompt, String)>> {
    let prompt = match body.get("input").filter(|v| !v.is_null()) {
        Some(Value::String(s)) => Prompt::Text(s.clone()),
        Some(Value::Array(items)) => Prompt::Text(join_items(items)),
        Some(_) => {
            return Err(invalid(
                "input",
                "must be a string, an array of strings, an array of token ids or an array of arrays of token ids",
            ));
        }
        None if body.get("messages").is_some_and(Value::is_array) => {
            parse_member(body, "messages")?
        }
        None => return Ok(None),
    };
    let text = prompt.render();
    Ok(Some((prompt, text)))
}

/// A rerank or score request's prompt: the query side (`query`, `text_1`, `queries` or
/// `data_1`, the first present) then the document side (`documents`, `text_2` or
/// `data_2`), one per line; `None` when neither side is present.
pub(super) fn pair_prompt(body: &Map<String, Value>) -> Option<(Prompt, String)> {
    let side = |keys: &[&str]| {
        keys.iter()
            .find_map(|k| body.get(*k).filter(|v| !v.is_null()))
            .map(text_of)
    };
    let query = side(&["query", "text_1", "queries", "data_1"]);
    let docs = side(&["documents", "text_2", "data_2"]);
    if query.is_none() && docs.is_none() {
        return None;
    }
    let text = [query, docs]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join("\n");
    Some((Prompt::Text(text.clone()), text))
}

/// The items of an array as text, one per line: strings as they are, anything else as its
/// JSON text.
fn join_items(items: &[Value]) -> String {
    items
        .iter()
        .map(|i| match i {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A query or documents value as text: a string as it is; an array's items one per line
/// (strings, objects' `text` member, anything else as JSON text); an object's `text`
/// member or its JSON text.
fn text_of(v: &Value) -> String {
    let one = |v: &Value| match v {
        Value::String(s) => s.clone(),
        Value::Object(o) => o
            .get("text")
            .and_then(Value::as_str)
            .map_or_else(|| v.to_string(), str::to_owned),
        other => other.to_string(),
    };
    match v {
        Value::Array(items) => items.iter().map(one).collect::<Vec<_>>().join("\n"),
        other => one(other),
    }
}
