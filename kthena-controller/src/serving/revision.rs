//! Revision hashes and ControllerRevisions (Go Kthena `utils/revision_util.go`).
//!
//! The template revision and the role-template hash are Go Kthena's, byte for byte
//! ([`gohash`]: the go-spew dump of the Go structs the roles decode into, FNV-1 32,
//! `rand.SafeEncodeString`), so pods and groups that Go Kthena created carry the revision
//! this controller computes and are not rolled when it takes over (`docs/controller.md`).
//! Other objects (ModelBooster-owned ones) are hashed over their JSON by [`hash_json`], with
//! the same FNV-1 32 and encoding.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use kthena_api::ModelServing;
use kthena_api::workload::Role;
use kube::ResourceExt as _;

use crate::error::{Error, Result};
use crate::names::{NAME_LABEL, REVISION_LABEL, owner_ref};

/// Alphabet of `k8s.io/apimachinery/pkg/util/rand.SafeEncodeString` (no vowels, no
/// look-alike characters, so a hash never spells a word).
const SAFE_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// FNV-1 (not FNV-1a), 32 bits: Go's `hash/fnv.New32`.
#[must_use]
pub(crate) fn fnv1_32(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5_u32, |h, &b| {
        h.wrapping_mul(0x0100_0193) ^ u32::from(b)
    })
}

/// Go's `rand.SafeEncodeString`: each byte `b` becomes `SAFE_ALPHABET[b % 27]`.
#[must_use]
pub(crate) fn safe_encode(s: &str) -> String {
    s.bytes()
        .map(|b| char::from(SAFE_ALPHABET[usize::from(b) % SAFE_ALPHABET.len()]))
        .collect()
}

pub(crate) mod gohash;

/// Go's type string of the roles a ModelServing revision hashes.
const ROLES_TYPE: &str = "[]v1alpha1.Role";
/// Go's type string of one role.
const ROLE_TYPE: &str = "v1alpha1.Role";

/// The JSON of a role without the fields Go clears before hashing (`replicas`,
/// `maxUnavailable`: `removeRoleReplicasForRevision`, so scaling is not an update). Fields
/// Go's `Role` does not have (`partition`) are ignored by the Go-type decoder.
fn hashed_role(role: &Role) -> Result<serde_json::Value> {
    let role = Role {
        replicas: None,
        max_unavailable: None,
        ..role.clone()
    };
    serde_json::to_value(role).map_err(Error::Encode)
}

/// FNV-1 32 of the JSON of `value`, encoded as Go's revisions are (for objects that have no
/// Go-identical hash to match).
///
/// # Errors
/// [`Error::Encode`] if `value` does not serialize.
pub(crate) fn hash_json(value: &impl serde::Serialize) -> Result<String> {
    let bytes = serde_json::to_vec(value).map_err(Error::Encode)?;
    Ok(safe_encode(&fnv1_32(&bytes).to_string()))
}

/// The template revision of `ms`, Go Kthena's `utils.ModelServingRevision`: the Go-identical
/// hash of its roles without `replicas` and `maxUnavailable`. Written to every pod's
/// `modelserving.volcano.sh/revision` label and to `status.updateRevision`.
///
/// # Errors
/// [`Error::Encode`] if the roles do not serialize, [`Error::GoHash`] if they hold a value
/// Go's decoder would refuse (the API server's schema keeps those out).
pub(crate) fn model_serving_revision(ms: &ModelServing) -> Result<String> {
    let roles = ms
        .spec
        .template
        .roles
        .iter()
        .map(hashed_role)
        .collect::<Result<Vec<_>>>()?;
    Ok(gohash::revision(
        ROLES_TYPE,
        &serde_json::Value::Array(roles),
    )?)
}

/// The hash of one role template (label `modelserving.volcano.sh/role-template-hash`), Go
/// Kthena's `utils.CalRoleTemplateHash`.
///
/// # Errors
/// As [`model_serving_revision`].
pub(crate) fn role_template_hash(role: &Role) -> Result<String> {
    Ok(gohash::revision(ROLE_TYPE, &hashed_role(role)?)?)
}

/// The ControllerRevision recording the roles of `revision`: name `<ms>-<revision>`, labels
/// name and revision, data `{"data": [<roles>]}`, `revision: 1`, owned by `ms`.
///
/// # Errors
/// [`Error::Encode`] if the roles do not serialize.
pub(crate) fn controller_revision(ms: &ModelServing, revision: &str) -> Result<ControllerRevision> {
    let roles = serde_json::to_value(&ms.spec.template.roles).map_err(Error::Encode)?;
    let name = ms.name_any();
    Ok(ControllerRevision {
        metadata: ObjectMeta {
            name: Some(format!("{name}-{revision}")),
            namespace: ms.namespace(),
            labels: Some(BTreeMap::from([
                (NAME_LABEL.to_owned(), name),
                (REVISION_LABEL.to_owned(), revision.to_owned()),
            ])),
            owner_references: Some(vec![owner_ref(ms)]),
            ..ObjectMeta::default()
        },
        data: RawExtension(serde_json::json!({ "data": roles })),
        revision: Some(1),
    })
}

/// The roles a ControllerRevision made by [`controller_revision`] recorded; `None` when its
/// data is not of that shape.
#[must_use]
pub(crate) fn recorded_roles(cr: &ControllerRevision) -> Option<Vec<Role>> {
    let data = cr.data.0.get("data")?;
    serde_json::from_value(data.clone()).ok()
}

#[cfg(test)]
mod tests;
