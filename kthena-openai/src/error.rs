//! Why a request body cannot be parsed.

/// A request body this crate cannot parse; each variant is a client error (an HTTP 400 with
/// an OpenAI error body, as the router answers it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The request body is not valid JSON, or not a JSON object.
    #[error("invalid JSON body: {reason}")]
    BadJson {
        /// The decoder's message.
        reason: String,
    },
    /// The body has no non-blank string `model` field.
    #[error("missing or empty `model` field")]
    MissingModel,
    /// A field has the wrong shape.
    #[error("invalid field `{param}`: {reason}")]
    InvalidField {
        /// The JSON field name (`stream`, `stream_options.include_usage`, `messages`, ...).
        param: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// The body carries none of `prompt`, `messages`, `input`.
    #[error("no prompt found: the body needs `prompt`, `messages` or `input`")]
    PromptNotFound,
}

/// The result of this crate's fallible functions.
pub type Result<T, E = Error> = std::result::Result<T, E>;
