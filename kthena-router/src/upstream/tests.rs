//! The headers sent upstream.
use super::*;

#[test]
fn upstream_headers_drop_hop_by_hop_and_connection_listed_ones() {
    let mut client = HeaderMap::new();
    for (k, v) in [
        ("connection", "keep-alive, X-Trace-Hop"),
        ("keep-alive", "timeout=5"),
        ("te", "trailers"),
        ("proxy-authorization", "Basic abc"),
        ("upgrade", "h2c"),
        ("x-trace-hop", "1"),
        ("host", "router:8080"),
        ("content-length", "12"),
        ("expect", "100-continue"),
        ("authorization", "Bearer t"),
        ("x-user", "alice"),
        ("accept-encoding", "gzip, br"),
    ] {
        client.append(
            HeaderName::from_static(k),
            HeaderValue::from_str(v).unwrap(),
        );
    }
    let up = upstream_headers(&client, "req-1");
    let mut names: Vec<&str> = up.keys().map(HeaderName::as_str).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "accept-encoding",
            "authorization",
            "content-type",
            "x-request-id",
            "x-user"
        ]
    );
    assert_eq!(up["accept-encoding"], "identity");
    assert_eq!(up["x-request-id"], "req-1");
    assert_eq!(up["content-type"], "application/json");
}
