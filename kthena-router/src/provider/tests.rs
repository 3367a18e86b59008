use super::*;

fn provider(kind: &str, base: &str, extra: &str) -> ExternalModelProvider {
    let yaml = format!(
        "apiVersion: networking.serving.volcano.sh/v1alpha1\nkind: ExternalModelProvider\nmetadata: {{name: p, namespace: ns}}\nspec:\n  providerType: {kind}\n  baseURL: {base}\n{extra}"
    );
    serde_saphyr::from_str::<ExternalModelProvider>(&yaml)
        .unwrap()
        .with_defaults()
}

#[test]
fn rewrites_paths_as_go_kthena() {
    let none = Secrets::default();
    let cases = [
        (
            "OpenAI",
            "https://api.openai.com/v1",
            "/v1/chat/completions?x=1",
            "https://api.openai.com/v1/chat/completions?x=1",
        ),
        (
            "OpenAI",
            "https://h",
            "/v1/chat/completions",
            "https://h/v1/chat/completions",
        ),
        (
            "OpenAI",
            "https://h/",
            "/v1/responses",
            "https://h/v1/responses",
        ),
        (
            "OpenAI",
            "https://h/openai/v1/",
            "/v1/completions",
            "https://h/openai/v1/completions",
        ),
        (
            "Anthropic",
            "https://api.anthropic.com",
            "/v1/messages",
            "https://api.anthropic.com/v1/messages",
        ),
        (
            "Anthropic",
            "https://h/v1",
            "/v1/messages",
            "https://h/v1/messages",
        ),
        (
            "Anthropic",
            "https://h/proxy",
            "/v1/messages",
            "https://h/proxy/v1/messages",
        ),
    ];
    for (kind, base, path, want) in cases {
        let p = Provider::resolve(&provider(kind, base, ""), &none);
        assert_eq!(p.upstream_url(path), want, "{kind} {base} {path}");
    }
}

#[test]
fn resolves_credentials_and_rejects_reserved_headers() {
    let auth = "  auth: {secretRef: {name: s, key: k}}\n";
    let mut found = Secrets::new(" (hint)");
    found.insert("ns", "s", "k", " sk-1\n".into());
    let p = Provider::resolve(&provider("OpenAI", "https://h", auth), &found);
    assert_eq!(p.credential_state, CredentialState::Resolved);
    let (n, v) = p.credential.unwrap().unwrap();
    assert_eq!(
        (n.as_str(), v.to_str().unwrap()),
        ("authorization", "Bearer sk-1")
    );
    let p = Provider::resolve(&provider("Anthropic", "https://h", auth), &found);
    let (n, v) = p.credential.unwrap().unwrap();
    assert_eq!((n.as_str(), v.to_str().unwrap()), ("x-api-key", "sk-1"));
    let missing = Secrets::new(" (hint)");
    let p = Provider::resolve(&provider("OpenAI", "https://h", auth), &missing);
    assert_eq!(p.credential_state, CredentialState::NotFound);
    assert_eq!(
        p.credential.unwrap_err(),
        "Secret ns/s key k: not found (hint)"
    );
    let mut other_key = Secrets::default();
    other_key.insert("ns", "s", "other", "x".into());
    let p = Provider::resolve(&provider("OpenAI", "https://h", auth), &other_key);
    assert_eq!(p.credential_state, CredentialState::KeyNotFound);
    let mut blank = Secrets::default();
    blank.insert("ns", "s", "k", " \n".into());
    let p = Provider::resolve(&provider("OpenAI", "https://h", auth), &blank);
    assert_eq!(
        p.credential.unwrap_err(),
        "Secret ns/s key k: the value is only whitespace"
    );
    let bad = "  headers: {Authorization: x}\n";
    let p = Provider::resolve(&provider("OpenAI", "https://h", bad), &missing);
    assert_eq!(p.credential_state, CredentialState::NotRequired);
    assert_eq!(
        p.config_error.as_deref(),
        Some("spec.headers: Authorization may not be set here")
    );
    assert_eq!(
        p.credential.unwrap_err(),
        "spec.headers: Authorization may not be set here"
    );
}
