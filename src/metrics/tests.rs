//! The registry's families against upstream's names, types and labels, and the helpers that
//! label them.

use super::*;
use crate::metrics::cluster_state::Series;
use chrono::{DateTime, TimeZone, Utc};
use std::collections::{BTreeMap, BTreeSet};

/// The fake clock's start in the scrape-time families' tests (`nodes`, `pods`).
pub(super) fn start() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 1, 1, 0, 1, 40)
        .single()
        .expect("valid time")
}

/// A fresh family named and labelled like `family` (the registry's), with help `Help.`: what
/// the scrape-time families' tests serve into.
pub(super) fn fresh(family: &PublishedGauges) -> PublishedGauges {
    let labels: Vec<&str> = family.label_names().iter().map(String::as_str).collect();
    PublishedGauges::new(family.name(), "Help.", &labels).expect("valid family")
}

/// The exposition text of `family`, as a scrape reads it.
pub(super) fn text(family: &PublishedGauges) -> String {
    family.text_chunks().collect()
}

/// Every family of the reference's metrics section with its type and label names.
fn documented() -> Vec<(String, &'static str, Vec<String>)> {
    let node = |extra: &[&str]| -> Vec<String> {
        node_metric_labels()
            .iter()
            .map(|(_, name)| name.clone())
            .chain(extra.iter().map(|s| s.to_string()))
            .collect()
    };
    let s = |v: &[&str]| -> Vec<String> { v.iter().map(|s| s.to_string()).collect() };
    let disruption = [
        "reason",
        "nodepool",
        "capacity_type",
        "consolidation_policy",
        "termination_mode",
    ];
    let resource = ["node_name", "phase", "managed", "resource_type"];
    let mut out: Vec<(String, &'static str, Vec<String>)> = vec![
        (
            "karpenter_build_info",
            "gauge",
            s(&["version", "goversion", "goarch", "commit"]),
        ),
        (
            "rest_client_requests_total",
            "counter",
            s(&["code", "host", "method"]),
        ),
        ("client_go_request_total", "counter", s(&["code", "method"])),
        (
            "rest_client_request_duration_seconds",
            "histogram",
            s(&["verb", "host"]),
        ),
        ("leader_election_master_status", "gauge", s(&["name"])),
        (
            "karpenter_nodeclaims_created_total",
            "counter",
            s(&["reason", "nodepool", "min_values_relaxed"]),
        ),
        (
            "karpenter_nodeclaims_terminated_total",
            "counter",
            s(&["nodepool", "capacity_type", "zone"]),
        ),
        (
            "karpenter_nodeclaims_disrupted_total",
            "counter",
            s(&disruption),
        ),
        (
            "karpenter_pods_disruption_initiated_total",
            "counter",
            s(&disruption),
        ),
        (
            "karpenter_nodes_created_total",
            "counter",
            s(&["nodepool", "zone"]),
        ),
        (
            "karpenter_nodes_terminated_total",
            "counter",
            s(&["nodepool", "zone"]),
        ),
        (
            "karpenter_nodeclaims_termination_duration_seconds",
            "histogram",
            s(&["nodepool"]),
        ),
        (
            "karpenter_nodeclaims_instance_termination_duration_seconds",
            "histogram",
            s(&["nodepool"]),
        ),
        (
            "karpenter_nodeclaims_unhealthy_disrupted_total",
            "counter",
            s(&["condition", "nodepool", "capacity_type", "image_id"]),
        ),
        (
            "karpenter_nodes_termination_duration_seconds",
            "summary",
            s(&["nodepool"]),
        ),
        ("karpenter_nodes_drained_total", "counter", s(&["nodepool"])),
        (
            "karpenter_nodes_lifetime_duration_seconds",
            "histogram",
            s(&["nodepool"]),
        ),
        (
            "karpenter_pods_eviction_requests_total",
            "counter",
            s(&["code"]),
        ),
        ("karpenter_pods_drained_total", "counter", s(&["reason"])),
        ("karpenter_nodes_allocatable", "gauge", node(&resource)),
        (
            "karpenter_nodes_total_pod_requests",
            "gauge",
            node(&resource),
        ),
        ("karpenter_nodes_total_pod_limits", "gauge", node(&resource)),
        (
            "karpenter_nodes_total_daemon_requests",
            "gauge",
            node(&resource),
        ),
        (
            "karpenter_nodes_total_daemon_limits",
            "gauge",
            node(&resource),
        ),
        ("karpenter_nodes_system_overhead", "gauge", node(&resource)),
        (
            "karpenter_nodes_current_lifetime_seconds",
            "gauge",
            node(&["node_name", "phase", "managed"]),
        ),
        (
            "karpenter_cluster_utilization_percent",
            "gauge",
            s(&["resource_type"]),
        ),
        (
            "karpenter_nodepools_limit",
            "gauge",
            s(&["resource_type", "nodepool"]),
        ),
        (
            "karpenter_nodepools_usage",
            "gauge",
            s(&["resource_type", "nodepool"]),
        ),
        ("karpenter_nodepools_cost_total", "gauge", s(&["nodepool"])),
        (
            "karpenter_nodepools_cost_tracker_errors_total",
            "counter",
            s(&["nodepool"]),
        ),
        (
            "karpenter_nodepools_allowed_disruptions",
            "gauge",
            s(&["nodepool", "reason"]),
        ),
        (
            "karpenter_nodepools_nodes_consuming_budgets",
            "gauge",
            s(&["nodepool", "reason"]),
        ),
        (
            "karpenter_voluntary_disruption_decision_evaluation_duration_seconds",
            "histogram",
            s(&["reason", "consolidation_type"]),
        ),
        (
            "karpenter_voluntary_disruption_decisions_total",
            "counter",
            s(&["decision", "reason", "consolidation_type"]),
        ),
        (
            "karpenter_voluntary_disruption_decisions_by_nodepool_total",
            "counter",
            s(&["nodepool", "decision", "reason", "consolidation_type"]),
        ),
        (
            "karpenter_voluntary_disruption_eligible_nodes",
            "gauge",
            s(&["reason"]),
        ),
        (
            "karpenter_voluntary_disruption_failed_validations_total",
            "counter",
            s(&["consolidation_type"]),
        ),
        (
            "karpenter_voluntary_disruption_queue_failures_total",
            "counter",
            s(&["decision", "reason", "consolidation_type"]),
        ),
        (
            "karpenter_consolidation_score",
            "histogram",
            s(&["decision", "nodepool", "policy"]),
        ),
        (
            "karpenter_consolidation_moves_total",
            "counter",
            s(&["decision", "nodepool", "policy"]),
        ),
        (
            "karpenter_pods_state",
            "gauge",
            s(&[
                "name",
                "namespace",
                "owner",
                "node",
                "scheduled",
                "nodepool",
                "zone",
                "arch",
                "capacity_type",
                "instance_type",
                "phase",
                "ready",
                "managed",
            ]),
        ),
        ("karpenter_pods_startup_duration_seconds", "summary", s(&[])),
        (
            "karpenter_pods_unstarted_time_seconds",
            "gauge",
            s(&["name", "namespace"]),
        ),
        ("karpenter_pods_bound_duration_seconds", "histogram", s(&[])),
        (
            "karpenter_pods_unbound_time_seconds",
            "gauge",
            s(&["name", "namespace"]),
        ),
        (
            "karpenter_pods_provisioning_bound_duration_seconds",
            "histogram",
            s(&[]),
        ),
        (
            "karpenter_pods_provisioning_unbound_time_seconds",
            "gauge",
            s(&["name", "namespace"]),
        ),
        (
            "karpenter_pods_provisioning_startup_duration_seconds",
            "histogram",
            s(&[]),
        ),
        (
            "karpenter_pods_provisioning_unstarted_time_seconds",
            "gauge",
            s(&["name", "namespace"]),
        ),
        (
            "karpenter_pods_provisioning_scheduling_undecided_time_seconds",
            "gauge",
            s(&["name", "namespace"]),
        ),
        (
            "karpenter_pods_scheduling_decision_duration_seconds",
            "histogram",
            s(&[]),
        ),
        ("karpenter_cluster_state_node_count", "gauge", s(&[])),
        ("karpenter_cluster_state_synced", "gauge", s(&[])),
        (
            "karpenter_cluster_state_unsynced_time_seconds",
            "gauge",
            s(&[]),
        ),
        (
            "karpenter_scheduler_scheduling_duration_seconds",
            "histogram",
            s(&["controller"]),
        ),
        (
            "karpenter_scheduler_queue_depth",
            "gauge",
            s(&["controller", "scheduling_id"]),
        ),
        (
            "karpenter_scheduler_unfinished_work_seconds",
            "gauge",
            s(&["controller", "scheduling_id"]),
        ),
        ("karpenter_scheduler_ignored_pods_count", "gauge", s(&[])),
        (
            "karpenter_scheduler_unschedulable_pods_count",
            "gauge",
            s(&["controller"]),
        ),
        (
            "karpenter_scheduler_pending_pods_by_effective_zone_count",
            "gauge",
            s(&["controller", "zone"]),
        ),
        (
            "karpenter_cloudprovider_duration_seconds",
            "histogram",
            s(&["controller", "method", "provider"]),
        ),
        (
            "karpenter_cloudprovider_errors_total",
            "counter",
            s(&["controller", "method", "provider", "error"]),
        ),
        (
            "controller_runtime_reconcile_panics_total",
            "counter",
            s(&["controller"]),
        ),
        (
            "controller_runtime_reconcile_total",
            "counter",
            s(&["controller", "result"]),
        ),
        (
            "controller_runtime_reconcile_errors_total",
            "counter",
            s(&["controller"]),
        ),
        (
            "controller_runtime_reconcile_time_seconds",
            "histogram",
            s(&["controller"]),
        ),
        (
            "controller_runtime_active_workers",
            "gauge",
            s(&["controller"]),
        ),
        (
            "workqueue_depth",
            "gauge",
            s(&["name", "controller", "priority"]),
        ),
        (
            "workqueue_adds_total",
            "counter",
            s(&["name", "controller"]),
        ),
        (
            "workqueue_queue_duration_seconds",
            "histogram",
            s(&["name", "controller"]),
        ),
        (
            "workqueue_work_duration_seconds",
            "histogram",
            s(&["name", "controller"]),
        ),
        (
            "workqueue_retries_total",
            "counter",
            s(&["name", "controller"]),
        ),
        (
            "workqueue_unfinished_work_seconds",
            "gauge",
            s(&["name", "controller"]),
        ),
        (
            "workqueue_longest_running_processor_seconds",
            "gauge",
            s(&["name", "controller"]),
        ),
        (
            "karpenter_cloudprovider_batcher_batch_time_seconds",
            "histogram",
            s(&["batcher"]),
        ),
        (
            "karpenter_cloudprovider_batcher_batch_size",
            "histogram",
            s(&["batcher"]),
        ),
        (
            "karpenter_cloudprovider_instance_type_offering_available",
            "gauge",
            s(&["instance_type", "capacity_type", "zone"]),
        ),
        (
            "karpenter_cloudprovider_instance_type_offering_price_estimate",
            "gauge",
            s(&["instance_type", "capacity_type", "zone"]),
        ),
        (
            "karpenter_cloudprovider_instance_type_cpu_cores",
            "gauge",
            s(&["instance_type"]),
        ),
        (
            "karpenter_cloudprovider_instance_type_memory_bytes",
            "gauge",
            s(&["instance_type"]),
        ),
        (
            "karpenter_cloudprovider_instance_launch_failures_total",
            "counter",
            s(&["zone", "zone_id", "capacity_type", "reason"]),
        ),
        (
            "karpenter_cloudprovider_instance_termination_failures_total",
            "counter",
            s(&["zone", "zone_id"]),
        ),
        (
            "karpenter_interruption_received_messages_total",
            "counter",
            s(&["message_type"]),
        ),
        (
            "karpenter_interruption_deleted_messages_total",
            "counter",
            s(&[]),
        ),
        (
            "karpenter_interruption_message_queue_duration_seconds",
            "histogram",
            s(&[]),
        ),
        (
            "karpenter_ec2nodeclasses_userdata_bytes",
            "gauge",
            s(&["nodeclass"]),
        ),
    ]
    .into_iter()
    .map(|(name, kind, labels)| (name.to_string(), kind, labels))
    .collect();
    let status = |prefix: &str, kind: &[&str], extra: &[&str]| {
        let with = |base: &[&str], extra: &[&str]| -> Vec<String> {
            base.iter()
                .chain(kind)
                .chain(extra)
                .map(|s| s.to_string())
                .collect()
        };
        vec![
            (
                format!("{prefix}_status_condition_count"),
                "gauge",
                with(
                    &["namespace", "name", "group", "type", "status", "reason"],
                    extra,
                ),
            ),
            (
                format!("{prefix}_status_condition_current_status_seconds"),
                "gauge",
                with(
                    &["namespace", "name", "group", "type", "status", "reason"],
                    extra,
                ),
            ),
            (
                format!("{prefix}_status_condition_transitions_total"),
                "counter",
                with(&["group", "type", "status", "reason"], &[]),
            ),
            (
                format!("{prefix}_status_condition_transition_seconds"),
                "histogram",
                with(&["group", "type", "status"], &[]),
            ),
            (
                format!("{prefix}_termination_current_time_seconds"),
                "gauge",
                with(&["namespace", "name", "group"], &[]),
            ),
            (
                format!("{prefix}_termination_duration_seconds"),
                "histogram",
                with(&["group"], &[]),
            ),
        ]
    };
    out.extend(status(
        "operator_nodeclaim",
        &[],
        &["karpenter_k8s_aws_ec2nodeclass", "karpenter_sh_nodepool"],
    ));
    out.extend(status("operator_nodepool", &[], &[]));
    out.extend(status(
        "operator_node",
        &[],
        &[
            "karpenter_k8s_aws_ec2nodeclass",
            "karpenter_sh_nodepool",
            "karpenter_sh_initialized",
        ],
    ));
    out.extend(status("operator_ec2nodeclass", &[], &[]));
    out.extend(status("operator", &["kind"], &[]));
    out
}

/// Creates one series in every family so that each appears in the exposition.
fn touch_every_family() {
    let m = &*METRICS;
    let dummy = |n: usize| vec!["x"; n];
    let gauge_vecs = [
        &m.nodepools_limit,
        &m.nodepools_usage,
        &m.nodepools_allowed_disruptions,
        &m.nodepools_nodes_consuming_budgets,
        &m.voluntary_disruption_eligible_nodes,
        &m.scheduler_queue_depth,
        &m.scheduler_unfinished_work_seconds,
        &m.scheduler_unschedulable_pods_count,
        &m.ec2nodeclasses_userdata_bytes,
        &m.leader_election_master_status,
        &m.active_workers,
        &m.workqueue_depth,
        &m.workqueue_unfinished_work_seconds,
        &m.workqueue_longest_running_processor_seconds,
    ];
    let published = [
        &m.nodes_allocatable,
        &m.nodes_total_pod_requests,
        &m.nodes_total_pod_limits,
        &m.nodes_total_daemon_requests,
        &m.nodes_total_daemon_limits,
        &m.nodes_system_overhead,
        &m.nodes_current_lifetime_seconds,
        &m.cluster_utilization_percent,
        &m.nodepools_cost_total,
        &m.pods_state,
        &m.pods_unstarted_time_seconds,
        &m.pods_unbound_time_seconds,
        &m.pods_provisioning_unbound_time_seconds,
        &m.pods_provisioning_unstarted_time_seconds,
        &m.pods_provisioning_scheduling_undecided_time_seconds,
        &m.scheduler_pending_pods_by_effective_zone_count,
        &m.cloudprovider_instance_type_offering_available,
        &m.cloudprovider_instance_type_offering_price_estimate,
        &m.cloudprovider_instance_type_cpu_cores,
        &m.cloudprovider_instance_type_memory_bytes,
    ];
    let counter_vecs = [
        &m.nodeclaims_created_total,
        &m.nodeclaims_terminated_total,
        &m.nodeclaims_disrupted_total,
        &m.pods_disruption_initiated_total,
        &m.nodes_created_total,
        &m.nodes_terminated_total,
        &m.nodeclaims_unhealthy_disrupted_total,
        &m.nodes_drained_total,
        &m.pods_eviction_requests_total,
        &m.pods_drained_total,
        &m.nodepools_cost_tracker_errors_total,
        &m.voluntary_disruption_decisions_total,
        &m.voluntary_disruption_decisions_by_nodepool_total,
        &m.voluntary_disruption_failed_validations_total,
        &m.voluntary_disruption_queue_failures_total,
        &m.consolidation_moves_total,
        &m.cloudprovider_errors_total,
        &m.reconcile_panics_total,
        &m.reconcile_total,
        &m.reconcile_errors_total,
        &m.cloudprovider_instance_launch_failures_total,
        &m.cloudprovider_instance_termination_failures_total,
        &m.interruption_received_messages_total,
        &m.rest_client_requests_total,
        &m.client_go_request_total,
        &m.workqueue_adds_total,
        &m.workqueue_retries_total,
    ];
    let histogram_vecs = [
        &m.nodeclaims_termination_duration_seconds,
        &m.nodeclaims_instance_termination_duration_seconds,
        &m.nodes_lifetime_duration_seconds,
        &m.voluntary_disruption_decision_evaluation_duration_seconds,
        &m.consolidation_score,
        &m.scheduler_scheduling_duration_seconds,
        &m.cloudprovider_duration_seconds,
        &m.cloudprovider_batcher_batch_time_seconds,
        &m.cloudprovider_batcher_batch_size,
        &m.rest_client_request_duration_seconds,
        &m.reconcile_time_seconds,
        &m.workqueue_queue_duration_seconds,
        &m.workqueue_work_duration_seconds,
    ];
    let mut status_published = Vec::new();
    let mut status_counters = Vec::new();
    let mut status_histograms = Vec::new();
    for s in [
        &m.nodeclaim_status,
        &m.nodepool_status,
        &m.node_status,
        &m.ec2nodeclass_status,
        &m.deprecated_status,
    ] {
        status_published.extend([
            &s.status_condition_count,
            &s.status_condition_current_status_seconds,
            &s.termination_current_time_seconds,
        ]);
        status_counters.push(&s.status_condition_transitions_total);
        status_histograms.extend([
            &s.status_condition_transition_seconds,
            &s.termination_duration_seconds,
        ]);
    }
    for g in gauge_vecs {
        let n = g.desc()[0].variable_labels.len();
        g.with_label_values(&dummy(n)).set(1.0);
    }
    for g in published.into_iter().chain(status_published) {
        let n = g.label_names().len();
        g.publish(vec![Series::new(vec!["x"; n], 1.0)]);
    }
    for c in counter_vecs.into_iter().chain(status_counters) {
        let n = c.desc()[0].variable_labels.len();
        c.with_label_values(&dummy(n)).inc();
    }
    for h in histogram_vecs.into_iter().chain(status_histograms) {
        let n = h.desc()[0].variable_labels.len();
        h.with_label_values(&dummy(n)).observe(1.0);
    }
    for h in [
        &m.pods_bound_duration_seconds,
        &m.pods_provisioning_bound_duration_seconds,
        &m.pods_provisioning_startup_duration_seconds,
        &m.pods_scheduling_decision_duration_seconds,
        &m.interruption_message_queue_duration_seconds,
    ] {
        h.observe(1.0);
    }
    for g in [
        &m.cluster_state_node_count,
        &m.cluster_state_synced,
        &m.cluster_state_unsynced_time_seconds,
        &m.scheduler_ignored_pods_count,
    ] {
        g.set(1.0);
    }
    m.interruption_deleted_messages_total.inc();
    m.nodes_termination_duration_seconds
        .observe(&["x"], 1.0)
        .expect("one label");
    m.pods_startup_duration_seconds
        .observe(&[], 1.0)
        .expect("no labels");
}

/// Family name → (type, label names of its first series) from the text exposition.
fn parse_exposition(text: &str) -> BTreeMap<String, (String, BTreeSet<String>)> {
    let mut families: BTreeMap<String, (String, BTreeSet<String>)> = BTreeMap::new();
    let mut types = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("TYPE line has a type");
            types.push(name.to_string());
            families.insert(name.to_string(), (kind.to_string(), BTreeSet::new()));
        }
    }
    let unique: BTreeSet<&String> = types.iter().collect();
    assert_eq!(unique.len(), types.len(), "a family appears twice");
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let series = line.split_once(' ').map_or(line, |(s, _)| s);
        let (name, labels) = match series.split_once('{') {
            Some((name, rest)) => (name, rest.trim_end_matches('}')),
            None => (series, ""),
        };
        let family = families
            .keys()
            .filter(|f| name == f.as_str() || name.starts_with(&format!("{f}_")))
            .max_by_key(|f| f.len())
            .cloned()
            .unwrap_or_else(|| panic!("series {name} belongs to no family"));
        let entry = families.get_mut(&family).expect("known family");
        if entry.1.is_empty() {
            for pair in labels.split(',').filter(|p| !p.is_empty()) {
                let (label, _) = pair.split_once('=').expect("label=value");
                if label != "le" && label != "quantile" {
                    entry.1.insert(label.to_string());
                }
            }
        }
    }
    families
}

#[test]
fn every_documented_family_is_exposed_with_its_type_and_labels() {
    touch_every_family();
    let exposed = parse_exposition(&encode());
    let documented = documented();
    for (name, kind, labels) in &documented {
        let Some((exposed_kind, exposed_labels)) = exposed.get(name) else {
            panic!("{name} is missing from the exposition");
        };
        assert_eq!(exposed_kind, kind, "{name}");
        let labels: BTreeSet<String> = labels.iter().cloned().collect();
        assert_eq!(exposed_labels, &labels, "{name}");
    }
    let documented_names: BTreeSet<&String> = documented.iter().map(|(n, _, _)| n).collect();
    let extra: Vec<&String> = exposed
        .keys()
        .filter(|n| !documented_names.contains(n))
        .collect();
    assert!(extra.is_empty(), "undocumented families: {extra:?}");
    assert_eq!(
        documented_names.len(),
        documented.len(),
        "the list repeats a name"
    );
}

#[test]
fn build_info_exists_from_the_start() {
    let text = encode();
    let version = format!("version=\"{}\"", env!("CARGO_PKG_VERSION"));
    let build = text
        .lines()
        .find(|l| l.starts_with("karpenter_build_info{") && l.contains(&version))
        .expect("build_info is set at start");
    assert!(build.contains("goversion=\"rust\""), "{build}");
    assert!(build.ends_with(" 1"), "{build}");
}

#[test]
fn node_metric_labels_are_upstreams_suffixes() {
    let labels = node_metric_labels();
    let find = |key: &str| {
        labels
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, n)| n.as_str())
    };
    assert_eq!(find("karpenter.sh/nodepool"), Some("nodepool"));
    assert_eq!(
        find("node.kubernetes.io/instance-type"),
        Some("instance_type")
    );
    assert_eq!(find("karpenter.sh/capacity-type"), Some("capacity_type"));
    assert_eq!(find("karpenter.k8s.aws/instance-cpu"), Some("instance_cpu"));
    assert_eq!(find("topology.k8s.aws/zone-id"), Some("zone_id"));
    assert_eq!(find("topology.kubernetes.io/zone"), Some("zone"));
}

#[tokio::test]
async fn a_started_controller_reports_zero_reconciles_errors_and_panics() {
    let seen_inside = in_controller("test.started", async { current_controller() }).await;
    assert_eq!(seen_inside, "test.started");
    let text = encode();
    let mut expected: Vec<String> = RECONCILE_RESULTS
        .iter()
        .map(|r| {
            format!(
                "controller_runtime_reconcile_total{{controller=\"test.started\",result=\"{r}\"}} 0"
            )
        })
        .collect();
    expected.extend(
        [
            "controller_runtime_reconcile_errors_total",
            "controller_runtime_reconcile_panics_total",
            "controller_runtime_active_workers",
        ]
        .map(|f| format!("{f}{{controller=\"test.started\"}} 0")),
    );
    expected.push(
        "workqueue_depth{controller=\"test.started\",name=\"test.started\",priority=\"\"} 0".into(),
    );
    expected.extend(
        [
            "workqueue_adds_total",
            "workqueue_retries_total",
            "workqueue_queue_duration_seconds_count",
            "workqueue_work_duration_seconds_count",
            "workqueue_unfinished_work_seconds",
            "workqueue_longest_running_processor_seconds",
        ]
        .map(|f| format!("{f}{{controller=\"test.started\",name=\"test.started\"}} 0")),
    );
    for line in &expected {
        assert!(text.lines().any(|l| l == line), "missing {line}");
    }
}

#[test]
fn workqueue_histograms_use_controller_runtimes_buckets() {
    METRICS.start_controller("test.buckets");
    let text = encode();
    for family in [
        "workqueue_queue_duration_seconds",
        "workqueue_work_duration_seconds",
    ] {
        let prefix = format!("{family}_bucket{{controller=\"test.buckets\",");
        let bounds: Vec<f64> = text
            .lines()
            .filter(|l| l.starts_with(&prefix))
            .filter_map(|l| l.split("le=\"").nth(1)?.split('"').next())
            .filter(|b| *b != "+Inf")
            .map(|b| b.parse::<f64>().expect("a bucket bound"))
            .collect();
        // 10 ns to 1000 s by factors of ten.
        assert_eq!(bounds.len(), 12, "{family}: {bounds:?}");
        for (i, bound) in bounds.iter().enumerate() {
            let expected = 1e-8 * 10f64.powi(i as i32);
            assert!(
                (bound / expected - 1.0).abs() < 1e-9,
                "{family}: bucket {i} is {bound}, not {expected}"
            );
        }
    }
}
