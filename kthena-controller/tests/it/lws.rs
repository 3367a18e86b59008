//! LeaderWorkerSet and the plugin framework on a real API server. A LeaderWorkerSet (on a
//! control plane of its own with the LWS CRD and kube-controller-manager's garbage
//! collector) is served as Go serves it: a ModelServing of the same name that it owns, pods
//! with the LWS labels of the `lws-standard-labels` plugin, the LWS status written back,
//! `kubectl scale lws` followed, and deleting the LWS deletes the ModelServing. On the shared
//! control plane, a ModelServing with `demo-pod-tweaks` gets the plugin's effect on exactly
//! the pods its scope selects, and one naming an unknown plugin gets no pod and a
//! `PluginFailed` event. A LeaderWorkerSet whose ModelServing the API server refuses gets a
//! `FailedCreate` Warning (on a control plane of its own with the LWS CRD).

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::core::v1::{Namespace, Pod, ServiceAccount};
use k8s_openapi::api::node::v1::RuntimeClass;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kthena_api::ModelServing;
use kthena_controller::serving::lws::{LeaderWorkerSet, model_serving, served, spec_differs};
use kthena_controller::serving::{Config, run};
use kthena_sim::node::{NodeConfig, SimNode};
use kube::api::{Api, ListParams, ObjectMeta, PostParams};
use kube::runtime::wait::{await_condition, conditions};
use kube::{Client, ResourceExt as _};
use serde_json::{Value, json};
use tokio::task::JoinSet;

use crate::ms_support::{available, eventually};

const NS: &str = "lws";
const NAME: &str = "llama-multinode";

fn template(role: &str, script: &str) -> Value {
    json!({
        "metadata": {"labels": {"role": role, "model": "llama"}},
        "spec": {"containers": [{
            "name": role,
            "image": "vllm/vllm-openai:latest",
            "command": ["sh", "-c", script],
            "ports": [{"containerPort": 8080}],
        }]},
    })
}

/// Kthena's `lws-integration.md` example, with 2 groups of 3 pods.
fn leader_worker_set() -> Value {
    json!({
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": NAME, "namespace": NS},
        "spec": {"replicas": 2, "leaderWorkerTemplate": {
            "size": 3,
            "leaderTemplate": template("leader", "python3 -m vllm.entrypoints.openai.api_server --port 8080 --model llama"),
            "workerTemplate": template("worker", "bash /vllm-workspace/examples/online_serving/multi-node-serving.sh worker --ray_address=$(ENTRY_ADDRESS)"),
        }},
    })
}

/// Runs `kubectl ARGS` (with `-f -` reading `stdin` when given) and returns its stdout.
fn kubectl(
    plane: &kthena_testenv::ControlPlane,
    args: &[&str],
    stdin: Option<&Value>,
) -> Result<String> {
    let mut child = plane
        .kubectl()
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()?;
    let mut input = child.stdin.take().context("stdin")?;
    if let Some(v) = stdin {
        input.write_all(&serde_json::to_vec(v)?)?;
    }
    drop(input);
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!("kubectl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Installs `tests/fixtures/lws-crd.yaml` and waits until LeaderWorkerSet is discovered.
async fn install_lws_crd(client: &Client) -> Result<()> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/lws-crd.yaml");
    let crd: CustomResourceDefinition = serde_saphyr::from_str(&std::fs::read_to_string(path)?)?;
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    api.create(&PostParams::default(), &crd).await?;
    let name = crd.name_any();
    let established = await_condition(api, &name, conditions::is_crd_established());
    tokio::time::timeout(Duration::from_secs(30), established).await??;
    eventually("LeaderWorkerSet discovered", || async {
        Ok(served(client).await?.then_some(()))
    })
    .await
}

/// The namespace, once kube-controller-manager gave it its `default` ServiceAccount (pods
/// are refused before).
async fn namespace(client: &Client) -> Result<()> {
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(NS.to_owned()),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await?;
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), NS);
    eventually("the default ServiceAccount", || async {
        Ok(sas.get_opt("default").await?.map(drop))
    })
    .await
}

fn lws_labels(pod: &Pod) -> BTreeMap<String, String> {
    pod.labels()
        .iter()
        .filter(|(k, _)| k.starts_with("leaderworkerset.sigs.k8s.io/") || *k == "role")
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// `(replicas, readyReplicas)` of the LeaderWorkerSet's status.
async fn lws_status(api: &Api<LeaderWorkerSet>) -> Result<(Option<i32>, Option<i32>)> {
    let st = api.get(NAME).await?.status.unwrap_or_default();
    Ok((st.replicas, st.ready_replicas))
}

/// Checks the ModelServing the LeaderWorkerSet got: Go's `constructModelServing`.
fn check_model_serving(ms: &ModelServing, lws: &LeaderWorkerSet) -> Result<()> {
    let owners = serde_json::to_value(&ms.metadata.owner_references)?;
    let uid = lws.uid().context("LWS uid")?;
    assert_eq!(
        owners,
        json!([{"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
                "name": NAME, "uid": uid, "controller": true, "blockOwnerDeletion": true}])
    );
    assert_eq!(ms.metadata.labels, None);
    let spec = serde_json::to_value(&ms.spec)?;
    let lws_spec = &leader_worker_set()["spec"]["leaderWorkerTemplate"];
    assert_eq!(spec["replicas"], 2);
    assert_eq!(spec["schedulerName"], "volcano");
    assert_eq!(
        spec["plugins"],
        json!([{"name": "lws-standard-labels", "type": "BuiltIn"}])
    );
    let roles = spec["template"]["roles"].as_array().context("roles")?;
    assert_eq!(roles.len(), 1);
    assert_eq!(roles[0]["name"], "default");
    assert_eq!(roles[0]["replicas"], 1);
    assert_eq!(roles[0]["workerReplicas"], 2);
    assert_eq!(roles[0]["entryTemplate"], lws_spec["leaderTemplate"]);
    assert_eq!(roles[0]["workerTemplate"], lws_spec["workerTemplate"]);
    // What the API server stored (CRD defaults applied) is what the controller builds: it
    // does not write the spec again at each reconcile.
    assert!(!spec_differs(ms, &model_serving(lws)));
    Ok(())
}

/// The pods of the ModelServing with their LWS labels (and the template's `role`), by name.
async fn labelled_pods(pods: &Api<Pod>) -> Result<BTreeMap<String, BTreeMap<String, String>>> {
    let lp = ListParams::default().labels(&format!("modelserving.volcano.sh/name={NAME}"));
    let list = pods.list(&lp).await?.items;
    Ok(list
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| (p.name_any(), lws_labels(p)))
        .collect())
}

fn want_labels(group: u32, worker: u32) -> BTreeMap<String, String> {
    // `printf llama-multinode-<group> | sha1sum`
    let key = [
        "162c9bc36930c92a95aea11a736ad0abb3829ea4",
        "d87af4ba2c0fa1e3a34774f951d19d1500939499",
    ];
    let role = if worker == 0 { "leader" } else { "worker" };
    [
        ("leaderworkerset.sigs.k8s.io/name", NAME.to_owned()),
        ("leaderworkerset.sigs.k8s.io/group-index", group.to_string()),
        (
            "leaderworkerset.sigs.k8s.io/worker-index",
            worker.to_string(),
        ),
        (
            "leaderworkerset.sigs.k8s.io/group-key",
            key[group as usize].to_owned(),
        ),
        ("role", role.to_owned()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leaderworkerset_is_served_by_an_owned_modelserving() -> Result<()> {
    let plane = kthena_testenv::ControlPlane::start().await?;
    plane.start_controller_manager().await?;
    let client = plane.client().await?;
    install_lws_crd(&client).await?;
    namespace(&client).await?;
    let config = Config {
        namespace: Some(NS.to_owned()),
        workers: 2,
        ..Config::default()
    };
    let mut tasks = JoinSet::new();
    tasks.spawn(run(client.clone(), config, std::future::pending()));
    let node_config = NodeConfig {
        namespace: Some(NS.to_owned()),
        health_interval: Duration::from_millis(100),
        ..NodeConfig::default()
    };
    let _node = SimNode::start(client.clone(), node_config);

    let out = kubectl(&plane, &["apply", "-f", "-"], Some(&leader_worker_set()))?;
    assert_eq!(
        out,
        format!("leaderworkerset.leaderworkerset.x-k8s.io/{NAME} created\n")
    );
    let sets: Api<LeaderWorkerSet> = Api::namespaced(client.clone(), NS);
    let servings: Api<ModelServing> = Api::namespaced(client.clone(), NS);
    let ms = eventually("the ModelServing", || async {
        Ok(servings.get_opt(NAME).await?)
    })
    .await?;
    check_model_serving(&ms, &sets.get(NAME).await?)?;

    // Pods with the LWS labels, and the LWS status from the ModelServing's.
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let want: BTreeMap<_, _> = (0..2)
        .flat_map(|g| (0..3).map(move |w| (format!("{NAME}-{g}-default-0-{w}"), want_labels(g, w))))
        .collect();
    let got = eventually("6 pods", || async {
        let got = labelled_pods(&pods).await?;
        Ok((got.len() == 6).then_some(got))
    })
    .await?;
    assert_eq!(got, want);
    eventually("LWS status 2/2", || async {
        Ok((lws_status(&sets).await? == (Some(2), Some(2))).then_some(()))
    })
    .await?;
    let table = kubectl(
        &plane,
        &[
            "get",
            "lws",
            NAME,
            "-n",
            NS,
            "--no-headers",
            "-o",
            "custom-columns=R:.status.readyReplicas,D:.spec.replicas",
        ],
        None,
    )?;
    assert_eq!(table.split_whitespace().collect::<Vec<_>>(), ["2", "2"]);

    // `kubectl scale lws` (the scale subresource) reaches the ModelServing and the status.
    kubectl(
        &plane,
        &["scale", "lws", NAME, "-n", NS, "--replicas=1"],
        None,
    )?;
    let ms = eventually("the ModelServing scaled to 1", || async {
        let ms = servings.get(NAME).await?;
        Ok((ms.spec.replicas == Some(1)).then_some(ms))
    })
    .await?;
    assert_eq!(ms.metadata.generation, Some(2));
    eventually("LWS status 1/1 and group 1 gone", || async {
        let pods = labelled_pods(&pods).await?;
        let done = lws_status(&sets).await? == (Some(1), Some(1)) && pods.len() == 3;
        Ok(done.then_some(()))
    })
    .await?;
    let uid = servings.get(NAME).await?.uid();

    // Deleting the LeaderWorkerSet deletes its ModelServing (garbage collector), then its pods.
    kubectl(&plane, &["delete", "lws", NAME, "-n", NS], None)?;
    eventually("the ModelServing deleted", || async {
        let ms = servings.get_opt(NAME).await?;
        Ok(ms.is_none_or(|ms| ms.uid() != uid).then_some(()))
    })
    .await?;
    eventually("its pods deleted", || async {
        Ok(labelled_pods(&pods).await?.is_empty().then_some(()))
    })
    .await?;
    assert!(
        servings.get_opt(NAME).await?.is_none(),
        "recreated without its LWS"
    );
    Ok(())
}

/// A ModelServing of one role (entry + 1 worker) with Kthena's demo plugin scoped to the
/// workers, the demo plugin again for every pod, and the LWS labels plugin (which does
/// nothing: no LeaderWorkerSet owns it).
fn tweaked() -> Result<ModelServing> {
    let container = json!({"name": "engine", "image": "vllm/vllm-openai:latest",
        "command": ["sh", "-c", "python3 -m vllm.entrypoints.openai.api_server --model m"]});
    let template = json!({"spec": {"containers": [container]}});
    Ok(serde_json::from_value(json!({
        "apiVersion": "workload.serving.volcano.sh/v1alpha1",
        "kind": "ModelServing",
        "metadata": {"name": "tweaked"},
        "spec": {
            "replicas": 1,
            "plugins": [
                {"name": "demo-pod-tweaks", "scope": {"roles": ["server"], "target": "Worker"}, "config": {
                    "runtimeClassName": "kthena-plugin-test",
                    "annotations": {"example.com/custom": "value"},
                    "env": [{"name": "CUSTOM_VAR", "value": "custom-value"}],
                }},
                {"name": "demo-pod-tweaks", "config": {"annotations": {"example.com/all": "yes"}}},
                {"name": "lws-standard-labels"},
            ],
            "template": {"roles": [{"name": "server", "replicas": 1, "workerReplicas": 1,
                "entryTemplate": template, "workerTemplate": template}]},
        },
    }))?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_builtin_plugin_changes_exactly_the_pods_of_its_scope() -> Result<()> {
    let env = crate::ms_support::setup("plugins").await?;
    let ns = &env.ns;
    let class = RuntimeClass {
        metadata: ObjectMeta {
            name: Some("kthena-plugin-test".to_owned()),
            ..ObjectMeta::default()
        },
        handler: "runc".to_owned(),
        ..RuntimeClass::default()
    };
    let classes: Api<RuntimeClass> = Api::all(ns.client().clone());
    if classes.get_opt("kthena-plugin-test").await?.is_none() {
        classes.create(&PostParams::default(), &class).await?;
    }
    ns.api::<ModelServing>()
        .create(&PostParams::default(), &tweaked()?)
        .await?;
    available(ns, "tweaked", 1).await?;
    let pods = ns.api::<Pod>();
    for (name, worker) in [
        ("tweaked-0-server-0-0", false),
        ("tweaked-0-server-0-1", true),
    ] {
        let pod = pods.get(name).await?;
        let notes = pod.annotations();
        assert_eq!(
            notes.get("example.com/all").map(String::as_str),
            Some("yes"),
            "{name}"
        );
        let custom = notes.get("example.com/custom").map(String::as_str);
        assert_eq!(custom, worker.then_some("value"), "{name}");
        let spec = pod.spec.clone().unwrap_or_default();
        let class = spec.runtime_class_name.as_deref();
        assert_eq!(class, worker.then_some("kthena-plugin-test"), "{name}");
        let env: Vec<(String, String)> = spec.containers[0]
            .env
            .iter()
            .flatten()
            .map(|e| (e.name.clone(), e.value.clone().unwrap_or_default()))
            .collect();
        let mut want = vec![
            ("GROUP_SIZE".to_owned(), "2".to_owned()),
            (
                "ENTRY_ADDRESS".to_owned(),
                format!("tweaked-0-server-0-0.{}", ns.name()),
            ),
            ("WORKER_INDEX".to_owned(), u8::from(worker).to_string()),
        ];
        if worker {
            want.push(("CUSTOM_VAR".to_owned(), "custom-value".to_owned()));
        }
        assert_eq!(env, want, "{name}");
        assert!(lws_labels(&pod).is_empty(), "{name}: {:?}", pod.labels());
    }
    Ok(())
}

/// A ModelServing that names an unknown plugin (it got in without the webhook) gets no pod,
/// a Warning `PluginFailed` with the error, and its status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_plugin_creates_no_pod_and_is_reported() -> Result<()> {
    use k8s_openapi::api::events::v1::Event as K8sEvent;
    let env = crate::ms_support::setup("plugin-failed").await?;
    let ns = &env.ns;
    let mut ms = tweaked()?;
    ms.spec.plugins[2].name = "foo".to_owned();
    ns.api::<ModelServing>()
        .create(&PostParams::default(), &ms)
        .await?;
    let event = eventually("a PluginFailed event", || async {
        let events = ns.api::<K8sEvent>().list(&ListParams::default()).await?;
        Ok(events
            .items
            .iter()
            .find(|e| e.reason.as_deref() == Some("PluginFailed"))
            .map(|e| (e.type_.clone(), e.note.clone().unwrap_or_default())))
    })
    .await?;
    assert_eq!(
        event,
        (
            Some("Warning".to_owned()),
            "plugin foo not registered (built-in plugins: demo-pod-tweaks, lws-standard-labels)"
                .to_owned()
        )
    );
    eventually("the status written", || async {
        let ms = ns.api::<ModelServing>().get("tweaked").await?;
        Ok(ms.status.filter(|s| s.replicas == 1).map(drop))
    })
    .await?;
    let pods = ns.api::<Pod>().list(&ListParams::default()).await?;
    assert!(
        pods.items.is_empty(),
        "{:?}",
        pods.items.iter().map(|p| p.name_any()).collect::<Vec<_>>()
    );
    Ok(())
}

/// A ValidatingAdmissionPolicy, bound in every namespace, that refuses a ModelServing whose
/// name is longer than 40 characters (its pods' names would be over 63).
fn name_length_policy() -> Result<(ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding)> {
    let policy = serde_json::from_value(json!({
        "metadata": {"name": "modelserving-name-length"},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{
                "apiGroups": ["workload.serving.volcano.sh"],
                "apiVersions": ["*"],
                "operations": ["CREATE"],
                "resources": ["modelservings"],
            }]},
            "validations": [{
                "expression": "size(object.metadata.name) <= 40",
                "message": "pod names would be longer than 63 characters",
            }],
        },
    }))?;
    let binding = serde_json::from_value(json!({
        "metadata": {"name": "modelserving-name-length"},
        "spec": {"policyName": "modelserving-name-length", "validationActions": ["Deny"]},
    }))?;
    Ok((policy, binding))
}

/// Regression: a LeaderWorkerSet whose ModelServing the API server refused (the webhook, for
/// a name too long for its pods) showed nothing: only the controller's log said why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_modelserving_is_reported_on_its_leaderworkerset() -> Result<()> {
    use k8s_openapi::api::events::v1::Event as K8sEvent;
    let plane = kthena_testenv::ControlPlane::start().await?;
    let client = plane.client().await?;
    install_lws_crd(&client).await?;
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": NS}}))?;
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await?;
    let (policy, binding) = name_length_policy()?;
    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(client.clone());
    Api::<ValidatingAdmissionPolicy>::all(client.clone())
        .create(&PostParams::default(), &policy)
        .await?;
    bindings.create(&PostParams::default(), &binding).await?;
    let config = Config {
        namespace: Some(NS.to_owned()),
        ..Config::default()
    };
    let mut tasks = JoinSet::new();
    tasks.spawn(run(client.clone(), config, std::future::pending()));

    let name = "lws-a-very-long-name-for-testing-the-pod-name-limits-x";
    let mut lws = leader_worker_set();
    lws["metadata"]["name"] = json!(name);
    lws["spec"]["leaderWorkerTemplate"]["size"] = json!(2);
    kubectl(&plane, &["create", "-f", "-"], Some(&lws))?;
    let events: Api<K8sEvent> = Api::namespaced(client.clone(), NS);
    let failed = || async {
        let list = events.list(&ListParams::default()).await?;
        anyhow::Ok(
            list.items
                .into_iter()
                .filter(|e| e.reason.as_deref() == Some("FailedCreate"))
                .map(|e| {
                    let on = e.regarding.and_then(|r| r.kind.zip(r.name));
                    (e.type_, on, e.note, e.series.map(|s| s.count))
                })
                .collect::<Vec<_>>(),
        )
    };
    let got = eventually("a FailedCreate event", || async {
        let got = failed().await?;
        Ok((!got.is_empty()).then_some(got))
    })
    .await?;
    let note = format!(
        "creating modelserving {NS}/{name}: modelservings.workload.serving.volcano.sh \"{name}\" is forbidden: ValidatingAdmissionPolicy 'modelserving-name-length' with binding 'modelserving-name-length' denied request: pod names would be longer than 63 characters (HTTP 422)"
    );
    let want = (
        Some("Warning".to_owned()),
        Some(("LeaderWorkerSet".to_owned(), name.to_owned())),
        Some(note),
        None,
    );
    assert_eq!(got, std::slice::from_ref(&want));
    // Retried every 5 s, published once.
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(failed().await?, [want]);

    // The cause removed: the ModelServing is created at the next retry.
    bindings
        .delete("modelserving-name-length", &Default::default())
        .await?;
    let servings: Api<ModelServing> = Api::namespaced(client.clone(), NS);
    let ms = eventually("the ModelServing", || async {
        Ok(servings.get_opt(name).await?)
    })
    .await?;
    assert_eq!(ms.spec.template.roles[0].worker_replicas, 1);
    Ok(())
}
