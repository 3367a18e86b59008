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
    start_prometheus_with(tag, Some(target), None).await
}

/// What a Prometheus serves behind its `--web.config.file`: HTTPS with this certificate and
/// key, and basic authentication of `user` with `password`.
pub(crate) struct WebConfig {
    pub(crate) cert_pem: String,
    pub(crate) key_pem: String,
    pub(crate) ca_pem: String,
    pub(crate) user: String,
    pub(crate) password: String,
}

/// [`start_prometheus`] scraping `target` when given, behind `web` when given (then its URL
/// is `https://127.0.0.1:<port>` and readiness is checked over TLS with the credentials).
pub(crate) async fn start_prometheus_with(
    tag: &str,
    target: Option<&str>,
    web: Option<&WebConfig>,
) -> Result<Prometheus> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let dir = std::env::temp_dir().join(format!("kthena-prom-{}-{tag}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let mut config = "global: {scrape_interval: 1s, evaluation_interval: 1s}\n".to_owned();
    if let Some(target) = target {
        config += &format!(
            "scrape_configs:\n- job_name: engines\n  static_configs: [{{targets: ['{target}']}}]\n"
        );
    }
    std::fs::write(dir.join("prometheus.yml"), config)?;
    let bin = std::env::var("PROMETHEUS_BIN").unwrap_or_else(|_| "prometheus".to_owned());
    let mut cmd = tokio::process::Command::new(&bin);
    cmd.arg(format!(
        "--config.file={}",
        dir.join("prometheus.yml").display()
    ))
    .arg(format!(
        "--storage.tsdb.path={}",
        dir.join("data").display()
    ))
    .arg(format!("--web.listen-address=127.0.0.1:{port}"));
    let mut scheme = "http";
    if let Some(web) = web {
        std::fs::write(dir.join("tls.crt"), &web.cert_pem)?;
        std::fs::write(dir.join("tls.key"), &web.key_pem)?;
        let hash = bcrypt::hash(&web.password, 4)?;
        let conf = format!(
            "tls_server_config:\n  cert_file: {}\n  key_file: {}\nbasic_auth_users:\n  {}: '{hash}'\n",
            dir.join("tls.crt").display(),
            dir.join("tls.key").display(),
            web.user,
        );
        std::fs::write(dir.join("web.yml"), conf)?;
        cmd.arg(format!(
            "--web.config.file={}",
            dir.join("web.yml").display()
        ));
        scheme = "https";
    }
    let child = cmd
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting {bin} (scripts/services.sh installs it)"))?;
    let url = format!("{scheme}://127.0.0.1:{port}");
    let deadline = tokio::time::Instant::now() + WAIT;
    while !ready(&url, web).await {
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

/// Whether `GET <url>/-/ready` answers 200 (over TLS trusting `web`'s CA, with its
/// credentials, when given).
async fn ready(url: &str, web: Option<&WebConfig>) -> bool {
    let mut req = http::Request::get(format!("{url}/-/ready"));
    let resp = match web {
        None => match req.body(Full::new(Bytes::new())) {
            Ok(req) => http().request(req).await,
            Err(_) => return false,
        },
        Some(web) => {
            let Ok(client) = super::prometheus_tls::tls_client(&web.ca_pem) else {
                return false;
            };
            let basic = super::prometheus_tls::basic(&web.user, &web.password);
            req = req.header("authorization", basic);
            match req.body(Full::new(Bytes::new())) {
                Ok(req) => client.request(req).await,
                Err(_) => return false,
            }
        }
    };
    resp.is_ok_and(|r| r.status() == http::StatusCode::OK)
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
