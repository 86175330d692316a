//! The cluster as the disruption engine sees it: nodes with their NodeClaim facts, price and bound
//! pods, pods with what protects them, NodePools and PDBs — built from a snapshot (by the
//! snapshot's disruption adapter) and mutable
//! so `simulate --settle` can apply commands round after round.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use chrono::{DateTime, Utc};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::apis::duration::NillableDuration;
use crate::apis::ec2nodeclass::EC2NodeClass;
use crate::apis::labels;
use crate::apis::nodeclaim::Taint;
use crate::apis::nodepool::NodePool;
use crate::scheduling::instance_type::{CapacityType, InstanceType, node_labels};
use crate::scheduling::pod::{Pod, Selector};
use crate::scheduling::resources::Resources;
use crate::scheduling::scheduler::{
    self, ExistingNode, Input, NodePoolTemplate, Options, Placement,
};

/// What the engine knows about a node's NodeClaim.
#[derive(Clone, Debug, Default)]
pub struct ClaimFacts {
    /// NodeClaim name.
    pub name: String,
    /// NodeClaim annotations (hashes).
    pub annotations: BTreeMap<String, String>,
    /// AMI the instance booted.
    pub image_id: Option<String>,
    /// `spec.terminationGracePeriod`, when set.
    pub termination_grace_period: Option<std::time::Duration>,
    /// `spec.expireAfter`.
    pub expire_after: Option<std::time::Duration>,
    /// `status.lastPodEventTime`.
    pub last_pod_event: Option<DateTime<Utc>>,
    /// When the NodeClaim became Drifted, if the controller already said so.
    pub drifted_since: Option<DateTime<Utc>>,
    /// The `Drifted` condition's reason when the cloud provider found the drift (AMI, subnet,
    /// security groups), which the engine cannot see for itself.
    pub provider_drift: Option<String>,
}

/// A node.
#[derive(Clone, Debug)]
pub struct StateNode {
    /// Node name.
    pub name: Arc<str>,
    /// Its NodePool, when Karpenter manages it.
    pub nodepool: Option<String>,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Node annotations (`karpenter.sh/do-not-disrupt`).
    pub annotations: BTreeMap<String, String>,
    /// Taints.
    pub taints: Vec<Taint>,
    /// Allocatable.
    pub allocatable: Resources,
    /// USD per hour, when the catalog knows the instance type.
    pub price: Option<f64>,
    /// Capacity type.
    pub capacity_type: CapacityType,
    /// When it was created.
    pub created: DateTime<Utc>,
    /// Ready and initialized.
    pub initialized: bool,
    /// Being deleted (the Node or its NodeClaim) or tainted `karpenter.sh/disrupted`: counts
    /// against budgets.
    pub disrupting: bool,
    /// Its NodeClaim, if known.
    pub claim: Option<ClaimFacts>,
}

/// A pod.
#[derive(Clone, Debug)]
pub struct StatePod {
    /// Scheduler view.
    pub pod: Pod,
    /// Node index, when bound.
    pub node: Option<usize>,
    /// When it started (do-not-disrupt durations count from here).
    pub started: DateTime<Utc>,
    /// Succeeded or Failed, or being deleted: holds nothing up.
    pub finished: bool,
}

impl StatePod {
    /// Whether moving the pod needs capacity elsewhere (DaemonSet, mirror and finished pods
    /// do not).
    pub fn reschedulable(&self) -> bool {
        !self.finished && !self.pod.is_daemon() && self.pod.owner_kind.as_deref() != Some("Node")
    }
}

/// A PodDisruptionBudget, resolved to how many more pods it lets go.
#[derive(Clone, Debug)]
pub struct Pdb {
    /// `namespace/name`.
    pub name: String,
    /// Namespace.
    pub namespace: String,
    /// Pod selector.
    pub selector: Selector,
    /// Evictions it allows now.
    pub allowed: i64,
}

/// The engine's cluster.
#[derive(Clone, Debug)]
pub struct State {
    /// NodePools.
    pub nodepools: Vec<NodePool>,
    /// EC2NodeClasses.
    pub nodeclasses: Vec<EC2NodeClass>,
    /// Scheduler templates per NodePool (same names), for replacement simulation.
    pub templates: Vec<NodePoolTemplate>,
    /// The static NodePools' templates, kept out of `templates` (they take no pods): what a
    /// drifted static node's replacement is built from. Empty when unknown, which leaves drifted
    /// static nodes in place.
    pub static_templates: Vec<NodePoolTemplate>,
    /// Nodes.
    pub nodes: Vec<StateNode>,
    /// Pods.
    pub pods: Vec<StatePod>,
    /// PDBs.
    pub pdbs: Vec<Pdb>,
    /// What the provisioner has on its way and still has to place.
    pub waiting: Waiting,
    /// Scheduler options.
    pub options: Options,
}

/// Capacity and pods the provisioner is dealing with, which a disruption must leave room for:
/// upstream's disruption simulation places pending pods (and the pods of nodes already being
/// disrupted) beside the candidates' and counts NodeClaims on their way as capacity. Without
/// them, a candidate's pods are planned into room that pending pods are about to take, the
/// command deletes the node without a big enough replacement, and its evicted pods wait for a
/// provisioning round of their own. Empty in `simulate`, whose plan is applied at once.
#[derive(Clone, Debug, Default)]
pub struct Waiting {
    /// NodeClaims launched whose Node has not registered yet, with the pods planned onto them.
    pub in_flight: Vec<ExistingNode>,
    /// Pending pods no provisioning round has placed yet.
    pub pending: Vec<Pod>,
    /// Nodes provisioning rounds planned pending pods onto, by name (see
    /// [`State::nominated`]).
    pub planned_onto: BTreeSet<String>,
}

pub(crate) fn resolve_int_or_percent(v: &IntOrString, total: i64, round_up: bool) -> i64 {
    match v {
        IntOrString::Int(n) => i64::from(*n),
        IntOrString::String(s) => {
            let p: f64 = s.trim_end_matches('%').parse().unwrap_or(0.0);
            let exact = total as f64 * p / 100.0;
            if round_up {
                exact.ceil() as i64
            } else {
                exact.floor() as i64
            }
        }
    }
}

impl State {
    /// The NodePool named `name`.
    pub fn nodepool(&self, name: &str) -> Option<&NodePool> {
        self.nodepools
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some(name))
    }

    /// Pods bound to node `n`.
    pub fn pods_on(&self, n: usize) -> impl Iterator<Item = &StatePod> {
        self.pods.iter().filter(move |p| p.node == Some(n))
    }

    /// The pods that need room besides a command's candidates' (`excluded`): those still on
    /// nodes being disrupted, and the pending ones.
    pub fn displaced_pods(&self, excluded: &[usize]) -> Vec<Pod> {
        let disrupting = |n: usize| {
            !excluded.contains(&n) && self.nodes.get(n).is_some_and(|node| node.disrupting)
        };
        self.pods
            .iter()
            .filter(|p| p.reschedulable() && p.node.is_some_and(disrupting))
            .map(|p| p.pod.clone())
            .chain(self.waiting.pending.iter().cloned())
            .collect()
    }

    /// The nodes that pods waiting for room are about to be scheduled to (upstream: nominated
    /// nodes): those provisioning rounds planned pending pods onto, and those a simulation
    /// places the pending pods and the pods of nodes being disrupted on now. Such a node is not
    /// empty or underused, only early — typically it just came up for those pods, or is a
    /// replacement whose candidate is still draining — so no voluntary method takes it: taking it
    /// would only make the provisioner launch another.
    pub fn nominated(&self) -> BTreeSet<usize> {
        let mut nominated: BTreeSet<usize> = self
            .nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| self.waiting.planned_onto.contains(n.name.as_ref()))
            .map(|(i, _)| i)
            .collect();
        let pods = self.displaced_pods(&[]);
        if pods.is_empty() {
            return nominated;
        }
        let input = self.scheduler_input(&[], pods);
        let index: BTreeMap<&str, usize> = self
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.name.as_ref(), i))
            .collect();
        for placement in scheduler::solve(&input).placements {
            if let Some(Placement::Existing(k)) = placement
                && let Some(&i) = input
                    .existing
                    .get(k)
                    .and_then(|e| index.get(e.name.as_ref()))
            {
                nominated.insert(i);
            }
        }
        nominated
    }

    /// Scheduler input with the given nodes removed and `pods` to place; NodeClaims on their
    /// way count as existing capacity.
    pub fn scheduler_input(&self, excluded: &[usize], pods: Vec<Pod>) -> Input {
        let kept = |i: usize| !excluded.contains(&i) && !self.nodes[i].disrupting;
        // One pass over the pods, not one per node: the engine builds an input per candidate.
        let mut bound: Vec<Vec<Pod>> = vec![Vec::new(); self.nodes.len()];
        for p in self.pods.iter().filter(|p| !p.finished) {
            if let Some(n) = p.node.filter(|&n| n < bound.len() && kept(n)) {
                bound[n].push(p.pod.clone());
            }
        }
        let existing = self
            .nodes
            .iter()
            .zip(bound)
            .enumerate()
            .filter(|&(i, _)| kept(i))
            .map(|(_, (n, bound))| {
                let mut requested = Resources::default();
                for p in &bound {
                    requested.add(&p.requests);
                }
                ExistingNode {
                    name: n.name.clone(),
                    labels: n.labels.clone(),
                    taints: n.taints.clone(),
                    allocatable: n.allocatable.clone(),
                    requested,
                    pods: bound,
                    initialized: n.initialized,
                    volume_limits: Default::default(),
                }
            })
            .chain(self.waiting.in_flight.iter().cloned())
            .collect();
        Input {
            nodepools: self.templates.clone(),
            existing,
            pods,
            options: self.options,
        }
    }
}

impl State {
    /// The state once `cmd` has started: its candidates are disrupting, its replacements are
    /// NodeClaims on their way (named by `name_of`: the k-th replacement's NodeClaim name) with
    /// the pods the command planned onto them, and the pods `moved` lists (index into `pods`,
    /// index into `nodes`, of this state) are bound where the command planned them. The
    /// candidates' other pods need room elsewhere. Several drift commands of one pass are each
    /// decided, and validated, on the state the ones before them leave: otherwise two would plan
    /// their pods into the same room.
    pub fn start(
        &mut self,
        cmd: &super::Command,
        moved: &[(usize, usize)],
        name_of: impl Fn(usize) -> String,
    ) {
        let mut candidates = BTreeSet::new();
        for (i, node) in self.nodes.iter_mut().enumerate() {
            if cmd
                .candidates
                .iter()
                .any(|c| c.as_str() == node.name.as_ref())
            {
                node.disrupting = true;
                candidates.insert(i);
            }
        }
        for &(p, n) in moved {
            if n < self.nodes.len()
                && let Some(pod) = self.pods.get_mut(p)
            {
                pod.node = Some(n);
            }
        }
        for (k, r) in cmd.replacements.iter().enumerate() {
            let Some(mut node) = self.replacement_in_flight(r, name_of(k)) else {
                continue;
            };
            // Its pods ride on it now; unbound, they are neither on a node nor pending.
            for p in self.pods.iter_mut().filter(|p| {
                p.node.is_some_and(|n| candidates.contains(&n)) && r.pods.contains(&p.pod.key())
            }) {
                node.requested.add(&p.pod.requests);
                node.pods.push(p.pod.clone());
                p.node = None;
            }
            self.waiting.in_flight.push(node);
        }
    }

    /// A replacement as the capacity it will be before its Node registers, as a NodeClaim on its
    /// way is counted (`snapshot::scheduling_input`): the least allocatable of its options, its
    /// pool's taints and DaemonSet overhead, not initialized. `None` when its pool or options
    /// are unknown: the pods then count on no room there.
    fn replacement_in_flight(&self, r: &super::Replacement, name: String) -> Option<ExistingNode> {
        let template = self
            .templates
            .iter()
            .chain(&self.static_templates)
            .find(|t| *t.name == *r.node_pool)?;
        let options: BTreeSet<&str> = r.instance_type_options.iter().map(String::as_str).collect();
        let allocatable = template
            .instance_types
            .iter()
            .filter(|it| options.contains(it.name.as_ref()))
            .map(|it| &it.allocatable)
            .fold(None, |least: Option<Resources>, a| {
                Some(least.map_or_else(|| a.clone(), |l| l.min(a)))
            })?;
        let mut labels_ = r.requirements.labels();
        labels_.insert(labels::NODEPOOL.into(), r.node_pool.clone());
        labels_.insert(labels::HOSTNAME.into(), name.clone());
        Some(ExistingNode {
            name: Arc::from(name),
            labels: labels_,
            taints: template.taints.clone(),
            allocatable,
            requested: template.daemon_overhead.clone(),
            pods: Vec::new(),
            initialized: false,
            volume_limits: Default::default(),
        })
    }
}

/// Node lifetime left as a fraction of `expireAfter` (1 when it never expires), which scales a
/// node's disruption cost so nodes close to expiry are cheaper to disrupt.
pub fn lifetime_remaining(
    node: &StateNode,
    expire_after: &NillableDuration,
    now: DateTime<Utc>,
) -> f64 {
    match expire_after.get() {
        None => 1.0,
        Some(total) if total.as_secs() == 0 => 0.0,
        Some(total) => {
            let age = (now - node.created).num_seconds().max(0) as f64;
            (1.0 - age / total.as_secs() as f64).clamp(0.0, 1.0)
        }
    }
}

impl State {
    /// Adds a node launched for a planned NodeClaim (as `simulate` assumes it launches and
    /// initializes), binds `pods` to it, and returns its index. The node carries the labels the
    /// NodeClaim's requirements and the chosen offering give it, and current hashes.
    #[allow(clippy::too_many_arguments)]
    pub fn launch(
        &mut self,
        name: &str,
        nodepool: &str,
        requirements: &crate::scheduling::requirements::Requirements,
        instance_type: &InstanceType,
        offering: &crate::scheduling::instance_type::Offering,
        pods: &[usize],
        now: DateTime<Utc>,
    ) -> usize {
        let mut labels_ = node_labels(instance_type, offering, requirements);
        labels_.insert(labels::NODEPOOL.into(), nodepool.into());
        labels_.insert(labels::HOSTNAME.into(), name.into());
        labels_.insert(labels::INITIALIZED.into(), "true".into());
        labels_.insert(labels::REGISTERED.into(), "true".into());
        let pool = self.nodepool(nodepool);
        let mut annotations = BTreeMap::new();
        if let Some(pool) = pool {
            annotations.insert(labels::NODEPOOL_HASH.into(), pool.static_hash());
            annotations.insert(
                labels::NODEPOOL_HASH_VERSION.into(),
                crate::apis::hash::NODEPOOL_HASH_VERSION.into(),
            );
            if let Some(class) = self.nodeclasses.iter().find(|c| {
                c.metadata.name.as_deref()
                    == Some(pool.spec.template.spec.node_class_ref.name.as_str())
            }) {
                annotations.insert(labels::EC2NODECLASS_HASH.into(), class.static_hash());
                annotations.insert(
                    labels::EC2NODECLASS_HASH_VERSION.into(),
                    crate::apis::hash::NODECLASS_HASH_VERSION.into(),
                );
            }
        }
        let image_id = pool
            .and_then(|p| {
                self.nodeclasses.iter().find(|c| {
                    c.metadata.name.as_deref()
                        == Some(p.spec.template.spec.node_class_ref.name.as_str())
                })
            })
            .and_then(|c| c.status.as_ref())
            .and_then(|s| s.amis.first())
            .map(|a| a.id.clone());
        let claim = ClaimFacts {
            name: name.to_string(),
            annotations,
            image_id,
            termination_grace_period: pool
                .and_then(|p| p.spec.template.spec.termination_grace_period.as_ref())
                .map(|d| d.get()),
            expire_after: pool.and_then(|p| p.spec.template.spec.expire_after.get()),
            last_pod_event: Some(now),
            drifted_since: None,
            provider_drift: None,
        };
        let taints = pool
            .map(|p| p.spec.template.spec.taints.clone())
            .unwrap_or_default();
        self.nodes.push(StateNode {
            name: Arc::from(name),
            nodepool: Some(nodepool.to_string()),
            labels: labels_,
            annotations: BTreeMap::new(),
            taints,
            allocatable: instance_type.allocatable.clone(),
            price: Some(offering.price),
            capacity_type: offering.capacity_type,
            created: now,
            initialized: true,
            disrupting: false,
            claim: Some(claim),
        });
        let n = self.nodes.len() - 1;
        for &p in pods {
            self.pods[p].node = Some(n);
        }
        n
    }

    /// Removes a node (its instance terminated) and leaves its pods pending, as eviction would.
    /// DaemonSet pods go with the node.
    pub fn remove(&mut self, n: usize) {
        self.pods.retain(|p| p.node != Some(n) || p.reschedulable());
        for p in &mut self.pods {
            match p.node {
                Some(i) if i == n => p.node = None,
                Some(i) if i > n => p.node = Some(i - 1),
                _ => {}
            }
        }
        self.nodes.remove(n);
    }

    /// Hourly cost of all nodes with a known price.
    pub fn cost(&self) -> f64 {
        self.nodes.iter().filter_map(|n| n.price).sum()
    }

    /// Pods waiting for capacity.
    pub fn pending(&self) -> Vec<usize> {
        self.pods
            .iter()
            .enumerate()
            .filter(|(_, p)| p.node.is_none() && p.reschedulable())
            .map(|(i, _)| i)
            .collect()
    }
}
