//! Reading the YAML manifests users already have: files, directories or stdin, each holding one
//! or more documents, with every error naming the file and document it came from.

pub mod legacy;
pub mod load;

pub use load::{LoadError, LoadProblem, load};

use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;

/// Where a document came from, for error messages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Source {
    /// The file (or `-` for stdin).
    pub file: PathBuf,
    /// 1-based index of the document within the file.
    pub document: usize,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (document {})", self.file.display(), self.document)
    }
}

/// One parsed YAML document.
#[derive(Clone, Debug)]
pub struct Document {
    /// Where it came from.
    pub source: Source,
    /// Its content as JSON.
    pub value: Value,
}

impl Document {
    /// `apiVersion` of the object, or "" when missing.
    pub fn api_version(&self) -> &str {
        self.value
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or("")
    }

    /// `kind` of the object, or "" when missing.
    pub fn kind(&self) -> &str {
        self.value.get("kind").and_then(Value::as_str).unwrap_or("")
    }

    /// `metadata.name` of the object, or "" when missing.
    pub fn name(&self) -> &str {
        self.value
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("")
    }

    /// `Kind/name` for messages.
    pub fn describe(&self) -> String {
        format!("{}/{}", self.kind(), self.name())
    }
}

/// Why manifests could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The file or directory could not be read.
    #[error("{path}: {source}")]
    Io {
        /// What we tried to read.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A document is not valid YAML.
    #[error("{source_of}: malformed YAML: {message}")]
    Yaml {
        /// Where.
        source_of: Source,
        /// What the parser said, with line and column.
        message: String,
    },
}

/// Reads every document from the given files, directories (their `.yaml`/`.yml`/`.json` files, in
/// name order, recursively) or `-` for stdin. Empty documents are skipped.
pub fn read_paths(paths: &[PathBuf]) -> Result<Vec<Document>, ReadError> {
    let mut docs = Vec::new();
    for path in paths {
        if path.as_os_str() == "-" {
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .map_err(|source| ReadError::Io {
                    path: path.clone(),
                    source,
                })?;
            docs.extend(parse_str(&text, path)?);
        } else {
            for file in files_under(path)? {
                let text = std::fs::read_to_string(&file).map_err(|source| ReadError::Io {
                    path: file.clone(),
                    source,
                })?;
                docs.extend(parse_str(&text, &file)?);
            }
        }
    }
    Ok(docs)
}

fn files_under(path: &Path) -> Result<Vec<PathBuf>, ReadError> {
    let io = |source| ReadError::Io {
        path: path.to_path_buf(),
        source,
    };
    if !path.is_dir() {
        // Let the read itself report a missing file.
        return Ok(vec![path.to_path_buf()]);
    }
    let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
        .map_err(io)?
        .map(|e| e.map(|e| e.path()).map_err(io))
        .collect::<Result<_, _>>()?;
    entries.sort();
    let mut files = Vec::new();
    for entry in entries {
        if entry.is_dir() {
            files.extend(files_under(&entry)?);
        } else if matches!(
            entry.extension().and_then(|e| e.to_str()),
            Some("yaml" | "yml" | "json")
        ) {
            files.push(entry);
        }
    }
    Ok(files)
}

/// Parses a multi-document YAML stream.
pub fn parse_str(text: &str, file: &Path) -> Result<Vec<Document>, ReadError> {
    let mut docs = Vec::new();
    for (i, de) in serde_yaml_ng::Deserializer::from_str(text).enumerate() {
        let source = Source {
            file: file.to_path_buf(),
            document: i + 1,
        };
        let value = Value::deserialize(de).map_err(|e| ReadError::Yaml {
            source_of: source.clone(),
            message: e.to_string(),
        })?;
        if !value.is_null() {
            docs.push(Document { source, value });
        }
    }
    Ok(docs)
}

/// Renders objects as one multi-document YAML stream.
pub fn to_yaml_stream(objects: &[Value]) -> Result<String, serde_yaml_ng::Error> {
    let mut out = String::new();
    for (i, object) in objects.iter().enumerate() {
        if i > 0 {
            out.push_str("---\n");
        }
        out.push_str(&serde_yaml_ng::to_string(object)?);
    }
    Ok(out)
}
