//! The children of Kthena's example ModelBoosters (`examples/model-booster/`), field by
//! field as Go's `convert` package builds them.

use std::path::Path;

use kthena_api::networking::{KvConnectorType, ModelServerSpec};
use kthena_api::{ModelBooster, Object, load_file};
use kube::ResourceExt as _;
use serde_json::json;

use super::*;
use crate::error::Error;
use crate::testutil::TestResult;

fn example(file: &str) -> TestResult<ModelBooster> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/kthena-manifests/examples/model-booster")
        .join(file);
    let docs = load_file(&path)?;
    let Some(Object::ModelBooster(b)) = docs.into_iter().next().map(|d| d.object) else {
        return Err(format!("{file} is not a ModelBooster").into());
    };
    let mut b = *b;
    b.metadata.namespace.get_or_insert_with(|| "ns1".to_owned());
    b.metadata.uid = Some("uid-1".to_owned());
    Ok(b)
}

/// (file, route name, route modelName, server name, served model, kv connector).
type Case = (
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    Option<KvConnectorType>,
);

const CASES: &[Case] = &[
    (
        "Qwen2.5-0.5B-Instruct.yaml",
        "demo",
        "demo",
        "demo-backend1",
        "Qwen2.5-0.5B-Instruct",
        None,
    ),
    (
        "Qwen2.5-Coder-32B-Instruct.yaml",
        "qwen25",
        "qwen25-coder-32b",
        "qwen25-qwen25-coder-32b-server",
        "qwen25",
        None,
    ),
    (
        "lmcache-pd-disaggregation.yaml",
        "qwen-lmcache-pd",
        "qwen-lmcache-pd",
        "qwen-lmcache-pd-qwen-lmcache",
        "Qwen2.5-0.5B-Instruct",
        Some(KvConnectorType::Lmcache),
    ),
    (
        "nixl-pd-disaggregation.yaml",
        "qwen-nixl-pd",
        "qwen-nixl-pd",
        "qwen-nixl-pd-qwen-nixl",
        "Qwen/Qwen3-0.6B",
        Some(KvConnectorType::Nixl),
    ),
    (
        "prefill-decode-disaggregation.yaml",
        "deepseek-v2-lite",
        "deepseek-v2-lite",
        "deepseek-v2-lite-deepseek-v2-lite",
        "deepseek-ai/DeepSeekV2",
        Some(KvConnectorType::Mooncake),
    ),
];

#[test]
fn example_boosters_generate_gos_route_and_server() -> TestResult {
    for &(file, route_name, model_name, server_name, served, kv) in CASES {
        let b = example(file)?;
        let disaggregated = kv.is_some();
        let route = serde_json::to_value(model_route(&b)?)?;
        let owner = json!([{
            "apiVersion": "workload.serving.volcano.sh/v1alpha1", "kind": "ModelBooster",
            "name": route_name, "uid": "uid-1", "controller": true, "blockOwnerDeletion": true,
        }]);
        assert_eq!(route["metadata"]["name"], route_name, "{file}");
        assert_eq!(
            route["metadata"]["namespace"],
            b.namespace().unwrap_or_default()
        );
        assert_eq!(route["metadata"]["ownerReferences"], owner, "{file}");
        let labels = &route["metadata"]["labels"];
        assert_eq!(
            labels["workload.serving.volcano.sh/backend-name"], "",
            "{file}"
        );
        assert_eq!(labels["workload.serving.volcano.sh/model-name"], route_name);
        assert_eq!(labels["workload.serving.volcano.sh/model-uid"], "uid-1");
        assert_eq!(
            labels["workload.serving.volcano.sh/managed-by"],
            "workload.serving.volcano.sh"
        );
        assert_eq!(labels.as_object().map(serde_json::Map::len), Some(5));
        assert_eq!(
            route["spec"],
            json!({"modelName": model_name, "rules": [{"name": "default",
                "targetModels": [{"modelServerName": server_name}]}]}),
            "{file}"
        );

        let server = serde_json::to_value(model_server(&b)?)?;
        assert_eq!(server["metadata"]["name"], server_name, "{file}");
        assert_eq!(server["metadata"]["ownerReferences"], owner, "{file}");
        let backend = &b.spec.backend.name;
        let labels = &server["metadata"]["labels"];
        assert_eq!(
            labels["workload.serving.volcano.sh/backend-name"],
            backend.as_str()
        );
        let mut want = json!({
            "model": served,
            "inferenceEngine": "vLLM",
            "workloadSelector": {"matchLabels": {"workload.serving.volcano.sh/model-uid": "uid-1"}},
            "workloadPort": {"port": 8000},
            "trafficPolicy": {"retry": {"attempts": 5, "retryInterval": "0s"}},
        });
        if disaggregated {
            want["workloadSelector"]["pdGroup"] = json!({
                "groupKey": "modelserving.volcano.sh/group-name",
                "prefillLabels": {"modelserving.volcano.sh/role": "prefill"},
                "decodeLabels": {"modelserving.volcano.sh/role": "decode"},
            });
            want["kvConnector"] = json!({"type": kv});
        }
        assert_eq!(server["spec"], want, "{file}");
    }
    Ok(())
}

#[test]
fn revisions_follow_the_spec() -> TestResult {
    let b = example("Qwen2.5-0.5B-Instruct.yaml")?;
    let rev = |r: &kthena_api::ModelRoute| r.labels()[REVISION_LABEL].clone();
    let before = rev(&model_route(&b)?);
    assert_eq!(before, rev(&model_route(&b)?));
    let mut renamed = b.clone();
    renamed.spec.name = Some("other".to_owned());
    assert_ne!(before, rev(&model_route(&renamed)?));
    let server = model_server(&b)?;
    let spec: ModelServerSpec = server.spec.clone();
    assert_eq!(
        server.labels()[REVISION_LABEL],
        crate::serving::revision::hash_json(&spec)?
    );
    Ok(())
}

fn set_config(b: &mut ModelBooster, worker: usize, key: &str, value: serde_json::Value) {
    let config = b.spec.backend.workers[worker]
        .config
        .get_or_insert_with(|| json!({}));
    config[key] = value;
}

#[test]
fn engine_port_and_kv_connector_errors_are_gos() -> TestResult {
    let mut b = example("nixl-pd-disaggregation.yaml")?;
    set_config(&mut b, 0, "port", json!(9000));
    set_config(&mut b, 1, "port", json!("9000"));
    assert_eq!(engine_port(&b.spec.backend)?, 9000);
    set_config(&mut b, 1, "port", json!(9001));
    let err = engine_port(&b.spec.backend).err().ok_or("no error")?;
    assert_eq!(
        err.to_string(),
        "workers use different engine ports: 9000 and 9001"
    );
    set_config(&mut b, 1, "port", json!(70000));
    let err = engine_port(&b.spec.backend).err().ok_or("no error")?;
    assert_eq!(err.to_string(), r#"invalid port "70000" for worker decode"#);

    let kv = |b: &ModelBooster| kv_connector(&b.spec.backend).map_err(|e| e.to_string());
    let mut b = example("nixl-pd-disaggregation.yaml")?;
    set_config(
        &mut b,
        1,
        "kv-transfer-config",
        json!(r#"{"kv_connector": "MooncakeConnector", "kv_role": "kv_both"}"#),
    );
    assert_eq!(
        kv(&b),
        Err(r#"backend qwen-nixl: kv_connector mismatch between prefill ("NixlConnector") and decode ("MooncakeConnector") workers; prefill and decode must use the same kv connector"#.to_owned())
    );
    set_config(
        &mut b,
        1,
        "kv-transfer-config",
        json!(r#"{"kv_connector": "NixlConnector", "kv_role": "kv_producer"}"#),
    );
    assert_eq!(
        kv(&b),
        Err(r#"worker decode: invalid kv_role "kv_producer", expected one of [kv_consumer, kv_both]"#.to_owned())
    );
    set_config(
        &mut b,
        1,
        "kv-transfer-config",
        json!(r#"{"kv_connector": "P2pConnector", "kv_role": "kv_consumer"}"#),
    );
    assert!(matches!(
        kv_connector(&b.spec.backend),
        Err(Error::UnsupportedKvConnector {
            worker: "decode",
            ..
        })
    ));
    set_config(
        &mut b,
        1,
        "kv-transfer-config",
        json!(r#"{"kv_role": "kv_consumer"}"#),
    );
    assert_eq!(
        kv(&b),
        Err("worker decode: kv-transfer-config is set but kv_connector is missing".to_owned())
    );
    if let Some(c) = b.spec.backend.workers[1]
        .config
        .as_mut()
        .and_then(|c| c.as_object_mut())
    {
        c.remove("kv-transfer-config");
    }
    assert_eq!(
        kv(&b),
        Err(r#"backend qwen-nixl: prefill worker specifies kv_connector "NixlConnector" but the decode worker has no kv-transfer-config; prefill and decode must configure the same kv connector"#.to_owned())
    );
    let mut twice = example("nixl-pd-disaggregation.yaml")?;
    let decode = twice.spec.backend.workers[1].clone();
    twice.spec.backend.workers.push(decode);
    assert_eq!(
        kv(&twice),
        Err("backend qwen-nixl: found 2 decode workers, expected at most 1; duplicate decode workers are not supported".to_owned())
    );
    // No kv-transfer-config anywhere: no connector, no error.
    let b = example("Qwen2.5-0.5B-Instruct.yaml")?;
    assert_eq!(kv_connector(&b.spec.backend)?, None);
    Ok(())
}
