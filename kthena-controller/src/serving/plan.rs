//! The ModelServing reconcile as a pure function: desired actions from observed children,
//! in Go Kthena's order (`syncModelServing`): ServingGroup replicas, role replicas per
//! group, headless services; the status module computes the status from the result.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::jiff::Timestamp;
use kthena_api::ModelServing;
use kthena_api::workload::{RecoveryPolicy, Role, RolloutStrategyType};
use kube::ResourceExt as _;

use crate::error::Result;
use crate::names::{group_name, role_id};
use crate::serving::desired::{RoleReplicaRef, headless_service, role_replica_pods};
use crate::serving::observed::{Observed, ObservedGroup, ObservedRole, ReplicaStatus};
use crate::serving::recovery::ReplicaCheck;
use crate::serving::revision::{model_serving_revision, role_template_hash};
use crate::serving::rolling::{role_rolling_deletions, rolling_update_deletions};
use crate::serving::view::{GroupView, group_partition, role_status};

/// A role replica to delete: its pods (labels group-name, role, role-id) and its service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoleReplicaId {
    /// ServingGroup name.
    pub group: String,
    /// Role name.
    pub role: String,
    /// Role id `<role>-<r>`.
    pub role_id: String,
}

/// What one reconcile does, in order: delete groups, delete role replicas, delete pods, create pods
/// (entry pod first in each role replica), create services.
#[derive(Debug, Clone, Default)]
pub struct Plan {
    /// The ModelServing's template revision.
    pub revision: String,
    /// Groups to delete (names, in Go's scale-down order).
    pub delete_groups: Vec<String>,
    /// Role replicas to delete (recovery, then Go's role scale-down order, per group).
    pub delete_roles: Vec<RoleReplicaId>,
    /// Errored pods to delete (recovery policy `None`).
    pub delete_pods: Vec<String>,
    /// Reconcile again after this long (an errored pod's grace period ends).
    pub requeue_after: Option<Duration>,
    /// Pods to create, in creation order.
    pub create_pods: Vec<Pod>,
    /// Headless services to create (missing ones only).
    pub create_services: Vec<Service>,
    /// Every ServingGroup after the plan, by ordinal.
    pub groups: Vec<GroupView>,
}

/// Status of a group: Deleting when all its pods terminate; Running when every spec role has
/// exactly `replicas` role replicas, all Running; else Creating.
#[must_use]
pub(crate) fn group_status(roles: &[Role], group: &ObservedGroup) -> ReplicaStatus {
    if group.deleting() {
        return ReplicaStatus::Deleting;
    }
    let all_running = roles.iter().all(|role| {
        let seen = group.roles.get(&role.name);
        let want = usize::try_from(role.replicas.unwrap_or(1)).unwrap_or(0);
        seen.is_some_and(|replicas| {
            replicas.len() == want
                && replicas
                    .values()
                    .all(|r| role_status(role, r) == ReplicaStatus::Running)
        }) || (want == 0 && seen.is_none_or(BTreeMap::is_empty))
    });
    if all_running {
        ReplicaStatus::Running
    } else {
        ReplicaStatus::Creating
    }
}

/// Go's scale-down order (`binpack_scaledown.go`) over `(ordinal, status, deletion cost)`:
/// ordinals below `protected` come last; then status priority ascending (not Running
/// first), Σ pod-deletion-cost ascending, ordinal descending. Returns the first `count`
/// ordinals of that order.
#[must_use]
pub(crate) fn scale_down_order(
    items: &[(u32, ReplicaStatus, i64)],
    protected: u32,
    count: usize,
) -> Vec<u32> {
    let mut sorted = items.to_vec();
    sorted.sort_by_key(|&(ordinal, status, cost)| {
        (
            ordinal < protected,
            status.priority(),
            cost,
            Reverse(ordinal),
        )
    });
    sorted.into_iter().take(count).map(|(o, _, _)| o).collect()
}

/// The lowest `count` ordinals not in `taken`.
fn missing_ordinals(taken: &BTreeSet<u32>, count: usize) -> Vec<u32> {
    (0..).filter(|o| !taken.contains(o)).take(count).collect()
}

/// A template the groups are made from: its revision, roles and role template hashes.
struct Template {
    revision: String,
    roles: Vec<Role>,
    hashes: BTreeMap<String, String>,
}

impl Template {
    fn new(revision: String, roles: Vec<Role>) -> Result<Self> {
        let hashes = roles
            .iter()
            .map(|r| Ok((r.name.clone(), role_template_hash(r)?)))
            .collect::<Result<BTreeMap<_, _>>>()?;
        Ok(Self {
            revision,
            roles,
            hashes,
        })
    }
}

/// Everything [`plan`] needs besides the ModelServing and the observed children.
struct Ctx<'a> {
    ms: &'a ModelServing,
    /// Pods whose create the API server refused ([`Observed::not_created`]).
    not_created: &'a BTreeSet<String>,
    /// The spec's template.
    new: Template,
    /// `status.currentRevision`'s recorded template, when it is another revision.
    old: Option<Template>,
    partition: u32,
    policy: RecoveryPolicy,
    grace_s: i64,
    now: Timestamp,
    role_rolling: bool,
}

impl Ctx<'_> {
    /// The template of an existing group: the recorded old one for a partition-protected
    /// group still at that revision, else the spec's.
    fn template(&self, ordinal: u32, revision: &str) -> &Template {
        match &self.old {
            Some(old) if ordinal < self.partition && old.revision == revision => old,
            _ => &self.new,
        }
    }

    /// The template of a group to create: Go's `scaleUpServingGroups` recreates a missing
    /// ordinal below the partition at `status.currentRevision`, from its ControllerRevision.
    fn template_for_new(&self, ordinal: u32) -> &Template {
        match &self.old {
            Some(old) if ordinal < self.partition => old,
            _ => &self.new,
        }
    }

    fn check(
        &self,
        t: &Template,
        group: &ObservedGroup,
        role: &Role,
        (r, seen): (u32, &ObservedRole),
    ) -> ReplicaCheck {
        let at = role_ref(&group.name, role, r, &t.revision, &t.hashes);
        ReplicaCheck::new(
            role_replica_pods(self.ms, &at),
            seen,
            self.not_created,
            (self.grace_s, self.now),
        )
    }

    /// True when a live role replica of `group` is broken (ServingGroupRecreate deletes
    /// the whole group then).
    fn group_broken(&self, t: &Template, group: &ObservedGroup) -> bool {
        t.roles.iter().any(|role| {
            let replicas = group.roles.get(&role.name).into_iter().flatten();
            replicas
                .filter(|(_, r)| !r.pods.is_empty())
                .any(|(&o, r)| self.check(t, group, role, (o, r)).broken())
        })
    }
}

/// The recorded roles of `status.currentRevision` with the spec's role `replicas` (scaling
/// is not a template change, so a protected group follows the spec's counts), when the
/// ModelServing has a partition and that revision is not `revision`.
fn old_template(ms: &ModelServing, seen: &Observed, revision: &str) -> Result<Option<Template>> {
    let current = ms
        .status
        .as_ref()
        .and_then(|s| s.current_revision.as_deref());
    let Some(recorded) = seen.current.as_ref() else {
        return Ok(None);
    };
    if group_partition(ms) == 0 || current != Some(&recorded.revision) || current == Some(revision)
    {
        return Ok(None);
    }
    let mut roles = recorded.roles.clone();
    for role in &mut roles {
        let spec = ms.spec.template.roles.iter().find(|r| r.name == role.name);
        if let Some(spec) = spec {
            role.replicas = spec.replicas;
        }
    }
    Template::new(recorded.revision.clone(), roles).map(Some)
}

/// Plans one reconcile of `ms` (defaults applied) from what exists; `now` decides which
/// errored pods are past `restartGracePeriodSeconds`. Order as Go: ServingGroup replicas,
/// the ServingGroup rolling update ([`crate::serving::rolling::rolling_update_deletions`]), role replicas,
/// headless services.
///
/// Groups and role replicas still terminating keep their ordinal: they are neither counted
/// as surplus nor replaced until they are gone. A broken role replica (a pod lost, or an
/// errored pod past its grace period) is handled by `recoveryPolicy`: `RoleRecreate`
/// deletes the role replica, `ServingGroupRecreate` the whole group (both are recreated
/// once gone), `None` deletes the errored pods and recreates the missing ones. A missing
/// pod of [`Observed::not_created`] (its create was refused) is not lost: it is created
/// again and the pods that exist are kept, whatever the policy.
///
/// # Errors
/// [`crate::Error::Encode`] if the roles cannot be hashed.
pub(crate) fn plan(ms: &ModelServing, seen: &Observed, now: Timestamp) -> Result<Plan> {
    let revision = model_serving_revision(ms)?;
    let ctx = Ctx {
        ms,
        not_created: &seen.not_created,
        new: Template::new(revision.clone(), ms.spec.template.roles.clone())?,
        old: old_template(ms, seen, &revision)?,
        partition: group_partition(ms),
        policy: ms.spec.recovery_policy.unwrap_or_default(),
        grace_s: ms.spec.template.restart_grace_period_seconds.unwrap_or(0),
        now,
        role_rolling: ms.spec.rollout_strategy.as_ref().map(|r| r.type_)
            == Some(RolloutStrategyType::RoleRollingUpdate),
    };
    let mut plan = Plan {
        revision,
        ..Plan::default()
    };
    let new_groups = scale_groups(&ctx, seen, &mut plan);
    for o in rolling_update_deletions(ms, &plan.groups, &plan.revision) {
        let Some(group) = seen.groups.get(&o) else {
            continue;
        };
        plan.delete_groups.push(group.name.clone());
        for view in plan.groups.iter_mut().filter(|v| v.ordinal == o) {
            view.status = ReplicaStatus::Deleting;
        }
    }
    let deleted: BTreeSet<String> = plan.delete_groups.iter().cloned().collect();
    let mut kept: Vec<Kept<'_>> = Vec::new();
    for (&o, group) in &seen.groups {
        if group.deleting() || deleted.contains(&group.name) {
            continue;
        }
        let t = ctx.template(o, &group.revision);
        kept.push((
            group.name.clone(),
            t,
            scale_roles(&ctx, t, group, &mut plan),
        ));
    }
    for g in new_groups {
        let name = group_name(&ms.name_any(), g);
        let t = ctx.template_for_new(g);
        let mut all = BTreeMap::new();
        for role in &t.roles {
            let n = u32::try_from(role.replicas.unwrap_or(1)).unwrap_or(0);
            for r in 0..n {
                create_role_replica(ms, t, &name, role, r, &mut plan);
            }
            all.insert(role.name.clone(), (0..n).collect());
        }
        kept.push((name, t, all));
    }
    plan_services(ms, seen, &kept, &mut plan);
    Ok(plan)
}

/// `syncServingGroupReplicas`: deletes surplus groups in Go's order (and, with
/// ServingGroupRecreate, broken ones), returns the ordinals to create (lowest missing
/// first), and fills `plan.groups`.
fn scale_groups(ctx: &Ctx<'_>, seen: &Observed, plan: &mut Plan) -> Vec<u32> {
    let want = usize::try_from(ctx.ms.spec.replicas.unwrap_or(1)).unwrap_or(0);
    let mut delete: Vec<u32> = Vec::new();
    let mut live: Vec<(u32, ReplicaStatus, i64)> = Vec::new();
    for (&o, g) in seen.groups.iter().filter(|(_, g)| !g.deleting()) {
        let t = ctx.template(o, &g.revision);
        if ctx.policy == RecoveryPolicy::ServingGroupRecreate && ctx.group_broken(t, g) {
            delete.push(o);
        } else {
            live.push((o, group_status(&t.roles, g), g.deletion_cost()));
        }
    }
    let mut create = Vec::new();
    if seen.groups.len() < want {
        let taken = seen.groups.keys().copied().collect();
        create = missing_ordinals(&taken, want - seen.groups.len());
    } else if live.len() > want {
        delete.extend(scale_down_order(&live, ctx.partition, live.len() - want));
    }
    for (&o, g) in &seen.groups {
        let t = ctx.template(o, &g.revision);
        let status = if delete.contains(&o) {
            ReplicaStatus::Deleting
        } else {
            group_status(&t.roles, g)
        };
        plan.groups.push(GroupView {
            ordinal: o,
            revision: effective_revision(t, g),
            status,
        });
    }
    for &o in &create {
        let status = ReplicaStatus::Creating;
        plan.groups.push(GroupView {
            ordinal: o,
            revision: ctx.template_for_new(o).revision.clone(),
            status,
        });
    }
    plan.groups.sort_by_key(|g| g.ordinal);
    plan.delete_groups = delete
        .iter()
        .filter_map(|o| seen.groups.get(o))
        .map(|g| g.name.clone())
        .collect();
    create
}

/// `manageRoleReplicasPerGroup` for one existing group: recovers broken role replicas by
/// the recovery policy, then scales each spec role up (lowest missing ordinal first) or
/// down (Go's order). Returns the role ordinals that remain, per role.
fn scale_roles(
    ctx: &Ctx<'_>,
    t: &Template,
    group: &ObservedGroup,
    plan: &mut Plan,
) -> BTreeMap<String, BTreeSet<u32>> {
    let mut kept = BTreeMap::new();
    for role in &t.roles {
        let empty = BTreeMap::new();
        let seen = group.roles.get(&role.name).unwrap_or(&empty);
        let mut live: BTreeMap<u32, &ObservedRole> = BTreeMap::new();
        for (&r, observed) in seen.iter().filter(|(_, r)| !r.pods.is_empty()) {
            let check = ctx.check(t, group, role, (r, observed));
            plan.requeue_after = min_opt(plan.requeue_after, check.wait);
            if check.broken() && ctx.policy == RecoveryPolicy::RoleRecreate {
                plan.delete_roles.push(replica_id(group, role, r));
                continue;
            }
            plan.create_pods.extend(check.missing);
            plan.delete_pods.extend(check.expired);
            live.insert(r, observed);
        }
        let want = usize::try_from(role.replicas.unwrap_or(1)).unwrap_or(0);
        let mut remaining: BTreeSet<u32> = live.keys().copied().collect();
        if seen.len() < want {
            let taken = seen.keys().copied().collect();
            for r in missing_ordinals(&taken, want - seen.len()) {
                create_role_replica(ctx.ms, t, &group.name, role, r, plan);
                remaining.insert(r);
            }
        } else if live.len() > want {
            let items: Vec<_> = live
                .iter()
                .map(|(&o, r)| (o, role_status(role, r), r.deletion_cost))
                .collect();
            for r in scale_down_order(&items, 0, live.len() - want) {
                remaining.remove(&r);
                plan.delete_roles.push(replica_id(group, role, r));
            }
        }
        if ctx.role_rolling {
            let hash = t.hashes.get(&role.name).map_or("", String::as_str);
            for r in role_rolling_deletions(role, hash, seen, &remaining) {
                remaining.remove(&r);
                plan.delete_roles.push(replica_id(group, role, r));
            }
        }
        kept.insert(role.name.clone(), remaining);
    }
    if ctx.role_rolling {
        // Roles no longer in the spec go entirely.
        let spec: BTreeSet<&str> = ctx
            .ms
            .spec
            .template
            .roles
            .iter()
            .map(|r| r.name.as_str())
            .collect();
        for (name, replicas) in group
            .roles
            .iter()
            .filter(|(n, _)| !spec.contains(n.as_str()))
        {
            for (&r, _) in replicas.iter().filter(|(_, r)| !r.pods.is_empty()) {
                let role_id = role_id(name, r);
                plan.delete_roles.push(RoleReplicaId {
                    group: group.name.clone(),
                    role: name.clone(),
                    role_id,
                });
            }
        }
    }
    kept
}

/// The group's revision for updates and status: the new revision when every role replica
/// already has its role's current template hash and no role outside the spec remains (a
/// RoleRollingUpdate leaves pods of unchanged roles with the old revision label), else the
/// revision label of a live pod of another revision, else that of its pods.
fn effective_revision(t: &Template, group: &ObservedGroup) -> String {
    let current = group.roles.iter().all(|(name, replicas)| {
        let hash = t.hashes.get(name);
        hash.is_some()
            && replicas
                .values()
                .all(|r| r.pods.is_empty() || Some(&r.template_hash) == hash)
    }) && t
        .roles
        .iter()
        .all(|r| group.roles.contains_key(&r.name) || r.replicas == Some(0));
    if current {
        return t.revision.clone();
    }
    // Any live pod of another revision makes the group outdated, whichever pod came first
    // (a role renamed to a name that sorts first gets new pods in an old group).
    group
        .roles
        .values()
        .flat_map(BTreeMap::values)
        .find(|r| !r.pods.is_empty() && r.revision != t.revision)
        .map_or_else(|| group.revision.clone(), |r| r.revision.clone())
}

fn replica_id(group: &ObservedGroup, role: &Role, r: u32) -> RoleReplicaId {
    RoleReplicaId {
        group: group.name.clone(),
        role: role.name.clone(),
        role_id: role_id(&role.name, r),
    }
}

fn min_opt(a: Option<Duration>, b: Option<Duration>) -> Option<Duration> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

fn role_ref<'a>(
    group: &'a str,
    role: &'a Role,
    ordinal: u32,
    revision: &'a str,
    hashes: &'a BTreeMap<String, String>,
) -> RoleReplicaRef<'a> {
    let role_hash = hashes.get(&role.name).map_or("", String::as_str);
    RoleReplicaRef {
        group,
        role,
        ordinal,
        revision,
        role_hash,
    }
}

fn create_role_replica(
    ms: &ModelServing,
    t: &Template,
    group: &str,
    role: &Role,
    ordinal: u32,
    plan: &mut Plan,
) {
    let at = role_ref(group, role, ordinal, &t.revision, &t.hashes);
    plan.create_pods.extend(role_replica_pods(ms, &at));
}

/// A kept group: its name, its template and the role ordinals that remain, per role.
type Kept<'a> = (String, &'a Template, BTreeMap<String, BTreeSet<u32>>);

/// `syncHeadlessServices`: a missing headless service for each kept role replica of a
/// role with a worker template.
fn plan_services(ms: &ModelServing, seen: &Observed, kept: &[Kept<'_>], plan: &mut Plan) {
    let no_hashes = BTreeMap::new();
    for (group, t, roles) in kept {
        for role in &t.roles {
            for &r in roles.get(&role.name).into_iter().flatten() {
                let at = role_ref(group, role, r, &t.revision, &no_hashes);
                let Some(svc) = headless_service(ms, &at) else {
                    continue;
                };
                if !seen.services.contains(&svc.name_any()) {
                    plan.create_services.push(svc);
                }
            }
        }
    }
}
