//! The adapter from a [`Snapshot`] to the scheduler's [`Input`]: NodePool templates with their
//! instance types and DaemonSet overhead, existing nodes and in-flight NodeClaims with their bound
//! pods, and the pending pods with their volume topology. `simulate`, the provisioner and the
//! disruption controller all build their scheduler input here, so they plan alike.

use std::collections::{BTreeMap, HashMap};

use std::sync::Arc;

use k8s_openapi::api::core::v1 as core;
use serde::Serialize;

use crate::apis::ec2nodeclass::EC2NodeClass;
use crate::apis::labels;
use crate::apis::nodeclaim::Operator;
use crate::apis::nodeoverlay;
use crate::apis::nodepool::NodePool;
use crate::catalog::Catalog;
use crate::scheduling::instance_type::{InstanceType, NodeClassSettings, add_reserved_offerings};
use crate::scheduling::overlay::{Overlays, PoolTypes, Verdict};
use crate::scheduling::pod::{Pod, VolumeRef};
use crate::scheduling::requirements::{NodeSelectorExpression, Requirement, Requirements};
use crate::scheduling::resources::{Resources, parse_quantity};
use crate::scheduling::scheduler::{self, ExistingNode, Input, NodePoolTemplate, PoolCache};
use crate::scheduling::static_capacity;
use crate::scheduling::taints::taint_from_k8s;
use crate::snapshot::{ClusterPod, Snapshot};

use super::EngineOptions;

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

/// A NodeOverlay that is not in effect.
#[derive(Clone, Debug, Serialize)]
pub struct OverlayReport {
    /// Its name.
    pub name: String,
    /// Why (a conflict with an overlay of the same weight, or an invalid field).
    pub reason: String,
    /// The `ValidationSucceeded=False` reason it earns: upstream's `Conflict` or
    /// `RuntimeValidation`.
    #[serde(skip)]
    pub condition_reason: &'static str,
}

/// Prepared scheduler input plus what is needed to report on it.
pub struct Prepared {
    /// The scheduler input.
    pub input: Input,
    /// Pods that could not even be converted, with the reason.
    pub invalid_pods: Vec<Unschedulable>,
    /// NodePools left out.
    pub skipped_pools: Vec<NodePoolReport>,
    /// The static NodePools' templates (requirements, instance types, limits), which take no
    /// pending pods: for their own NodeClaims and drift replacements.
    pub static_templates: Vec<NodePoolTemplate>,
    /// NodeOverlays left out (with the `NodeOverlay` gate on), by name.
    pub overlays_not_applied: Vec<OverlayReport>,
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
        let mut types = self.instance_types(&NodeClassSettings::for_nodeclass(nodeclass));
        add_reserved_offerings(
            &mut types,
            &super::reservations::reserved_capacity(nodeclass),
        );
        Arc::new(types)
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

/// Instance types with the caches the solver derives from them.
type TypesAndCache = (Arc<Vec<InstanceType>>, Arc<PoolCache>);

/// The instance types each NodePool sees, fetched once per node class and shared (with the
/// derived caches) by the pools on it; with the `NodeOverlay` gate on and overlays in effect,
/// per pool, the overlays applied ([`Overlays`]) — the one place provider types become the
/// scheduler's, so the provisioner, the disruption engine and `simulate` see the same ones.
struct PoolTypesCache<'a> {
    cluster: &'a Snapshot,
    source: &'a dyn InstanceTypeSource,
    overlays: Option<Overlays>,
    /// The overlays not in effect, with the reason.
    not_applied: Vec<OverlayReport>,
    /// (node class, pool when overlaid) → the types and their derived caches.
    by_key: HashMap<(String, Option<String>), TypesAndCache>,
}

impl<'a> PoolTypesCache<'a> {
    fn new(
        cluster: &'a Snapshot,
        source: &'a dyn InstanceTypeSource,
        options: &EngineOptions,
    ) -> Self {
        let mut cache = Self {
            cluster,
            source,
            overlays: None,
            not_applied: Vec::new(),
            by_key: HashMap::new(),
        };
        if options.node_overlay && !cluster.node_overlays.is_empty() {
            let fetched: Vec<(&NodePool, Arc<Vec<InstanceType>>)> = cluster
                .nodepools
                .iter()
                .map(Arc::as_ref)
                .filter_map(|pool| {
                    let class = cluster.nodeclass_of(pool)?;
                    Some((pool, cache.get(class, None).0))
                })
                .collect();
            let pools: Vec<PoolTypes<'_>> = fetched
                .iter()
                .map(|(pool, types)| PoolTypes {
                    pool: pool.metadata.name.as_deref().unwrap_or_default(),
                    labels: &pool.spec.template.metadata.labels,
                    types,
                })
                .collect();
            let overlays = Overlays::decide(cluster.node_overlays.iter().map(Arc::as_ref), &pools);
            cache.not_applied = overlays
                .verdicts()
                .iter()
                .filter_map(|(name, verdict)| match verdict {
                    Verdict::Applied => None,
                    Verdict::Invalid(reason) => Some(OverlayReport {
                        name: name.clone(),
                        reason: reason.clone(),
                        condition_reason: nodeoverlay::REASON_RUNTIME_VALIDATION,
                    }),
                    Verdict::Conflict(reason) => Some(OverlayReport {
                        name: name.clone(),
                        reason: reason.clone(),
                        condition_reason: nodeoverlay::REASON_CONFLICT,
                    }),
                })
                .collect();
            cache.overlays = (!overlays.is_empty()).then_some(overlays);
        }
        cache
    }

    /// The types `pool` (on `class`) sees; `None` for the class's types as the provider gives them.
    fn get(&mut self, class: &EC2NodeClass, pool: Option<&NodePool>) -> TypesAndCache {
        let class_name = class.metadata.name.clone().unwrap_or_default();
        let base_key = (class_name.clone(), None);
        if !self.by_key.contains_key(&base_key) {
            let types = self.source.for_nodeclass(class);
            self.by_key
                .insert(base_key.clone(), (types, Arc::default()));
        }
        let base = self.by_key.get(&base_key).cloned().unwrap_or_default();
        let (Some(overlays), Some(pool)) = (&self.overlays, pool) else {
            return base;
        };
        let pool_name = pool.metadata.name.clone().unwrap_or_default();
        self.by_key
            .entry((class_name, Some(pool_name.clone())))
            .or_insert_with(|| {
                let types = overlays.apply(&PoolTypes {
                    pool: &pool_name,
                    labels: &pool.spec.template.metadata.labels,
                    types: &base.0,
                });
                (Arc::new(types), Arc::default())
            })
            .clone()
    }

    /// The types a NodeClaim's NodePool sees on its node class (none when the class is unknown).
    fn of_claim(&mut self, claim: &crate::apis::NodeClaim) -> Arc<Vec<InstanceType>> {
        let cluster = self.cluster;
        let Some(class) = cluster.nodeclass(&claim.spec.node_class_ref.name) else {
            return Arc::default();
        };
        let pool = claim
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(labels::NODEPOOL))
            .and_then(|name| {
                cluster
                    .nodepools
                    .iter()
                    .find(|p| p.metadata.name.as_deref() == Some(name))
            });
        self.get(class, pool.map(Arc::as_ref)).0
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

/// The scheduler's view of the pods `bound` holds for the node (or in-flight NodeClaim) `name`.
fn pods_on(cluster: &Snapshot, bound: &BTreeMap<&str, Vec<&ClusterPod>>, name: &str) -> Vec<Pod> {
    bound
        .get(name)
        .into_iter()
        .flatten()
        .filter_map(|p| {
            let mut pod = p.scheduling_pod().ok()?.clone();
            pod.volumes = volumes_of(cluster, p);
            Some(pod)
        })
        .collect()
}

/// `base` plus what `pods` request.
fn requests_of(pods: &[Pod], mut base: Resources) -> Resources {
    for p in pods {
        base.add(&p.requests);
    }
    base
}

/// Whether a NodeClaim is capacity on its way: not deleting, and no Node has registered for it
/// yet (by name or provider ID).
fn is_in_flight(cluster: &Snapshot, claim: &crate::apis::NodeClaim) -> bool {
    super::joins::node_of(&cluster.nodes, claim).is_none()
        && claim.metadata.deletion_timestamp.is_none()
}

/// The taints the scheduler holds against an existing node: its own, less — until Karpenter marks
/// the node of a NodeClaim initialized — the known ephemeral taints and its NodeClaim's startup
/// taints (which something in the cluster removes once the node is ready). Once initialized, or
/// for a node Karpenter does not manage, every taint counts: a taint that comes back later (the
/// node going not-ready, a startup taint re-added) means what it says.
fn scheduling_taints(cluster: &Snapshot, node: &core::Node) -> Vec<crate::apis::nodeclaim::Taint> {
    let initialized = node
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(labels::INITIALIZED))
        .is_some_and(|v| v == "true");
    let coming_up = if initialized {
        None
    } else {
        super::joins::claim_of(&cluster.nodeclaims, node)
    };
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .into_iter()
        .flatten()
        .filter(|t| {
            coming_up.is_none_or(|claim| {
                !super::taints::is_ephemeral(&t.key, &t.effect)
                    && !claim
                        .spec
                        .startup_taints
                        .iter()
                        .any(|s| s.key == t.key && s.effect.as_str() == t.effect)
            })
        })
        .filter_map(|t| taint_from_k8s(t).ok())
        .collect()
}

/// The NodeOverlays not in effect and why, decided exactly as [`prepare`] decides them (the
/// NodeOverlay status controller reports these), without preparing any pod.
pub fn overlays_not_applied(
    cluster: &Snapshot,
    source: &dyn InstanceTypeSource,
    options: &EngineOptions,
) -> Vec<OverlayReport> {
    PoolTypesCache::new(cluster, source, options).not_applied
}

/// Builds the scheduler input from a cluster and the instance types its node classes offer.
pub fn prepare(
    cluster: &Snapshot,
    source: &dyn InstanceTypeSource,
    options: &EngineOptions,
) -> Prepared {
    let bound = cluster.bound_pods();
    let mut invalid_pods = Vec::new();
    let mut skipped_pools = Vec::new();
    let mut types_by_class = PoolTypesCache::new(cluster, source, options);

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
            // A Node always reports capacity; a hand-written one may give only allocatable,
            // which still counts against the pool's limits.
            let status = node.status.as_ref();
            let entry = usage.entry(pool.clone()).or_default();
            entry.0.add(&node_resources(
                status.and_then(|s| s.capacity.as_ref().or(s.allocatable.as_ref())),
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
                let types = types_by_class.of_claim(claim);
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
    let mut static_templates = Vec::new();
    for pool in &cluster.nodepools {
        let name = pool.metadata.name.clone().unwrap_or_default();
        // A static pool keeps its own NodeClaims (`static_pools`); its template is kept apart
        // for what needs its instance types (simulate, drift replacements), never for pods.
        let is_static = super::static_pools::is_static(pool);
        if is_static && !options.static_capacity {
            skipped_pools.push(NodePoolReport {
                name: name.clone(),
                reason: "static NodePool (spec.replicas set): the StaticCapacity feature gate is off, so it gets no NodeClaims".into(),
            });
        }
        let Some(nodeclass) = cluster.nodeclass_of(pool) else {
            if is_static && !options.static_capacity {
                continue;
            }
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
        let (instance_types, cache) = types_by_class.get(nodeclass, Some(pool));
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
        // Entry by entry, so a limit of 0 stays a limit (it stops the pool) and an amount that
        // does not parse blocks the pool rather than lifting every limit
        // (`runtime_validate` reports it).
        let nodes_limit = match static_capacity::nodes_limit(pool) {
            Ok(limit) => limit.map(|l| l.saturating_sub(used_nodes)),
            Err(_) => Some(0),
        };
        let mut limits = Vec::new();
        for (resource, quantity) in pool.spec.limits.iter().flatten() {
            if resource != "nodes" {
                let amount = parse_quantity(resource, &quantity.0).unwrap_or(0);
                limits.push((resource.clone(), amount.saturating_sub(used.get(resource))));
            }
        }
        let template = NodePoolTemplate {
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
        };
        if is_static {
            static_templates.push(template);
        } else {
            nodepools.push(template);
        }
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
        let pods = pods_on(cluster, &bound, &name);
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
        let requested = requests_of(&pods, Resources::default());
        let status = node.status.as_ref();
        let allocatable = node_resources(
            status
                .and_then(|s| s.allocatable.as_ref())
                .or_else(|| status.and_then(|s| s.capacity.as_ref())),
        );
        let ready = super::is_node_ready(node);
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
        let claim_types = types_by_class.of_claim(claim);
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
            .and_then(|p| {
                nodepools
                    .iter()
                    .chain(&static_templates)
                    .find(|t| t.name.as_ref() == p)
            })
            .map(|t| t.daemon_overhead.clone())
            .unwrap_or_default();
        node_labels.insert(labels::HOSTNAME.into(), name.clone());
        // The pods a provisioning round planned onto it (see `Snapshot::nominate`).
        let pods = pods_on(cluster, &bound, &name);
        existing.push(ExistingNode {
            name: Arc::from(name.as_str()),
            labels: node_labels,
            taints: claim.spec.taints.clone(),
            allocatable,
            requested: requests_of(&pods, daemon),
            pods,
            initialized: false,
            volume_limits: Default::default(),
        });
    }

    let pods = scheduling_pods(cluster, cluster.pending_pods(), &mut invalid_pods);

    Prepared {
        input: Input {
            nodepools,
            existing,
            pods,
            options: options.scheduler,
        },
        invalid_pods,
        skipped_pools,
        static_templates,
        overlays_not_applied: types_by_class.not_applied,
    }
}

/// The scheduler's form of `pending` pods, with their volumes' topology; those the provisioner
/// cannot launch for (DRA claims, unreadable specs, volumes not in the input) go to `invalid`
/// with the reason, and DaemonSet and static (mirror) pods, which follow nodes, are left out.
fn scheduling_pods<'a>(
    cluster: &Snapshot,
    pending: impl IntoIterator<Item = &'a ClusterPod>,
    invalid: &mut Vec<Unschedulable>,
) -> Vec<Pod> {
    let pending = pending.into_iter();
    // Sized up front: grown by doubling, 20,000 pods' vector peaked at 3.9 MB instead of 2.4.
    let mut pods = Vec::with_capacity(pending.size_hint().0);
    for p in pending {
        if let Some(reason) = dra_reason(p) {
            invalid.push(Unschedulable {
                pod: p.key(),
                reason,
            });
            continue;
        }
        match p
            .scheduling_pod()
            .map_err(str::to_owned)
            .and_then(|pod| with_volume_topology(cluster, p, pod.clone()))
        {
            Ok(pod) if pod.is_daemon() || pod.owner_kind.as_deref() == Some("Node") => {}
            Ok(pod) => pods.push(pod),
            Err(reason) => invalid.push(Unschedulable {
                pod: p.key(),
                reason,
            }),
        }
    }
    pods
}

/// The pods kube-scheduler has not judged yet ([`Snapshot::awaiting_scheduler`]) in the
/// scheduler's form. The provisioner does not launch for them, but the disruption engine counts
/// the room they are about to take. Those the provisioner could not launch for are left out
/// here; they are reported once kube-scheduler finds no node for them.
pub fn awaiting_scheduler_pods(cluster: &Snapshot) -> Vec<Pod> {
    let mut unreported = Vec::new();
    scheduling_pods(
        cluster,
        cluster.awaiting_scheduler.iter().map(Arc::as_ref),
        &mut unreported,
    )
}

/// Why a pod with dynamic resource allocation claims is not provisioned for: as upstream with its
/// default `IGNORE_DRA_REQUESTS=true`, Karpenter cannot tell which nodes' devices would satisfy
/// the claims, so it leaves such pods to capacity that already has them.
fn dra_reason(pod: &ClusterPod) -> Option<String> {
    let claims = pod
        .spec
        .resource_claims
        .as_deref()
        .filter(|c| !c.is_empty())?;
    let names: Vec<&str> = claims.iter().map(|c| c.name.as_str()).collect();
    Some(format!(
        "pod has dynamic resource allocation claims ({}): Karpenter does not provision nodes for DRA pods (IGNORE_DRA_REQUESTS=true, as upstream); run them on nodes whose devices the DRA driver already publishes",
        names.join(", ")
    ))
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
                        {"key": "readiness.k8s.io/network-ready", "effect": "NoSchedule"},
                        {"key": "example.com/cni-not-ready", "effect": "NoSchedule"},
                        {"key": "dedicated", "value": "db", "effect": "NoSchedule"},
                    ],
                },
            }))
            .expect("node")
        };
        let cluster = Snapshot {
            nodeclaims: vec![Arc::new(claim)],
            ..Snapshot::default()
        };
        let keys = |taints: Vec<crate::apis::nodeclaim::Taint>| -> Vec<String> {
            taints
                .iter()
                .map(|t| format!("{}:{}", t.key, t.effect.as_str()))
                .collect()
        };
        assert_eq!(
            keys(scheduling_taints(&cluster, &node(false))),
            ["dedicated:NoSchedule"]
        );
        assert_eq!(
            keys(scheduling_taints(&cluster, &node(true))),
            [
                "karpenter.sh/unregistered:NoExecute",
                "node.kubernetes.io/not-ready:NoSchedule",
                "node.kubernetes.io/not-ready:NoExecute",
                "readiness.k8s.io/network-ready:NoSchedule",
                "example.com/cni-not-ready:NoSchedule",
                "dedicated:NoSchedule"
            ],
            "once initialized, an ephemeral or startup taint still there is a real one"
        );
        assert_eq!(
            scheduling_taints(&Snapshot::default(), &node(false)).len(),
            6,
            "a node no NodeClaim owns is held to all its taints"
        );
    }
}
