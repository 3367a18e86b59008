//! `deploy/controller/` on a real API server: the Deployment passes a server-side dry run,
//! and the RBAC is enough for a leader-elected controller with the ServiceAccount's token
//! to reconcile a ModelServing and a ModelBooster, while it may not read Secrets.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{ConfigMap, Secret, ServiceAccount};
use kthena_api::{ModelBooster, ModelRoute, ModelServing, Object, load_file};
use kthena_controller::booster::BoosterConfig;
use kthena_controller::manager::{Controllers, LEASE_NAME, LeaderElection, run_leader_elected};
use kthena_controller::serving::Config;
use kthena_controller::webhook::{
    CERT_SECRET_NAME, SERVICE_NAME, secret_certificate, service_hosts,
};
use kthena_sim::node::{NodeConfig, SimNode};
use kthena_testenv::TestEnv;
use kube::Api;
use kube::api::PostParams;
use tokio::task::JoinSet;

fn deploy(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy")
        .join(file)
}

fn kubectl(env: &TestEnv, args: &[&str], file: &Path) -> Result<String> {
    let out = env.kubectl().args(args).arg("-f").arg(file).output()?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        bail!(
            "kubectl {args:?}: {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(stdout)
}

/// A client authenticated as ServiceAccount `ns/name` (a TokenRequest token).
async fn service_account_client(env: &TestEnv, ns: &str, name: &str) -> Result<kube::Client> {
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(3600),
            ..TokenRequestSpec::default()
        }),
        ..TokenRequest::default()
    };
    let token = Api::<ServiceAccount>::namespaced(env.client().await?, ns)
        .create_token_request(name, &PostParams::default(), &request)
        .await?
        .status
        .context("no token status")?
        .token
        .context("no token")?;
    let mut kc = kube::config::Kubeconfig::read_from(env.kubeconfig())?;
    for named in &mut kc.auth_infos {
        named.auth_info = Some(kube::config::AuthInfo {
            token: Some(token.clone().into()),
            ..kube::config::AuthInfo::default()
        });
    }
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
    Ok(kube::Client::try_from(cfg)?)
}

#[tokio::test]
async fn deploy_rbac_is_enough_for_a_leader_elected_controller() -> Result<()> {
    let env = TestEnv::get().await?;
    kubectl(env, &["apply"], &deploy("router/00-namespace.yaml"))?;
    let out = kubectl(env, &["apply"], &deploy("controller/rbac.yaml"))?;
    assert!(
        out.contains("serviceaccount/kthena-controller-manager"),
        "{out}"
    );
    // `--force-conflicts`: the webhook tests of this binary may have created the same
    // webhook configurations with another field manager (a dry run changes nothing).
    let args = [
        "apply",
        "--server-side",
        "--force-conflicts",
        "--dry-run=server",
    ];
    let out = kubectl(env, &args, &deploy("controller/deployment.yaml"))?;
    assert!(
        out.contains("deployment.apps/kthena-controller-manager"),
        "{out}"
    );

    let out = kubectl(env, &args, &deploy("controller/webhook-service.yaml"))?;
    assert!(
        out.contains("service/kthena-controller-manager-webhook"),
        "{out}"
    );
    let out = kubectl(env, &args, &deploy("controller/webhooks.yaml"))?;
    assert!(
        out.contains("validatingwebhookconfiguration.admissionregistration.k8s.io/kthena-controller-manager-validating-webhook")
            && out.contains("mutatingwebhookconfiguration.admissionregistration.k8s.io/kthena-controller-manager-mutating-webhook"),
        "{out}"
    );

    let ns = env.namespace("ctl-deploy").await?;
    let sa = service_account_client(env, "kthena-system", "kthena-controller-manager").await?;
    let denied = Api::<Secret>::namespaced(sa.clone(), ns.name())
        .list(&Default::default())
        .await;
    assert!(
        matches!(&denied, Err(kube::Error::Api(e)) if e.code == 403),
        "{denied:?}"
    );
    // The autoscaler reads the Secret and ConfigMap keys a Prometheus source names: by name.
    let named: Secret = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "prom-token"}, "stringData": {"token": "t"},
    }))?;
    ns.api::<Secret>()
        .create(&Default::default(), &named)
        .await?;
    let got = Api::<Secret>::namespaced(sa.clone(), ns.name())
        .get("prom-token")
        .await?;
    assert!(got.data.unwrap_or_default().contains_key("token"));
    let named: ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "prom-ca"}, "data": {"ca.crt": "pem"},
    }))?;
    ns.api::<ConfigMap>()
        .create(&Default::default(), &named)
        .await?;
    Api::<ConfigMap>::namespaced(sa.clone(), ns.name())
        .get("prom-ca")
        .await?;
    // Two replicas starting at once share one generated webhook certificate through Go's
    // Secret, with only the ServiceAccount's rights.
    let hosts = service_hosts(SERVICE_NAME, "kthena-system");
    let (a, b) = tokio::join!(
        secret_certificate(&sa, "kthena-system", CERT_SECRET_NAME, &hosts),
        secret_certificate(&sa, "kthena-system", CERT_SECRET_NAME, &hosts),
    );
    let (a, b) = (a?, b?);
    assert_eq!((&a.cert_pem, &a.ca_pem), (&b.cert_pem, &b.ca_pem));
    let again = secret_certificate(&sa, "kthena-system", CERT_SECRET_NAME, &hosts).await?;
    assert_eq!(again.key_pem, a.key_pem);
    let node_config = NodeConfig {
        namespace: Some(ns.name().to_owned()),
        health_interval: Duration::from_millis(100),
        ..NodeConfig::default()
    };
    let _node = SimNode::start(ns.client().clone(), node_config);
    let config = Controllers {
        serving: Config {
            namespace: Some(ns.name().to_owned()),
            ..Config::default()
        },
        booster: Some(BoosterConfig {
            namespace: Some(ns.name().to_owned()),
            ..BoosterConfig::default()
        }),
        autoscaler: None,
    };
    let election = LeaderElection {
        lease_name: LEASE_NAME.to_owned(),
        identity: kthena_controller::manager::identity(),
        ..LeaderElection::go_defaults("kthena-system")
    };
    let mut tasks = JoinSet::new();
    tasks.spawn(run_leader_elected(
        sa,
        config,
        election,
        std::future::pending(),
    ));

    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/multi-node.yaml");
    let Some(Object::ModelServing(ms)) = load_file(&path)?.into_iter().next().map(|d| d.object)
    else {
        bail!("not a ModelServing");
    };
    let mut ms = *ms;
    ms.metadata.namespace = Some(ns.name().to_owned());
    let api = ns.api::<ModelServing>();
    api.create(&PostParams::default(), &ms).await?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let st = api.get("llama-multinode").await?.status.unwrap_or_default();
        if st.available_replicas == Some(1) {
            break;
        }
        if let Some(Ok(Err(e))) = tasks.try_join_next() {
            bail!("the controller stopped: {e}");
        }
        if tokio::time::Instant::now() > deadline {
            bail!("not available with the ServiceAccount's token: {st:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The ModelBooster controller writes a booster's children and status with these rights.
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/kthena-manifests/examples/model-booster/Qwen2.5-0.5B-Instruct.yaml");
    let Some(Object::ModelBooster(b)) = load_file(&path)?.into_iter().next().map(|d| d.object)
    else {
        bail!("not a ModelBooster");
    };
    let mut b = *b;
    b.metadata.namespace = Some(ns.name().to_owned());
    let boosters = ns.api::<ModelBooster>();
    boosters.create(&PostParams::default(), &b).await?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let route = ns.api::<ModelRoute>().get_opt("demo").await?;
        let written = boosters
            .get("demo")
            .await?
            .status
            .is_some_and(|s| !s.conditions.is_empty());
        if route.is_some() && written && api.get_opt("demo-backend1").await?.is_some() {
            break;
        }
        if tokio::time::Instant::now() > deadline {
            bail!("the booster's children were not written with the ServiceAccount's token");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}
