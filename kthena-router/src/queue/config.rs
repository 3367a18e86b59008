//! The queue settings, read from Go Kthena's environment variables (read in
//! `pkg/kthena-router/datastore/store.go` and `pkg/kthena-router/router/router.go`).

use std::time::Duration;

use crate::config::duration::parse_go_duration;
use crate::config::env::Env;
use crate::error::Error;

/// Which queue is on.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum QueueMode {
    /// No queue: requests go straight to scheduling (the default).
    #[default]
    Off,
    /// The per-user fairness queue (`ENABLE_FAIRNESS_SCHEDULING=true`).
    Fairness(FairnessConfig),
    /// The session-boost queue (`ENABLE_SESSION_BOOST=true`).
    SessionBoost(SessionBoostConfig),
}

/// The queue settings of the router (environment only, as Go Kthena).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct QueueConfig {
    /// The queue that is on.
    pub mode: QueueMode,
}

/// Fairness queue settings (`FAIRNESS_*`).
#[derive(Debug, Clone, PartialEq)]
pub struct FairnessConfig {
    /// Longest wait in the queue before 504 (`FAIRNESS_QUEUE_TIMEOUT`, default 60 s).
    pub timeout: Duration,
    /// Weight of the user's weighted tokens in the priority
    /// (`FAIRNESS_PRIORITY_TOKEN_WEIGHT`, default 1.0, finite ≥ 0).
    pub token_weight: f64,
    /// Weight of the user's request count in the priority
    /// (`FAIRNESS_PRIORITY_REQUEST_NUM_WEIGHT`, default 0.0, finite ≥ 0).
    pub request_num_weight: f64,
    /// The usage window (`FAIRNESS_WINDOW_SIZE`, default 5 m, 1 m..=1 h).
    pub window: Duration,
    /// Weight of one input token in the usage (`FAIRNESS_INPUT_TOKEN_WEIGHT`, default 1.0).
    pub input_token_weight: f64,
    /// Weight of one output token in the usage (`FAIRNESS_OUTPUT_TOKEN_WEIGHT`, default 2.0).
    pub output_token_weight: f64,
    /// Slots of the slot mode; `0` = QPS mode (`FAIRNESS_MAX_CONCURRENT`, default 0).
    pub max_concurrent: usize,
    /// Dequeues per second of the QPS mode (`FAIRNESS_MAX_QPS`, default 100, > 0).
    pub max_qps: u32,
    /// Priority re-reads of the chosen user at dequeue time, `0` = off
    /// (`FAIRNESS_PRIORITY_REFRESH_RETRIES`, default 0).
    pub refresh_retries: u32,
    /// Queue length from which a refresh that gives up re-reads every user's priority
    /// (`FAIRNESS_REBUILD_THRESHOLD`, default 64, > 0).
    pub rebuild_threshold: usize,
    /// How the `user_id` label of the per-user families is bounded
    /// (`FAIRNESS_METRICS_MAX_USERS`, `FAIRNESS_METRICS_USER_IDLE_TIMEOUT`,
    /// `FAIRNESS_METRICS_RAW_USER_ID`; not in Go Kthena).
    pub user_labels: super::UserLabelConfig,
}

impl Default for FairnessConfig {
    /// Go Kthena's defaults.
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(60),
            token_weight: 1.0,
            request_num_weight: 0.0,
            window: Duration::from_secs(300),
            input_token_weight: 1.0,
            output_token_weight: 2.0,
            max_concurrent: 0,
            max_qps: 100,
            refresh_retries: 0,
            rebuild_threshold: 64,
            user_labels: super::UserLabelConfig::default(),
        }
    }
}

/// Session-boost queue settings (`SESSION_BOOST_*`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionBoostConfig {
    /// The session id header (`SESSION_BOOST_HEADER`, default `X-Session-ID`).
    pub header: String,
    /// Completed sessions remembered, least recently completed evicted first
    /// (`SESSION_BOOST_MAX_SESSIONS`, default 4096).
    pub max_sessions: usize,
    /// Requests in flight per pod serving the model (`SESSION_BOOST_INFLIGHT_PER_POD`,
    /// default 16).
    pub inflight_per_pod: usize,
    /// How long a freed slot is held for a follow-up turn (`SESSION_BOOST_GRACE_PERIOD`,
    /// default 0 s).
    pub grace_period: Duration,
    /// Longest wait before 504; `None` (a value ≤ 0) waits as long as the client does
    /// (`SESSION_BOOST_TIMEOUT`, default 30 s).
    pub timeout: Option<Duration>,
}

impl Default for SessionBoostConfig {
    /// Go Kthena's defaults.
    fn default() -> Self {
        Self {
            header: "X-Session-ID".into(),
            max_sessions: 4096,
            inflight_per_pod: 16,
            grace_period: Duration::ZERO,
            timeout: Some(Duration::from_secs(30)),
        }
    }
}

fn bad(name: &'static str, value: &str, reason: &str) -> Error {
    Error::Env {
        name,
        value: value.to_owned(),
        reason: reason.to_owned(),
    }
}

fn flag(env: &dyn Env, name: &'static str) -> Result<bool, Error> {
    match env.var(name) {
        None => Ok(false),
        Some(v) => match v.to_ascii_lowercase().as_str() {
            "" | "0" | "f" | "false" => Ok(false),
            "1" | "t" | "true" => Ok(true),
            _ => Err(bad(name, &v, "expected true or false")),
        },
    }
}

fn duration(env: &dyn Env, name: &'static str, into: &mut Duration) -> Result<(), Error> {
    if let Some(v) = env.var(name) {
        *into = parse_go_duration(&v).map_err(|e| bad(name, &v, &e.to_string()))?;
    }
    Ok(())
}

fn weight(env: &dyn Env, name: &'static str, into: &mut f64) -> Result<(), Error> {
    if let Some(v) = env.var(name) {
        let w: f64 = v
            .trim()
            .parse()
            .map_err(|_| bad(name, &v, "expected a number"))?;
        if !w.is_finite() || w < 0.0 {
            return Err(bad(name, &v, "must be a finite number ≥ 0"));
        }
        *into = w;
    }
    Ok(())
}

fn count<T: std::str::FromStr + PartialOrd + Default>(
    env: &dyn Env,
    name: &'static str,
    positive: bool,
    into: &mut T,
) -> Result<(), Error> {
    if let Some(v) = env.var(name) {
        let n: T = v
            .trim()
            .parse()
            .map_err(|_| bad(name, &v, "expected a whole number"))?;
        if positive && n <= T::default() {
            return Err(bad(name, &v, "must be greater than 0"));
        }
        *into = n;
    }
    Ok(())
}

impl QueueConfig {
    /// Reads Go Kthena's queue variables.
    ///
    /// # Errors
    /// [`Error::Env`] for an unparsable or out-of-range value, and for both
    /// `ENABLE_FAIRNESS_SCHEDULING` and `ENABLE_SESSION_BOOST` on (Go Kthena refuses to
    /// start).
    pub fn from_env(env: &dyn Env) -> Result<Self, Error> {
        let fairness = flag(env, "ENABLE_FAIRNESS_SCHEDULING")?;
        let boost = flag(env, "ENABLE_SESSION_BOOST")?;
        let mode = match (fairness, boost) {
            (true, true) => {
                return Err(bad(
                    "ENABLE_SESSION_BOOST",
                    "true",
                    "fairness scheduling and session boost are mutually exclusive: enable one",
                ));
            }
            (true, false) => QueueMode::Fairness(fairness_from_env(env)?),
            (false, true) => QueueMode::SessionBoost(session_from_env(env)?),
            (false, false) => QueueMode::Off,
        };
        Ok(Self { mode })
    }
}

fn fairness_from_env(env: &dyn Env) -> Result<FairnessConfig, Error> {
    let mut c = FairnessConfig::default();
    duration(env, "FAIRNESS_QUEUE_TIMEOUT", &mut c.timeout)?;
    if c.timeout.is_zero() {
        return Err(bad(
            "FAIRNESS_QUEUE_TIMEOUT",
            "0s",
            "must be greater than 0",
        ));
    }
    weight(env, "FAIRNESS_PRIORITY_TOKEN_WEIGHT", &mut c.token_weight)?;
    weight(
        env,
        "FAIRNESS_PRIORITY_REQUEST_NUM_WEIGHT",
        &mut c.request_num_weight,
    )?;
    if c.token_weight == 0.0 && c.request_num_weight == 0.0 {
        // Go: both weights 0 fall back to the token weight's default.
        c.token_weight = 1.0;
    }
    duration(env, "FAIRNESS_WINDOW_SIZE", &mut c.window)?;
    if c.window < Duration::from_secs(60) || c.window > Duration::from_secs(3600) {
        return Err(bad(
            "FAIRNESS_WINDOW_SIZE",
            &env.var("FAIRNESS_WINDOW_SIZE").unwrap_or_default(),
            "must be between 1m and 1h",
        ));
    }
    weight(
        env,
        "FAIRNESS_INPUT_TOKEN_WEIGHT",
        &mut c.input_token_weight,
    )?;
    weight(
        env,
        "FAIRNESS_OUTPUT_TOKEN_WEIGHT",
        &mut c.output_token_weight,
    )?;
    count(env, "FAIRNESS_MAX_CONCURRENT", false, &mut c.max_concurrent)?;
    count(env, "FAIRNESS_MAX_QPS", true, &mut c.max_qps)?;
    count(
        env,
        "FAIRNESS_PRIORITY_REFRESH_RETRIES",
        false,
        &mut c.refresh_retries,
    )?;
    count(
        env,
        "FAIRNESS_REBUILD_THRESHOLD",
        true,
        &mut c.rebuild_threshold,
    )?;
    let u = &mut c.user_labels;
    count(env, "FAIRNESS_METRICS_MAX_USERS", false, &mut u.max_users)?;
    duration(
        env,
        "FAIRNESS_METRICS_USER_IDLE_TIMEOUT",
        &mut u.idle_timeout,
    )?;
    if u.idle_timeout.is_zero() {
        return Err(bad(
            "FAIRNESS_METRICS_USER_IDLE_TIMEOUT",
            "0s",
            "must be greater than 0",
        ));
    }
    u.raw = flag(env, "FAIRNESS_METRICS_RAW_USER_ID")?;
    Ok(c)
}

fn session_from_env(env: &dyn Env) -> Result<SessionBoostConfig, Error> {
    let mut c = SessionBoostConfig::default();
    if let Some(h) = env.var("SESSION_BOOST_HEADER").filter(|h| !h.is_empty()) {
        http::HeaderName::from_bytes(h.as_bytes())
            .map_err(|_| bad("SESSION_BOOST_HEADER", &h, "not a valid header name"))?;
        c.header = h;
    }
    count(env, "SESSION_BOOST_MAX_SESSIONS", true, &mut c.max_sessions)?;
    count(
        env,
        "SESSION_BOOST_INFLIGHT_PER_POD",
        true,
        &mut c.inflight_per_pod,
    )?;
    duration(env, "SESSION_BOOST_GRACE_PERIOD", &mut c.grace_period)?;
    if let Some(v) = env.var("SESSION_BOOST_TIMEOUT") {
        let negative = v.trim().starts_with('-');
        let d = if negative {
            Duration::ZERO
        } else {
            parse_go_duration(&v).map_err(|e| bad("SESSION_BOOST_TIMEOUT", &v, &e.to_string()))?
        };
        c.timeout = (!d.is_zero()).then_some(d);
    }
    Ok(c)
}

#[cfg(test)]
mod tests;
