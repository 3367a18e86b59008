//! Running a parsed command line: `get`, `describe`, `create manifest`.

use std::io::{BufRead, Write};

use kthena_api::{AutoscalingPolicy, ModelBooster, ModelRoute, ModelServer, ModelServing};
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::cli::{Cli, Command, CreateWhat, DescribeArgs, DescribeWhat, GetArgs, GetWhat};
use crate::cluster::ClusterTarget;
use crate::error::{Error, Result};
use crate::io::Io;
use crate::kind::Kind;
use crate::manifest::create_manifest;
use crate::output::{
    OutputFormat, describe_text, format_object, list_object, to_json, to_yaml,
    without_managed_fields,
};
use crate::rows::{Listed, Scope, empty_message, list_table, matches_filter};
use crate::table::render_table;
use crate::templates::{TEMPLATES, TemplateInfo, find_template};

/// Runs `cli`.
///
/// # Errors
/// Any [`Error`]; its message is one line meant for the person at the terminal.
pub async fn run<W: Write, R: BufRead>(cli: Cli, io: &mut Io<'_, W, R>) -> Result<()> {
    let target = ClusterTarget {
        kubeconfig: cli.kubeconfig.as_deref(),
        context: cli.context.as_deref(),
    };
    match cli.command {
        Command::Get(args) => get(&target, args, io).await,
        Command::Describe(args) => describe(&target, args, io).await,
        Command::Create(args) => match args.what {
            CreateWhat::Manifest(m) => create_manifest(&target, &m, io).await,
        },
    }
}

async fn get<W: Write, R: BufRead>(
    target: &ClusterTarget<'_>,
    args: GetArgs,
    io: &mut Io<'_, W, R>,
) -> Result<()> {
    let format = args.output;
    let list = |filter: Option<String>| ListRequest {
        format: format.unwrap_or_default(),
        namespace: args.namespace.clone(),
        all: args.all_namespaces,
        filter,
    };
    match args.what {
        GetWhat::Templates => get_templates(format.unwrap_or_default(), io.out),
        GetWhat::Template { name } => get_template(&name, format, io.out),
        GetWhat::ModelBoosters(f) => get_list::<ModelBooster, W, R>(target, list(f.name), io).await,
        GetWhat::ModelServings(f) => get_list::<ModelServing, W, R>(target, list(f.name), io).await,
        GetWhat::AutoscalingPolicies(f) => {
            get_list::<AutoscalingPolicy, W, R>(target, list(f.name), io).await
        }
        GetWhat::ModelRoutes(f) => get_list::<ModelRoute, W, R>(target, list(f.name), io).await,
        GetWhat::ModelServers(f) => get_list::<ModelServer, W, R>(target, list(f.name), io).await,
    }
}

fn get_templates(format: OutputFormat, out: &mut impl Write) -> Result<()> {
    if TEMPLATES.is_empty() {
        writeln!(out, "No templates found.")?;
        return Ok(());
    }
    let infos: Vec<TemplateInfo> = TEMPLATES.iter().map(|t| t.info()).collect();
    let text = match format {
        OutputFormat::Yaml => to_yaml(&infos)?,
        OutputFormat::Json => to_json(&infos)?,
        OutputFormat::Table => {
            let rows: Vec<Vec<String>> = infos
                .into_iter()
                .map(|i| vec![i.name, i.description])
                .collect();
            render_table(&["NAME", "DESCRIPTION"], &rows)
        }
    };
    out.write_all(text.as_bytes())?;
    Ok(())
}

fn get_template(name: &str, format: Option<OutputFormat>, out: &mut impl Write) -> Result<()> {
    let template = find_template(name)?;
    let text = match format {
        None | Some(OutputFormat::Yaml) => template.content.to_owned(),
        Some(OutputFormat::Json) => to_json(&template.info())?,
        Some(OutputFormat::Table) => {
            let info = template.info();
            render_table(
                &["NAME", "DESCRIPTION"],
                &[vec![info.name, info.description]],
            )
        }
    };
    out.write_all(text.as_bytes())?;
    Ok(())
}

#[derive(Debug)]
struct ListRequest {
    format: OutputFormat,
    namespace: Option<String>,
    all: bool,
    filter: Option<String>,
}

async fn get_list<T, W, R>(
    target: &ClusterTarget<'_>,
    req: ListRequest,
    io: &mut Io<'_, W, R>,
) -> Result<()>
where
    T: Listed + DeserializeOwned,
    W: Write,
    R: BufRead,
{
    let cluster = target.connect().await?;
    // `-n ''` is the context's namespace, as kubectl takes it.
    let scope = match (req.all, req.namespace.filter(|n| !n.is_empty())) {
        (true, _) => Scope::All,
        (false, Some(ns)) => Scope::Namespace(ns),
        (false, None) => Scope::Namespace(cluster.default_namespace().to_owned()),
    };
    let filter = req.filter.as_deref();
    let objects: Vec<Value> = cluster
        .list(T::KIND, &scope)
        .await?
        .into_iter()
        .filter(|o| matches_filter(o["metadata"]["name"].as_str().unwrap_or_default(), filter))
        .map(without_managed_fields)
        .collect();
    let text = match req.format {
        OutputFormat::Yaml | OutputFormat::Json => {
            format_object(&list_object(objects), req.format)?
        }
        OutputFormat::Table => {
            let typed = objects
                .into_iter()
                .map(decode::<T>)
                .collect::<Result<Vec<T>>>()?;
            list_table(&typed, &scope, io.now)
                .unwrap_or_else(|| empty_message(T::KIND, &scope, filter) + "\n")
        }
    };
    io.out.write_all(text.as_bytes())?;
    Ok(())
}

fn decode<T: Listed + DeserializeOwned>(object: Value) -> Result<T> {
    let name = object["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    serde_json::from_value(object).map_err(|source| Error::Decode {
        kind: T::KIND.kind(),
        name,
        source,
    })
}

async fn describe<W: Write, R: BufRead>(
    target: &ClusterTarget<'_>,
    args: DescribeArgs,
    io: &mut Io<'_, W, R>,
) -> Result<()> {
    let (kind, name) = match args.what {
        DescribeWhat::Template(n) => return describe_template(&n.name, io.out),
        DescribeWhat::ModelBooster(n) => (Kind::ModelBooster, n.name),
        DescribeWhat::ModelServing(n) => (Kind::ModelServing, n.name),
        DescribeWhat::AutoscalingPolicy(n) => (Kind::AutoscalingPolicy, n.name),
        DescribeWhat::ModelRoute(n) => (Kind::ModelRoute, n.name),
        DescribeWhat::ModelServer(n) => (Kind::ModelServer, n.name),
    };
    let cluster = target.connect().await?;
    let namespace = args
        .namespace
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| cluster.default_namespace().to_owned());
    let object = without_managed_fields(cluster.get(kind, &namespace, &name).await?);
    io.out
        .write_all(describe_text(kind, &object, io.now)?.as_bytes())?;
    Ok(())
}

fn describe_template(name: &str, out: &mut impl Write) -> Result<()> {
    let template = find_template(name)?;
    write!(
        out,
        "Template: {}\nDescription: {}\n\n=================\nTemplate Content:\n=================\n{}\n",
        template.name(),
        template.description(),
        template.content
    )?;
    Ok(())
}
