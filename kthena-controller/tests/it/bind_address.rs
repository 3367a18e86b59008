//! `--webhook-bind-address` and `--health-probe-bind-address`: the `kthena-controller` binary
//! listens for admission webhooks and health probes on the addresses given, not on every
//! interface.

use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use anyhow::Result;

/// A free TCP port on `ip`.
fn free_port(ip: &str) -> Result<u16> {
    Ok(std::net::TcpListener::bind((ip, 0))?.local_addr()?.port())
}

fn connects(addr: &str) -> Result<bool> {
    let addr: SocketAddr = addr.parse()?;
    Ok(TcpStream::connect_timeout(&addr, Duration::from_secs(2)).is_ok())
}

#[tokio::test]
async fn listeners_bind_the_given_addresses() -> Result<()> {
    let ns = kthena_testenv::namespace("bind-address").await?;
    let (hook_ip, health_ip) = ("127.39.1.2", "127.39.1.3");
    let (hook_port, health_port) = (free_port(hook_ip)?, free_port(health_ip)?);
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_kthena-controller"));
    cmd.arg("--kubeconfig")
        .arg(ns.env().kubeconfig())
        .args(["--namespace", ns.name(), "--cert-secret-name", ""])
        .arg("--controllers=-modelserving,-modelbooster,-autoscaler")
        .args(["--webhook-bind-address", hook_ip])
        .args(["--port", &hook_port.to_string()])
        .arg("--health-probe-bind-address")
        .arg(format!("{health_ip}:{health_port}"));
    let (_child, _lines, line) =
        crate::proc_support::spawn_until_logged(&mut cmd, "serving admission webhooks").await?;
    assert!(line.contains(&format!("{hook_ip}:{hook_port}")), "{line}");
    assert!(connects(&format!("{hook_ip}:{hook_port}"))?);
    assert!(connects(&format!("{health_ip}:{health_port}"))?);
    // Another loopback address of the same port: nothing listens there.
    assert!(!connects(&format!("127.39.1.4:{hook_port}"))?);
    assert!(!connects(&format!("127.39.1.4:{health_port}"))?);
    Ok(())
}
