//! The admission webhooks of every Kthena kind (Go's `kthena-controller-manager` webhooks),
//! served by [`kthena_webhook`] with two more rules ([`review`]): a ModelServing's
//! `spec.plugins` must name built-in plugins with configs they can decode, and a ModelBooster
//! is refused when the ModelServing it generates would be.

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
/// ModelServing whose `spec.plugins` the controller cannot run
/// ([`crate::serving::plugins::validate`]: `spec.plugins[1].name: unknown plugin "foo";
/// built-in plugins: demo-pod-tweaks, lws-standard-labels`) and a ModelBooster whose
/// generated ModelServing would be refused.
pub fn review(action: Action, body: &[u8]) -> Vec<u8> {
    kthena_webhook::review_with(action, body, controller_rules)
}

/// The rules of this controller on top of `kthena-api`'s: [`plugin_rules`] and
/// [`booster_rules`].
fn controller_rules(object: &Object) -> Vec<FieldError> {
    let mut errors = plugin_rules(object);
    errors.extend(booster_rules(object));
    errors
}

/// A ModelServing's `spec.plugins` checked against the built-in registry. Go admits any
/// plugin name and config; the controller then fails to create every pod of the
/// ModelServing.
fn plugin_rules(object: &Object) -> Vec<FieldError> {
    let Object::ModelServing(ms) = object else {
        return Vec::new();
    };
    crate::serving::plugins::validate(crate::serving::plugins::Registry::builtin(), ms)
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
