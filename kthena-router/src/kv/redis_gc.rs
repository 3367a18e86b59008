//! The router's garbage collection of Go Kthena's Redis state: the KV block hashes
//! `matrix:kv:block:{model}@{hash}` → {`{pod}.{namespace}`: Unix seconds of the write}
//! (written by the runtime sidecar, read by the Redis index) and the in-flight hash
//! `kthena:on-flight-requests` → {`{namespace}/{pod}`: count} (`upstream::inflight`).
//!
//! It runs when `kvCache.index: redis` is used (block keys, on `kvCache.redis.url`) or
//! in-flight counts are shared through Redis (`REDIS_HOST`; the in-flight hash), every
//! `kvCache.redis.gcInterval` (default 1 min; `0s` turns it off). One round:
//!
//! - continues a `SCAN MATCH *:kv:block:* COUNT n` walk where the previous round left it,
//!   for at most `gcScanKeys` keys (the sum of the `COUNT`s; bounded work per round), reads
//!   each block key with `HGETALL` (pipelined) and deletes the owner fields that are
//!   [`GcVerdict::Expired`] (written over 24 h ago: Go Kthena's `gcStaleFields`, hourly over
//!   100 keys in `pkg/kthena-router/scheduler/plugins/kvcache_aware.go`),
//!   [`GcVerdict::Restarted`] (written at or before the owner's container start: the fields
//!   the Redis index already ignores) or [`GcVerdict::DeletedPod`]; the same walk deletes the
//!   sidecar's hash-mapping keys `vllm:kv:block:{pod}.{namespace}@{engine hash}` and
//!   `sglang:kv:block:...` (a string per pod and block, 24 h TTL) of deleted pods, which Go
//!   Kthena leaves to their TTL;
//! - reads the in-flight hash and deletes the fields of deleted pods (Go Kthena deletes them
//!   when its Pod informer reports the deletion, `pkg/kthena-router/datastore/store.go`).
//!
//! A pod is deleted, in cluster mode only, when the router's synced Pod store has not listed
//! it for `gcGrace` (default 30 s; time counted from the first round that found it missing):
//! a pod the router's watch has not delivered yet keeps its fields. In standalone mode no pod
//! list exists and only the time rules apply.
//!
//! Deleting is safe with several routers collecting at once and with the sidecar writing
//! meanwhile: a field is deleted by a Lua script ([`DELETE_IF_UNCHANGED`]) only while it
//! still holds the value the round read, so a field rewritten since is kept, and deleting
//! twice deletes nothing. Redis removes a hash whose last field goes. Each round reports
//! what it did in the `kthena_router_redis_gc_*` metrics.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::Config;
use crate::error::{Error, Result};
use crate::kv::config::IndexBackend;
use crate::kv::metrics::KvMetrics;
use crate::kv::owners::{OwnerView, PodList};
use crate::kv::redis::written_before_start;
use crate::shared::Shared;

/// Age after which a block owner field is deleted, seconds (Go Kthena's
/// `kvCacheFieldFreshDuration`, 24 h, the sidecar's key expiry).
pub const FIELD_FRESH_SECS: i64 = 24 * 3600;

/// Largest `COUNT` of one `SCAN` call (Go Kthena's `kvCacheGCScanSize`).
pub const SCAN_BATCH: usize = 100;

/// `KEYS[1]` a hash, `ARGV` field/value pairs: deletes each field that still holds its value;
/// returns whether the hash still exists, then 1 or 0 per pair (deleted or not).
pub const DELETE_IF_UNCHANGED: &str = r"
local out = {0}
for i = 1, #ARGV, 2 do
  if redis.call('HGET', KEYS[1], ARGV[i]) == ARGV[i + 1] then
    out[#out + 1] = redis.call('HDEL', KEYS[1], ARGV[i])
  else
    out[#out + 1] = 0
  end
end
out[1] = redis.call('EXISTS', KEYS[1])
return out
";

/// The `hash` label of block-key fields.
const BLOCKS: &str = "kv_block";
/// The `hash` label of in-flight fields.
const IN_FLIGHT: &str = "in_flight";
/// The `hash` label of the sidecar's hash-mapping keys.
const MAPPING: &str = "kv_mapping";

/// Key prefixes of the sidecar's hash-mapping keys (`python/kthena/runtime/kv_cache_manager.py`
/// `get_vllm_mapping_key_prefix`, `get_sglang_mapping_key_prefix`), each followed by
/// `:{pod}.{namespace}@{engine hash}`.
pub const MAPPING_PREFIXES: [&str; 2] = ["vllm:kv:block", "sglang:kv:block"];

/// The owner (`{pod}.{namespace}`) of a hash-mapping key; `None` for any other key.
#[must_use]
pub fn mapping_owner(key: &str) -> Option<&str> {
    let rest = MAPPING_PREFIXES
        .iter()
        .find_map(|p| key.strip_prefix(p)?.strip_prefix(':'))?;
    Some(rest.rsplit_once('@')?.0)
}

/// What the garbage collection does with one field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GcVerdict {
    /// The field stays.
    Keep,
    /// Written more than 24 h ago.
    Expired,
    /// Written at or before the owner's newest container start.
    Restarted,
    /// The owner pod is gone from the cluster.
    DeletedPod,
}

impl GcVerdict {
    /// The metric's `reason` label (`None` for [`GcVerdict::Keep`]).
    #[must_use]
    pub fn reason(self) -> Option<&'static str> {
        match self {
            Self::Keep => None,
            Self::Expired => Some("expired"),
            Self::Restarted => Some("restarted"),
            Self::DeletedPod => Some("deleted_pod"),
        }
    }
}

/// The rules of one round: the time, the owners' container starts, the pod list and since
/// when each unlisted owner has been missing.
#[derive(Debug)]
pub struct GcRules {
    now: i64,
    at: Instant,
    grace: Duration,
    view: Arc<OwnerView>,
    pods: Option<Arc<PodList>>,
    missing: HashMap<String, Instant>,
}

impl GcRules {
    /// Rules at Unix second `now` (monotonic `at`), reading `view`; `missing` is what the
    /// previous round returned from [`GcRules::into_missing`].
    #[must_use]
    pub fn new(
        view: Arc<OwnerView>,
        now: i64,
        at: Instant,
        grace: Duration,
        missing: HashMap<String, Instant>,
    ) -> Self {
        let pods = view.pod_list();
        Self {
            now,
            at,
            grace,
            view,
            pods,
            missing,
        }
    }

    /// The verdict on block owner field `owner` (`name.namespace`) holding `written`. A value
    /// that is not an integer is kept by the time rules (as Go Kthena's GC does).
    pub fn block_field(&mut self, owner: &str, written: &str) -> GcVerdict {
        if let Ok(w) = written.parse::<i64>()
            && self.now.saturating_sub(w) > FIELD_FRESH_SECS
        {
            return GcVerdict::Expired;
        }
        if written_before_start(written, self.view.started(owner)) {
            return GcVerdict::Restarted;
        }
        let listed = self
            .pods
            .as_ref()
            .map(|p| p.by_block_owner.contains_key(owner));
        self.gone(owner, listed)
    }

    /// The verdict on a hash-mapping key of `owner` (`name.namespace`): only a deleted pod's
    /// goes (the sidecar's 24 h TTL ends the others).
    pub fn mapping_key(&mut self, owner: &str) -> GcVerdict {
        let listed = self
            .pods
            .as_ref()
            .map(|p| p.by_block_owner.contains_key(owner));
        self.gone(owner, listed)
    }

    /// The verdict on in-flight field `owner` (`namespace/name`).
    pub fn in_flight_field(&mut self, owner: &str) -> GcVerdict {
        let listed = self
            .pods
            .as_ref()
            .map(|p| p.by_in_flight_owner.contains(owner));
        self.gone(owner, listed)
    }

    /// [`GcVerdict::DeletedPod`] when a pod list exists, `owner` is not on it and has been
    /// missing for the grace.
    fn gone(&mut self, owner: &str, listed: Option<bool>) -> GcVerdict {
        match listed {
            None => GcVerdict::Keep,
            Some(true) => {
                self.missing.remove(owner);
                GcVerdict::Keep
            }
            Some(false) => {
                let since = *self.missing.entry(owner.to_owned()).or_insert(self.at);
                if self.at.duration_since(since) >= self.grace {
                    GcVerdict::DeletedPod
                } else {
                    GcVerdict::Keep
                }
            }
        }
    }

    /// The missing owners to remember for the next round: those missing for less than the
    /// grace plus two days (an older one's fields have expired by then).
    #[must_use]
    pub fn into_missing(self) -> HashMap<String, Instant> {
        let keep = self.grace + Duration::from_secs(2 * 86_400);
        let at = self.at;
        let mut m = self.missing;
        m.retain(|_, since| at.duration_since(*since) < keep);
        m
    }
}

/// The garbage collection's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisGcSettings {
    /// The Redis of the block keys (`kvCache.redis.url` with `index: redis`).
    pub blocks_url: Option<String>,
    /// The Redis of the in-flight hash (from `REDIS_HOST`).
    pub in_flight_url: Option<String>,
    /// Time between rounds (`kvCache.redis.gcInterval`).
    pub interval: Duration,
    /// Most block keys per round (`kvCache.redis.gcScanKeys`).
    pub scan_keys: usize,
    /// How long an unlisted pod is kept (`kvCache.redis.gcGrace`).
    pub grace: Duration,
    /// Connect, read and write timeout of each call (`kvCache.redis.timeout`).
    pub timeout: Duration,
}

/// What one round did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GcReport {
    /// Keys the `SCAN` walk returned (block and hash-mapping keys).
    pub scanned: u64,
    /// Whether the `SCAN` walk completed a full pass (and starts over next round).
    pub pass_done: bool,
    /// Fields deleted by `(hash, reason)` (`hash` = `kv_block` or `in_flight`; a deleted
    /// hash-mapping key counts as one `kv_mapping` field).
    pub removed: HashMap<(&'static str, &'static str), u64>,
    /// Keys removed by `hash`: hashes emptied, and hash-mapping keys deleted (`kv_mapping`).
    pub keys_removed: HashMap<&'static str, u64>,
    /// Failed calls by `(hash, stage)`.
    pub errors: HashMap<(&'static str, &'static str), u64>,
}

/// One lazily opened connection.
struct Link {
    client: redis::Client,
    conn: Option<redis::Connection>,
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link")
            .field("connected", &self.conn.is_some())
            .finish_non_exhaustive()
    }
}

/// State kept between rounds.
#[derive(Debug, Default)]
struct GcState {
    cursor: u64,
    missing: HashMap<String, Instant>,
    blocks: Option<Link>,
    in_flight: Option<Link>,
}

/// The garbage collection (see the module docs).
#[derive(Debug)]
pub struct RedisGc {
    settings: RedisGcSettings,
    view: Arc<OwnerView>,
    metrics: Option<KvMetrics>,
    state: Mutex<GcState>,
}

mod sweep;

fn open(url: Option<&String>) -> Result<Option<Link>> {
    url.map(|u| {
        redis::Client::open(u.as_str())
            .map(|client| Link { client, conn: None })
            .map_err(|e| Error::Redis {
                reason: format!("{u}: {e}"),
            })
    })
    .transpose()
}

impl RedisGc {
    /// A collection over `settings`' Redis servers reading `view`; counts into `metrics`.
    ///
    /// # Errors
    /// [`Error::Redis`] for an invalid URL.
    pub fn new(
        settings: RedisGcSettings,
        view: Arc<OwnerView>,
        metrics: Option<KvMetrics>,
    ) -> Result<Self> {
        let state = GcState {
            blocks: open(settings.blocks_url.as_ref())?,
            in_flight: open(settings.in_flight_url.as_ref())?,
            ..GcState::default()
        };
        Ok(Self {
            settings,
            view,
            metrics,
            state: Mutex::new(state),
        })
    }

    /// Runs one round at Unix second `now` (monotonic `at`), blocking on Redis; records the
    /// report in the metrics and returns it.
    pub fn run_round(&self, now: i64, at: Instant) -> GcReport {
        let mut st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let missing = std::mem::take(&mut st.missing);
        let mut rules = GcRules::new(
            Arc::clone(&self.view),
            now,
            at,
            self.settings.grace,
            missing,
        );
        let mut report = GcReport::default();
        let st = &mut *st;
        if let Some(link) = st.blocks.as_mut() {
            let budget = self.settings.scan_keys.max(1);
            let timeout = self.settings.timeout;
            sweep::blocks(
                link,
                timeout,
                &mut st.cursor,
                budget,
                &mut rules,
                &mut report,
            );
        }
        if let Some(link) = st.in_flight.as_mut() {
            sweep::in_flight(link, self.settings.timeout, &mut rules, &mut report);
        }
        st.missing = rules.into_missing();
        if let Some(m) = &self.metrics {
            record(m, &report);
        }
        report
    }

    /// Runs a round every interval until `cancel` (the first after one interval), on the
    /// blocking pool.
    pub(crate) async fn run(self: Arc<Self>, shared: Arc<Shared>, cancel: CancellationToken) {
        let mut tick = tokio::time::interval(self.settings.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        let mut failing = false;
        loop {
            tokio::select! {
                () = cancel.cancelled() => return,
                _ = tick.tick() => {}
            }
            let gc = Arc::clone(&self);
            let now = jiff::Timestamp::now().as_second();
            let at = Instant::now();
            let report = shared.blocking(move || gc.run_round(now, at)).await;
            tracing::debug!(?report, "Redis garbage collection round");
            let Some(report) = report else { continue };
            match (report.errors.is_empty(), failing) {
                (false, false) => tracing::warn!(
                    errors = ?report.errors,
                    "Redis garbage collection failed (Redis unreachable?); retrying every gcInterval"
                ),
                (true, true) => tracing::info!("Redis garbage collection succeeds again"),
                _ => {}
            }
            failing = !report.errors.is_empty();
        }
    }
}

fn record(m: &KvMetrics, r: &GcReport) {
    m.gc_scanned(r.scanned, u64::from(r.pass_done));
    for ((hash, reason), n) in &r.removed {
        m.gc_fields_removed(hash, reason, *n);
    }
    for (hash, n) in &r.keys_removed {
        m.gc_keys_removed(hash, *n);
    }
    for ((hash, stage), n) in &r.errors {
        for _ in 0..*n {
            m.gc_error(hash, stage);
        }
    }
}

/// Starts the garbage collection when the router uses Redis (the Redis index or shared
/// in-flight counts) and `gcInterval` is not 0; not on the in-memory network.
pub(crate) fn spawn(
    shared: &Arc<Shared>,
    cfg: &Config,
    cancel: &CancellationToken,
    tasks: &TaskTracker,
) {
    let rc = &cfg.kv_cache.redis;
    if shared.memory.is_some() || rc.gc_interval.is_zero() {
        return;
    }
    let snap = shared.snapshot.load_full();
    let blocks_url = (cfg.kv_cache.index == IndexBackend::Redis && snap.kv.index.is_some())
        .then(|| rc.url.clone());
    let in_flight_url = shared
        .in_flight_share
        .get()
        .and_then(|_| cfg.on_flight_redis.clone());
    if blocks_url.is_none() && in_flight_url.is_none() {
        return;
    }
    let settings = RedisGcSettings {
        blocks_url,
        in_flight_url,
        interval: rc.gc_interval,
        scan_keys: rc.gc_scan_keys,
        grace: rc.gc_grace,
        timeout: rc.timeout,
    };
    let view = Arc::clone(&snap.kv.owners);
    match RedisGc::new(settings, view, Some(shared.metrics.kv.clone())) {
        Ok(gc) => {
            tasks.spawn(Arc::new(gc).run(Arc::clone(shared), cancel.clone()));
        }
        Err(e) => tracing::warn!(error = %e, "Redis garbage collection not started"),
    }
}

#[cfg(test)]
mod tests;
