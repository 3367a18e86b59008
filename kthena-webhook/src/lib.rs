//! Kthena's admission webhooks, shared by the controller-manager (every kind, Go's
//! `kthena-controller-manager` webhooks) and the router (ModelRoute, ModelServer and
//! ExternalModelProvider, Go's `kthena-router` webhook):
//!
//! - [`review`]: the pure handler of one `AdmissionReview` (validation and defaulting are
//!   `kthena-api`'s);
//! - [`serve_webhook`]: the TLS server answering a path table ([`PATHS`], [`ROUTER_PATHS`]);
//! - [`certificate`]: its serving certificate (files, a Secret every replica shares, or
//!   generated), and [`patch_ca_bundle`] writing the CA into the webhook configurations;
//! - cert-manager mode: [`cert_manager_injects`] tells it from the webhook configurations'
//!   annotation, [`serve_webhook_files`] serves the mounted files and picks up renewals.

mod admission;
mod cert;
mod error;
mod reload;
mod server;

pub use admission::{
    Action, ExtraCheck, PATHS, ROUTER_PATHS, Review, rejection, review, review_with,
};
pub use cert::{
    Certificate, CertificateSource, certificate, generate_certificate, load_certificate,
    secret_certificate, service_hosts,
};
pub use error::{Error, Result};
pub use reload::{CERT_RELOAD_PERIOD, INJECT_CA_ANNOTATIONS, cert_manager_injects, wait_for_files};
pub use server::{WEBHOOK_TIMEOUT, patch_ca_bundle, serve_webhook, serve_webhook_files};
