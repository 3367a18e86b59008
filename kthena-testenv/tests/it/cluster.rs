//! The test control plane is a real API server: our CRDs are served and validated, the
//! example manifests are accepted, resourceVersion conflicts and the status subresource
//! behave as on any cluster.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kthena_api::ModelServing;
use kthena_api::thirdparty::{InferencePool, PodGroup};
use kthena_testenv::TestEnv;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

#[tokio::test]
async fn crds_are_established_and_server_is_v1_37() -> Result<()> {
    let env = TestEnv::get().await?;
    eprintln!("control plane start-up (up + CRDs): {:?}", env.startup());
    let client = env.client().await?;
    let crds = Api::<CustomResourceDefinition>::all(client)
        .list(&ListParams::default())
        .await?;
    let established: BTreeSet<String> = crds
        .items
        .iter()
        .filter(|crd| {
            crd.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c.type_ == "Established" && c.status == "True")
                })
        })
        .filter_map(|crd| crd.metadata.name.clone())
        .collect();
    let want = [
        "modelroutes.networking.serving.volcano.sh",
        "modelservers.networking.serving.volcano.sh",
        "externalmodelproviders.networking.serving.volcano.sh",
        "modelservings.workload.serving.volcano.sh",
        "modelboosters.workload.serving.volcano.sh",
        "autoscalingpolicies.workload.serving.volcano.sh",
        "podgroups.scheduling.volcano.sh",
        "inferencepools.inference.networking.k8s.io",
        "gatewayclasses.gateway.networking.k8s.io",
        "gateways.gateway.networking.k8s.io",
        "httproutes.gateway.networking.k8s.io",
        "grpcroutes.gateway.networking.k8s.io",
        "referencegrants.gateway.networking.k8s.io",
    ];
    let want: BTreeSet<String> = want.iter().map(|s| (*s).to_owned()).collect();
    assert_eq!(established, want);

    let out = env.kubectl().args(["version", "-o", "json"]).output()?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let version: Value = serde_json::from_slice(&out.stdout)?;
    let server = version["serverVersion"]["gitVersion"]
        .as_str()
        .unwrap_or_default();
    assert!(server.starts_with("v1.37."), "server version {server}");
    Ok(())
}

fn examples_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/kthena-manifests/examples")
}

fn yaml_files(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        if path.is_dir() {
            yaml_files(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
            out.push(path);
        }
    }
    Ok(())
}

/// The documents of `text` whose kind is one of ours, without `metadata.namespace`.
fn our_documents(text: &str) -> Result<Vec<Value>> {
    let opts = serde_saphyr::options! { legacy_octal_numbers: true };
    let docs: Vec<Value> = serde_saphyr::from_multiple_with_options(text, opts)?;
    Ok(docs
        .into_iter()
        .filter(|d| {
            d["apiVersion"].as_str().is_some_and(|v| {
                v.starts_with("networking.serving.volcano.sh/")
                    || v.starts_with("workload.serving.volcano.sh/")
            })
        })
        .map(|mut d| {
            if let Some(meta) = d.get_mut("metadata").and_then(Value::as_object_mut) {
                meta.remove("namespace");
            }
            d
        })
        .collect())
}

/// `kubectl apply` of every document of our kinds in the example manifests (each file in a
/// namespace of its own): the real API server validates them against our generated CRDs.
#[tokio::test]
async fn every_example_manifest_is_accepted() -> Result<()> {
    let env = TestEnv::get().await?;
    let mut files = Vec::new();
    yaml_files(&examples_dir(), &mut files)?;
    files.sort();
    let (mut applied, mut rejected) = (0, Vec::new());
    for file in &files {
        let docs = our_documents(&std::fs::read_to_string(file)?)
            .with_context(|| format!("parsing {}", file.display()))?;
        if docs.is_empty() {
            continue;
        }
        let ns = env.namespace("example").await?;
        let list = json!({"apiVersion": "v1", "kind": "List", "items": docs});
        let tmp = tempfile::NamedTempFile::new()?;
        std::fs::write(tmp.path(), serde_json::to_vec(&list)?)?;
        let out = ns
            .kubectl()
            .arg("apply")
            .arg("-f")
            .arg(tmp.path())
            .output()?;
        if out.status.success() {
            applied += docs.len();
        } else {
            rejected.push(format!(
                "{}: {}",
                file.display(),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }
    assert!(rejected.is_empty(), "rejected:\n{}", rejected.join("\n"));
    // 49 of the 66 example files hold our kinds: 52 documents.
    assert_eq!(applied, 52, "documents of our kinds applied");
    Ok(())
}

fn model_serving(name: &str) -> Result<ModelServing> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "workload.serving.volcano.sh/v1alpha1",
        "kind": "ModelServing",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "template": {"roles": [{
                "name": "decode",
                "replicas": 1,
                "entryTemplate": {"spec": {"containers": [{"name": "engine", "image": "vllm"}]}},
                "workerReplicas": 0
            }]}
        }
    }))?)
}

#[tokio::test]
async fn stale_resource_version_is_a_conflict() -> Result<()> {
    let ns = kthena_testenv::namespace("conflict").await?;
    let api = ns.api::<ModelServing>();
    api.create(&PostParams::default(), &model_serving("ms")?)
        .await?;
    let mut first = api.get("ms").await?;
    let mut second = first.clone();
    first.spec.replicas = Some(2);
    let updated = api.replace("ms", &PostParams::default(), &first).await?;
    assert_eq!(updated.spec.replicas, Some(2));
    assert_ne!(
        updated.metadata.resource_version,
        second.metadata.resource_version
    );
    second.spec.replicas = Some(3);
    match api.replace("ms", &PostParams::default(), &second).await {
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 409);
            assert_eq!(status.reason, "Conflict");
        }
        other => bail!("a stale replace was not a conflict: {other:?}"),
    }
    assert_eq!(api.get("ms").await?.spec.replicas, Some(2));
    Ok(())
}

#[tokio::test]
async fn status_is_a_subresource() -> Result<()> {
    let ns = kthena_testenv::namespace("status").await?;
    let api = ns.api::<ModelServing>();
    let mut ms = model_serving("ms")?;
    ms.status = Some(serde_json::from_value(json!({"replicas": 7}))?);
    let created = api.create(&PostParams::default(), &ms).await?;
    assert_eq!(created.status, None, "status is ignored on create");
    assert_eq!(created.metadata.generation, Some(1));

    let patch =
        json!({"status": {"replicas": 1, "observedGeneration": 1}, "spec": {"replicas": 5}});
    let after = api
        .patch_status("ms", &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    let status = after.status.context("status written")?;
    assert_eq!((status.replicas, status.observed_generation), (1, Some(1)));
    assert_eq!(
        after.spec.replicas,
        Some(1),
        "spec is ignored by the status endpoint"
    );
    assert_eq!(
        after.metadata.generation,
        Some(1),
        "a status change keeps the generation"
    );

    let spec = json!({"spec": {"replicas": 2}, "status": {"replicas": 9}});
    let after = api
        .patch("ms", &PatchParams::default(), &Patch::Merge(&spec))
        .await?;
    assert_eq!(after.metadata.generation, Some(2));
    assert_eq!(
        after.status.map(|s| s.replicas),
        Some(1),
        "status is ignored by the main endpoint"
    );
    Ok(())
}

/// The generated third-party CRDs serve typed objects, keeping fields we do not type.
#[tokio::test]
async fn podgroup_and_inferencepool_round_trip() -> Result<()> {
    let ns = kthena_testenv::namespace("thirdparty").await?;
    let pg: PodGroup = serde_json::from_value(json!({
        "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
        "metadata": {"name": "group-0"},
        "spec": {"minMember": 4, "minResources": {"cpu": "2", "nvidia.com/gpu": "4"},
                 "queue": "default", "minTaskMember": {"decode-0": 2},
                 "subGroupPolicy": [{"name": "decode", "subGroupSize": 2, "minSubGroups": 1,
                     "matchLabelKeys": ["modelserving.volcano.sh/role-id"]}]}
    }))?;
    let got = ns
        .api::<PodGroup>()
        .create(&PostParams::default(), &pg)
        .await?;
    assert_eq!(got.spec, pg.spec);

    let untyped = json!({
        "apiVersion": "inference.networking.k8s.io/v1", "kind": "InferencePool",
        "metadata": {"name": "pool"},
        "spec": {"selector": {"matchLabels": {"app": "vllm"}}, "targetPorts": [{"number": 8000}],
                 "endpointPickerRef": {"name": "epp", "port": {"number": 9002}}}
    });
    let pool: InferencePool = serde_json::from_value(untyped.clone())?;
    let api = ns.api::<InferencePool>();
    let got = api.create(&PostParams::default(), &pool).await?;
    assert_eq!(got.spec.target_ports[0].number, 8000);
    assert_eq!(
        got.spec.endpoint_picker_ref,
        Some(untyped["spec"]["endpointPickerRef"].clone())
    );

    let mut bad = pool.clone();
    bad.metadata.name = Some("no-ports".to_owned());
    bad.spec.target_ports.clear();
    let err = api
        .create(&PostParams::default(), &bad)
        .await
        .expect_err("no targetPorts");
    assert!(
        matches!(err, kube::Error::Api(s) if s.code == 422),
        "schema validation applies"
    );
    Ok(())
}

/// A control plane of one's own: its API server can be stopped and started again (same
/// port, same data), and it is gone once dropped.
#[tokio::test]
async fn own_control_plane_restarts_its_api_server_and_stops_on_drop() -> Result<()> {
    use k8s_openapi::api::core::v1::ConfigMap;
    let plane = kthena_testenv::ControlPlane::start().await?;
    let dir = plane.dir().context("started here")?.to_owned();
    let client = plane.client().await?;
    let maps: Api<ConfigMap> = Api::namespaced(client, "default");
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "kept"}}))?;
    maps.create(&PostParams::default(), &cm).await?;

    plane.stop_apiserver().await?;
    assert!(maps.get("kept").await.is_err(), "the API server is down");
    plane.start_apiserver().await?;
    // The same client reconnects to the same port; etcd kept the object.
    assert_eq!(
        maps.get("kept").await?.metadata.name.as_deref(),
        Some("kept")
    );

    drop(plane);
    assert!(!dir.exists(), "{} removed", dir.display());
    assert!(
        maps.get("kept").await.is_err(),
        "the control plane is stopped"
    );
    Ok(())
}
