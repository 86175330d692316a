//! Accept/reject cases for our CRDs, modelled on upstream Karpenter's own CEL validation tests
//! (`nodepool_validation_cel_test.go`, `nodeclaim_validation_cel_test.go` and the AWS provider's
//! `ec2nodeclass_validation_cel_test.go`) as v1.14 behaves, each run twice: against the real API
//! server with our CRDs installed (a dry-run create, or a real create and dry-run update for
//! transition rules), and through the client-side validator `simulate` and `convert` use. Both
//! must give the expected verdict, and a rejection must carry the expected message.

#[path = "k8s/harness.rs"]
mod harness;

use karpenter_rs::apis::validation::{Kind, validate_value};
use kube::Client;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, PostParams};
use serde_json::{Value, json};

use harness::*;

/// What a case expects: accepted, or rejected with a message containing this text.
enum Verdict {
    Accept,
    Reject(&'static str),
}
use Verdict::{Accept, Reject};

fn nodepool() -> Value {
    json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
        "metadata": {"name": "cel-case"},
        "spec": {"template": {"spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "Exists"}],
        }}},
    })
}

fn nodeclaim() -> Value {
    json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": "cel-case"},
        "spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "Exists"}],
        },
    })
}

fn nodeclass() -> Value {
    json!({
        "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
        "metadata": {"name": "cel-case"},
        "spec": {
            "role": "KarpenterNodeRole",
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "c"}}],
            "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "c"}}],
        },
    })
}

/// `object` with the value at a JSON pointer replaced (intermediate objects created).
fn set(mut object: Value, pointer: &str, value: Value) -> Value {
    let mut at = &mut object;
    let parts: Vec<&str> = pointer.trim_start_matches('/').split('/').collect();
    for (i, part) in parts.iter().enumerate() {
        if i + 1 == parts.len() {
            match at {
                Value::Object(map) => {
                    map.insert((*part).to_string(), value);
                }
                Value::Array(items) => {
                    let index: usize = part.parse().expect("array index");
                    items[index] = value;
                }
                _ => panic!("{pointer}: not a container"),
            }
            break;
        }
        at = match at {
            Value::Object(map) => map.entry(*part).or_insert_with(|| json!({})),
            Value::Array(items) => &mut items[part.parse::<usize>().expect("array index")],
            _ => panic!("{pointer}: not a container"),
        };
    }
    object
}

fn pool(edits: &[(&str, Value)]) -> Value {
    edits
        .iter()
        .fold(nodepool(), |o, (p, v)| set(o, p, v.clone()))
}

fn class(edits: &[(&str, Value)]) -> Value {
    edits
        .iter()
        .fold(nodeclass(), |o, (p, v)| set(o, p, v.clone()))
}

const REQS: &str = "/spec/template/spec/requirements";
const TAINTS: &str = "/spec/template/spec/taints";
const LABELS: &str = "/spec/template/metadata/labels";
const BUDGETS: &str = "/spec/disruption/budgets";

fn req(key: &str, op: &str, values: &[&str]) -> Value {
    json!([{"key": key, "operator": op, "values": values}])
}

fn budget(b: Value) -> Value {
    json!([b])
}

/// Create-time cases: (what, kind, object, verdict).
fn create_cases() -> Vec<(String, Kind, Value, Verdict)> {
    let mut cases: Vec<(String, Kind, Value, Verdict)> = Vec::new();
    let mut np = |what: &str, edits: &[(&str, Value)], v: Verdict| {
        cases.push((what.to_string(), Kind::NodePool, pool(edits), v));
    };
    // Disruption.
    np(
        "negative expireAfter",
        &[("/spec/template/spec/expireAfter", json!("-1s"))],
        Reject("expireAfter"),
    );
    np(
        "expireAfter Never",
        &[("/spec/template/spec/expireAfter", json!("Never"))],
        Accept,
    );
    np(
        "expireAfter 30s",
        &[("/spec/template/spec/expireAfter", json!("30s"))],
        Accept,
    );
    np(
        "negative consolidateAfter",
        &[("/spec/disruption/consolidateAfter", json!("-1s"))],
        Reject("consolidateAfter"),
    );
    np(
        "consolidateAfter Never",
        &[("/spec/disruption/consolidateAfter", json!("Never"))],
        Accept,
    );
    for policy in ["WhenEmpty", "WhenEmptyOrUnderutilized"] {
        np(
            &format!("consolidateAfter 30s with {policy}"),
            &[
                ("/spec/disruption/consolidateAfter", json!("30s")),
                ("/spec/disruption/consolidationPolicy", json!(policy)),
            ],
            Accept,
        );
    }
    np(
        "unknown consolidationPolicy",
        &[("/spec/disruption/consolidationPolicy", json!("WhenIdle"))],
        Reject("Unsupported value"),
    );
    for (what, b, v) in [
        (
            "invalid cron",
            json!({"nodes": "10", "schedule": "*", "duration": "20m"}),
            Reject("schedule"),
        ),
        (
            "cron with four fields",
            json!({"nodes": "10", "schedule": "* * * * ", "duration": "20m"}),
            Reject("schedule"),
        ),
        (
            "negative duration",
            json!({"nodes": "10", "schedule": "* * * * *", "duration": "-20m"}),
            Reject("duration"),
        ),
        (
            "seconds duration",
            json!({"nodes": "10", "schedule": "* * * * *", "duration": "30s"}),
            Reject("duration"),
        ),
        ("negative count", json!({"nodes": "-10"}), Reject("nodes")),
        (
            "negative percent",
            json!({"nodes": "-10%"}),
            Reject("nodes"),
        ),
        (
            "percent over 100",
            json!({"nodes": "1000%"}),
            Reject("nodes"),
        ),
        (
            "cron without duration",
            json!({"nodes": "10", "schedule": "* * * * *"}),
            Reject("'schedule' must be set with 'duration'"),
        ),
        (
            "duration without cron",
            json!({"nodes": "10", "duration": "20m"}),
            Reject("'schedule' must be set with 'duration'"),
        ),
        (
            "cron and duration",
            json!({"nodes": "10", "schedule": "* * * * *", "duration": "20m"}),
            Accept,
        ),
        (
            "hours and minutes",
            json!({"nodes": "10", "schedule": "* * * * *", "duration": "2h20m"}),
            Accept,
        ),
        ("neither cron nor duration", json!({"nodes": "10"}), Accept),
        (
            "special cron",
            json!({"nodes": "10", "schedule": "@annually", "duration": "20m"}),
            Accept,
        ),
        (
            "reasons",
            json!({"nodes": "10", "reasons": ["Drifted", "Underutilized", "Empty"]}),
            Accept,
        ),
        (
            "unknown reason",
            json!({"nodes": "10", "reasons": ["invalid"]}),
            Reject("Unsupported value"),
        ),
        (
            "expired is no budget reason",
            json!({"nodes": "10", "reasons": ["expired"]}),
            Reject("Unsupported value"),
        ),
        (
            "empty reason",
            json!({"nodes": "10", "reasons": [""]}),
            Reject("Unsupported value"),
        ),
    ] {
        np(
            &format!("budget: {what}"),
            &[
                ("/spec/disruption/consolidateAfter", json!("0s")),
                (BUDGETS, budget(b)),
            ],
            v,
        );
    }
    np(
        "one bad budget among good ones",
        &[
            ("/spec/disruption/consolidateAfter", json!("0s")),
            (
                BUDGETS,
                json!([{"nodes": "10", "schedule": "@annually", "duration": "20m"}, {"nodes": "10", "schedule": "*", "duration": "20m"}]),
            ),
        ],
        Reject("schedule"),
    );
    // Taints.
    np(
        "valid taints",
        &[(
            TAINTS,
            json!([
                {"key": "a", "value": "b", "effect": "NoSchedule"},
                {"key": "c", "value": "d", "effect": "NoExecute"},
                {"key": "Test", "value": "f", "effect": "PreferNoSchedule"},
                {"key": "test.com/Test", "value": "f", "effect": "PreferNoSchedule"},
                {"key": "key-only", "effect": "NoExecute"},
                {"key": "a", "effect": "NoExecute"},
            ]),
        )],
        Accept,
    );
    for key in [
        "test.com.com}",
        "Test.com/test",
        "test/test/test",
        "test/",
        "/test",
    ] {
        np(
            &format!("taint key {key:?}"),
            &[(TAINTS, json!([{"key": key, "effect": "NoSchedule"}]))],
            Reject("should match"),
        );
    }
    np(
        "taint without key",
        &[(TAINTS, json!([{"effect": "NoSchedule"}]))],
        Reject("key"),
    );
    np(
        "taint value ???",
        &[(
            TAINTS,
            json!([{"key": "k", "value": "???", "effect": "NoSchedule"}]),
        )],
        Reject("should match"),
    );
    np(
        "taint effect ???",
        &[(TAINTS, json!([{"key": "k", "effect": "???"}]))],
        Reject("Unsupported value"),
    );
    // Requirements.
    np(
        "valid requirement keys",
        &[(
            REQS,
            json!([
                {"key": "Test", "operator": "Exists"},
                {"key": "test.com/Test", "operator": "Exists"},
                {"key": "test.com.com/test", "operator": "Exists"},
                {"key": "key-only", "operator": "Exists"},
            ]),
        )],
        Accept,
    );
    for key in [
        "test.com.com}",
        "Test.com/test",
        "test/test/test",
        "test/",
        "/test",
    ] {
        np(
            &format!("requirement key {key:?}"),
            &[(REQS, req(key, "Exists", &[]))],
            Reject("should match"),
        );
    }
    np(
        "requiring karpenter.sh/nodepool",
        &[(REQS, req("karpenter.sh/nodepool", "In", &["a"]))],
        Reject(r#"label "karpenter.sh/nodepool" is restricted"#),
    );
    np(
        "requiring kubernetes.io/hostname",
        &[(REQS, req("kubernetes.io/hostname", "In", &["a"]))],
        Reject(r#"label "kubernetes.io/hostname" is restricted"#),
    );
    np(
        "karpenter.sh domain",
        &[(REQS, req("karpenter.sh/test", "In", &["a"]))],
        Reject(r#"label domain "karpenter.sh" is restricted"#),
    );
    np(
        "karpenter.k8s.aws domain",
        &[(REQS, req("karpenter.k8s.aws/test", "In", &["a"]))],
        Reject(r#"label domain "karpenter.k8s.aws" is restricted"#),
    );
    for key in [
        "kubernetes.io/test",
        "node-role.kubernetes.io/worker",
        "subdomain.k8s.io/test",
        "node.kubernetes.io/instance-type",
        "topology.kubernetes.io/zone",
        "karpenter.sh/capacity-type",
        "karpenter.k8s.aws/instance-family",
        "karpenter.k8s.aws/instance-tenancy",
        "karpenter.k8s.aws/capacity-reservation-id",
        "karpenter.k8s.aws/placement-group-id",
    ] {
        np(
            &format!("requirement key {key}"),
            &[(REQS, req(key, "In", &["test"]))],
            Accept,
        );
    }
    np(
        "supported operators",
        &[(
            REQS,
            json!([
                {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["test"]},
                {"key": "topology.kubernetes.io/zone", "operator": "Gt", "values": ["1"]},
                {"key": "topology.kubernetes.io/zone", "operator": "Lt", "values": ["1"]},
                {"key": "topology.kubernetes.io/zone", "operator": "Gte", "values": ["1"]},
                {"key": "topology.kubernetes.io/zone", "operator": "Lte", "values": ["1"]},
                {"key": "topology.kubernetes.io/zone", "operator": "NotIn"},
                {"key": "topology.kubernetes.io/zone", "operator": "Exists"},
                {"key": "topology.kubernetes.io/zone", "operator": "DoesNotExist"},
            ]),
        )],
        Accept,
    );
    np(
        "unknown operator",
        &[(
            REQS,
            req("topology.kubernetes.io/zone", "unknown", &["test"]),
        )],
        Reject("Unsupported value"),
    );
    np(
        "In without values",
        &[(REQS, req("topology.kubernetes.io/zone", "In", &[]))],
        Reject("requirements with operator 'In' must have a value defined"),
    );
    np("empty requirements", &[(REQS, json!([]))], Accept);
    for op in ["Gt", "Lt", "Gte", "Lte"] {
        for values in [&[][..], &["1", "2"][..], &["a"][..], &["-1"][..]] {
            np(
                &format!("{op} {values:?}"),
                &[(REQS, req("topology.kubernetes.io/zone", op, values))],
                Reject("must have a single positive integer value"),
            );
        }
    }
    for (what, min, v) in [
        ("negative", -1, Reject("minValues")),
        ("zero", 0, Reject("minValues")),
        ("51", 51, Reject("minValues")),
    ] {
        np(
            &format!("minValues {what}"),
            &[(
                REQS,
                json!([{"key": "node.kubernetes.io/instance-type", "operator": "Exists", "minValues": min}]),
            )],
            v,
        );
    }
    let ninety: Vec<String> = (0..90).map(|i| format!("instance{i}")).collect();
    np(
        "90 values without minValues",
        &[(
            REQS,
            json!([{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ninety}]),
        )],
        Accept,
    );
    np(
        "minValues above the values given",
        &[(
            REQS,
            json!([{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["a"], "minValues": 2}]),
        )],
        Reject(
            "requirements with 'minValues' must have at least that many values specified in the 'values' field",
        ),
    );
    // Labels.
    np(
        "unrecognized label",
        &[(LABELS, json!({"foo": "bar"}))],
        Accept,
    );
    np(
        "label karpenter.sh/nodepool",
        &[(LABELS, json!({"karpenter.sh/nodepool": "x"}))],
        Reject(r#"label "karpenter.sh/nodepool" is restricted"#),
    );
    np(
        "label kubernetes.io/hostname",
        &[(LABELS, json!({"kubernetes.io/hostname": "x"}))],
        Reject(r#"label "kubernetes.io/hostname" is restricted"#),
    );
    np(
        "label value with a slash",
        &[(LABELS, json!({"foo": "/ is not allowed"}))],
        Reject("should match"),
    );
    np(
        "label value of 64 characters",
        &[(LABELS, json!({"foo": "x".repeat(64)}))],
        Reject("63"),
    );
    np(
        "label in karpenter.sh",
        &[(LABELS, json!({"karpenter.sh/unknown": "x"}))],
        Reject(r#"label domain "karpenter.sh" is restricted"#),
    );
    np(
        "label in karpenter.k8s.aws",
        &[(LABELS, json!({"karpenter.k8s.aws/unknown": "x"}))],
        Reject(r#"label domain "karpenter.k8s.aws" is restricted"#),
    );
    np(
        "kOps labels",
        &[(
            LABELS,
            json!({"kops.k8s.io/instancegroup": "karpenter-nodes", "kops.k8s.io/gpu": "1"}),
        )],
        Accept,
    );
    np(
        "node-role label",
        &[(LABELS, json!({"node-role.kubernetes.io/worker": ""}))],
        Accept,
    );
    np(
        "kubernetes.io label",
        &[(LABELS, json!({"kubernetes.io/role": "worker"}))],
        Accept,
    );
    np(
        "AWS well-known label",
        &[(
            LABELS,
            json!({"karpenter.k8s.aws/capacity-reservation-type": "default"}),
        )],
        Accept,
    );
    // terminationGracePeriod.
    np(
        "positive terminationGracePeriod",
        &[("/spec/template/spec/terminationGracePeriod", json!("300s"))],
        Accept,
    );
    np(
        "negative terminationGracePeriod",
        &[("/spec/template/spec/terminationGracePeriod", json!("-30s"))],
        Reject("terminationGracePeriod"),
    );
    // nodeClassRef.
    for field in ["group", "kind", "name"] {
        np(
            &format!("empty nodeClassRef.{field}"),
            &[(
                &format!("/spec/template/spec/nodeClassRef/{field}"),
                json!(""),
            )],
            Reject("may not be empty"),
        );
    }
    // Weight and static NodePools.
    np(
        "weight 0",
        &[("/spec/weight", json!(0))],
        Reject("spec.weight"),
    );
    np(
        "weight 101",
        &[("/spec/weight", json!(101))],
        Reject("spec.weight"),
    );
    np("static pool", &[("/spec/replicas", json!(3))], Accept);
    np(
        "static pool with a node limit",
        &[
            ("/spec/replicas", json!(3)),
            ("/spec/limits", json!({"nodes": 5})),
        ],
        Accept,
    );
    np(
        "static pool with a cpu limit",
        &[
            ("/spec/replicas", json!(3)),
            ("/spec/limits", json!({"cpu": 5})),
        ],
        Reject("only 'limits.nodes' is supported on static NodePools"),
    );
    np(
        "static pool with a weight",
        &[("/spec/replicas", json!(3)), ("/spec/weight", json!(5))],
        Reject("'weight' is not supported on static NodePools"),
    );
    np(
        "negative replicas",
        &[("/spec/replicas", json!(-1))],
        Reject("spec.replicas"),
    );

    // NodeClaims.
    cases.push(("NodeClaim".into(), Kind::NodeClaim, nodeclaim(), Accept));
    cases.push((
        "NodeClaim requiring its NodePool".into(),
        Kind::NodeClaim,
        set(
            nodeclaim(),
            "/spec/requirements",
            req("karpenter.sh/nodepool", "In", &["default"]),
        ),
        Accept,
    ));
    cases.push((
        "NodeClaim requiring a hostname".into(),
        Kind::NodeClaim,
        set(
            nodeclaim(),
            "/spec/requirements",
            req("kubernetes.io/hostname", "In", &["a"]),
        ),
        Reject(r#"label "kubernetes.io/hostname" is restricted"#),
    ));

    // EC2NodeClasses.
    let mut nc = |what: &str, edits: &[(&str, Value)], v: Verdict| {
        cases.push((what.to_string(), Kind::EC2NodeClass, class(edits), v));
    };
    nc("EC2NodeClass", &[], Accept);
    nc(
        "unknown alias family",
        &[(
            "/spec/amiSelectorTerms",
            json!([{"alias": "ubuntu@latest"}]),
        )],
        Reject("family is not supported"),
    );
    nc(
        "alias beside another term",
        &[(
            "/spec/amiSelectorTerms",
            json!([{"alias": "al2023@latest"}, {"id": "ami-1"}]),
        )],
        Reject("'alias' is mutually exclusive"),
    );
    nc(
        "empty subnet term",
        &[("/spec/subnetSelectorTerms", json!([{}]))],
        Reject("expected at least one"),
    );
    nc(
        "restricted tag",
        &[("/spec/tags", json!({"karpenter.sh/nodepool": "x"}))],
        Reject("tag contains a restricted tag matching karpenter.sh/nodepool"),
    );
    nc(
        "role and instance profile",
        &[("/spec/instanceProfile", json!("profile"))],
        Reject("role"),
    );
    nc(
        "empty connectionTracking",
        &[("/spec/connectionTracking", json!({}))],
        Reject(
            "at least one of tcpEstablishedTimeout, udpStreamTimeout, or udpTimeout must be set",
        ),
    );
    nc(
        "empty placementGroupSelector",
        &[("/spec/placementGroupSelector", json!({}))],
        Reject("expected at least one, got none, ['name', 'id']"),
    );
    nc(
        "placement group by name and id",
        &[(
            "/spec/placementGroupSelector",
            json!({"name": "a", "id": "pg-1"}),
        )],
        Reject("'name' and 'id' are mutually exclusive"),
    );
    nc(
        "placement group by name",
        &[("/spec/placementGroupSelector", json!({"name": "a"}))],
        Accept,
    );
    nc(
        "duplicate network interface",
        &[(
            "/spec/networkInterfaces",
            json!([
                {"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "interface"},
                {"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "efa-only"},
            ]),
        )],
        Reject("networkInterfaces must not have duplicate networkCardIndex and deviceIndex pairs"),
    );
    nc(
        "network interfaces without a primary",
        &[(
            "/spec/networkInterfaces",
            json!([{"networkCardIndex": 1, "deviceIndex": 0, "interfaceType": "efa-only"}]),
        )],
        Reject("networkInterfaces must include a primary interface with interfaceType='interface'"),
    );
    nc(
        "hop limit 65",
        &[(
            "/spec/metadataOptions",
            json!({"httpPutResponseHopLimit": 65}),
        )],
        Reject("httpPutResponseHopLimit"),
    );
    cases
}

/// Our client-side validator's verdict: `None` when accepted, else every problem joined.
fn ours(kind: Kind, object: &Value, old: Option<&Value>) -> Option<String> {
    validate_value(kind, object, old).err().map(|e| {
        e.problems
            .iter()
            .map(|p| format!("{}: {}", p.path, p.message))
            .collect::<Vec<_>>()
            .join("; ")
    })
}

fn resource(kind: Kind) -> ApiResource {
    let (group, k, plural) = match kind {
        Kind::NodePool => ("karpenter.sh", "NodePool", "nodepools"),
        Kind::NodeClaim => ("karpenter.sh", "NodeClaim", "nodeclaims"),
        Kind::EC2NodeClass => ("karpenter.k8s.aws", "EC2NodeClass", "ec2nodeclasses"),
    };
    ApiResource {
        group: group.into(),
        version: "v1".into(),
        api_version: format!("{group}/v1"),
        kind: k.into(),
        plural: plural.into(),
    }
}

/// The API server's verdict on a dry-run create: `None` when accepted, else its message.
async fn theirs(client: &Client, kind: Kind, object: &Value) -> Option<String> {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource(kind));
    let object: DynamicObject = serde_json::from_value(object.clone()).expect("object");
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    api.create(&dry_run, &object)
        .await
        .err()
        .map(|e| e.to_string())
}

/// Checks one verdict; returns a line describing the mismatch, if any.
fn check(what: &str, side: &str, got: Option<String>, want: &Verdict) -> Option<String> {
    match (want, got) {
        (Accept, None) => None,
        (Accept, Some(message)) => Some(format!("{what}: {side} rejected it: {message}")),
        (Reject(text), None) => Some(format!("{what}: {side} accepted it; expected {text:?}")),
        (Reject(text), Some(message)) if message.contains(text) => None,
        (Reject(text), Some(message)) => Some(format!(
            "{what}: {side} rejected it without {text:?}: {message}"
        )),
    }
}

#[test]
fn upstreams_cases_get_the_same_verdict_from_the_api_server_and_from_us() {
    serial(async {
        let client = client().await;
        let mut mismatches = Vec::new();
        let cases = create_cases();
        for (what, kind, object, want) in &cases {
            mismatches.extend(check(
                what,
                "our validator",
                ours(*kind, object, None),
                want,
            ));
            mismatches.extend(check(
                what,
                "the API server",
                theirs(&client, *kind, object).await,
                want,
            ));
        }
        assert!(
            mismatches.is_empty(),
            "{} of {} cases disagree:\n{}",
            mismatches.len(),
            cases.len() * 2,
            mismatches.join("\n")
        );
    });
}

#[test]
fn transition_rules_hold_on_the_api_server_and_in_our_validator() {
    serial(async {
        let client = client().await;
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource(Kind::NodePool));
        let dynamic = pool(&[]);
        let fixed = pool(&[("/spec/replicas", json!(3))]);
        let cases = [
            (
                "dynamic to static",
                &dynamic,
                pool(&[("/spec/replicas", json!(3))]),
                Reject(
                    "Cannot transition NodePool between static (replicas set) and dynamic (replicas unset) provisioning modes",
                ),
            ),
            (
                "static to dynamic",
                &fixed,
                pool(&[]),
                Reject(
                    "Cannot transition NodePool between static (replicas set) and dynamic (replicas unset) provisioning modes",
                ),
            ),
            (
                "static scaled",
                &fixed,
                pool(&[("/spec/replicas", json!(5))]),
                Accept,
            ),
            (
                "nodeClassRef renamed",
                &dynamic,
                pool(&[("/spec/template/spec/nodeClassRef/name", json!("other"))]),
                Accept,
            ),
            (
                "nodeClassRef regrouped",
                &dynamic,
                pool(&[(
                    "/spec/template/spec/nodeClassRef/group",
                    json!("karpenter.test.sh"),
                )]),
                Reject("nodeClassRef.group is immutable"),
            ),
            (
                "nodeClassRef rekinded",
                &dynamic,
                pool(&[(
                    "/spec/template/spec/nodeClassRef/kind",
                    json!("TestNodeClass"),
                )]),
                Reject("nodeClassRef.kind is immutable"),
            ),
        ];
        let mut mismatches = Vec::new();
        for (what, old, new, want) in &cases {
            let _ = api.delete("cel-case", &DeleteParams::default()).await;
            wait_for("the previous case's NodePool to go", || async {
                api.get_opt("cel-case")
                    .await
                    .ok()
                    .flatten()
                    .is_none()
                    .then_some(())
            })
            .await;
            let created = api
                .create(
                    &PostParams::default(),
                    &serde_json::from_value((*old).clone()).expect("object"),
                )
                .await
                .expect("create the old NodePool");
            let mut new = new.clone();
            new["metadata"]["resourceVersion"] = json!(created.metadata.resource_version);
            let dry_run = PostParams {
                dry_run: true,
                ..PostParams::default()
            };
            let theirs = api
                .replace(
                    "cel-case",
                    &dry_run,
                    &serde_json::from_value(new.clone()).expect("object"),
                )
                .await
                .err()
                .map(|e| e.to_string());
            mismatches.extend(check(what, "the API server", theirs, want));
            mismatches.extend(check(
                what,
                "our validator",
                ours(Kind::NodePool, &new, Some(old)),
                want,
            ));
        }
        let _ = api.delete("cel-case", &DeleteParams::default()).await;
        assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
    });
}
