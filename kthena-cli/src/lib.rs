//! The `kthena` command: list, describe and create Kthena resources on a Kubernetes
//! cluster, with Go Kthena's commands, aliases, flags, columns and messages.
//!
//! The logic is in pure functions (rows, STATUS/READY, AGE, tables, template rendering,
//! values); [`Cluster`] is the thin Kubernetes layer; [`run`] ties them to a parsed
//! [`Cli`].
//!
//! ```
//! use kthena_cli::{Template, find_template};
//! use std::collections::BTreeMap;
//!
//! let t: &Template = find_template("Qwen/Qwen3-8B")?;
//! let yaml = t.render(&BTreeMap::from([("name".to_owned(), "my-qwen".into())]))?;
//! assert!(yaml.contains("name: \"my-qwen\""));
//! # Ok::<(), kthena_cli::Error>(())
//! ```

mod age;
mod cli;
mod cluster;
mod commands;
mod error;
mod io;
mod kind;
mod manifest;
mod output;
mod rows;
mod table;
mod templates;
mod values;

pub use age::{age, go_duration, rfc3339};
pub use cli::{
    Cli, Command, CreateArgs, CreateWhat, DescribeArgs, DescribeWhat, Filter, GetArgs, GetWhat,
    ManifestArgs, Named,
};
pub use cluster::{Cluster, resource_name};
pub use commands::run;
pub use error::{Error, Result};
pub use io::Io;
pub use kind::Kind;
pub use manifest::render_manifest;
pub use output::{
    OutputFormat, describe_text, format_object, list_object, to_json, to_yaml,
    without_managed_fields,
};
pub use rows::{
    Listed, Scope, empty_message, list_table, matches_filter, model_booster_status,
    model_route_model, model_serving_ready, model_serving_status,
};
pub use table::render_table;
pub use templates::{TEMPLATES, Template, TemplateInfo, find_template};
pub use values::{merge_values, parse_set, read_values_file};
