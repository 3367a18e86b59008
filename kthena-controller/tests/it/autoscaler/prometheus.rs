//! A real Prometheus server for the autoscaler's `prometheus` metric source.

use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use bytes::Bytes;
use http_body_util::Full;

use super::{WAIT, body_of, http};

/// A real Prometheus (Debian's `prometheus`, installed by `scripts/services.sh`) scraping
/// `target` every second, on a free loopback port; stopped when dropped.
pub(crate) struct Prometheus {
    _child: tokio::process::Child,
    pub(crate) url: String,
    dir: std::path::PathBuf,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

pub(crate) async fn start_prometheus(tag: &str, target: &str) -> Result<Prometheus> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let dir = std::env::temp_dir().join(format!("kthena-prom-{}-{tag}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let config = format!(
        "global: {{scrape_interval: 1s, evaluation_interval: 1s}}\n\
         scrape_configs:\n- job_name: engines\n  static_configs: [{{targets: ['{target}']}}]\n"
    );
    std::fs::write(dir.join("prometheus.yml"), config)?;
    let bin = std::env::var("PROMETHEUS_BIN").unwrap_or_else(|_| "prometheus".to_owned());
    let child = tokio::process::Command::new(&bin)
        .arg(format!(
            "--config.file={}",
            dir.join("prometheus.yml").display()
        ))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("data").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting {bin} (scripts/services.sh installs it)"))?;
    let url = format!("http://127.0.0.1:{port}");
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let req = http::Request::get(format!("{url}/-/ready")).body(Full::new(Bytes::new()))?;
        if let Ok(resp) = http().request(req).await
            && resp.status() == http::StatusCode::OK
        {
            break;
        }
        if tokio::time::Instant::now() > deadline {
            bail!("prometheus never became ready");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(Prometheus {
        _child: child,
        url,
        dir,
    })
}

/// The value of an instant query (`sum(...)`), 0 while there is no sample yet.
pub(crate) async fn prom_value(url: &str, query: &str) -> Result<f64> {
    let body = format!(
        "query={}",
        query
            .replace('(', "%28")
            .replace(')', "%29")
            .replace(':', "%3A")
    );
    let req = http::Request::post(format!("{url}/api/v1/query"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(Full::new(Bytes::from(body)))?;
    let body = body_of(req).await?;
    let v: serde_json::Value = serde_json::from_slice(&body)?;
    Ok(v["data"]["result"][0]["value"][1]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0.0))
}
