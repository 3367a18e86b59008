//! The five kinds the CLI lists and describes, with the names Go Kthena prints.

/// A Kthena kind `kthena get` and `kthena describe` handle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `workload.serving.volcano.sh/v1alpha1` ModelServing.
    ModelServing,
    /// `workload.serving.volcano.sh/v1alpha1` ModelBooster.
    ModelBooster,
    /// `workload.serving.volcano.sh/v1alpha1` AutoscalingPolicy.
    AutoscalingPolicy,
    /// `networking.serving.volcano.sh/v1alpha1` ModelRoute.
    ModelRoute,
    /// `networking.serving.volcano.sh/v1alpha1` ModelServer.
    ModelServer,
}

impl Kind {
    /// The kind named `kind` (e.g. `ModelRoute`); `None` for other kinds, including
    /// `ExternalModelProvider`, which the CLI does not handle.
    pub fn from_kind(kind: &str) -> Option<Self> {
        [
            Self::ModelServing,
            Self::ModelBooster,
            Self::AutoscalingPolicy,
            Self::ModelRoute,
            Self::ModelServer,
        ]
        .into_iter()
        .find(|k| k.kind() == kind)
    }

    /// The Kubernetes kind, e.g. `ModelServing`.
    pub fn kind(self) -> &'static str {
        match self {
            Self::ModelServing => "ModelServing",
            Self::ModelBooster => "ModelBooster",
            Self::AutoscalingPolicy => "AutoscalingPolicy",
            Self::ModelRoute => "ModelRoute",
            Self::ModelServer => "ModelServer",
        }
    }

    /// The resource (plural) in the API path, e.g. `modelservings`.
    pub fn plural(self) -> &'static str {
        match self {
            Self::ModelServing => "modelservings",
            Self::ModelBooster => "modelboosters",
            Self::AutoscalingPolicy => "autoscalingpolicies",
            Self::ModelRoute => "modelroutes",
            Self::ModelServer => "modelservers",
        }
    }

    /// The word of Go's empty-list messages: `ModelServings`, `Models` (ModelBooster),
    /// `AutoscalingPolicies`, `ModelRoutes`, `ModelServers`.
    pub fn list_label(self) -> &'static str {
        match self {
            Self::ModelServing => "ModelServings",
            Self::ModelBooster => "Models",
            Self::AutoscalingPolicy => "AutoscalingPolicies",
            Self::ModelRoute => "ModelRoutes",
            Self::ModelServer => "ModelServers",
        }
    }

    /// The first word of `kthena describe`'s header: `Model` for a ModelBooster, the kind
    /// otherwise.
    pub fn describe_label(self) -> &'static str {
        match self {
            Self::ModelBooster => "Model",
            other => other.kind(),
        }
    }

    /// Table columns without NAMESPACE.
    pub fn columns(self) -> &'static [&'static str] {
        match self {
            Self::ModelServing => &["NAME", "READY", "STATUS", "AGE"],
            Self::ModelBooster => &["NAME", "STATUS", "AGE"],
            Self::AutoscalingPolicy => &["NAME", "AGE"],
            Self::ModelRoute => &["NAME", "MODEL", "RULES", "AGE"],
            Self::ModelServer => &["NAME", "ENGINE", "PORT", "AGE"],
        }
    }
}
