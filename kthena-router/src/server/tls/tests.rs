//! Tests of the inference listener's TLS files: errors name the file and say what is wrong.

use super::*;

fn reason(cert: &Path, key: &Path) -> String {
    match acceptor(cert, key) {
        Ok(_) => panic!("accepted {cert:?} and {key:?}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn a_pair_is_accepted_and_bad_files_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["localhost".to_owned()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let (crt, pem_key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
    std::fs::write(&crt, cert.pem()).unwrap();
    std::fs::write(&pem_key, key.serialize_pem()).unwrap();
    assert!(acceptor(&crt, &pem_key).is_ok());

    let missing = dir.path().join("missing.crt");
    let text = reason(&missing, &pem_key);
    assert!(
        text.starts_with(&format!(
            "invalid config {}: tls: cannot read the file: ",
            missing.display()
        )),
        "{text}"
    );
    let empty = dir.path().join("empty.crt");
    std::fs::write(&empty, "").unwrap();
    assert_eq!(
        reason(&empty, &pem_key),
        format!(
            "invalid config {}: tls: no certificate in the file",
            empty.display()
        )
    );
    // The certificate given as the key: no private key in it.
    let text = reason(&crt, &crt);
    assert!(
        text.starts_with(&format!(
            "invalid config {}: tls: not a PEM private key",
            crt.display()
        )),
        "{text}"
    );
    // A key of another certificate.
    let other = dir.path().join("other.key");
    std::fs::write(&other, rcgen::KeyPair::generate().unwrap().serialize_pem()).unwrap();
    let text = reason(&crt, &other);
    assert!(
        text.starts_with(&format!("invalid config {}: tls: ", crt.display())),
        "{text}"
    );
}
