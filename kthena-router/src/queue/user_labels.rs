//! The `user_id` label of the fairness queue's per-user families, bounded: the user ids come
//! from clients (the body's `user` without authentication), so one series per value would
//! let a client grow `/metrics` without limit and would publish identities on the metrics
//! port, which has no authentication.
//!
//! * **Hashed by default**: the label is `u-` and the first 16 hex digits of the SHA-256 of
//!   the user id (64 bits: distinct users do not collide in practice, and the id is not on
//!   the page). `FAIRNESS_METRICS_RAW_USER_ID=true` writes the id itself, cut to
//!   [`MAX_RAW_LABEL_BYTES`] bytes (at a character boundary).
//! * **Capped**: at most `FAIRNESS_METRICS_MAX_USERS` distinct labels (default 1000) have
//!   series of their own; requests of further users count under [`OTHER`] until a label
//!   expires.
//! * **Expired when idle**: a label not recorded for `FAIRNESS_METRICS_USER_IDLE_TIMEOUT`
//!   (default 10 m) has its series removed (checked when the metrics are read and when a
//!   label is recorded) and its place in the cap freed.

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use sha2::{Digest, Sha256};
use tokio::time::Instant;

/// The label of requests whose user did not fit under the cap.
pub(crate) const OTHER: &str = "other";

/// The longest raw `user_id` label, bytes.
pub(crate) const MAX_RAW_LABEL_BYTES: usize = 64;

/// How the `user_id` label is bounded (`FAIRNESS_METRICS_*`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserLabelConfig {
    /// Distinct user labels with series of their own (`FAIRNESS_METRICS_MAX_USERS`,
    /// default 1000; 0 puts every user under `other`).
    pub max_users: usize,
    /// Idle time after which a label's series are removed
    /// (`FAIRNESS_METRICS_USER_IDLE_TIMEOUT`, default 10 m, > 0).
    pub idle_timeout: Duration,
    /// Publish the user id itself (cut to 64 bytes) instead of its hash
    /// (`FAIRNESS_METRICS_RAW_USER_ID`, default false).
    pub raw: bool,
}

impl Default for UserLabelConfig {
    fn default() -> Self {
        Self {
            max_users: 1000,
            idle_timeout: Duration::from_secs(600),
            raw: false,
        }
    }
}

/// One tracked label: when it was last recorded and the models it has series for.
#[derive(Debug)]
struct Tracked {
    last_seen: Instant,
    models: HashSet<String>,
}

/// The labels in use (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct UserLabels {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    cfg: UserLabelConfig,
    labels: HashMap<String, Tracked>,
}

/// The label of `user` under `cfg`, before the cap.
fn label_of(user: &str, cfg: &UserLabelConfig) -> String {
    if cfg.raw {
        let mut end = user.len().min(MAX_RAW_LABEL_BYTES);
        while !user.is_char_boundary(end) {
            end -= 1;
        }
        return user[..end].to_owned();
    }
    let digest = Sha256::digest(user.as_bytes());
    let mut s = String::with_capacity(18);
    s.push_str("u-");
    for b in &digest[..8] {
        let _ = write!(s, "{b:02x}");
    }
    s
}

impl UserLabels {
    /// Sets the bounds (the router's fairness settings).
    pub(crate) fn configure(&self, cfg: UserLabelConfig) {
        self.lock().cfg = cfg;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The label to record `user`'s request for `model` under, now: its own (hash or cut
    /// id) while the cap allows, else [`OTHER`]. Returns the labels whose series expired
    /// (with their models), for the caller to remove.
    pub(crate) fn label(&self, model: &str, user: &str) -> (String, Vec<(String, String)>) {
        let now = Instant::now();
        let mut st = self.lock();
        let expired = st.expire(now);
        let label = label_of(user, &st.cfg);
        let label = if st.labels.contains_key(&label)
            || st.labels.keys().filter(|l| *l != OTHER).count() < st.cfg.max_users
        {
            label
        } else {
            OTHER.to_owned()
        };
        let t = st.labels.entry(label.clone()).or_insert_with(|| Tracked {
            last_seen: now,
            models: HashSet::new(),
        });
        t.last_seen = now;
        t.models.insert(model.to_owned());
        (label, expired)
    }

    /// Forgets the labels idle for the idle timeout; returns their `(model, label)` pairs.
    pub(crate) fn expire_idle(&self) -> Vec<(String, String)> {
        self.lock().expire(Instant::now())
    }
}

impl State {
    fn expire(&mut self, now: Instant) -> Vec<(String, String)> {
        let idle = self.cfg.idle_timeout;
        let mut gone = Vec::new();
        self.labels.retain(|label, t| {
            let keep = now.saturating_duration_since(t.last_seen) < idle;
            if !keep {
                gone.extend(t.models.drain().map(|m| (m, label.clone())));
            }
            keep
        });
        gone
    }
}

#[cfg(test)]
mod tests;
