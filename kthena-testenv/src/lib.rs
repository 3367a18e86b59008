//! Test support: a real Kubernetes API server for the tests of a binary, with Kthena's CRDs
//! (and the third-party ones it reads) installed, one fresh namespace per test.
//!
//! The first [`TestEnv::get`] of a test binary starts etcd and kube-apiserver with
//! `scripts/kube-env.sh up DIR` (binaries from `scripts/kube-env.sh build`, cached in
//! `/var/cache/kthena/k8s/`), then installs and waits for the CRDs to be Established:
//!
//! * Kthena's six kinds, generated from the `kthena-api` types ([`kthena_api::crds`]);
//! * Volcano `PodGroup` and Gateway API Inference Extension `InferencePool`, generated from
//!   [`kthena_api::thirdparty`];
//! * the Gateway API standard CRDs (`Gateway`, `HTTPRoute`, ...), from
//!   `<cache>/crds/gateway-api/*.yaml`.
//!
//! Later calls (from any test, any runtime) reuse it. A detached watchdog process stops the
//! control plane (`kube-env.sh down DIR`) and removes DIR once the test process has exited,
//! however it exits (panic, `Ctrl-C`, `SIGKILL`). With `KTHENA_TEST_KUBECONFIG=PATH` an
//! existing cluster is used instead and nothing is started or stopped.
//!
//! There is no kube-controller-manager, scheduler or kubelet: no garbage collection, no
//! namespace deletion, no default ServiceAccount, pods stay `Pending` unless something (the
//! simulated node of `kthena-sim node`) writes their status.
//!
//! ```no_run
//! # async fn demo() -> kthena_testenv::Result<()> {
//! use k8s_openapi::api::core::v1::ConfigMap;
//! let ns = kthena_testenv::namespace("demo").await?;
//! let maps = ns.api::<ConfigMap>();
//! assert!(maps.list(&Default::default()).await.map_err(|e| e.to_string()).is_ok());
//! # Ok(()) }
//! ```

mod control_plane;
mod crds;
mod error;
mod namespace;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use kube::Client;
use kube::config::{KubeConfigOptions, Kubeconfig};

pub use control_plane::{CACHE_ENV, DEFAULT_CACHE, REUSE_ENV};
pub use crds::FIELD_MANAGER;
pub use error::{Error, Result};
pub use namespace::TestNamespace;

use control_plane::Location;

/// The control plane shared by the tests of one binary. Get it with [`TestEnv::get`].
#[derive(Debug)]
pub struct TestEnv {
    location: Location,
    startup: Duration,
}

static SHARED: OnceLock<Result<TestEnv, Arc<Error>>> = OnceLock::new();

impl TestEnv {
    /// The shared control plane, started (and its CRDs installed) on first use. Blocks a
    /// blocking-pool thread, not the caller's runtime, while starting; concurrent callers
    /// wait for the same start.
    ///
    /// # Errors
    /// [`Error::Command`] if `kube-env.sh up` fails (e.g. the binaries are not built: run
    /// `scripts/kube-env.sh build`), [`Error::Kube`] / [`Error::Timeout`] if the CRDs cannot
    /// be installed; later calls return [`Error::Startup`] with the first error.
    pub async fn get() -> Result<&'static Self> {
        let shared = match SHARED.get() {
            Some(shared) => shared,
            None => tokio::task::spawn_blocking(|| SHARED.get_or_init(|| start().map_err(Arc::new)))
                .await
                .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic())),
        };
        shared.as_ref().map_err(|e| Error::Startup(Arc::clone(e)))
    }

    /// A new client of the cluster (cluster-admin), bound to the caller's Tokio runtime.
    ///
    /// # Errors
    /// [`Error::Kubeconfig`] if the kubeconfig cannot be read or used.
    pub async fn client(&self) -> Result<Client> {
        client_for(&self.location.kubeconfig).await
    }

    /// Creates a namespace named `<prefix>-<pid>-<n>` (unique in this cluster across
    /// processes) and returns it with a client. Namespaces are not deleted: the control
    /// plane is discarded at exit (and has no namespace controller).
    ///
    /// # Errors
    /// As [`TestEnv::client`], and [`Error::Kube`] if the namespace cannot be created.
    pub async fn namespace(&'static self, prefix: &str) -> Result<TestNamespace> {
        TestNamespace::create(self, prefix).await
    }

    /// Path of the cluster's kubeconfig (cluster-admin).
    #[must_use]
    pub fn kubeconfig(&self) -> &Path {
        &self.location.kubeconfig
    }

    /// Path of the `kubectl` binary.
    #[must_use]
    pub fn kubectl_path(&self) -> &Path {
        &self.location.kubectl
    }

    /// A `kubectl` command with `--kubeconfig` set.
    #[must_use]
    pub fn kubectl(&self) -> Command {
        let mut cmd = Command::new(&self.location.kubectl);
        cmd.arg("--kubeconfig").arg(&self.location.kubeconfig);
        cmd
    }

    /// Wall time this process spent starting the control plane and installing the CRDs.
    #[must_use]
    pub fn startup(&self) -> Duration {
        self.startup
    }

    /// The control plane's directory (`kube-env.sh up DIR`); `None` for a reused cluster.
    #[must_use]
    pub fn dir(&self) -> Option<&Path> {
        self.location.dir.as_deref()
    }

    /// PID of kube-apiserver when this process started it.
    #[must_use]
    pub fn apiserver_pid(&self) -> Option<u32> {
        self.location.apiserver_pid
    }

    /// PID of etcd when this process started it.
    #[must_use]
    pub fn etcd_pid(&self) -> Option<u32> {
        self.location.etcd_pid
    }
}

/// A new namespace of the shared control plane: `TestEnv::get().await?.namespace(prefix)`.
///
/// # Errors
/// As [`TestEnv::get`] and [`TestEnv::namespace`].
pub async fn namespace(prefix: &str) -> Result<TestNamespace> {
    TestEnv::get().await?.namespace(prefix).await
}

/// The Gateway API CRDs directory of the build cache (`<cache>/crds/gateway-api`).
#[must_use]
pub fn gateway_api_crd_dir() -> PathBuf {
    control_plane::cache_dir().join("crds/gateway-api")
}

/// Starts (or locates) the control plane and installs the CRDs, on a runtime of its own.
fn start() -> Result<TestEnv> {
    let t0 = Instant::now();
    let location = control_plane::locate()?;
    let crds = crds::all_crds(&gateway_api_crd_dir())?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(error::io_err("building a Tokio runtime"))?;
    rt.block_on(async {
        let client = client_for(&location.kubeconfig).await?;
        crds::install(&client, &crds).await
    })?;
    let startup = t0.elapsed();
    tracing::info!(
        startup_ms = startup.as_millis(),
        kubeconfig = %location.kubeconfig.display(),
        crds = crds.len(),
        "Test control plane ready."
    );
    Ok(TestEnv { location, startup })
}

async fn client_for(path: &Path) -> Result<Client> {
    let err = |source| Error::Kubeconfig { path: path.to_owned(), source };
    let kubeconfig = Kubeconfig::read_from(path).map_err(err)?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(err)?;
    Client::try_from(config).map_err(error::kube_err("building a client"))
}
