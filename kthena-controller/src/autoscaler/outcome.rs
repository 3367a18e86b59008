//! What one policy's round produced, and the lookups every kind of target starts with: the
//! target ModelServing and its entry pods.

use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use kthena_api::{AutoscalingPolicy, ModelServing};
use kthena_autoscale::{Decision, Mode, RolesDecision};
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt as _};

use crate::error::{Error, kube_err};
use crate::names::{ENTRY_LABEL, NAME_LABEL};

/// What one policy's round produced and the `ScaleToZero` condition
/// (`(status, reason, message)`, for a policy whose target may go to zero).
pub(super) struct Done {
    /// The round's outcome.
    pub(super) outcome: Outcome,
    /// The `ScaleToZero` condition.
    pub(super) zero: Option<(bool, &'static str, String)>,
}

/// What one policy's round produced, for its status.
pub(super) enum Outcome {
    /// The target was scaled (or kept) by this decision.
    Decided {
        /// Name of the target ModelServing.
        target: String,
        decision: Decision,
        /// Whether `spec.replicas` was patched.
        scaled: bool,
    },
    /// No metric had a value: nothing changed.
    Skipped {
        /// Name of the target ModelServing.
        target: String,
        /// Its `spec.replicas` (unset counts as 1).
        current: i32,
    },
    /// The roles of a disaggregated target were scaled (or kept).
    Roles(RolesDecision),
    /// A role had no metric value: nothing changed.
    RolesSkipped,
    /// The targets of a heterogeneous policy got their shares.
    Hetero(Vec<TargetPart>, Mode),
    /// No metric of a heterogeneous policy had a value: nothing changed.
    HeteroSkipped,
    /// The target is missing or invalid ([`Error::TargetKind`], [`Error::TargetNameEmpty`],
    /// [`Error::TargetNotFound`], [`Error::TargetRoleMissing`]).
    TargetInvalid(Error),
    /// An older policy scales the same target ([`Error::TargetClaimed`]): not applied.
    Ambiguous(Error),
    /// The policy cannot be used ([`Error::Autoscale`]), or an API call failed
    /// ([`Error::Kube`]).
    Failed(Error),
}

impl Outcome {
    /// The outcome of a round that stopped at `e`: [`Outcome::TargetInvalid`] for a target
    /// that is missing or invalid, else [`Outcome::Failed`].
    pub(super) fn from_error(e: Error) -> Self {
        match e {
            Error::TargetKind(_)
            | Error::TargetNameEmpty
            | Error::TargetNotFound { .. }
            | Error::TargetRoleMissing { .. } => Self::TargetInvalid(e),
            e => Self::Failed(e),
        }
    }
}

/// One target's part of a heterogeneous decision, for the status.
#[derive(Debug)]
pub(super) struct TargetPart {
    /// Name of the target ModelServing.
    pub(super) name: String,
    /// Its `spec.replicas` before the decision.
    pub(super) current: i32,
    /// Its share of the decided total.
    pub(super) replicas: i32,
}

/// The target ModelServing of `r` (kind empty or `ModelServing`, namespace defaulting to the
/// policy's) and the API of its namespace.
///
/// # Errors
/// [`Error::TargetKind`], [`Error::TargetNameEmpty`], [`Error::TargetNotFound`];
/// [`Error::Kube`] when the API call fails.
pub(super) async fn target(
    client: &Client,
    policy: &AutoscalingPolicy,
    r: &ObjectReference,
) -> Result<(Api<ModelServing>, ModelServing), Error> {
    if !matches!(r.kind.as_deref(), None | Some("" | "ModelServing")) {
        return Err(Error::TargetKind(r.kind.clone()));
    }
    let Some(name) = r.name.as_deref().filter(|n| !n.is_empty()) else {
        return Err(Error::TargetNameEmpty);
    };
    let ns = r
        .namespace
        .clone()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| policy.namespace().unwrap_or_default());
    let api: Api<ModelServing> = Api::namespaced(client.clone(), &ns);
    match api.get_opt(name).await {
        Ok(Some(ms)) => Ok((api, ms)),
        Ok(None) => Err(Error::TargetNotFound {
            namespace: ns,
            name: name.to_owned(),
        }),
        Err(e) => Err(kube_err(format!("reading ModelServing {ns}/{name}"))(e)),
    }
}

/// The entry pods of `ms` (`modelserving.volcano.sh/name=<name>`,
/// `modelserving.volcano.sh/entry=true`), in its namespace.
///
/// # Errors
/// [`Error::Kube`] when the list fails.
pub(super) async fn entry_pods(client: &Client, ms: &ModelServing) -> Result<Vec<Pod>, Error> {
    let (ns, name) = (ms.namespace().unwrap_or_default(), ms.name_any());
    let selector = format!("{NAME_LABEL}={name},{ENTRY_LABEL}=true");
    Api::<Pod>::namespaced(client.clone(), &ns)
        .list(&ListParams::default().labels(&selector))
        .await
        .map(|l| l.items)
        .map_err(kube_err(format!("listing the entry pods of {ns}/{name}")))
}
