//! The admission webhook of every Kthena kind (Go's `kthena-controller-manager` webhooks):
//! [`review`] is the pure handler of one `AdmissionReview`, [`serve_webhook`] the TLS server
//! that answers on Go's paths, with its certificate and the CA bundle of the webhook
//! configurations.

mod admission;
mod server;

pub use admission::{Action, review};
pub use server::{
    CERT_SECRET_NAME, Certificate, MUTATING_WEBHOOK, SERVICE_NAME, VALIDATING_WEBHOOK,
    WEBHOOK_TIMEOUT, generate_certificate, load_certificate, patch_ca_bundle, secret_certificate,
    serve_webhook, service_hosts,
};
