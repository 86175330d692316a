//! The snapshot: an immutable view of the cluster that the pure core reads — nodes, NodeClaims,
//! pods, NodePools, EC2NodeClasses, DaemonSets, PDBs and volumes — whether it was loaded from
//! manifests (the manifest loader) or taken from the controller's caches (the state module).
//!
//! Besides the objects it holds the single answers to the questions every consumer asks of them
//! (which NodeClaim a Node belongs to, whether a pod is pending or a DaemonSet pod, which taints
//! are ephemeral) and the two adapters that build the core's inputs from it:
//! [`scheduling_input`] for the scheduler, [`disruption_input`] for the disruption engine.

pub mod disruption_input;
pub mod joins;
pub mod reservations;
pub mod scheduling_input;
pub mod static_pools;
pub mod taints;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, OnceLock};

use chrono::{DateTime, TimeDelta, Utc};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{
    Node, PersistentVolume, PersistentVolumeClaim, Pod, PodSpec, PodStatus,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::{CSINode, StorageClass};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use serde::Deserialize;

use crate::apis::conditions;
use crate::apis::nodeclaim::{Operator, condition};
use crate::apis::{EC2NodeClass, NodeClaim, NodeOverlay, NodePool};
use crate::scheduling;
use crate::scheduling::pod_shapes::PodShapes;

/// Namespace of namespaced objects that do not name one, as with `kubectl apply` without `-n`.
pub(crate) use crate::scheduling::pod::DEFAULT_NAMESPACE;
/// Well-known node label carrying the cloud region.
const REGION_LABEL: &str = "topology.kubernetes.io/region";
/// Well-known node label carrying the availability zone.
const ZONE_LABEL: &str = "topology.kubernetes.io/zone";

/// Everything the core reads about a cluster, from manifests (`simulate`) or the controller's
/// caches (`run`). The objects are shared, not owned: a snapshot of the caches points at the
/// objects the reflectors hold (`Store::state` hands out `Arc`s), so taking one costs a vector of
/// pointers per kind, not a copy of the cluster, and several can be alive at once. The core only
/// reads them.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// NodePools, validated like the API server would. Pools whose `nodeClassRef` names no
    /// EC2NodeClass here are kept: the scheduler reports them per pool (see
    /// [`Snapshot::nodeclass_of`]).
    pub nodepools: Vec<Arc<NodePool>>,
    /// EC2NodeClasses, validated.
    pub nodeclasses: Vec<Arc<EC2NodeClass>>,
    /// NodeClaims, validated: capacity Karpenter already launched.
    pub nodeclaims: Vec<Arc<NodeClaim>>,
    /// Nodes as given.
    pub nodes: Vec<Arc<Node>>,
    /// Bare Pods in input order, then the pods workloads expand to, in input order.
    pub pods: Vec<Arc<ClusterPod>>,
    /// DaemonSets; their pods are not expanded, the scheduler adds them to every node instead.
    pub daemonsets: Vec<Arc<DaemonSet>>,
    /// `policy/v1` PodDisruptionBudgets.
    pub pdbs: Vec<Arc<PodDisruptionBudget>>,
    /// PersistentVolumes.
    pub persistent_volumes: Vec<Arc<PersistentVolume>>,
    /// PersistentVolumeClaims given, then those StatefulSets' `volumeClaimTemplates` create.
    pub persistent_volume_claims: Vec<Arc<PersistentVolumeClaim>>,
    /// StorageClasses.
    pub storage_classes: Vec<Arc<StorageClass>>,
    /// CSINodes (per-node volume attach limits).
    pub csi_nodes: Vec<Arc<CSINode>>,
    /// NodeOverlays (`karpenter.sh/v1alpha1`), validated; applied only with the `NodeOverlay`
    /// feature gate on.
    pub node_overlays: Vec<Arc<NodeOverlay>>,
    /// Objects that were read but do not affect what the controller does, so users can see
    /// nothing was silently dropped.
    pub ignored: Vec<Ignored>,
    /// Pending pods counted as bound to the capacity a provisioning round planned them onto
    /// (pod UID → the Node, or the NodeClaim not registered yet), set by
    /// [`Snapshot::nominate`].
    pub nominated: HashMap<Arc<str>, Arc<str>>,
    /// Unbound pods kube-scheduler has not judged yet (no `PodScheduled` condition), kept out of
    /// `pods`. In a live cluster such a pod most likely goes to room that exists, so the
    /// provisioner waits for the scheduler's verdict, as upstream does; but the room it is about
    /// to take is not free, so the disruption engine places it with the pending pods. With
    /// thousands of pods created at once kube-scheduler takes minutes to judge them all, and an
    /// engine blind to them deletes nodes into room those pods need. Only the controller's caches
    /// fill it: offline, every unbound pod counts as judged unschedulable.
    pub awaiting_scheduler: Vec<Arc<ClusterPod>>,
}

/// A pod as the core reads it: metadata of its own, and a spec and status that the replicas of
/// one workload share. The spec is most of a pod's memory, so 20,000 replicas of a few hundred
/// Deployments cost their names and labels rather than 20,000 copies of their templates. The
/// controller's pod cache holds pods in this form too (it reads as a Pod), so its snapshots share
/// the cached pods instead of converting them.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(from = "Pod")]
pub struct ClusterPod {
    /// Name, namespace, labels, owners, timestamps.
    pub metadata: ObjectMeta,
    /// The spec, shared with the pod's siblings where they have the same one; its `nodeName`
    /// is always empty, the binding is [`ClusterPod::node_name`] (it is what differs between
    /// siblings, so the spec can be shared).
    pub spec: Arc<PodSpec>,
    /// The node the pod is bound to (`spec.nodeName` as served; `None` when empty).
    pub bound_to: Option<String>,
    /// The status (phase, conditions), shared like the spec; `None` when the API gave none.
    pub status: Option<Arc<PodStatus>>,
    /// The pod as the scheduler sees it, converted once (see [`ClusterPod::scheduling_pod`]).
    pub converted: Converted,
}

/// A [`ClusterPod`] as the scheduler sees it, converted at most once: the cache converts a pod
/// as it arrives (sharing its shape with its siblings'), so the passes that read it (the
/// provisioner's, the disruption engine's, each over its own snapshot) clone it instead of
/// converting 20,000 pods each. Filled once the pod is final (trimmed, or fully built from a
/// manifest); it is derived data, so it plays no part in comparing pods.
#[derive(Clone, Debug, Default)]
pub struct Converted(OnceLock<Result<scheduling::pod::Pod, String>>);

impl PartialEq for Converted {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl From<Pod> for ClusterPod {
    fn from(pod: Pod) -> Self {
        let mut spec = pod.spec.unwrap_or_default();
        let bound_to = take_binding(&mut spec);
        Self {
            metadata: pod.metadata,
            spec: Arc::new(spec),
            bound_to,
            status: pod.status.map(Arc::new),
            converted: Converted::default(),
        }
    }
}

/// Takes `spec.nodeName` out of a spec that becomes a [`ClusterPod`]'s (see
/// [`ClusterPod::bound_to`]): `None` when it was unset or empty.
pub fn take_binding(spec: &mut PodSpec) -> Option<String> {
    spec.node_name.take().filter(|n| !n.is_empty())
}

/// A `ClusterPod` is a Pod to the API: events and object references name it as one.
impl Resource for ClusterPod {
    type DynamicType = ();
    type Scope = k8s_openapi::NamespaceResourceScope;

    fn kind(dt: &()) -> std::borrow::Cow<'_, str> {
        Pod::kind(dt)
    }

    fn group(dt: &()) -> std::borrow::Cow<'_, str> {
        Pod::group(dt)
    }

    fn version(dt: &()) -> std::borrow::Cow<'_, str> {
        Pod::version(dt)
    }

    fn plural(dt: &()) -> std::borrow::Cow<'_, str> {
        Pod::plural(dt)
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// How long a pod's nomination outlives its capacity becoming initialized: kube-scheduler binds
/// a pending pod to a new node within seconds of its startup taints going, so a pod still
/// pending after this found no room there (other pods took it) and is planned again at once
/// rather than waiting out its nomination. (Upstream treats a node as nominated for twice its
/// 10 s batch window; kube-scheduler's 10 s retry backoff and a loaded API server get some
/// slack here.)
pub const NOMINATION_GRACE: TimeDelta = TimeDelta::seconds(30);

/// The labels or annotations of an object that has none.
static NO_ENTRIES: BTreeMap<String, String> = BTreeMap::new();

impl ClusterPod {
    /// The pod as the scheduler sees it, converted on first use unless
    /// [`ClusterPod::convert_with`] did it; the error names the field and what to change.
    pub fn scheduling_pod(&self) -> Result<&scheduling::pod::Pod, &str> {
        self.converted
            .0
            .get_or_init(|| scheduling::pod::Pod::from_parts(&self.metadata, &self.spec))
            .as_ref()
            .map_err(String::as_str)
    }

    /// Converts the pod now, its shape shared with its siblings' through `shapes`. Called once
    /// the pod is final: the conversion is kept with the pod.
    pub fn convert_with(&self, shapes: &mut PodShapes) {
        self.converted
            .0
            .get_or_init(|| shapes.convert(&self.metadata, &self.spec));
    }

    /// The pod's labels. The pod cache keeps them only in the converted pod, where siblings
    /// share one map (see `state::trim`), so read them here rather than from the metadata.
    pub fn labels(&self) -> &BTreeMap<String, String> {
        match self.scheduling_pod() {
            Ok(p) => &p.labels,
            Err(_) => self.metadata.labels.as_ref().unwrap_or(&NO_ENTRIES),
        }
    }

    /// The pod's annotations, kept like its [labels](ClusterPod::labels).
    pub fn annotations(&self) -> &BTreeMap<String, String> {
        match self.scheduling_pod() {
            Ok(p) => &p.annotations,
            Err(_) => self.metadata.annotations.as_ref().unwrap_or(&NO_ENTRIES),
        }
    }

    /// The node the pod is bound to; an empty `nodeName` is no binding.
    pub fn node_name(&self) -> Option<&str> {
        self.bound_to.as_deref()
    }

    /// Whether the pod ran to completion or failed for good.
    pub fn is_terminal(&self) -> bool {
        phase_is_terminal(self.status.as_deref())
    }

    /// Whether the pod waits for capacity (see [`Snapshot::pending_pods`]).
    pub fn is_pending(&self) -> bool {
        let status = self.status.as_deref();
        let scheduled = status
            .and_then(|s| s.conditions.as_ref())
            .and_then(|conditions| conditions.iter().find(|c| c.type_ == "PodScheduled"));
        let unschedulable = scheduled
            .is_none_or(|c| c.status == "False" && c.reason.as_deref() == Some("Unschedulable"));
        let preempting = status
            .and_then(|s| s.nominated_node_name.as_deref())
            .is_some_and(|n| !n.is_empty());
        self.node_name().is_none()
            && !preempting
            && !phase_is_terminal(status)
            && self.metadata.deletion_timestamp.is_none()
            && !is_daemon_pod(&self.metadata)
            && unschedulable
    }

    /// `namespace/name`, as reports name pods.
    pub fn key(&self) -> String {
        format!(
            "{}/{}",
            self.metadata
                .namespace
                .as_deref()
                .unwrap_or(DEFAULT_NAMESPACE),
            self.metadata.name.as_deref().unwrap_or_default()
        )
    }
}

/// An object `load` skipped, and why; reported to the user, never fatal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ignored {
    /// The file and document it came from.
    pub source: String,
    /// `Kind/name`.
    pub object: String,
    /// Why it does not matter, or what to do instead.
    pub reason: String,
}

impl Snapshot {
    /// Pods the provisioner must find room for: not bound to a node, not nominated to one by
    /// preemption, not finished, not being deleted, not DaemonSet pods (those follow nodes), and
    /// either marked unschedulable by the
    /// scheduler (`PodScheduled=False`, reason `Unschedulable`) or not yet looked at (no
    /// `PodScheduled` condition). Scheduling-gated pods are excluded, as Karpenter excludes them.
    pub fn pending_pods(&self) -> Vec<&ClusterPod> {
        self.pods
            .iter()
            .map(Arc::as_ref)
            .filter(|pod| pod.is_pending() && self.nomination(pod).is_none())
            .collect()
    }

    /// Pods occupying each node, by node name: bound and not finished (finished pods free their
    /// resources), and the pending pods nominated to it (see [`Snapshot::nominate`]; an
    /// in-flight NodeClaim is named as its node will be). Nodes without such pods are absent.
    pub fn bound_pods(&self) -> BTreeMap<&str, Vec<&ClusterPod>> {
        let mut by_node: BTreeMap<&str, Vec<&ClusterPod>> = BTreeMap::new();
        for pod in &self.pods {
            let node = match pod.node_name() {
                Some(node) => Some(node),
                None if pod.is_pending() => self.nomination(pod),
                None => None,
            };
            if let Some(node) = node
                && !pod.is_terminal()
            {
                by_node.entry(node).or_default().push(pod.as_ref());
            }
        }
        by_node
    }

    /// Where a pod is nominated to, if it is.
    fn nomination(&self, pod: &ClusterPod) -> Option<&str> {
        if self.nominated.is_empty() {
            return None;
        }
        let uid = pod.metadata.uid.as_deref()?;
        self.nominated.get(uid).map(|target| &**target)
    }

    /// Counts pending pods as bound to the capacity a provisioning round planned them onto
    /// (`wanted`: pod UID → a Node's or NodeClaim's name), so the next rounds, which plan every
    /// pending pod again, neither pack them differently onto that capacity (leaving some over
    /// for a new NodeClaim) nor count the room they will take as free. kube-scheduler still
    /// decides where they go. A nomination holds while its pod is pending and its capacity can
    /// take pods: a NodeClaim not deleted (named by its Node once that registered), a Node
    /// neither deleted nor cordoned, and initialized (its NodeClaim's `Initialized` condition)
    /// less than [`NOMINATION_GRACE`] before `now`. Returns the nominations kept, by the name
    /// they now hold.
    pub fn nominate(
        &mut self,
        wanted: &HashMap<Arc<str>, Arc<str>>,
        now: DateTime<Utc>,
    ) -> &HashMap<Arc<str>, Arc<str>> {
        self.nominated = self.nominations(wanted, now);
        &self.nominated
    }

    /// The nominations of `wanted` that hold in this snapshot at `now` (see
    /// [`Snapshot::nominate`]), by the name their capacity now holds; the snapshot is left as
    /// it is. The answer shares `wanted`'s strings: at 20,000 nominations a copy of each UID and
    /// target was ~2.5 MB per pass.
    pub fn nominations(
        &self,
        wanted: &HashMap<Arc<str>, Arc<str>>,
        now: DateTime<Utc>,
    ) -> HashMap<Arc<str>, Arc<str>> {
        let nodeclaims = &self.nodeclaims;
        let usable_node = |node: &Node| {
            let initialized_long_ago = joins::claim_of(nodeclaims, node)
                .and_then(|c| c.status.as_ref())
                .and_then(|s| conditions::find(&s.conditions, condition::INITIALIZED))
                .is_some_and(|c| {
                    c.status == conditions::TRUE && now - c.last_transition_time >= NOMINATION_GRACE
                });
            node.metadata.deletion_timestamp.is_none()
                && node.spec.as_ref().and_then(|s| s.unschedulable) != Some(true)
                && !initialized_long_ago
        };
        // What each target is called now, if it still takes pods.
        let mut targets: HashMap<&str, Option<Arc<str>>> = HashMap::new();
        for target in wanted.values() {
            targets.entry(target).or_insert_with(|| {
                if let Some(node) = self
                    .nodes
                    .iter()
                    .find(|n| n.metadata.name.as_deref() == Some(&**target))
                {
                    return usable_node(node).then(|| Arc::clone(target));
                }
                let claim = self
                    .nodeclaims
                    .iter()
                    .find(|c| c.metadata.name.as_deref() == Some(&**target))?;
                if claim.metadata.deletion_timestamp.is_some() {
                    return None;
                }
                match joins::node_of(&self.nodes, claim) {
                    Some(node) => {
                        usable_node(node).then(|| node.metadata.name.as_deref().map(Arc::from))?
                    }
                    None => Some(Arc::clone(target)),
                }
            });
        }
        self.pods
            .iter()
            .filter(|p| p.is_pending())
            .filter_map(|p| {
                let (uid, target) = wanted.get_key_value(p.metadata.uid.as_deref()?)?;
                let now = targets.get(&**target)?.clone()?;
                Some((Arc::clone(uid), now))
            })
            .collect()
    }

    /// The EC2NodeClass called `name`, if loaded.
    pub fn nodeclass(&self, name: &str) -> Option<&EC2NodeClass> {
        self.nodeclasses
            .iter()
            .map(Arc::as_ref)
            .find(|class| class.metadata.name.as_deref() == Some(name))
    }

    /// The EC2NodeClass a NodePool's `nodeClassRef` resolves to; `None` when it names another
    /// group or kind, or a class that was not loaded — the scheduler reports such pools.
    pub fn nodeclass_of(&self, pool: &NodePool) -> Option<&EC2NodeClass> {
        let reference = &pool.spec.template.spec.node_class_ref;
        let ours = reference.group == EC2NodeClass::group(&())
            && reference.kind == EC2NodeClass::kind(&());
        ours.then(|| self.nodeclass(&reference.name)).flatten()
    }

    /// The AWS region the manifests describe, for picking prices and offerings without asking
    /// the user: the first node's `topology.kubernetes.io/region` label, else the region of the
    /// first zone a NodePool requires (`topology.kubernetes.io/zone In [us-west-2a]` →
    /// `us-west-2`), else of the first node's zone label.
    pub fn region_hint(&self) -> Option<String> {
        let node_labels = |key: &'static str| {
            self.nodes
                .iter()
                .filter_map(move |node| node.metadata.labels.as_ref()?.get(key))
        };
        if let Some(region) = node_labels(REGION_LABEL).find(|r| !r.is_empty()) {
            return Some(region.clone());
        }
        let required_zones = self
            .nodepools
            .iter()
            .flat_map(|pool| &pool.spec.template.spec.requirements)
            .filter(|req| req.key == ZONE_LABEL && req.operator == Operator::In)
            .flat_map(|req| &req.values);
        required_zones
            .chain(node_labels(ZONE_LABEL))
            .find_map(|zone| region_of_zone(zone))
    }
}

/// `us-west-2a` → `us-west-2`, `us-gov-west-1b` → `us-gov-west-1`, Local Zone `us-west-2-lax-1a`
/// → `us-west-2`; `None` for zone IDs (`usw2-az1`), which do not spell their region.
fn region_of_zone(zone: &str) -> Option<String> {
    let parts: Vec<&str> = zone.split('-').collect();
    let number = parts
        .iter()
        .position(|p| p.starts_with(|c: char| c.is_ascii_digit()))?;
    let words = &parts[..number];
    if words.len() < 2
        || words
            .iter()
            .any(|w| w.is_empty() || !w.bytes().all(|b| b.is_ascii_lowercase()))
    {
        return None;
    }
    let digits: String = parts[number]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    Some(format!("{}-{digits}", words.join("-")))
}

/// Whether a pod in this phase ran to completion or failed for good.
pub(crate) fn phase_is_terminal(status: Option<&PodStatus>) -> bool {
    matches!(
        status.and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

/// Whether the kubelet reports the Node `Ready=True`: what registration, initialization, the
/// scheduler's view of existing capacity and the disruption engine's candidates all wait for.
pub fn is_node_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| {
            c.iter()
                .any(|c| c.type_ == conditions::READY && c.status == conditions::TRUE)
        })
}

/// Whether a pod belongs to a DaemonSet (any owner reference of that kind, as upstream's
/// `IsOwnedByDaemonSet`): such pods follow nodes instead of asking for them, and are drained last.
pub fn is_daemon_pod(meta: &ObjectMeta) -> bool {
    meta.owner_references
        .iter()
        .flatten()
        .any(|o| o.kind == "DaemonSet")
}

/// The pure core's settings, the same in `simulate` and `run`.
#[derive(Clone, Debug, Default)]
pub struct EngineOptions {
    /// Scheduler options.
    pub scheduler: crate::scheduling::scheduler::Options,
    /// Disruption engine options.
    pub disruption: crate::disruption::Options,
    /// The `StaticCapacity` feature gate: static NodePools (`spec.replicas`) keep their
    /// NodeClaims. Off (upstream's default), such pools are left alone.
    pub static_capacity: bool,
    /// The `NodeOverlay` feature gate: NodeOverlays change the instance types' prices and
    /// extended resources. Off (upstream's default), they are ignored.
    pub node_overlay: bool,
    /// The `NodeRepair` feature gate: Nodes whose conditions match the cloud provider's repair
    /// policies past their toleration are replaced (`controllers::node_repair`). Off
    /// (upstream's default), they are left alone.
    pub node_repair: bool,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod(name: &str, pending: bool) -> Arc<ClusterPod> {
        let status = if pending {
            json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]})
        } else {
            json!({"phase": "Running"})
        };
        let node = if pending { None } else { Some("ip-1") };
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "shop", "uid": name},
            "spec": {"containers": [{"name": "app"}], "nodeName": node},
            "status": status,
        }))
        .expect("pod");
        Arc::new(pod.into())
    }

    fn node(name: &str, provider_id: &str, cordoned: bool) -> Arc<Node> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name},
                "spec": {"providerID": provider_id, "unschedulable": cordoned},
            }))
            .expect("node"),
        )
    }

    /// 2026-11-26 12:00:00 UTC.
    fn now() -> DateTime<Utc> {
        DateTime::from_timestamp(1_795_694_400, 0).expect("a time")
    }

    /// A NodeClaim, initialized `initialized` seconds before [`now`] if given.
    fn claim(name: &str, provider_id: Option<&str>, initialized: Option<i64>) -> Arc<NodeClaim> {
        let conditions: Vec<serde_json::Value> = initialized
            .map(|ago| {
                json!({"type": "Initialized", "status": "True", "reason": "Initialized", "message": "",
                       "lastTransitionTime": (now() - TimeDelta::seconds(ago)).to_rfc3339()})
            })
            .into_iter()
            .collect();
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
                "metadata": {"name": name},
                "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}, "requirements": []},
                "status": {"providerID": provider_id, "conditions": conditions},
            }))
            .expect("nodeclaim"),
        )
    }

    #[test]
    fn nominated_pods_count_as_bound_where_their_capacity_now_is() {
        let mut cluster = Snapshot {
            pods: vec![
                pod("in-flight", true),
                pod("registered", true),
                pod("cordoned", true),
                pod("gone", true),
                pod("running", false),
                pod("free", true),
                pod("passed-over", true),
            ],
            nodeclaims: vec![
                claim("coming", None, None),
                claim("up", Some("aws:///a/i-1"), Some(5)),
                claim("long-up", Some("aws:///a/i-3"), Some(60)),
            ],
            nodes: vec![
                node("ip-1", "aws:///a/i-1", false),
                node("ip-2", "aws:///a/i-2", true),
                node("ip-3", "aws:///a/i-3", false),
            ],
            ..Snapshot::default()
        };
        let wanted: HashMap<Arc<str>, Arc<str>> = [
            ("in-flight", "coming"),
            ("registered", "up"),
            ("cordoned", "ip-2"),
            ("gone", "deleted-claim"),
            ("running", "ip-1"),
            ("passed-over", "long-up"),
        ]
        .into_iter()
        .map(|(uid, target)| (Arc::from(uid), Arc::from(target)))
        .collect();
        let kept: BTreeMap<String, String> = cluster
            .nominate(&wanted, now())
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect();
        assert_eq!(
            kept,
            BTreeMap::from([
                ("in-flight".to_string(), "coming".to_string()),
                ("registered".to_string(), "ip-1".to_string()),
            ]),
            "a registered NodeClaim is named by its Node; cordoned, gone, bound and passed over \
             by kube-scheduler (initialized a minute ago) are dropped"
        );
        let pending: Vec<&str> = cluster
            .pending_pods()
            .iter()
            .filter_map(|p| p.metadata.name.as_deref())
            .collect();
        assert_eq!(pending, ["cordoned", "gone", "free", "passed-over"]);
        let bound: BTreeMap<&str, Vec<&str>> = cluster
            .bound_pods()
            .into_iter()
            .map(|(n, pods)| {
                let names = pods
                    .iter()
                    .filter_map(|p| p.metadata.name.as_deref())
                    .collect();
                (n, names)
            })
            .collect();
        assert_eq!(
            bound,
            BTreeMap::from([
                ("coming", vec!["in-flight"]),
                ("ip-1", vec!["registered", "running"])
            ])
        );
    }
}
