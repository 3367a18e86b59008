//! `metav1.Condition` helpers shared by the statuses the router writes (Gateway, HTTPRoute,
//! ExternalModelProvider): those of `kthena_api::conditions`, stamped with the current time.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
pub(crate) use kthena_api::conditions::{keep_transition_times as keep_times, same_conditions};

/// A condition of type `t`, status `True` when `ok`, stamped now.
pub(crate) fn cond(
    t: &str,
    ok: bool,
    reason: &str,
    message: String,
    generation: Option<i64>,
) -> Condition {
    let now = Time(jiff::Timestamp::now());
    kthena_api::conditions::condition(t, ok, reason, message, generation, now)
}
