//! The node families (`karpenter_nodes_allocatable`, `karpenter_nodes_total_pod_requests`,
//! `_total_pod_limits`, `_total_daemon_requests`, `_total_daemon_limits`, `_system_overhead`,
//! `_current_lifetime_seconds` and `karpenter_cluster_utilization_percent`), written from the
//! node and pod caches when scraped.
//!
//! Why not publish them every pass: a node has about 30 series (six families over its
//! resources, and its lifetime), each with ~40 label values, and the pass building them held
//! them all while they grew and sorted, then the publication held them until the next pass
//! (on 1,000 nodes and 20,000 pods: 210,420 allocations and a 5.7 MB peak per pass, with the
//! label values already shared per node). The node cache already holds every value those
//! labels carry, so a scrape keeps one row per series (the node's index, the resource's and
//! the value), sorts the rows in the exposition's order and writes each series from its node
//! as the connection takes the text, as the pod families do ([`super::pods`]).
//!
//! The text is what publishing the same series would write: sorted, of equal label sets the
//! last ([`PublishedGauges::serve`]). The lifetimes use the clock read at the scrape, and the
//! sums the pods bound at the scrape. The metrics controller hands these families the caches
//! once, when it starts (its `serve_node_families`).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, PodSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::cluster_state::{is_managed, seconds_since};
use super::node_metric_labels;
use super::pods::PodView;
use super::published::{PublishedGauges, Rows};
use crate::scheduling::pod::requests;
use crate::scheduling::resources::{Resources, parse_quantity};
use crate::snapshot::{ClusterPod, is_daemon_pod};

/// The labels every node family but `karpenter_cluster_utilization_percent` has after the
/// node's own ([`node_metric_labels`]), in the order [`NodeRows::label`] reads them.
pub const NODE_LABELS: [&str; 3] = ["node_name", "phase", "managed"];

/// The label of the resource a series is about: the last of the per-node resource families,
/// the only one of `karpenter_cluster_utilization_percent`.
pub const RESOURCE_LABEL: &str = "resource_type";

/// The families [`serve`] fills.
pub struct NodeFamilies<'a> {
    /// `karpenter_nodes_allocatable`.
    pub allocatable: &'a PublishedGauges,
    /// `karpenter_nodes_total_pod_requests` (DaemonSet pods included).
    pub total_pod_requests: &'a PublishedGauges,
    /// `karpenter_nodes_total_pod_limits`.
    pub total_pod_limits: &'a PublishedGauges,
    /// `karpenter_nodes_total_daemon_requests`.
    pub total_daemon_requests: &'a PublishedGauges,
    /// `karpenter_nodes_total_daemon_limits`.
    pub total_daemon_limits: &'a PublishedGauges,
    /// `karpenter_nodes_system_overhead` (capacity − allocatable).
    pub system_overhead: &'a PublishedGauges,
    /// `karpenter_nodes_current_lifetime_seconds`.
    pub current_lifetime_seconds: &'a PublishedGauges,
    /// `karpenter_cluster_utilization_percent`.
    pub cluster_utilization_percent: &'a PublishedGauges,
}

impl<'a> NodeFamilies<'a> {
    /// The families of `all`, in the order of [`NodeFamilies`]' fields (for the tests, which
    /// make their own families rather than read the registry's).
    pub fn in_order(all: &'a [PublishedGauges; 8]) -> Self {
        let [
            allocatable,
            total_pod_requests,
            total_pod_limits,
            total_daemon_requests,
            total_daemon_limits,
            system_overhead,
            current_lifetime_seconds,
            cluster_utilization_percent,
        ] = all;
        Self {
            allocatable,
            total_pod_requests,
            total_pod_limits,
            total_daemon_requests,
            total_daemon_limits,
            system_overhead,
            current_lifetime_seconds,
            cluster_utilization_percent,
        }
    }
}

/// Makes `families` computed from `read()` at every scrape, one read per family.
pub fn serve(families: NodeFamilies<'_>, read: impl Fn() -> PodView + Send + Sync + 'static) {
    let read = Arc::new(read);
    for (family, kind) in [
        (families.allocatable, Family::Allocatable),
        (families.total_pod_requests, Family::PodRequests),
        (families.total_pod_limits, Family::PodLimits),
        (families.total_daemon_requests, Family::DaemonRequests),
        (families.total_daemon_limits, Family::DaemonLimits),
        (families.system_overhead, Family::SystemOverhead),
        (families.current_lifetime_seconds, Family::Lifetime),
        (families.cluster_utilization_percent, Family::Utilization),
    ] {
        let read = Arc::clone(&read);
        family.serve(Arc::new(move || Box::new(NodeRows::new(kind, read()))));
    }
}

/// Which family a [`NodeRows`] writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Family {
    /// Each node's allocatable resources.
    Allocatable,
    /// The requests of the unfinished pods bound to each node.
    PodRequests,
    /// Their limits.
    PodLimits,
    /// The requests of the unfinished DaemonSet pods bound to each node.
    DaemonRequests,
    /// Their limits.
    DaemonLimits,
    /// Each node's capacity less its allocatable resources.
    SystemOverhead,
    /// Each node's age (nodes without a creation time have none).
    Lifetime,
    /// Per resource, the requests of the pods on the cached nodes over those nodes'
    /// allocatable resources (resources none is allocatable of have none).
    Utilization,
}

impl Family {
    /// Adds to `sum` what the family counts of `pod`, an unfinished pod bound to the node.
    fn add_pod(self, sum: &mut Resources, pod: &ClusterPod) {
        let daemons_only = matches!(self, Family::DaemonRequests | Family::DaemonLimits);
        if daemons_only && !is_daemon_pod(&pod.metadata) {
            return;
        }
        match self {
            // The converted pod holds its requests (the cache converts a pod as it arrives);
            // a pod the scheduler cannot read has them worked out from its spec.
            Family::PodRequests | Family::DaemonRequests | Family::Utilization => {
                match pod.scheduling_pod() {
                    Ok(p) => sum.add(&p.requests),
                    Err(_) => sum.add(&requests(&pod.spec).unwrap_or_default()),
                }
            }
            Family::PodLimits | Family::DaemonLimits => sum.add(&limits(&pod.spec)),
            Family::Allocatable | Family::SystemOverhead | Family::Lifetime => {}
        }
    }

    /// Whether the family sums the pods bound to each node.
    fn sums_pods(self) -> bool {
        matches!(
            self,
            Family::PodRequests
                | Family::PodLimits
                | Family::DaemonRequests
                | Family::DaemonLimits
                | Family::Utilization
        )
    }
}

/// One series of a scrape: the node (an index into [`NodeRows::nodes`]; unused by
/// `karpenter_cluster_utilization_percent`), the resource (an index into
/// [`NodeRows::resources`]; unused by the lifetimes) and the value.
struct Row {
    node: usize,
    resource: usize,
    value: f64,
}

/// One family's rows of one scrape, listed node by node, a node's resources as
/// [`Resources::iter`] lists them: of two resources of a node with one `resource_type`
/// (`Foo-Bar` and `foo_bar`), the later counts, as when the families were published by a pass.
struct NodeRows {
    family: Family,
    nodes: Vec<Arc<Node>>,
    /// The nodes' label values (none for `karpenter_cluster_utilization_percent`).
    labels: NodeLabels,
    /// The resources the rows name: each name with its `resource_type` value, made once per
    /// scrape however many nodes have the resource.
    resources: Vec<(String, String)>,
    rows: Vec<Row>,
}

impl NodeRows {
    fn new(family: Family, view: PodView) -> Self {
        let sums = family
            .sums_pods()
            .then(|| PodSums::new(family, &view.nodes, &view.pods));
        let mut out = Self {
            family,
            nodes: Vec::new(),
            labels: NodeLabels::default(),
            resources: Vec::new(),
            rows: Vec::new(),
        };
        let (mut all_allocatable, mut all_requests) = (Resources::default(), Resources::default());
        for (node, n) in view.nodes.iter().enumerate() {
            let status = n.status.as_ref();
            let on_node = sums.as_ref().map_or(&NONE, |s| s.of(n));
            let of_node;
            let resources = match family {
                Family::Lifetime => {
                    if let Some(created) = n.metadata.creation_timestamp.as_ref() {
                        let value = seconds_since(view.now, created);
                        out.rows.push(Row {
                            node,
                            resource: 0,
                            value,
                        });
                    }
                    continue;
                }
                Family::Utilization => {
                    all_allocatable.add(&resources_of(status.and_then(|s| s.allocatable.as_ref())));
                    all_requests.add(on_node);
                    continue;
                }
                Family::Allocatable => {
                    of_node = resources_of(status.and_then(|s| s.allocatable.as_ref()));
                    &of_node
                }
                Family::SystemOverhead => {
                    let mut capacity = resources_of(status.and_then(|s| s.capacity.as_ref()));
                    capacity.sub(&resources_of(status.and_then(|s| s.allocatable.as_ref())));
                    of_node = capacity;
                    &of_node
                }
                Family::PodRequests
                | Family::PodLimits
                | Family::DaemonRequests
                | Family::DaemonLimits => on_node,
            };
            for (name, amount) in resources.iter() {
                let resource = out.resource(name);
                out.rows.push(Row {
                    node,
                    resource,
                    value: scaled(name, amount),
                });
            }
        }
        for (name, allocated) in all_allocatable.iter() {
            if allocated > 0 {
                let resource = out.resource(name);
                out.rows.push(Row {
                    node: 0,
                    resource,
                    value: 100.0 * all_requests.get(name) as f64 / allocated as f64,
                });
            }
        }
        if family != Family::Utilization {
            out.labels = NodeLabels::new(&view.nodes);
        }
        out.nodes = view.nodes;
        out
    }

    /// The index of resource `name` in [`Self::resources`], added if new.
    fn resource(&mut self, name: &str) -> usize {
        if let Some(i) = self.resources.iter().position(|(n, _)| n == name) {
            return i;
        }
        self.resources.push((name.to_string(), resource_type(name)));
        self.resources.len() - 1
    }
}

/// The node label values and `managed` of every node of a scrape, each read without a lookup:
/// sorting the rows compares them label by label (at 1,000 nodes, tens of thousands of
/// comparisons over ~40 labels each), and looking each value up in its node's label map took
/// half a scrape's time (1,000 nodes of 40 labels, debug build: 5.1 s, 2.3 s with this table).
/// It costs 8 bytes per node and key (~300 KB at 1,000 nodes) while the family is written.
#[derive(Default)]
struct NodeLabels {
    /// The values end to end; a value the node before has for the same key is kept once.
    text: String,
    /// Where node `n`'s value of key `k` (in [`node_metric_labels`]' order) is in `text`:
    /// `spans[n * keys + k]`, as byte offsets (a value past 4 GiB of label text reads empty).
    spans: Vec<(u32, u32)>,
    /// Whether Karpenter manages each node.
    managed: Vec<bool>,
}

impl NodeLabels {
    fn new(nodes: &[Arc<Node>]) -> Self {
        let keys = node_metric_labels();
        let mut out = Self {
            text: String::new(),
            spans: Vec::with_capacity(nodes.len() * keys.len()),
            managed: Vec::with_capacity(nodes.len()),
        };
        for (n, node) in nodes.iter().enumerate() {
            let labels = node.metadata.labels.as_ref();
            for (k, (key, _)) in keys.iter().enumerate() {
                let value = labels.and_then(|l| l.get(*key)).map_or("", String::as_str);
                let before = n
                    .checked_sub(1)
                    .and_then(|b| out.spans.get(b * keys.len() + k))
                    .copied()
                    .filter(|&span| out.text_of(span) == value);
                let span = before.unwrap_or_else(|| {
                    let start = out.text.len();
                    out.text.push_str(value);
                    match (u32::try_from(start), u32::try_from(out.text.len())) {
                        (Ok(start), Ok(end)) => (start, end),
                        _ => (0, 0),
                    }
                });
                out.spans.push(span);
            }
            out.managed.push(is_managed(node));
        }
        out
    }

    /// Node `node`'s value of the `key`th of [`node_metric_labels`], empty when it has none.
    fn value(&self, node: usize, key: usize) -> &str {
        let keys = node_metric_labels().len();
        self.spans
            .get(node * keys + key)
            .map_or("", |&span| self.text_of(span))
    }

    fn text_of(&self, (start, end): (u32, u32)) -> &str {
        let range = usize::try_from(start).unwrap_or(usize::MAX)..usize::try_from(end).unwrap_or(0);
        self.text.get(range).unwrap_or_default()
    }
}

/// The sum for a node no pod counts on.
static NONE: Resources = Resources::ZERO;

/// What a family sums of the unfinished pods bound to each node, kept per node name.
struct PodSums<'a> {
    slots: HashMap<&'a str, usize>,
    sums: Vec<Resources>,
}

impl<'a> PodSums<'a> {
    fn new(family: Family, nodes: &'a [Arc<Node>], pods: &[Arc<ClusterPod>]) -> Self {
        let mut slots = HashMap::with_capacity(nodes.len());
        for name in nodes.iter().filter_map(|n| n.metadata.name.as_deref()) {
            let next = slots.len();
            slots.entry(name).or_insert(next);
        }
        let mut sums = vec![Resources::default(); slots.len()];
        for pod in pods.iter().filter(|p| !p.is_terminal()) {
            let slot = pod.node_name().and_then(|n| slots.get(n));
            if let Some(sum) = slot.and_then(|&i| sums.get_mut(i)) {
                family.add_pod(sum, pod);
            }
        }
        Self { slots, sums }
    }

    /// The sum for `node` (nothing for a node without a name).
    fn of(&self, node: &Node) -> &Resources {
        node.metadata
            .name
            .as_deref()
            .and_then(|n| self.slots.get(n))
            .and_then(|&i| self.sums.get(i))
            .unwrap_or(&NONE)
    }
}

impl Rows for NodeRows {
    fn len(&self) -> usize {
        self.rows.len()
    }

    fn label(&self, row: usize, label: usize) -> &str {
        let Some(r) = self.rows.get(row) else {
            return "";
        };
        let resource_type = || self.resources.get(r.resource).map_or("", |(_, t)| t);
        if self.family == Family::Utilization {
            return if label == 0 { resource_type() } else { "" };
        }
        let Some(node) = self.nodes.get(r.node) else {
            return "";
        };
        match label.checked_sub(node_metric_labels().len()) {
            None => self.labels.value(r.node, label),
            Some(0) => node.metadata.name.as_deref().unwrap_or_default(),
            Some(1) => node
                .status
                .as_ref()
                .and_then(|s| s.phase.as_deref())
                .unwrap_or_default(),
            Some(2) => {
                if self.labels.managed.get(r.node).copied().unwrap_or_default() {
                    "true"
                } else {
                    "false"
                }
            }
            Some(3) if self.family != Family::Lifetime => resource_type(),
            Some(_) => "",
        }
    }

    fn value(&self, row: usize) -> f64 {
        self.rows.get(row).map_or(0.0, |r| r.value)
    }
}

/// upstream's `resource_type` value: the resource name lower-cased, `-` → `_`.
fn resource_type(name: &str) -> String {
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

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use serde_json::{Value, json};

    use super::*;
    use crate::clock::{Clock, FakeClock};
    use crate::metrics::METRICS;
    use crate::metrics::tests::{fresh, start, text};

    fn node(value: Value) -> Arc<Node> {
        Arc::new(serde_json::from_value(value).expect("a node"))
    }

    /// A pod bound to `node` (unbound when `None`) in phase `phase`, with one container of
    /// `resources` and `extra` merged into its spec; a DaemonSet's when `daemon`.
    fn pod(
        name: &str,
        node: Option<&str>,
        phase: &str,
        daemon: bool,
        resources: Value,
        extra: Value,
    ) -> Arc<ClusterPod> {
        let kind = if daemon { "DaemonSet" } else { "ReplicaSet" };
        let mut spec = json!({"nodeName": node,
            "containers": [{"name": "c", "resources": resources}]});
        if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
            s.extend(e.clone());
        }
        let p: ClusterPod = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns", "uid": name,
                "creationTimestamp": "2026-01-01T00:00:00Z",
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": kind, "name": "o",
                    "uid": "o", "controller": true}]},
            "spec": spec,
            "status": {"phase": phase}
        }))
        .expect("a pod");
        let _ = p.scheduling_pod();
        Arc::new(p)
    }

    /// `n-a`: managed, Running, created at 0:00:00, with a GPU, 60 pod slots and 80m of CPU and
    /// 1 GiB of memory reserved. `n-b`: unmanaged, without phase or creation time, with a memory capacity
    /// that does not parse (left out) and an extended resource named in capitals with a `-`.
    /// Bound to `n-a`: a pod and a DaemonSet pod, and a finished pod that counts nowhere; to
    /// `n-b`: a pod whose init container asks the most CPU; one pod unbound and one on a node
    /// the cache does not hold, neither counted. Now is 0:01:40.
    fn cluster() -> (Vec<Arc<Node>>, Vec<Arc<ClusterPod>>) {
        let nodes = vec![
            node(json!({
                "metadata": {"name": "n-b", "labels": {"topology.kubernetes.io/zone": "us-east-1b"}},
                "status": {"capacity": {"cpu": "2", "memory": "lots"},
                    "allocatable": {"cpu": "2080m", "memory": "1Gi", "Example.com/Foo-Bar": "2"}}
            })),
            node(json!({
                "metadata": {"name": "n-a", "creationTimestamp": "2026-01-01T00:00:00Z",
                    "labels": {"karpenter.sh/nodepool": "general", "topology.kubernetes.io/zone": "us-east-1a",
                        "kubernetes.io/arch": "arm64"}},
                "status": {"phase": "Running",
                    "capacity": {"cpu": "4", "memory": "16Gi", "pods": "60", "nvidia.com/gpu": "1"},
                    "allocatable": {"cpu": "3920m", "memory": "15Gi", "pods": "60", "nvidia.com/gpu": "1"}}
            })),
        ];
        let none = json!({});
        let pods = vec![
            pod(
                "web",
                Some("n-a"),
                "Running",
                false,
                json!({"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"memory": "2Gi"}}),
                none.clone(),
            ),
            pod(
                "agent",
                Some("n-a"),
                "Running",
                true,
                json!({"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"cpu": "500m"}}),
                none.clone(),
            ),
            pod(
                "done",
                Some("n-a"),
                "Succeeded",
                true,
                json!({"requests": {"cpu": "1"}, "limits": {"cpu": "1"}}),
                none.clone(),
            ),
            pod(
                "batch",
                Some("n-b"),
                "Running",
                false,
                json!({"requests": {"cpu": "1"}}),
                json!({"initContainers": [{"name": "i", "resources": {"requests": {"cpu": "1500m"}}}]}),
            ),
            pod(
                "pending",
                None,
                "Pending",
                false,
                json!({"requests": {"cpu": "1"}}),
                none.clone(),
            ),
            pod(
                "lost",
                Some("gone"),
                "Running",
                false,
                json!({"requests": {"cpu": "1"}}),
                none,
            ),
        ];
        (nodes, pods)
    }

    /// The registry's node families, fresh, with help `Help.`.
    fn families() -> [PublishedGauges; 8] {
        [
            &METRICS.nodes_allocatable,
            &METRICS.nodes_total_pod_requests,
            &METRICS.nodes_total_pod_limits,
            &METRICS.nodes_total_daemon_requests,
            &METRICS.nodes_total_daemon_limits,
            &METRICS.nodes_system_overhead,
            &METRICS.nodes_current_lifetime_seconds,
            &METRICS.cluster_utilization_percent,
        ]
        .map(fresh)
    }

    /// `family`'s text of `lines`: its header, then each line.
    fn exposition(family: &str, lines: &[String]) -> String {
        let mut out = format!("# HELP {family} Help.\n# TYPE {family} gauge\n");
        for line in lines {
            out.push_str(line);
            out.push('\n');
        }
        out
    }

    /// A series of a per-node family: every node label empty but those in `set`, all in
    /// label-name order, as the `prometheus` crate writes them.
    fn series(family: &str, set: &[(&str, &str)], value: &str) -> String {
        let mut labels: BTreeMap<&str, &str> = node_metric_labels()
            .iter()
            .map(|(_, name)| (name.as_str(), ""))
            .collect();
        labels.extend(set.iter().copied());
        let pairs: Vec<String> = labels
            .iter()
            .map(|(name, value)| format!("{name}=\"{value}\""))
            .collect();
        format!("{family}{{{}}} {value}", pairs.join(","))
    }

    const N_A: [(&str, &str); 6] = [
        ("nodepool", "general"),
        ("zone", "us-east-1a"),
        ("arch", "arm64"),
        ("node_name", "n-a"),
        ("phase", "Running"),
        ("managed", "true"),
    ];
    const N_B: [(&str, &str); 4] = [
        ("zone", "us-east-1b"),
        ("node_name", "n-b"),
        ("phase", ""),
        ("managed", "false"),
    ];

    /// `family`'s series of `node` for each resource and value, in the order given.
    fn on(family: &str, node: &[(&str, &str)], values: &[(&str, &str)]) -> Vec<String> {
        values
            .iter()
            .map(|&(resource, value)| {
                let mut set = node.to_vec();
                set.push(("resource_type", resource));
                series(family, &set, value)
            })
            .collect()
    }

    /// Every family's text for the cluster, checked by hand: a series per node and non-zero
    /// resource (CPU in cores, resource names lower-cased with `_` for `-`), the pods' sums over
    /// the unfinished pods bound to each node (limits and requests as the pod's effective ones:
    /// its containers' sum or its largest init container; a pod requests one pod slot), and the
    /// series sorted by label values in label-name order, so `n-b` (no `arch`) before `n-a`
    /// (`arm64`).
    #[test]
    fn each_node_family_writes_a_series_per_node_and_resource() {
        let (nodes, pods) = cluster();
        let families = families();
        serve(NodeFamilies::in_order(&families), move || PodView {
            nodes: nodes.clone(),
            pods: pods.clone(),
            now: start(),
        });
        let [
            allocatable,
            pod_requests,
            pod_limits,
            daemon_requests,
            daemon_limits,
            overhead,
            lifetime,
            utilization,
        ] = &families;
        let family = "karpenter_nodes_allocatable";
        let mut lines = on(
            family,
            &N_B,
            &[
                ("cpu", "2.08"),
                ("example.com/foo_bar", "2"),
                ("memory", "1073741824"),
            ],
        );
        lines.extend(on(
            family,
            &N_A,
            &[
                ("cpu", "3.92"),
                ("memory", "16106127360"),
                ("nvidia.com/gpu", "1"),
                ("pods", "60"),
            ],
        ));
        assert_eq!(text(allocatable), exposition(family, &lines));

        let family = "karpenter_nodes_total_pod_requests";
        let mut lines = on(family, &N_B, &[("cpu", "1.5"), ("pods", "1")]);
        lines.extend(on(
            family,
            &N_A,
            &[("cpu", "0.75"), ("memory", "1342177280"), ("pods", "2")],
        ));
        assert_eq!(text(pod_requests), exposition(family, &lines));

        let family = "karpenter_nodes_total_pod_limits";
        let lines = on(family, &N_A, &[("cpu", "0.5"), ("memory", "2147483648")]);
        assert_eq!(text(pod_limits), exposition(family, &lines));

        let family = "karpenter_nodes_total_daemon_requests";
        let lines = on(
            family,
            &N_A,
            &[("cpu", "0.25"), ("memory", "268435456"), ("pods", "1")],
        );
        assert_eq!(text(daemon_requests), exposition(family, &lines));

        let family = "karpenter_nodes_total_daemon_limits";
        let lines = on(family, &N_A, &[("cpu", "0.5")]);
        assert_eq!(text(daemon_limits), exposition(family, &lines));

        let family = "karpenter_nodes_system_overhead";
        let mut lines = on(
            family,
            &N_B,
            &[
                ("cpu", "-0.08"),
                ("example.com/foo_bar", "-2"),
                ("memory", "-1073741824"),
            ],
        );
        lines.extend(on(
            family,
            &N_A,
            &[("cpu", "0.08"), ("memory", "1073741824")],
        ));
        assert_eq!(text(overhead), exposition(family, &lines));

        let family = "karpenter_nodes_current_lifetime_seconds";
        let lines = [series(family, &N_A, "100")];
        assert_eq!(text(lifetime), exposition(family, &lines));

        let family = "karpenter_cluster_utilization_percent";
        let lines: Vec<String> = [
            ("cpu", "37.5"),
            ("example.com/foo_bar", "0"),
            ("memory", "7.8125"),
            ("nvidia.com/gpu", "0"),
            ("pods", "5"),
        ]
        .iter()
        .map(|(resource, value)| format!("{family}{{resource_type=\"{resource}\"}} {value}"))
        .collect();
        assert_eq!(text(utilization), exposition(family, &lines));
    }

    /// A scrape reads the caches and the clock then: the series follow the nodes and pods
    /// there are and the lifetimes the time it is.
    #[test]
    fn a_served_node_family_reads_the_caches_and_the_clock_when_scraped() {
        let (nodes, pods) = cluster();
        let cache = Arc::new(Mutex::new(Vec::new()));
        let clock = Arc::new(FakeClock::new(start()));
        let families = families();
        let (reading, now) = (Arc::clone(&cache), Arc::clone(&clock));
        serve(NodeFamilies::in_order(&families), move || PodView {
            nodes: reading.lock().map(|n| n.clone()).unwrap_or_default(),
            pods: pods.clone(),
            now: now.now(),
        });
        let lifetime = &families[6];
        assert_eq!(text(lifetime), "", "no nodes, no series");

        cache.lock().expect("not poisoned").extend(nodes);
        let family = "karpenter_nodes_current_lifetime_seconds";
        assert_eq!(
            text(lifetime),
            exposition(family, &[series(family, &N_A, "100")])
        );
        clock.advance(chrono::Duration::seconds(5));
        assert_eq!(
            text(lifetime),
            exposition(family, &[series(family, &N_A, "105")])
        );
    }
}
