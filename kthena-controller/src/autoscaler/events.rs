//! Warning events of the autoscaler: a metric value that is no sample (NaN, ±Inf, negative,
//! above 1e15) on the AutoscalingPolicy, naming the pod or Prometheus server, the metric and
//! the value.

use kthena_api::AutoscalingPolicy;
use kube::Resource as _;
use kube::runtime::events::{Event, EventType, Recorder};

use super::collect::Problem;

/// Reason of the Warning event published for a metric value that is no sample.
pub(super) const INVALID_METRIC_VALUE: &str = "InvalidMetricValue";

/// Publishes one Warning event `InvalidMetricValue` on `policy` per value in `problems` that
/// is no sample, related to the pod for a pod's value. The recorder folds later events of the
/// same policy and pod into one series (its key has no note), so the note names the first
/// value; the policy's `Ready` condition names the current ones. Publishing failures are
/// logged.
pub(super) async fn invalid_values(
    recorder: &Recorder,
    policy: &AutoscalingPolicy,
    problems: &[Problem],
) {
    for p in problems.iter().filter(|p| p.is_invalid_value()) {
        let ev = Event {
            type_: EventType::Warning,
            reason: INVALID_METRIC_VALUE.to_owned(),
            note: Some(format!("{p}; no scaling on it")),
            action: "Autoscale".to_owned(),
            secondary: p.pod_ref(),
        };
        if let Err(e) = recorder.publish(&ev, &policy.object_ref(&())).await {
            tracing::warn!(error = %e, "publishing an event failed");
        }
    }
}
