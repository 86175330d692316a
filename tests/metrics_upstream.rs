//! Every metric family upstream Karpenter v1.14 documents is either registered here with
//! upstream's type and labels, or named in README.md's "Upstream families not exposed" table
//! with the reason; never both, so a family we cannot fill is left out rather than registered
//! and frozen at zero. The documented families are checked in at
//! `tests/fixtures/upstream-metrics-v1.14.txt`.

use std::collections::{BTreeMap, BTreeSet};

use karpenter_rs::metrics::{Family, families, node_metric_labels};

/// The header row of README.md's table of upstream families we do not expose.
const NOT_EXPOSED_HEADER: &str = "| Upstream family | Why it is not exposed |";

/// One documented family: its type and label names.
struct Documented {
    kind: String,
    labels: BTreeSet<String>,
}

/// The fixture's families, with `<node>` expanded to the node labels.
fn documented() -> BTreeMap<String, Documented> {
    let text = include_str!("fixtures/upstream-metrics-v1.14.txt");
    let node: Vec<String> = node_metric_labels()
        .iter()
        .map(|(_, name)| name.clone())
        .collect();
    let mut out = BTreeMap::new();
    for line in text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [name, kind, labels] = fields[..] else {
            panic!("fixture line {line:?} is not `name type labels`");
        };
        let mut set = BTreeSet::new();
        for label in labels.split(',').filter(|l| *l != "-") {
            if label == "<node>" {
                set.extend(node.iter().cloned());
            } else {
                set.insert(label.to_string());
            }
        }
        let previous = out.insert(
            name.to_string(),
            Documented {
                kind: kind.to_string(),
                labels: set,
            },
        );
        assert!(previous.is_none(), "the fixture lists {name} twice");
    }
    out
}

/// README.md's "Upstream families not exposed" rows: family → reason.
fn not_exposed() -> BTreeMap<String, String> {
    let readme = include_str!("../README.md");
    let mut lines = readme
        .lines()
        .skip_while(|l| l.trim() != NOT_EXPOSED_HEADER);
    assert!(
        lines.next().is_some(),
        "README.md has no table headed {NOT_EXPOSED_HEADER}"
    );
    let mut out = BTreeMap::new();
    for row in lines
        .skip(1) // the separator row
        .take_while(|l| l.starts_with('|'))
    {
        let cells: Vec<&str> = row.trim_matches('|').split('|').map(str::trim).collect();
        let [family, why] = cells[..] else {
            panic!("README row {row:?} is not `| family | why |`");
        };
        let family = family
            .strip_prefix('`')
            .and_then(|f| f.strip_suffix('`'))
            .unwrap_or_else(|| panic!("README row {row:?}: the family is not in backticks"));
        assert!(!why.is_empty(), "README gives no reason for {family}");
        assert!(
            out.insert(family.to_string(), why.to_string()).is_none(),
            "README lists {family} twice"
        );
    }
    out
}

#[test]
fn every_upstream_family_is_registered_alike_or_documented_as_not_exposed() {
    let documented = documented();
    let not_exposed = not_exposed();
    let registered: BTreeMap<&str, &Family> =
        families().iter().map(|f| (f.name.as_str(), f)).collect();
    let mut problems = Vec::new();
    for (name, doc) in &documented {
        match (
            registered.get(name.as_str()),
            not_exposed.contains_key(name),
        ) {
            (Some(_), true) => problems.push(format!(
                "{name} is registered but README says it is not exposed"
            )),
            (None, false) => problems.push(format!(
                "{name} is neither registered nor in README's table of families not exposed"
            )),
            (None, true) => {}
            (Some(ours), false) => {
                if ours.kind != doc.kind {
                    problems.push(format!(
                        "{name} is a {}, upstream's is a {}",
                        ours.kind, doc.kind
                    ));
                }
                let labels: BTreeSet<String> = ours.labels.iter().cloned().collect();
                if labels != doc.labels {
                    problems.push(format!(
                        "{name} has labels {labels:?}, upstream's are {:?}",
                        doc.labels
                    ));
                }
            }
        }
    }
    for name in not_exposed.keys() {
        if !documented.contains_key(name) {
            problems.push(format!(
                "README's table of families not exposed names {name}, which upstream does not document"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The fixture is read, not skipped: a sample of families of each kind is there.
#[test]
fn the_fixture_holds_upstreams_families_of_each_kind() {
    let documented = documented();
    for (name, kind) in [
        ("karpenter_nodeclaims_created_total", "counter"),
        ("karpenter_nodes_allocatable", "gauge"),
        (
            "karpenter_scheduler_scheduling_duration_seconds",
            "histogram",
        ),
        ("karpenter_pods_startup_duration_seconds", "summary"),
        ("operator_status_condition_count", "gauge"),
        ("workqueue_depth", "gauge"),
    ] {
        assert_eq!(documented.get(name).map(|d| d.kind.as_str()), Some(kind));
    }
    assert!(
        documented["karpenter_nodes_allocatable"]
            .labels
            .contains("instance_type")
    );
    assert_eq!(documented.len(), 126, "families on upstream's v1.14 page");
}
