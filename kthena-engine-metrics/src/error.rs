//! The errors of reading an engine's answers.

/// Why an engine's answer could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A metrics answer is not Prometheus text.
    #[error("unparsable metrics: {0}")]
    MetricsSyntax(#[source] std::io::Error),
    /// A metrics answer holds no sample at all.
    #[error("unparsable metrics: no sample found")]
    NoMetricSample,
    /// A `/v1/models` answer is not JSON.
    #[error("invalid /v1/models: {0}")]
    ModelsJson(#[source] serde_json::Error),
    /// A `/v1/models` answer has no `data` list.
    #[error("invalid /v1/models: no data list")]
    ModelsShape,
}

/// The result of reading an engine's answer.
pub type Result<T, E = Error> = std::result::Result<T, E>;
