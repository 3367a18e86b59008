//! Kthena's Kubernetes resource types, with defaulting, validation, manifest loading and CRD
//! generation.
//!
//! Two API groups, both `v1alpha1`:
//!
//! | Group | Kinds |
//! |---|---|
//! | `networking.serving.volcano.sh` | [`ModelRoute`], [`ModelServer`], [`ExternalModelProvider`] |
//! | `workload.serving.volcano.sh` | [`ModelServing`], [`ModelBooster`], [`AutoscalingPolicy`] |
//!
//! The types decode Go Kthena's manifests unchanged (same JSON field names, enums and
//! defaults). Each kind has:
//!
//! * `with_defaults(self) -> Self`: the CRD schema defaults plus the mutating webhooks'
//!   defaults, applied explicitly so they can be shared between loading and admission;
//! * `validate(&self) -> Result<(), Vec<FieldError>>`: every CRD limit, CEL rule and
//!   validating-webhook rule, all problems at once, each with its JSON path;
//! * `crd()` (from `kube::CustomResourceExt`): the CustomResourceDefinition; see [`crds`].
//!
//! This crate is not a client: it talks to no API server. Start with [`load_file`] or
//! [`load_str`], which read multi-document YAML (or JSON) into [`Document`]s holding typed
//! [`Object`]s; documents of other kinds come back as untyped
//! [`DynamicObject`](kube::core::DynamicObject)s.
//!
//! ```
//! use kthena_api::{Object, load_str};
//!
//! let yaml = r#"
//! apiVersion: networking.serving.volcano.sh/v1alpha1
//! kind: ModelRoute
//! metadata: {name: deepseek}
//! spec:
//!   modelName: deepseek-r1
//!   rules:
//!   - targetModels: [{modelServerName: ds-1-5b}]
//! ---
//! apiVersion: v1
//! kind: Service
//! metadata: {name: svc}
//! "#;
//! let docs = load_str("example.yaml", yaml)?;
//! let Object::ModelRoute(route) = docs[0].object.clone().with_defaults() else { panic!() };
//! assert_eq!(route.spec.rules[0].target_models[0].weight, Some(100));
//! assert!(route.validate().is_ok());
//! assert_eq!(docs[1].object.kind(), "Service");
//! # Ok::<(), kthena_api::Error>(())
//! ```

mod cel;
mod common;
pub mod conditions;
mod crd;
mod error;
mod error_chain;
pub mod gateway;
mod load;
pub mod networking;
mod quantity;
mod report;
pub mod thirdparty;
mod validate;
pub mod workload;

pub use common::{DurationError, FieldError, GoDuration};
pub use crd::{crd_files, crds};
pub use error::{Error, Result};
pub use error_chain::{error_chain, error_chain_without, root_cause};
pub use kube::CustomResourceExt;
pub use load::{Document, Object, ParseError, decode_value, load_file, load_str, load_str_each};
pub use networking::{
    ExternalModelProvider, ExternalModelProviderSpec, ModelRoute, ModelRouteSpec, ModelServer,
    ModelServerSpec,
};
pub use quantity::{QuantityAmount, quantity_to_f64};
pub use report::{Report, validate_manifests};
pub use workload::{
    AutoscalingPolicy, AutoscalingPolicySpec, ModelBooster, ModelBoosterSpec, ModelServing,
    ModelServingSpec,
};
