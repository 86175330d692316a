//! The CustomResourceDefinitions generated from our types, as `karpenter-rs crds` prints them and
//! as `crds/` and the Helm chart ship them.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps,
};
use kube::CustomResourceExt;
use serde_json::Value;

use super::{EC2NodeClass, NodeClaim, NodeOverlay, NodePool};

/// The CRDs, keyed by the file name they are shipped under (upstream's names).
pub fn all() -> Vec<(&'static str, CustomResourceDefinition)> {
    vec![
        ("karpenter.sh_nodepools.yaml", finalize(NodePool::crd())),
        ("karpenter.sh_nodeclaims.yaml", finalize(NodeClaim::crd())),
        (
            "karpenter.k8s.aws_ec2nodeclasses.yaml",
            finalize(EC2NodeClass::crd()),
        ),
        (
            "karpenter.sh_nodeoverlays.yaml",
            finalize(NodeOverlay::crd()),
        ),
    ]
}

/// The OpenAPI schema of a CRD's served version, as JSON.
pub fn schema_of(crd: &CustomResourceDefinition) -> Value {
    crd.spec
        .versions
        .first()
        .and_then(|v| v.schema.as_ref())
        .and_then(|s| s.open_api_v3_schema.as_ref())
        .and_then(|s| serde_json::to_value(s).ok())
        .unwrap_or(Value::Null)
}

/// Brings the derived schema to the shape upstream's controller-gen output has, so the API server
/// treats our CRDs exactly like upstream's: no `nullable` (explicit nulls are pruned, not stored),
/// int-or-string quantities as `anyOf: [integer, string]`, integral bounds as integers, the
/// object-meta fields at the root, and the list kind named.
fn finalize(mut crd: CustomResourceDefinition) -> CustomResourceDefinition {
    crd.spec.names.list_kind = Some(format!("{}List", crd.spec.names.kind));
    for version in &mut crd.spec.versions {
        let Some(schema) = version.schema.as_mut() else {
            continue;
        };
        let Some(props) = schema.open_api_v3_schema.take() else {
            continue;
        };
        let mut value = serde_json::to_value(props).unwrap_or(Value::Null);
        if let Value::Object(root) = &mut value {
            root.remove("title");
            if let Some(Value::Object(props)) = root.get_mut("properties") {
                props.insert("apiVersion".into(), serde_json::json!({"type": "string", "description": "The versioned schema of this representation of an object."}));
                props.insert("kind".into(), serde_json::json!({"type": "string", "description": "The REST resource this object represents."}));
                props.insert("metadata".into(), serde_json::json!({"type": "object"}));
            }
        }
        tidy(&mut value);
        schema.open_api_v3_schema = serde_json::from_value::<JSONSchemaProps>(value).ok();
    }
    crd
}

fn tidy(schema: &mut Value) {
    let Value::Object(map) = schema else {
        return;
    };
    map.remove("nullable");
    if map.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true)) {
        map.insert(
            "anyOf".into(),
            serde_json::json!([{"type": "integer"}, {"type": "string"}]),
        );
    }
    for key in ["minimum", "maximum"] {
        if let Some(n) = map.get(key).and_then(Value::as_f64)
            && n.fract() == 0.0
        {
            map.insert(key.into(), Value::from(n as i64));
        }
    }
    for (key, child) in map.iter_mut() {
        match (key.as_str(), child) {
            ("properties", Value::Object(props)) => props.values_mut().for_each(tidy),
            ("items" | "additionalProperties", child) => tidy(child),
            _ => {}
        }
    }
}

/// One CRD as a YAML document, as shipped in `crds/`.
pub fn to_yaml(crd: &CustomResourceDefinition) -> Result<String, serde_yaml_ng::Error> {
    serde_yaml_ng::to_string(crd)
}

/// All CRDs as one multi-document YAML stream.
pub fn render_all() -> Result<String, serde_yaml_ng::Error> {
    let mut out = String::new();
    for (_, crd) in all() {
        out.push_str("---\n");
        out.push_str(&to_yaml(&crd)?);
    }
    Ok(out)
}
