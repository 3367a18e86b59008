//! The built-in manifest templates of `kthena create manifest` and `kthena get templates`.
//!
//! Same vendors and models as Go Kthena's `cli/kthena/helm/templates/<vendor>/<model>.yaml`;
//! ours are MiniJinja templates (Go's are Helm templates), each starting with a
//! `# Description: ...` line. Values are under `values` (Helm: `.Values`).

use std::collections::BTreeMap;

use minijinja::syntax::SyntaxConfig;
use minijinja::value::Serde;
use minijinja::{Environment, UndefinedBehavior, Value};
use serde::Serialize;

use crate::error::Error;

/// One built-in template: `vendor/model` plus its raw text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Template {
    /// The vendor directory, e.g. `Qwen`.
    pub vendor: &'static str,
    /// The model name, e.g. `Qwen3-8B`.
    pub model: &'static str,
    /// The raw template text.
    pub content: &'static str,
}

macro_rules! templates {
    ($($vendor:literal / $model:literal),* $(,)?) => {
        &[$(Template {
            vendor: $vendor,
            model: $model,
            content: include_str!(concat!("../templates/", $vendor, "/", $model, ".yaml")),
        }),*]
    };
}

/// Every built-in template, in Go's listing order (vendor directories, then file names
/// `<model>.yaml`, in byte order: `Qwen3-32B-NPU.yaml` sorts before `Qwen3-32B.yaml`).
pub const TEMPLATES: &[Template] = templates![
    "Qwen" / "Qwen3-32B-NPU",
    "Qwen" / "Qwen3-32B",
    "Qwen" / "Qwen3-8B-NPU",
    "Qwen" / "Qwen3-8B",
    "Qwen" / "Qwen3-Coder-30B-A3B-Instruct-NPU",
    "Qwen" / "Qwen3-Coder-30B-A3B-Instruct-PD-Disaggregated-LMCache",
    "Qwen" / "Qwen3-Coder-30B-A3B-Instruct-PD-Disaggregated-Mooncake",
    "Qwen" / "Qwen3-Coder-30B-A3B-Instruct-PD-Disaggregated-NixlConnector",
    "Qwen" / "Qwen3-Coder-30B-A3B-Instruct",
    "deepseek-ai" / "DeepSeek-R1-Distill-Qwen-32B-NPU",
    "deepseek-ai" / "DeepSeek-R1-Distill-Qwen-32B",
    "deepseek-ai" / "DeepSeek-R1-Distill-Qwen-7B-NPU",
    "deepseek-ai" / "DeepSeek-R1-Distill-Qwen-7B",
];

/// A template's name, description and file, as `kthena get templates -o yaml` prints them
/// (Go's `ManifestInfo`, whose fields have no JSON tags, hence the capitalized keys).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TemplateInfo {
    // Declared in key order: Go's YAML output sorts the keys.
    /// From the `# Description:` line.
    #[serde(rename = "Description")]
    pub description: String,
    /// `vendor/model.yaml`.
    #[serde(rename = "FilePath")]
    pub file_path: String,
    /// `vendor/model`.
    #[serde(rename = "Name")]
    pub name: String,
}

impl Template {
    /// `vendor/model`.
    pub fn name(&self) -> String {
        format!("{}/{}", self.vendor, self.model)
    }

    /// The description: the text after `# Description:` among the leading comment lines
    /// (or a leading comment mentioning "description"), else `No description available`,
    /// as Go's `extractManifestDescriptionFromContent`.
    pub fn description(&self) -> String {
        for line in self.content.lines() {
            let t = line.trim();
            if let Some(d) = t.strip_prefix("# Description:") {
                return d.trim().to_owned();
            }
            if let Some(d) = t.strip_prefix("# ")
                && t.to_lowercase().contains("description")
            {
                return d.trim().to_owned();
            }
            if !t.is_empty() && !t.starts_with('#') {
                break;
            }
        }
        "No description available".to_owned()
    }

    /// Name, description and file path.
    pub fn info(&self) -> TemplateInfo {
        TemplateInfo {
            name: self.name(),
            description: self.description(),
            file_path: format!("{}.yaml", self.name()),
        }
    }

    /// Renders the template with `values` (available as `values` in the template).
    ///
    /// # Errors
    /// [`Error::Render`] when the template fails (e.g. a value of the wrong type for a
    /// filter).
    pub fn render(&self, values: &BTreeMap<String, serde_json::Value>) -> Result<String, Error> {
        let mut env = Environment::new();
        env.set_undefined_behavior(UndefinedBehavior::Lenient);
        let name = self.name();
        let render_err = |source| Error::Render {
            template: name.clone(),
            source: Box::new(source),
        };
        let syntax = SyntaxConfig::builder()
            .keep_trailing_newline(true)
            .build()
            .map_err(render_err)?;
        env.set_syntax(syntax);
        let tmpl = env
            .template_from_named_str(&name, self.content)
            .map_err(render_err)?;
        tmpl.render(minijinja::context! { values => Value::from(Serde(values)) })
            .map_err(render_err)
    }
}

/// Finds a template by `vendor/model`, or by `model` alone in any vendor (Go's
/// `findTemplatePath`). Names are case-sensitive, as Go's embedded file system is.
///
/// # Errors
/// [`Error::TemplateNotFound`].
pub fn find_template(name: &str) -> Result<&'static Template, Error> {
    TEMPLATES
        .iter()
        .find(|t| t.name() == name)
        .or_else(|| TEMPLATES.iter().find(|t| t.model == name))
        .ok_or_else(|| Error::TemplateNotFound {
            name: name.to_owned(),
        })
}

#[cfg(test)]
mod tests;
