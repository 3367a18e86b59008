//! One namespace per test.

use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;

use crate::TestEnv;
use crate::error::{Result, kube_err};

static NEXT: AtomicU32 = AtomicU32::new(0);

/// A namespace created for one test, with a client of the cluster.
#[derive(Clone)]
pub struct TestNamespace {
    env: &'static TestEnv,
    client: Client,
    name: String,
}

impl TestNamespace {
    pub(crate) async fn create(env: &'static TestEnv, prefix: &str) -> Result<Self> {
        let client = env.client().await?;
        let name = unique_name(prefix);
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        };
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .map_err(kube_err(format!("creating namespace {name}")))?;
        Ok(Self { env, client, name })
    }

    /// The namespace's name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The client (cluster-admin; bound to the runtime that created the namespace).
    #[must_use]
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// An [`Api`] of a namespaced kind in this namespace.
    #[must_use]
    pub fn api<K>(&self) -> Api<K>
    where
        K: Resource<Scope = NamespaceResourceScope, DynamicType = ()> + DeserializeOwned,
    {
        Api::namespaced(self.client.clone(), &self.name)
    }

    /// A `kubectl` command with `--kubeconfig` and `--namespace` set.
    #[must_use]
    pub fn kubectl(&self) -> Command {
        let mut cmd = self.env.kubectl();
        cmd.arg("--namespace").arg(&self.name);
        cmd
    }

    /// The shared control plane.
    #[must_use]
    pub fn env(&self) -> &'static TestEnv {
        self.env
    }
}

impl std::fmt::Debug for TestNamespace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestNamespace")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// `<prefix>-<pid>-<n>`, lower-cased, other characters than `[a-z0-9-]` replaced by `-`,
/// cut to the 63 characters of a DNS label.
fn unique_name(prefix: &str) -> String {
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let clean: String = prefix
        .chars()
        .map(|c| c.to_ascii_lowercase())
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect();
    let suffix = format!("-{}-{n}", std::process::id());
    let keep = 63usize.saturating_sub(suffix.len());
    let head: String = clean.chars().take(keep).collect();
    let head = head.trim_matches('-');
    let head = if head.is_empty() { "t" } else { head };
    format!("{head}{suffix}")
}

#[cfg(test)]
mod tests;
