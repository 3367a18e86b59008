//! The crate's error type.

use std::path::PathBuf;
use std::sync::Arc;

/// Errors of `kthena-testenv`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// `scripts/kube-env.sh` (or another helper command) failed.
    #[error("`{command}` failed ({status}): {stderr}")]
    Command {
        /// The command line.
        command: String,
        /// Its exit status.
        status: std::process::ExitStatus,
        /// The end of its standard error.
        stderr: String,
    },
    /// A file or process operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done, e.g. `reading /tmp/x/env`.
        what: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The control plane's `env` file lacks a variable.
    #[error("{} sets no {name}", path.display())]
    MissingEnv {
        /// The `env` file.
        path: PathBuf,
        /// The variable, e.g. `KUBECTL`.
        name: &'static str,
    },
    /// The kubeconfig cannot be read or used.
    #[error("kubeconfig {}: {source}", path.display())]
    Kubeconfig {
        /// Its path.
        path: PathBuf,
        /// kube-rs' error.
        #[source]
        source: kube::config::KubeconfigError,
    },
    /// An API request failed.
    #[error("{what}: {source}")]
    Kube {
        /// What was being done, e.g. `creating namespace t-1`.
        what: String,
        /// kube-rs' error.
        #[source]
        source: kube::Error,
    },
    /// Waiting for a condition failed.
    #[error("{what}: {source}")]
    Wait {
        /// What was awaited.
        what: String,
        /// kube-rs' error.
        #[source]
        source: kube::runtime::wait::Error,
    },
    /// A third-party CRD file cannot be parsed.
    #[error("cannot parse {}: {source}", path.display())]
    Yaml {
        /// The file.
        path: PathBuf,
        /// The YAML error.
        #[source]
        source: serde_saphyr::Error,
    },
    /// The Kthena CRDs cannot be generated.
    #[error("cannot generate the CRDs: {0}")]
    Api(#[from] kthena_api::Error),
    /// Something did not happen in time.
    #[error("timed out after {seconds} s waiting for {what}")]
    Timeout {
        /// What was awaited, e.g. `CRD podgroups.scheduling.volcano.sh to be Established`.
        what: String,
        /// The timeout (s).
        seconds: u64,
    },
    /// The operation needs a control plane this process started, not a reused cluster.
    #[error("the cluster is reused ($KTHENA_TEST_KUBECONFIG), not started by this process")]
    NotOwned,
    /// Starting the shared control plane failed earlier in this test binary.
    #[error("the test control plane failed to start: {0}")]
    Startup(Arc<Self>),
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

pub(crate) fn io_err(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
    let what = what.into();
    move |source| Error::Io { what, source }
}

pub(crate) fn kube_err(what: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
    let what = what.into();
    move |source| Error::Kube { what, source }
}
