//! moto_server for the AWS provider tests (`tests/aws_moto.rs`, `tests/aws_control_plane.rs`):
//! started through `tests/moto/launcher.py` on a free loopback port and killed by PID when
//! dropped, with the launcher's control endpoints (capacity errors, injected failures, call
//! counts, the CreateFleet requests seen).
//!
//! The server runs from the venv `hack/test.sh` creates (`$CARGO_TARGET_DIR/moto-venv`) or from
//! `MOTO_PYTHON`. Without it the tests fail with instructions, unless `SKIP_AWS_TESTS=1`.

// Each test binary that includes this harness uses a different part of it.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use karpenter_rs::cloudprovider::aws::config_loader;

/// A moto_server child process, killed (by PID) when dropped.
pub struct Moto {
    child: Child,
    /// The endpoint URL SDK clients use.
    pub url: String,
    port: u16,
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn moto_python() -> PathBuf {
    if let Ok(p) = std::env::var("MOTO_PYTHON") {
        return PathBuf::from(p);
    }
    // CARGO_TARGET_TMPDIR is <target>/tmp, so this follows CARGO_TARGET_DIR.
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("../moto-venv/bin/python")
}

impl Moto {
    /// Starts moto, or `None` when `SKIP_AWS_TESTS=1`.
    pub fn start() -> Option<Self> {
        if std::env::var("SKIP_AWS_TESTS").as_deref() == Ok("1") {
            eprintln!("SKIP_AWS_TESTS=1: not running the moto tests");
            return None;
        }
        let python = moto_python();
        assert!(
            python.exists(),
            "moto_server is needed for the AWS provider tests and {} does not exist.\n\
             Run hack/test.sh (it creates the venv), or: python3 -m venv {venv} && {venv}/bin/pip install -r tests/moto/requirements.txt\n\
             (or point MOTO_PYTHON at a python with moto[server] installed; SKIP_AWS_TESTS=1 skips these tests)",
            python.display(),
            venv = python
                .parent()
                .and_then(|p| p.parent())
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
        );
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free port");
        let log_path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("moto-{port}.log"));
        let log = std::fs::File::create(&log_path).expect("moto log file");
        let child = Command::new(&python)
            .arg("tests/moto/launcher.py")
            .arg(port.to_string())
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("start moto_server");
        let mut moto = Moto {
            child,
            url: format!("http://127.0.0.1:{port}"),
            port,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(Some(status)) = moto.child.try_wait() {
                panic!(
                    "moto_server exited ({status}): {}",
                    std::fs::read_to_string(&log_path).unwrap_or_default()
                );
            }
            if moto.http("GET", "/_karpenter/fleets", "").is_some() {
                return Some(moto);
            }
            assert!(
                Instant::now() < deadline,
                "moto_server did not answer within 60s"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// A plain HTTP/1.0 request to the control endpoints; the body of a 200 answer.
    pub fn http(&mut self, method: &str, path: &str, body: &str) -> Option<String> {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        write!(
            s,
            "{method} {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .ok()?;
        let mut out = String::new();
        s.read_to_string(&mut out).ok()?;
        let (head, body) = out.split_once("\r\n\r\n")?;
        (head.split_whitespace().nth(1) == Some("200")).then(|| body.to_string())
    }

    pub fn set_ice(&mut self, pools: &[(&str, &str, &str)]) {
        let body = serde_json::json!({"pools": pools}).to_string();
        self.http("POST", "/_karpenter/ice", &body)
            .expect("set ICE pools");
    }

    pub fn fleets(&mut self) -> Vec<serde_json::Value> {
        serde_json::from_str(&self.http("GET", "/_karpenter/fleets", "").expect("fleets"))
            .expect("fleet JSON")
    }

    /// Makes the next `count` calls of EC2 action `action` fail with `code` (HTTP 403, which
    /// the SDK does not retry by itself); `count` 0 clears.
    pub fn fail(&mut self, action: &str, count: u32, code: &str) {
        let body =
            serde_json::json!({"action": action, "count": count, "code": code, "status": 403})
                .to_string();
        self.http("POST", "/_karpenter/fail", &body)
            .expect("inject failure");
    }

    /// How often AWS action `action` (an EC2 or IAM action, an SSM target) was called so far.
    pub fn calls(&mut self, action: &str) -> u64 {
        let all: serde_json::Value =
            serde_json::from_str(&self.http("GET", "/_karpenter/calls", "").expect("calls"))
                .expect("calls JSON");
        all[action].as_u64().unwrap_or(0)
    }
}

/// An SDK config for moto: its endpoint, region us-east-1, test credentials.
pub async fn sdk_config(moto: &Moto) -> aws_config::SdkConfig {
    config_loader("us-east-1")
        .endpoint_url(&moto.url)
        .credentials_provider(aws_sdk_ec2::config::Credentials::new(
            "testing", "testing", None, None, "moto",
        ))
        .load()
        .await
}

/// Creates the SQS queue `name` in moto and returns its URL.
pub async fn create_queue(config: &aws_config::SdkConfig, name: &str) -> String {
    aws_sdk_sqs::Client::new(config)
        .create_queue()
        .queue_name(name)
        .send()
        .await
        .expect("queue")
        .queue_url()
        .expect("url")
        .to_string()
}
