//! Manifest loading: multi-document YAML or JSON into typed objects.

use std::collections::HashMap;
use std::fmt;
use std::path::Path;

use kube::core::DynamicObject;
use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;
use serde_saphyr::Spanned;

use crate::{
    AutoscalingPolicy, Error, ExternalModelProvider, FieldError, ModelBooster, ModelRoute,
    ModelServer, ModelServing, Result,
};

/// One document of a manifest file.
#[derive(Clone, Debug, PartialEq)]
pub struct Document {
    /// Position of the document in its file, counting from 1 (empty documents are not counted).
    pub index: usize,
    /// Line (1-based) where the document's content starts.
    pub line: u64,
    /// The decoded object.
    pub object: Object,
    /// Fields of the document that the kind's type does not know, as JSON paths (for example
    /// `spec.rules[0].weigth`). They are dropped, as the API server prunes unknown fields;
    /// show them as warnings. Always empty for foreign objects.
    pub unknown_fields: Vec<String>,
}

/// A decoded manifest object: one of Kthena's kinds, or any other Kubernetes object.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Object {
    /// `networking.serving.volcano.sh/v1alpha1` `ModelRoute`.
    ModelRoute(Box<ModelRoute>),
    /// `networking.serving.volcano.sh/v1alpha1` `ModelServer`.
    ModelServer(Box<ModelServer>),
    /// `networking.serving.volcano.sh/v1alpha1` `ExternalModelProvider`.
    ExternalModelProvider(Box<ExternalModelProvider>),
    /// `workload.serving.volcano.sh/v1alpha1` `ModelServing`.
    ModelServing(Box<ModelServing>),
    /// `workload.serving.volcano.sh/v1alpha1` `ModelBooster`.
    ModelBooster(Box<ModelBooster>),
    /// `workload.serving.volcano.sh/v1alpha1` `AutoscalingPolicy`.
    AutoscalingPolicy(Box<AutoscalingPolicy>),
    /// Any other kind (Deployment, Service, Gateway, ...), kept untyped.
    Foreign(Box<DynamicObject>),
}

// === impl Object ===

impl Object {
    /// `apiVersion` of the object (`""` for a foreign object without one).
    pub fn api_version(&self) -> &str {
        match self {
            Self::ModelRoute(_) | Self::ModelServer(_) | Self::ExternalModelProvider(_) => {
                crate::networking::API_VERSION
            }
            Self::ModelServing(_) | Self::ModelBooster(_) | Self::AutoscalingPolicy(_) => {
                crate::workload::API_VERSION
            }
            Self::Foreign(o) => o.types.as_ref().map_or("", |t| t.api_version.as_str()),
        }
    }

    /// `kind` of the object (`""` for a foreign object without one).
    pub fn kind(&self) -> &str {
        match self {
            Self::ModelRoute(_) => "ModelRoute",
            Self::ModelServer(_) => "ModelServer",
            Self::ExternalModelProvider(_) => "ExternalModelProvider",
            Self::ModelServing(_) => "ModelServing",
            Self::ModelBooster(_) => "ModelBooster",
            Self::AutoscalingPolicy(_) => "AutoscalingPolicy",
            Self::Foreign(o) => o.types.as_ref().map_or("", |t| t.kind.as_str()),
        }
    }

    /// `metadata` of the object.
    pub fn metadata(&self) -> &kube::core::ObjectMeta {
        match self {
            Self::ModelRoute(o) => &o.metadata,
            Self::ModelServer(o) => &o.metadata,
            Self::ExternalModelProvider(o) => &o.metadata,
            Self::ModelServing(o) => &o.metadata,
            Self::ModelBooster(o) => &o.metadata,
            Self::AutoscalingPolicy(o) => &o.metadata,
            Self::Foreign(o) => &o.metadata,
        }
    }

    /// `metadata.name` (`""` when unset).
    pub fn name(&self) -> &str {
        self.metadata().name.as_deref().unwrap_or("")
    }

    /// `metadata.namespace`, `default` when unset.
    pub fn namespace(&self) -> &str {
        self.metadata().namespace.as_deref().unwrap_or("default")
    }

    /// Whether this is one of Kthena's kinds (not [`Object::Foreign`]).
    pub fn is_kthena(&self) -> bool {
        !matches!(self, Self::Foreign(_))
    }

    /// Returns the object with the defaults of its kind applied (`with_defaults` of each kind;
    /// foreign objects are returned unchanged).
    #[must_use]
    pub fn with_defaults(self) -> Self {
        match self {
            Self::ModelRoute(o) => Self::ModelRoute(Box::new(o.with_defaults())),
            Self::ModelServer(o) => Self::ModelServer(Box::new(o.with_defaults())),
            Self::ExternalModelProvider(o) => {
                Self::ExternalModelProvider(Box::new(o.with_defaults()))
            }
            Self::ModelServing(o) => Self::ModelServing(Box::new(o.with_defaults())),
            Self::ModelBooster(o) => Self::ModelBooster(Box::new(o.with_defaults())),
            Self::AutoscalingPolicy(o) => Self::AutoscalingPolicy(Box::new(o.with_defaults())),
            Self::Foreign(o) => Self::Foreign(o),
        }
    }

    /// Validates the object with the `validate()` of its kind (foreign objects are valid).
    ///
    /// # Errors
    /// Every problem found, each with its JSON path.
    pub fn validate(&self) -> std::result::Result<(), Vec<FieldError>> {
        match self {
            Self::ModelRoute(o) => o.validate(),
            Self::ModelServer(o) => o.validate(),
            Self::ExternalModelProvider(o) => o.validate(),
            Self::ModelServing(o) => o.validate(),
            Self::ModelBooster(o) => o.validate(),
            Self::AutoscalingPolicy(o) => o.validate(),
            Self::Foreign(_) => Ok(()),
        }
    }

    /// Serializes the object to a JSON value (the form a manifest round-trips through).
    ///
    /// # Errors
    /// [`Error::Serialize`] if serialization fails (it does not for well-formed objects).
    pub fn to_json(&self) -> Result<Value> {
        let v = match self {
            Self::ModelRoute(o) => serde_json::to_value(o),
            Self::ModelServer(o) => serde_json::to_value(o),
            Self::ExternalModelProvider(o) => serde_json::to_value(o),
            Self::ModelServing(o) => serde_json::to_value(o),
            Self::ModelBooster(o) => serde_json::to_value(o),
            Self::AutoscalingPolicy(o) => serde_json::to_value(o),
            Self::Foreign(o) => serde_json::to_value(o),
        };
        v.map_err(|source| Error::Serialize { source })
    }
}

/// Loads every document of a YAML (or JSON, which is YAML) file.
///
/// # Errors
/// [`Error::Io`] when the file cannot be read, otherwise as [`load_str`].
pub fn load_file(path: impl AsRef<Path>) -> Result<Vec<Document>> {
    let path = path.as_ref();
    let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })?;
    load_str(&path.display().to_string(), &text)
}

/// Loads every document of a YAML (or JSON) text. `source` names the text in errors (a file
/// name). Kthena kinds are decoded into their types, other kinds into [`DynamicObject`]s;
/// empty documents are skipped. No defaulting or validation is applied.
///
/// # Errors
/// [`Error::Parse`] with the source name, the 1-based document index, line, column and (for
/// decode errors) the JSON path of the offending field. The first failing document stops the
/// load; use [`load_str_each`] to keep going.
///
/// ```
/// let docs = kthena_api::load_str("route.yaml", "
/// apiVersion: networking.serving.volcano.sh/v1alpha1
/// kind: ModelRoute
/// metadata: {name: r}
/// spec:
///   modelName: m
///   rules: [{targetModels: [{modelServerName: s}]}]
/// ").unwrap();
/// assert_eq!(docs[0].object.kind(), "ModelRoute");
/// ```
pub fn load_str(source: &str, text: &str) -> Result<Vec<Document>> {
    load_str_each(source, text).into_iter().collect()
}

/// Like [`load_str`], but returns one result per document so that a bad document does not
/// hide the others. A YAML syntax error ends the list (the rest of the text cannot be read).
pub fn load_str_each(source: &str, text: &str) -> Vec<Result<Document>> {
    let mut out = Vec::new();
    let mut reader = std::io::Cursor::new(text.as_bytes());
    let mut index = 0;
    // Kubernetes reads manifests as YAML 1.1 (`sigs.k8s.io/yaml`): `0777` is octal.
    let options = serde_saphyr::options! {
        legacy_octal_numbers: true,
        budget: serde_saphyr::budget! { max_reader_input_bytes: None },
    };
    for doc in serde_saphyr::read_with_options::<_, Spanned<Node>>(&mut reader, options) {
        index += 1;
        match doc {
            Ok(node) => {
                if matches!(node.value, Node::Null) {
                    index -= 1;
                    continue;
                }
                out.push(decode_document(source, index, &node));
            }
            Err(err) => {
                let loc = err.location();
                let message = err.render_with_options(serde_saphyr::render_options! {
                    snippets: serde_saphyr::SnippetMode::Off,
                });
                out.push(Err(Error::Parse(Box::new(ParseError {
                    source: source.to_owned(),
                    document: index,
                    line: loc.map_or(0, |l| l.line()),
                    column: loc.map_or(0, |l| l.column()),
                    path: String::new(),
                    message: first_line(&message),
                }))));
                break;
            }
        }
    }
    out
}

/// Decodes one JSON value (already read from somewhere) into an [`Object`] by its
/// `apiVersion` and `kind`.
///
/// # Errors
/// [`Error::Parse`] with `source`, document 1, line and column 0 and the field path.
pub fn decode_value(source: &str, value: Value) -> Result<Object> {
    decode(value).map_err(|(path, message)| {
        Error::Parse(Box::new(ParseError {
            source: source.to_owned(),
            document: 1,
            line: 0,
            column: 0,
            path,
            message,
        }))
    })
}

fn first_line(s: &str) -> String {
    s.lines().next().unwrap_or("").to_owned()
}

fn decode_document(source: &str, index: usize, node: &Spanned<Node>) -> Result<Document> {
    let mut spans = HashMap::new();
    let value = to_json(node, "", &mut spans);
    let line = node.referenced.line();
    match decode(value.clone()) {
        Ok(object) => {
            let mut unknown_fields = Vec::new();
            if object.is_kthena() {
                dropped_fields(&value, &object.to_json()?, "", &mut unknown_fields);
            }
            Ok(Document {
                index,
                line,
                object,
                unknown_fields,
            })
        }
        Err((path, message)) => {
            let (l, c) = locate(&spans, &path).unwrap_or((line, node.referenced.column()));
            Err(Error::Parse(Box::new(ParseError {
                source: source.to_owned(),
                document: index,
                line: l,
                column: c,
                path,
                message,
            })))
        }
    }
}

/// Collects the paths of `original` that are absent from `typed` (the object re-serialized
/// from its type). Empty lists, maps and nulls carry no data and are not reported.
fn dropped_fields(original: &Value, typed: &Value, path: &str, out: &mut Vec<String>) {
    match (original, typed) {
        (Value::Object(o), Value::Object(t)) => {
            for (k, v) in o {
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                match t.get(k) {
                    Some(tv) => dropped_fields(v, tv, &p, out),
                    None if is_empty(v) => {}
                    None => out.push(p),
                }
            }
        }
        (Value::Array(o), Value::Array(t)) => {
            for (i, (v, tv)) in o.iter().zip(t).enumerate() {
                dropped_fields(v, tv, &format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
}

fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        _ => false,
    }
}

/// Finds the location of `path`, or of its closest recorded ancestor.
fn locate(spans: &HashMap<String, (u64, u64)>, path: &str) -> Option<(u64, u64)> {
    let mut p = path;
    loop {
        if let Some(loc) = spans.get(p) {
            return Some(*loc);
        }
        let cut = p.rfind(['.', '['])?;
        p = &p[..cut];
    }
}

fn decode(value: Value) -> std::result::Result<Object, (String, String)> {
    let api_version = value
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    let kind = value
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    if !value.is_object() {
        return Err((
            String::new(),
            "a manifest document must be a mapping".to_owned(),
        ));
    }
    fn typed<T: serde::de::DeserializeOwned>(
        v: Value,
        wrap: fn(Box<T>) -> Object,
    ) -> std::result::Result<Object, (String, String)> {
        serde_path_to_error::deserialize::<_, T>(v)
            .map(|t| wrap(Box::new(t)))
            .map_err(|e| {
                let path = e.path().to_string();
                let path = if path == "." { String::new() } else { path };
                (path, e.into_inner().to_string())
            })
    }
    match (api_version.as_str(), kind.as_str()) {
        (crate::networking::API_VERSION, "ModelRoute") => typed(value, Object::ModelRoute),
        (crate::networking::API_VERSION, "ModelServer") => typed(value, Object::ModelServer),
        (crate::networking::API_VERSION, "ExternalModelProvider") => {
            typed(value, Object::ExternalModelProvider)
        }
        (crate::workload::API_VERSION, "ModelServing") => typed(value, Object::ModelServing),
        (crate::workload::API_VERSION, "ModelBooster") => typed(value, Object::ModelBooster),
        (crate::workload::API_VERSION, "AutoscalingPolicy") => {
            typed(value, Object::AutoscalingPolicy)
        }
        _ => {
            // As kubectl: every object needs both (a Kthena kind with a forgotten apiVersion
            // must not pass as an unknown foreign object).
            if api_version.is_empty() {
                return Err((
                    "apiVersion".to_owned(),
                    "missing field `apiVersion`".to_owned(),
                ));
            }
            if kind.is_empty() {
                return Err(("kind".to_owned(), "missing field `kind`".to_owned()));
            }
            typed(value, Object::Foreign)
        }
    }
}

/// A manifest that could not be read: where and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseError {
    /// File name (or the source name given to [`load_str`]).
    pub source: String,
    /// 1-based document index in the file.
    pub document: usize,
    /// 1-based line (0 when unknown).
    pub line: u64,
    /// 1-based column (0 when unknown).
    pub column: u64,
    /// JSON path of the offending field (empty for YAML syntax errors).
    pub path: String,
    /// What went wrong.
    pub message: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: document {}, line {}, column {}",
            self.source, self.document, self.line, self.column
        )?;
        if !self.path.is_empty() {
            write!(f, ", field {}", self.path)?;
        }
        write!(f, ": {}", self.message)
    }
}

// === YAML node with locations ===

/// A YAML node with the location of every child, used to map a field path back to a line.
#[derive(Debug)]
enum Node {
    Null,
    Bool(bool),
    I64(i64),
    U64(u64),
    F64(f64),
    Str(String),
    Seq(Vec<Spanned<Self>>),
    Map(Vec<(String, Spanned<Self>)>),
}

fn to_json(node: &Spanned<Node>, path: &str, spans: &mut HashMap<String, (u64, u64)>) -> Value {
    spans.insert(
        path.to_owned(),
        (node.referenced.line(), node.referenced.column()),
    );
    match &node.value {
        Node::Null => Value::Null,
        Node::Bool(b) => Value::Bool(*b),
        Node::I64(i) => Value::from(*i),
        Node::U64(u) => Value::from(*u),
        Node::F64(f) => serde_json::Number::from_f64(*f).map_or(Value::Null, Value::Number),
        Node::Str(s) => Value::String(s.clone()),
        Node::Seq(items) => Value::Array(
            items
                .iter()
                .enumerate()
                .map(|(i, n)| to_json(n, &format!("{path}[{i}]"), spans))
                .collect(),
        ),
        Node::Map(entries) => {
            let mut m = serde_json::Map::new();
            for (k, n) in entries {
                let child = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                m.insert(k.clone(), to_json(n, &child, spans));
            }
            Value::Object(m)
        }
    }
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        d.deserialize_any(NodeVisitor)
    }
}

struct NodeVisitor;

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = Node;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any YAML value")
    }
    fn visit_unit<E: de::Error>(self) -> std::result::Result<Node, E> {
        Ok(Node::Null)
    }
    fn visit_none<E: de::Error>(self) -> std::result::Result<Node, E> {
        Ok(Node::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> std::result::Result<Node, D::Error> {
        Node::deserialize(d)
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> std::result::Result<Node, E> {
        Ok(Node::Bool(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> std::result::Result<Node, E> {
        Ok(Node::I64(v))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> std::result::Result<Node, E> {
        Ok(Node::U64(v))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> std::result::Result<Node, E> {
        Ok(Node::F64(v))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> std::result::Result<Node, E> {
        Ok(Node::Str(v.to_owned()))
    }
    fn visit_string<E: de::Error>(self, v: String) -> std::result::Result<Node, E> {
        Ok(Node::Str(v))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> std::result::Result<Node, A::Error> {
        let mut items = Vec::new();
        while let Some(n) = a.next_element::<Spanned<Node>>()? {
            items.push(n);
        }
        Ok(Node::Seq(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> std::result::Result<Node, A::Error> {
        let mut entries = Vec::new();
        while let Some(k) = a.next_key::<KeyString>()? {
            let v = a.next_value::<Spanned<Node>>()?;
            entries.push((k.0, v));
        }
        Ok(Node::Map(entries))
    }
}

/// A mapping key rendered as a string (YAML allows numbers and booleans as keys).
struct KeyString(String);

impl<'de> Deserialize<'de> for KeyString {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = KeyString;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a scalar mapping key")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> std::result::Result<KeyString, E> {
                Ok(KeyString(v.to_owned()))
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> std::result::Result<KeyString, E> {
                Ok(KeyString(v.to_string()))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> std::result::Result<KeyString, E> {
                Ok(KeyString(v.to_string()))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> std::result::Result<KeyString, E> {
                Ok(KeyString(v.to_string()))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> std::result::Result<KeyString, E> {
                Ok(KeyString(v.to_string()))
            }
            fn visit_unit<E: de::Error>(self) -> std::result::Result<KeyString, E> {
                Ok(KeyString("null".to_owned()))
            }
        }
        d.deserialize_any(V)
    }
}
