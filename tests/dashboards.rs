//! The shipped Grafana dashboards and alert rules query only metric families the controller
//! registers: a renamed or removed family must not leave a dashboard panel or an alert silently
//! empty. Every metric name counts, `karpenter_*` and the library families
//! (`controller_runtime_*`, `rest_client_*`, `leader_election_*`, `operator_*`) alike; the only
//! other name allowed is Prometheus' own `up`.

#[path = "dashboards/queries.rs"]
mod queries;

use std::collections::{BTreeMap, BTreeSet};

use karpenter_rs::metrics::family_names;
use queries::{metric_names, shipped};

/// Whether a queried series belongs to a registered family: the family itself, or a histogram's
/// or summary's `_bucket`, `_sum` or `_count` series. `up` is the scrape's own series.
fn exported(name: &str, families: &BTreeSet<&str>) -> bool {
    name == "up"
        || families.contains(name)
        || ["_bucket", "_sum", "_count"]
            .iter()
            .any(|s| name.strip_suffix(s).is_some_and(|f| families.contains(f)))
}

/// The metric names each dashboard and the alert rules query.
fn queried() -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (source, expr) in shipped() {
        let file = match source.split_once(": ") {
            Some((file, _)) => file.to_string(),
            None => "prometheusrule.yaml".to_string(),
        };
        let names = metric_names(&expr);
        assert!(!names.is_empty(), "{source} selects no metric: {expr}");
        out.entry(file).or_default().extend(names);
    }
    out
}

#[test]
fn dashboards_and_alerts_query_only_exported_families() {
    let families: BTreeSet<&str> = family_names().iter().map(String::as_str).collect();
    let queried = queried();
    assert_eq!(
        queried.keys().collect::<Vec<_>>(),
        ["capacity.json", "performance.json", "prometheusrule.yaml"],
        "two dashboards and the alert rules"
    );
    for (file, names) in &queried {
        assert!(names.len() >= 5, "{file} queries too little: {names:?}");
        let missing: Vec<&String> = names.iter().filter(|n| !exported(n, &families)).collect();
        assert!(
            missing.is_empty(),
            "{file} queries families we do not export: {missing:?}"
        );
    }
}

#[test]
fn the_library_families_operators_alert_on_are_on_the_dashboards_and_in_the_alerts() {
    let queried = queried();
    let all: BTreeSet<&String> = queried.values().flatten().collect();
    for family in [
        "controller_runtime_reconcile_total",
        "controller_runtime_reconcile_errors_total",
        "controller_runtime_reconcile_time_seconds_bucket",
        "controller_runtime_active_workers",
        "controller_runtime_reconcile_panics_total",
        "rest_client_requests_total",
        "leader_election_master_status",
        "workqueue_depth",
        "workqueue_queue_duration_seconds_bucket",
        "workqueue_longest_running_processor_seconds",
    ] {
        assert!(
            all.contains(&family.to_string()),
            "no panel or alert queries {family}"
        );
    }
}

#[test]
fn the_check_catches_an_unknown_family() {
    let families: BTreeSet<&str> = family_names().iter().map(String::as_str).collect();
    assert!(exported("karpenter_nodeclaims_created_total", &families));
    assert!(exported(
        "karpenter_scheduler_scheduling_duration_seconds_bucket",
        &families
    ));
    assert!(exported("controller_runtime_reconcile_total", &families));
    assert!(!exported("karpenter_nodeclaims_launched_total", &families));
    assert!(exported("workqueue_depth", &families));
    assert!(!exported(
        "controller_runtime_webhook_requests_total",
        &families
    ));
}

#[test]
fn metric_names_are_told_from_labels_functions_and_keywords() {
    let names = |expr: &str| -> Vec<String> { metric_names(expr).into_iter().collect() };
    assert_eq!(
        names("sum(rate(karpenter_a_total[5m])) / my_karpenter_b"),
        ["karpenter_a_total", "my_karpenter_b"]
    );
    assert_eq!(
        names(
            r#"histogram_quantile(0.99, sum by (le, controller) (rate(controller_runtime_reconcile_time_seconds_bucket{controller=~"a|b"}[5m])))"#
        ),
        ["controller_runtime_reconcile_time_seconds_bucket"]
    );
    assert_eq!(
        names(
            r#"sum by (nodepool) (count by (nodepool, zone) (a{resource_type="cpu"}) * on (zone) group_left max by (zone) (b)) or vector(0)"#
        ),
        ["a", "b"]
    );
    assert_eq!(
        names(
            r#"absent(up{job="karpenter"} == 1) and leader_election_master_status offset 5m # a comment naming c"#
        ),
        ["leader_election_master_status", "up"]
    );
    assert_eq!(
        names(r#"sum(x) by (controller) > bool 1e3 unless y{a="}"}"#),
        ["x", "y"]
    );
}
