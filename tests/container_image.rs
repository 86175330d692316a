//! What can be checked about the container image without building it: the Dockerfile's runtime
//! stage runs the controller as the non-root user the Helm chart expects, on the ports the
//! settings default to, and the build context keeps every file the build needs.

use karpenter_rs::operator::Settings;

const DOCKERFILE: &str = include_str!("../Dockerfile");
const DOCKERIGNORE: &str = include_str!("../.dockerignore");
const CHART_VALUES: &str = include_str!("../charts/karpenter/values.yaml");

/// The Dockerfile's instructions (continuation lines joined, comments dropped), split into
/// stages at each FROM.
fn stages() -> Vec<Vec<(String, String)>> {
    let joined = DOCKERFILE.replace("\\\n", " ");
    let mut stages: Vec<Vec<(String, String)>> = Vec::new();
    for line in joined.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (instruction, args) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
        let instruction = instruction.to_uppercase();
        if instruction == "FROM" {
            stages.push(Vec::new());
        }
        if let Some(stage) = stages.last_mut() {
            stage.push((instruction, args.trim().to_string()));
        }
    }
    stages
}

fn instructions<'a>(stage: &'a [(String, String)], name: &str) -> Vec<&'a str> {
    stage
        .iter()
        .filter(|(instruction, _)| instruction == name)
        .map(|(_, args)| args.as_str())
        .collect()
}

#[test]
fn the_runtime_stage_runs_the_controller_as_the_charts_non_root_user() {
    let stages = stages();
    assert_eq!(stages.len(), 2, "a builder and a runtime stage");
    let runtime = &stages[1];
    let base = instructions(runtime, "FROM")[0];
    assert!(
        base.starts_with("gcr.io/distroless/") && base.ends_with(":nonroot"),
        "{base}"
    );

    let users = instructions(runtime, "USER");
    assert_eq!(users.len(), 1, "{users:?}");
    let uid = users[0].split(':').next().unwrap_or_default();
    assert_eq!(uid, "65532", "{users:?}");
    assert!(
        CHART_VALUES.contains("runAsUser: 65532"),
        "the chart's securityContext runs as the image's user"
    );

    let entrypoints = instructions(runtime, "ENTRYPOINT");
    assert_eq!(entrypoints.len(), 1);
    let entrypoint: Vec<String> =
        serde_json::from_str(entrypoints[0]).expect("ENTRYPOINT in exec form (a JSON array)");
    assert_eq!(entrypoint, ["karpenter-rs", "run"]);
    assert!(
        instructions(runtime, "COPY").iter().any(
            |c| c.starts_with("--from=builder ") && c.ends_with(" /usr/local/bin/karpenter-rs")
        ),
        "the binary is on the distroless image's PATH"
    );
    assert!(
        instructions(runtime, "RUN").is_empty(),
        "distroless has no shell to RUN"
    );
}

#[test]
fn the_image_exposes_the_default_ports() {
    let defaults = Settings::parse_from(["karpenter-rs"], |_| None).expect("defaults parse");
    let exposed: Vec<u16> = instructions(&stages()[1], "EXPOSE")
        .iter()
        .flat_map(|e| e.split_whitespace())
        .map(|p| p.parse().expect("a port number"))
        .collect();
    assert_eq!(exposed, [defaults.metrics_port, defaults.health_probe_port]);
}

#[test]
fn the_builder_makes_a_locked_release_build() {
    let builder = &stages()[0];
    let runs = instructions(builder, "RUN").join(" ");
    assert!(runs.contains("cargo build --release --locked"), "{runs}");
}

#[test]
fn the_build_context_keeps_what_the_build_reads() {
    let patterns: Vec<&str> = DOCKERIGNORE
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    for excluded in ["/target", "/.git"] {
        assert!(
            patterns.contains(&excluded),
            "{excluded} is sent to the daemon"
        );
    }
    for needed in ["Cargo.toml", "Cargo.lock", "src", "catalog", "benches"] {
        let hit = patterns.iter().find(|p| {
            let p = p.trim_start_matches('/').trim_end_matches('/');
            p == "*" || p == "**" || p == needed || needed.starts_with(&format!("{p}/"))
        });
        assert!(hit.is_none(), "{needed} is excluded by {hit:?}");
    }
}
