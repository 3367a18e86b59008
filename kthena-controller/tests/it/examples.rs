//! Every one of Kthena's example ModelServings (`examples/model-serving/`) on a real API
//! server, with the Volcano PodGroup CRD and pods made Running and Ready by the simulated
//! node: the pods, headless services, PodGroups and status Go Kthena creates (names,
//! labels, annotations, env, owner references, counts), then `Available=True`. Also: the
//! debug dump, ServingGroupRecreate after a deleted pod, a partition's protected groups
//! staying on (and coming back at) the old revision, and a RoleRollingUpdate within the
//! role's maxUnavailable.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, Result, bail, ensure};
use k8s_openapi::api::core::v1::{Container, Pod, Service};
use k8s_openapi::api::events::v1::Event as K8sEvent;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kthena_api::thirdparty::PodGroup;
use kthena_api::{ModelServing, Object, load_file};
use kthena_controller::serving::{Config, ServingCache, run};
use kthena_sim::node::{NodeConfig, SimNode};
use kthena_testenv::TestNamespace;
use kube::ResourceExt as _;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use tokio::task::JoinSet;

/// Upper bound for convergence (a timeout, not a measured latency).
const WAIT: Duration = Duration::from_secs(90);

/// What Go Kthena makes of one example, read off the manifest by hand.
struct Case {
    file: &'static str,
    name: &'static str,
    groups: u32,
    /// (role, role replicas, pods per role replica, has a workerTemplate).
    roles: &'static [(&'static str, u32, u32, bool)],
    /// PodGroup `minMember` (Σ roles (1 + workerReplicas) × min role replicas).
    min_member: i32,
}

const CASES: &[Case] = &[
    Case {
        file: "data-parallel-deployment.yaml",
        name: "my-model",
        groups: 1,
        roles: &[("leader", 1, 2, true)],
        min_member: 2,
    },
    Case {
        file: "gangPolicy.yaml",
        name: "sample",
        groups: 1,
        roles: &[("prefill", 2, 2, true), ("decode", 2, 2, true)],
        min_member: 6,
    },
    Case {
        file: "gpu-kvcache-aware-sglang.yaml",
        name: "sglang-qwen-06b",
        groups: 1,
        roles: &[("server", 1, 1, false)],
        min_member: 1,
    },
    Case {
        file: "gpu-kvcache-aware.yaml",
        name: "vllm-qwen-06b",
        groups: 1,
        roles: &[("server", 1, 1, false)],
        min_member: 1,
    },
    Case {
        file: "gpu-pd-disaggregation.yaml",
        name: "vllm-qwen-06b",
        groups: 1,
        roles: &[("prefill", 1, 1, false), ("decode", 1, 1, false)],
        min_member: 2,
    },
    Case {
        file: "multi-node.yaml",
        name: "llama-multinode",
        groups: 1,
        roles: &[("llama-405b", 2, 2, true)],
        min_member: 2,
    },
    Case {
        file: "network-topology.yaml",
        name: "sample",
        groups: 1,
        roles: &[("prefill", 1, 2, true), ("decode", 1, 2, true)],
        min_member: 4,
    },
    Case {
        // workerReplicas 0 with a workerTemplate: one pod per role, but a service (Go).
        file: "prefill-decode-disaggregation.yaml",
        name: "deepseek-v2-lite",
        groups: 1,
        roles: &[("prefill", 1, 1, true), ("decode", 1, 1, true)],
        min_member: 2,
    },
    Case {
        file: "role-rollingupdate.yaml",
        name: "sample",
        groups: 2,
        roles: &[("prefill", 1, 2, true), ("decode", 1, 2, true)],
        min_member: 4,
    },
    Case {
        file: "rollingupdate.yaml",
        name: "sample",
        groups: 4,
        roles: &[("prefill", 1, 2, true), ("decode", 1, 2, true)],
        min_member: 4,
    },
    Case {
        file: "sample.yaml",
        name: "sample",
        groups: 1,
        roles: &[("prefill", 1, 4, true), ("decode", 1, 4, true)],
        min_member: 8,
    },
    Case {
        file: "sglang-pd-disaggregation.yaml",
        name: "sglang-qwen-06b",
        groups: 1,
        roles: &[("prefill", 1, 1, false), ("decode", 1, 1, false)],
        min_member: 2,
    },
    Case {
        file: "vllm-pd-multinode.yaml",
        name: "vllm-pd-multinode",
        groups: 1,
        roles: &[("prefill", 1, 2, true), ("decode", 1, 2, true)],
        min_member: 4,
    },
];

fn examples_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/kthena-manifests/examples/model-serving")
}

/// The controller (recording into `cache`) and a simulated node, both on `ns` only.
fn start(ns: &TestNamespace, cache: &ServingCache, tasks: &mut JoinSet<()>) -> SimNode {
    let config = Config {
        namespace: Some(ns.name().to_owned()),
        workers: 2,
        cache: cache.clone(),
        ..Config::default()
    };
    tasks.spawn(run(ns.client().clone(), config, std::future::pending()));
    SimNode::start(
        ns.client().clone(),
        NodeConfig {
            namespace: Some(ns.name().to_owned()),
            health_interval: Duration::from_millis(100),
            ..NodeConfig::default()
        },
    )
}

/// Creates the ModelServing of `examples/model-serving/<file>` in `ns`.
async fn create(ns: &TestNamespace, file: &str) -> Result<ModelServing> {
    create_with(ns, file, |_| {}).await
}

/// As [`create`], changed by `edit` first.
async fn create_with(
    ns: &TestNamespace,
    file: &str,
    edit: impl FnOnce(&mut ModelServing),
) -> Result<ModelServing> {
    let docs = load_file(examples_dir().join(file))?;
    let ms = docs.into_iter().find_map(|d| match d.object {
        Object::ModelServing(ms) => Some(ms),
        _ => None,
    });
    let mut ms = *ms.with_context(|| format!("{file} has no ModelServing"))?;
    ms.metadata.namespace = Some(ns.name().to_owned());
    edit(&mut ms);
    Ok(ns
        .api::<ModelServing>()
        .create(&PostParams::default(), &ms)
        .await?)
}

/// Reads `name`, changes it with `edit` and writes it back, reading again when the
/// controller wrote the object in between (409 Conflict on the stale `resourceVersion`).
async fn edit_serving(
    ns: &TestNamespace,
    name: &str,
    edit: impl Fn(&mut ModelServing) -> Result<()>,
) -> Result<ModelServing> {
    let api = ns.api::<ModelServing>();
    for _ in 0..20 {
        let mut ms = api.get(name).await?;
        edit(&mut ms)?;
        match api.replace(name, &PostParams::default(), &ms).await {
            Err(kube::Error::Api(e)) if e.code == 409 => continue,
            other => return Ok(other?),
        }
    }
    bail!("{name} kept changing under 20 replace attempts")
}

/// Polls `check` (every 100 ms) until it returns `Some`, or fails after [`WAIT`].
async fn eventually<T, F, Fut>(what: &str, mut check: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Option<T>>>,
{
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if let Some(v) = check().await? {
            return Ok(v);
        }
        if tokio::time::Instant::now() > deadline {
            bail!("timed out waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn condition(ms: &ModelServing, type_: &str) -> Option<String> {
    let st = ms.status.as_ref()?;
    let c = st.conditions.iter().find(|c| c.type_ == type_)?;
    Some(c.status.clone())
}

/// Waits until `name` is Available=True with `groups` available, updated groups.
async fn available(ns: &TestNamespace, name: &str, groups: i32) -> Result<ModelServing> {
    let api = ns.api::<ModelServing>();
    let what = format!("{}/{name} Available with {groups} groups", ns.name());
    eventually(&what, || async {
        let ms = api.get(name).await?;
        let st = ms.status.clone().unwrap_or_default();
        let ok = condition(&ms, "Available").as_deref() == Some("True")
            && st.replicas == groups
            && st.available_replicas == Some(groups)
            && st.updated_replicas == Some(groups);
        Ok(ok.then_some(ms))
    })
    .await
}

async fn pods_of(ns: &TestNamespace, name: &str) -> Result<Vec<Pod>> {
    let lp = ListParams::default().labels(&format!("modelserving.volcano.sh/name={name}"));
    Ok(ns.api::<Pod>().list(&lp).await?.items)
}

fn sorted<I: IntoIterator<Item = String>>(it: I) -> Vec<String> {
    let mut v: Vec<String> = it.into_iter().collect();
    v.sort();
    v
}

/// The template containers of `role` for pod index `i` (entry or worker template).
fn template_containers(ms: &ModelServing, role: &str, i: u32) -> Result<Vec<Container>> {
    let role = ms.spec.template.roles.iter().find(|r| r.name == role);
    let role = role.context("role not in spec")?;
    let template = match i {
        0 => &role.entry_template,
        _ => role
            .worker_template
            .as_ref()
            .context("no worker template")?,
    };
    let spec = template.spec.clone().unwrap_or_default();
    Ok([spec.init_containers.unwrap_or_default(), spec.containers].concat())
}

/// Env of one container: the template's own variables, then Go's three, last.
fn check_env(c: &Container, template: &Container, want: &[(&str, String); 3]) -> Result<()> {
    let env = c.env.clone().unwrap_or_default();
    // The API server defaults `fieldRef.apiVersion` to v1.
    let mut theirs: Vec<_> = template.env.clone().unwrap_or_default();
    for e in &mut theirs {
        let field = e.value_from.as_mut().and_then(|v| v.field_ref.as_mut());
        if let Some(f) = field {
            f.api_version.get_or_insert_with(|| "v1".to_owned());
        }
    }
    ensure!(env.len() == theirs.len() + 3, "{}: env {env:?}", c.name);
    for (got, t) in env.iter().zip(&theirs) {
        ensure!(got == t, "{}: {got:?} != {t:?}", c.name);
    }
    for (got, (name, value)) in env[theirs.len()..].iter().zip(want) {
        ensure!(
            got.name == *name && got.value.as_deref() == Some(value.as_str()),
            "{}: {got:?}, want {name}={value}",
            c.name
        );
    }
    Ok(())
}

/// One pod against Go's `GenerateEntryPod`/`GenerateWorkerPod`.
fn check_pod(case: &Case, ms: &ModelServing, pod: &Pod, rev: &str) -> Result<()> {
    let name = pod.name_any();
    let labels = pod.labels();
    let (group, role, role_id) = (
        &labels["modelserving.volcano.sh/group-name"],
        &labels["modelserving.volcano.sh/role"],
        &labels["modelserving.volcano.sh/role-id"],
    );
    let index: u32 = name.rsplit('-').next().unwrap_or_default().parse()?;
    let entry = format!("{group}-{role_id}-0");
    ensure!(name == format!("{group}-{role_id}-{index}"), "{name}");
    ensure!(
        labels["modelserving.volcano.sh/name"] == case.name,
        "{name}"
    );
    ensure!(labels["modelserving.volcano.sh/revision"] == rev, "{name}");
    ensure!(!labels["modelserving.volcano.sh/role-template-hash"].is_empty());
    let is_entry = labels
        .get("modelserving.volcano.sh/entry")
        .map(String::as_str);
    ensure!(
        is_entry == (index == 0).then_some("true"),
        "{name}: entry label"
    );
    ensure!(
        labels.len() == if index == 0 { 7 } else { 6 },
        "{name}: {labels:?}"
    );
    let annotations = BTreeMap::from([
        ("scheduling.k8s.io/group-name".to_owned(), group.clone()),
        ("volcano.sh/task-spec".to_owned(), role_id.clone()),
    ]);
    ensure!(
        pod.annotations() == &annotations,
        "{name}: {:?}",
        pod.annotations()
    );
    let owners = pod.owner_references();
    ensure!(owners.len() == 1, "{name}: {owners:?}");
    let o = &owners[0];
    ensure!(
        (o.api_version.as_str(), o.kind.as_str(), o.name.as_str())
            == (
                "workload.serving.volcano.sh/v1alpha1",
                "ModelServing",
                case.name
            )
            && Some(&o.uid) == ms.metadata.uid.as_ref()
            && (o.controller, o.block_owner_deletion) == (Some(true), Some(true)),
        "{name}: {o:?}"
    );
    let spec = pod.spec.clone().unwrap_or_default();
    ensure!(spec.scheduler_name.as_deref() == Some("volcano"), "{name}");
    let size = case.roles.iter().find(|r| r.0 == role).map_or(0, |r| r.2);
    let want = [
        ("GROUP_SIZE", size.to_string()),
        (
            "ENTRY_ADDRESS",
            format!("{entry}.{}", ms.namespace().unwrap_or_default()),
        ),
        ("WORKER_INDEX", index.to_string()),
    ];
    let containers = [spec.init_containers.unwrap_or_default(), spec.containers].concat();
    let templates = template_containers(ms, role, index)?;
    ensure!(containers.len() == templates.len(), "{name}: containers");
    for (c, t) in containers.iter().zip(&templates) {
        ensure!(c.name == t.name && c.image == t.image, "{name}: {}", c.name);
        check_env(c, t, &want).with_context(|| name.clone())?;
    }
    Ok(())
}

/// One example: pods, services, PodGroups and status as Go's.
async fn check_case(ns: &TestNamespace, case: &Case) -> Result<()> {
    let created = create(ns, case.file).await?;
    let groups = i32::try_from(case.groups)?;
    let ms = available(ns, case.name, groups).await?;
    let st = ms.status.clone().unwrap_or_default();
    let rev = st.update_revision.clone().context("no updateRevision")?;
    ensure!(st.current_revision.as_deref() == Some(rev.as_str()));
    ensure!(st.current_replicas == Some(groups));
    ensure!(st.observed_generation == ms.metadata.generation);
    let first = case.roles[0].0;
    let selector = format!(
        "modelserving.volcano.sh/entry=true,modelserving.volcano.sh/name={},modelserving.volcano.sh/role={first},modelserving.volcano.sh/role-id={first}-0",
        case.name
    );
    ensure!(st.label_selector.as_deref() == Some(selector.as_str()));
    let (mut want_pods, mut want_svcs) = (Vec::new(), Vec::new());
    for g in 0..case.groups {
        for &(role, replicas, size, service) in case.roles {
            for r in 0..replicas {
                let base = format!("{}-{g}-{role}-{r}", case.name);
                want_pods.extend((0..size).map(|i| format!("{base}-{i}")));
                if service {
                    want_svcs.push(format!("{base}-0"));
                }
            }
        }
    }
    let pods = pods_of(ns, case.name).await?;
    ensure!(
        sorted(pods.iter().map(|p| p.name_any())) == sorted(want_pods),
        "{}: pods",
        case.file
    );
    for pod in &pods {
        check_pod(case, &created, pod, &rev).with_context(|| case.file)?;
    }
    let svcs = ns
        .api::<Service>()
        .list(&ListParams::default())
        .await?
        .items;
    ensure!(sorted(svcs.iter().map(|s| s.name_any())) == sorted(want_svcs));
    for svc in &svcs {
        let spec = svc.spec.clone().unwrap_or_default();
        ensure!(spec.cluster_ip.as_deref() == Some("None"));
        ensure!(spec.publish_not_ready_addresses == Some(true));
        let selector = spec.selector.unwrap_or_default();
        ensure!(selector.len() == 4 && selector["modelserving.volcano.sh/entry"] == "true");
        ensure!(svc.labels().len() == 4 && svc.owner_references().len() == 1);
    }
    let pgs = ns
        .api::<PodGroup>()
        .list(&ListParams::default())
        .await?
        .items;
    let want: Vec<String> = (0..case.groups)
        .map(|g| format!("{}-{g}", case.name))
        .collect();
    ensure!(
        sorted(pgs.iter().map(|p| p.name_any())) == want,
        "{}: podgroups",
        case.file
    );
    for pg in &pgs {
        ensure!(
            pg.spec.min_member == Some(case.min_member),
            "{}: {pg:?}",
            case.file
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_example_reconciles_to_gos_children_and_becomes_available() -> Result<()> {
    let mut tasks = JoinSet::new();
    let mut checks = JoinSet::new();
    let mut nodes = Vec::new();
    for case in CASES {
        let ns = kthena_testenv::namespace("ex").await?;
        nodes.push(start(&ns, &ServingCache::default(), &mut tasks));
        checks.spawn(async move {
            let res = check_case(&ns, case).await;
            res.with_context(|| format!("{} in {}", case.file, ns.name()))
        });
    }
    while let Some(res) = checks.join_next().await {
        res??;
    }
    drop(nodes);
    Ok(())
}

async fn uids(ns: &TestNamespace, name: &str) -> Result<BTreeMap<String, String>> {
    let pods = pods_of(ns, name).await?;
    Ok(pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| (p.name_any(), p.uid().unwrap_or_default()))
        .collect())
}

/// GET `path` on `addr`, the body as JSON.
async fn get_json(addr: std::net::SocketAddr, path: &str) -> Result<serde_json::Value> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut conn = tokio::net::TcpStream::connect(addr).await?;
    let req = format!("GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n");
    conn.write_all(req.as_bytes()).await?;
    let mut reply = String::new();
    conn.read_to_string(&mut reply).await?;
    let (head, body) = reply.split_once("\r\n\r\n").context("no body")?;
    ensure!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
    ensure!(head.contains("content-type: application/json"), "{head}");
    Ok(serde_json::from_str(body)?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debug_dump_and_serving_group_recreate_of_vllm_pd_multinode() -> Result<()> {
    let ns = kthena_testenv::namespace("ex-debug").await?;
    let cache = ServingCache::default();
    let (addr, server) =
        kthena_controller::serving::serve_debug("127.0.0.1:0".parse()?, cache.clone()).await?;
    let mut tasks = JoinSet::new();
    tasks.spawn(server);
    let _node = start(&ns, &cache, &mut tasks);
    let name = "vllm-pd-multinode";
    create(&ns, "vllm-pd-multinode.yaml").await?;
    let ms = available(&ns, name, 1).await?;
    let rev = ms
        .status
        .clone()
        .unwrap_or_default()
        .update_revision
        .context("no revision")?;
    let key = format!("{}/{name}", ns.name());
    let dump = eventually("the dump shows the group Running", || async {
        let dump = get_json(addr, "/debug/modelserving/cache").await?;
        Ok((dump[&key][format!("{name}-0")]["status"] == "Running").then_some(dump))
    })
    .await?;
    let group = &dump[&key][format!("{name}-0")];
    assert_eq!(group["name"], format!("{name}-0"));
    assert_eq!(group["revision"], rev.as_str());
    let running: Vec<String> = ["decode", "prefill"]
        .iter()
        .flat_map(|r| (0..2).map(move |i| format!("{name}-0-{r}-0-{i}")))
        .collect();
    assert_eq!(group["runningPods"], json!(running));
    for role in ["prefill", "decode"] {
        let replica = &group["roles"][role][format!("{role}-0")];
        assert_eq!(replica["name"], format!("{role}-0"));
        assert_eq!(replica["status"], "Running");
        assert_eq!(replica["revision"], rev.as_str());
        let pod = ns.api::<Pod>().get(&format!("{name}-0-{role}-0-0")).await?;
        let hash = &pod.labels()["modelserving.volcano.sh/role-template-hash"];
        assert_eq!(replica["roleTemplateHash"], hash.as_str());
    }
    assert_eq!(dump.as_object().map(serde_json::Map::len), Some(1));

    // recoveryPolicy ServingGroupRecreate: one deleted pod replaces the whole group.
    let before = uids(&ns, name).await?;
    ns.api::<Pod>()
        .delete(&format!("{name}-0-decode-0-1"), &Default::default())
        .await?;
    eventually("every pod of the group replaced", || async {
        let now = uids(&ns, name).await?;
        let all_new = now.len() == 4 && now.iter().all(|(p, u)| before.get(p) != Some(u));
        Ok(all_new.then_some(()))
    })
    .await?;
    available(&ns, name, 1).await?;
    // Go's role events on the ModelServing: Running once ready, Creating when recreated.
    let events = eventually("RoleRunning and RoleCreating events", || async {
        let list = ns
            .api::<K8sEvent>()
            .list(&ListParams::default())
            .await?
            .items;
        let notes: Vec<(String, String)> = list
            .iter()
            .filter(|e| {
                e.regarding.as_ref().and_then(|r| r.kind.as_deref()) == Some("ModelServing")
            })
            .map(|e| {
                (
                    e.reason.clone().unwrap_or_default(),
                    e.note.clone().unwrap_or_default(),
                )
            })
            .collect();
        let has = |reason: &str| notes.iter().any(|(r, _)| r == reason);
        Ok((has("RoleRunning") && has("RoleCreating")).then_some(notes))
    })
    .await?;
    for role in ["prefill", "decode"] {
        for reason in ["RoleRunning", "RoleCreating"] {
            let state = reason.strip_prefix("Role").unwrap_or(reason);
            let note = format!("Role {role}/{role}-0 in ServingGroup {name}-0 is now {state}");
            assert!(
                events.iter().any(|(r, n)| r == reason && *n == note),
                "{note}: {events:?}"
            );
        }
    }
    // A deleted ModelServing leaves the dump.
    ns.api::<ModelServing>()
        .delete(name, &Default::default())
        .await?;
    eventually("the dump is empty", || async {
        let dump = get_json(addr, "/debug/modelserving/cache").await?;
        Ok((dump == json!({})).then_some(()))
    })
    .await
}

fn revision_of(pods: &[Pod], group: &str) -> Vec<String> {
    let mut revs: Vec<String> = pods
        .iter()
        .filter(|p| p.labels()["modelserving.volcano.sh/group-name"] == group)
        .map(|p| p.labels()["modelserving.volcano.sh/revision"].clone())
        .collect();
    revs.dedup();
    revs
}

fn entry_image(pods: &[Pod], name: &str) -> Option<String> {
    let pod = pods.iter().find(|p| p.name_any() == name)?;
    pod.spec.clone()?.containers.first()?.image.clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_keeps_and_recreates_protected_groups_at_the_old_revision() -> Result<()> {
    let ns = kthena_testenv::namespace("ex-partition").await?;
    let mut tasks = JoinSet::new();
    let _node = start(&ns, &ServingCache::default(), &mut tasks);
    create(&ns, "rollingupdate.yaml").await?;
    let before = available(&ns, "sample", 4).await?;
    let old = before
        .status
        .clone()
        .unwrap_or_default()
        .update_revision
        .context("no rev")?;
    // Partition 2 and a new image: groups 2 and 3 roll, 0 and 1 stay.
    let api = ns.api::<ModelServing>();
    edit_serving(&ns, "sample", |ms| {
        let strategy = ms.spec.rollout_strategy.as_mut().context("no strategy")?;
        let config = strategy
            .rolling_update_configuration
            .get_or_insert_default();
        config.partition = Some(IntOrString::Int(2));
        let entry = &mut ms.spec.template.roles[0].entry_template;
        entry.spec.as_mut().context("no spec")?.containers[0].image = Some("nginx:1.29".to_owned());
        Ok(())
    })
    .await?;
    let done = eventually("groups 2 and 3 updated", || async {
        let ms = api.get("sample").await?;
        let st = ms.status.clone().unwrap_or_default();
        let ok = st.updated_replicas == Some(2)
            && st.current_replicas == Some(2)
            && st.available_replicas == Some(4)
            && st.update_revision.as_deref() != Some(old.as_str());
        Ok(ok.then_some(ms))
    })
    .await?;
    let st = done.status.clone().unwrap_or_default();
    let new = st.update_revision.context("no rev")?;
    assert_eq!(st.current_revision.as_deref(), Some(old.as_str()));
    let pods = pods_of(&ns, "sample").await?;
    for (g, rev) in [(0, &old), (1, &old), (2, &new), (3, &new)] {
        assert_eq!(
            revision_of(&pods, &format!("sample-{g}")),
            [rev.as_str()],
            "group {g}"
        );
    }
    assert_eq!(
        entry_image(&pods, "sample-0-prefill-0-0").as_deref(),
        Some("nginx")
    );
    assert_eq!(
        entry_image(&pods, "sample-2-prefill-0-0").as_deref(),
        Some("nginx:1.29")
    );
    // Every pod of protected group 0 deleted: it comes back at the old revision, from the
    // old template.
    let before = uids(&ns, "sample").await?;
    let lp = ListParams::default().labels("modelserving.volcano.sh/group-name=sample-0");
    ns.api::<Pod>()
        .delete_collection(&Default::default(), &lp)
        .await?;
    let pods = eventually("group 0 recreated and ready", || async {
        let now = uids(&ns, "sample").await?;
        let renewed = (0..2).all(|i| {
            let p = format!("sample-0-prefill-0-{i}");
            now.get(&p).is_some_and(|u| before.get(&p) != Some(u))
        });
        let ms = api.get("sample").await?;
        let ready = ms.status.unwrap_or_default().available_replicas == Some(4);
        if !(renewed && ready && now.len() == 16) {
            return Ok(None);
        }
        Ok(Some(pods_of(&ns, "sample").await?))
    })
    .await?;
    assert_eq!(revision_of(&pods, "sample-0"), [old.as_str()]);
    assert_eq!(
        entry_image(&pods, "sample-0-prefill-0-0").as_deref(),
        Some("nginx")
    );
    let ms = api.get("sample").await?;
    let st = ms.status.unwrap_or_default();
    assert_eq!(st.current_revision.as_deref(), Some(old.as_str()));
    assert_eq!(
        (st.updated_replicas, st.current_replicas),
        (Some(2), Some(2))
    );
    // Removing the partition finishes the update.
    let patch =
        json!({"spec": {"rolloutStrategy": {"rollingUpdateConfiguration": {"partition": 0}}}});
    api.patch("sample", &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    eventually("all groups updated", || async {
        let ms = api.get("sample").await?;
        let st = ms.status.unwrap_or_default();
        Ok((st.updated_replicas == Some(4)
            && st.available_replicas == Some(4)
            && st.current_revision.as_deref() == Some(new.as_str()))
        .then_some(()))
    })
    .await
}

/// Decode role replicas of `sample-0` whose two pods are both Running and Ready.
async fn ready_decode_replicas(ns: &TestNamespace) -> Result<usize> {
    let pods = pods_of(ns, "sample").await?;
    let mut ready: BTreeMap<String, usize> = BTreeMap::new();
    for p in pods
        .iter()
        .filter(|p| kthena_controller::serving::running_and_ready(p))
    {
        if p.labels()["modelserving.volcano.sh/role"] == "decode" {
            *ready
                .entry(p.labels()["modelserving.volcano.sh/role-id"].clone())
                .or_default() += 1;
        }
    }
    Ok(ready.values().filter(|&&n| n == 2).count())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn role_rolling_update_keeps_each_role_within_its_max_unavailable() -> Result<()> {
    let ns = kthena_testenv::namespace("ex-role-mu").await?;
    let mut tasks = JoinSet::new();
    let _node = start(&ns, &ServingCache::default(), &mut tasks);
    // role-rollingupdate.yaml with one group and 3 decode replicas, maxUnavailable 1.
    let api = ns.api::<ModelServing>();
    create_with(&ns, "role-rollingupdate.yaml", |ms| {
        ms.spec.replicas = Some(1);
        let decode = &mut ms.spec.template.roles[1];
        decode.replicas = Some(3);
        decode.max_unavailable = Some(IntOrString::Int(1));
    })
    .await?;
    eventually("3 decode replicas ready", || async {
        Ok((ready_decode_replicas(&ns).await? == 3).then_some(()))
    })
    .await?;
    let before = available(&ns, "sample", 1).await?;
    let old = before.status.clone().unwrap_or_default().update_revision;
    let uids_before = uids(&ns, "sample").await?;
    edit_serving(&ns, "sample", |ms| {
        let worker = ms.spec.template.roles[1]
            .worker_template
            .as_mut()
            .context("no worker")?;
        worker.spec.as_mut().context("no spec")?.containers[0].image =
            Some("nginx:1.29".to_owned());
        Ok(())
    })
    .await?;
    let fewest = std::sync::atomic::AtomicUsize::new(3);
    let fewest = &fewest;
    eventually("every decode pod replaced", || {
        let (api, ns, uids_before, old) = (&api, &ns, &uids_before, &old);
        let sample = ready_decode_replicas(ns);
        async move {
            fewest.fetch_min(sample.await?, std::sync::atomic::Ordering::Relaxed);
            let now = uids(ns, "sample").await?;
            let decode_new = now
                .iter()
                .filter(|(n, _)| n.contains("-decode-"))
                .all(|(n, u)| uids_before.get(n) != Some(u));
            let st = api.get("sample").await?.status.unwrap_or_default();
            let done = decode_new
                && now.len() == 8
                && st.update_revision != *old
                && st.available_replicas == Some(1);
            Ok(done.then_some(()))
        }
    })
    .await?;
    let fewest = fewest.load(std::sync::atomic::Ordering::Relaxed);
    assert!(
        fewest >= 2,
        "only {fewest} of 3 decode replicas were ready at some moment"
    );
    Ok(())
}
