//! Request ids.
use super::*;

#[test]
fn request_id_is_the_clients_or_a_new_uuid_v4() {
    let mut h = http::HeaderMap::new();
    let a = RequestId::from_headers(&h);
    let b = RequestId::from_headers(&h);
    assert_ne!(a, b);
    let u = uuid::Uuid::parse_str(&a).unwrap();
    assert_eq!(u.get_version_num(), 4);
    assert_eq!(&*a, u.hyphenated().to_string());
    h.insert("x-request-id", http::HeaderValue::from_static("abc-1"));
    assert_eq!(&*RequestId::from_headers(&h), "abc-1");
    h.insert("x-request-id", http::HeaderValue::from_static(""));
    assert_eq!(RequestId::from_headers(&h).len(), 36);
    // Regression: a 10 KB id was logged, forwarded and echoed whole.
    let long = "a".repeat(MAX_REQUEST_ID_BYTES);
    h.insert("x-request-id", http::HeaderValue::from_str(&long).unwrap());
    assert_eq!(&*RequestId::from_headers(&h), long);
    let longer = "a".repeat(MAX_REQUEST_ID_BYTES + 1);
    h.insert(
        "x-request-id",
        http::HeaderValue::from_str(&longer).unwrap(),
    );
    assert!(uuid::Uuid::parse_str(&RequestId::from_headers(&h)).is_ok());
}
