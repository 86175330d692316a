//! Scenario tests for NodeOverlays (`karpenter.sh/v1alpha1`, behind the `NodeOverlay` gate)
//! through `simulate`'s library entry: manifests in, the NodeClaims the controller would create
//! out, on the bundled us-east-1 catalog.

use std::path::Path;

use karpenter_rs::catalog::Catalog;
use karpenter_rs::manifest;
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

/// A pool of on-demand m5.large and c5.large (c5.large is the cheaper, at list price).
const NODEPOOL: &str = r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: default}
spec:
  template:
    metadata: {labels: {team: web}}
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      requirements:
        - {key: node.kubernetes.io/instance-type, operator: In, values: [m5.large, c5.large]}
        - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
"#;

fn pod(name: &str, requests: &str) -> String {
    format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{name: {name}}}
spec:
  containers:
    - name: c
      image: pause
      resources:
        requests: {{cpu: 100m, memory: 128Mi{requests}}}
        limits: {{cpu: 100m, memory: 128Mi{requests}}}
"#
    )
}

fn overlay(name: &str, spec: &str) -> String {
    format!(
        r#"
apiVersion: karpenter.sh/v1alpha1
kind: NodeOverlay
metadata: {{name: {name}}}
spec:
{spec}
"#
    )
}

fn simulate(docs: &[String], node_overlay: bool) -> Report {
    let text = docs.join("\n---\n");
    let parsed = manifest::parse_str(&text, Path::new("test.yaml")).expect("YAML parses");
    let c = manifest::load(&parsed, chrono::Utc::now()).unwrap_or_else(|e| panic!("{e}"));
    let catalog = Catalog::bundled("us-east-1").expect("catalog");
    simulate::simulate(
        &c,
        &catalog,
        &EngineOptions {
            node_overlay,
            ..Default::default()
        },
    )
}

/// The one NodeClaim's instance type and price.
fn chosen(report: &Report) -> (String, f64) {
    assert_eq!(report.nodeclaims.len(), 1, "{report:#?}");
    let claim = &report.nodeclaims[0];
    (claim.instance_type.clone(), claim.price)
}

const M5_HALF_PRICE: &str = "  requirements:\n    - {key: node.kubernetes.io/instance-type, operator: In, values: [m5.large]}\n  priceAdjustment: \"-50%\"";

#[test]
fn a_price_adjustment_makes_the_overlaid_type_the_cheapest() {
    let base = [NODECLASS.to_owned(), NODEPOOL.to_owned(), pod("p", "")];
    let (list_type, list_price) = chosen(&simulate(&base, true));
    assert_eq!(list_type, "c5.large");

    let mut docs = base.to_vec();
    docs.push(overlay("m5-discount", M5_HALF_PRICE));
    let report = simulate(&docs, true);
    let (overlaid_type, overlaid_price) = chosen(&report);
    assert_eq!(overlaid_type, "m5.large");
    assert!(
        overlaid_price < list_price,
        "{overlaid_price} vs {list_price}"
    );
    // The report prices the claim at the overlaid price: half of m5.large's list price.
    assert!(
        (overlaid_price - 0.096 / 2.0).abs() < 1e-9,
        "{overlaid_price}"
    );
    assert!((report.cost.new_per_hour - overlaid_price).abs() < 1e-9);
}

#[test]
fn the_gate_off_ignores_overlays() {
    let docs = [
        NODECLASS.to_owned(),
        NODEPOOL.to_owned(),
        pod("p", ""),
        overlay("m5-discount", M5_HALF_PRICE),
        overlay(
            "foo",
            "  requirements: []\n  capacity: {example.com/foo: \"1\"}",
        ),
        pod("needs-foo", ", example.com/foo: 1"),
    ];
    let report = simulate(&docs, false);
    assert_eq!(report.nodeclaims.len(), 1, "{report:#?}");
    assert_eq!(report.nodeclaims[0].instance_type, "c5.large");
    assert_eq!(report.unschedulable.len(), 1, "{report:#?}");
    assert_eq!(report.unschedulable[0].pod, "default/needs-foo");
}

#[test]
fn a_capacity_overlay_lets_a_pod_requesting_an_extended_resource_schedule() {
    let base = [
        NODECLASS.to_owned(),
        NODEPOOL.to_owned(),
        pod("needs-foo", ", example.com/foo: 1"),
    ];
    let report = simulate(&base, true);
    assert!(report.nodeclaims.is_empty(), "{report:#?}");
    assert_eq!(report.unschedulable.len(), 1);

    let mut docs = base.to_vec();
    docs.push(overlay(
        "foo-on-m5",
        "  requirements:\n    - {key: node.kubernetes.io/instance-type, operator: In, values: [m5.large]}\n  capacity: {example.com/foo: \"2\"}",
    ));
    let report = simulate(&docs, true);
    assert!(report.unschedulable.is_empty(), "{report:#?}");
    let (it, _) = chosen(&report);
    assert_eq!(it, "m5.large");
}

#[test]
fn the_higher_weight_wins_and_an_equal_weight_conflict_is_left_out() {
    let base = [NODECLASS.to_owned(), NODEPOOL.to_owned(), pod("p", "")];
    // Weight 10 makes m5.large nearly free; weight 1 would make it dear: the higher weight wins.
    let mut docs = base.to_vec();
    docs.push(overlay(
        "cheap",
        "  weight: 10\n  requirements:\n    - {key: node.kubernetes.io/instance-type, operator: In, values: [m5.large]}\n  price: \"0.01\"",
    ));
    docs.push(overlay(
        "dear",
        "  weight: 1\n  requirements:\n    - {key: node.kubernetes.io/instance-type, operator: In, values: [m5.large]}\n  price: \"5\"",
    ));
    assert_eq!(
        chosen(&simulate(&docs, true)),
        ("m5.large".to_owned(), 0.01)
    );

    // Equal weights on the same offering: the later name ("zz") is taken, "cheap" conflicts.
    let mut docs = base.to_vec();
    docs.push(overlay(
        "cheap",
        "  weight: 10\n  requirements:\n    - {key: node.kubernetes.io/instance-type, operator: In, values: [m5.large]}\n  price: \"0.01\"",
    ));
    docs.push(overlay(
        "zz",
        "  weight: 10\n  requirements:\n    - {key: team, operator: In, values: [web]}\n  priceAdjustment: \"+1\"",
    ));
    let report = simulate(&docs, true);
    let (it, price) = chosen(&report);
    assert_eq!(it, "c5.large");
    assert!((price - (0.085 + 1.0)).abs() < 1e-9, "{price}");
    assert_eq!(report.overlays.len(), 1, "{:#?}", report.overlays);
    assert_eq!(report.overlays[0].name, "cheap");
    assert!(
        report.overlays[0].reason.contains("weight 10")
            && report.overlays[0].reason.contains("m5.large"),
        "{}",
        report.overlays[0].reason
    );
    assert!(
        report
            .to_table()
            .contains("NodeOverlay cheap not applied: conflict with another overlay")
    );
}

#[test]
fn an_invalid_overlay_is_a_load_error_naming_the_field() {
    let docs = [
        NODECLASS.to_owned(),
        overlay(
            "both",
            "  requirements: []\n  price: \"1\"\n  priceAdjustment: \"+1\"\n  capacity: {cpu: \"4\"}",
        ),
    ];
    let parsed =
        manifest::parse_str(&docs.join("\n---\n"), Path::new("test.yaml")).expect("YAML parses");
    let err = manifest::load(&parsed, chrono::Utc::now())
        .expect_err("an overlay setting price and priceAdjustment is refused")
        .to_string();
    assert!(err.contains("NodeOverlay/both"), "{err}");
    assert!(
        err.contains("cannot set both 'price' and 'priceAdjustment'"),
        "{err}"
    );
    assert!(err.contains("spec.capacity.cpu"), "{err}");

    let docs = [overlay(
        "bad-quantity",
        "  requirements: []\n  capacity: {example.com/foo: lots}",
    )];
    let parsed =
        manifest::parse_str(&docs.join("\n---\n"), Path::new("test.yaml")).expect("YAML parses");
    let err = manifest::load(&parsed, chrono::Utc::now())
        .expect_err("a capacity that is no quantity is refused")
        .to_string();
    assert!(err.contains("spec.capacity.example.com/foo"), "{err}");

    let docs = ["apiVersion: karpenter.sh/v1\nkind: NodeOverlay\nmetadata: {name: v1}\nspec: {}\n"];
    let parsed = manifest::parse_str(docs[0], Path::new("test.yaml")).expect("YAML parses");
    let err = manifest::load(&parsed, chrono::Utc::now())
        .expect_err("NodeOverlay is served as v1alpha1 only")
        .to_string();
    assert!(
        err.contains("change apiVersion to karpenter.sh/v1alpha1"),
        "{err}"
    );
}
