use super::*;
use kube::core::response::{Status, StatusDetails};

fn api_error(code: u16, details_name: Option<&str>) -> kube::Error {
    let details = details_name.map(|n| StatusDetails {
        name: n.to_owned(),
        group: String::new(),
        kind: String::new(),
        uid: String::new(),
        causes: Vec::new(),
        retry_after_seconds: 0,
    });
    kube::Error::Api(Box::new(Status {
        code,
        message: format!("message {code}"),
        details,
        ..Default::default()
    }))
}

#[test]
fn api_errors_are_classified() {
    let s = "https://127.0.0.1:1";
    let obj = Some(("prod", "r"));
    let e = classify(api_error(404, None), s, Kind::ModelRoute, obj);
    assert_eq!(
        e.to_string(),
        "the cluster has no modelroutes.networking.serving.volcano.sh resource: is Kthena installed? (its CRDs are missing)"
    );
    let e = classify(api_error(404, Some("r")), s, Kind::ModelRoute, obj);
    assert_eq!(
        e.to_string(),
        "ModelRoute \"r\" not found in namespace \"prod\""
    );
    let e = classify(api_error(403, None), s, Kind::ModelServing, None);
    assert_eq!(
        e.to_string(),
        "forbidden: message 403 (ask a cluster administrator for access)"
    );
    let e = classify(api_error(401, None), s, Kind::ModelServing, None);
    assert_eq!(
        e.to_string(),
        "unauthorized: the API server rejected the credentials of the current context (message 401)"
    );
    let e = classify(api_error(500, None), s, Kind::ModelServing, None);
    assert_eq!(e.to_string(), "the API server answered 500: message 500");
}

#[test]
fn resource_names_are_plural_dot_group() {
    assert_eq!(
        resource_name(Kind::AutoscalingPolicy),
        "autoscalingpolicies.workload.serving.volcano.sh"
    );
    assert_eq!(
        resource_name(Kind::ModelServer),
        "modelservers.networking.serving.volcano.sh"
    );
}
