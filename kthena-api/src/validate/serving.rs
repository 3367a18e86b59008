//! Defaulting and validation of ModelServing (CRD schema, CEL rules and the validating
//! webhook `pkg/model-serving-controller/webhook/validator.go`).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::image_rule;
use crate::common::{Errors, FieldError, dns1035_label, idx, key};
use crate::workload::{
    ModelServing, NetworkTopologyMode, NetworkTopologySpec, RecoveryPolicy, Role,
    RollingUpdateConfiguration, RolloutStrategyType,
};

// === impl ModelServing ===

impl ModelServing {
    /// Applies the CRD defaults: `replicas` 1, `schedulerName` `volcano`, `recoveryPolicy`
    /// `RoleRecreate`, `template.restartGracePeriodSeconds` 0, each role's `replicas` 1 and
    /// `maxUnavailable` 1, `rolloutStrategy.rollingUpdateConfiguration.maxUnavailable` 1 (when
    /// present), network topology `mode` `hard` (when present). `plugins[].type` (`BuiltIn`)
    /// and `rolloutStrategy.type` (`ServingGroupRollingUpdate`) default when decoded.
    #[must_use]
    pub fn with_defaults(mut self) -> Self {
        let s = &mut self.spec;
        s.replicas.get_or_insert(1);
        s.scheduler_name.get_or_insert_with(|| "volcano".to_owned());
        s.recovery_policy
            .get_or_insert(RecoveryPolicy::RoleRecreate);
        if let Some(ru) = s
            .rollout_strategy
            .as_mut()
            .and_then(|r| r.rolling_update_configuration.as_mut())
        {
            ru.max_unavailable.get_or_insert(IntOrString::Int(1));
        }
        let t = &mut s.template;
        t.restart_grace_period_seconds.get_or_insert(0);
        if let Some(nt) = &mut t.network_topology {
            for p in [&mut nt.group_policy, &mut nt.role_policy]
                .into_iter()
                .flatten()
            {
                p.mode.get_or_insert(NetworkTopologyMode::Hard);
            }
        }
        for role in &mut t.roles {
            role.replicas.get_or_insert(1);
            role.max_unavailable.get_or_insert(IntOrString::Int(1));
        }
        self
    }

    /// Checks the CRD limits, CEL rules and the ModelServing validating webhook rules.
    /// Call it on a defaulted object (see [`ModelServing::with_defaults`]); unset fields that
    /// the defaults would fill (`replicas`, role `replicas`) are reported as required.
    ///
    /// # Errors
    /// One [`FieldError`] per problem, with the JSON path of the field.
    pub fn validate(&self) -> std::result::Result<(), Vec<FieldError>> {
        let mut e = Errors::default();
        let s = &self.spec;
        let name = self.metadata.name.as_deref().unwrap_or("");
        match s.replicas {
            None => e.push("spec.replicas", "replicas must be set"),
            Some(r) if r < 0 => e.push("spec.replicas", "replicas must be a non-negative integer"),
            Some(_) => {}
        }
        let replicas = s.replicas.unwrap_or(0).max(0);
        let rollout = s
            .rollout_strategy
            .as_ref()
            .map(|r| r.type_)
            .unwrap_or_default();
        let recovery = s.recovery_policy.unwrap_or_default();
        if recovery == RecoveryPolicy::ServingGroupRecreate
            && rollout == RolloutStrategyType::RoleRollingUpdate
        {
            e.push(
                "spec.recoveryPolicy",
                "recoveryPolicy ServingGroupRecreate cannot be used with rolloutStrategy \
                 RoleRollingUpdate; valid pairs: (ServingGroupRecreate,ServingGroupRollingUpdate) \
                 or (RoleRecreate,RoleRollingUpdate)",
            );
        }
        if let Some(ru) = s
            .rollout_strategy
            .as_ref()
            .and_then(|r| r.rolling_update_configuration.as_ref())
        {
            rolling_update(&mut e, ru, rollout, replicas);
        }
        let t = &s.template;
        roles_list(&mut e, &t.roles);
        if let Some(nt) = &t.network_topology {
            topology(
                &mut e,
                "spec.template.networkTopology.groupPolicy",
                nt.group_policy.as_ref(),
            );
            topology(
                &mut e,
                "spec.template.networkTopology.rolePolicy",
                nt.role_policy.as_ref(),
            );
        }
        let group = GroupContext {
            name,
            replicas,
            rollout,
        };
        for (i, r) in t.roles.iter().enumerate() {
            role(&mut e, &idx(ROLES, i), r, &group);
        }
        if let Some(min) = t
            .gang_policy
            .as_ref()
            .and_then(|g| g.min_role_replicas.as_ref())
        {
            gang_min_role_replicas(&mut e, min, &t.roles);
        }
        e.finish()
    }

    /// Checks the transition rules against the stored object: `gangPolicy` cannot be removed
    /// once set, and `gangPolicy.minRoleReplicas` is immutable.
    ///
    /// # Errors
    /// One [`FieldError`] per violated rule.
    pub fn validate_update(&self, old: &Self) -> std::result::Result<(), Vec<FieldError>> {
        let mut e = Errors::default();
        let (new, old) = (
            &self.spec.template.gang_policy,
            &old.spec.template.gang_policy,
        );
        match (old, new) {
            (Some(_), None) => e.push("spec.template", "gangPolicy is required once set"),
            (Some(o), Some(n)) if o.min_role_replicas != n.min_role_replicas => {
                e.push(
                    "spec.template.gangPolicy.minRoleReplicas",
                    "minRoleReplicas is immutable",
                );
            }
            _ => {}
        }
        e.finish()
    }
}

/// JSON path of a ModelServing's roles.
const ROLES: &str = "spec.template.roles";

/// What the rules of one role need to know of the ModelServing around it.
struct GroupContext<'a> {
    /// `metadata.name` (empty when unset).
    name: &'a str,
    /// `spec.replicas`, 0 when unset or negative.
    replicas: i32,
    rollout: RolloutStrategyType,
}

/// `spec.rolloutStrategy.rollingUpdateConfiguration`: not allowed with `RoleRollingUpdate`;
/// `maxUnavailable` must not be 0 (or `0%`) and `partition` must be a valid int-or-percent of
/// `replicas`.
///
/// Go Kthena rejects a `maxUnavailable` that resolves to 0 against the current replicas (10%
/// of 5): a replica count the autoscaler or `kubectl scale` sets then makes every later write
/// of the object fail, the autoscaler's own included. Here only a zero value is rejected,
/// and the controller resolves a percentage that rounds down to 0 as 1, as a Deployment
/// does (`kthena_controller` rolling updates).
fn rolling_update(
    e: &mut Errors,
    ru: &RollingUpdateConfiguration,
    rollout: RolloutStrategyType,
    replicas: i32,
) {
    let p = "spec.rolloutStrategy.rollingUpdateConfiguration";
    if rollout == RolloutStrategyType::RoleRollingUpdate {
        e.push(
            p,
            "rollingUpdateConfiguration is not allowed with RoleRollingUpdate",
        );
    }
    if let Some(mu) = &ru.max_unavailable
        && let Some(v) = int_or_percent(e, &format!("{p}.maxUnavailable"), mu, 100, false)
        && v == 0
    {
        e.push(
            format!("{p}.maxUnavailable"),
            "maxUnavailable must not resolve to 0",
        );
    }
    if let Some(pt) = &ru.partition {
        int_or_percent(e, &format!("{p}.partition"), pt, replicas, true);
    }
}

/// `spec.template.roles`: 1 to 4 roles with unique names.
fn roles_list(e: &mut Errors, roles: &[Role]) {
    if roles.is_empty() {
        e.push(ROLES, "roles must not be empty");
    }
    if roles.len() > 4 {
        e.push(ROLES, "must have at most 4 items");
    }
    let mut seen = BTreeSet::new();
    if roles.iter().any(|r| !seen.insert(r.name.as_str())) {
        e.push(ROLES, "roles name must be unique");
    }
}

/// The rules of one role at path `p`: its name (and the pod names generated from it), replica
/// counts, images, partition and `maxUnavailable`.
fn role(e: &mut Errors, p: &str, role: &Role, group: &GroupContext<'_>) {
    let np = format!("{p}.name");
    if role.name.chars().count() > 12 {
        e.push(&np, "must be at most 12 characters");
    }
    if let Some(msg) = dns1035_label(&role.name) {
        e.push(&np, msg);
    }
    match role.replicas {
        None => e.push(format!("{p}.replicas"), "role replicas must be set"),
        Some(r) if r < 0 => {
            e.push(
                format!("{p}.replicas"),
                "role replicas must be a non-negative integer",
            );
        }
        Some(_) => {}
    }
    let role_replicas = role.replicas.unwrap_or(0).max(0);
    if role.worker_replicas < 0 {
        e.push(
            format!("{p}.workerReplicas"),
            "workerReplicas must be a non-negative integer",
        );
    }
    if role.worker_replicas > 0 && role.worker_template.is_none() {
        e.push(
            format!("{p}.workerTemplate"),
            "workerTemplate is required when workerReplicas > 0",
        );
    }
    generated_name(e, &np, role, group, role_replicas);
    images(e, &format!("{p}.entryTemplate"), Some(&role.entry_template));
    images(
        e,
        &format!("{p}.workerTemplate"),
        role.worker_template.as_ref(),
    );
    role_rollout(e, p, role, group.rollout, role_replicas);
}

/// The names generated for a role's pods (`<name>-<replicas>-<role>-<roleReplicas>-
/// <workerReplicas>`) must be DNS-1035 labels; reported on the role's name at `np`.
fn generated_name(
    e: &mut Errors,
    np: &str,
    role: &Role,
    group: &GroupContext<'_>,
    role_replicas: i32,
) {
    let (name, replicas) = (group.name, group.replicas);
    let generated = format!(
        "{name}-{replicas}-{}-{role_replicas}-{}",
        role.name, role.worker_replicas
    );
    if !name.is_empty()
        && let Some(msg) = dns1035_label(&generated)
    {
        e.push(
            np,
            format!("generated name {generated:?} is not valid: {msg}"),
        );
    }
}

/// A role's `partition` (only with `RoleRollingUpdate`) and, with `RoleRollingUpdate`, its
/// `maxUnavailable` (not 0 or `0%`; Go also rejects one that resolves outside 1..=the role's
/// replicas, which a later change of the role's replicas by the autoscaler would hit: the
/// controller clamps the resolved value to at least 1 instead).
fn role_rollout(
    e: &mut Errors,
    p: &str,
    role: &Role,
    rollout: RolloutStrategyType,
    role_replicas: i32,
) {
    if role.partition.is_some() && rollout != RolloutStrategyType::RoleRollingUpdate {
        e.push(
            format!("{p}.partition"),
            "partition is only allowed with RoleRollingUpdate",
        );
    }
    if let Some(pt) = &role.partition {
        int_or_percent(e, &format!("{p}.partition"), pt, role_replicas, true);
    }
    if rollout == RolloutStrategyType::RoleRollingUpdate
        && let Some(mu) = &role.max_unavailable
    {
        let mp = format!("{p}.maxUnavailable");
        if let Some(v) = int_or_percent(e, &mp, mu, 100, false)
            && v < 1
        {
            e.push(
                mp,
                format!("maxUnavailable must resolve to between 1 and {role_replicas}"),
            );
        }
    }
}

/// `spec.template.gangPolicy.minRoleReplicas`: each key names a role, each value is between 0
/// and that role's replicas.
fn gang_min_role_replicas(e: &mut Errors, min: &BTreeMap<String, i32>, roles: &[Role]) {
    let gp = "spec.template.gangPolicy.minRoleReplicas";
    for (role_name, v) in min {
        let p = key(gp, role_name);
        match roles.iter().find(|r| &r.name == role_name) {
            None => e.push(p, format!("role {role_name:?} does not exist")),
            Some(r) => {
                let max = r.replicas.unwrap_or(1);
                if *v < 0 || *v > max {
                    e.push(
                        p,
                        format!("must be between 0 and {max} (the role's replicas)"),
                    );
                }
            }
        }
    }
}

fn topology(e: &mut Errors, path: &str, spec: Option<&NetworkTopologySpec>) {
    let Some(spec) = spec else { return };
    if spec.highest_tier_allowed.is_some_and(|v| v < 0) {
        e.push(format!("{path}.highestTierAllowed"), "must be at least 0");
    }
    e.max_len(
        &format!("{path}.highestTierName"),
        spec.highest_tier_name.as_deref(),
        253,
    );
}

/// Resolves an int-or-percent against `total` (percent rounded up or down); reports values
/// that are negative, malformed or above 100%.
fn int_or_percent(
    e: &mut Errors,
    path: &str,
    v: &IntOrString,
    total: i32,
    round_up: bool,
) -> Option<i64> {
    match v {
        IntOrString::Int(i) if *i < 0 => {
            e.push(path, "must be a non-negative integer");
            None
        }
        IntOrString::Int(i) => Some(i64::from(*i)),
        IntOrString::String(s) => {
            let pct = s.strip_suffix('%').and_then(|n| n.parse::<i64>().ok());
            match pct {
                Some(p) if (0..=100).contains(&p) => {
                    let scaled = p * i64::from(total);
                    Some(if round_up {
                        (scaled + 99) / 100
                    } else {
                        scaled / 100
                    })
                }
                Some(_) => {
                    e.push(path, "percentage must be between 0% and 100%");
                    None
                }
                None => {
                    e.push(
                        path,
                        format!("invalid value {s:?}: must be an integer or a percentage"),
                    );
                    None
                }
            }
        }
    }
}

/// Container images must not be blank or contain spaces.
fn images(e: &mut Errors, path: &str, template: Option<&PodTemplateSpec>) {
    let Some(spec) = template.and_then(|t| t.spec.as_ref()) else {
        return;
    };
    for (list, containers) in [
        ("initContainers", spec.init_containers.as_deref()),
        ("containers", Some(spec.containers.as_slice())),
    ] {
        for (j, c) in containers.unwrap_or_default().iter().enumerate() {
            if let Some(img) = &c.image {
                image_rule(e, &format!("{path}.spec.{list}[{j}].image"), img);
            }
        }
    }
}

#[cfg(test)]
mod tests;
