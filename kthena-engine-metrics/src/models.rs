//! An engine's `GET /v1/models` answer (OpenAI's model list; vLLM adds `parent` to the cards
//! of LoRA adapters).

use crate::error::{Error, Result};

/// An engine's `GET /v1/models` answer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModelList {
    /// Every `data[].id`, in order.
    pub ids: Vec<String>,
    /// The LoRA adapters: ids whose card has a non-null `parent` (vLLM lists adapters with
    /// `parent` = the base model id); when no card has a `parent` key at all, every id after
    /// the first (Go Kthena's reading).
    pub lora_adapters: Vec<String>,
}

/// Parses `GET /v1/models`.
///
/// # Errors
/// [`Error::ModelsJson`] when the body is not JSON, [`Error::ModelsShape`] when it has no
/// `data` list (`{"data":[{"id":..}]}`).
pub fn parse_models(body: &[u8]) -> Result<ModelList> {
    let v: serde_json::Value = serde_json::from_slice(body).map_err(Error::ModelsJson)?;
    let data = v
        .get("data")
        .and_then(|d| d.as_array())
        .ok_or(Error::ModelsShape)?;
    let cards: Vec<(String, Option<bool>)> = data
        .iter()
        .filter_map(|m| {
            let id = m.get("id").and_then(|i| i.as_str())?.to_owned();
            let child = m.get("parent").map(|p| !p.is_null());
            Some((id, child))
        })
        .collect();
    let any_parent_key = cards.iter().any(|(_, c)| c.is_some());
    let lora_adapters = cards
        .iter()
        .enumerate()
        .filter(|(i, (_, child))| {
            if any_parent_key {
                *child == Some(true)
            } else {
                *i > 0
            }
        })
        .map(|(_, (id, _))| id.clone())
        .collect();
    Ok(ModelList {
        ids: cards.into_iter().map(|(id, _)| id).collect(),
        lora_adapters,
    })
}

#[cfg(test)]
mod tests;
