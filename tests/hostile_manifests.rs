//! Hostile and absurd manifests (issue #13): each is rejected quickly, with a message naming the
//! file, document, object and field and saying how to fix it — never a crash, a stall, or a
//! silently wrong reading.

use std::path::{Path, PathBuf};

use chrono::{DateTime, TimeZone, Utc};
use karpenter_rs::manifest::{self, LoadError, MAX_PODS, ReadError};

fn now() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2025, 1, 2, 3, 4, 5)
        .single()
        .expect("valid date")
}

/// The message `parse_str` gives for `yaml`, which must not parse.
fn read_error(yaml: &str) -> String {
    match manifest::parse_str(yaml, Path::new("hostile.yaml")) {
        Ok(docs) => panic!("should not parse, read {} documents", docs.len()),
        Err(e) => e.to_string(),
    }
}

/// Every problem `load` reports for `yaml`, which must parse but not load.
fn load_errors(yaml: &str) -> Vec<String> {
    let docs = manifest::parse_str(yaml, Path::new("hostile.yaml")).expect("valid YAML");
    match manifest::load(&docs, now()) {
        Ok(cluster) => panic!("should not load, got {} pods", cluster.pods.len()),
        Err(LoadError { problems }) => problems.iter().map(ToString::to_string).collect(),
    }
}

fn deployment(name: &str, replicas: &str) -> String {
    format!(
        "apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec: {{containers: [{{name: c, image: x}}]}}
"
    )
}

#[test]
fn huge_replicas_are_an_error_naming_the_field_not_an_allocation() {
    let yaml = format!(
        "{}---
apiVersion: apps/v1
kind: ReplicaSet
metadata: {{name: rs}}
spec:
  replicas: 2147483647
  selector: {{matchLabels: {{app: rs}}}}
  template:
    metadata: {{labels: {{app: rs}}}}
    spec: {{containers: [{{name: c, image: x}}]}}
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {{name: db}}
spec:
  replicas: 1000000
  selector: {{matchLabels: {{app: db}}}}
  template:
    metadata: {{labels: {{app: db}}}}
    spec: {{containers: [{{name: c, image: x}}]}}
---
apiVersion: batch/v1
kind: Job
metadata: {{name: wide}}
spec:
  parallelism: 2147483647
  template:
    spec: {{containers: [{{name: c, image: x}}], restartPolicy: Never}}
---
apiVersion: batch/v1
kind: Job
metadata: {{name: long}}
spec:
  parallelism: 2147483647
  completions: 300000
  template:
    spec: {{containers: [{{name: c, image: x}}], restartPolicy: Never}}
",
        deployment("web", "2000000000")
    );
    let errors = load_errors(&yaml);
    let expected = [
        "hostile.yaml (document 1): Deployment/web: spec.replicas: Too many: 2000000000 pods",
        "hostile.yaml (document 2): ReplicaSet/rs: spec.replicas: Too many: 2147483647 pods",
        "hostile.yaml (document 3): StatefulSet/db: spec.replicas: Too many: 1000000 pods",
        "hostile.yaml (document 4): Job/wide: spec.parallelism: Too many: 2147483647 pods",
        "hostile.yaml (document 5): Job/long: spec.completions: Too many: 300000 pods",
    ];
    assert_eq!(errors.len(), expected.len(), "{errors:#?}");
    for (error, start) in errors.iter().zip(expected) {
        assert!(error.starts_with(start), "{error}");
        assert!(
            error.contains(&format!("more than the {MAX_PODS} simulate reads")),
            "{error}"
        );
        assert!(
            error.contains("or simulate the workloads in parts"),
            "{error}"
        );
    }
    assert!(errors[0].contains("; lower spec.replicas"), "{}", errors[0]);
}

#[test]
fn the_pod_cap_counts_the_whole_input_and_names_the_object_that_crosses_it() {
    let yaml = format!(
        "{}---\n{}",
        deployment("first", &(MAX_PODS - 10).to_string()),
        deployment("second", "11")
    );
    let errors = load_errors(&yaml);
    assert_eq!(
        errors,
        [format!(
            "hostile.yaml (document 2): Deployment/second: spec.replicas: Too many: 11 pods \
             would make {} in the input, more than the {MAX_PODS} simulate reads ({} before \
             this object); lower spec.replicas or simulate the workloads in parts",
            MAX_PODS + 1,
            MAX_PODS - 10
        )]
    );
}

#[test]
fn deep_flow_nesting_is_refused_before_parsing() {
    let yaml = format!("a: {}{}\n", "[".repeat(200_000), "]".repeat(200_000));
    assert_eq!(
        read_error(&yaml),
        "hostile.yaml (document 1): brackets nested more than 1000 levels deep by line 1; a \
         Kubernetes object nests a few dozen levels at most, check the file is a manifest"
    );
}

#[test]
fn deep_block_nesting_is_refused_with_its_depth() {
    let yaml: String = (0..500).map(|i| format!("{}k:\n", " ".repeat(i))).collect();
    let error = read_error(&yaml);
    assert!(
        error.starts_with("hostile.yaml (document 1): k.k.k."),
        "{error}"
    );
    assert!(
        error.contains(": nested more than 100 levels deep; a Kubernetes object nests a few dozen levels at most"),
        "{error}"
    );
    assert!(!error.contains("malformed"), "{error}");
}

#[test]
fn aliases_of_aliases_are_refused_before_they_expand() {
    let mut yaml = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
    for i in 1..10 {
        let refs = vec![format!("*a{}", i - 1); 10].join(", ");
        yaml.push_str(&format!("a{i}: &a{i} [{refs}]\n"));
    }
    assert_eq!(
        read_error(&yaml),
        "hostile.yaml (document 1): aliases expand to too many values; write the values out \
         instead of nesting aliases of aliases"
    );
}

#[test]
fn a_duplicate_key_is_an_error_naming_the_key_and_its_path() {
    let error = read_error(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: a\n  name: b\nspec:\n  containers: []\n",
    );
    assert_eq!(
        error,
        "hostile.yaml (document 1): metadata: duplicate key \"name\"; the API server rejects a \
         field given twice, keep one at line 4 column 3"
    );
    let error = read_error("---\na: 1\n---\nspec:\n  list: [{x: 1, x: 2}]\n");
    assert!(
        error.starts_with("hostile.yaml (document 2): spec.list[0]: duplicate key \"x\""),
        "{error}"
    );
}

#[test]
fn an_unknown_tag_is_named_not_called_malformed() {
    let error = read_error("apiVersion: v1\nkind: !foo bar\n");
    assert_eq!(
        error,
        "hostile.yaml (document 1): kind: unsupported tag !foo: Kubernetes reads only YAML's own \
         tags (!!str, !!int, …); remove the tag at line 2 column 7"
    );
    // YAML's own tags still work.
    let docs = manifest::parse_str("a: !!str 12\n", Path::new("ok.yaml")).expect("parses");
    assert_eq!(docs[0].value["a"], "12");
}

#[test]
fn numbers_where_strings_belong_are_named_in_the_api_servers_words() {
    let yaml = "apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: default}
spec:
  template:
    metadata:
      labels: {team: 1.5}
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      requirements:
        - {key: 3.5, operator: Exists}
";
    let errors = load_errors(yaml);
    assert_eq!(
        errors,
        [
            "hostile.yaml (document 1): NodePool/default: spec.template.metadata.labels.team: \
             Invalid value: \"number\": must be of type string; quote it (\"1.5\") if it is \
             meant as a string",
            "hostile.yaml (document 1): NodePool/default: spec.template.spec.requirements[0].key: \
             Invalid value: \"number\": must be of type string; quote it (\"3.5\") if it is \
             meant as a string",
        ]
    );
}

/// A fresh directory under the target directory, removed first if a previous run left it.
fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    if dir.exists() {
        std::fs::remove_dir_all(&dir).expect("remove old scratch directory");
    }
    std::fs::create_dir_all(&dir).expect("create scratch directory");
    dir
}

#[cfg(unix)]
#[test]
fn a_symlink_loop_is_reported_once() {
    let dir = scratch("symlink-loop");
    std::fs::create_dir(dir.join("sub")).expect("mkdir");
    std::fs::write(dir.join("sub/web.yaml"), deployment("web", "1")).expect("write");
    std::os::unix::fs::symlink("..", dir.join("sub/up")).expect("symlink");
    let error = manifest::read_paths(std::slice::from_ref(&dir))
        .expect_err("a loop is an error")
        .to_string();
    let canonical = std::fs::canonicalize(&dir).expect("canonical");
    assert_eq!(
        error,
        format!(
            "{}: symbolic link loop: it leads back to {}, which is already being read; remove \
             the link or pass the directories it points to with -f",
            dir.join("sub/up").display(),
            canonical.display()
        )
    );
}

#[cfg(unix)]
#[test]
fn a_file_reached_through_two_links_is_read_once() {
    let dir = scratch("symlink-alias");
    std::fs::create_dir(dir.join("sub")).expect("mkdir");
    std::fs::write(dir.join("sub/web.yaml"), deployment("web", "1")).expect("write");
    std::os::unix::fs::symlink("sub", dir.join("alias")).expect("symlink");
    std::os::unix::fs::symlink("sub/web.yaml", dir.join("web.yaml")).expect("symlink");
    let docs = manifest::read_paths(&[dir.clone(), dir.join("sub")]).expect("reads");
    assert_eq!(docs.len(), 1, "{docs:#?}");
    manifest::load(&docs, now()).expect("loads without duplicates");
}

#[cfg(target_os = "linux")]
#[test]
fn an_endless_file_is_cut_off_at_the_size_limit() {
    let error = manifest::read_paths(&[PathBuf::from("/dev/zero")])
        .expect_err("too large")
        .to_string();
    assert_eq!(
        error,
        "/dev/zero: file is larger than 64 MiB; split it into several files (a directory given \
         to -f is read file by file)"
    );
}

#[test]
fn an_io_error_prints_its_cause_once() {
    let missing = PathBuf::from("/nonexistent/karpenter-rs/manifest.yaml");
    let error = manifest::read_paths(std::slice::from_ref(&missing)).expect_err("missing");
    assert!(matches!(error, ReadError::Io { .. }), "{error:?}");
    // As main prints it: anyhow's alternate form appends every source in the chain.
    let printed = format!("{:#}", anyhow::Error::from(error));
    assert_eq!(
        printed,
        "/nonexistent/karpenter-rs/manifest.yaml: No such file or directory (os error 2)"
    );
}

/// The error the CLI prints last on stderr for `args`, which must fail.
fn cli_error(args: &[&str]) -> String {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_karpenter-rs"))
        .args(args)
        .output()
        .expect("the CLI runs");
    assert!(!output.status.success(), "{args:?} should fail");
    let stderr = String::from_utf8_lossy(&output.stderr);
    stderr.lines().last().unwrap_or_default().to_owned()
}

#[test]
fn the_cli_prints_each_cause_once() {
    let fixture = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/cluster/mix.yaml"
    );
    assert_eq!(
        cli_error(&[
            "simulate",
            "-f",
            fixture,
            "--catalog",
            "/nonexistent/catalog.json"
        ]),
        "karpenter-rs: /nonexistent/catalog.json: No such file or directory (os error 2)"
    );
    assert_eq!(
        cli_error(&["simulate", "-f", "/nonexistent/manifest.yaml"]),
        "karpenter-rs: /nonexistent/manifest.yaml: No such file or directory (os error 2)"
    );
}
