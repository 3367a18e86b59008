//! Token rate limits of ModelRoutes (`spec.rateLimit`, Go Kthena's
//! `pkg/kthena-router/filters/ratelimit`).
//!
//! A route's `rateLimit` limits the requests whose `model` is the route's `modelName` or
//! one of its `loraAdapters` (one budget for both; Go limits only the model name, so its
//! adapters' requests went unlimited): `inputTokensPerUnit` and `outputTokensPerUnit`
//! tokens per `unit` (second, minute, hour, day, month = 30 days), each a token bucket of
//! that capacity refilled continuously, per router ([`bucket::LocalBucket`]) or shared
//! through Redis when `global.redis.address` is set ([`global::GlobalBucket`], Go's keys and
//! Lua arithmetic).
//!
//! Per request ([`ModelLimiter::admit`]): the input bucket gives the prompt's estimated
//! tokens (`ceil(chars / 4)`, Go's estimator) or the request gets 429 `input token rate limit
//! exceeded`; then the output bucket gives the request's output reservation, its
//! `max_completion_tokens` / `max_tokens` / `max_output_tokens` times `n` (as vLLM reads
//! them; else
//! [`DEFAULT_OUTPUT_RESERVATION`]), at most the whole limit, or the request gets 429 `output
//! token rate limit exceeded` (the input tokens are given back). As the engine reports
//! `usage.completion_tokens`, tokens beyond the reservation are taken as well
//! ([`ModelLimiter::reconcile_output`], the bucket may go below zero); when the request
//! settles, the unused rest of the reservation is given back (all of it for a request that
//! failed before an answer). Go checks only that one output token is left, so concurrent
//! streams admitted together could overshoot the budget many times over; here they are
//! admitted only while the budget covers their reservations. 429s carry `Retry-After`: the
//! seconds until the bucket holds what the request needs (its debt included), rounded up,
//! at least 1.
//!
//! Redis down: a global limit's calls fail fast (1 s timeouts) and the router then limits
//! with its own bucket of the same limit, skipping Redis for [`global::REDIS_RETRY`] after
//! each failure; the first good answer after that shares the Redis bucket again (charges
//! made meanwhile stay local). Requests are served (fail open to per-router limits); Go's
//! `AllowN` answers `false` on a Redis error, so Go refuses every request with 429 `input
//! token rate limit exceeded` while its Redis is down.
//!
//! Which route's limit applies: the first route in route order (oldest first) with a
//! `rateLimit` for that `modelName`. Buckets live as long as their route's `rateLimit` is
//! unchanged; a reload that changes it starts full buckets (Go starts them on every route
//! update), one that removes it removes them.

mod bucket;
mod global;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use kthena_api::networking::{ModelRoute, RateLimit, RateLimitUnit};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use tokio::time::Instant;
use tokio_util::task::TaskTracker;

use crate::error::Error;

use bucket::LocalBucket;
use global::{GlobalBucket, RedisPool};

/// One input or output bucket.
#[derive(Debug)]
enum Bucket {
    Local(Mutex<LocalBucket>),
    /// The shared bucket, and the router's own bucket of the same limit used while Redis
    /// does not answer.
    Global(GlobalBucket, Mutex<LocalBucket>),
}

fn local(b: &Mutex<LocalBucket>) -> std::sync::MutexGuard<'_, LocalBucket> {
    b.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Bucket {
    /// Takes `n` tokens when that many are there: `(taken, tokens left)`.
    async fn allow_n(&self, n: f64) -> (bool, f64) {
        match self {
            Self::Local(b) => local(b).allow_n(Instant::now(), n),
            Self::Global(g, fallback) => {
                if g.pool().available() {
                    let got = g.allow_n(n).await;
                    g.pool().record(got.as_ref().err());
                    if let Ok(v) = got {
                        return v;
                    }
                }
                local(fallback).allow_n(Instant::now(), n)
            }
        }
    }

    /// Takes `delta` tokens unconditionally (gives them back when negative).
    async fn reconcile_n(&self, delta: f64) {
        match self {
            Self::Local(b) => {
                local(b).reconcile_n(Instant::now(), delta);
            }
            Self::Global(g, fallback) => {
                if g.pool().available() {
                    let got = g.reconcile_n(delta).await;
                    g.pool().record(got.as_ref().err());
                    if got.is_ok() {
                        return;
                    }
                }
                local(fallback).reconcile_n(Instant::now(), delta);
            }
        }
    }
}

/// Output tokens reserved at admission for a request that names no `max_tokens`
/// (`max_completion_tokens`, `max_output_tokens`); settled against the real count when the
/// answer ends.
pub(crate) const DEFAULT_OUTPUT_RESERVATION: u64 = 256;

/// The buckets of one model.
#[derive(Debug)]
pub(crate) struct ModelLimiter {
    spec: RateLimit,
    unit_secs: u64,
    input: Option<Bucket>,
    output: Option<Bucket>,
}

impl ModelLimiter {
    /// Admits a request of `input_tokens` prompt tokens that may produce `max_output` tokens
    /// (`None`: not said), or says why not. Returns the output tokens reserved: `max_output`
    /// (else [`DEFAULT_OUTPUT_RESERVATION`]) at most the output limit, at least 1; 0 without
    /// an output limit. The caller settles them with [`ModelLimiter::reconcile_output`].
    ///
    /// # Errors
    /// [`Error::RateLimited`] (429) when a bucket does not hold what the request needs.
    pub(crate) async fn admit(
        &self,
        input_tokens: u64,
        max_output: Option<u64>,
    ) -> Result<u64, Error> {
        let n = input_tokens as f64;
        if let Some(limit) = self.spec.input_tokens_per_unit
            && input_tokens > u64::from(limit)
            && self.input.is_some()
        {
            return Err(Error::RateLimitTooLarge {
                kind: "input",
                requested: input_tokens,
                limit,
                unit: unit_name(self.spec.unit),
            });
        }
        if let Some(b) = &self.input {
            let (ok, left) = b.allow_n(n).await;
            if !ok {
                return Err(self.limited("input", n, left, self.spec.input_tokens_per_unit));
            }
        }
        let Some(b) = &self.output else {
            return Ok(0);
        };
        let cap = u64::from(self.spec.output_tokens_per_unit.unwrap_or(1)).max(1);
        let reserve = max_output
            .unwrap_or(DEFAULT_OUTPUT_RESERVATION)
            .clamp(1, cap);
        let (ok, left) = b.allow_n(reserve as f64).await;
        if !ok {
            if let Some(b) = &self.input {
                b.reconcile_n(-n).await;
            }
            return Err(self.limited(
                "output",
                reserve as f64,
                left,
                self.spec.output_tokens_per_unit,
            ));
        }
        Ok(reserve)
    }

    fn limited(&self, kind: &'static str, need: f64, left: f64, limit: Option<u32>) -> Error {
        let cap = f64::from(limit.unwrap_or(1));
        Error::RateLimited {
            kind,
            retry_after: retry_after(need, left, cap / self.unit_secs as f64),
        }
    }

    /// Whether the model has an output limit (then its answers are charged).
    pub(crate) fn limits_output(&self) -> bool {
        self.output.is_some()
    }

    /// Takes `delta` more output tokens from the output bucket, or gives `-delta` back (in
    /// the background on `tasks` for a global limit).
    pub(crate) fn reconcile_output(self: &Arc<Self>, delta: f64, tasks: &TaskTracker) {
        match &self.output {
            None => {}
            Some(Bucket::Local(b)) => {
                local(b).reconcile_n(Instant::now(), delta);
            }
            Some(Bucket::Global(..)) => {
                let me = Arc::clone(self);
                tasks.spawn(async move {
                    if let Some(b) = &me.output {
                        b.reconcile_n(delta).await;
                    }
                });
            }
        }
    }
}

/// The unit as a ModelRoute spells it.
fn unit_name(unit: RateLimitUnit) -> &'static str {
    match unit {
        RateLimitUnit::Second => "second",
        RateLimitUnit::Minute => "minute",
        RateLimitUnit::Hour => "hour",
        RateLimitUnit::Day => "day",
        RateLimitUnit::Month => "month",
    }
}

/// Seconds until a bucket with `left` tokens (negative: a debt) refilled at `rate` per
/// second holds `need`, rounded up, at least 1 (`need` is at most the bucket's capacity).
fn retry_after(need: f64, left: f64, rate: f64) -> Duration {
    let secs = ((need - left).max(0.0) / rate).ceil();
    Duration::from_secs((secs as u64).max(1))
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ExceededLabels {
    model: String,
    limit_type: &'static str,
    path: &'static str,
}

/// `kthena_router_rate_limit_exceeded_total{model, limit_type, path}` (Go's family; `path`
/// bounded as the request metrics': `telemetry::path_label`).
#[derive(Debug, Clone, Default)]
pub(crate) struct RateLimitMetrics {
    exceeded: Family<ExceededLabels, Counter>,
}

impl RateLimitMetrics {
    /// Creates the family and registers it.
    pub(crate) fn register(registry: &mut Registry) -> Self {
        let m = Self::default();
        registry.register(
            "kthena_router_rate_limit_exceeded",
            "Requests answered 429 by a token rate limit",
            m.exceeded.clone(),
        );
        m
    }

    /// One more 429 of `kind` (`input` or `output`).
    pub(crate) fn exceeded(&self, model: &str, kind: &str, path: &str) {
        let limit_type = if kind == "input" {
            "input_tokens"
        } else {
            "output_tokens"
        };
        self.exceeded
            .get_or_create(&ExceededLabels {
                model: model.to_owned(),
                limit_type,
                path: crate::telemetry::path_label::path_label(path),
            })
            .inc();
    }
}

/// The limiters of every rate-limited model, kept in step with the routing snapshot.
#[derive(Debug, Default)]
pub(crate) struct RateLimits {
    /// What requests read (no lock on the request path).
    current: arc_swap::ArcSwap<Current>,
    /// Rebuilt under this lock when a newer snapshot comes.
    state: Mutex<State>,
    /// The background output charges of global limits.
    charges: TaskTracker,
}

/// The limiters of one snapshot generation.
#[derive(Debug, Default)]
struct Current {
    generation: Option<u64>,
    models: HashMap<String, Arc<ModelLimiter>>,
}

#[derive(Debug, Default)]
struct State {
    /// The snapshot generation the limiters follow.
    generation: Option<u64>,
    models: HashMap<String, Arc<ModelLimiter>>,
    /// One connection pool per Redis address.
    pools: HashMap<String, Arc<RedisPool>>,
}

impl RateLimits {
    /// The limiter of requests for `model` under the `routes` of snapshot `generation`
    /// (in route order), if any.
    pub(crate) fn for_model(
        &self,
        generation: u64,
        routes: &[ModelRoute],
        model: &str,
    ) -> Option<Arc<ModelLimiter>> {
        let cur = self.current.load();
        if cur.generation.is_some_and(|g| g >= generation) {
            return cur.models.get(model).cloned();
        }
        drop(cur);
        let mut st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if st.generation.is_none_or(|g| g < generation) {
            st.sync(generation, routes);
            self.current.store(Arc::new(Current {
                generation: st.generation,
                models: st.models.clone(),
            }));
        }
        st.models.get(model).cloned()
    }

    /// Where the background output charges run.
    pub(crate) fn charges(&self) -> &TaskTracker {
        &self.charges
    }

    /// Waits for the output charges still running (each bounded by the Redis timeouts).
    pub(crate) async fn drain(&self) {
        self.charges.close();
        self.charges.wait().await;
    }
}

impl State {
    fn sync(&mut self, generation: u64, routes: &[ModelRoute]) {
        self.generation = Some(generation);
        let mut specs: HashMap<&str, &RateLimit> = HashMap::new();
        for r in routes {
            if let Some(rl) = &r.spec.rate_limit
                && !r.spec.model_name.is_empty()
            {
                specs.entry(r.spec.model_name.as_str()).or_insert(rl);
            }
        }
        let mut models = HashMap::with_capacity(specs.len());
        for (model, spec) in &specs {
            let kept = self.models.remove(*model).filter(|l| l.spec == **spec);
            let limiter = match kept {
                Some(l) => l,
                None => match self.build(model, spec) {
                    Ok(l) => Arc::new(l),
                    Err(reason) => {
                        tracing::error!(model, %reason, "Rate limit not applied");
                        continue;
                    }
                },
            };
            models.insert((*model).to_owned(), limiter);
        }
        // A route's LoRA adapters share its limit (the route's model name's buckets), unless
        // a route serves the adapter's name as its model name (that route matches first).
        let names: std::collections::HashSet<&str> =
            routes.iter().map(|r| r.spec.model_name.as_str()).collect();
        for r in routes {
            let Some(limiter) = models.get(r.spec.model_name.as_str()).cloned() else {
                continue;
            };
            for adapter in &r.spec.lora_adapters {
                if !names.contains(adapter.as_str()) {
                    models
                        .entry(adapter.clone())
                        .or_insert_with(|| Arc::clone(&limiter));
                }
            }
        }
        self.models = models;
    }

    fn build(&mut self, model: &str, spec: &RateLimit) -> Result<ModelLimiter, global::StoreError> {
        let unit_secs = spec.unit.seconds();
        let redis = spec
            .global
            .as_ref()
            .and_then(|g| g.redis.as_ref())
            .map(|r| r.address.as_str());
        let pool = match redis {
            None => None,
            Some(addr) => Some(match self.pools.get(addr) {
                Some(p) => Arc::clone(p),
                None => {
                    let p = Arc::new(RedisPool::new(addr)?);
                    self.pools.insert(addr.to_owned(), Arc::clone(&p));
                    p
                }
            }),
        };
        let make = |kind: &str, limit: Option<u32>| {
            limit.map(|n| match &pool {
                Some(p) => Bucket::Global(
                    GlobalBucket::new(Arc::clone(p), model, kind, n, unit_secs),
                    Mutex::new(LocalBucket::new(n, unit_secs, Instant::now())),
                ),
                None => Bucket::Local(Mutex::new(LocalBucket::new(n, unit_secs, Instant::now()))),
            })
        };
        Ok(ModelLimiter {
            spec: spec.clone(),
            unit_secs,
            input: make("input", spec.input_tokens_per_unit),
            output: make("output", spec.output_tokens_per_unit),
        })
    }
}

#[cfg(test)]
mod tests;
