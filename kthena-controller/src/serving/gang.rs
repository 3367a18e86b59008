//! The kube side of gang scheduling: whether the PodGroup CRD is served (API discovery,
//! cached), and applying [`plan_pod_groups`](crate::serving::podgroup::plan_pod_groups) before the pods.

use std::collections::BTreeSet;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kthena_api::ModelServing;
use kthena_api::thirdparty::PodGroup;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::{Client, ResourceExt as _};

use crate::error::{Result, kube_err};
use crate::names::{NAME_LABEL, group_name};
use crate::serving::observed::ReplicaStatus;
use crate::serving::plan::Plan;
use crate::serving::podgroup::{annotate_pod, crd_has_sub_groups, gang_scheduled, plan_pod_groups};

/// API group/version of Volcano's PodGroup.
const API_VERSION: &str = "scheduling.volcano.sh/v1beta1";
/// How long a discovery answer is trusted before it is asked again.
const RECHECK: Duration = Duration::from_secs(30);

/// Name of Volcano's PodGroup CRD.
const CRD_NAME: &str = "podgroups.scheduling.volcano.sh";

/// What the cluster offers for gang scheduling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Support {
    /// `podgroups.scheduling.volcano.sh/v1beta1` is served.
    served: bool,
    /// Its schema has `spec.subGroupPolicy`.
    sub_groups: bool,
}

/// Whether the API server serves `podgroups.scheduling.volcano.sh/v1beta1` (API discovery)
/// and whether its CRD has `spec.subGroupPolicy`, asked at most every 30 s, and again after a
/// PodGroup call failed.
#[derive(Debug, Default)]
pub(crate) struct Discovery {
    cached: Mutex<Option<(Support, Instant)>>,
}

impl Discovery {
    fn cached(&self) -> Option<Support> {
        let guard = self
            .cached
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        guard
            .filter(|(_, at)| at.elapsed() < RECHECK)
            .map(|(v, _)| v)
    }

    fn store(&self, value: Option<Support>) {
        let mut guard = self
            .cached
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *guard = value.map(|v| (v, Instant::now()));
    }

    /// What is served. A 404 from discovery means absent; any other failure is returned
    /// (the reconcile is retried) rather than guessed. When the CRD itself cannot be read
    /// (no RBAC), sub-groups are assumed.
    async fn support(&self, client: &Client) -> Result<Support> {
        if let Some(v) = self.cached() {
            return Ok(v);
        }
        let served = match client.list_api_group_resources(API_VERSION).await {
            Ok(list) => list.resources.iter().any(|r| r.name == "podgroups"),
            Err(kube::Error::Api(e)) if e.code == 404 => false,
            Err(e) => return Err(kube_err(format!("discovering {API_VERSION}"))(e)),
        };
        let mut sub_groups = false;
        if served {
            let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
            sub_groups = match crds.get(CRD_NAME).await {
                Ok(crd) => crd_has_sub_groups(&crd),
                Err(e) => {
                    tracing::debug!(error = %e, "reading the PodGroup CRD; assuming subGroupPolicy");
                    true
                }
            };
        }
        tracing::debug!(served, sub_groups, "discovered the Volcano PodGroup API");
        let support = Support { served, sub_groups };
        self.store(Some(support));
        Ok(support)
    }
}

/// The PodGroup API to watch (in `namespace`, or all) when the CRD is served at start, so
/// that a deleted PodGroup is recreated at once; `None` without the CRD (a CRD installed
/// later is still used, found by discovery, but its objects are not watched).
pub(crate) async fn watched_api(
    discovery: &Discovery,
    client: &Client,
    namespace: Option<&str>,
) -> Option<Api<PodGroup>> {
    match discovery.support(client).await.map(|s| s.served) {
        Ok(true) => Some(match namespace {
            Some(ns) => Api::namespaced(client.clone(), ns),
            None => Api::all(client.clone()),
        }),
        Ok(false) => None,
        Err(e) => {
            tracing::warn!(error = %e, "PodGroups are not watched");
            None
        }
    }
}

/// Makes the PodGroups of `ms` match `plan` before its pods are created: creates and
/// updates the PodGroups of the groups that stay, deletes those of deleted groups, and
/// annotates the pods to create. Returns the name of a PodGroup owned by another
/// ModelServing when there is one (nothing else is done then; the caller retries).
///
/// Without the CRD or with another scheduler, nothing is done.
pub(crate) async fn sync(
    client: &Client,
    discovery: &Discovery,
    pp: &PostParams,
    ms: &ModelServing,
    plan: &mut Plan,
) -> Result<Option<String>> {
    if !gang_scheduled(ms, true) {
        return Ok(None);
    }
    let support = discovery.support(client).await?;
    if !support.served {
        return Ok(None);
    }
    let res = apply(client, pp, ms, plan, support.sub_groups).await;
    if res.is_err() {
        discovery.store(None);
    }
    let foreign = res?;
    if foreign.is_none() {
        plan.create_pods.iter_mut().for_each(annotate_pod);
    }
    Ok(foreign)
}

async fn apply(
    client: &Client,
    pp: &PostParams,
    ms: &ModelServing,
    plan: &Plan,
    sub_groups: bool,
) -> Result<Option<String>> {
    let ns = ms.namespace().unwrap_or_default();
    let name = ms.name_any();
    let api: Api<PodGroup> = Api::namespaced(client.clone(), &ns);
    let lp = ListParams::default().labels(&format!("{NAME_LABEL}={name}"));
    let existing = api
        .list(&lp)
        .await
        .map_err(kube_err(format!("listing podgroups of {ns}/{name}")))?;
    let groups: BTreeSet<String> = plan
        .groups
        .iter()
        .filter(|g| g.status != ReplicaStatus::Deleting)
        .map(|g| group_name(&name, g.ordinal))
        .collect();
    let pg_plan = plan_pod_groups(ms, &groups, &existing.items, sub_groups);
    if let Some(other) = pg_plan.foreign.first() {
        return Ok(Some(format!("podgroup {other}")));
    }
    for pg in &pg_plan.delete {
        tracing::info!(podgroup = %pg, "deleting PodGroup");
        match api.delete(pg, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(kube_err(format!("deleting podgroup {pg}"))(e)),
        }
    }
    for pg in &pg_plan.create {
        tracing::info!(podgroup = %pg.name_any(), "creating PodGroup");
        match api.create(pp, pg).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(kube_err(format!("creating podgroup {}", pg.name_any()))(e)),
        }
    }
    for pg in &pg_plan.update {
        tracing::info!(podgroup = %pg.name_any(), "updating PodGroup");
        api.replace(&pg.name_any(), pp, pg)
            .await
            .map_err(kube_err(format!("updating podgroup {}", pg.name_any())))?;
    }
    Ok(None)
}
