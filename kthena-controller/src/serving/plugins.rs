//! The ModelServing plugin framework (Go `pkg/model-serving-controller/plugins/`): the
//! [`Plugin`] hooks, the [`Registry`] of built-in plugins by name, and the [`Chain`] a
//! ModelServing's `spec.plugins` builds, run in list order, each plugin only on the pods its
//! `scope` selects.
//!
//! Everything here is pure: [`on_pod_create`] mutates the pods a reconcile is about to
//! create (after the plan and the Volcano annotations, before the API calls, as Go runs
//! `OnPodCreate` just before `Pods().Create`), [`on_pod_ready`] calls the ready hooks of the
//! ModelServing's Running and Ready pods, and [`validate`] is the webhook's check of
//! `spec.plugins` (unknown names, configs a plugin cannot decode, unknown scope targets).
//!
//! Built-in plugins, both registered at start as Go registers them (each Go plugin file's
//! `init()`): [`LWS_LABELS`] (`lws_labels_plugin.go`) and [`DEMO`] (`demo_plugin.go`).

mod demo;
mod lws_labels;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::LazyLock;

use k8s_openapi::api::core::v1::Pod;
use kthena_api::workload::{PluginScope, PluginSpec};
use kthena_api::{FieldError, ModelServing};
use kube::ResourceExt as _;

use crate::names::{ENTRY_LABEL, GROUP_NAME_LABEL, ROLE_ID_LABEL, ROLE_LABEL};

pub use demo::{DEMO, DemoConfig};
pub use lws_labels::{
    GROUP_INDEX_LABEL, GROUP_KEY_LABEL, LWS_LABELS, SET_NAME_LABEL, WORKER_INDEX_LABEL, group_key,
};

/// Where a hook runs (Go `HookRequest` without its pod, which the hooks take apart).
#[derive(Debug, Clone, Copy)]
pub struct HookRequest<'a> {
    /// The ModelServing (defaults applied).
    pub model_serving: &'a ModelServing,
    /// ServingGroup name `<ms>-<g>`.
    pub serving_group: &'a str,
    /// Role name.
    pub role_name: &'a str,
    /// Role id `<role>-<r>`.
    pub role_id: &'a str,
    /// True for the entry pod of the role replica, false for a worker.
    pub is_entry: bool,
}

/// A plugin's hooks (Go `Plugin`).
pub trait Plugin: Send + Sync + std::fmt::Debug {
    /// The instance name (the `spec.plugins[].name` it was built from).
    fn name(&self) -> &str;

    /// Mutates `pod` before the controller creates it.
    ///
    /// # Errors
    /// A [`PluginError`]: the pod (and the rest of its role replica) is not created.
    fn on_pod_create(&self, req: &HookRequest<'_>, pod: &mut Pod) -> Result<(), PluginError>;

    /// Called when the controller sees `pod` Running and Ready (at each reconcile while it
    /// is). The built-in plugins do nothing here.
    ///
    /// # Errors
    /// A [`PluginError`], reported on the ModelServing.
    fn on_pod_ready(&self, _req: &HookRequest<'_>, _pod: &Pod) -> Result<(), PluginError> {
        Ok(())
    }
}

/// Builds a plugin from its `spec.plugins[]` entry (Go `Factory`), decoding its `config`.
pub type Factory = fn(&PluginSpec) -> Result<Box<dyn Plugin>, PluginError>;

/// Errors of the plugin framework.
#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    /// `spec.plugins[].name` names no registered plugin (Go `plugin %s not registered`).
    #[error("plugin {name} not registered (built-in plugins: {known})")]
    NotRegistered {
        /// The name written.
        name: String,
        /// The registered names, comma-separated.
        known: String,
    },
    /// The plugin cannot decode its `config` (Go `build plugin %s: %w`).
    #[error("build plugin {name}: {source}")]
    Config {
        /// The plugin.
        name: String,
        /// The JSON decoding error.
        #[source]
        source: serde_json::Error,
    },
    /// A hook failed (Go `plugin %s OnPodCreate: %w`).
    #[error("plugin {plugin} {hook} for pod {pod}: {source}")]
    Hook {
        /// The plugin instance.
        plugin: String,
        /// `OnPodCreate` or `OnPodReady`.
        hook: &'static str,
        /// The pod's name.
        pod: String,
        /// What the plugin reported.
        #[source]
        source: Box<Self>,
    },
    /// The ServingGroup name has no ordinal (Go `invalid servingGroup %q for pod %s`).
    #[error("invalid servingGroup {group:?} for pod {pod}")]
    InvalidGroup {
        /// The ServingGroup name.
        group: String,
        /// The pod's name.
        pod: String,
    },
    /// A worker pod's name does not end in its index (Go `cannot derive worker-index from
    /// pod name %q`).
    #[error("cannot derive worker-index from pod name {0:?}")]
    WorkerIndex(String),
}

/// Plugin factories by name (Go `Registry`).
#[derive(Debug, Clone, Default)]
pub struct Registry {
    factories: BTreeMap<String, Factory>,
}

static BUILTIN: LazyLock<Registry> = LazyLock::new(|| {
    let mut r = Registry::default();
    r.register(LWS_LABELS, lws_labels::new);
    r.register(DEMO, demo::new);
    r
});

impl Registry {
    /// The registry the controller uses: every built-in plugin ([`LWS_LABELS`], [`DEMO`]),
    /// as Go's `DefaultRegistry` after its plugins' `init()`.
    #[must_use]
    pub fn builtin() -> &'static Self {
        &BUILTIN
    }

    /// Registers (or replaces) the factory of `name`.
    pub fn register(&mut self, name: &str, factory: Factory) {
        self.factories.insert(name.to_owned(), factory);
    }

    /// The registered names, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.factories.keys().map(String::as_str)
    }

    /// Builds the plugin of `spec` (Go `NewChain`'s lookup and factory call).
    ///
    /// # Errors
    /// [`PluginError::NotRegistered`], or the factory's error ([`PluginError::Config`]).
    pub fn build(&self, spec: &PluginSpec) -> Result<Box<dyn Plugin>, PluginError> {
        let Some(factory) = self.factories.get(&spec.name) else {
            return Err(PluginError::NotRegistered {
                name: spec.name.clone(),
                known: self.names().collect::<Vec<_>>().join(", "),
            });
        };
        factory(spec)
    }
}

/// The plugins of one ModelServing in `spec.plugins` order, each with its scope (Go `Chain`).
#[derive(Debug, Default)]
pub struct Chain {
    entries: Vec<(Box<dyn Plugin>, Option<PluginScope>)>,
}

impl Chain {
    /// Builds every plugin of `specs` from `registry` (Go `NewChain`; `type` is always
    /// `BuiltIn`, the only value the API accepts).
    ///
    /// # Errors
    /// The first [`Registry::build`] error.
    pub fn new(registry: &Registry, specs: &[PluginSpec]) -> Result<Self, PluginError> {
        let entries = specs
            .iter()
            .map(|s| Ok((registry.build(s)?, s.scope.clone())))
            .collect::<Result<_, PluginError>>()?;
        Ok(Self { entries })
    }

    /// A chain of already built plugins with their scopes.
    #[must_use]
    pub fn from_plugins(entries: Vec<(Box<dyn Plugin>, Option<PluginScope>)>) -> Self {
        Self { entries }
    }

    /// Runs each plugin's create hook whose scope selects `req`, in order; each sees the
    /// mutations of the ones before.
    ///
    /// # Errors
    /// The first failing hook, as [`PluginError::Hook`].
    pub fn on_pod_create(&self, req: &HookRequest<'_>, pod: &mut Pod) -> Result<(), PluginError> {
        for (plugin, scope) in &self.entries {
            if should_run(scope.as_ref(), req) {
                plugin
                    .on_pod_create(req, pod)
                    .map_err(|e| hook_error(plugin.as_ref(), "OnPodCreate", pod, e))?;
            }
        }
        Ok(())
    }

    /// Runs each plugin's ready hook whose scope selects `req`, in order.
    ///
    /// # Errors
    /// The first failing hook, as [`PluginError::Hook`].
    pub fn on_pod_ready(&self, req: &HookRequest<'_>, pod: &Pod) -> Result<(), PluginError> {
        for (plugin, scope) in &self.entries {
            if should_run(scope.as_ref(), req) {
                plugin
                    .on_pod_ready(req, pod)
                    .map_err(|e| hook_error(plugin.as_ref(), "OnPodReady", pod, e))?;
            }
        }
        Ok(())
    }
}

fn hook_error(plugin: &dyn Plugin, hook: &'static str, pod: &Pod, e: PluginError) -> PluginError {
    PluginError::Hook {
        plugin: plugin.name().to_owned(),
        hook,
        pod: pod.name_any(),
        source: Box::new(e),
    }
}

/// The scope targets Go defines (`PluginTargetAll`, `Entry`, `Worker`).
pub const TARGETS: [&str; 3] = ["All", "Entry", "Worker"];

/// Go's `shouldRun`: no scope runs everywhere; `roles` (when not empty) must name the role;
/// `target` empty or `All` runs on every pod, `Entry` on entry pods, `Worker` on workers (any
/// other value on none).
#[must_use]
pub fn should_run(scope: Option<&PluginScope>, req: &HookRequest<'_>) -> bool {
    let Some(scope) = scope else {
        return true;
    };
    if !scope.roles.is_empty() && !scope.roles.iter().any(|r| r == req.role_name) {
        return false;
    }
    match scope.target.as_deref().unwrap_or("") {
        "" | "All" => true,
        "Entry" => req.is_entry,
        "Worker" => !req.is_entry,
        _ => false,
    }
}

/// The request of a pod the controller made, from its labels (group-name, role, role-id,
/// entry).
fn request<'a>(ms: &'a ModelServing, pod: &'a Pod) -> HookRequest<'a> {
    let label = |k: &str| pod.labels().get(k).map_or("", String::as_str);
    HookRequest {
        model_serving: ms,
        serving_group: label(GROUP_NAME_LABEL),
        role_name: label(ROLE_LABEL),
        role_id: label(ROLE_ID_LABEL),
        is_entry: label(ENTRY_LABEL) == "true",
    }
}

/// Runs the `OnPodCreate` hooks of `ms`'s plugins on the pods about to be created, in
/// order. A role replica is created whole or not at all: when the chain cannot be built no
/// pod is kept, and when a hook fails on a pod every pod of its role replica is dropped
/// (Go returns at the failing pod, leaving the ones before it; the next reconcile sees a
/// replica with missing pods). Returns the first error; nothing to do without plugins.
///
/// # Errors
/// The [`Chain::new`] error or the first hook's.
pub fn on_pod_create(ms: &ModelServing, pods: &mut Vec<Pod>) -> Result<(), PluginError> {
    if ms.spec.plugins.is_empty() || pods.is_empty() {
        return Ok(());
    }
    let chain = match Chain::new(Registry::builtin(), &ms.spec.plugins) {
        Ok(chain) => chain,
        Err(e) => {
            pods.clear();
            return Err(e);
        }
    };
    let mut failed: BTreeSet<(String, String)> = BTreeSet::new();
    let mut first = None;
    for pod in pods.iter_mut() {
        let mut mutated = pod.clone();
        let req = request(ms, pod);
        if let Err(e) = chain.on_pod_create(&req, &mut mutated) {
            failed.insert((req.serving_group.to_owned(), req.role_id.to_owned()));
            first.get_or_insert(e);
            continue;
        }
        *pod = mutated;
    }
    if let Some(e) = first {
        pods.retain(|p| {
            let req = request(ms, p);
            !failed.contains(&(req.serving_group.to_owned(), req.role_id.to_owned()))
        });
        return Err(e);
    }
    Ok(())
}

/// Runs the `OnPodReady` hooks of `ms`'s plugins on each of `pods` that is Running and Ready
/// and not terminating (Go calls them from its pod handler at every update of a ready pod).
///
/// # Errors
/// The [`Chain::new`] error or the first hook's.
pub fn on_pod_ready(ms: &ModelServing, pods: &[Pod]) -> Result<(), PluginError> {
    if ms.spec.plugins.is_empty() {
        return Ok(());
    }
    let chain = Chain::new(Registry::builtin(), &ms.spec.plugins)?;
    let ready = pods.iter().filter(|p| {
        p.metadata.deletion_timestamp.is_none() && crate::serving::observed::running_and_ready(p)
    });
    for pod in ready {
        chain.on_pod_ready(&request(ms, pod), pod)?;
    }
    Ok(())
}

/// The webhook's check of `spec.plugins` against `registry`: an unknown name
/// (`spec.plugins[1].name: unknown plugin "foo"; built-in plugins: demo-pod-tweaks,
/// lws-standard-labels`), a `config` the plugin cannot decode
/// (`spec.plugins[0].config: ...`, also a config that is not a JSON object), a `scope.target`
/// other than `All`, `Entry`, `Worker` and a name given twice (Go admits all four; the first
/// two then fail every pod creation, the third silently never runs, the fourth applies the
/// plugin twice although Go's API documents the name as unique).
#[must_use]
pub fn validate(registry: &Registry, ms: &ModelServing) -> Vec<FieldError> {
    let mut errors = Vec::new();
    for (i, spec) in ms.spec.plugins.iter().enumerate() {
        let at = format!("spec.plugins[{i}]");
        if let Some(first) = ms.spec.plugins[..i]
            .iter()
            .position(|p| p.name == spec.name)
        {
            errors.push(FieldError::new(
                format!("{at}.name"),
                format!(
                    "duplicate plugin {:?} (also spec.plugins[{first}]); a name identifies one plugin",
                    spec.name
                ),
            ));
        }
        match registry.build(spec) {
            Err(PluginError::NotRegistered { name, known }) => errors.push(FieldError::new(
                format!("{at}.name"),
                format!("unknown plugin {name:?}; built-in plugins: {known}"),
            )),
            Err(PluginError::Config { name, source }) => errors.push(FieldError::new(
                format!("{at}.config"),
                format!("plugin {name:?} cannot decode its config: {source}"),
            )),
            Err(e) => errors.push(FieldError::new(at.clone(), e.to_string())),
            Ok(_) => {}
        }
        let target = spec.scope.as_ref().and_then(|s| s.target.as_deref());
        if let Some(t) = target.filter(|t| !t.is_empty() && !TARGETS.contains(t)) {
            errors.push(FieldError::new(
                format!("{at}.scope.target"),
                format!("unknown target {t:?}; must be one of All, Entry, Worker"),
            ));
        }
    }
    errors
}

#[cfg(test)]
mod tests;
