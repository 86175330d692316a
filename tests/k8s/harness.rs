//! What the control-plane test binaries (`tests/control_plane.rs`,
//! `tests/disruption_control_plane.rs`, `tests/disruption_faults.rs`,
//! `tests/aws_control_plane.rs`) share: the client for the cluster `hack/test.sh` starts,
//! one-at-a-time test bodies, waiting (with the one deadline they all use), the controller's
//! `/metrics`, and the objects every test sets up.
//!
//! Waiting: a test never sleeps for a fixed time hoping something has happened by then; it polls
//! until the observable condition holds, for up to [`PATIENCE`]. Where a test must show that
//! something does *not* happen, it waits for the controller to have acted a few more times
//! ([`wait_for_more`] over one of the pass counters below) and then looks. No test asserts how
//! soon something happened, only that it did (or, a lower bound load cannot break, not before
//! it may).

// Each test binary that includes this harness uses a different part of it.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, Pod, ServiceAccount};
use karpenter_rs::apis::EC2NodeClass;
use kube::api::{Api, ListParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use serde_json::json;

/// How long any wait in the control-plane tests gives its condition: generous, because on a
/// loaded 2-core machine (other builds, other engineers' clusters) an API round trip, a
/// controller pass or kube-controller-manager's garbage collection can take many times its usual
/// time. Every wait ends as soon as its condition holds, so this only bounds how long a red test
/// takes to say so; it never slows a green one. Three minutes is three times the longest wait
/// seen at a load average of 8 to 15 on 2 cores (a drift roll, under a minute), and short enough
/// that a run in which every control-plane test went red at its first wait (about 20 of them)
/// still ends within CI's 90 minutes.
pub const PATIENCE: Duration = Duration::from_secs(180);

/// Pass counter (a series of the controller's `/metrics`, for [`wait_for_more`]): provisioning
/// rounds that saw pending pods (rounds run on changes and every 10 s).
pub const PROVISIONING_ROUNDS: &str =
    "karpenter_scheduler_scheduling_duration_seconds_count{controller=\"provisioner\"}";
/// Pass counter: disruption passes that evaluated the voluntary methods (emptiness comes first,
/// every pass).
pub const DISRUPTION_PASSES: &str = "karpenter_voluntary_disruption_decision_evaluation_duration_seconds_count{consolidation_type=\"empty\",reason=\"empty\"}";
/// Pass counter: NodeClaim lifecycle passes that asked the cloud about an instance (termination
/// does, every pass, before draining, waiting for volumes or terminating).
pub const LIFECYCLE_INSTANCE_LOOKUPS: &str = "karpenter_cloudprovider_duration_seconds_count{controller=\"nodeclaim.lifecycle\",method=\"Get\",provider=\"simulated\"}";
/// Pass counter: garbage-collection passes (each ends by listing the cloud's instances).
pub const GARBAGE_COLLECTION_PASSES: &str = "karpenter_cloudprovider_duration_seconds_count{controller=\"nodeclaim.garbagecollection\",method=\"List\",provider=\"simulated\"}";
/// Pass counter: evictions a PodDisruptionBudget refused (the drain retries them).
pub const PDB_REFUSED_EVICTIONS: &str = "karpenter_pods_eviction_requests_total{code=\"429\"}";

pub static SERIAL: Mutex<()> = Mutex::new(());

/// Runs one test body alone (the tests share the cluster), on its own runtime.
pub fn serial(body: impl std::future::Future<Output = ()>) {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(body);
}

pub fn kubeconfig_path() -> PathBuf {
    match std::env::var_os("KARPENTER_RS_TEST_KUBECONFIG") {
        Some(p) => PathBuf::from(p),
        None => panic!(
            "these tests need a control plane: run hack/test.sh (it builds, starts and stops one) \
             or set KARPENTER_RS_TEST_KUBECONFIG to a kubeconfig whose cluster has the CRDs from crds/ \
             (SKIP_CONTROL_PLANE_TESTS=1 hack/test.sh leaves this test binary out)"
        ),
    }
}

pub async fn client() -> Client {
    let path = kubeconfig_path();
    let kc = Kubeconfig::read_from(&path).expect("readable kubeconfig");
    let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .expect("valid kubeconfig");
    Client::try_from(config).expect("client")
}

/// A port nothing listens on right now, for a child's servers.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// Polls `check` until it returns something, for up to [`PATIENCE`]; returns that.
pub async fn wait_for<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    wait_until(what, || {
        let fut = check();
        async move { fut.await.ok_or_else(String::new) }
    })
    .await
}

/// Polls `check` until it returns `Ok`, for up to [`PATIENCE`]; returns that. A test that
/// times out fails naming `what` and the last `Err` (what was still missing).
pub async fn wait_until<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let start = Instant::now();
    loop {
        let last = match check().await {
            Ok(v) => return v,
            Err(last) => last,
        };
        assert!(
            start.elapsed() < PATIENCE,
            "timed out after {PATIENCE:?} waiting for {what}\n{last}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// `GET path` on 127.0.0.1:port; the status code and body.
pub async fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    // HTTP/1.0: the body runs to the end of the connection (an HTTP/1.1 client would get
    // `/metrics` chunked).
    let request = format!("GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await.ok()?;
    let status = response.split_whitespace().nth(1)?.parse().ok()?;
    let body = response.split_once("\r\n\r\n")?.1.to_string();
    Some((status, body))
}

/// The controller's `/metrics` (served on `port`), if it answers 200.
pub async fn scrape(port: u16) -> Option<String> {
    http_get(port, "/metrics")
        .await
        .and_then(|(code, text)| (code == 200).then_some(text))
}

/// Whether the Prometheus text `text` has a sample line starting with `expected`: a series name
/// with the start of its labels (`name{a="b",`), or a whole series (`name{a="b"}`, `name`),
/// optionally followed by a value (`name{a="b"} 3`) that must then be the line's whole value
/// (`} 1` is not met by `} 10`).
pub fn has_sample(text: &str, expected: &str) -> bool {
    let series_end = match expected.find('{') {
        Some(open) => expected[open..].find('}').map(|close| open + close + 1),
        None => expected.find(' '),
    };
    let with_value = series_end.is_some_and(|end| expected[end..].starts_with(' '));
    text.lines().any(|line| {
        line.strip_prefix(expected)
            .is_some_and(|rest| rest.is_empty() || !with_value)
    })
}

/// The value of the sample whose series is exactly `series` (`name{labels}`, labels in the
/// order the controller writes them: by name) in the Prometheus text `text`.
pub fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|line| {
        let (s, value) = line.rsplit_once(' ')?;
        (s == series).then(|| value.parse().ok()).flatten()
    })
}

/// Waits until the controller's `/metrics` on `port` has every one of `expected` (see
/// [`has_sample`]); returns the text.
pub async fn wait_for_metrics(port: u16, expected: &[&str]) -> String {
    wait_until("samples in /metrics", || async {
        let text = scrape(port).await.unwrap_or_default();
        let missing: Vec<&str> = expected
            .iter()
            .copied()
            .filter(|e| !has_sample(&text, e))
            .collect();
        if missing.is_empty() {
            Ok(text)
        } else {
            Err(format!("missing: {missing:#?}\n/metrics:\n{text}"))
        }
    })
    .await
}

/// The value of the counter `series` on the controller's `/metrics` on `port` (0 before its
/// first increment).
pub async fn counter(port: u16, series: &str) -> f64 {
    let text = wait_for("/metrics to answer", || scrape(port)).await;
    sample(&text, series).unwrap_or(0.0)
}

/// Waits until the counter `series` (one of the pass counters above) on `port` has grown by
/// `more` from now: the controller has acted that many more times on what the test set up.
pub async fn wait_for_more(port: u16, series: &str, more: u32) {
    let target = counter(port, series).await + f64::from(more);
    wait_until(&format!("{series} to reach {target}"), || async {
        let now = scrape(port)
            .await
            .and_then(|text| sample(&text, series))
            .unwrap_or(0.0);
        if now >= target {
            Ok(())
        } else {
            Err(format!("{series} is {now}"))
        }
    })
    .await;
}

/// A namespace whose default ServiceAccount exists (pods are refused before it does).
pub async fn namespace(client: &Client, name: &str) -> String {
    let ns = format!("cp-test-{name}");
    let api: Api<Namespace> = Api::all(client.clone());
    wait_for("the old namespace to go", || async {
        api.get_opt(&ns)
            .await
            .ok()
            .flatten()
            .is_none()
            .then_some(())
    })
    .await;
    api.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": ns}})).expect("ns"),
    )
    .await
    .expect("create namespace");
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), &ns);
    wait_for("the default ServiceAccount", || async {
        sas.get_opt("default")
            .await
            .ok()
            .flatten()
            .filter(|sa| sa.secrets.as_ref().is_some_and(|s| !s.is_empty()))
            .map(|_| ())
    })
    .await;
    ns
}

pub async fn nodeclass(client: &Client) {
    let api: Api<EC2NodeClass> = Api::all(client.clone());
    let class: EC2NodeClass = serde_json::from_value(json!({
        "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
        "metadata": {"name": "default"},
        "spec": {
            "role": "KarpenterNodeRole-test",
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "test"}}],
            "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "test"}}],
        }
    }))
    .expect("nodeclass");
    api.create(&PostParams::default(), &class)
        .await
        .expect("create EC2NodeClass");
}

pub async fn pods(client: &Client, ns: &str) -> Vec<Pod> {
    Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .expect("pods")
        .items
}

pub fn bound(pods: &[Pod]) -> usize {
    pods.iter()
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some())
        .count()
}

pub async fn list<K>(client: &Client) -> Vec<K>
where
    K: kube::Resource<Scope = k8s_openapi::ClusterResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    Api::<K>::all(client.clone())
        .list(&ListParams::default())
        .await
        .expect("list")
        .items
}
