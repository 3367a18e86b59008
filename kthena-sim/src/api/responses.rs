//! `POST /v1/responses`: the OpenAI Responses API as vLLM serves it (text in, one assistant
//! message out). `input` is a string or a list of message items (`{"role","content"}` or
//! `{"type":"message",...}`; other item types are skipped), `instructions` becomes a leading
//! system message, `max_output_tokens` bounds the output. Non-streaming answers are one
//! `response` object; `stream: true` sends vLLM's named SSE events (`event: <type>` then
//! `data: {"type","sequence_number",...}`): `response.created`, `response.in_progress`,
//! `response.output_item.added`, `response.content_part.added`, one
//! `response.output_text.delta` per token, `response.output_text.done`,
//! `response.content_part.done`, `response.output_item.done`, `response.completed`, with no
//! `[DONE]` line. As the simulator always generates `max_output_tokens` tokens, a response
//! ends `"status":"incomplete"` with `incomplete_details.reason = "max_output_tokens"`, as
//! vLLM reports a `length` finish.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use http::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::body::{ApiError, RawBody, json_response, parse, sse_response};
use super::generate::{collect, submit};
use super::request::{Api, Gen, prepare, render_messages};
use super::shared::{Shared, unix_secs};
use super::wire::{Common, Content, Message};
use crate::engine::{Finished, Output};

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Input {
    Text(String),
    Items(Vec<Value>),
}

#[derive(Debug, Deserialize)]
struct ResponsesRequest {
    model: String,
    input: Input,
    #[serde(default)]
    instructions: Option<String>,
    #[serde(default)]
    max_output_tokens: Option<usize>,
    /// `null` is as absent (vLLM's `Optional[bool]`).
    #[serde(default)]
    stream: Option<bool>,
    #[serde(default)]
    seed: Option<u64>,
    #[serde(default)]
    cache_salt: Option<String>,
}

/// `usage` of a response (vLLM's `ResponseUsage`).
#[derive(Debug, Serialize)]
struct ResponseUsage {
    input_tokens: usize,
    input_tokens_details: Value,
    output_tokens: usize,
    output_tokens_details: Value,
    total_tokens: usize,
}

impl ResponseUsage {
    fn new(f: &Finished) -> Self {
        Self {
            input_tokens: f.prompt_tokens,
            input_tokens_details: json!({"cached_tokens": f.cached_tokens}),
            output_tokens: f.completion_tokens,
            output_tokens_details: json!({"reasoning_tokens": 0}),
            total_tokens: f.prompt_tokens + f.completion_tokens,
        }
    }
}

/// The `response` object, fields in the order of vLLM's `ResponsesResponse`.
#[derive(Debug, Serialize)]
struct ResponseObject<'a> {
    id: &'a str,
    created_at: u64,
    incomplete_details: Option<Value>,
    instructions: Option<&'a str>,
    metadata: Option<Value>,
    model: &'a str,
    object: &'static str,
    output: Vec<Value>,
    parallel_tool_calls: bool,
    temperature: f64,
    tool_choice: &'static str,
    tools: Vec<Value>,
    top_p: f64,
    background: bool,
    max_output_tokens: usize,
    max_tool_calls: Option<u32>,
    previous_response_id: Option<String>,
    prompt: Option<Value>,
    reasoning: Option<Value>,
    service_tier: &'static str,
    status: &'static str,
    text: Option<Value>,
    top_logprobs: Option<u32>,
    truncation: &'static str,
    usage: Option<ResponseUsage>,
    user: Option<String>,
}

/// What a response needs besides its state.
struct Meta {
    g: Gen,
    msg_id: String,
    instructions: Option<String>,
    created: u64,
}

impl Meta {
    /// The response object; `done` is the text and summary once finished.
    fn object(&self, done: Option<(&str, &Finished)>) -> ResponseObject<'_> {
        let (status, incomplete, output, usage) = match done {
            None => ("in_progress", None, Vec::new(), None),
            Some((text, f)) => {
                // Every simulated request runs to its token budget: vLLM's `length` finish.
                let status = if f.reason.as_str() == "length" {
                    "incomplete"
                } else {
                    "completed"
                };
                let incomplete =
                    (status == "incomplete").then(|| json!({"reason": "max_output_tokens"}));
                (
                    status,
                    incomplete,
                    vec![self.message(text, "completed")],
                    Some(ResponseUsage::new(f)),
                )
            }
        };
        ResponseObject {
            id: &self.g.id,
            created_at: self.created,
            incomplete_details: incomplete,
            instructions: self.instructions.as_deref(),
            metadata: None,
            model: &self.g.model,
            object: "response",
            output,
            parallel_tool_calls: true,
            temperature: 1.0,
            tool_choice: "auto",
            tools: Vec::new(),
            top_p: 1.0,
            background: false,
            max_output_tokens: self.g.max_tokens,
            max_tool_calls: None,
            previous_response_id: None,
            prompt: None,
            reasoning: None,
            service_tier: "auto",
            status,
            text: None,
            top_logprobs: None,
            truncation: "disabled",
            usage,
            user: None,
        }
    }

    /// `extra` with the ids of the message's text part (`item_id`, `output_index`,
    /// `content_index`) first.
    fn part_fields(&self, extra: Value) -> Value {
        let mut v = json!({"item_id": self.msg_id, "output_index": 0, "content_index": 0});
        if let (Value::Object(a), Value::Object(b)) = (&mut v, extra) {
            a.extend(b);
        }
        v
    }

    /// The assistant message output item.
    fn message(&self, text: &str, status: &str) -> Value {
        let content: Vec<Value> = if status == "in_progress" {
            Vec::new()
        } else {
            vec![text_part(text)]
        };
        json!({
            "id": self.msg_id,
            "content": content,
            "role": "assistant",
            "status": status,
            "type": "message",
        })
    }
}

fn text_part(text: &str) -> Value {
    json!({"annotations": [], "text": text, "type": "output_text", "logprobs": null})
}

/// `POST /v1/responses`.
pub(super) async fn create(State(s): State<Arc<Shared>>, RawBody(body): RawBody) -> Response {
    let meta = match request(&s, &body) {
        Ok(m) => m,
        Err(e) => return e.into_response(),
    };
    let (guard, mut rx) = match submit(&s, &meta.g).await {
        Ok(x) => x,
        Err(resp) => return resp,
    };
    if !meta.g.stream {
        let (text, finished) = match collect(&mut rx).await {
            Ok(x) => x,
            Err(e) => return e.into_response(),
        };
        drop(guard);
        return json_response(StatusCode::OK, &meta.object(Some((&text, &finished))));
    }
    let (tx, body_rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(16);
    let producer = async move {
        let _guard = guard;
        stream_events(&meta, &mut rx, &tx).await;
    };
    sse_response(body_rx, producer)
}

fn request(s: &Shared, body: &Bytes) -> Result<Meta, ApiError> {
    let req: ResponsesRequest = parse(body)?;
    let mut messages = Vec::new();
    if let Some(i) = req.instructions.as_ref().filter(|i| !i.is_empty()) {
        messages.push(Message {
            role: "system".into(),
            content: Some(Content::Text(i.clone())),
        });
    }
    match req.input {
        Input::Text(t) => messages.push(Message {
            role: "user".into(),
            content: Some(Content::Text(t)),
        }),
        Input::Items(items) => {
            for item in items {
                let is_message = item
                    .get("type")
                    .is_none_or(|t| t.as_str() == Some("message"));
                if is_message && let Ok(m) = serde_json::from_value::<Message>(item) {
                    messages.push(m);
                }
            }
        }
    }
    if messages.is_empty() {
        return Err(ApiError::bad_request("input must not be empty").with_param("input"));
    }
    let text = render_messages(s, messages)?;
    let prompt = s.tokenizer.encode(&text, false);
    let common = Common {
        model: req.model,
        max_tokens: req.max_output_tokens,
        max_completion_tokens: None,
        stream: req.stream,
        stream_options: None,
        seed: req.seed,
        n: None,
        kv_transfer_params: None,
        bootstrap_room: None,
        bootstrap_host: None,
        cache_salt: req.cache_salt,
    };
    let mut g = prepare(s, Api::Chat, common, prompt)?;
    g.id = s.request_id_sep("resp", '_');
    Ok(Meta {
        msg_id: s.request_id_sep("msg", '_'),
        g,
        instructions: req.instructions,
        created: unix_secs(),
    })
}

/// One named SSE event: `event: <type>` and `data: {"type", "sequence_number", ...fields}`.
fn event(kind: &str, seq: &mut u64, fields: Value) -> Bytes {
    let mut obj = serde_json::Map::new();
    obj.insert("type".into(), Value::from(kind));
    obj.insert("sequence_number".into(), Value::from(*seq));
    if let Value::Object(f) = fields {
        obj.extend(f);
    }
    *seq += 1;
    let data = serde_json::to_string(&Value::Object(obj)).unwrap_or_default();
    Bytes::from(format!("event: {kind}\ndata: {data}\n\n"))
}

/// Sends the event sequence of a streaming response; returns when done or the client left.
async fn stream_events(
    m: &Meta,
    rx: &mut mpsc::UnboundedReceiver<Output>,
    tx: &mpsc::Sender<Result<Bytes, std::io::Error>>,
) {
    let mut seq = 0u64;
    let mut head = head_events(m, &mut seq);
    let mut text = String::new();
    loop {
        let Some(Output {
            text: t, finished, ..
        }) = rx.recv().await
        else {
            let _ = tx.send(Err(std::io::Error::other("engine stopped"))).await;
            return;
        };
        text.push_str(&t);
        // The head leaves with the first token, as the chat role chunk does.
        let mut frames = std::mem::take(&mut head);
        frames.push(event(
            "response.output_text.delta",
            &mut seq,
            m.part_fields(json!({"delta": t, "logprobs": []})),
        ));
        if let Some(f) = &finished {
            done_events(m, &mut seq, &text, f, &mut frames);
        }
        for fr in frames {
            if tx.send(Ok(fr)).await.is_err() {
                return;
            }
        }
        if finished.is_some() {
            return;
        }
    }
}

/// The events before the first token: the response created and in progress, the message
/// item and its text part added.
fn head_events(m: &Meta, seq: &mut u64) -> Vec<Bytes> {
    let in_progress = serde_json::to_value(m.object(None)).unwrap_or_default();
    vec![
        event("response.created", seq, json!({"response": in_progress})),
        event(
            "response.in_progress",
            seq,
            json!({"response": in_progress}),
        ),
        event(
            "response.output_item.added",
            seq,
            json!({"output_index": 0, "item": m.message("", "in_progress")}),
        ),
        event(
            "response.content_part.added",
            seq,
            m.part_fields(json!({"part": text_part("")})),
        ),
    ]
}

/// The events after the last token: the text, part and item done, then the response
/// completed (or incomplete) with its usage.
fn done_events(m: &Meta, seq: &mut u64, text: &str, f: &Finished, frames: &mut Vec<Bytes>) {
    let done = serde_json::to_value(m.object(Some((text, f)))).unwrap_or_default();
    frames.push(event(
        "response.output_text.done",
        seq,
        m.part_fields(json!({"text": text, "logprobs": []})),
    ));
    frames.push(event(
        "response.content_part.done",
        seq,
        m.part_fields(json!({"part": text_part(text)})),
    ));
    frames.push(event(
        "response.output_item.done",
        seq,
        json!({"output_index": 0, "item": m.message(text, "completed")}),
    ));
    frames.push(event("response.completed", seq, json!({"response": done})));
}
