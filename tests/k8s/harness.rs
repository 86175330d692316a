//! What the control-plane test binaries (`tests/control_plane.rs`,
//! `tests/disruption_control_plane.rs`) share: the client for the cluster `hack/test.sh` starts,
//! one-at-a-time test bodies, polling, and the objects every test sets up.

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

pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            start.elapsed() < timeout,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// A namespace whose default ServiceAccount exists (pods are refused before it does).
pub async fn namespace(client: &Client, name: &str) -> String {
    let ns = format!("cp-test-{name}");
    let api: Api<Namespace> = Api::all(client.clone());
    wait_for(
        "the old namespace to go",
        Duration::from_secs(60),
        || async {
            api.get_opt(&ns)
                .await
                .ok()
                .flatten()
                .is_none()
                .then_some(())
        },
    )
    .await;
    api.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": ns}})).expect("ns"),
    )
    .await
    .expect("create namespace");
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), &ns);
    wait_for(
        "the default ServiceAccount",
        Duration::from_secs(30),
        || async {
            sas.get_opt("default")
                .await
                .ok()
                .flatten()
                .filter(|sa| sa.secrets.as_ref().is_some_and(|s| !s.is_empty()))
                .map(|_| ())
        },
    )
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
