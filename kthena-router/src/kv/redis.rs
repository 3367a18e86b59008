//! A [`KvIndex`] that reads Go Kthena's Redis layout, for clusters that already run Kthena's
//! runtime sidecar (`python/kthena/runtime/kv_cache_manager.py`; read by
//! `pkg/kthena-router/scheduler/plugins/kvcache_aware.go`).
//!
//! The sidecar turns the engines' KV events into Redis hashes:
//!
//! ```text
//! matrix:kv:block:{model}@{block hash, decimal}  →  HASH { "{pod}.{namespace}": "{unix seconds of the write}" }
//! ```
//!
//! where the block hash is **not** chained: SHA-256 over the block's token ids as 4-byte
//! big-endian integers, the first 8 digest bytes read big-endian, masked with
//! `0x7FFF_FFFF_FFFF_FFFF` ([`kthena_block_hash`], identical to the sidecar's
//! `compute_standardized_hash`). Blocks are `blockSizeToHash` tokens (the last may be short),
//! at most `maxBlocksToMatch` of them, and `{model}` is the request's model name.
//!
//! Per request, one pipelined `HGETALL` per block is sent (one round trip). An endpoint with
//! id `namespace/name` owns a block when the hash has the field `name.namespace`; its match is
//! the number of leading blocks it owns without a gap. An owner written at or before its
//! pod's newest container start (Unix seconds, from the [`OwnerView`]) is ignored: its cache
//! died with the restart ([`fresh_owners`], Go Kthena's `freshOwners` of
//! `pkg/kthena-router/scheduler/plugins/kvcache_aware.go`, pull request #1463 on Go Kthena's
//! main branch, after v1.0.0). The index never writes keys, so [`KvIndex::apply`] and
//! [`KvIndex::remove_endpoint`] do nothing; the router's Redis garbage collection
//! (`kv::redis_gc`) deletes stale fields.
//!
//! The index is remote ([`KvIndex::is_remote`]): before scheduling, the router answers the
//! request's lookups ([`kthena_sched::Scheduler::prepare`]) on the blocking pool, with the
//! configured timeout, so the scheduler never waits on Redis on an async thread. Called
//! directly, [`KvIndex::match_prefix`] runs the round trip on the calling thread. On any
//! error the request scores 0 everywhere, the connection is dropped and re-opened on the
//! next request.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use kthena_sched::{Candidate, EndpointId, KvEvent, KvIndex, KvQuery};
use sha2::{Digest, Sha256};
use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::kv::owners::OwnerView;

/// Key prefix of the block keys.
pub const KEY_PREFIX: &str = "matrix:kv:block";

/// How long a [`KvIndex::len`] answer (a `SCAN` count) is reused.
const LEN_TTL: Duration = Duration::from_secs(10);

/// Go Kthena's per-block hash: SHA-256 of the token ids as 4-byte big-endian integers, first
/// 8 bytes big-endian, top bit cleared.
#[must_use]
pub fn kthena_block_hash(tokens: &[u32]) -> u64 {
    let mut h = Sha256::new();
    for t in tokens {
        h.update(t.to_be_bytes());
    }
    let d = h.finalize();
    let mut head = [0u8; 8];
    head.copy_from_slice(&d[..8]);
    u64::from_be_bytes(head) & 0x7FFF_FFFF_FFFF_FFFF
}

/// The Redis key of one block of `model`.
#[must_use]
pub fn block_key(model: &str, hash: u64) -> String {
    format!("{KEY_PREFIX}:{model}@{hash}")
}

/// The owner field Go Kthena's sidecar writes for an endpoint id `namespace/name`:
/// `name.namespace` (an id without `/` is used as is).
#[must_use]
pub fn owner_of(id: &EndpointId) -> String {
    match id.as_str().split_once('/') {
        Some((ns, name)) => format!("{name}.{ns}"),
        None => id.as_str().to_owned(),
    }
}

/// The owners of one block hash (`(field, value)` pairs) whose write is newer than their
/// pod's container start (`started(owner)`, Unix seconds). Go Kthena's rule: an owner is
/// dropped when its value parses as an integer `<=` the start; an owner with no known start,
/// a start of 0 or an unparsable value is kept. Both sides are whole seconds, so a write in
/// the start's second is dropped (it may precede the restart).
#[must_use]
pub fn fresh_owners(
    fields: Vec<(String, String)>,
    started: impl Fn(&str) -> Option<i64>,
) -> Vec<String> {
    fields
        .into_iter()
        .filter(|(owner, written)| !written_before_start(written, started(owner)))
        .map(|(owner, _)| owner)
        .collect()
}

/// Whether a field written at `written` (Unix seconds as text) predates a container start
/// `started` (see [`fresh_owners`]).
#[must_use]
pub fn written_before_start(written: &str, started: Option<i64>) -> bool {
    match (written.parse::<i64>(), started) {
        (Ok(w), Some(s)) if s > 0 => w <= s,
        _ => false,
    }
}

/// The Redis-backed index (see the module docs).
pub struct RedisKvIndex {
    client: redis::Client,
    url: String,
    timeout: Duration,
    conn: Mutex<Option<redis::Connection>>,
    errors: AtomicU64,
    /// The last call failed (its warning was logged).
    failing: AtomicBool,
    len_cache: Mutex<Option<(Instant, usize)>>,
    metrics: Option<crate::telemetry::plugin_metrics::PluginMetrics>,
    owners: Arc<OwnerView>,
}

impl std::fmt::Debug for RedisKvIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisKvIndex")
            .field("url", &self.url)
            .field("timeout", &self.timeout)
            .field("errors", &self.errors.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl RedisKvIndex {
    /// An index reading `url` (`redis://host:port[/db]`) with `timeout` per connect, read
    /// and write. Connects lazily.
    ///
    /// # Errors
    /// [`Error::Redis`] for an invalid URL.
    pub fn new(url: &str, timeout: Duration) -> Result<Self> {
        let client = redis::Client::open(url).map_err(|e| Error::Redis {
            reason: format!("{url}: {e}"),
        })?;
        Ok(Self {
            client,
            url: url.to_owned(),
            timeout,
            conn: Mutex::new(None),
            errors: AtomicU64::new(0),
            failing: AtomicBool::new(false),
            len_cache: Mutex::new(None),
            metrics: None,
            owners: OwnerView::new(),
        })
    }

    /// Reads the owners' container starts from `owners` (a view of its own otherwise, which
    /// knows no start: no owner is then ignored).
    #[must_use]
    pub fn with_owners(mut self, owners: Arc<OwnerView>) -> Self {
        self.owners = owners;
        self
    }

    /// Records every lookup in `kthena_router_kvcache_aware_redis_duration_seconds` and each
    /// failed one in `kthena_router_kvcache_aware_errors_total{stage="redis"}`.
    #[must_use]
    pub fn with_metrics(
        mut self,
        metrics: crate::telemetry::plugin_metrics::PluginMetrics,
    ) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Requests that failed because Redis did not answer properly.
    #[must_use]
    pub fn errors(&self) -> u64 {
        self.errors.load(Ordering::Relaxed)
    }

    /// Runs `f` on the connection (opened first if needed); logs when Redis stops answering
    /// (a warning, once) and when it answers again.
    fn with_conn<T>(
        &self,
        f: impl FnOnce(&mut redis::Connection) -> redis::RedisResult<T>,
    ) -> Result<T> {
        let r = self.call(f);
        match &r {
            Err(e) if !self.failing.swap(true, Ordering::Relaxed) => tracing::warn!(
                url = %self.url,
                error = %e,
                "Redis KV index unreachable: kvcache-aware scores 0 until it answers"
            ),
            Ok(_) if self.failing.swap(false, Ordering::Relaxed) => {
                tracing::info!(url = %self.url, "Redis KV index answers again");
            }
            _ => {}
        }
        r
    }

    fn call<T>(
        &self,
        f: impl FnOnce(&mut redis::Connection) -> redis::RedisResult<T>,
    ) -> Result<T> {
        let mut g = self.conn.lock().unwrap_or_else(PoisonError::into_inner);
        if g.is_none() {
            let c = self
                .client
                .get_connection_with_timeout(self.timeout)
                .map_err(|e| {
                    self.errors.fetch_add(1, Ordering::Relaxed);
                    Error::Redis {
                        reason: e.to_string(),
                    }
                })?;
            c.set_read_timeout(Some(self.timeout))
                .map_err(|e| Error::Redis {
                    reason: e.to_string(),
                })?;
            c.set_write_timeout(Some(self.timeout))
                .map_err(|e| Error::Redis {
                    reason: e.to_string(),
                })?;
            *g = Some(c);
        }
        let Some(conn) = g.as_mut() else {
            return Err(Error::Redis {
                reason: "no connection".to_owned(),
            });
        };
        match f(conn) {
            Ok(v) => Ok(v),
            Err(e) => {
                *g = None;
                self.errors.fetch_add(1, Ordering::Relaxed);
                Err(Error::Redis {
                    reason: e.to_string(),
                })
            }
        }
    }

    /// The fresh owners of each block of `query`, in block order (one pipelined round trip;
    /// see [`fresh_owners`]).
    ///
    /// # Errors
    /// [`Error::Redis`] when Redis cannot be reached or answers unexpectedly.
    pub fn owners(&self, query: &KvQuery<'_>) -> Result<Vec<Vec<String>>> {
        if query.block_size == 0 {
            return Ok(Vec::new());
        }
        let mut pipe = redis::pipe();
        let mut n = 0;
        for block in query
            .token_ids
            .chunks(query.block_size)
            .take(query.block_hashes.len())
        {
            pipe.cmd("HGETALL")
                .arg(block_key(query.model, kthena_block_hash(block)));
            n += 1;
        }
        if n == 0 {
            return Ok(Vec::new());
        }
        let maps: Vec<Vec<(String, String)>> = self.with_conn(|c| pipe.query(c))?;
        let starts = self.owners.starts();
        Ok(maps
            .into_iter()
            .map(|m| fresh_owners(m, |owner| starts.get(owner)))
            .collect())
    }

    fn scan_len(&self) -> Result<usize> {
        self.with_conn(|c| {
            let mut cursor: u64 = 0;
            let mut total = 0usize;
            loop {
                let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                    .arg(cursor)
                    .arg("MATCH")
                    .arg(format!("{KEY_PREFIX}:*"))
                    .arg("COUNT")
                    .arg(1000)
                    .query(c)?;
                total += keys.len();
                if next == 0 {
                    return Ok(total);
                }
                cursor = next;
            }
        })
    }
}

impl KvIndex for RedisKvIndex {
    /// Does nothing: the runtime sidecar writes the keys.
    fn apply(&self, _endpoint: &EndpointId, _event: &KvEvent) -> kthena_sched::Result<()> {
        Ok(())
    }

    fn match_prefix(&self, query: &KvQuery<'_>, cands: &[&Candidate], out: &mut [u32]) {
        out.fill(0);
        let started = Instant::now();
        let res = self.owners(query);
        if let Some(m) = &self.metrics {
            m.redis(query.model, started.elapsed().as_secs_f64());
            if res.is_err() {
                m.error(
                    query.model,
                    crate::telemetry::plugin_metrics::KvStage::Redis,
                );
            }
        }
        let owners = match res {
            Ok(o) => o,
            Err(e) => {
                tracing::debug!(error = %e, "Redis KV index lookup failed; scoring 0");
                return;
            }
        };
        for (c, o) in cands.iter().zip(out.iter_mut()) {
            let me = owner_of(&c.id);
            let n = owners.iter().take_while(|b| b.contains(&me)).count();
            *o = u32::try_from(n).unwrap_or(u32::MAX);
        }
    }

    /// Does nothing: the router's Redis garbage collection (`kv::redis_gc`) removes the
    /// fields of a removed pod.
    fn remove_endpoint(&self, _endpoint: &EndpointId) {}

    /// Every lookup is a Redis round trip: the router fetches them before scheduling.
    fn is_remote(&self) -> bool {
        true
    }

    fn block_size(&self) -> Option<usize> {
        None
    }

    /// Number of block keys (`SCAN MATCH matrix:kv:block:*`), refreshed at most every 10 s;
    /// 0 when Redis cannot be reached.
    fn len(&self) -> usize {
        let mut g = self
            .len_cache
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some((at, n)) = *g
            && at.elapsed() < LEN_TTL
        {
            return n;
        }
        let n = self.scan_len().unwrap_or(0);
        *g = Some((Instant::now(), n));
        n
    }
}

#[cfg(test)]
mod tests;
