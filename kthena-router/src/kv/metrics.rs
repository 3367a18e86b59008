//! Metrics of KV-cache-aware routing: KV-event ingestion per endpoint, the index size and
//! tokenization (registered into the router's registry by [`Metrics`](crate::Metrics)).
//!
//! | family | type | labels | meaning |
//! |---|---|---|---|
//! | `kthena_router_kv_events_total` | counter | `endpoint`, `type` | events applied to the index (`BlockStored`, `BlockRemoved`, `AllBlocksCleared`) |
//! | `kthena_router_kv_events_decode_errors_total` | counter | `endpoint` | messages that could not be decoded (skipped) |
//! | `kthena_router_kv_events_rejected_total` | counter | `endpoint` | decoded events the index refused (unknown parent block, block size mismatch) |
//! | `kthena_router_kv_events_gaps_total` | counter | `endpoint` | sequence gaps (one per jump) |
//! | `kthena_router_kv_events_missed_batches_total` | counter | `endpoint` | batches lost in gaps (sum of jump sizes) |
//! | `kthena_router_kv_events_replays_total` | counter | `endpoint`, `result` | replay requests (`ok`, `failed`) |
//! | `kthena_router_kv_events_rollbacks_total` | counter | `endpoint` | sequence rollbacks (engine restarts; entries cleared) |
//! | `kthena_router_kv_events_uncertain` | gauge | `endpoint` | 1 while the endpoint's entries may be incomplete (gap without replay) |
//! | `kthena_router_kv_events_subscribed` | gauge | `endpoint` | 1 while the ZMQ subscription is connected and subscribed |
//! | `kthena_router_kv_index_entries` | gauge | | (endpoint, block) entries held by the KV index |
//! | `kthena_router_tokenize_duration_seconds` | histogram | `source` | prompt tokenization time, `local` (in-process) or `remote` (engine `/tokenize`) |
//! | `kthena_router_tokenize_prefix_cache_total` | counter | `result` | prompt-prefix cache lookups (`hit`, `miss`) |
//! | `kthena_router_redis_gc_fields_removed_total` | counter | `hash`, `reason` | Redis fields the garbage collection deleted: `hash` = `kv_block` (a `matrix:kv:block:*` owner), `kv_mapping` (a sidecar hash-mapping key `vllm:kv:block:*`, `sglang:kv:block:*`) or `in_flight` (a `kthena:on-flight-requests` field); `reason` = `expired` (written over 24 h ago), `restarted` (written at or before the pod's container start), `deleted_pod` (the pod no longer exists) |
//! | `kthena_router_redis_gc_keys_removed_total` | counter | `hash` | keys the garbage collection removed: hashes it emptied (Redis deletes an empty hash), hash-mapping keys it deleted |
//! | `kthena_router_redis_gc_keys_scanned_total` | counter | | block and hash-mapping keys the garbage collection's `SCAN` returned |
//! | `kthena_router_redis_gc_passes_total` | counter | | full `SCAN` passes over the block keys completed |
//! | `kthena_router_redis_gc_errors_total` | counter | `hash`, `stage` | failed Redis calls of the garbage collection (`stage` = `connect`, `scan`, `read`, `delete`) |
//!
//! The match ratio itself is `kthena_router_kvcache_aware_match_ratio` (a histogram per model,
//! registered by [`Metrics`](crate::Metrics)).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// Tokenization duration buckets in seconds: 50 µs .. 2.5 s.
pub const TOKENIZE_BUCKETS: [f64; 12] = [
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.1, 0.5, 2.5,
];

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct EndpointLabel {
    endpoint: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct EventLabels {
    endpoint: String,
    r#type: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ResultLabels {
    endpoint: String,
    result: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct GcFieldLabels {
    hash: String,
    reason: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct GcHashLabel {
    hash: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct GcErrorLabels {
    hash: String,
    stage: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct SourceLabel {
    source: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct CacheLabel {
    result: String,
}

fn tokenize_hist() -> Histogram {
    Histogram::new(TOKENIZE_BUCKETS)
}

/// The KV-routing metric families (see the module docs). Cheap to clone: every family is a
/// shared handle.
#[derive(Debug, Clone)]
pub struct KvMetrics {
    events: Family<EventLabels, Counter>,
    decode_errors: Family<EndpointLabel, Counter>,
    rejected: Family<EndpointLabel, Counter>,
    gaps: Family<EndpointLabel, Counter>,
    missed: Family<EndpointLabel, Counter>,
    replays: Family<ResultLabels, Counter>,
    rollbacks: Family<EndpointLabel, Counter>,
    uncertain: Family<EndpointLabel, Gauge>,
    subscribed: Family<EndpointLabel, Gauge>,
    index_entries: Gauge,
    tokenize: Family<SourceLabel, Histogram, fn() -> Histogram>,
    tokenize_cache: Family<CacheLabel, Counter>,
    gc: GcMetrics,
    subscriptions: crate::kv::status::Subscriptions,
}

/// The `kthena_router_redis_gc_*` families.
#[derive(Debug, Clone, Default)]
struct GcMetrics {
    fields: Family<GcFieldLabels, Counter>,
    keys: Family<GcHashLabel, Counter>,
    scanned: Counter,
    passes: Counter,
    errors: Family<GcErrorLabels, Counter>,
}

impl GcMetrics {
    fn register(&self, registry: &mut Registry) {
        registry.register(
            "kthena_router_redis_gc_fields_removed",
            "Redis fields deleted by the garbage collection, by hash (kv_block, kv_mapping, in_flight) and reason",
            self.fields.clone(),
        );
        registry.register(
            "kthena_router_redis_gc_keys_removed",
            "Redis keys the garbage collection removed, by hash (kv_block, kv_mapping, in_flight)",
            self.keys.clone(),
        );
        registry.register(
            "kthena_router_redis_gc_keys_scanned",
            "KV block and hash-mapping keys returned by the Redis garbage collection's SCAN",
            self.scanned.clone(),
        );
        registry.register(
            "kthena_router_redis_gc_passes",
            "Full SCAN passes of the Redis garbage collection over the KV block keys",
            self.passes.clone(),
        );
        registry.register(
            "kthena_router_redis_gc_errors",
            "Failed Redis calls of the garbage collection, by hash and stage",
            self.errors.clone(),
        );
    }
}

impl KvMetrics {
    /// Creates the families and registers them into `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self {
            events: Family::default(),
            decode_errors: Family::default(),
            rejected: Family::default(),
            gaps: Family::default(),
            missed: Family::default(),
            replays: Family::default(),
            rollbacks: Family::default(),
            uncertain: Family::default(),
            subscribed: Family::default(),
            index_entries: Gauge::default(),
            tokenize: Family::new_with_constructor(tokenize_hist),
            tokenize_cache: Family::default(),
            gc: GcMetrics::default(),
            subscriptions: crate::kv::status::Subscriptions::default(),
        };
        m.gc.register(registry);
        registry.register(
            "kthena_router_kv_events",
            "KV events applied to the index, per endpoint and event type",
            m.events.clone(),
        );
        registry.register(
            "kthena_router_kv_events_decode_errors",
            "KV-event messages that could not be decoded, per endpoint",
            m.decode_errors.clone(),
        );
        registry.register(
            "kthena_router_kv_events_rejected",
            "Decoded KV events the index refused (unknown parent block, block size mismatch)",
            m.rejected.clone(),
        );
        registry.register(
            "kthena_router_kv_events_gaps",
            "KV-event sequence gaps, per endpoint",
            m.gaps.clone(),
        );
        registry.register(
            "kthena_router_kv_events_missed_batches",
            "KV-event batches lost in sequence gaps, per endpoint",
            m.missed.clone(),
        );
        registry.register(
            "kthena_router_kv_events_replays",
            "KV-event replay requests by result",
            m.replays.clone(),
        );
        registry.register(
            "kthena_router_kv_events_rollbacks",
            "KV-event sequence rollbacks (engine restarts), per endpoint",
            m.rollbacks.clone(),
        );
        registry.register(
            "kthena_router_kv_events_uncertain",
            "1 while an endpoint's KV index entries may be incomplete after an unrecovered gap",
            m.uncertain.clone(),
        );
        registry.register(
            "kthena_router_kv_events_subscribed",
            "1 while the KV-event subscription of an endpoint is connected",
            m.subscribed.clone(),
        );
        registry.register(
            "kthena_router_kv_index_entries",
            "(endpoint, block) entries held by the KV-cache index",
            m.index_entries.clone(),
        );
        registry.register(
            "kthena_router_tokenize_duration_seconds",
            "Prompt tokenization time in seconds, by source (local, remote)",
            m.tokenize.clone(),
        );
        registry.register(
            "kthena_router_tokenize_prefix_cache",
            "Prompt-prefix tokenization cache lookups by result (hit, miss)",
            m.tokenize_cache.clone(),
        );
        m
    }

    fn ep(endpoint: &str) -> EndpointLabel {
        EndpointLabel {
            endpoint: endpoint.to_owned(),
        }
    }

    /// Counts `n` applied events of `kind` from `endpoint`.
    pub fn event(&self, endpoint: &str, kind: &str, n: u64) {
        self.events
            .get_or_create(&EventLabels {
                endpoint: endpoint.to_owned(),
                r#type: kind.to_owned(),
            })
            .inc_by(n);
    }

    /// Counts one undecodable message.
    pub fn decode_error(&self, endpoint: &str) {
        self.decode_errors.get_or_create(&Self::ep(endpoint)).inc();
    }

    /// Counts one event the index refused.
    pub fn rejected(&self, endpoint: &str) {
        self.rejected.get_or_create(&Self::ep(endpoint)).inc();
    }

    /// Counts one gap of `missed` batches.
    pub fn gap(&self, endpoint: &str, missed: u64) {
        self.gaps.get_or_create(&Self::ep(endpoint)).inc();
        self.missed
            .get_or_create(&Self::ep(endpoint))
            .inc_by(missed);
    }

    /// Counts one replay request.
    pub fn replay(&self, endpoint: &str, ok: bool) {
        let result = if ok { "ok" } else { "failed" };
        self.replays
            .get_or_create(&ResultLabels {
                endpoint: endpoint.to_owned(),
                result: result.to_owned(),
            })
            .inc();
    }

    /// Counts one sequence rollback.
    pub fn rollback(&self, endpoint: &str) {
        self.rollbacks.get_or_create(&Self::ep(endpoint)).inc();
    }

    /// A subscription of `endpoint` to `address` (and `replay`) starts: its state is shown by
    /// [`subscriptions`](Self::subscriptions) until [`remove_endpoint`](Self::remove_endpoint).
    pub fn subscription_started(&self, endpoint: &str, address: &str, replay: Option<&str>) {
        self.subscriptions.start(endpoint, address, replay);
    }

    /// Records the batch numbered `seq` received from `endpoint`.
    pub fn batch(&self, endpoint: &str, seq: u64) {
        self.subscriptions.batch(endpoint, seq);
    }

    /// The state of every running subscription, by endpoint id.
    #[must_use]
    pub fn subscriptions(&self) -> Vec<crate::kv::status::SubscriptionStatus> {
        self.subscriptions.list()
    }

    /// The state of `endpoint`'s subscription, if one runs.
    #[must_use]
    pub fn subscription(&self, endpoint: &str) -> Option<crate::kv::status::SubscriptionStatus> {
        self.subscriptions.get(endpoint)
    }

    /// Sets the uncertain flag of an endpoint.
    pub fn set_uncertain(&self, endpoint: &str, on: bool) {
        self.subscriptions.uncertain(endpoint, on);
        self.uncertain
            .get_or_create(&Self::ep(endpoint))
            .set(i64::from(on));
    }

    /// Sets the subscribed flag of an endpoint.
    pub fn set_subscribed(&self, endpoint: &str, on: bool) {
        self.subscriptions.connected(endpoint, on);
        self.subscribed
            .get_or_create(&Self::ep(endpoint))
            .set(i64::from(on));
    }

    /// Forgets every series and the subscription state of a removed endpoint, so that pod
    /// churn does not grow the exposition (a pod name is not reused by the next pod).
    pub fn remove_endpoint(&self, endpoint: &str) {
        self.subscriptions.remove(endpoint);
        let ep = Self::ep(endpoint);
        for family in [
            &self.decode_errors,
            &self.rejected,
            &self.gaps,
            &self.missed,
            &self.rollbacks,
        ] {
            family.remove(&ep);
        }
        for kind in ["BlockStored", "BlockRemoved", "AllBlocksCleared"] {
            self.events.remove(&EventLabels {
                endpoint: endpoint.to_owned(),
                r#type: kind.to_owned(),
            });
        }
        for result in ["ok", "failed"] {
            self.replays.remove(&ResultLabels {
                endpoint: endpoint.to_owned(),
                result: result.to_owned(),
            });
        }
        self.uncertain.remove(&Self::ep(endpoint));
        self.subscribed.remove(&Self::ep(endpoint));
    }

    /// Sets the index size gauge.
    pub fn set_index_entries(&self, n: usize) {
        self.index_entries.set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// Observes one tokenization of `secs` seconds from `source` (`local` or `remote`).
    pub fn tokenize(&self, source: &str, secs: f64) {
        self.tokenize
            .get_or_create(&SourceLabel {
                source: source.to_owned(),
            })
            .observe(secs);
    }

    /// Counts `n` fields of `hash` the Redis garbage collection deleted for `reason`.
    pub fn gc_fields_removed(&self, hash: &str, reason: &str, n: u64) {
        self.gc
            .fields
            .get_or_create(&GcFieldLabels {
                hash: hash.to_owned(),
                reason: reason.to_owned(),
            })
            .inc_by(n);
    }

    /// Counts `n` hashes of kind `hash` the Redis garbage collection emptied.
    pub fn gc_keys_removed(&self, hash: &str, n: u64) {
        self.gc
            .keys
            .get_or_create(&GcHashLabel {
                hash: hash.to_owned(),
            })
            .inc_by(n);
    }

    /// Counts `keys` block keys read and `passes` full passes of the garbage collection.
    pub fn gc_scanned(&self, keys: u64, passes: u64) {
        self.gc.scanned.inc_by(keys);
        self.gc.passes.inc_by(passes);
    }

    /// Counts one failed Redis call of the garbage collection.
    pub fn gc_error(&self, hash: &str, stage: &str) {
        self.gc
            .errors
            .get_or_create(&GcErrorLabels {
                hash: hash.to_owned(),
                stage: stage.to_owned(),
            })
            .inc();
    }

    /// Counts one prompt-prefix cache lookup.
    pub fn tokenize_cache(&self, hit: bool) {
        let result = if hit { "hit" } else { "miss" };
        self.tokenize_cache
            .get_or_create(&CacheLabel {
                result: result.to_owned(),
            })
            .inc();
    }
}
