//! The crate's error type.

use std::path::PathBuf;

use crate::load::ParseError;

/// Errors of `kthena-api`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A manifest file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A manifest document could not be parsed or decoded; says where (file, document, line,
    /// column, field path) and why.
    #[error("{0}")]
    Parse(Box<ParseError>),
    /// An object could not be serialized.
    #[error("cannot serialize object: {source}")]
    Serialize {
        /// The serializer error.
        #[source]
        source: serde_json::Error,
    },
    /// An object could not be rendered as YAML.
    #[error("cannot render object as YAML: {source}")]
    SerializeYaml {
        /// The YAML serializer error.
        #[source]
        source: Box<serde_saphyr::SerializeError>,
    },
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
