//! `karpenter-rs run` against a real control plane: kube-apiserver, kube-scheduler and
//! kube-controller-manager 1.20 with the CRDs served (with CEL) by a 1.36 apiextensions server,
//! started by `hack/test.sh` (see `hack/control-plane.sh`), which exports
//! `KARPENTER_RS_TEST_KUBECONFIG`. The controller runs as a child process with the simulated
//! cloud, whose stand-in kubelet registers Nodes that kube-scheduler binds pods to.
//!
//! Tests share the cluster, so they run one at a time and start from a clean slate.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, ServiceAccount};
use karpenter_rs::apis::{EC2NodeClass, NodeClaim, NodePool};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config, ResourceExt};
use serde_json::json;

static SERIAL: Mutex<()> = Mutex::new(());

/// Runs one test body alone (the tests share the cluster), on its own runtime.
fn serial(body: impl std::future::Future<Output = ()>) {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(body);
}

fn kubeconfig_path() -> PathBuf {
    match std::env::var_os("KARPENTER_RS_TEST_KUBECONFIG") {
        Some(p) => PathBuf::from(p),
        None => panic!(
            "these tests need a control plane: run hack/test.sh (it builds, starts and stops one) \
             or set KARPENTER_RS_TEST_KUBECONFIG to a kubeconfig whose cluster has the CRDs from crds/ \
             (SKIP_CONTROL_PLANE_TESTS=1 hack/test.sh leaves this test binary out)"
        ),
    }
}

async fn client() -> Client {
    let path = kubeconfig_path();
    let kc = Kubeconfig::read_from(&path).expect("readable kubeconfig");
    let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .expect("valid kubeconfig");
    Client::try_from(config).expect("client")
}

/// A `karpenter-rs run` child process, killed (SIGKILL, by PID) when dropped.
struct Controller {
    child: Child,
    metrics_port: u16,
    health_port: u16,
}

/// A port nothing listens on right now, for a child's servers.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// `GET path` on 127.0.0.1:port; the status code and body.
async fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await.ok()?;
    let status = response.split_whitespace().nth(1)?.parse().ok()?;
    let body = response.split_once("\r\n\r\n")?.1.to_string();
    Some((status, body))
}

impl Controller {
    fn start(name: &str, leader_election: bool) -> Self {
        let log_dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
        let log = std::fs::File::create(log_dir.join(format!("controller-{name}.log")))
            .expect("log file");
        let (metrics_port, health_port) = (free_port(), free_port());
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_karpenter-rs"));
        cmd.args(["run", "--cloud-provider", "simulated"])
            .args(["--metrics-port", &metrics_port.to_string()])
            .args(["--health-probe-port", &health_port.to_string()])
            .env("KUBECONFIG", kubeconfig_path())
            .env("POD_NAME", name)
            .stdout(Stdio::from(log.try_clone().expect("log")))
            .stderr(Stdio::from(log));
        if !leader_election {
            cmd.arg("--disable-leader-election=true");
        }
        Self {
            child: cmd.spawn().expect("start karpenter-rs run"),
            metrics_port,
            health_port,
        }
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Removes everything earlier tests (or runs) left: Karpenter objects and Nodes (finalizers
/// stripped), test namespaces (waiting until they are gone) and the leader Lease.
async fn reset(client: &Client) {
    async fn strip_and_delete<K>(api: Api<K>)
    where
        K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
        K::DynamicType: Default,
    {
        for o in api.list(&ListParams::default()).await.expect("list").items {
            let name = o.name_any();
            let _ = api
                .patch(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {"finalizers": null}})),
                )
                .await;
            let _ = api.delete(&name, &DeleteParams::default()).await;
        }
    }
    let namespaces: Api<Namespace> = Api::all(client.clone());
    for ns in namespaces
        .list(&ListParams::default())
        .await
        .expect("ns")
        .items
    {
        if ns.name_any().starts_with("cp-test-") {
            // Without a kubelet, bound pods keep their room on a Node until the namespace
            // controller gets to them: delete them now, with no grace.
            let _ = Api::<Deployment>::namespaced(client.clone(), &ns.name_any())
                .delete_collection(&DeleteParams::default(), &ListParams::default())
                .await;
            let _ = Api::<Pod>::namespaced(client.clone(), &ns.name_any())
                .delete_collection(
                    &DeleteParams {
                        grace_period_seconds: Some(0),
                        ..DeleteParams::default()
                    },
                    &ListParams::default(),
                )
                .await;
            let _ = namespaces
                .delete(&ns.name_any(), &DeleteParams::default())
                .await;
        }
    }
    strip_and_delete(Api::<NodeClaim>::all(client.clone())).await;
    strip_and_delete(Api::<Node>::all(client.clone())).await;
    strip_and_delete(Api::<NodePool>::all(client.clone())).await;
    strip_and_delete(Api::<EC2NodeClass>::all(client.clone())).await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-system");
    let _ = leases
        .delete("karpenter-leader-election", &DeleteParams::default())
        .await;
    wait_for("a clean cluster", Duration::from_secs(60), || async {
        // A controller still running may create NodeClaims for pods of a namespace being
        // deleted: strip again until nothing is left.
        strip_and_delete(Api::<NodeClaim>::all(client.clone())).await;
        strip_and_delete(Api::<Node>::all(client.clone())).await;
        let claims = Api::<NodeClaim>::all(client.clone())
            .list(&ListParams::default())
            .await
            .map(|l| l.items.len())
            .unwrap_or(1);
        let nodes = Api::<Node>::all(client.clone())
            .list(&ListParams::default())
            .await
            .map(|l| l.items.len())
            .unwrap_or(1);
        // Pods of a namespace still being deleted would be provisioned for by the next test.
        let namespaces = namespaces
            .list(&ListParams::default())
            .await
            .map(|l| {
                l.items
                    .iter()
                    .filter(|n| n.name_any().starts_with("cp-test-"))
                    .count()
            })
            .unwrap_or(1);
        (claims == 0 && nodes == 0 && namespaces == 0).then_some(())
    })
    .await;
}

async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
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
async fn namespace(client: &Client, name: &str) -> String {
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

async fn nodeclass(client: &Client) {
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

/// A NodePool of one instance type (m5.xlarge: three 1-CPU pods per node), on-demand.
async fn nodepool(client: &Client, name: &str, limits: Option<serde_json::Value>) {
    let api: Api<NodePool> = Api::all(client.clone());
    let mut spec = json!({
        "template": {"spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "requirements": [
                {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.xlarge"]},
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
            ],
        }},
    });
    if let Some(l) = limits {
        spec["limits"] = l;
    }
    let pool: NodePool = serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
        "metadata": {"name": name}, "spec": spec,
    }))
    .expect("nodepool");
    api.create(&PostParams::default(), &pool)
        .await
        .expect("create NodePool");
}

async fn inflate(client: &Client, ns: &str, replicas: i32) {
    let api: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "inflate"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "inflate"}},
            "template": {
                "metadata": {"labels": {"app": "inflate"}},
                "spec": {
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{
                        "name": "inflate",
                        "image": "public.ecr.aws/eks-distro/kubernetes/pause:3.7",
                        "resources": {"requests": {"cpu": "1"}},
                    }],
                },
            },
        },
    }))
    .expect("deployment");
    api.create(&PostParams::default(), &d)
        .await
        .expect("create Deployment");
}

async fn pods(client: &Client, ns: &str) -> Vec<Pod> {
    Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .expect("pods")
        .items
}

fn bound(pods: &[Pod]) -> usize {
    pods.iter()
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some())
        .count()
}

async fn list<K>(client: &Client) -> Vec<K>
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

#[test]
fn invalid_nodepools_are_rejected_with_upstreams_messages() {
    serial(async {
        let client = client().await;
        reset(&client).await;
        let api: Api<NodePool> = Api::all(client.clone());
        let cases = [
            (
                json!([{"key": "karpenter.sh/nodepool", "operator": "In", "values": ["x"]}]),
                "label \"karpenter.sh/nodepool\" is restricted",
            ),
            (
                json!([{"key": "kubernetes.io/hostname", "operator": "In", "values": ["x"]}]),
                "label \"kubernetes.io/hostname\" is restricted",
            ),
            (
                json!([{"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["m5"], "minValues": 2}]),
                "requirements with 'minValues' must have at least that many values specified in the 'values' field",
            ),
        ];
        for (requirements, message) in cases {
            let pool = json!({
                "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
                "metadata": {"name": "invalid"},
                "spec": {"template": {"spec": {
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                    "requirements": requirements,
                }}},
            });
            let err = api
                .create(
                    &PostParams::default(),
                    &serde_json::from_value(pool).expect("pool"),
                )
                .await
                .expect_err("the API server must refuse it");
            assert!(err.to_string().contains(message), "{err}");
        }
        nodepool(&client, "valid", None).await;
        assert!(api.get_opt("valid").await.expect("get").is_some());
        reset(&client).await;
    });
}

#[test]
fn pending_pods_become_nodeclaims_nodes_and_bound_pods() {
    serial(async {
        let client = client().await;
        reset(&client).await;
        let controller = Controller::start("provision", false);
        let ns = namespace(&client, "provision").await;
        nodeclass(&client).await;
        nodepool(&client, "default", None).await;
        let start = Instant::now();
        inflate(&client, &ns, 10).await;
        wait_for("10 bound pods", Duration::from_secs(30), || async {
            (bound(&pods(&client, &ns).await) == 10).then_some(())
        })
        .await;
        println!(
            "10 pods bound {:?} after the Deployment was created",
            start.elapsed()
        );

        let claims: Vec<NodeClaim> = list(&client).await;
        let nodes: Vec<Node> = list(&client).await;
        assert_eq!(claims.len(), 4, "ceil(10 / 3) m5.xlarge nodes");
        assert_eq!(nodes.len(), claims.len());
        for claim in &claims {
            let status = claim.status.as_ref().expect("status");
            let node = nodes
                .iter()
                .find(|n| {
                    n.spec.as_ref().and_then(|s| s.provider_id.as_ref())
                        == status.provider_id.as_ref()
                })
                .expect("a Node per NodeClaim");
            assert_eq!(status.node_name.as_deref(), Some(node.name_any().as_str()));
            let taints = node
                .spec
                .as_ref()
                .and_then(|s| s.taints.clone())
                .unwrap_or_default();
            assert!(
                !taints.iter().any(|t| t.key == "karpenter.sh/unregistered"),
                "unregistered taint removed"
            );
            assert_eq!(node.labels()["karpenter.sh/nodepool"], "default");
            assert_eq!(
                node.labels()["node.kubernetes.io/instance-type"],
                "m5.xlarge"
            );
            assert!(
                node.finalizers()
                    .iter()
                    .any(|f| f == "karpenter.sh/termination")
            );
            assert_eq!(claim.labels()["karpenter.sh/capacity-type"], "on-demand");
            assert!(
                claim
                    .annotations()
                    .contains_key("karpenter.sh/nodepool-hash")
            );
            assert!(
                claim
                    .metadata
                    .owner_references
                    .iter()
                    .flatten()
                    .any(|o| o.kind == "NodePool")
            );
        }
        wait_for("every NodeClaim Ready", Duration::from_secs(20), || async {
            let claims: Vec<NodeClaim> = list(&client).await;
            claims
                .iter()
                .all(|c| {
                    c.status.as_ref().is_some_and(|s| {
                        s.conditions
                            .iter()
                            .any(|c| c.type_ == "Ready" && c.status == "True")
                    })
                })
                .then_some(())
        })
        .await;
        let pool = wait_for("NodePool status", Duration::from_secs(20), || async {
            let pool = Api::<NodePool>::all(client.clone())
                .get("default")
                .await
                .ok()?;
            (pool.status.as_ref()?.nodes == Some(4)).then_some(pool)
        })
        .await;
        let status = pool.status.expect("status");
        let resources = status.resources.expect("resources");
        assert_eq!(resources["cpu"].0, "16");
        assert_eq!(resources["nodes"].0, "4");
        assert!(
            status
                .conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True")
        );

        // What Prometheus and the kubelet's probes see.
        let (code, _) = http_get(controller.health_port, "/healthz")
            .await
            .expect("healthz");
        assert_eq!(code, 200);
        let (code, _) = http_get(controller.health_port, "/readyz")
            .await
            .expect("readyz");
        assert_eq!(code, 200);
        let (code, text) = http_get(controller.metrics_port, "/metrics")
            .await
            .expect("metrics");
        assert_eq!(code, 200);
        for expected in [
            "karpenter_build_info{",
            "karpenter_nodeclaims_created_total{min_values_relaxed=\"false\",nodepool=\"default\",reason=\"provisioning\"} 4",
            "karpenter_nodes_created_total{nodepool=\"default\",zone=",
            "karpenter_nodepools_usage{nodepool=\"default\",resource_type=\"cpu\"} 16",
            "karpenter_scheduler_scheduling_duration_seconds_bucket{controller=\"provisioner\",",
            "karpenter_cloudprovider_duration_seconds_bucket{controller=\"cloudprovider\",method=\"Create\",provider=\"simulated\",",
            "karpenter_cluster_state_synced 1",
        ] {
            assert!(
                text.contains(expected),
                "{expected:?} missing from /metrics:\n{text}"
            );
        }
        reset(&client).await;
    });
}

#[test]
fn a_cpu_limit_leaves_the_excess_pending_with_an_event() {
    serial(async {
        let client = client().await;
        reset(&client).await;
        let _controller = Controller::start("limits", false);
        let ns = namespace(&client, "limits").await;
        nodeclass(&client).await;
        nodepool(&client, "limited", Some(json!({"cpu": "8"}))).await;
        inflate(&client, &ns, 10).await;
        wait_for("6 bound pods", Duration::from_secs(30), || async {
            (bound(&pods(&client, &ns).await) == 6).then_some(())
        })
        .await;
        // Several more provisioning rounds: nothing more may launch.
        tokio::time::sleep(Duration::from_secs(12)).await;
        let claims: Vec<NodeClaim> = list(&client).await;
        assert_eq!(claims.len(), 2, "8 CPUs of m5.xlarge");
        assert_eq!(bound(&pods(&client, &ns).await), 6);
        let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), &ns);
        let events = events
            .list(&ListParams::default())
            .await
            .expect("events")
            .items;
        assert!(
            events
                .iter()
                .any(|e| e.reason.as_deref() == Some("FailedScheduling")
                    && e.note.as_deref().is_some_and(|n| n.contains("limits"))),
            "a FailedScheduling event naming the limit: {events:?}"
        );
        reset(&client).await;
    });
}

#[test]
fn deleting_a_nodeclaim_removes_its_node() {
    serial(async {
        let client = client().await;
        reset(&client).await;
        let controller = Controller::start("delete", false);
        let ns = namespace(&client, "delete").await;
        nodeclass(&client).await;
        nodepool(&client, "default", None).await;
        inflate(&client, &ns, 3).await;
        wait_for("3 bound pods", Duration::from_secs(30), || async {
            (bound(&pods(&client, &ns).await) == 3).then_some(())
        })
        .await;
        let claims: Vec<NodeClaim> = list(&client).await;
        assert_eq!(claims.len(), 1);
        let claim = &claims[0];
        let node_name = claim
            .status
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .expect("node");
        Api::<NodeClaim>::all(client.clone())
            .delete(&claim.name_any(), &DeleteParams::default())
            .await
            .expect("delete NodeClaim");
        wait_for("the Node to go", Duration::from_secs(30), || async {
            Api::<Node>::all(client.clone())
                .get_opt(&node_name)
                .await
                .ok()
                .flatten()
                .is_none()
                .then_some(())
        })
        .await;
        wait_for("the NodeClaim to go", Duration::from_secs(30), || async {
            Api::<NodeClaim>::all(client.clone())
                .get_opt(&claim.name_any())
                .await
                .ok()
                .flatten()
                .is_none()
                .then_some(())
        })
        .await;
        // The termination and disruption families: three pods evicted (no disruption method
        // chose the node, so upstream's "Forceful Termination" reason), one node drained and
        // terminated, durations observed once; budgets and method evaluations reported.
        let (code, text) = http_get(controller.metrics_port, "/metrics")
            .await
            .expect("metrics");
        assert_eq!(code, 200);
        for expected in [
            "karpenter_pods_eviction_requests_total{code=\"200\"} 3",
            "karpenter_pods_drained_total{reason=\"Forceful Termination\"} 3",
            "karpenter_nodes_drained_total{nodepool=\"default\"} 1",
            "karpenter_nodes_terminated_total{nodepool=\"default\",zone=",
            "karpenter_nodeclaims_terminated_total{capacity_type=\"on-demand\",nodepool=\"default\",zone=",
            "karpenter_nodeclaims_termination_duration_seconds_count{nodepool=\"default\"} 1",
            "karpenter_nodeclaims_instance_termination_duration_seconds_count{nodepool=\"default\"} 1",
            "karpenter_nodes_termination_duration_seconds_count{nodepool=\"default\"} 1",
            "karpenter_nodes_lifetime_duration_seconds_count{nodepool=\"default\"} 1",
            "karpenter_nodepools_allowed_disruptions{nodepool=\"default\",reason=\"Drifted\"}",
            "karpenter_nodepools_nodes_consuming_budgets{nodepool=\"default\",reason=\"Empty\"}",
            "karpenter_voluntary_disruption_eligible_nodes{reason=\"empty\"}",
            "karpenter_voluntary_disruption_decision_evaluation_duration_seconds_bucket{consolidation_type=\"empty\",reason=\"empty\",",
        ] {
            assert!(
                text.contains(expected),
                "{expected:?} missing from /metrics:\n{text}"
            );
        }
        reset(&client).await;
    });
}

fn holder(lease: &Lease) -> Option<String> {
    lease.spec.as_ref()?.holder_identity.clone()
}

#[test]
fn a_follower_takes_over_when_the_leader_dies() {
    serial(async {
        let client = client().await;
        reset(&client).await;
        let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-system");
        let mut a = Controller::start("replica-a", true);
        let first = wait_for("a leader", Duration::from_secs(20), || async {
            leases
                .get_opt("karpenter-leader-election")
                .await
                .ok()
                .flatten()
                .and_then(|l| holder(&l))
        })
        .await;
        assert_eq!(first, "replica-a");
        let _b = Controller::start("replica-b", true);
        tokio::time::sleep(Duration::from_secs(5)).await;
        let lease = leases
            .get("karpenter-leader-election")
            .await
            .expect("lease");
        assert_eq!(
            holder(&lease).as_deref(),
            Some("replica-a"),
            "one leader at a time"
        );
        let killed = Instant::now();
        a.kill();
        wait_for("replica-b to lead", Duration::from_secs(20), || async {
            let l = leases
                .get_opt("karpenter-leader-election")
                .await
                .ok()
                .flatten()?;
            (holder(&l).as_deref() == Some("replica-b")).then_some(())
        })
        .await;
        let took_over = killed.elapsed();
        println!("replica-b took over {took_over:?} after replica-a was killed");
        assert!(
            took_over <= Duration::from_secs(15) + Duration::from_secs(3),
            "within the 15 s lease duration (plus one 2 s retry)"
        );
        // The new leader provisions.
        let ns = namespace(&client, "leader").await;
        nodeclass(&client).await;
        nodepool(&client, "default", None).await;
        inflate(&client, &ns, 3).await;
        wait_for("3 bound pods", Duration::from_secs(30), || async {
            (bound(&pods(&client, &ns).await) == 3).then_some(())
        })
        .await;
        reset(&client).await;
    });
}

#[test]
fn a_restart_mid_provisioning_creates_no_duplicates() {
    serial(async {
        let client = client().await;
        reset(&client).await;
        let ns = namespace(&client, "restart").await;
        nodeclass(&client).await;
        nodepool(&client, "default", None).await;
        let mut first = Controller::start("restart-1", false);
        inflate(&client, &ns, 10).await;
        wait_for("the first NodeClaim", Duration::from_secs(30), || async {
            let claims: Vec<NodeClaim> = list(&client).await;
            (!claims.is_empty()).then_some(())
        })
        .await;
        first.kill();
        let _second = Controller::start("restart-2", false);
        wait_for("10 bound pods", Duration::from_secs(40), || async {
            (bound(&pods(&client, &ns).await) == 10).then_some(())
        })
        .await;
        tokio::time::sleep(Duration::from_secs(3)).await;
        let claims: Vec<NodeClaim> = list(&client).await;
        let nodes: Vec<Node> = list(&client).await;
        assert_eq!(
            claims.len(),
            4,
            "ceil(10 / 3) m5.xlarge nodes, no duplicates: {:?}",
            claims.iter().map(|c| c.name_any()).collect::<Vec<_>>()
        );
        assert_eq!(nodes.len(), 4, "one Node per NodeClaim");
        reset(&client).await;
    });
}
