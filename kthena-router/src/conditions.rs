//! `metav1.Condition` helpers shared by the statuses the router writes (Gateway, HTTPRoute,
//! ExternalModelProvider), as Go's `apimeta.SetStatusCondition` treats them: a condition
//! keeps its `lastTransitionTime` while status, reason and message stay the same.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// A condition of type `t`, status `True` when `ok`, stamped now.
pub(crate) fn cond(
    t: &str,
    ok: bool,
    reason: &str,
    message: String,
    generation: Option<i64>,
) -> Condition {
    Condition {
        type_: t.to_owned(),
        status: if ok { "True" } else { "False" }.to_owned(),
        reason: reason.to_owned(),
        message,
        observed_generation: generation,
        last_transition_time: Time(jiff::Timestamp::now()),
    }
}

/// `new` with the `lastTransitionTime` of the same-typed condition in `old` when nothing
/// else changed.
pub(crate) fn keep_times(old: &[Condition], mut new: Vec<Condition>) -> Vec<Condition> {
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

/// Whether two condition lists agree on type, status, reason and message (Go's
/// `conditionsEqual`: the write is skipped then).
pub(crate) fn same_conditions(a: &[Condition], b: &[Condition]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| {
            x.type_ == y.type_
                && x.status == y.status
                && x.reason == y.reason
                && x.message == y.message
        })
}
