//! Names, labels and owner references of the objects a ModelServing owns (Go Kthena
//! `pkg/apis/workload/v1alpha1/labels.go`, `pkg/model-serving-controller/utils/utils.go`).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kthena_api::ModelServing;
use kthena_api::workload::API_VERSION;
use kube::ResourceExt as _;

/// Label: the ModelServing's name.
pub(crate) const NAME_LABEL: &str = "modelserving.volcano.sh/name";
/// Label: the ServingGroup's name (`<ms>-<ordinal>`).
pub(crate) const GROUP_NAME_LABEL: &str = "modelserving.volcano.sh/group-name";
/// Label: the role's name.
pub(crate) const ROLE_LABEL: &str = "modelserving.volcano.sh/role";
/// Label: the role replica's id (`<role>-<ordinal>`).
pub(crate) const ROLE_ID_LABEL: &str = "modelserving.volcano.sh/role-id";
/// Label: `"true"` on entry pods only.
pub(crate) const ENTRY_LABEL: &str = "modelserving.volcano.sh/entry";
/// Label: the ModelServing template revision the pod was made from.
pub(crate) const REVISION_LABEL: &str = "modelserving.volcano.sh/revision";
/// Label: the hash of the role template the pod was made from.
pub(crate) const ROLE_TEMPLATE_HASH_LABEL: &str = "modelserving.volcano.sh/role-template-hash";
/// Pod annotation read when scaling down: an integer cost (invalid or missing = 0); cheaper
/// groups and roles are deleted first (the Kubernetes ReplicaSet convention).
pub(crate) const POD_DELETION_COST_ANNOTATION: &str = "controller.kubernetes.io/pod-deletion-cost";

/// Env: `workerReplicas + 1`.
pub(crate) const GROUP_SIZE_ENV: &str = "GROUP_SIZE";
/// Env: `<entryPodName>.<namespace>`, the DNS name of the role replica's headless service.
pub(crate) const ENTRY_ADDRESS_ENV: &str = "ENTRY_ADDRESS";
/// Env: `0` on the entry pod, `1..=workerReplicas` on workers.
pub(crate) const WORKER_INDEX_ENV: &str = "WORKER_INDEX";

/// ServingGroup name: `<ms>-<ordinal>`.
#[must_use]
pub(crate) fn group_name(ms: &str, ordinal: u32) -> String {
    format!("{ms}-{ordinal}")
}

/// Role replica id: `<role>-<ordinal>`.
#[must_use]
pub(crate) fn role_id(role: &str, ordinal: u32) -> String {
    format!("{role}-{ordinal}")
}

/// Pod name: `<group>-<roleId>-<index>`; index 0 is the entry pod, `1..=workerReplicas`
/// the workers. The role replica's headless service has the entry pod's name.
#[must_use]
pub(crate) fn pod_name(group: &str, role_id: &str, index: u32) -> String {
    format!("{group}-{role_id}-{index}")
}

/// The ordinal at the end of a group name or role id (Go's regex `(.*)-([0-9]+)$`), with the
/// part before it; `None` if the name does not end in `-<digits>` or the number exceeds
/// `i32::MAX` (Go parses it as a 32-bit integer).
#[must_use]
pub(crate) fn split_ordinal(name: &str) -> Option<(&str, u32)> {
    let (head, digits) = name.rsplit_once('-')?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: i32 = digits.parse().ok()?;
    Some((head, u32::try_from(n).ok()?))
}

/// The controller owner reference every child carries: apiVersion
/// `workload.serving.volcano.sh/v1alpha1`, kind `ModelServing`, controller and
/// blockOwnerDeletion true.
#[must_use]
pub(crate) fn owner_ref(ms: &ModelServing) -> OwnerReference {
    OwnerReference {
        api_version: API_VERSION.to_owned(),
        kind: "ModelServing".to_owned(),
        name: ms.name_any(),
        uid: ms.uid().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// True if `refs` name the ModelServing of `uid` (apiVersion, kind and UID must match, as
/// Go's `IsOwnedByModelServingWithUID`).
#[must_use]
pub(crate) fn owned_by(refs: Option<&[OwnerReference]>, uid: &str) -> bool {
    refs.unwrap_or_default()
        .iter()
        .any(|r| r.api_version == API_VERSION && r.kind == "ModelServing" && r.uid == uid)
}

/// Labels of a role replica's objects: name, group-name, role, role-id (the headless
/// service's labels; pods add revision, template hash and entry).
#[must_use]
pub(crate) fn role_labels(
    ms: &str,
    group: &str,
    role: &str,
    role_id: &str,
) -> BTreeMap<String, String> {
    BTreeMap::from([
        (NAME_LABEL.to_owned(), ms.to_owned()),
        (GROUP_NAME_LABEL.to_owned(), group.to_owned()),
        (ROLE_LABEL.to_owned(), role.to_owned()),
        (ROLE_ID_LABEL.to_owned(), role_id.to_owned()),
    ])
}

/// The status `labelSelector` of the scale subresource: selects the entry pod of role replica
/// 0 of the first role, so that one pod per ServingGroup matches (an HPA's count is groups).
#[must_use]
pub(crate) fn scale_label_selector(ms: &str, first_role: &str) -> String {
    format!(
        "{ENTRY_LABEL}=true,{NAME_LABEL}={ms},{ROLE_LABEL}={first_role},{ROLE_ID_LABEL}={first_role}-0"
    )
}

#[cfg(test)]
mod tests;
