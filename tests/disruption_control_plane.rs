//! Disruption and termination of `karpenter-rs run` against a real control plane (see
//! `tests/control_plane.rs` for the setup): consolidation of empty nodes, do-not-disrupt, drift
//! rolled within budgets, drains held by PodDisruptionBudgets and bounded by
//! terminationGracePeriod. There is no kubelet: pods are created with
//! `terminationGracePeriodSeconds: 0` so the API server removes evicted pods at once, and the
//! tests mark pods Running and Ready themselves where a PDB must count them healthy.
//!
//! Tests share the cluster, so they run one at a time and start from a clean slate.

#[path = "k8s/harness.rs"]
mod harness;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use karpenter_rs::apis::{EC2NodeClass, NodeClaim, NodePool};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PostParams,
};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use harness::*;

/// A `karpenter-rs run` child process, killed (SIGKILL, by PID) when dropped.
struct Controller {
    child: Child,
    log: PathBuf,
    metrics_port: u16,
}

impl Controller {
    fn start(name: &str) -> Self {
        Self::start_with_gates(name, None)
    }

    /// A controller with `FEATURE_GATES` set to `gates` (the defaults when `None`).
    fn start_with_gates(name: &str, gates: Option<&str>) -> Self {
        let log_path = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("disruption-controller-{name}.log"));
        let log = std::fs::File::create(&log_path).expect("log file");
        let metrics_port = free_port();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_karpenter-rs"));
        cmd.args(["run", "--cloud-provider", "simulated"])
            .args(["--metrics-port", &metrics_port.to_string()])
            .args(["--health-probe-port", &free_port().to_string()])
            .env("KUBECONFIG", kubeconfig_path())
            .env("POD_NAME", name)
            .env("RUST_LOG", "info")
            .stdout(Stdio::from(log.try_clone().expect("log")))
            .stderr(Stdio::from(log));
        cmd.arg("--disable-leader-election");
        if let Some(gates) = gates {
            cmd.env("FEATURE_GATES", gates);
        }
        Self {
            child: cmd.spawn().expect("start karpenter-rs run"),
            log: log_path,
            metrics_port,
        }
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        // A test that failed because the controller had exited says so, with its log.
        if std::thread::panicking()
            && let Ok(Some(status)) = self.child.try_wait()
        {
            eprintln!(
                "the controller had exited ({status}); its log ({}):\n{}",
                self.log.display(),
                std::fs::read_to_string(&self.log).unwrap_or_default()
            );
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
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

/// A NodePool of m5.xlarge on-demand nodes (three 1-CPU pods each) with the given `disruption`
/// block and extra template spec fields.
async fn nodepool(client: &Client, name: &str, disruption: Value, template_spec: Value) {
    let api: Api<NodePool> = Api::all(client.clone());
    let mut spec = json!({
        "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
        "requirements": [
            {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.xlarge"]},
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
        ],
    });
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), template_spec.as_object()) {
        spec.extend(extra.clone());
    }
    let pool: NodePool = serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {"disruption": disruption, "template": {"metadata": {"labels": {"team": "blue"}}, "spec": spec}},
    }))
    .expect("nodepool");
    api.create(&PostParams::default(), &pool)
        .await
        .expect("create NodePool");
}

/// A Deployment of pause pods requesting `cpu` each, labelled `app: <name>`, with the given pod
/// annotations. Pods end at once when deleted (there is no kubelet to confirm it).
async fn deploy(
    client: &Client,
    ns: &str,
    name: &str,
    replicas: i32,
    cpu: &str,
    annotations: Value,
) {
    let api: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}, "annotations": annotations},
                "spec": {
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{
                        "name": "pause",
                        "image": "public.ecr.aws/eks-distro/kubernetes/pause:3.7",
                        "resources": {"requests": {"cpu": cpu}},
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

async fn scale(client: &Client, ns: &str, name: &str, replicas: i32) {
    Api::<Deployment>::namespaced(client.clone(), ns)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": replicas}})),
        )
        .await
        .expect("scale");
}

fn node_of(pod: &Pod) -> Option<String> {
    pod.spec.as_ref()?.node_name.clone()
}

fn has_taint(node: &Node, key: &str) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|t| t.iter().any(|t| t.key == key))
}

async fn get<K>(client: &Client, name: &str) -> Option<K>
where
    K: kube::Resource<Scope = k8s_openapi::ClusterResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    Api::<K>::all(client.clone())
        .get_opt(name)
        .await
        .ok()
        .flatten()
}

/// What kube-scheduler and a kubelet would report for a started pod: Running and Ready, so the
/// PodDisruptionBudget controller counts it healthy (the Eviction API lets Pending pods go
/// whatever the budget says).
async fn mark_running(client: &Client, ns: &str) {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    for p in pods(client, ns).await {
        api.patch_status(
            &p.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {
                "phase": "Running",
                "conditions": [{"type": "Ready", "status": "True"}],
            }})),
        )
        .await
        .expect("pod status");
    }
}

fn pdb_api(client: &Client, ns: &str) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("policy", "v1beta1", "PodDisruptionBudget"),
        "poddisruptionbudgets",
    );
    Api::namespaced_with(client.clone(), ns, &ar)
}

/// A policy/v1beta1 PodDisruptionBudget over `app: <app>` with `minAvailable`, once the
/// disruption controller has counted the pods (`disruptionsAllowed` observed).
async fn pdb(client: &Client, ns: &str, app: &str, min_available: i32) {
    let api = pdb_api(client, ns);
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "policy/v1beta1", "kind": "PodDisruptionBudget",
        "metadata": {"name": app, "namespace": ns},
        "spec": {"minAvailable": min_available, "selector": {"matchLabels": {"app": app}}},
    }))
    .expect("pdb");
    api.create(&PostParams::default(), &obj)
        .await
        .expect("create PDB");
    wait_for("the PDB to count its pods", || async {
        let o = api.get(app).await.ok()?;
        let status = o.data.get("status")?;
        (status.get("currentHealthy")?.as_i64()? >= i64::from(min_available)
            && status.get("disruptionsAllowed")?.as_i64()? == 0)
            .then_some(())
    })
    .await;
}

fn deleting(claim: &NodeClaim) -> bool {
    claim.metadata.deletion_timestamp.is_some()
}

/// Brings up one m5.xlarge node running three `app` pods marked Running and Ready, protected by
/// a PDB that allows no eviction, and deletes its NodeClaim. Returns the namespace, the
/// NodeClaim and the Node name.
async fn node_behind_a_pdb(client: &Client, name: &str) -> (String, NodeClaim, String) {
    let ns = namespace(client, name).await;
    deploy(client, &ns, "app", 3, "1", json!({})).await;
    wait_for("3 bound pods", || async {
        (bound(&pods(client, &ns).await) == 3).then_some(())
    })
    .await;
    mark_running(client, &ns).await;
    pdb(client, &ns, "app", 3).await;
    let node = pods(client, &ns)
        .await
        .iter()
        .find_map(node_of)
        .expect("bound");
    let claims: Vec<NodeClaim> = list(client).await;
    let claim = claims
        .into_iter()
        .find(|c| c.status.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node.as_str()))
        .expect("the node's NodeClaim");
    Api::<NodeClaim>::all(client.clone())
        .delete(&claim.name_any(), &DeleteParams::default())
        .await
        .expect("delete NodeClaim");
    (ns, claim, node)
}

#[test]
fn an_empty_node_is_removed_after_consolidate_after() {
    serial(async {
        let client = client().await;
        reset(&client).await;
        let controller = Controller::start("empty");
        let ns = namespace(&client, "empty").await;
        nodeclass(&client).await;
        nodepool(
            &client,
            "default",
            json!({"consolidationPolicy": "WhenEmpty", "consolidateAfter": "5s"}),
            json!({}),
        )
        .await;
        deploy(&client, &ns, "inflate", 3, "1", json!({})).await;
        wait_for("3 bound pods", || async {
            (bound(&pods(&client, &ns).await) == 3).then_some(())
        })
        .await;
        // The node the pods run on (the provisioner may briefly launch a spare one, which
        // emptiness removes as well).
        let node = pods(&client, &ns)
            .await
            .iter()
            .find_map(node_of)
            .expect("bound");
        // Occupied, the node stays through more disruption passes.
        wait_for_more(controller.metrics_port, DISRUPTION_PASSES, 2).await;
        assert!(
            get::<Node>(&client, &node).await.is_some(),
            "an occupied node stays"
        );
        scale(&client, &ns, "inflate", 0).await;
        let emptied = Instant::now();
        wait_for("the empty Node to go", || async {
            get::<Node>(&client, &node).await.is_none().then_some(())
        })
        .await;
        assert!(
            emptied.elapsed() >= Duration::from_secs(5),
            "not before consolidateAfter"
        );
        wait_for("every NodeClaim to go", || async {
            list::<NodeClaim>(&client).await.is_empty().then_some(())
        })
        .await;
        // Emptiness deleted it, with upstream's labels.
        wait_for_metrics(controller.metrics_port, &[
                "karpenter_voluntary_disruption_decisions_total{consolidation_type=\"empty\",decision=\"delete\",reason=\"empty\"}",
                "karpenter_voluntary_disruption_decisions_by_nodepool_total{consolidation_type=\"empty\",decision=\"delete\",nodepool=\"default\",reason=\"empty\"}",
                "karpenter_nodeclaims_disrupted_total{capacity_type=",
                "karpenter_pods_disruption_initiated_total{capacity_type=",
            ])
            .await;
        wait_for_metrics(controller.metrics_port, &[
                "karpenter_voluntary_disruption_decision_evaluation_duration_seconds_count{consolidation_type=\"empty\",reason=\"empty\"}",
                "karpenter_voluntary_disruption_eligible_nodes{reason=\"empty\"} 0",
                "karpenter_nodepools_allowed_disruptions{nodepool=\"default\",reason=\"Empty\"}",
                "karpenter_nodepools_nodes_consuming_budgets{nodepool=\"default\",reason=\"Empty\"} 0",
            ])
            .await;
        drop(controller);
        reset(&client).await;
    });
}

#[test]
fn a_do_not_disrupt_pod_keeps_its_node_while_another_is_consolidated() {
    serial(async {
        let client = client().await;
        reset(&client).await;
        let controller = Controller::start("do-not-disrupt");
        let ns = namespace(&client, "dnd").await;
        nodeclass(&client).await;
        nodepool(
            &client,
            "default",
            json!({"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "5s"}),
            json!({}),
        )
        .await;
        // Three pods fill one node; the protected pod then needs a second one.
        deploy(&client, &ns, "inflate", 3, "1", json!({})).await;
        wait_for("3 bound pods", || async {
            (bound(&pods(&client, &ns).await) == 3).then_some(())
        })
        .await;
        deploy(
            &client,
            &ns,
            "keep",
            1,
            "1",
            json!({"karpenter.sh/do-not-disrupt": "true"}),
        )
        .await;
        let keep = wait_for("the protected pod bound", || async {
            pods(&client, &ns)
                .await
                .into_iter()
                .find(|p| p.labels().get("app").map(String::as_str) == Some("keep"))
                .filter(|p| node_of(p).is_some())
        })
        .await;
        let protected_node = node_of(&keep).expect("bound");
        let other = pods(&client, &ns)
            .await
            .iter()
            .find(|p| p.labels().get("app").map(String::as_str) == Some("inflate"))
            .and_then(node_of)
            .expect("inflate node");
        assert_ne!(protected_node, other);
        // One pod per node: either node could take the other's pod; only the unprotected may go.
        scale(&client, &ns, "inflate", 1).await;
        wait_for("the unprotected Node to go", || async {
            get::<Node>(&client, &other).await.is_none().then_some(())
        })
        .await;
        wait_for("every pod bound", || async {
            (bound(&pods(&client, &ns).await) == 2).then_some(())
        })
        .await;
        // More disruption passes see the protected node: none may touch it.
        wait_for_more(controller.metrics_port, DISRUPTION_PASSES, 2).await;
        let node = get::<Node>(&client, &protected_node)
            .await
            .expect("the protected node stays");
        assert!(!has_taint(&node, "karpenter.sh/disrupted"));
        let now = pods(&client, &ns).await;
        let keep_now = now
            .iter()
            .find(|p| p.labels().get("app").map(String::as_str) == Some("keep"))
            .expect("keep pod");
        assert_eq!(keep_now.name_any(), keep.name_any(), "never evicted");
        assert!(
            now.iter()
                .all(|p| node_of(p).as_deref() == Some(protected_node.as_str())),
            "the moved pod joined the protected node"
        );
        drop(controller);
        reset(&client).await;
    });
}

#[test]
fn drift_rolls_nodes_replacement_first_within_the_budget() {
    serial(async {
        let client = client().await;
        reset(&client).await;
        let controller = Controller::start("drift");
        let ns = namespace(&client, "drift").await;
        nodeclass(&client).await;
        nodepool(
            &client,
            "default",
            // Emptiness removes a spare node the provisioner may launch while the first ones
            // register; 30 s is longer than a replacement stays empty during a roll.
            json!({"consolidationPolicy": "WhenEmpty", "consolidateAfter": "30s",
                   "budgets": [{"nodes": "1"}]}),
            json!({}),
        )
        .await;
        deploy(&client, &ns, "inflate", 6, "1", json!({})).await;
        wait_for("6 bound pods", || async {
            (bound(&pods(&client, &ns).await) == 6).then_some(())
        })
        .await;
        let old: Vec<String> = wait_for("two nodes", || async {
            let claims: Vec<NodeClaim> = list(&client).await;
            (claims.len() == 2 && claims.iter().all(|c| !deleting(c)))
                .then(|| claims.iter().map(|c| c.name_any()).collect())
        })
        .await;
        Api::<NodePool>::all(client.clone())
            .patch(
                "default",
                &PatchParams::default(),
                &Patch::Merge(
                    json!({"spec": {"template": {"metadata": {"labels": {"team": "red"}}}}}),
                ),
            )
            .await
            .expect("change the template");
        let start = Instant::now();
        let mut most_disrupting = 0;
        let mut seen_drifted: std::collections::BTreeSet<String> = Default::default();
        let mut old_nodes: std::collections::BTreeSet<String> = Default::default();
        loop {
            let claims: Vec<NodeClaim> = list(&client).await;
            let nodes: Vec<Node> = list(&client).await;
            // The Drifted condition (with upstream's reason) shows on each old NodeClaim while it
            // waits for its turn and while it drains.
            for c in claims.iter().filter(|c| old.contains(&c.name_any())) {
                if let Some(n) = c.status.as_ref().and_then(|s| s.node_name.clone()) {
                    old_nodes.insert(n);
                }
                let drifted = c.status.as_ref().is_some_and(|s| {
                    s.conditions.iter().any(|c| {
                        c.type_ == "Drifted" && c.status == "True" && c.reason == "NodePoolDrifted"
                    })
                });
                if drifted {
                    seen_drifted.insert(c.name_any());
                }
            }
            let disrupting = claims
                .iter()
                .filter(|c| {
                    deleting(c)
                        || c.status
                            .as_ref()
                            .and_then(|s| s.node_name.as_ref())
                            .is_some_and(|n| {
                                nodes.iter().any(|node| {
                                    &node.name_any() == n
                                        && has_taint(node, "karpenter.sh/disrupted")
                                })
                            })
                })
                .count();
            most_disrupting = most_disrupting.max(disrupting);
            assert!(
                disrupting <= 1,
                "budget nodes: 1 exceeded: {disrupting} at once"
            );
            let old_deleting = claims
                .iter()
                .filter(|c| old.contains(&c.name_any()) && deleting(c))
                .count();
            let old_gone = old
                .iter()
                .filter(|o| !claims.iter().any(|c| &c.name_any() == *o))
                .count();
            let new_initialized = claims
                .iter()
                .filter(|c| !old.contains(&c.name_any()))
                .filter(|c| {
                    c.status.as_ref().is_some_and(|s| {
                        s.conditions
                            .iter()
                            .any(|c| c.type_ == "Initialized" && c.status == "True")
                    })
                })
                .count();
            assert!(
                new_initialized >= old_deleting + old_gone,
                "a replacement is initialized before each old node goes"
            );
            let rolled = old_gone == old.len()
                && claims
                    .iter()
                    .all(|c| c.labels().get("team").map(String::as_str) == Some("red"))
                && bound(&pods(&client, &ns).await) == 6;
            if rolled {
                break;
            }
            assert!(
                start.elapsed() < PATIENCE,
                "timed out rolling the drifted nodes: {:?}",
                claims
                    .iter()
                    .map(|c| (c.name_any(), deleting(c)))
                    .collect::<Vec<_>>()
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        assert_eq!(most_disrupting, 1, "nodes were disrupted one at a time");
        assert_eq!(
            seen_drifted.len(),
            old.len(),
            "every old NodeClaim showed Drifted=True (NodePoolDrifted) before it went: {seen_drifted:?}"
        );
        // The disruption events, on the old Nodes and NodeClaims (cluster-scoped objects' events
        // go to `default`, or to `kube-system` on this 1.20 API server).
        let events: Api<k8s_openapi::api::events::v1::Event> = Api::all(client.clone());
        let events = events
            .list(&ListParams::default())
            .await
            .expect("events")
            .items;
        let old_claims: std::collections::BTreeSet<String> = old.iter().cloned().collect();
        for reason in ["DisruptionLaunching", "DisruptionTerminating"] {
            for (kind, names) in [("Node", &old_nodes), ("NodeClaim", &old_claims)] {
                for name in names {
                    assert!(
                        events.iter().any(|e| {
                            e.reason.as_deref() == Some(reason)
                                && e.regarding.as_ref().is_some_and(|r| {
                                    r.kind.as_deref() == Some(kind)
                                        && r.name.as_deref() == Some(name.as_str())
                                })
                                && e.note
                                    .as_deref()
                                    .is_some_and(|n| n.contains("NodePoolDrifted"))
                        }),
                        "a {reason} event naming NodePoolDrifted on {kind} {name}"
                    );
                }
            }
        }
        println!("2 drifted nodes rolled in {:?}", start.elapsed());
        // Drift replaced them (upstream's empty consolidation_type for drift), the drain
        // counted their pods under the NodeClaims' DisruptionReason, budgets reported.
        wait_for_metrics(controller.metrics_port, &[
                "karpenter_voluntary_disruption_decisions_total{consolidation_type=\"\",decision=\"replace\",reason=\"drifted\"}",
                "karpenter_nodeclaims_created_total{min_values_relaxed=\"false\",nodepool=\"default\",reason=\"drifted\"}",
                "karpenter_nodeclaims_disrupted_total{capacity_type=",
                "karpenter_pods_drained_total{reason=\"Drifted\"}",
                "karpenter_pods_eviction_requests_total{code=\"200\"}",
                "karpenter_nodes_drained_total{nodepool=\"default\"} 2",
                "karpenter_nodepools_allowed_disruptions{nodepool=\"default\",reason=\"Drifted\"} 1",
            ])
            .await;
        drop(controller);
        reset(&client).await;
    });
}

#[test]
fn a_pdb_holds_the_drain_until_it_is_relaxed() {
    serial(async {
        let client = client().await;
        reset(&client).await;
        let controller = Controller::start("pdb");
        nodeclass(&client).await;
        nodepool(
            &client,
            "default",
            json!({"consolidationPolicy": "WhenEmpty", "consolidateAfter": "Never"}),
            json!({}),
        )
        .await;
        let (ns, claim, node) = node_behind_a_pdb(&client, "pdb").await;
        wait_for("the disruption taint", || async {
            get::<Node>(&client, &node)
                .await
                .filter(|n| has_taint(n, "karpenter.sh/disrupted"))
                .map(|_| ())
        })
        .await;
        // The drain keeps trying (six more evictions, two rounds over the three pods), and the
        // PDB refuses them all.
        wait_for_more(controller.metrics_port, PDB_REFUSED_EVICTIONS, 6).await;
        assert!(
            get::<Node>(&client, &node).await.is_some(),
            "the node stays"
        );
        let held = get::<NodeClaim>(&client, &claim.name_any())
            .await
            .expect("the NodeClaim stays");
        assert!(deleting(&held));
        let on_node = pods(&client, &ns)
            .await
            .iter()
            .filter(|p| node_of(p).as_deref() == Some(node.as_str()))
            .count();
        assert_eq!(on_node, 3, "no pod was evicted past the PDB");
        pdb_api(&client, &ns)
            .patch(
                "app",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"minAvailable": 0}})),
            )
            .await
            .expect("relax the PDB");
        wait_for("the Node to go", || async {
            get::<Node>(&client, &node).await.is_none().then_some(())
        })
        .await;
        wait_for("the NodeClaim to go", || async {
            get::<NodeClaim>(&client, &claim.name_any())
                .await
                .is_none()
                .then_some(())
        })
        .await;
        drop(controller);
        reset(&client).await;
    });
}

#[test]
fn termination_grace_period_forces_completion_despite_the_pdb() {
    serial(async {
        let client = client().await;
        reset(&client).await;
        let controller = Controller::start("tgp");
        nodeclass(&client).await;
        nodepool(
            &client,
            "default",
            json!({"consolidationPolicy": "WhenEmpty", "consolidateAfter": "Never"}),
            json!({"terminationGracePeriod": "20s"}),
        )
        .await;
        let (_ns, claim, node) = node_behind_a_pdb(&client, "tgp").await;
        let deleted = Instant::now();
        let annotated = wait_for("the termination deadline", || async {
            get::<NodeClaim>(&client, &claim.name_any())
                .await?
                .annotations()
                .get("karpenter.sh/nodeclaim-termination-timestamp")
                .cloned()
        })
        .await;
        assert!(
            chrono::DateTime::parse_from_rfc3339(&annotated).is_ok(),
            "{annotated}"
        );
        // The PDB holds the drain until the deadline: the Node goes no earlier. (A lower bound,
        // which load can only make easier to meet; how soon after the deadline it goes is not
        // asserted.)
        wait_for("the Node to go", || async {
            get::<Node>(&client, &node).await.is_none().then_some(())
        })
        .await;
        let took = deleted.elapsed();
        assert!(
            took >= Duration::from_secs(15),
            "not long before the 20 s deadline: {took:?}"
        );
        wait_for("the NodeClaim to go", || async {
            get::<NodeClaim>(&client, &claim.name_any())
                .await
                .is_none()
                .then_some(())
        })
        .await;
        drop(controller);
        reset(&client).await;
    });
}

/// A CSI PersistentVolume named `name` and, when `claim` names one, bound to that
/// PersistentVolumeClaim of `ns` (which is created too).
async fn volume(client: &Client, ns: &str, name: &str, claim: Option<&str>) {
    let pvs: Api<k8s_openapi::api::core::v1::PersistentVolume> = Api::all(client.clone());
    let mut pv = json!({
        "metadata": {"name": name},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Retain",
            "csi": {"driver": "test.csi.k8s.io", "volumeHandle": name},
        },
    });
    if let Some(c) = claim {
        pv["spec"]["claimRef"] = json!({"namespace": ns, "name": c});
        let pvcs: Api<k8s_openapi::api::core::v1::PersistentVolumeClaim> =
            Api::namespaced(client.clone(), ns);
        pvcs.create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": c},
                "spec": {"accessModes": ["ReadWriteOnce"], "volumeName": name,
                         "resources": {"requests": {"storage": "1Gi"}}, "storageClassName": ""},
            }))
            .expect("pvc"),
        )
        .await
        .expect("create PVC");
    }
    pvs.create(
        &PostParams::default(),
        &serde_json::from_value(pv).expect("pv"),
    )
    .await
    .expect("create PV");
}

/// A VolumeAttachment of PersistentVolume `pv` to `node`, as a CSI attacher would make.
async fn attach(client: &Client, name: &str, pv: &str, node: &str) {
    let api: Api<k8s_openapi::api::storage::v1::VolumeAttachment> = Api::all(client.clone());
    api.create(
        &PostParams::default(),
        &serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"attacher": "test.csi.k8s.io", "nodeName": node,
                     "source": {"persistentVolumeName": pv}},
        }))
        .expect("volumeattachment"),
    )
    .await
    .expect("create VolumeAttachment");
}

async fn cleanup_volumes(client: &Client, names: &[&str]) {
    let vas: Api<k8s_openapi::api::storage::v1::VolumeAttachment> = Api::all(client.clone());
    let pvs: Api<k8s_openapi::api::core::v1::PersistentVolume> = Api::all(client.clone());
    for n in names {
        let _ = vas
            .delete(&format!("va-{n}"), &DeleteParams::default())
            .await;
        let _ = pvs.delete(n, &DeleteParams::default()).await;
    }
}

fn condition(claim: &NodeClaim, type_: &str) -> Option<(String, String)> {
    claim
        .status
        .as_ref()?
        .conditions
        .iter()
        .find_map(|c| (c.type_ == type_).then(|| (c.status.clone(), c.reason.clone())))
}

#[test]
fn termination_waits_for_the_volumes_of_drained_pods_to_detach() {
    serial(async {
        let client = client().await;
        reset(&client).await;
        cleanup_volumes(&client, &["pv-drained", "pv-kept"]).await;
        let controller = Controller::start("volumes");
        let ns = namespace(&client, "volumes").await;
        nodeclass(&client).await;
        nodepool(
            &client,
            "default",
            json!({"consolidationPolicy": "WhenEmpty", "consolidateAfter": "Never"}),
            json!({}),
        )
        .await;
        deploy(&client, &ns, "app", 1, "1", json!({})).await;
        let node = wait_for("the pod bound", || async {
            pods(&client, &ns).await.iter().find_map(node_of)
        })
        .await;
        // One volume of a pod the drain moves, one of a pod that stays to the end (it
        // tolerates the disruption taint, as DaemonSet-like agents do).
        volume(&client, &ns, "pv-drained", None).await;
        volume(&client, &ns, "pv-kept", Some("kept")).await;
        Api::<Pod>::namespaced(client.clone(), &ns)
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({
                    "metadata": {"name": "agent"},
                    "spec": {
                        "nodeName": node,
                        "terminationGracePeriodSeconds": 0,
                        "tolerations": [{"key": "karpenter.sh/disrupted", "operator": "Exists"}],
                        "containers": [{"name": "pause", "image": "public.ecr.aws/eks-distro/kubernetes/pause:3.7"}],
                        "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "kept"}}],
                    },
                }))
                .expect("pod"),
            )
            .await
            .expect("create agent pod");
        attach(&client, "va-pv-drained", "pv-drained", &node).await;
        attach(&client, "va-pv-kept", "pv-kept", &node).await;
        let claims: Vec<NodeClaim> = list(&client).await;
        let claim = claims
            .into_iter()
            .find(|c| c.status.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node.as_str()))
            .expect("the node's NodeClaim");
        // The PVC must be bound for the drain to map the kept pod's volume.
        wait_for("the PVC bound", || async {
            Api::<k8s_openapi::api::core::v1::PersistentVolumeClaim>::namespaced(
                client.clone(),
                &ns,
            )
            .get("kept")
            .await
            .ok()?
            .status?
            .phase
            .filter(|p| p == "Bound")
            .map(|_| ())
        })
        .await;
        Api::<NodeClaim>::all(client.clone())
            .delete(&claim.name_any(), &DeleteParams::default())
            .await
            .expect("delete NodeClaim");
        let waiting = wait_for(
            "VolumesDetached=Unknown (AwaitingVolumeDetachment)",
            || async {
                let c = get::<NodeClaim>(&client, &claim.name_any()).await?;
                (condition(&c, "VolumesDetached")
                    == Some(("Unknown".into(), "AwaitingVolumeDetachment".into())))
                .then_some(c)
            },
        )
        .await;
        assert_eq!(
            condition(&waiting, "Drained").map(|(s, _)| s).as_deref(),
            Some("True"),
            "drained before waiting for volumes"
        );
        // More termination passes find the attachment and keep waiting.
        wait_for_more(controller.metrics_port, LIFECYCLE_INSTANCE_LOOKUPS, 3).await;
        assert!(
            get::<Node>(&client, &node).await.is_some(),
            "the attachment of the drained pod's volume holds the node"
        );
        Api::<k8s_openapi::api::storage::v1::VolumeAttachment>::all(client.clone())
            .delete("va-pv-drained", &DeleteParams::default())
            .await
            .expect("detach");
        // The kept pod's attachment does not hold it.
        wait_for("the Node to go", || async {
            get::<Node>(&client, &node).await.is_none().then_some(())
        })
        .await;
        wait_for("the NodeClaim to go", || async {
            get::<NodeClaim>(&client, &claim.name_any())
                .await
                .is_none()
                .then_some(())
        })
        .await;
        drop(controller);
        cleanup_volumes(&client, &["pv-drained", "pv-kept"]).await;
        reset(&client).await;
    });
}

#[test]
fn a_node_whose_nodeclaim_was_removed_by_force_is_collected() {
    serial(async {
        let client = client().await;
        reset(&client).await;
        let controller = Controller::start("orphan-node");
        let ns = namespace(&client, "orphan").await;
        nodeclass(&client).await;
        nodepool(
            &client,
            "default",
            json!({"consolidationPolicy": "WhenEmpty", "consolidateAfter": "Never"}),
            json!({}),
        )
        .await;
        deploy(&client, &ns, "app", 1, "1", json!({})).await;
        let node = wait_for("the pod bound", || async {
            pods(&client, &ns).await.iter().find_map(node_of)
        })
        .await;
        let claims: Vec<NodeClaim> = list(&client).await;
        let claim = claims
            .into_iter()
            .find(|c| c.status.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node.as_str()))
            .expect("the node's NodeClaim");
        // A user strips the NodeClaim's finalizer and deletes it: the Node keeps Karpenter's
        // finalizer with no NodeClaim to finish it.
        let api: Api<NodeClaim> = Api::all(client.clone());
        api.patch(
            &claim.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .expect("strip finalizer");
        api.delete(&claim.name_any(), &DeleteParams::default())
            .await
            .expect("delete NodeClaim");
        assert!(
            get::<Node>(&client, &node).await.is_some_and(|n| n
                .finalizers()
                .iter()
                .any(|f| f == "karpenter.sh/termination")),
            "the node is left with the finalizer"
        );
        // Garbage collection deletes the node, terminates its instance (no NodeClaim owns it)
        // and then releases the finalizer.
        wait_for("the orphaned Node to go", || async {
            get::<Node>(&client, &node).await.is_none().then_some(())
        })
        .await;
        // The pod is planned again on new capacity (once kube-controller-manager's pod garbage
        // collector has removed the pod bound to the vanished node, which takes it up to a
        // minute or two).
        wait_for("the pod bound again", || async {
            pods(&client, &ns)
                .await
                .iter()
                .filter_map(node_of)
                .find(|n| n != &node)
        })
        .await;
        drop(controller);
        reset(&client).await;
    });
}

/// Sets the Node's `Ready` condition to `status`, transitioned `ago` in the past, through the
/// status subresource (there is no kubelet to report otherwise; the stand-in only renews the
/// node Lease).
async fn set_ready(client: &Client, node: &str, status: &str, ago: chrono::Duration) {
    let since = (chrono::Utc::now() - ago).to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    Api::<Node>::all(client.clone())
        .patch_status(
            node,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"conditions": [{
                "type": "Ready", "status": status, "reason": "KubeletNotReady",
                "message": "set by the test", "lastTransitionTime": since, "lastHeartbeatTime": since,
            }]}})),
        )
        .await
        .expect("node status patched");
}

/// The NodeClaim whose Node is `node`.
async fn claim_of_node(client: &Client, node: &str) -> NodeClaim {
    list::<NodeClaim>(client)
        .await
        .into_iter()
        .find(|c| c.status.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node))
        .expect("the node's NodeClaim")
}

#[test]
fn node_repair_replaces_a_node_not_ready_past_its_toleration_and_holds_off_when_too_many_are() {
    serial(async {
        let client = client().await;
        reset(&client).await;
        let controller = Controller::start_with_gates("repair", Some("NodeRepair=true"));
        let ns = namespace(&client, "repair").await;
        nodeclass(&client).await;
        nodepool(
            &client,
            "default",
            json!({"consolidationPolicy": "WhenEmpty", "consolidateAfter": "Never"}),
            json!({}),
        )
        .await;
        // One pod per m5.xlarge.
        deploy(&client, &ns, "app", 1, "3", json!({})).await;
        let sick = wait_for("a bound pod", || async {
            pods(&client, &ns).await.iter().find_map(node_of)
        })
        .await;
        let claim = claim_of_node(&client, &sick).await;
        set_ready(&client, &sick, "False", chrono::Duration::minutes(31)).await;
        wait_for(
            "the unhealthy node's NodeClaim to go and the pod to move",
            || async {
                let gone = get::<NodeClaim>(&client, &claim.name_any()).await.is_none();
                let moved = pods(&client, &ns)
                    .await
                    .iter()
                    .find_map(node_of)
                    .is_some_and(|n| n != sick);
                (gone && moved).then_some(())
            },
        )
        .await;
        wait_for_metrics(
            controller.metrics_port,
            &[
                "karpenter_nodeclaims_disrupted_total{capacity_type=\"on-demand\",consolidation_policy=\"\",nodepool=\"default\",reason=\"unhealthy\"",
                "karpenter_nodeclaims_unhealthy_disrupted_total{capacity_type=\"on-demand\",condition=\"ready\"",
            ],
        )
        .await;

        // Three nodes, two of them unhealthy: more than 20% (1 of 3), so neither is replaced.
        scale(&client, &ns, "app", 3).await;
        wait_for("3 bound pods", || async {
            (bound(&pods(&client, &ns).await) == 3).then_some(())
        })
        .await;
        let mut nodes: Vec<String> = pods(&client, &ns)
            .await
            .iter()
            .filter_map(node_of)
            .collect();
        nodes.sort();
        nodes.dedup();
        assert_eq!(nodes.len(), 3, "one pod per node: {nodes:?}");
        for node in &nodes[..2] {
            set_ready(&client, node, "Unknown", chrono::Duration::minutes(31)).await;
        }
        wait_for("a NodeRepairBlocked event on the NodePool", || async {
            Api::<k8s_openapi::api::events::v1::Event>::all(client.clone())
                .list(&ListParams::default())
                .await
                .ok()?
                .items
                .into_iter()
                .find(|e| {
                    e.reason.as_deref() == Some("NodeRepairBlocked")
                        && e.regarding.as_ref().and_then(|r| r.kind.as_deref()) == Some("NodePool")
                })
        })
        .await;
        for node in &nodes[..2] {
            let claim = claim_of_node(&client, node).await;
            assert!(
                !deleting(&claim),
                "{node} is not repaired while 2 of 3 are unhealthy"
            );
        }
        drop(controller);
        reset(&client).await;
    });
}
