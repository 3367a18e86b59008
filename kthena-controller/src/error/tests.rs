use kube::core::Status;

use super::*;

fn api(message: &str, reason: &str, code: u16) -> kube::Error {
    kube::Error::Api(Status::failure(message, reason).with_code(code).boxed())
}

/// Regression: started before the CRDs were installed, the controller logged
/// `event queue error: failed to perform initial object list: ApiError: 404 page not
/// found: Failed to parse error data (Status { ... })`.
#[test]
fn a_watch_of_a_kind_the_server_does_not_serve_names_the_crd() {
    let e = kube::runtime::watcher::Error::InitialListFailed(api(
        "404 page not found\n",
        "Failed to parse error data",
        404,
    ));
    assert_eq!(
        watch_message(&e),
        "listing: the API server does not serve this resource (404 page not found): \
         is its CRD installed?"
    );
}

/// Regression: a refused write showed kube's debug dump of the whole `Status`
/// (`(Status { status: Some(Failure), code: 400, ... ListMeta { continue_: None ...`) in
/// logs and in the AutoscalingPolicy's and ModelBooster's condition messages.
#[test]
fn api_errors_read_as_the_api_servers_message() {
    let denied = "admission webhook \"validate-modelserving.volcano.sh\" denied the request";
    let e = kube_err("scaling ModelServing ns/ms")(api(denied, "BadRequest", 400));
    assert_eq!(
        e.to_string(),
        format!("scaling ModelServing ns/ms: {denied} (HTTP 400)")
    );
    assert_eq!(
        kube_message(&api("", "Conflict", 409)),
        "Conflict (HTTP 409)"
    );
    // Regression: an unreachable API server read `ServiceError: client error (Connect)`,
    // without its cause.
    #[derive(Debug)]
    struct Connect(std::io::Error);
    impl std::fmt::Display for Connect {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("client error (Connect)")
        }
    }
    impl std::error::Error for Connect {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }
    let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
    let down = kube::Error::Service(Box::new(Connect(refused)));
    assert_eq!(
        kube_message(&down),
        "cannot reach the API server: ServiceError: client error (Connect): connection refused"
    );
    assert_eq!(
        kube_message(&api(
            "404 page not found\n",
            "Failed to parse error data",
            404
        )),
        "the API server does not serve this resource (404 page not found): \
         is its CRD installed?"
    );
}
