//! The PromQL the chart ships, as Prometheus evaluates it: every query of the Grafana dashboards
//! (`charts/karpenter/dashboards/*.json`) and every alert expression of the PrometheusRule
//! (`charts/karpenter/templates/prometheusrule.yaml`), with template variables at the values a user
//! sees by default; and the metric names a query selects. Shared by `tests/dashboards.rs` (the
//! names must be families the controller registers) and `tests/control_plane.rs` (a real
//! Prometheus evaluates the queries).

// Each test binary that includes this module uses a different part of it.
#![allow(dead_code)]

use std::collections::BTreeSet;
use std::path::PathBuf;

/// The chart's directory.
pub fn chart() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("charts/karpenter")
}

/// The dashboards' file names, sorted.
pub fn dashboards() -> Vec<String> {
    let mut files: Vec<String> = std::fs::read_dir(chart().join("dashboards"))
        .expect("charts/karpenter/dashboards/")
        .map(|e| e.expect("a directory entry").file_name())
        .filter_map(|n| n.into_string().ok())
        .filter(|n| n.ends_with(".json"))
        .collect();
    files.sort();
    files
}

/// Every shipped query: (`"<dashboard>: <panel title>"` or `"alert <name>"`, expression).
/// Grafana's `$nodepool` is "All" (`.*`); the rule template's job is `karpenter` (the job the
/// control-plane test's Prometheus scrapes) and the ICE threshold its default, 10.
pub fn shipped() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for file in dashboards() {
        let text = std::fs::read_to_string(chart().join("dashboards").join(&file))
            .unwrap_or_else(|e| panic!("{file}: {e}"));
        let dashboard: serde_json::Value =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{file} is not JSON: {e}"));
        for panel in dashboard["panels"].as_array().expect("panels") {
            let title = panel["title"].as_str().unwrap_or_default();
            for target in panel["targets"].as_array().expect("targets") {
                let expr = target["expr"]
                    .as_str()
                    .unwrap_or_else(|| panic!("{file}: {title}: a target without expr"));
                out.push((format!("{file}: {title}"), expr.replace("$nodepool", ".*")));
            }
        }
    }
    let rules = std::fs::read_to_string(chart().join("templates/prometheusrule.yaml"))
        .expect("prometheusrule.yaml");
    let mut alert = String::new();
    for line in rules.lines().map(str::trim) {
        if let Some(name) = line.strip_prefix("- alert: ") {
            alert = name.to_string();
        } else if let Some(expr) = line.strip_prefix("expr: ") {
            out.push((
                format!("alert {alert}"),
                expr.replace("{{ $job }}", "karpenter")
                    .replace("{{ $rule.insufficientCapacityThreshold }}", "10"),
            ));
        }
    }
    out
}

/// PromQL words that are not metric names where an identifier may stand.
const KEYWORDS: [&str; 13] = [
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "and",
    "or",
    "unless",
    "bool",
    "offset",
    "inf",
    "nan",
];

/// Aggregation operators, which may stand before their `by (...)` or `without (...)` rather
/// than before their `(`.
const AGGREGATIONS: [&str; 14] = [
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "limitk",
    "limit_ratio",
];

/// Keywords followed by a parenthesized list of label names.
const LABEL_LISTS: [&str; 6] = [
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];

/// The metric names `expr` selects: identifiers outside label matchers (`{...}`), strings,
/// ranges (`[...]`), comments and label lists (`by (...)`), that are neither a keyword, an
/// aggregation operator nor a function (followed by `(`).
pub fn metric_names(expr: &str) -> BTreeSet<String> {
    let chars: Vec<char> = expr.chars().collect();
    let mut out = BTreeSet::new();
    let mut matchers = 0usize;
    let mut in_label_list = false;
    let mut i = 0;
    while let Some(&c) = chars.get(i) {
        match c {
            '"' | '\'' | '`' => {
                i += 1;
                while let Some(&s) = chars.get(i) {
                    if s == '\\' {
                        i += 1;
                    } else if s == c {
                        break;
                    }
                    i += 1;
                }
                i += 1;
            }
            '#' => {
                while chars.get(i).is_some_and(|&s| s != '\n') {
                    i += 1;
                }
            }
            '[' => {
                while chars.get(i).is_some_and(|&s| s != ']') {
                    i += 1;
                }
                i += 1;
            }
            '{' => {
                matchers += 1;
                i += 1;
            }
            '}' => {
                matchers = matchers.saturating_sub(1);
                i += 1;
            }
            ')' => {
                in_label_list = false;
                i += 1;
            }
            c if c.is_ascii_digit() || c == '.' => {
                // A number (0.99, 1e3, 0x1f) or a duration (5m).
                while chars
                    .get(i)
                    .is_some_and(|s| s.is_ascii_alphanumeric() || *s == '.')
                {
                    i += 1;
                }
            }
            c if c.is_ascii_alphabetic() || c == '_' || c == ':' => {
                let start = i;
                while chars
                    .get(i)
                    .is_some_and(|s| s.is_ascii_alphanumeric() || *s == '_' || *s == ':')
                {
                    i += 1;
                }
                let word: String = chars[start..i].iter().collect();
                let next = chars[i..].iter().find(|s| !s.is_whitespace());
                let lower = word.to_ascii_lowercase();
                if matchers > 0 || in_label_list {
                    // A label name.
                } else if LABEL_LISTS.contains(&lower.as_str()) {
                    in_label_list = next == Some(&'(');
                    if in_label_list {
                        // Step onto the list's '(' so that its ')' ends it.
                        while chars.get(i).is_some_and(|s| *s != '(') {
                            i += 1;
                        }
                        i += 1;
                    }
                } else if KEYWORDS.contains(&lower.as_str())
                    || AGGREGATIONS.contains(&lower.as_str())
                    || next == Some(&'(')
                {
                    // A keyword, an aggregation or a function.
                } else {
                    out.insert(word);
                }
            }
            _ => i += 1,
        }
    }
    out
}
