//! The state every handler shares, the in-flight counter that graceful shutdown waits on, and
//! the sources of identifiers and randomness.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use rand::SeedableRng;
use rand::rngs::SmallRng;
use tokio::sync::{Notify, mpsc};

use crate::config::{Config, Faults};
use crate::engine::Command;
use crate::metrics::Metrics;
use crate::tokenize::Tokenizer;

/// `system_fingerprint` of every response.
pub(super) const FINGERPRINT: &str = "vllm-0.32.0-kthena-sim";

/// State shared by all handlers.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) cfg: Config,
    pub(crate) addr: SocketAddr,
    pub(crate) tokenizer: Tokenizer,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) engine: mpsc::UnboundedSender<Command>,
    /// Loaded LoRA adapters: name -> path.
    pub(crate) loras: Mutex<BTreeMap<String, String>>,
    pub(crate) faults: ArcSwap<Faults>,
    pub(crate) fault_rng: Mutex<SmallRng>,
    pub(crate) created: u64,
    /// Random per engine instance (from the OS), so request ids differ between engines and
    /// between restarts even with the same seed and port.
    pub(crate) id_nonce: u64,
    pub(crate) next_id: AtomicU64,
    /// Generation requests in flight (for graceful shutdown).
    pub(crate) in_flight: AtomicUsize,
    pub(crate) idle: Notify,
    /// Set by [`crate::SimHandle::drain`]: new generation requests are refused with 503.
    pub(crate) draining: AtomicBool,
    /// When the model has loaded (`--startup-delay-ms` after start); before it every path but
    /// `/metrics` answers 503.
    pub(crate) loaded_at: tokio::time::Instant,
    /// Requests answered 503 because the model was still loading.
    pub(crate) refused_loading: AtomicU64,
    /// SGLang prefill side: bootstrap rooms whose prefill finished.
    pub(crate) rooms_done: Mutex<Vec<u64>>,
    pub(crate) room_notify: Notify,
}

impl Shared {
    /// `<prefix>-` and 32 hex digits, like vLLM's `cmpl-<uuid4 hex>`: the engine's random
    /// nonce, then a counter scrambled into a distinct value per request.
    /// Whether the model has loaded (`--startup-delay-ms` has passed).
    pub(crate) fn is_loaded(&self) -> bool {
        tokio::time::Instant::now() >= self.loaded_at
    }

    pub(super) fn request_id(&self, prefix: &str) -> String {
        self.request_id_sep(prefix, '-')
    }

    /// As [`Shared::request_id`] with another separator (the Responses API's ids are
    /// `resp_...` and `msg_...`).
    pub(super) fn request_id_sep(&self, prefix: &str, sep: char) -> String {
        let n = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mix = n.wrapping_add(1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        format!("{prefix}{sep}{:016x}{mix:016x}", self.id_nonce)
    }

    pub(super) fn engine_id(&self) -> String {
        format!("kthena-sim-{}", self.addr)
    }
}

/// Counts a request in flight until dropped.
pub(super) struct InFlight(Arc<Shared>);

impl InFlight {
    pub(super) fn new(s: &Arc<Shared>) -> Self {
        s.in_flight.fetch_add(1, Ordering::SeqCst);
        Self(Arc::clone(s))
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if self.0.in_flight.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

pub(super) fn unix_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// A random value from the operating system, for identifiers that must differ between
/// processes (not for anything the seed should reproduce). Falls back to the clock and the
/// process id if the OS generator fails.
pub(crate) fn os_random_u64() -> u64 {
    use rand::TryRngCore;
    rand::rngs::OsRng.try_next_u64().unwrap_or_else(|_| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        (nanos as u64 ^ (u64::from(std::process::id()) << 32)).wrapping_mul(0x9e37_79b9_7f4a_7c15)
    })
}

pub(crate) fn seeded_rng(seed: u64) -> SmallRng {
    SmallRng::seed_from_u64(seed ^ 0x5eed_fa17)
}
