//! Prometheus metrics with vLLM 0.32's names, help texts, labels and buckets (or SGLang's
//! names in SGLang mode), exposed with `prometheus-client`.
//!
//! vLLM labels every series with `engine="0"` and `model_name`; SGLang with `model_name`.
//! Latencies are model time in seconds (see [`crate::Config::time_scale`]).

use std::borrow::Cow;
use std::sync::Mutex;
use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::config::{Config, Flavor, Profile};

type Labels = Vec<(String, String)>;

/// vLLM's `finished_reason` label values of `vllm:request_success_total`, in its order.
const FINISHED_REASONS: [&str; 5] = ["stop", "length", "abort", "error", "repetition"];

/// vLLM `vllm:time_to_first_token_seconds` buckets (`vllm/v1/metrics/loggers.py`).
const TTFT_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
];
/// vLLM `vllm:inter_token_latency_seconds` buckets.
const ITL_BUCKETS: &[f64] = &[
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
    40.0, 80.0,
];
/// vLLM request-latency buckets (`e2e_request_latency`, `request_queue_time`).
const REQUEST_BUCKETS: &[f64] = &[
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
    480.0, 960.0, 1920.0, 7680.0,
];
/// vLLM `iteration_tokens_total` buckets.
const ITERATION_BUCKETS: &[f64] = &[
    1.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0, 16384.0,
];

/// vLLM's 1-2-5 series up to `max` (`build_1_2_5_buckets`).
fn buckets_1_2_5(max: usize) -> Vec<f64> {
    let mut out = Vec::new();
    let mut exp = 1.0;
    loop {
        for m in [1.0, 2.0, 5.0] {
            let v = m * exp;
            if v > max as f64 {
                return out;
            }
            out.push(v);
        }
        exp *= 10.0;
    }
}

/// The engine's metrics. Shared between the engine loop (writes) and `/metrics` (reads).
#[derive(Debug)]
pub(crate) struct Metrics {
    registry: Registry,
    running: Gauge,
    waiting: Gauge,
    kv_usage: Gauge<f64, AtomicU64>,
    /// `sglang:kv_available_tokens` with the pool size in tokens.
    kv_available_tokens: Option<(Gauge, usize)>,
    ttft: Histogram,
    itl: Histogram,
    e2e: Histogram,
    queue: Histogram,
    iteration_tokens: Histogram,
    request_prompt: Histogram,
    request_generation: Histogram,
    prompt_tokens: Counter,
    generation_tokens: Counter,
    prefix_queries: Counter,
    prefix_hits: Counter,
    preemptions: Counter,
    /// `request_success_total{finished_reason}` (vLLM) or `num_requests_total` (SGLang).
    success: Family<Labels, Counter>,
    /// vLLM flavor: pre-created `finished_reason` series, and aborts counted.
    vllm: bool,
    lora_info: Option<Family<Labels, Gauge<f64, AtomicU64>>>,
    lora_state: Mutex<LoraInfoState>,
    max_lora: usize,
}

#[derive(Debug, Default)]
struct LoraInfoState {
    running: Vec<String>,
    waiting: Vec<String>,
    initialized: bool,
}

fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

fn hist(buckets: &[f64]) -> Histogram {
    Histogram::new(buckets.iter().copied())
}

/// vLLM's `vllm:cache_config_info`: one series at 1 whose labels describe the KV cache.
fn vllm_cache_info(p: &Profile) -> Family<Labels, Gauge> {
    let cache_info = Family::<Labels, Gauge>::default();
    let mut info: Labels = vec![
        ("block_size".to_owned(), p.block_size.to_string()),
        ("cache_dtype".to_owned(), "auto".to_owned()),
        ("enable_prefix_caching".to_owned(), "True".to_owned()),
    ];
    info.extend([
        ("gpu_memory_utilization".to_owned(), "0.9".to_owned()),
        (
            "kv_cache_size_tokens".to_owned(),
            (p.num_gpu_blocks * p.block_size).to_string(),
        ),
        ("num_cpu_blocks".to_owned(), "None".to_owned()),
        ("num_gpu_blocks".to_owned(), p.num_gpu_blocks.to_string()),
        ("prefix_caching_hash_algo".to_owned(), "xxhash".to_owned()),
    ]);
    cache_info.get_or_create(&info).set(1);
    cache_info
}

impl Metrics {
    /// Builds and registers every family for `cfg.flavor`.
    ///
    /// `prometheus-client` ends every help text with a period: the texts here omit theirs.
    pub(crate) fn new(cfg: &Config) -> Self {
        let vllm = cfg.flavor == Flavor::Vllm;
        let labels: Vec<(Cow<'static, str>, Cow<'static, str>)> = if vllm {
            vec![
                (Cow::Borrowed("engine"), Cow::Borrowed("0")),
                (Cow::Borrowed("model_name"), Cow::Owned(cfg.model.clone())),
            ]
        } else {
            vec![(Cow::Borrowed("model_name"), Cow::Owned(cfg.model.clone()))]
        };
        let mut m = Self::unregistered(cfg);
        let mut root = Registry::default();
        let registry = root.sub_registry_with_labels(labels.into_iter());
        if vllm {
            m.register_vllm(registry);
            // vLLM labels this info metric with `engine` only (no `model_name`).
            root.sub_registry_with_labels(std::iter::once((
                Cow::Borrowed("engine"),
                Cow::Borrowed("0"),
            )))
            .register(
                "vllm:cache_config_info",
                "Information of the LLMEngine CacheConfig",
                vllm_cache_info(&cfg.profile),
            );
        } else {
            m.register_sglang(registry, &cfg.profile);
        }
        m.registry = root;
        m
    }

    /// Every series of `cfg.flavor`, not registered yet (in an empty registry).
    fn unregistered(cfg: &Config) -> Self {
        let vllm = cfg.flavor == Flavor::Vllm;
        let p = &cfg.profile;
        let success = Family::<Labels, Counter>::default();
        if vllm {
            // vLLM creates one series per finish reason at startup, all at 0.
            for reason in FINISHED_REASONS {
                drop(
                    success.get_or_create(&vec![("finished_reason".to_owned(), reason.to_owned())]),
                );
            }
        }
        let len_buckets = buckets_1_2_5(p.max_model_len);
        Self {
            registry: Registry::default(),
            running: Gauge::default(),
            waiting: Gauge::default(),
            kv_usage: Gauge::<f64, AtomicU64>::default(),
            kv_available_tokens: (!vllm)
                .then(|| (Gauge::default(), p.num_gpu_blocks * p.block_size)),
            ttft: hist(TTFT_BUCKETS),
            itl: hist(ITL_BUCKETS),
            e2e: hist(REQUEST_BUCKETS),
            queue: hist(REQUEST_BUCKETS),
            iteration_tokens: hist(ITERATION_BUCKETS),
            request_prompt: hist(&len_buckets),
            request_generation: hist(&len_buckets),
            prompt_tokens: Counter::default(),
            generation_tokens: Counter::default(),
            prefix_queries: Counter::default(),
            prefix_hits: Counter::default(),
            preemptions: Counter::default(),
            success,
            vllm,
            lora_info: vllm.then(Family::<Labels, Gauge<f64, AtomicU64>>::default),
            lora_state: Mutex::new(LoraInfoState::default()),
            max_lora: p.max_loras,
        }
    }

    /// Registers the vLLM families, in vLLM's names and help texts.
    fn register_vllm(&self, registry: &mut Registry) {
        registry.register(
            "vllm:num_requests_running",
            "Number of requests in model execution batches",
            self.running.clone(),
        );
        registry.register(
            "vllm:num_requests_waiting",
            "Number of requests waiting to be processed",
            self.waiting.clone(),
        );
        registry.register(
            "vllm:kv_cache_usage_perc",
            "KV-cache usage. 1 means 100 percent usage",
            self.kv_usage.clone(),
        );
        registry.register(
            "vllm:prefix_cache_queries",
            "Prefix cache queries, in terms of number of queried tokens",
            self.prefix_queries.clone(),
        );
        registry.register(
            "vllm:prefix_cache_hits",
            "Prefix cache hits, in terms of number of cached tokens",
            self.prefix_hits.clone(),
        );
        registry.register(
            "vllm:num_preemptions",
            "Cumulative number of preemption from the engine",
            self.preemptions.clone(),
        );
        registry.register(
            "vllm:prompt_tokens",
            "Number of prefill tokens processed",
            self.prompt_tokens.clone(),
        );
        registry.register(
            "vllm:generation_tokens",
            "Number of generation tokens processed",
            self.generation_tokens.clone(),
        );
        registry.register(
            "vllm:request_success",
            "Count of successfully processed requests",
            self.success.clone(),
        );
        self.register_vllm_histograms(registry);
        if let Some(fam) = &self.lora_info {
            registry.register(
                "vllm:lora_requests_info",
                "Running stats on lora requests",
                fam.clone(),
            );
        }
    }

    /// Registers vLLM's request, iteration and latency histograms.
    fn register_vllm_histograms(&self, registry: &mut Registry) {
        registry.register(
            "vllm:request_prompt_tokens",
            "Number of prefill tokens processed",
            self.request_prompt.clone(),
        );
        registry.register(
            "vllm:request_generation_tokens",
            "Number of generation tokens processed",
            self.request_generation.clone(),
        );
        registry.register(
            "vllm:iteration_tokens_total",
            "Histogram of number of tokens per engine_step",
            self.iteration_tokens.clone(),
        );
        registry.register(
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds",
            self.ttft.clone(),
        );
        registry.register(
            "vllm:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds",
            self.itl.clone(),
        );
        registry.register(
            "vllm:e2e_request_latency_seconds",
            "Histogram of e2e request latency in seconds",
            self.e2e.clone(),
        );
        registry.register(
            "vllm:request_queue_time_seconds",
            "Histogram of time spent in WAITING phase for request",
            self.queue.clone(),
        );
    }

    /// Registers the SGLang families, in SGLang's names and help texts.
    fn register_sglang(&self, registry: &mut Registry, p: &Profile) {
        registry.register(
            "sglang:num_running_reqs",
            "The number of running requests",
            self.running.clone(),
        );
        registry.register(
            "sglang:num_queue_reqs",
            "The number of requests in the waiting queue",
            self.waiting.clone(),
        );
        registry.register(
            "sglang:token_usage",
            "The token usage",
            self.kv_usage.clone(),
        );
        if let Some((avail, _)) = &self.kv_available_tokens {
            registry.register(
                "sglang:kv_available_tokens",
                "The number of available KV cache tokens",
                avail.clone(),
            );
        }
        registry.register(
            "sglang:prompt_tokens",
            "Number of prefill tokens processed",
            self.prompt_tokens.clone(),
        );
        registry.register(
            "sglang:generation_tokens",
            "Number of generation tokens processed",
            self.generation_tokens.clone(),
        );
        registry.register(
            "sglang:cached_tokens",
            "Number of cached prompt tokens",
            self.prefix_hits.clone(),
        );
        registry.register(
            "sglang:num_requests",
            "Number of requests processed",
            self.success.clone(),
        );
        registry.register(
            "sglang:time_to_first_token_seconds",
            "Histogram of time to first token in seconds",
            self.ttft.clone(),
        );
        registry.register(
            "sglang:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds",
            self.itl.clone(),
        );
        registry.register(
            "sglang:e2e_request_latency_seconds",
            "Histogram of End-to-end request latency in seconds",
            self.e2e.clone(),
        );
        registry.register(
            "sglang:queue_time_seconds",
            "Histogram of queueing time in seconds",
            self.queue.clone(),
        );
        let cache_info = Family::<Labels, Gauge>::default();
        let info: Labels = vec![
            ("num_pages".to_owned(), p.num_gpu_blocks.to_string()),
            ("page_size".to_owned(), p.block_size.to_string()),
        ];
        cache_info.get_or_create(&info).set(1);
        registry.register(
            "sglang:cache_config_info",
            "Cache configuration",
            cache_info,
        );
    }

    /// Text exposition (OpenMetrics text format, as `prometheus-client` writes it).
    pub(crate) fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &self.registry);
        out
    }

    /// Sets the scheduler gauges after a step; refreshes `vllm:lora_requests_info` when the
    /// adapter sets changed (its value is the Unix time of the change, as in vLLM).
    pub(crate) fn set_state(
        &self,
        running: usize,
        waiting: usize,
        kv_usage: f64,
        running_loras: &[String],
        waiting_loras: &[String],
    ) {
        self.running.set(i64::try_from(running).unwrap_or(i64::MAX));
        self.waiting.set(i64::try_from(waiting).unwrap_or(i64::MAX));
        self.kv_usage.set(kv_usage);
        if let Some((g, tokens)) = &self.kv_available_tokens {
            let free = (1.0 - kv_usage) * *tokens as f64;
            g.set(free.round() as i64);
        }
        if let Some(fam) = &self.lora_info {
            let mut st = self
                .lora_state
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if !st.initialized || st.running != running_loras || st.waiting != waiting_loras {
                st.initialized = true;
                st.running = running_loras.to_vec();
                st.waiting = waiting_loras.to_vec();
                fam.clear();
                fam.get_or_create(&vec![
                    ("max_lora".to_owned(), self.max_lora.to_string()),
                    ("running_lora_adapters".to_owned(), running_loras.join(",")),
                    ("waiting_lora_adapters".to_owned(), waiting_loras.join(",")),
                ])
                .set(unix_now());
            }
        }
    }

    pub(crate) fn observe_prefix(&self, queried: usize, hits: usize) {
        self.prefix_queries.inc_by(queried as u64);
        self.prefix_hits.inc_by(hits as u64);
    }

    pub(crate) fn inc_preemptions(&self) {
        self.preemptions.inc();
    }

    pub(crate) fn inc_prompt(&self, n: usize) {
        self.prompt_tokens.inc_by(n as u64);
    }

    pub(crate) fn inc_generation(&self, n: usize) {
        self.generation_tokens.inc_by(n as u64);
    }

    pub(crate) fn observe_iteration_tokens(&self, n: usize) {
        self.iteration_tokens.observe(n as f64);
    }

    pub(crate) fn observe_ttft(&self, s: f64) {
        self.ttft.observe(s);
    }

    pub(crate) fn observe_itl(&self, s: f64) {
        self.itl.observe(s);
    }

    pub(crate) fn observe_queue(&self, s: f64) {
        self.queue.observe(s);
    }

    pub(crate) fn observe_e2e(&self, s: f64) {
        self.e2e.observe(s);
    }

    pub(crate) fn observe_request(&self, prompt: usize, generated: usize) {
        self.request_prompt.observe(prompt as f64);
        self.request_generation.observe(generated as f64);
        self.finished("length");
    }

    /// A request aborted because its client went away: vLLM counts it in
    /// `request_success_total{finished_reason="abort"}`.
    pub(crate) fn inc_aborted(&self) {
        if self.vllm {
            self.finished("abort");
        }
    }

    fn finished(&self, reason: &str) {
        self.success
            .get_or_create(&vec![("finished_reason".to_owned(), reason.to_owned())])
            .inc();
    }
}

#[cfg(test)]
mod tests;
