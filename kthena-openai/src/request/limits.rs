//! The output-token limit of a request as the engine reads it.

use serde_json::{Map, Value};

/// The most output tokens a request may make the engine produce, read as vLLM reads it
/// (`vllm/entrypoints/openai/protocol.py`: `max_completion_tokens or max_tokens`): the first
/// of `max_completion_tokens`, `max_tokens` and the Responses API's `max_output_tokens` that
/// is a positive whole number (also written `900.0` or `"900"`, which pydantic's lax mode
/// accepts), times the sequences generated per prompt (the larger of `n` and `best_of`, at
/// most [`MAX_CHOICES`]). `None` when no member says.
pub(super) fn max_output_tokens(body: &Map<String, Value>) -> Option<u64> {
    let per_choice = ["max_completion_tokens", "max_tokens", "max_output_tokens"]
        .into_iter()
        .find_map(|k| body.get(k).and_then(whole_number).filter(|n| *n > 0))?;
    let choices = ["n", "best_of"]
        .into_iter()
        .filter_map(|k| body.get(k).and_then(whole_number))
        .max()
        .unwrap_or(1)
        .clamp(1, MAX_CHOICES);
    Some(per_choice.saturating_mul(choices))
}

/// The most sequences per prompt [`max_output_tokens`] counts (a larger `n` is the engine's
/// to refuse).
pub(super) const MAX_CHOICES: u64 = 1024;

/// A non-negative whole number written as an integer, a float without fraction or a
/// decimal string.
fn whole_number(v: &Value) -> Option<u64> {
    match v {
        Value::Number(n) => n.as_u64().or_else(|| {
            n.as_f64()
                .filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f < 1.8e19)
                .map(|f| f as u64)
        }),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}
