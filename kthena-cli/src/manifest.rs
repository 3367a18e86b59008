//! `kthena create manifest`: render a template, show it, confirm, create the objects.

use std::io::{BufRead, Write};

use serde_json::Value;

use crate::cli::ManifestArgs;
use crate::cluster::ClusterTarget;
use crate::error::{Error, Result};
use crate::io::Io;
use crate::kind::Kind;
use crate::templates::find_template;
use crate::values::{merge_values, parse_set, read_values_file};

/// One rendered object to create.
#[derive(Debug)]
struct Planned {
    kind: Kind,
    api_version: String,
    name: String,
    namespace: String,
    object: Value,
}

/// Renders `args.template` with the merged values.
///
/// # Errors
/// [`Error::TemplateNotFound`], values errors, [`Error::Render`].
pub fn render_manifest(args: &ManifestArgs) -> Result<String> {
    let template = find_template(&args.template)?;
    let file = match &args.values_file {
        Some(path) => read_values_file(path)?,
        None => Default::default(),
    };
    let mut set = Vec::new();
    for arg in &args.set {
        set.extend(parse_set(arg)?);
    }
    let values = merge_values(file, set, args.name.as_deref(), &args.namespace);
    template.render(&values)
}

/// Parses and validates rendered manifests: every document must be one of the five kinds
/// the CLI creates and pass `kthena-api`'s validation (defaults applied first, as the
/// API server and webhooks would).
fn plan(source: &str, rendered: &str, default_namespace: &str) -> Result<Vec<Planned>> {
    let docs = kthena_api::load_str(source, rendered).map_err(Error::Manifest)?;
    docs.into_iter()
        .map(|doc| {
            let object = doc.object;
            let kind_name = object.kind().to_owned();
            let kind = Kind::from_kind(&kind_name)
                .filter(|_| object.is_kthena())
                .ok_or(Error::Unsupported {
                    kind: kind_name.clone(),
                })?;
            let name = object.name().to_owned();
            if let Err(errors) = object.clone().with_defaults().validate() {
                let errors = errors
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; ");
                return Err(Error::Invalid {
                    kind: kind_name,
                    name,
                    errors,
                });
            }
            let namespace = object
                .metadata()
                .namespace
                .clone()
                .filter(|n| !n.is_empty())
                .unwrap_or_else(|| default_namespace.to_owned());
            let api_version = object
                .api_version()
                .rsplit('/')
                .next()
                .unwrap_or_default()
                .to_owned();
            let mut json = object.to_json().map_err(Error::Manifest)?;
            json["metadata"]["namespace"] = Value::String(namespace.clone());
            Ok(Planned {
                kind,
                api_version,
                name,
                namespace,
                object: json,
            })
        })
        .collect()
}

fn confirmed(input: &mut impl BufRead) -> Result<bool> {
    let mut answer = String::new();
    input.read_line(&mut answer)?;
    let answer = answer.trim().to_lowercase();
    Ok(answer == "y" || answer == "yes")
}

pub(crate) async fn create_manifest<W: Write, R: BufRead>(
    target: &ClusterTarget<'_>,
    args: &ManifestArgs,
    io: &mut Io<'_, W, R>,
) -> Result<()> {
    let rendered = render_manifest(args)?;
    write!(
        io.out,
        "Generated YAML:\n================\n{rendered}\n================\n"
    )?;
    let planned = plan(&args.template, &rendered, &args.namespace)?;
    if args.dry_run {
        writeln!(io.out, "Dry run mode: not applying to cluster")?;
        return Ok(());
    }
    write!(
        io.out,
        "Do you want to apply these resources to the cluster? [y/N]: "
    )?;
    io.out.flush()?;
    if !confirmed(io.input)? {
        writeln!(io.out, "Aborted.")?;
        return Ok(());
    }
    let cluster = target.connect().await?;
    for p in planned {
        let (kind, name, ns) = (p.kind.kind(), &p.name, &p.namespace);
        writeln!(
            io.out,
            "Applying {kind}/{}: {name} in namespace {ns}",
            p.api_version
        )?;
        writeln!(io.out, "  Creating {kind}: {name} in namespace {ns}")?;
        cluster.create(p.kind, ns, p.object).await?;
        writeln!(io.out, "  \u{2713} Applied successfully")?;
    }
    writeln!(io.out, "All resources applied successfully!")?;
    Ok(())
}

#[cfg(test)]
mod tests;
