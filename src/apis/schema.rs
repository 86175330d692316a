//! OpenAPI fragments and CEL rules that the derived schemas cannot express by attributes alone.
//!
//! The rule texts and messages are upstream Karpenter's, byte for byte: users, scripts and docs
//! match on these messages, and `validate()` evaluates exactly these rules.

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde_json::{Value, json};

/// Kubernetes resource quantity pattern, as in every generated CRD.
pub const QUANTITY_PATTERN: &str = r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$";

/// Label value pattern (`metav1.LabelValue`).
pub const LABEL_VALUE_PATTERN: &str = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$";

/// Qualified name pattern used for requirement keys and taints.
pub const QUALIFIED_NAME_PATTERN: &str = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*(\/))?([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$";

/// Schema stand-in for `Quantity` map values: integer or string with the quantity pattern.
pub struct QuantitySchema;

impl JsonSchema for QuantitySchema {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Quantity".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "pattern": QUANTITY_PATTERN,
            "x-kubernetes-int-or-string": true
        })
    }
    fn inline_schema() -> bool {
        true
    }
}

/// The AWS well-known labels users may use inside the reserved `karpenter.k8s.aws` domain, in
/// upstream's CRD order.
const AWS_ALLOWED_KEYS: &str = r#"["karpenter.k8s.aws/instance-tenancy", "karpenter.k8s.aws/capacity-reservation-type", "karpenter.k8s.aws/capacity-reservation-id", "karpenter.k8s.aws/capacity-reservation-interruptible", "karpenter.k8s.aws/ec2nodeclass", "karpenter.k8s.aws/instance-encryption-in-transit-supported", "karpenter.k8s.aws/instance-category", "karpenter.k8s.aws/instance-hypervisor", "karpenter.k8s.aws/instance-family", "karpenter.k8s.aws/instance-generation", "karpenter.k8s.aws/instance-local-nvme", "karpenter.k8s.aws/instance-size", "karpenter.k8s.aws/instance-cpu", "karpenter.k8s.aws/instance-cpu-manufacturer", "karpenter.k8s.aws/instance-cpu-sustained-clock-speed-mhz", "karpenter.k8s.aws/instance-memory", "karpenter.k8s.aws/instance-ebs-bandwidth", "karpenter.k8s.aws/instance-network-bandwidth", "karpenter.k8s.aws/instance-gpu-name", "karpenter.k8s.aws/instance-gpu-manufacturer", "karpenter.k8s.aws/instance-gpu-count", "karpenter.k8s.aws/instance-gpu-memory", "karpenter.k8s.aws/instance-accelerator-name", "karpenter.k8s.aws/instance-accelerator-manufacturer", "karpenter.k8s.aws/instance-accelerator-count", "karpenter.k8s.aws/instance-capability-flex", "karpenter.k8s.aws/placement-group-id", "karpenter.k8s.aws/placement-group-partition"]"#;

fn rule(rule: &str, message: &str) -> Value {
    json!({"rule": rule, "message": message})
}

/// Appends CEL rules to a schema's `x-kubernetes-validations`.
fn add_rules(schema: &mut Schema, rules: impl IntoIterator<Item = Value>) {
    let obj = schema.ensure_object();
    let list = obj
        .entry("x-kubernetes-validations")
        .or_insert_with(|| Value::Array(Vec::new()));
    if let Value::Array(list) = list {
        list.extend(rules);
    }
}

/// Label-domain rules on a requirement key shared by NodePools and NodeClaims.
pub fn requirement_key_rules(schema: &mut Schema) {
    add_rules(
        schema,
        [
            rule(
                r#"self in ["karpenter.sh/capacity-type", "karpenter.sh/nodepool"] || !self.find("^([^/]+)").endsWith("karpenter.sh")"#,
                r#"label domain "karpenter.sh" is restricted"#,
            ),
            rule(
                r#"self != "kubernetes.io/hostname""#,
                r#"label "kubernetes.io/hostname" is restricted"#,
            ),
            rule(
                &format!(
                    r#"self in {AWS_ALLOWED_KEYS} || !self.find("^([^/]+)").endsWith("karpenter.k8s.aws")"#
                ),
                r#"label domain "karpenter.k8s.aws" is restricted"#,
            ),
        ],
    );
}

/// The AWS well-known labels a NodeOverlay's requirements may use inside `karpenter.k8s.aws`:
/// upstream's NodeOverlay CRD lists the instance-type labels only (no tenancy, capacity
/// reservation or placement group keys, which describe offerings of one launch, not types).
const AWS_OVERLAY_KEYS: &str = r#"["karpenter.k8s.aws/ec2nodeclass", "karpenter.k8s.aws/instance-encryption-in-transit-supported", "karpenter.k8s.aws/instance-category", "karpenter.k8s.aws/instance-hypervisor", "karpenter.k8s.aws/instance-family", "karpenter.k8s.aws/instance-generation", "karpenter.k8s.aws/instance-local-nvme", "karpenter.k8s.aws/instance-size", "karpenter.k8s.aws/instance-cpu", "karpenter.k8s.aws/instance-cpu-manufacturer", "karpenter.k8s.aws/instance-cpu-sustained-clock-speed-mhz", "karpenter.k8s.aws/instance-memory", "karpenter.k8s.aws/instance-ebs-bandwidth", "karpenter.k8s.aws/instance-network-bandwidth", "karpenter.k8s.aws/instance-gpu-name", "karpenter.k8s.aws/instance-gpu-manufacturer", "karpenter.k8s.aws/instance-gpu-count", "karpenter.k8s.aws/instance-gpu-memory", "karpenter.k8s.aws/instance-accelerator-name", "karpenter.k8s.aws/instance-accelerator-manufacturer", "karpenter.k8s.aws/instance-accelerator-count", "karpenter.k8s.aws/instance-capability-flex"]"#;

/// Label-domain rules on a NodeOverlay requirement key (upstream's NodeOverlay CRD).
pub fn overlay_requirement_key_rules(schema: &mut Schema) {
    add_rules(
        schema,
        [
            rule(
                r#"self in ["karpenter.sh/capacity-type", "karpenter.sh/nodepool"] || !self.find("^([^/]+)").endsWith("karpenter.sh")"#,
                r#"label domain "karpenter.sh" is restricted"#,
            ),
            rule(
                r#"self != "kubernetes.io/hostname""#,
                r#"label "kubernetes.io/hostname" is restricted"#,
            ),
            rule(
                &format!(
                    r#"self in {AWS_OVERLAY_KEYS} || !self.find("^([^/]+)").endsWith("karpenter.k8s.aws")"#
                ),
                r#"label domain "karpenter.k8s.aws" is restricted"#,
            ),
        ],
    );
}

/// Rules across a NodeOverlay's requirement list (no `minValues`; `NotIn` needs values too).
pub fn overlay_requirement_list_rules(schema: &mut Schema) {
    add_rules(
        schema,
        [
            rule(
                "self.all(x, x.operator == 'NotIn' ? x.values.size() != 0 : true)",
                "requirements with operator 'NotIn' must have a value defined",
            ),
            rule(
                "self.all(x, x.operator == 'In' ? x.values.size() != 0 : true)",
                "requirements with operator 'In' must have a value defined",
            ),
            rule(
                "self.all(x, (x.operator == 'Gt' || x.operator == 'Lt' || x.operator == 'Gte' || x.operator == 'Lte') ? (x.values.size() == 1 && int(x.values[0]) >= 0) : true)",
                "requirements operator 'Gt', 'Lt', 'Gte' or 'Lte' must have a single positive integer value",
            ),
        ],
    );
}

/// A NodePool may not require its own `karpenter.sh/nodepool` label (a NodeClaim may).
pub fn nodepool_requirement_key_rules(schema: &mut Schema) {
    let key = schema
        .get_mut("items")
        .and_then(|items| items.get_mut("properties"))
        .and_then(|props| props.get_mut("key"));
    if let Some(key) = key
        && let Ok(key) = <&mut Schema>::try_from(key)
    {
        let extra = rule(
            r#"self != "karpenter.sh/nodepool""#,
            r#"label "karpenter.sh/nodepool" is restricted"#,
        );
        // Upstream lists this rule right after the karpenter.sh domain rule.
        if let Some(Value::Array(list)) = key.get_mut("x-kubernetes-validations") {
            list.insert(1.min(list.len()), extra);
        }
    }
}

/// Rules across a requirement list.
pub fn requirement_list_rules(schema: &mut Schema) {
    add_rules(
        schema,
        [
            rule(
                "self.all(x, x.operator == 'In' ? x.values.size() != 0 : true)",
                "requirements with operator 'In' must have a value defined",
            ),
            rule(
                "self.all(x, (x.operator == 'Gt' || x.operator == 'Lt' || x.operator == 'Gte' || x.operator == 'Lte') ? (x.values.size() == 1 && int(x.values[0]) >= 0) : true)",
                "requirements operator 'Gt', 'Lt', 'Gte', or 'Lte' must have a single positive integer value",
            ),
            rule(
                "self.all(x, (x.operator == 'In' && has(x.minValues)) ? x.values.size() >= x.minValues : true)",
                "requirements with 'minValues' must have at least that many values specified in the 'values' field",
            ),
        ],
    );
}

/// Value constraints and restricted-domain rules on NodePool template labels.
pub fn template_label_rules(schema: &mut Schema) {
    let obj = schema.ensure_object();
    obj.insert("maxProperties".into(), json!(100));
    obj.insert(
        "additionalProperties".into(),
        json!({"type": "string", "maxLength": 63, "pattern": LABEL_VALUE_PATTERN}),
    );
    add_rules(
        schema,
        [
            rule(
                r#"self.all(x, x in ["karpenter.sh/capacity-type", "karpenter.sh/nodepool"] || !x.find("^([^/]+)").endsWith("karpenter.sh"))"#,
                r#"label domain "karpenter.sh" is restricted"#,
            ),
            rule(
                r#"self.all(x, x != "karpenter.sh/nodepool")"#,
                r#"label "karpenter.sh/nodepool" is restricted"#,
            ),
            rule(
                r#"self.all(x, x != "kubernetes.io/hostname")"#,
                r#"label "kubernetes.io/hostname" is restricted"#,
            ),
            rule(
                &format!(
                    r#"self.all(x, x in {AWS_ALLOWED_KEYS} || !x.find("^([^/]+)").endsWith("karpenter.k8s.aws"))"#
                ),
                r#"label domain "karpenter.k8s.aws" is restricted"#,
            ),
        ],
    );
}

/// The node class a NodePool points at may be renamed but not change group or kind.
pub fn node_class_ref_immutable(schema: &mut Schema) {
    add_rules(
        schema,
        [
            rule(
                "self.group == oldSelf.group",
                "nodeClassRef.group is immutable",
            ),
            rule(
                "self.kind == oldSelf.kind",
                "nodeClassRef.kind is immutable",
            ),
        ],
    );
}

/// Static NodePools (`replicas` set) have no weight and only a node-count limit, and a NodePool
/// cannot switch between static and dynamic provisioning.
pub fn nodepool_spec_rules(schema: &mut Schema) {
    add_rules(
        schema,
        [
            rule(
                "!has(self.replicas) || (!has(self.limits) || size(self.limits) == 0 || (size(self.limits) == 1 && 'nodes' in self.limits))",
                "only 'limits.nodes' is supported on static NodePools",
            ),
            rule(
                "!has(self.replicas) || !has(self.weight)",
                "'weight' is not supported on static NodePools",
            ),
            rule(
                "has(self.replicas) == has(oldSelf.replicas)",
                "Cannot transition NodePool between static (replicas set) and dynamic (replicas unset) provisioning modes",
            ),
        ],
    );
}

/// Drops the `format` schemars derives from the Rust integer type, where upstream's Go type
/// (`int`) has none.
pub fn without_format(schema: &mut Schema) {
    schema.remove("format");
}

/// Status conditions listed by type, as `kubectl` and server-side apply merge them.
pub fn condition_list(schema: &mut Schema) {
    let obj = schema.ensure_object();
    obj.insert("x-kubernetes-list-type".into(), json!("map"));
    obj.insert("x-kubernetes-list-map-keys".into(), json!(["type"]));
}

/// NodeClaim conditions as upstream's `status.Condition`: a listed-by-type map whose reason and
/// message may be empty.
pub fn nodeclaim_condition_list(schema: &mut Schema) {
    condition_list(schema);
    let Some(item) = schema.get_mut("items").and_then(Value::as_object_mut) else {
        return;
    };
    item.insert(
        "required".into(),
        json!(["lastTransitionTime", "status", "type"]),
    );
    if let Some(Value::Object(reason)) =
        item.get_mut("properties").and_then(|p| p.get_mut("reason"))
    {
        reason.remove("minLength");
        reason.insert(
            "pattern".into(),
            json!("^([A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?|)$"),
        );
    }
}

/// Requirement values as upstream's schema constrains them: label-value length and pattern,
/// stated on the list (where the API server only checks strings, i.e. nowhere) as upstream has it.
pub fn requirement_values(schema: &mut Schema) {
    let obj = schema.ensure_object();
    obj.insert("maxLength".into(), json!(63));
    obj.insert("pattern".into(), json!(LABEL_VALUE_PATTERN));
}

/// Drops the `default` schemars derives from a serde default, for fields the API requires
/// explicitly even though the Rust type can fall back to a value.
pub fn required_without_default(schema: &mut Schema) {
    schema.remove("default");
}

/// Tag maps in selector terms: at most 20 tags, no empty keys or values.
pub fn selector_tags(schema: &mut Schema) {
    schema
        .ensure_object()
        .insert("maxProperties".into(), json!(20));
    add_rules(
        schema,
        [rule(
            "self.all(k, k != '' && self[k] != '')",
            "empty tag keys or values aren't supported",
        )],
    );
}

/// A `map<string,string>` whose values are resource quantities (kubelet reservations).
pub fn quantity_string_map(schema: &mut Schema) {
    schema.ensure_object().insert(
        "additionalProperties".into(),
        json!({"type": "string", "pattern": QUANTITY_PATTERN}),
    );
}

/// Eviction signal thresholds: a percentage or a quantity.
pub fn eviction_threshold_map(schema: &mut Schema) {
    schema.ensure_object().insert(
        "additionalProperties".into(),
        json!({"type": "string", "pattern": r"^((\d{1,2}(\.\d{1,2})?|100(\.0{1,2})?)%||(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?)$"}),
    );
}
