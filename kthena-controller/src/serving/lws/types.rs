//! The LeaderWorkerSet fields the controller reads and writes (`sigs.k8s.io/lws` v0.7.0
//! `api/leaderworkerset/v1/leaderworkerset_types.go`); the rest of the object is not
//! decoded.

use std::borrow::Cow;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};

/// API group of LeaderWorkerSet.
pub const GROUP: &str = "leaderworkerset.x-k8s.io";
/// Its served version.
pub const VERSION: &str = "v1";
/// `apiVersion` of LeaderWorkerSet (`leaderworkerset.x-k8s.io/v1`).
pub const API_VERSION: &str = "leaderworkerset.x-k8s.io/v1";
/// Its kind.
pub const KIND: &str = "LeaderWorkerSet";

/// A `leaderworkerset.x-k8s.io/v1` LeaderWorkerSet.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LeaderWorkerSet {
    /// Standard object metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// The desired groups.
    #[serde(default)]
    pub spec: LeaderWorkerSetSpec,
    /// What exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<LeaderWorkerSetStatus>,
}

/// `spec` of a LeaderWorkerSet.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LeaderWorkerSetSpec {
    /// Number of groups (LWS's CRD defaults it to 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// The template of one group.
    #[serde(default)]
    pub leader_worker_template: LeaderWorkerTemplate,
}

/// `spec.leaderWorkerTemplate`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LeaderWorkerTemplate {
    /// The leader pod's template; the worker template when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader_template: Option<PodTemplateSpec>,
    /// The workers' template.
    #[serde(default)]
    pub worker_template: PodTemplateSpec,
    /// Pods per group, the leader included (LWS's CRD defaults it to 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<i32>,
}

/// `status` of a LeaderWorkerSet: the two counts written here (other members are kept by
/// the merge patch that writes them).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LeaderWorkerSetStatus {
    /// Groups that are ready (absent: 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<i32>,
    /// Groups that exist (absent: 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
}

impl kube::Resource for LeaderWorkerSet {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind((): &()) -> Cow<'_, str> {
        Cow::Borrowed(KIND)
    }

    fn group((): &()) -> Cow<'_, str> {
        Cow::Borrowed(GROUP)
    }

    fn version((): &()) -> Cow<'_, str> {
        Cow::Borrowed(VERSION)
    }

    fn plural((): &()) -> Cow<'_, str> {
        Cow::Borrowed("leaderworkersets")
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}
