use super::*;

fn headers(v: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(http::header::AUTHORIZATION, v.parse().unwrap());
    h
}

#[test]
fn bearer_token_follows_go() {
    assert_eq!(bearer_token(&headers("Bearer abc")), Some("abc"));
    assert_eq!(bearer_token(&headers("  bEaReR   abc  ")), Some("abc"));
    for bad in ["abc", "Bearer ", "Bearer a b", "Basic abc", ""] {
        assert_eq!(bearer_token(&headers(bad)), None, "{bad:?}");
    }
    assert_eq!(bearer_token(&HeaderMap::new()), None);
}

#[test]
fn time_claims_and_sub() {
    let cfg = AuthConfig {
        issuer: "i".into(),
        ..AuthConfig::default()
    };
    let c = |v: Value| v.as_object().unwrap().clone();
    let now = 1_000.0;
    let ok = c(serde_json::json!({"iss": "i", "sub": "u", "exp": 1000}));
    assert_eq!(check_claims(&cfg, &ok, now), Ok("u".into()));
    let cases = [
        (
            serde_json::json!({"iss": "i", "sub": "u", "exp": 999}),
            "time claims validation failed: token has expired",
        ),
        (
            serde_json::json!({"iss": "i", "sub": "u", "exp": 2000, "nbf": 1001}),
            "time claims validation failed: token not yet valid",
        ),
        (
            serde_json::json!({"iss": "i", "sub": "u", "exp": 2000, "iat": 1061}),
            "time claims validation failed: token issued in the future",
        ),
        (
            serde_json::json!({"iss": "i", "exp": 2000, "iat": 1060}),
            "subject claim (sub) missing",
        ),
        (
            serde_json::json!({"iss": "i", "sub": "u", "exp": "soon"}),
            "time claims validation failed: invalid exp value: \"soon\"",
        ),
        (
            serde_json::json!({"sub": "u", "exp": 2000}),
            "issuer validation failed: invalid issuer: expected i, got ",
        ),
    ];
    for (claims, want) in cases {
        assert_eq!(check_claims(&cfg, &c(claims), now), Err(want.to_owned()));
    }
    let aud = AuthConfig {
        audiences: vec!["a".into()],
        ..cfg
    };
    let no_aud = c(serde_json::json!({"iss": "i", "sub": "u", "exp": 2000}));
    assert_eq!(
        check_claims(&aud, &no_aud, now),
        Err("audience validation failed: audience claim missing".into())
    );
}

#[test]
fn scopes_from_scope_and_scp() {
    let c = |v: Value| v.as_object().unwrap().clone();
    let p = scopes(&c(
        serde_json::json!({"scope": " openid  kthena:lora-admin ", "scp": ["a", 3, "b"]}),
    ));
    assert_eq!(p, ["openid", "kthena:lora-admin", "a", "b"]);
    assert_eq!(scopes(&c(serde_json::json!({"scp": "x y"}))), ["x", "y"]);
    assert!(scopes(&c(serde_json::json!({"scope": 7}))).is_empty());
}

#[test]
fn jwks_documents() {
    let doc = br#"{"keys":[{"kty":"weird"},{"kty":"EC","crv":"P-256","kid":"k","x":"f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU","y":"x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"}]}"#;
    let keys = parse_jwks(doc).unwrap();
    assert_eq!(keys.len(), 1);
    assert_eq!(key_algorithms(&keys[0]), vec![Algorithm::ES256]);
    assert!(parse_jwks(br#"{"keys":[]}"#).is_err());
    assert!(parse_jwks(b"nope").is_err());
}
