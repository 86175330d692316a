//! Scenario tests for the disruption engine through `simulate`'s library entry: existing nodes,
//! NodeClaims and pods in, the commands and the reasons for every node left alone out.

use std::path::Path;

use chrono::{DateTime, TimeZone, Utc};
use karpenter_rs::apis::ec2nodeclass::AMIFamily;
use karpenter_rs::apis::hash::NODEPOOL_HASH_VERSION;
use karpenter_rs::catalog::Catalog;
use karpenter_rs::disruption::{self, Method};
use karpenter_rs::manifest;
use karpenter_rs::scheduling::instance_type::NodeClassSettings;
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
status:
  amis:
    - {id: ami-new, requirements: [{key: kubernetes.io/arch, operator: In, values: [amd64]}]}
"#;

/// Monday 2026-11-23 10:00 UTC.
fn monday_10() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 23, 10, 0, 0).unwrap()
}

fn nodepool(name: &str, disruption: &str, extra_template: &str) -> String {
    format!(
        r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {{name: {name}}}
spec:
  disruption:
{disruption}
  template:
    metadata: {{labels: {{team: blue}}}}
    spec:
      nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}
      requirements:
        - {{key: kubernetes.io/arch, operator: In, values: [amd64]}}
        - {{key: karpenter.sh/capacity-type, operator: In, values: [on-demand, spot]}}
{extra_template}
"#
    )
}

const CONSOLIDATE: &str = "    consolidationPolicy: WhenEmptyOrUnderutilized\n    consolidateAfter: 0s\n    budgets: [{nodes: \"100%\"}]";

/// A Node and its NodeClaim, created `age_hours` before Monday 10:00, with allocatable from the
/// catalog so the scheduler sees the real shape.
fn node(
    name: &str,
    pool: &str,
    instance_type: &str,
    capacity_type: &str,
    age_hours: i64,
    extra: &str,
) -> String {
    let catalog = Catalog::bundled("us-east-1").expect("catalog");
    let types = catalog.instance_types(&NodeClassSettings::for_family(AMIFamily::AL2023));
    let it = types
        .iter()
        .find(|t| t.name.as_ref() == instance_type)
        .expect("type in catalog");
    let alloc: Vec<String> = it
        .allocatable
        .to_list()
        .into_iter()
        .map(|(k, v)| format!("{k}: \"{}\"", v.0))
        .collect();
    let created = (monday_10() - chrono::Duration::hours(age_hours)).to_rfc3339();
    // Every label the instance type gives a real node (family, category, cpu, ...).
    let type_labels: String = it
        .labels
        .iter()
        .filter(|(k, _)| {
            !matches!(
                **k,
                "kubernetes.io/arch" | "kubernetes.io/os" | "node.kubernetes.io/instance-type"
            )
        })
        .map(|(k, v)| format!("    {k}: \"{v}\"\n"))
        .collect();
    let pool_obj =
        serde_yaml_ng::from_str::<karpenter_rs::apis::NodePool>(&nodepool(pool, CONSOLIDATE, ""))
            .expect("pool");
    let hash = pool_obj.static_hash();
    format!(
        r#"
apiVersion: v1
kind: Node
metadata:
  name: {name}
  creationTimestamp: "{created}"
  labels:
    kubernetes.io/hostname: {name}
    kubernetes.io/arch: amd64
    kubernetes.io/os: linux
    topology.kubernetes.io/zone: us-east-1a
    node.kubernetes.io/instance-type: {instance_type}
    karpenter.sh/capacity-type: {capacity_type}
    karpenter.sh/nodepool: {pool}
    karpenter.sh/initialized: "true"
    team: blue
{type_labels}spec:
  providerID: aws:///us-east-1a/i-{name}
status:
  allocatable: {{{alloc}}}
  conditions: [{{type: Ready, status: "True"}}]
---
apiVersion: karpenter.sh/v1
kind: NodeClaim
metadata:
  name: {name}
  creationTimestamp: "{created}"
  labels: {{karpenter.sh/nodepool: {pool}}}
  annotations:
    karpenter.sh/nodepool-hash: "{hash}"
    karpenter.sh/nodepool-hash-version: "{NODEPOOL_HASH_VERSION}"
{extra}
spec:
  requirements: [{{key: karpenter.sh/nodepool, operator: In, values: [{pool}]}}]
  nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}
status:
  nodeName: {name}
  providerID: aws:///us-east-1a/i-{name}
  imageID: ami-new
"#,
        alloc = alloc.join(", ")
    )
}

fn pod(name: &str, node: &str, cpu: &str, extra_meta: &str, extra_spec: &str) -> String {
    format!(
        r#"
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: default
  labels: {{app: {name}}}
{extra_meta}
spec:
  nodeName: {node}
  containers: [{{name: c, image: pause, resources: {{requests: {{cpu: "{cpu}", memory: 512Mi}}}}}}]
{extra_spec}
status: {{phase: Running}}
"#
    )
}

fn run_at(docs: &[String], now: DateTime<Utc>, options: EngineOptions) -> Report {
    let text = docs.join("\n---\n");
    let parsed = manifest::parse_str(&text, Path::new("test.yaml")).expect("YAML parses");
    let c = manifest::load(&parsed, now).unwrap_or_else(|e| panic!("{e}"));
    let catalog = Catalog::bundled("us-east-1").expect("catalog");
    simulate::simulate_with_disruption(&c, &catalog, &options, now, None)
}

fn run(docs: &[String]) -> Report {
    run_at(docs, monday_10(), EngineOptions::default())
}

fn commands(r: &Report) -> &[disruption::Command] {
    r.disruptions.as_deref().unwrap_or_default()
}

fn blocked_reason<'a>(r: &'a Report, node: &str) -> &'a str {
    r.blocked
        .as_ref()
        .and_then(|b| b.iter().find(|b| b.node == node))
        .map(|b| b.reason.as_str())
        .unwrap_or("")
}

#[test]
fn empty_nodes_are_deleted_up_to_the_budget() {
    let mut docs = vec![
        NODECLASS.to_string(),
        nodepool(
            "default",
            "    consolidationPolicy: WhenEmpty\n    consolidateAfter: 0s\n    budgets: [{nodes: \"30%\"}]",
            "",
        ),
    ];
    for i in 0..10 {
        docs.push(node(
            &format!("empty-{i}"),
            "default",
            "m5.large",
            "on-demand",
            48,
            "",
        ));
    }
    let r = run(&docs);
    let cmds = commands(&r);
    assert_eq!(cmds.len(), 1, "{cmds:#?}");
    assert_eq!(cmds[0].method, Method::Emptiness);
    assert_eq!(cmds[0].candidates.len(), 3, "30% of 10 nodes");
    assert!(cmds[0].savings > 0.0);
    let left = r.blocked.as_ref().unwrap();
    assert_eq!(left.len(), 7);
    assert!(
        left.iter()
            .all(|b| b.reason.contains("budget for Empty is used up")),
        "{left:#?}"
    );
}

#[test]
fn do_not_disrupt_blocks_consolidation_but_not_expiration() {
    let protected_pod = pod(
        "batch",
        "n1",
        "100m",
        "  annotations: {karpenter.sh/do-not-disrupt: \"true\"}",
        "",
    );
    let docs = vec![
        NODECLASS.to_string(),
        nodepool("default", CONSOLIDATE, ""),
        node("n1", "default", "m5.4xlarge", "on-demand", 24, ""),
        node("n2", "default", "m5.4xlarge", "on-demand", 24, ""),
        protected_pod.clone(),
        pod("web", "n2", "100m", "", ""),
    ];
    let r = run(&docs);
    assert!(
        commands(&r)
            .iter()
            .all(|c| !c.candidates.contains(&"n1".to_string())),
        "{:#?}",
        commands(&r)
    );
    assert!(
        blocked_reason(&r, "n1").contains("do-not-disrupt"),
        "{}",
        blocked_reason(&r, "n1")
    );
    // The same node past its expireAfter is expired regardless.
    // NodeClaims carry the expireAfter their NodePool had when they were created.
    let expiring = node("n1", "default", "m5.4xlarge", "on-demand", 24, "").replace(
        "  nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\nstatus:",
        "  nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n  expireAfter: 12h\nstatus:",
    );
    assert!(expiring.contains("expireAfter: 12h"));
    let docs = vec![
        NODECLASS.to_string(),
        nodepool("default", CONSOLIDATE, ""),
        expiring,
        protected_pod,
    ];
    let r = run(&docs);
    let cmd = commands(&r)
        .iter()
        .find(|c| c.candidates == ["n1"])
        .expect("n1 expires");
    assert_eq!(cmd.method, Method::Expiration);
    assert_eq!(cmd.replacements.len(), 1, "its pod needs a replacement");
}

#[test]
fn a_pdb_with_max_unavailable_zero_blocks() {
    let pdb = r#"
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: web, namespace: default}
spec:
  maxUnavailable: 0
  selector: {matchLabels: {app: web}}
"#;
    let docs = vec![
        NODECLASS.to_string(),
        nodepool("default", CONSOLIDATE, ""),
        node("big", "default", "m5.8xlarge", "on-demand", 24, ""),
        pod("web", "big", "100m", "", ""),
        pdb.to_string(),
    ];
    let r = run(&docs);
    assert!(commands(&r).is_empty(), "{:#?}", commands(&r));
    assert!(
        blocked_reason(&r, "big").contains("PodDisruptionBudget default/web allows no disruption"),
        "{}",
        blocked_reason(&r, "big")
    );
}

#[test]
fn a_small_pod_on_a_large_instance_is_replaced_by_a_cheaper_one() {
    let docs = vec![
        NODECLASS.to_string(),
        nodepool("default", CONSOLIDATE, ""),
        node("big", "default", "m5.8xlarge", "on-demand", 24, ""),
        pod("web", "big", "500m", "", ""),
    ];
    let r = run(&docs);
    let cmds = commands(&r);
    assert_eq!(cmds.len(), 1, "{cmds:#?}");
    let cmd = &cmds[0];
    assert_eq!(cmd.method, Method::SingleNodeConsolidation);
    assert_eq!(cmd.replacements.len(), 1);
    assert!(
        cmd.replacements[0].price < 1.536,
        "{:?}",
        cmd.replacements[0]
    );
    assert!(cmd.savings > 1.0, "{}", cmd.savings);
    assert!(r.cost.after.unwrap() < r.cost.before.unwrap());
}

#[test]
fn three_underutilized_nodes_merge_into_one() {
    let docs = vec![
        NODECLASS.to_string(),
        nodepool(
            "default",
            CONSOLIDATE,
            "        - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}",
        ),
        node("a", "default", "m5.2xlarge", "on-demand", 24, ""),
        node("b", "default", "m5.2xlarge", "on-demand", 24, ""),
        node("c", "default", "m5.2xlarge", "on-demand", 24, ""),
        pod("p1", "a", "1", "", ""),
        pod("p2", "b", "1", "", ""),
        pod("p3", "c", "1", "", ""),
    ];
    let r = run(&docs);
    let cmds = commands(&r);
    assert_eq!(cmds.len(), 1, "{cmds:#?}");
    assert_eq!(cmds[0].method, Method::MultiNodeConsolidation);
    assert_eq!(cmds[0].candidates.len(), 3);
    assert!(cmds[0].replacements.len() <= 1);
    assert!(cmds[0].savings > 0.0);
}

#[test]
fn anti_affinity_that_would_break_prevents_a_delete() {
    let anti = "  affinity:\n    podAntiAffinity:\n      requiredDuringSchedulingIgnoredDuringExecution:\n        - {topologyKey: kubernetes.io/hostname, labelSelector: {matchLabels: {tier: db}}}";
    let docs = vec![
        NODECLASS.to_string(),
        nodepool("default", CONSOLIDATE, ""),
        node("a", "default", "m5.large", "on-demand", 24, ""),
        node("b", "default", "m5.large", "on-demand", 24, ""),
        pod("db-0", "a", "100m", "  labels: {tier: db}", anti).replace(
            "labels: {app: db-0}\n  labels: {tier: db}",
            "labels: {app: db-0, tier: db}",
        ),
        pod("db-1", "b", "100m", "  labels: {tier: db}", anti).replace(
            "labels: {app: db-1}\n  labels: {tier: db}",
            "labels: {app: db-1, tier: db}",
        ),
    ];
    let r = run(&docs);
    // Neither node may simply be deleted: the other node already holds a db pod.
    for cmd in commands(&r) {
        assert!(
            !cmd.replacements.is_empty() || cmd.candidates.is_empty(),
            "a delete would break anti-affinity: {cmd:#?}"
        );
    }
}

#[test]
fn spot_is_not_replaced_by_spot_unless_15_cheaper_types_exist() {
    let docs = vec![
        NODECLASS.to_string(),
        nodepool("default", CONSOLIDATE, ""),
        node("spot-big", "default", "m5.8xlarge", "spot", 24, ""),
        pod("web", "spot-big", "500m", "", ""),
    ];
    // Gate off (the default): spot may only be deleted, never replaced by spot.
    let r = run(&docs);
    assert!(commands(&r).is_empty(), "{:#?}", commands(&r));
    assert!(
        blocked_reason(&r, "spot-big").contains("SpotToSpotConsolidation is disabled"),
        "{}",
        blocked_reason(&r, "spot-big")
    );
    // Gate on: plenty of cheaper spot types exist for a 500m pod, so it is replaced, with the
    // 15 cheapest as options.
    let options = EngineOptions {
        disruption: disruption::Options {
            spot_to_spot: true,
            ..Default::default()
        },
        ..Default::default()
    };
    let r = run_at(&docs, monday_10(), options.clone());
    let cmd = &commands(&r)[0];
    assert_eq!(cmd.replacements[0].capacity_type, "spot");
    assert_eq!(cmd.replacements[0].instance_type_options.len(), 15);
    // Restricted to its own family, fewer than 15 cheaper types exist: left alone.
    let narrow = nodepool(
        "default",
        CONSOLIDATE,
        "        - {key: karpenter.k8s.aws/instance-family, operator: In, values: [m5]}",
    );
    let docs = vec![
        NODECLASS.to_string(),
        narrow,
        node("spot-big", "default", "m5.8xlarge", "spot", 24, ""),
        pod("web", "spot-big", "500m", "", ""),
    ];
    let r = run_at(&docs, monday_10(), options);
    assert!(commands(&r).is_empty(), "{:#?}", commands(&r));
    assert!(
        blocked_reason(&r, "spot-big").contains("at least 15 cheaper instance types"),
        "{}",
        blocked_reason(&r, "spot-big")
    );
}

#[test]
fn a_business_hours_budget_blocks_drift_inside_the_window_only() {
    let pool = |label: &str| {
        nodepool(
            "default",
            "    consolidationPolicy: WhenEmpty\n    consolidateAfter: Never\n    budgets:\n      - {nodes: \"0\", schedule: \"0 9 * * mon-fri\", duration: 8h}\n      - {nodes: \"100%\"}",
            "",
        )
        .replace("team: blue", &format!("team: {label}"))
    };
    // The node was launched with team=blue; the pool now says green: drifted.
    let docs = vec![
        NODECLASS.to_string(),
        pool("green"),
        node("n1", "default", "m5.large", "on-demand", 24, ""),
        pod("web", "n1", "100m", "", ""),
    ];
    let inside = run(&docs);
    assert!(commands(&inside).is_empty(), "{:#?}", commands(&inside));
    assert!(
        blocked_reason(&inside, "n1").contains("budget for Drifted is used up"),
        "{}",
        blocked_reason(&inside, "n1")
    );
    let evening = Utc.with_ymd_and_hms(2026, 11, 23, 18, 0, 0).unwrap();
    let outside = run_at(&docs, evening, EngineOptions::default());
    let cmd = &commands(&outside)[0];
    assert_eq!(cmd.method, Method::Drift);
    assert_eq!(cmd.reason, "NodePoolDrifted");
    assert_eq!(cmd.replacements.len(), 1, "replacement first");
}

/// Three drifted nodes of a pool whose budget is `budget`, each running a small pod, the
/// oldest first; settled round after round.
fn drifted_three(budget: &str) -> (Vec<String>, Report) {
    let drifted = nodepool(
        "default",
        &format!("    consolidationPolicy: WhenEmpty\n    consolidateAfter: Never\n    budgets: [{{nodes: \"{budget}\"}}]"),
        "",
    )
    .replace("team: blue", "team: green");
    let docs = vec![
        NODECLASS.to_string(),
        drifted,
        node("young", "default", "m5.large", "on-demand", 2, ""),
        node("old", "default", "m5.large", "on-demand", 200, ""),
        node("middle", "default", "m5.large", "on-demand", 50, ""),
        pod("a", "young", "100m", "", ""),
        pod("b", "old", "100m", "", ""),
        pod("c", "middle", "100m", "", ""),
    ];
    let text = docs.join("\n---\n");
    let parsed = manifest::parse_str(&text, Path::new("test.yaml")).unwrap();
    let c = manifest::load(&parsed, monday_10()).unwrap();
    let catalog = Catalog::bundled("us-east-1").unwrap();
    let settled = simulate::simulate_with_disruption(
        &c,
        &catalog,
        &EngineOptions::default(),
        monday_10(),
        Some(std::time::Duration::from_secs(15)),
    );
    (docs, settled)
}

fn candidates_of(r: &Report) -> Vec<&str> {
    r.disruptions
        .as_ref()
        .unwrap()
        .iter()
        .map(|c| c.candidates[0].as_str())
        .collect()
}

#[test]
fn drift_replaces_one_node_at_a_time_oldest_first_under_a_budget_of_one() {
    let (docs, settled) = drifted_three("1");
    let r = run(&docs);
    assert_eq!(candidates_of(&r), ["old"]);
    // Settling rolls them all, one per round, oldest first, each replaced before removal.
    assert_eq!(candidates_of(&settled), ["old", "middle", "young"]);
    let log = settled.round_log.as_ref().unwrap();
    assert!(log.iter().all(|round| round.commands <= 1), "{log:?}");
    let cmds = settled.disruptions.as_ref().unwrap();
    assert!(cmds.iter().all(|c| c.candidates.len() == 1), "{cmds:#?}");
    // The first two nodes' pods fit on the others; the last one's need a replacement.
    assert!(cmds[0].replacements.is_empty() && cmds[1].replacements.is_empty());
    assert_eq!(cmds[2].replacements.len(), 1);
    assert!(settled.unschedulable.is_empty());
}

/// Upstream's drift decides one command per pass and counts on the next pass for the next node;
/// ours decides as many as the budget allows in one, each on the state the ones before it leave
/// (see the next test). A node an earlier command plans pods onto waits for a later pass: taken
/// at once, it would be tainted before those pods arrive, and they would wait for its
/// replacement instead of moving.
#[test]
fn drift_takes_as_many_nodes_in_one_pass_as_the_budget_allows_oldest_first() {
    let (docs, settled) = drifted_three("100%");
    let r = run(&docs);
    let taken = candidates_of(&r);
    assert_eq!(taken.len(), 2, "{:#?}", commands(&r));
    assert_eq!(taken[0], "old");
    let cmds = commands(&r);
    assert!(cmds.iter().all(|c| c.candidates.len() == 1), "{cmds:#?}");
    let left = ["middle", "young"]
        .into_iter()
        .find(|n| !taken.contains(n))
        .unwrap();
    assert!(
        blocked_reason(&r, left).contains("planned onto it; it goes in a later pass"),
        "{}",
        blocked_reason(&r, left)
    );
    let log = settled.round_log.as_ref().unwrap();
    assert_eq!(log[0].commands, 2, "{log:?}");
    assert_eq!(settled.disruptions.as_ref().unwrap().len(), 3);
    assert!(settled.unschedulable.is_empty());
    let budget_of_one = drifted_three("1").1;
    assert_eq!(budget_of_one.round_log.as_ref().unwrap()[0].commands, 1);
}

/// Two drifted m5.large of pool `default` (`old`, then `young`), each with a 1.2-CPU pod, and
/// `room`, an m5.large of another pool with room for one of those pods.
fn two_drifted_and_room_for_one() -> Vec<String> {
    let quiet = "    consolidationPolicy: WhenEmpty\n    consolidateAfter: Never\n    budgets: [{nodes: \"100%\"}]";
    let drifted = nodepool("default", quiet, "").replace("team: blue", "team: green");
    vec![
        NODECLASS.to_string(),
        drifted,
        nodepool("spare", quiet, ""),
        node("old", "default", "m5.large", "on-demand", 200, ""),
        node("young", "default", "m5.large", "on-demand", 2, ""),
        node("room", "spare", "m5.large", "on-demand", 1, ""),
        pod("a", "old", "1200m", "", ""),
        pod("b", "young", "1200m", "", ""),
    ]
}

/// A later drift command of the same pass does not plan its pods into room an earlier one's
/// pods take: two drifted nodes each run a pod of 1200m, and a node of another pool has room
/// for one of them. The first command moves its pod there; the second needs a replacement.
/// Decided on the pass's state alone, both would count on that room and one pod would wait.
#[test]
fn a_later_drift_command_of_a_pass_does_not_count_on_room_an_earlier_one_takes() {
    let r = run(&two_drifted_and_room_for_one());
    assert_eq!(candidates_of(&r), ["old", "young"], "{:#?}", r.blocked);
    let cmds = commands(&r);
    assert!(cmds[0].replacements.is_empty(), "{cmds:#?}");
    assert_eq!(cmds[1].replacements.len(), 1, "{cmds:#?}");
    assert_eq!(cmds[1].replacements[0].pods, ["default/b"]);
}

/// `run` validates the commands of a drift pass one by one on one fresh view, each started on it
/// before the next is validated. Validation hands back where its simulation moves the pods, so
/// the started view binds them there, as the engine decided the pass: left out, the first
/// command's pod would count as needing room, and could take the room (or nominate the
/// candidate) the next command's pods were planned into.
#[test]
fn each_validated_drift_command_leaves_its_moved_pods_bound_for_the_next() {
    use karpenter_rs::disruption::validation::{Stage, pods_to_move, validate};
    let docs = two_drifted_and_room_for_one();
    let cmds = commands(&run(&docs)).to_vec();
    let [deletion, replacement] = cmds.as_slice() else {
        panic!("two drift commands: {cmds:#?}");
    };
    let mut fresh = state_of(&docs);
    let index = |name: &str| fresh.nodes.iter().position(|n| n.name.as_ref() == name);
    let room = index("room").expect("room");
    let a = fresh
        .pods
        .iter()
        .position(|p| p.pod.key() == "default/a")
        .expect("a");
    let validated = validate(
        &fresh,
        deletion,
        &pods_to_move(&fresh, deletion),
        monday_10(),
        Stage::Decided,
    )
    .expect("the first command holds");
    assert!(validated.replanned.is_none());
    let moves = validated.moves;
    assert_eq!(moves, [(a, room)], "a moves to room");
    fresh.start(deletion, &moves, |k| format!("r{k}"));
    assert!(
        fresh.displaced_pods(&[]).is_empty(),
        "a is bound on room, not waiting for room: {:?}",
        fresh.displaced_pods(&[])
    );
    assert_eq!(
        validate(
            &fresh,
            replacement,
            &pods_to_move(&fresh, replacement),
            monday_10(),
            Stage::Decided
        )
        .map(|v| (v.moves, v.replanned.is_some())),
        Ok((vec![], false)),
        "b still needs its replacement, as planned: room is a's"
    );
}

#[test]
fn a_changed_ami_selection_drifts_the_nodes() {
    let docs = vec![
        NODECLASS.replace("ami-new", "ami-newer"),
        nodepool(
            "default",
            "    consolidationPolicy: WhenEmpty\n    consolidateAfter: Never",
            "",
        ),
        node("n1", "default", "m5.large", "on-demand", 24, ""),
        pod("web", "n1", "100m", "", ""),
    ];
    let r = run(&docs);
    let cmd = &commands(&r)[0];
    assert_eq!(cmd.method, Method::Drift);
    assert_eq!(cmd.reason, "AMIDrift");
}

#[test]
fn a_node_whose_instance_type_is_no_longer_offered_drifts() {
    let retired = node("n1", "default", "m5.large", "on-demand", 24, "").replace(
        "node.kubernetes.io/instance-type: m5.large",
        "node.kubernetes.io/instance-type: m5.retired",
    );
    let docs = vec![
        NODECLASS.into(),
        nodepool(
            "default",
            "    consolidationPolicy: WhenEmpty\n    consolidateAfter: Never",
            "",
        ),
        retired,
        node("n2", "default", "m5.large", "on-demand", 24, ""),
        pod("web", "n1", "100m", "", ""),
        pod("api", "n2", "100m", "", ""),
    ];
    let r = run(&docs);
    let drifted: Vec<(&str, &str)> = commands(&r)
        .iter()
        .filter(|c| c.method == Method::Drift)
        .flat_map(|c| c.candidates.iter().map(|n| (n.as_str(), c.reason.as_str())))
        .collect();
    assert_eq!(drifted, [("n1", "InstanceTypeNotFound")]);
}

#[test]
fn a_hash_version_mismatch_restamps_instead_of_drifting() {
    let upstream_stamped = node("n1", "default", "m5.large", "on-demand", 24, "")
        .replace(&format!("\"{NODEPOOL_HASH_VERSION}\""), "\"v3\"")
        .replace(
            "karpenter.sh/nodepool-hash: \"",
            "karpenter.sh/nodepool-hash: \"999",
        );
    let changed = nodepool(
        "default",
        "    consolidationPolicy: WhenEmpty\n    consolidateAfter: Never",
        "",
    )
    .replace("team: blue", "team: green");
    let docs = vec![
        NODECLASS.to_string(),
        changed,
        upstream_stamped,
        pod("web", "n1", "100m", "", ""),
    ];
    let r = run(&docs);
    assert!(commands(&r).is_empty(), "{:#?}", commands(&r));
    // Explain says why.
    let text = docs.join("\n---\n");
    let parsed = manifest::parse_str(&text, Path::new("test.yaml")).unwrap();
    let c = manifest::load(&parsed, monday_10()).unwrap();
    let catalog = Catalog::bundled("us-east-1").unwrap();
    let e =
        simulate::explain(&c, &catalog, &EngineOptions::default(), monday_10(), "n1").expect("n1");
    assert!(
        e.status
            .iter()
            .any(|s| s.contains("re-stamped, not drifted")),
        "{e}"
    );
    assert!(e.budgets.iter().any(|b| b.contains("Drifted")), "{e}");
}

#[test]
fn balanced_consolidation_needs_savings_worth_the_disruption() {
    let docs = |policy: &str| {
        vec![
            NODECLASS.to_string(),
            nodepool(
                "default",
                &format!(
                    "    consolidationPolicy: {policy}\n    consolidateAfter: 0s\n    budgets: [{{nodes: \"100%\"}}]"
                ),
                "        - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}",
            ),
            node("n1", "default", "m5.xlarge", "on-demand", 24, ""),
            pod("busy", "n1", "3", "", ""),
        ]
    };
    // A replacement saves a little: WhenEmptyOrUnderutilized takes it, Balanced does not.
    let r = run(&docs("WhenEmptyOrUnderutilized"));
    let cmd = &commands(&r)[0];
    assert_eq!(cmd.method, Method::SingleNodeConsolidation);
    assert!(cmd.savings > 0.0 && cmd.savings < 0.096, "{}", cmd.savings);
    let r = run(&docs("Balanced"));
    assert!(commands(&r).is_empty(), "{:#?}", commands(&r));
    assert!(
        blocked_reason(&r, "n1").contains("Balanced policy needs a score of at least 0.5"),
        "{}",
        blocked_reason(&r, "n1")
    );
}

/// The README's disruption example, loaded at [`monday_10`], with its catalog.
fn underutilized_example() -> (karpenter_rs::snapshot::Snapshot, Catalog) {
    let docs = manifest::read_paths(&[
        Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/disruption/underutilized.yaml")
    ])
    .unwrap();
    (
        manifest::load(&docs, monday_10()).unwrap(),
        Catalog::bundled("us-east-1").unwrap(),
    )
}

#[test]
fn the_table_shows_each_round_its_commands_and_the_nodes_left_alone() {
    let (c, catalog) = underutilized_example();
    let settled = simulate::simulate_with_disruption(
        &c,
        &catalog,
        &EngineOptions::default(),
        monday_10(),
        Some(std::time::Duration::from_secs(15)),
    );
    let cmds = settled.disruptions.as_ref().unwrap();
    let log = settled.round_log.as_ref().unwrap();
    // Every command belongs to exactly one logged round, and the last round found nothing.
    assert_eq!(log.iter().map(|r| r.commands).sum::<usize>(), cmds.len());
    assert_eq!(log.last().unwrap().commands, 0);
    assert_eq!(settled.rounds, Some(log.len() as u32));
    let table = settled.to_table();
    assert!(
        table.contains(&format!(
            "Disruption: {} command(s) in {} round(s).",
            cmds.len(),
            log.len()
        )),
        "{table}"
    );
    for (k, cmd) in cmds.iter().enumerate() {
        let line = table
            .lines()
            .find(|l| l.contains(&format!("{:?}", cmd.method)) && l.contains(&cmd.candidates[0]))
            .unwrap_or_else(|| panic!("command {k} ({cmd:?}) missing from\n{table}"));
        assert!(line.contains(&format!("{:.4}", cmd.savings)), "{line}");
        for r in &cmd.replacements {
            assert!(line.contains(&r.instance_type), "{line}");
        }
    }
    let rounds_with_commands = log.iter().filter(|r| r.commands > 0).count();
    assert_eq!(
        table.matches("cost after round").count(),
        rounds_with_commands
    );
    let after = settled.cost.after.unwrap();
    assert!(
        table.contains(&format!("Cost after disruption: ${after:.4}/hour")),
        "{table}"
    );
    for b in settled.blocked.as_ref().unwrap() {
        assert!(
            table.contains(&format!("  {}: {}", b.node, b.reason)),
            "{table}"
        );
    }
}

#[test]
fn without_disruption_the_table_has_no_disruption_part() {
    let (c, catalog) = underutilized_example();
    let table = simulate::simulate(&c, &catalog, &EngineOptions::default()).to_table();
    assert!(!table.contains("Disruption:"), "{table}");
}

/// A fleet planned by cost for pending pods (12 Deployments of 40 small replicas each, on a
/// NodePool open to every x86 type), then settled by consolidation: no round makes it dearer,
/// so the steady state costs no more than the first plan (issue #19, item 2).
#[test]
fn settling_a_cost_sized_plan_never_makes_it_dearer() {
    let mut docs = vec![NODECLASS.to_string(), nodepool("default", CONSOLIDATE, "")];
    for d in 0..12u32 {
        let cpu = [250, 500, 750, 1000][(d % 4) as usize];
        let memory = [256, 1024, 2048][(d % 3) as usize];
        docs.push(format!(
            r#"
apiVersion: apps/v1
kind: Deployment
metadata: {{name: web-{d}}}
spec:
  replicas: 40
  selector: {{matchLabels: {{app: web-{d}}}}}
  template:
    metadata: {{labels: {{app: web-{d}}}}}
    spec:
      containers:
        - {{name: c, image: pause, resources: {{requests: {{cpu: {cpu}m, memory: {memory}Mi}}}}}}
"#
        ));
    }
    let text = docs.join("\n---\n");
    let parsed = manifest::parse_str(&text, Path::new("test.yaml")).expect("YAML parses");
    let c = manifest::load(&parsed, monday_10()).unwrap_or_else(|e| panic!("{e}"));
    let catalog = Catalog::bundled("us-east-1").expect("catalog");
    let settled = simulate::simulate_with_disruption(
        &c,
        &catalog,
        &EngineOptions::default(),
        monday_10(),
        Some(std::time::Duration::from_secs(15)),
    );
    assert!(settled.unschedulable.is_empty());
    let first = settled.cost.before.unwrap();
    assert!(first > 0.0);
    let mut cost = first;
    for round in settled.round_log.as_ref().unwrap() {
        assert!(
            round.cost_after <= cost + 1e-9,
            "a round at {} raised the cost from ${cost:.4} to ${:.4}/h",
            round.at,
            round.cost_after
        );
        cost = round.cost_after;
    }
    assert!(settled.cost.after.unwrap() <= first + 1e-9);
}

/// `explain node` for each thing that can keep a node: the cause, the reason naming the object,
/// and the fix, from the same evaluation `run` makes.
#[test]
fn explain_node_names_each_blocking_cause_and_its_fix() {
    use karpenter_rs::disruption::Cause;
    let pdb = r#"
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: web, namespace: default}
spec:
  maxUnavailable: 0
  selector: {matchLabels: {app: web}}
"#;
    let big = || node("n1", "default", "m5.8xlarge", "on-demand", 24, "");
    let web = || pod("web", "n1", "100m", "", "");
    let uninitialized = big()
        .replace("    karpenter.sh/initialized: \"true\"\n", "")
        .replace(
            "[{type: Ready, status: \"True\"}]",
            "[{type: Ready, status: \"False\"}]",
        );
    let cases: Vec<(&str, Vec<String>, Cause, &str, &str)> = vec![
        (
            "do-not-disrupt pod",
            vec![
                nodepool("default", CONSOLIDATE, ""),
                big(),
                pod(
                    "batch",
                    "n1",
                    "100m",
                    "  annotations: {karpenter.sh/do-not-disrupt: \"true\"}",
                    "",
                ),
            ],
            Cause::Protected,
            "pod default/batch has karpenter.sh/do-not-disrupt",
            "remove the karpenter.sh/do-not-disrupt annotation",
        ),
        (
            "PodDisruptionBudget",
            vec![
                nodepool("default", CONSOLIDATE, ""),
                big(),
                web(),
                pdb.to_string(),
            ],
            Cause::Protected,
            "PodDisruptionBudget default/web allows no disruption of pod default/web",
            "wait until the PodDisruptionBudget allows a disruption",
        ),
        (
            "disruption budget",
            vec![
                nodepool(
                    "default",
                    "    consolidationPolicy: WhenEmptyOrUnderutilized\n    consolidateAfter: 0s\n    budgets: [{nodes: \"0\"}]",
                    "",
                ),
                big(),
                web(),
            ],
            Cause::Budget,
            "the disruption budget for Underutilized is used up",
            "raise the NodePool's spec.disruption.budgets",
        ),
        (
            "consolidateAfter countdown",
            vec![
                nodepool(
                    "default",
                    "    consolidationPolicy: WhenEmptyOrUnderutilized\n    consolidateAfter: 30h\n    budgets: [{nodes: \"100%\"}]",
                    "",
                ),
                big(),
                web(),
            ],
            Cause::ConsolidateAfter,
            "consolidateAfter has not elapsed since the last pod change (21600s left)",
            "lower the NodePool's spec.disruption.consolidateAfter",
        ),
        (
            "consolidation policy",
            vec![
                nodepool(
                    "default",
                    "    consolidationPolicy: WhenEmpty\n    consolidateAfter: 0s\n    budgets: [{nodes: \"100%\"}]",
                    "",
                ),
                big(),
                web(),
            ],
            Cause::Policy,
            "its NodePool only consolidates empty nodes (WhenEmpty)",
            "consolidationPolicy to WhenEmptyOrUnderutilized",
        ),
        (
            "static NodePool",
            vec![
                static_pool(1, "", "blue"),
                node("n1", "fixed", "m5.8xlarge", "on-demand", 24, ""),
                web(),
            ],
            Cause::Policy,
            "its NodePool is static (spec.replicas)",
            "lower the static NodePool's spec.replicas",
        ),
        (
            "static NodePool at its node limit",
            vec![
                static_pool(1, "  limits: {nodes: \"1\"}\n", "green"),
                node("n1", "fixed", "m5.8xlarge", "on-demand", 24, ""),
                web(),
            ],
            Cause::Budget,
            "at its node limit",
            "raise the NodePool's spec.limits.nodes",
        ),
        (
            "not initialized",
            vec![nodepool("default", CONSOLIDATE, ""), uninitialized, web()],
            Cause::NotInitialized,
            "not initialized yet",
            "must become Ready",
        ),
    ];
    let catalog = Catalog::bundled("us-east-1").expect("catalog");
    for (case, mut docs, cause, reason, fix) in cases {
        docs.insert(0, NODECLASS.to_string());
        let text = docs.join("\n---\n");
        let parsed = manifest::parse_str(&text, Path::new("test.yaml")).expect("YAML parses");
        let cluster = manifest::load(&parsed, monday_10()).expect("loads");
        let e = simulate::explain(
            &cluster,
            &catalog,
            &EngineOptions::default(),
            monday_10(),
            "n1",
        )
        .expect("n1 exists");
        assert_eq!(e.cause, Some(cause), "{case}: {e}");
        assert!(e.decision.contains(reason), "{case}: {e}");
        let shown = e.to_string();
        assert!(
            shown.contains("Fix: ") && shown.contains(fix),
            "{case}: {shown}"
        );
    }
}

/// `explain node` says when a node drifted or expires and what removing it would save.
#[test]
fn explain_node_says_drift_expiry_and_savings() {
    let drifted_pool = nodepool(
        "default",
        "    consolidationPolicy: WhenEmpty\n    consolidateAfter: Never\n    budgets: [{nodes: \"0\"}]",
        "",
    )
    .replace("team: blue", "team: green");
    let expiring = node("n1", "default", "m5.8xlarge", "on-demand", 24, "").replace(
        "  nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\nstatus:",
        "  nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n  expireAfter: 720h\nstatus:",
    );
    let docs = [
        NODECLASS.to_string(),
        drifted_pool,
        expiring,
        pod("web", "n1", "100m", "", ""),
    ];
    let text = docs.join("\n---\n");
    let parsed = manifest::parse_str(&text, Path::new("test.yaml")).expect("YAML parses");
    let cluster = manifest::load(&parsed, monday_10()).expect("loads");
    let catalog = Catalog::bundled("us-east-1").expect("catalog");
    let e = simulate::explain(
        &cluster,
        &catalog,
        &EngineOptions::default(),
        monday_10(),
        "n1",
    )
    .expect("n1 exists");
    assert_eq!(e.cause, Some(disruption::Cause::Budget), "{e}");
    assert!(
        e.status
            .iter()
            .any(|s| s.starts_with("drifted (NodePoolDrifted)")),
        "{e}"
    );
    assert!(
        e.status
            .iter()
            .any(|s| s == "expires at 2026-12-22 10:00:00 UTC"),
        "{e}"
    );
    assert!(
        e.if_removed.contains("its pods need one new node") && e.if_removed.contains("saving $"),
        "{e}"
    );
}

/// A static NodePool called `fixed` (`spec.replicas`, and `limits` when given) with the
/// consolidation settings that would empty a dynamic pool's nodes at once.
fn static_pool(replicas: u32, limits: &str, team: &str) -> String {
    nodepool("fixed", CONSOLIDATE, "")
        .replace(
            "spec:\n  disruption:",
            &format!("spec:\n  replicas: {replicas}\n{limits}  disruption:"),
        )
        .replace("team: blue", &format!("team: {team}"))
}

#[test]
fn a_static_nodepools_nodes_are_not_emptied_or_consolidated() {
    let docs = vec![
        NODECLASS.to_string(),
        static_pool(2, "", "blue"),
        node("s1", "fixed", "m5.2xlarge", "on-demand", 24, ""),
        node("s2", "fixed", "m5.2xlarge", "on-demand", 24, ""),
        pod("web", "s2", "100m", "", ""),
    ];
    let r = run(&docs);
    assert!(commands(&r).is_empty(), "{:#?}", commands(&r));
    for n in ["s1", "s2"] {
        assert!(
            blocked_reason(&r, n).contains("its NodePool is static (spec.replicas)"),
            "{n}: {}",
            blocked_reason(&r, n)
        );
    }
}

#[test]
fn a_drifted_static_node_is_replaced_from_the_template_before_it_goes() {
    // Launched with team=blue; the pool now says green: both nodes drifted.
    let docs = |replicas: u32, limits: &str| {
        vec![
            NODECLASS.to_string(),
            static_pool(replicas, limits, "green"),
            node("old", "fixed", "m5.large", "on-demand", 200, ""),
            node("young", "fixed", "m5.large", "on-demand", 2, ""),
            pod("web", "young", "100m", "", ""),
        ]
    };
    let r = run(&docs(2, ""));
    let cmds = commands(&r);
    assert_eq!(cmds.len(), 1, "{cmds:#?}");
    assert_eq!(cmds[0].method, Method::Drift);
    assert_eq!(cmds[0].candidates, ["old"], "oldest first, one at a time");
    // Empty, yet replaced: the pool keeps its replicas.
    assert_eq!(cmds[0].replacements.len(), 1);
    let replacement = &cmds[0].replacements[0];
    assert_eq!(replacement.node_pool, "fixed");
    assert!(!replacement.instance_type_options.is_empty());
    assert_eq!(
        replacement.instance_type_options[0], replacement.instance_type,
        "the cheapest option first"
    );

    // At its node limit the pool cannot stage a replacement: the node stays.
    let capped = run(&docs(2, "  limits: {nodes: \"2\"}\n"));
    assert!(commands(&capped).is_empty(), "{:#?}", commands(&capped));
    assert!(
        blocked_reason(&capped, "old").contains("node limit"),
        "{}",
        blocked_reason(&capped, "old")
    );

    // Above its replicas, the scale-down goes first.
    let shrinking = run(&docs(1, ""));
    assert!(commands(&shrinking).is_empty());
    assert!(
        blocked_reason(&shrinking, "old").contains("scales down first"),
        "{}",
        blocked_reason(&shrinking, "old")
    );
}

#[test]
fn consolidation_weighs_node_overlay_prices() {
    let mut docs = vec![
        NODECLASS.to_string(),
        nodepool(
            "default",
            CONSOLIDATE,
            "        - {key: node.kubernetes.io/instance-type, operator: In, values: [m5.large, c5.large]}",
        ),
        node("m5", "default", "m5.large", "on-demand", 24, ""),
        pod("web", "m5", "500m", "", ""),
    ];
    // At list prices a c5.large (or spot) replaces the m5.large.
    let r = run(&docs);
    assert_eq!(commands(&r).len(), 1, "{:#?}", commands(&r));
    assert_eq!(commands(&r)[0].method, Method::SingleNodeConsolidation);

    // An overlay pricing m5.large at a tenth of a cent leaves nothing cheaper to move to.
    docs.push(
        r#"
apiVersion: karpenter.sh/v1alpha1
kind: NodeOverlay
metadata: {name: m5-committed}
spec:
  requirements:
    - {key: node.kubernetes.io/instance-type, operator: In, values: [m5.large]}
  price: "0.001"
"#
        .to_string(),
    );
    let gate_on = EngineOptions {
        node_overlay: true,
        ..Default::default()
    };
    let r = run_at(&docs, monday_10(), gate_on);
    assert!(commands(&r).is_empty(), "{:#?}", commands(&r));
    // The gate off, the overlay is ignored and the replacement stands.
    assert_eq!(commands(&run(&docs)).len(), 1);
}

/// The engine's state for `docs` at Monday 10:00, as `simulate` and `run` build it.
fn state_of(docs: &[String]) -> karpenter_rs::disruption::state::State {
    let text = docs.join("\n---\n");
    let parsed = manifest::parse_str(&text, Path::new("test.yaml")).expect("YAML parses");
    let c = manifest::load(&parsed, monday_10()).unwrap_or_else(|e| panic!("{e}"));
    let catalog = Catalog::bundled("us-east-1").expect("catalog");
    simulate::provisioned(&c, &catalog, &EngineOptions::default(), monday_10()).1
}

/// `state` with node `name` being disrupted, as a command in flight marks its candidates.
fn disrupting(
    mut state: karpenter_rs::disruption::state::State,
    name: &str,
) -> karpenter_rs::disruption::state::State {
    let node = state
        .nodes
        .iter_mut()
        .find(|n| n.name.as_ref() == name)
        .unwrap_or_else(|| panic!("no node {name}"));
    node.disrupting = true;
    state
}

#[test]
fn a_replacement_is_validated_against_a_fresh_plan_before_it_is_launched() {
    use karpenter_rs::disruption::validation::{Stage, pods_to_move, validate};
    let mut docs = vec![
        NODECLASS.to_string(),
        nodepool("default", CONSOLIDATE, ""),
        node("big", "default", "m5.8xlarge", "on-demand", 24, ""),
        pod("web", "big", "500m", "", ""),
    ];
    let state = state_of(&docs);
    let decision = disruption::evaluate(&state, monday_10(), EngineOptions::default().disruption);
    let cmd = decision.commands.first().expect("a replacement is decided");
    assert_eq!(cmd.replacements.len(), 1, "{cmd:#?}");
    let before = pods_to_move(&state, cmd);
    assert_eq!(
        validate(&state, cmd, &before, monday_10(), Stage::Decided)
            .map(|v| (v.moves, v.replanned.is_some())),
        Ok((vec![], false)),
        "nothing changed: the plan still asks for the same replacement"
    );

    let mut unfit = cmd.clone();
    unfit.replacements[0]
        .instance_type_options
        .push("t3.nano".into());
    let err = validate(&state, &unfit, &before, monday_10(), Stage::Decided)
        .expect_err("a type that cannot hold the pods");
    assert!(err.contains("t3.nano no longer fits"), "{err}");

    // Meanwhile a node with room for the pod joined: launching the replacement would be waste.
    docs.push(node("spare", "default", "m5.large", "on-demand", 24, ""));
    let changed = state_of(&docs);
    let err = validate(&changed, cmd, &before, monday_10(), Stage::Decided)
        .expect_err("the plan changed");
    assert!(err.contains("without a replacement"), "{err}");
    assert_eq!(
        validate(&changed, cmd, &before, monday_10(), Stage::Launched)
            .map(|v| (v.moves, v.replanned.is_some())),
        Ok((vec![], false)),
        "a resumed command's replacement exists already: only its candidates are re-checked"
    );
}

/// The command `state` decides for node `name` alone, if any.
fn command_for(
    state: &karpenter_rs::disruption::state::State,
    name: &str,
) -> Option<disruption::Command> {
    disruption::evaluate(state, monday_10(), EngineOptions::default().disruption)
        .commands
        .into_iter()
        .find(|c| c.candidates == [name])
}

/// Room that pods already waiting for will take is not planned for a candidate's pods, as
/// upstream's simulation places pending pods and the pods of nodes being disrupted beside the
/// candidates': deleting `big` on the strength of `spare`'s room would leave its pod pending
/// for a provisioning round of its own, which made a drift roll launch a node per few evicted
/// pods beside its replacements.
#[test]
fn a_candidates_pods_do_not_take_the_room_pending_or_displaced_pods_need() {
    const DND: &str = "  annotations: {karpenter.sh/do-not-disrupt: \"true\"}";
    let mut docs = vec![
        NODECLASS.to_string(),
        nodepool("default", CONSOLIDATE, ""),
        node("big", "default", "m5.8xlarge", "on-demand", 24, ""),
        pod("web", "big", "500m", "", ""),
        node("spare", "default", "m5.large", "on-demand", 24, ""),
        pod("tiny", "spare", "100m", DND, ""),
    ];
    let alone = state_of(&docs);
    let deleted = command_for(&alone, "big").expect("big is consolidated");
    assert!(
        deleted.replacements.is_empty(),
        "alone, web fits in spare's room: {deleted:#?}"
    );

    // A node being disrupted whose 1.5-CPU pod needs that room first (it can only go to an
    // m5.large, so `big` is not where it is about to go: see
    // `an_empty_node_that_waiting_pods_are_about_to_take_is_left_alone`).
    docs.push(node("leaving", "default", "m5.large", "on-demand", 24, ""));
    docs.push(pod(
        "moving",
        "leaving",
        "1500m",
        DND,
        "  nodeSelector: {node.kubernetes.io/instance-type: m5.large}",
    ));
    let displaced = disrupting(state_of(&docs), "leaving");
    let replaced = command_for(&displaced, "big").expect("big is still consolidated");
    assert_eq!(replaced.replacements.len(), 1, "{replaced:#?}");

    // The same pod pending, with no node of its own: the same room is spoken for.
    let moving = displaced
        .pods
        .iter()
        .find(|p| p.pod.name.as_ref() == "moving")
        .map(|p| p.pod.clone())
        .expect("moving");
    let mut pending = alone.clone();
    pending.waiting.pending.push(moving);
    let replaced = command_for(&pending, "big").expect("big is still consolidated");
    assert_eq!(replaced.replacements.len(), 1, "{replaced:#?}");
}

/// A node that pods waiting for room are about to be scheduled to is left alone by the
/// voluntary methods (upstream: a nominated node is no candidate): here `fresh` is empty only
/// until the pod still on the node being disrupted moves there. Emptying it would leave that pod
/// waiting for a node of its own; in a 2,000-pod drift roll such emptiness commands were
/// decided against replacements every few passes, each dropped after its validation delay.
#[test]
fn an_empty_node_that_waiting_pods_are_about_to_take_is_left_alone() {
    use karpenter_rs::disruption::validation::{Stage, pods_to_move, validate};
    const DND: &str = "  annotations: {karpenter.sh/do-not-disrupt: \"true\"}";
    let docs = vec![
        NODECLASS.to_string(),
        nodepool("default", CONSOLIDATE, ""),
        node("leaving", "default", "m5.large", "on-demand", 24, ""),
        pod("moving", "leaving", "1500m", DND, ""),
        node("fresh", "default", "m5.large", "on-demand", 24, ""),
    ];
    let alone = state_of(&docs);
    let emptied = command_for(&alone, "fresh").expect("nothing waits: fresh is empty");
    assert_eq!(emptied.method, Method::Emptiness);
    let before = pods_to_move(&alone, &emptied);

    let blocked = |state: &karpenter_rs::disruption::state::State| {
        let decision =
            disruption::evaluate(state, monday_10(), EngineOptions::default().disruption);
        assert!(
            decision
                .commands
                .iter()
                .all(|c| !c.candidates.contains(&"fresh".to_string())),
            "{:#?}",
            decision.commands
        );
        decision
            .blocked
            .into_iter()
            .find(|b| b.node == "fresh")
            .map(|b| b.reason)
            .unwrap_or_default()
    };
    // The node `moving` is on is being disrupted: the pod is about to go to `fresh`.
    let displaced = disrupting(alone.clone(), "leaving");
    assert_eq!(blocked(&displaced), disruption::NOMINATED);
    let err = validate(&displaced, &emptied, &before, monday_10(), Stage::Decided)
        .expect_err("a command decided before the pod was displaced is dropped");
    assert!(err.contains(disruption::NOMINATED), "{err}");

    // A provisioning round planned pending pods onto `fresh`.
    let mut planned = alone.clone();
    planned.waiting.planned_onto.insert("fresh".into());
    assert_eq!(blocked(&planned), disruption::NOMINATED);
}

/// The one replacement of the command `state` decides for node `name` alone.
fn sole_replacement(
    state: &karpenter_rs::disruption::state::State,
    name: &str,
) -> disruption::Replacement {
    let cmd = command_for(state, name).unwrap_or_else(|| panic!("{name} is consolidated"));
    let [r] = cmd.replacements.as_slice() else {
        panic!("one replacement: {cmd:#?}");
    };
    r.clone()
}

/// Instance type `name` of replacement `r`'s NodePool, as `state` knows it.
fn instance_type<'a>(
    state: &'a karpenter_rs::disruption::state::State,
    r: &disruption::Replacement,
    name: &str,
) -> &'a karpenter_rs::scheduling::instance_type::InstanceType {
    let pool = state
        .templates
        .iter()
        .find(|t| *t.name == *r.node_pool)
        .expect("the replacement's pool");
    pool.instance_types
        .iter()
        .find(|it| *it.name == *name)
        .unwrap_or_else(|| panic!("{name} is not a type of NodePool {}", r.node_pool))
}

/// A replacement asks for what the simulation put on it, not for every pod of its candidates:
/// here `small` goes to `spare` and only `wide` to the new node. Launched with both pods'
/// requests, a multi-node consolidation's replacement fitted none of its options (sized for the
/// part of ten nodes' pods the existing nodes could not take), the cloud found no instance type
/// for it, and the command held its ten candidates tainted until it was rolled back.
#[test]
fn a_replacement_asks_only_for_the_pods_it_takes() {
    const DND: &str = "  annotations: {karpenter.sh/do-not-disrupt: \"true\"}";
    let docs = vec![
        NODECLASS.to_string(),
        nodepool("default", CONSOLIDATE, ""),
        node("big", "default", "m5.8xlarge", "on-demand", 24, ""),
        pod("small", "big", "1500m", "", ""),
        pod("wide", "big", "3", "", ""),
        node("spare", "default", "m5.large", "on-demand", 24, ""),
        pod("tiny", "spare", "100m", DND, ""),
    ];
    let state = state_of(&docs);
    let r = sole_replacement(&state, "big");
    assert_eq!(r.pods, ["default/wide"], "{r:#?}");
    assert!(
        (3000..4500).contains(&r.requests.cpu),
        "wide's 3 CPU and the DaemonSet overhead, not small's too: {:?}",
        r.requests
    );
    for option in &r.instance_type_options {
        let it = instance_type(&state, &r, option);
        assert!(
            r.requests.fits(&it.allocatable),
            "{option} cannot hold the requests {:?}",
            r.requests
        );
    }
}

/// A replacement is sized for its candidates' pods alone, never for pods placed beside them:
/// here `moving`, displaced from a node being disrupted, needs a node of its own, and the
/// simulation used to put `web` on that node and launch it as `big`'s replacement, sized for
/// both. `moving` then went to its own command's replacement (or the provisioner's), and the
/// room kept for it stayed empty: a 5,000-pod drift roll ended with a dearer fleet than it
/// started with.
#[test]
fn a_replacement_is_sized_for_its_candidates_pods_alone() {
    const DND: &str = "  annotations: {karpenter.sh/do-not-disrupt: \"true\"}";
    let docs = vec![
        NODECLASS.to_string(),
        nodepool("default", CONSOLIDATE, ""),
        node("big", "default", "m5.8xlarge", "on-demand", 24, ""),
        pod("web", "big", "500m", "", ""),
        node("leaving", "default", "m5.xlarge", "on-demand", 24, ""),
        // Only an m5.xlarge holds it, so `big` is not where it is about to go (see
        // `an_empty_node_that_waiting_pods_are_about_to_take_is_left_alone`).
        pod(
            "moving",
            "leaving",
            "3",
            DND,
            "  nodeSelector: {node.kubernetes.io/instance-type: m5.xlarge}",
        ),
    ];
    let state = disrupting(state_of(&docs), "leaving");
    let r = sole_replacement(&state, "big");
    assert_eq!(r.pods, ["default/web"], "{r:#?}");
    assert!(
        (500..1500).contains(&r.requests.cpu),
        "web's 500m and the DaemonSet overhead, not moving's 3 CPU too: {:?}",
        r.requests
    );
    let cheapest = instance_type(&state, &r, &r.instance_type);
    assert!(
        cheapest.allocatable.cpu < 3000,
        "{} could hold moving too: the replacement is larger than web needs",
        r.instance_type
    );
}

/// A drifted node whose pods need several new nodes is replaced by them all, as upstream's
/// drift launches every NodeClaim its simulation needs (consolidation launches at most one):
/// here the NodePool now allows only m5.xlarge, which holds one of `big`'s 3-CPU pods. Before,
/// such a node was left drifted for good ("its pods would need 2 new nodes"), so a NodePool
/// whose requirements were narrowed to cap node sizes never finished its roll.
#[test]
fn a_drifted_node_whose_pods_need_several_new_nodes_is_replaced_by_them_all() {
    use karpenter_rs::disruption::validation::{Stage, pods_to_move, validate};
    let quiet = "    consolidationPolicy: WhenEmpty\n    consolidateAfter: Never\n    budgets: [{nodes: \"100%\"}]";
    let only_xlarge =
        "        - {key: node.kubernetes.io/instance-type, operator: In, values: [m5.xlarge]}";
    let docs = vec![
        NODECLASS.to_string(),
        nodepool("default", quiet, only_xlarge),
        node("big", "default", "m5.4xlarge", "on-demand", 24, ""),
        pod("a", "big", "3", "", ""),
        pod("b", "big", "3", "", ""),
    ];
    let r = run(&docs);
    let [cmd] = commands(&r) else {
        panic!("one command: {:#?} {:#?}", commands(&r), r.blocked);
    };
    assert_eq!(cmd.method, Method::Drift);
    assert_eq!(cmd.candidates, ["big"]);
    // Two m5.xlarge, one pod each.
    let one_each = |replacements: &[disruption::Replacement]| {
        let mut pods: Vec<&str> = Vec::new();
        for replacement in replacements {
            assert_eq!(replacement.instance_type, "m5.xlarge", "{replacements:#?}");
            pods.extend(replacement.pods.iter().map(String::as_str));
        }
        pods.sort_unstable();
        assert_eq!(pods, ["default/a", "default/b"], "{replacements:#?}");
    };
    one_each(&cmd.replacements);

    // Re-validated on an unchanged state, the plan still asks for both.
    let state = state_of(&docs);
    let before = pods_to_move(&state, cmd);
    assert_eq!(
        validate(&state, cmd, &before, monday_10(), Stage::Decided)
            .map(|v| (v.moves, v.replanned.is_some())),
        Ok((vec![], false))
    );
    // One replacement cannot hold both pods (as when the node gained a pod between the decision
    // and the validation): the drift goes ahead with what its pods need now, both nodes.
    let mut one_short = cmd.clone();
    one_short.replacements.pop();
    let replanned = validate(&state, &one_short, &before, monday_10(), Stage::Decided)
        .expect("a drifted node goes either way")
        .replanned
        .expect("one replacement cannot hold both pods");
    one_each(&replanned.replacements);
}

/// A running pod of `cpu` millicores and `memory` MiB on `node`.
fn sized_pod(name: &str, node: &str, cpu: u32, memory: u32) -> String {
    format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: default, labels: {{app: {name}}}}}
spec:
  nodeName: {node}
  containers: [{{name: c, image: pause, resources: {{requests: {{cpu: {cpu}m, memory: {memory}Mi}}}}}}]
status: {{phase: Running}}
"#
    )
}

/// Three nodes of a c/m/r on-demand pool as `benches/gen-cost.py`'s batch pods left them
/// (an r6a.24xlarge and two m6a.48xlarge, $22.03/h): 380 CPU, which no one instance type holds,
/// so upstream's consolidation (at most one replacement) cannot merge them, while an
/// r6a.48xlarge and an m6a.48xlarge ($19.18/h) hold them all.
fn three_batch_nodes() -> Vec<String> {
    let mut docs = vec![
        NODECLASS.to_string(),
        nodepool(
            "default",
            CONSOLIDATE,
            "        - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
        - {key: karpenter.k8s.aws/instance-category, operator: In, values: [c, m, r]}
        - {key: karpenter.k8s.aws/instance-generation, operator: Gt, values: ['5']}",
        ),
        node("a", "default", "r6a.24xlarge", "on-demand", 24, ""),
        node("b", "default", "m6a.48xlarge", "on-demand", 24, ""),
        node("c", "default", "m6a.48xlarge", "on-demand", 24, ""),
    ];
    // (node, CPU millicores, memory MiB, pods)
    let pods: &[(&str, u32, u32, u32)] = &[
        ("a", 4000, 4096, 1),
        ("a", 4000, 8192, 1),
        ("a", 4000, 16384, 3),
        ("a", 4000, 65536, 10),
        ("b", 4000, 4096, 1),
        ("b", 4000, 8192, 17),
        ("b", 4000, 16384, 23),
        ("b", 4000, 65536, 3),
        ("c", 2000, 4096, 10),
        ("c", 2000, 8192, 19),
        ("c", 2000, 16384, 7),
        ("c", 4000, 4096, 7),
        ("c", 4000, 8192, 11),
    ];
    for (k, &(node, cpu, memory, count)) in pods.iter().enumerate() {
        for i in 0..count {
            docs.push(sized_pod(&format!("p{k}-{i}"), node, cpu, memory));
        }
    }
    docs
}

/// `CONSOLIDATION_REPLACEMENTS` above 1: the three nodes' pods are simulated again with new
/// nodes sized by cost, and the two that hold them for less replace the three, which saves more
/// than the one-node replacement upstream's rule finds.
#[test]
fn several_replacements_may_replace_nodes_no_one_node_can() {
    let docs = three_batch_nodes();
    // Upstream's rule: the r6a.24xlarge's pods fit an r6a.16xlarge and the others' room.
    let upstream = run(&docs);
    let cmds = commands(&upstream);
    assert_eq!(cmds.len(), 1, "{cmds:#?}");
    assert_eq!(cmds[0].candidates, ["a"]);
    assert_eq!(cmds[0].replacements.len(), 1);

    let several = disruption::Options {
        replacements: 2,
        ..Default::default()
    };
    let options = EngineOptions {
        disruption: several,
        ..Default::default()
    };
    let split = run_at(&docs, monday_10(), options);
    let cmds = commands(&split);
    assert_eq!(cmds.len(), 1, "{cmds:#?}");
    let cmd = &cmds[0];
    assert_eq!(cmd.method, Method::MultiNodeConsolidation);
    assert_eq!(cmd.candidates.len(), 3, "{cmd:#?}");
    assert_eq!(cmd.replacements.len(), 2, "{cmd:#?}");
    let candidates = 5.4432 + 2.0 * 8.2944;
    let launched: f64 = cmd.replacements.iter().map(|r| r.price).sum();
    assert!(launched < candidates - 2.0, "{launched}");
    assert!(
        (cmd.savings - (candidates - launched)).abs() < 1e-6,
        "{cmd:#?}"
    );
    // Whichever option each replacement launches, together they cost less than the candidates.
    let dearest: f64 = cmd
        .replacements
        .iter()
        .map(|r| {
            r.instance_type_options
                .iter()
                .map(|t| price_of(t))
                .fold(0.0, f64::max)
        })
        .sum();
    assert!(dearest < candidates, "{dearest} {cmd:#?}");
    let moved: usize = cmd.replacements.iter().map(|r| r.pods.len()).sum();
    assert_eq!(moved, 15 + 44 + 54);
    assert!(split.cost.after.unwrap() < upstream.cost.after.unwrap() - 0.5);

    // The command is validated as it was decided: sized by cost.
    use karpenter_rs::disruption::validation::{Stage, pods_to_move, validate};
    let state = state_of(&docs);
    let decided = disruption::evaluate(&state, monday_10(), several);
    let cmd = decided.commands.first().expect("the same command");
    assert_eq!(cmd.replacements.len(), 2);
    let before = pods_to_move(&state, cmd);
    assert!(
        validate(&state, cmd, &before, monday_10(), Stage::Decided).is_ok(),
        "{:?}",
        validate(&state, cmd, &before, monday_10(), Stage::Decided).err()
    );
}

/// The on-demand price of `instance_type` in the bundled catalog.
fn price_of(instance_type: &str) -> f64 {
    let catalog = Catalog::bundled("us-east-1").expect("catalog");
    let types = catalog.instance_types(&NodeClassSettings::for_family(AMIFamily::AL2023));
    types
        .iter()
        .find(|t| t.name.as_ref() == instance_type)
        .and_then(|t| {
            t.offerings
                .iter()
                .filter(|o| o.capacity_type.label() == "on-demand")
                .map(|o| o.price)
                .reduce(f64::min)
        })
        .unwrap_or_else(|| panic!("no on-demand price for {instance_type}"))
}
