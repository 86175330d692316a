//! The cluster as the disruption engine sees it: nodes with their NodeClaim facts, price and bound
//! pods, pods with what protects them, NodePools and PDBs — built from a [`Cluster`] and mutable
//! so `simulate --settle` can apply commands round after round.

use std::collections::BTreeMap;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::apis::duration::NillableDuration;
use crate::apis::ec2nodeclass::EC2NodeClass;
use crate::apis::labels;
use crate::apis::nodeclaim::{NodeClaim, Taint};
use crate::apis::nodepool::NodePool;
use crate::cluster::Cluster;
use crate::scheduling::instance_type::{CapacityType, InstanceType};
use crate::scheduling::pod::{Pod, Selector};
use crate::scheduling::resources::Resources;
use crate::scheduling::scheduler::{ExistingNode, Input, NodePoolTemplate, Options};
use crate::scheduling::taints::taint_from_k8s;

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
    /// The instance's subnet, as the cloud provider reports it (unknown offline).
    pub subnet_id: Option<String>,
    /// The instance's security groups, as the cloud provider reports them (unknown offline).
    pub security_groups: Option<Vec<String>>,
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
    /// Nodes.
    pub nodes: Vec<StateNode>,
    /// Pods.
    pub pods: Vec<StatePod>,
    /// PDBs.
    pub pdbs: Vec<Pdb>,
    /// Scheduler options.
    pub options: Options,
}

fn resolve_int_or_percent(v: &IntOrString, total: i64, round_up: bool) -> i64 {
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
    /// Builds the state from loaded manifests. `templates` come from the provisioning
    /// preparation (instance types per NodePool).
    pub fn from_cluster(
        cluster: &Cluster,
        templates: Vec<NodePoolTemplate>,
        options: Options,
        now: DateTime<Utc>,
    ) -> Self {
        let by_type: BTreeMap<&str, &InstanceType> = templates
            .iter()
            .flat_map(|t| t.instance_types.iter())
            .map(|it| (it.name.as_ref(), it))
            .collect();
        let mut nodes = Vec::new();
        for node in &cluster.nodes {
            let labels_ = node.metadata.labels.clone().unwrap_or_default();
            let name = node.metadata.name.clone().unwrap_or_default();
            let claim = cluster.nodeclaims.iter().find(|c| {
                let status = c.status.as_ref();
                status.and_then(|s| s.node_name.as_deref()) == Some(name.as_str())
                    || (status.and_then(|s| s.provider_id.as_deref()).is_some()
                        && status.and_then(|s| s.provider_id.as_deref())
                            == node.spec.as_ref().and_then(|s| s.provider_id.as_deref()))
            });
            nodes.push(state_node(node, &labels_, claim, &by_type, now));
        }
        let index: BTreeMap<&str, usize> = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.name.as_ref(), i))
            .collect();
        let mut pods = Vec::new();
        for p in &cluster.pods {
            let Ok(pod) = Pod::from_parts(&p.metadata, &p.spec) else {
                continue;
            };
            let status = p.status.as_deref();
            let phase = status.and_then(|s| s.phase.as_deref());
            let node = p
                .spec
                .node_name
                .as_deref()
                .and_then(|n| index.get(n).copied());
            pods.push(StatePod {
                pod,
                node,
                started: status
                    .and_then(|s| s.start_time.as_ref())
                    .or(p.metadata.creation_timestamp.as_ref())
                    .and_then(|t| DateTime::from_timestamp(t.0.as_second(), 0))
                    .unwrap_or(now),
                finished: matches!(phase, Some("Succeeded" | "Failed"))
                    || p.metadata.deletion_timestamp.is_some(),
            });
        }
        let pdbs = cluster
            .pdbs
            .iter()
            .filter_map(|pdb| resolve_pdb(pdb, &pods))
            .collect();
        Self {
            nodepools: cluster.nodepools.clone(),
            nodeclasses: cluster.nodeclasses.clone(),
            templates,
            nodes,
            pods,
            pdbs,
            options,
        }
    }

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

    /// Scheduler input with the given nodes removed and `pods` to place.
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
            .collect();
        Input {
            nodepools: self.templates.clone(),
            existing,
            pods,
            options: self.options,
        }
    }
}

fn state_node(
    node: &core::Node,
    labels_: &BTreeMap<String, String>,
    claim: Option<&NodeClaim>,
    by_type: &BTreeMap<&str, &InstanceType>,
    now: DateTime<Utc>,
) -> StateNode {
    let status = node.status.as_ref();
    let allocatable = status
        .and_then(|s| s.allocatable.as_ref().or(s.capacity.as_ref()))
        .and_then(|l| Resources::from_list(l).ok())
        .unwrap_or_default();
    let capacity_type = labels_
        .get(labels::CAPACITY_TYPE)
        .and_then(|c| CapacityType::from_label(c))
        .unwrap_or(CapacityType::OnDemand);
    let zone = labels_.get(labels::ZONE);
    let price = labels_
        .get(labels::INSTANCE_TYPE)
        .and_then(|t| by_type.get(t.as_str()))
        .and_then(|it| {
            it.cheapest_offering(|o| {
                o.capacity_type == capacity_type && zone.is_none_or(|z| o.zone.as_ref() == z)
            })
            .or_else(|| it.cheapest_offering(|o| o.capacity_type == capacity_type))
        })
        .map(|o| o.price);
    let taints: Vec<Taint> = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|t| taint_from_k8s(t).ok())
        .collect();
    let ready = status
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    let created = node
        .metadata
        .creation_timestamp
        .as_ref()
        .and_then(|t| DateTime::from_timestamp(t.0.as_second(), 0))
        .unwrap_or(now);
    let claim_facts = claim.map(|c| ClaimFacts {
        name: c.metadata.name.clone().unwrap_or_default(),
        annotations: c.metadata.annotations.clone().unwrap_or_default(),
        image_id: c.status.as_ref().and_then(|s| s.image_id.clone()),
        termination_grace_period: c.spec.termination_grace_period.as_ref().map(|d| d.get()),
        expire_after: c.spec.expire_after.get(),
        last_pod_event: c.status.as_ref().and_then(|s| s.last_pod_event_time),
        drifted_since: c
            .status
            .as_ref()
            .and_then(|s| crate::apis::conditions::find(&s.conditions, "Drifted"))
            .filter(|c| c.status == crate::apis::conditions::TRUE)
            .map(|c| c.last_transition_time),
        provider_drift: c
            .status
            .as_ref()
            .and_then(|s| crate::apis::conditions::find(&s.conditions, "Drifted"))
            .filter(|c| c.status == crate::apis::conditions::TRUE)
            .filter(|c| super::drift::DriftReason::from_provider(&c.reason).is_some())
            .map(|c| c.reason.clone()),
        subnet_id: None,
        security_groups: None,
    });
    StateNode {
        name: Arc::from(node.metadata.name.clone().unwrap_or_default()),
        nodepool: labels_.get(labels::NODEPOOL).cloned(),
        labels: labels_.clone(),
        annotations: node.metadata.annotations.clone().unwrap_or_default(),
        disrupting: node.metadata.deletion_timestamp.is_some()
            || claim.is_some_and(|c| c.metadata.deletion_timestamp.is_some())
            || taints.iter().any(|t| t.key == labels::DISRUPTED_TAINT_KEY),
        taints,
        allocatable,
        price,
        capacity_type,
        created,
        initialized: ready && labels_.get(labels::INITIALIZED).is_none_or(|v| v == "true"),
        claim: claim_facts,
    }
}

fn resolve_pdb(pdb: &PodDisruptionBudget, pods: &[StatePod]) -> Option<Pdb> {
    let namespace = pdb
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    let spec = pdb.spec.as_ref()?;
    let selector = spec
        .selector
        .as_ref()
        .and_then(|s| Selector::from_k8s(s).ok())?;
    let matching: Vec<&StatePod> = pods
        .iter()
        .filter(|p| {
            !p.finished && p.pod.namespace.as_ref() == namespace && selector.matches(&p.pod.labels)
        })
        .collect();
    let expected = matching.len() as i64;
    let healthy = matching.iter().filter(|p| p.node.is_some()).count() as i64;
    let allowed = match pdb
        .status
        .as_ref()
        .map(|s| i64::from(s.disruptions_allowed))
    {
        Some(a)
            if pdb
                .status
                .as_ref()
                .is_some_and(|s| s.observed_generation.is_some()) =>
        {
            a
        }
        _ => {
            if let Some(max) = &spec.max_unavailable {
                resolve_int_or_percent(max, expected, true) - (expected - healthy)
            } else if let Some(min) = &spec.min_available {
                healthy - resolve_int_or_percent(min, expected, true)
            } else {
                healthy - expected
            }
        }
    };
    Some(Pdb {
        name: format!(
            "{namespace}/{}",
            pdb.metadata.name.as_deref().unwrap_or_default()
        ),
        namespace,
        selector,
        allowed,
    })
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
        let mut labels_: BTreeMap<String, String> = requirements.labels();
        for (k, v) in &instance_type.labels {
            labels_.insert((*k).to_string(), v.clone());
        }
        labels_.insert(labels::ZONE.into(), offering.zone.to_string());
        if let Some(id) = &offering.zone_id {
            labels_.insert(labels::ZONE_ID.into(), id.to_string());
        }
        labels_.insert(
            labels::CAPACITY_TYPE.into(),
            offering.capacity_type.label().into(),
        );
        labels_.insert(labels::NODEPOOL.into(), nodepool.into());
        labels_.insert(labels::HOSTNAME.into(), name.into());
        labels_.insert(labels::INITIALIZED.into(), "true".into());
        labels_.insert(labels::REGISTERED.into(), "true".into());
        let pool = self.nodepool(nodepool);
        let mut annotations = BTreeMap::new();
        if let Some(pool) = pool {
            annotations.insert(
                labels::NODEPOOL_HASH.into(),
                super::drift::nodepool_hash(pool),
            );
            annotations.insert(
                labels::NODEPOOL_HASH_VERSION.into(),
                super::drift::NODEPOOL_HASH_VERSION.into(),
            );
            if let Some(class) = self.nodeclasses.iter().find(|c| {
                c.metadata.name.as_deref()
                    == Some(pool.spec.template.spec.node_class_ref.name.as_str())
            }) {
                annotations.insert(
                    labels::EC2NODECLASS_HASH.into(),
                    super::drift::nodeclass_hash(class),
                );
                annotations.insert(
                    labels::EC2NODECLASS_HASH_VERSION.into(),
                    super::drift::NODECLASS_HASH_VERSION.into(),
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
            subnet_id: None,
            security_groups: None,
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
