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
    let missing =
        format!("Credential Secret is not found or does not have label {CREDENTIAL_LABEL}=true");
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
