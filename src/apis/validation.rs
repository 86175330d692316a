//! Client-side validation with the API server's own rules: the OpenAPI schema and the CEL
//! `x-kubernetes-validations` of the CRDs we generate, evaluated against an object.
//!
//! Using the generated CRD as the single source of truth means `simulate` and `convert` reject
//! exactly what `kubectl apply` would, and the two can never drift apart.

use std::collections::HashMap;
use std::fmt;
use std::sync::LazyLock;

use kube_cel::{CompiledSchema, Validator, compile_schema};
use serde::Serialize;
use serde_json::Value;

use super::{EC2NodeClass, NodeClaim, NodePool, crds};

/// One reason an object would be rejected, with the field it concerns.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Problem {
    /// Dotted field path, e.g. `spec.template.spec.requirements[0].key`.
    pub path: String,
    /// What is wrong, in the API server's words where it has them.
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

/// Every problem found in an object; never empty.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, thiserror::Error)]
pub struct ValidationErrors {
    /// `Kind/name` of the object.
    pub object: String,
    /// The problems, schema problems first, then CEL rule failures.
    pub problems: Vec<Problem>,
}

impl fmt::Display for ValidationErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} is invalid:", self.object)?;
        for p in &self.problems {
            write!(f, "\n  - {p}")?;
        }
        Ok(())
    }
}

/// A CRD's schema prepared once for repeated validation.
struct CompiledCrd {
    kind: &'static str,
    schema: Value,
    structural: jsonschema::Validator,
    cel: CompiledSchema,
    /// Each CEL rule's message, which the API server names a rule by when it cannot evaluate it.
    messages: HashMap<String, String>,
}

impl CompiledCrd {
    fn new(kind: &'static str) -> Self {
        let schema = crds::all()
            .into_iter()
            .map(|(_, crd)| crd)
            .find(|crd| crd.spec.names.kind == kind)
            .map(|crd| crds::schema_of(&crd))
            .unwrap_or(Value::Null);
        let structural = jsonschema::options()
            .with_draft(jsonschema::Draft::Draft4)
            .build(&to_json_schema(&schema))
            .unwrap_or_else(|e| panic!("generated {kind} schema is not valid JSON Schema: {e}"));
        let mut messages = HashMap::new();
        rule_messages(&schema, &mut messages);
        Self {
            kind,
            structural,
            cel: compile_schema(&schema),
            messages,
            schema,
        }
    }

    fn validate(&self, object: &Value, old: Option<&Value>) -> Result<(), ValidationErrors> {
        let object = strip_nulls(object);
        let old = old.map(strip_nulls);
        let mut problems: Vec<Problem> = self
            .structural
            .iter_errors(&kube_cel::apply_defaults(&self.schema, &object))
            .map(|e| Problem {
                path: dotted_path(e.instance_path().as_str()),
                message: describe(&e),
            })
            .collect();
        if let Err(errors) = Validator::new().validate_compiled(&self.cel, &object, old.as_ref()) {
            let schema_problems = problems.len();
            // A rule that could not be evaluated on or around a field the schema already
            // rejected (a number where a string belongs) adds nothing: the API server stops at
            // the type.
            let rejected: Vec<String> = problems.iter().map(|p| p.path.clone()).collect();
            let within = |path: &str| {
                rejected
                    .iter()
                    .any(|r| nested_in(path, r) || nested_in(r, path))
            };
            problems.extend(
                errors
                    .iter()
                    .filter(|e| {
                        matches!(e.kind, kube_cel::ErrorKind::ValidationFailure)
                            || !within(&e.field_path)
                    })
                    .map(|e| Problem {
                        path: e.field_path.clone(),
                        message: match e.kind {
                            kube_cel::ErrorKind::ValidationFailure => {
                                format!("Invalid value: {}", e.message)
                            }
                            _ => evaluation_error(
                                &e.message,
                                self.messages.get(&e.rule).unwrap_or(&e.rule),
                                self.kind,
                            ),
                        },
                    }),
            );
            // The CEL engine visits map fields in no fixed order; sort so output is reproducible.
            problems[schema_problems..]
                .sort_by(|a, b| (&a.path, &a.message).cmp(&(&b.path, &b.message)));
        }
        if problems.is_empty() {
            return Ok(());
        }
        let name = object
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("<unnamed>");
        Err(ValidationErrors {
            object: format!("{}/{}", self.kind, name),
            problems,
        })
    }
}

static NODEPOOL: LazyLock<CompiledCrd> = LazyLock::new(|| CompiledCrd::new("NodePool"));
static NODECLAIM: LazyLock<CompiledCrd> = LazyLock::new(|| CompiledCrd::new("NodeClaim"));
static EC2NODECLASS: LazyLock<CompiledCrd> = LazyLock::new(|| CompiledCrd::new("EC2NodeClass"));

/// The kinds whose manifests we validate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `karpenter.sh/v1` NodePool.
    NodePool,
    /// `karpenter.sh/v1` NodeClaim.
    NodeClaim,
    /// `karpenter.k8s.aws/v1` EC2NodeClass.
    EC2NodeClass,
}

impl Kind {
    /// The kind of a manifest, if it is one of ours at v1.
    pub fn of(api_version: &str, kind: &str) -> Option<Self> {
        match (api_version, kind) {
            ("karpenter.sh/v1", "NodePool") => Some(Self::NodePool),
            ("karpenter.sh/v1", "NodeClaim") => Some(Self::NodeClaim),
            ("karpenter.k8s.aws/v1", "EC2NodeClass") => Some(Self::EC2NodeClass),
            _ => None,
        }
    }

    fn compiled(self) -> &'static CompiledCrd {
        match self {
            Self::NodePool => &NODEPOOL,
            Self::NodeClaim => &NODECLAIM,
            Self::EC2NodeClass => &EC2NODECLASS,
        }
    }
}

/// Validates a manifest as the API server would on create (`old = None`) or update.
pub fn validate_value(
    kind: Kind,
    object: &Value,
    old: Option<&Value>,
) -> Result<(), ValidationErrors> {
    kind.compiled().validate(object, old)
}

fn validate_typed<T: Serialize>(kind: Kind, object: &T) -> Result<(), ValidationErrors> {
    match serde_json::to_value(object) {
        Ok(v) => validate_value(kind, &v, None),
        Err(e) => Err(ValidationErrors {
            object: format!("{kind:?}"),
            problems: vec![Problem {
                path: String::new(),
                message: format!("cannot be serialized: {e}"),
            }],
        }),
    }
}

impl NodePool {
    /// Every reason the API server would reject this NodePool on create.
    pub fn validate(&self) -> Result<(), ValidationErrors> {
        validate_typed(Kind::NodePool, self)
    }
}

impl NodeClaim {
    /// Every reason the API server would reject this NodeClaim on create.
    pub fn validate(&self) -> Result<(), ValidationErrors> {
        validate_typed(Kind::NodeClaim, self)
    }
}

impl EC2NodeClass {
    /// Every reason the API server would reject this EC2NodeClass on create.
    pub fn validate(&self) -> Result<(), ValidationErrors> {
        validate_typed(Kind::EC2NodeClass, self)
    }
}

/// Turns the OpenAPI v3 dialect of a CRD schema into plain JSON Schema. Input nulls are stripped
/// before validation (as the API server prunes them), so `nullable` can simply go; Kubernetes
/// `x-` extensions stay, and JSON Schema ignores them.
fn to_json_schema(schema: &Value) -> Value {
    let Value::Object(map) = schema else {
        return schema.clone();
    };
    let out = map
        .iter()
        .filter(|(k, _)| k.as_str() != "nullable")
        .map(|(k, v)| {
            let v = match (k.as_str(), v) {
                ("properties", Value::Object(props)) => Value::Object(
                    props
                        .iter()
                        .map(|(name, s)| (name.clone(), to_json_schema(s)))
                        .collect(),
                ),
                ("items" | "additionalProperties" | "not", s) => to_json_schema(s),
                ("anyOf" | "allOf" | "oneOf", Value::Array(list)) => {
                    Value::Array(list.iter().map(to_json_schema).collect())
                }
                (_, v) => v.clone(),
            };
            (k.clone(), v)
        })
        .collect();
    Value::Object(out)
}

/// Drops `null` map entries: the API server treats an explicit null like an absent field.
fn strip_nulls(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), strip_nulls(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(strip_nulls).collect()),
        other => other.clone(),
    }
}

/// `/spec/requirements/0/key` → `spec.requirements[0].key`.
fn dotted_path(pointer: &str) -> String {
    let mut out = String::new();
    for segment in pointer.split('/').skip(1) {
        let segment = segment.replace("~1", "/").replace("~0", "~");
        if !segment.is_empty() && segment.bytes().all(|b| b.is_ascii_digit()) {
            out.push_str(&format!("[{segment}]"));
        } else {
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(&segment);
        }
    }
    out
}

/// Whether dotted `path` is `parent` or a field or item below it.
fn nested_in(path: &str, parent: &str) -> bool {
    path.strip_prefix(parent)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with(['.', '[']) || parent.is_empty())
}

/// Collects every `x-kubernetes-validations` rule's message in a schema, by rule text.
fn rule_messages(schema: &Value, out: &mut HashMap<String, String>) {
    match schema {
        Value::Object(map) => {
            for rule in map
                .get("x-kubernetes-validations")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if let (Some(r), Some(m)) = (
                    rule.get("rule").and_then(Value::as_str),
                    rule.get("message").and_then(Value::as_str),
                ) {
                    out.insert(r.to_string(), m.to_string());
                }
            }
            map.values().for_each(|v| rule_messages(v, out));
        }
        Value::Array(items) => items.iter().for_each(|v| rule_messages(v, out)),
        _ => {}
    }
}

/// A rule that failed to evaluate, in the API server's words: the error, then the rule named by
/// its message (the rule's text when it has none). The evaluator's type errors name its internal
/// Rust types (`got 'Float(1.5)', want 'Arc<String>'`); the API server calls them "no such
/// overload", and the fix is the field's type.
fn evaluation_error(message: &str, rule: &str, kind: &str) -> String {
    if message.starts_with("Unexpected type") {
        format!(
            "Invalid value: no such overload evaluating rule: {rule}; give the field the type \
             the {kind} API expects"
        )
    } else {
        format!("Invalid value: {message} evaluating rule: {rule}")
    }
}

/// The JSON type of a value as the API server names it in type errors.
fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_f64() => "number",
        Value::Number(_) => "integer",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Phrases a schema violation the way the API server does.
fn describe(e: &jsonschema::ValidationError<'_>) -> String {
    use jsonschema::error::{TypeKind, ValidationErrorKind as K};
    let value = e.instance().to_string();
    match e.kind() {
        K::Enum { options } => {
            let supported = options
                .as_array()
                .map(|o| {
                    o.iter()
                        .map(Value::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                })
                .unwrap_or_default();
            format!("Unsupported value: {value}: supported values: {supported}")
        }
        K::Pattern { pattern } => {
            format!("Invalid value: {value}: should match '{pattern}'")
        }
        K::Required { property } => format!("Required value: {property} is required"),
        K::MaxLength { limit } => {
            format!("Too long: may not be more than {limit} bytes")
        }
        K::MinLength { limit } => {
            format!("Invalid value: {value}: should be at least {limit} chars long")
        }
        K::MaxItems { limit } => format!("Too many: must have at most {limit} items"),
        K::MinItems { limit } => format!("Invalid value: should have at least {limit} items"),
        K::MaxProperties { limit } => format!("Too many: must have at most {limit} items"),
        K::Minimum { limit } => {
            format!("Invalid value: {value}: should be greater than or equal to {limit}")
        }
        K::Maximum { limit } => {
            format!("Invalid value: {value}: should be less than or equal to {limit}")
        }
        K::Type { kind } => {
            let expected = match kind {
                TypeKind::Single(t) => t.to_string(),
                TypeKind::Multiple(ts) => ts
                    .iter()
                    .map(|t| t.to_string())
                    .collect::<Vec<_>>()
                    .join(" or "),
            };
            let quote = if expected == "string" && !value.starts_with(['{', '[']) {
                format!("; quote it (\"{value}\") if it is meant as a string")
            } else {
                String::new()
            };
            format!(
                "Invalid value: \"{}\": must be of type {expected}{quote}",
                json_type(e.instance())
            )
        }
        _ => format!("Invalid value: {value}: {e}"),
    }
}
