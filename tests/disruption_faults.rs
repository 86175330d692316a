//! Fault injection over the disruption machinery: the pure engine, command validation, the
//! drain and garbage collection, driven with the simulated cloud for thousands of seeded steps
//! while pods come and go, launches fail, NodeClaims are lost after their instance launched,
//! and the controller crashes in the middle of commands.
//!
//! The harness plays the API server and kube-scheduler (binding pods first-fit, enforcing the
//! PodDisruptionBudget on evictions as the Eviction API does); the controller's steps are the
//! crate's own functions. After every step: no NodePool has more nodes disrupting than its
//! budget allows, no node is terminated while pods the drain must move are still on it, and the
//! PDB's healthy count never drops below `minAvailable` through the drain. At the end, after
//! garbage collection, no instance is left without a NodeClaim and no NodeClaim without an
//! instance.

use std::collections::HashMap;
use std::sync::Arc;

use chrono::{DateTime, Duration, TimeZone, Utc};
use k8s_openapi::api::core::v1::{Node, Pod, Taint};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use karpenter_rs::apis::{EC2NodeClass, NodeClaim, NodePool};
use karpenter_rs::catalog::Catalog;
use karpenter_rs::clock::{Clock, FakeClock};
use karpenter_rs::cloudprovider::simulated::SimulatedProvider;
use karpenter_rs::cloudprovider::{CloudError, CloudProvider, InstanceState};
use karpenter_rs::cluster::Cluster;
use karpenter_rs::controllers::kubelet::node_for;
use karpenter_rs::disruption::state::State;
use karpenter_rs::disruption::{self, Command, Method, validation};
use karpenter_rs::lifecycle::garbage::orphaned_instances;
use karpenter_rs::lifecycle::termination::{DrainPod, drain_step};
use karpenter_rs::simulate::SimulateOptions;
use serde_json::json;

const MIN_AVAILABLE: usize = 5;
const STEPS: usize = 2000;

/// A small seeded generator (xorshift64*), so a failure replays exactly.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

/// A command in flight: replacements launched, candidates tainted at `since`.
struct InFlight {
    cmd: Command,
    pods_before: std::collections::BTreeMap<String, usize>,
    since: DateTime<Utc>,
}

struct World {
    rng: Rng,
    clock: Arc<FakeClock>,
    cloud: SimulatedProvider,
    pool: NodePool,
    class: EC2NodeClass,
    pdb: PodDisruptionBudget,
    claims: Vec<NodeClaim>,
    nodes: Vec<Node>,
    pods: Vec<Pod>,
    serial: u64,
    inflight: Option<InFlight>,
    options: SimulateOptions,
    types: HashMap<String, Arc<Vec<karpenter_rs::scheduling::instance_type::InstanceType>>>,
    /// Evictions the PDB refused.
    refused: usize,
    /// Instances launched whose NodeClaim was lost.
    lost: usize,
}

fn disrupted(node: &Node) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|t| t.iter().any(|t| t.key == "karpenter.sh/disrupted"))
}

fn node_of(pod: &Pod) -> Option<&str> {
    pod.spec.as_ref()?.node_name.as_deref()
}

fn cpu_of(pod: &Pod) -> f64 {
    pod.spec
        .as_ref()
        .and_then(|s| s.containers.first())
        .and_then(|c| c.resources.as_ref()?.requests.as_ref()?.get("cpu"))
        .and_then(|q| q.0.parse::<f64>().ok())
        .unwrap_or(0.0)
}

fn allocatable_cpu(node: &Node) -> f64 {
    node.status
        .as_ref()
        .and_then(|s| s.allocatable.as_ref()?.get("cpu"))
        .map(|q| {
            let v = &q.0;
            v.strip_suffix('m')
                .and_then(|m| m.parse::<f64>().ok())
                .map(|m| m / 1000.0)
                .or_else(|| v.parse().ok())
                .unwrap_or(0.0)
        })
        .unwrap_or(0.0)
}

impl World {
    async fn new(seed: u64) -> Self {
        let start = Utc.with_ymd_and_hms(2026, 11, 23, 10, 0, 0).unwrap();
        let clock = Arc::new(FakeClock::new(start));
        let catalog = Catalog::bundled("us-east-1").expect("catalog");
        let cloud = SimulatedProvider::new(catalog, clock.clone());
        let mut class: EC2NodeClass = serde_json::from_value(json!({
            "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
            "metadata": {"name": "default"},
            "spec": {"role": "R", "amiSelectorTerms": [{"alias": "al2023@latest"}],
                     "subnetSelectorTerms": [{"tags": {"k": "v"}}],
                     "securityGroupSelectorTerms": [{"tags": {"k": "v"}}]},
        }))
        .expect("class");
        let mut status = cloud.resolve(&class).await.expect("resolves");
        karpenter_rs::apis::conditions::set(
            &mut status.conditions,
            "Ready",
            karpenter_rs::apis::conditions::TRUE,
            "",
            "",
            start,
        );
        class.status = Some(status);
        let pool: NodePool = serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": {"name": "default", "uid": "pool-uid"},
            "spec": {
                "disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized",
                               "consolidateAfter": "0s", "budgets": [{"nodes": "1"}]},
                "template": {"spec": {
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                    "expireAfter": "Never",
                    "requirements": [
                        {"key": "node.kubernetes.io/instance-type", "operator": "In",
                         "values": ["m5.large", "m5.xlarge", "m5.2xlarge"]},
                        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                    ],
                }},
            },
        }))
        .expect("pool");
        let pdb: PodDisruptionBudget = serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"minAvailable": MIN_AVAILABLE, "selector": {"matchLabels": {"app": "web"}}},
        }))
        .expect("pdb");
        // Only the pool's three types: the engine's simulations stay small enough for
        // thousands of steps in a debug build.
        let pool_types: Vec<_> = cloud
            .instance_types(&class)
            .await
            .expect("types")
            .iter()
            .filter(|t| matches!(t.name.as_ref(), "m5.large" | "m5.xlarge" | "m5.2xlarge"))
            .cloned()
            .collect();
        let types = HashMap::from([("default".to_string(), Arc::new(pool_types))]);
        Self {
            rng: Rng(seed),
            clock,
            cloud,
            pool,
            class,
            pdb,
            claims: Vec::new(),
            nodes: Vec::new(),
            pods: Vec::new(),
            serial: 0,
            inflight: None,
            options: SimulateOptions::default(),
            types,
            refused: 0,
            lost: 0,
        }
    }

    fn now(&self) -> DateTime<Utc> {
        self.clock.now()
    }

    fn cluster(&self) -> Cluster {
        Cluster {
            nodepools: vec![self.pool.clone()],
            nodeclasses: vec![self.class.clone()],
            nodeclaims: self.claims.clone(),
            nodes: self.nodes.clone(),
            pods: self.pods.iter().cloned().map(Into::into).collect(),
            pdbs: vec![self.pdb.clone()],
            ..Cluster::default()
        }
    }

    fn state(&self) -> State {
        let cluster = self.cluster();
        let prepared = karpenter_rs::simulate::prepare(&cluster, &self.types, &self.options);
        State::from_cluster(
            &cluster,
            prepared.input.nodepools,
            self.options.scheduler,
            self.now(),
        )
    }

    fn add_pod(&mut self, app: &str, cpu: &str) {
        self.serial += 1;
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": format!("{app}-{}", self.serial), "namespace": "default",
                         "uid": format!("uid-{}", self.serial), "labels": {"app": app},
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                              "name": app, "uid": "rs", "controller": true}]},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]},
            "status": {"phase": "Pending", "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]},
        }))
        .expect("pod");
        self.pods.push(pod);
    }

    fn bind(pod: &mut Pod, node: &str) {
        if let Some(s) = pod.spec.as_mut() {
            s.node_name = Some(node.to_string());
        }
        pod.status = Some(serde_json::from_value(json!({"phase": "Running"})).expect("status"));
    }

    /// What an eviction does to a ReplicaSet pod: it goes, and a pending copy replaces it.
    fn evict(&mut self, name: &str) {
        if let Some(p) = self
            .pods
            .iter_mut()
            .find(|p| p.metadata.name.as_deref() == Some(name))
        {
            if let Some(s) = p.spec.as_mut() {
                s.node_name = None;
            }
            p.status = Some(
                serde_json::from_value(json!({"phase": "Pending", "conditions": [
                    {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}))
                .expect("status"),
            );
        }
    }

    /// kube-scheduler: first fit of pending pods onto untainted nodes with room.
    fn schedule(&mut self) {
        let mut used: HashMap<String, f64> = HashMap::new();
        for p in &self.pods {
            if let Some(n) = node_of(p) {
                *used.entry(n.to_string()).or_default() += cpu_of(p);
            }
        }
        for i in 0..self.pods.len() {
            if node_of(&self.pods[i]).is_some() {
                continue;
            }
            let need = cpu_of(&self.pods[i]);
            let target = self.nodes.iter().find(|n| {
                !disrupted(n)
                    && n.metadata.deletion_timestamp.is_none()
                    && allocatable_cpu(n)
                        - used
                            .get(n.metadata.name.as_deref().unwrap_or(""))
                            .unwrap_or(&0.0)
                        >= need
            });
            if let Some(n) = target.and_then(|n| n.metadata.name.clone()) {
                *used.entry(n.clone()).or_default() += need;
                Self::bind(&mut self.pods[i], &n);
            }
        }
    }

    /// Launches a NodeClaim; with faults the launch fails, or the instance launches but the
    /// NodeClaim is lost (the leak garbage collection must clean up). Returns the node name.
    async fn launch(&mut self, mut claim: NodeClaim) -> Option<String> {
        self.serial += 1;
        claim.metadata.name = Some(format!("default-{}", self.serial));
        if self.rng.chance(5) {
            return None;
        }
        let launched = match self.cloud.create(&claim, &self.class).await {
            Ok(l) => l,
            Err(CloudError::InsufficientCapacity(_)) => return None,
            Err(e) => panic!("launch: {e}"),
        };
        if self.rng.chance(5) {
            self.lost += 1;
            return None; // crashed before the NodeClaim was written: the instance leaks
        }
        let mut labels = claim.metadata.labels.clone().unwrap_or_default();
        labels.extend(launched.labels.clone());
        claim.metadata.labels = Some(labels);
        claim.status = Some(
            serde_json::from_value(json!({
                "providerID": launched.provider_id,
                "capacity": launched.capacity.to_list(),
                "allocatable": launched.allocatable.to_list(),
                "conditions": [
                    {"type": "Launched", "status": "True", "reason": "Launched", "message": "",
                     "lastTransitionTime": self.now()},
                    {"type": "Initialized", "status": "True", "reason": "Initialized", "message": "",
                     "lastTransitionTime": self.now()},
                ],
            }))
            .expect("status"),
        );
        let mut node = node_for(&claim, Some(&self.class), "us-east-1").expect("node");
        let name = node.metadata.name.clone().expect("name");
        if let Some(spec) = node.spec.as_mut() {
            spec.taints = Some(Vec::new());
        }
        node.metadata
            .labels
            .get_or_insert_default()
            .insert("karpenter.sh/initialized".into(), "true".into());
        if let Some(s) = claim.status.as_mut() {
            s.node_name = Some(name.clone());
        }
        self.claims.push(claim);
        self.nodes.push(node);
        Some(name)
    }

    async fn provision(&mut self) {
        self.schedule();
        if self.pods.iter().all(|p| node_of(p).is_some()) {
            return;
        }
        let cluster = self.cluster();
        let plan = karpenter_rs::provisioning::plan(&cluster, &self.types, &self.options);
        for claim in plan.nodeclaims {
            self.launch(claim).await;
        }
        self.schedule();
    }

    fn claim_of_node(&self, node: &str) -> Option<usize> {
        self.claims
            .iter()
            .position(|c| c.status.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node))
    }

    fn set_taint(&mut self, node: &str, on: bool) {
        if let Some(n) = self
            .nodes
            .iter_mut()
            .find(|n| n.metadata.name.as_deref() == Some(node))
        {
            let taints = n
                .spec
                .get_or_insert_default()
                .taints
                .get_or_insert_default();
            taints.retain(|t| t.key != "karpenter.sh/disrupted");
            if on {
                taints.push(Taint {
                    key: "karpenter.sh/disrupted".into(),
                    effect: "NoSchedule".into(),
                    ..Taint::default()
                });
            }
        }
    }

    /// One pass of the disruption controller, possibly crashing mid-command.
    async fn disrupt(&mut self) {
        // Recovery: a tainted node whose NodeClaim is not deleting belongs to no command.
        if self.inflight.is_none() {
            let stale: Vec<String> = self
                .nodes
                .iter()
                .filter(|n| disrupted(n))
                .filter_map(|n| n.metadata.name.clone())
                .filter(|n| {
                    self.claim_of_node(n)
                        .is_some_and(|c| self.claims[c].metadata.deletion_timestamp.is_none())
                })
                .collect();
            for n in stale {
                self.set_taint(&n, false);
            }
        }
        if let Some(f) = self.inflight.take() {
            if self.now() - f.since < Duration::seconds(15) {
                self.inflight = Some(f);
                return;
            }
            if self.rng.chance(10) {
                return; // crashed: the command is forgotten
            }
            let ok =
                validation::validate(&self.state(), &f.cmd, &f.pods_before, self.now()).is_ok();
            for node in &f.cmd.candidates {
                if ok {
                    if let Some(c) = self.claim_of_node(node) {
                        self.claims[c].metadata.deletion_timestamp =
                            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                                k8s_openapi::jiff::Timestamp::from_second(self.now().timestamp())
                                    .expect("ts"),
                            ));
                    }
                } else {
                    self.set_taint(node, false);
                }
            }
            return;
        }
        let state = self.state();
        let decision = disruption::evaluate(&state, self.now(), Default::default());
        let Some(cmd) = decision
            .commands
            .into_iter()
            .find(|c| c.method != Method::Expiration)
        else {
            return;
        };
        for r in &cmd.replacements {
            let options: Vec<serde_json::Value> =
                r.instance_type_options.iter().map(|t| json!(t)).collect();
            let claim: NodeClaim = serde_json::from_value(json!({
                "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
                "metadata": {"labels": {"karpenter.sh/nodepool": "default"}},
                "spec": {
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                    "requirements": [
                        {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": options},
                        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                        {"key": "karpenter.sh/nodepool", "operator": "In", "values": ["default"]},
                    ],
                },
            }))
            .expect("claim");
            if self.launch(claim).await.is_none() {
                return; // replacement failed: nothing tainted yet, nothing to roll back
            }
        }
        if self.rng.chance(10) {
            return; // crashed after launching: the replacements are just spare capacity
        }
        let pods_before = validation::pods_to_move(&state, &cmd);
        for n in &cmd.candidates {
            self.set_taint(n, true);
        }
        self.inflight = Some(InFlight {
            cmd,
            pods_before,
            since: self.now(),
        });
    }

    fn healthy_web(&self) -> usize {
        self.pods
            .iter()
            .filter(|p| {
                node_of(p).is_some()
                    && p.metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get("app"))
                        .map(String::as_str)
                        == Some("web")
            })
            .count()
    }

    /// Termination of deleting NodeClaims: drain (evictions subject to the PDB), then terminate
    /// the instance and release the objects once the cloud reports it gone.
    async fn terminate(&mut self) {
        let deleting: Vec<usize> = (0..self.claims.len())
            .filter(|&i| self.claims[i].metadata.deletion_timestamp.is_some())
            .collect();
        let mut gone = Vec::new();
        for i in deleting {
            let claim = self.claims[i].clone();
            let node = claim
                .status
                .as_ref()
                .and_then(|s| s.node_name.clone())
                .expect("node");
            self.set_taint(&node, true);
            let on_node: Vec<DrainPod> = self
                .pods
                .iter()
                .filter(|p| node_of(p) == Some(node.as_str()))
                .filter_map(DrainPod::from_pod)
                .collect();
            let step = drain_step(&on_node, None, self.now());
            for (_, name) in &step.evict {
                let web = name.starts_with("web-");
                if web && self.healthy_web() <= MIN_AVAILABLE {
                    self.refused += 1;
                    continue; // 429: the PDB allows no disruption now
                }
                self.evict(name);
            }
            assert!(
                step.delete.is_empty(),
                "no deadline, so nothing is deleted early"
            );
            if !step.drained {
                continue;
            }
            assert!(
                !self.pods.iter().any(|p| node_of(p) == Some(node.as_str())),
                "node {node} terminated with pods still on it"
            );
            let id = claim
                .status
                .as_ref()
                .and_then(|s| s.provider_id.clone())
                .expect("id");
            match self.cloud.delete(&id).await {
                Ok(()) | Err(CloudError::NotFound(_)) => {}
                Err(e) => panic!("delete: {e}"),
            }
            let terminated = match self.cloud.get(&id).await {
                Ok(inst) => inst.state == InstanceState::Terminated,
                Err(_) => true,
            };
            if terminated {
                gone.push((claim.metadata.name.clone(), node));
            }
        }
        for (claim, node) in gone {
            self.claims.retain(|c| c.metadata.name != claim);
            self.nodes
                .retain(|n| n.metadata.name.as_deref() != Some(node.as_str()));
        }
    }

    async fn collect_garbage(&mut self) {
        let claims: Vec<Arc<NodeClaim>> = self.claims.iter().cloned().map(Arc::new).collect();
        let instances = self.cloud.list().await.expect("list");
        for id in orphaned_instances(&instances, &claims, self.now()) {
            self.cloud.delete(&id).await.expect("terminate orphan");
        }
    }

    fn disrupting(&self) -> usize {
        self.nodes
            .iter()
            .filter(|n| {
                disrupted(n)
                    || n.metadata
                        .name
                        .as_deref()
                        .and_then(|name| self.claim_of_node(name))
                        .is_some_and(|c| self.claims[c].metadata.deletion_timestamp.is_some())
            })
            .count()
    }

    fn check_budget(&self) {
        let disrupting = self.disrupting();
        assert!(
            disrupting <= 1,
            "budget nodes: 1 exceeded: {disrupting} disrupting"
        );
    }

    /// What `kubectl delete nodeclaim` does to the node with the most web pods: a deletion no
    /// budget governs, which the engine must count against the budget all the same.
    fn user_deletes_a_nodeclaim(&mut self) {
        let busiest = self
            .nodes
            .iter()
            .filter_map(|n| n.metadata.name.clone())
            .max_by_key(|n| {
                self.pods
                    .iter()
                    .filter(|p| node_of(p) == Some(n.as_str()))
                    .filter(|p| {
                        p.metadata
                            .name
                            .as_deref()
                            .is_some_and(|x| x.starts_with("web-"))
                    })
                    .count()
            });
        let now = self.now().timestamp();
        if let Some(c) = busiest.and_then(|n| self.claim_of_node(&n)) {
            self.claims[c].metadata.deletion_timestamp =
                Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    k8s_openapi::jiff::Timestamp::from_second(now).expect("ts"),
                ));
        }
    }
}

#[tokio::test]
async fn thousands_of_faulty_steps_leak_nothing_and_respect_budgets_and_pdbs() {
    let mut w = World::new(0x5eed_1234_abcd_0001).await;
    for _ in 0..MIN_AVAILABLE + 1 {
        w.add_pod("web", "500m");
    }
    let mut commands = 0;
    for step in 0..STEPS {
        w.clock.advance(Duration::seconds(5));
        if w.rng.chance(15) {
            let cpu = ["250m", "1", "1500m"][(w.rng.next() % 3) as usize];
            w.add_pod("batch", cpu);
        }
        if w.rng.chance(15) {
            let batch: Vec<usize> = (0..w.pods.len())
                .filter(|&i| {
                    w.pods[i]
                        .metadata
                        .name
                        .as_deref()
                        .is_some_and(|n| n.starts_with("batch-"))
                })
                .collect();
            if !batch.is_empty() {
                let i = batch[(w.rng.next() as usize) % batch.len()];
                w.pods.remove(i);
            }
        }
        if w.disrupting() == 0 && w.rng.chance(3) {
            w.user_deletes_a_nodeclaim();
        }
        let healthy_before = w.healthy_web();
        w.provision().await;
        let had = w.inflight.is_some();
        w.disrupt().await;
        commands += usize::from(!had && w.inflight.is_some());
        w.check_budget();
        w.terminate().await;
        w.check_budget();
        let healthy = w.healthy_web();
        if healthy_before >= MIN_AVAILABLE {
            assert!(
                healthy >= MIN_AVAILABLE || healthy >= healthy_before,
                "step {step}: the drain took the PDB below minAvailable ({healthy} healthy)"
            );
        }
        w.collect_garbage().await;
    }
    assert!(
        commands > 20,
        "the run exercised disruption: {commands} commands"
    );
    println!(
        "{commands} commands, {} evictions refused by the PDB, {} NodeClaims lost after launch",
        w.refused, w.lost
    );
    assert!(w.lost > 0, "some instances lost their NodeClaim");
    assert!(w.refused > 0, "the PDB held a drain up at least once");
    // Let in-flight work finish and garbage collection's grace pass.
    for _ in 0..40 {
        w.clock.advance(Duration::seconds(5));
        w.terminate().await;
        w.collect_garbage().await;
    }
    let claimed: Vec<String> = w
        .claims
        .iter()
        .filter_map(|c| c.status.as_ref()?.provider_id.clone())
        .collect();
    let running: Vec<String> = w
        .cloud
        .list()
        .await
        .expect("list")
        .into_iter()
        .filter(|i| !i.state.is_terminating())
        .map(|i| i.provider_id)
        .collect();
    for id in &running {
        assert!(claimed.contains(id), "leaked instance {id}");
    }
    for id in &claimed {
        assert!(running.contains(id), "NodeClaim without an instance: {id}");
    }
}
