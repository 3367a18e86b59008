//! The in-process backend of the shared in-flight counts: several routers in one process
//! (the benchmark's `--routers N`, tests) share one [`InFlightBoard`] instead of a Redis hash,
//! with the same semantics as Redis (see the parent module):
//!
//! * a router's own `+1` and `-1` are applied to the board at once, and the board's new
//!   count for that endpoint (every router's requests) is what the router then schedules
//!   with, as the answer of Redis' `HINCRBY`;
//! * the other routers' changes to the other endpoints are seen at the next refresh, which
//!   reads every count of the route's endpoints at most once per refresh interval per
//!   router (Redis: one `HMGET` at most once per [`super::SYNC_INTERVAL`]).
//!
//! The board also carries routing decisions, which Redis does not: when a router sends a
//! request, it publishes the endpoint and the prompt's full block hashes, and every other
//! router records them in its KV index as provisional entries at its next refresh (what
//! `kvcache-aware` records for its own decisions, `KvIndex::record_routed`), so that a
//! prefix's next request follows the first wherever it arrives. A decision stays on the
//! board until every live router has read it.
//!
//! A refresh interval of zero reads the board before every scheduling decision: every
//! router then sees every other router's bookings the moment they are made, as if they were
//! one router (only possible in one process; over Redis each read is a round trip).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use kthena_sched::LoadGuard;

use super::routed::Decision;

use crate::kv::cache::KvState;
use crate::upstream::endpoint::Endpoint;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Per-endpoint in-flight counts and routing decisions shared by every router of one
/// process that was started with (a clone of) the same board, see
/// [`crate::Router::start_in_memory_with`] and the module docs. Cheap to clone: clones share
/// the state. Counts are keyed `<namespace>/<name>`, as the fields of
/// Go Kthena's Redis hash (`pkg/kthena-router/datastore/on_flight_counter.go`).
#[derive(Clone)]
pub struct InFlightBoard {
    counts: Arc<Mutex<HashMap<String, i64>>>,
    routed: Arc<Mutex<RoutedLog>>,
    refresh: Duration,
}

/// One routing decision a router published: `blocks` (chained token-block hashes of
/// `block_size` tokens, the prompt's full blocks) were sent to `endpoint`.
struct Routed {
    from: usize,
    decision: Decision,
}

/// The decisions not yet read by every router: `entries[0]` has sequence number `base`;
/// `cursors[i]` is the next sequence number router `i` reads.
#[derive(Default)]
struct RoutedLog {
    base: u64,
    entries: VecDeque<Routed>,
    cursors: Vec<u64>,
}

impl std::fmt::Debug for InFlightBoard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InFlightBoard")
            .field("refresh", &self.refresh)
            .finish_non_exhaustive()
    }
}

impl Default for InFlightBoard {
    /// A board refreshed as the Redis counts are: at most once per [`super::SYNC_INTERVAL`]
    /// (50 ms).
    fn default() -> Self {
        Self::new(super::SYNC_INTERVAL)
    }
}

impl InFlightBoard {
    /// An empty board whose routers re-read every count at most once per `refresh`
    /// (`Duration::ZERO`: before every scheduling decision).
    #[must_use]
    pub fn new(refresh: Duration) -> Self {
        Self {
            counts: Arc::new(Mutex::new(HashMap::new())),
            routed: Arc::new(Mutex::new(RoutedLog::default())),
            refresh,
        }
    }

    /// The shortest time between two refreshes of one router's view.
    #[must_use]
    pub fn refresh(&self) -> Duration {
        self.refresh
    }

    /// Requests in flight to the endpoint `namespace/name` from every router on the board.
    #[must_use]
    pub fn count(&self, namespace: &str, name: &str) -> u32 {
        let counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        let v = counts.get(&format!("{namespace}/{name}")).copied();
        u32::try_from(v.unwrap_or(0).max(0)).unwrap_or(u32::MAX)
    }

    /// Adds `by` to `field`'s count and returns the new count (never below 0).
    fn add(&self, field: &str, by: i64) -> i64 {
        let mut counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        let v = counts.entry(field.to_owned()).or_insert(0);
        *v = (*v + by).max(0);
        *v
    }

    /// Every count of `fields` (0 for an endpoint nobody sent to).
    fn read(&self, fields: impl Iterator<Item = String>) -> Vec<i64> {
        let counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        fields
            .map(|f| counts.get(&f).copied().unwrap_or(0))
            .collect()
    }
}

/// One router's handle on a board: the board, this router's number on it and when it last
/// refreshed.
#[derive(Debug)]
pub(crate) struct BoardClient {
    board: InFlightBoard,
    id: usize,
    last_sync: Mutex<Option<Instant>>,
}

impl BoardClient {
    /// A router's handle on `board`, never refreshed yet; it reads the routing decisions
    /// published from now on.
    pub(crate) fn new(board: InFlightBoard) -> Self {
        let id = {
            let mut log = lock(&board.routed);
            let next = log.base + log.entries.len() as u64;
            log.cursors.push(next);
            log.cursors.len() - 1
        };
        Self {
            board,
            id,
            last_sync: Mutex::new(None),
        }
    }

    /// Publishes a routing decision of this router (`super::routed`) for the other routers
    /// to record at their next refresh.
    pub(crate) fn routed(&self, decision: Decision) {
        lock(&self.board.routed).entries.push_back(Routed {
            from: self.id,
            decision,
        });
    }

    /// Records the other routers' decisions published since the last call in `kv`'s index
    /// (as provisional entries, [`kthena_sched::KvIndex::record_routed`]) and drops the
    /// decisions every router has read.
    fn apply_routed(&self, kv: &KvState) {
        let mut log = lock(&self.board.routed);
        let start = usize::try_from(log.cursors[self.id] - log.base).unwrap_or(usize::MAX);
        for r in log.entries.iter().skip(start).filter(|r| r.from != self.id) {
            r.decision.record(kv);
        }
        let end = log.base + log.entries.len() as u64;
        log.cursors[self.id] = end;
        let oldest = log.cursors.iter().copied().min().unwrap_or(end);
        while log.base < oldest && log.entries.pop_front().is_some() {
            log.base += 1;
        }
    }

    /// Counts one more request to `ep` on the board (the endpoint then schedules with the
    /// board's new count) and gives it back when `guard` drops.
    pub(crate) fn track(&self, ep: &Arc<Endpoint>, guard: &mut LoadGuard) {
        let field = super::field(ep);
        ep.set_shared_in_flight(Some(self.board.add(&field, 1)));
        let (board, ep) = (self.board.clone(), Arc::clone(ep));
        guard.on_release(move || {
            ep.set_shared_in_flight(Some(board.add(&field, -1)));
        });
    }

    /// Refreshes every count of `endpoints` from the board and records the other routers'
    /// routing decisions in `kv`'s index, at most once per the board's refresh interval (the
    /// other calls return at once).
    pub(crate) fn sync(&self, endpoints: &[Arc<Endpoint>], kv: &KvState) {
        if endpoints.is_empty() {
            return;
        }
        let now = Instant::now();
        {
            let mut last = self
                .last_sync
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if last.is_some_and(|t| now.duration_since(t) < self.board.refresh) {
                return;
            }
            *last = Some(now);
        }
        self.apply_routed(kv);
        let values = self.board.read(endpoints.iter().map(|e| super::field(e)));
        for (ep, v) in endpoints.iter().zip(values) {
            ep.set_shared_in_flight(Some(v));
        }
    }
}

impl Drop for BoardClient {
    /// A stopped router no longer holds back the decisions it has not read.
    fn drop(&mut self) {
        lock(&self.board.routed).cursors[self.id] = u64::MAX;
    }
}

#[cfg(test)]
mod tests;
