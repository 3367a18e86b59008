//! The admission webhooks of every Kthena kind (Go's `kthena-controller-manager` webhooks),
//! served by [`kthena_webhook`] with one more rule: a ModelBooster is refused when the
//! ModelServing it generates would be ([`review`]).

use kthena_api::{FieldError, Object};

pub use kthena_webhook::{
    Action, CERT_RELOAD_PERIOD, Certificate, CertificateSource, INJECT_CA_ANNOTATIONS, PATHS,
    WEBHOOK_TIMEOUT, cert_manager_injects, certificate, generate_certificate, load_certificate,
    patch_ca_bundle, secret_certificate, serve_webhook, serve_webhook_files, service_hosts,
    wait_for_files,
};

/// Go's ValidatingWebhookConfiguration name (`kthena-controller-manager-validating-webhook`).
pub const VALIDATING_WEBHOOK: &str = "kthena-controller-manager-validating-webhook";
/// Go's MutatingWebhookConfiguration name (`kthena-controller-manager-mutating-webhook`).
pub const MUTATING_WEBHOOK: &str = "kthena-controller-manager-mutating-webhook";
/// Go's webhook Service name (`--service-name` default).
pub const SERVICE_NAME: &str = "kthena-controller-manager-webhook";
/// Go's Secret holding the generated webhook certificate (`--cert-secret-name` default).
pub const CERT_SECRET_NAME: &str = "kthena-controller-manager-webhook-certs";

/// Answers one admission review as [`kthena_webhook::review`] does, and also refuses a
/// ModelBooster whose generated ModelServing would be refused.
pub fn review(action: Action, body: &[u8]) -> Vec<u8> {
    kthena_webhook::review_with(action, body, booster_rules)
}

/// The ModelServing a valid ModelBooster generates, validated as the ModelServing webhook
/// would: a booster whose names make pod names longer than 63 characters (or any other
/// rule of the generated object) is refused at once, with the generated object's own
/// message under `spec`, instead of being accepted and then failing. Go Kthena accepts it.
fn booster_rules(object: &Object) -> Vec<FieldError> {
    let Object::ModelBooster(booster) = object else {
        return Vec::new();
    };
    let serving = match crate::booster::model_serving(booster, &crate::booster::Images::default()) {
        Ok(ms) => ms.with_defaults(),
        Err(e) => return vec![FieldError::new("spec", e.to_string())],
    };
    let name = serving.metadata.name.clone().unwrap_or_default();
    serving
        .validate()
        .err()
        .unwrap_or_default()
        .into_iter()
        .map(|e| {
            FieldError::new(
                "spec",
                format!("the ModelServing {name} it generates is not valid: {e}"),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests;
