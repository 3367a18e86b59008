//! Simulator configuration: one struct, parsed from flags (`kthena-sim --help`) or built in code.
//!
//! Every default below is the default profile: a 7B model (Qwen2.5-7B-Instruct, bf16) on one
//! H100-class GPU (80 GB HBM3, 3.35 TB/s). The source of each number is given on its field and
//! in `docs/simulator.md`.

use std::net::IpAddr;
use std::path::PathBuf;

use clap::builder::BoolishValueParser;
use clap::{ArgAction, Args, ValueEnum};
use serde::{Deserialize, Serialize};

use crate::hash::HashAlgo;
use crate::{Error, Result};

/// Which engine the simulator pretends to be: decides metric names and the default port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ValueEnum, Default)]
#[serde(rename_all = "lowercase")]
pub enum Flavor {
    /// vLLM 0.32: `vllm:*` metrics, NIXL-style `kv_transfer_params` for P/D.
    #[default]
    Vllm,
    /// SGLang: `sglang:*` metrics, `bootstrap_room`/`bootstrap_host` for P/D.
    Sglang,
}

/// Role of this engine in prefill/decode disaggregation (as Go Kthena's connectors,
/// `pkg/kthena-router/connectors/*`, drive it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ValueEnum, Default)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// A normal engine: prefill and decode.
    #[default]
    Both,
    /// Prefill-only: a request marked for remote decode (vLLM `kv_transfer_params`
    /// `do_remote_decode`, or SGLang `bootstrap_room`) returns after one token with the
    /// transfer parameters the decode side needs.
    Prefill,
    /// Decode-only: a request marked for remote prefill (vLLM `do_remote_prefill`, or SGLang
    /// `bootstrap_room`) skips prefill compute and instead waits the KV transfer latency.
    Decode,
}

/// Encoding of KV events inside a batch (vLLM's `vllm/distributed/kv_events.py`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ValueEnum, Default)]
#[serde(rename_all = "lowercase")]
pub enum KvEventsFormat {
    /// Positional arrays: `["BlockStored", hashes, parent, token_ids, block_size, lora_id,
    /// medium, lora_name]` (vLLM before PR #42892, and SGLang).
    Array,
    /// Maps with a `"type"` key, as vLLM 0.32 emits (the captured sample).
    #[default]
    Map,
}

/// Fault injection (all off by default). Can be changed at run time with
/// [`crate::SimHandle::set_faults`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Args)]
#[serde(default)]
pub struct Faults {
    /// Fraction of generation requests (0..=1) answered with an injected error instead.
    #[arg(long = "fault-error-rate", default_value_t = 0.0)]
    pub error_rate: f64,
    /// Status codes the injected errors use, picked uniformly (comma separated).
    #[arg(long = "fault-error-codes", value_delimiter = ',', default_values_t = vec![500u16])]
    pub error_codes: Vec<u16>,
    /// Delay before the first response byte of every generation request, in ms of wall time
    /// (not scaled by `--time-scale`).
    #[arg(long = "fault-first-byte-delay-ms", default_value_t = 0)]
    pub first_byte_delay_ms: u64,
    /// Drop the connection (no terminating chunk, no `[DONE]`) after this many SSE chunks of a
    /// streaming response; unset means never.
    #[arg(long = "fault-drop-after-chunks")]
    pub drop_after_chunks: Option<u32>,
    /// Answer `GET /metrics` with this status and a plain-text body instead of the metrics
    /// (an engine whose metrics endpoint fails); unset means never.
    #[arg(long = "fault-metrics-status")]
    pub metrics_status: Option<u16>,
}

impl Default for Faults {
    fn default() -> Self {
        Self {
            error_rate: 0.0,
            error_codes: vec![500],
            first_byte_delay_ms: 0,
            drop_after_chunks: None,
            metrics_status: None,
        }
    }
}

/// Cost-model profile. Defaults: Qwen2.5-7B-Instruct (bf16) on one H100 SXM 80 GB; the sources
/// are on each field and in `docs/simulator.md`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Args)]
#[serde(default)]
pub struct Profile {
    /// Maximum sequences in the running batch (vLLM `--max-num-seqs`; vLLM's default for the
    /// OpenAI server on a GPU with >= 70 GiB that is not an A100 is 1024,
    /// `EngineArgs.get_batch_defaults` in `vllm/engine/arg_utils.py`).
    #[arg(long, default_value_t = 1024)]
    pub max_num_seqs: usize,
    /// Token budget per engine step for chunked prefill (vLLM `--max-num-batched-tokens`;
    /// vLLM's default for the OpenAI server on H100-class GPUs is 8192, same source).
    #[arg(long, default_value_t = 8192)]
    pub max_num_batched_tokens: usize,
    /// Tokens per KV block (vLLM `--block-size`, default 16 on CUDA).
    #[arg(long, default_value_t = 16)]
    pub block_size: usize,
    /// KV cache size in blocks. Default: 0.9 x 80 GiB (vLLM `gpu_memory_utilization` 0.9)
    /// minus 15.2 GB of bf16 weights minus ~4 GB activations, divided by 57,344 B/token
    /// (2 x 28 layers x 4 KV heads x 128 dim x 2 B), divided by 16 tokens/block.
    #[arg(long, default_value_t = 62_000)]
    pub num_gpu_blocks: usize,
    /// Maximum context length, prompt plus output, in tokens (Qwen2.5-7B
    /// `max_position_embeddings` = 32768).
    #[arg(long, default_value_t = 32_768)]
    pub max_model_len: usize,
    /// Fixed cost of a step that contains prefill tokens, in ms: one forward pass reads all
    /// 15.2 GB of weights (4.5 ms at 3.35 TB/s) however few tokens it computes.
    #[arg(long, default_value_t = 5.0)]
    pub prefill_overhead_ms: f64,
    /// Prefill cost per uncached prompt token, in ms: 2 x 7.6e9 FLOP/token at 50% of the
    /// H100 SXM's 989 TFLOP/s dense bf16 is 0.031 ms (33k tokens/s).
    #[arg(long, default_value_t = 0.03)]
    pub prefill_per_token_ms: f64,
    /// Base time of a decode step, in ms: reading 15.2 GB of weights at 3.35 TB/s is 4.5 ms;
    /// batch-1 decode measured on vLLM runs at ~77% of the bandwidth roofline, giving 5.9 ms
    /// (SMG's mock worker also uses 6.0).
    #[arg(long, default_value_t = 6.0)]
    pub decode_base_ms: f64,
    /// Extra decode-step time per running sequence, in ms: 15.2 GFLOP per token at 50% of
    /// 989 TFLOP/s (0.031 ms) plus reading a 1k-token context's 59 MB of KV at 3.35 TB/s
    /// (0.018 ms).
    #[arg(long, default_value_t = 0.05)]
    pub decode_per_seq_ms: f64,
    /// Maximum LoRA adapters resident on the GPU at once (vLLM `--max-loras`, default 1).
    #[arg(long, default_value_t = 1)]
    pub max_loras: usize,
    /// Time to make a non-resident LoRA adapter resident, in ms (reported per-swap reload
    /// overhead of vLLM multi-LoRA serving with `max_loras` below the adapter count).
    #[arg(long, default_value_t = 50.0)]
    pub lora_load_ms: f64,
    /// Fixed KV-transfer latency for a remote-prefilled request on a decode engine, in ms.
    #[arg(long, default_value_t = 2.0)]
    pub kv_transfer_base_ms: f64,
    /// KV-transfer cost per prompt token on a decode engine, in ms: 57,344 B/token over a
    /// 400 Gb/s (50 GB/s) RDMA NIC is 0.00115 ms.
    #[arg(long, default_value_t = 0.00115)]
    pub kv_transfer_per_token_ms: f64,
}

impl Default for Profile {
    fn default() -> Self {
        Self {
            max_num_seqs: 1024,
            max_num_batched_tokens: 8192,
            block_size: 16,
            num_gpu_blocks: 62_000,
            max_model_len: 32_768,
            prefill_overhead_ms: 5.0,
            prefill_per_token_ms: 0.03,
            decode_base_ms: 6.0,
            decode_per_seq_ms: 0.05,
            max_loras: 1,
            lora_load_ms: 50.0,
            kv_transfer_base_ms: 2.0,
            kv_transfer_per_token_ms: 0.00115,
        }
    }
}

impl Profile {
    /// The same model (Qwen2.5-7B-Instruct, bf16) on one NVIDIA L40S 48 GB, a slower and
    /// smaller GPU than the default H100 SXM, for heterogeneous pools. From the L40S
    /// datasheet (362 TFLOP/s dense bf16, 864 GB/s GDDR6, 48 GB) with the default profile's
    /// rules:
    ///
    /// * `prefill_per_token_ms` 0.084: 15.2 GFLOP per token at 50% of 362 TFLOP/s;
    /// * `prefill_overhead_ms` 17.6: the 15.2 GB of weights read once at 864 GB/s;
    /// * `decode_base_ms` 22.8: that roofline at 77% (the H100 profile's measured ratio);
    /// * `decode_per_seq_ms` 0.15: 15.2 GFLOP at 50% of peak (0.084 ms) plus a 1k-token
    ///   context's 59 MB of KV at 864 GB/s (0.068 ms);
    /// * `num_gpu_blocks` 28,000: 0.9 × 48 GB − 15.2 GB of weights − ~2.5 GB of activations,
    ///   at 57,344 B per token, in blocks of 16 tokens;
    /// * `max_num_seqs` 256 and `max_num_batched_tokens` 2048: vLLM's OpenAI-server defaults
    ///   on a GPU under 70 GiB (`EngineArgs.get_batch_defaults` in
    ///   `vllm/engine/arg_utils.py`).
    ///
    /// Prefill is 2.8 times and a decode step 3.8 times slower than the default profile's.
    #[must_use]
    pub fn l40s() -> Self {
        Self {
            max_num_seqs: 256,
            max_num_batched_tokens: 2048,
            num_gpu_blocks: 28_000,
            prefill_overhead_ms: 17.6,
            prefill_per_token_ms: 0.084,
            decode_base_ms: 22.8,
            decode_per_seq_ms: 0.15,
            ..Self::default()
        }
    }
}

/// The whole simulator configuration. `Config::default()` equals the flag defaults.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Args)]
#[serde(default)]
pub struct Config {
    /// Address to bind the HTTP server (and the KV-event publisher) on.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: IpAddr,
    /// HTTP port; 0 picks a free port.
    #[arg(long, default_value_t = 8000)]
    pub port: u16,
    /// Served model name (`/v1/models` id and the `model_name` metric label).
    #[arg(long, default_value = "Qwen/Qwen2.5-7B-Instruct")]
    pub model: String,
    /// Engine flavor: metric names and P/D protocol.
    #[arg(long, value_enum, default_value_t = Flavor::Vllm)]
    pub flavor: Flavor,
    /// P/D role of this engine.
    #[arg(long, value_enum, default_value_t = Role::Both)]
    pub role: Role,
    /// Model time runs this many times faster than wall time (1 = real time). Latencies in
    /// metrics and in every formula are model time; only sleeps are divided by this.
    #[arg(long, default_value_t = 1.0)]
    pub time_scale: f64,
    /// Seed for generated tokens and fault injection.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Path to a Hugging Face `tokenizer.json` (a `tokenizer_config.json` next to it supplies
    /// the chat template); unset uses the built-in fallback tokenizer.
    #[arg(long)]
    pub tokenizer: Option<PathBuf>,
    /// Output tokens when a chat request sets no `max_tokens` (vLLM would use the rest of the
    /// context; a simulator needs a bound). Completions default to 16, as in vLLM.
    #[arg(long, default_value_t = 128)]
    pub default_max_tokens: usize,
    /// Publish KV events over ZMQ PUB on this port (bound on `--host`); unset disables them.
    #[arg(long)]
    pub kv_events_port: Option<u16>,
    /// Encoding of KV events.
    #[arg(long, value_enum, default_value_t = KvEventsFormat::Map)]
    pub kv_events_format: KvEventsFormat,
    /// ZMQ topic of KV-event messages; unset uses `kv@<host>@<model>`.
    #[arg(long)]
    pub kv_events_topic: Option<String>,
    /// Serve vLLM's KV-event replay on a ZMQ ROUTER socket at this port (bound on `--host`;
    /// 0 picks a free port): a request `[identity, "", start_seq]` is answered with every
    /// buffered batch from `start_seq` on, then the end marker (`vllm-project/vllm`
    /// `vllm/distributed/kv_events.py`, `ZmqEventPublisher`). Needs `--kv-events-port`.
    #[arg(long)]
    pub kv_events_replay_port: Option<u16>,
    /// Batches the replay buffer keeps (the newest; vLLM's `buffer_steps`, default 10,000).
    #[arg(long, default_value_t = 10_000)]
    pub kv_events_buffer_steps: usize,
    /// Block-hash algorithm of the prefix cache and KV events (vLLM's
    /// `--prefix-caching-hash-algo`; vLLM's default is `sha256`).
    #[arg(long, value_enum, default_value_t = HashAlgo::Sha256)]
    pub prefix_caching_hash_algo: HashAlgo,
    /// Seed of the block-hash chain (`NONE_HASH = H(seed)`), a string as vLLM reads
    /// `PYTHONHASHSEED` (also read from that variable); unset draws a random `NONE_HASH` per
    /// process, as vLLM does.
    #[arg(long, env = "PYTHONHASHSEED")]
    pub hash_seed: Option<String>,
    /// KV events carry int block hashes (the digest's low 64 bits) when true and the digest
    /// bytes when false (vLLM's `VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES`, default 1; also read
    /// from that variable).
    #[arg(
        long,
        env = "VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES",
        default_value_t = true,
        value_parser = BoolishValueParser::new(),
        action = ArgAction::Set
    )]
    pub kv_events_use_int_block_hashes: bool,
    /// LoRA adapters loaded at start, comma separated: `name=path` as vLLM, or a bare name
    /// (path = name).
    #[arg(long, value_delimiter = ',')]
    pub lora_modules: Vec<String>,
    /// Largest accepted request body in bytes (default 64 MiB, above kthena-router's 10 MiB
    /// `maxBodyBytes`); larger bodies are answered 413 in vLLM's error shape. vLLM itself sets
    /// no limit.
    #[arg(long, default_value_t = 64 * 1024 * 1024)]
    pub max_body_bytes: usize,
    /// Model loading time in ms of wall time (not scaled by `--time-scale`): the server
    /// listens at once but, until the delay has passed, `/health` answers 503 and every
    /// other path except `/metrics` answers 503 `The model is still loading` (each such
    /// request is counted, [`crate::SimHandle::requests_while_loading`]). Stands for an
    /// engine that takes minutes to load its weights; default 0 (ready at once).
    #[arg(long, default_value_t = 0)]
    pub startup_delay_ms: u64,
    /// Cost-model profile.
    #[command(flatten)]
    pub profile: Profile,
    /// Fault injection.
    #[command(flatten)]
    pub faults: Faults,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            host: IpAddr::from([127, 0, 0, 1]),
            port: 8000,
            model: "Qwen/Qwen2.5-7B-Instruct".to_owned(),
            flavor: Flavor::Vllm,
            role: Role::Both,
            time_scale: 1.0,
            seed: 0,
            tokenizer: None,
            default_max_tokens: 128,
            kv_events_port: None,
            kv_events_format: KvEventsFormat::Map,
            kv_events_topic: None,
            kv_events_replay_port: None,
            kv_events_buffer_steps: 10_000,
            prefix_caching_hash_algo: HashAlgo::Sha256,
            hash_seed: None,
            kv_events_use_int_block_hashes: true,
            lora_modules: Vec::new(),
            max_body_bytes: 64 * 1024 * 1024,
            startup_delay_ms: 0,
            profile: Profile::default(),
            faults: Faults::default(),
        }
    }
}

impl Config {
    /// Checks value ranges.
    ///
    /// # Errors
    /// [`Error::Config`] naming the first invalid field.
    pub fn validate(self) -> Result<Self> {
        let p = &self.profile;
        let bad = |field: &str, why: &str| {
            Err(Error::Config {
                field: field.to_owned(),
                reason: why.to_owned(),
            })
        };
        if !(self.time_scale.is_finite() && self.time_scale > 0.0) {
            return bad("time_scale", "must be a positive number");
        }
        if p.max_num_seqs == 0 {
            return bad("max_num_seqs", "must be at least 1");
        }
        if p.block_size == 0 {
            return bad("block_size", "must be at least 1");
        }
        if p.num_gpu_blocks == 0 {
            return bad("num_gpu_blocks", "must be at least 1");
        }
        if p.max_num_batched_tokens == 0 {
            return bad("max_num_batched_tokens", "must be at least 1");
        }
        if p.max_model_len < 2 {
            return bad("max_model_len", "must be at least 2");
        }
        if p.max_model_len > p.num_gpu_blocks.saturating_mul(p.block_size) {
            // vLLM refuses to start in this case too: one request could never fit.
            return bad(
                "max_model_len",
                "is larger than the KV cache (num_gpu_blocks x block_size tokens)",
            );
        }
        self.validate_kv_events()?;
        if self.max_body_bytes == 0 {
            return bad("max_body_bytes", "must be at least 1");
        }
        if p.max_loras == 0 {
            return bad("max_loras", "must be at least 1");
        }
        for (name, v) in [
            ("prefill_overhead_ms", p.prefill_overhead_ms),
            ("prefill_per_token_ms", p.prefill_per_token_ms),
            ("decode_base_ms", p.decode_base_ms),
            ("decode_per_seq_ms", p.decode_per_seq_ms),
            ("lora_load_ms", p.lora_load_ms),
            ("kv_transfer_base_ms", p.kv_transfer_base_ms),
            ("kv_transfer_per_token_ms", p.kv_transfer_per_token_ms),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                return bad(name, "must be a finite number >= 0");
            }
        }
        if p.decode_base_ms + p.decode_per_seq_ms <= 0.0 {
            return bad("decode_base_ms", "a decode step must take some time");
        }
        if !(0.0..=1.0).contains(&self.faults.error_rate) {
            return bad("fault_error_rate", "must be in 0..=1");
        }
        if self
            .lora_modules
            .iter()
            .any(|m| lora_module(m).0.trim().is_empty())
        {
            return bad("lora_modules", "adapter names must not be empty");
        }
        if self.faults.error_codes.is_empty()
            || self
                .faults
                .error_codes
                .iter()
                .any(|c| !(400..=599).contains(c))
        {
            return bad(
                "fault_error_codes",
                "must be non-empty HTTP error codes 400..=599",
            );
        }
        Ok(self)
    }

    /// The KV-event settings: a replay socket needs a publisher, its buffer a batch at least.
    fn validate_kv_events(&self) -> Result<()> {
        let bad = |field: &str, why: &str| {
            Err(Error::Config {
                field: field.to_owned(),
                reason: why.to_owned(),
            })
        };
        if self.kv_events_buffer_steps == 0 {
            return bad("kv_events_buffer_steps", "must be at least 1");
        }
        if self.kv_events_replay_port.is_some() && self.kv_events_port.is_none() {
            return bad("kv_events_replay_port", "needs --kv-events-port");
        }
        Ok(())
    }

    /// The adapters of `lora_modules` as `(name, path)` pairs.
    pub(crate) fn lora_module_pairs(&self) -> impl Iterator<Item = (String, String)> + '_ {
        self.lora_modules.iter().map(|m| {
            let (name, path) = lora_module(m);
            (name.to_owned(), path.to_owned())
        })
    }

    /// Returns this config with `port` set to 0 (pick a free port), for tests.
    #[must_use]
    pub fn with_ephemeral_port(mut self) -> Self {
        self.port = 0;
        self
    }

    /// Returns this config with a new served model name.
    #[must_use]
    pub fn with_model(mut self, model: impl Into<String>) -> Self {
        self.model = model.into();
        self
    }

    /// Returns this config with a new time scale (model seconds per wall second).
    #[must_use]
    pub fn with_time_scale(mut self, time_scale: f64) -> Self {
        self.time_scale = time_scale;
        self
    }

    /// Returns this config with a block-hash seed (`--hash-seed`, like `PYTHONHASHSEED`).
    #[must_use]
    pub fn with_hash_seed(mut self, seed: impl Into<String>) -> Self {
        self.hash_seed = Some(seed.into());
        self
    }

    /// Returns this config with new fault injection settings.
    #[must_use]
    pub fn with_faults(mut self, faults: Faults) -> Self {
        self.faults = faults;
        self
    }
}

/// Splits a `--lora-modules` entry into name and path (`name=path`, or a bare name).
fn lora_module(entry: &str) -> (&str, &str) {
    entry.split_once('=').unwrap_or((entry, entry))
}

#[cfg(test)]
mod tests;
