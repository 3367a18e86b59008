//! The Redis token bucket shared by every router (Go Kthena's `GlobalRateLimiter`,
//! `filters/ratelimit/global.go`), so Go and Rust routers can share one Redis.
//!
//! State: the hash `kthena:ratelimit:<model>:<input|output>` with fields `tokens` and
//! `last_update` (seconds from Redis `TIME`, as a float), changed only by Lua scripts with
//! Go's arithmetic: refill `min(capacity, tokens + elapsed * rate)`, then take (`AllowN`),
//! read (`Tokens`) or true up (`ReconcileN`, may go below zero), always `HSET` both fields
//! and `EXPIRE` the key after `clamp(3 × unit, 600 s, 90 days)`. The scripts return the
//! tokens left as well (Go's return only the decision) for `Retry-After`.
//!
//! Every call runs on the blocking pool with a connect, read and write timeout of
//! [`REDIS_TIMEOUT`]; a failed connection is dropped and a new one opened on the next call.
//! After a failed call the pool counts as down for [`REDIS_RETRY`]: callers skip Redis
//! (and its timeouts) until then, and the first good answer after it marks it up again.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use redis::Value;

/// Connect, read and write timeout of every Redis call.
pub(crate) const REDIS_TIMEOUT: Duration = Duration::from_secs(1);

/// How long the pool counts as down after a failed call before Redis is tried again.
pub(crate) const REDIS_RETRY: Duration = Duration::from_secs(1);

/// Go's key prefix.
pub(crate) const KEY_PREFIX: &str = "kthena:ratelimit";

/// Most idle connections kept per Redis.
const MAX_IDLE: usize = 16;

/// Go's `AllowN` script; returns `{allowed, tokens}`.
const ALLOW_N: &str = r"
local key = KEYS[1]
local requested_tokens = tonumber(ARGV[1])
local capacity = tonumber(ARGV[2])
local refill_rate = tonumber(ARGV[3])
local expire_seconds = tonumber(ARGV[4])
local time_result = redis.call('time')
local current_time = tonumber(time_result[1]) + tonumber(time_result[2]) / 1000000
local current_tokens = tonumber(redis.call('hget', key, 'tokens')) or capacity
local last_update = tonumber(redis.call('hget', key, 'last_update')) or current_time
local time_passed = math.max(0, current_time - last_update)
current_tokens = math.min(capacity, current_tokens + time_passed * refill_rate)
local allowed = 0
if current_tokens >= requested_tokens then
  current_tokens = current_tokens - requested_tokens
  allowed = 1
end
redis.call('hset', key, 'tokens', current_tokens, 'last_update', current_time)
redis.call('expire', key, expire_seconds)
return {allowed, tostring(current_tokens)}
";

/// Go's `ReconcileN` script (`ARGV[1]` = delta, may be negative); returns the tokens.
const RECONCILE_N: &str = r"
local key = KEYS[1]
local delta = tonumber(ARGV[1])
local capacity = tonumber(ARGV[2])
local refill_rate = tonumber(ARGV[3])
local expire_seconds = tonumber(ARGV[4])
local time_result = redis.call('time')
local current_time = tonumber(time_result[1]) + tonumber(time_result[2]) / 1000000
local current_tokens = tonumber(redis.call('hget', key, 'tokens')) or capacity
local last_update = tonumber(redis.call('hget', key, 'last_update')) or current_time
local time_passed = math.max(0, current_time - last_update)
current_tokens = math.min(capacity, current_tokens + time_passed * refill_rate)
current_tokens = math.min(capacity, current_tokens - delta)
redis.call('hset', key, 'tokens', current_tokens, 'last_update', current_time)
redis.call('expire', key, expire_seconds)
return tostring(current_tokens)
";

/// Why a call to the rate-limit Redis failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StoreError {
    /// The client failed: bad address, connect, timeout, I/O or a Redis error reply.
    #[error("redis {address}: {source}")]
    Redis {
        /// `rateLimit.global.redis.address`.
        address: String,
        /// The client's error.
        #[source]
        source: redis::RedisError,
    },
    /// A script answered something that is not Go's reply shape.
    #[error("unexpected script reply {0:?}")]
    Reply(Value),
    /// The blocking task running the call was cancelled or panicked.
    #[error("redis call aborted: {0}")]
    Aborted(#[from] tokio::task::JoinError),
}

/// Connections to one Redis (`rateLimit.global.redis.address`).
pub(crate) struct RedisPool {
    client: redis::Client,
    address: String,
    idle: Mutex<Vec<redis::Connection>>,
    /// Until when Redis is skipped after a failure (`None`: up).
    down_until: Mutex<Option<tokio::time::Instant>>,
}

impl std::fmt::Debug for RedisPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisPool")
            .field("address", &self.address)
            .finish_non_exhaustive()
    }
}

impl RedisPool {
    /// A pool for `host:port` (also accepted: a `redis://` URL, e.g. with a DB number).
    pub(crate) fn new(address: &str) -> Result<Self, StoreError> {
        let url = if address.contains("://") {
            address.to_owned()
        } else {
            format!("redis://{address}/")
        };
        let client = redis::Client::open(url.as_str()).map_err(|source| StoreError::Redis {
            address: address.to_owned(),
            source,
        })?;
        Ok(Self {
            client,
            address: address.to_owned(),
            idle: Mutex::new(Vec::new()),
            down_until: Mutex::new(None),
        })
    }

    /// Whether Redis is to be tried now (up, or down for at least [`REDIS_RETRY`]).
    pub(crate) fn available(&self) -> bool {
        self.down_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_none_or(|t| tokio::time::Instant::now() >= t)
    }

    /// Records how a call went: a failure marks the pool down for [`REDIS_RETRY`] (logged
    /// when it was up), a success marks it up (logged when it was down).
    pub(crate) fn record(&self, failure: Option<&StoreError>) {
        let mut down = self
            .down_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match failure {
            Some(e) => {
                if down.is_none() {
                    tracing::warn!(
                        address = %self.address, error = %e,
                        "Rate-limit Redis unreachable; limiting per router until it answers"
                    );
                }
                *down = Some(tokio::time::Instant::now() + REDIS_RETRY);
            }
            None => {
                if down.take().is_some() {
                    tracing::info!(address = %self.address, "Rate-limit Redis answers again");
                }
            }
        }
    }

    fn fail(&self, source: redis::RedisError) -> StoreError {
        StoreError::Redis {
            address: self.address.clone(),
            source,
        }
    }

    fn connection(&self) -> Result<redis::Connection, StoreError> {
        let pooled = self
            .idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop();
        if let Some(c) = pooled {
            return Ok(c);
        }
        let c = self
            .client
            .get_connection_with_timeout(REDIS_TIMEOUT)
            .map_err(|e| self.fail(e))?;
        c.set_read_timeout(Some(REDIS_TIMEOUT))
            .and_then(|()| c.set_write_timeout(Some(REDIS_TIMEOUT)))
            .map_err(|e| self.fail(e))?;
        Ok(c)
    }

    /// `EVAL script 1 key args...` (blocking; bounded by [`REDIS_TIMEOUT`] per step).
    fn eval(&self, script: &str, key: &str, args: &[f64]) -> Result<Value, StoreError> {
        let mut conn = self.connection()?;
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(script).arg(1).arg(key);
        for a in args {
            cmd.arg(*a);
        }
        let v: Value = cmd.query(&mut conn).map_err(|e| self.fail(e))?;
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        if idle.len() < MAX_IDLE {
            idle.push(conn);
        }
        Ok(v)
    }
}

/// One model's input or output bucket in Redis.
#[derive(Debug, Clone)]
pub(crate) struct GlobalBucket {
    pool: Arc<RedisPool>,
    key: String,
    capacity: f64,
    rate: f64,
    expire_secs: f64,
}

impl GlobalBucket {
    /// The bucket `kthena:ratelimit:<model>:<kind>` of `limit` tokens per `unit_secs`.
    pub(crate) fn new(
        pool: Arc<RedisPool>,
        model: &str,
        kind: &str,
        limit: u32,
        unit_secs: u64,
    ) -> Self {
        Self {
            pool,
            key: format!("{KEY_PREFIX}:{model}:{kind}"),
            capacity: f64::from(limit),
            rate: f64::from(limit) / unit_secs as f64,
            expire_secs: (unit_secs.saturating_mul(3)).clamp(600, 7_776_000) as f64,
        }
    }

    /// The connections this bucket's calls go through.
    pub(crate) fn pool(&self) -> &RedisPool {
        &self.pool
    }

    /// Takes `n` tokens when that many are there; `(taken, tokens left)`.
    pub(crate) async fn allow_n(&self, n: f64) -> Result<(bool, f64), StoreError> {
        let b = self.clone();
        let v = blocking(move || {
            b.pool
                .eval(ALLOW_N, &b.key, &[n, b.capacity, b.rate, b.expire_secs])
        })
        .await?;
        match v {
            Value::Array(items) if items.len() == 2 => {
                Ok((matches!(items[0], Value::Int(1)), number(&items[1])?))
            }
            other => Err(StoreError::Reply(other)),
        }
    }

    /// Takes `delta` tokens unconditionally (a refund when negative); the tokens left.
    pub(crate) async fn reconcile_n(&self, delta: f64) -> Result<f64, StoreError> {
        let b = self.clone();
        let v = blocking(move || {
            b.pool.eval(
                RECONCILE_N,
                &b.key,
                &[delta, b.capacity, b.rate, b.expire_secs],
            )
        })
        .await?;
        number(&v)
    }
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, StoreError> + Send + 'static,
) -> Result<T, StoreError> {
    tokio::task::spawn_blocking(f).await?
}

/// The token count of a script reply (a number as text, or an integer).
fn number(v: &Value) -> Result<f64, StoreError> {
    let text = match v {
        Value::BulkString(b) => std::str::from_utf8(b).ok(),
        Value::SimpleString(s) => Some(s.as_str()),
        Value::Int(i) => return Ok(*i as f64),
        _ => None,
    };
    text.and_then(|t| t.trim().parse().ok())
        .ok_or_else(|| StoreError::Reply(v.clone()))
}
