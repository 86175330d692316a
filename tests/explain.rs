//! `explain pod` through the library: for each constraint that can keep a pod pending, the
//! NodePool or node it failed on, the reason and the fix; and the same reason text the
//! provisioner's `FailedScheduling` event carries.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use karpenter_rs::apis::ec2nodeclass::AMIFamily;
use karpenter_rs::catalog::Catalog;
use karpenter_rs::controllers::provisioning;
use karpenter_rs::explain::{self, PodExplanation, PodVerdict};
use karpenter_rs::manifest;
use karpenter_rs::scheduling::instance_type::{InstanceType, NodeClassSettings};
use karpenter_rs::scheduling::unschedulable::{Failure, Target};
use karpenter_rs::snapshot::{EngineOptions, Snapshot};

const NODECLASS: &str = r#"
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: default}
spec:
  role: KarpenterNodeRole
  amiSelectorTerms: [{alias: al2023@latest}]
  subnetSelectorTerms: [{tags: {karpenter.sh/discovery: c}}]
  securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: c}}]
"#;

/// A NodePool of on-demand m5 instances, with `extra_spec` under `spec` and `extra_template`
/// under the template's spec.
fn nodepool(name: &str, extra_spec: &str, extra_template: &str) -> String {
    format!(
        r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {{name: {name}}}
spec:
{extra_spec}
  template:
    spec:
      nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}
      requirements:
        - {{key: kubernetes.io/arch, operator: In, values: [amd64]}}
        - {{key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}}
        - {{key: karpenter.k8s.aws/instance-family, operator: In, values: [m5]}}
{extra_template}
"#
    )
}

/// A pending pod `default/<name>` (label `app: <name>`) requesting `cpu`.
fn pending(name: &str, cpu: &str, extra_spec: &str) -> String {
    format!(
        r#"
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: default
  labels: {{app: {name}}}
spec:
  containers: [{{name: c, image: pause, resources: {{requests: {{cpu: "{cpu}", memory: 256Mi}}}}}}]
{extra_spec}
status:
  phase: Pending
  conditions: [{{type: PodScheduled, status: "False", reason: Unschedulable}}]
"#
    )
}

/// A Ready m5.large node not managed by Karpenter, in us-east-1a, with `extra_spec` under its
/// spec.
fn node(name: &str, extra_spec: &str) -> String {
    format!(
        r#"
apiVersion: v1
kind: Node
metadata:
  name: {name}
  labels:
    kubernetes.io/hostname: {name}
    kubernetes.io/arch: amd64
    kubernetes.io/os: linux
    topology.kubernetes.io/zone: us-east-1a
    node.kubernetes.io/instance-type: m5.large
spec:
  providerID: aws:///us-east-1a/i-{name}
{extra_spec}
status:
  allocatable: {{cpu: 1930m, memory: 7Gi, pods: "29"}}
  conditions: [{{type: Ready, status: "True"}}]
"#
    )
}

fn cluster(docs: &[String]) -> Snapshot {
    let mut all = vec![NODECLASS.to_string()];
    all.extend_from_slice(docs);
    let text = all.join("\n---\n");
    let parsed = manifest::parse_str(&text, Path::new("test.yaml")).expect("YAML parses");
    manifest::load(&parsed, chrono::Utc::now()).unwrap_or_else(|e| panic!("{e}"))
}

fn explain_pod(docs: &[String], pod: &str) -> PodExplanation {
    let catalog = Catalog::bundled("us-east-1").expect("catalog");
    explain::pod(&cluster(docs), &catalog, &EngineOptions::default(), pod).expect("pod exists")
}

/// The failure recorded for `target`, or a panic showing the whole explanation.
fn failure_on<'e>(e: &'e PodExplanation, target: &Target) -> &'e Failure {
    let PodVerdict::Unschedulable { failure, .. } = &e.verdict else {
        panic!("expected unschedulable:\n{e}");
    };
    failure
        .attempts
        .iter()
        .find(|a| &a.target == target)
        .map(|a| &a.failure)
        .unwrap_or_else(|| panic!("{target} not tried:\n{e}"))
}

fn pool(name: &str) -> Target {
    Target::NodePool(name.into())
}

#[test]
fn explain_pod_names_the_first_failed_constraint_and_the_fix_for_each_cause() {
    let cases: Vec<(&str, Vec<String>, Target, &str, &str)> = vec![
        (
            "taint",
            vec![
                nodepool(
                    "gpu",
                    "",
                    "      taints: [{key: dedicated, value: gpu, effect: NoSchedule}]",
                ),
                pending("app", "1", ""),
            ],
            pool("gpu"),
            "did not tolerate taint dedicated=gpu:NoSchedule",
            "add a toleration for dedicated=gpu:NoSchedule",
        ),
        (
            "requirements",
            vec![
                nodepool(
                    "east-a",
                    "",
                    "        - {key: topology.kubernetes.io/zone, operator: In, values: [us-east-1a]}",
                ),
                pending(
                    "app",
                    "1",
                    "  nodeSelector: {topology.kubernetes.io/zone: us-east-1b}",
                ),
            ],
            pool("east-a"),
            "topology.kubernetes.io/zone",
            "change the pod's nodeSelector/affinity or widen the NodePool's requirements",
        ),
        (
            "limits",
            vec![
                nodepool("capped", "  limits: {cpu: \"1\"}", ""),
                pending("app", "1500m", ""),
            ],
            pool("capped"),
            "exceeds the NodePool's remaining limits (cpu: 1)",
            "raise the NodePool's spec.limits",
        ),
        (
            "no instance type big enough",
            vec![nodepool("m5", "", ""), pending("app", "500", "")],
            pool("m5"),
            "no instance type has enough allocatable cpu for the pod plus DaemonSet overhead (cpu: 500, memory: 256Mi, pods: 1); the largest allowed, m5.metal, has 95690m",
            "lower the pod's cpu request below what m5.metal offers",
        ),
        (
            "topology",
            vec![
                nodepool(
                    "east-a",
                    "",
                    "        - {key: topology.kubernetes.io/zone, operator: In, values: [us-east-1a]}",
                ),
                node("n1", ""),
                r#"
apiVersion: v1
kind: Pod
metadata: {name: first, namespace: default, labels: {app: app}}
spec:
  nodeName: n1
  containers: [{name: c, image: pause, resources: {requests: {cpu: 100m}}}]
status: {phase: Running}
"#
                .to_string(),
                pending(
                    "app",
                    "100m",
                    "  affinity:\n    podAntiAffinity:\n      requiredDuringSchedulingIgnoredDuringExecution:\n        - {labelSelector: {matchLabels: {app: app}}, topologyKey: topology.kubernetes.io/zone}",
                ),
            ],
            pool("east-a"),
            "its topology spread or pod (anti-)affinity constraints cannot be met",
            "relax the pod's topologySpreadConstraints",
        ),
        (
            "existing node tainted",
            vec![
                node(
                    "n1",
                    "  taints: [{key: maintenance, value: \"true\", effect: NoSchedule}]",
                ),
                nodepool(
                    "gpu",
                    "",
                    "      taints: [{key: dedicated, value: gpu, effect: NoSchedule}]",
                ),
                pending("app", "1", ""),
            ],
            Target::Node("n1".into()),
            "did not tolerate taint maintenance=true:NoSchedule",
            "add a toleration for maintenance=true:NoSchedule",
        ),
        (
            "existing node full",
            vec![
                node("n1", ""),
                nodepool(
                    "gpu",
                    "",
                    "      taints: [{key: dedicated, value: gpu, effect: NoSchedule}]",
                ),
                pending("app", "3", ""),
            ],
            Target::Node("n1".into()),
            "not enough free cpu: 1930m left, the pod requests 3",
            "the node is full; a new node is needed",
        ),
        (
            "existing node labels",
            vec![
                node("n1", ""),
                nodepool(
                    "gpu",
                    "",
                    "      taints: [{key: dedicated, value: gpu, effect: NoSchedule}]",
                ),
                pending(
                    "app",
                    "100m",
                    "  nodeSelector: {topology.kubernetes.io/zone: us-east-1b}",
                ),
            ],
            Target::Node("n1".into()),
            "its labels do not satisfy the pod's topology.kubernetes.io/zone",
            "change the pod's nodeSelector/affinity, or label the node",
        ),
    ];
    for (case, docs, target, reason, fix) in cases {
        let e = explain_pod(&docs, "default/app");
        let failure = failure_on(&e, &target);
        assert!(
            failure.to_string().contains(reason),
            "{case}: {failure}\n{e}"
        );
        assert!(
            failure.fix().contains(fix),
            "{case}: {}\n{e}",
            failure.fix()
        );
        let shown = e.to_string();
        assert!(
            shown.starts_with("Pod default/app: cannot be scheduled.\nReason: "),
            "{case}: {shown}"
        );
        assert!(
            shown.contains(&format!("      fix: {fix}")),
            "{case}: {shown}"
        );
    }
}

#[test]
fn explain_pod_says_where_a_schedulable_pod_goes() {
    let e = explain_pod(
        &[nodepool("m5", "", ""), pending("app", "1", "")],
        "default/app",
    );
    let PodVerdict::NewNodeClaim {
        nodepool,
        instance_types,
        pods,
    } = &e.verdict
    else {
        panic!("{e}");
    };
    assert_eq!((nodepool.as_str(), *pods), ("m5", 1));
    assert!(instance_types.iter().all(|t| t.starts_with("m5.")), "{e}");
    let e = explain_pod(&[node("n1", ""), pending("app", "1", "")], "app");
    assert!(
        matches!(&e.verdict, PodVerdict::FitsExisting { node } if node == "n1"),
        "{e}"
    );
    let catalog = Catalog::bundled("us-east-1").expect("catalog");
    let missing = explain::pod(
        &cluster(&[]),
        &catalog,
        &EngineOptions::default(),
        "default/ghost",
    );
    assert!(missing.is_err_and(|m| m.contains("no pod default/ghost in the input")));
}

/// The instance types the provisioner plans with for the EC2NodeClass `default`, as a provider
/// offering the bundled catalog would list them.
fn provider_types(catalog: &Catalog) -> HashMap<String, Arc<Vec<InstanceType>>> {
    [(
        "default".to_string(),
        Arc::new(catalog.instance_types(&NodeClassSettings::for_family(AMIFamily::AL2023))),
    )]
    .into()
}

/// The provisioner's `FailedScheduling` reason and `explain pod`'s are one text.
#[test]
fn the_provisioner_reports_the_reason_explain_gives() {
    let docs = [
        nodepool(
            "gpu",
            "",
            "      taints: [{key: dedicated, value: gpu, effect: NoSchedule}]",
        ),
        nodepool("m5", "", ""),
        pending("app", "500", ""),
    ];
    let snapshot = cluster(&docs);
    let catalog = Catalog::bundled("us-east-1").expect("catalog");
    let types = provider_types(&catalog);
    let plan = provisioning::plan(&snapshot, &types, &EngineOptions::default());
    let e = explain::pod(
        &snapshot,
        &catalog,
        &EngineOptions::default(),
        "default/app",
    )
    .expect("pod exists");
    let PodVerdict::Unschedulable { reason, .. } = &e.verdict else {
        panic!("{e}");
    };
    assert_eq!(
        plan.unschedulable,
        [("default/app".to_string(), reason.clone())]
    );
    assert!(
        reason.contains("nodepool \"gpu\": did not tolerate taint"),
        "{reason}"
    );
    assert!(
        reason.contains("nodepool \"m5\": no instance type has enough allocatable cpu"),
        "{reason}"
    );
}

/// A planned NodeClaim may become any of several instance types in any of several zones: it
/// carries none of them as a label (the launch sets the real ones, and the NodeClaim's own labels
/// win over the launch's), only the labels its requirements pin for everything it may become.
#[test]
fn a_planned_nodeclaim_carries_no_label_its_launch_decides() {
    let docs = [
        nodepool(
            "m5",
            "",
            "        - {key: team, operator: In, values: [blue]}",
        ),
        pending("app", "1", ""),
    ];
    let snapshot = cluster(&docs);
    let types = provider_types(&Catalog::bundled("us-east-1").expect("catalog"));
    let plan = provisioning::plan(&snapshot, &types, &EngineOptions::default());
    let claim = plan.nodeclaims.first().expect("a NodeClaim for the pod");
    let allowed = claim
        .spec
        .requirements
        .iter()
        .find(|r| r.key == karpenter_rs::apis::labels::INSTANCE_TYPE)
        .map_or(0, |r| r.values.len());
    assert!(allowed > 1, "several instance types are allowed: {allowed}");
    let labels = claim.metadata.labels.clone().unwrap_or_default();
    for key in [
        karpenter_rs::apis::labels::INSTANCE_TYPE,
        karpenter_rs::apis::labels::ZONE,
        karpenter_rs::apis::labels::CAPACITY_TYPE,
        "karpenter.k8s.aws/instance-family",
        "kubernetes.io/arch",
    ] {
        assert!(
            !labels.contains_key(key),
            "{key} is the launch's to set: {labels:?}"
        );
    }
    assert_eq!(labels.get("team").map(String::as_str), Some("blue"));
    assert_eq!(
        labels
            .get(karpenter_rs::apis::labels::NODEPOOL)
            .map(String::as_str),
        Some("m5")
    );
}

/// A NodePool that may launch only into a capacity reservation whose instances the round's other
/// NodeClaims took: `explain pod` names the reservation and how to get past it.
#[test]
fn explain_pod_says_when_a_reserved_only_nodepool_has_no_reservation_left() {
    let reserved = r#"
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata:
  name: reserved
  annotations: {karpenter-rs.sh/capacity-reservations-available: "cr-0123456789abcdef0=2"}
spec:
  role: KarpenterNodeRole
  amiSelectorTerms: [{alias: al2023@latest}]
  subnetSelectorTerms: [{tags: {karpenter.sh/discovery: c}}]
  securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: c}}]
status:
  capacityReservations:
    - {id: cr-0123456789abcdef0, instanceType: m5.xlarge, availabilityZone: us-east-1b,
       instanceMatchCriteria: targeted, ownerID: "123456789012", reservationType: default}
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: reserved}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: reserved}
      requirements:
        - {key: karpenter.sh/capacity-type, operator: In, values: [reserved]}
"#;
    // Each needs an m5.xlarge of its own; the reservation has two.
    let docs = [
        reserved.to_string(),
        pending("a", "3", ""),
        pending("b", "3", ""),
        pending("c", "3", ""),
    ];
    let explained: Vec<PodExplanation> = ["a", "b", "c"]
        .iter()
        .map(|p| explain_pod(&docs, &format!("default/{p}")))
        .collect();
    let pending: Vec<&PodExplanation> = explained
        .iter()
        .filter(|e| matches!(e.verdict, PodVerdict::Unschedulable { .. }))
        .collect();
    assert_eq!(pending.len(), 1, "{explained:#?}");
    let failure = failure_on(pending[0], &pool("reserved"));
    assert_eq!(
        failure,
        &Failure::ReservationsFull {
            reservations: "cr-0123456789abcdef0".into()
        }
    );
    assert!(
        failure.to_string().contains("could not be reserved"),
        "{failure}"
    );
    assert!(failure.fix().contains("karpenter.sh/capacity-type"));
}
