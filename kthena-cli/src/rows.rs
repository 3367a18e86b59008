//! Table rows, STATUS and READY columns and empty-list messages of `kthena get`, as Go
//! Kthena computes them (`cli/kthena/cmd/get.go`).

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kthena_api::{AutoscalingPolicy, ModelBooster, ModelRoute, ModelServer, ModelServing};
use kube::ResourceExt;

use crate::age::age;
use crate::kind::Kind;

/// Where a list was taken: one namespace (`-n`, or the context's) or all (`-A`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scope {
    /// One namespace.
    Namespace(String),
    /// `-A`: every namespace.
    All,
}

impl Scope {
    /// The namespace to list in; `None` for all namespaces.
    pub fn namespace(&self) -> Option<&str> {
        match self {
            Self::Namespace(ns) => Some(ns),
            Self::All => None,
        }
    }
}

/// An object `kthena get` lists: its kind and its table cells.
pub trait Listed: kube::Resource + ResourceExt {
    /// The kind.
    const KIND: Kind;

    /// The cells after NAME and before AGE (e.g. READY and STATUS for a ModelServing).
    fn middle_cells(&self) -> Vec<String>;

    /// NAME, the middle cells and AGE at `now` (without NAMESPACE).
    fn cells(&self, now: Timestamp) -> Vec<String> {
        let mut cells = vec![self.name_any()];
        cells.extend(self.middle_cells());
        let created = self.meta().creation_timestamp.as_ref().map(|t| t.0);
        cells.push(created.map_or_else(|| "0s".to_owned(), |c| age(c, now)));
        cells
    }
}

fn condition_true(conditions: &[Condition], type_: &str) -> bool {
    conditions
        .iter()
        .any(|c| c.type_ == type_ && c.status == "True")
}

/// The first of `priority` (condition type, shown text) whose condition is `True`, else
/// `Unknown`.
fn first_true(conditions: &[Condition], priority: &[(&str, &'static str)]) -> &'static str {
    priority
        .iter()
        .find(|(type_, _)| condition_true(conditions, type_))
        .map_or("Unknown", |(_, shown)| shown)
}

/// STATUS of a ModelServing: `Available` > `Updating` (condition `UpdateInProgress`) >
/// `Progressing` > `Unknown`, the first whose condition is `True`.
pub fn model_serving_status(ms: &ModelServing) -> &'static str {
    let conditions = ms.status.as_ref().map_or(&[][..], |s| &s.conditions[..]);
    first_true(
        conditions,
        &[
            ("Available", "Available"),
            ("UpdateInProgress", "Updating"),
            ("Progressing", "Progressing"),
        ],
    )
}

/// READY of a ModelServing: `status.availableReplicas/status.replicas` (`0/0` without a
/// status).
pub fn model_serving_ready(ms: &ModelServing) -> String {
    let (available, total) = ms
        .status
        .as_ref()
        .map_or((0, 0), |s| (s.available_replicas.unwrap_or(0), s.replicas));
    format!("{available}/{total}")
}

/// STATUS of a ModelBooster: `Failed` > `Active` > `Initialized` > `Unknown`, the first
/// whose condition is `True`.
pub fn model_booster_status(mb: &ModelBooster) -> &'static str {
    let conditions = mb.status.as_ref().map_or(&[][..], |s| &s.conditions[..]);
    first_true(
        conditions,
        &[
            ("Failed", "Failed"),
            ("Active", "Active"),
            ("Initialized", "Initialized"),
        ],
    )
}

/// MODEL of a ModelRoute: `spec.modelName`, else its LoRA adapters joined with `,`, else
/// `<lora>`.
pub fn model_route_model(route: &ModelRoute) -> String {
    if !route.spec.model_name.is_empty() {
        route.spec.model_name.clone()
    } else if !route.spec.lora_adapters.is_empty() {
        route.spec.lora_adapters.join(",")
    } else {
        "<lora>".to_owned()
    }
}

impl Listed for ModelServing {
    const KIND: Kind = Kind::ModelServing;
    fn middle_cells(&self) -> Vec<String> {
        vec![
            model_serving_ready(self),
            model_serving_status(self).to_owned(),
        ]
    }
}

impl Listed for ModelBooster {
    const KIND: Kind = Kind::ModelBooster;
    fn middle_cells(&self) -> Vec<String> {
        vec![model_booster_status(self).to_owned()]
    }
}

impl Listed for AutoscalingPolicy {
    const KIND: Kind = Kind::AutoscalingPolicy;
    fn middle_cells(&self) -> Vec<String> {
        Vec::new()
    }
}

impl Listed for ModelRoute {
    const KIND: Kind = Kind::ModelRoute;
    fn middle_cells(&self) -> Vec<String> {
        vec![model_route_model(self), self.spec.rules.len().to_string()]
    }
}

impl Listed for ModelServer {
    const KIND: Kind = Kind::ModelServer;
    fn middle_cells(&self) -> Vec<String> {
        vec![
            self.spec.inference_engine.as_str().to_owned(),
            self.spec.workload_port.port.to_string(),
        ]
    }
}

/// Whether `name` passes the NAME filter: a case-insensitive substring (Go's
/// `strings.Contains(strings.ToLower(name), strings.ToLower(filter))`).
pub fn matches_filter(name: &str, filter: Option<&str>) -> bool {
    filter.is_none_or(|f| name.to_lowercase().contains(&f.to_lowercase()))
}

/// The table of `objects` (already filtered) as `kthena get` prints it, `NAMESPACE` first
/// with `-A`; `None` when there is nothing to show.
pub fn list_table<T: Listed>(objects: &[T], scope: &Scope, now: Timestamp) -> Option<String> {
    if objects.is_empty() {
        return None;
    }
    let all = *scope == Scope::All;
    let mut header: Vec<&str> = Vec::new();
    if all {
        header.push("NAMESPACE");
    }
    header.extend_from_slice(T::KIND.columns());
    let rows: Vec<Vec<String>> = objects
        .iter()
        .map(|o| {
            let mut row = Vec::new();
            if all {
                row.push(o.namespace().unwrap_or_default());
            }
            row.extend(o.cells(now));
            row
        })
        .collect();
    Some(crate::table::render_table(&header, &rows))
}

/// Go's message for an empty list, e.g. `No ModelServings found in namespace prod.`,
/// `No ModelRoutes found across all namespaces.` or `No Models found matching 'qwen'.`.
pub fn empty_message(kind: Kind, scope: &Scope, filter: Option<&str>) -> String {
    let what = kind.list_label();
    match (filter, scope) {
        (Some(f), _) => format!("No {what} found matching '{f}'."),
        (None, Scope::All) => format!("No {what} found across all namespaces."),
        (None, Scope::Namespace(ns)) => format!("No {what} found in namespace {ns}."),
    }
}

#[cfg(test)]
mod tests;
