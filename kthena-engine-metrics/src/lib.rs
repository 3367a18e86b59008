//! What inference engines report about themselves, read without I/O.
//!
//! An engine (vLLM, SGLang, llama.cpp's `llama-server`) answers `GET /metrics` with
//! Prometheus text and `GET /v1/models` with its model cards. This crate reads those answers;
//! fetching them (HTTP clients, timeouts, scrape intervals) stays with the host: the router
//! scrapes every endpoint for scheduling, the controller's autoscaler scrapes pods.
//!
//! Where to start:
//!
//! * [`parse_metrics`]: one answer into an [`EngineSample`] (running and waiting requests,
//!   KV-cache usage, the TTFT and TPOT histograms' sums and counts) under an engine's
//!   [`EngineMetricNames`] ([`VLLM`], [`SGLANG`]; llama.cpp's `llamacpp:*` families are
//!   recognised by themselves, see [`llamacpp_sample`]). [`interval_mean_ms`] turns two
//!   scrapes of a histogram into the mean over the interval (Go Kthena
//!   `pkg/kthena-router/backend/vllm/metrics.go`).
//! * [`family`]: one metric family's value in an answer (counters and gauges summed over
//!   their series, a histogram's first series), as Go Kthena's autoscaler reads it
//!   (`pkg/autoscaler/autoscaler/metric_collector.go`).
//! * [`parse_models`]: `/v1/models` into a [`ModelList`] (ids and LoRA adapters).
//!
//! The crate does not know Kubernetes or the engines' addresses, and holds no state between
//! scrapes: a host keeps the previous sample where a delta needs it.

mod engine;
mod error;
mod family;
mod models;
mod series;

pub use engine::llamacpp::{LLAMACPP_PREFIX, llamacpp_sample};
pub use engine::{EngineMetricNames, EngineSample, SGLANG, VLLM, interval_mean_ms, parse_metrics};
pub use error::{Error, Result};
pub use family::{Family, HistogramSamples, family};
pub use models::{ModelList, parse_models};
pub use series::{Series, series};
