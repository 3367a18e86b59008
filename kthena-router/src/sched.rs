//! Glue between the router and `kthena-sched`: building the scheduler from the config and
//! the per-request view.

use kthena_sched::{Config, Scheduler};

/// Builds a scheduler from the `scheduler:` section, with a random seed for the plugins that
/// draw random numbers.
///
/// # Errors
/// The scheduler's reason (unknown plugin, invalid args, no score plugin, ...), with paths
/// from the top of the router file: ``unknown key
/// `scheduler.pluginConfig[0].args.blockSizeToHas`: did you mean `blockSizeToHash`?``, or
/// `scheduler: <reason>` for errors without a path.
pub fn build_scheduler(cfg: &Config) -> Result<Scheduler, String> {
    let cfg = cfg.clone().validate().map_err(scheduler_reason)?;
    Scheduler::builder(cfg)
        .seed(clock_seed())
        .clock(clock)
        .build()
        .map_err(scheduler_reason)
}

/// A scheduler error as read from the top of the router file.
#[allow(clippy::needless_pass_by_value, reason = "used as a map_err callback")]
pub(crate) fn scheduler_reason(e: kthena_sched::Error) -> String {
    if e.path().is_some() {
        e.under("scheduler").to_string()
    } else {
        format!("scheduler: {e}")
    }
}

/// The plugin-timing clock: tokio's, so paused-time tests control it.
pub(crate) fn clock() -> std::time::Instant {
    tokio::time::Instant::now().into_std()
}

/// A seed from the clock (the workspace builds `rand` without an OS RNG).
pub(crate) fn clock_seed() -> u64 {
    let n = jiff::Timestamp::now().as_nanosecond();
    u64::try_from(n.rem_euclid(i128::from(u64::MAX))).unwrap_or(0x9e37_79b9_7f4a_7c15)
}
