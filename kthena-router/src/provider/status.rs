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
mod tests {
    use super::super::Secrets;
    use super::*;

    fn provider(extra: &str) -> ExternalModelProvider {
        let yaml = format!(
            "apiVersion: networking.serving.volcano.sh/v1alpha1\nkind: ExternalModelProvider\nmetadata: {{name: p, namespace: ns, generation: 2}}\nspec:\n  baseURL: https://h\n{extra}"
        );
        serde_saphyr::from_str::<ExternalModelProvider>(&yaml)
            .unwrap()
            .with_defaults()
    }

    fn summary(st: &ExternalModelProviderStatus) -> Vec<(String, String, String, String)> {
        st.conditions
            .iter()
            .map(|c| {
                (
                    c.type_.clone(),
                    c.status.clone(),
                    c.reason.clone(),
                    c.message.clone(),
                )
            })
            .collect()
    }

    fn c(t: &str, s: &str, r: &str, m: &str) -> (String, String, String, String) {
        (t.into(), s.into(), r.into(), m.into())
    }

    #[test]
    fn conditions_follow_the_credential_and_the_configuration() {
        let auth = "  auth: {secretRef: {name: s, key: k}}\n";
        let none = Secrets::new("");
        let obj = provider(auth);
        let st = status(&obj, &Provider::resolve(&obj, &none));
        assert_eq!(st.observed_generation, Some(2));
        let missing = format!(
            "Credential Secret is not found or does not have label {CREDENTIAL_LABEL}=true"
        );
        assert_eq!(
            summary(&st),
            [
                c(
                    "CredentialsResolved",
                    "False",
                    "CredentialNotFound",
                    &missing
                ),
                c("Ready", "False", "CredentialNotFound", &missing),
            ]
        );
        assert_eq!(st.conditions[1].observed_generation, Some(2));

        let mut found = Secrets::new("");
        found.insert("ns", "s", "k", "sk".into());
        let mut stored = obj.clone();
        stored.status = Some(st);
        let ready = status(&stored, &Provider::resolve(&stored, &found));
        assert!(changed(&stored, &ready));
        assert_eq!(
            summary(&ready),
            [
                c(
                    "CredentialsResolved",
                    "True",
                    "CredentialResolved",
                    "Credential Secret and key are available"
                ),
                c(
                    "Ready",
                    "True",
                    "Ready",
                    "External provider configuration is ready"
                ),
            ]
        );
        // Unchanged: no write, transition times kept.
        stored.status = Some(ready.clone());
        let again = status(&stored, &Provider::resolve(&stored, &found));
        assert!(!changed(&stored, &again));
        assert_eq!(
            again.conditions[0].last_transition_time,
            ready.conditions[0].last_transition_time
        );

        let mut empty_key = Secrets::new("");
        empty_key.add_secret("ns", "s");
        let st = status(&obj, &Provider::resolve(&obj, &empty_key));
        assert_eq!(st.conditions[0].reason, "CredentialKeyNotFound");
        assert_eq!(
            st.conditions[0].message,
            "Credential Secret key is not found"
        );

        let obj = provider("  headers: {Host: x}\n");
        let st = status(&obj, &Provider::resolve(&obj, &none));
        assert_eq!(
            summary(&st),
            [
                c(
                    "CredentialsResolved",
                    "True",
                    "CredentialNotRequired",
                    "No credential is configured"
                ),
                c(
                    "Ready",
                    "False",
                    "ConfigurationInvalid",
                    "External provider configuration is invalid"
                ),
            ]
        );
    }
}
