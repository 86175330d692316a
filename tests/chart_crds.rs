//! The Helm chart ships the project's CRDs: `charts/karpenter/crds/` holds byte-identical copies of
//! the files in `crds/`, so `helm install` creates exactly what `kubectl apply -f crds/` would.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

const FIX: &str =
    "run `cp crds/*.yaml charts/karpenter/crds/` (and delete files crds/ no longer has)";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn file_names(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}; {FIX}", dir.display()))
        .map(|entry| {
            let entry = entry.expect("readable directory entry");
            entry.file_name().to_string_lossy().into_owned()
        })
        .collect()
}

#[test]
fn chart_crds_are_copies_of_crds() {
    let source = root().join("crds");
    let chart = root().join("charts/karpenter/crds");
    let names = file_names(&source);
    assert!(!names.is_empty(), "crds/ is empty");
    assert_eq!(
        names,
        file_names(&chart),
        "charts/karpenter/crds/ and crds/ hold different files; {FIX}"
    );
    for name in &names {
        let expected = std::fs::read(source.join(name)).expect("readable CRD");
        let actual = std::fs::read(chart.join(name)).expect("readable chart CRD");
        assert!(
            expected == actual,
            "charts/karpenter/crds/{name} differs from crds/{name}; {FIX}"
        );
    }
}
