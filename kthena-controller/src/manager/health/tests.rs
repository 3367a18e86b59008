use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use super::serve_health;

#[tokio::test]
async fn healthz_answers_ok() -> crate::testutil::TestResult {
    let (addr, server) = serve_health("127.0.0.1:0".parse()?).await?;
    let client = async {
        let mut conn = tokio::net::TcpStream::connect(addr).await?;
        conn.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            .await?;
        let mut out = String::new();
        conn.read_to_string(&mut out).await?;
        Ok::<_, Box<dyn std::error::Error>>(out)
    };
    let out = tokio::select! {
        () = server => return Err("server stopped".into()),
        out = client => out?,
    };
    assert!(out.starts_with("HTTP/1.1 200 OK\r\n"), "{out}");
    assert!(out.ends_with("\r\n\r\nok"), "{out}");
    Ok(())
}
