//! The shipped Grafana dashboards and alert rules query only metric families the controller
//! registers: a renamed or removed family must not leave a dashboard panel or an alert silently
//! empty.

use std::collections::BTreeSet;
use std::path::PathBuf;

use karpenter_rs::metrics::family_names;

fn chart() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("charts/karpenter")
}

/// Every `karpenter_*` identifier in a text.
fn metric_names(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("karpenter_") {
        let preceded = rest[..at]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
        let name: String = rest[at..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if !preceded {
            out.insert(name.clone());
        }
        rest = &rest[at + name.len()..];
    }
    out
}

/// Whether a queried series belongs to a registered family: the family itself, or a histogram's
/// or summary's `_bucket`, `_sum` or `_count` series.
fn exported(name: &str, families: &BTreeSet<&str>) -> bool {
    families.contains(name)
        || ["_bucket", "_sum", "_count"]
            .iter()
            .any(|s| name.strip_suffix(s).is_some_and(|f| families.contains(f)))
}

fn queried() -> Vec<(String, BTreeSet<String>)> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(chart().join("dashboards"))
        .expect("dashboards/")
        .map(|e| e.expect("entry").path())
        .collect();
    files.push(chart().join("templates/prometheusrule.yaml"));
    files.sort();
    files
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).expect("readable");
            (path.display().to_string(), metric_names(&text))
        })
        .collect()
}

#[test]
fn dashboards_and_alerts_query_only_exported_families() {
    let families: BTreeSet<&str> = family_names().iter().map(String::as_str).collect();
    let queried = queried();
    assert_eq!(queried.len(), 3, "two dashboards and the alert rules");
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
fn the_check_catches_an_unknown_family() {
    let families: BTreeSet<&str> = family_names().iter().map(String::as_str).collect();
    assert!(exported("karpenter_nodeclaims_created_total", &families));
    assert!(exported(
        "karpenter_scheduler_scheduling_duration_seconds_bucket",
        &families
    ));
    assert!(!exported("karpenter_nodeclaims_launched_total", &families));
    assert_eq!(
        metric_names("sum(rate(karpenter_a_total[5m])) / my_karpenter_b"),
        BTreeSet::from(["karpenter_a_total".to_string()])
    );
}
