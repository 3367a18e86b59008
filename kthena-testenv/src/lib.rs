//! Test support: a real Kubernetes API server for the tests of a binary, with Kthena's CRDs
//! (and the third-party ones it reads) installed, one fresh namespace per test.
//!
//! The first [`TestEnv::get`] of a test binary starts etcd and kube-apiserver with
//! `scripts/kube-env.sh up DIR` (binaries from `scripts/kube-env.sh build`, cached in
//! `/var/cache/kthena/k8s/`), then installs the CRDs and waits for them to be Established:
//!
//! * Kthena's six kinds, generated from the `kthena-api` types ([`kthena_api::crds`]);
//! * Volcano `PodGroup` and Gateway API Inference Extension `InferencePool`, generated from
//!   [`kthena_api::thirdparty`];
//! * the Gateway API standard CRDs (`GatewayClass`, `Gateway`, `HTTPRoute`, `GRPCRoute`,
//!   `ReferenceGrant`), from `<cache>/crds/gateway-api/*.yaml`.
//!
//! Later calls (from any test, any runtime) reuse it. A detached watchdog process stops the
//! control plane (`kube-env.sh down DIR`) and removes DIR once the test process has exited,
//! however it exits (end of tests, panic, `Ctrl-C`, `SIGKILL`). With
//! `KTHENA_TEST_KUBECONFIG=PATH` an existing cluster is used instead and nothing is started
//! or stopped. A test that needs a control plane of its own (to stop and restart its API
//! server) uses [`ControlPlane::start`].
//!
//! There is no kube-controller-manager, scheduler or kubelet: no garbage collection, no
//! namespace deletion, no default ServiceAccount; pods stay `Pending` unless something (the
//! simulated node, `kthena-sim node`) writes their status. A test that needs Deployments
//! turned into pods starts a control plane of its own and
//! [`ControlPlane::start_controller_manager`] on it.
//!
//! ```no_run
//! # async fn demo() -> kthena_testenv::Result<()> {
//! use k8s_openapi::api::core::v1::ConfigMap;
//! let ns = kthena_testenv::namespace("demo").await?;
//! let maps = ns.api::<ConfigMap>();
//! let list = maps.list(&Default::default()).await;
//! assert!(list.is_ok_and(|l| l.items.is_empty()));
//! # Ok(()) }
//! ```

mod control_plane;
mod crds;
mod error;
mod namespace;

use std::sync::{Arc, OnceLock};

pub use control_plane::{CACHE_ENV, ControlPlane, DEFAULT_CACHE, REUSE_ENV};
pub use crds::FIELD_MANAGER;
pub use error::{Error, Result};
pub use namespace::TestNamespace;

/// The control plane shared by the tests of one binary. Get it with [`TestEnv::get`].
#[derive(Debug)]
pub struct TestEnv {
    plane: ControlPlane,
}

static SHARED: OnceLock<Result<TestEnv, Arc<Error>>> = OnceLock::new();

impl TestEnv {
    /// The shared control plane, started (and its CRDs installed) on first use, or the
    /// cluster of `$KTHENA_TEST_KUBECONFIG`. Blocks a blocking-pool thread, not the caller's
    /// runtime, while starting; concurrent callers wait for the same start.
    ///
    /// # Errors
    /// [`Error::Command`] if `kube-env.sh up` fails (e.g. the binaries are not built: run
    /// `scripts/kube-env.sh build`), [`Error::Kube`] / [`Error::Timeout`] if the CRDs cannot
    /// be installed; later calls return [`Error::Startup`] with the first error.
    pub async fn get() -> Result<&'static Self> {
        let shared = match SHARED.get() {
            Some(shared) => shared,
            None => tokio::task::spawn_blocking(|| {
                SHARED.get_or_init(|| {
                    ControlPlane::start_blocking(true)
                        .map(|plane| Self { plane })
                        .map_err(Arc::new)
                })
            })
            .await
            .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic())),
        };
        shared.as_ref().map_err(|e| Error::Startup(Arc::clone(e)))
    }

    /// Creates a namespace named `<prefix>-<pid>-<n>` (unique in this cluster across
    /// processes) and returns it with a client. Namespaces are not deleted: the control
    /// plane is discarded at exit (and has no namespace controller).
    ///
    /// # Errors
    /// As [`ControlPlane::client`], and [`Error::Kube`] if the namespace cannot be created.
    pub async fn namespace(&'static self, prefix: &str) -> Result<TestNamespace> {
        TestNamespace::create(self, prefix).await
    }

    /// The control plane (kubeconfig, kubectl, client).
    #[must_use]
    pub fn plane(&self) -> &ControlPlane {
        &self.plane
    }
}

impl std::ops::Deref for TestEnv {
    type Target = ControlPlane;

    fn deref(&self) -> &ControlPlane {
        &self.plane
    }
}

/// A new namespace of the shared control plane: `TestEnv::get().await?.namespace(prefix)`.
///
/// # Errors
/// As [`TestEnv::get`] and [`TestEnv::namespace`].
pub async fn namespace(prefix: &str) -> Result<TestNamespace> {
    TestEnv::get().await?.namespace(prefix).await
}
