use super::*;

fn expired() -> watcher::Error {
    let status = kube::core::Status::failure("too old resource version: 10 (42)", "Expired")
        .with_code(410)
        .boxed();
    watcher::Error::WatchError(status)
}

fn refused() -> watcher::Error {
    watcher::Error::WatchStartFailed(kube::Error::Service("Connection refused".into()))
}

/// Regression: after an API server restart every watch resumed with `410 Expired`, and
/// kube-rs' default back-off (0.8 s doubling to 30 s, jitter adding up to as much again,
/// reset only after two minutes) made each of them one more pause: after a 60 s outage the
/// router saw changes 76 s later. A 410 now re-lists at once.
#[test]
fn an_expired_watch_relists_at_once_even_after_an_outage() {
    let mut retry = Retry::new();
    let mut now = Instant::now();
    // A 60 s outage: the watch cannot be started, again and again.
    for _ in 0..60 {
        let d = retry.delay(&refused(), now);
        assert!(d <= RETRY_MAX, "{d:?}");
        now += d.max(Duration::from_millis(1));
    }
    // The API server is back; the watch resumes from its old resourceVersion: 410.
    assert_eq!(retry.delay(&expired(), now), Duration::ZERO);
    // A second 410 soon after is an error like the others (no list in a loop)...
    let d = retry.delay(&expired(), now + Duration::from_millis(50));
    assert!(d >= RETRY_MIN && d <= RETRY_MAX, "{d:?}");
    // ...until the watch was healthy for RETRY_RESET.
    now += RETRY_RESET + Duration::from_secs(1);
    assert_eq!(retry.delay(&expired(), now), Duration::ZERO);
}

/// Regression: the documented 30 s cap was not one (backon's jitter doubled it: gaps of about
/// 50 s were seen). Every delay is now within RETRY_MAX, jitter included.
#[test]
fn the_delay_grows_from_the_minimum_and_never_exceeds_the_cap() {
    let mut retry = Retry::new();
    let mut now = Instant::now();
    let first = retry.delay(&refused(), now);
    assert!(first >= RETRY_MIN && first < RETRY_MIN * 2, "{first:?}");
    let mut max = first;
    for _ in 0..1000 {
        now += Duration::from_millis(500);
        let d = retry.delay(&refused(), now);
        assert!(d <= RETRY_MAX, "{d:?}");
        max = max.max(d);
    }
    assert!(max >= RETRY_MAX / 2, "never grew: {max:?}");
    // Quiet for RETRY_RESET: back to the minimum.
    now += RETRY_RESET;
    let d = retry.delay(&refused(), now);
    assert!(d >= RETRY_MIN && d < RETRY_MIN * 2, "{d:?}");
}

#[test]
fn only_an_expired_watch_event_is_an_expiry() {
    assert!(is_expired(&expired()));
    assert!(!is_expired(&refused()));
    // A 410 answering the watch request itself leaves kube-rs resuming from the same
    // resourceVersion (no list): it is retried as any error.
    let gone = kube::core::Status::failure("gone", "Expired")
        .with_code(410)
        .boxed();
    assert!(!is_expired(&watcher::Error::WatchStartFailed(
        kube::Error::Api(gone)
    )));
}

/// Regression: with the ExternalModelProvider CRD deleted, the router logged `ApiError:
/// 404 page not found: Failed to parse error data (Status { ... })` for ever, never
/// saying that a CRD was missing.
#[test]
fn a_watch_of_a_kind_without_its_crd_says_so() {
    let status = kube::core::Status::failure("404 page not found\n", "Failed to parse error data")
        .with_code(404)
        .boxed();
    let err = watcher::Error::InitialListFailed(kube::Error::Api(status));
    assert_eq!(
        watch_error_text("ExternalModelProvider", &err),
        "the API server does not serve ExternalModelProvider (404): is its CRD installed? \
         (kubectl apply --server-side -f deploy/crds/)"
    );
    let err = watcher::Error::InitialListFailed(kube::Error::Api(
        kube::core::Status::failure("404 page not found\n", "")
            .with_code(404)
            .boxed(),
    ));
    assert_eq!(
        watch_error_text("HTTPRoute", &err),
        "the API server does not serve HTTPRoute (404): is its CRD installed? (the Gateway \
         API's standard CRDs, from its release: \
         https://gateway-api.sigs.k8s.io/guides/#installing-gateway-api)"
    );
    let forbidden = kube::core::Status::failure("pods is forbidden", "Forbidden")
        .with_code(403)
        .boxed();
    let err = watcher::Error::WatchFailed(kube::Error::Api(forbidden));
    assert_eq!(
        watch_error_text("Pod", &err),
        "pods is forbidden (HTTP 403)"
    );
}
