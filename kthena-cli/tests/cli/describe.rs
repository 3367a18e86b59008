//! `kthena describe`: Go's header, then the object as the API server has it, as YAML.

use jiff::Timestamp;
use serde_json::{Value, json};

use super::support::{
    condition, create_example, go_seconds, kthena, ok, server_objects, set_status,
};

#[tokio::test]
async fn describe_every_kind() {
    let ns = kthena_testenv::namespace("cli-describe").await.unwrap();
    let n = ns.name();
    let c = ns.client();
    let start = Timestamp::now();
    create_example(c, n, "model-serving/sample.yaml", None).await;
    set_status(c, n, "ModelServing", "sample", json!({"replicas": 1, "availableReplicas": 1, "conditions": [condition("Available", "True")]})).await;
    create_example(c, n, "model-booster/Qwen2.5-0.5B-Instruct.yaml", None).await;
    create_example(
        c,
        n,
        "prometheus-autoscaler/servingGroup-autoscaler/autoscalerPolicy.yaml",
        None,
    )
    .await;
    create_example(c, n, "kthena-router/ModelRouteLora.yaml", None).await;
    create_example(c, n, "kthena-router/ModelServer-ds1.5b.yaml", None).await;
    let cases = [
        (
            "ModelServing",
            &["model-serving", "ms"][..],
            "sample",
            "ModelServing",
        ),
        ("ModelBooster", &["model-booster"][..], "demo", "Model"),
        (
            "AutoscalingPolicy",
            &["autoscaling-policy", "asp"][..],
            "podinfo-prom-policy",
            "AutoscalingPolicy",
        ),
        (
            "ModelRoute",
            &["model-route", "mroute"][..],
            "deepseek-lora",
            "ModelRoute",
        ),
        (
            "ModelServer",
            &["model-server", "mserver"][..],
            "deepseek-r1-1-5b",
            "ModelServer",
        ),
    ];
    for (kind, commands, name, label) in cases {
        let object = server_objects(c, n, kind).await.remove(0);
        let created = object["metadata"]["creationTimestamp"]
            .as_str()
            .unwrap()
            .to_owned();
        for command in commands {
            let out = ok(&ns, &["describe", command, name, "-n", n]).await;
            let (header, yaml) = out
                .split_once("\n\nResource Details:\n=================\n")
                .unwrap();
            let (head, age) = header.rsplit_once("\nAge: ").unwrap();
            assert_eq!(
                head,
                format!("{label}: {name}\n================\nNamespace: {n}\nCreated: {created}")
            );
            let elapsed = Timestamp::now().as_second() - start.as_second() + 1;
            assert!((0..=elapsed).contains(&go_seconds(age)), "{age}");
            let api_version = object["apiVersion"].as_str().unwrap();
            assert!(
                yaml.starts_with(&format!("apiVersion: {api_version}\nkind: {kind}\nmetadata:\n  creationTimestamp: \"{created}\"\n")),
                "{yaml}"
            );
            assert_eq!(
                serde_saphyr::from_str::<Value>(yaml).unwrap(),
                object,
                "describe {command}"
            );
        }
    }
    // Status subresources are part of what describe shows.
    let out = ok(&ns, &["describe", "ms", "sample", "-n", n]).await;
    assert!(out.contains("\nstatus:\n  availableReplicas: 1\n  conditions:\n  - lastTransitionTime: \"2026-01-01T00:00:00Z\"\n"), "{out}");
}

#[tokio::test]
async fn describe_a_missing_object_is_one_line() {
    let ns = kthena_testenv::namespace("cli-nf").await.unwrap();
    let run = kthena(
        Some(ns.env().kubeconfig()),
        &["describe", "mroute", "nope", "-n", ns.name()],
        "",
    )
    .await;
    assert_eq!(run.code, 1);
    assert_eq!(run.stdout, "");
    assert_eq!(
        run.stderr,
        format!(
            "error: ModelRoute \"nope\" not found in namespace \"{}\"\n",
            ns.name()
        )
    );
    let run = kthena(
        Some(ns.env().kubeconfig()),
        &["describe", "template", "nope"],
        "",
    )
    .await;
    assert_eq!(
        run.stderr,
        "error: template 'nope' not found (see `kthena get templates`)\n"
    );
}
