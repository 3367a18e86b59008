use super::*;

#[test]
fn plan_rejects_other_kinds_and_invalid_objects() {
    let svc = "apiVersion: v1\nkind: Service\nmetadata: {name: s}\n";
    assert!(
        matches!(plan("t", svc, "default"), Err(Error::Unsupported { kind }) if kind == "Service")
    );
    let bad = "apiVersion: networking.serving.volcano.sh/v1alpha1\nkind: ModelRoute\nmetadata: {name: r}\nspec: {rules: []}\n";
    let err = plan("t", bad, "default").unwrap_err();
    assert!(matches!(err, Error::Invalid { .. }), "{err}");
    assert!(
        err.to_string()
            .starts_with("ModelRoute \"r\" is invalid: spec"),
        "{err}"
    );
}

#[test]
fn plan_fills_the_namespace() {
    let route = "apiVersion: networking.serving.volcano.sh/v1alpha1\nkind: ModelRoute\nmetadata: {name: r}\nspec: {modelName: m, rules: [{targetModels: [{modelServerName: s}]}]}\n";
    let p = plan("t", route, "prod").unwrap();
    assert_eq!(p[0].namespace, "prod");
    assert_eq!(p[0].api_version, "v1alpha1");
    assert_eq!(p[0].object["metadata"]["namespace"], "prod");
}

#[test]
fn confirmation_accepts_y_and_yes_only() {
    for (answer, want) in [
        ("y\n", true),
        ("YES\n", true),
        (" y \n", true),
        ("n\n", false),
        ("\n", false),
        ("", false),
        ("yep\n", false),
    ] {
        assert_eq!(
            confirmed(&mut answer.as_bytes()).unwrap(),
            want,
            "{answer:?}"
        );
    }
}
