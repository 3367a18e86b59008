//! A container's environment as a kubelet builds it: `envFrom` (ConfigMaps and Secrets,
//! with `prefix`), then `env` in order, each `value` with `$(VAR)` expanded from the
//! variables before it, `valueFrom` from a ConfigMap or Secret key (`optional` honoured) or
//! the downward API (`fieldRef`).
//! (<https://kubernetes.io/docs/tasks/inject-data-application/define-environment-variable-container/>)

use std::collections::BTreeMap;
use std::net::IpAddr;

use k8s_openapi::api::core::v1::{ConfigMap, Container, EnvVar, Pod, Secret};
use kube::{Api, Client, ResourceExt as _};

/// The ConfigMaps and Secrets a pod references, read once at start: `None` for one that
/// does not exist. Values are bytes (a ConfigMap's `data` and `binaryData`, a Secret's
/// decoded `data`).
#[derive(Debug, Default)]
pub(super) struct Sources {
    pub(super) config_maps: BTreeMap<String, Option<BTreeMap<String, Vec<u8>>>>,
    pub(super) secrets: BTreeMap<String, Option<BTreeMap<String, Vec<u8>>>>,
}

impl Sources {
    /// Reads every ConfigMap and Secret named by the pod's containers (`env`, `envFrom`)
    /// and volumes.
    ///
    /// # Errors
    /// A message when reading one fails for another reason than not found.
    pub(super) async fn fetch(client: &Client, namespace: &str, pod: &Pod) -> Result<Self, String> {
        let (maps, secrets) = referenced(pod);
        let mut sources = Self::default();
        let cm_api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
        for name in maps {
            let got = cm_api
                .get_opt(&name)
                .await
                .map_err(|e| format!("reading ConfigMap {namespace}/{name}: {e}"))?;
            let data = got.map(|cm| {
                let mut data: BTreeMap<String, Vec<u8>> = cm
                    .data
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, v)| (k, v.into_bytes()))
                    .collect();
                data.extend(
                    cm.binary_data
                        .unwrap_or_default()
                        .into_iter()
                        .map(|(k, v)| (k, v.0)),
                );
                data
            });
            sources.config_maps.insert(name, data);
        }
        let secret_api: Api<Secret> = Api::namespaced(client.clone(), namespace);
        for name in secrets {
            let got = secret_api
                .get_opt(&name)
                .await
                .map_err(|e| format!("reading Secret {namespace}/{name}: {e}"))?;
            let data = got.map(|s| {
                s.data
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, v)| (k, v.0))
                    .collect()
            });
            sources.secrets.insert(name, data);
        }
        Ok(sources)
    }
}

/// The ConfigMap and Secret names the pod references.
fn referenced(pod: &Pod) -> (Vec<String>, Vec<String>) {
    let mut maps = Vec::new();
    let mut secrets = Vec::new();
    let Some(spec) = &pod.spec else {
        return (maps, secrets);
    };
    for c in &spec.containers {
        for from in c.env_from.iter().flatten() {
            maps.extend(from.config_map_ref.as_ref().map(|r| r.name.clone()));
            secrets.extend(from.secret_ref.as_ref().map(|r| r.name.clone()));
        }
        for var in c.env.iter().flatten() {
            let Some(from) = &var.value_from else {
                continue;
            };
            maps.extend(from.config_map_key_ref.as_ref().map(|r| r.name.clone()));
            secrets.extend(from.secret_key_ref.as_ref().map(|r| r.name.clone()));
        }
    }
    for v in spec.volumes.iter().flatten() {
        maps.extend(v.config_map.as_ref().map(|c| c.name.clone()));
        secrets.extend(v.secret.as_ref().and_then(|s| s.secret_name.clone()));
    }
    maps.sort();
    maps.dedup();
    secrets.sort();
    secrets.dedup();
    (maps, secrets)
}

/// The environment of container `c` of `pod` (pod IP `ip`), in definition order, a later
/// definition of a name replacing an earlier one.
///
/// # Errors
/// A message (a kubelet's `CreateContainerConfigError`) when a ConfigMap, Secret or key it
/// needs is missing and not `optional`, or a `fieldRef`/`resourceFieldRef` is not supported.
pub(super) fn container_env(
    pod: &Pod,
    c: &Container,
    ip: IpAddr,
    sources: &Sources,
) -> Result<Vec<(String, String)>, String> {
    let mut vars: Vec<(String, String)> = Vec::new();
    for from in c.env_from.iter().flatten() {
        let prefix = from.prefix.as_deref().unwrap_or_default();
        let (kind, name, optional, all) = match (&from.config_map_ref, &from.secret_ref) {
            (Some(r), _) => ("ConfigMap", &r.name, r.optional, &sources.config_maps),
            (None, Some(r)) => ("Secret", &r.name, r.optional, &sources.secrets),
            (None, None) => continue,
        };
        match all.get(name).and_then(Option::as_ref) {
            Some(data) => {
                for (k, v) in data {
                    let value = String::from_utf8_lossy(v).into_owned();
                    set(&mut vars, format!("{prefix}{k}"), value);
                }
            }
            None if optional.unwrap_or(false) => {}
            None => return Err(format!("envFrom: {kind} {name} not found")),
        }
    }
    for var in c.env.iter().flatten() {
        if let Some(value) = env_value(pod, ip, var, sources, &vars)? {
            set(&mut vars, var.name.clone(), value);
        }
    }
    Ok(vars)
}

fn set(vars: &mut Vec<(String, String)>, name: String, value: String) {
    match vars.iter_mut().find(|(k, _)| *k == name) {
        Some(slot) => slot.1 = value,
        None => vars.push((name, value)),
    }
}

/// One `env` entry's value; `None` for an optional reference that is missing (the variable
/// is then not set).
fn env_value(
    pod: &Pod,
    ip: IpAddr,
    var: &EnvVar,
    sources: &Sources,
    before: &[(String, String)],
) -> Result<Option<String>, String> {
    let Some(from) = &var.value_from else {
        let lookup = |name: &str| {
            before
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        };
        return Ok(Some(expand(
            var.value.as_deref().unwrap_or_default(),
            &lookup,
        )));
    };
    let key_ref = |kind: &str,
                   all: &BTreeMap<String, Option<BTreeMap<String, Vec<u8>>>>,
                   name: &str,
                   key: &str,
                   optional: Option<bool>| {
        match all.get(name).and_then(Option::as_ref) {
            Some(data) => match data.get(key) {
                Some(v) => Ok(Some(String::from_utf8_lossy(v).into_owned())),
                None if optional.unwrap_or(false) => Ok(None),
                None => Err(format!(
                    "{}: key {key:?} not found in {kind} {name}",
                    var.name
                )),
            },
            None if optional.unwrap_or(false) => Ok(None),
            None => Err(format!("{}: {kind} {name} not found", var.name)),
        }
    };
    if let Some(r) = &from.config_map_key_ref {
        return key_ref(
            "ConfigMap",
            &sources.config_maps,
            &r.name,
            &r.key,
            r.optional,
        );
    }
    if let Some(r) = &from.secret_key_ref {
        return key_ref("Secret", &sources.secrets, &r.name, &r.key, r.optional);
    }
    if let Some(r) = &from.field_ref {
        return field_ref(pod, ip, &r.field_path)
            .map(Some)
            .map_err(|e| format!("{}: {e}", var.name));
    }
    Err(format!(
        "{}: only value, configMapKeyRef, secretKeyRef and fieldRef are supported by the simulated node",
        var.name
    ))
}

/// The downward API's `fieldRef` paths: `metadata.name`, `metadata.namespace`,
/// `metadata.uid`, `metadata.labels['k']`, `metadata.annotations['k']`, `spec.nodeName`,
/// `spec.serviceAccountName`, `status.hostIP`, `status.hostIPs`, `status.podIP`,
/// `status.podIPs` (the node's host IP is 127.0.0.1).
///
/// # Errors
/// A message for any other path.
pub(super) fn field_ref(pod: &Pod, ip: IpAddr, path: &str) -> Result<String, String> {
    let meta = &pod.metadata;
    let spec = pod.spec.as_ref();
    let in_map = |map: &Option<BTreeMap<String, String>>, rest: &str| {
        let key = rest
            .strip_prefix("['")
            .and_then(|r| r.strip_suffix("']"))
            .ok_or_else(|| format!("fieldRef {path:?}: expected ['key']"))?;
        Ok(map
            .as_ref()
            .and_then(|m| m.get(key))
            .cloned()
            .unwrap_or_default())
    };
    if let Some(rest) = path.strip_prefix("metadata.labels") {
        return in_map(&meta.labels, rest);
    }
    if let Some(rest) = path.strip_prefix("metadata.annotations") {
        return in_map(&meta.annotations, rest);
    }
    Ok(match path {
        "metadata.name" => pod.name_any(),
        "metadata.namespace" => pod.namespace().unwrap_or_default(),
        "metadata.uid" => meta.uid.clone().unwrap_or_default(),
        "spec.nodeName" => spec.and_then(|s| s.node_name.clone()).unwrap_or_default(),
        "spec.serviceAccountName" => spec
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_else(|| "default".to_owned()),
        "status.hostIP" | "status.hostIPs" => "127.0.0.1".to_owned(),
        "status.podIP" | "status.podIPs" => ip.to_string(),
        _ => {
            return Err(format!(
                "fieldRef {path:?} is not supported by the simulated node"
            ));
        }
    })
}

/// Kubernetes' `$(VAR)` expansion (`third_party/forked/golang/expansion`): `$(NAME)` is
/// replaced by `lookup(NAME)` when that is set and kept as written when not; `$$` is a
/// literal `$` (so `$$(NAME)` gives `$(NAME)`); any other `$` is kept.
pub(super) fn expand(input: &str, lookup: &dyn Fn(&str) -> Option<String>) -> String {
    let mut out = String::with_capacity(input.len());
    let mut rest = input;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
            continue;
        }
        if let Some((name, tail)) = after.strip_prefix('(').and_then(|r| r.split_once(')')) {
            match lookup(name) {
                Some(v) => out.push_str(&v),
                None => {
                    out.push_str("$(");
                    out.push_str(name);
                    out.push(')');
                }
            }
            rest = tail;
            continue;
        }
        out.push('$');
        rest = after;
    }
    out.push_str(rest);
    out
}
