//! Loopback addresses for pod engines: 127.0.0.2, 127.0.0.3, ... (Linux routes all of
//! 127.0.0.0/8 to `lo`). One allocator per process, so several simulated nodes in one test
//! binary never hand out the same address; an address whose port is taken by another
//! process is skipped.

use std::collections::BTreeSet;
use std::io::ErrorKind;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Mutex;

use crate::config::Config;
use crate::server::{SimHandle, spawn};
use crate::{Error, Result};

/// The first address handed out.
pub(super) const FIRST: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);

/// Addresses tried before giving up (all of 127.0.0.2 ..= 127.0.255.254 would be 65 533).
const MAX_TRIES: u32 = 4096;

static IN_USE: Mutex<BTreeSet<Ipv4Addr>> = Mutex::new(BTreeSet::new());

/// An address taken from the allocator; given back on drop.
#[derive(Debug)]
pub(super) struct Lease(Ipv4Addr);

impl Lease {
    pub(super) fn ip(&self) -> IpAddr {
        IpAddr::V4(self.0)
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        in_use().remove(&self.0);
    }
}

fn in_use() -> std::sync::MutexGuard<'static, BTreeSet<Ipv4Addr>> {
    IN_USE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The lowest free address at or above `FIRST` that is not `x.x.x.0`/`x.x.x.255`.
fn take(after: u32) -> Option<Lease> {
    let mut used = in_use();
    (after..u32::from(FIRST) + MAX_TRIES)
        .map(Ipv4Addr::from)
        .filter(|ip| !matches!(ip.octets()[3], 0 | 255))
        .find(|ip| !used.contains(ip))
        .map(|ip| {
            used.insert(ip);
            Lease(ip)
        })
}

/// The lowest free address, for a pod whose processes bind their own ports.
pub(super) fn take_ip() -> Option<Lease> {
    take(u32::from(FIRST))
}

/// Starts an engine with `config` (its `port`, and its KV-event ports) on the lowest free
/// loopback address.
///
/// # Errors
/// [`Error::NoAddress`] if no address has the port free, or [`spawn`]'s error.
pub(super) async fn spawn_on_free_ip(mut config: Config) -> Result<(SimHandle, Lease)> {
    let mut next = u32::from(FIRST);
    while let Some(lease) = take(next) {
        next = u32::from(lease.0) + 1;
        config.host = lease.ip();
        match spawn(config.clone()).await {
            Ok(handle) => return Ok((handle, lease)),
            Err(Error::Bind { source, .. }) if source.kind() == ErrorKind::AddrInUse => {}
            // The KV-event (or replay) port is taken there by another process.
            Err(Error::KvEvents {
                source: zeromq::ZmqError::Network(source),
                ..
            }) if source.kind() == ErrorKind::AddrInUse => {}
            Err(e) => return Err(e),
        }
    }
    Err(Error::NoAddress { port: config.port })
}

#[cfg(test)]
mod tests;
