//! Glue between the router and `kthena-sched`: building the scheduler from the config and
//! the per-request view.

use kthena_sched::{Config, Scheduler};

use crate::error::Error;

/// Builds a scheduler from the `scheduler:` section, with a random seed for the plugins that
/// draw random numbers.
///
/// # Errors
/// [`Error::Scheduler`] with the scheduler's error (unknown plugin, invalid args, no score
/// plugin, ...); its message has the path from the top of the router file.
pub fn build_scheduler(cfg: &Config) -> Result<Scheduler, Error> {
    let cfg = cfg.clone().validate().map_err(scheduler_error)?;
    Scheduler::builder(cfg)
        .seed(clock_seed())
        .clock(clock)
        .build()
        .map_err(scheduler_error)
}

/// [`Error::Scheduler`] of a scheduler error, its path (if any) moved under `scheduler`.
pub(crate) fn scheduler_error(source: kthena_sched::Error) -> Error {
    let source = if source.path().is_some() {
        source.under("scheduler")
    } else {
        source
    };
    Error::Scheduler { source }
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
