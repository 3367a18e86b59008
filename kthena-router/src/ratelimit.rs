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
    path: String,
}

/// `kthena_router_rate_limit_exceeded_total{model, limit_type, path}` (Go's family).
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
                path: path.to_owned(),
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
mod tests {
    use super::*;

    fn route(name: &str, model: &str, rate_limit: Option<&str>) -> ModelRoute {
        let mut v = serde_json::json!({
            "apiVersion": "networking.serving.volcano.sh/v1alpha1", "kind": "ModelRoute",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"modelName": model, "rules": [{"targetModels": [{"modelServerName": "s"}]}]},
        });
        if let Some(rl) = rate_limit {
            v["spec"]["rateLimit"] = serde_json::from_str(rl).unwrap();
        }
        serde_json::from_value(v).unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn buckets_follow_the_routes_across_reloads() {
        let limits = RateLimits::default();
        let rl = r#"{"inputTokensPerUnit": 10, "unit": "hour"}"#;
        let routes = vec![
            route("old", "m", Some(rl)),
            route("new", "m", Some(r#"{"inputTokensPerUnit": 99}"#)),
            route("free", "f", None),
        ];
        let m = limits.for_model(1, &routes, "m").unwrap();
        assert!(limits.for_model(1, &routes, "f").is_none());
        // The oldest route's limit applies.
        m.admit(10, None).await.unwrap();
        let e = m.admit(1, None).await.unwrap_err();
        assert_eq!(e.to_string(), "input token rate limit exceeded");
        assert_eq!(e.retry_after(), Some(Duration::from_secs(360)));
        // A reload with the same limit keeps the spent bucket; an older generation changes
        // nothing.
        let again = limits.for_model(2, &routes, "m").unwrap();
        assert!(Arc::ptr_eq(&m, &again));
        assert!(
            limits
                .for_model(1, &routes[1..], "m")
                .is_some_and(|l| Arc::ptr_eq(&l, &m))
        );
        // A changed limit starts full, a removed one is gone.
        let changed = vec![route(
            "old",
            "m",
            Some(r#"{"inputTokensPerUnit": 20, "unit": "hour"}"#),
        )];
        limits
            .for_model(3, &changed, "m")
            .unwrap()
            .admit(20, None)
            .await
            .unwrap();
        assert!(
            limits
                .for_model(4, &[route("old", "m", None)], "m")
                .is_none()
        );
    }

    /// Regression: a prompt larger than the input limit's whole unit got 429 with a
    /// `Retry-After` (1 s on a full bucket, nearly an hour on an empty one) although it could
    /// never be admitted, so clients waited and retried for ever. It now gets 429 saying so,
    /// without `Retry-After`, full bucket or not, and takes nothing from the bucket.
    #[tokio::test(start_paused = true)]
    async fn a_request_larger_than_the_whole_limit_gets_no_retry_after() {
        let limits = RateLimits::default();
        let rl = r#"{"inputTokensPerUnit": 100, "unit": "hour"}"#;
        let m = limits
            .for_model(1, &[route("r", "m", Some(rl))], "m")
            .unwrap();
        for _ in 0..2 {
            let e = m.admit(1006, None).await.unwrap_err();
            assert_eq!(
                e.to_string(),
                "input token rate limit exceeded: the request needs 1006 input tokens, more than the limit of 100 per hour; it can never be admitted"
            );
            assert_eq!(e.retry_after(), None);
            assert_eq!(e.status(), http::StatusCode::TOO_MANY_REQUESTS);
            assert_eq!(e.code(), "rate_limit_exceeded");
        }
        assert_eq!(m.admit(100, None).await.unwrap(), 0);
        let e = m.admit(1, None).await.unwrap_err();
        assert_eq!(e.retry_after(), Some(Duration::from_secs(36)));
    }

    /// Regression: the debt of an output charge larger than one unit's limit was
    /// answered with a `Retry-After` of at most one unit, and a request was admitted with
    /// a single output token left.
    #[tokio::test(start_paused = true)]
    async fn output_debt_blocks_until_refilled_and_refunds_input() {
        let limits = RateLimits::default();
        let rl = r#"{"inputTokensPerUnit": 100, "outputTokensPerUnit": 10, "unit": "second"}"#;
        let m = limits
            .for_model(1, &[route("r", "m", Some(rl))], "m")
            .unwrap();
        // 4 output tokens reserved, 30 produced: 26 more taken, 20 tokens of debt.
        assert_eq!(m.admit(5, Some(4)).await.unwrap(), 4);
        m.reconcile_output(26.0, limits.charges());
        // At 10 per second the debt and 1 token are there after 2.1 s: Retry-After 3; the
        // refused request's 5 input tokens come back.
        let e = m.admit(5, Some(1)).await.unwrap_err();
        assert_eq!(e.to_string(), "output token rate limit exceeded");
        assert_eq!(e.retry_after(), Some(Duration::from_secs(3)));
        tokio::time::advance(Duration::from_millis(2_000)).await;
        let e = m.admit(5, Some(1)).await.unwrap_err();
        assert_eq!(e.retry_after(), Some(Duration::from_secs(1)));
        tokio::time::advance(Duration::from_millis(100)).await;
        assert_eq!(m.admit(90, Some(1)).await.unwrap(), 1);
    }

    /// Regression: admission checked that one output token was left, so every request
    /// admitted before the first answer ended could spend the whole budget again.
    #[tokio::test(start_paused = true)]
    async fn output_reservations_bound_what_concurrent_requests_may_spend() {
        let limits = RateLimits::default();
        let rl = r#"{"outputTokensPerUnit": 60, "unit": "minute"}"#;
        let m = limits
            .for_model(1, &[route("r", "m", Some(rl))], "m")
            .unwrap();
        // Three of 20 fit in 60; the fourth waits 20 s for 20 tokens at 1 per second.
        for _ in 0..3 {
            assert_eq!(m.admit(0, Some(20)).await.unwrap(), 20);
        }
        let e = m.admit(0, Some(20)).await.unwrap_err();
        assert_eq!(e.retry_after(), Some(Duration::from_secs(20)));
        // One answer used 5 of its 20: 15 back at once.
        m.reconcile_output(-15.0, limits.charges());
        assert_eq!(m.admit(0, Some(15)).await.unwrap(), 15);
        // No max_tokens: the default reservation, at most the whole limit.
        tokio::time::advance(Duration::from_secs(60)).await;
        assert_eq!(m.admit(0, None).await.unwrap(), 60);
        tokio::time::advance(Duration::from_secs(60)).await;
        assert_eq!(m.admit(0, Some(0)).await.unwrap(), 1);
    }

    /// Regression: a request for one of the route's LoRA adapters was not limited.
    #[tokio::test(start_paused = true)]
    async fn a_routes_lora_adapters_share_its_limit() {
        let limits = RateLimits::default();
        let mut r = route(
            "r",
            "base",
            Some(r#"{"inputTokensPerUnit": 10, "unit": "hour"}"#),
        );
        r.spec.lora_adapters = vec!["lora-a".into(), "own".into()];
        let routes = vec![r, route("own-route", "own", None)];
        let base = limits.for_model(1, &routes, "base").unwrap();
        let adapter = limits.for_model(1, &routes, "lora-a").unwrap();
        assert!(Arc::ptr_eq(&base, &adapter));
        // `own` is a model name of its own route (which matches first): not limited here.
        assert!(limits.for_model(1, &routes, "own").is_none());
    }

    #[test]
    fn retry_after_is_whole_seconds_until_the_bucket_holds_the_need() {
        // 100 per minute: 1.67 tokens/s; 10 missing → 6 s.
        assert_eq!(retry_after(10.0, 0.0, 100.0 / 60.0), Duration::from_secs(6));
        assert_eq!(retry_after(1.0, 0.99, 1.0), Duration::from_secs(1));
        // A debt of 30 and 1 token at 0.5/s: 62 s, beyond one unit when the unit is shorter.
        assert_eq!(retry_after(1.0, -30.0, 0.5), Duration::from_secs(62));
        assert_eq!(retry_after(1.0, -30.0, 10.0), Duration::from_secs(4));
    }
}
