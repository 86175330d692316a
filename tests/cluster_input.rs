//! `manifest::load` turns ordinary manifests into the cluster simulate reasons about: workloads
//! expand into the pods their controllers would create (named and owned the same way, with the
//! same uids every time), and every problem is reported with its file, document, object and
//! field.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use chrono::{DateTime, TimeZone, Utc};
use karpenter_rs::manifest::{self, Document, LoadError, LoadProblem};
use karpenter_rs::snapshot::{ClusterPod as Pod, Snapshot};
use pretty_assertions::assert_eq;

const NODE: &str = "ip-10-0-1-1.us-west-2.compute.internal";
const ALPHABET: &str = "bcdfghjklmnpqrstvwxz2456789";

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/cluster")
        .join(name)
}

fn now() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2025, 1, 2, 3, 4, 5)
        .single()
        .expect("valid date")
}

fn read(name: &str) -> Vec<Document> {
    manifest::read_paths(&[fixture(name)]).expect("fixture reads")
}

fn load(name: &str) -> Snapshot {
    manifest::load(&read(name), now()).unwrap_or_else(|e| panic!("{name} loads: {e}"))
}

fn load_errors(name: &str) -> Vec<LoadProblem> {
    match manifest::load(&read(name), now()) {
        Ok(_) => panic!("{name} should not load"),
        Err(LoadError { problems }) => problems,
    }
}

fn from_yaml(yaml: &str) -> Result<Snapshot, LoadError> {
    let docs = manifest::parse_str(yaml, Path::new("inline.yaml")).expect("valid YAML");
    manifest::load(&docs, now())
}

fn inline(yaml: &str) -> Snapshot {
    from_yaml(yaml).unwrap_or_else(|e| panic!("loads: {e}"))
}

fn name(pod: &Pod) -> &str {
    pod.metadata.name.as_deref().unwrap_or_default()
}

fn pods_owned_by<'a>(cluster: &'a Snapshot, kind: &str) -> Vec<&'a Pod> {
    cluster
        .pods
        .iter()
        .map(Arc::as_ref)
        .filter(|p| {
            p.metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.kind == kind && o.controller == Some(true))
        })
        .collect()
}

fn label<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    pod.metadata.labels.as_ref()?.get(key).map(String::as_str)
}

fn is_generated(suffix: &str, len: usize) -> bool {
    suffix.len() == len && suffix.chars().all(|c| ALPHABET.contains(c))
}

#[test]
fn mix_loads_every_kind() {
    let c = load("mix.yaml");
    assert_eq!(c.nodepools.len(), 1);
    assert_eq!(c.nodeclasses.len(), 1);
    assert_eq!(c.nodeclaims.len(), 0);
    assert_eq!(c.nodes.len(), 1);
    assert_eq!(c.daemonsets.len(), 1);
    assert_eq!(c.pdbs.len(), 1);
    assert_eq!(c.storage_classes.len(), 1);
    // 2 bare pods + 3 (Deployment) + 2 (StatefulSet) + 2 (Job parallelism)
    assert_eq!(c.pods.len(), 9);
    assert_eq!(c.persistent_volume_claims.len(), 2);
    let ignored: Vec<_> = c.ignored.iter().map(|i| i.object.as_str()).collect();
    assert_eq!(ignored, ["ConfigMap/settings", "CronJob/nightly"]);
    let cron = &c.ignored[1];
    assert!(cron.reason.contains("Job"), "{}", cron.reason);
    assert!(
        cron.source.ends_with("mix.yaml (document 13)"),
        "{}",
        cron.source
    );
    assert!(c.nodeclass_of(&c.nodepools[0]).is_some());
    assert!(c.nodeclass("default").is_some());
    assert!(c.nodeclass("other").is_none());
}

#[test]
fn deployment_pods_belong_to_a_replicaset_named_by_template_hash() {
    let c = load("mix.yaml");
    let pods = pods_owned_by(&c, "ReplicaSet");
    assert_eq!(pods.len(), 3);
    let owner = &pods[0].metadata.owner_references.as_ref().expect("owned")[0];
    assert_eq!(owner.api_version, "apps/v1");
    let hash = owner
        .name
        .strip_prefix("web-")
        .expect("ReplicaSet is <deployment>-<hash>");
    assert!(is_generated(hash, 10), "{}", owner.name);
    for pod in &pods {
        let suffix = name(pod)
            .strip_prefix(&format!("{}-", owner.name))
            .expect("<rs>-<suffix>");
        assert!(is_generated(suffix, 5), "{}", name(pod));
        assert_eq!(
            pod.metadata.owner_references.as_deref(),
            Some(&[owner.clone()][..])
        );
        assert_eq!(pod.metadata.namespace.as_deref(), Some("shop"));
        assert_eq!(label(pod, "app"), Some("web"));
        assert_eq!(label(pod, "tier"), Some("frontend"));
        assert_eq!(label(pod, "pod-template-hash"), Some(hash));
        let annotations = pod
            .metadata
            .annotations
            .as_ref()
            .expect("template annotations");
        assert_eq!(annotations["prometheus.io/scrape"], "true");
        assert_eq!(
            pod.metadata.generate_name.as_deref(),
            Some(&*format!("{}-", owner.name))
        );
        // Created with the Deployment, which has no timestamp: now.
        let created = pod.metadata.creation_timestamp.as_ref().expect("stamped");
        assert_eq!(created.0.as_second(), now().timestamp());
    }
    let mut names: Vec<_> = pods.iter().map(|p| name(p)).collect();
    names.dedup();
    assert_eq!(names.len(), 3, "pod names are distinct");
}

#[test]
fn requests_default_to_limits_like_the_api_server() {
    let c = load("mix.yaml");
    let pod = pods_owned_by(&c, "ReplicaSet")[0];
    let spec = &*pod.spec;
    let requests = spec.containers[0]
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .expect("requests");
    assert_eq!(requests["cpu"].0, "500m", "defaulted from the limit");
    assert_eq!(requests["memory"].0, "256Mi", "explicit request kept");
}

#[test]
fn statefulset_pods_are_ordinals_with_their_claims() {
    let c = load("mix.yaml");
    let pods = pods_owned_by(&c, "StatefulSet");
    let names: Vec<_> = pods.iter().map(|p| name(p)).collect();
    assert_eq!(names, ["db-0", "db-1"]);
    for (i, pod) in pods.iter().enumerate() {
        let owner = &pod.metadata.owner_references.as_ref().expect("owned")[0];
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str()),
            ("StatefulSet", "db")
        );
        assert_eq!(
            label(pod, "statefulset.kubernetes.io/pod-name"),
            Some(name(pod))
        );
        assert_eq!(
            label(pod, "apps.kubernetes.io/pod-index"),
            Some(&*i.to_string())
        );
        let spec = &*pod.spec;
        assert_eq!(spec.hostname.as_deref(), Some(name(pod)));
        assert_eq!(spec.subdomain.as_deref(), Some("db"));
        let volume = &spec.volumes.as_ref().expect("claim volume")[0];
        assert_eq!(volume.name, "data");
        let claim = volume.persistent_volume_claim.as_ref().expect("pvc source");
        assert_eq!(claim.claim_name, format!("data-db-{i}"));
    }
    let claims: Vec<_> = c
        .persistent_volume_claims
        .iter()
        .map(|pvc| {
            let spec = pvc.spec.as_ref().expect("spec");
            (
                pvc.metadata.namespace.as_deref().unwrap_or_default(),
                pvc.metadata.name.as_deref().unwrap_or_default(),
                spec.storage_class_name.as_deref().unwrap_or_default(),
                pvc.status
                    .as_ref()
                    .and_then(|s| s.phase.as_deref())
                    .unwrap_or_default(),
                spec.volume_name.is_none(),
            )
        })
        .collect();
    assert_eq!(
        claims,
        [
            ("shop", "data-db-0", "gp3", "Pending", true),
            ("shop", "data-db-1", "gp3", "Pending", true)
        ]
    );
    let labels = c.persistent_volume_claims[0]
        .metadata
        .labels
        .as_ref()
        .expect("labels");
    assert_eq!(labels.get("app").map(String::as_str), Some("db"));
}

#[test]
fn job_runs_parallelism_pods() {
    let c = load("mix.yaml");
    let pods = pods_owned_by(&c, "Job");
    assert_eq!(pods.len(), 2);
    let owner = &pods[0].metadata.owner_references.as_ref().expect("owned")[0];
    assert_eq!(
        (owner.api_version.as_str(), owner.name.as_str()),
        ("batch/v1", "report")
    );
    for pod in pods {
        let suffix = name(pod).strip_prefix("report-").expect("<job>-<suffix>");
        assert!(is_generated(suffix, 5), "{}", name(pod));
        assert_eq!(pod.metadata.namespace.as_deref(), Some("default"));
        assert_eq!(label(pod, "job-name"), Some("report"));
        assert_eq!(
            label(pod, "batch.kubernetes.io/controller-uid"),
            Some(owner.uid.as_str())
        );
    }
}

#[test]
fn job_pod_count_follows_parallelism_completions_and_suspend() {
    let job = |extra: &str| {
        let c = inline(&format!(
            "apiVersion: batch/v1\nkind: Job\nmetadata: {{name: j}}\nspec:\n{extra}  template:\n    spec:\n      restartPolicy: Never\n      containers: [{{name: c, image: i}}]\n"
        ));
        c.pods
            .iter()
            .map(|p| name(p).to_owned())
            .collect::<Vec<_>>()
    };
    assert_eq!(job("").len(), 1, "parallelism defaults to 1");
    assert_eq!(job("  parallelism: 5\n  completions: 3\n").len(), 3);
    assert_eq!(job("  parallelism: 4\n").len(), 4);
    assert_eq!(job("  parallelism: 4\n  suspend: true\n").len(), 0);
    let indexed = job("  parallelism: 2\n  completions: 2\n  completionMode: Indexed\n");
    assert!(
        indexed[0].starts_with("j-0-") && indexed[1].starts_with("j-1-"),
        "{indexed:?}"
    );
}

#[test]
fn daemonsets_stay_daemonsets() {
    let c = load("mix.yaml");
    assert!(pods_owned_by(&c, "DaemonSet").is_empty());
    let ds = &c.daemonsets[0];
    assert_eq!(ds.metadata.namespace.as_deref(), Some("kube-system"));
}

#[test]
fn bare_pods_keep_their_identity_and_get_a_status() {
    let c = load("mix.yaml");
    let debug = c
        .pods
        .iter()
        .find(|p| name(p) == "debug")
        .expect("bare pod");
    assert_eq!(debug.metadata.namespace.as_deref(), Some("default"));
    assert_eq!(label(debug, "purpose"), Some("debugging"));
    let created = debug.metadata.creation_timestamp.as_ref().expect("kept");
    assert_eq!(created.0.to_string(), "2024-05-01T10:00:00Z");
    let status = debug.status.as_ref().expect("status");
    assert_eq!(status.phase.as_deref(), Some("Pending"));
    let condition = &status.conditions.as_ref().expect("conditions")[0];
    assert_eq!(
        (
            condition.type_.as_str(),
            condition.status.as_str(),
            condition.reason.as_deref()
        ),
        ("PodScheduled", "False", Some("Unschedulable"))
    );

    let bound = c.bound_pods();
    assert_eq!(bound.keys().copied().collect::<Vec<_>>(), [NODE]);
    let coredns = bound[NODE][0];
    assert_eq!(name(coredns), "coredns-6f8c7d9b5c-x2x7q");
    let phase = coredns.status.as_ref().and_then(|s| s.phase.as_deref());
    assert_eq!(phase, Some("Running"));

    let pending: Vec<_> = c.pending_pods().into_iter().map(name).collect();
    assert_eq!(pending.len(), 8, "{pending:?}");
    assert!(!pending.contains(&"coredns-6f8c7d9b5c-x2x7q"));
}

#[test]
fn uids_are_unique_and_loading_is_deterministic() {
    let first = load("mix.yaml");
    let second = load("mix.yaml");
    assert_eq!(format!("{first:?}"), format!("{second:?}"));

    let uids: Vec<&str> = first
        .pods
        .iter()
        .map(|p| p.metadata.uid.as_deref().expect("uid"))
        .collect();
    let mut unique = uids.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), uids.len());
    for uid in &uids {
        let groups: Vec<usize> = uid.split('-').map(str::len).collect();
        assert_eq!(groups, [8, 4, 4, 4, 12], "{uid} is UUID-shaped");
    }

    // The clock only stamps creation times; names and uids do not depend on it.
    let later =
        manifest::load(&read("mix.yaml"), now() + chrono::Duration::hours(1)).expect("loads");
    let identity = |c: &Snapshot| -> Vec<(String, String)> {
        c.pods
            .iter()
            .map(|p| {
                (
                    name(p).to_owned(),
                    p.metadata.uid.clone().unwrap_or_default(),
                )
            })
            .collect()
    };
    assert_eq!(identity(&first), identity(&later));
}

#[test]
fn lists_from_kubectl_get_are_read_item_by_item() {
    let c = inline(
        "apiVersion: v1
kind: List
items:
  - apiVersion: v1
    kind: Node
    metadata: {name: a}
  - apiVersion: v1
    kind: ConfigMap
    metadata: {name: b}
---
apiVersion: v1
kind: NodeList
items:
  - metadata: {name: c}
",
    );
    let nodes: Vec<_> = c
        .nodes
        .iter()
        .filter_map(|n| n.metadata.name.as_deref())
        .collect();
    assert_eq!(nodes, ["a", "c"]);
    assert_eq!(c.ignored.len(), 1);
}

#[test]
fn statefulset_reuses_pods_and_claims_that_exist() {
    let c = inline(
        "apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db}
spec:
  replicas: 2
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec: {containers: [{name: c, image: i}]}
  volumeClaimTemplates:
    - metadata: {name: data}
      spec:
        storageClassName: io2
        resources: {requests: {storage: 1Gi}}
---
apiVersion: v1
kind: Pod
metadata: {name: db-0, labels: {app: db}}
spec:
  nodeName: n1
  containers: [{name: c, image: i}]
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: data-db-0}
spec:
  volumeName: pv-0
  resources: {requests: {storage: 1Gi}}
",
    );
    let names: Vec<_> = c.pods.iter().map(|p| name(p)).collect();
    assert_eq!(names, ["db-0", "db-1"]);
    let claims: Vec<_> = c
        .persistent_volume_claims
        .iter()
        .map(|p| {
            let class = p
                .spec
                .as_ref()
                .and_then(|s| s.storage_class_name.as_deref());
            (p.metadata.name.as_deref().unwrap_or_default(), class)
        })
        .collect();
    // No default StorageClass here, so the given claim keeps no class.
    assert_eq!(claims, [("data-db-0", None), ("data-db-1", Some("io2"))]);
}

#[test]
fn generated_names_avoid_pods_that_exist() {
    let deployment = |replicas: u32| {
        format!(
            "apiVersion: apps/v1
kind: ReplicaSet
metadata: {{name: rs}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: a}}}}
  template:
    metadata: {{labels: {{app: a}}}}
    spec: {{containers: [{{name: c, image: i}}]}}
"
        )
    };
    let alone = inline(&deployment(1));
    let taken = name(&alone.pods[0]).to_owned();
    let both = inline(&format!(
        "{}---\napiVersion: v1\nkind: Pod\nmetadata: {{name: {taken}}}\nspec: {{containers: [{{name: c, image: i}}]}}\n",
        deployment(1)
    ));
    let names: Vec<_> = both.pods.iter().map(|p| name(p)).collect();
    assert_eq!(names.len(), 2);
    assert_eq!(names[0], taken);
    assert_ne!(names[1], taken);
    assert!(names[1].starts_with("rs-"));
    assert_eq!(inline(&deployment(0)).pods.len(), 0);
}

#[test]
fn pending_pods_skip_finished_gated_and_daemon_pods() {
    let c = inline(
        "apiVersion: v1
kind: Pod
metadata: {name: done}
spec: {containers: [{name: c, image: i}]}
status: {phase: Succeeded}
---
apiVersion: v1
kind: Pod
metadata: {name: gated}
spec:
  schedulingGates: [{name: example.com/wait}]
  containers: [{name: c, image: i}]
---
apiVersion: v1
kind: Pod
metadata:
  name: logger-abcde
  ownerReferences: [{apiVersion: apps/v1, kind: DaemonSet, name: logger, uid: x, controller: true}]
spec: {containers: [{name: c, image: i}]}
---
apiVersion: v1
kind: Pod
metadata: {name: seen}
spec: {containers: [{name: c, image: i}]}
status:
  phase: Pending
  conditions: [{type: PodScheduled, status: 'False', reason: Unschedulable}]
---
apiVersion: v1
kind: Pod
metadata: {name: fresh}
spec: {containers: [{name: c, image: i}]}
status: {phase: Pending}
",
    );
    let pending: Vec<_> = c.pending_pods().into_iter().map(name).collect();
    assert_eq!(pending, ["seen", "fresh"]);
    assert!(c.bound_pods().is_empty());
}

#[test]
fn v1beta1_nodepool_points_at_convert() {
    let problems = load_errors("errors/v1beta1-nodepool.yaml");
    assert_eq!(problems.len(), 1, "{problems:?}");
    let p = &problems[0];
    assert_eq!(p.object, "NodePool/default");
    assert_eq!(p.path, "apiVersion");
    assert_eq!(p.source.document, 1);
    assert!(
        p.message.contains("karpenter-rs convert -f"),
        "{}",
        p.message
    );
    assert!(p.message.contains("v1beta1-nodepool.yaml"), "{}", p.message);
}

#[test]
fn legacy_karpenter_kinds_point_at_convert() {
    for (api_version, kind) in [
        ("karpenter.sh/v1alpha5", "Provisioner"),
        ("karpenter.k8s.aws/v1alpha1", "AWSNodeTemplate"),
        ("karpenter.k8s.aws/v1beta1", "EC2NodeClass"),
    ] {
        let yaml = format!("apiVersion: {api_version}\nkind: {kind}\nmetadata: {{name: x}}\n");
        let Err(e) = from_yaml(&yaml) else {
            panic!("{kind} should be rejected")
        };
        assert!(e.to_string().contains("karpenter-rs convert"), "{e}");
    }
}

#[test]
fn invalid_nodepool_reports_every_problem() {
    let problems = load_errors("errors/invalid-nodepool.yaml");
    let fields: Vec<_> = problems.iter().map(|p| p.path.as_str()).collect();
    assert_eq!(
        fields,
        [
            "spec.template.metadata.labels",
            "spec.template.spec.nodeClassRef.name",
            "spec.weight",
        ],
        "{problems:#?}"
    );
    for p in &problems {
        assert_eq!(p.object, "NodePool/broken");
        assert_eq!(p.source.document, 2);
        assert!(p.source.file.ends_with("errors/invalid-nodepool.yaml"));
        let line = p.to_string();
        assert!(
            line.contains("invalid-nodepool.yaml (document 2): NodePool/broken: spec."),
            "{line}"
        );
    }
    assert!(problems[2].message.contains("greater than or equal to 1"));
}

#[test]
fn malformed_manifests_report_file_object_and_field() {
    let problems = load_errors("errors/malformed.yaml");
    let found: Vec<(usize, &str, &str)> = problems
        .iter()
        .map(|p| (p.source.document, p.object.as_str(), p.path.as_str()))
        .collect();
    assert_eq!(
        found,
        [
            (1, "Deployment/three", "spec.replicas"),
            (2, "Pod/greedy", "spec.containers[0].resources.requests.cpu"),
            (3, "Deployment/negative", "spec.replicas"),
            (4, "Pod/<unnamed>", "metadata.name"),
            (5, "Pod/greedy", "metadata.name"),
            (6, "Deployment/mismatched", "spec.template.metadata.labels"),
            (7, "Deployment/ancient", "apiVersion"),
            (
                8,
                "Pod/inverted",
                "spec.containers[0].resources.requests.cpu"
            ),
        ],
        "{problems:#?}"
    );
    let message = |i: usize| problems[i].message.as_str();
    assert!(message(0).contains("expected i32"), "{}", message(0));
    assert!(
        message(1).contains("\"lots\"") && message(1).contains("500m"),
        "{}",
        message(1)
    );
    assert!(
        message(2).contains("greater than or equal to 0"),
        "{}",
        message(2)
    );
    assert!(message(3).contains("Required value"), "{}", message(3));
    assert!(
        message(4).contains("Duplicate") && message(4).contains("document 2"),
        "{}",
        message(4)
    );
    assert!(message(5).contains("selector"), "{}", message(5));
    assert!(message(6).contains("apps/v1"), "{}", message(6));
    assert!(message(7).contains("cpu limit of 1"), "{}", message(7));

    let rendered = manifest::load(&read("errors/malformed.yaml"), now())
        .expect_err("invalid")
        .to_string();
    assert!(
        rendered.starts_with("8 problems in the manifests:"),
        "{rendered}"
    );
    assert!(
        rendered.contains("malformed.yaml (document 1): Deployment/three: spec.replicas: "),
        "{rendered}"
    );
}

#[test]
fn documents_without_kind_or_mapping_are_errors() {
    let Err(e) = from_yaml("metadata: {name: x}\n---\n- a\n- b\n") else {
        panic!("should fail")
    };
    let paths: Vec<_> = e
        .problems
        .iter()
        .map(|p| (p.source.document, p.path.as_str()))
        .collect();
    assert_eq!(paths, [(1, "kind"), (2, "")]);
}

#[test]
fn unknown_kinds_from_other_groups_are_ignored() {
    let c = inline("apiVersion: batch.volcano.sh/v1alpha1\nkind: Job\nmetadata: {name: j}\n");
    assert!(c.pods.is_empty());
    assert_eq!(c.ignored[0].object, "Job/j");
}

#[test]
fn namespaces_separate_duplicates() {
    let pod = |ns: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: p, namespace: {ns}}}\nspec: {{containers: [{{name: c, image: i}}]}}\n"
        )
    };
    let c = inline(&format!("{}---\n{}", pod("a"), pod("b")));
    assert_eq!(c.pods.len(), 2);
    assert!(from_yaml(&format!("{}---\n{}", pod("a"), pod("a"))).is_err());
}

fn region(yaml: &str) -> Option<String> {
    inline(yaml).region_hint()
}

const NODEPOOL_IN_ZONES: &str = "apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: p}
spec:
  template:
    spec:
      requirements:
        - {key: topology.kubernetes.io/zone, operator: In, values: [eu-central-1b]}
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: missing}
";

fn node(labels: &BTreeMap<&str, &str>) -> String {
    let labels: Vec<String> = labels.iter().map(|(k, v)| format!("{k}: {v}")).collect();
    format!(
        "apiVersion: v1\nkind: Node\nmetadata:\n  name: n\n  labels: {{{}}}\n",
        labels.join(", ")
    )
}

#[test]
fn region_hint_prefers_node_region_label() {
    let labels = BTreeMap::from([
        ("topology.kubernetes.io/region", "ap-southeast-2"),
        ("topology.kubernetes.io/zone", "ap-southeast-2a"),
    ]);
    let yaml = format!("{}---\n{NODEPOOL_IN_ZONES}", node(&labels));
    assert_eq!(region(&yaml).as_deref(), Some("ap-southeast-2"));
}

#[test]
fn region_hint_falls_back_to_nodepool_zones_then_node_zones() {
    let zone_only = node(&BTreeMap::from([(
        "topology.kubernetes.io/zone",
        "us-gov-west-1a",
    )]));
    let both = format!("{zone_only}---\n{NODEPOOL_IN_ZONES}");
    assert_eq!(region(&both).as_deref(), Some("eu-central-1"));
    assert_eq!(region(&zone_only).as_deref(), Some("us-gov-west-1"));
    let local_zone = node(&BTreeMap::from([(
        "topology.kubernetes.io/zone",
        "us-west-2-lax-1a",
    )]));
    assert_eq!(region(&local_zone).as_deref(), Some("us-west-2"));
}

#[test]
fn region_hint_is_none_without_evidence() {
    assert_eq!(
        region("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n"),
        None
    );
    let zone_id = node(&BTreeMap::from([(
        "topology.kubernetes.io/zone",
        "usw2-az1",
    )]));
    assert_eq!(region(&zone_id), None);
}

#[test]
fn nodepool_with_missing_nodeclass_is_kept() {
    let c = inline(NODEPOOL_IN_ZONES);
    assert_eq!(c.nodepools.len(), 1);
    assert!(c.nodeclass_of(&c.nodepools[0]).is_none());
}
