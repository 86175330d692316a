//! The per-pod families (`karpenter_pods_state`, `karpenter_pods_unbound_time_seconds`,
//! `karpenter_pods_unstarted_time_seconds` and the `karpenter_pods_provisioning_*_time_seconds`
//! gauges), written from the pod cache when scraped.
//!
//! Why not publish them every pass like the other cluster-state families: a publication holds
//! a series per pod until the next one, 13 label values for `karpenter_pods_state`, and the
//! pass building it held the vectors while they grew and sorted (~14 MB at 20,000 pods, the
//! largest part of the controller's peak heap). The cache already holds every value those
//! labels carry, so a scrape takes a snapshot of it (one `Arc` per pod), keeps one row per pod
//! (the pod, and its node's index), sorts the rows in the exposition's order and writes each
//! series from its pod as the connection takes the text (see [`PublishedGauges::serve`]).
//!
//! The text is what publishing the same series would write: sorted, of equal label sets the
//! last ([`PublishedGauges::serve`]). The durations use the clock read at the scrape, so a
//! sample says how long the pod has waited when Prometheus sees it rather than up to a pass
//! interval (5 s) earlier; and the labels say where each pod is at the scrape, not at the last
//! pass. The metrics controller hands these families the pod and node caches once, when it
//! starts (its `serve_pod_families`).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::Node;

use super::cluster_state::{Label, condition_status, is_managed, is_started, seconds_since};
use super::pod_scheduling::{PodKey, PodSchedulingTimes, seconds_between};
use super::published::{PublishedGauges, Rows};
use crate::apis::labels;
use crate::snapshot::ClusterPod;

/// `karpenter_pods_state`'s label names, in the order [`PodRows::label`] reads them.
pub const STATE_LABELS: [&str; 13] = [
    "name",
    "namespace",
    "owner",
    "node",
    "scheduled",
    "nodepool",
    "zone",
    "arch",
    "capacity_type",
    "instance_type",
    "phase",
    "ready",
    "managed",
];

/// The label names of the per-pod time families.
pub const NAME_LABELS: [&str; 2] = ["name", "namespace"];

/// The Node labels `karpenter_pods_state` carries (its `nodepool` … `instance_type`), in
/// [`STATE_LABELS`]' order from index [`FIRST_NODE_LABEL`].
const NODE_LABEL_KEYS: [&str; 5] = [
    labels::NODEPOOL,
    labels::ZONE,
    labels::ARCH,
    labels::CAPACITY_TYPE,
    labels::INSTANCE_TYPE,
];

/// Where the node labels start in [`STATE_LABELS`].
const FIRST_NODE_LABEL: usize = 5;

/// What a scrape reads: the cached nodes and pods, and the time now (the node families read
/// the same: see [`super::nodes`]).
pub struct PodView {
    pub nodes: Vec<Arc<Node>>,
    pub pods: Vec<Arc<ClusterPod>>,
    pub now: DateTime<Utc>,
}

/// The families [`serve`] fills.
pub struct PodFamilies<'a> {
    /// `karpenter_pods_state` ([`STATE_LABELS`]).
    pub state: &'a PublishedGauges,
    /// `karpenter_pods_unbound_time_seconds` ([`NAME_LABELS`]).
    pub unbound_time_seconds: &'a PublishedGauges,
    /// `karpenter_pods_unstarted_time_seconds` ([`NAME_LABELS`]).
    pub unstarted_time_seconds: &'a PublishedGauges,
}

/// Makes `families` computed from `read()` at every scrape, one read per family.
pub fn serve(families: PodFamilies<'_>, read: impl Fn() -> PodView + Send + Sync + 'static) {
    let read = Arc::new(read);
    for (family, kind) in [
        (families.state, Family::State),
        (families.unbound_time_seconds, Family::Unbound),
        (families.unstarted_time_seconds, Family::Unstarted),
    ] {
        let read = Arc::clone(&read);
        family.serve(Arc::new(move || Box::new(PodRows::new(kind, read()))));
    }
}

/// The `karpenter_pods_provisioning_*` families [`serve_provisioning`] fills (labels:
/// [`NAME_LABELS`]).
pub struct ProvisioningFamilies<'a> {
    /// `_unbound_time_seconds`.
    pub unbound_time_seconds: &'a PublishedGauges,
    /// `_unstarted_time_seconds`.
    pub unstarted_time_seconds: &'a PublishedGauges,
    /// `_scheduling_undecided_time_seconds`.
    pub scheduling_undecided_time_seconds: &'a PublishedGauges,
}

/// Makes `families` computed at every scrape from `read()`'s pods and time and the times the
/// provisioner recorded (`times`), one read per family.
pub fn serve_provisioning(
    families: ProvisioningFamilies<'_>,
    times: Arc<PodSchedulingTimes>,
    read: impl Fn() -> PodView + Send + Sync + 'static,
) {
    let read = Arc::new(read);
    for (family, kind) in [
        (families.unbound_time_seconds, Waited::Unbound),
        (families.unstarted_time_seconds, Waited::Unstarted),
        (
            families.scheduling_undecided_time_seconds,
            Waited::Undecided,
        ),
    ] {
        let (read, times) = (Arc::clone(&read), Arc::clone(&times));
        family.serve(Arc::new(move || {
            Box::new(WaitRows::new(kind, &times, read()))
        }));
    }
}

/// What a `karpenter_pods_provisioning_*` family times, from the provisioner's
/// [`Times`](super::pod_scheduling::Times) of a pod not finished nor being deleted.
#[derive(Clone, Copy, Debug)]
enum Waited {
    /// Unbound, since the provisioner found it a place.
    Unbound,
    /// Not Ready, since the provisioner found it a place.
    Unstarted,
    /// Unbound and not decided about, since the provisioner first saw it.
    Undecided,
}

/// One provisioning family's rows of one scrape: the pods it times, each with its seconds.
struct WaitRows(Vec<(Arc<ClusterPod>, f64)>);

impl WaitRows {
    fn new(kind: Waited, times: &PodSchedulingTimes, view: PodView) -> Self {
        let rows = view
            .pods
            .into_iter()
            .filter(|pod| !pod.is_terminal() && pod.metadata.deletion_timestamp.is_none())
            .filter_map(|pod| {
                let t = times.get(&PodKey::of_cached(&pod));
                let bound = pod.node_name().is_some();
                let since = match kind {
                    Waited::Unbound => t.schedulable.filter(|_| !bound),
                    Waited::Unstarted => t.schedulable.filter(|_| !is_started(&pod)),
                    Waited::Undecided => t.acked.filter(|_| t.decided.is_none() && !bound),
                }?;
                Some((pod, seconds_between(since, view.now)))
            })
            .collect();
        Self(rows)
    }
}

impl Rows for WaitRows {
    fn len(&self) -> usize {
        self.0.len()
    }

    fn label(&self, row: usize, label: usize) -> &str {
        let Some((pod, _)) = self.0.get(row) else {
            return "";
        };
        match label {
            0 => pod_names(pod).0,
            1 => pod_names(pod).1,
            _ => "",
        }
    }

    fn value(&self, row: usize) -> f64 {
        self.0.get(row).map_or(0.0, |(_, v)| *v)
    }
}

/// Which family a [`PodRows`] writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Family {
    /// `karpenter_pods_state`: every pod that has not finished, 1.
    State,
    /// `karpenter_pods_unbound_time_seconds`: unbound pods not being deleted, their age.
    Unbound,
    /// `karpenter_pods_unstarted_time_seconds`: pods not Ready and not being deleted, their
    /// age.
    Unstarted,
}

/// Label values of one scrape's nodes, each kept once however many nodes carry it (a zone,
/// an instance type, `amd64`).
#[derive(Default)]
struct Interned(HashSet<Label>);

impl Interned {
    /// `value` as the label kept for it.
    fn get(&mut self, value: &str) -> Label {
        if let Some(known) = self.0.get(value) {
            return Arc::clone(known);
        }
        let label: Label = value.into();
        self.0.insert(Arc::clone(&label));
        label
    }
}

/// The node labels of `karpenter_pods_state` for pods on one node.
struct OnNode {
    /// Values of [`NODE_LABEL_KEYS`], empty where the node has no such label.
    labels: [Label; 5],
    /// Whether Karpenter manages the node.
    managed: bool,
}

/// One family's rows of one scrape: a row per pod the family has a series for.
struct PodRows {
    family: Family,
    /// The pods, each with its node's index in `nodes` (`None` when unbound or on a node the
    /// cache does not hold).
    rows: Vec<(Arc<ClusterPod>, Option<u32>)>,
    nodes: Vec<OnNode>,
    now: DateTime<Utc>,
}

impl PodRows {
    fn new(family: Family, view: PodView) -> Self {
        let mut interned = Interned::default();
        let (mut nodes, mut index) = (Vec::new(), HashMap::new());
        if family == Family::State {
            for node in &view.nodes {
                let Some(name) = node.metadata.name.as_deref() else {
                    continue;
                };
                let node_labels = node.metadata.labels.as_ref();
                let labels = NODE_LABEL_KEYS.map(|key| {
                    interned.get(
                        node_labels
                            .and_then(|l| l.get(key))
                            .map_or("", String::as_str),
                    )
                });
                // A node name twice (never in one cache): the later counts.
                if let Ok(i) = u32::try_from(nodes.len()) {
                    index.insert(name, i);
                    nodes.push(OnNode {
                        labels,
                        managed: is_managed(node),
                    });
                }
            }
        }
        let rows = view
            .pods
            .iter()
            .filter(|pod| family.has_series(pod))
            .map(|pod| {
                let node = pod.node_name().and_then(|n| index.get(n).copied());
                (Arc::clone(pod), node)
            })
            .collect();
        Self {
            family,
            rows,
            nodes,
            now: view.now,
        }
    }

    fn node(&self, row: usize) -> Option<&OnNode> {
        let i = self.rows.get(row)?.1?;
        self.nodes.get(usize::try_from(i).ok()?)
    }
}

impl Family {
    /// Whether the family has a series for `pod`. Finished pods have none; a deleted pod has
    /// no times, nor has a pod without a creation time.
    fn has_series(self, pod: &ClusterPod) -> bool {
        if pod.is_terminal() {
            return false;
        }
        let timed =
            pod.metadata.creation_timestamp.is_some() && pod.metadata.deletion_timestamp.is_none();
        match self {
            Family::State => true,
            Family::Unbound => timed && pod.node_name().is_none(),
            Family::Unstarted => timed && !is_started(pod),
        }
    }
}

/// A pod's name and namespace as the converted pod holds them (the pod cache converts a pod
/// as it arrives), else as its metadata does.
fn pod_names(pod: &ClusterPod) -> (&str, &str) {
    match pod.scheduling_pod() {
        Ok(p) => (&p.name, &p.namespace),
        Err(_) => (
            pod.metadata.name.as_deref().unwrap_or_default(),
            pod.metadata.namespace.as_deref().unwrap_or_default(),
        ),
    }
}

fn bool_label(b: bool) -> &'static str {
    if b { "true" } else { "false" }
}

impl Rows for PodRows {
    fn len(&self) -> usize {
        self.rows.len()
    }

    fn label(&self, row: usize, label: usize) -> &str {
        let Some((pod, _)) = self.rows.get(row) else {
            return "";
        };
        match (self.family, label) {
            (_, 0) => pod_names(pod).0,
            (_, 1) => pod_names(pod).1,
            (Family::State, 2) => pod
                .metadata
                .owner_references
                .iter()
                .flatten()
                .next()
                .map_or("", |o| o.name.as_str()),
            (Family::State, 3) => pod.node_name().unwrap_or_default(),
            (Family::State, 4) => bool_label(pod.node_name().is_some()),
            (Family::State, 10) => pod
                .status
                .as_ref()
                .and_then(|s| s.phase.as_deref())
                .unwrap_or_default(),
            (Family::State, 11) => condition_status(pod, "Ready").unwrap_or("False"),
            (Family::State, 12) => bool_label(self.node(row).is_some_and(|n| n.managed)),
            (Family::State, l) => l
                .checked_sub(FIRST_NODE_LABEL)
                .and_then(|i| self.node(row)?.labels.get(i))
                .map_or("", |v| v),
            _ => "",
        }
    }

    fn value(&self, row: usize) -> f64 {
        let Some((pod, _)) = self.rows.get(row) else {
            return 0.0;
        };
        match self.family {
            Family::State => 1.0,
            Family::Unbound | Family::Unstarted => pod
                .metadata
                .creation_timestamp
                .as_ref()
                .map_or(0.0, |created| seconds_since(self.now, created)),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use serde_json::{Value, json};

    use super::*;
    use crate::clock::{Clock, FakeClock};
    use crate::metrics::METRICS;
    use crate::metrics::tests::{fresh, start, text};

    fn node(name: &str, labels: Value) -> Arc<Node> {
        Arc::new(
            serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}}))
                .expect("a node"),
        )
    }

    /// A pod `name` in `namespace`, created at 0:00:00: bound to `node`, with a Ready
    /// condition of status `ready` (none when `None`), `phase` as its phase and `extra` merged
    /// into its metadata; converted as the pod cache converts it.
    fn pod(
        name: &str,
        namespace: &str,
        node: Option<&str>,
        ready: Option<&str>,
        phase: &str,
        extra: Value,
    ) -> Arc<ClusterPod> {
        let mut metadata = json!({"name": name, "namespace": namespace, "uid": name,
            "creationTimestamp": "2026-01-01T00:00:00Z"});
        if let (Some(m), Some(e)) = (metadata.as_object_mut(), extra.as_object()) {
            m.extend(e.clone());
        }
        let mut conditions = Vec::new();
        if let Some(status) = ready {
            conditions.push(json!({"type": "Ready", "status": status,
                "lastTransitionTime": "2026-01-01T00:00:30Z"}));
        }
        if node.is_some() {
            conditions.push(json!({"type": "PodScheduled", "status": "True",
                "lastTransitionTime": "2026-01-01T00:00:10Z"}));
        }
        let p: ClusterPod = serde_json::from_value(json!({
            "metadata": metadata,
            "spec": {"nodeName": node, "containers": [{"name": "c"}]},
            "status": {"phase": phase, "conditions": conditions}
        }))
        .expect("a pod");
        let _ = p.scheduling_pod();
        Arc::new(p)
    }

    fn owned(owner: &str) -> Value {
        json!({"ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
            "name": owner, "uid": "o", "controller": true}]})
    }

    fn created(at: &str) -> Value {
        json!({"creationTimestamp": at})
    }

    fn owned_and_created(owner: &str, at: &str) -> Value {
        let mut out = owned(owner);
        out["creationTimestamp"] = json!(at);
        out
    }

    /// Two managed nodes of different NodePools and label values, an unmanaged one, and pods
    /// of every kind the families tell apart, listed in no particular order: bound and Ready,
    /// bound and starting, pending (with and without a Ready condition), terminating, finished,
    /// failed, Ready `Unknown`, on a node the cache does not hold, on the unmanaged node,
    /// without owner or creation time, one name in two namespaces, one given twice (the later
    /// counts) and an owner the exposition escapes. Now is 0:01:40.
    fn cluster() -> (Vec<Arc<Node>>, Vec<Arc<ClusterPod>>) {
        let nodes = vec![
            node(
                "n-b",
                json!({"karpenter.sh/nodepool": "batch", "topology.kubernetes.io/zone": "us-east-1b",
                    "kubernetes.io/arch": "amd64", "karpenter.sh/capacity-type": "on-demand",
                    "node.kubernetes.io/instance-type": "c5.large"}),
            ),
            node(
                "unmanaged",
                json!({"topology.kubernetes.io/zone": "us-east-1c"}),
            ),
            node(
                "n-a",
                json!({"karpenter.sh/nodepool": "general", "topology.kubernetes.io/zone": "us-east-1a",
                    "kubernetes.io/arch": "arm64", "karpenter.sh/capacity-type": "spot",
                    "node.kubernetes.io/instance-type": "m5.large"}),
            ),
        ];
        let (ready, not_ready) = (Some("True"), Some("False"));
        let mut terminating = owned("web");
        terminating["deletionTimestamp"] = json!("2026-01-01T00:01:00Z");
        let mut pods = vec![
            pod("web-1", "shop", Some("n-a"), ready, "Running", owned("web")),
            pod(
                "web-2",
                "shop",
                Some("n-b"),
                not_ready,
                "Pending",
                owned_and_created("web", "2026-01-01T00:01:05Z"),
            ),
            pod(
                "pending",
                "shop",
                None,
                None,
                "Pending",
                created("2026-01-01T00:00:20Z"),
            ),
            pod(
                "terminating",
                "shop",
                Some("n-b"),
                not_ready,
                "Running",
                terminating,
            ),
            pod(
                "done",
                "shop",
                Some("n-a"),
                not_ready,
                "Succeeded",
                json!({}),
            ),
            pod("again", "shop", None, not_ready, "Pending", json!({})),
            pod(
                "lost",
                "shop",
                Some("gone-node"),
                ready,
                "Running",
                json!({}),
            ),
            pod(
                "pending",
                "batch",
                None,
                not_ready,
                "Pending",
                owned_and_created("job", "2026-01-01T00:01:30Z"),
            ),
            pod("failed", "shop", None, not_ready, "Failed", json!({})),
            pod(
                "sys",
                "kube-system",
                Some("unmanaged"),
                ready,
                "Running",
                owned("agent"),
            ),
            pod("quoted", "shop", None, not_ready, "", owned("a\"b\\c\nd")),
            pod(
                "again",
                "shop",
                None,
                not_ready,
                "Pending",
                created("2026-01-01T00:01:00Z"),
            ),
            pod(
                "unknown",
                "shop",
                Some("n-a"),
                Some("Unknown"),
                "Unknown",
                owned("web"),
            ),
        ];
        let mut ageless = (*pod("ageless", "shop", None, not_ready, "Pending", json!({}))).clone();
        ageless.metadata.creation_timestamp = None;
        pods.push(Arc::new(ageless));
        (nodes, pods)
    }

    /// Fresh families named and labelled like the registry's.
    fn families() -> [PublishedGauges; 3] {
        [
            &METRICS.pods_state,
            &METRICS.pods_unbound_time_seconds,
            &METRICS.pods_unstarted_time_seconds,
        ]
        .map(fresh)
    }

    /// `lines` under the family's header, each ended by a newline.
    fn exposition(family: &str, lines: &[&str]) -> String {
        let mut out = format!("# HELP {family} Help.\n# TYPE {family} gauge\n");
        for line in lines {
            out.push_str(line);
            out.push('\n');
        }
        out
    }

    fn serve_from(
        families: &[PublishedGauges; 3],
        read: impl Fn() -> PodView + Send + Sync + 'static,
    ) {
        let [state, unbound, unstarted] = families;
        serve(
            PodFamilies {
                state,
                unbound_time_seconds: unbound,
                unstarted_time_seconds: unstarted,
            },
            read,
        );
    }

    fn served(nodes: Vec<Arc<Node>>, pods: Vec<Arc<ClusterPod>>) -> [PublishedGauges; 3] {
        let families = families();
        serve_from(&families, move || PodView {
            nodes: nodes.clone(),
            pods: pods.clone(),
            now: start(),
        });
        families
    }

    /// Every unfinished pod has a series of 1, its node's labels from the cached node (empty
    /// and unmanaged on a node the cache does not hold), sorted by the label values taken in
    /// label-name order (so `arch` first), of equal label sets one.
    #[test]
    fn the_state_family_has_a_series_per_unfinished_pod_with_its_nodes_labels() {
        let (nodes, pods) = cluster();
        let [state, _, _] = served(nodes, pods);
        let unbound = |name: &str, namespace: &str, owner: &str, phase: &str| {
            format!(
                "karpenter_pods_state{{arch=\"\",capacity_type=\"\",instance_type=\"\",managed=\"false\",name=\"{name}\",namespace=\"{namespace}\",node=\"\",nodepool=\"\",owner=\"{owner}\",phase=\"{phase}\",ready=\"False\",scheduled=\"false\",zone=\"\"}} 1"
            )
        };
        let lines = [
            unbound("again", "shop", "", "Pending"),
            unbound("ageless", "shop", "", "Pending"),
            "karpenter_pods_state{arch=\"\",capacity_type=\"\",instance_type=\"\",managed=\"false\",name=\"lost\",namespace=\"shop\",node=\"gone-node\",nodepool=\"\",owner=\"\",phase=\"Running\",ready=\"True\",scheduled=\"true\",zone=\"\"} 1".to_string(),
            unbound("pending", "batch", "job", "Pending"),
            unbound("pending", "shop", "", "Pending"),
            unbound("quoted", "shop", "a\\\"b\\\\c\\nd", ""),
            "karpenter_pods_state{arch=\"\",capacity_type=\"\",instance_type=\"\",managed=\"false\",name=\"sys\",namespace=\"kube-system\",node=\"unmanaged\",nodepool=\"\",owner=\"agent\",phase=\"Running\",ready=\"True\",scheduled=\"true\",zone=\"us-east-1c\"} 1".to_string(),
            "karpenter_pods_state{arch=\"amd64\",capacity_type=\"on-demand\",instance_type=\"c5.large\",managed=\"true\",name=\"terminating\",namespace=\"shop\",node=\"n-b\",nodepool=\"batch\",owner=\"web\",phase=\"Running\",ready=\"False\",scheduled=\"true\",zone=\"us-east-1b\"} 1".to_string(),
            "karpenter_pods_state{arch=\"amd64\",capacity_type=\"on-demand\",instance_type=\"c5.large\",managed=\"true\",name=\"web-2\",namespace=\"shop\",node=\"n-b\",nodepool=\"batch\",owner=\"web\",phase=\"Pending\",ready=\"False\",scheduled=\"true\",zone=\"us-east-1b\"} 1".to_string(),
            "karpenter_pods_state{arch=\"arm64\",capacity_type=\"spot\",instance_type=\"m5.large\",managed=\"true\",name=\"unknown\",namespace=\"shop\",node=\"n-a\",nodepool=\"general\",owner=\"web\",phase=\"Unknown\",ready=\"Unknown\",scheduled=\"true\",zone=\"us-east-1a\"} 1".to_string(),
            "karpenter_pods_state{arch=\"arm64\",capacity_type=\"spot\",instance_type=\"m5.large\",managed=\"true\",name=\"web-1\",namespace=\"shop\",node=\"n-a\",nodepool=\"general\",owner=\"web\",phase=\"Running\",ready=\"True\",scheduled=\"true\",zone=\"us-east-1a\"} 1".to_string(),
        ];
        let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
        assert_eq!(text(&state), exposition("karpenter_pods_state", &lines));
    }

    /// The time families have a series per unfinished pod not being deleted and with a
    /// creation time, unbound or not Ready respectively: its age at the scrape, sorted by name
    /// then namespace; of a name given twice the later pod counts.
    #[test]
    fn the_time_families_have_the_age_of_each_unbound_or_unstarted_pod() {
        let (nodes, pods) = cluster();
        let [_, unbound, unstarted] = served(nodes, pods);
        assert_eq!(
            text(&unbound),
            exposition(
                "karpenter_pods_unbound_time_seconds",
                &[
                    "karpenter_pods_unbound_time_seconds{name=\"again\",namespace=\"shop\"} 40",
                    "karpenter_pods_unbound_time_seconds{name=\"pending\",namespace=\"batch\"} 10",
                    "karpenter_pods_unbound_time_seconds{name=\"pending\",namespace=\"shop\"} 80",
                    "karpenter_pods_unbound_time_seconds{name=\"quoted\",namespace=\"shop\"} 100",
                ]
            )
        );
        assert_eq!(
            text(&unstarted),
            exposition(
                "karpenter_pods_unstarted_time_seconds",
                &[
                    "karpenter_pods_unstarted_time_seconds{name=\"again\",namespace=\"shop\"} 40",
                    "karpenter_pods_unstarted_time_seconds{name=\"pending\",namespace=\"batch\"} 10",
                    "karpenter_pods_unstarted_time_seconds{name=\"pending\",namespace=\"shop\"} 80",
                    "karpenter_pods_unstarted_time_seconds{name=\"quoted\",namespace=\"shop\"} 100",
                    "karpenter_pods_unstarted_time_seconds{name=\"unknown\",namespace=\"shop\"} 100",
                    "karpenter_pods_unstarted_time_seconds{name=\"web-2\",namespace=\"shop\"} 35",
                ]
            )
        );
    }

    /// A family of more series than one piece of the exposition holds comes in pieces, in
    /// order across them, however the cache lists the pods.
    #[test]
    fn a_large_served_family_is_sorted_across_its_pieces() {
        let count = 600;
        let pods: Vec<Arc<ClusterPod>> = (0..count)
            .rev()
            .map(|i| {
                pod(
                    &format!("p-{i:04}"),
                    ["b", "a"][i % 2],
                    None,
                    Some("False"),
                    "Pending",
                    json!({}),
                )
            })
            .collect();
        let [_, unbound, _] = served(Vec::new(), pods);
        let lines: Vec<String> = (0..count)
            .map(|i| {
                format!(
                    "karpenter_pods_unbound_time_seconds{{name=\"p-{i:04}\",namespace=\"{}\"}} 100",
                    ["b", "a"][i % 2]
                )
            })
            .collect();
        let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
        let pieces: Vec<String> = unbound.text_chunks().collect();
        assert_eq!(pieces.len(), 3, "256, 256 and 88 series");
        assert_eq!(
            pieces.concat(),
            exposition("karpenter_pods_unbound_time_seconds", &lines)
        );
    }

    /// The provisioning families time each unfinished pod not being deleted from the points
    /// the provisioner recorded: unbound or not Ready since it was found a place, unbound and
    /// not decided about since first seen.
    #[test]
    fn the_provisioning_families_time_from_the_provisioners_points() {
        let (ready, not_ready) = (Some("True"), Some("False"));
        let deleted = || json!({"deletionTimestamp": "2026-01-01T00:01:00Z"});
        // `placed` (in two namespaces) and `starting` were found a place, `started` too but is
        // Ready, `undecided` was only seen, `no-place` was found none; `bound-acked` was seen
        // but bound without a decision, `unseen` never seen; `leaving` and `gone` are being
        // deleted and `failed` and `finished` are done, with times that would count otherwise.
        let pods = vec![
            pod("placed", "shop", None, not_ready, "Pending", json!({})),
            pod(
                "starting",
                "shop",
                Some("n-a"),
                not_ready,
                "Pending",
                json!({}),
            ),
            pod("started", "shop", Some("n-a"), ready, "Running", json!({})),
            pod("undecided", "shop", None, not_ready, "Pending", json!({})),
            pod("placed", "batch", None, not_ready, "Pending", json!({})),
            pod("no-place", "shop", None, not_ready, "Pending", json!({})),
            pod(
                "bound-acked",
                "shop",
                Some("n-a"),
                not_ready,
                "Pending",
                json!({}),
            ),
            pod("unseen", "shop", None, not_ready, "Pending", json!({})),
            pod("leaving", "shop", None, not_ready, "Pending", deleted()),
            pod("failed", "shop", None, not_ready, "Failed", json!({})),
            pod("gone", "shop", None, not_ready, "Pending", deleted()),
            pod("finished", "shop", None, not_ready, "Succeeded", json!({})),
        ];
        let ago = |s: i64| start() - chrono::Duration::seconds(s);
        let times = Arc::new(PodSchedulingTimes::default());
        for (acked, placed, failed, keys) in [
            (
                40,
                Some(30),
                None,
                &["shop/placed", "shop/leaving", "shop/finished"][..],
            ),
            (25, Some(20), None, &["batch/placed"][..]),
            (60, Some(45), None, &["shop/starting", "shop/started"][..]),
            (
                50,
                None,
                None,
                &["shop/undecided", "shop/gone", "shop/failed"][..],
            ),
            (70, None, Some(65), &["shop/no-place"][..]),
            (15, None, None, &["shop/bound-acked"][..]),
        ] {
            let keys: Vec<PodKey> = keys
                .iter()
                .filter_map(|k| k.split_once('/'))
                .map(|(namespace, name)| PodKey::new(namespace, name))
                .collect();
            times.ack(&keys, ago(acked));
            if let Some(placed) = placed {
                times.decide(&keys, [], ago(placed));
            }
            if let Some(failed) = failed {
                times.decide([], &keys, ago(failed));
            }
        }
        let family = |f: &PublishedGauges| {
            PublishedGauges::new(f.name(), "Help.", &NAME_LABELS).expect("valid family")
        };
        let [unbound, unstarted, undecided] = [
            &METRICS.pods_provisioning_unbound_time_seconds,
            &METRICS.pods_provisioning_unstarted_time_seconds,
            &METRICS.pods_provisioning_scheduling_undecided_time_seconds,
        ]
        .map(family);
        serve_provisioning(
            ProvisioningFamilies {
                unbound_time_seconds: &unbound,
                unstarted_time_seconds: &unstarted,
                scheduling_undecided_time_seconds: &undecided,
            },
            times,
            move || PodView {
                nodes: Vec::new(),
                pods: pods.clone(),
                now: start(),
            },
        );
        assert_eq!(
            text(&unbound),
            exposition(
                "karpenter_pods_provisioning_unbound_time_seconds",
                &[
                    "karpenter_pods_provisioning_unbound_time_seconds{name=\"placed\",namespace=\"batch\"} 20",
                    "karpenter_pods_provisioning_unbound_time_seconds{name=\"placed\",namespace=\"shop\"} 30",
                ]
            )
        );
        assert_eq!(
            text(&unstarted),
            exposition(
                "karpenter_pods_provisioning_unstarted_time_seconds",
                &[
                    "karpenter_pods_provisioning_unstarted_time_seconds{name=\"placed\",namespace=\"batch\"} 20",
                    "karpenter_pods_provisioning_unstarted_time_seconds{name=\"placed\",namespace=\"shop\"} 30",
                    "karpenter_pods_provisioning_unstarted_time_seconds{name=\"starting\",namespace=\"shop\"} 45",
                ]
            )
        );
        assert_eq!(
            text(&undecided),
            exposition(
                "karpenter_pods_provisioning_scheduling_undecided_time_seconds",
                &[
                    "karpenter_pods_provisioning_scheduling_undecided_time_seconds{name=\"undecided\",namespace=\"shop\"} 50"
                ]
            )
        );
    }

    #[test]
    fn a_served_family_reads_the_cache_and_the_clock_when_scraped() {
        let (nodes, pods) = cluster();
        let cache = Arc::new(Mutex::new(Vec::new()));
        let clock = Arc::new(FakeClock::new(start()));
        let served = families();
        let (reading, now) = (Arc::clone(&cache), Arc::clone(&clock));
        serve_from(&served, move || PodView {
            nodes: nodes.clone(),
            pods: reading.lock().map(|p| p.clone()).unwrap_or_default(),
            now: now.now(),
        });
        assert_eq!(text(&served[1]), "", "no pods, no series");

        let quoted = pods
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some("quoted"))
            .cloned()
            .expect("the quoted pod");
        cache.lock().expect("not poisoned").push(quoted);
        let expected = |seconds: u32| {
            exposition(
                "karpenter_pods_unbound_time_seconds",
                &[&format!(
                    "karpenter_pods_unbound_time_seconds{{name=\"quoted\",namespace=\"shop\"}} {seconds}"
                )],
            )
        };
        assert_eq!(text(&served[1]), expected(100));
        clock.advance(chrono::Duration::seconds(5));
        assert_eq!(text(&served[1]), expected(105));
    }
}
