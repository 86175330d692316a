//! The CRDs in `crds/` are exactly what `karpenter-rs crds` generates from the Rust types, so the
//! manifests users apply can never drift from what the controller and `validate()` expect.

use std::path::PathBuf;
use std::process::Command;

use karpenter_rs::apis::crds;

fn crds_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("crds")
}

#[test]
fn checked_in_crds_match_the_generated_ones() {
    for (file, crd) in crds::all() {
        let generated = crds::to_yaml(&crd).expect("CRD renders");
        let path = crds_dir().join(file);
        let checked_in = std::fs::read_to_string(&path).unwrap_or_else(|e| {
            panic!(
                "{}: {e}; run `cargo run -- crds --output-dir crds`",
                path.display()
            )
        });
        assert!(
            generated == checked_in,
            "{} is stale; regenerate with `cargo run -- crds --output-dir crds`",
            path.display()
        );
    }
    let files = std::fs::read_dir(crds_dir()).expect("crds/ exists").count();
    assert_eq!(
        files,
        crds::all().len(),
        "crds/ holds a file that is not generated"
    );
}

#[test]
fn crds_command_prints_the_checked_in_files() {
    let out = Command::new(env!("CARGO_BIN_EXE_karpenter-rs"))
        .arg("crds")
        .output()
        .expect("binary runs");
    assert!(out.status.success());
    let printed = String::from_utf8(out.stdout).expect("utf-8");
    let mut expected = String::new();
    for (file, _) in crds::all() {
        expected.push_str("---\n");
        expected.push_str(&std::fs::read_to_string(crds_dir().join(file)).expect("readable"));
    }
    assert_eq!(printed, expected);
}

#[test]
fn crds_have_upstream_names_scope_and_subresources() {
    let all = crds::all();
    let by_kind = |kind: &str| {
        all.iter()
            .map(|(_, c)| c)
            .find(|c| c.spec.names.kind == kind)
            .unwrap_or_else(|| panic!("{kind} CRD"))
    };
    for kind in ["NodePool", "NodeClaim", "EC2NodeClass"] {
        let crd = by_kind(kind);
        assert_eq!(crd.spec.scope, "Cluster");
        assert_eq!(
            crd.spec.names.categories.as_deref(),
            Some(&["karpenter".to_string()][..])
        );
        let version = &crd.spec.versions[0];
        assert_eq!(version.name, "v1");
        assert!(version.storage && version.served);
        let sub = version.subresources.as_ref().expect("subresources");
        assert!(sub.status.is_some(), "{kind} has a status subresource");
    }
    let overlay = by_kind("NodeOverlay");
    assert_eq!(overlay.spec.scope, "Cluster");
    assert_eq!(overlay.spec.versions[0].name, "v1alpha1");
    assert!(
        overlay.spec.versions[0]
            .subresources
            .as_ref()
            .is_some_and(|s| s.status.is_some()),
        "NodeOverlay has a status subresource"
    );
    let np = by_kind("NodePool");
    let scale = np.spec.versions[0]
        .subresources
        .as_ref()
        .and_then(|s| s.scale.as_ref())
        .expect("scale");
    assert_eq!(scale.spec_replicas_path, ".spec.replicas");
    assert_eq!(scale.status_replicas_path, ".status.nodes");
    let nc = by_kind("EC2NodeClass");
    assert_eq!(
        nc.spec.names.short_names.as_deref(),
        Some(&["ec2nc".to_string(), "ec2ncs".to_string()][..])
    );
    let columns: Vec<&str> = by_kind("NodeClaim").spec.versions[0]
        .additional_printer_columns
        .iter()
        .flatten()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(
        columns,
        [
            "Type",
            "Capacity",
            "Zone",
            "Node",
            "Ready",
            "Age",
            "ImageID",
            "ID",
            "NodePool",
            "NodeClass",
            "Drifted"
        ]
    );
}
