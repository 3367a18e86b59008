//! OpenAI request parsing: `model`, the prompt (`prompt`, `messages`, `input`), `stream`,
//! `user`, and the upstream body rewrite (model rewrite, usage injection).
//!
//! Prompt extraction: the member the request's path is served from (`messages` for chat,
//! `prompt` for completions, `input` for the Responses API), and for the token estimate
//! every prompt-bearing member present. Go Kthena (`pkg/kthena-router/utils/utils.go
//! ParsePrompt`) reads `prompt` first whatever the path, so a chat request with an empty
//! `prompt` beside its `messages` was estimated at 0 tokens there; without a path
//! ([`parse_request`]) that order is kept.

use bytes::Bytes;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

mod limits;
mod pooling;

#[cfg(test)]
use limits::MAX_CHOICES;
use limits::max_output_tokens;

use crate::{Api, Error, Result};

/// One chat message as the router sees it (role and flattened text content).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// `system`, `user`, `assistant`, `developer`, ...
    pub role: String,
    /// Text parts joined with `\n`.
    pub content: String,
}

/// The prompt of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Prompt {
    /// A completion prompt (`prompt` string).
    Text(String),
    /// Chat messages (`messages`, or Responses API `input`).
    Messages(Vec<Message>),
}

impl Prompt {
    /// The prompt as one string: the text itself, or the messages rendered in ChatML
    /// (`<|im_start|>{role}\n{content}<|im_end|>\n` per message), as Go Kthena renders them for
    /// token estimation and prefix hashing.
    #[must_use]
    pub fn render(&self) -> String {
        match self {
            Self::Text(t) => t.clone(),
            Self::Messages(msgs) => {
                let mut s = String::new();
                for m in msgs {
                    s.push_str("<|im_start|>");
                    s.push_str(&m.role);
                    s.push('\n');
                    s.push_str(&m.content);
                    s.push_str("<|im_end|>\n");
                }
                s
            }
        }
    }
}

/// A parsed OpenAI request body.
#[derive(Debug, Clone)]
pub struct ParsedRequest {
    /// The body as received (byte-identical; forwarded when no rewrite is needed).
    pub raw: Bytes,
    /// The decoded JSON object.
    pub body: Map<String, Value>,
    /// The request's `model`, verbatim.
    pub model: String,
    /// `stream: true`.
    pub stream: bool,
    /// `stream_options.include_usage: true` as sent by the client.
    pub client_wants_usage: bool,
    /// The `user` field, if a string.
    pub user: Option<String>,
    /// The prompt.
    pub prompt: Prompt,
    /// The most output tokens the request asks for, over all its choices (see
    /// `max_output_tokens`): tokens.
    pub max_output_tokens: Option<u64>,
    /// [`Prompt::render`] of the prompt, then every other prompt-bearing member present
    /// (one per line): the text token estimates and prefix hashing read.
    pub prompt_text: String,
}

/// Estimated input tokens of a rendered prompt: `ceil(chars / 4)`, 0 for an empty prompt
/// (Go Kthena `filters/tokenizer/estimator.go`).
#[must_use]
pub fn estimate_tokens(prompt: &str) -> u64 {
    let chars = prompt.chars().count() as u64;
    chars.div_ceil(4)
}

/// Parses a request body.
///
/// # Errors
/// [`Error::BadJson`] for invalid JSON or a non-object, [`Error::MissingModel`] when `model` is
/// missing, not a string or blank, [`Error::PromptNotFound`] when no prompt field is usable.
pub fn parse_request(raw: Bytes) -> Result<ParsedRequest> {
    parse_request_at(raw, None)
}

/// Parses the body of a request to `path`'s member ([`prompt_member`]): the prompt is the
/// member that path's engine reads, and [`ParsedRequest::prompt_text`] adds every other
/// prompt-bearing member, so that a request cannot carry one past the token estimate
/// (rate limits, fairness, prefix scoring) beside an empty one. Without a path, Go Kthena's
/// order (`prompt`, `messages`, `input`).
///
/// # Errors
/// As [`parse_request`].
pub fn parse_request_at(raw: Bytes, primary: Option<&str>) -> Result<ParsedRequest> {
    parse_with(raw, |body| {
        parse_prompt(body, primary)?.ok_or(Error::PromptNotFound)
    })
}

/// Parses the JSON body of a request to an inference path of API `api`
/// ([`Api::of_path`]). The generation APIs read their prompt as [`parse_request_at`] does
/// (and refuse a body without one); embeddings read `input` (or `messages`), rerank `query`
/// and `documents`, score `text_1` and `text_2`, any other path the first of `prompt`,
/// `messages`, `input` that reads as a prompt. A body without a prompt there gets an
/// empty [`Prompt::Text`] and an empty [`ParsedRequest::prompt_text`]: it is scheduled on
/// load alone and estimated at 0 input tokens. Embeddings, rerank and score produce no
/// output tokens: their [`ParsedRequest::max_output_tokens`] is `Some(0)`.
///
/// # Errors
/// As [`parse_request`] (but [`Error::PromptNotFound`] only for the generation APIs);
/// [`Error::InvalidField`] for an embeddings `input` or a rerank `query` of a shape no API
/// accepts. A multipart API ([`Api::Audio`]) is not JSON: see [`ParsedRequest::form`].
pub fn parse_request_for(raw: Bytes, api: Api) -> Result<ParsedRequest> {
    if api.requires_prompt() {
        return parse_request_at(raw, api.prompt_member());
    }
    let mut parsed = parse_with(raw, |body| {
        let found = match api {
            Api::Embeddings => pooling::embeddings_prompt(body)?,
            Api::Rerank | Api::Score => pooling::pair_prompt(body),
            _ => parse_prompt(body, None).ok().flatten(),
        };
        Ok(found.unwrap_or_else(|| (Prompt::Text(String::new()), String::new())))
    })?;
    if matches!(api, Api::Embeddings | Api::Rerank | Api::Score) {
        // Pooling models produce no output tokens.
        parsed.max_output_tokens = Some(0);
    }
    Ok(parsed)
}

/// Parses the members every API shares (`model`, `stream`, `stream_options`, `user`), the
/// prompt with `prompt`, and the output token bound.
fn parse_with(
    mut raw: Bytes,
    prompt: impl FnOnce(&Map<String, Value>) -> Result<(Prompt, String)>,
) -> Result<ParsedRequest> {
    // A UTF-8 byte order mark before the JSON (as Python's `json.loads` and so vLLM accept).
    if raw.starts_with(b"\xEF\xBB\xBF") {
        raw = raw.slice(3..);
    }
    let value: Value = serde_json::from_slice(&raw).map_err(|e| Error::BadJson {
        reason: e.to_string(),
    })?;
    let Value::Object(body) = value else {
        return Err(Error::BadJson {
            reason: "the body must be a JSON object".into(),
        });
    };
    let model = match body.get("model") {
        Some(Value::String(m)) if !m.trim().is_empty() => m.clone(),
        _ => return Err(Error::MissingModel),
    };
    // OpenAI answers 400 for a non-boolean `stream`; taking `"true"` as false would send a
    // stream the router accounts as a plain answer.
    let stream = match body.get("stream") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(invalid("stream", "must be a boolean")),
    };
    let client_wants_usage = match body.get("stream_options") {
        None | Some(Value::Null) => false,
        Some(Value::Object(o)) => match o.get("include_usage") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => return Err(invalid("stream_options.include_usage", "must be a boolean")),
        },
        Some(_) => return Err(invalid("stream_options", "must be an object or null")),
    };
    let user = body.get("user").and_then(Value::as_str).map(str::to_owned);
    let (prompt, prompt_text) = prompt(&body)?;
    let max_output_tokens = max_output_tokens(&body);
    Ok(ParsedRequest {
        raw,
        max_output_tokens,
        body,
        model,
        stream,
        client_wants_usage,
        user,
        prompt,
        prompt_text,
    })
}

fn invalid(param: &'static str, reason: &str) -> Error {
    Error::InvalidField {
        param,
        reason: reason.to_owned(),
    }
}

/// The members that carry a prompt, in Go Kthena's order of precedence.
const PROMPT_MEMBERS: [&str; 3] = ["prompt", "messages", "input"];

/// The member an inference path reads its prompt from: `messages` for
/// `/v1/chat/completions` and `/v1/messages`, `prompt` for `/v1/completions`, `input` for
/// `/v1/responses`; `None` for any other path.
#[must_use]
pub fn prompt_member(path: &str) -> Option<&'static str> {
    match path {
        "/v1/chat/completions" | "/v1/messages" => Some("messages"),
        "/v1/completions" => Some("prompt"),
        "/v1/responses" => Some("input"),
        _ => None,
    }
}

/// The prompt of `body` and the text every prompt-bearing member adds up to; `Ok(None)`
/// when there is no prompt.
///
/// The prompt is the member `primary` names when present (the one the engine reads for the
/// path), else the first present of `prompt`, `messages`, `input` (Go's order; a null member
/// counts as absent). The text is that prompt rendered, followed by every other present
/// prompt-bearing member (rendered when well formed, else as its JSON text), one per line:
/// a member the engine might read is never left out of the estimate.
///
/// # Errors
/// [`Error::InvalidField`] when the chosen member has a shape no OpenAI API accepts.
fn parse_prompt(
    body: &Map<String, Value>,
    primary: Option<&str>,
) -> Result<Option<(Prompt, String)>> {
    let present = |k: &str| body.get(k).filter(|v| !v.is_null()).is_some();
    let chosen = primary
        .filter(|k| present(k))
        .or_else(|| PROMPT_MEMBERS.into_iter().find(|k| present(k)));
    let Some(chosen) = chosen else {
        return Ok(None);
    };
    let prompt = parse_member(body, chosen)?;
    let mut text = prompt.render();
    for other in PROMPT_MEMBERS.into_iter().filter(|k| *k != chosen) {
        let Some(v) = body.get(other).filter(|v| !v.is_null()) else {
            continue;
        };
        let extra = parse_member(body, other).map_or_else(|_| v.to_string(), |p| p.render());
        if !extra.is_empty() {
            if !text.is_empty() {
                text.push('\n');
            }
            text.push_str(&extra);
        }
    }
    for extra in template_extras(body) {
        if !text.is_empty() {
            text.push('\n');
        }
        text.push_str(&extra);
    }
    Ok(Some((prompt, text)))
}

/// What else a chat template puts in the prompt besides message contents, as JSON text for
/// the estimate: the tool definitions (`tools`, legacy `functions`), the tool calls and
/// refusals of messages, and Responses API input items that are not messages
/// (`function_call`, `function_call_output`, ...). Appended after the prompt, so prefix
/// hashing of the messages is unchanged.
fn template_extras(body: &Map<String, Value>) -> Vec<String> {
    let mut out: Vec<String> = ["tools", "functions"]
        .into_iter()
        .filter_map(|k| body.get(k).filter(|v| !v.is_null()).map(Value::to_string))
        .collect();
    let items = ["messages", "input"]
        .into_iter()
        .filter_map(|k| body.get(k).and_then(Value::as_array))
        .flatten();
    for item in items {
        let typed = item.get("type").and_then(Value::as_str);
        if typed.is_some_and(|t| t != "message") {
            out.push(item.to_string());
            continue;
        }
        for k in ["tool_calls", "function_call", "refusal"] {
            if let Some(v) = item.get(k).filter(|v| !v.is_null()) {
                out.push(v.to_string());
            }
        }
        let parts = item
            .get("content")
            .and_then(Value::as_array)
            .into_iter()
            .flatten();
        for part in parts.filter(|p| p.get("type").and_then(Value::as_str) == Some("refusal")) {
            if let Some(r) = part.get("refusal").and_then(Value::as_str) {
                out.push(r.to_owned());
            }
        }
    }
    out
}

/// The prompt of the present, non-null member `name` (`prompt`, `messages` or `input`).
fn parse_member(body: &Map<String, Value>, name: &str) -> Result<Prompt> {
    let value = body.get(name).unwrap_or(&Value::Null);
    match name {
        "prompt" => parse_text_prompt(value),
        "messages" => {
            let Value::Array(items) = value else {
                return Err(invalid("messages", "must be an array of messages"));
            };
            let system = body
                .get("system")
                .and_then(content_text)
                .map(|content| Message {
                    role: "system".into(),
                    content,
                });
            Ok(Prompt::Messages(
                system
                    .into_iter()
                    .chain(role_messages(items, false))
                    .collect(),
            ))
        }
        _ => parse_input(body, value),
    }
}

/// A completion `prompt`: a string, or an array whose string items are joined with `\n`
/// (token ids and other items as their JSON text, so that hashing still sees text).
fn parse_text_prompt(p: &Value) -> Result<Prompt> {
    match p {
        Value::String(s) => Ok(Prompt::Text(s.clone())),
        Value::Array(items) => {
            let parts: Vec<String> = items
                .iter()
                .map(|i| match i {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                })
                .collect();
            Ok(Prompt::Text(parts.join("\n")))
        }
        _ => Err(invalid(
            "prompt",
            "must be a string, an array of strings or an array of token ids",
        )),
    }
}

/// A Responses API `input` (a string or input items), after `instructions`.
fn parse_input(body: &Map<String, Value>, input: &Value) -> Result<Prompt> {
    let instructions = match body.get("instructions") {
        Some(Value::String(i)) if !i.is_empty() => Some(Message {
            role: "developer".into(),
            content: i.clone(),
        }),
        _ => None,
    };
    let msgs: Vec<Message> = match input {
        Value::String(s) => vec![Message {
            role: "user".into(),
            content: s.clone(),
        }],
        Value::Array(items) => role_messages(items, true).collect(),
        _ => {
            return Err(invalid(
                "input",
                "must be a string or an array of input items",
            ));
        }
    };
    Ok(Prompt::Messages(
        instructions.into_iter().chain(msgs).collect(),
    ))
}

/// The items of a `messages` (or, with `typed`, a Responses `input`) array that have a
/// string `role` and readable content; with `typed`, items whose `type` is set to anything
/// but `message` are skipped.
fn role_messages(items: &[Value], typed: bool) -> impl Iterator<Item = Message> + '_ {
    items.iter().filter_map(move |it| {
        let ty = it.get("type").and_then(Value::as_str);
        if typed && ty.is_some_and(|t| t != "message") {
            return None;
        }
        Some(Message {
            role: it.get("role").and_then(Value::as_str)?.to_owned(),
            content: it.get("content").and_then(content_text)?,
        })
    })
}

/// Flattens OpenAI content: a string, or a list of parts whose `type` is absent or one of
/// `text`, `input_text`, `output_text` and whose `text` is a string, joined with `\n`.
fn content_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Array(parts) => {
            let texts: Vec<&str> = parts
                .iter()
                .filter(|p| {
                    p.get("type")
                        .and_then(Value::as_str)
                        .is_none_or(|t| matches!(t, "text" | "input_text" | "output_text"))
                })
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect();
            if texts.is_empty() {
                None
            } else {
                Some(texts.join("\n"))
            }
        }
        _ => None,
    }
}

/// The body sent upstream and whether the router asked for usage on the client's behalf.
#[derive(Debug, Clone)]
pub struct UpstreamBody {
    /// Bytes to send; identical on every attempt.
    pub bytes: Bytes,
    /// The router set `stream_options.include_usage`; the usage-only chunk must be hidden
    /// from the client.
    pub injected_usage: bool,
}

impl ParsedRequest {
    /// A request whose body is not JSON (a `multipart/form-data` upload, [`Api::Audio`]):
    /// `raw` as received, its `model` form field, no prompt (empty [`Prompt::Text`] and
    /// [`ParsedRequest::prompt_text`]), no stream. [`ParsedRequest::upstream_body`] forwards
    /// `raw` unchanged: the model of a form is never rewritten.
    #[must_use]
    pub fn form(raw: Bytes, model: String) -> Self {
        Self {
            raw,
            body: Map::new(),
            model,
            stream: false,
            client_wants_usage: false,
            user: None,
            prompt: Prompt::Text(String::new()),
            max_output_tokens: None,
            prompt_text: String::new(),
        }
    }

    /// Builds the upstream body: `model` rewritten to `rewrite_model` when given, and for
    /// streaming requests `stream_options.include_usage = true` added when the client did not
    /// ask for it (other `stream_options` keys are kept). Without any change the original
    /// bytes are forwarded unchanged.
    #[must_use]
    pub fn upstream_body(&self, rewrite_model: Option<&str>) -> UpstreamBody {
        self.build_upstream_body(rewrite_model, true)
    }

    /// The upstream body of a Responses API request (`/v1/responses`): only `model` is
    /// rewritten. That API has no `stream_options.include_usage`; its streams always end with
    /// `response.completed`, which carries the usage.
    #[must_use]
    pub fn upstream_responses_body(&self, rewrite_model: Option<&str>) -> UpstreamBody {
        self.build_upstream_body(rewrite_model, false)
    }

    fn build_upstream_body(&self, rewrite_model: Option<&str>, may_inject: bool) -> UpstreamBody {
        let rewrite = rewrite_model.filter(|m| *m != self.model && !self.body.is_empty());
        let inject = may_inject && self.stream && !self.client_wants_usage;
        if rewrite.is_none() && !inject {
            return UpstreamBody {
                bytes: self.raw.clone(),
                injected_usage: false,
            };
        }
        let bytes = rewrite_members(&self.raw, rewrite, inject)
            .map_or_else(|| self.raw.clone(), Bytes::from);
        UpstreamBody {
            bytes,
            injected_usage: inject,
        }
    }
}

/// The members of a JSON object in their order (duplicates kept), each value as its raw
/// JSON text.
struct Members<'a>(Vec<(String, &'a RawValue)>);

impl<'de> serde::Deserialize<'de> for Members<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Members<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<Members<'de>, A::Error> {
                let mut members = Vec::new();
                while let Some(entry) = map.next_entry::<String, &'de RawValue>()? {
                    members.push(entry);
                }
                Ok(Members(members))
            }
        }
        d.deserialize_map(V)
    }
}

/// Writes the object `raw` again with every `model` member set to `model` (when given) and,
/// with `inject`, `include_usage: true` set in every `stream_options` object (a null
/// `stream_options` becomes `{"include_usage":true}`; one is appended when there is none;
/// [`parse_request`] refuses any other shape). Every other member is copied as its raw text: re-serializing parsed
/// values would change numbers that `f64` cannot hold exactly (a `seed` above 2^64, a long
/// decimal) before the engine sees them. `None` when `raw` is not a JSON object.
fn rewrite_members(raw: &[u8], model: Option<&str>, inject: bool) -> Option<Vec<u8>> {
    let Members(members) = serde_json::from_slice(raw).ok()?;
    let mut out = Vec::with_capacity(raw.len() + 32);
    let mut has_options = false;
    for (key, value) in &members {
        out.push(if out.is_empty() { b'{' } else { b',' });
        serde_json::to_writer(&mut out, key).ok()?;
        out.push(b':');
        match (key.as_str(), model) {
            ("model", Some(m)) => serde_json::to_writer(&mut out, m).ok()?,
            ("stream_options", _) if inject => {
                has_options = true;
                out.extend_from_slice(&with_include_usage(value));
            }
            _ => out.extend_from_slice(value.get().as_bytes()),
        }
    }
    if inject && !has_options {
        out.push(if out.is_empty() { b'{' } else { b',' });
        out.extend_from_slice(br#""stream_options":{"include_usage":true}"#);
    }
    if out.is_empty() {
        out.push(b'{');
    }
    out.push(b'}');
    Some(out)
}

/// `stream_options` with `include_usage: true`: the object's other members kept as they
/// were, but for `continuous_usage_stats: true` (vLLM reads it only with `include_usage`,
/// so the client that asked for no usage would get usage on every chunk once the router
/// asks for the final one), anything that is not an object replaced.
fn with_include_usage(value: &RawValue) -> Vec<u8> {
    let Ok(Members(members)) = serde_json::from_str::<Members<'_>>(value.get()) else {
        return br#"{"include_usage":true}"#.to_vec();
    };
    let kept = |(k, v): &&(String, &RawValue)| {
        k != "include_usage" && !(k == "continuous_usage_stats" && v.get().trim() == "true")
    };
    let mut out = vec![b'{'];
    for (key, v) in members.iter().filter(kept) {
        // A key serializes infallibly: it is a `String`.
        let _ = serde_json::to_writer(&mut out, key);
        out.push(b':');
        out.extend_from_slice(v.get().as_bytes());
        out.push(b',');
    }
    out.extend_from_slice(br#""include_usage":true}"#);
    out
}

#[cfg(test)]
mod tests;
