//! The status conditions of an `ExternalModelProvider` in cluster mode, with the types,
//! reasons and messages of Go Kthena's `externalmodelprovider_controller.go`:
//! `CredentialsResolved` (is the credential there and usable) then `Ready` (can requests
//! go out: the credential's failure, or `ConfigurationInvalid`).

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kthena_api::ExternalModelProvider;
use kthena_api::networking::ExternalModelProviderStatus;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};

use super::{CREDENTIAL_LABEL, CredentialState, Provider};
use crate::conditions::{cond, keep_times, same_conditions};

/// The status of `obj` as resolved into `p`.
pub(crate) fn status(obj: &ExternalModelProvider, p: &Provider) -> ExternalModelProviderStatus {
    let g = obj.metadata.generation;
    let (ok, reason, message) = match &p.credential_state {
        CredentialState::NotRequired => (
            true,
            "CredentialNotRequired",
            "No credential is configured".to_owned(),
        ),
        CredentialState::Resolved => (
            true,
            "CredentialResolved",
            "Credential Secret and key are available".to_owned(),
        ),
        CredentialState::NotFound => (
            false,
            "CredentialNotFound",
            format!(
                "Credential Secret is not found or does not have label {CREDENTIAL_LABEL}=true"
            ),
        ),
        CredentialState::KeyNotFound => (
            false,
            "CredentialKeyNotFound",
            "Credential Secret key is not found".to_owned(),
        ),
        CredentialState::Invalid(why) => (false, "CredentialInvalid", why.clone()),
    };
    let credentials = cond("CredentialsResolved", ok, reason, message.clone(), g);
    let ready = if p.config_error.is_some() {
        cond(
            "Ready",
            false,
            "ConfigurationInvalid",
            "External provider configuration is invalid".into(),
            g,
        )
    } else if ok {
        cond(
            "Ready",
            true,
            "Ready",
            "External provider configuration is ready".into(),
            g,
        )
    } else {
        cond("Ready", false, reason, message, g)
    };
    let old = obj.status.clone().unwrap_or_default();
    ExternalModelProviderStatus {
        observed_generation: g,
        conditions: merge(&old.conditions, vec![credentials, ready]),
    }
}

/// `ours` set into `old` as `SetStatusCondition` does: same-typed conditions replaced in
/// place (keeping their transition time when unchanged), new ones appended, others kept.
fn merge(old: &[Condition], ours: Vec<Condition>) -> Vec<Condition> {
    let ours = keep_times(old, ours);
    let mut out: Vec<Condition> = old.to_vec();
    for c in ours {
        match out.iter_mut().find(|o| o.type_ == c.type_) {
            Some(slot) => *slot = c,
            None => out.push(c),
        }
    }
    out
}

/// Whether `new` differs from the stored status in anything but transition times.
pub(crate) fn changed(obj: &ExternalModelProvider, new: &ExternalModelProviderStatus) -> bool {
    let old = obj.status.clone().unwrap_or_default();
    old.observed_generation != new.observed_generation
        || !same_conditions(&old.conditions, &new.conditions)
}

/// Writes (merge patch of `/status`) the status of every provider in `objects` whose
/// resolved form in `resolved` (by `namespace/name`) changes it. Failures are logged; the
/// next watch event retries.
pub(crate) async fn write_all(
    client: &Client,
    objects: &[Arc<ExternalModelProvider>],
    resolved: &HashMap<String, Arc<Provider>>,
) {
    for obj in objects {
        let (Some(ns), Some(name)) = (&obj.metadata.namespace, &obj.metadata.name) else {
            continue;
        };
        let Some(p) = resolved.get(&format!("{ns}/{name}")) else {
            continue;
        };
        let st = status(obj, p);
        if !changed(obj, &st) {
            continue;
        }
        let api = Api::<ExternalModelProvider>::namespaced(client.clone(), ns);
        let patch = Patch::Merge(serde_json::json!({ "status": st }));
        match api
            .patch_status(name, &PatchParams::default(), &patch)
            .await
        {
            Ok(_) => {}
            // Deleted meanwhile.
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(err) => {
                tracing::warn!(provider = %p.key, %err, "Cannot write the ExternalModelProvider status");
            }
        }
    }
}

#[cfg(test)]
mod tests;
