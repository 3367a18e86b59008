//! Command-line syntax: commands, aliases and flags of Go Kthena's `kthena`.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::output::OutputFormat;

/// Kthena CLI for managing AI inference workloads.
#[derive(Debug, Parser)]
#[command(
    name = "kthena",
    version,
    about = "Kthena CLI for managing AI inference workloads"
)]
pub struct Cli {
    /// Path to the kubeconfig file (default: $KUBECONFIG, else ~/.kube/config).
    #[arg(long, global = true, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use (default: its current-context).
    #[arg(long, global = true, value_name = "NAME")]
    pub context: Option<String>,
    /// The command.
    #[command(subcommand)]
    pub command: Command,
}

/// Top-level commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Display one or many resources.
    Get(GetArgs),
    /// Show detailed information about a specific resource.
    Describe(DescribeArgs),
    /// Create kthena resources.
    Create(CreateArgs),
}

/// `kthena get` and its flags (inherited by every resource).
#[derive(Debug, Args)]
pub struct GetArgs {
    /// Output format: table (default), yaml or json. `get template NAME` prints the raw
    /// template by default and with yaml.
    #[arg(short, long, global = true, value_enum)]
    pub output: Option<OutputFormat>,
    /// Kubernetes namespace (default: current context namespace).
    #[arg(short, long, global = true)]
    pub namespace: Option<String>,
    /// List resources across all namespaces.
    #[arg(short = 'A', long, global = true)]
    pub all_namespaces: bool,
    /// What to get.
    #[command(subcommand)]
    pub what: GetWhat,
}

/// The resources of `kthena get`.
#[derive(Debug, Subcommand)]
pub enum GetWhat {
    /// List available manifest templates.
    Templates,
    /// Get a specific template (its content; `-o table` or `-o json` for name and description).
    Template {
        /// `vendor/model` or `model`.
        name: String,
    },
    /// List ModelBooster resources; only those whose name contains NAME (case-insensitive).
    #[command(name = "model-boosters", visible_alias = "model-booster")]
    ModelBoosters(Filter),
    /// List ModelServing resources.
    #[command(name = "model-servings", visible_aliases = ["ms", "model-serving"])]
    ModelServings(Filter),
    /// List AutoscalingPolicy resources.
    #[command(name = "autoscaling-policies", visible_aliases = ["asp", "autoscaling-policy"])]
    AutoscalingPolicies(Filter),
    /// List ModelRoute resources.
    #[command(name = "model-routes", visible_aliases = ["mroute", "model-route"])]
    ModelRoutes(Filter),
    /// List ModelServer resources.
    #[command(name = "model-servers", visible_aliases = ["mserver", "model-server"])]
    ModelServers(Filter),
}

/// The optional NAME filter of a list.
#[derive(Debug, Args)]
pub struct Filter {
    /// Show only objects whose name contains NAME (case-insensitive).
    pub name: Option<String>,
}

/// `kthena describe` and its flags.
#[derive(Debug, Args)]
pub struct DescribeArgs {
    /// Kubernetes namespace (default: current context namespace).
    #[arg(short, long, global = true)]
    pub namespace: Option<String>,
    /// What to describe.
    #[command(subcommand)]
    pub what: DescribeWhat,
}

/// The resources of `kthena describe`.
#[derive(Debug, Subcommand)]
pub enum DescribeWhat {
    /// Show a template's description and content.
    Template(Named),
    /// Show a ModelBooster.
    #[command(name = "model-booster")]
    ModelBooster(Named),
    /// Show a ModelServing.
    #[command(name = "model-serving", visible_alias = "ms")]
    ModelServing(Named),
    /// Show an AutoscalingPolicy.
    #[command(name = "autoscaling-policy", visible_alias = "asp")]
    AutoscalingPolicy(Named),
    /// Show a ModelRoute.
    #[command(name = "model-route", visible_alias = "mroute")]
    ModelRoute(Named),
    /// Show a ModelServer.
    #[command(name = "model-server", visible_alias = "mserver")]
    ModelServer(Named),
}

/// A required NAME.
#[derive(Debug, Args)]
pub struct Named {
    /// The object's (or template's) name.
    pub name: String,
}

/// `kthena create`.
#[derive(Debug, Args)]
pub struct CreateArgs {
    /// What to create.
    #[command(subcommand)]
    pub what: CreateWhat,
}

/// The things `kthena create` makes.
#[derive(Debug, Subcommand)]
pub enum CreateWhat {
    /// Create resources from a manifest template: render, show, confirm, create.
    Manifest(ManifestArgs),
}

/// Flags of `kthena create manifest`.
#[derive(Debug, Args)]
pub struct ManifestArgs {
    /// Template name to use (`vendor/model` or `model`; see `kthena get templates`).
    #[arg(short, long)]
    pub template: String,
    /// YAML file containing template values.
    #[arg(short = 'f', long, value_name = "FILE")]
    pub values_file: Option<PathBuf>,
    /// Set template values (repeatable, or comma-separated: key1=val1,key2=val2).
    #[arg(long, value_name = "KEY=VALUE,...")]
    pub set: Vec<String>,
    /// Name for the inference workload (the `name` value).
    #[arg(long)]
    pub name: Option<String>,
    /// Kubernetes namespace to create resources in (the `namespace` value, unless the
    /// values file or --set gives one).
    #[arg(short, long, default_value = "default")]
    pub namespace: String,
    /// Show the rendered manifests without applying them to the cluster.
    #[arg(long)]
    pub dry_run: bool,
}
