//! Chat templates (`chat_template` of `tokenizer_config.json`) and ChatML.

use std::collections::BTreeMap;
use std::path::Path;

use crate::{Error, Result};

/// One chat message as a template sees it: `{"role": ..., "content": ...}`.
pub trait ChatMessage {
    /// The role: `system`, `user`, `assistant`, `tool`, ...
    fn role(&self) -> &str;
    /// The message text.
    fn content(&self) -> &str;
}

impl ChatMessage for (String, String) {
    fn role(&self) -> &str {
        &self.0
    }
    fn content(&self) -> &str {
        &self.1
    }
}

impl ChatMessage for (&str, &str) {
    fn role(&self) -> &str {
        self.0
    }
    fn content(&self) -> &str {
        self.1
    }
}

/// Renders messages in the ChatML layout of Qwen models:
/// `<|im_start|>{role}\n{content}<|im_end|>\n` per message, then `<|im_start|>assistant\n`
/// (the generation prompt). Used when a model has no chat template.
#[must_use]
pub fn render_chatml<M: ChatMessage>(messages: &[M]) -> String {
    let mut out = String::new();
    for m in messages {
        out.push_str("<|im_start|>");
        out.push_str(m.role());
        out.push('\n');
        out.push_str(m.content());
        out.push_str("<|im_end|>\n");
    }
    out.push_str("<|im_start|>assistant\n");
    out
}

/// A model's compiled Jinja chat template with its BOS and EOS strings.
pub(crate) struct ChatTemplate {
    env: minijinja::Environment<'static>,
    bos: String,
    eos: String,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate").finish_non_exhaustive()
    }
}

fn raise_exception(msg: String) -> std::result::Result<String, minijinja::Error> {
    Err(minijinja::Error::new(
        minijinja::ErrorKind::InvalidOperation,
        msg,
    ))
}

/// A special-token field of `tokenizer_config.json`: a string or `{"content": ...}`.
fn token_text(v: Option<&serde_json::Value>) -> String {
    match v {
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(o) => o
            .get("content")
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        None => String::new(),
    }
}

impl ChatTemplate {
    /// Loads the chat template of a `tokenizer_config.json`; `None` when it has none.
    pub(crate) fn load(path: &Path) -> Result<Option<Self>> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Read {
            path: path.to_owned(),
            source,
        })?;
        let cfg: serde_json::Value =
            serde_json::from_str(&text).map_err(|source| Error::Config {
                path: path.to_owned(),
                source,
            })?;
        let source = match cfg.get("chat_template") {
            Some(serde_json::Value::String(s)) => s.clone(),
            // A list of named templates: use "default".
            Some(serde_json::Value::Array(list)) => match list
                .iter()
                .find(|t| t.get("name").and_then(serde_json::Value::as_str) == Some("default"))
                .and_then(|t| t.get("template"))
                .and_then(serde_json::Value::as_str)
            {
                Some(s) => s.to_owned(),
                None => return Ok(None),
            },
            _ => return Ok(None),
        };
        let mut env = minijinja::Environment::new();
        // Hugging Face renders templates with trim_blocks and lstrip_blocks.
        let syntax = minijinja::syntax::SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .build()?;
        env.set_syntax(syntax);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        env.add_template_owned("chat", source)?;
        Ok(Some(Self {
            env,
            bos: token_text(cfg.get("bos_token")),
            eos: token_text(cfg.get("eos_token")),
        }))
    }

    /// Renders `messages` with the generation prompt appended. Each message becomes a map of
    /// template values once (its content copied once into a shared string), so a template
    /// that reads `message.content` several times does not copy it each time.
    pub(crate) fn render<M: ChatMessage>(&self, messages: &[M]) -> Result<String> {
        let msgs: Vec<minijinja::Value> = messages
            .iter()
            .map(|m| {
                minijinja::Value::from(BTreeMap::from([
                    (
                        std::sync::Arc::<str>::from("role"),
                        minijinja::Value::from(m.role()),
                    ),
                    (
                        std::sync::Arc::<str>::from("content"),
                        minijinja::Value::from(std::sync::Arc::<str>::from(m.content())),
                    ),
                ]))
            })
            .collect();
        let tmpl = self.env.get_template("chat")?;
        Ok(tmpl.render(minijinja::context! {
            messages => msgs,
            add_generation_prompt => true,
            bos_token => self.bos.clone(),
            eos_token => self.eos.clone(),
        })?)
    }
}
