//! `kthena get`: Go's tables for objects from the example manifests, `-A`, empty-list
//! messages, the name filter, `-o yaml|json`, the context's namespace and `--context`.

use std::path::Path;

use jiff::Timestamp;
use kthena_testenv::{ControlPlane, TestNamespace};
use serde_json::{Value, json};

use super::support::{
    condition, create_example, edited_kubeconfig, kthena, mask_ages, ok, server_objects, set_status,
};

fn since(start: Timestamp) -> i64 {
    (Timestamp::now().as_second() - start.as_second()) + 1
}

/// Two ModelServings, a ModelBooster, an AutoscalingPolicy, two ModelRoutes and two
/// ModelServers from the examples, with known statuses.
async fn seed(client: &kube::Client, ns: &str) {
    create_example(client, ns, "model-serving/sample.yaml", None).await;
    create_example(
        client,
        ns,
        "model-serving/rollingupdate.yaml",
        Some("rolling"),
    )
    .await;
    set_status(
        client,
        ns,
        "ModelServing",
        "sample",
        json!({
            "replicas": 2, "availableReplicas": 1, "conditions": [condition("Progressing", "True")]
        }),
    )
    .await;
    set_status(
        client,
        ns,
        "ModelServing",
        "rolling",
        json!({
            "replicas": 3, "availableReplicas": 3,
            "conditions": [condition("Available", "True"), condition("Progressing", "False")]
        }),
    )
    .await;
    create_example(client, ns, "model-booster/Qwen2.5-0.5B-Instruct.yaml", None).await;
    set_status(
        client,
        ns,
        "ModelBooster",
        "demo",
        json!({
            "conditions": [condition("Initialized", "True"), condition("Active", "True")]
        }),
    )
    .await;
    create_example(
        client,
        ns,
        "prometheus-autoscaler/servingGroup-autoscaler/autoscalerPolicy.yaml",
        None,
    )
    .await;
    create_example(client, ns, "kthena-router/ModelRouteSimple.yaml", None).await;
    create_example(client, ns, "kthena-router/ModelRouteLora.yaml", None).await;
    create_example(client, ns, "kthena-router/ModelServer-ds1.5b.yaml", None).await;
    create_example(client, ns, "kthena-router/ModelServer-sglang.yaml", None).await;
}

#[tokio::test]
async fn tables_in_one_namespace() {
    let ns = kthena_testenv::namespace("cli-get").await.unwrap();
    let start = Timestamp::now();
    seed(ns.client(), ns.name()).await;
    let n = ns.name();
    let cases: [(&[&str], &str); 6] = [
        (
            &["get", "model-servings"],
            "NAME      READY   STATUS        AGE\nrolling   3/3     Available     <age>\nsample    1/2     Progressing   <age>\n",
        ),
        (
            &["get", "model-boosters"],
            "NAME   STATUS   AGE\ndemo   Active   <age>\n",
        ),
        (
            &["get", "model-boosters", "DEM"],
            "NAME   STATUS   AGE\ndemo   Active   <age>\n",
        ),
        (
            &["get", "autoscaling-policies"],
            "NAME                  AGE\npodinfo-prom-policy   <age>\n",
        ),
        (
            &["get", "model-routes"],
            "NAME              MODEL             RULES   AGE\ndeepseek-lora     lora-A,lora-B     1       <age>\ndeepseek-simple   deepseek-simple   1       <age>\n",
        ),
        (
            &["get", "model-servers"],
            "NAME               ENGINE   PORT    AGE\ndeepseek-r1-1-5b   vLLM     8000    <age>\nsglang-mock        SGLang   30000   <age>\n",
        ),
    ];
    for (args, want) in cases {
        let out = ok(&ns, &[args, &["-n", n]].concat()).await;
        assert_eq!(mask_ages(&out, since(start)), want, "kthena {args:?}");
    }
    // The aliases print the same tables.
    for (alias, full) in [
        ("ms", "model-servings"),
        ("model-serving", "model-servings"),
        ("model-booster", "model-boosters"),
        ("asp", "autoscaling-policies"),
        ("autoscaling-policy", "autoscaling-policies"),
        ("mroute", "model-routes"),
        ("model-route", "model-routes"),
        ("mserver", "model-servers"),
        ("model-server", "model-servers"),
    ] {
        let a = ok(&ns, &["get", alias, "-n", n]).await;
        let b = ok(&ns, &["get", full, "-n", n]).await;
        assert_eq!(
            mask_ages(&a, since(start)),
            mask_ages(&b, since(start)),
            "{alias}"
        );
    }
}

#[tokio::test]
async fn empty_lists_and_filters_print_gos_messages() {
    let ns = kthena_testenv::namespace("cli-empty").await.unwrap();
    let n = ns.name();
    let cases = [
        (
            "model-servings",
            format!("No ModelServings found in namespace {n}.\n"),
        ),
        (
            "model-boosters",
            format!("No Models found in namespace {n}.\n"),
        ),
        (
            "autoscaling-policies",
            format!("No AutoscalingPolicies found in namespace {n}.\n"),
        ),
        (
            "model-routes",
            format!("No ModelRoutes found in namespace {n}.\n"),
        ),
        (
            "model-servers",
            format!("No ModelServers found in namespace {n}.\n"),
        ),
    ];
    for (what, want) in cases {
        assert_eq!(ok(&ns, &["get", what, "-n", n]).await, want);
    }
    create_example(
        ns.client(),
        n,
        "model-booster/Qwen2.5-0.5B-Instruct.yaml",
        None,
    )
    .await;
    assert_eq!(
        ok(&ns, &["get", "model-boosters", "qwen", "-n", n]).await,
        "No Models found matching 'qwen'.\n"
    );
}

#[tokio::test]
async fn namespace_comes_from_the_context_and_context_flag() {
    let ns = kthena_testenv::namespace("cli-ctx").await.unwrap();
    create_example(
        ns.client(),
        ns.name(),
        "kthena-router/ModelRouteSimple.yaml",
        None,
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let name = ns.name().to_owned();
    let kubeconfig = edited_kubeconfig(ns.env().kubeconfig(), dir.path(), |k| {
        let mut other = k["contexts"][0].clone();
        k["contexts"][0]["context"]["namespace"] = json!(name);
        other["name"] = json!("elsewhere");
        other["context"]["namespace"] = json!("no-such-namespace");
        k["contexts"].as_array_mut().unwrap().push(other);
    });
    let run = kthena(Some(&kubeconfig), &["get", "mroute"], "").await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stdout.starts_with("NAME              MODEL             RULES   AGE\ndeepseek-simple   deepseek-simple   1       "), "{}", run.stdout);
    // Regression: `-n ''` listed every namespace (kubectl takes the context's), and a file of
    // a KUBECONFIG list that does not exist was fatal (kubectl skips it).
    let missing = dir.path().join("missing");
    let list = format!("{}:{}", missing.display(), kubeconfig.display());
    for (kc, args) in [
        (kubeconfig.as_path(), &["get", "mroute", "-n", ""][..]),
        (Path::new(&list), &["get", "mroute"][..]),
    ] {
        let other = kthena(Some(kc), args, "").await;
        assert_eq!((other.code, other.stderr.as_str()), (0, ""), "{args:?}");
        assert_eq!(
            mask_ages(&other.stdout, 600),
            mask_ages(&run.stdout, 600),
            "{args:?}"
        );
    }
    let run = kthena(Some(&missing), &["get", "mroute"], "").await;
    assert_eq!(
        run.stderr,
        format!(
            "error: cannot use the kubeconfig: no file of KUBECONFIG={} exists\n",
            missing.display()
        )
    );
    let flag = missing.to_str().unwrap();
    let run = kthena(None, &["--kubeconfig", flag, "get", "mroute"], "").await;
    assert_eq!(
        run.stderr,
        format!(
            "error: cannot use the kubeconfig: {flag}: No such file or directory (os error 2)\n"
        )
    );
    let run = kthena(
        Some(&kubeconfig),
        &["get", "mroute", "--context", "elsewhere"],
        "",
    )
    .await;
    assert_eq!(
        run.stdout,
        "No ModelRoutes found in namespace no-such-namespace.\n"
    );
    let run = kthena(
        Some(&kubeconfig),
        &["--context", "missing", "get", "mroute"],
        "",
    )
    .await;
    assert_eq!(run.code, 1);
    assert!(
        run.stderr.starts_with("error: cannot use the kubeconfig: "),
        "{}",
        run.stderr
    );
    assert_eq!(run.stderr.lines().count(), 1, "{}", run.stderr);
}

#[tokio::test]
async fn all_namespaces_adds_the_namespace_column() {
    // A cluster of its own: -A must see only this test's objects.
    let plane = ControlPlane::start().await.unwrap();
    let client = plane.client().await.unwrap();
    for ns in ["team-a", "team-b"] {
        let obj = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
        let api: kube::Api<k8s_openapi::api::core::v1::Namespace> = kube::Api::all(client.clone());
        api.create(&Default::default(), &serde_json::from_value(obj).unwrap())
            .await
            .unwrap();
    }
    let start = Timestamp::now();
    create_example(
        &client,
        "team-a",
        "kthena-router/ModelRouteSimple.yaml",
        None,
    )
    .await;
    create_example(&client, "team-b", "kthena-router/ModelRouteLora.yaml", None).await;
    create_example(&client, "team-b", "model-serving/sample.yaml", None).await;
    let kc = Some(plane.kubeconfig());
    let run = kthena(kc, &["get", "model-routes", "-A"], "").await;
    assert_eq!(
        mask_ages(&run.stdout, since(start)),
        "NAMESPACE   NAME              MODEL             RULES   AGE\n\
         team-a      deepseek-simple   deepseek-simple   1       <age>\n\
         team-b      deepseek-lora     lora-A,lora-B     1       <age>\n"
    );
    let run = kthena(kc, &["get", "ms", "--all-namespaces"], "").await;
    assert_eq!(
        mask_ages(&run.stdout, since(start)),
        "NAMESPACE   NAME     READY   STATUS    AGE\nteam-b      sample   0/0     Unknown   <age>\n"
    );
    let run = kthena(kc, &["get", "asp", "-A"], "").await;
    assert_eq!(
        run.stdout,
        "No AutoscalingPolicies found across all namespaces.\n"
    );
    let run = kthena(kc, &["get", "mroute", "-A", "-o", "json"], "").await;
    let list: Value = serde_json::from_str(&run.stdout).unwrap();
    let names: Vec<&str> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["metadata"]["namespace"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["team-a", "team-b"]);
}

#[tokio::test]
async fn output_yaml_and_json_are_the_server_objects() {
    let ns = kthena_testenv::namespace("cli-out").await.unwrap();
    let n = ns.name();
    seed(ns.client(), n).await;
    for (kind, what) in [
        ("ModelServing", "ms"),
        ("ModelBooster", "model-boosters"),
        ("AutoscalingPolicy", "asp"),
        ("ModelRoute", "mroute"),
        ("ModelServer", "mserver"),
    ] {
        let want = json!({"apiVersion": "v1", "items": server_objects(ns.client(), n, kind).await,
                          "kind": "List", "metadata": {"resourceVersion": ""}});
        let json_out = ok(&ns, &["get", what, "-n", n, "-o", "json"]).await;
        assert_eq!(
            serde_json::from_str::<Value>(&json_out).unwrap(),
            want,
            "{what} -o json"
        );
        let yaml_out = ok(&ns, &["get", what, "-n", n, "-o", "yaml"]).await;
        assert!(
            yaml_out.starts_with("apiVersion: v1\nitems:\n- apiVersion: "),
            "{yaml_out}"
        );
        assert_eq!(
            serde_saphyr::from_str::<Value>(&yaml_out).unwrap(),
            want,
            "{what} -o yaml"
        );
    }
    // Status subresources as set, and a name filter applies to -o too.
    let out = ok(&ns, &["get", "ms", "sampl", "-n", n, "-o", "json"]).await;
    let list: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(list["items"].as_array().unwrap().len(), 1);
    assert_eq!(list["items"][0]["status"]["availableReplicas"], 1);
}

#[tokio::test]
async fn templates_list_and_show() {
    let ns: TestNamespace = kthena_testenv::namespace("cli-tmpl").await.unwrap();
    let table = ok(&ns, &["get", "templates"]).await;
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 14);
    assert_eq!(lines[0], format!("{:<67}DESCRIPTION", "NAME"));
    assert_eq!(
        lines[4],
        format!(
            "{:<67}Qwen3-8B on vLLM with 1 NVIDIA GPU per replica (ModelBooster)",
            "Qwen/Qwen3-8B"
        )
    );
    let yaml = ok(&ns, &["get", "templates", "-o", "yaml"]).await;
    assert!(yaml.starts_with(
        "- Description: Qwen3-32B on vLLM Ascend with 4 Huawei Ascend NPUs per replica (ModelBooster)\n  FilePath: Qwen/Qwen3-32B-NPU.yaml\n  Name: Qwen/Qwen3-32B-NPU\n- Description: "
    ), "{yaml}");
    let raw = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/templates/Qwen/Qwen3-8B.yaml"
    ))
    .unwrap();
    assert_eq!(ok(&ns, &["get", "template", "Qwen3-8B"]).await, raw);
    assert_eq!(
        ok(&ns, &["get", "template", "Qwen/Qwen3-8B", "-o", "yaml"]).await,
        raw
    );
    assert_eq!(
        ok(&ns, &["get", "template", "Qwen/Qwen3-8B", "-o", "table"]).await,
        "NAME            DESCRIPTION\nQwen/Qwen3-8B   Qwen3-8B on vLLM with 1 NVIDIA GPU per replica (ModelBooster)\n"
    );
    let described = ok(&ns, &["describe", "template", "Qwen3-8B"]).await;
    assert_eq!(
        described,
        format!(
            "Template: Qwen/Qwen3-8B\nDescription: Qwen3-8B on vLLM with 1 NVIDIA GPU per replica (ModelBooster)\n\n=================\nTemplate Content:\n=================\n{raw}\n"
        )
    );
}

#[tokio::test]
async fn works_as_a_kubectl_plugin() {
    let ns = kthena_testenv::namespace("cli-plugin").await.unwrap();
    create_example(
        ns.client(),
        ns.name(),
        "kthena-router/ModelServer-sglang.yaml",
        None,
    )
    .await;
    let bin = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(
        env!("CARGO_BIN_EXE_kthena"),
        bin.path().join("kubectl-kthena"),
    )
    .unwrap();
    let path = format!(
        "{}:{}",
        bin.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let kubectl = |args: &[&str]| {
        let mut cmd = tokio::process::Command::new(ns.env().kubectl_path());
        cmd.args(args)
            .env("PATH", &path)
            .env("KUBECONFIG", ns.env().kubeconfig());
        cmd
    };
    let out = kubectl(&["kthena", "get", "mserver", "-n", ns.name()])
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        stdout.starts_with("NAME          ENGINE   PORT    AGE\nsglang-mock   SGLang   30000   "),
        "{stdout}"
    );
    let out = kubectl(&["kthena", "--help"]).output().await.unwrap();
    let help = String::from_utf8(out.stdout).unwrap();
    assert!(
        help.contains("\nUsage: kubectl kthena [OPTIONS] <COMMAND>\n"),
        "{help}"
    );
}
