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

/// What the image's runtime can be checked for without a container runtime: the controller
/// binary starts and serves its probes as UID/GID 65532 with no supplementary groups, no HOME (or
/// any other variable but KUBECONFIG), an unwritable working directory, and every filesystem
/// read-only (as `readOnlyRootFilesystem: true` makes it), emulated by remounting each mount
/// read-only in a private mount namespace. The kubeconfig points at a closed port: the probes
/// must answer before the API server does. The binary runs from a copy in the test's own 0755
/// directory, so a checkout under a directory other users cannot enter (a `mktemp -d` clone is
/// 0700) does not keep UID 65532 from starting it. Changing user and mounts needs root (the test
/// machines run as root); as another user the same checks run as that (non-root) user without
/// the read-only remount, which then cannot be emulated.
#[test]
fn the_binary_serves_as_a_non_root_user_with_no_home_on_a_read_only_filesystem() {
    use std::io::{Read, Write};
    use std::os::unix::fs::PermissionsExt;

    let dir = std::env::temp_dir().join(format!("karpenter-rs-runtime-{}", std::process::id()));
    let cwd = dir.join("cwd");
    std::fs::create_dir_all(&cwd).expect("temp dirs");
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: \"https://127.0.0.1:1\", insecure-skip-tls-verify: true}}]\nusers: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n",
    )
    .expect("kubeconfig");
    let binary = dir.join("karpenter-rs");
    std::fs::copy(env!("CARGO_BIN_EXE_karpenter-rs"), &binary).expect("copy the binary");
    for (path, mode) in [
        (&dir, 0o755),
        (&cwd, 0o555),
        (&kubeconfig, 0o644),
        (&binary, 0o755),
    ] {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
    }
    let port = || {
        std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free port")
    };
    let (metrics, health) = (port(), port());
    let root = std::process::Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout == b"0\n");
    let run = format!(
        "{} run --cloud-provider simulated --metrics-port {metrics} --health-probe-port {health}",
        binary.display()
    );
    let script = if root {
        format!(
            "for m in $(awk '{{print $2}}' /proc/self/mounts); do case \"$m\" in /proc*|/sys*|/dev*) ;; *) mount -o remount,bind,ro \"$m\" 2>/dev/null ;; esac; done
             if touch {dir}/probe 2>/dev/null || touch /probe 2>/dev/null; then echo 'a filesystem is still writable' >&2; exit 97; fi
             cd {cwd} && exec setpriv --reuid 65532 --regid 65532 --clear-groups env -i KUBECONFIG={kc} {run}",
            dir = dir.display(),
            cwd = cwd.display(),
            kc = kubeconfig.display(),
        )
    } else {
        format!(
            "cd {cwd} && exec env -i KUBECONFIG={kc} {run}",
            cwd = cwd.display(),
            kc = kubeconfig.display()
        )
    };
    let mut command = if root {
        let mut c = std::process::Command::new("unshare");
        c.args(["--mount", "--propagation", "private", "sh", "-c", &script]);
        c
    } else {
        let mut c = std::process::Command::new("sh");
        c.args(["-c", &script]);
        c
    };
    let log = dir.join("log");
    let mut child = command
        .stdout(std::fs::File::create(&log).expect("log"))
        .stderr(std::fs::File::create(dir.join("err")).expect("err"))
        .spawn()
        .expect("start the controller");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let answered = loop {
        if let Some(status) = child.try_wait().expect("child status") {
            let err = std::fs::read_to_string(dir.join("err")).unwrap_or_default();
            panic!("the controller exited ({status}) before serving:\n{err}");
        }
        let reply = std::net::TcpStream::connect(("127.0.0.1", health)).and_then(|mut s| {
            s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")?;
            let mut text = String::new();
            s.read_to_string(&mut text)?;
            Ok(text)
        });
        if let Ok(text) = reply {
            break text;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "/healthz never answered"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    // unshare, sh, setpriv and env all exec: the child's PID is the controller's.
    let status =
        std::fs::read_to_string(format!("/proc/{}/status", child.id())).unwrap_or_default();
    let _ = child.kill();
    let _ = child.wait();
    assert!(answered.starts_with("HTTP/1.1 200"), "{answered}");
    if root {
        let uid = status
            .lines()
            .find(|l| l.starts_with("Uid:"))
            .unwrap_or_default();
        assert!(
            uid.split_whitespace().skip(1).all(|id| id == "65532"),
            "{uid}"
        );
        let groups = status
            .lines()
            .find(|l| l.starts_with("Groups:"))
            .unwrap_or_default();
        assert_eq!(groups.trim(), "Groups:", "no supplementary groups");
    }
    let lines = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(lines.contains("\"message\":\"serving\""), "{lines}");
    let _ = std::fs::remove_dir_all(&dir);
}
