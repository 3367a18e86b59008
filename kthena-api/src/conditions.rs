//! `metav1.Condition` helpers for the statuses Kthena's controllers and router write.
//!
//! [`set_status_condition`] is apimachinery's `meta.SetStatusCondition`
//! (`k8s.io/apimachinery/pkg/api/meta/conditions.go`): a condition keeps its
//! `lastTransitionTime` while its status stays the same. [`keep_transition_times`] does the
//! same for a whole new list, keeping the time of a condition that did not change at all.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// A condition of type `type_`, status `True` when `status` (else `False`), stamped `now`.
#[must_use]
pub fn condition(
    type_: &str,
    status: bool,
    reason: &str,
    message: String,
    observed_generation: Option<i64>,
    now: Time,
) -> Condition {
    Condition {
        type_: type_.to_owned(),
        status: if status { "True" } else { "False" }.to_owned(),
        reason: reason.to_owned(),
        message,
        observed_generation,
        last_transition_time: now,
    }
}

/// Sets `new` in `conditions` as apimachinery's `meta.SetStatusCondition`: a condition of the
/// same type takes `new`'s status, reason, message and observed generation, and `new`'s
/// `lastTransitionTime` only when its status changes; a new type is appended.
pub fn set_status_condition(conditions: &mut Vec<Condition>, new: Condition) {
    match conditions.iter_mut().find(|c| c.type_ == new.type_) {
        Some(cur) if cur.status == new.status => {
            cur.reason = new.reason;
            cur.message = new.message;
            cur.observed_generation = new.observed_generation;
        }
        Some(cur) => *cur = new,
        None => conditions.push(new),
    }
}

/// `new` with the `lastTransitionTime` of the same-typed condition in `old` for each
/// condition whose status, reason and message did not change.
#[must_use]
pub fn keep_transition_times(old: &[Condition], mut new: Vec<Condition>) -> Vec<Condition> {
    for c in &mut new {
        if let Some(o) = old.iter().find(|o| o.type_ == c.type_)
            && o.status == c.status
            && o.reason == c.reason
            && o.message == c.message
        {
            c.last_transition_time = o.last_transition_time.clone();
        }
    }
    new
}

/// Whether two condition lists agree on type, status, reason and message, in order (Go's
/// `conditionsEqual`: a status write is skipped then).
#[must_use]
pub fn same_conditions(a: &[Condition], b: &[Condition]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| {
            x.type_ == y.type_
                && x.status == y.status
                && x.reason == y.reason
                && x.message == y.message
        })
}

#[cfg(test)]
mod tests;
