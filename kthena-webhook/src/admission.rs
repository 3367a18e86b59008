//! Admission review handling as a pure function: an `AdmissionReview` in, an
//! `AdmissionReview` out, with `kthena-api`'s validation and defaulting (the rules are not
//! repeated here). Paths and messages are Go Kthena's
//! (`pkg/model-booster-controller/webhook/*`, `pkg/model-serving-controller/webhook/validator.go`,
//! `pkg/autoscaler/webhook/*`).

use json_patch::{Patch, PatchOperation};
use kthena_api::{FieldError, Object};
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use serde_json::Value;

/// What a webhook path does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Validate the object (`with_defaults()` then `validate()`, plus `validate_update()` on
    /// UPDATE); a rejection lists every problem.
    Validate,
    /// Default the object: a JSON patch of the fields `with_defaults()` adds.
    Mutate,
}

/// The webhook paths served, as `(path, action)`: Go's controller-manager paths
/// (`/validate-workload-ai-v1alpha1-modelserving`, `/validate/modelbooster`,
/// `/validate/autoscalingpolicy`, `/mutate/modelbooster`, `/mutate/autoscalingpolicy`), Go's
/// router paths (`/validate/modelroute`, `/validate/modelserver`,
/// `/validate/externalmodelprovider`), and `/mutate/<kind>` for the other kinds.
pub const PATHS: &[(&str, Action)] = &[
    (
        "/validate-workload-ai-v1alpha1-modelserving",
        Action::Validate,
    ),
    ("/validate/modelserving", Action::Validate),
    ("/validate/modelbooster", Action::Validate),
    ("/validate/autoscalingpolicy", Action::Validate),
    ("/validate/modelroute", Action::Validate),
    ("/validate/modelserver", Action::Validate),
    ("/validate/externalmodelprovider", Action::Validate),
    ("/mutate/modelserving", Action::Mutate),
    ("/mutate/modelbooster", Action::Mutate),
    ("/mutate/autoscalingpolicy", Action::Mutate),
    ("/mutate/modelroute", Action::Mutate),
    ("/mutate/modelserver", Action::Mutate),
    ("/mutate/externalmodelprovider", Action::Mutate),
];

/// Go's router webhook paths (`kthena-router-validating-webhook`): validation of
/// ModelRoute, ModelServer and ExternalModelProvider (Go
/// `charts/kthena/charts/networking/templates/kthena-router/component/validating-webhook.yaml`).
pub const ROUTER_PATHS: &[(&str, Action)] = &[
    ("/validate/modelroute", Action::Validate),
    ("/validate/modelserver", Action::Validate),
    ("/validate/externalmodelprovider", Action::Validate),
];

/// The action of a webhook path, `None` for an unknown path (the server routes [`PATHS`]).
#[cfg(test)]
pub(crate) fn action_for(path: &str) -> Option<Action> {
    PATHS.iter().find(|(p, _)| *p == path).map(|(_, a)| *a)
}

/// Answers one admission review: `body` is the JSON `AdmissionReview` the API server posts,
/// the result is the JSON `AdmissionReview` to return (always HTTP 200).
///
/// Never panics: a body that is not an `AdmissionReview` (or has no `request`) gets a
/// review with `allowed: false` and the decoding error; an object that does not decode as
/// its kind is denied with the field path and the error. DELETE and CONNECT, and kinds that
/// are not Kthena's, are allowed unchanged.
pub fn review(action: Action, body: &[u8]) -> Vec<u8> {
    review_with(action, body, |_| Vec::new())
}

/// More rules for an object that passed its own validation: the problems found (none: it is
/// admitted). The controller-manager refuses a ModelBooster whose generated ModelServing
/// would be refused.
pub type ExtraCheck = fn(&Object) -> Vec<FieldError>;

/// The answer of a webhook path: [`review`] or a [`review_with`] of more rules.
pub type Review = fn(Action, &[u8]) -> Vec<u8>;

/// [`review`] with `extra` rules applied on validation (see [`ExtraCheck`]).
pub fn review_with(action: Action, body: &[u8], extra: ExtraCheck) -> Vec<u8> {
    let response = match serde_json::from_slice::<AdmissionReview<DynamicObject>>(body) {
        Err(e) => AdmissionResponse::invalid(format!("decoding the AdmissionReview: {e}")),
        Ok(review) => match TryInto::<AdmissionRequest<DynamicObject>>::try_into(review) {
            Err(_) => AdmissionResponse::invalid("the AdmissionReview has no request"),
            Ok(req) => respond(action, &req, extra),
        },
    };
    let patch = response.patch.clone();
    // Serializing plain strings, bools and bytes cannot fail; fall back to an empty review.
    let mut out = serde_json::to_value(response.into_review()).unwrap_or_default();
    // kube copies the request's `kind` and `apiVersion` into the answer; the API server
    // accepts only an `AdmissionReview` of `admission.k8s.io` (a request of another kind was
    // answered with that kind; found by fuzzing).
    if let Some(map) = out.as_object_mut() {
        map.insert("kind".into(), "AdmissionReview".into());
        let version = map.get("apiVersion").and_then(serde_json::Value::as_str);
        if !version.is_some_and(|v| v.starts_with("admission.k8s.io/")) {
            map.insert("apiVersion".into(), "admission.k8s.io/v1".into());
        }
    }
    // kube writes the patch as an array of numbers; the API (Go `[]byte`) writes base64.
    if let (Some(patch), Some(slot)) = (patch, out.pointer_mut("/response/patch")) {
        *slot = serde_json::to_value(k8s_openapi::ByteString(patch)).unwrap_or_default();
    }
    serde_json::to_vec(&out).unwrap_or_default()
}

fn respond(
    action: Action,
    req: &AdmissionRequest<DynamicObject>,
    extra: ExtraCheck,
) -> AdmissionResponse {
    let response = AdmissionResponse::from(req);
    if !matches!(req.operation, Operation::Create | Operation::Update) {
        return response;
    }
    let Some(object) = &req.object else {
        return response.deny("the request has no object");
    };
    let value = match serde_json::to_value(object) {
        Ok(v) => v,
        Err(e) => return response.deny(format!("encoding the object: {e}")),
    };
    let decoded = match kthena_api::decode_value("object", value.clone()) {
        Ok(o) => o,
        Err(kthena_api::Error::Parse(e)) if !e.path.is_empty() => {
            return response.deny(format!("{}: {}", e.path, e.message));
        }
        Err(e) => return response.deny(e),
    };
    if !decoded.is_kthena() {
        return response;
    }
    match action {
        Action::Validate => {
            let old = req.old_object.as_ref().and_then(|o| {
                let v = serde_json::to_value(o).ok()?;
                kthena_api::decode_value("oldObject", v).ok()
            });
            match validate(decoded, old.as_ref(), extra) {
                Ok(()) => response,
                Err((kind, errors)) => response.deny(rejection(&kind, &errors)),
            }
        }
        Action::Mutate => match defaulting_patch(&value, decoded) {
            Ok(patch) if patch.0.is_empty() => response,
            Ok(patch) => match response.clone().with_patch(patch) {
                Ok(r) => r,
                Err(e) => response.deny(e),
            },
            Err(e) => response.deny(e),
        },
    }
}

/// Validates a decoded object as the API server would see it (defaults applied first), with
/// the update rules against `old` when it is the same kind. On error returns the kind and
/// every problem. `extra` runs on an object that passed its own rules.
fn validate(
    object: Object,
    old: Option<&Object>,
    extra: ExtraCheck,
) -> Result<(), (String, Vec<FieldError>)> {
    let object = object.with_defaults();
    let mut errors = object.validate().err().unwrap_or_default();
    let update = match (&object, old) {
        (Object::ModelServing(new), Some(Object::ModelServing(old))) => new.validate_update(old),
        (Object::ModelRoute(new), Some(Object::ModelRoute(old))) => new.validate_update(old),
        _ => Ok(()),
    };
    errors.extend(update.err().unwrap_or_default());
    if errors.is_empty() {
        errors = extra(&object);
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err((object.kind().to_owned(), errors))
    }
}

/// The message of a refused object: Go's webhook messages, `validation failed:` then one
/// line per problem (`  - spec.x: ...`); a ModelServer's problems on one line joined by
/// `; ` (Go's `pkg/kthena-router/webhook`).
pub fn rejection(kind: &str, errors: &[FieldError]) -> String {
    if kind == "ModelServer" {
        let joined: Vec<String> = errors.iter().map(ToString::to_string).collect();
        return format!("validation failed: {}", joined.join("; "));
    }
    let mut out = String::from("validation failed:");
    for e in errors {
        out.push_str("\n  - ");
        out.push_str(&e.to_string());
    }
    out
}

/// The JSON patch that turns `original` (the request's object) into its defaulted form: only
/// `add` operations under `/spec` (defaulting only fills missing fields; anything else the
/// typed round trip changes, such as number formatting, is left as the user wrote it). For
/// AutoscalingPolicy this gives Go's mutator patches (`add /spec/behavior` with the whole
/// default when it is missing, `add /spec/behavior/scaleDown/stabilizationWindow`, ...).
///
/// # Errors
/// The serialization error of the defaulted object (none for well-formed objects).
pub(crate) fn defaulting_patch(
    original: &Value,
    object: Object,
) -> Result<Patch, kthena_api::Error> {
    let defaulted = object.with_defaults().to_json()?;
    let ops = json_patch::diff(original, &defaulted)
        .0
        .into_iter()
        .filter(|op| match op {
            PatchOperation::Add(add) => add.path.as_str().starts_with("/spec/"),
            _ => false,
        })
        .collect();
    Ok(Patch(ops))
}

#[cfg(test)]
mod tests;
