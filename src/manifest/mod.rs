//! Reading the YAML manifests users already have: files, directories or stdin, each holding one
//! or more documents, with every error naming the file and document it came from.

pub mod legacy;
pub mod live;
pub mod load;

pub use load::{LoadError, LoadProblem, MAX_PODS, load};

use std::cell::Cell;
use std::collections::HashSet;
use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};

use serde::de::{self, DeserializeSeed, Visitor};
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

/// Largest manifest file (or stdin) read, so `-f /dev/zero` or a runaway generator fails with a
/// message instead of exhausting memory. The largest realistic input, 150,000 pods as separate
/// manifests, is about 40 MiB.
pub const MAX_FILE_BYTES: u64 = 64 * 1024 * 1024;

/// Deepest nesting of mappings and sequences in a document. Kubernetes objects nest a few dozen
/// levels at most; the limit stops hostile input before it exhausts the stack, and is below the
/// YAML parser's own recursion limit (128) so the message is ours.
pub const MAX_DEPTH: usize = 100;

/// Deepest nesting of flow collections (`[`, `{`) the text may reach before it is parsed at all.
/// The YAML scanner's cost grows with the square of the flow depth (200,000 `[` take minutes),
/// so this is checked on the raw text first; it is generous, above [`MAX_DEPTH`], so an
/// unbalanced bracket in a string never trips it and the parser reports the real depth.
const MAX_FLOW_DEPTH: usize = 1_000;

/// Why manifests could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The file or directory could not be read. The OS error is part of the message (and not
    /// a `source`), so chains printed with `{:#}` show it once.
    #[error("{path}: {error}")]
    Io {
        /// What we tried to read.
        path: PathBuf,
        /// The OS error.
        error: std::io::Error,
    },
    /// A file is larger than [`MAX_FILE_BYTES`].
    #[error(
        "{}: file is larger than {} MiB; split it into several files (a directory given to -f \
         is read file by file)",
        path.display(),
        MAX_FILE_BYTES / (1024 * 1024)
    )]
    TooLarge {
        /// The file (or `-` for stdin).
        path: PathBuf,
    },
    /// A directory contains a symbolic link back to itself or to a directory above it.
    #[error(
        "{}: symbolic link loop: it leads back to {}, which is already being read; remove the \
         link or pass the directories it points to with -f",
        link.display(),
        target.display()
    )]
    SymlinkLoop {
        /// The link.
        link: PathBuf,
        /// Where it leads.
        target: PathBuf,
    },
    /// A document is not valid YAML.
    #[error("{source_of}: malformed YAML: {message}")]
    Yaml {
        /// Where.
        source_of: Source,
        /// What the parser said, with line and column.
        message: String,
    },
    /// A document is well-formed YAML that is not a valid manifest: a duplicate key, an
    /// unsupported tag, or nesting deeper than [`MAX_DEPTH`].
    #[error("{source_of}: {message}")]
    Invalid {
        /// Where.
        source_of: Source,
        /// What is wrong, where (path, line and column) and how to fix it.
        message: String,
    },
}

/// Reads every document from the given files, directories (their `.yaml`/`.yml`/`.json` files, in
/// name order, recursively, each file once however many links lead to it) or `-` for stdin.
/// Empty documents are skipped.
pub fn read_paths(paths: &[PathBuf]) -> Result<Vec<Document>, ReadError> {
    let mut docs = Vec::new();
    let mut seen = HashSet::new();
    for path in paths {
        if path.as_os_str() == "-" {
            let text = read_limited(std::io::stdin().lock(), path)?;
            docs.extend(parse_str(&text, path)?);
        } else {
            let mut files = Vec::new();
            files_under(path, &mut Vec::new(), &mut seen, &mut files)?;
            for file in files {
                let reader = std::fs::File::open(&file).map_err(|error| ReadError::Io {
                    path: file.clone(),
                    error,
                })?;
                let text = read_limited(reader, &file)?;
                docs.extend(parse_str(&text, &file)?);
            }
        }
    }
    Ok(docs)
}

/// Reads at most [`MAX_FILE_BYTES`] as UTF-8, failing beyond that rather than reading on.
fn read_limited(reader: impl Read, path: &Path) -> Result<String, ReadError> {
    let mut text = String::new();
    reader
        .take(MAX_FILE_BYTES.saturating_add(1))
        .read_to_string(&mut text)
        .map_err(|error| ReadError::Io {
            path: path.to_path_buf(),
            error,
        })?;
    if u64::try_from(text.len()).map_or(true, |n| n > MAX_FILE_BYTES) {
        return Err(ReadError::TooLarge {
            path: path.to_path_buf(),
        });
    }
    Ok(text)
}

/// Collects the manifest files under `path` into `files`. `ancestors` are the canonical
/// directories being walked (a link back to one of them is a loop, reported once); `seen` the
/// canonical files already collected (a file reached through two links is read once, not
/// reported as a set of duplicate objects).
fn files_under(
    path: &Path,
    ancestors: &mut Vec<PathBuf>,
    seen: &mut HashSet<PathBuf>,
    files: &mut Vec<PathBuf>,
) -> Result<(), ReadError> {
    let io = |error| ReadError::Io {
        path: path.to_path_buf(),
        error,
    };
    if !path.is_dir() {
        // A missing file or a dangling link: let the read report it.
        let canonical = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
        if seen.insert(canonical) {
            files.push(path.to_path_buf());
        }
        return Ok(());
    }
    let canonical = std::fs::canonicalize(path).map_err(io)?;
    if ancestors.contains(&canonical) {
        return Err(ReadError::SymlinkLoop {
            link: path.to_path_buf(),
            target: canonical,
        });
    }
    let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
        .map_err(io)?
        .map(|e| e.map(|e| e.path()).map_err(io))
        .collect::<Result<_, _>>()?;
    entries.sort();
    ancestors.push(canonical);
    for entry in entries {
        let manifest = matches!(
            entry.extension().and_then(|e| e.to_str()),
            Some("yaml" | "yml" | "json")
        );
        if manifest || entry.is_dir() {
            files_under(&entry, ancestors, seen, files)?;
        }
    }
    ancestors.pop();
    Ok(())
}

/// Parses a multi-document YAML stream. Rejects what the API server would reject although the
/// YAML is well-formed: duplicate keys (YAML libraries differ on which value wins), tags other
/// than YAML's own, and absurd nesting.
pub fn parse_str(text: &str, file: &Path) -> Result<Vec<Document>, ReadError> {
    let mut docs = Vec::new();
    if let Some(line) = too_deep_flow(text) {
        return Err(ReadError::Invalid {
            source_of: Source {
                file: file.to_path_buf(),
                document: 1,
            },
            message: format!(
                "brackets nested more than {MAX_FLOW_DEPTH} levels deep by line {line}; a \
                 Kubernetes object nests a few dozen levels at most, check the file is a manifest"
            ),
        });
    }
    for (i, de) in serde_yaml_ng::Deserializer::from_str(text).enumerate() {
        let source = Source {
            file: file.to_path_buf(),
            document: i.saturating_add(1),
        };
        let rejected = Cell::new(false);
        let seed = JsonSeed {
            depth: 0,
            rejected: &rejected,
        };
        let value = seed.deserialize(de).map_err(|e| {
            let source_of = source.clone();
            let message = e.to_string();
            if rejected.get() {
                ReadError::Invalid { source_of, message }
            } else if message.starts_with("repetition limit exceeded") {
                // Well-formed YAML whose aliases expand exponentially ("billion laughs").
                ReadError::Invalid {
                    source_of,
                    message: "aliases expand to too many values; write the values out instead \
                              of nesting aliases of aliases"
                        .to_owned(),
                }
            } else {
                ReadError::Yaml { source_of, message }
            }
        })?;
        if !value.is_null() {
            docs.push(Document { source, value });
        }
    }
    Ok(docs)
}

/// The line (1-based) where flow collections first nest deeper than [`MAX_FLOW_DEPTH`], counting
/// brackets outside comments; `None` when they never do.
fn too_deep_flow(text: &str) -> Option<usize> {
    let mut depth = 0usize;
    for (i, line) in text.lines().enumerate() {
        let mut previous = ' ';
        for c in line.chars() {
            match c {
                '#' if previous.is_whitespace() => break,
                '[' | '{' => {
                    depth = depth.saturating_add(1);
                    if depth > MAX_FLOW_DEPTH {
                        return Some(i.saturating_add(1));
                    }
                }
                ']' | '}' => depth = depth.saturating_sub(1),
                _ => {}
            }
            previous = c;
        }
    }
    None
}

/// Builds a JSON value from a YAML document, rejecting duplicate keys, unsupported tags and
/// nesting deeper than [`MAX_DEPTH`]. (`serde_json::Value`'s own `Deserialize` keeps the last of
/// duplicate keys and calls a tag "invalid type: enum".)
#[derive(Clone, Copy)]
struct JsonSeed<'a> {
    depth: usize,
    /// Set when this seed (not the parser) fails, so the error is not called malformed YAML.
    rejected: &'a Cell<bool>,
}

impl JsonSeed<'_> {
    fn nested<E: de::Error>(self) -> Result<Self, E> {
        let depth = self.depth.saturating_add(1);
        if depth > MAX_DEPTH {
            return Err(self.reject(format!(
                "nested more than {MAX_DEPTH} levels deep; a Kubernetes object \
                 nests a few dozen levels at most, check the file is a manifest"
            )));
        }
        Ok(Self { depth, ..self })
    }

    fn reject<E: de::Error>(self, message: String) -> E {
        self.rejected.set(true);
        E::custom(message)
    }
}

impl<'de> DeserializeSeed<'de> for JsonSeed<'_> {
    type Value = Value;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for JsonSeed<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a YAML value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        // As serde_json does: `.nan` and `.inf` have no JSON form.
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        self.deserialize(deserializer)
    }

    fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(self.nested()?)? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = serde_json::Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let value = map.next_value_seed(self.nested()?)?;
            if object.contains_key(&key) {
                return Err(self.reject(format!(
                    "duplicate key {key:?}; the API server rejects a field given \
                     twice, keep one"
                )));
            }
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }

    fn visit_enum<A: de::EnumAccess<'de>>(self, data: A) -> Result<Value, A::Error> {
        // The YAML deserializer presents a value with a tag it does not know as an enum whose
        // variant is the tag.
        let (tag, _) = data.variant::<String>()?;
        Err(self.reject(format!(
            "unsupported tag !{tag}: Kubernetes reads only YAML's own tags (!!str, \
             !!int, …); remove the tag"
        )))
    }
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
