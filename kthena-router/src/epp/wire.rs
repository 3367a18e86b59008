//! Conversions between Envoy's ext_proc messages and the router's HTTP types: header maps,
//! the destination header and metadata, the served-endpoint and subset metadata Envoy sends,
//! and error answers as `ImmediateResponse`s.

use std::collections::HashMap;
use std::net::SocketAddr;

use envoy_types::pb::envoy::config::core::v3::header_value_option::HeaderAppendAction;
use envoy_types::pb::envoy::config::core::v3::{
    HeaderMap as PbHeaderMap, HeaderValue, HeaderValueOption, Metadata,
};
use envoy_types::pb::envoy::service::ext_proc::v3::{
    HeaderMutation, ImmediateResponse, ProcessingResponse, processing_response,
};
use envoy_types::pb::envoy::r#type::v3::HttpStatus;
use envoy_types::pb::google::protobuf::value::Kind;
use envoy_types::pb::google::protobuf::{Struct, Value};
use http::HeaderMap;
use http::header::{HeaderName, HeaderValue as HttpHeaderValue};
use http_body_util::BodyExt;

use crate::error::Error;

/// The header (and `envoy.lb` metadata key) naming the chosen endpoints.
pub(super) const DESTINATION: &str = "x-gateway-destination-endpoint";
/// The `envoy.lb` metadata key naming the endpoint that served the request.
pub(super) const SERVED: &str = "x-gateway-destination-endpoint-served";
/// The `envoy.lb.subset_hint` metadata key listing the endpoints a request may go to.
pub(super) const SUBSET: &str = "x-gateway-destination-endpoint-subset";
/// The metadata namespace of the destination and served endpoint.
pub(super) const LB_NAMESPACE: &str = "envoy.lb";
/// The metadata namespace of the subset hint.
pub(super) const SUBSET_NAMESPACE: &str = "envoy.lb.subset_hint";

/// The request line and headers Envoy sent: pseudo-headers apart.
#[derive(Debug, Clone, Default)]
pub(super) struct Head {
    /// `:method`.
    pub(super) method: String,
    /// `:path` (with the query).
    pub(super) path: String,
    /// `:authority`.
    pub(super) authority: String,
    /// `:status` (response headers only).
    pub(super) status: Option<u16>,
    /// The regular headers.
    pub(super) headers: HeaderMap,
}

/// Reads an ext_proc header map (`raw_value`, or `value` from older data planes).
pub(super) fn head(map: Option<&PbHeaderMap>) -> Head {
    let mut h = Head::default();
    for hv in map.map(|m| m.headers.as_slice()).unwrap_or_default() {
        let value: &[u8] = if hv.raw_value.is_empty() {
            hv.value.as_bytes()
        } else {
            &hv.raw_value
        };
        match hv.key.as_str() {
            ":method" => h.method = String::from_utf8_lossy(value).into_owned(),
            ":path" => h.path = String::from_utf8_lossy(value).into_owned(),
            ":authority" => h.authority = String::from_utf8_lossy(value).into_owned(),
            ":status" => h.status = std::str::from_utf8(value).ok().and_then(|s| s.parse().ok()),
            k if k.starts_with(':') => {}
            k => {
                if let (Ok(n), Ok(v)) = (
                    HeaderName::from_bytes(k.as_bytes()),
                    HttpHeaderValue::from_bytes(value),
                ) {
                    h.headers.append(n, v);
                }
            }
        }
    }
    h
}

/// The `request.protocol` attribute (`HTTP/1.1`, `HTTP/2`), when Envoy is configured to
/// send it (`request_attributes`).
pub(super) fn protocol(attributes: &HashMap<String, Struct>) -> Option<String> {
    attributes
        .values()
        .find_map(|s| match s.fields.get("request.protocol")?.kind.as_ref()? {
            Kind::StringValue(p) => Some(p.clone()),
            _ => None,
        })
}

/// A header set (overwriting any value the request had).
pub(super) fn set_header(key: &str, value: &str) -> HeaderValueOption {
    HeaderValueOption {
        header: Some(HeaderValue {
            key: key.to_owned(),
            raw_value: value.as_bytes().to_vec(),
            ..HeaderValue::default()
        }),
        append_action: HeaderAppendAction::OverwriteIfExistsOrAdd.into(),
        ..HeaderValueOption::default()
    }
}

fn string_value(s: &str) -> Value {
    Value {
        kind: Some(Kind::StringValue(s.to_owned())),
    }
}

/// `{"envoy.lb": {"x-gateway-destination-endpoint": destinations}}`.
pub(super) fn destination_metadata(destinations: &str) -> Struct {
    let inner = Struct {
        fields: HashMap::from([(DESTINATION.to_owned(), string_value(destinations))]),
    };
    Struct {
        fields: HashMap::from([(
            LB_NAMESPACE.to_owned(),
            Value {
                kind: Some(Kind::StructValue(inner)),
            },
        )]),
    }
}

fn field<'a>(md: Option<&'a Metadata>, namespace: &str, key: &str) -> Option<&'a Kind> {
    md?.filter_metadata
        .get(namespace)?
        .fields
        .get(key)?
        .kind
        .as_ref()
}

/// The endpoint that served the request (`envoy.lb` / `x-gateway-destination-endpoint-served`).
pub(super) fn served(md: Option<&Metadata>) -> Option<SocketAddr> {
    match field(md, LB_NAMESPACE, SERVED)? {
        Kind::StringValue(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// The endpoints the request must be picked from (`envoy.lb.subset_hint` /
/// `x-gateway-destination-endpoint-subset`: a list of `ip:port` strings); `None` when
/// absent. Entries that are not `ip:port` are skipped.
pub(super) fn subset(md: Option<&Metadata>) -> Option<Vec<SocketAddr>> {
    let list = match field(md, SUBSET_NAMESPACE, SUBSET)? {
        Kind::ListValue(l) => l
            .values
            .iter()
            .filter_map(|v| match &v.kind {
                Some(Kind::StringValue(s)) => s.trim().parse().ok(),
                _ => None,
            })
            .collect(),
        Kind::StringValue(s) => s.split(',').filter_map(|a| a.trim().parse().ok()).collect(),
        _ => Vec::new(),
    };
    Some(list)
}

/// The router's error answer for `e` (status, headers, OpenAI-shaped JSON body, all from
/// [`crate::error::error_response`]) as an `ImmediateResponse`.
pub(super) async fn immediate(e: &Error) -> ProcessingResponse {
    let (parts, body) = crate::error::error_response(e).into_parts();
    let body = body
        .collect()
        .await
        .map(|c| c.to_bytes())
        .unwrap_or_default();
    let set_headers = parts
        .headers
        .iter()
        .filter_map(|(k, v)| v.to_str().ok().map(|v| set_header(k.as_str(), v)))
        .collect();
    ProcessingResponse {
        response: Some(processing_response::Response::ImmediateResponse(
            ImmediateResponse {
                status: Some(HttpStatus {
                    code: i32::from(parts.status.as_u16()),
                }),
                headers: Some(HeaderMutation {
                    set_headers,
                    remove_headers: Vec::new(),
                }),
                body: body.to_vec(),
                details: format!("kthena_{}", e.code()),
                ..ImmediateResponse::default()
            },
        )),
        ..ProcessingResponse::default()
    }
}

#[cfg(test)]
mod tests;
