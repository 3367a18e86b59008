//! Which ModelServers serve a ModelServing, read without any pod existing (a target at zero
//! replicas has none): a ModelServer of the ModelServing's namespace serves it when its
//! `spec.workloadSelector` selects the labels an entry pod of one of its roles would carry
//! (the controller's own labels for ServingGroup 0 and role replica 0, then the role's
//! `entryTemplate` labels, as `serving::desired` builds them).

use std::collections::BTreeMap;

use kthena_api::{ModelServer, ModelServing};
use kube::ResourceExt as _;
use kube::api::{Api, ListParams};

use crate::error::{Result, kube_err};
use crate::names::{ENTRY_LABEL, group_name, role_id, role_labels};

/// The labels of an entry pod of each role of `ms`, in the roles' order.
pub(super) fn entry_labels(ms: &ModelServing) -> Vec<BTreeMap<String, String>> {
    let name = ms.name_any();
    let group = group_name(&name, 0);
    ms.spec
        .template
        .roles
        .iter()
        .map(|r| {
            let mut labels = role_labels(&name, &group, &r.name, &role_id(&r.name, 0));
            labels.insert(ENTRY_LABEL.to_owned(), "true".to_owned());
            let template = r.entry_template.metadata.as_ref();
            labels.extend(template.and_then(|m| m.labels.clone()).unwrap_or_default());
            labels
        })
        .collect()
}

fn all_in(want: &BTreeMap<String, String>, labels: &BTreeMap<String, String>) -> bool {
    want.iter().all(|(k, v)| labels.get(k) == Some(v))
}

/// Whether `server`'s `workloadSelector` selects a pod with `labels`: every `matchLabels`
/// pair and, with a `pdGroup`, the `groupKey` label present and the prefill or the decode
/// labels matching (the router's endpoint selection).
pub(super) fn selects(server: &ModelServer, labels: &BTreeMap<String, String>) -> bool {
    let sel = &server.spec.workload_selector;
    if !all_in(&sel.match_labels, labels) {
        return false;
    }
    sel.pd_group.as_ref().is_none_or(|g| {
        labels.contains_key(&g.group_key)
            && (all_in(&g.prefill_labels, labels) || all_in(&g.decode_labels, labels))
    })
}

/// `namespace/name` of every ModelServer in `servers` that selects an entry pod of `ms`.
pub(super) fn serving(ms: &ModelServing, servers: &[ModelServer]) -> Vec<String> {
    let pods = entry_labels(ms);
    servers
        .iter()
        .filter(|s| pods.iter().any(|l| selects(s, l)))
        .map(|s| format!("{}/{}", s.namespace().unwrap_or_default(), s.name_any()))
        .collect()
}

/// The ModelServers of `namespace`.
///
/// # Errors
/// [`crate::Error::Kube`] when the list fails.
pub(super) async fn list(client: &kube::Client, namespace: &str) -> Result<Vec<ModelServer>> {
    Api::<ModelServer>::namespaced(client.clone(), namespace)
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .map_err(kube_err(format!("listing the ModelServers of {namespace}")))
}

#[cfg(test)]
mod tests;
