//! What the cluster-state gauges say about Nodes right now, computed from the reflected
//! objects: `karpenter_nodes_*`, `karpenter_cluster_utilization_percent`, the cloud
//! provider's instance types and offerings and the NodePools' cost, plus the pods' bound and
//! startup durations observed when a pod first binds or becomes ready ([`PodTransitions`]).
//!
//! Pure: objects and the time in, series out. The metrics controller's pass publishes them
//! every five seconds (the instance types every minute), as upstream's node metrics controller
//! does. The per-pod gauges (`karpenter_pods_state`, the pods' unbound and unstarted times and
//! the `karpenter_pods_provisioning_*_time_seconds` families) are not the pass's: they are
//! written from the pod cache when scraped ([`super::pods`], handed the caches once by
//! the metrics controller's `serve_pod_families`), and share the pod helpers here
//! (`condition_status`, `is_started`, `is_managed`, `seconds_since`).

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::{Node, PodSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::node_metric_labels;
use super::pod_scheduling::{PodKey, seconds_between};
use crate::apis::labels;
use crate::scheduling::instance_type::InstanceType;
use crate::scheduling::pod::requests;
use crate::scheduling::resources::{Resources, parse_quantity};
use crate::snapshot::ClusterPod;

/// One gauge series: label values in the family's label order, and the value.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    /// Label values, in the order the family declares its labels. Shared: most values (a
    /// namespace, a node's zone, `true`) repeat over thousands of series, and a pod's name is
    /// the one its cache entry holds.
    pub labels: Vec<Label>,
    /// The gauge's value.
    pub value: f64,
}

/// One label value of a [`Series`].
pub type Label = Arc<str>;

impl Series {
    /// A series of `labels` (anything that becomes a [`Label`]) and `value`.
    pub fn new<L: Into<Label>>(labels: impl IntoIterator<Item = L>, value: f64) -> Self {
        Self {
            labels: labels.into_iter().map(Into::into).collect(),
            value,
        }
    }
}

/// The node families' series (labels: the node labels, node_name, phase, managed, then
/// resource_type where the family has it).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeGauges {
    /// `karpenter_nodes_allocatable`.
    pub allocatable: Vec<Series>,
    /// `karpenter_nodes_total_pod_requests` (DaemonSet pods included).
    pub total_pod_requests: Vec<Series>,
    /// `karpenter_nodes_total_pod_limits`.
    pub total_pod_limits: Vec<Series>,
    /// `karpenter_nodes_total_daemon_requests`.
    pub total_daemon_requests: Vec<Series>,
    /// `karpenter_nodes_total_daemon_limits`.
    pub total_daemon_limits: Vec<Series>,
    /// `karpenter_nodes_system_overhead` (capacity − allocatable).
    pub system_overhead: Vec<Series>,
    /// `karpenter_nodes_current_lifetime_seconds`.
    pub current_lifetime_seconds: Vec<Series>,
    /// `karpenter_cluster_utilization_percent` (resource_type).
    pub cluster_utilization_percent: Vec<Series>,
}

/// upstream's `resource_type` value: the resource name lower-cased, `-` → `_`.
pub fn resource_type(name: &str) -> String {
    name.to_lowercase().replace('-', "_")
}

/// A resource amount as upstream reports it: CPU in cores, everything else in units.
fn scaled(name: &str, amount: i64) -> f64 {
    if name == "cpu" {
        amount as f64 / 1000.0
    } else {
        amount as f64
    }
}

fn resources_of(list: Option<&BTreeMap<String, Quantity>>) -> Resources {
    // A quantity the scheduler cannot parse is left out rather than failing the whole node.
    let mut out = Resources::default();
    for (name, q) in list.into_iter().flatten() {
        if let Ok(amount) = parse_quantity(name, &q.0) {
            out.set(name, amount);
        }
    }
    out
}

/// A pod's effective limits, summed over containers like its requests (see
/// [`crate::scheduling::pod::requests`]); containers without a limit add nothing.
fn limits(spec: &PodSpec) -> Resources {
    let mut sum = Resources::default();
    for c in &spec.containers {
        sum.add(&resources_of(
            c.resources.as_ref().and_then(|r| r.limits.as_ref()),
        ));
    }
    let mut init_peak = Resources::default();
    for c in spec.init_containers.iter().flatten() {
        init_peak = init_peak.max(&resources_of(
            c.resources.as_ref().and_then(|r| r.limits.as_ref()),
        ));
    }
    sum.max(&init_peak)
}

pub(super) fn seconds_since(
    now: DateTime<Utc>,
    t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
) -> f64 {
    let at = t.0.as_millisecond() as f64 / 1000.0;
    (now.timestamp_millis() as f64 / 1000.0 - at).max(0.0)
}

/// The node label values every node family starts with, made once per node and shared by its
/// ~30 series: copied per series, they were most of a metrics pass's heap with 300 nodes.
fn node_labels(node: &Node) -> Vec<Label> {
    let node_labels = node.metadata.labels.as_ref();
    let mut out: Vec<Label> = node_metric_labels()
        .into_iter()
        .map(|(key, _)| {
            Label::from(
                node_labels
                    .and_then(|l| l.get(key))
                    .map_or("", String::as_str),
            )
        })
        .collect();
    out.push(Label::from(
        node.metadata.name.as_deref().unwrap_or_default(),
    ));
    out.push(Label::from(
        node.status
            .as_ref()
            .and_then(|s| s.phase.as_deref())
            .unwrap_or_default(),
    ));
    out.push(Label::from(is_managed(node).to_string()));
    out
}

/// Whether Karpenter manages the node (it belongs to a NodePool).
pub(super) fn is_managed(node: &Node) -> bool {
    node.metadata
        .labels
        .as_ref()
        .is_some_and(|l| l.contains_key(labels::NODEPOOL))
}

fn with_resource(labels: &[Label], name: &str) -> Vec<Label> {
    let mut out = labels.to_vec();
    out.push(Label::from(resource_type(name)));
    out
}

/// The node families for `nodes` with `pods` (bound, unfinished pods count on their node).
pub fn node_gauges(
    nodes: &[Arc<Node>],
    pods: &[Arc<ClusterPod>],
    now: DateTime<Utc>,
) -> NodeGauges {
    #[derive(Default)]
    struct OnNode {
        requests: Resources,
        limits: Resources,
        daemon_requests: Resources,
        daemon_limits: Resources,
    }
    let mut by_node: BTreeMap<&str, OnNode> = BTreeMap::new();
    for pod in pods {
        let Some(node) = pod.node_name() else {
            continue;
        };
        let spec = &pod.spec;
        if pod.is_terminal() {
            continue;
        }
        let entry = by_node.entry(node).or_default();
        let (req, lim) = (requests(spec).unwrap_or_default(), limits(spec));
        entry.requests.add(&req);
        entry.limits.add(&lim);
        if crate::snapshot::is_daemon_pod(&pod.metadata) {
            entry.daemon_requests.add(&req);
            entry.daemon_limits.add(&lim);
        }
    }
    let mut out = NodeGauges::default();
    let (mut all_allocatable, mut all_requests) = (Resources::default(), Resources::default());
    for node in nodes {
        let base = node_labels(node);
        let status = node.status.as_ref();
        let allocatable = resources_of(status.and_then(|s| s.allocatable.as_ref()));
        let capacity = resources_of(status.and_then(|s| s.capacity.as_ref()));
        let empty = OnNode::default();
        let on = by_node
            .get(node.metadata.name.as_deref().unwrap_or_default())
            .unwrap_or(&empty);
        let mut overhead = capacity.clone();
        overhead.sub(&allocatable);
        for (family, resources) in [
            (&mut out.allocatable, &allocatable),
            (&mut out.total_pod_requests, &on.requests),
            (&mut out.total_pod_limits, &on.limits),
            (&mut out.total_daemon_requests, &on.daemon_requests),
            (&mut out.total_daemon_limits, &on.daemon_limits),
            (&mut out.system_overhead, &overhead),
        ] {
            for (name, amount) in resources.iter() {
                family.push(Series::new(
                    with_resource(&base, name),
                    scaled(name, amount),
                ));
            }
        }
        if let Some(created) = node.metadata.creation_timestamp.as_ref() {
            out.current_lifetime_seconds
                .push(Series::new(base.clone(), seconds_since(now, created)));
        }
        all_allocatable.add(&allocatable);
        all_requests.add(&on.requests);
    }
    for (name, allocated) in all_allocatable.iter() {
        if allocated > 0 {
            out.cluster_utilization_percent.push(Series::new(
                vec![resource_type(name)],
                100.0 * all_requests.get(name) as f64 / allocated as f64,
            ));
        }
    }
    out
}

/// The status of the pod's condition `type_`, if it has one.
pub(super) fn condition_status<'a>(pod: &'a ClusterPod, type_: &str) -> Option<&'a str> {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == type_))
        .map(|c| c.status.as_str())
}

fn condition_since(pod: &ClusterPod, type_: &str) -> Option<f64> {
    let c = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == type_ && c.status == "True"))?;
    let at = c.last_transition_time.as_ref()?;
    let created = pod.metadata.creation_timestamp.as_ref()?;
    Some(((at.0.as_millisecond() - created.0.as_millisecond()) as f64 / 1000.0).max(0.0))
}

/// When the pod's condition `type_` last became True.
fn condition_time(pod: &ClusterPod, type_: &str) -> Option<DateTime<Utc>> {
    let c = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == type_ && c.status == "True"))?;
    DateTime::from_timestamp_millis(c.last_transition_time.as_ref()?.0.as_millisecond())
}

/// Whether the pod is Ready.
pub(super) fn is_started(pod: &ClusterPod) -> bool {
    condition_status(pod, "Ready") == Some("True")
}

/// Pods seen before they bound or started, so that the bound and startup durations are
/// observed once per pod, when the change is seen (a restarted controller does not report pods
/// that were already running). Keyed by the converted pod's UID, shared with the pod cache: at
/// 20,000 pods a `String` per pod in each set held 3.1 MB.
#[derive(Debug, Default)]
pub struct PodTransitions {
    unbound: HashSet<Arc<str>>,
    unstarted: HashSet<Arc<str>>,
}

/// Durations observed by one [`PodTransitions::observe`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PodDurations {
    /// Seconds from creation to binding (`karpenter_pods_bound_duration_seconds`).
    pub bound: Vec<f64>,
    /// Seconds from creation to Ready (`karpenter_pods_startup_duration_seconds`).
    pub started: Vec<f64>,
    /// Seconds from the provisioner finding a place to binding
    /// (`karpenter_pods_provisioning_bound_duration_seconds`).
    pub provisioning_bound: Vec<f64>,
    /// Seconds from the provisioner finding a place to Ready
    /// (`karpenter_pods_provisioning_startup_duration_seconds`).
    pub provisioning_started: Vec<f64>,
    /// Pods (`namespace/name`) that started or finished: their provisioning times are done with.
    pub done: HashSet<PodKey>,
}

impl PodTransitions {
    /// Notes which pods are still unbound or unstarted and returns the durations of those that
    /// bound or started since the last call.
    ///
    /// `schedulable` says when the provisioner found each pod (by `namespace/name`) a place, for
    /// the provisioning durations.
    pub fn observe(
        &mut self,
        pods: &[Arc<ClusterPod>],
        schedulable: impl Fn(&PodKey) -> Option<DateTime<Utc>>,
    ) -> PodDurations {
        let mut out = PodDurations::default();
        let mut unbound = HashSet::new();
        let mut unstarted = HashSet::new();
        for pod in pods {
            let key = PodKey::of_cached(pod);
            if pod.is_terminal() || pod.metadata.deletion_timestamp.is_some() {
                out.done.insert(key);
                continue;
            }
            // A pod the scheduler cannot read (its conversion names the bad field) is keyed by
            // its own UID.
            let uid = match pod.scheduling_pod() {
                Ok(p) => p.uid.clone(),
                Err(_) => match pod.metadata.uid.as_deref() {
                    Some(uid) => Arc::from(uid),
                    None => continue,
                },
            };
            let since = |type_: &str| {
                Some(seconds_between(
                    schedulable(&key)?,
                    condition_time(pod, type_)?,
                ))
            };
            if pod.node_name().is_none() {
                unbound.insert(uid.clone());
            } else if self.unbound.contains(&uid)
                && let Some(d) = condition_since(pod, "PodScheduled")
            {
                out.bound.push(d);
                out.provisioning_bound.extend(since("PodScheduled"));
            }
            if !is_started(pod) {
                unstarted.insert(uid);
            } else {
                if self.unstarted.contains(&uid)
                    && let Some(d) = condition_since(pod, "Ready")
                {
                    out.started.push(d);
                    out.provisioning_started.extend(since("Ready"));
                }
                out.done.insert(key);
            }
        }
        self.unbound = unbound;
        self.unstarted = unstarted;
        out
    }
}

/// The instance-type families of the cloud provider's offerings:
/// `karpenter_cloudprovider_instance_type_offering_available` and `_price_estimate`
/// (instance_type, capacity_type, zone), `_cpu_cores` and `_memory_bytes` (instance_type).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct InstanceTypeGauges {
    /// 1 when the offering can be launched now, else 0.
    pub offering_available: Vec<Series>,
    /// The offering's hourly price.
    pub offering_price_estimate: Vec<Series>,
    /// vCPUs per instance type.
    pub cpu_cores: Vec<Series>,
    /// Memory bytes per instance type.
    pub memory_bytes: Vec<Series>,
}

/// The instance-type families for every type of every node class (a type offered to several
/// node classes appears once).
pub fn instance_type_gauges<'a>(
    types: impl IntoIterator<Item = &'a InstanceType>,
) -> InstanceTypeGauges {
    let mut out = InstanceTypeGauges::default();
    let mut seen = HashSet::new();
    for it in types {
        if !seen.insert(it.name.to_string()) {
            continue;
        }
        let name = it.name.to_string();
        out.cpu_cores.push(Series::new(
            vec![name.clone()],
            it.capacity.get("cpu") as f64 / 1000.0,
        ));
        out.memory_bytes.push(Series::new(
            vec![name.clone()],
            it.capacity.get("memory") as f64,
        ));
        for o in &it.offerings {
            let labels = vec![
                name.clone(),
                o.capacity_type.label().to_string(),
                o.zone.to_string(),
            ];
            out.offering_available.push(Series::new(
                labels.clone(),
                if o.available { 1.0 } else { 0.0 },
            ));
            out.offering_price_estimate
                .push(Series::new(labels, o.price));
        }
    }
    out
}

/// What `karpenter_nodepools_cost_total` says: each NodePool's hourly cost from Karpenter's
/// view, the offering prices of its NodeClaims' launched instances.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodePoolCosts {
    /// Cost per NodePool (labels: nodepool); every NodePool named in `pools` has one, 0 when it
    /// has no launched NodeClaim.
    pub cost: Vec<Series>,
    /// NodeClaims (nodepool, name) whose launched offering has no price among their node class'
    /// instance types (`karpenter_nodepools_cost_tracker_errors_total`).
    pub unpriced: Vec<(String, String)>,
}

/// The cost of each NodePool: for every NodeClaim launched from it (instance type, capacity
/// type and zone labels set), the price of that offering among the instance types of its
/// EC2NodeClass (`types`, by class name). NodeClaims not launched yet cost nothing.
pub fn nodepool_costs(
    pools: &[String],
    claims: &[Arc<crate::apis::NodeClaim>],
    types: &std::collections::HashMap<String, Arc<Vec<InstanceType>>>,
) -> NodePoolCosts {
    let mut cost: BTreeMap<String, f64> = pools.iter().map(|p| (p.clone(), 0.0)).collect();
    let mut unpriced = Vec::new();
    for claim in claims {
        let labels = claim.metadata.labels.as_ref();
        let label = |key: &str| labels.and_then(|l| l.get(key)).map(String::as_str);
        let Some(pool) = label(labels::NODEPOOL) else {
            continue;
        };
        let (Some(instance_type), Some(capacity_type), Some(zone)) = (
            label(labels::INSTANCE_TYPE),
            label(labels::CAPACITY_TYPE),
            label(labels::ZONE),
        ) else {
            continue;
        };
        let price = types
            .get(&claim.spec.node_class_ref.name)
            .and_then(|types| types.iter().find(|t| &*t.name == instance_type))
            .and_then(|t| {
                t.offerings
                    .iter()
                    .find(|o| &*o.zone == zone && o.capacity_type.label() == capacity_type)
            })
            .map(|o| o.price);
        match price {
            Some(price) => *cost.entry(pool.to_string()).or_default() += price,
            None => unpriced.push((
                pool.to_string(),
                claim.metadata.name.clone().unwrap_or_default(),
            )),
        }
    }
    NodePoolCosts {
        cost: cost
            .into_iter()
            .map(|(pool, c)| Series::new(vec![pool], c))
            .collect(),
        unpriced,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use serde_json::json;

    fn now() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 1, 1, 0, 1, 40)
            .single()
            .expect("valid time")
    }

    fn node() -> Arc<Node> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": "n1", "creationTimestamp": "2026-01-01T00:00:00Z",
                    "labels": {"karpenter.sh/nodepool": "default", "topology.kubernetes.io/zone": "us-east-1a"}},
                "status": {"capacity": {"cpu": "4", "memory": "16Gi", "pods": "58"},
                    "allocatable": {"cpu": "3920m", "memory": "15Gi", "pods": "58"}}
            }))
            .expect("a node"),
        )
    }

    fn pod(name: &str, node: Option<&str>, ready: bool, daemon: bool) -> Arc<ClusterPod> {
        let owners = if daemon {
            json!([{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds", "uid": "d", "controller": true}])
        } else {
            json!([{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-1", "uid": "r", "controller": true}])
        };
        let mut conditions = vec![];
        if node.is_some() {
            conditions.push(json!({"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-01-01T00:00:10Z"}));
        }
        conditions.push(json!({"type": "Ready", "status": if ready { "True" } else { "False" }, "lastTransitionTime": "2026-01-01T00:00:30Z"}));
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "ns", "uid": name,
                    "creationTimestamp": "2026-01-01T00:00:00Z", "ownerReferences": owners},
                "spec": {"nodeName": node, "containers": [{"name": "c",
                    "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"memory": "2Gi"}}}]},
                "status": {"phase": if node.is_some() { "Running" } else { "Pending" }, "conditions": conditions}
            }))
            .expect("a pod"),
        )
    }

    fn value(series: &[Series], last_labels: &[&str]) -> Option<f64> {
        series
            .iter()
            .find(|s| {
                s.labels.ends_with(
                    &last_labels
                        .iter()
                        .map(|l| Label::from(*l))
                        .collect::<Vec<_>>(),
                )
            })
            .map(|s| s.value)
    }

    #[test]
    fn node_families_sum_the_pods_bound_to_each_node() {
        let pods = [
            pod("web", Some("n1"), true, false),
            pod("agent", Some("n1"), true, true),
            pod("pending", None, false, false),
        ];
        let g = node_gauges(&[node()], &pods, now());
        let tail = |r: &str| ["n1", "", "true", r].map(String::from);
        let get = |s: &[Series], r: &str| value(s, &tail(r).each_ref().map(String::as_str));
        assert_eq!(get(&g.allocatable, "cpu"), Some(3.92));
        assert_eq!(get(&g.total_pod_requests, "cpu"), Some(1.0));
        assert_eq!(
            get(&g.total_pod_requests, "memory"),
            Some(2.0 * 1024.0 * 1024.0 * 1024.0)
        );
        assert_eq!(get(&g.total_daemon_requests, "cpu"), Some(0.5));
        assert_eq!(
            get(&g.total_pod_limits, "memory"),
            Some(4.0 * 1024.0 * 1024.0 * 1024.0)
        );
        assert_eq!(get(&g.system_overhead, "cpu"), Some(0.08));
        assert_eq!(
            get(&g.system_overhead, "memory"),
            Some(1024.0 * 1024.0 * 1024.0)
        );
        let lifetime = &g.current_lifetime_seconds[0];
        assert_eq!(lifetime.value, 100.0);
        let names: Vec<String> = node_metric_labels().into_iter().map(|(_, n)| n).collect();
        let zone = names.iter().position(|n| n == "zone").expect("zone label");
        assert_eq!(&*lifetime.labels[zone], "us-east-1a");
        assert_eq!(
            value(&g.cluster_utilization_percent, &["cpu"]).map(|v| (v * 100.0).round() / 100.0),
            Some(25.51)
        );
    }

    #[test]
    fn transitions_are_observed_once_when_a_pod_binds_and_starts() {
        let mut transitions = PodTransitions::default();
        // Already running when first seen: nothing observed.
        assert_eq!(
            transitions.observe(&[pod("web", Some("n1"), true, false)], |_| None),
            PodDurations {
                done: HashSet::from([PodKey::of_cached(&pod("web", Some("n1"), true, false))]),
                ..PodDurations::default()
            }
        );
        assert_eq!(
            transitions.observe(&[pod("p", None, false, false)], |_| None),
            PodDurations::default()
        );
        assert_eq!(
            transitions.observe(&[pod("p", Some("n1"), false, false)], |_| None),
            PodDurations {
                bound: vec![10.0],
                ..PodDurations::default()
            }
        );
        assert_eq!(
            transitions.observe(&[pod("p", Some("n1"), true, false)], |_| None),
            PodDurations {
                started: vec![30.0],
                done: HashSet::from([PodKey::of_cached(&pod("p", Some("n1"), true, false))]),
                ..PodDurations::default()
            }
        );
    }

    #[test]
    fn provisioning_durations_time_from_when_the_provisioner_found_a_place() {
        // The provisioner found `pending` a place at 0:00:06.
        let schedulable = |key: &PodKey| {
            (key.parts() == ("ns", "pending")).then(|| {
                DateTime::parse_from_rfc3339("2026-01-01T00:00:06Z")
                    .map(|t| t.with_timezone(&Utc))
                    .expect("time")
            })
        };
        let mut transitions = PodTransitions::default();
        transitions.observe(&[pod("pending", None, false, false)], schedulable);
        let bound = transitions.observe(&[pod("pending", Some("n1"), false, false)], schedulable);
        assert_eq!(bound.provisioning_bound, vec![4.0], "bound at 0:00:10");
        let started = transitions.observe(&[pod("pending", Some("n1"), true, false)], schedulable);
        assert_eq!(started.provisioning_started, vec![24.0], "ready at 0:00:30");
        assert!(
            started
                .done
                .contains(&PodKey::of_cached(&pod("pending", None, false, false)))
        );
    }
}
