//! Our validation must accept what upstream Karpenter's CRDs accept and reject what they reject,
//! with the same messages: every CEL rule has a rejecting and an accepting case here, and every
//! example manifest validates.

use std::path::PathBuf;

use karpenter_rs::apis::validation::{Kind, validate_value};
use karpenter_rs::apis::{EC2NodeClass, NodeClaim, NodePool};
use karpenter_rs::manifest;
use serde_json::{Value, json};

fn nodepool() -> Value {
    json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "default"},
        "spec": {
            "template": {"spec": {
                "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}],
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}
            }}
        }
    })
}

fn nodeclaim() -> Value {
    json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {"name": "default-abcde"},
        "spec": {
            "requirements": [{"key": "karpenter.sh/nodepool", "operator": "In", "values": ["default"]}],
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}
        }
    })
}

fn nodeclass() -> Value {
    json!({
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": {"name": "default"},
        "spec": {
            "role": "KarpenterNodeRole",
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "c"}}],
            "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "c"}}]
        }
    })
}

/// Sets `value` at a JSON pointer, creating objects on the way; `Value::Null` removes the field.
fn set(mut object: Value, pointer: &str, value: Value) -> Value {
    let (parent, leaf) = pointer.rsplit_once('/').expect("pointer has a parent");
    let mut cur = &mut object;
    for seg in parent.split('/').skip(1) {
        cur = if let Ok(i) = seg.parse::<usize>() {
            &mut cur[i]
        } else {
            cur.as_object_mut()
                .expect("object")
                .entry(seg)
                .or_insert(json!({}))
        };
    }
    if value.is_null() {
        cur.as_object_mut().expect("object").remove(leaf);
    } else if let Ok(i) = leaf.parse::<usize>() {
        cur[i] = value;
    } else {
        cur[leaf] = value;
    }
    object
}

fn problems(kind: Kind, object: &Value, old: Option<&Value>) -> Vec<String> {
    match validate_value(kind, object, old) {
        Ok(()) => vec![],
        Err(e) => e.problems.iter().map(|p| p.to_string()).collect(),
    }
}

#[track_caller]
fn rejects(kind: Kind, object: Value, expected: &str) {
    let found = problems(kind, &object, None);
    assert!(
        found.iter().any(|p| p.contains(expected)),
        "expected a problem containing {expected:?}, got {found:#?}"
    );
}

#[track_caller]
fn accepts(kind: Kind, object: Value) {
    let found = problems(kind, &object, None);
    assert!(found.is_empty(), "expected no problems, got {found:#?}");
}

const REQ: &str = "/spec/template/spec/requirements/0";
const LABELS: &str = "/spec/template/metadata/labels";

#[test]
fn base_objects_are_valid() {
    accepts(Kind::NodePool, nodepool());
    accepts(Kind::NodeClaim, nodeclaim());
    accepts(Kind::EC2NodeClass, nodeclass());
}

#[test]
fn requirement_list_rules() {
    let np = |req: Value| set(nodepool(), REQ, req);
    rejects(
        Kind::NodePool,
        np(json!({"key": "karpenter.sh/capacity-type", "operator": "In", "values": []})),
        "spec.template.spec.requirements: Invalid value: requirements with operator 'In' must have a value defined",
    );
    accepts(
        Kind::NodePool,
        np(json!({"key": "karpenter.sh/capacity-type", "operator": "NotIn", "values": []})),
    );
    for op in ["Gt", "Lt", "Gte", "Lte"] {
        for bad in [json!([]), json!(["1", "2"]), json!(["-1"])] {
            rejects(
                Kind::NodePool,
                np(json!({"key": "karpenter.k8s.aws/instance-cpu", "operator": op, "values": bad})),
                "requirements operator 'Gt', 'Lt', 'Gte', or 'Lte' must have a single positive integer value",
            );
        }
        accepts(
            Kind::NodePool,
            np(json!({"key": "karpenter.k8s.aws/instance-cpu", "operator": op, "values": ["4"]})),
        );
    }
    rejects(
        Kind::NodePool,
        np(
            json!({"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large"], "minValues": 2}),
        ),
        "requirements with 'minValues' must have at least that many values specified in the 'values' field",
    );
    accepts(
        Kind::NodePool,
        np(
            json!({"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large", "m6i.large"], "minValues": 2}),
        ),
    );
    accepts(
        Kind::NodePool,
        np(
            json!({"key": "node.kubernetes.io/instance-type", "operator": "Exists", "minValues": 15}),
        ),
    );
}

#[test]
fn requirement_key_rules() {
    let key = |k: &str| set(nodepool(), REQ, json!({"key": k, "operator": "Exists"}));
    let cases = [
        (
            "karpenter.sh/custom",
            r#"label domain "karpenter.sh" is restricted"#,
        ),
        (
            "karpenter.sh/nodepool",
            r#"label "karpenter.sh/nodepool" is restricted"#,
        ),
        (
            "kubernetes.io/hostname",
            r#"label "kubernetes.io/hostname" is restricted"#,
        ),
        (
            "karpenter.k8s.aws/custom",
            r#"label domain "karpenter.k8s.aws" is restricted"#,
        ),
    ];
    for (k, msg) in cases {
        rejects(
            Kind::NodePool,
            key(k),
            &format!("spec.template.spec.requirements[0].key: Invalid value: {msg}"),
        );
    }
    // Upstream v1.14 no longer reserves the kubernetes.io and k8s.io domains, and allows the
    // AWS keys added since (tenancy, capacity reservations, capability flex, placement groups).
    for ok in [
        "kubernetes.io/arch",
        "kubernetes.io/custom",
        "node-role.kubernetes.io/worker",
        "sub.k8s.io/custom",
        "topology.kubernetes.io/zone",
        "node.kubernetes.io/instance-type",
        "node-restriction.kubernetes.io/team",
        "kops.k8s.io/instancegroup",
        "karpenter.sh/capacity-type",
        "karpenter.k8s.aws/instance-family",
        "karpenter.k8s.aws/ec2nodeclass",
        "karpenter.k8s.aws/instance-tenancy",
        "karpenter.k8s.aws/capacity-reservation-id",
        "karpenter.k8s.aws/capacity-reservation-type",
        "karpenter.k8s.aws/capacity-reservation-interruptible",
        "karpenter.k8s.aws/instance-capability-flex",
        "karpenter.k8s.aws/placement-group-id",
        "karpenter.k8s.aws/placement-group-partition",
        "example.com/team",
    ] {
        accepts(Kind::NodePool, key(ok));
    }
    // A NodeClaim may require its NodePool label.
    accepts(Kind::NodeClaim, nodeclaim());
    rejects(
        Kind::NodeClaim,
        set(
            nodeclaim(),
            "/spec/requirements/0",
            json!({"key": "kubernetes.io/hostname", "operator": "Exists"}),
        ),
        r#"label "kubernetes.io/hostname" is restricted"#,
    );
    rejects(
        Kind::NodePool,
        key("Not A Key!"),
        "spec.template.spec.requirements[0].key: Invalid value: \"Not A Key!\": should match",
    );
    rejects(
        Kind::NodePool,
        set(nodepool(), REQ, json!({"key": "a", "operator": "Within"})),
        "spec.template.spec.requirements[0].operator: Unsupported value: \"Within\": supported values: \"Gte\", \"Lte\", \"In\", \"NotIn\"",
    );
}

#[test]
fn template_label_rules() {
    let labeled = |k: &str| set(nodepool(), LABELS, json!({k: "x"}));
    let cases = [
        (
            "karpenter.sh/custom",
            r#"label domain "karpenter.sh" is restricted"#,
        ),
        (
            "karpenter.sh/nodepool",
            r#"label "karpenter.sh/nodepool" is restricted"#,
        ),
        (
            "kubernetes.io/hostname",
            r#"label "kubernetes.io/hostname" is restricted"#,
        ),
        (
            "karpenter.k8s.aws/custom",
            r#"label domain "karpenter.k8s.aws" is restricted"#,
        ),
    ];
    for (k, msg) in cases {
        rejects(
            Kind::NodePool,
            labeled(k),
            &format!("spec.template.metadata.labels: Invalid value: {msg}"),
        );
    }
    for ok in [
        "team",
        "example.com/team",
        "node.kubernetes.io/role",
        "node-role.kubernetes.io/worker",
        "kubernetes.io/role",
        "k8s.io/custom",
        "karpenter.sh/capacity-type",
        "karpenter.k8s.aws/capacity-reservation-type",
    ] {
        accepts(Kind::NodePool, labeled(ok));
    }
    rejects(
        Kind::NodePool,
        set(nodepool(), LABELS, json!({"team": "not a label value"})),
        "spec.template.metadata.labels.team: Invalid value: \"not a label value\"",
    );
    rejects(
        Kind::NodePool,
        set(nodepool(), LABELS, json!({"team": "x".repeat(64)})),
        "spec.template.metadata.labels.team: Too long: may not be more than 63",
    );
}

#[test]
fn node_class_ref_rules() {
    for field in ["group", "kind", "name"] {
        rejects(
            Kind::NodePool,
            set(
                nodepool(),
                &format!("/spec/template/spec/nodeClassRef/{field}"),
                json!(""),
            ),
            &format!("{field} may not be empty"),
        );
        rejects(
            Kind::NodePool,
            set(
                nodepool(),
                &format!("/spec/template/spec/nodeClassRef/{field}"),
                Value::Null,
            ),
            &format!("Required value: \"{field}\""),
        );
    }
    rejects(
        Kind::NodePool,
        set(
            nodepool(),
            "/spec/template/spec/nodeClassRef/group",
            json!("karpenter.k8s.aws/v1"),
        ),
        "spec.template.spec.nodeClassRef.group: Invalid value: \"karpenter.k8s.aws/v1\": should match '^[^/]*$'",
    );
    // Transition rules: name may change, group and kind may not.
    let old = nodepool();
    let renamed = set(
        nodepool(),
        "/spec/template/spec/nodeClassRef/name",
        json!("other"),
    );
    assert!(problems(Kind::NodePool, &renamed, Some(&old)).is_empty());
    let regrouped = set(
        nodepool(),
        "/spec/template/spec/nodeClassRef/group",
        json!("example.com"),
    );
    assert!(
        problems(Kind::NodePool, &regrouped, Some(&old))
            .iter()
            .any(|p| p.contains("nodeClassRef.group is immutable"))
    );
    let rekinded = set(
        nodepool(),
        "/spec/template/spec/nodeClassRef/kind",
        json!("Other"),
    );
    assert!(
        problems(Kind::NodePool, &rekinded, Some(&old))
            .iter()
            .any(|p| p.contains("nodeClassRef.kind is immutable"))
    );
}

#[test]
fn nodeclaim_spec_is_immutable() {
    let old = nodeclaim();
    assert!(problems(Kind::NodeClaim, &old, Some(&old)).is_empty());
    let changed = set(nodeclaim(), "/spec/expireAfter", json!("1h"));
    assert!(
        problems(Kind::NodeClaim, &changed, Some(&old))
            .iter()
            .any(|p| p.contains("spec is immutable"))
    );
}

#[test]
fn disruption_rules() {
    let budgets = |b: Value| {
        set(
            nodepool(),
            "/spec/disruption",
            json!({"consolidateAfter": "0s", "budgets": b}),
        )
    };
    rejects(
        Kind::NodePool,
        budgets(json!([{"nodes": "0", "schedule": "@daily"}])),
        "spec.disruption.budgets: Invalid value: 'schedule' must be set with 'duration'",
    );
    rejects(
        Kind::NodePool,
        budgets(json!([{"nodes": "0", "duration": "1h"}])),
        "'schedule' must be set with 'duration'",
    );
    accepts(
        Kind::NodePool,
        budgets(json!([{"nodes": "0", "schedule": "0 9 * * mon-fri", "duration": "8h"}])),
    );
    accepts(
        Kind::NodePool,
        budgets(json!([{"nodes": "10%", "reasons": ["Drifted", "Empty"]}])),
    );
    rejects(
        Kind::NodePool,
        budgets(json!([{"nodes": "101%"}])),
        "spec.disruption.budgets[0].nodes: Invalid value: \"101%\"",
    );
    rejects(
        Kind::NodePool,
        budgets(json!([{"nodes": "5", "reasons": ["Expired"]}])),
        "spec.disruption.budgets[0].reasons[0]: Unsupported value: \"Expired\"",
    );
    rejects(
        Kind::NodePool,
        budgets(json!([{"nodes": "1", "schedule": "@daily", "duration": "30s"}])),
        "spec.disruption.budgets[0].duration: Invalid value: \"30s\"",
    );
    rejects(
        Kind::NodePool,
        set(
            nodepool(),
            "/spec/disruption",
            json!({"consolidationPolicy": "WhenEmpty"}),
        ),
        "spec.disruption: Required value: \"consolidateAfter\"",
    );
    rejects(
        Kind::NodePool,
        set(
            nodepool(),
            "/spec/disruption",
            json!({"consolidateAfter": "0s", "consolidationPolicy": "WhenUnderutilized"}),
        ),
        "Unsupported value: \"WhenUnderutilized\"",
    );
    rejects(
        Kind::NodePool,
        set(
            nodepool(),
            "/spec/disruption",
            json!({"consolidateAfter": "10d"}),
        ),
        "spec.disruption.consolidateAfter: Invalid value: \"10d\"",
    );
    accepts(
        Kind::NodePool,
        set(
            nodepool(),
            "/spec/disruption",
            json!({"consolidateAfter": "Never"}),
        ),
    );
    rejects(
        Kind::NodePool,
        set(
            nodepool(),
            "/spec/template/spec/expireAfter",
            json!("forever"),
        ),
        "expireAfter: Invalid value",
    );
    rejects(
        Kind::NodePool,
        set(
            nodepool(),
            "/spec/template/spec/terminationGracePeriod",
            json!("Never"),
        ),
        "terminationGracePeriod: Invalid value",
    );
}

#[test]
fn a_nodepool_cannot_switch_between_static_and_dynamic() {
    let dynamic = nodepool();
    let fixed = set(nodepool(), "/spec/replicas", json!(3));
    let message = "Cannot transition NodePool between static (replicas set) and dynamic (replicas unset) provisioning modes";
    for (old, new) in [(&dynamic, &fixed), (&fixed, &dynamic)] {
        assert!(
            problems(Kind::NodePool, new, Some(old))
                .iter()
                .any(|p| p.contains(message)),
            "{new}"
        );
    }
    let scaled = set(nodepool(), "/spec/replicas", json!(5));
    assert!(problems(Kind::NodePool, &scaled, Some(&fixed)).is_empty());
    assert!(problems(Kind::NodePool, &dynamic, Some(&dynamic)).is_empty());
}

#[test]
fn static_capacity_rules() {
    let static_pool = |extra: &[(&str, Value)]| {
        let mut np = set(nodepool(), "/spec/replicas", json!(3));
        np = set(np, "/spec/disruption", json!({"consolidateAfter": "Never"}));
        for (pointer, value) in extra {
            np = set(np, pointer, value.clone());
        }
        np
    };
    accepts(Kind::NodePool, static_pool(&[]));
    accepts(
        Kind::NodePool,
        static_pool(&[("/spec/limits", json!({"nodes": 10}))]),
    );
    // As upstream v1.14: consolidation settings are ignored on a static NodePool, not rejected.
    accepts(
        Kind::NodePool,
        static_pool(&[("/spec/disruption/consolidationPolicy", json!("WhenEmpty"))]),
    );
    accepts(
        Kind::NodePool,
        static_pool(&[("/spec/disruption/consolidateAfter", json!("0s"))]),
    );
    rejects(
        Kind::NodePool,
        static_pool(&[("/spec/limits", json!({"cpu": 10}))]),
        "only 'limits.nodes' is supported on static NodePools",
    );
    rejects(
        Kind::NodePool,
        static_pool(&[("/spec/limits", json!({"nodes": 10, "memory": "1Gi"}))]),
        "only 'limits.nodes' is supported on static NodePools",
    );
    rejects(
        Kind::NodePool,
        static_pool(&[("/spec/weight", json!(10))]),
        "'weight' is not supported on static NodePools",
    );
    rejects(
        Kind::NodePool,
        set(nodepool(), "/spec/weight", json!(101)),
        "spec.weight: Invalid value: 101: should be less than or equal to 100",
    );
    rejects(
        Kind::NodePool,
        set(nodepool(), "/spec/weight", json!(0)),
        "spec.weight: Invalid value: 0: should be greater than or equal to 1",
    );
    rejects(
        Kind::NodePool,
        set(nodepool(), "/spec/limits", json!({"cpu": "lots"})),
        "spec.limits.cpu: Invalid value: \"lots\"",
    );
}

#[test]
fn ec2nodeclass_role_and_family_rules() {
    rejects(
        Kind::EC2NodeClass,
        set(nodeclass(), "/spec/instanceProfile", json!("p")),
        "must specify exactly one of ['role', 'instanceProfile']",
    );
    rejects(
        Kind::EC2NodeClass,
        set(nodeclass(), "/spec/role", Value::Null),
        "must specify exactly one of ['role', 'instanceProfile']",
    );
    rejects(
        Kind::EC2NodeClass,
        set(nodeclass(), "/spec/role", json!("")),
        "spec.role: Invalid value: role cannot be empty",
    );
    let ip = set(
        set(nodeclass(), "/spec/role", Value::Null),
        "/spec/instanceProfile",
        json!(""),
    );
    rejects(Kind::EC2NodeClass, ip, "instanceProfile cannot be empty");
    let family_alias = [
        (
            "AL2",
            "al2023@latest",
            "if set, amiFamily must be 'AL2023' or 'Custom' when using an AL2023 alias",
        ),
        (
            "AL2023",
            "al2@latest",
            "if set, amiFamily must be 'AL2' or 'Custom' when using an AL2 alias",
        ),
        (
            "AL2",
            "bottlerocket@latest",
            "if set, amiFamily must be 'Bottlerocket' or 'Custom' when using a Bottlerocket alias",
        ),
        (
            "AL2",
            "windows2019@latest",
            "if set, amiFamily must be 'Windows2019' or 'Custom' when using a Windows2019 alias",
        ),
        (
            "AL2",
            "windows2022@latest",
            "if set, amiFamily must be 'Windows2022' or 'Custom' when using a Windows2022 alias",
        ),
        (
            "AL2",
            "windows2025@latest",
            "if set, amiFamily must be 'Windows2025' or 'Custom' when using a Windows2025 alias",
        ),
    ];
    for (family, alias, msg) in family_alias {
        let nc = set(
            set(nodeclass(), "/spec/amiFamily", json!(family)),
            "/spec/amiSelectorTerms",
            json!([{"alias": alias}]),
        );
        rejects(Kind::EC2NodeClass, nc, msg);
        let custom = set(
            set(nodeclass(), "/spec/amiFamily", json!("Custom")),
            "/spec/amiSelectorTerms",
            json!([{"alias": alias}]),
        );
        accepts(Kind::EC2NodeClass, custom);
    }
    rejects(
        Kind::EC2NodeClass,
        set(
            nodeclass(),
            "/spec/amiSelectorTerms",
            json!([{"id": "ami-0123"}]),
        ),
        "must specify amiFamily if amiSelectorTerms does not contain an alias",
    );
    accepts(
        Kind::EC2NodeClass,
        set(
            set(
                nodeclass(),
                "/spec/amiSelectorTerms",
                json!([{"id": "ami-0123"}]),
            ),
            "/spec/amiFamily",
            json!("AL2023"),
        ),
    );
    rejects(
        Kind::EC2NodeClass,
        set(nodeclass(), "/spec/amiFamily", json!("Ubuntu")),
        "spec.amiFamily: Unsupported value: \"Ubuntu\"",
    );
}

#[test]
fn ec2nodeclass_selector_rules() {
    let ami = |terms: Value| {
        set(
            set(nodeclass(), "/spec/amiSelectorTerms", terms),
            "/spec/amiFamily",
            json!("Custom"),
        )
    };
    rejects(
        Kind::EC2NodeClass,
        ami(json!([{"owner": "self"}])),
        "expected at least one, got none, ['tags', 'id', 'name', 'alias', 'ssmParameter']",
    );
    rejects(
        Kind::EC2NodeClass,
        ami(json!([{"id": "ami-1", "name": "x"}])),
        "'id' is mutually exclusive, cannot be set with a combination of other fields in amiSelectorTerms",
    );
    rejects(
        Kind::EC2NodeClass,
        ami(json!([{"alias": "al2023@latest", "owner": "self"}])),
        "'alias' is mutually exclusive, cannot be set with a combination of other fields in amiSelectorTerms",
    );
    rejects(
        Kind::EC2NodeClass,
        ami(json!([{"alias": "al2023@latest"}, {"id": "ami-1"}])),
        "'alias' is mutually exclusive, cannot be set with a combination of other amiSelectorTerms",
    );
    rejects(
        Kind::EC2NodeClass,
        ami(json!([{"alias": "al2023"}])),
        "'alias' is improperly formatted, must match the format 'family@version'",
    );
    rejects(
        Kind::EC2NodeClass,
        ami(json!([{"alias": "ubuntu@latest"}])),
        "family is not supported, must be one of the following: 'al2', 'al2023', 'bottlerocket', 'windows2019', 'windows2022', 'windows2025'",
    );
    rejects(
        Kind::EC2NodeClass,
        ami(json!([{"alias": "windows2022@v1"}])),
        "windows families may only specify version 'latest'",
    );
    rejects(
        Kind::EC2NodeClass,
        ami(json!([])),
        "spec.amiSelectorTerms: Invalid value: should have at least 1 items",
    );
    accepts(
        Kind::EC2NodeClass,
        ami(
            json!([{"ssmParameter": "/my/ami"}, {"name": "x", "owner": "self"}, {"tags": {"a": "b"}}]),
        ),
    );
    rejects(
        Kind::EC2NodeClass,
        ami(json!([{"tags": {"a": ""}}])),
        "empty tag keys or values aren't supported",
    );

    let subnets = |terms: Value| set(nodeclass(), "/spec/subnetSelectorTerms", terms);
    rejects(
        Kind::EC2NodeClass,
        subnets(json!([])),
        "subnetSelectorTerms cannot be empty",
    );
    rejects(
        Kind::EC2NodeClass,
        subnets(json!([{}])),
        "expected at least one, got none, ['tags', 'id']",
    );
    rejects(
        Kind::EC2NodeClass,
        subnets(json!([{"id": "subnet-1", "tags": {"a": "b"}}])),
        "'id' is mutually exclusive, cannot be set with a combination of other fields in a subnet selector term",
    );
    // Upstream's rule only rejects when every term combines id with other fields.
    accepts(
        Kind::EC2NodeClass,
        subnets(json!([{"id": "subnet-1", "tags": {"a": "b"}}, {"id": "subnet-2"}])),
    );
    rejects(
        Kind::EC2NodeClass,
        subnets(json!([{"id": "sn-1"}])),
        "spec.subnetSelectorTerms[0].id: Invalid value: \"sn-1\"",
    );

    let sgs = |terms: Value| set(nodeclass(), "/spec/securityGroupSelectorTerms", terms);
    rejects(
        Kind::EC2NodeClass,
        sgs(json!([])),
        "securityGroupSelectorTerms cannot be empty",
    );
    rejects(
        Kind::EC2NodeClass,
        sgs(json!([{}])),
        "expected at least one, got none, ['tags', 'id', 'name']",
    );
    rejects(
        Kind::EC2NodeClass,
        sgs(json!([{"id": "sg-1", "name": "x"}])),
        "'id' is mutually exclusive, cannot be set with a combination of other fields in a security group selector term",
    );
    rejects(
        Kind::EC2NodeClass,
        sgs(json!([{"name": "x", "tags": {"a": "b"}}])),
        "'name' is mutually exclusive, cannot be set with a combination of other fields in a security group selector term",
    );
    accepts(
        Kind::EC2NodeClass,
        sgs(json!([{"id": "sg-1"}, {"name": "x"}])),
    );

    let crs = |terms: Value| set(nodeclass(), "/spec/capacityReservationSelectorTerms", terms);
    rejects(
        Kind::EC2NodeClass,
        crs(json!([{"ownerID": "123456789012"}])),
        "expected at least one, got none, ['tags', 'id', 'instanceMatchCriteria']",
    );
    rejects(
        Kind::EC2NodeClass,
        crs(json!([{"id": "cr-1", "ownerID": "123456789012"}])),
        "'id' is mutually exclusive, cannot be set along with other fields in a capacity reservation selector term",
    );
    accepts(
        Kind::EC2NodeClass,
        crs(json!([{"id": "cr-1"}, {"instanceMatchCriteria": "open"}])),
    );
    rejects(
        Kind::EC2NodeClass,
        set(
            nodeclass(),
            "/spec/placementGroupSelector",
            json!({"name": "a", "id": "pg-1"}),
        ),
        "'name' and 'id' are mutually exclusive",
    );
    rejects(
        Kind::EC2NodeClass,
        set(nodeclass(), "/spec/placementGroupSelector", json!({})),
        "expected at least one, got none, ['name', 'id']",
    );
    accepts(
        Kind::EC2NodeClass,
        set(
            nodeclass(),
            "/spec/placementGroupSelector",
            json!({"id": "pg-1"}),
        ),
    );
}

#[test]
fn ec2nodeclass_tag_rules() {
    let tagged = |k: &str| set(nodeclass(), "/spec/tags", json!({k: "v"}));
    for (k, msg) in [
        ("", "empty tag keys aren't supported"),
        (
            "eks:eks-cluster-name",
            "tag contains a restricted tag matching eks:eks-cluster-name",
        ),
        (
            "kubernetes.io/cluster/c",
            "tag contains a restricted tag matching kubernetes.io/cluster/",
        ),
        (
            "karpenter.sh/nodepool",
            "tag contains a restricted tag matching karpenter.sh/nodepool",
        ),
        (
            "karpenter.sh/nodeclaim",
            "tag contains a restricted tag matching karpenter.sh/nodeclaim",
        ),
        (
            "karpenter.k8s.aws/ec2nodeclass",
            "tag contains a restricted tag matching karpenter.k8s.aws/ec2nodeclass",
        ),
    ] {
        rejects(
            Kind::EC2NodeClass,
            tagged(k),
            &format!("spec.tags: Invalid value: {msg}"),
        );
    }
    accepts(Kind::EC2NodeClass, tagged("team"));
}

#[test]
fn ec2nodeclass_kubelet_rules() {
    let kubelet = |k: Value| set(nodeclass(), "/spec/kubelet", k);
    rejects(
        Kind::EC2NodeClass,
        kubelet(json!({"imageGCHighThresholdPercent": 50, "imageGCLowThresholdPercent": 60})),
        "imageGCHighThresholdPercent must be greater than imageGCLowThresholdPercent",
    );
    accepts(
        Kind::EC2NodeClass,
        kubelet(json!({"imageGCHighThresholdPercent": 85, "imageGCLowThresholdPercent": 80})),
    );
    // As on the API server, a missing map makes the rule fail to evaluate, which also rejects.
    rejects(
        Kind::EC2NodeClass,
        kubelet(json!({"evictionSoft": {"memory.available": "10%"}})),
        "No such key: evictionSoftGracePeriod evaluating rule",
    );
    rejects(
        Kind::EC2NodeClass,
        kubelet(json!({"evictionSoftGracePeriod": {"memory.available": "1m"}})),
        "No such key: evictionSoft evaluating rule",
    );
    rejects(
        Kind::EC2NodeClass,
        kubelet(
            json!({"evictionSoft": {"memory.available": "10%"}, "evictionSoftGracePeriod": {"nodefs.available": "1m"}}),
        ),
        "evictionSoft OwnerKey does not have a matching evictionSoftGracePeriod",
    );
    rejects(
        Kind::EC2NodeClass,
        kubelet(
            json!({"evictionSoft": {"memory.available": "10%"}, "evictionSoftGracePeriod": {"memory.available": "1m", "nodefs.available": "1m"}}),
        ),
        "evictionSoftGracePeriod OwnerKey does not have a matching evictionSoft",
    );
    accepts(
        Kind::EC2NodeClass,
        kubelet(
            json!({"evictionSoft": {"memory.available": "10%"}, "evictionSoftGracePeriod": {"memory.available": "1m"}}),
        ),
    );
    for field in ["evictionHard", "evictionSoft", "evictionSoftGracePeriod"] {
        rejects(
            Kind::EC2NodeClass,
            kubelet(json!({field: {"disk.available": "10%"}})),
            &format!("valid keys for {field} are"),
        );
    }
    for field in ["systemReserved", "kubeReserved"] {
        rejects(
            Kind::EC2NodeClass,
            kubelet(json!({field: {"gpu": "1"}})),
            &format!("valid keys for {field} are ['cpu','memory','ephemeral-storage','pid']"),
        );
        rejects(
            Kind::EC2NodeClass,
            kubelet(json!({field: {"cpu": "-100m"}})),
            &format!("{field} value cannot be a negative resource quantity"),
        );
        accepts(
            Kind::EC2NodeClass,
            kubelet(json!({field: {"cpu": "100m", "memory": "1Gi"}})),
        );
    }
    rejects(
        Kind::EC2NodeClass,
        kubelet(json!({"maxPods": -1})),
        "spec.kubelet.maxPods: Invalid value: -1",
    );
}

#[test]
fn ec2nodeclass_block_device_and_network_rules() {
    let bdm = |b: Value| set(nodeclass(), "/spec/blockDeviceMappings", b);
    rejects(
        Kind::EC2NodeClass,
        bdm(
            json!([{"deviceName": "/dev/xvda", "rootVolume": true, "ebs": {"volumeSize": "20Gi"}}, {"deviceName": "/dev/xvdb", "rootVolume": true, "ebs": {"volumeSize": "20Gi"}}]),
        ),
        "must have only one blockDeviceMappings with rootVolume",
    );
    rejects(
        Kind::EC2NodeClass,
        bdm(json!([{"deviceName": "/dev/xvda", "ebs": {"volumeType": "gp3"}}])),
        "snapshotID or volumeSize must be defined",
    );
    rejects(
        Kind::EC2NodeClass,
        bdm(json!([{"ebs": {"volumeSize": "20Gi", "volumeInitializationRate": 200}}])),
        "snapshotID must be set when volumeInitializationRate is set",
    );
    rejects(
        Kind::EC2NodeClass,
        bdm(json!([{"ebs": {"volumeSize": "70000Gi"}}])),
        "spec.blockDeviceMappings[0].ebs.volumeSize: Invalid value: \"70000Gi\"",
    );
    rejects(
        Kind::EC2NodeClass,
        bdm(json!([{"ebs": {"volumeSize": "20Gi", "volumeType": "gp4"}}])),
        "Unsupported value: \"gp4\"",
    );
    accepts(
        Kind::EC2NodeClass,
        bdm(
            json!([{"deviceName": "/dev/xvda", "rootVolume": true, "ebs": {"volumeSize": "100Gi", "volumeType": "gp3", "encrypted": true}}]),
        ),
    );

    let nics = |n: Value| set(nodeclass(), "/spec/networkInterfaces", n);
    rejects(
        Kind::EC2NodeClass,
        nics(json!([{"networkCardIndex": 1, "deviceIndex": 0, "interfaceType": "efa-only"}])),
        "networkInterfaces must include a primary interface with interfaceType='interface'",
    );
    rejects(
        Kind::EC2NodeClass,
        nics(
            json!([{"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "interface"}, {"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "efa-only"}]),
        ),
        "networkInterfaces must not have duplicate networkCardIndex and deviceIndex pairs, and can have at most one efa device per network card",
    );
    rejects(
        Kind::EC2NodeClass,
        nics(
            json!([{"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "interface"}, {"networkCardIndex": 1, "deviceIndex": 0, "interfaceType": "efa-only"}, {"networkCardIndex": 1, "deviceIndex": 1, "interfaceType": "efa-only"}]),
        ),
        "networkInterfaces must not have duplicate networkCardIndex and deviceIndex pairs, and can have at most one efa device per network card",
    );
    accepts(
        Kind::EC2NodeClass,
        nics(
            json!([{"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "interface"}, {"networkCardIndex": 1, "deviceIndex": 0, "interfaceType": "efa-only"}]),
        ),
    );
    rejects(
        Kind::EC2NodeClass,
        set(nodeclass(), "/spec/connectionTracking", json!({})),
        "at least one of tcpEstablishedTimeout, udpStreamTimeout, or udpTimeout must be set",
    );
    rejects(
        Kind::EC2NodeClass,
        set(
            nodeclass(),
            "/spec/connectionTracking",
            json!({"udpTimeout": 10}),
        ),
        "spec.connectionTracking.udpTimeout: Invalid value: 10",
    );
    rejects(
        Kind::EC2NodeClass,
        set(
            nodeclass(),
            "/spec/metadataOptions",
            json!({"httpPutResponseHopLimit": 65}),
        ),
        "httpPutResponseHopLimit: Invalid value: 65",
    );
    rejects(
        Kind::EC2NodeClass,
        set(
            nodeclass(),
            "/spec/metadataOptions",
            json!({"httpTokens": "sometimes"}),
        ),
        "Unsupported value: \"sometimes\"",
    );
}

#[test]
fn all_problems_are_reported_at_once() {
    let mut np = set(nodepool(), "/spec/weight", json!(0));
    np = set(np, LABELS, json!({"karpenter.sh/nodepool": "x"}));
    np = set(np, "/spec/template/spec/nodeClassRef/name", json!(""));
    let e = validate_value(Kind::NodePool, &np, None).unwrap_err();
    assert_eq!(e.problems.len(), 3, "{e}");
    assert!(
        e.to_string().starts_with("NodePool/default is invalid:"),
        "{e}"
    );
}

#[test]
fn typed_validate_applies_defaults_and_round_trips() {
    let np: NodePool = serde_json::from_value(nodepool()).expect("NodePool deserializes");
    assert_eq!(np.spec.template.spec.expire_after.to_string(), "720h");
    assert_eq!(np.spec.disruption.budgets[0].nodes, "10%");
    np.validate().expect("valid");
    let nc: EC2NodeClass = serde_json::from_value(nodeclass()).expect("EC2NodeClass deserializes");
    assert_eq!(
        nc.spec.metadata_options.http_put_response_hop_limit,
        Some(1)
    );
    nc.validate().expect("valid");
    let claim: NodeClaim = serde_json::from_value(nodeclaim()).expect("NodeClaim deserializes");
    claim.validate().expect("valid");
}

#[test]
fn every_example_manifest_is_valid() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples");
    let docs = manifest::read_paths(&[dir]).expect("examples parse");
    let mut checked = 0;
    for doc in &docs {
        let Some(kind) = Kind::of(doc.api_version(), doc.kind()) else {
            continue;
        };
        if let Err(e) = validate_value(kind, &doc.value, None) {
            panic!("{}: {e}", doc.source);
        }
        match kind {
            Kind::NodePool => {
                drop(serde_json::from_value::<NodePool>(doc.value.clone()).expect("typed NodePool"))
            }
            Kind::EC2NodeClass => drop(
                serde_json::from_value::<EC2NodeClass>(doc.value.clone())
                    .expect("typed EC2NodeClass"),
            ),
            Kind::NodeClaim => drop(
                serde_json::from_value::<NodeClaim>(doc.value.clone()).expect("typed NodeClaim"),
            ),
        }
        checked += 1;
    }
    assert!(
        checked >= 10,
        "only {checked} karpenter objects found in examples/"
    );
}
