use envoy_types::pb::google::protobuf::ListValue;

use super::*;

fn md(namespace: &str, key: &str, kind: Kind) -> Metadata {
    let inner = Struct {
        fields: HashMap::from([(key.to_owned(), Value { kind: Some(kind) })]),
    };
    Metadata {
        filter_metadata: HashMap::from([(namespace.to_owned(), inner)]),
        ..Metadata::default()
    }
}

#[test]
fn reads_pseudo_headers_apart_and_raw_values_first() {
    let map = PbHeaderMap {
        headers: vec![
            HeaderValue {
                key: ":method".into(),
                raw_value: b"POST".to_vec(),
                ..HeaderValue::default()
            },
            HeaderValue {
                key: ":path".into(),
                value: "/v1/completions?x=1".into(),
                ..HeaderValue::default()
            },
            HeaderValue {
                key: "x-request-id".into(),
                raw_value: b"abc".to_vec(),
                value: "ignored".into(),
            },
        ],
    };
    let h = head(Some(&map));
    assert_eq!(h.method, "POST");
    assert_eq!(h.path, "/v1/completions?x=1");
    assert_eq!(h.status, None);
    assert_eq!(h.headers.len(), 1);
    assert_eq!(h.headers["x-request-id"], "abc");
}

#[test]
fn reads_the_served_endpoint_and_the_subset_hint() {
    let m = md(
        LB_NAMESPACE,
        SERVED,
        Kind::StringValue("10.0.0.5:8000".into()),
    );
    assert_eq!(served(Some(&m)), Some("10.0.0.5:8000".parse().unwrap()));
    assert_eq!(served(None), None);
    let list = ListValue {
        values: vec![
            string_value("10.0.0.1:80"),
            string_value("bad"),
            string_value("[::1]:81"),
        ],
    };
    let m = md(SUBSET_NAMESPACE, SUBSET, Kind::ListValue(list));
    assert_eq!(
        subset(Some(&m)),
        Some(vec![
            "10.0.0.1:80".parse().unwrap(),
            "[::1]:81".parse().unwrap()
        ])
    );
    assert_eq!(
        subset(Some(&md(LB_NAMESPACE, SERVED, Kind::BoolValue(true)))),
        None
    );
}

#[test]
fn destination_metadata_is_under_envoy_lb() {
    let s = destination_metadata("10.0.0.1:80,10.0.0.2:80");
    let Some(Kind::StructValue(inner)) = &s.fields[LB_NAMESPACE].kind else {
        panic!("{s:?}");
    };
    assert_eq!(
        inner.fields[DESTINATION].kind,
        Some(Kind::StringValue("10.0.0.1:80,10.0.0.2:80".into()))
    );
}

#[tokio::test]
async fn errors_become_immediate_responses_with_the_openai_body() {
    let e = Error::NoReadyEndpoint {
        server: "default/ms".into(),
    };
    let Some(processing_response::Response::ImmediateResponse(r)) = immediate(&e).await.response
    else {
        panic!("not an immediate response");
    };
    assert_eq!(r.status.map(|s| s.code), Some(503));
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(v["error"]["code"], "no_ready_endpoint");
    let headers = r.headers.unwrap().set_headers;
    assert!(headers.iter().any(|h| {
        h.header
            .as_ref()
            .is_some_and(|h| h.key == "content-type" && h.raw_value == b"application/json")
    }));
}
