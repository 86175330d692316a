//! Hostile and absurd durations and quantities through the library entry points `simulate`,
//! `explain` and `convert` use: values the CRD pattern or the quantity grammar accepts but that
//! overflow a Go duration, date arithmetic or a 64-bit sum. Each is either rejected naming the
//! object, the field and the limit, or means what it says ("never", "fits nothing"); none
//! panics, wraps or turns into zero.

use std::path::Path;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, TimeZone, Utc};
use karpenter_rs::apis::duration;
use karpenter_rs::apis::hash::NODEPOOL_HASH_VERSION;
use karpenter_rs::catalog::Catalog;
use karpenter_rs::disruption::{Command, Method};
use karpenter_rs::manifest;
use karpenter_rs::manifest::legacy::{Options, convert_with};
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

/// The longest duration Go accepts, as a CRD field may write it (whole seconds).
const GO_MAX: &str = "2562047h47m16s";

/// Monday 2026-11-23 10:00 UTC.
fn monday_10() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 23, 10, 0, 0).unwrap()
}

fn nodepool(disruption: &str, template_spec: &str) -> String {
    format!(
        r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {{name: default}}
spec:
  disruption:
{disruption}
  template:
    spec:
      nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}
      requirements:
        - {{key: kubernetes.io/arch, operator: In, values: [amd64]}}
        - {{key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}}
{template_spec}
"#
    )
}

const EMPTY_NOW: &str = "    consolidationPolicy: WhenEmpty\n    consolidateAfter: 0s";
const CONSOLIDATE_NOW: &str =
    "    consolidationPolicy: WhenEmptyOrUnderutilized\n    consolidateAfter: 0s";

/// An initialized m5.large Node and its NodeClaim of `pool` (whose hash it carries, so it has
/// not drifted), created `age_hours` before Monday 10:00; `claim_spec` is added to the
/// NodeClaim's spec.
fn node(name: &str, pool: &str, age_hours: i64, claim_spec: &str) -> String {
    let pool: karpenter_rs::apis::NodePool = serde_yaml_ng::from_str(pool).expect("pool");
    let hash = pool.static_hash();
    let created = (monday_10() - TimeDelta::hours(age_hours)).to_rfc3339();
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
    node.kubernetes.io/instance-type: m5.large
    karpenter.sh/capacity-type: on-demand
    karpenter.sh/nodepool: default
    karpenter.sh/initialized: "true"
spec:
  providerID: aws:///us-east-1a/i-{name}
status:
  allocatable: {{cpu: 1930m, memory: 7134Mi, pods: "29", ephemeral-storage: 17Gi}}
  conditions: [{{type: Ready, status: "True"}}]
---
apiVersion: karpenter.sh/v1
kind: NodeClaim
metadata:
  name: {name}
  creationTimestamp: "{created}"
  labels: {{karpenter.sh/nodepool: default}}
  annotations:
    karpenter.sh/nodepool-hash: "{hash}"
    karpenter.sh/nodepool-hash-version: "{NODEPOOL_HASH_VERSION}"
spec:
  requirements: [{{key: karpenter.sh/nodepool, operator: In, values: [default]}}]
  nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}
{claim_spec}
status:
  nodeName: {name}
  providerID: aws:///us-east-1a/i-{name}
  imageID: ami-new
"#
    )
}

/// A running pod on `node`, started `started_hours` before Monday 10:00.
fn pod(name: &str, node: &str, started_hours: i64, annotations: &str) -> String {
    let started = (monday_10() - TimeDelta::hours(started_hours)).to_rfc3339();
    format!(
        r#"
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: default
  annotations: {{{annotations}}}
spec:
  nodeName: {node}
  containers: [{{name: c, image: pause, resources: {{requests: {{cpu: 100m, memory: 128Mi}}}}}}]
status: {{phase: Running, startTime: "{started}"}}
"#
    )
}

fn load(docs: &[String], now: DateTime<Utc>) -> Result<karpenter_rs::snapshot::Snapshot, String> {
    let text = docs.join("\n---\n");
    let parsed = manifest::parse_str(&text, Path::new("test.yaml")).expect("YAML parses");
    manifest::load(&parsed, now).map_err(|e| e.to_string())
}

fn disrupt(docs: &[String], now: DateTime<Utc>, settle: Option<Duration>) -> Report {
    let c = load(docs, now).unwrap_or_else(|e| panic!("{e}"));
    let catalog = Catalog::bundled("us-east-1").expect("catalog");
    simulate::simulate_with_disruption(&c, &catalog, &EngineOptions::default(), now, settle)
}

fn commands(r: &Report) -> &[Command] {
    r.disruptions.as_deref().unwrap_or_default()
}

fn disrupted(r: &Report, node: &str) -> bool {
    commands(r)
        .iter()
        .any(|c| c.candidates.iter().any(|n| n == node))
}

fn blocked_reason<'a>(r: &'a Report, node: &str) -> &'a str {
    r.blocked
        .as_ref()
        .and_then(|b| b.iter().find(|b| b.node == node))
        .map_or("", |b| b.reason.as_str())
}

fn explain_status(docs: &[String], node: &str) -> Vec<String> {
    let c = load(docs, monday_10()).unwrap_or_else(|e| panic!("{e}"));
    let catalog = Catalog::bundled("us-east-1").expect("catalog");
    simulate::explain(&c, &catalog, &EngineOptions::default(), monday_10(), node)
        .expect("node is known")
        .status
}

/// Asserts that loading fails with one problem naming `object`, `field` and Go's limit.
fn assert_rejected(docs: &[String], object: &str, field: &str, value: &str) {
    let e = load(docs, monday_10()).expect_err("a duration beyond Go's range is rejected");
    for needle in [
        object,
        field,
        &format!("{value:?}"),
        "longer than 2562047h47m16.854775807s",
    ] {
        assert!(e.contains(needle), "no {needle:?} in: {e}");
    }
}

#[test]
fn a_budget_window_of_2562047h_is_open_and_one_beyond_go_range_is_rejected() {
    let budget = |duration: &str| {
        nodepool(
            &format!(
                "{EMPTY_NOW}\n    budgets: [{{nodes: \"0\", schedule: \"0 9 * * mon-fri\", duration: {duration}}}]"
            ),
            "",
        )
    };
    let docs = |duration: &str| {
        let pool = budget(duration);
        vec![
            NODECLASS.to_string(),
            pool.clone(),
            node("empty", &pool, 48, ""),
        ]
    };
    // 09:00 + 30m has closed by 10:00: the empty node goes.
    let r = disrupt(&docs("30m"), monday_10(), None);
    assert!(disrupted(&r, "empty"), "{:#?}", r.blocked);
    // A window of about 292 years that opened on a weekday at 09:00 is still open: nothing goes.
    let r = disrupt(&docs("2562047h"), monday_10(), None);
    assert!(commands(&r).is_empty(), "{:#?}", commands(&r));
    assert!(
        blocked_reason(&r, "empty").contains("budget for Empty is used up"),
        "{}",
        blocked_reason(&r, "empty")
    );
    assert_rejected(
        &[NODECLASS.to_string(), budget("2562048h")],
        "NodePool/default",
        "spec.disruption.budgets[0].duration",
        "2562048h",
    );
}

#[test]
fn consolidate_after_at_go_max_never_elapses_and_beyond_is_rejected() {
    let pool = nodepool(
        &format!("    consolidationPolicy: WhenEmpty\n    consolidateAfter: {GO_MAX}"),
        "",
    );
    let docs = vec![
        NODECLASS.to_string(),
        pool.clone(),
        node("empty", &pool, 48, ""),
    ];
    let r = disrupt(&docs, monday_10(), None);
    assert!(commands(&r).is_empty(), "{:#?}", commands(&r));
    let reason = blocked_reason(&r, "empty");
    let left: i64 = reason
        .split_once("consolidateAfter has not elapsed (")
        .and_then(|(_, rest)| rest.split_once("s left)"))
        .and_then(|(n, _)| n.parse().ok())
        .unwrap_or_else(|| panic!("no time left in: {reason}"));
    // About 292 years less the node's 48 hours: not zero, not negative, not wrapped.
    let expected = duration::MAX.as_secs() as i64 - 48 * 3600;
    assert!(
        (expected - left).abs() <= 1,
        "{left} s left, expected {expected}"
    );

    let pool = nodepool(
        "    consolidationPolicy: WhenEmpty\n    consolidateAfter: 2562047h47m17s",
        "",
    );
    assert_rejected(
        &[NODECLASS.to_string(), pool],
        "NodePool/default",
        "spec.disruption.consolidateAfter",
        "2562047h47m17s",
    );
}

#[test]
fn expire_after_at_go_max_expires_in_292_years_not_at_creation() {
    let pool = nodepool(EMPTY_NOW, "      expireAfter: 2562047h");
    let docs = vec![
        NODECLASS.to_string(),
        pool.clone(),
        node("old", &pool, 48, "  expireAfter: 2562047h"),
        pod("web", "old", 48, ""),
    ];
    let r = disrupt(&docs, monday_10(), None);
    assert!(
        commands(&r).iter().all(|c| c.method != Method::Expiration),
        "{:#?}",
        commands(&r)
    );
    let status = explain_status(&docs, "old");
    let expires = monday_10() - TimeDelta::hours(48) + TimeDelta::hours(2_562_047);
    assert!(
        status.contains(&format!("expires at {expires}")),
        "{status:#?}"
    );
    assert_eq!(expires.date_naive().to_string(), "2319-03-03");
}

#[test]
fn expire_after_and_termination_grace_period_beyond_go_range_are_rejected() {
    let pool = nodepool(EMPTY_NOW, "      expireAfter: 9999999999h");
    assert_rejected(
        &[NODECLASS.to_string(), pool],
        "NodePool/default",
        "spec.template.spec.expireAfter",
        "9999999999h",
    );
    let pool = nodepool(EMPTY_NOW, "      terminationGracePeriod: 2562048h");
    assert_rejected(
        &[NODECLASS.to_string(), pool],
        "NodePool/default",
        "spec.template.spec.terminationGracePeriod",
        "2562048h",
    );
    let pool = nodepool(EMPTY_NOW, "");
    assert_rejected(
        &[
            NODECLASS.to_string(),
            pool.clone(),
            node("old", &pool, 48, "  expireAfter: 9999999999h"),
        ],
        "NodeClaim/old",
        "spec.expireAfter",
        "9999999999h",
    );
}

#[test]
fn a_do_not_disrupt_duration_is_a_go_duration_within_go_range() {
    let pool = nodepool(CONSOLIDATE_NOW, "");
    let docs = |annotation: &str, started_hours: i64| {
        vec![
            NODECLASS.to_string(),
            pool.clone(),
            node("n1", &pool, 48, ""),
            node("n2", &pool, 48, ""),
            pod("batch", "n1", started_hours, annotation),
            pod("web", "n2", 48, ""),
        ]
    };
    // Go durations count from the pod's start: 1.5h protects a pod started an hour ago only.
    let r = disrupt(
        &docs("karpenter.sh/do-not-disrupt: 1.5h", 1),
        monday_10(),
        None,
    );
    assert!(!disrupted(&r, "n1"), "{:#?}", commands(&r));
    assert!(
        blocked_reason(&r, "n1").contains("karpenter.sh/do-not-disrupt: \"1.5h\""),
        "{}",
        blocked_reason(&r, "n1")
    );
    let r = disrupt(
        &docs("karpenter.sh/do-not-disrupt: 1.5h", 2),
        monday_10(),
        None,
    );
    assert!(
        disrupted(&r, "n1") || disrupted(&r, "n2"),
        "{:#?}",
        r.blocked
    );
    assert!(
        !blocked_reason(&r, "n1").contains("do-not-disrupt"),
        "{}",
        blocked_reason(&r, "n1")
    );
    // Go's longest duration protects for about 292 years.
    let r = disrupt(
        &docs("karpenter.sh/do-not-disrupt: 2562047h", 48),
        monday_10(),
        None,
    );
    assert!(!disrupted(&r, "n1"), "{:#?}", commands(&r));
    assert!(
        blocked_reason(&r, "n1").contains("do-not-disrupt"),
        "{}",
        blocked_reason(&r, "n1")
    );
    // Beyond Go's range the value is invalid and, as upstream, ignored: n1 is consolidated like
    // a node without the annotation instead of panicking.
    let r = disrupt(
        &docs("karpenter.sh/do-not-disrupt: 9999999999h", 48),
        monday_10(),
        None,
    );
    let unprotected = disrupt(&docs("", 48), monday_10(), None);
    assert_eq!(
        commands(&r)
            .iter()
            .map(|c| &c.candidates)
            .collect::<Vec<_>>(),
        commands(&unprotected)
            .iter()
            .map(|c| &c.candidates)
            .collect::<Vec<_>>()
    );
    assert!(!commands(&r).is_empty(), "{:#?}", r.blocked);
    assert!(
        !blocked_reason(&r, "n1").contains("do-not-disrupt"),
        "{}",
        blocked_reason(&r, "n1")
    );
}

#[test]
fn settling_with_the_longest_step_or_at_the_end_of_time_neither_panics_nor_expires_early() {
    // Replacements never expire, so only the existing nodes' expiry is at stake.
    let pool = nodepool(EMPTY_NOW, "      expireAfter: Never");
    let docs = vec![
        NODECLASS.to_string(),
        pool.clone(),
        node("empty", &pool, 48, "  expireAfter: 720h"),
        node("old", &pool, 48, "  expireAfter: 720h"),
        pod("web", "old", 48, ""),
    ];
    // Round one, on Monday: the empty node goes and nothing has expired. The clock then jumps
    // 292 years; in round two the old node has expired and is replaced; round three is quiet.
    let r = disrupt(&docs, monday_10(), Some(duration::MAX));
    let taken: Vec<(Method, &[String])> = commands(&r)
        .iter()
        .map(|c| (c.method, c.candidates.as_slice()))
        .collect();
    assert_eq!(
        taken,
        [
            (Method::Emptiness, ["empty".to_string()].as_slice()),
            (Method::Expiration, ["old".to_string()].as_slice())
        ]
    );
    assert_eq!(r.rounds, Some(3));
    // A day before the end of representable time both nodes have long expired; the clock
    // cannot advance past the end, so settling stops after that round instead of overflowing.
    let end = duration::NEVER - TimeDelta::days(1);
    let r = disrupt(&docs, end, Some(duration::MAX));
    assert!(
        commands(&r).iter().all(|c| c.method == Method::Expiration),
        "{:#?}",
        commands(&r)
    );
    assert!(
        disrupted(&r, "empty") && disrupted(&r, "old"),
        "{:#?}",
        commands(&r)
    );
    assert_eq!(r.rounds, Some(1));
}

#[test]
fn absurd_cpu_fits_no_instance_type_and_is_reported_unschedulable() {
    let pool = nodepool(EMPTY_NOW, "");
    for cpu in ["1Ei", "9223372036854775807", "1e30"] {
        let deployment = format!(
            r#"
apiVersion: apps/v1
kind: Deployment
metadata: {{name: absurd}}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: absurd}}}}
  template:
    metadata: {{labels: {{app: absurd}}}}
    spec:
      containers: [{{name: c, image: pause, resources: {{requests: {{cpu: "{cpu}"}}}}}}]
"#
        );
        let c = load(
            &[NODECLASS.to_string(), pool.clone(), deployment],
            monday_10(),
        )
        .unwrap_or_else(|e| panic!("cpu {cpu} is a valid quantity: {e}"));
        let catalog = Catalog::bundled("us-east-1").expect("catalog");
        let r = simulate::simulate(&c, &catalog, &EngineOptions::default());
        assert!(r.nodeclaims.is_empty(), "cpu {cpu}: {:#?}", r.nodeclaims);
        assert_eq!(r.unschedulable.len(), 1, "cpu {cpu}");
        let reason = &r.unschedulable[0].reason;
        assert!(
            reason.contains("no instance type has enough allocatable cpu"),
            "cpu {cpu}: {reason}"
        );
    }
}

#[test]
fn a_hundred_containers_near_i64_max_memory_do_not_wrap_onto_a_small_instance() {
    let pool = nodepool(EMPTY_NOW, "");
    let containers: String = (0..100)
        .map(|i| {
            format!(
                "        - {{name: c{i}, image: pause, resources: {{requests: {{cpu: 10m, memory: \"9223372036854775000\"}}}}}}\n"
            )
        })
        .collect();
    let deployment = format!(
        r#"
apiVersion: apps/v1
kind: Deployment
metadata: {{name: greedy}}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: greedy}}}}
  template:
    metadata: {{labels: {{app: greedy}}}}
    spec:
      containers:
{containers}"#
    );
    let c = load(&[NODECLASS.to_string(), pool, deployment], monday_10())
        .unwrap_or_else(|e| panic!("{e}"));
    let catalog = Catalog::bundled("us-east-1").expect("catalog");
    let r = simulate::simulate(&c, &catalog, &EngineOptions::default());
    assert!(r.nodeclaims.is_empty(), "{:#?}", r.nodeclaims);
    assert_eq!(r.unschedulable.len(), 1);
    let reason = &r.unschedulable[0].reason;
    assert!(
        reason.contains("no instance type has enough allocatable memory"),
        "{reason}"
    );
}

#[test]
fn convert_rejects_a_ttl_too_long_for_a_go_duration_naming_object_and_field() {
    let provisioner = |field: &str, seconds: u64| {
        format!(
            "apiVersion: karpenter.sh/v1alpha5\nkind: Provisioner\nmetadata: {{name: default}}\nspec:\n  {field}: {seconds}\n  providerRef: {{name: default}}\n"
        )
    };
    let limit = duration::MAX.as_secs();
    for field in ["ttlSecondsAfterEmpty", "ttlSecondsUntilExpired"] {
        let docs = manifest::parse_str(&provisioner(field, limit + 1), Path::new("p.yaml"))
            .expect("YAML parses");
        let e = convert_with(&docs, &Options::default())
            .expect_err("too long for a Go duration")
            .to_string();
        for needle in [
            "Provisioner/default",
            &format!("spec.{field}"),
            &format!("{} seconds is longer than {limit} seconds", limit + 1),
            "remove the field, which converts to Never",
        ] {
            assert!(e.contains(needle), "no {needle:?} in: {e}");
        }
        // The limit itself still converts, to a duration v1 reads back as the same length.
        let docs = manifest::parse_str(&provisioner(field, limit), Path::new("p.yaml"))
            .expect("YAML parses");
        let out = convert_with(&docs, &Options::default()).unwrap_or_else(|e| panic!("{e}"));
        let pool = out
            .objects
            .iter()
            .find(|o| o["kind"] == "NodePool")
            .expect("a NodePool");
        let written = match field {
            "ttlSecondsAfterEmpty" => &pool["spec"]["disruption"]["consolidateAfter"],
            _ => &pool["spec"]["template"]["spec"]["expireAfter"],
        };
        assert_eq!(written, GO_MAX, "{field}");
        let read_back = duration::parse_duration(GO_MAX).expect("within range");
        assert_eq!(read_back.as_secs(), limit);
    }
}
