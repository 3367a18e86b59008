//! Token rate limits of ModelRoutes (`spec.rateLimit`, Go Kthena's `filters/ratelimit`,
//! spec §2.7).
//!
//! A route's `rateLimit` limits the requests whose `model` is the route's `modelName`:
//! `inputTokensPerUnit` and `outputTokensPerUnit` tokens per `unit` (second, minute, hour,
//! day, month = 30 days), each a token bucket of that capacity refilled continuously, per
//! router ([`bucket::LocalBucket`]) or shared through Redis when `global.redis.address` is
//! set ([`global::GlobalBucket`], Go's keys and Lua arithmetic).
//!
//! Per request ([`ModelLimiter::admit`]): the input bucket gives the prompt's estimated
//! tokens (`ceil(chars / 4)`, Go's estimator) or the request gets 429 `input token rate limit
//! exceeded`; then the output bucket must hold at least one token or the request gets 429
//! `output token rate limit exceeded` (the input tokens are given back). When the engine's
//! answer ends, its `usage.completion_tokens` are taken from the output bucket
//! ([`ModelLimiter::charge_output`]), which may go below zero: the next requests wait until
//! the debt is refilled. 429s carry `Retry-After`: the seconds until the tokens asked for are
//! back, at least 1, at most one unit.
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

use kthena_api::networking::{ModelRoute, RateLimit};
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
    Global(GlobalBucket),
}

impl Bucket {
    fn allow_n_local(b: &Mutex<LocalBucket>, n: f64) -> (bool, f64) {
        b.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .allow_n(Instant::now(), n)
    }

    async fn allow_n(&self, n: f64) -> Result<(bool, f64), Error> {
        match self {
            Self::Local(b) => Ok(Self::allow_n_local(b, n)),
            Self::Global(g) => g.allow_n(n).await.map_err(unavailable),
        }
    }

    async fn reconcile_n(&self, delta: f64) -> Result<f64, Error> {
        match self {
            Self::Local(b) => Ok(b
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .reconcile_n(Instant::now(), delta)),
            Self::Global(g) => g.reconcile_n(delta).await.map_err(unavailable),
        }
    }

    async fn tokens(&self) -> Result<f64, Error> {
        match self {
            Self::Local(b) => Ok(b
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .tokens(Instant::now())),
            Self::Global(g) => g.tokens().await.map_err(unavailable),
        }
    }
}

#[allow(clippy::needless_pass_by_value, reason = "used as a map_err callback")]
fn unavailable(e: global::StoreError) -> Error {
    Error::RateLimitUnavailable {
        reason: e.to_string(),
    }
}

/// The buckets of one model.
#[derive(Debug)]
pub(crate) struct ModelLimiter {
    spec: RateLimit,
    unit_secs: u64,
    input: Option<Bucket>,
    output: Option<Bucket>,
}

impl ModelLimiter {
    /// Admits a request of `input_tokens` prompt tokens, or says why not.
    ///
    /// # Errors
    /// [`Error::RateLimited`] (429) when a bucket is spent, [`Error::RateLimitUnavailable`]
    /// (503) when the Redis of a global limit fails.
    pub(crate) async fn admit(&self, input_tokens: u64) -> Result<(), Error> {
        let n = input_tokens as f64;
        if let Some(b) = &self.input {
            let (ok, left) = b.allow_n(n).await?;
            if !ok {
                return Err(self.limited("input", n, left, self.spec.input_tokens_per_unit));
            }
        }
        if let Some(b) = &self.output {
            let left = match b.tokens().await {
                Ok(t) => t,
                Err(e) => {
                    self.refund_input(n).await;
                    return Err(e);
                }
            };
            if left < 1.0 {
                self.refund_input(n).await;
                return Err(self.limited("output", 1.0, left, self.spec.output_tokens_per_unit));
            }
        }
        Ok(())
    }

    async fn refund_input(&self, n: f64) {
        if let Some(b) = &self.input
            && let Err(e) = b.reconcile_n(-n).await
        {
            tracing::warn!(error = %e, "Could not give input tokens back");
        }
    }

    fn limited(&self, kind: &'static str, need: f64, left: f64, limit: Option<u32>) -> Error {
        let rate = f64::from(limit.unwrap_or(1)) / self.unit_secs as f64;
        Error::RateLimited {
            kind,
            retry_after: retry_after(need, left, rate, self.unit_secs),
        }
    }

    /// Whether the model has an output limit (then its answers are charged).
    pub(crate) fn limits_output(&self) -> bool {
        self.output.is_some()
    }

    /// Takes the answer's `completion_tokens` from the output bucket (in the background on
    /// `tasks` for a global limit; a Redis failure is logged, the tokens are then not
    /// charged).
    pub(crate) fn charge_output(self: &Arc<Self>, completion_tokens: u64, tasks: &TaskTracker) {
        let n = completion_tokens as f64;
        match &self.output {
            None => {}
            Some(Bucket::Local(b)) => {
                b.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .reconcile_n(Instant::now(), n);
            }
            Some(Bucket::Global(_)) => {
                let me = Arc::clone(self);
                tasks.spawn(async move {
                    if let Some(b) = &me.output
                        && let Err(e) = b.reconcile_n(n).await
                    {
                        tracing::warn!(error = %e, tokens = n, "Output tokens not charged");
                    }
                });
            }
        }
    }
}

/// Seconds until `need` tokens are there with `left` now at `rate` per second: at least 1,
/// at most one unit (a prompt larger than the whole limit never fits).
fn retry_after(need: f64, left: f64, rate: f64, unit_secs: u64) -> Duration {
    let secs = ((need - left).max(0.0) / rate).ceil();
    Duration::from_secs((secs as u64).clamp(1, unit_secs.max(1)))
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
        for (model, spec) in specs {
            let kept = self.models.remove(model).filter(|l| l.spec == *spec);
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
            models.insert(model.to_owned(), limiter);
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
                Some(p) => {
                    Bucket::Global(GlobalBucket::new(Arc::clone(p), model, kind, n, unit_secs))
                }
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
        m.admit(10).await.unwrap();
        let e = m.admit(1).await.unwrap_err();
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
            .admit(20)
            .await
            .unwrap();
        assert!(
            limits
                .for_model(4, &[route("old", "m", None)], "m")
                .is_none()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn output_debt_blocks_until_refilled_and_refunds_input() {
        let limits = RateLimits::default();
        let rl = r#"{"inputTokensPerUnit": 100, "outputTokensPerUnit": 10, "unit": "second"}"#;
        let m = limits
            .for_model(1, &[route("r", "m", Some(rl))], "m")
            .unwrap();
        m.admit(5).await.unwrap();
        m.charge_output(30, limits.charges());
        // 20 tokens of debt at 10 per second; the refused request's 5 input tokens come back.
        let e = m.admit(5).await.unwrap_err();
        assert_eq!(e.to_string(), "output token rate limit exceeded");
        assert_eq!(e.retry_after(), Some(Duration::from_secs(1)));
        tokio::time::advance(Duration::from_millis(2_100)).await;
        m.admit(95).await.unwrap();
    }

    #[test]
    fn retry_after_is_whole_seconds_within_one_unit() {
        // 100 per minute: 1.67 tokens/s; 10 missing → 6 s.
        assert_eq!(
            retry_after(10.0, 0.0, 100.0 / 60.0, 60),
            Duration::from_secs(6)
        );
        assert_eq!(retry_after(1.0, 0.99, 1.0, 1), Duration::from_secs(1));
        assert_eq!(
            retry_after(1_000.0, 0.0, 100.0 / 60.0, 60),
            Duration::from_secs(60)
        );
        assert_eq!(retry_after(1.0, -30.0, 0.5, 3600), Duration::from_secs(62));
    }
}
