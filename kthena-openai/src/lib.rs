//! The OpenAI API as an LLM router reads it, without I/O: request bodies on the way in,
//! engine answers and server-sent event streams on the way out.
//!
//! This crate parses and rewrites bytes. It does not read sockets, build HTTP answers or pick
//! an engine: the host (the `kthena-router` crate, or any proxy such as the pingora example
//! gateway) does that and maps [`Error`] to its own status codes and error bodies. Start
//! with [`parse_request_at`] for a request and [`SseFilter`] for a streamed answer.
//!
//! # Requests
//!
//! [`parse_request_at`] reads a JSON object body into a [`ParsedRequest`]: the `model`
//! (required, a non-blank string), `stream` and `stream_options.include_usage` (booleans),
//! `user`, the [`Prompt`], and the most output tokens the request may make the engine
//! produce. The prompt is the member the request's path is served from
//! ([`prompt_member`]):
//!
//! | path | API | prompt member | read as |
//! |---|---|---|---|
//! | `/v1/chat/completions` | Chat Completions | `messages` | [`Prompt::Messages`], text parts joined with `\n`; a top-level `system` first |
//! | `/v1/messages` | Anthropic Messages | `messages` | as above (`system` is a string or text blocks) |
//! | `/v1/completions` | Completions | `prompt` | [`Prompt::Text`]: a string, or the items of an array (strings, token ids as their JSON text) joined with `\n` |
//! | `/v1/responses` | Responses | `input` | [`Prompt::Messages`]: a string as one `user` message, or the `message` items; `instructions` first as a `developer` message |
//!
//! Without a path ([`parse_request`]) the first present of `prompt`, `messages`, `input` is
//! the prompt, Go Kthena's order (`pkg/kthena-router/utils/utils.go` `ParsePrompt`).
//!
//! [`parse_request_for`] parses the body of any inference path by its [`Api`]
//! ([`Api::of_path`]: every `/v1/*` path but `/v1/models`). Besides the four above:
//!
//! | path | prompt | read as |
//! |---|---|---|
//! | `/v1/embeddings` | `input`, else `messages` | [`Prompt::Text`]: a string, or the items of an array (strings, token ids and arrays of token ids as their JSON text) joined with `\n`; messages as chat |
//! | `/v1/rerank` | `query`, `documents` | [`Prompt::Text`]: the query, then the documents one per line (an object document by its `text`) |
//! | `/v1/score` | `text_1`, `text_2` | as rerank |
//! | `/v1/audio/transcriptions`, `/v1/audio/translations` | none | a `multipart/form-data` body: the host reads the `model` form field and builds [`ParsedRequest::form`] |
//! | any other `/v1/*` | first of `prompt`, `messages`, `input` that reads, else none | as above |
//!
//! Without a prompt the request is scheduled on load alone: [`ParsedRequest::prompt_text`]
//! is empty.
//!
//! [`ParsedRequest::prompt_text`] is the text a token estimate and prefix hashing read: the
//! prompt rendered in ChatML ([`Prompt::render`]), then every other prompt-bearing member
//! present and what chat templates render besides message contents (tool definitions, tool
//! calls, refusals, non-message input items), one per line. [`estimate_tokens`] turns it
//! into tokens as Go Kthena estimates them (`ceil(chars / 4)`).
//! [`ParsedRequest::max_output_tokens`] reads `max_completion_tokens`, `max_tokens` or
//! `max_output_tokens` as vLLM does, times the choices per prompt (`n`, `best_of`): tokens.
//!
//! [`ParsedRequest::upstream_body`] builds the body sent to the engine: the `model`
//! rewritten and, for a stream whose client did not ask for usage,
//! `stream_options.include_usage` set so that the router can count the tokens
//! ([`UpstreamBody::injected_usage`] then tells the filter to hide that chunk). Every other
//! member is copied as its original text; without a change the received bytes go as they
//! are.
//!
//! # Answers
//!
//! [`usage_of`] reads the token [`Usage`] of a JSON answer (`usage`, or the Responses API's
//! `response.usage`; prompt and completion tokens). [`ResponseProbe`] reads the same without
//! building a JSON tree. [`SseFilter`] passes a `text/event-stream` answer through chunk by
//! chunk: it forwards token chunks as the same bytes (no copy, no parse), reads the usage
//! chunk, drops it when the usage was injected, and notes `data: [DONE]` and the engine's
//! error events.
//!
//! # Engine tokenization
//!
//! [`remote_body`] builds the body of an engine's `POST /tokenize` for a [`Prompt`], for a
//! router that has no local tokenizer for the model.

mod api;
mod error;
mod request;
mod response;
mod sse;
mod tokenize;

pub use api::Api;
pub use error::{Error, Result};
pub use request::{
    Message, ParsedRequest, Prompt, UpstreamBody, estimate_tokens, parse_request, parse_request_at,
    parse_request_for, prompt_member,
};
pub use response::{ResponseProbe, Usage, usage_from, usage_of};
pub use sse::SseFilter;
pub use tokenize::remote_body;
