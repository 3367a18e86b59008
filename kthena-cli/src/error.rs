//! The crate's error type. Every variant's message is one line a person can act on.

use std::path::PathBuf;

/// Errors of the `kthena` command.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// No kubeconfig file and not inside a cluster.
    #[error(
        "no Kubernetes configuration: set KUBECONFIG, pass --kubeconfig or create ~/.kube/config"
    )]
    NoKubeconfig,
    /// The kubeconfig could not be read or has no usable context.
    #[error("cannot use the kubeconfig: {message}")]
    Kubeconfig {
        /// What is wrong, from kube's error chain.
        message: String,
    },
    /// The API server could not be reached (refused, timed out, TLS failure).
    #[error(
        "cannot reach the Kubernetes API server at {server}: {detail} (is the cluster running, and is the right context selected?)"
    )]
    Unreachable {
        /// The server URL from the kubeconfig.
        server: String,
        /// The innermost cause, e.g. `Connection refused (os error 111)`.
        detail: String,
    },
    /// The API server does not serve a Kthena resource: the CRDs are not installed.
    #[error("the cluster has no {resource} resource: is Kthena installed? (its CRDs are missing)")]
    CrdsMissing {
        /// `plural.group`, e.g. `modelservings.workload.serving.volcano.sh`.
        resource: String,
    },
    /// The named object does not exist.
    #[error("{kind} \"{name}\" not found in namespace \"{namespace}\"")]
    NotFound {
        /// Kind, e.g. `ModelRoute`.
        kind: &'static str,
        /// Object name.
        name: String,
        /// Namespace searched.
        namespace: String,
    },
    /// RBAC denies the request.
    #[error("forbidden: {message} (ask a cluster administrator for access)")]
    Forbidden {
        /// The API server's message, e.g. `modelservings ... is forbidden: User "x" cannot list ...`.
        message: String,
    },
    /// The credentials were rejected.
    #[error(
        "unauthorized: the API server rejected the credentials of the current context ({message})"
    )]
    Unauthorized {
        /// The API server's message.
        message: String,
    },
    /// An object to create already exists.
    #[error("{kind} \"{name}\" already exists in namespace \"{namespace}\"")]
    AlreadyExists {
        /// Kind.
        kind: String,
        /// Object name.
        name: String,
        /// Namespace.
        namespace: String,
    },
    /// Any other API error.
    #[error("the API server answered {code}: {message}")]
    Api {
        /// HTTP status code.
        code: u16,
        /// The API server's message.
        message: String,
    },
    /// The Kubernetes client failed in another way (e.g. an unreadable response).
    #[error("Kubernetes client error: {message}")]
    Client {
        /// The innermost cause.
        message: String,
    },
    /// An object from the API server does not decode as its Kthena kind.
    #[error("cannot decode {kind} \"{name}\": {source}")]
    Decode {
        /// Kind.
        kind: &'static str,
        /// Object name.
        name: String,
        /// The decoding error.
        #[source]
        source: serde_json::Error,
    },
    /// No built-in template has this name.
    #[error("template '{name}' not found (see `kthena get templates`)")]
    TemplateNotFound {
        /// The name asked for.
        name: String,
    },
    /// A template failed to render.
    #[error("cannot render template {template}: {source:#}")]
    Render {
        /// `vendor/model`.
        template: String,
        /// The template engine's error.
        #[source]
        source: Box<minijinja::Error>,
    },
    /// The values file could not be read.
    #[error("cannot read values file {}: {source}", path.display())]
    ValuesRead {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The values file is not a YAML mapping.
    #[error("values file {} is not a YAML mapping: {message}", path.display())]
    ValuesParse {
        /// The file.
        path: PathBuf,
        /// The parser's message.
        message: String,
    },
    /// A `--set` item is not `key=value`.
    #[error("--set expects key=value pairs separated by commas, got '{item}'")]
    InvalidSet {
        /// The offending item.
        item: String,
    },
    /// The rendered manifests do not parse as Kubernetes objects.
    #[error("the rendered manifests do not parse: {0}")]
    Manifest(#[source] kthena_api::Error),
    /// A rendered object fails Kthena's validation.
    #[error("{kind} \"{name}\" is invalid: {errors}")]
    Invalid {
        /// Kind.
        kind: String,
        /// Object name.
        name: String,
        /// The problems, `; `-separated, each with its JSON path.
        errors: String,
    },
    /// A rendered object is not one of the kinds `create manifest` creates.
    #[error("unsupported resource type: {kind}")]
    Unsupported {
        /// Kind.
        kind: String,
    },
    /// An object could not be serialized for output.
    #[error("cannot serialize output: {message}")]
    Serialize {
        /// The serializer's message.
        message: String,
    },
    /// Writing the output or reading the answer failed.
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
