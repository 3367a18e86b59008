//! The built-in plugins.

mod kvcache_aware;
mod least_prefill;
mod load;
mod prefix_cache;
mod simple;

pub use kvcache_aware::{KvCacheAware, KvCacheAwareArgs};
pub use least_prefill::{LeastPrefill, LeastPrefillArgs};
pub use load::{LoadImbalance, LoadImbalanceArgs};
pub use prefix_cache::{PrefixCache, PrefixCacheArgs, PrefixStore};
pub use simple::{
    GpuUsage, LeastLatency, LeastLatencyArgs, LeastRequest, LeastRequestArgs, LoraAffinity,
    LoraAffinityByName, Random,
};

use serde::de::DeserializeOwned;

use crate::registry::Registry;
use crate::{Error, Result};

impl Registry {
    /// The built-in plugins: filters `least-request`, `lora-affinity`, `lora-affinity-by-name`,
    /// `load-imbalance`; scores `least-request`, `least-latency`, `gpu-usage`, `random`,
    /// `prefix-cache`, `kvcache-aware`, `least-prefill`.
    pub fn builtin() -> Self {
        let mut r = Self::empty();
        register_builtin(&mut r);
        r
    }
}

fn register_builtin(r: &mut Registry) {
    r.register_filter("least-request", |a, _| {
        Ok(Box::new(LeastRequest::new(parse_args(
            "least-request",
            a,
        )?)?))
    });
    r.register_score("least-request", |a, _| {
        Ok(Box::new(LeastRequest::new(parse_args(
            "least-request",
            a,
        )?)?))
    });
    r.register_filter("lora-affinity", |a, _| {
        no_args("lora-affinity", a)?;
        Ok(Box::new(LoraAffinity))
    });
    r.register_filter("lora-affinity-by-name", |a, _| {
        no_args("lora-affinity-by-name", a)?;
        Ok(Box::new(LoraAffinityByName))
    });
    r.register_filter("load-imbalance", |a, _| {
        Ok(Box::new(LoadImbalance::new(parse_args(
            "load-imbalance",
            a,
        )?)?))
    });
    r.register_score("least-latency", |a, _| {
        Ok(Box::new(LeastLatency::new(parse_args(
            "least-latency",
            a,
        )?)?))
    });
    r.register_score("gpu-usage", |a, _| {
        no_args("gpu-usage", a)?;
        Ok(Box::new(GpuUsage))
    });
    r.register_score("random", |a, ctx| {
        no_args("random", a)?;
        Ok(Box::new(Random::new(ctx.seed())))
    });
    r.register_score("prefix-cache", |a, ctx| {
        let args: PrefixCacheArgs = parse_args("prefix-cache", a)?;
        PrefixCache::from_context(args, ctx).map(|p| Box::new(p) as _)
    });
    r.register_score("kvcache-aware", |a, ctx| {
        let args: KvCacheAwareArgs = parse_args("kvcache-aware", a)?;
        KvCacheAware::from_context(args, ctx).map(|p| Box::new(p) as _)
    });
    r.register_score("least-prefill", |a, ctx| {
        let args: LeastPrefillArgs = parse_args("least-prefill", a)?;
        LeastPrefill::from_context(args, ctx).map(|p| Box::new(p) as _)
    });
}

/// Parses plugin args; `null` gives the defaults. Unknown keys ([`Error::UnknownKey`]) and
/// wrong types ([`Error::Field`]) are errors with a path relative to the args, which the
/// builder puts under `pluginConfig[i].args`.
pub(crate) fn parse_args<T: DeserializeOwned + Default>(
    _plugin: &str,
    v: &serde_json::Value,
) -> Result<T> {
    if v.is_null() {
        return Ok(T::default());
    }
    crate::from_value(v, "")
}

fn no_args(plugin: &str, v: &serde_json::Value) -> Result<()> {
    match v {
        serde_json::Value::Null => Ok(()),
        serde_json::Value::Object(m) if m.is_empty() => Ok(()),
        _ => Err(invalid(plugin, "this plugin takes no args".to_owned())),
    }
}

pub(crate) fn invalid(plugin: &str, reason: String) -> Error {
    Error::InvalidArgs {
        plugin: plugin.to_owned(),
        reason,
    }
}

/// `trunc(part / total × 100)` for a match of `part` blocks out of `total` (Go Kthena's
/// integer score); 0 when `total == 0`.
pub(crate) fn ratio_score(part: usize, total: usize) -> f64 {
    if total == 0 {
        return 0.0;
    }
    (part as f64 / total as f64 * 100.0).trunc()
}

#[cfg(test)]
mod tests;
