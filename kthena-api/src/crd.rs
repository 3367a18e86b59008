//! CRD generation.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

use crate::{
    AutoscalingPolicy, Error, ExternalModelProvider, ModelBooster, ModelRoute, ModelServer,
    ModelServing, Result,
};

/// The CustomResourceDefinitions of all six kinds, in the order ModelRoute, ModelServer,
/// ExternalModelProvider, ModelServing, ModelBooster, AutoscalingPolicy, with the CEL
/// validation rules (`x-kubernetes-validations`) and messages of Go Kthena's CRDs (a
/// ModelRoute without `modelName` and `loraAdapters`, a second role of the same name, a
/// changed `modelName` or `minRoleReplicas`, ...), which the API server enforces also where
/// no admission webhook runs.
///
/// ```
/// let crds = kthena_api::crds();
/// assert_eq!(crds[0].metadata.name.as_deref(), Some("modelroutes.networking.serving.volcano.sh"));
/// ```
#[must_use]
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![
        ModelRoute::crd(),
        ModelServer::crd(),
        ExternalModelProvider::crd(),
        ModelServing::crd(),
        ModelBooster::crd(),
        AutoscalingPolicy::crd(),
    ]
    .into_iter()
    .map(tidy)
    .map(with_cel_rules)
    .collect()
}

/// `crd` with [`crate::cel`]'s rules for its kind.
fn with_cel_rules(crd: CustomResourceDefinition) -> CustomResourceDefinition {
    let Ok(mut v) = serde_json::to_value(&crd) else {
        return crd;
    };
    crate::cel::add_rules(&mut v, &crd.spec.names.plural);
    serde_json::from_value(v).unwrap_or(crd)
}

/// What the API server expects of a generated schema, beyond what schemars writes: integer
/// formats it knows (`uint32` becomes `int32`, as controller-gen writes Go's `uint32`; wider
/// unsigned ones `int64`), so `kubectl apply` prints no `unrecognized format` warning;
/// descriptions without rustdoc link brackets (`` [`X`] `` becomes `` `X` ``); and no
/// `nullable: true` (schemars writes it for every `Option<T>`; Go Kthena's controller-gen
/// CRDs have none). A `null` in a non-nullable field is pruned by the API server before
/// defaulting, so `replicas: null`, as Helm and GitOps tools render an empty value, gets
/// the default; in a nullable field it is kept and fails (`accessor error: <nil> is of the
/// type <nil>`).
pub(crate) fn tidy(crd: CustomResourceDefinition) -> CustomResourceDefinition {
    let Ok(mut v) = serde_json::to_value(&crd) else {
        return crd;
    };
    tidy_value(&mut v);
    serde_json::from_value(v).unwrap_or(crd)
}

fn tidy_value(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::Object(map) => {
            if map.get("nullable") == Some(&serde_json::Value::Bool(true)) {
                map.remove("nullable");
            }
            for (key, item) in map.iter_mut() {
                match (key.as_str(), &mut *item) {
                    ("format", serde_json::Value::String(f)) => {
                        let known = match f.as_str() {
                            "uint8" | "uint16" | "int8" | "int16" | "uint32" => "int32",
                            "uint64" | "uint" | "int" => "int64",
                            _ => continue,
                        };
                        *f = known.to_owned();
                    }
                    ("description", serde_json::Value::String(d)) => {
                        *d = d.replace("[`", "`").replace("`]", "`");
                    }
                    _ => tidy_value(item),
                }
            }
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(tidy_value),
        _ => {}
    }
}

/// The CRDs of [`crds`] as files: `(file name, YAML text)`, named as controller-gen names
/// them (`<group>_<plural>.yaml`), each one YAML document. These are the files of the Helm
/// chart's `charts/kthena/crds/` (written by `cargo run -p kthena-api --example crds --
/// charts/kthena/crds`; `scripts/deploy-manifests.sh` copies them to `deploy/crds/`).
///
/// # Errors
/// [`Error::SerializeYaml`] if a CRD cannot be rendered (not expected for generated CRDs).
///
/// ```
/// let files = kthena_api::crd_files()?;
/// assert_eq!(files[0].0, "networking.serving.volcano.sh_modelroutes.yaml");
/// assert!(files[0].1.starts_with("apiVersion: apiextensions.k8s.io/v1\n"));
/// # Ok::<(), kthena_api::Error>(())
/// ```
pub fn crd_files() -> Result<Vec<(String, String)>> {
    crds()
        .into_iter()
        .map(|crd| {
            let name = format!("{}_{}.yaml", crd.spec.group, crd.spec.names.plural);
            let text = serde_saphyr::to_string(&crd).map_err(|source| Error::SerializeYaml {
                source: Box::new(source),
            })?;
            Ok((name, text))
        })
        .collect()
}

#[cfg(test)]
mod tests;
