//! vLLM's pooling endpoints: `/v1/embeddings`, `/v1/rerank` and `/v1/score`, with vLLM's
//! response shapes (`vllm/entrypoints/openai/protocol.py`: `EmbeddingResponse`,
//! `RerankResponse`, `ScoreResponse`) and deterministic answers a test can assert exactly.
//!
//! The embedding of an input is `[length, words, index, 1.0]`: its length (characters of a
//! string, ids of a token array), its whitespace-separated words (ids again for a token
//! array), its index in the request. A document's relevance to a query is the share of
//! the query's distinct words the document contains. Each request counts as one finished
//! request of its prompt tokens in the engine's metrics, as generation requests do.

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::response::Response;
use axum::routing::post;
use base64::Engine as _;
use http::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::body::{ApiError, RawBody, json_response, parse};
use super::request::resolve_lora;
use super::shared::{InFlight, Shared, unix_secs};

#[cfg(test)]
mod tests;

/// The routes of this module.
pub(super) fn routes() -> Router<Arc<Shared>> {
    Router::new()
        .route("/v1/embeddings", post(embeddings))
        .route("/v1/rerank", post(rerank))
        .route("/v1/score", post(score))
}

/// One embeddings input: text or token ids.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum Item {
    Text(String),
    Ids(Vec<u32>),
}

/// `input`: one item or many.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Input {
    One(Item),
    Many(Vec<Item>),
}

#[derive(Debug, Deserialize)]
struct EmbeddingsRequest {
    model: String,
    input: Input,
    #[serde(default)]
    encoding_format: Option<String>,
}

/// The deterministic embedding of `item`, the `index`th input.
pub(crate) fn embedding_of(item_len: usize, words: usize, index: usize) -> [f32; 4] {
    #[allow(clippy::cast_precision_loss, reason = "small counts, exact in f32")]
    [item_len as f32, words as f32, index as f32, 1.0]
}

fn item_vector(s: &Shared, item: &Item, index: usize) -> ([f32; 4], usize) {
    match item {
        Item::Text(t) => (
            embedding_of(t.chars().count(), t.split_whitespace().count(), index),
            s.tokenizer.encode(t, true).len(),
        ),
        Item::Ids(ids) => (embedding_of(ids.len(), ids.len(), index), ids.len()),
    }
}

async fn embeddings(
    State(s): State<Arc<Shared>>,
    RawBody(body): RawBody,
) -> Result<Response, ApiError> {
    let req: EmbeddingsRequest = parse(&body)?;
    resolve_lora(&s, &req.model)?;
    let _guard = InFlight::new(&s);
    let items = match req.input {
        Input::One(Item::Ids(ids)) if ids.is_empty() => Vec::new(),
        Input::One(i) => vec![i],
        // A flat array of ids is one input; `Many` of `Ids` many.
        Input::Many(v) => v,
    };
    let base64 = req.encoding_format.as_deref() == Some("base64");
    let mut tokens = 0;
    let data: Vec<Value> = items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let (v, n) = item_vector(&s, item, i);
            tokens += n;
            let embedding = if base64 {
                let raw: Vec<u8> = v.iter().flat_map(|f| f.to_le_bytes()).collect();
                json!(base64::engine::general_purpose::STANDARD.encode(raw))
            } else {
                json!(v)
            };
            json!({"index": i, "object": "embedding", "embedding": embedding})
        })
        .collect();
    count(&s, tokens);
    Ok(json_response(
        StatusCode::OK,
        &json!({
            "id": s.request_id("embd"),
            "object": "list",
            "created": unix_secs(),
            "model": req.model,
            "data": data,
            "usage": usage(tokens),
        }),
    ))
}

/// vLLM's `UsageInfo` of a pooling request.
fn usage(tokens: usize) -> Value {
    json!({"prompt_tokens": tokens, "total_tokens": tokens, "completion_tokens": 0, "prompt_tokens_details": null})
}

/// Counts a pooling request of `tokens` prompt tokens as finished.
fn count(s: &Shared, tokens: usize) {
    s.metrics.inc_prompt(tokens);
    s.metrics.observe_request(tokens, 0);
}

/// The share of `query`'s distinct words that `doc` contains.
pub(crate) fn relevance(query: &str, doc: &str) -> f64 {
    let mut q: Vec<&str> = query.split_whitespace().collect();
    q.sort_unstable();
    q.dedup();
    if q.is_empty() {
        return 0.0;
    }
    let d: Vec<&str> = doc.split_whitespace().collect();
    let hits = q.iter().filter(|w| d.contains(w)).count();
    #[allow(clippy::cast_precision_loss, reason = "word counts")]
    let share = hits as f64 / q.len() as f64;
    share
}

#[derive(Debug, Deserialize)]
struct RerankRequest {
    model: String,
    query: String,
    documents: Vec<String>,
    #[serde(default)]
    top_n: Option<usize>,
}

#[derive(Debug, Serialize)]
struct RerankResult {
    index: usize,
    document: Value,
    relevance_score: f64,
}

async fn rerank(
    State(s): State<Arc<Shared>>,
    RawBody(body): RawBody,
) -> Result<Response, ApiError> {
    let req: RerankRequest = parse(&body)?;
    resolve_lora(&s, &req.model)?;
    let _guard = InFlight::new(&s);
    let mut results: Vec<RerankResult> = req
        .documents
        .iter()
        .enumerate()
        .map(|(index, d)| RerankResult {
            index,
            document: json!({"text": d}),
            relevance_score: relevance(&req.query, d),
        })
        .collect();
    results.sort_by(|a, b| b.relevance_score.total_cmp(&a.relevance_score));
    results.truncate(req.top_n.unwrap_or(usize::MAX).max(1));
    let tokens = pair_tokens(&s, &req.query, &req.documents);
    count(&s, tokens);
    Ok(json_response(
        StatusCode::OK,
        &json!({
            "id": s.request_id("rerank"),
            "model": req.model,
            "usage": {"total_tokens": tokens},
            "results": results,
        }),
    ))
}

/// The prompt tokens of a query scored against each document (one pair per document).
fn pair_tokens(s: &Shared, query: &str, docs: &[String]) -> usize {
    let q = s.tokenizer.encode(query, true).len();
    docs.iter()
        .map(|d| q + s.tokenizer.encode(d, false).len())
        .sum()
}

/// `text_1` or `text_2`: one text or many.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Texts {
    One(String),
    Many(Vec<String>),
}

impl Texts {
    fn into_vec(self) -> Vec<String> {
        match self {
            Self::One(t) => vec![t],
            Self::Many(v) => v,
        }
    }
}

#[derive(Debug, Deserialize)]
struct ScoreRequest {
    model: String,
    text_1: Texts,
    text_2: Texts,
}

async fn score(State(s): State<Arc<Shared>>, RawBody(body): RawBody) -> Result<Response, ApiError> {
    let req: ScoreRequest = parse(&body)?;
    resolve_lora(&s, &req.model)?;
    let _guard = InFlight::new(&s);
    let (t1, t2) = (req.text_1.into_vec(), req.text_2.into_vec());
    let pairs: Vec<(&String, &String)> = if t1.len() == 1 {
        t2.iter().map(|d| (&t1[0], d)).collect()
    } else if t1.len() == t2.len() {
        t1.iter().zip(&t2).collect()
    } else {
        return Err(ApiError::bad_request(
            "text_1 and text_2 must have the same length, or text_1 a single text",
        ));
    };
    let data: Vec<Value> = pairs
        .iter()
        .enumerate()
        .map(|(i, (q, d))| json!({"index": i, "object": "score", "score": relevance(q, d)}))
        .collect();
    let tokens: usize = pairs
        .iter()
        .map(|(q, d)| pair_tokens(&s, q, std::slice::from_ref(*d)))
        .sum();
    count(&s, tokens);
    Ok(json_response(
        StatusCode::OK,
        &json!({
            "id": s.request_id("score"),
            "object": "list",
            "created": unix_secs(),
            "model": req.model,
            "data": data,
            "usage": usage(tokens),
        }),
    ))
}
