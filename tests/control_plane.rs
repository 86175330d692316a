//! `karpenter-rs run` against a real control plane: kube-apiserver, kube-scheduler and
//! kube-controller-manager 1.20 with the CRDs served (with CEL) by a 1.36 apiextensions server,
//! started by `hack/test.sh` (see `hack/control-plane.sh`), which exports
//! `KARPENTER_RS_TEST_KUBECONFIG`. The controller runs as a child process with the simulated
//! cloud, whose stand-in kubelet registers Nodes that kube-scheduler binds pods to.
//!
//! Tests share the cluster, so they run one at a time and start from a clean slate.

#[path = "k8s/harness.rs"]
mod harness;
#[path = "k8s/prometheus.rs"]
mod prometheus;
#[path = "dashboards/queries.rs"]
mod queries;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, ServiceAccount};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use karpenter_rs::apis::{EC2NodeClass, NodeClaim, NodePool};
use karpenter_rs::controllers::nodeclaim::garbage::CLAIM_GRACE;
use karpenter_rs::scheduling::resources::quantity_value;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::config::Kubeconfig;
use kube::core::ApiResource;
use kube::{Client, ResourceExt};
use serde_json::json;

use harness::*;
use prometheus::{Prometheus, upstream};
use queries::shipped;

/// A `karpenter-rs run` child process, killed (SIGKILL, by PID) when dropped.
struct Controller {
    child: Child,
    name: String,
    metrics_port: u16,
    health_port: u16,
}

impl Controller {
    fn start(name: &str, leader_election: bool) -> Self {
        Self::start_with(name, leader_election, |_| {})
    }

    /// Starts `karpenter-rs run` with the simulated cloud, its log in
    /// `$CARGO_TARGET_TMPDIR/controller-NAME.log`; `customize` may change the environment.
    fn start_with(name: &str, leader_election: bool, customize: impl FnOnce(&mut Command)) -> Self {
        let log = std::fs::File::create(Self::log_path(name)).expect("log file");
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
        customize(&mut cmd);
        Self {
            child: cmd.spawn().expect("start karpenter-rs run"),
            name: name.to_string(),
            metrics_port,
            health_port,
        }
    }

    fn log_path(name: &str) -> PathBuf {
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("controller-{name}.log"))
    }

    /// What the controller logged so far.
    fn log(&self) -> String {
        std::fs::read_to_string(Self::log_path(&self.name)).unwrap_or_default()
    }

    /// The exit status, if the process has exited.
    fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().expect("wait")
    }

    /// `/readyz`'s status code, if the health server answers.
    async fn readyz(&self) -> Option<u16> {
        http_get(self.health_port, "/readyz").await.map(|(c, _)| c)
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
    // Untyped, so an object the controller's types cannot read (a test's absurd value) goes too.
    async fn strip_and_delete<K>(api: Api<K>)
    where
        K: kube::Resource<DynamicType = ()>,
    {
        let api: Api<DynamicObject> =
            Api::all_with(api.into_client(), &ApiResource::erase::<K>(&()));
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
    wait_for("a clean cluster", || async {
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

/// A NodePool of one instance type (m5.xlarge: three 1-CPU pods per node), on-demand.
async fn nodepool(client: &Client, name: &str, limits: Option<serde_json::Value>) {
    nodepool_with(client, name, |spec| {
        if let Some(l) = limits {
            spec["limits"] = l;
        }
    })
    .await;
}

/// [`nodepool`]'s pool, with its spec changed by `customize` first.
async fn nodepool_with(
    client: &Client,
    name: &str,
    customize: impl FnOnce(&mut serde_json::Value),
) {
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
    customize(&mut spec);
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
    deployment(client, ns, "inflate", replicas, None).await;
}

/// A Deployment of 1-CPU pause pods, optionally pinned to one NodePool.
async fn deployment(client: &Client, ns: &str, name: &str, replicas: i32, pool: Option<&str>) {
    let api: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let selector = pool.map(|p| json!({"karpenter.sh/nodepool": p}));
    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "terminationGracePeriodSeconds": 0,
                    "nodeSelector": selector,
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
        wait_for("10 bound pods", || async {
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
        wait_for("every NodeClaim Ready", || async {
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
        let pool = wait_for("NodePool status", || async {
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
        // Every family a provisioning run fills, with its labels; the gauges refresh every 5 s.
        let expected: &[&str] = &[
            "karpenter_build_info{",
            "karpenter_nodeclaims_created_total{min_values_relaxed=\"false\",nodepool=\"default\",reason=\"provisioned\"} 4",
            "karpenter_nodes_created_total{nodepool=\"default\",zone=",
            "karpenter_nodepools_usage{nodepool=\"default\",resource_type=\"cpu\"} 16",
            "karpenter_scheduler_scheduling_duration_seconds_bucket{controller=\"provisioner\",",
            "karpenter_scheduler_unschedulable_pods_count{controller=\"provisioner\"}",
            "karpenter_cloudprovider_duration_seconds_bucket{controller=\"nodeclaim.lifecycle\",method=\"Create\",provider=\"simulated\",",
            "karpenter_cloudprovider_duration_seconds_bucket{controller=\"provisioner\",method=\"GetInstanceTypes\",provider=\"simulated\",",
            "karpenter_cluster_state_synced 1",
            "karpenter_cluster_state_node_count 4",
            "karpenter_cluster_state_unsynced_time_seconds 0",
            // Node families: well-known labels, then node_name, phase, managed, resource_type.
            "karpenter_nodes_allocatable{",
            "karpenter_nodes_total_pod_requests{",
            // (No pod here has limits and no DaemonSet runs, so the pod-limit and daemon
            // families have no series, as upstream's report only resources present.)
            "karpenter_nodes_system_overhead{",
            "karpenter_nodes_current_lifetime_seconds{",
            "karpenter_cluster_utilization_percent{resource_type=\"cpu\"}",
            // Pod families.
            "karpenter_pods_state{arch=",
            // Pods never start here (no real kubelet runs them), so they stay unstarted.
            "karpenter_pods_unstarted_time_seconds{name=",
            // Status conditions of every kind, per kind and in the deprecated aggregate form.
            // (Transitions depend on a 5 s refresh catching the earlier status; unit-tested.)
            "operator_nodeclaim_status_condition_count{group=\"karpenter.sh\",karpenter_k8s_aws_ec2nodeclass=",
            "operator_nodeclaim_status_condition_current_status_seconds{",
            "operator_nodepool_status_condition_count{group=\"karpenter.sh\",name=\"default\",namespace=\"\"",
            "operator_ec2nodeclass_status_condition_count{group=\"karpenter.k8s.aws\",name=\"default\",namespace=\"\"",
            "operator_node_status_condition_count{group=\"\",karpenter_k8s_aws_ec2nodeclass=",
            "operator_status_condition_count{group=\"karpenter.sh\",kind=\"NodeClaim\"",
            // The simulated cloud's catalog.
            "karpenter_cloudprovider_instance_type_cpu_cores{instance_type=\"m5.xlarge\"} 4",
            "karpenter_cloudprovider_instance_type_memory_bytes{instance_type=\"m5.xlarge\"}",
            "karpenter_cloudprovider_instance_type_offering_available{capacity_type=\"on-demand\",instance_type=\"m5.xlarge\",zone=",
            "karpenter_cloudprovider_instance_type_offering_price_estimate{capacity_type=\"on-demand\",instance_type=\"m5.xlarge\",zone=",
        ];
        let text = wait_for_metrics(controller.metrics_port, expected).await;
        // Labels within the lines (the families appear with them, so no wait).
        let line = |prefix: &str, parts: &[&str]| {
            assert!(
                text.lines()
                    .any(|l| l.starts_with(prefix) && parts.iter().all(|p| l.contains(p))),
                "no {prefix} line with {parts:?}:\n{text}"
            );
        };
        line(
            "karpenter_nodes_allocatable{",
            &[
                "instance_type=\"m5.xlarge\"",
                "managed=\"true\"",
                "resource_type=\"cpu\"",
            ],
        );
        line(
            "operator_nodeclaim_status_condition_count{",
            &["karpenter_sh_nodepool=\"default\",name=\"default-"],
        );
        assert!(
            !text.contains("reason=\"provisioning\""),
            "upstream's reason value is provisioned"
        );
        // The JSON log lines carry upstream's keys.
        let log = std::fs::read_to_string(
            PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("controller-provision.log"),
        )
        .expect("controller log");
        let launched = log
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find(|l| l["message"] == "launched nodeclaim")
            .unwrap_or_else(|| panic!("no launch logged:\n{log}"));
        assert!(launched["NodeClaim"]["name"].is_string(), "{launched}");
        assert_eq!(launched["instance-type"], "m5.xlarge", "{launched}");
        assert!(launched["provider-id"].is_string(), "{launched}");
        assert_eq!(launched["capacity-type"], "on-demand", "{launched}");
        assert!(launched["zone"].is_string(), "{launched}");
        reset(&client).await;
    });
}

#[test]
fn a_cpu_limit_leaves_the_excess_pending_with_an_event() {
    serial(async {
        let client = client().await;
        reset(&client).await;
        let controller = Controller::start("limits", false);
        let ns = namespace(&client, "limits").await;
        nodeclass(&client).await;
        nodepool(&client, "limited", Some(json!({"cpu": "8"}))).await;
        inflate(&client, &ns, 10).await;
        wait_for("6 bound pods", || async {
            (bound(&pods(&client, &ns).await) == 6).then_some(())
        })
        .await;
        // Two more provisioning rounds see the four pending pods: nothing more may launch.
        wait_for_more(controller.metrics_port, PROVISIONING_ROUNDS, 2).await;
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
        wait_for("3 bound pods", || async {
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
        wait_for("the Node to go", || async {
            Api::<Node>::all(client.clone())
                .get_opt(&node_name)
                .await
                .ok()
                .flatten()
                .is_none()
                .then_some(())
        })
        .await;
        wait_for("the NodeClaim to go", || async {
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
        // terminated, durations observed once; budgets and method evaluations reported (by the
        // disruption pass, every 10 s, once it saw the NodePool ready).
        let expected = [
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
        ];
        wait_for_metrics(controller.metrics_port, &expected).await;
        reset(&client).await;
    });
}

/// `kubectl scale nodepool/NAME --replicas=N` on a static NodePool, through the scale
/// subresource the CRD declares: the controller follows the new count both ways, and the
/// subresource's status reports the NodePool's nodes.
#[test]
fn kubectl_scale_resizes_a_static_nodepool() {
    serial(async {
        let client = client().await;
        reset(&client).await;
        let _controller = Controller::start_with("static-scale", false, |cmd| {
            cmd.env("FEATURE_GATES", "StaticCapacity=true");
        });
        nodeclass(&client).await;
        nodepool_with(&client, "static", |spec| spec["replicas"] = json!(2)).await;
        let api: Api<NodePool> = Api::all(client.clone());
        let claims = |n: usize| {
            let client = client.clone();
            async move {
                let claims: Vec<NodeClaim> = list(&client).await;
                let live = claims
                    .iter()
                    .filter(|c| c.metadata.deletion_timestamp.is_none())
                    .count();
                (live == n && claims.len() == n).then_some(())
            }
        };
        let scaled = |n: i32| {
            let api = api.clone();
            async move {
                let scale = api.get_scale("static").await.ok()?;
                let spec = scale.spec.and_then(|s| s.replicas);
                (spec == Some(n) && scale.status.map(|s| s.replicas) == Some(n)).then_some(())
            }
        };
        wait_for("two NodeClaims for replicas: 2", || claims(2)).await;
        wait_for("the scale subresource to report 2 nodes", || scaled(2)).await;
        for replicas in [3, 1] {
            api.patch_scale(
                "static",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"replicas": replicas}})),
            )
            .await
            .expect("scale");
            let n = usize::try_from(replicas).expect("count");
            wait_for(&format!("{n} NodeClaims after scaling"), || claims(n)).await;
            wait_for(
                &format!("the scale subresource to report {n} nodes"),
                || scaled(replicas),
            )
            .await;
        }
        assert_eq!(list::<Node>(&client).await.len(), 1);
        reset(&client).await;
    });
}

fn holder(lease: &Lease) -> Option<String> {
    lease.spec.as_ref()?.holder_identity.clone()
}

/// When the lease was acquired and last renewed (by its holders' clocks), and how long it lasts.
fn lease_times(lease: &Lease) -> Option<(Timestamp, Timestamp, SignedDuration)> {
    let spec = lease.spec.as_ref()?;
    Some((
        spec.acquire_time.as_ref()?.0,
        spec.renew_time.as_ref()?.0,
        SignedDuration::from_secs(i64::from(spec.lease_duration_seconds?)),
    ))
}

#[test]
fn a_follower_takes_over_when_the_leader_dies() {
    serial(async {
        let client = client().await;
        reset(&client).await;
        let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-system");
        let mut a = Controller::start("replica-a", true);
        let first = wait_for("a leader", || async {
            leases
                .get_opt("karpenter-leader-election")
                .await
                .ok()
                .flatten()
                .and_then(|l| holder(&l))
        })
        .await;
        assert!(
            first.starts_with("replica-a_"),
            "POD_NAME and a suffix: {first}"
        );
        let b = Controller::start("replica-b", true);
        wait_for("replica-b to find the lease held", || async {
            b.log().contains("waiting to acquire lease").then_some(())
        })
        .await;
        let lease = leases
            .get("karpenter-leader-election")
            .await
            .expect("lease");
        assert_eq!(holder(&lease), Some(first.clone()), "one leader at a time");
        assert!(
            !b.log().contains("starting controllers"),
            "the standby does not act:\n{}",
            b.log()
        );
        wait_for("the standby to be ready", || async {
            (b.readyz().await == Some(200)).then_some(())
        })
        .await;
        let killed = Instant::now();
        a.kill();
        // replica-a's last renewal: replica-b may take the lease only once that has expired.
        let (_, last_renewal, duration) = lease_times(
            &leases
                .get("karpenter-leader-election")
                .await
                .expect("lease"),
        )
        .expect("lease times");
        let taken = wait_for("replica-b to lead", || async {
            let l = leases
                .get_opt("karpenter-leader-election")
                .await
                .ok()
                .flatten()?;
            holder(&l)
                .is_some_and(|h| h.starts_with("replica-b_"))
                .then_some(l)
        })
        .await;
        println!(
            "replica-b took over {:?} after replica-a was killed",
            killed.elapsed()
        );
        let (acquired, _, _) = lease_times(&taken).expect("lease times");
        assert!(
            acquired >= last_renewal + duration,
            "replica-b waited for replica-a's lease (renewed {last_renewal}, for {duration}) to expire; it took it at {acquired}"
        );
        // The new leader provisions.
        let ns = namespace(&client, "leader").await;
        nodeclass(&client).await;
        nodepool(&client, "default", None).await;
        inflate(&client, &ns, 3).await;
        wait_for("3 bound pods", || async {
            (bound(&pods(&client, &ns).await) == 3).then_some(())
        })
        .await;
        reset(&client).await;
    });
}

/// Every NodeClaim name a watch has seen created, and those it has seen deleted.
#[derive(Default)]
struct ClaimLog {
    seen: BTreeSet<String>,
    deleted: BTreeSet<String>,
}

/// Records NodeClaim creations and deletions as they happen, until the task is aborted.
fn watch_claims(client: &Client) -> (Arc<Mutex<ClaimLog>>, tokio::task::JoinHandle<()>) {
    use futures::StreamExt;
    use kube::runtime::watcher::{self, Event};
    let log = Arc::new(Mutex::new(ClaimLog::default()));
    let api: Api<NodeClaim> = Api::all(client.clone());
    let writer = log.clone();
    let task = tokio::spawn(async move {
        let mut stream = std::pin::pin!(watcher::watcher(api, watcher::Config::default()));
        while let Some(event) = stream.next().await {
            let mut log = writer.lock().unwrap_or_else(|e| e.into_inner());
            match event {
                Ok(Event::Apply(c) | Event::InitApply(c)) => {
                    log.seen.insert(c.name_any());
                }
                Ok(Event::Delete(c)) => {
                    log.deleted.insert(c.name_any());
                }
                _ => {}
            }
        }
    });
    (log, task)
}

fn provider_id(claim: &NodeClaim) -> Option<&str> {
    claim.status.as_ref()?.provider_id.as_deref()
}

/// When the NodeClaim's instance was launched (its Launched condition turned True).
fn launched(claim: &NodeClaim) -> Option<chrono::DateTime<chrono::Utc>> {
    claim
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == "Launched" && c.status == "True")
        .map(|c| c.last_transition_time)
}

#[test]
fn restarts_mid_provisioning_create_no_duplicates() {
    serial(async {
        let client = client().await;
        reset(&client).await;
        let ns = namespace(&client, "restart").await;
        nodeclass(&client).await;
        let pools = ["restart-a", "restart-b", "restart-c"];
        for pool in pools {
            // Nothing may remove a spare NodeClaim behind the test's back: every NodeClaim made
            // stays, so a duplicate shows in the count.
            nodepool_with(&client, pool, |spec| {
                spec["disruption"] = json!({"consolidateAfter": "Never"});
            })
            .await;
        }
        let (claims_log, watch) = watch_claims(&client);
        let seen = || {
            claims_log
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .seen
                .len()
        };
        // Each round starts a controller, adds pods to every pool and kills the controller
        // (SIGKILL) this long after the round's first NodeClaim appears: during the creates,
        // between create and launch, between launch and registration, while pods bind.
        let rounds: [(u64, [i32; 3]); 5] = [
            (0, [7, 5, 4]),
            (60, [5, 7, 6]),
            (200, [6, 4, 8]),
            (500, [4, 6, 5]),
            (1200, [8, 5, 7]),
        ];
        let mut per_pool = [0; 3];
        for (round, (delay, counts)) in rounds.iter().enumerate() {
            let before = seen();
            let mut controller = Controller::start(&format!("restart-{round}"), false);
            for (i, pool) in pools.iter().enumerate() {
                deployment(
                    &client,
                    &ns,
                    &format!("r{round}-{pool}"),
                    counts[i],
                    Some(pool),
                )
                .await;
                per_pool[i] += counts[i];
            }
            // Polled this often (not with `wait_for`) so the kill lands that many ms after it.
            let started = Instant::now();
            while seen() <= before {
                assert!(
                    started.elapsed() < PATIENCE,
                    "round {round}: no NodeClaim within {PATIENCE:?}:\n{}",
                    controller.log()
                );
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            tokio::time::sleep(Duration::from_millis(*delay)).await;
            controller.kill();
            let claims: Vec<NodeClaim> = list(&client).await;
            let nodes: Vec<Node> = list(&client).await;
            println!(
                "round {round}: killed {delay} ms after its first NodeClaim: {} NodeClaims ({} this round), {} launched, {} Nodes",
                claims.len(),
                claims.len() - before,
                claims.iter().filter(|c| provider_id(c).is_some()).count(),
                nodes.len()
            );
        }
        let last = Controller::start("restart-final", false);
        let total: i32 = per_pool.iter().sum();
        wait_for(&format!("{total} bound pods"), || async {
            (bound(&pods(&client, &ns).await) as i32 == total).then_some(())
        })
        .await;
        // Garbage collection deletes a NodeClaim whose instance the cloud does not know, once
        // it was launched a minute ago. The simulated cloud of a restarted controller knows the
        // instances earlier ones launched only by adopting them from the NodeClaims' provider
        // IDs: let collection look at every NodeClaim, for any it missed. The second pass from
        // now starts after the first ends, so after every NodeClaim was old enough.
        wait_for(
            "every NodeClaim old enough for garbage collection",
            || async {
                let now = chrono::Utc::now();
                list::<NodeClaim>(&client)
                    .await
                    .iter()
                    .all(|c| launched(c).is_some_and(|at| now - at >= CLAIM_GRACE))
                    .then_some(())
            },
        )
        .await;
        wait_for_more(last.metrics_port, GARBAGE_COLLECTION_PASSES, 2).await;
        watch.abort();

        let expected: Vec<usize> = per_pool.iter().map(|&n| (n as usize).div_ceil(3)).collect();
        let claims: Vec<NodeClaim> = list(&client).await;
        let nodes: Vec<Node> = list(&client).await;
        let (ever_seen, deleted) = {
            let log = claims_log.lock().unwrap_or_else(|e| e.into_inner());
            (log.seen.len(), log.deleted.clone())
        };
        assert!(
            deleted.is_empty(),
            "no NodeClaim was deleted (garbage collection, liveness or insufficient capacity): {deleted:?}"
        );
        let deleting: Vec<String> = claims
            .iter()
            .filter(|c| c.metadata.deletion_timestamp.is_some())
            .map(|c| c.name_any())
            .collect();
        assert!(
            deleting.is_empty(),
            "no NodeClaim is being deleted: {deleting:?}"
        );
        for (pool, want) in pools.iter().zip(&expected) {
            let got = claims
                .iter()
                .filter(|c| {
                    c.labels().get("karpenter.sh/nodepool").map(String::as_str) == Some(*pool)
                })
                .count();
            assert_eq!(
                got, *want,
                "{pool}: ceil(pods / 3) m5.xlarge NodeClaims, no duplicates"
            );
        }
        assert_eq!(
            claims.len(),
            ever_seen,
            "every NodeClaim ever made is still there"
        );
        let ids: BTreeSet<&str> = claims.iter().filter_map(provider_id).collect();
        assert_eq!(
            ids.len(),
            claims.len(),
            "one instance per NodeClaim, none shared"
        );
        assert_eq!(nodes.len(), claims.len(), "one Node per NodeClaim");
        for node in &nodes {
            let id = node.spec.as_ref().and_then(|s| s.provider_id.as_deref());
            let owners: Vec<&NodeClaim> = claims.iter().filter(|c| provider_id(c) == id).collect();
            assert_eq!(
                owners.len(),
                1,
                "Node {} belongs to exactly one NodeClaim",
                node.name_any()
            );
            assert_eq!(
                owners[0]
                    .status
                    .as_ref()
                    .and_then(|s| s.node_name.as_deref()),
                Some(node.name_any().as_str())
            );
        }
        assert!(
            !last.log().contains("instance is gone"),
            "the final controller knew every instance:\n{}",
            last.log()
        );
        println!(
            "{} pods, {} NodeClaims and Nodes after {} kills",
            total,
            claims.len(),
            rounds.len()
        );
        reset(&client).await;
    });
}

/// Applies a cluster-scoped RBAC object (ClusterRole or ClusterRoleBinding) by server-side apply.
async fn apply_rbac<K>(client: &Client, object: serde_json::Value)
where
    K: kube::Resource<Scope = k8s_openapi::ClusterResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    let object: K = serde_json::from_value(object).expect("rbac object");
    Api::<K>::all(client.clone())
        .patch(
            &object.name_any(),
            &PatchParams::apply("cp-test").force(),
            &Patch::Apply(&object),
        )
        .await
        .expect("apply rbac");
}

/// A kubeconfig for the ServiceAccount `sa` of `ns` (by its token), against the test cluster.
async fn service_account_kubeconfig(client: &Client, ns: &str, sa: &str) -> PathBuf {
    use k8s_openapi::api::core::v1::Secret;
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
    sas.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": sa}})).expect("sa"),
    )
    .await
    .expect("create ServiceAccount");
    let secret = wait_for("the ServiceAccount's token", || async {
        sas.get_opt(sa)
            .await
            .ok()
            .flatten()?
            .secrets?
            .first()?
            .name
            .clone()
    })
    .await;
    let secret = Api::<Secret>::namespaced(client.clone(), ns)
        .get(&secret)
        .await
        .expect("token secret");
    let token = String::from_utf8(secret.data.expect("data")["token"].0.clone()).expect("token");
    let admin = Kubeconfig::read_from(kubeconfig_path()).expect("admin kubeconfig");
    let cluster = admin.clusters[0].cluster.clone().expect("cluster");
    let config = json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "test", "cluster": {
            "server": cluster.server,
            "certificate-authority-data": cluster.certificate_authority_data,
        }}],
        "users": [{"name": sa, "user": {"token": token}}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": sa}}],
        "current-context": "test",
    });
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("{sa}.kubeconfig"));
    std::fs::write(&path, config.to_string()).expect("write kubeconfig");
    path
}

#[test]
fn a_leader_renews_its_lease_while_its_caches_cannot_sync() {
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
    serial(async {
        let client = client().await;
        reset(&client).await;
        let bindings: Api<ClusterRoleBinding> = Api::all(client.clone());
        let _ = bindings
            .delete("cp-test-karpenter-csinodes", &DeleteParams::default())
            .await;
        let ns = namespace(&client, "rbac").await;
        // Everything the controller reads and writes, except CSINodes: that cache never syncs.
        let read = json!(["get", "list", "watch"]);
        apply_rbac::<ClusterRole>(&client, json!({
            "metadata": {"name": "cp-test-karpenter"},
            "rules": [
                {"apiGroups": [""], "resources": ["nodes", "pods", "pods/eviction", "persistentvolumes", "persistentvolumeclaims", "events", "namespaces"], "verbs": ["*"]},
                {"apiGroups": ["apps"], "resources": ["daemonsets"], "verbs": read},
                {"apiGroups": ["policy"], "resources": ["poddisruptionbudgets"], "verbs": read},
                {"apiGroups": ["storage.k8s.io"], "resources": ["storageclasses"], "verbs": read},
                {"apiGroups": ["karpenter.sh", "karpenter.k8s.aws"], "resources": ["*"], "verbs": ["*"]},
                {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["*"]},
                {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["*"]},
            ],
        }))
        .await;
        let subject = json!([{"kind": "ServiceAccount", "name": "karpenter", "namespace": ns}]);
        apply_rbac::<ClusterRoleBinding>(&client, json!({
            "metadata": {"name": "cp-test-karpenter"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cp-test-karpenter"},
            "subjects": subject,
        }))
        .await;
        let kubeconfig = service_account_kubeconfig(&client, &ns, "karpenter").await;
        let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-system");
        let mut leader = Controller::start_with("unsynced", true, |cmd| {
            cmd.env("KUBECONFIG", &kubeconfig);
        });
        let first = wait_for("a leader", || async {
            leases
                .get_opt("karpenter-leader-election")
                .await
                .ok()
                .flatten()
                .and_then(|l| holder(&l))
        })
        .await;
        assert!(first.starts_with("unsynced_"), "{first}");
        let standby = Controller::start("standby", true);
        wait_for("the standby to find the lease held", || async {
            standby
                .log()
                .contains("waiting to acquire lease")
                .then_some(())
        })
        .await;
        // A renewal later than the lease lasts from its acquisition: a leader that renewed only
        // after its caches synced would have lost the lease to the standby by then.
        let lease = wait_for("a renewal past the lease's duration", || async {
            let lease = leases
                .get_opt("karpenter-leader-election")
                .await
                .ok()
                .flatten()?;
            let (acquired, renewed, duration) = lease_times(&lease)?;
            (holder(&lease).as_ref() != Some(&first) || renewed > acquired + duration)
                .then_some(lease)
        })
        .await;
        assert_eq!(
            holder(&lease),
            Some(first.clone()),
            "the leader kept its lease"
        );
        assert_eq!(
            leader.readyz().await,
            Some(503),
            "not ready before the caches sync"
        );
        // The report comes every 10 s while the caches wait.
        let log = wait_for("the log to name the cache it waits for", || async {
            let log = leader.log();
            (log.contains("caches not synced yet") && log.contains("CSINode")).then_some(log)
        })
        .await;
        assert!(!log.contains("starting controllers"), "{log}");
        assert!(
            !standby.log().contains("successfully acquired lease"),
            "{}",
            standby.log()
        );
        wait_for("the standby to be ready", || async {
            (standby.readyz().await == Some(200)).then_some(())
        })
        .await;

        apply_rbac::<ClusterRole>(&client, json!({
            "metadata": {"name": "cp-test-karpenter-csinodes"},
            "rules": [{"apiGroups": ["storage.k8s.io"], "resources": ["csinodes"], "verbs": read}],
        }))
        .await;
        apply_rbac::<ClusterRoleBinding>(&client, json!({
            "metadata": {"name": "cp-test-karpenter-csinodes"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cp-test-karpenter-csinodes"},
            "subjects": subject,
        }))
        .await;
        // The watch retries with a backoff of up to 30 s.
        let waited = Instant::now();
        wait_for("ready once the caches sync", || async {
            (leader.readyz().await == Some(200)).then_some(())
        })
        .await;
        println!(
            "ready {:?} after the permission was granted",
            waited.elapsed()
        );
        assert!(leader.log().contains("starting controllers"));
        assert!(leader.exited().is_none(), "still running");
        for name in ["cp-test-karpenter", "cp-test-karpenter-csinodes"] {
            let _ = bindings.delete(name, &DeleteParams::default()).await;
            let _ = Api::<ClusterRole>::all(client.clone())
                .delete(name, &DeleteParams::default())
                .await;
        }
        reset(&client).await;
    });
}

#[test]
fn a_leader_that_loses_its_lease_exits_non_zero() {
    serial(async {
        let client = client().await;
        reset(&client).await;
        let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-system");
        let mut leader = Controller::start("deposed", true);
        wait_for("leading and ready", || async {
            let ours = leases
                .get_opt("karpenter-leader-election")
                .await
                .ok()
                .flatten()
                .and_then(|l| holder(&l))
                .is_some_and(|h| h.starts_with("deposed_"));
            (ours && leader.readyz().await == Some(200)).then_some(())
        })
        .await;
        // Another replica takes the lease (as one would after a long network partition).
        let mut lease = leases
            .get("karpenter-leader-election")
            .await
            .expect("lease");
        let spec = lease.spec.as_mut().expect("spec");
        let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
            k8s_openapi::jiff::Timestamp::now(),
        );
        spec.holder_identity = Some("intruder".into());
        spec.acquire_time = Some(now.clone());
        spec.renew_time = Some(now);
        leases
            .replace("karpenter-leader-election", &PostParams::default(), &lease)
            .await
            .expect("take the lease");
        let taken = Instant::now();
        let status = wait_until("the deposed leader to exit", || {
            std::future::ready(leader.exited().ok_or_else(|| leader.log()))
        })
        .await;
        println!(
            "exited {:?} after the lease was taken: {status}",
            taken.elapsed()
        );
        assert!(
            !status.success(),
            "a non-zero exit makes the pod restart: {status}"
        );
        assert!(leader.log().contains("leadership lost"), "{}", leader.log());
        let lease = leases
            .get("karpenter-leader-election")
            .await
            .expect("lease");
        assert_eq!(
            holder(&lease).as_deref(),
            Some("intruder"),
            "left to the new leader"
        );
        reset(&client).await;
    });
}

#[test]
fn replicas_sharing_a_host_name_elect_one_leader() {
    serial(async {
        let client = client().await;
        reset(&client).await;
        let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-system");
        // No POD_NAME and one HOSTNAME for both, as two containers might have.
        let same = |cmd: &mut Command| {
            cmd.env_remove("POD_NAME").env("HOSTNAME", "karpenter");
        };
        let a = Controller::start_with("same-host-a", true, same);
        let b = Controller::start_with("same-host-b", true, same);
        let first = wait_for("a leader", || async {
            leases
                .get_opt("karpenter-leader-election")
                .await
                .ok()
                .flatten()
                .and_then(|l| holder(&l))
        })
        .await;
        assert!(first.starts_with("karpenter_"), "{first}");
        // Each has tried: one leads, the other found the lease held (with one identity between
        // them, both would have "acquired" it).
        wait_for("both replicas to have tried for the lease", || async {
            [&a, &b]
                .iter()
                .all(|c| {
                    let log = c.log();
                    log.contains("successfully acquired lease")
                        || log.contains("waiting to acquire lease")
                })
                .then_some(())
        })
        .await;
        let leaders = [&a, &b]
            .iter()
            .filter(|c| c.log().contains("successfully acquired lease"))
            .count();
        assert_eq!(leaders, 1, "one leader:\n{}\n{}", a.log(), b.log());
        let lease = leases
            .get("karpenter-leader-election")
            .await
            .expect("lease");
        assert_eq!(holder(&lease), Some(first));
        reset(&client).await;
    });
}

/// Events about a cluster-scoped object, in whichever namespace (`default`, or `kube-system` on
/// this 1.20 API server).
async fn events_about(client: &Client, name: &str) -> Vec<k8s_openapi::api::events::v1::Event> {
    Api::<k8s_openapi::api::events::v1::Event>::all(client.clone())
        .list(&ListParams::default())
        .await
        .expect("events")
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .collect()
}

/// The recorder against a real API server: a repeat of an event (a namespaced object's, and a
/// cluster-scoped one's, which this 1.20 API server takes only in `kube-system`) is one more in
/// the first event's series, and another note is a new event.
#[test]
fn a_repeated_event_extends_the_first_ones_series() {
    use karpenter_rs::runtime::events::EventRecorder;
    use kube::runtime::events::{Event, EventType, Reporter};
    serial(async {
        let client = client().await;
        let ns = namespace(&client, "events").await;
        let recorder = EventRecorder::new(
            client.clone(),
            Reporter {
                controller: "karpenter".into(),
                instance: None,
            },
        );
        let warning = |note: &str| Event {
            type_: EventType::Warning,
            reason: "FailedScheduling".into(),
            note: Some(note.into()),
            action: "Provisioning".into(),
            secondary: None,
        };
        let pod = k8s_openapi::api::core::v1::ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            namespace: Some(ns.clone()),
            name: Some("repeated-pod".into()),
            uid: Some("uid-pod".into()),
            ..Default::default()
        };
        // Events outlive a run by an hour: a name of this run's.
        let pool_name = format!("repeated-pool-{}", Timestamp::now().as_second());
        let pool = k8s_openapi::api::core::v1::ObjectReference {
            api_version: Some("karpenter.sh/v1".into()),
            kind: Some("NodePool".into()),
            name: Some(pool_name),
            uid: Some("uid-pool".into()),
            ..Default::default()
        };
        for reference in [&pod, &pool] {
            for note in [
                "no capacity",
                "no capacity",
                "no capacity",
                "over the limits",
            ] {
                recorder
                    .publish(&warning(note), reference)
                    .await
                    .expect("the event is published");
            }
            let name = reference.name.as_deref().expect("a name");
            let mut seen: Vec<(String, i32)> = events_about(&client, name)
                .await
                .into_iter()
                .map(|e| {
                    let count = e.series.map_or(1, |s| s.count);
                    (e.note.unwrap_or_default(), count)
                })
                .collect();
            seen.sort();
            assert_eq!(
                seen,
                [
                    ("no capacity".to_string(), 3),
                    ("over the limits".to_string(), 1)
                ],
                "{name}"
            );
        }
        reset(&client).await;
    });
}

fn condition(pool: &NodePool, type_: &str) -> Option<(String, String, String)> {
    pool.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

#[test]
fn an_ec2nodeclass_is_kept_while_nodeclaims_use_it() {
    serial(async {
        let client = client().await;
        reset(&client).await;
        let controller = Controller::start("nodeclass-finalizer", false);
        let ns = namespace(&client, "finalizer").await;
        nodeclass(&client).await;
        nodepool(&client, "default", None).await;
        inflate(&client, &ns, 3).await;
        wait_for("3 bound pods", || async {
            (bound(&pods(&client, &ns).await) == 3).then_some(())
        })
        .await;
        let classes: Api<EC2NodeClass> = Api::all(client.clone());
        wait_for("the finalizer", || async {
            let class = classes.get("default").await.ok()?;
            class
                .finalizers()
                .iter()
                .any(|f| f == "karpenter.k8s.aws/termination")
                .then_some(())
        })
        .await;
        classes
            .delete("default", &DeleteParams::default())
            .await
            .expect("delete EC2NodeClass");
        // The controller has seen the deletion once the pool says so; the class stays.
        let pool = wait_for("NodeClassReady=False", || async {
            let pool = Api::<NodePool>::all(client.clone())
                .get("default")
                .await
                .ok()?;
            (condition(&pool, "NodeClassReady")?.0 == "False").then_some(pool)
        })
        .await;
        assert_eq!(
            condition(&pool, "NodeClassReady").map(|c| c.1).as_deref(),
            Some("NodeClassTerminating")
        );
        let class = classes.get("default").await.expect("kept while in use");
        assert!(class.metadata.deletion_timestamp.is_some());
        let claims: Vec<NodeClaim> = list(&client).await;
        assert_eq!(claims.len(), 1);
        // The pods come back pending once their node goes; the pool's class is leaving, so no
        // NodeClaim may be made for them (it would hold the class forever).
        Api::<NodeClaim>::all(client.clone())
            .delete(&claims[0].name_any(), &DeleteParams::default())
            .await
            .expect("delete NodeClaim");
        wait_for("the EC2NodeClass to go", || async {
            classes
                .get_opt("default")
                .await
                .ok()
                .flatten()
                .is_none()
                .then_some(())
        })
        .await;
        wait_for("the 3 pods back, pending", || async {
            let pods = pods(&client, &ns).await;
            (pods.len() == 3 && bound(&pods) == 0).then_some(())
        })
        .await;
        // Two provisioning rounds see them: neither may launch anything.
        wait_for_more(controller.metrics_port, PROVISIONING_ROUNDS, 2).await;
        let claims: Vec<NodeClaim> = list(&client).await;
        assert!(
            claims.is_empty(),
            "nothing launched on a deleted class: {claims:?}"
        );
        assert!(
            pods(&client, &ns).await.iter().all(|p| p
                .spec
                .as_ref()
                .and_then(|s| s.node_name.as_ref())
                .is_none()),
            "the pods wait, pending"
        );
        reset(&client).await;
    });
}

#[test]
fn invalid_nodepools_are_reported_and_change_nothing() {
    serial(async {
        let client = client().await;
        reset(&client).await;
        let mut controller = Controller::start("invalid", false);
        let ns = namespace(&client, "invalid").await;
        nodeclass(&client).await;
        nodepool(&client, "default", None).await;
        deployment(&client, &ns, "inflate", 3, None).await;
        wait_for("3 bound pods", || async {
            (bound(&pods(&client, &ns).await) == 3).then_some(())
        })
        .await;
        let before: Vec<NodeClaim> = list(&client).await;
        assert_eq!(before.len(), 1);
        // Both pass the CRD. The first is preferred by weight and its taints would not keep the
        // pods off: were it used, the new NodeClaims would be its.
        nodepool_with(&client, "repeated-taints", |spec| {
            spec["weight"] = json!(100);
            spec["template"]["spec"]["taints"] = json!([
                {"key": "example.com/tier", "value": "a", "effect": "PreferNoSchedule"},
                {"key": "example.com/tier", "value": "b", "effect": "PreferNoSchedule"},
            ]);
        })
        .await;
        nodepool_with(&client, "no-such-class", |spec| {
            spec["weight"] = json!(90);
            spec["template"]["spec"]["nodeClassRef"]["name"] = json!("missing");
        })
        .await;
        let pools: Api<NodePool> = Api::all(client.clone());
        let invalid = wait_for("ValidationSucceeded=False", || async {
            let pool = pools.get("repeated-taints").await.ok()?;
            (condition(&pool, "ValidationSucceeded")?.0 == "False").then_some(pool)
        })
        .await;
        let (_, reason, message) = condition(&invalid, "ValidationSucceeded").expect("condition");
        assert_eq!(reason, "NodePoolValidationFailed");
        assert!(
            message.contains("example.com/tier:PreferNoSchedule appears more than once"),
            "{message}"
        );
        assert_eq!(
            condition(&invalid, "Ready").map(|c| c.0).as_deref(),
            Some("False")
        );
        let classless = wait_for("NodeClassReady=False", || async {
            let pool = pools.get("no-such-class").await.ok()?;
            (condition(&pool, "NodeClassReady")?.0 == "False").then_some(pool)
        })
        .await;
        let (_, reason, message) = condition(&classless, "NodeClassReady").expect("condition");
        assert_eq!(reason, "NodeClassNotFound");
        assert!(message.contains("\"missing\""), "{message}");
        for (pool, reason) in [
            ("repeated-taints", "FailedValidation"),
            ("no-such-class", "NodeClassNotFound"),
        ] {
            wait_for(&format!("a {reason} event on {pool}"), || async {
                events_about(&client, pool)
                    .await
                    .iter()
                    .any(|e| e.reason.as_deref() == Some(reason))
                    .then_some(())
            })
            .await;
        }

        // The controller keeps working: more pods get capacity, from the valid pool only; a pod
        // only the invalid pool could take stays pending.
        deployment(&client, &ns, "pinned", 1, Some("repeated-taints")).await;
        Api::<Deployment>::namespaced(client.clone(), &ns)
            .patch(
                "inflate",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"replicas": 6}})),
            )
            .await
            .expect("scale up");
        wait_for("6 bound pods", || async {
            (bound(&pods(&client, &ns).await) == 6).then_some(())
        })
        .await;
        // Two more rounds see the pinned pod: neither may launch anything for it.
        wait_for_more(controller.metrics_port, PROVISIONING_ROUNDS, 2).await;
        let after: Vec<NodeClaim> = list(&client).await;
        assert_eq!(after.len(), 2, "{after:?}");
        assert!(
            after.iter().all(
                |c| c.labels().get("karpenter.sh/nodepool").map(String::as_str) == Some("default")
            ),
            "nothing from an invalid pool: {after:?}"
        );
        assert!(
            after.iter().any(|c| c.name_any() == before[0].name_any()),
            "the existing capacity is still there"
        );
        assert_eq!(
            bound(&pods(&client, &ns).await),
            6,
            "the pinned pod waits, pending"
        );
        assert!(controller.exited().is_none(), "still running");
        let (code, _) = http_get(controller.health_port, "/healthz")
            .await
            .expect("healthz");
        assert_eq!(code, 200);
        reset(&client).await;
    });
}

/// Every object of a kind in the cluster, as JSON documents (typed, so independent of the
/// dynamic listing `simulate --from-cluster` does).
async fn dump<K>(client: &Client) -> Vec<serde_json::Value>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
    K::DynamicType: Default,
{
    Api::<K>::all(client.clone())
        .list(&ListParams::default())
        .await
        .expect("list")
        .items
        .iter()
        .map(|o| serde_json::to_value(o).expect("object serializes"))
        .collect()
}

/// `karpenter-rs simulate ARGS -o json`, parsed.
fn simulate_json(args: &[&str]) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_karpenter-rs"))
        .arg("simulate")
        .args(args)
        .args(["-o", "json", "--now", "2026-11-23T10:00:00Z"])
        .output()
        .expect("simulate runs");
    assert!(
        out.status.success(),
        "simulate {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("simulate prints JSON")
}

#[test]
fn simulate_reads_the_live_cluster_as_it_reads_the_same_objects_from_files() {
    use k8s_openapi::api::apps::v1::DaemonSet;
    use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
    use k8s_openapi::api::storage::v1::{CSINode, StorageClass};
    serial(async {
        let client = client().await;
        reset(&client).await;
        nodeclass(&client).await;
        nodepool(&client, "default", None).await;
        let ns = namespace(&client, "live").await;
        inflate(&client, &ns, 7).await;
        wait_for("seven pending pods", || async {
            (pods(&client, &ns).await.len() == 7).then_some(())
        })
        .await;
        // The same objects, dumped as `kubectl get -A -o yaml` would.
        let mut objects = Vec::new();
        objects.extend(dump::<NodePool>(&client).await);
        objects.extend(dump::<EC2NodeClass>(&client).await);
        objects.extend(dump::<NodeClaim>(&client).await);
        objects.extend(dump::<Node>(&client).await);
        objects.extend(dump::<Pod>(&client).await);
        objects.extend(dump::<DaemonSet>(&client).await);
        objects.extend(dump::<PersistentVolume>(&client).await);
        objects.extend(dump::<PersistentVolumeClaim>(&client).await);
        objects.extend(dump::<StorageClass>(&client).await);
        objects.extend(dump::<CSINode>(&client).await);
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
        let file = dir.join("live-cluster-dump.json");
        std::fs::write(
            &file,
            serde_json::to_string(&json!({"apiVersion": "v1", "kind": "List", "items": objects}))
                .expect("dump"),
        )
        .expect("write dump");
        let kubeconfig = kubeconfig_path();
        let kubeconfig = kubeconfig.to_str().expect("utf-8 path");

        let live = simulate_json(&["--kubeconfig", kubeconfig]);
        let files = simulate_json(&["-f", file.to_str().expect("utf-8 path")]);
        assert_eq!(live, files, "the live read and the dump plan differently");
        let claims = live["nodeclaims"].as_array().expect("nodeclaims");
        // m5.xlarge holds three 1-CPU pods: seven pods need three NodeClaims.
        assert_eq!(claims.len(), 3, "{live:#}");
        assert!(claims.iter().all(|c| c["instanceType"] == "m5.xlarge"));

        // What if the NodePool allowed m5.4xlarge? A file on top replaces the cluster's pool.
        let what_if = dir.join("live-what-if.yaml");
        std::fs::write(
            &what_if,
            "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: default}\nspec:\n  template:\n    spec:\n      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n      requirements:\n        - {key: node.kubernetes.io/instance-type, operator: In, values: [m5.4xlarge]}\n        - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}\n",
        )
        .expect("write what-if");
        let changed = simulate_json(&[
            "--kubeconfig",
            kubeconfig,
            "-f",
            what_if.to_str().expect("utf-8 path"),
        ]);
        let claims = changed["nodeclaims"].as_array().expect("nodeclaims");
        assert_eq!(claims.len(), 1, "{changed:#}");
        assert_eq!(claims[0]["instanceType"], "m5.4xlarge");
        assert_eq!(claims[0]["pods"].as_array().map(Vec::len), Some(7));
        reset(&client).await;
    });
}

/// Plays the kubelet for the bound pods of `ns`, which the stand-in kubelet leaves Pending (it
/// registers Nodes but runs no containers): each becomes Running and Ready now.
async fn start_pods(client: &Client, ns: &str) {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    for pod in pods(client, ns).await {
        let now = Time(Timestamp::now());
        let status = json!({"status": {"phase": "Running", "conditions": [
            {"type": "ContainersReady", "status": "True", "lastTransitionTime": now},
            {"type": "Ready", "status": "True", "lastTransitionTime": now},
        ]}});
        api.patch_status(
            &pod.name_any(),
            &PatchParams::default(),
            &Patch::Strategic(status),
        )
        .await
        .expect("pod status");
    }
}

/// The sum of the Nodes' `field` (`capacity` or `allocatable`) of `resource`, in base units.
fn node_total(nodes: &[Node], field: &str, resource: &str) -> f64 {
    nodes
        .iter()
        .map(|n| {
            let status = n.status.as_ref().expect("node status");
            let list = if field == "capacity" {
                &status.capacity
            } else {
                &status.allocatable
            };
            list.as_ref()
                .and_then(|l| l.get(resource))
                .and_then(|q| quantity_value(&q.0))
                .unwrap_or_else(|| panic!("{} has no {field} {resource}", n.name_any()))
        })
        .sum()
}

/// Whether two figures agree but for floating-point rounding.
fn agree(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

/// A real Prometheus scrapes the controller through a provision → consolidate cycle and answers
/// the PromQL operators run: upstream Karpenter's published dashboards (capacity and
/// performance, their expressions as Grafana sends them), queries on the Kubernetes library
/// families (controller-runtime, client-go), the families that follow provisioning, and every
/// query of the chart's own dashboards and alerts. Each returns data, and its figures agree with
/// what the API server says: nodes, pods bound and started, allocatable, requests, cost.
#[test]
fn prometheus_scrapes_the_controller_and_upstreams_and_the_shipped_queries_agree_with_the_cluster()
{
    serial(async {
        let client = client().await;
        reset(&client).await;
        // With leader election, as the chart runs it.
        let controller = Controller::start("prometheus", true);
        let prometheus = Prometheus::start("karpenter", controller.metrics_port);
        // Scraping before anything happens, so that rate() sees every counter move.
        prometheus
            .wait_for_value(
                "Prometheus to scrape the controller",
                r#"up{job="karpenter"}"#,
                1.0,
            )
            .await;
        let ns = namespace(&client, "prometheus").await;
        nodeclass(&client).await;
        // Limits, so that upstream's limit-utilization queries have a denominator.
        nodepool(
            &client,
            "default",
            Some(json!({"cpu": "100", "memory": "1000Gi"})),
        )
        .await;
        inflate(&client, &ns, 7).await;
        wait_for("7 bound pods", || async {
            (bound(&pods(&client, &ns).await) == 7).then_some(())
        })
        .await;
        let nodes = list::<Node>(&client).await;
        assert_eq!(nodes.len(), 3, "ceil(7 / 3) m5.xlarge nodes");
        let mut pods_per_node: BTreeMap<String, f64> = BTreeMap::new();
        for pod in pods(&client, &ns).await {
            let node = pod.spec.and_then(|s| s.node_name).expect("bound");
            *pods_per_node.entry(node).or_default() += 1.0;
        }

        // What Prometheus scraped agrees with the cluster.
        prometheus
            .wait_for_value(
                "Prometheus to see the three nodes",
                r#"count(karpenter_nodes_allocatable{resource_type="cpu"})"#,
                3.0,
            )
            .await;
        assert_eq!(
            prometheus
                .value("sum(karpenter_nodeclaims_created_total)")
                .await,
            Some(3.0)
        );
        assert_eq!(
            prometheus
                .value("max(karpenter_cluster_state_synced)")
                .await,
            Some(1.0)
        );
        prometheus
            .wait_for_value(
                "the cluster state's node count",
                "karpenter_cluster_state_node_count",
                3.0,
            )
            .await;
        let bound_in_prometheus =
            format!(r#"count(karpenter_pods_state{{namespace="{ns}", node!=""}})"#);
        prometheus
            .wait_for_value(
                "Prometheus to see the bound pods",
                &bound_in_prometheus,
                7.0,
            )
            .await;
        assert_eq!(
            prometheus
                .value(r#"sum(karpenter_nodepools_usage{resource_type="cpu", nodepool="default"})"#)
                .await,
            Some(node_total(&nodes, "capacity", "cpu")),
            "three 4-CPU nodes"
        );
        prometheus
            .wait_for_value(
                "seven 1-CPU pods' requests",
                r#"sum(karpenter_nodes_total_pod_requests{resource_type="cpu"})"#,
                7.0,
            )
            .await;
        // Instance types are published every minute and when an EC2NodeClass changes.
        prometheus
            .wait_for_value(
                "the instance type's vCPUs, as its Nodes report them",
                r#"karpenter_cloudprovider_instance_type_cpu_cores{instance_type="m5.xlarge"}"#,
                node_total(&nodes[..1], "capacity", "cpu"),
            )
            .await;
        prometheus
            .wait_for_value(
                "three Ready NodeClaims in the status-condition families",
                r#"count(operator_nodeclaim_status_condition_count{type="Ready", status="True"} == 1)"#,
                3.0,
            )
            .await;
        prometheus
            .wait_for_data(
                "the default pool's disruption budgets",
                r#"karpenter_nodepools_allowed_disruptions{nodepool="default"}"#,
            )
            .await;

        // Pods start: once the controller has seen the seven bound but not started (and knows
        // when it found each a place), the test plays the kubelet.
        for family in [
            "karpenter_pods_unstarted_time_seconds",
            "karpenter_pods_provisioning_unstarted_time_seconds",
        ] {
            prometheus
                .wait_for_value(
                    &format!("7 pods in {family}"),
                    &format!(r#"count({family}{{namespace="{ns}"}})"#),
                    7.0,
                )
                .await;
        }
        start_pods(&client, &ns).await;
        for family in [
            "karpenter_pods_startup_duration_seconds_count",
            "karpenter_pods_provisioning_startup_duration_seconds_count",
            "karpenter_pods_scheduling_decision_duration_seconds_count",
        ] {
            prometheus
                .wait_for_value(
                    &format!("7 pods in {family}"),
                    &format!("sum({family})"),
                    7.0,
                )
                .await;
        }
        // A pod bound between two of the controller's passes (5 s apart) is never seen unbound,
        // so only some pods may have bound durations; the two bound families count the same.
        let bound_durations = prometheus
            .value("sum(karpenter_pods_bound_duration_seconds_count)")
            .await
            .expect("bound durations");
        assert!(bound_durations <= 7.0, "{bound_durations}");
        assert_eq!(
            prometheus
                .value("sum(karpenter_pods_provisioning_bound_duration_seconds_count)")
                .await,
            Some(bound_durations)
        );

        // The shipped panels that chart these one-off events over a 5-minute rate window are
        // checked now: on a quiet cluster their window empties a few minutes later.
        let queries = shipped();
        assert!(queries.len() > 40, "{queries:?}");
        let with_data = |panels: &'static [&'static str]| {
            let queries = &queries;
            let prometheus = &prometheus;
            async move {
                for panel in panels {
                    let exprs: Vec<&String> = queries
                        .iter()
                        .filter(|(what, _)| what == panel)
                        .map(|(_, e)| e)
                        .collect();
                    assert!(!exprs.is_empty(), "no panel {panel}");
                    wait_until(&format!("data in {panel}"), || async {
                        for expr in &exprs {
                            if prometheus
                                .query(expr)
                                .await
                                .is_ok_and(|s| s.iter().any(|(_, v)| v.is_finite()))
                            {
                                return Ok(());
                            }
                        }
                        Err(format!("{exprs:?}"))
                    })
                    .await;
                }
            }
        };
        with_data(&[
            "performance.json: Pod startup latency",
            "performance.json: Pod provisioning latency",
            "performance.json: Scheduling decision latency",
            "performance.json: NodeClaims created and nodes registered",
            "performance.json: Scheduling simulation duration",
        ])
        .await;

        // Upstream's capacity dashboard (karpenter-capacity-dashboard.json).
        let by = |expr: &str, label: &str| {
            let expr = upstream(expr);
            let label = label.to_string();
            let prometheus = &prometheus;
            async move {
                prometheus
                    .by_label(&expr, &label)
                    .await
                    .unwrap_or_else(|| panic!("Prometheus refuses {expr}"))
            }
        };
        let default_pool = |figures: &BTreeMap<String, f64>| figures.get("default").copied();
        assert_eq!(
            default_pool(&by(r#"sum by(cluster,nodepool) (karpenter_nodes_created_total{nodepool=~"$nodepool"})"#, "nodepool").await),
            Some(3.0),
            "Nodes Created by nodepool"
        );
        prometheus
            .wait_for_data(
                "Nodes Created by nodepool (rate)",
                &upstream(r#"sum(rate(karpenter_nodes_created_total{nodepool=~"$nodepool"}[$__rate_interval])) by(cluster,nodepool)"#),
            )
            .await;
        let eligible = by(
            "sum by(reason)(karpenter_voluntary_disruption_eligible_nodes)",
            "reason",
        )
        .await;
        for reason in ["drifted", "empty", "underutilized"] {
            assert!(
                eligible.contains_key(reason),
                "Nodes Eligible for Disruptions: {eligible:?}"
            );
        }
        assert_eq!(
            default_pool(&by("sum by ($distribution_filter)(\n    karpenter_pods_state{arch=~\"$arch\", capacity_type=~\"$capacity_type\", instance_type=~\"$instance_type\", nodepool=~\"$nodepool\"}\n)", "nodepool").await),
            Some(7.0),
            "Pod Distribution by nodepool"
        );
        wait_for("Pod Phase: 7 running", || async {
            by("sum by(phase)(karpenter_pods_state)", "phase")
                .await
                .get("Running")
                .copied()
                .filter(|n| *n == 7.0)
        })
        .await;
        // Nodepool Summary.
        assert_eq!(
            default_pool(&by(r#"count by (nodepool)(karpenter_nodes_allocatable{nodepool!="N/A",resource_type="cpu"}) # Selects a single resource type to get node count"#, "nodepool").await),
            Some(3.0),
            "Node Count"
        );
        for (resource, api_name) in [("cpu", "cpu"), ("memory", "memory")] {
            let provisioned = default_pool(
                &by(
                    &format!(r#"sum by (nodepool)(karpenter_nodes_allocatable{{nodepool!="N/A",resource_type="{resource}"}})"#),
                    "nodepool",
                )
                .await,
            )
            .expect("provisioned");
            assert!(
                agree(provisioned, node_total(&nodes, "allocatable", api_name)),
                "{resource} provisioned: {provisioned}"
            );
        }
        let cpu_limit = default_pool(&by(r#"karpenter_nodepools_usage{resource_type="cpu"} / karpenter_nodepools_limit{resource_type="cpu"}"#, "nodepool").await).expect("CPU Limit Utilization");
        assert!(
            agree(cpu_limit, node_total(&nodes, "capacity", "cpu") / 100.0),
            "CPU Limit Utilization {cpu_limit}"
        );
        let memory_limit = default_pool(&by(r#"karpenter_nodepools_usage{resource_type="memory"} / karpenter_nodepools_limit{resource_type="memory"}"#, "nodepool").await).expect("Memory Limit Utilization");
        assert!(
            agree(
                memory_limit,
                node_total(&nodes, "capacity", "memory") / (1000.0 * 1024.0 * 1024.0 * 1024.0)
            ),
            "Memory Limit Utilization {memory_limit}"
        );
        assert_eq!(
            prometheus.value(&upstream(r#"(count(karpenter_nodes_allocatable{arch=~"$arch",capacity_type="spot",instance_type=~"$instance_type",nodepool=~"$nodepool",zone=~"$zone"}) or vector(0)) / count(karpenter_nodes_allocatable{arch=~"$arch",instance_type=~"$instance_type",nodepool=~"$nodepool",zone=~"$zone"})"#)).await,
            Some(0.0),
            "Spot Node Percentage of an on-demand pool"
        );
        // Node Summary: each node's CPU utilization is its pods' requests over its allocatable.
        let utilization = |resource: &str| {
            format!(
                "((karpenter_nodes_total_daemon_requests{{resource_type=\"{resource}\",arch=~\"$arch\",capacity_type=~\"$capacity_type\",instance_type=~\"$instance_type\",nodepool=~\"$nodepool\",zone=~\"$zone\"}} or karpenter_nodes_allocatable*0) + \n(karpenter_nodes_total_pod_requests{{resource_type=\"{resource}\",arch=~\"$arch\",capacity_type=~\"$capacity_type\",instance_type=~\"$instance_type\",nodepool=~\"$nodepool\",zone=~\"$zone\"}} or karpenter_nodes_allocatable*0)) / \nkarpenter_nodes_allocatable{{resource_type=\"{resource}\",arch=~\"$arch\",capacity_type=~\"$capacity_type\",instance_type=~\"$instance_type\",nodepool=~\"$nodepool\",zone=~\"$zone\"}}"
            )
        };
        let cpu = by(&utilization("cpu"), "node_name").await;
        assert_eq!(
            cpu.keys().collect::<Vec<_>>(),
            pods_per_node.keys().collect::<Vec<_>>(),
            "CPU Utilization per node"
        );
        for node in &nodes {
            let name = node.name_any();
            let expected =
                pods_per_node[&name] / node_total(std::slice::from_ref(node), "allocatable", "cpu");
            assert!(
                agree(cpu[&name], expected),
                "{name}: {} against {expected}",
                cpu[&name]
            );
        }
        let memory = by(&utilization("memory"), "node_name").await;
        assert_eq!(memory.len(), 3, "Memory Utilization per node: {memory:?}");
        assert!(
            memory.values().all(|u| *u == 0.0),
            "the pods request no memory: {memory:?}"
        );

        // Upstream's performance dashboard (karpenter-performance-dashboard.json).
        let mut latencies = Vec::new();
        for quantile in ["0", "0.5", "0.9", "0.99", "1"] {
            let latency = prometheus
                .value(&format!(
                    r#"max(karpenter_pods_startup_duration_seconds{{quantile="{quantile}"}})"#
                ))
                .await
                .unwrap_or_else(|| panic!("Pod Startup Latency {quantile}"));
            assert!(
                latency.is_finite() && latency >= 0.0,
                "{quantile}: {latency}"
            );
            latencies.push(latency);
        }
        assert!(
            latencies.is_sorted(),
            "Min ≤ P50 ≤ P90 ≤ P99 ≤ Max: {latencies:?}"
        );
        // Its "Min" (quantile 0) has a series, NaN on any cluster whose first bucket (5 ms) is
        // empty: Prometheus interpolates 0 observations over 0.
        let min = upstream(
            r#"histogram_quantile(0, rate(controller_runtime_reconcile_time_seconds_bucket{controller="$controller"}[10m]))"#,
        );
        assert_eq!(
            prometheus.query(&min).await.map(|s| s.len()),
            Ok(1),
            "Controller Reconciliation Latency [disruption] Min"
        );
        for quantile in ["0.5", "0.9", "0.99", "1"] {
            prometheus
                .wait_for_data(
                    &format!("Controller Reconciliation Latency [disruption] {quantile}"),
                    &upstream(&format!(r#"histogram_quantile({quantile}, rate(controller_runtime_reconcile_time_seconds_bucket{{controller="$controller"}}[10m]))"#)),
                )
                .await;
        }
        let controllers = by(
            r#"sum(rate(controller_runtime_reconcile_total{job="karpenter"}[10m])) by (controller)"#,
            "controller",
        )
        .await;
        // The dashboard's controller variable: label_values(controller_runtime_reconcile_time_seconds_count{job="karpenter"}, controller).
        let variable = by(
            r#"count by (controller) (controller_runtime_reconcile_time_seconds_count{job="karpenter"})"#,
            "controller",
        )
        .await;
        for name in [
            "provisioner",
            "disruption",
            "nodeclaim.lifecycle",
            "metrics",
        ] {
            assert!(
                controllers.get(name).is_some_and(|r| *r > 0.0),
                "Controller Reconciliation Rate: {controllers:?}"
            );
            assert!(
                variable.contains_key(name),
                "controller variable: {variable:?}"
            );
        }

        // The library families, as operators query them.
        let results = prometheus
            .query("sum by (controller, result) (controller_runtime_reconcile_total)")
            .await
            .expect("reconcile totals");
        assert!(
            results.iter().any(|(l, v)| l["controller"] == "provisioner"
                && l["result"] == "success"
                && *v > 0.0),
            "{results:?}"
        );
        for family in [
            "controller_runtime_reconcile_errors_total",
            "controller_runtime_reconcile_panics_total",
            "controller_runtime_active_workers",
        ] {
            let series = by(&format!("sum by (controller) ({family})"), "controller").await;
            for name in ["provisioner", "disruption", "nodeclaim.lifecycle"] {
                assert!(series.contains_key(name), "{family}: {series:?}");
            }
        }
        assert_eq!(
            prometheus
                .value("sum(controller_runtime_reconcile_panics_total)")
                .await,
            Some(0.0)
        );
        let requests = prometheus
            .query("sum by (method, code) (rest_client_requests_total)")
            .await
            .expect("requests");
        assert!(
            requests
                .iter()
                .any(|(l, v)| l["method"] == "GET" && l["code"] == "200" && *v > 0.0),
            "{requests:?}"
        );
        // Labelled with the API server's host:port, as client-go's are.
        let server = Kubeconfig::read_from(kubeconfig_path())
            .expect("kubeconfig")
            .clusters[0]
            .cluster
            .as_ref()
            .and_then(|c| c.server.clone())
            .expect("server");
        let host = server.trim_start_matches("https://").trim_end_matches('/');
        assert_eq!(
            by("sum by (host) (rest_client_requests_total)", "host")
                .await
                .keys()
                .collect::<Vec<_>>(),
            [host],
        );
        let leaders = prometheus
            .query("leader_election_master_status == 1")
            .await
            .expect("leader");
        assert_eq!(leaders.len(), 1, "{leaders:?}");
        assert_eq!(leaders[0].0["name"], "karpenter-leader-election");

        // controller-runtime's work-queue families, one queue per controller (`name` and
        // `controller` both its name), moved by the cycle's real triggers and reconciles.
        let queues = [
            "provisioner",
            "disruption",
            "nodeclaim.lifecycle",
            "nodepool",
        ];
        let adds = by("sum by (name) (workqueue_adds_total)", "name").await;
        for name in queues {
            assert!(
                adds.get(name).is_some_and(|a| *a > 0.0),
                "workqueue_adds_total: {adds:?}"
            );
            assert!(
                prometheus
                    .value(&format!(
                        r#"sum(workqueue_work_duration_seconds_count{{name="{name}",controller="{name}"}})"#
                    ))
                    .await
                    .is_some_and(|n| n > 0.0),
                "{name}'s reconciles took their items from its queue"
            );
        }
        for family in [
            "workqueue_depth",
            "workqueue_retries_total",
            "workqueue_queue_duration_seconds_count",
            "workqueue_unfinished_work_seconds",
            "workqueue_longest_running_processor_seconds",
        ] {
            let series = by(&format!("sum by (name) ({family})"), "name").await;
            for name in queues {
                assert!(series.contains_key(name), "{family}: {series:?}");
            }
        }
        // A polling controller's pass is added and taken at once: its queue never holds one.
        assert_eq!(
            prometheus
                .value(
                    r#"max(max_over_time(workqueue_depth{name=~"provisioner|disruption"}[10m]))"#
                )
                .await,
            Some(0.0)
        );
        for (panel, expr) in [
            ("Work queue depth", "sum by (name) (workqueue_depth)"),
            (
                "Work queue latency (p99)",
                "histogram_quantile(0.99, sum by (le, name) (rate(workqueue_queue_duration_seconds_bucket[5m])))",
            ),
        ] {
            prometheus
                .wait_for_data(&format!("performance.json: {panel}"), expr)
                .await;
        }

        // Every shipped query is valid PromQL on a real Prometheus; panels for what the
        // cycle exercised have data, and no alert fires on this healthy cluster.
        for (what, expr) in &queries {
            let series = prometheus
                .query(expr)
                .await
                .unwrap_or_else(|e| panic!("{what}: Prometheus refuses {expr}: {e}"));
            // KarpenterDisruptionBlocked's condition (nodes eligible, none disrupted in 6 h) may
            // hold for a moment on any cluster; only its `for: 30m` makes it an alert.
            if what.starts_with("alert ") && what != "alert KarpenterDisruptionBlocked" {
                assert!(
                    series.is_empty(),
                    "{what} fires on a healthy cluster: {series:?}"
                );
            }
        }
        with_data(&[
            "capacity.json: Nodes by NodePool",
            "capacity.json: Nodes by zone",
            "capacity.json: Nodes by instance type",
            "capacity.json: Nodes by capacity type",
            "capacity.json: CPU: allocatable and requested",
            "capacity.json: NodePool usage against limits (CPU)",
            "capacity.json: Estimated cost per hour by NodePool",
            "capacity.json: Nodes created and terminated by NodePool",
            "capacity.json: Spot share of nodes",
            "capacity.json: Pods by NodePool",
            "capacity.json: NodePool cost (controller estimate)",
            "capacity.json: Disruption budgets",
            "capacity.json: NodeClaims by condition",
            "capacity.json: Instance type offerings available",
            "performance.json: Cluster state synced",
            "performance.json: Kubernetes API requests",
            "performance.json: Kubernetes API request latency (p99)",
            "performance.json: Controller reconcile rate",
            "performance.json: Controller reconcile errors",
            "performance.json: Controller reconcile latency (p99)",
            "performance.json: Active workers",
            "performance.json: Leader",
        ])
        .await;
        let cost = prometheus
            .value(r#"sum(count by (nodepool, instance_type, capacity_type, zone) (karpenter_nodes_allocatable{resource_type="cpu"}) * on (instance_type, capacity_type, zone) group_left max by (instance_type, capacity_type, zone) (karpenter_cloudprovider_instance_type_offering_price_estimate))"#)
            .await
            .expect("a cost");
        assert!(
            (cost - 3.0 * 0.192).abs() < 1e-6,
            "three on-demand m5.xlarge: {cost}"
        );
        // The controller's own figure agrees (refreshed every 5 s, hence the wait).
        wait_for("the NodePool's cost in Prometheus", || async {
            prometheus
                .value(r#"sum(karpenter_nodepools_cost_total{nodepool="default"})"#)
                .await
                .filter(|c| (c - 3.0 * 0.192).abs() < 1e-6)
        })
        .await;

        // Consolidation shows up too: with one pod left, two nodes go.
        Api::<Deployment>::namespaced(client.clone(), &ns)
            .patch(
                "inflate",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"replicas": 1}})),
            )
            .await
            .expect("scale down");
        wait_for("Prometheus to see the fleet consolidated", || async {
            let decisions = prometheus
                .value("sum(karpenter_voluntary_disruption_decisions_total)")
                .await?;
            let nodes = prometheus
                .value(r#"count(karpenter_nodes_allocatable{resource_type="cpu"})"#)
                .await?;
            (decisions >= 1.0 && nodes == 1.0).then_some(())
        })
        .await;
        assert_eq!(list::<Node>(&client).await.len(), 1);
        for family in [
            "karpenter_nodes_terminated_total",
            "karpenter_nodeclaims_terminated_total",
            "karpenter_nodeclaims_disrupted_total",
            "karpenter_nodes_termination_duration_seconds_count",
            "karpenter_nodeclaims_termination_duration_seconds_count",
            "karpenter_nodes_lifetime_duration_seconds_count",
        ] {
            prometheus
                .wait_for_value(
                    &format!("two nodes in {family}"),
                    &format!(r#"sum({family}{{nodepool="default"}})"#),
                    2.0,
                )
                .await;
        }
        // Upstream's capacity dashboard after the disruption.
        assert_eq!(
            default_pool(&by(r#"sum by(cluster,nodepool) (karpenter_nodes_terminated_total{nodepool=~"$nodepool"})"#, "nodepool").await),
            Some(2.0),
            "Nodes Terminated by nodepool"
        );
        assert_eq!(
            default_pool(&by(r#"sum by(cluster,nodepool)(karpenter_nodeclaims_disrupted_total{nodepool=~"$nodepool"})"#, "nodepool").await),
            Some(2.0),
            "Node Disruptions by nodepool"
        );
        let actions = prometheus
            .query("sum by(consolidation_type,decision)(karpenter_voluntary_disruption_decisions_total)")
            .await
            .expect("Disruption Actions");
        assert!(
            actions
                .iter()
                .any(|(l, v)| l["decision"] == "delete" && *v >= 1.0),
            "Disruption Actions performed: {actions:?}"
        );
        assert_eq!(
            prometheus.value(r#"sum(karpenter_voluntary_disruption_decisions_by_nodepool_total{nodepool="default"})"#).await,
            prometheus.value("sum(karpenter_voluntary_disruption_decisions_total)").await,
        );
        prometheus
            .wait_for_data(
                "Disruption Actions performed (rate)",
                &upstream("sum(rate(karpenter_voluntary_disruption_decisions_total[$__rate_interval])) by(cluster,nodepool,consolidation_type,decision)"),
            )
            .await;
        // Upstream's performance dashboard: Node Termination Latency.
        let mut latencies = Vec::new();
        for quantile in ["0", "0.5", "0.9", "0.99", "1"] {
            let series = prometheus
                .wait_for_data(
                    &format!("Node Termination Latency {quantile}"),
                    &format!(r#"max(karpenter_nodes_termination_duration_seconds{{quantile="{quantile}"}})"#),
                )
                .await;
            latencies.push(series[0].1);
        }
        assert!(latencies.is_sorted(), "{latencies:?}");
        with_data(&[
            "performance.json: Disruption decisions",
            "performance.json: NodeClaims disrupted",
            "performance.json: Node termination latency",
        ])
        .await;
        reset(&client).await;
    });
}

/// The controller's caught panics in its `/metrics` text: the series of
/// `controller_runtime_reconcile_panics_total` that are not 0 (every controller has one, at 0,
/// from its start).
fn panics(text: &str) -> Vec<&str> {
    text.lines()
        .filter(|l| {
            l.starts_with("controller_runtime_reconcile_panics_total{") && !l.ends_with(" 0")
        })
        .collect()
}

/// Events recorded by Karpenter (not kube-scheduler) about the object named `name`.
async fn karpenter_events_about(client: &Client, name: &str) -> Vec<(String, String)> {
    events_about(client, name)
        .await
        .into_iter()
        .filter(|e| e.reporting_controller.as_deref() == Some("karpenter"))
        .map(|e| (e.reason.unwrap_or_default(), e.note.unwrap_or_default()))
        .collect()
}

/// Waits for a Karpenter event with `reason` about the object `name`; returns its note.
async fn karpenter_event(client: &Client, name: &str, reason: &str) -> String {
    wait_for(&format!("a {reason} event on {name}"), || async {
        karpenter_events_about(client, name)
            .await
            .into_iter()
            .find(|(r, _)| r == reason)
            .map(|(_, note)| note)
    })
    .await
}

#[test]
fn absurd_objects_are_reported_while_a_normal_workload_is_provisioned_and_consolidated() {
    serial(async {
        let client = client().await;
        reset(&client).await;
        let mut controller = Controller::start("absurd", false);
        let ns = namespace(&client, "absurd").await;
        nodeclass(&client).await;
        nodepool(&client, "default", None).await;
        // The CRD's pattern admits this expireAfter; Go's (and so Karpenter's) durations end at
        // about 292 years. Preferred by weight: were it used, new NodeClaims would be its.
        let absurd_pool: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": {"name": "absurd-expiry"},
            "spec": {"weight": 100, "template": {"spec": {
                "expireAfter": "9999999999h",
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": [
                    {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.xlarge"]},
                    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                ],
            }}},
        }))
        .expect("NodePool");
        let pools: Api<DynamicObject> =
            Api::all_with(client.clone(), &ApiResource::erase::<NodePool>(&()));
        pools
            .create(&PostParams::default(), &absurd_pool)
            .await
            .expect("the API server accepts the absurd NodePool");
        // A normal workload, a pod whose do-not-disrupt value is absurd, and a pod asking for a
        // million billion cores.
        inflate(&client, &ns, 5).await;
        let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
        let pod_template = |name: &str, annotations: serde_json::Value, cpu: &str| -> Deployment {
            serde_json::from_value(json!({
                "metadata": {"name": name},
                "spec": {
                    "replicas": 1,
                    "selector": {"matchLabels": {"app": name}},
                    "template": {
                        "metadata": {"labels": {"app": name}, "annotations": annotations},
                        "spec": {
                            "terminationGracePeriodSeconds": 0,
                            "containers": [{
                                "name": "app",
                                "image": "public.ecr.aws/eks-distro/kubernetes/pause:3.7",
                                "resources": {"requests": {"cpu": cpu}},
                            }],
                        },
                    },
                },
            }))
            .expect("deployment")
        };
        for d in [
            pod_template(
                "protected-forever",
                json!({"karpenter.sh/do-not-disrupt": "999999999999h"}),
                "1",
            ),
            pod_template("enormous", json!({}), "1000000000000000"),
        ] {
            deployments
                .create(&PostParams::default(), &d)
                .await
                .expect("create Deployment");
        }

        // The normal workload and the annotated pod get capacity, from the valid pool only.
        wait_for("6 bound pods", || async {
            (bound(&pods(&client, &ns).await) == 6).then_some(())
        })
        .await;
        let claims: Vec<NodeClaim> = list(&client).await;
        assert_eq!(claims.len(), 2, "ceil(6 / 3) m5.xlarge nodes: {claims:?}");
        assert!(
            claims.iter().all(
                |c| c.labels().get("karpenter.sh/nodepool").map(String::as_str) == Some("default")
            ),
            "nothing from the unreadable pool: {claims:?}"
        );

        // Each absurd object is reported where its owner looks.
        let status = wait_for("ValidationSucceeded=False on absurd-expiry", || async {
            let pool = pools.get("absurd-expiry").await.ok()?;
            let conditions = pool.data["status"]["conditions"].as_array()?.clone();
            conditions
                .iter()
                .find(|c| c["type"] == "ValidationSucceeded" && c["status"] == "False")
                .cloned()
        })
        .await;
        assert_eq!(status["reason"], "NodePoolValidationFailed");
        let message = status["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("spec.template.spec.expireAfter")
                && message.contains("\"9999999999h\"")
                && message.contains("shorten it"),
            "the field and the fix: {message}"
        );
        let note = karpenter_event(&client, "absurd-expiry", "FailedValidation").await;
        assert!(note.contains("spec.template.spec.expireAfter"), "{note}");
        let protected = pods(&client, &ns)
            .await
            .into_iter()
            .find(|p| p.labels().get("app").map(String::as_str) == Some("protected-forever"))
            .expect("the annotated pod");
        let note = karpenter_event(
            &client,
            &protected.name_any(),
            "InvalidDoNotDisruptAnnotation",
        )
        .await;
        assert!(note.contains("\"999999999999h\""), "{note}");
        let enormous = pods(&client, &ns)
            .await
            .into_iter()
            .find(|p| p.labels().get("app").map(String::as_str) == Some("enormous"))
            .expect("the enormous pod");
        karpenter_event(&client, &enormous.name_any(), "FailedScheduling").await;

        assert!(controller.exited().is_none(), "still running");
        let text = scrape(controller.metrics_port).await.expect("/metrics");
        assert_eq!(panics(&text), Vec::<&str>::new(), "nothing panicked");

        // A controller that starts while the absurd objects exist (a rollout, a new leader)
        // lists them with everything else: it must sync its caches and serve the rest.
        controller.kill();
        let mut controller = Controller::start("absurd-restarted", false);
        deployments
            .patch(
                "inflate",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"replicas": 8}})),
            )
            .await
            .expect("scale up");
        wait_for("9 bound pods", || async {
            (bound(&pods(&client, &ns).await) == 9).then_some(())
        })
        .await;
        let claims: Vec<NodeClaim> = list(&client).await;
        assert_eq!(claims.len(), 3, "ceil(9 / 3) m5.xlarge nodes: {claims:?}");
        assert!(
            claims.iter().all(
                |c| c.labels().get("karpenter.sh/nodepool").map(String::as_str) == Some("default")
            ),
            "nothing from the unreadable pool: {claims:?}"
        );
        // Consolidation still runs: with the normal workload gone, its empty capacity goes and
        // the node of the annotated pod (the annotation protects nothing) stays for it.
        deployments
            .patch(
                "inflate",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"replicas": 0}})),
            )
            .await
            .expect("scale down");
        wait_for("one NodeClaim left", || async {
            let claims: Vec<NodeClaim> = list(&client).await;
            (claims.len() == 1).then_some(())
        })
        .await;
        let pods = pods(&client, &ns).await;
        assert_eq!(bound(&pods), 1, "the annotated pod is still running");
        assert!(controller.exited().is_none(), "still running");
        let text = scrape(controller.metrics_port).await.expect("/metrics");
        assert_eq!(panics(&text), Vec::<&str>::new(), "nothing panicked");
        reset(&client).await;
    });
}
