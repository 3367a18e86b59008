//! The `validate` report: one line per document, as printed by `kthena validate` and the
//! `validate` example.

use crate::load::load_str_each;

/// Result of checking the documents of one manifest text.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// One line per document (one per problem for invalid documents):
    ///
    /// * `ok <apiVersion> <kind> <namespace>/<name>`: a valid Kthena object (after
    ///   defaulting; the namespace is `default` when unset);
    /// * `skip <apiVersion> <kind> <name>`: a document of another kind;
    /// * `invalid <kind> <name>: <path>: <message>`: one line per problem;
    /// * `error <file>: document <n>, line <l>, column <c>[, field <path>]: <message>`: a
    ///   document that cannot be parsed or lacks `apiVersion` or `kind`.
    pub lines: Vec<String>,
    /// Whether any document was invalid or unparsable.
    pub failed: bool,
    /// Unknown (dropped) fields, one `<file>: document <n>: unknown field <path>` per field;
    /// warnings only, they do not fail the report.
    pub warnings: Vec<String>,
}

/// Loads, defaults and validates every document of `text` (named `source` in messages).
///
/// ```
/// let r = kthena_api::validate_manifests("r.yaml", "
/// apiVersion: networking.serving.volcano.sh/v1alpha1
/// kind: ModelRoute
/// metadata: {name: r}
/// spec: {rules: [{targetModels: [{modelServerName: s}]}]}
/// ");
/// assert_eq!(r.lines, ["invalid ModelRoute r: spec: ModelName and LoraAdapters cannot both be empty"]);
/// assert!(r.failed);
/// ```
pub fn validate_manifests(source: &str, text: &str) -> Report {
    let mut report = Report::default();
    for doc in load_str_each(source, text) {
        let doc = match doc {
            Ok(d) => d,
            Err(e) => {
                report.failed = true;
                report.lines.push(format!("error {e}"));
                continue;
            }
        };
        for f in &doc.unknown_fields {
            report.warnings.push(format!(
                "{source}: document {}: unknown field {f}",
                doc.index
            ));
        }
        let obj = doc.object.with_defaults();
        if !obj.is_kthena() {
            report.lines.push(format!(
                "skip {} {} {}",
                obj.api_version(),
                obj.kind(),
                obj.name()
            ));
            continue;
        }
        match obj.validate() {
            Ok(()) => report.lines.push(format!(
                "ok {} {} {}/{}",
                obj.api_version(),
                obj.kind(),
                obj.namespace(),
                obj.name()
            )),
            Err(errors) => {
                report.failed = true;
                for e in errors {
                    report.lines.push(format!(
                        "invalid {} {}: {}: {}",
                        obj.kind(),
                        obj.name(),
                        e.path,
                        e.message
                    ));
                }
            }
        }
    }
    report
}
