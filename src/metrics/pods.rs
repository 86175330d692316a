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
//! The text is byte for byte what publishing the same series would write (the tests compare
//! it with the series a pass built). The durations use the clock read at the scrape, where a
//! pass used the clock read when it ran: the same formula, now taken when the value is read,
//! so a sample says how long the pod has waited when Prometheus sees it rather than up to a
//! pass interval (5 s) earlier; and the labels say where each pod is at the scrape, not at the
//! last pass.

use std::collections::HashMap;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::Node;

use super::cluster_state::{
    Interned, Label, condition_status, is_managed, is_started, seconds_since,
};
use super::pod_scheduling::{PodSchedulingTimes, pod_key, seconds_between};
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

/// What a scrape reads: the cached nodes and pods, and the time now.
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
                let t = times.get(&pod_key(&pod));
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

    use chrono::TimeZone;
    use serde_json::{Value, json};

    use super::*;
    use crate::clock::{Clock, FakeClock};
    use crate::metrics::METRICS;
    use crate::metrics::cluster_state::{pod_gauges, provisioning_gauges};

    fn start() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 1, 1, 0, 1, 40)
            .single()
            .expect("valid time")
    }

    fn node(name: &str, labels: Value) -> Arc<Node> {
        Arc::new(
            serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}}))
                .expect("a node"),
        )
    }

    /// A pod `name` in `namespace`: bound to `node`, Ready or not, with `extra` merged into
    /// its metadata and `phase` as its phase.
    fn pod(
        name: &str,
        namespace: &str,
        node: Option<&str>,
        ready: bool,
        phase: &str,
        extra: Value,
    ) -> Arc<ClusterPod> {
        let mut metadata = json!({"name": name, "namespace": namespace, "uid": name,
            "creationTimestamp": "2026-01-01T00:00:00Z"});
        if let (Some(m), Some(e)) = (metadata.as_object_mut(), extra.as_object()) {
            m.extend(e.clone());
        }
        let mut conditions = vec![
            json!({"type": "Ready", "status": if ready { "True" } else { "False" },
            "lastTransitionTime": "2026-01-01T00:00:30Z"}),
        ];
        if node.is_some() {
            conditions.push(json!({"type": "PodScheduled", "status": "True",
                "lastTransitionTime": "2026-01-01T00:00:10Z"}));
        }
        Arc::new(
            serde_json::from_value(json!({
                "metadata": metadata,
                "spec": {"nodeName": node, "containers": [{"name": "c"}]},
                "status": {"phase": phase, "conditions": conditions}
            }))
            .expect("a pod"),
        )
    }

    /// Nodes of two NodePools and an unmanaged one, and pods of every kind the families tell
    /// apart: bound and Ready, bound and starting, pending, terminating, finished, on a node
    /// the cache does not hold, without owner or creation time, a name given twice (the later
    /// counts) and values the exposition escapes; enough of them for several pieces.
    fn cluster() -> (Vec<Arc<Node>>, Vec<Arc<ClusterPod>>) {
        let managed = |pool: &str, zone: &str, arch: &str| {
            json!({"karpenter.sh/nodepool": pool, "topology.kubernetes.io/zone": zone,
                "kubernetes.io/arch": arch, "karpenter.sh/capacity-type": "spot",
                "node.kubernetes.io/instance-type": "m5.large"})
        };
        let nodes = vec![
            node("n-b", managed("general", "us-east-1b", "amd64")),
            node("n-a", managed("general", "us-east-1a", "arm64")),
            node("n-c", managed("batch", "us-east-1a", "amd64")),
            node(
                "unmanaged",
                json!({"topology.kubernetes.io/zone": "us-east-1c"}),
            ),
        ];
        let node_names = ["n-a", "n-b", "n-c", "unmanaged"];
        let owned = |owner: &str| {
            json!({"ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                "name": owner, "uid": "o", "controller": true}]})
        };
        let mut pods = Vec::new();
        for i in 0..3000 {
            let namespace = ["shop", "batch", "default"][i % 3];
            let owner = owned(&format!("web-{}", i % 7));
            let name = format!("web-{}-{i}", i % 7);
            let p = match i % 10 {
                0..=4 => pod(
                    &name,
                    namespace,
                    Some(node_names[i % 4]),
                    true,
                    "Running",
                    owner,
                ),
                5 => pod(
                    &name,
                    namespace,
                    Some(node_names[i % 4]),
                    false,
                    "Pending",
                    owner,
                ),
                6 | 7 => pod(&name, namespace, None, false, "Pending", owner),
                8 => {
                    let mut terminating = owner;
                    terminating["deletionTimestamp"] = json!("2026-01-01T00:01:00Z");
                    pod(
                        &name,
                        namespace,
                        Some(node_names[i % 4]),
                        i % 20 == 8,
                        "Running",
                        terminating,
                    )
                }
                _ => pod(
                    &name,
                    namespace,
                    Some(node_names[i % 4]),
                    false,
                    "Succeeded",
                    owner,
                ),
            };
            pods.push(p);
        }
        pods.extend([
            pod(
                "lost",
                "shop",
                Some("gone-node"),
                true,
                "Running",
                json!({}),
            ),
            pod("twice", "shop", None, false, "Pending", owned("first")),
            pod(
                "twice",
                "shop",
                Some("n-a"),
                true,
                "Running",
                owned("second"),
            ),
            pod("again", "shop", None, false, "Pending", json!({})),
            pod(
                "again",
                "shop",
                None,
                false,
                "Pending",
                json!({"creationTimestamp": "2026-01-01T00:01:00Z"}),
            ),
            pod("quoted", "shop", None, false, "", owned("a\"b\\c\nd")),
            pod("failed", "shop", None, false, "Failed", json!({})),
        ]);
        let mut ageless = (*pod("ageless", "shop", None, false, "Pending", json!({}))).clone();
        ageless.metadata.creation_timestamp = None;
        pods.push(Arc::new(ageless));
        for p in &pods {
            let _ = p.scheduling_pod();
        }
        (nodes, pods)
    }

    /// Fresh families named and labelled like the registry's.
    fn families() -> [PublishedGauges; 3] {
        [
            &METRICS.pods_state,
            &METRICS.pods_unbound_time_seconds,
            &METRICS.pods_unstarted_time_seconds,
        ]
        .map(|f| {
            let labels: Vec<&str> = f.label_names().iter().map(String::as_str).collect();
            PublishedGauges::new(f.name(), "Help.", &labels).expect("valid family")
        })
    }

    fn text(family: &PublishedGauges) -> String {
        family.text_chunks().collect()
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

    #[test]
    fn the_scraped_text_is_what_publishing_a_passs_series_wrote() {
        let (nodes, pods) = cluster();
        let published = families();
        let g = pod_gauges(&nodes, &pods, start());
        let [state, unbound, unstarted] = &published;
        state.publish(g.state);
        unbound.publish(g.unbound_time_seconds);
        unstarted.publish(g.unstarted_time_seconds);

        let served = families();
        serve_from(&served, move || PodView {
            nodes: nodes.clone(),
            pods: pods.clone(),
            now: start(),
        });

        for (old, new) in published.iter().zip(&served) {
            let expected = text(old);
            assert!(
                expected.lines().count() > 2 * 256,
                "{}: several pieces",
                old.name()
            );
            assert_eq!(text(new), expected, "{}", old.name());
        }
        let state = text(&served[0]);
        assert!(
            state.contains("karpenter_pods_state{arch=\"arm64\",capacity_type=\"spot\",instance_type=\"m5.large\",managed=\"true\",name=\"twice\",namespace=\"shop\",node=\"n-a\",nodepool=\"general\",owner=\"second\",phase=\"Running\",ready=\"True\",scheduled=\"true\",zone=\"us-east-1a\"} 1\n"),
            "{state}"
        );
        assert!(state.contains("owner=\"a\\\"b\\\\c\\nd\""), "{state}");
        assert!(!state.contains("name=\"failed\""), "{state}");
        let unbound = text(&served[1]);
        assert!(
            unbound.contains("{name=\"again\",namespace=\"shop\"} 40\n"),
            "of a series given twice the later counts: {unbound}"
        );
    }

    #[test]
    fn the_scraped_provisioning_text_is_what_publishing_a_passs_series_wrote() {
        let (_, pods) = cluster();
        let at = |s: i64| start() - chrono::Duration::seconds(s);
        // Every other pod found a place 30 s ago, one in ten (all pending) seen 50 s ago and
        // not decided about, the rest never seen.
        let times = Arc::new(PodSchedulingTimes::default());
        let keys: Vec<String> = pods.iter().map(|p| pod_key(p)).collect();
        for (i, key) in keys.iter().enumerate() {
            if i % 2 == 0 {
                times.ack([key.as_str()], at(40));
                times.decide([key.as_str()], [], at(30));
            } else if i % 10 == 7 {
                times.ack([key.as_str()], at(50));
            }
        }
        let published = [
            &METRICS.pods_provisioning_unbound_time_seconds,
            &METRICS.pods_provisioning_unstarted_time_seconds,
            &METRICS.pods_provisioning_scheduling_undecided_time_seconds,
        ]
        .map(|f| PublishedGauges::new(f.name(), "Help.", &NAME_LABELS).expect("valid family"));
        let g = provisioning_gauges(&pods, |k| times.get(k), start());
        let [unbound, unstarted, undecided] = &published;
        unbound.publish(g.unbound_time_seconds);
        unstarted.publish(g.unstarted_time_seconds);
        undecided.publish(g.scheduling_undecided_time_seconds);

        let served = published
            .each_ref()
            .map(|f| PublishedGauges::new(f.name(), "Help.", &NAME_LABELS).expect("valid family"));
        let [
            unbound_time_seconds,
            unstarted_time_seconds,
            scheduling_undecided_time_seconds,
        ] = &served;
        serve_provisioning(
            ProvisioningFamilies {
                unbound_time_seconds,
                unstarted_time_seconds,
                scheduling_undecided_time_seconds,
            },
            times,
            move || PodView {
                nodes: Vec::new(),
                pods: pods.clone(),
                now: start(),
            },
        );
        for (old, new) in published.iter().zip(&served) {
            let expected = text(old);
            assert!(
                expected.lines().count() > 256,
                "{}: several pieces",
                old.name()
            );
            assert_eq!(text(new), expected, "{}", old.name());
        }
        assert!(text(&served[0]).contains("} 30\n"));
        assert!(text(&served[2]).contains("} 50\n"));
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

        let pending = pods
            .iter()
            .find(|p| p.node_name().is_none() && !p.is_terminal())
            .cloned()
            .expect("a pending pod");
        cache.lock().expect("not poisoned").push(pending);
        let line = |s: &str| s.lines().last().map(str::to_string).unwrap_or_default();
        assert!(
            line(&text(&served[1])).ends_with("} 100"),
            "{}",
            text(&served[1])
        );
        clock.advance(chrono::Duration::seconds(5));
        assert!(
            line(&text(&served[1])).ends_with("} 105"),
            "{}",
            text(&served[1])
        );
    }
}
