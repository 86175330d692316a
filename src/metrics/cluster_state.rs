//! What the cluster-state gauges say right now, computed from the reflected objects: the
//! NodePools' cost (from the offerings' prices), plus the pods' bound and
//! startup durations observed when a pod first binds or becomes ready ([`PodTransitions`]).
//!
//! Pure: objects and the time in, series out. The metrics controller's pass publishes them
//! every five seconds, as upstream's metrics controllers do.
//! The per-node and per-pod gauges (`karpenter_nodes_*`, `karpenter_cluster_utilization_percent`,
//! `karpenter_pods_state`, the pods' unbound and unstarted times and the
//! `karpenter_pods_provisioning_*_time_seconds` families) are not the pass's: they are written
//! from the node and pod caches when scraped ([`super::nodes`], [`super::pods`], handed the
//! caches once by the metrics controller), as are the instance-type families from the types the
//! pass last read ([`super::instance_types`]); the per-node and per-pod ones share the helpers here (`condition_status`,
//! `is_started`, `is_managed`, `seconds_since`).

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::Node;

use super::pod_scheduling::{PodKey, seconds_between};
use crate::apis::labels;
use crate::scheduling::instance_type::InstanceType;
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

pub(super) fn seconds_since(
    now: DateTime<Utc>,
    t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
) -> f64 {
    let at = t.0.as_millisecond() as f64 / 1000.0;
    (now.timestamp_millis() as f64 / 1000.0 - at).max(0.0)
}

/// Whether Karpenter manages the node (it belongs to a NodePool).
pub(super) fn is_managed(node: &Node) -> bool {
    node.metadata
        .labels
        .as_ref()
        .is_some_and(|l| l.contains_key(labels::NODEPOOL))
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
    use serde_json::json;

    fn pod(name: &str, node: Option<&str>, ready: bool) -> Arc<ClusterPod> {
        let mut conditions = vec![];
        if node.is_some() {
            conditions.push(json!({"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-01-01T00:00:10Z"}));
        }
        conditions.push(json!({"type": "Ready", "status": if ready { "True" } else { "False" }, "lastTransitionTime": "2026-01-01T00:00:30Z"}));
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "ns", "uid": name,
                    "creationTimestamp": "2026-01-01T00:00:00Z"},
                "spec": {"nodeName": node, "containers": [{"name": "c",
                    "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"memory": "2Gi"}}}]},
                "status": {"phase": if node.is_some() { "Running" } else { "Pending" }, "conditions": conditions}
            }))
            .expect("a pod"),
        )
    }

    #[test]
    fn transitions_are_observed_once_when_a_pod_binds_and_starts() {
        let mut transitions = PodTransitions::default();
        // Already running when first seen: nothing observed.
        assert_eq!(
            transitions.observe(&[pod("web", Some("n1"), true)], |_| None),
            PodDurations {
                done: HashSet::from([PodKey::of_cached(&pod("web", Some("n1"), true))]),
                ..PodDurations::default()
            }
        );
        assert_eq!(
            transitions.observe(&[pod("p", None, false)], |_| None),
            PodDurations::default()
        );
        assert_eq!(
            transitions.observe(&[pod("p", Some("n1"), false)], |_| None),
            PodDurations {
                bound: vec![10.0],
                ..PodDurations::default()
            }
        );
        assert_eq!(
            transitions.observe(&[pod("p", Some("n1"), true)], |_| None),
            PodDurations {
                started: vec![30.0],
                done: HashSet::from([PodKey::of_cached(&pod("p", Some("n1"), true))]),
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
        transitions.observe(&[pod("pending", None, false)], schedulable);
        let bound = transitions.observe(&[pod("pending", Some("n1"), false)], schedulable);
        assert_eq!(bound.provisioning_bound, vec![4.0], "bound at 0:00:10");
        let started = transitions.observe(&[pod("pending", Some("n1"), true)], schedulable);
        assert_eq!(started.provisioning_started, vec![24.0], "ready at 0:00:30");
        assert!(
            started
                .done
                .contains(&PodKey::of_cached(&pod("pending", None, false)))
        );
    }
}
