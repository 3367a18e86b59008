//! What the router tells operators: Prometheus metrics (`kthena_router_*` families with Go
//! Kthena's names, [`metrics`], and the scheduler-plugin families, [`plugin_metrics`]), the
//! access log ([`accesslog`]), and per-request accounting ([`accounting`]), which settles a
//! request's metrics, access-log line and in-flight slots once when its response body ends.

pub(crate) mod accesslog;
pub(crate) mod accounting;
pub(crate) mod label_hash;
pub(crate) mod metrics;
pub(crate) mod path_label;
pub(crate) mod plugin_metrics;
