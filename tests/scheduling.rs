//! Scenario tests for provisioning through `simulate`'s library entry: manifests in, the
//! NodeClaims and placements the controller would produce out, on the bundled us-east-1 catalog.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use karpenter_rs::apis::ec2nodeclass::AMIFamily;
use karpenter_rs::catalog::Catalog;
use karpenter_rs::manifest;
use karpenter_rs::scheduling::instance_type::NodeClassSettings;
use karpenter_rs::scheduling::patterns::median;
use karpenter_rs::scheduling::scheduler::Options;
use karpenter_rs::simulate::{self, Report};
use karpenter_rs::snapshot::EngineOptions;

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

fn nodepool(name: &str, extra_spec: &str, requirements: &str) -> String {
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
{requirements}
"#
    )
}

fn deployment(name: &str, replicas: u32, cpu: &str, extra_pod_spec: &str) -> String {
    format!(
        r#"
apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec:
      containers:
        - name: c
          image: pause
          resources: {{requests: {{cpu: "{cpu}", memory: 256Mi}}}}
{extra_pod_spec}
"#
    )
}

fn run_with(docs: &[String], options: Options) -> Report {
    let text = docs.join("\n---\n");
    let parsed = manifest::parse_str(&text, Path::new("test.yaml")).expect("YAML parses");
    let c = manifest::load(&parsed, chrono::Utc::now()).unwrap_or_else(|e| panic!("{e}"));
    let catalog = Catalog::bundled("us-east-1").expect("catalog");
    simulate::simulate(
        &c,
        &catalog,
        &EngineOptions {
            scheduler: options,
            ..Default::default()
        },
    )
}

fn run(docs: &[String]) -> Report {
    run_with(docs, Options::default())
}

fn pods_per_zone(report: &Report) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for c in &report.nodeclaims {
        *out.entry(c.zone.clone()).or_default() += c.pods.len();
    }
    out
}

#[test]
fn pods_with_dra_claims_are_reported_and_not_provisioned_for() {
    let report = run(&[
        NODECLASS.into(),
        nodepool("default", "", ""),
        deployment(
            "gpu",
            2,
            "1",
            "      resourceClaims:\n        - {name: gpu, resourceClaimTemplateName: single-gpu}",
        ),
        deployment("web", 2, "1", ""),
    ]);
    let dra: Vec<_> = report
        .unschedulable
        .iter()
        .filter(|u| u.pod.contains("gpu-"))
        .collect();
    assert_eq!(dra.len(), 2, "{:#?}", report.unschedulable);
    for u in dra {
        assert!(
            u.reason
                .contains("dynamic resource allocation claims (gpu)"),
            "{}",
            u.reason
        );
    }
    let placed: Vec<&String> = report.nodeclaims.iter().flat_map(|c| &c.pods).collect();
    assert_eq!(placed.len(), 2);
    assert!(placed.iter().all(|p| p.contains("web-")), "{placed:?}");
}

#[test]
fn a_spread_across_three_zones_is_balanced() {
    let report = run(&[
        NODECLASS.into(),
        nodepool(
            "default",
            "",
            "        - {key: topology.kubernetes.io/zone, operator: In, values: [us-east-1a, us-east-1b, us-east-1c]}",
        ),
        deployment(
            "web",
            9,
            "500m",
            "      topologySpreadConstraints:\n        - {maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: DoNotSchedule, labelSelector: {matchLabels: {app: web}}}",
        ),
    ]);
    assert!(
        report.unschedulable.is_empty(),
        "{:#?}",
        report.unschedulable
    );
    let zones = pods_per_zone(&report);
    assert_eq!(
        zones,
        BTreeMap::from([
            ("us-east-1a".to_string(), 3),
            ("us-east-1b".to_string(), 3),
            ("us-east-1c".to_string(), 3)
        ])
    );
}

#[test]
fn hostname_anti_affinity_yields_one_node_per_pod() {
    let report = run(&[
        NODECLASS.into(),
        nodepool("default", "", ""),
        deployment(
            "db",
            5,
            "100m",
            "      affinity:\n        podAntiAffinity:\n          requiredDuringSchedulingIgnoredDuringExecution:\n            - {topologyKey: kubernetes.io/hostname, labelSelector: {matchLabels: {app: db}}}",
        ),
    ]);
    assert!(
        report.unschedulable.is_empty(),
        "{:#?}",
        report.unschedulable
    );
    assert_eq!(report.nodeclaims.len(), 5);
    assert!(report.nodeclaims.iter().all(|c| c.pods.len() == 1));
}

#[test]
fn limits_leave_the_excess_pods_unschedulable_with_a_limits_reason() {
    let report = run(&[
        NODECLASS.into(),
        nodepool(
            "small",
            "  limits: {cpu: 4}",
            "        - {key: node.kubernetes.io/instance-type, operator: In, values: [m5.large]}",
        ),
        deployment("big", 3, "1500m", ""),
    ]);
    assert_eq!(report.nodeclaims.len(), 2, "{:#?}", report.nodeclaims);
    assert_eq!(report.unschedulable.len(), 1);
    assert!(
        report.unschedulable[0].reason.contains("limits"),
        "{}",
        report.unschedulable[0].reason
    );
}

#[test]
fn the_nodes_limit_caps_nodeclaims() {
    let report = run(&[
        NODECLASS.into(),
        nodepool(
            "capped",
            "  limits: {nodes: 2}",
            "        - {key: node.kubernetes.io/instance-type, operator: In, values: [m5.large]}",
        ),
        deployment("big", 3, "1500m", ""),
    ]);
    assert_eq!(report.nodeclaims.len(), 2);
    assert!(
        report.unschedulable[0]
            .reason
            .contains("node limits have been exhausted")
    );
}

#[test]
fn a_limit_of_zero_stops_the_pool() {
    for limits in [
        "  limits: {nodes: \"0\"}",
        "  limits: {cpu: \"0\"}",
        "  limits: {memory: 0Gi}",
    ] {
        let report = run(&[
            NODECLASS.into(),
            nodepool("stopped", limits, ""),
            deployment("app", 2, "1", ""),
        ]);
        assert!(
            report.nodeclaims.is_empty(),
            "{limits}: {:#?}",
            report.nodeclaims
        );
        assert_eq!(report.unschedulable.len(), 2, "{limits}");
    }
}

#[test]
fn a_node_that_reports_only_allocatable_counts_against_the_limits() {
    let node = r#"
apiVersion: v1
kind: Node
metadata:
  name: ip-10-0-1-1.ec2.internal
  labels:
    kubernetes.io/hostname: ip-10-0-1-1.ec2.internal
    kubernetes.io/arch: amd64
    topology.kubernetes.io/zone: us-east-1a
    node.kubernetes.io/instance-type: m5.xlarge
    karpenter.sh/capacity-type: on-demand
    karpenter.sh/nodepool: capped
spec: {unschedulable: true}
status:
  allocatable: {cpu: 3920m, memory: 15Gi, pods: "58"}
  conditions: [{type: Ready, status: "True"}]
"#;
    // The cordoned node takes no pods, but its 3.92 CPUs count against the limit of 4: the
    // pod gets no new node either.
    let report = run(&[
        NODECLASS.into(),
        nodepool("capped", "  limits: {cpu: \"4\"}", ""),
        node.into(),
        deployment("big", 1, "3500m", ""),
    ]);
    assert!(report.nodeclaims.is_empty(), "{:#?}", report.nodeclaims);
    assert_eq!(report.unschedulable.len(), 1);
}

#[test]
fn the_higher_weight_nodepool_wins_even_when_pricier() {
    let report = run(&[
        NODECLASS.into(),
        nodepool(
            "cheap",
            "  weight: 1",
            "        - {key: karpenter.k8s.aws/instance-category, operator: In, values: [t]}",
        ),
        nodepool(
            "preferred",
            "  weight: 50",
            "        - {key: karpenter.k8s.aws/instance-category, operator: In, values: [r]}",
        ),
        deployment("app", 1, "500m", ""),
    ]);
    assert_eq!(report.nodeclaims.len(), 1);
    assert_eq!(report.nodeclaims[0].node_pool, "preferred");
    assert!(report.nodeclaims[0].instance_type.starts_with('r'));
}

#[test]
fn startup_taints_need_no_toleration_but_taints_do() {
    let tainted = nodepool(
        "tainted",
        "",
        "      startupTaints: [{key: example.com/agent-not-ready, effect: NoSchedule}]",
    );
    let report = run(&[NODECLASS.into(), tainted, deployment("app", 1, "500m", "")]);
    assert!(
        report.unschedulable.is_empty(),
        "{:#?}",
        report.unschedulable
    );
    let dedicated = nodepool(
        "dedicated",
        "",
        "      taints: [{key: dedicated, value: gpu, effect: NoSchedule}]",
    );
    let report = run(&[
        NODECLASS.into(),
        dedicated.clone(),
        deployment("app", 1, "500m", ""),
    ]);
    assert_eq!(report.nodeclaims.len(), 0);
    assert!(
        report.unschedulable[0]
            .reason
            .contains("did not tolerate taint dedicated=gpu")
    );
    let tolerating = deployment(
        "app",
        1,
        "500m",
        "      tolerations: [{key: dedicated, operator: Equal, value: gpu, effect: NoSchedule}]",
    );
    assert_eq!(
        run(&[NODECLASS.into(), dedicated, tolerating])
            .nodeclaims
            .len(),
        1
    );
}

#[test]
fn an_unschedulable_pod_hears_from_every_nodepool_in_order_tainted_ones_included() {
    let tainted = |name: &str| {
        nodepool(
            name,
            "",
            &format!("      taints: [{{key: team, value: {name}, effect: NoSchedule}}]"),
        )
    };
    let small = nodepool(
        "b-small",
        "",
        "        - {key: node.kubernetes.io/instance-type, operator: In, values: [m5.large]}",
    );
    let report = run(&[
        NODECLASS.into(),
        tainted("a-blue"),
        small,
        tainted("c-red"),
        deployment("app", 1, "4", ""),
    ]);
    assert_eq!(report.nodeclaims.len(), 0);
    let reason = &report.unschedulable[0].reason;
    // NodePools of equal weight are tried by name, descending.
    let red = reason.find("nodepool \"c-red\": did not tolerate taint team=c-red:NoSchedule");
    let small = reason.find("nodepool \"b-small\": no instance type has enough allocatable cpu");
    let blue = reason.find("nodepool \"a-blue\": did not tolerate taint team=a-blue:NoSchedule");
    assert!(red.is_some() && red < small && small < blue, "{reason}");
}

#[test]
fn a_pod_too_large_is_told_the_resource_no_instance_type_has_enough_of() {
    // 2Gi of memory does not fit the cheapest types, but some type has it: the blocker is the
    // ephemeral storage no type offers.
    let pod = r#"
apiVersion: v1
kind: Pod
metadata: {name: scratch}
spec:
  containers:
    - name: c
      image: pause
      resources: {requests: {cpu: 100m, memory: 2Gi, ephemeral-storage: 1000Ti}}
"#;
    let report = run(&[NODECLASS.into(), nodepool("default", "", ""), pod.into()]);
    assert_eq!(report.nodeclaims.len(), 0);
    let reason = &report.unschedulable[0].reason;
    assert!(
        reason.contains("no instance type has enough allocatable ephemeral-storage"),
        "{reason}"
    );
}

#[test]
fn selectors_on_restricted_labels_are_not_provisioned_for() {
    let report = run(&[
        NODECLASS.into(),
        nodepool("default", "", ""),
        deployment(
            "pinned",
            1,
            "100m",
            "      nodeSelector: {kubernetes.io/hostname: ip-10-0-0-1}",
        ),
        deployment(
            "reserved",
            1,
            "100m",
            "      nodeSelector: {karpenter.sh/custom: x}",
        ),
    ]);
    assert!(report.nodeclaims.is_empty(), "{:#?}", report.nodeclaims);
    assert_eq!(report.unschedulable.len(), 2);
    assert!(
        report
            .unschedulable
            .iter()
            .all(|u| u.reason.contains("restricted")),
        "{:#?}",
        report.unschedulable
    );
    // Custom labels set by the template are fine.
    let labelled = r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: team}
spec:
  template:
    metadata: {labels: {example.com/team: blue}}
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      requirements: [{key: kubernetes.io/arch, operator: In, values: [amd64]}]
"#;
    let report = run(&[
        NODECLASS.into(),
        labelled.into(),
        deployment(
            "team",
            1,
            "100m",
            "      nodeSelector: {example.com/team: blue}",
        ),
    ]);
    assert_eq!(report.nodeclaims.len(), 1, "{:#?}", report.unschedulable);
}

#[test]
fn a_bound_volume_pins_the_pod_to_its_zone() {
    let volume = r#"
apiVersion: v1
kind: PersistentVolume
metadata: {name: data-1}
spec:
  capacity: {storage: 10Gi}
  accessModes: [ReadWriteOnce]
  csi: {driver: ebs.csi.aws.com, volumeHandle: vol-1}
  nodeAffinity:
    required:
      nodeSelectorTerms:
        - matchExpressions: [{key: topology.kubernetes.io/zone, operator: In, values: [us-east-1d]}]
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: data, namespace: default}
spec:
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 10Gi}}
  volumeName: data-1
---
apiVersion: v1
kind: Pod
metadata: {name: db, namespace: default}
spec:
  containers: [{name: c, image: pause, resources: {requests: {cpu: 500m}}}]
  volumes: [{name: data, persistentVolumeClaim: {claimName: data}}]
"#;
    let report = run(&[NODECLASS.into(), nodepool("default", "", ""), volume.into()]);
    assert_eq!(report.nodeclaims.len(), 1, "{:#?}", report.unschedulable);
    assert_eq!(report.nodeclaims[0].zone, "us-east-1d");
}

#[test]
fn a_storage_class_topology_restricts_the_zone() {
    let volume = r#"
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: zonal}
provisioner: ebs.csi.aws.com
volumeBindingMode: WaitForFirstConsumer
allowedTopologies:
  - matchLabelExpressions: [{key: topology.kubernetes.io/zone, values: [us-east-1c]}]
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: data, namespace: default}
spec:
  accessModes: [ReadWriteOnce]
  storageClassName: zonal
  resources: {requests: {storage: 10Gi}}
---
apiVersion: v1
kind: Pod
metadata: {name: db, namespace: default}
spec:
  containers: [{name: c, image: pause, resources: {requests: {cpu: 500m}}}]
  volumes: [{name: data, persistentVolumeClaim: {claimName: data}}]
"#;
    let report = run(&[NODECLASS.into(), nodepool("default", "", ""), volume.into()]);
    assert_eq!(report.nodeclaims.len(), 1, "{:#?}", report.unschedulable);
    assert_eq!(report.nodeclaims[0].zone, "us-east-1c");
}

#[test]
fn daemonset_overhead_that_fits_no_instance_type_yields_no_nodeclaim() {
    let daemonset = r#"
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: greedy, namespace: kube-system}
spec:
  selector: {matchLabels: {app: greedy}}
  template:
    metadata: {labels: {app: greedy}}
    spec:
      containers: [{name: c, image: pause, resources: {requests: {cpu: "3", memory: 1Gi}}}]
"#;
    let report = run(&[
        NODECLASS.into(),
        nodepool(
            "small",
            "",
            "        - {key: node.kubernetes.io/instance-type, operator: In, values: [m5.large, c5.large]}",
        ),
        daemonset.into(),
        deployment("app", 1, "100m", ""),
    ]);
    assert!(report.nodeclaims.is_empty());
    let reason = &report.unschedulable[0].reason;
    assert!(
        reason.contains("DaemonSet overhead") && reason.contains("cpu"),
        "{reason}"
    );
}

#[test]
fn daemonset_overhead_is_added_to_new_nodeclaims() {
    let daemonset = r#"
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent, namespace: kube-system}
spec:
  selector: {matchLabels: {app: agent}}
  template:
    metadata: {labels: {app: agent}}
    spec:
      containers: [{name: c, image: pause, resources: {requests: {cpu: 200m, memory: 128Mi}}}]
"#;
    let report = run(&[
        NODECLASS.into(),
        nodepool("default", "", ""),
        daemonset.into(),
        deployment("app", 1, "1", ""),
    ]);
    assert_eq!(report.nodeclaims[0].requests["cpu"], "1200m");
}

#[test]
fn existing_capacity_is_used_before_a_new_node() {
    let node = r#"
apiVersion: v1
kind: Node
metadata:
  name: ip-10-0-1-1.ec2.internal
  labels:
    kubernetes.io/hostname: ip-10-0-1-1.ec2.internal
    kubernetes.io/arch: amd64
    topology.kubernetes.io/zone: us-east-1a
    node.kubernetes.io/instance-type: m5.xlarge
    karpenter.sh/capacity-type: on-demand
    karpenter.sh/nodepool: default
status:
  capacity: {cpu: "4", memory: 16Gi, pods: "58"}
  allocatable: {cpu: 3920m, memory: 15Gi, pods: "58"}
  conditions: [{type: Ready, status: "True"}]
"#;
    let report = run(&[
        NODECLASS.into(),
        nodepool("default", "", ""),
        node.into(),
        deployment("app", 3, "1", ""),
    ]);
    assert!(report.nodeclaims.is_empty(), "{:#?}", report.nodeclaims);
    assert_eq!(report.placements.len(), 3);
    assert!(
        report
            .placements
            .values()
            .all(|n| n == "ip-10-0-1-1.ec2.internal")
    );
    assert!(report.cost.existing_per_hour > 0.0);
    // A fourth pod no longer fits: a new node is planned for it.
    let report = run(&[
        NODECLASS.into(),
        nodepool("default", "", ""),
        node.into(),
        deployment("app", 4, "1", ""),
    ]);
    assert_eq!(report.nodeclaims.len(), 1);
    assert_eq!(report.nodeclaims[0].pods.len(), 1);
}

#[test]
fn the_cheapest_fitting_type_is_chosen_for_a_small_pod() {
    let report = run(&[
        NODECLASS.into(),
        nodepool(
            "default",
            "",
            "        - {key: karpenter.k8s.aws/instance-category, operator: In, values: [m]}\n        - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}",
        ),
        deployment("tiny", 1, "100m", ""),
    ]);
    let claim = &report.nodeclaims[0];
    assert_eq!(claim.capacity_type, "on-demand");
    // Cross-check against the catalog: no compatible m-type amd64 on-demand instance is cheaper.
    let catalog = Catalog::bundled("us-east-1").expect("catalog");
    let types = catalog.instance_types(
        &karpenter_rs::scheduling::instance_type::NodeClassSettings::for_family(
            karpenter_rs::apis::ec2nodeclass::AMIFamily::AL2023,
        ),
    );
    let cheapest = types
        .iter()
        .filter(|t| {
            t.labels
                .get("karpenter.k8s.aws/instance-category")
                .map(String::as_str)
                == Some("m")
        })
        .filter(|t| t.labels["kubernetes.io/arch"] == "amd64")
        .filter(|t| t.allocatable.cpu >= 100 && t.allocatable.memory >= 256 << 20)
        .filter_map(|t| {
            t.cheapest_offering(|o| {
                o.capacity_type == karpenter_rs::scheduling::instance_type::CapacityType::OnDemand
            })
            .map(|o| o.price)
        })
        .fold(f64::INFINITY, f64::min);
    assert!(
        (claim.price - cheapest).abs() < 1e-9,
        "chose {} at {} but {cheapest} exists",
        claim.instance_type,
        claim.price
    );
    assert_eq!(&*claim.instance_type_options[0], claim.instance_type);
}

#[test]
fn spot_is_preferred_when_the_nodepool_allows_it() {
    let report = run(&[
        NODECLASS.into(),
        nodepool(
            "default",
            "",
            "        - {key: karpenter.sh/capacity-type, operator: In, values: [spot, on-demand]}",
        ),
        deployment("app", 1, "1", ""),
    ]);
    assert_eq!(report.nodeclaims[0].capacity_type, "spot");
    let report = run(&[
        NODECLASS.into(),
        nodepool("default", "", ""),
        deployment("app", 1, "1", ""),
    ]);
    assert_eq!(
        report.nodeclaims[0].capacity_type, "on-demand",
        "unconstrained pools launch on-demand"
    );
}

#[test]
fn min_values_keeps_enough_families() {
    let report = run(&[
        NODECLASS.into(),
        nodepool(
            "flexible",
            "",
            "        - {key: karpenter.k8s.aws/instance-family, operator: Exists, minValues: 5}",
        ),
        deployment("app", 2, "2", ""),
    ]);
    let families: BTreeSet<String> = report.nodeclaims[0]
        .instance_type_options
        .iter()
        .map(|t| t.split('.').next().unwrap_or_default().to_string())
        .collect();
    assert!(families.len() >= 5, "{families:?}");
    let strict = nodepool(
        "strict",
        "",
        "        - {key: karpenter.k8s.aws/instance-family, operator: In, values: [m5, c5], minValues: 2}\n        - {key: karpenter.k8s.aws/instance-size, operator: In, values: [large]}\n        - {key: karpenter.k8s.aws/instance-cpu, operator: Gt, values: [\"2\"]}",
    );
    let report = run(&[
        NODECLASS.into(),
        strict.clone(),
        deployment("app", 1, "100m", ""),
    ]);
    assert!(report.nodeclaims.is_empty());
    assert!(
        report.unschedulable[0].reason.contains("minValues")
            || report.unschedulable[0].reason.contains("no instance type"),
        "{}",
        report.unschedulable[0].reason
    );
    let relaxed = nodepool(
        "relaxed",
        "",
        "        - {key: karpenter.k8s.aws/instance-family, operator: In, values: [m5, c5], minValues: 2}\n        - {key: node.kubernetes.io/instance-type, operator: In, values: [m5.large, m5.xlarge]}",
    );
    let report = run(&[
        NODECLASS.into(),
        relaxed.clone(),
        deployment("app", 1, "100m", ""),
    ]);
    assert!(
        report.nodeclaims.is_empty(),
        "Strict policy fails when minValues cannot be met"
    );
    let report = run_with(
        &[NODECLASS.into(), relaxed, deployment("app", 1, "100m", "")],
        Options {
            min_values_best_effort: true,
            ..Options::default()
        },
    );
    assert_eq!(report.nodeclaims.len(), 1);
    assert!(report.nodeclaims[0].min_values_relaxed);
}

#[test]
fn unsatisfiable_preferences_are_relaxed() {
    let report = run(&[
        NODECLASS.into(),
        nodepool(
            "default",
            "",
            "        - {key: topology.kubernetes.io/zone, operator: In, values: [us-east-1a]}",
        ),
        deployment(
            "app",
            1,
            "100m",
            "      affinity:\n        nodeAffinity:\n          preferredDuringSchedulingIgnoredDuringExecution:\n            - {weight: 100, preference: {matchExpressions: [{key: topology.kubernetes.io/zone, operator: In, values: [us-west-2a]}]}}",
        ),
    ]);
    assert_eq!(report.nodeclaims.len(), 1, "{:#?}", report.unschedulable);
    assert_eq!(report.nodeclaims[0].zone, "us-east-1a");
    // The same term as a requirement cannot be met, and the reason says which key.
    let report = run(&[
        NODECLASS.into(),
        nodepool(
            "default",
            "",
            "        - {key: topology.kubernetes.io/zone, operator: In, values: [us-east-1a]}",
        ),
        deployment(
            "app",
            1,
            "100m",
            "      nodeSelector: {topology.kubernetes.io/zone: us-west-2a}",
        ),
    ]);
    assert!(
        report.unschedulable[0]
            .reason
            .contains("topology.kubernetes.io/zone"),
        "{}",
        report.unschedulable[0].reason
    );
}

#[test]
fn zonal_self_affinity_keeps_a_deployment_in_one_zone() {
    let report = run(&[
        NODECLASS.into(),
        nodepool("default", "", ""),
        deployment(
            "cache",
            6,
            "2",
            "      affinity:\n        podAffinity:\n          requiredDuringSchedulingIgnoredDuringExecution:\n            - {topologyKey: topology.kubernetes.io/zone, labelSelector: {matchLabels: {app: cache}}}",
        ),
    ]);
    assert!(
        report.unschedulable.is_empty(),
        "{:#?}",
        report.unschedulable
    );
    assert_eq!(
        pods_per_zone(&report).len(),
        1,
        "{:#?}",
        pods_per_zone(&report)
    );
}

#[test]
fn gpu_pods_get_gpu_instances() {
    let report = run(&[
        NODECLASS.into(),
        nodepool("gpu", "", ""),
        r#"
apiVersion: v1
kind: Pod
metadata: {name: trainer, namespace: ml}
spec:
  containers: [{name: c, image: cuda, resources: {limits: {nvidia.com/gpu: "1"}, requests: {cpu: "2", memory: 8Gi}}}]
"#
        .to_string(),
    ]);
    let claim = &report.nodeclaims[0];
    assert!(
        claim.instance_type.starts_with('g') || claim.instance_type.starts_with('p'),
        "{}",
        claim.instance_type
    );
}

#[test]
fn arm64_pods_get_graviton_instances() {
    let report = run(&[
        NODECLASS.into(),
        r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: multi-arch}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      requirements: [{key: kubernetes.io/arch, operator: In, values: [amd64, arm64]}]
"#
        .into(),
        deployment(
            "arm",
            1,
            "1",
            "      nodeSelector: {kubernetes.io/arch: arm64}",
        ),
    ]);
    let claim = &report.nodeclaims[0];
    let graviton = [
        "a1", "c6g", "c7g", "c8g", "m6g", "m7g", "m8g", "r6g", "r7g", "r8g", "t4g", "x2g", "im4g",
        "is4g", "i4g", "c6gd", "c6gn", "c7gd", "c7gn", "m6gd", "m7gd", "r6gd", "r7gd", "x8g",
        "i8g", "g5g",
    ];
    let family = claim.instance_type.split('.').next().unwrap_or_default();
    assert!(graviton.contains(&family), "{}", claim.instance_type);
}

#[test]
fn volume_attach_limits_force_a_new_node() {
    let node = r#"
apiVersion: v1
kind: Node
metadata:
  name: ip-10-0-1-1.ec2.internal
  labels: {kubernetes.io/hostname: ip-10-0-1-1.ec2.internal, kubernetes.io/arch: amd64, topology.kubernetes.io/zone: us-east-1a}
status:
  allocatable: {cpu: "8", memory: 32Gi, pods: "58"}
  conditions: [{type: Ready, status: "True"}]
---
apiVersion: storage.k8s.io/v1
kind: CSINode
metadata: {name: ip-10-0-1-1.ec2.internal}
spec:
  drivers: [{name: ebs.csi.aws.com, nodeID: i-1, allocatable: {count: 1}}]
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: gp3}
provisioner: ebs.csi.aws.com
volumeBindingMode: WaitForFirstConsumer
"#;
    let with_claim = |name: &str| {
        format!(
            r#"
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {{name: {name}, namespace: default}}
spec: {{accessModes: [ReadWriteOnce], storageClassName: gp3, resources: {{requests: {{storage: 1Gi}}}}}}
---
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: default}}
spec:
  containers: [{{name: c, image: pause, resources: {{requests: {{cpu: 100m}}}}}}]
  volumes: [{{name: data, persistentVolumeClaim: {{claimName: {name}}}}}]
"#
        )
    };
    let report = run(&[
        NODECLASS.into(),
        nodepool("default", "", ""),
        node.into(),
        with_claim("a"),
        with_claim("b"),
    ]);
    // The node can attach one EBS volume: one pod lands there, the other needs a new node.
    let on_node = report
        .placements
        .values()
        .filter(|n| n.starts_with("ip-10-0-1-1"))
        .count();
    assert_eq!(on_node, 1, "{:#?}", report.placements);
    assert_eq!(report.nodeclaims.len(), 1);
}

#[test]
fn in_flight_nodeclaims_are_used_before_new_ones() {
    let claim = r#"
apiVersion: karpenter.sh/v1
kind: NodeClaim
metadata:
  name: default-abcde
  labels: {karpenter.sh/nodepool: default, node.kubernetes.io/instance-type: m5.2xlarge, kubernetes.io/arch: amd64, topology.kubernetes.io/zone: us-east-1a}
spec:
  requirements: [{key: karpenter.sh/nodepool, operator: In, values: [default]}]
  nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
"#;
    let report = run(&[
        NODECLASS.into(),
        nodepool("default", "", ""),
        claim.into(),
        deployment("app", 4, "1", ""),
    ]);
    assert!(report.nodeclaims.is_empty(), "{:#?}", report.nodeclaims);
    assert!(report.placements.values().all(|n| n == "default-abcde"));
}

#[test]
fn node_taints_policy_honor_leaves_out_zones_only_tainted_pools_provide() {
    let general = nodepool(
        "general",
        "",
        "        - {key: topology.kubernetes.io/zone, operator: In, values: [us-east-1a, us-east-1b]}",
    );
    let dedicated = nodepool(
        "dedicated",
        "",
        "        - {key: topology.kubernetes.io/zone, operator: In, values: [us-east-1c]}\n      taints: [{key: dedicated, value: gpu, effect: NoSchedule}]",
    );
    let spread = |policy: &str| {
        deployment(
            "web",
            4,
            "500m",
            &format!(
                "      topologySpreadConstraints:\n        - {{maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: DoNotSchedule, nodeTaintsPolicy: {policy}, labelSelector: {{matchLabels: {{app: web}}}}}}"
            ),
        )
    };
    // Ignore (the default): zone c counts with zero pods, so each of a and b takes one pod.
    let ignored = run(&[
        NODECLASS.into(),
        general.clone(),
        dedicated.clone(),
        spread("Ignore"),
    ]);
    assert_eq!(
        ignored.unschedulable.len(),
        2,
        "{:#?}",
        ignored.unschedulable
    );
    // Honor: zone c is only reachable through a taint the pods do not tolerate.
    let honored = run(&[NODECLASS.into(), general, dedicated, spread("Honor")]);
    assert!(
        honored.unschedulable.is_empty(),
        "{:#?}",
        honored.unschedulable
    );
    assert_eq!(
        pods_per_zone(&honored),
        BTreeMap::from([("us-east-1a".to_string(), 2), ("us-east-1b".to_string(), 2)])
    );
}

/// `n` pods of `cpu` each, none sharing a node with another (required hostname anti-affinity).
fn one_per_node(name: &str, n: u32, cpu: &str) -> String {
    deployment(
        name,
        n,
        cpu,
        &format!(
            "      affinity:\n        podAntiAffinity:\n          requiredDuringSchedulingIgnoredDuringExecution:\n            - {{topologyKey: kubernetes.io/hostname, labelSelector: {{matchLabels: {{app: {name}}}}}}}"
        ),
    )
}

#[test]
fn thousands_of_nodeclaims_get_distinct_names() {
    let report = run(&[
        NODECLASS.into(),
        nodepool("default", "", ""),
        one_per_node("spread", 6000, "100m"),
    ]);
    assert_eq!(report.nodeclaims.len(), 6000);
    let names: BTreeSet<&str> = report.nodeclaims.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names.len(), report.nodeclaims.len());
    // Every pod is placed on the NodeClaim that lists it: no two claims merged under one name.
    for claim in &report.nodeclaims {
        assert!(
            claim
                .pods
                .iter()
                .all(|p| report.placements[p] == claim.name)
        );
    }
}

#[test]
fn a_planned_name_never_repeats_an_existing_nodeclaim() {
    // Pods of 3 CPU do not fit the existing m5.large, so the plan is the same with and without it.
    let docs = [
        NODECLASS.into(),
        nodepool("default", "", ""),
        one_per_node("big", 3, "3"),
    ];
    let alone = run(&docs);
    let taken = alone.nodeclaims[0].name.clone();
    let existing = format!(
        r#"
apiVersion: karpenter.sh/v1
kind: NodeClaim
metadata:
  name: {taken}
  labels: {{karpenter.sh/nodepool: default, node.kubernetes.io/instance-type: m5.large, kubernetes.io/arch: amd64, topology.kubernetes.io/zone: us-east-1a}}
spec:
  requirements: [{{key: karpenter.sh/nodepool, operator: In, values: [default]}}]
  nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}
"#
    );
    let mut with_existing = docs.to_vec();
    with_existing.push(existing);
    let report = run(&with_existing);
    assert_eq!(report.nodeclaims.len(), 3, "{:#?}", report.unschedulable);
    assert!(report.nodeclaims.iter().all(|c| c.name != taken));
    assert!(report.placements.values().all(|n| *n != taken));
}

#[test]
fn limits_leave_room_for_every_small_pod_of_a_round() {
    // Every NodeClaim first reserves its largest option (up to 384 vCPUs); four of them would
    // use up the 1000 vCPUs although each launches a small type.
    let report = run(&[
        NODECLASS.into(),
        nodepool(
            "default",
            "  limits: {cpu: \"1000\"}",
            "        - {key: karpenter.k8s.aws/instance-category, operator: In, values: [c, m, r]}",
        ),
        one_per_node("db", 5, "100m"),
    ]);
    assert!(
        report.unschedulable.is_empty(),
        "{:#?}",
        report.unschedulable
    );
    assert_eq!(report.nodeclaims.len(), 5);
    // What the round reserves (each NodeClaim's largest option) stays within the limit.
    let catalog = Catalog::bundled("us-east-1").expect("catalog");
    let types = catalog.instance_types(&NodeClassSettings::for_family(AMIFamily::AL2023));
    let vcpus = |name: &str| {
        types
            .iter()
            .find(|t| t.name.as_ref() == name)
            .map_or(0, |t| t.capacity.cpu)
    };
    let reserved: i64 = report
        .nodeclaims
        .iter()
        .map(|c| {
            c.instance_type_options
                .iter()
                .map(|n| vcpus(n))
                .max()
                .unwrap_or(0)
        })
        .sum();
    assert!(reserved <= 1_000_000, "{reserved}m reserved");
}

/// 30 Deployments × 100 replicas of 250m–1 CPU and 256Mi–2Gi, on a NodePool open to every x86
/// on-demand type.
fn web_fleet() -> Report {
    let mut docs = vec![
        NODECLASS.to_string(),
        nodepool(
            "default",
            "",
            "        - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}",
        ),
    ];
    for d in 0..30 {
        let cpu = [250, 500, 750, 1000][d % 4];
        let memory = [256, 512, 1024, 2048][(d / 4) % 4];
        docs.push(sized_deployment(&format!("web-{d}"), 100, cpu, memory, ""));
    }
    run(&docs)
}

/// `simulate`'s plan for `docs`, which places all of its `pods` pods.
fn run_placing_all(docs: &[String], pods: usize) -> Report {
    let report = run(docs);
    assert!(
        report.unschedulable.is_empty(),
        "{:#?}",
        report.unschedulable
    );
    assert_eq!(report.placements.len(), pods);
    report
}

/// `simulate`'s plan for a `benches/gen-cost.py` case kept in `tests/fixtures/cost/`, which
/// places all of its `pods` pods.
fn plan_fixture(yaml: &str, pods: usize) -> Report {
    run_placing_all(&[yaml.to_string()], pods)
}

/// What the plan's NodeClaims cost per hour.
fn fleet_cost(report: &Report) -> f64 {
    report.nodeclaims.iter().map(|c| c.price).sum()
}

/// The plan's median NodeClaim price, as the solver's blast-radius check reads it (0 without
/// NodeClaims).
fn median_price(report: &Report) -> f64 {
    median(report.nodeclaims.iter().map(|c| c.price).collect()).unwrap_or(0.0)
}

/// No planned NodeClaim costs more than `factor` times the plan's median (the blast-radius
/// target of issue #19 is 4x).
fn assert_no_nodeclaim_above_the_median_times(report: &Report, factor: f64) {
    let median = median_price(report);
    for claim in &report.nodeclaims {
        assert!(
            claim.price <= factor * median,
            "{} ({}, ${}/h) costs more than {factor}x the median NodeClaim (${median}/h)",
            claim.name,
            claim.instance_type,
            claim.price
        );
    }
}

/// No planned NodeClaim costs more than 4x the larger of the plan's median and `need`, the price
/// of the cheapest type that holds the round's most demanding pod alone: issue #19's
/// blast-radius target as `benches/gen-cost.py` measures it, for a round whose NodeClaims each
/// hold such a pod, or that need no more.
fn assert_within_blast_radius(report: &Report, need: f64) {
    let bound = 4.0 * median_price(report).max(need);
    for claim in &report.nodeclaims {
        assert!(
            claim.price <= bound + 0.01,
            "{} ({}, ${}/h) costs more than 4x the larger of the median and ${need}/h",
            claim.name,
            claim.instance_type,
            claim.price
        );
    }
}

/// `replicas` pods of `cpu` millicores and 1 GiB, each with required hostname anti-affinity to
/// the others (`app: solo`): every one needs a node of its own.
fn solo(replicas: u32, cpu: u32) -> String {
    sized_deployment(
        "solo",
        replicas,
        cpu,
        1024,
        "      affinity:\n        podAntiAffinity:\n          requiredDuringSchedulingIgnoredDuringExecution:\n            - {topologyKey: kubernetes.io/hostname, labelSelector: {matchLabels: {app: solo}}}",
    )
}

#[test]
fn many_small_pods_are_not_piled_onto_giant_nodes() {
    let report = web_fleet();
    assert!(
        report.unschedulable.is_empty(),
        "{:#?}",
        report.unschedulable
    );
    assert_eq!(report.placements.len(), 3000);
    // Piling every pod that still fits onto one NodeClaim planned four nodes, two of them
    // u7in-16tb.224xlarge, for $386/h; ordinary nodes hold the same pods for about $83/h.
    let cost = fleet_cost(&report);
    assert!(cost < 120.0, "${cost:.2}/h");
    // A 2Gi pod needs a t3a.medium ($0.0376/h) alone, which excuses the r5a.large NodeClaims
    // ($0.113/h) that fill by shape plans beside t3a.micro ones (the median, $0.0188/h):
    // $33.09/h against $35.25/h without them.
    assert_within_blast_radius(&report, 0.0376);
}

/// `benches/gen-cost.py`'s web Deployments: (CPU millicores, memory MiB) of each, drawn with its
/// seed.
const WEB: [(u32, u32); 30] = [
    (500, 2048),
    (750, 256),
    (750, 1024),
    (500, 256),
    (500, 1024),
    (1000, 1024),
    (750, 2048),
    (250, 1024),
    (500, 512),
    (1000, 256),
    (250, 512),
    (500, 512),
    (250, 512),
    (500, 2048),
    (1000, 2048),
    (500, 1024),
    (500, 1024),
    (500, 2048),
    (500, 512),
    (250, 256),
    (750, 512),
    (250, 512),
    (1000, 1024),
    (750, 2048),
    (750, 2048),
    (500, 256),
    (250, 2048),
    (500, 2048),
    (500, 1024),
    (250, 1024),
];

/// `benches/gen-cost.py`'s web workload (30 Deployments x 100 replicas, sizes drawn with its seed)
/// on a NodePool open to every x86 type, spot allowed, at the ENI pod density.
#[test]
fn web_pods_on_spot_fill_small_nodes_other_shapes_paid_for() {
    let docs = broad_spot_case("web", &WEB, 100);
    let report = run_placing_all(&docs, 3000);
    // With each shape's pods kept to their own NodeClaims the best plan costs $11.56/h. Pods
    // that also take room other shapes' nodes have paid for, on NodeClaims that grow no larger
    // than the smallest type about as cheap per pod as the best, plan t3a / r6a nodes for
    // $10.83/h, none above 4x the median.
    let cost = fleet_cost(&report);
    assert!(cost < 11.5, "${cost:.2}/h");
    assert_no_nodeclaim_above_the_median_times(&report, 4.0);
}

/// CPU-heavy web pods, memory-heavy pods and a few large batch pods in one round, on a NodePool
/// open to every x86 on-demand type at kubelet `maxPods: 110`; one web and one memory-heavy
/// Deployment spread over zones, and five pods with hostname anti-affinity.
#[test]
fn pods_of_different_shapes_get_the_types_cheapest_for_each() {
    let mut docs = vec![
        format!("{NODECLASS}  kubelet: {{maxPods: 110}}\n"),
        nodepool(
            "default",
            "",
            "        - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}",
        ),
    ];
    // (prefix, replicas, the Deployment spread over zones, sizes in millicores and MiB)
    let kinds = [
        (
            "web",
            100,
            0,
            [(250, 256), (500, 512), (750, 256), (1000, 512)],
        ),
        (
            "mem",
            40,
            1,
            [(250, 4096), (500, 8192), (750, 16384), (1000, 8192)],
        ),
    ];
    for (prefix, replicas, spread_one, sizes) in kinds {
        for (d, (cpu, memory)) in sizes.into_iter().enumerate() {
            let name = format!("{prefix}-{d}");
            let constraint = if d == spread_one {
                spread(&name, "topology.kubernetes.io/zone")
            } else {
                String::new()
            };
            docs.push(sized_deployment(&name, replicas, cpu, memory, &constraint));
        }
    }
    for (d, (cpu, memory)) in [(8000, 16384), (16000, 32768)].into_iter().enumerate() {
        docs.push(sized_deployment(&format!("batch-{d}"), 10, cpu, memory, ""));
    }
    docs.push(solo(5, 500));
    let report = run_placing_all(&docs, 585);
    // Sized for the round's average pod, every plan shares nodes between web and memory-heavy
    // pods: $30.91/h at best. Sized per shape, web pods get t3a nodes and memory pods r / x
    // types, for $25.51/h.
    let cost = fleet_cost(&report);
    assert!(cost < 28.0, "${cost:.2}/h");
    // The hard constraints still hold: one solo pod per node, zone spreads within one pod.
    assert!(pods_of(&report, "solo").iter().all(|(_, n)| *n <= 1));
    for name in ["web-0", "mem-1"] {
        assert_zone_skew_within_one(&report, name);
    }
    for claim in &report.nodeclaims {
        let holds = |prefix: &str| claim.pods.iter().any(|p| p.contains(prefix));
        assert!(
            !(holds("/web-") && holds("/mem-")),
            "{} ({}) holds web and memory-heavy pods: {:?}",
            claim.name,
            claim.instance_type,
            claim.pods
        );
    }
}

/// A Deployment of `replicas` pods of `cpu` millicores and `memory` MiB, with `constraint`
/// (pod-spec lines, indented for the pod spec) added.
fn sized_deployment(name: &str, replicas: u32, cpu: u32, memory: u32, constraint: &str) -> String {
    format!(
        r#"
apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec:
      containers:
        - {{name: c, image: pause, resources: {{requests: {{cpu: {cpu}m, memory: {memory}Mi}}}}}}
{constraint}
"#
    )
}

fn spread(name: &str, key: &str) -> String {
    format!(
        "      topologySpreadConstraints:\n        - {{maxSkew: 1, topologyKey: {key}, whenUnsatisfiable: DoNotSchedule, labelSelector: {{matchLabels: {{app: {name}}}}}}}"
    )
}

/// How many pods of Deployment `name` each NodeClaim holds.
fn pods_of<'r>(report: &'r Report, name: &str) -> Vec<(&'r simulate::NodeClaimReport, usize)> {
    let prefix = format!("/{name}-");
    report
        .nodeclaims
        .iter()
        .map(|c| (c, c.pods.iter().filter(|p| p.contains(&prefix)).count()))
        .collect()
}

/// The pods of Deployment `name` are spread over zones within one pod of each other (every
/// placement keeps the skew, and zone counts only grow, so the final counts keep it too); returns
/// how many zones hold them.
fn assert_zone_skew_within_one(report: &Report, name: &str) -> usize {
    let mut per_zone: BTreeMap<&str, usize> = BTreeMap::new();
    for (claim, n) in pods_of(report, name) {
        *per_zone.entry(claim.zone.as_str()).or_default() += n;
    }
    let (min, max) = (per_zone.values().min(), per_zone.values().max());
    assert!(
        max.zip(min).is_some_and(|(a, b)| a - b <= 1),
        "{name}: {per_zone:?}"
    );
    per_zone.len()
}

/// The "constrained Deployments" case of `benches/gen-cost.py` on a NodePool open to every x86
/// on-demand type: 30 Deployments of 83–84 replicas (every third with a zonal spread, every fifth
/// other one with a hostname spread) and 100 replicas with hostname anti-affinity.
#[test]
fn constrained_deployments_keep_every_constraint_on_a_cheaper_fleet() {
    let mut docs = vec![
        NODECLASS.to_string(),
        nodepool(
            "default",
            "",
            "        - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}",
        ),
    ];
    let mut zonal = Vec::new();
    for d in 0..30u32 {
        let name = format!("app-{d}");
        let cpu = [250, 500, 750, 1000][(d % 4) as usize];
        let memory = [256, 512, 1024, 2048][((d / 4) % 4) as usize];
        let constraint = if d % 3 == 0 {
            zonal.push(name.clone());
            spread(&name, "topology.kubernetes.io/zone")
        } else if d % 5 == 0 {
            spread(&name, "kubernetes.io/hostname")
        } else {
            String::new()
        };
        let replicas = if d < 10 { 84 } else { 83 };
        docs.push(sized_deployment(&name, replicas, cpu, memory, &constraint));
    }
    docs.push(solo(100, 500));
    let report = run_placing_all(&docs, 2600);
    // Hard constraints: one solo pod per node; zonal spreads within one pod of each other (every
    // placement keeps the skew, and zone counts only grow, so the final counts keep it too).
    assert!(pods_of(&report, "solo").iter().all(|(_, n)| *n <= 1));
    assert!(report.nodeclaims.len() >= 100);
    for name in &zonal {
        assert_zone_skew_within_one(&report, name);
    }
    // Upstream plans $85–93/h here (issue #19). First fit grew the oldest NodeClaims while the
    // ones opened by the solo pods ran nearly empty.
    let cost = fleet_cost(&report);
    assert!(cost < 85.0, "${cost:.2}/h");
}

/// The NodePool of the scale benchmark: current-generation c, m and r families, on-demand. In
/// us-east-1 none of them is offered in us-east-1e, where only older families run.
fn current_generation_pool() -> String {
    nodepool(
        "default",
        "",
        "        - {key: karpenter.k8s.aws/instance-category, operator: In, values: [c, m, r]}\n        - {key: karpenter.k8s.aws/instance-generation, operator: Gt, values: [\"5\"]}\n        - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}",
    )
}

const ZONE_SPREAD: &str = "      topologySpreadConstraints:\n        - {maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: DoNotSchedule, labelSelector: {matchLabels: {app: web}}}";

#[test]
fn a_zone_no_type_of_the_pool_is_offered_in_is_not_a_spread_domain() {
    let report = run(&[
        NODECLASS.into(),
        current_generation_pool(),
        deployment("web", 20, "500m", ZONE_SPREAD),
    ]);
    assert!(
        report.unschedulable.is_empty(),
        "{:#?}",
        report.unschedulable
    );
    let zones = pods_per_zone(&report);
    assert_eq!(
        zones.keys().map(String::as_str).collect::<Vec<_>>(),
        [
            "us-east-1a",
            "us-east-1b",
            "us-east-1c",
            "us-east-1d",
            "us-east-1f"
        ],
        "{zones:?}"
    );
    assert!(zones.values().all(|&n| n == 4), "{zones:?}");
}

/// What `run` sees once kube-scheduler, which only counts the zones that have nodes, has bound
/// part of a zone-spread Deployment: all of it in one zone. The pending rest must still be
/// planned, into the other zones.
#[test]
fn pending_zone_spread_pods_are_planned_after_some_were_bound_in_one_zone() {
    let node = r#"
apiVersion: v1
kind: Node
metadata:
  name: ip-10-0-1-1.ec2.internal
  labels:
    kubernetes.io/hostname: ip-10-0-1-1.ec2.internal
    kubernetes.io/arch: amd64
    topology.kubernetes.io/zone: us-east-1a
    node.kubernetes.io/instance-type: m6i.xlarge
    karpenter.sh/capacity-type: on-demand
    karpenter.sh/nodepool: default
status:
  capacity: {cpu: "4", memory: 16Gi, pods: "58"}
  allocatable: {cpu: 3920m, memory: 15Gi, pods: "58"}
  conditions: [{type: Ready, status: "True"}]
"#;
    let mut docs = vec![NODECLASS.into(), current_generation_pool(), node.into()];
    for i in 0..6 {
        docs.push(format!(
            r#"
apiVersion: v1
kind: Pod
metadata: {{name: web-bound-{i}, labels: {{app: web}}}}
spec:
  nodeName: ip-10-0-1-1.ec2.internal
  containers: [{{name: c, image: pause, resources: {{requests: {{cpu: 500m, memory: 256Mi}}}}}}]
  topologySpreadConstraints:
    - {{maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: DoNotSchedule, labelSelector: {{matchLabels: {{app: web}}}}}}
"#
        ));
    }
    docs.push(deployment("web", 14, "500m", ZONE_SPREAD));
    let report = run(&docs);
    assert!(
        report.unschedulable.is_empty(),
        "{:#?}",
        report.unschedulable
    );
    let zones = pods_per_zone(&report);
    assert!(!zones.contains_key("us-east-1e"), "{zones:?}");
    assert!(
        !zones.contains_key("us-east-1a"),
        "zone a holds 6 already: {zones:?}"
    );
    // 14 pods over b, c, d and f, evenly: 4, 4, 3, 3 in some order.
    assert_eq!(zones.values().sum::<usize>(), 14, "{zones:?}");
    assert!(zones.values().all(|&n| (3..=4).contains(&n)), "{zones:?}");
}

/// Provisioning with the `StaticCapacity` gate set as given.
fn run_static(docs: &[String], static_capacity: bool) -> Report {
    let text = docs.join("\n---\n");
    let parsed = manifest::parse_str(&text, Path::new("test.yaml")).expect("YAML parses");
    let c = manifest::load(&parsed, chrono::Utc::now()).unwrap_or_else(|e| panic!("{e}"));
    let catalog = Catalog::bundled("us-east-1").expect("catalog");
    simulate::simulate(
        &c,
        &catalog,
        &EngineOptions {
            static_capacity,
            ..Default::default()
        },
    )
}

#[test]
fn a_static_nodepool_shows_its_replicas_and_pending_pods_may_land_on_them() {
    let fixed = nodepool(
        "fixed",
        "  replicas: 2\n  limits: {nodes: \"5\"}",
        "        - {key: node.kubernetes.io/instance-type, operator: In, values: [m5.xlarge, m5.large]}",
    );
    let docs = [
        NODECLASS.to_string(),
        fixed.clone(),
        nodepool("default", "", ""),
        deployment("web", 2, "500m", ""),
    ];
    let on = run_static(&docs, true);
    let static_claims: Vec<_> = on
        .nodeclaims
        .iter()
        .filter(|c| c.node_pool == "fixed")
        .collect();
    assert_eq!(static_claims.len(), 2, "{:#?}", on.nodeclaims);
    for c in &static_claims {
        assert_eq!(c.instance_type, "m5.large", "the cheapest option");
        assert_eq!(
            &*c.instance_type_options,
            ["m5.large".into(), "m5.xlarge".into()]
        );
        assert!(c.name.starts_with("fixed-"), "{}", c.name);
    }
    // kube-scheduler would bind the pending pods to the static nodes: nothing else is needed.
    assert_eq!(on.nodeclaims.len(), 2, "{:#?}", on.nodeclaims);
    assert!(on.placements.values().all(|n| n.starts_with("fixed-")));
    assert_eq!(on.placements.len(), 2);
    assert!(on.cost.new_per_hour > 0.0);
    assert!(
        on.nodepools.iter().all(|p| p.name != "fixed"),
        "a static pool in use is not listed as unused: {:#?}",
        on.nodepools
    );

    // limits.nodes holds replicas back, and says so.
    let capped = run_static(
        &[
            NODECLASS.to_string(),
            fixed.replace("nodes: \"5\"", "nodes: \"1\""),
        ],
        true,
    );
    assert_eq!(capped.nodeclaims.len(), 1);
    assert!(
        capped
            .nodepools
            .iter()
            .any(|p| p.name == "fixed" && p.reason.contains("limits.nodes keeps 1")),
        "{:#?}",
        capped.nodepools
    );

    // With the gate off (upstream's default) the pool is left alone; the pods go elsewhere.
    let off = run_static(&docs, false);
    assert!(off.nodeclaims.iter().all(|c| c.node_pool == "default"));
    assert!(!off.nodeclaims.is_empty());
    assert!(
        off.nodepools
            .iter()
            .any(|p| p.name == "fixed" && p.reason.contains("StaticCapacity feature gate is off")),
        "{:#?}",
        off.nodepools
    );
}

/// A capacity reservation in the EC2NodeClass status (with its instances left in the
/// `karpenter-rs.sh/capacity-reservations-available` annotation) is planned onto first, at most
/// its count of NodeClaims; the rest spill over to on-demand.
#[test]
fn simulate_plans_onto_a_reservation_first_and_spills_over_to_on_demand() {
    let nodeclass = RESERVED_NODECLASS;
    let report = run(&[
        nodeclass.into(),
        nodepool(
            "default",
            "",
            "        - {key: karpenter.sh/capacity-type, operator: In, values: [reserved, on-demand]}",
        ),
        deployment(
            "big",
            4,
            "3",
            "      affinity: {podAntiAffinity: {requiredDuringSchedulingIgnoredDuringExecution: [{labelSelector: {matchLabels: {app: big}}, topologyKey: kubernetes.io/hostname}]}}",
        ),
    ]);
    assert!(
        report.unschedulable.is_empty(),
        "{:#?}",
        report.unschedulable
    );
    assert_eq!(report.nodeclaims.len(), 4);
    let reserved: Vec<_> = report
        .nodeclaims
        .iter()
        .filter(|c| c.capacity_type == "reserved")
        .collect();
    assert_eq!(reserved.len(), 2, "{:#?}", report.nodeclaims);
    for c in &reserved {
        assert_eq!(
            (c.instance_type.as_str(), c.zone.as_str()),
            ("m5.xlarge", "us-east-1b")
        );
        assert!(c.price < 1e-6, "{}", c.price);
        assert_eq!(c.instance_type_options.len(), 1);
    }
    for c in report
        .nodeclaims
        .iter()
        .filter(|c| c.capacity_type != "reserved")
    {
        assert_eq!(c.capacity_type, "on-demand", "{c:#?}");
        assert!(c.price > 0.01, "{}", c.price);
    }
}

/// An EC2NodeClass whose status lists one reservation of two `m5.xlarge` in `us-east-1b`.
const RESERVED_NODECLASS: &str = r#"
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata:
  name: default
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
"#;

/// Three pods that each need a node of their own.
fn three_spread_pods() -> String {
    deployment(
        "big",
        3,
        "3",
        "      affinity: {podAntiAffinity: {requiredDuringSchedulingIgnoredDuringExecution: [{labelSelector: {matchLabels: {app: big}}, topologyKey: kubernetes.io/hostname}]}}",
    )
}

/// A NodePool that allows only `reserved` opens no more NodeClaims than its reservations have
/// instances left, as upstream: the pod beyond them stays pending with the reason, instead of
/// being planned onto a NodeClaim whose launch would fail.
#[test]
fn a_reserved_only_nodepool_plans_no_more_nodeclaims_than_its_reservations_hold() {
    let report = run(&[
        RESERVED_NODECLASS.into(),
        nodepool(
            "reserved",
            "",
            "        - {key: karpenter.sh/capacity-type, operator: In, values: [reserved]}",
        ),
        three_spread_pods(),
    ]);
    assert_eq!(report.nodeclaims.len(), 2, "{:#?}", report.nodeclaims);
    for c in &report.nodeclaims {
        assert_eq!(
            (c.capacity_type.as_str(), c.instance_type.as_str()),
            ("reserved", "m5.xlarge"),
            "{c:#?}"
        );
    }
    assert_eq!(report.unschedulable.len(), 1, "{:#?}", report.unschedulable);
    let reason = &report.unschedulable[0].reason;
    assert!(
        reason.contains("nodepool \"reserved\"")
            && reason.contains("could not be reserved")
            && reason.contains("cr-0123456789abcdef0"),
        "{reason}"
    );
}

/// The pod a full reserved-only NodePool cannot take goes to a lower-weight NodePool that
/// allows other capacity.
#[test]
fn a_full_reserved_only_nodepool_leaves_the_pod_to_a_lower_weight_nodepool() {
    let report = run(&[
        RESERVED_NODECLASS.into(),
        nodepool(
            "reserved",
            "  weight: 50",
            "        - {key: karpenter.sh/capacity-type, operator: In, values: [reserved]}",
        ),
        nodepool(
            "fallback",
            "  weight: 10",
            "        - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}",
        ),
        three_spread_pods(),
    ]);
    assert!(
        report.unschedulable.is_empty(),
        "{:#?}",
        report.unschedulable
    );
    let by_pool: Vec<(&str, &str)> = report
        .nodeclaims
        .iter()
        .map(|c| (c.node_pool.as_str(), c.capacity_type.as_str()))
        .collect();
    assert_eq!(
        by_pool
            .iter()
            .filter(|p| **p == ("reserved", "reserved"))
            .count(),
        2,
        "{by_pool:?}"
    );
    assert_eq!(
        by_pool
            .iter()
            .filter(|p| **p == ("fallback", "on-demand"))
            .count(),
        1,
        "{by_pool:?}"
    );
    assert_eq!(by_pool.len(), 3, "{by_pool:?}");
}

/// What a reserved-only NodePool's NodeClaims hold is theirs: NodeClaims of a NodePool that may
/// fall back to on-demand, planned for pods placed before them, do not take it.
#[test]
fn nodeclaims_that_may_fall_back_leave_the_reservation_to_reserved_only_ones() {
    let pinned = |name: &str, cpu: &str| {
        deployment(
            name,
            2,
            cpu,
            &format!(
                "      nodeSelector: {{karpenter.sh/nodepool: {name}}}\n      affinity: {{podAntiAffinity: {{requiredDuringSchedulingIgnoredDuringExecution: [{{labelSelector: {{matchLabels: {{app: {name}}}}}, topologyKey: kubernetes.io/hostname}}]}}}}"
            ),
        )
    };
    let report = run(&[
        RESERVED_NODECLASS.into(),
        nodepool(
            "mixed",
            "",
            "        - {key: karpenter.sh/capacity-type, operator: In, values: [reserved, on-demand]}",
        ),
        nodepool(
            "strict",
            "",
            "        - {key: karpenter.sh/capacity-type, operator: In, values: [reserved]}",
        ),
        // Larger, so placed (and their NodeClaims opened) first.
        pinned("mixed", "3"),
        pinned("strict", "2"),
    ]);
    assert!(
        report.unschedulable.is_empty(),
        "{:#?}",
        report.unschedulable
    );
    let mut by_pool: Vec<(&str, &str)> = report
        .nodeclaims
        .iter()
        .map(|c| (c.node_pool.as_str(), c.capacity_type.as_str()))
        .collect();
    by_pool.sort();
    assert_eq!(
        by_pool,
        [
            ("mixed", "on-demand"),
            ("mixed", "on-demand"),
            ("strict", "reserved"),
            ("strict", "reserved")
        ]
    );
}

/// A reserved-only NodeClaim that could use either of two reservations moves aside for one that
/// can use only the reservation it held: whichever zone the second pod needs, both are planned.
#[test]
fn a_reserved_only_nodeclaim_moves_to_another_reservation_to_make_room() {
    let nodeclass = RESERVED_NODECLASS
        .replace("cr-0123456789abcdef0=2", "cr-0aaaaaaaaaaaaaaaa=1,cr-0bbbbbbbbbbbbbbbb=1")
        .replace(
            "    - {id: cr-0123456789abcdef0, instanceType: m5.xlarge, availabilityZone: us-east-1b,",
            "    - {id: cr-0aaaaaaaaaaaaaaaa, instanceType: m5.xlarge, availabilityZone: us-east-1a,\n       instanceMatchCriteria: targeted, ownerID: \"123456789012\", reservationType: default}\n    - {id: cr-0bbbbbbbbbbbbbbbb, instanceType: m5.xlarge, availabilityZone: us-east-1b,",
        );
    for zone in ["us-east-1a", "us-east-1b"] {
        let report = run(&[
            nodeclass.clone(),
            nodepool(
                "reserved",
                "",
                "        - {key: karpenter.sh/capacity-type, operator: In, values: [reserved]}",
            ),
            // Placed first (larger), and able to launch in either zone.
            deployment("anywhere", 1, "3", ""),
            deployment(
                "pinned",
                1,
                "2",
                &format!("      nodeSelector: {{topology.kubernetes.io/zone: {zone}}}"),
            ),
        ]);
        assert!(
            report.unschedulable.is_empty(),
            "{zone}: {:#?}",
            report.unschedulable
        );
        let mut zones: Vec<(&str, &str)> = report
            .nodeclaims
            .iter()
            .map(|c| (c.capacity_type.as_str(), c.zone.as_str()))
            .collect();
        zones.sort();
        assert_eq!(
            zones,
            [("reserved", "us-east-1a"), ("reserved", "us-east-1b")],
            "{zone}"
        );
    }
}

/// A malformed count is a load error naming the annotation.
#[test]
fn a_malformed_reservation_count_is_refused() {
    let nodeclass = NODECLASS.replace(
        "metadata: {name: default}",
        "metadata: {name: default, annotations: {karpenter-rs.sh/capacity-reservations-available: \"cr-1=two\"}}",
    );
    let parsed = manifest::parse_str(&nodeclass, Path::new("test.yaml")).expect("YAML parses");
    let err = manifest::load(&parsed, chrono::Utc::now())
        .expect_err("malformed count")
        .to_string();
    assert!(
        err.contains("karpenter-rs.sh/capacity-reservations-available") && err.contains("cr-1=two"),
        "{err}"
    );
}

/// `benches/gen-cost.py`'s narrow pool: c, m and r types of generation > 5.
const NARROW_TYPES: &str = "        - {key: karpenter.k8s.aws/instance-category, operator: In, values: [c, m, r]}\n        - {key: karpenter.k8s.aws/instance-generation, operator: Gt, values: ['5']}";

/// The web and batch cases of `benches/gen-cost.py` (same requests, same order) on its narrow
/// pool, on-demand, default pod density.
fn narrow_pool_case(prefix: &str, shapes: &[(u32, u32)], replicas: u32) -> Vec<String> {
    gen_cost_case(
        &format!(
            "        - {{key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}}\n{NARROW_TYPES}"
        ),
        prefix,
        shapes,
        replicas,
    )
}

/// The same on its narrow pool with spot allowed: spot or on-demand.
fn narrow_spot_case(prefix: &str, shapes: &[(u32, u32)], replicas: u32) -> Vec<String> {
    gen_cost_case(
        &format!(
            "        - {{key: karpenter.sh/capacity-type, operator: In, values: [spot, on-demand]}}\n{NARROW_TYPES}"
        ),
        prefix,
        shapes,
        replicas,
    )
}

/// The same on its broad spot pool: every x86 type, spot or on-demand, default pod density.
fn broad_spot_case(prefix: &str, shapes: &[(u32, u32)], replicas: u32) -> Vec<String> {
    gen_cost_case(
        "        - {key: karpenter.sh/capacity-type, operator: In, values: [spot, on-demand]}",
        prefix,
        shapes,
        replicas,
    )
}

/// One NodePool with `requirements`, and a Deployment of `replicas` per shape of `shapes`.
fn gen_cost_case(
    requirements: &str,
    prefix: &str,
    shapes: &[(u32, u32)],
    replicas: u32,
) -> Vec<String> {
    let mut docs = vec![NODECLASS.to_string(), nodepool("default", "", requirements)];
    for (d, (cpu, memory)) in shapes.iter().enumerate() {
        docs.push(sized_deployment(
            &format!("{prefix}-{d}"),
            replicas,
            *cpu,
            *memory,
            "",
        ));
    }
    docs
}

/// `benches/gen-cost.py`'s batch Deployments: (CPU millicores, memory MiB) of each, drawn with
/// its seed.
const BATCH: [(u32, u32); 20] = [
    (4000, 65536),
    (8000, 4096),
    (8000, 16384),
    (4000, 4096),
    (4000, 16384),
    (16000, 16384),
    (8000, 65536),
    (2000, 16384),
    (4000, 8192),
    (16000, 4096),
    (2000, 8192),
    (4000, 8192),
    (2000, 8192),
    (4000, 65536),
    (16000, 65536),
    (4000, 16384),
    (4000, 16384),
    (4000, 65536),
    (4000, 8192),
    (2000, 4096),
];

/// Where cost sizing changes the plan, it must not be dearer than sizing by fit alone (every
/// fitting type kept, as upstream). Capping a pile whose room ran out in one resource at its
/// type, because a larger type added little room for the *average* pod, cost more here: the
/// third web NodeClaim stopped at a c8i.96xlarge out of memory with CPU left over (an m8i, $2.33
/// dearer, would have taken 264 more pods), and the pods it turned away needed a third
/// c8i.96xlarge where an m6a.48xlarge had held them: $92.29/h against $84.92/h; the batch plan
/// stopped at an r6a.48xlarge and then needed an m8i.96xlarge: $71.85/h against $70.08/h.
#[test]
fn capped_growth_is_never_dearer_than_sizing_by_fit() {
    let cost = fleet_cost;
    for (name, docs) in [
        ("web", narrow_pool_case("web", &WEB, 100)),
        ("batch", narrow_pool_case("batch", &BATCH, 10)),
    ] {
        let by_cost = run(&docs);
        let by_fit = run_with(
            &docs,
            Options {
                every_fitting_type: true,
                ..Options::default()
            },
        );
        assert!(by_cost.unschedulable.is_empty(), "{name}");
        assert!(
            cost(&by_cost) <= cost(&by_fit) + 1e-9,
            "{name}: ${:.2}/h sized by cost, ${:.2}/h by fit",
            cost(&by_cost),
            cost(&by_fit)
        );
    }
}

/// `benches/gen-cost.py`'s batch workload on its narrow pool (c, m and r types of generation > 5,
/// on-demand). Every strategy of the round sizes its NodeClaims for the round's pods as a whole
/// and piles CPU-heavy and memory-heavy pods on m6a-sized nodes: $59.70/h. Solved again alone,
/// a few NodeClaims together pair their pods differently (CPU-heavy ones on c types,
/// memory-heavy ones on r types), and the cheaper groups replace them: $56.85/h. Every pod is
/// still placed once, and the plan is still within the blast-radius target.
#[test]
fn planned_nodeclaims_solved_again_in_groups_pair_their_pods_more_cheaply() {
    let report = run_placing_all(&narrow_pool_case("batch", &BATCH, 10), 200);
    let cost = fleet_cost(&report);
    assert!(cost < 58.0, "${cost:.2}/h");
    let pods: BTreeSet<&String> = report.nodeclaims.iter().flat_map(|c| &c.pods).collect();
    let placed: usize = report.nodeclaims.iter().map(|c| c.pods.len()).sum();
    assert_eq!((pods.len(), placed), (200, 200));
    let names: BTreeSet<&String> = report.nodeclaims.iter().map(|c| &c.name).collect();
    assert_eq!(names.len(), report.nodeclaims.len());
    // The 16-CPU / 64Gi pod needs an m6a.8xlarge ($1.38/h) alone.
    assert_within_blast_radius(&report, 1.3824);
}

/// The same batch pods on the narrow pool with spot allowed. Solved together, every group still
/// piles CPU-heavy and memory-heavy pods on m6a nodes and one r8i.96xlarge ($7.35/h): $19.23/h.
/// Split by memory per CPU, a group's CPU-heavy pods go to c6a and its memory-heavy ones to r6a
/// types, cheaper than any pile of both ($18.18/h). Grouped by the fractional assignment of their
/// shapes to the pool's types, $17.53/h; planned from integer patterns (whole pods per node, one
/// NodeClaim per pattern no dearer than its node), $16.62/h: under $17.00/h, every pod placed
/// once, within the target.
#[test]
fn regrouped_batch_pods_go_on_compute_and_memory_types() {
    let docs = narrow_spot_case("batch", &BATCH, 10);
    let report = run_placing_all(&docs, 200);
    let cost = fleet_cost(&report);
    assert!(cost < 17.0, "${cost:.2}/h");
    let placed: usize = report.nodeclaims.iter().map(|c| c.pods.len()).sum();
    assert_eq!(placed, 200);
    // Within 4x the median NodeClaim, whatever the largest pod needs alone.
    assert_within_blast_radius(&report, 0.0);
}

/// The same batch pods, one Deployment spread over zones. Solved alone, a group's pods would not
/// count the pods of the spread outside the group, so such a round is not regrouped: the spread
/// holds over every zone, as it must whatever the plan.
#[test]
fn a_zone_spread_holds_in_a_round_of_batch_pods() {
    let mut docs = narrow_pool_case("batch", &BATCH[1..], 10);
    let (cpu, memory) = BATCH[0];
    let name = "spread-batch";
    docs.push(sized_deployment(
        name,
        10,
        cpu,
        memory,
        &spread(name, "topology.kubernetes.io/zone"),
    ));
    let report = run_placing_all(&docs, 200);
    assert!(assert_zone_skew_within_one(&report, name) >= 3);
}

/// `benches/gen-cost.py`'s batch workload on its broad spot pool (every x86 type, spot or
/// on-demand). The types cheapest per batch pod on spot are the largest, and the plan put 99 of
/// the 200 pods on one r8i.96xlarge ($7.35/h) beside t3a.2xlarge nodes ($0.08/h, the median):
/// 30.7x what the largest pod (16 CPU, 64Gi) needs alone, a $0.48/h node. Contained, the piles
/// stop at 4x that need. The strategy that piled most cheaply splits its piles for $19.43/h;
/// placing by load at the tight growth bound, which tied with it uncapped ($19.22/h), splits
/// them for $19.08/h: every strategy's capped plan is weighed, not the cheapest pile's alone.
/// Planned again from integer patterns (types above 4x the patterns' median node usable only by
/// a pod that needs one), $16.48/h on ten nodes.
#[test]
fn batch_piles_on_a_broad_spot_pool_stop_at_the_blast_radius() {
    let docs = broad_spot_case("batch", &BATCH, 10);
    let report = run_placing_all(&docs, 200);
    let cost = fleet_cost(&report);
    assert!(cost < 17.0, "${cost:.2}/h");
    // The 16-CPU / 64Gi pod needs a $0.48/h spot type alone.
    assert_within_blast_radius(&report, 0.48);
}

/// `benches/gen-cost.py --workload mixed --pool narrow --capacity od --max-pods 110`: 1,000
/// web, 400 memory-heavy and 60 batch pods on c/m/r types of generation > 5. The chosen plan
/// had 394 NodeClaims for $77.91/h, and consolidation emptied its cheapest ones into the room
/// the others left. Solved again with those NodeClaims' pods placed last, the others' room takes
/// them before they open NodeClaims of their own: 326 NodeClaims, $72.80/h.
#[test]
fn pods_of_emptiable_nodeclaims_placed_last_fill_the_room_the_others_left() {
    let report = plan_fixture(include_str!("fixtures/cost/mixed-narrow-od-110.yaml"), 1460);
    let cost = fleet_cost(&report);
    assert!(cost < 75.0, "${cost:.2}/h");
}

/// `benches/gen-cost.py --workload mixed --pool broad --capacity od`: 1,000 web, 400
/// memory-heavy and 60 batch pods on every x86 on-demand type. The cheapest plan that kept the
/// blast-radius target put them all on seven 48xlarge nodes for $72.66/h, CPU full and a third
/// of the memory idle; sizing by shape broke the target uncapped, and capped it keeps every kind
/// of pod on the types cheapest for it for $68.51/h: a strategy whose piles broke the target is
/// capped even when the best plan kept it.
#[test]
fn a_capped_plan_that_broke_the_blast_radius_may_beat_one_that_kept_it() {
    let report = plan_fixture(include_str!("fixtures/cost/mixed-broad-od.yaml"), 1460);
    let cost = fleet_cost(&report);
    assert!(cost < 70.0, "${cost:.2}/h");
    // The 16-CPU / 64Gi batch pod needs a $1.376/h on-demand type (m5a.8xlarge) alone.
    assert_within_blast_radius(&report, 1.376);
}

/// `benches/gen-cost.py --workload mixed --pool narrow --capacity od --daemonsets`: 1,460 web,
/// memory-heavy and batch pods beside a typical set of DaemonSets on c/m/r types. The rounds
/// planned eight r6a.48xlarge ($69.08/h, within the blast-radius target). The cheapest integer
/// patterns broke the target (median node $1.38/h), and each tighter bound on node price lowered
/// the median with the nodes it left out; with the bound only ever lowered, the fifth set of
/// patterns keeps it: $65.63/h. A pattern whose pods left over no longer include the one that
/// excused its node is not bought.
#[test]
fn patterns_found_again_under_a_falling_bound_keep_the_blast_radius() {
    let report = plan_fixture(include_str!("fixtures/cost/mixed-narrow-od-ds.yaml"), 1460);
    let cost = fleet_cost(&report);
    assert!(cost < 67.0, "${cost:.2}/h");
    // The 16-CPU / 64Gi batch pod needs an m6a.8xlarge ($1.3824/h) beside the DaemonSets.
    assert_within_blast_radius(&report, 1.3824);
}

/// `benches/gen-cost.py --workload constrained --pool broad --capacity spot --daemonsets`: the
/// constrained Deployments (2,600 pods, 100 of them with hostname anti-affinity) beside a typical
/// set of DaemonSets on every x86 type, spot or on-demand. The cheapest plan put an r6a.xlarge
/// at 5.9x the median NodeClaim ($12.08/h), and so did its own capped solve; the strategy that
/// splits these piles within the target (cheapest NodeClaim first) piled for more than 5% over
/// the best, and was never capped until every breaking strategy was: $12.58/h, within 4x. The
/// pods no constraint reads, planned apart, first lowered the median NodeClaim below a fourth of
/// the constrained pods' dearest ($11.83/h, 4.3x); with the constrained pods planned again under
/// 4x that median, $11.90/h within it.
#[test]
fn constrained_piles_on_a_broad_spot_pool_with_daemonsets_stay_within_the_blast_radius() {
    let report = plan_fixture(
        include_str!("fixtures/cost/constrained-broad-spot-ds.yaml"),
        2600,
    );
    assert!(pods_of(&report, "solo").iter().all(|(_, n)| *n <= 1));
    let cost = fleet_cost(&report);
    assert!(cost < 12.0, "${cost:.2}/h");
    assert_within_blast_radius(&report, 0.0);
}

/// `benches/gen-cost.py`'s constrained Deployments: (CPU millicores, memory MiB, the topology key
/// of their spread, if any) of each, in the generator's order.
const CONSTRAINED: [(u32, u32, &str); 30] = [
    (500, 2048, "topology.kubernetes.io/zone"),
    (750, 256, ""),
    (750, 1024, ""),
    (500, 256, "topology.kubernetes.io/zone"),
    (500, 1024, ""),
    (1000, 1024, "kubernetes.io/hostname"),
    (750, 2048, "topology.kubernetes.io/zone"),
    (250, 1024, ""),
    (500, 512, ""),
    (1000, 256, "topology.kubernetes.io/zone"),
    (250, 512, "kubernetes.io/hostname"),
    (500, 512, ""),
    (250, 512, "topology.kubernetes.io/zone"),
    (500, 2048, ""),
    (1000, 2048, ""),
    (500, 1024, "topology.kubernetes.io/zone"),
    (500, 1024, ""),
    (500, 2048, ""),
    (500, 512, "topology.kubernetes.io/zone"),
    (250, 256, ""),
    (750, 512, "kubernetes.io/hostname"),
    (250, 512, "topology.kubernetes.io/zone"),
    (1000, 1024, ""),
    (750, 2048, ""),
    (750, 2048, "topology.kubernetes.io/zone"),
    (500, 256, "kubernetes.io/hostname"),
    (250, 2048, ""),
    (500, 2048, "topology.kubernetes.io/zone"),
    (500, 1024, ""),
    (250, 1024, ""),
];

/// `benches/gen-cost.py`'s constrained workload (30 Deployments of 83-84 web-sized replicas, every
/// third spread over zones, every fifth other one over hostnames, and 100 replicas with hostname
/// anti-affinity to each other, which force 100 nodes) on its narrow on-demand pool, with
/// `kubelet` (a line of the node class) if not empty.
fn constrained_case(kubelet: &str) -> Vec<String> {
    let mut docs = vec![
        format!("{NODECLASS}{kubelet}"),
        nodepool(
            "default",
            "",
            &format!(
                "        - {{key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}}\n{NARROW_TYPES}"
            ),
        ),
    ];
    for (d, (cpu, memory, key)) in CONSTRAINED.into_iter().enumerate() {
        let name = format!("app-{d}");
        let replicas = if d < 10 { 84 } else { 83 };
        let constraint = if key.is_empty() {
            String::new()
        } else {
            spread(&name, key)
        };
        docs.push(sized_deployment(&name, replicas, cpu, memory, &constraint));
    }
    docs.push(solo(100, 750));
    docs
}

/// The constrained workload at kubelet `maxPods: 110`. Visiting planned NodeClaims in creation
/// order, every pod went to the first eight, which grew into m6a.16xlarge while most of the 100
/// forced nodes ran nearly empty: $65.86/h, the dearest NodeClaim 18.1x the median. Visited
/// fewest pods first, the pods fill the forced nodes: $63.96/h, the dearest 4.5x the median.
#[test]
fn pods_fill_the_nodes_anti_affinity_forces_before_any_grows_large() {
    let report = run_placing_all(&constrained_case("  kubelet: {maxPods: 110}\n"), 2600);
    let cost = fleet_cost(&report);
    assert!(cost < 64.5, "${cost:.2}/h");
    assert_no_nodeclaim_above_the_median_times(&report, 5.0);
}

/// The constrained workload at the default (ENI) pod density. Whichever NodeClaim the pods
/// visit first, the 1,000m pods built a pile (an m6a.32xlarge, 36.1x the median NodeClaim, for
/// $63.79/h) before the forced NodeClaims opened, or the pods spread over them evenly, each node
/// took the round's memory per CPU, a little more than a c6a.4xlarge holds, and nearly all grew
/// into m6a.4xlarge ($66.16/h). With the forced pods first and the memory-heavy pods last, the
/// forced nodes fill on CPU and the memory left over grows a few: below $63.5/h, no NodeClaim
/// above 4x the median.
#[test]
fn forced_nodes_open_first_and_memory_heavy_pods_fill_them_last() {
    let report = run_placing_all(&constrained_case(""), 2600);
    let cost = fleet_cost(&report);
    assert!(cost < 63.5, "${cost:.2}/h");
    assert_no_nodeclaim_above_the_median_times(&report, 4.0);
}

/// A Deployment whose template names a node stamps pods bound to it (the binding is kept beside
/// the spec the replicas share): none of them waits for capacity.
#[test]
fn a_template_naming_a_node_binds_every_replica() {
    let text = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: pinned, namespace: default}
spec:
  replicas: 3
  selector: {matchLabels: {app: pinned}}
  template:
    metadata: {labels: {app: pinned}}
    spec:
      nodeName: node-a
      containers: [{name: c, image: pause}]
"#;
    let parsed = manifest::parse_str(text, Path::new("test.yaml")).expect("YAML parses");
    let c = manifest::load(&parsed, chrono::Utc::now()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.pods.len(), 3);
    for pod in &c.pods {
        assert_eq!(pod.node_name(), Some("node-a"), "{}", pod.key());
        assert_eq!(
            pod.spec.node_name, None,
            "the binding is not in the shared spec"
        );
    }
    assert!(c.pending_pods().is_empty());
}

/// Requirements a type without the label meets by its absence, and zone IDs, as NodePools use
/// them upstream: `instance-gpu-name DoesNotExist` keeps GPU types out (every other type has no
/// GPU name), and `topology.k8s.aws/zone-id` picks zones by ID. Both used to leave every pod
/// unschedulable.
#[test]
fn gpu_types_kept_out_by_absence_and_zones_picked_by_id() {
    let catalog = Catalog::bundled("us-east-1").expect("catalog");
    let types = catalog.instance_types(&NodeClassSettings::for_family(AMIFamily::AL2023));
    let (zone, id) = types
        .iter()
        .flat_map(|it| &it.offerings)
        .find_map(|o| Some((o.zone.to_string(), o.zone_id.as_deref()?.to_string())))
        .expect("the catalog knows zone IDs");
    let report = run(&[
        NODECLASS.into(),
        nodepool(
            "no-gpu",
            "",
            &format!(
                "        - {{key: karpenter.k8s.aws/instance-gpu-name, operator: DoesNotExist}}\n        - {{key: topology.k8s.aws/zone-id, operator: In, values: [{id}]}}"
            ),
        ),
        deployment("web", 6, "1", ""),
    ]);
    assert!(
        report.unschedulable.is_empty(),
        "{:?}",
        report.unschedulable
    );
    assert_eq!(pods_per_zone(&report), BTreeMap::from([(zone, 6)]));
    for claim in &report.nodeclaims {
        assert!(
            !claim.instance_type.starts_with('g') && !claim.instance_type.starts_with('p'),
            "{}",
            claim.instance_type
        );
    }
}

/// `benches/gen-cost.py --workload constrained --pool narrow --capacity spot`: 2,600 web-sized
/// pods on c/m/r types, spot or on-demand; a third of the Deployments spread over zones, four over
/// hostnames, 100 replicas with hostname anti-affinity to each other. No round could regroup it
/// (moving one pod changes what another may do), so 100 NodeClaims took the round's mix of every
/// pod ($21.83/h). The 1,333 pods no constraint reads are planned apart: the constrained pods
/// alone, the free ones filling the room their NodeClaims leave and the rest on the types
/// cheapest for them in the cheapest zones, every constraint kept.
#[test]
fn pods_no_constraint_reads_are_planned_apart_from_the_constrained_ones() {
    let report = plan_fixture(
        include_str!("fixtures/cost/constrained-narrow-spot.yaml"),
        2600,
    );
    let cost = fleet_cost(&report);
    assert!(cost < 20.0, "${cost:.2}/h");
    assert_within_blast_radius(&report, 0.0);
    assert!(pods_of(&report, "solo").iter().all(|(_, n)| *n <= 1));
    for (d, (_, _, key)) in CONSTRAINED.into_iter().enumerate() {
        let name = format!("app-{d}");
        if key == "topology.kubernetes.io/zone" {
            assert_eq!(assert_zone_skew_within_one(&report, &name), 5, "{name}");
        } else if key == "kubernetes.io/hostname" {
            // More nodes than replicas: a node with two would be two above one with none.
            assert!(
                pods_of(&report, &name).iter().all(|(_, n)| *n <= 1),
                "{name}"
            );
        }
    }
    // Free pods (app-1 has no constraint and nothing selects it) share forced nodes.
    let shared = report.nodeclaims.iter().filter(|c| {
        c.pods.iter().any(|p| p.contains("/solo-")) && c.pods.iter().any(|p| p.contains("/app-1-"))
    });
    assert!(shared.count() > 0);
}
