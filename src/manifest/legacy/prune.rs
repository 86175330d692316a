//! Pruning converted objects against the v1 schema, reporting every dropped field.

use super::*;

// Pruning against the v1 schema

pub(super) static SCHEMAS: LazyLock<Vec<(String, Value)>> = LazyLock::new(|| {
    crds::all()
        .into_iter()
        .map(|(_, crd)| {
            let spec = crds::schema_of(&crd)
                .pointer("/properties/spec")
                .cloned()
                .unwrap_or(Value::Null);
            (crd.spec.names.kind, spec)
        })
        .collect()
});

pub(super) fn spec_schema(kind: Kind) -> &'static Value {
    let name = match kind {
        Kind::NodePool => "NodePool",
        Kind::NodeClaim => "NodeClaim",
        Kind::EC2NodeClass => "EC2NodeClass",
    };
    SCHEMAS
        .iter()
        .find(|(k, _)| k == name)
        .map_or(&Value::Null, |(_, s)| s)
}

/// Removes fields the schema does not declare, as the API server would silently do, recording
/// their paths so the user hears about them.
pub(super) fn prune(value: &mut Value, schema: &Value, path: &str, dropped: &mut Vec<String>) {
    if schema.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true)) {
        return;
    }
    match value {
        Value::Object(map) => {
            if let Some(Value::Object(props)) = schema.get("properties") {
                map.retain(|k, _| {
                    let known = props.contains_key(k);
                    if !known {
                        dropped.push(format!("{path}.{k}"));
                    }
                    known
                });
                for (k, v) in map.iter_mut() {
                    if let Some(s) = props.get(k) {
                        prune(v, s, &format!("{path}.{k}"), dropped);
                    }
                }
            } else if let Some(s @ Value::Object(_)) = schema.get("additionalProperties") {
                for (k, v) in map.iter_mut() {
                    prune(v, s, &format!("{path}.{k}"), dropped);
                }
            }
        }
        Value::Array(items) => {
            if let Some(s) = schema.get("items") {
                for (i, v) in items.iter_mut().enumerate() {
                    prune(v, s, &format!("{path}[{i}]"), dropped);
                }
            }
        }
        _ => {}
    }
}
