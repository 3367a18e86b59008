use super::*;
use crate::generate_certificate;

fn served_der(c: &FileCertificate) -> Vec<u8> {
    let current = c.current.read().unwrap_or_else(PoisonError::into_inner);
    current.1.cert[0].to_vec()
}

fn der(pem: &str) -> Vec<u8> {
    CertificateDer::pem_slice_iter(pem.as_bytes())
        .next()
        .and_then(Result::ok)
        .map(|c| c.to_vec())
        .unwrap_or_default()
}

#[test]
fn a_renewed_pair_is_served_and_a_half_written_one_is_not() -> Result<()> {
    let dir = std::env::temp_dir().join(format!("kthena-webhook-reload-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|source| Error::CertFile {
        path: dir.clone(),
        source,
    })?;
    let (cert, key) = (dir.join("tls.crt"), dir.join("tls.key"));
    let write = |c: &crate::Certificate, with_key: bool| {
        std::fs::write(&cert, &c.cert_pem).expect("writable temp dir");
        if with_key {
            std::fs::write(&key, &c.key_pem).expect("writable temp dir");
        }
    };
    let hosts = ["127.0.0.1".to_owned()];
    let (a, b) = (generate_certificate(&hosts)?, generate_certificate(&hosts)?);
    write(&a, true);
    let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    let files = FileCertificate::load(&cert, &key, provider)?;
    assert_eq!(served_der(&files), der(&a.cert_pem));
    assert!(!files.reload(), "unchanged files");
    // B's certificate with A's key (the kubelet between two files): A stays.
    write(&b, false);
    assert!(!files.reload());
    assert_eq!(served_der(&files), der(&a.cert_pem));
    write(&b, true);
    assert!(files.reload());
    assert_eq!(served_der(&files), der(&b.cert_pem));
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
