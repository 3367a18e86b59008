//! The webhook's serving certificate: from files, from a Secret every replica shares (created
//! with a generated certificate when absent), or generated for this process alone.

use std::path::Path;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, PostParams};

use crate::error::{Error, Result, kube_err};

/// A serving certificate in PEM: the chain, its private key and the CA that signed it (what
/// goes into `caBundle`).
#[derive(Clone)]
pub struct Certificate {
    /// `tls.crt`: the serving certificate (PEM).
    pub cert_pem: String,
    /// `tls.key`: its private key (PEM).
    pub key_pem: String,
    /// `ca.crt`: the CA certificate to trust (PEM); equal to `cert_pem` for a file pair
    /// without a CA file.
    pub ca_pem: String,
}

impl std::fmt::Debug for Certificate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Certificate").finish_non_exhaustive()
    }
}

/// DNS names Go's certificate covers for a Service: `<svc>`, `<svc>.<ns>`, `<svc>.<ns>.svc`,
/// `<svc>.<ns>.svc.cluster.local`; plus `localhost` and `127.0.0.1` for local runs.
pub fn service_hosts(service: &str, namespace: &str) -> Vec<String> {
    vec![
        service.to_owned(),
        format!("{service}.{namespace}"),
        format!("{service}.{namespace}.svc"),
        format!("{service}.{namespace}.svc.cluster.local"),
        "localhost".to_owned(),
        "127.0.0.1".to_owned(),
    ]
}

/// Generates a CA (`kthena-webhook-ca`) and a serving certificate for `hosts` signed by it
/// (ECDSA P-256; Go uses RSA 2048, which the API server accepts alike).
///
/// # Errors
/// [`Error::Certificate`] if generation fails.
pub fn generate_certificate(hosts: &[String]) -> Result<Certificate> {
    let ca_key = rcgen::KeyPair::generate().map_err(Error::Certificate)?;
    let mut ca_params =
        rcgen::CertificateParams::new(Vec::<String>::new()).map_err(Error::Certificate)?;
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "kthena-webhook-ca");
    ca_params.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::DigitalSignature,
    ];
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).map_err(Error::Certificate)?;
    let key = rcgen::KeyPair::generate().map_err(Error::Certificate)?;
    let mut params = rcgen::CertificateParams::new(hosts.to_vec()).map_err(Error::Certificate)?;
    if let Some(first) = hosts.first() {
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, first.as_str());
    }
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    let cert = params.signed_by(&key, &ca).map_err(Error::Certificate)?;
    Ok(Certificate {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
        ca_pem: ca.pem(),
    })
}

/// Reads `--tls-cert-file` and `--tls-private-key-file`; `caBundle` is the certificate file
/// itself (the chain's root when it holds several certificates).
///
/// # Errors
/// [`Error::CertFile`] if a file cannot be read.
pub fn load_certificate(cert: &Path, key: &Path) -> Result<Certificate> {
    let read = |path: &Path| {
        std::fs::read_to_string(path).map_err(|source| Error::CertFile {
            path: path.to_owned(),
            source,
        })
    };
    let cert_pem = read(cert)?;
    Ok(Certificate {
        key_pem: read(key)?,
        ca_pem: cert_pem.clone(),
        cert_pem,
    })
}

/// The certificate every replica shares, as Go's `--cert-secret-name`: read from the Secret
/// `namespace/name` (keys `tls.crt`, `tls.key`, `ca.crt`), or generated for `hosts` and
/// created there when it does not exist. When two replicas race, the one whose create fails
/// with AlreadyExists reads the other's, so both serve the same certificate and `caBundle`.
///
/// # Errors
/// [`Error::Kube`] if the Secret cannot be read or created; [`Error::IncompleteSecret`] if
/// it lacks a key; [`Error::Certificate`] if generation fails.
pub async fn secret_certificate(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    hosts: &[String],
) -> Result<Certificate> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let read = |secret: &Secret| from_secret(secret, namespace, name);
    if let Some(secret) = api
        .get_opt(name)
        .await
        .map_err(kube_err(format!("reading secret {namespace}/{name}")))?
    {
        return read(&secret);
    }
    let cert = generate_certificate(hosts)?;
    let data = [
        ("tls.crt", &cert.cert_pem),
        ("tls.key", &cert.key_pem),
        ("ca.crt", &cert.ca_pem),
    ];
    let secret = Secret {
        metadata: kube::core::ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(namespace.to_owned()),
            ..Default::default()
        },
        type_: Some("kubernetes.io/tls".to_owned()),
        data: Some(
            data.into_iter()
                .map(|(k, v)| {
                    (
                        k.to_owned(),
                        k8s_openapi::ByteString(v.clone().into_bytes()),
                    )
                })
                .collect(),
        ),
        ..Default::default()
    };
    match api.create(&PostParams::default(), &secret).await {
        Ok(_) => Ok(cert),
        Err(kube::Error::Api(e)) if e.code == 409 => {
            let secret = api
                .get(name)
                .await
                .map_err(kube_err(format!("reading secret {namespace}/{name}")))?;
            read(&secret)
        }
        Err(e) => Err(kube_err(format!("creating secret {namespace}/{name}"))(e)),
    }
}

fn from_secret(secret: &Secret, namespace: &str, name: &str) -> Result<Certificate> {
    let key = |k: &str| {
        secret
            .data
            .as_ref()
            .and_then(|d| d.get(k))
            .map(|v| String::from_utf8_lossy(&v.0).into_owned())
            .ok_or_else(|| Error::IncompleteSecret {
                secret: format!("{namespace}/{name}"),
                key: k.to_owned(),
            })
    };
    Ok(Certificate {
        cert_pem: key("tls.crt")?,
        key_pem: key("tls.key")?,
        ca_pem: key("ca.crt")?,
    })
}

/// Where the serving certificate comes from, in Go's order of preference.
#[derive(Clone, Copy, Debug)]
pub struct CertificateSource<'a> {
    /// `--tls-cert-file` / `--webhook-tls-cert-file` and its key: used when both exist (a
    /// Secret mounted by the chart, or cert-manager's).
    pub files: (&'a Path, &'a Path),
    /// `--cert-secret-name`: the Secret every replica shares, in `namespace`; empty for none.
    pub secret: &'a str,
    /// The namespace of that Secret (the pod's, `POD_NAMESPACE`).
    pub namespace: &'a str,
    /// The DNS names a generated certificate covers ([`service_hosts`]).
    pub hosts: &'a [String],
}

/// The certificate to serve: the files when both exist, else the shared Secret (read, or
/// created with a generated certificate), else one generated for this process; when the
/// Secret cannot be read or written a certificate is generated with a warning, so a
/// missing RBAC rule degrades to one certificate per replica instead of no webhook.
///
/// # Errors
/// [`Error::CertFile`] if a file exists but cannot be read; [`Error::Certificate`] if
/// generation fails.
pub async fn certificate(client: &kube::Client, src: CertificateSource<'_>) -> Result<Certificate> {
    let (cert, key) = src.files;
    if cert.exists() && key.exists() {
        return load_certificate(cert, key);
    }
    if src.secret.is_empty() {
        return generate_certificate(src.hosts);
    }
    match secret_certificate(client, src.namespace, src.secret, src.hosts).await {
        Ok(cert) => Ok(cert),
        Err(e) => {
            tracing::warn!(error = %e, "no shared webhook certificate; generating one");
            generate_certificate(src.hosts)
        }
    }
}
