//! `karpenter-rs simulate`: the provisioning decision the controller would make for a cluster
//! described by manifests, computed offline with the same scheduler `run` uses.
//!
//! This module turns a [`Snapshot`] into the scheduler's input (NodePool templates with their
//! instance types and DaemonSet overhead, existing nodes with their bound pods, pending pods),
//! runs it, and reports every new NodeClaim, every pod's placement and the cost.

use std::collections::{BTreeMap, HashMap, HashSet};

use chrono::{DateTime, Utc};
use std::fmt::Write as _;
use std::sync::Arc;

use k8s_openapi::api::core::v1 as core;
use serde::Serialize;

use crate::apis::duration;
use crate::apis::ec2nodeclass::{AMIFamily, EC2NodeClass};
use crate::apis::labels;
use crate::apis::nodeclaim::Operator;
use crate::apis::nodepool::NodePool;
use crate::catalog::Catalog;
use crate::cloudprovider::first_launch_choice;
use crate::disruption::state::State;
use crate::disruption::{self, Blocked, Command};
use crate::scheduling::instance_type::{CapacityType, InstanceType, NodeClassSettings};
use crate::scheduling::pod::{Pod, VolumeRef};
use crate::scheduling::requirements::{NodeSelectorExpression, Requirement, Requirements};
use crate::scheduling::resources::Resources;
use crate::scheduling::scheduler::{
    self, ExistingNode, Input, NodePoolTemplate, Options, Placement, PoolCache,
};
use crate::scheduling::taints::taint_from_k8s;
use crate::snapshot::{ClusterPod, Snapshot};

/// What `simulate` decided, in the shape `--output json` prints.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// The region whose catalog priced the simulation.
    pub region: String,
    /// NodeClaims the controller would create.
    pub nodeclaims: Vec<NodeClaimReport>,
    /// Pod (`namespace/name`) → node or NodeClaim name, for every placed pod.
    pub placements: BTreeMap<String, String>,
    /// Pods that cannot be placed, with the reason.
    pub unschedulable: Vec<Unschedulable>,
    /// NodePools that cannot provision at all, with the reason.
    pub nodepools: Vec<NodePoolReport>,
    /// Hourly cost.
    pub cost: Cost,
    /// Disruption commands (with `--disruption` or `--settle`), in the order they were taken.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disruptions: Option<Vec<Command>>,
    /// Nodes left alone by the last disruption evaluation, with the reason.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub blocked: Option<Vec<Blocked>>,
    /// Rounds run by `--settle`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rounds: Option<u32>,
}

/// One planned NodeClaim.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeClaimReport {
    /// The name the NodeClaim would get (`<nodepool>-<suffix>`).
    pub name: String,
    /// Its NodePool.
    pub node_pool: String,
    /// The instance type a launch would most likely get: the cheapest option.
    pub instance_type: String,
    /// `spot`, `on-demand` or `reserved`.
    pub capacity_type: String,
    /// The zone of the cheapest offering.
    pub zone: String,
    /// USD per hour of that offering.
    pub price: f64,
    /// Every instance type the launch may use, cheapest first (what CreateFleet gets). Up to
    /// 600 names per NodeClaim: NodeClaims with the same options share one list.
    pub instance_type_options: OptionList,
    /// Pods it will hold (`namespace/name`).
    pub pods: Vec<String>,
    /// Requests of those pods plus DaemonSet overhead.
    pub requests: BTreeMap<String, String>,
    /// Whether `minValues` were relaxed (BestEffort policy).
    pub min_values_relaxed: bool,
}

/// Instance-type names, cheapest first, shared by the NodeClaims that have the same options.
pub type OptionList = Arc<[Arc<str>]>;

/// A pod that stays pending.
#[derive(Clone, Debug, Serialize)]
pub struct Unschedulable {
    /// `namespace/name`.
    pub pod: String,
    /// What to change so it can be scheduled.
    pub reason: String,
}

/// A NodePool that cannot be used.
#[derive(Clone, Debug, Serialize)]
pub struct NodePoolReport {
    /// Its name.
    pub name: String,
    /// Why it is not used.
    pub reason: String,
}

/// Hourly cost in USD.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Cost {
    /// Existing nodes plus new NodeClaims.
    pub per_hour: f64,
    /// Existing nodes whose instance type the catalog knows.
    pub existing_per_hour: f64,
    /// New NodeClaims.
    pub new_per_hour: f64,
    /// With disruption: the cluster after provisioning, before disruption.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub before: Option<f64>,
    /// With disruption: after the disruption commands are carried out.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub after: Option<f64>,
}

/// Simulation settings.
#[derive(Clone, Debug, Default)]
pub struct SimulateOptions {
    /// Scheduler options.
    pub scheduler: Options,
    /// Disruption engine options.
    pub disruption: disruption::Options,
}

/// Prepared scheduler input plus what is needed to report on it.
pub struct Prepared {
    /// The scheduler input.
    pub input: Input,
    /// Pods that could not even be converted, with the reason.
    pub invalid_pods: Vec<Unschedulable>,
    /// NodePools left out.
    pub skipped_pools: Vec<NodePoolReport>,
}

/// Requirements a NodePool's template imposes, with upstream's implicit ones.
pub fn template_requirements(pool: &NodePool) -> Requirements {
    let spec = &pool.spec.template.spec;
    let mut reqs = Requirements::from_node_selector_requirements(&spec.requirements);
    reqs.add(&Requirements::from_labels(
        &pool.spec.template.metadata.labels,
    ));
    reqs.add_requirement(Requirement::new(
        labels::NODEPOOL,
        Operator::In,
        [pool.metadata.name.as_deref().unwrap_or_default()],
        None,
    ));
    // Like upstream's AWS provider, a pool that does not choose a capacity type gets on-demand.
    if reqs.get(labels::CAPACITY_TYPE).is_none() {
        reqs.add_requirement(Requirement::new(
            labels::CAPACITY_TYPE,
            Operator::In,
            [labels::CAPACITY_TYPE_ON_DEMAND],
            None,
        ));
    }
    reqs
}

fn node_resources(
    list: Option<&BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
) -> Resources {
    list.and_then(|l| Resources::from_list(l).ok())
        .unwrap_or_default()
}

/// Where [`prepare`] finds the instance types a node class can launch: the bundled catalog
/// offline, the cloud provider's answers (fetched before the pure core runs) in the controller.
pub trait InstanceTypeSource {
    /// Instance types of a node class, its overhead applied; empty when unknown.
    fn for_nodeclass(&self, nodeclass: &EC2NodeClass) -> Arc<Vec<InstanceType>>;
}

impl InstanceTypeSource for Catalog {
    fn for_nodeclass(&self, nodeclass: &EC2NodeClass) -> Arc<Vec<InstanceType>> {
        Arc::new(self.instance_types(&NodeClassSettings::for_nodeclass(nodeclass)))
    }
}

/// Instance types by EC2NodeClass name, as the controller fetched them from the cloud provider.
impl InstanceTypeSource for HashMap<String, Arc<Vec<InstanceType>>> {
    fn for_nodeclass(&self, nodeclass: &EC2NodeClass) -> Arc<Vec<InstanceType>> {
        nodeclass
            .metadata
            .name
            .as_ref()
            .and_then(|name| self.get(name))
            .cloned()
            .unwrap_or_default()
    }
}

/// The instance types a NodeClaim may become: the one its `node.kubernetes.io/instance-type`
/// label names once launched, else every option its requirements allow.
fn claim_options<'a>(
    claim: &crate::apis::NodeClaim,
    types: &'a [InstanceType],
) -> Vec<&'a InstanceType> {
    if let Some(t) = claim
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(labels::INSTANCE_TYPE))
    {
        return types.iter().filter(|it| *it.name == **t).collect();
    }
    let reqs = Requirements::from_node_selector_requirements(&claim.spec.requirements);
    types
        .iter()
        .filter(|it| {
            reqs.get(labels::INSTANCE_TYPE)
                .is_some_and(|r| r.has(&it.name))
        })
        .collect()
}

/// Whether a NodeClaim is capacity on its way: not deleting, and no Node has registered for it
/// yet (by name or provider ID).
fn is_in_flight(cluster: &Snapshot, claim: &crate::apis::NodeClaim) -> bool {
    let status = claim.status.as_ref();
    let registered = status
        .and_then(|s| s.node_name.as_deref())
        .is_some_and(|n| {
            cluster
                .nodes
                .iter()
                .any(|node| node.metadata.name.as_deref() == Some(n))
        })
        || status
            .and_then(|s| s.provider_id.as_deref())
            .is_some_and(|id| {
                cluster.nodes.iter().any(|node| {
                    node.spec.as_ref().and_then(|s| s.provider_id.as_deref()) == Some(id)
                })
            });
    !registered && claim.metadata.deletion_timestamp.is_none()
}

/// Taints a node is not kept from pods by, as upstream's known ephemeral taints: set while the
/// kubelet or the cloud controller starts up, and Karpenter's own `karpenter.sh/unregistered`,
/// which registration removes. A node carrying one is about to take pods; planning around it
/// would launch a second node for the same pods.
const EPHEMERAL_TAINTS: &[(&str, &str)] = &[
    ("node.kubernetes.io/not-ready", "NoSchedule"),
    ("node.kubernetes.io/unreachable", "NoSchedule"),
    (
        "node.cloudprovider.kubernetes.io/uninitialized",
        "NoSchedule",
    ),
    (labels::UNREGISTERED_TAINT_KEY, "NoExecute"),
];

/// The taints the scheduler holds against an existing node: its own, less the ephemeral ones
/// and, until Karpenter marks it initialized, its NodeClaim's startup taints (which something in
/// the cluster removes once the node is ready).
fn scheduling_taints(cluster: &Snapshot, node: &core::Node) -> Vec<crate::apis::nodeclaim::Taint> {
    let initialized = node
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(labels::INITIALIZED))
        .is_some_and(|v| v == "true");
    let provider_id = node.spec.as_ref().and_then(|s| s.provider_id.as_deref());
    let startup: &[crate::apis::nodeclaim::Taint] = match provider_id {
        Some(id) if !initialized => cluster
            .nodeclaims
            .iter()
            .find(|c| c.status.as_ref().and_then(|s| s.provider_id.as_deref()) == Some(id))
            .map(|c| c.spec.startup_taints.as_slice())
            .unwrap_or_default(),
        _ => &[],
    };
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .into_iter()
        .flatten()
        .filter(|t| {
            !EPHEMERAL_TAINTS.contains(&(t.key.as_str(), t.effect.as_str()))
                && !startup
                    .iter()
                    .any(|s| s.key == t.key && s.effect.as_str() == t.effect)
        })
        .filter_map(|t| taint_from_k8s(t).ok())
        .collect()
}

/// Builds the scheduler input from a cluster and the instance types its node classes offer.
pub fn prepare(
    cluster: &Snapshot,
    source: &dyn InstanceTypeSource,
    options: &SimulateOptions,
) -> Prepared {
    let bound = cluster.bound_pods();
    let mut invalid_pods = Vec::new();
    let mut skipped_pools = Vec::new();
    let mut types_by_class: HashMap<String, (Arc<Vec<InstanceType>>, Arc<PoolCache>)> =
        HashMap::new();

    let daemon_pods: Vec<Pod> = cluster
        .daemonsets
        .iter()
        .filter_map(|ds| {
            let template = ds.spec.as_ref()?.template.clone();
            let pod = core::Pod {
                metadata: template.metadata.unwrap_or_default(),
                spec: template.spec,
                status: None,
            };
            Pod::from_k8s(&pod).ok()
        })
        .collect();

    // Current usage per NodePool, for limits.
    let mut usage: HashMap<String, (Resources, i64)> = HashMap::new();
    for node in &cluster.nodes {
        if let Some(pool) = node
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(labels::NODEPOOL))
        {
            let entry = usage.entry(pool.clone()).or_default();
            entry.0.add(&node_resources(
                node.status.as_ref().and_then(|s| s.capacity.as_ref()),
            ));
            entry.1 += 1;
        }
    }
    // In-flight NodeClaims count against limits too, or rounds before their Nodes register would
    // overshoot: launched ones with their capacity, others with their largest option's.
    for claim in cluster
        .nodeclaims
        .iter()
        .filter(|c| is_in_flight(cluster, c))
    {
        let Some(pool) = claim
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(labels::NODEPOOL))
        else {
            continue;
        };
        let capacity = match claim.status.as_ref().and_then(|s| s.capacity.as_ref()) {
            Some(c) => node_resources(Some(c)),
            None => {
                let types = cluster
                    .nodeclass(&claim.spec.node_class_ref.name)
                    .map(|class| {
                        types_by_class
                            .entry(class.metadata.name.clone().unwrap_or_default())
                            .or_insert_with(|| (source.for_nodeclass(class), Arc::default()))
                            .0
                            .clone()
                    })
                    .unwrap_or_default();
                claim_options(claim, &types)
                    .iter()
                    .fold(Resources::default(), |acc, it| acc.max(&it.capacity))
            }
        };
        let entry = usage.entry(pool.clone()).or_default();
        entry.0.add(&capacity);
        entry.1 += 1;
    }

    let mut nodepools = Vec::new();
    for pool in &cluster.nodepools {
        let name = pool.metadata.name.clone().unwrap_or_default();
        if pool.spec.replicas.is_some() {
            skipped_pools.push(NodePoolReport {
                name,
                reason: "static NodePool (spec.replicas set): not used for pending pods".into(),
            });
            continue;
        }
        let Some(nodeclass) = cluster.nodeclass_of(pool) else {
            let r = &pool.spec.template.spec.node_class_ref;
            skipped_pools.push(NodePoolReport {
                name,
                reason: format!(
                    "its nodeClassRef names {}/{} (group {}), which is not in the input; add the EC2NodeClass manifest",
                    r.kind, r.name, r.group
                ),
            });
            continue;
        };
        // Pools on the same node class share instance types, and so the derived caches.
        let (instance_types, cache) = types_by_class
            .entry(nodeclass.metadata.name.clone().unwrap_or_default())
            .or_insert_with(|| (source.for_nodeclass(nodeclass), Arc::default()))
            .clone();
        let requirements = template_requirements(pool);
        let taints: Vec<_> = pool.spec.template.spec.taints.clone();
        let mut daemon_overhead = Resources::default();
        let mut daemon_host_ports = Vec::new();
        for d in &daemon_pods {
            let d_reqs = Requirements::for_pod(
                &d.node_selector,
                &d.required_terms
                    .first()
                    .map(|t| vec![t.as_slice()])
                    .unwrap_or_default(),
            );
            let tolerated = scheduler::daemon_tolerates(&d.tolerations, &taints);
            if tolerated
                && requirements.is_compatible(
                    &d_reqs,
                    &crate::scheduling::requirements::AllowUndefined::well_known_labels(),
                )
            {
                daemon_overhead.add(&d.requests);
                daemon_host_ports.extend(d.host_ports.iter().cloned());
            }
        }
        let (used, used_nodes) = usage.get(&name).cloned().unwrap_or_default();
        let limits_list = pool
            .spec
            .limits
            .as_ref()
            .and_then(|l| Resources::from_list(l).ok());
        let mut limits = Vec::new();
        let mut nodes_limit = None;
        if let Some(l) = &limits_list {
            for (resource, amount) in l.iter() {
                if resource == "nodes" {
                    nodes_limit = Some(amount.saturating_sub(used_nodes));
                } else {
                    limits.push((
                        resource.to_string(),
                        amount.saturating_sub(used.get(resource)),
                    ));
                }
            }
        }
        nodepools.push(NodePoolTemplate {
            name: Arc::from(name.as_str()),
            weight: pool.spec.weight.unwrap_or(0),
            requirements,
            taints,
            instance_types,
            daemon_overhead,
            daemon_host_ports,
            limits,
            nodes_limit,
            cache,
        });
    }

    let mut existing = Vec::new();
    for node in &cluster.nodes {
        let name = node.metadata.name.clone().unwrap_or_default();
        let spec = node.spec.as_ref();
        if node.metadata.deletion_timestamp.is_some()
            || spec.and_then(|s| s.unschedulable) == Some(true)
        {
            continue;
        }
        let pods: Vec<Pod> = bound
            .get(name.as_str())
            .into_iter()
            .flatten()
            .filter_map(|p| {
                Pod::from_parts(&p.metadata, &p.spec).ok().map(|mut pod| {
                    pod.volumes = volumes_of(cluster, p);
                    pod
                })
            })
            .collect();
        let volume_limits: BTreeMap<String, i64> = cluster
            .csi_nodes
            .iter()
            .filter(|c| c.metadata.name.as_deref() == Some(name.as_str()))
            .flat_map(|c| c.spec.drivers.iter())
            .filter_map(|d| {
                let count = d.allocatable.as_ref()?.count?;
                Some((d.name.clone(), i64::from(count)))
            })
            .collect();
        let mut requested = Resources::default();
        for p in &pods {
            requested.add(&p.requests);
        }
        let status = node.status.as_ref();
        let allocatable = node_resources(
            status
                .and_then(|s| s.allocatable.as_ref())
                .or_else(|| status.and_then(|s| s.capacity.as_ref())),
        );
        let ready = status
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
        existing.push(ExistingNode {
            name: Arc::from(name.as_str()),
            labels: node.metadata.labels.clone().unwrap_or_default(),
            taints: scheduling_taints(cluster, node),
            allocatable,
            requested,
            pods,
            initialized: ready,
            volume_limits,
        });
    }

    // NodeClaims launched (or launching) whose Node has not registered yet are capacity too, as
    // upstream's in-flight nodes: their daemon overhead is expected, their taints apply, startup
    // taints do not.
    for claim in &cluster.nodeclaims {
        let status = claim.status.as_ref();
        if !is_in_flight(cluster, claim) {
            continue;
        }
        let mut node_labels = claim.metadata.labels.clone().unwrap_or_default();
        node_labels.extend(
            Requirements::from_node_selector_requirements(&claim.spec.requirements).labels(),
        );
        let claim_types = cluster
            .nodeclass(&claim.spec.node_class_ref.name)
            .map(|class| {
                types_by_class
                    .entry(class.metadata.name.clone().unwrap_or_default())
                    .or_insert_with(|| (source.for_nodeclass(class), Arc::default()))
                    .0
                    .clone()
            })
            .unwrap_or_default();
        // Not launched yet: count on the least any of its instance types offers, which still
        // holds the pods it was planned for (every option fits them).
        let options = claim_options(claim, &claim_types);
        let allocatable = match status.and_then(|s| s.allocatable.as_ref()) {
            Some(a) => node_resources(Some(a)),
            None => match options.split_first() {
                Some((first, rest)) => rest.iter().fold(first.allocatable.clone(), |acc, it| {
                    acc.min(&it.allocatable)
                }),
                None => continue,
            },
        };
        let name = claim.metadata.name.clone().unwrap_or_default();
        let pool = node_labels.get(labels::NODEPOOL).cloned();
        let daemon = pool
            .and_then(|p| nodepools.iter().find(|t| t.name.as_ref() == p))
            .map(|t| t.daemon_overhead.clone())
            .unwrap_or_default();
        node_labels.insert(labels::HOSTNAME.into(), name.clone());
        existing.push(ExistingNode {
            name: Arc::from(name.as_str()),
            labels: node_labels,
            taints: claim.spec.taints.clone(),
            allocatable,
            requested: daemon,
            pods: Vec::new(),
            initialized: false,
            volume_limits: Default::default(),
        });
    }

    let pending = cluster.pending_pods();
    let mut pods = Vec::with_capacity(pending.len());
    // Replicas carry identical labels: keep one copy per distinct label set.
    let mut label_sets: HashSet<Arc<BTreeMap<String, String>>> = HashSet::new();
    for p in pending {
        match Pod::from_parts(&p.metadata, &p.spec)
            .and_then(|pod| with_volume_topology(cluster, p, pod))
        {
            Ok(pod) if pod.is_daemon() || pod.owner_kind.as_deref() == Some("Node") => {}
            Ok(mut pod) => {
                match label_sets.get(&pod.labels) {
                    Some(shared) => pod.labels = shared.clone(),
                    None => {
                        label_sets.insert(pod.labels.clone());
                    }
                }
                pods.push(pod);
            }
            Err(reason) => invalid_pods.push(Unschedulable {
                pod: p.key(),
                reason,
            }),
        }
    }

    Prepared {
        input: Input {
            nodepools,
            existing,
            pods,
            options: options.scheduler,
        },
        invalid_pods,
        skipped_pools,
    }
}

/// Adds the zone (or other topology) constraints of a pod's persistent volumes to its node
/// requirements: a bound volume's PV node affinity, or an unbound claim's StorageClass
/// `allowedTopologies`, so the node is launched where the volume can attach.
fn with_volume_topology(cluster: &Snapshot, k8s: &ClusterPod, mut pod: Pod) -> Result<Pod, String> {
    pod.volumes = volumes_of(cluster, k8s);
    let namespace = k8s.metadata.namespace.as_deref().unwrap_or("default");
    let volumes = k8s.spec.volumes.as_ref();
    for (i, volume) in volumes.into_iter().flatten().enumerate() {
        let Some(claim_ref) = &volume.persistent_volume_claim else {
            continue;
        };
        let field = format!("spec.volumes[{i}].persistentVolumeClaim.claimName");
        let pvc = cluster
            .persistent_volume_claims
            .iter()
            .find(|c| {
                c.metadata.name.as_deref() == Some(claim_ref.claim_name.as_str())
                    && c.metadata.namespace.as_deref().unwrap_or("default") == namespace
            })
            .ok_or_else(|| {
                format!(
                    "{field}: PersistentVolumeClaim {namespace}/{} is not in the input; add it so its volume's zone is known",
                    claim_ref.claim_name
                )
            })?;
        let spec = pvc.spec.as_ref();
        let terms: Vec<Vec<NodeSelectorExpression>> = match spec
            .and_then(|s| s.volume_name.as_deref())
        {
            Some(pv_name) => {
                let pv = cluster
                    .persistent_volumes
                    .iter()
                    .find(|pv| pv.metadata.name.as_deref() == Some(pv_name))
                    .ok_or_else(|| format!("{field}: PersistentVolume {pv_name} bound to the claim is not in the input"))?;
                pv.spec
                    .as_ref()
                    .and_then(|s| s.node_affinity.as_ref())
                    .and_then(|a| a.required.as_ref())
                    .map(|r| {
                        r.node_selector_terms
                            .iter()
                            .map(|t| {
                                volume_expressions(
                                    t.match_expressions.as_deref().unwrap_or_default(),
                                )
                            })
                            .collect()
                    })
                    .unwrap_or_default()
            }
            None => {
                let class_name = spec.and_then(|s| s.storage_class_name.as_deref());
                let class = class_name.and_then(|n| {
                    cluster
                        .storage_classes
                        .iter()
                        .find(|c| c.metadata.name.as_deref() == Some(n))
                });
                if class.and_then(|c| c.volume_binding_mode.as_deref()) == Some("Immediate") {
                    return Err(format!(
                        "{field}: claim {} uses StorageClass {} with Immediate binding and is not bound yet; Karpenter waits until it is bound to a volume",
                        claim_ref.claim_name,
                        class_name.unwrap_or_default()
                    ));
                }
                class
                    .and_then(|c| c.allowed_topologies.as_ref())
                    .map(|topologies| {
                        topologies
                            .iter()
                            .map(|t| {
                                t.match_label_expressions
                                    .iter()
                                    .flatten()
                                    .map(|e| NodeSelectorExpression {
                                        key: e.key.clone(),
                                        operator: Operator::In,
                                        values: e.values.clone(),
                                    })
                                    .collect()
                            })
                            .collect()
                    })
                    .unwrap_or_default()
            }
        };
        if terms.is_empty() {
            continue;
        }
        // (pod terms) AND (volume terms): every combination of one term from each side.
        let pod_terms = if pod.required_terms.is_empty() {
            vec![Vec::new()]
        } else {
            std::mem::take(&mut pod.required_terms)
        };
        pod.required_terms = pod_terms
            .iter()
            .flat_map(|p| {
                terms.iter().map(move |v| {
                    let mut t = p.clone();
                    t.extend(v.iter().cloned());
                    t
                })
            })
            .collect();
    }
    Ok(pod)
}

/// The CSI volumes a pod mounts: the bound PV's driver, or the claim's StorageClass provisioner
/// while unbound. Claims or volumes missing from the input are skipped here (the topology step
/// reports them).
fn volumes_of(cluster: &Snapshot, k8s: &ClusterPod) -> Vec<VolumeRef> {
    let namespace = k8s.metadata.namespace.as_deref().unwrap_or("default");
    let volumes = k8s.spec.volumes.as_ref();
    volumes
        .into_iter()
        .flatten()
        .filter_map(|v| v.persistent_volume_claim.as_ref())
        .filter_map(|claim_ref| {
            let pvc = cluster.persistent_volume_claims.iter().find(|c| {
                c.metadata.name.as_deref() == Some(claim_ref.claim_name.as_str())
                    && c.metadata.namespace.as_deref().unwrap_or("default") == namespace
            })?;
            let spec = pvc.spec.as_ref()?;
            match spec.volume_name.as_deref() {
                Some(pv_name) => {
                    let pv = cluster
                        .persistent_volumes
                        .iter()
                        .find(|pv| pv.metadata.name.as_deref() == Some(pv_name))?;
                    let driver = pv.spec.as_ref()?.csi.as_ref()?.driver.clone();
                    Some(VolumeRef {
                        driver: Arc::from(driver),
                        id: Arc::from(pv_name),
                    })
                }
                None => {
                    let class = spec.storage_class_name.as_deref().and_then(|n| {
                        cluster
                            .storage_classes
                            .iter()
                            .find(|c| c.metadata.name.as_deref() == Some(n))
                    })?;
                    Some(VolumeRef {
                        driver: Arc::from(class.provisioner.as_str()),
                        id: Arc::from(format!("pvc/{namespace}/{}", claim_ref.claim_name)),
                    })
                }
            }
        })
        .collect()
}

fn volume_expressions(list: &[core::NodeSelectorRequirement]) -> Vec<NodeSelectorExpression> {
    list.iter()
        .filter_map(|e| {
            let operator = match e.operator.as_str() {
                "In" => Operator::In,
                "NotIn" => Operator::NotIn,
                "Exists" => Operator::Exists,
                "DoesNotExist" => Operator::DoesNotExist,
                _ => return None,
            };
            Some(NodeSelectorExpression {
                key: e.key.clone(),
                operator,
                values: e.values.clone().unwrap_or_default(),
            })
        })
        .collect()
}

/// A deterministic five-character suffix, like the API server's generateName.
fn suffix(seed: &str) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in seed.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    (0..5)
        .map(|i| ALPHABET[((h >> (i * 8)) % ALPHABET.len() as u64) as usize] as char)
        .collect()
}

/// Runs provisioning on a cluster.
pub fn simulate(cluster: &Snapshot, catalog: &Catalog, options: &SimulateOptions) -> Report {
    let prepared = prepare(cluster, catalog, options);
    let outcome = scheduler::solve(&prepared.input);
    let input = &prepared.input;
    let mut placements = BTreeMap::new();
    let mut nodeclaims = Vec::new();
    let mut cost = Cost::default();
    let mut option_lists: HashMap<(usize, &[u32]), OptionList> = HashMap::new();
    for (i, planned) in outcome.nodeclaims.iter().enumerate() {
        let pool = &input.nodepools[planned.nodepool];
        let name = format!("{}-{}", pool.name, suffix(&format!("{}/{i}", pool.name)));
        let options: Vec<&InstanceType> = planned
            .instance_types
            .iter()
            .map(|&t| &pool.instance_types[t as usize])
            .collect();
        // The solver kept only options that satisfy the claim's final requirements.
        let chosen = first_launch_choice(options.iter().copied(), &planned.requirements);
        let pods: Vec<String> = planned
            .pods
            .iter()
            .map(|&p| input.pods[p as usize].key())
            .collect();
        for p in &pods {
            placements.insert(p.clone(), name.clone());
        }
        let (instance_type, capacity_type, zone, price) = match chosen {
            Some((it, o)) => (
                it.name.to_string(),
                o.capacity_type.label().to_string(),
                o.zone.to_string(),
                o.price,
            ),
            None => (String::new(), String::new(), String::new(), 0.0),
        };
        cost.new_per_hour += price;
        nodeclaims.push(NodeClaimReport {
            name,
            node_pool: pool.name.to_string(),
            instance_type,
            capacity_type,
            zone,
            price,
            instance_type_options: option_lists
                .entry((planned.nodepool, &planned.instance_types))
                .or_insert_with(|| options.iter().map(|it| it.name.clone()).collect())
                .clone(),
            pods,
            requests: planned
                .requests
                .to_list()
                .into_iter()
                .map(|(k, v)| (k, v.0))
                .collect(),
            min_values_relaxed: planned.min_values_relaxed,
        });
    }
    for (i, placement) in outcome.placements.iter().enumerate() {
        if let Some(Placement::Existing(n)) = placement {
            placements.insert(input.pods[i].key(), input.existing[*n].name.to_string());
        }
    }
    let by_name: HashMap<&str, &InstanceType> = input
        .nodepools
        .iter()
        .flat_map(|p| p.instance_types.iter())
        .map(|it| (it.name.as_ref(), it))
        .collect();
    let fallback = catalog.instance_types(&NodeClassSettings::for_family(AMIFamily::AL2023));
    for node in &input.existing {
        let Some(t) = node.labels.get(labels::INSTANCE_TYPE) else {
            continue;
        };
        let it = by_name
            .get(t.as_str())
            .copied()
            .or_else(|| fallback.iter().find(|it| it.name.as_ref() == t));
        let ct = node
            .labels
            .get(labels::CAPACITY_TYPE)
            .and_then(|c| CapacityType::from_label(c))
            .unwrap_or(CapacityType::OnDemand);
        let zone = node.labels.get(labels::ZONE);
        if let Some(o) = it.and_then(|it| {
            it.cheapest_offering(|o| {
                o.capacity_type == ct && zone.is_none_or(|z| o.zone.as_ref() == z)
            })
        }) {
            cost.existing_per_hour += o.price;
        }
    }
    cost.per_hour = cost.existing_per_hour + cost.new_per_hour;
    let mut unschedulable = prepared.invalid_pods;
    unschedulable.extend(outcome.errors.into_iter().map(|(i, reason)| Unschedulable {
        pod: input.pods[i].key(),
        reason,
    }));
    unschedulable.sort_by(|a, b| a.pod.cmp(&b.pod));
    Report {
        region: catalog.region.clone(),
        nodeclaims,
        placements,
        unschedulable,
        nodepools: prepared.skipped_pools,
        cost,
        disruptions: None,
        blocked: None,
        rounds: None,
    }
}

/// The resolved instance type `name` of NodePool `pool`, as the state's templates know it.
fn instance_type_of(state: &State, pool: &str, name: &str) -> Option<InstanceType> {
    state
        .templates
        .iter()
        .find(|t| t.name.as_ref() == pool)?
        .instance_types
        .iter()
        .find(|t| t.name.as_ref() == name)
        .cloned()
}

/// Materializes a provisioning outcome into the disruption state: planned NodeClaims become
/// launched nodes holding their pods; pods placed on existing nodes are bound there.
fn apply_provisioning(state: &mut State, report: &Report, now: DateTime<Utc>) {
    let keys: HashMap<String, usize> = state
        .pods
        .iter()
        .enumerate()
        .map(|(i, p)| (p.pod.key(), i))
        .collect();
    for claim in &report.nodeclaims {
        let Some(it) = instance_type_of(state, &claim.node_pool, &claim.instance_type) else {
            continue;
        };
        let Some(offering) = it
            .offerings
            .iter()
            .find(|o| {
                o.zone.as_ref() == claim.zone && o.capacity_type.label() == claim.capacity_type
            })
            .cloned()
        else {
            continue;
        };
        let mut reqs = Requirements::new();
        if let Some(pool) = state.nodepool(&claim.node_pool) {
            reqs = template_requirements(pool);
        }
        let pods: Vec<usize> = claim
            .pods
            .iter()
            .filter_map(|p| keys.get(p).copied())
            .collect();
        let name = claim.name.clone();
        let pool = claim.node_pool.clone();
        state.launch(&name, &pool, &reqs, &it, &offering, &pods, now);
    }
    for (pod, node) in &report.placements {
        if let (Some(&p), Some(n)) = (
            keys.get(pod),
            state.nodes.iter().position(|n| n.name.as_ref() == node),
        ) && state.pods[p].node.is_none()
        {
            state.pods[p].node = Some(n);
        }
    }
}

/// The provisioning report and the disruption state of the cluster once its planned NodeClaims
/// have launched and its pods are placed.
fn provisioned(
    cluster: &Snapshot,
    catalog: &Catalog,
    options: &SimulateOptions,
    now: DateTime<Utc>,
) -> (Report, State) {
    let report = simulate(cluster, catalog, options);
    let prepared = prepare(cluster, catalog, options);
    let mut state = State::from_cluster(cluster, prepared.input.nodepools, options.scheduler, now);
    apply_provisioning(&mut state, &report, now);
    (report, state)
}

/// Provisioning followed by disruption: one evaluation, or (`settle`) rounds of provisioning and
/// disruption until nothing changes, the clock advancing by `step` each round, as the
/// controller would behave.
pub fn simulate_with_disruption(
    cluster: &Snapshot,
    catalog: &Catalog,
    options: &SimulateOptions,
    now: DateTime<Utc>,
    settle: Option<std::time::Duration>,
) -> Report {
    let (mut report, mut state) = provisioned(cluster, catalog, options, now);
    let before = state.cost();
    let mut clock = now;
    let mut commands = Vec::new();
    let mut rounds = 0;
    let mut blocked;
    loop {
        rounds += 1;
        let decision = disruption::evaluate(&state, clock, options.disruption);
        blocked = decision.blocked;
        if decision.commands.is_empty() {
            break;
        }
        for cmd in &decision.commands {
            apply_command(&mut state, cmd, clock);
        }
        commands.extend(decision.commands);
        // Pods of removed nodes that no replacement took go back through provisioning.
        let pending = state.pending();
        if !pending.is_empty() {
            let pods: Vec<Pod> = pending.iter().map(|&p| state.pods[p].pod.clone()).collect();
            let input = state.scheduler_input(&[], pods);
            let outcome = scheduler::solve(&input);
            for (k, placement) in outcome.placements.iter().enumerate() {
                if let Some(Placement::Existing(n)) = placement {
                    let name = input.existing[*n].name.clone();
                    if let Some(i) = state.nodes.iter().position(|x| x.name == name) {
                        state.pods[pending[k]].node = Some(i);
                    }
                }
            }
        }
        match settle.map(|step| duration::saturating_add(clock, step)) {
            // A clock that reached the far future cannot advance: settling stops there.
            Some(next) if rounds < 100 && next < duration::NEVER => clock = next,
            _ => break,
        }
    }
    report.cost.before = Some(before);
    report.cost.after = Some(state.cost());
    report.disruptions = Some(commands);
    report.blocked = Some(blocked);
    report.rounds = settle.map(|_| rounds);
    report
}

/// Carries out a command on the state: launch replacements with the candidates' pods, then
/// remove the candidates.
fn apply_command(state: &mut State, cmd: &Command, now: DateTime<Utc>) {
    let candidates: Vec<usize> = cmd
        .candidates
        .iter()
        .filter_map(|name| state.nodes.iter().position(|n| n.name.as_ref() == name))
        .collect();
    for (i, r) in cmd.replacements.iter().enumerate() {
        let Some(it) = instance_type_of(state, &r.node_pool, &r.instance_type) else {
            continue;
        };
        let Some(offering) = it
            .offerings
            .iter()
            .filter(|o| o.capacity_type.label() == r.capacity_type && o.available)
            .min_by(|a, b| a.price.total_cmp(&b.price))
            .cloned()
        else {
            continue;
        };
        let reqs = state
            .nodepool(&r.node_pool)
            .map(template_requirements)
            .unwrap_or_default();
        let pods: Vec<usize> = state
            .pods
            .iter()
            .enumerate()
            .filter(|(_, p)| r.pods.contains(&p.pod.key()))
            .map(|(k, _)| k)
            .collect();
        let name = format!(
            "{}-{}",
            r.node_pool,
            suffix(&format!(
                "{}/{}/{i}",
                cmd.candidates.join(","),
                now.timestamp()
            ))
        );
        let pool = r.node_pool.clone();
        state.launch(&name, &pool, &reqs, &it, &offering, &pods, now);
    }
    let mut sorted = candidates;
    sorted.sort_unstable_by(|a, b| b.cmp(a));
    for n in sorted {
        state.remove(n);
    }
}

impl Report {
    /// A human-readable rendering: one line per NodeClaim, then placements, problems and cost.
    pub fn to_table(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "Region: {}", self.region);
        let _ = writeln!(out);
        if self.nodeclaims.is_empty() {
            let _ = writeln!(out, "No new NodeClaims.");
        } else {
            let _ = writeln!(
                out,
                "{:<28} {:<18} {:<16} {:<10} {:<12} {:>9} {:>5}  OPTIONS",
                "NODECLAIM", "NODEPOOL", "INSTANCE TYPE", "CAPACITY", "ZONE", "$/HOUR", "PODS"
            );
            for c in &self.nodeclaims {
                let shown: Vec<&str> = c
                    .instance_type_options
                    .iter()
                    .take(4)
                    .map(AsRef::as_ref)
                    .collect();
                let more = c.instance_type_options.len().saturating_sub(shown.len());
                let _ = writeln!(
                    out,
                    "{:<28} {:<18} {:<16} {:<10} {:<12} {:>9.4} {:>5}  {}{}",
                    c.name,
                    c.node_pool,
                    c.instance_type,
                    c.capacity_type,
                    c.zone,
                    c.price,
                    c.pods.len(),
                    shown.join(", "),
                    if more > 0 {
                        format!(" (+{more} more)")
                    } else {
                        String::new()
                    }
                );
            }
        }
        let existing =
            self.placements.len() - self.nodeclaims.iter().map(|c| c.pods.len()).sum::<usize>();
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "Pods: {} placed on new NodeClaims, {} on existing nodes, {} unschedulable.",
            self.placements.len() - existing,
            existing,
            self.unschedulable.len()
        );
        for p in &self.nodepools {
            let _ = writeln!(out, "NodePool {} not used: {}", p.name, p.reason);
        }
        for u in &self.unschedulable {
            let _ = writeln!(out, "  unschedulable {}: {}", u.pod, u.reason);
        }
        let _ = writeln!(
            out,
            "Cost: ${:.4}/hour (new ${:.4}, existing ${:.4}); spot prices are estimates.",
            self.cost.per_hour, self.cost.new_per_hour, self.cost.existing_per_hour
        );
        out
    }
}

/// The engine's reasoning for one node after provisioning, for `simulate --explain`.
pub fn explain(
    cluster: &Snapshot,
    catalog: &Catalog,
    options: &SimulateOptions,
    now: DateTime<Utc>,
    node: &str,
) -> Option<disruption::Explanation> {
    let (_, state) = provisioned(cluster, catalog, options, now);
    disruption::explain(&state, now, options.disruption, node)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn ephemeral_and_pending_startup_taints_do_not_keep_pods_off_a_node() {
        let claim: crate::apis::NodeClaim = serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": "c"},
            "spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": [],
                "startupTaints": [{"key": "example.com/cni-not-ready", "effect": "NoSchedule"}],
            },
            "status": {"providerID": "aws:///us-east-1a/i-0123"},
        }))
        .expect("claim");
        let node = |initialized: bool| -> core::Node {
            let labels = if initialized {
                json!({"karpenter.sh/initialized": "true"})
            } else {
                json!({})
            };
            serde_json::from_value(json!({
                "metadata": {"name": "n", "labels": labels},
                "spec": {
                    "providerID": "aws:///us-east-1a/i-0123",
                    "taints": [
                        {"key": "karpenter.sh/unregistered", "effect": "NoExecute"},
                        {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"},
                        {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"},
                        {"key": "example.com/cni-not-ready", "effect": "NoSchedule"},
                        {"key": "dedicated", "value": "db", "effect": "NoSchedule"},
                    ],
                },
            }))
            .expect("node")
        };
        let cluster = Snapshot {
            nodepools: Vec::new(),
            nodeclasses: Vec::new(),
            nodeclaims: vec![claim],
            nodes: Vec::new(),
            pods: Vec::new(),
            daemonsets: Vec::new(),
            pdbs: Vec::new(),
            persistent_volumes: Vec::new(),
            persistent_volume_claims: Vec::new(),
            storage_classes: Vec::new(),
            csi_nodes: Vec::new(),
            ignored: Vec::new(),
        };
        let keys = |taints: Vec<crate::apis::nodeclaim::Taint>| -> Vec<String> {
            taints
                .iter()
                .map(|t| format!("{}:{}", t.key, t.effect.as_str()))
                .collect()
        };
        assert_eq!(
            keys(scheduling_taints(&cluster, &node(false))),
            [
                "node.kubernetes.io/not-ready:NoExecute",
                "dedicated:NoSchedule"
            ]
        );
        assert_eq!(
            keys(scheduling_taints(&cluster, &node(true))),
            [
                "node.kubernetes.io/not-ready:NoExecute",
                "example.com/cni-not-ready:NoSchedule",
                "dedicated:NoSchedule"
            ],
            "once initialized, a startup taint still there is a real one"
        );
    }
}
