//! The cluster `simulate` (and later the controller's state) reasons about, loaded from the
//! ordinary manifests users already have.
//!
//! Manifests are read as if `kubectl apply` had just created them and the built-in controllers
//! had run once: Deployments, ReplicaSets, StatefulSets and Jobs become the pods their controllers
//! would create, named and owned the same way (so PodDisruptionBudgets, topology spread
//! constraints and "is this a DaemonSet pod" checks see what they would see in a cluster),
//! StatefulSets get their PersistentVolumeClaims, and the API server's defaults that matter for
//! scheduling are applied. Loading is deterministic — generated names and uids are hashes of the
//! input, never random — so the same manifests always give the same output and simulate runs can
//! be diffed.
//!
//! Every problem in the input is collected and reported at once, each with the file, document,
//! object and field it concerns, because fixing manifests one error per run is tedious.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::path::Path;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{
    Container, Node, PersistentVolume, PersistentVolumeClaim, PersistentVolumeClaimVolumeSource,
    Pod, PodCondition, PodSpec, PodStatus, PodTemplateSpec, ResourceRequirements, Volume,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::{CSINode, StorageClass};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, ObjectMeta, OwnerReference, Time,
};
use k8s_openapi::jiff::Timestamp;
use kube::Resource;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::apis::nodeclaim::Operator;
use crate::apis::validation::{Kind, validate_value};
use crate::apis::{EC2NodeClass, NodeClaim, NodePool};
use crate::manifest::{Document, Source};
use crate::scheduling::resources::quantity_value;

/// Namespace of namespaced objects that do not name one, as with `kubectl apply` without `-n`.
const DEFAULT_NAMESPACE: &str = "default";
/// Well-known node label carrying the cloud region.
const REGION_LABEL: &str = "topology.kubernetes.io/region";
/// Well-known node label carrying the availability zone.
const ZONE_LABEL: &str = "topology.kubernetes.io/zone";
/// StorageClass annotation marking the class PVCs without `storageClassName` get.
const DEFAULT_CLASS_ANNOTATION: &str = "storageclass.kubernetes.io/is-default-class";
/// Legacy PVC annotation that selects a class and stops the default from being applied.
const BETA_CLASS_ANNOTATION: &str = "volume.beta.kubernetes.io/storage-class";
/// Characters Kubernetes uses for generated name suffixes and hashes (no vowels, no look-alikes).
const NAME_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
/// Length of a `generateName` suffix.
const SUFFIX_LEN: usize = 5;
/// Longest `generateName` prefix the API server keeps, so prefix + suffix fits in 63 characters.
const MAX_PREFIX_LEN: usize = 63 - SUFFIX_LEN;
/// The API server's rule for quantities, quoted in errors so users see what is accepted.
const QUANTITY_PATTERN: &str = r"^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$";

/// Everything simulate (and later the controller's state) reads about a cluster.
#[derive(Clone, Debug, Default)]
pub struct Cluster {
    /// NodePools, validated like the API server would. Pools whose `nodeClassRef` names no
    /// EC2NodeClass here are kept: the scheduler reports them per pool (see
    /// [`Cluster::nodeclass_of`]).
    pub nodepools: Vec<NodePool>,
    /// EC2NodeClasses, validated.
    pub nodeclasses: Vec<EC2NodeClass>,
    /// NodeClaims, validated: capacity Karpenter already launched.
    pub nodeclaims: Vec<NodeClaim>,
    /// Nodes as given.
    pub nodes: Vec<Node>,
    /// Bare Pods in input order, then the pods workloads expand to, in input order.
    pub pods: Vec<ClusterPod>,
    /// DaemonSets; their pods are not expanded, the scheduler adds them to every node instead.
    pub daemonsets: Vec<DaemonSet>,
    /// `policy/v1` PodDisruptionBudgets.
    pub pdbs: Vec<PodDisruptionBudget>,
    /// PersistentVolumes.
    pub persistent_volumes: Vec<PersistentVolume>,
    /// PersistentVolumeClaims given, then those StatefulSets' `volumeClaimTemplates` create.
    pub persistent_volume_claims: Vec<PersistentVolumeClaim>,
    /// StorageClasses.
    pub storage_classes: Vec<StorageClass>,
    /// CSINodes (per-node volume attach limits).
    pub csi_nodes: Vec<CSINode>,
    /// Objects that were read but do not affect what the controller does, so users can see
    /// nothing was silently dropped.
    pub ignored: Vec<Ignored>,
}

/// A pod as the core reads it: metadata of its own, and a spec and status that the replicas of
/// one workload share. The spec is most of a pod's memory, so 20,000 replicas of a few hundred
/// Deployments cost their names and labels rather than 20,000 copies of their templates.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClusterPod {
    /// Name, namespace, labels, owners, timestamps.
    pub metadata: ObjectMeta,
    /// The spec, shared with the pod's siblings where they have the same one.
    pub spec: Arc<PodSpec>,
    /// The status (phase, conditions), shared like the spec; `None` when the API gave none.
    pub status: Option<Arc<PodStatus>>,
}

impl From<Pod> for ClusterPod {
    fn from(pod: Pod) -> Self {
        Self {
            metadata: pod.metadata,
            spec: Arc::new(pod.spec.unwrap_or_default()),
            status: pod.status.map(Arc::new),
        }
    }
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

impl ClusterPod {
    /// The node the pod is bound to; an empty `nodeName` is no binding.
    pub fn node_name(&self) -> Option<&str> {
        self.spec.node_name.as_deref().filter(|n| !n.is_empty())
    }

    /// Whether the pod ran to completion or failed for good.
    pub fn is_terminal(&self) -> bool {
        phase_is_terminal(self.status.as_deref())
    }

    /// Whether the pod waits for capacity (see [`Cluster::pending_pods`]).
    pub fn is_pending(&self) -> bool {
        pod_is_pending(&self.metadata, Some(&self.spec), self.status.as_deref())
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

/// One reason the manifests cannot be simulated, located precisely enough to fix it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadProblem {
    /// The file and document the object came from.
    pub source: Source,
    /// `Kind/name` of the object.
    pub object: String,
    /// Dotted field path (`spec.template.spec.containers[0].resources.requests.cpu`); empty when
    /// the problem concerns the whole object.
    pub path: String,
    /// What is wrong and how to fix it.
    pub message: String,
}

impl fmt::Display for LoadProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}: ", self.source, self.object)?;
        if !self.path.is_empty() {
            write!(f, "{}: ", self.path)?;
        }
        f.write_str(&self.message)
    }
}

/// Every problem found in the manifests, in input order; never empty.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct LoadError {
    /// The problems, one per field.
    pub problems: Vec<LoadProblem>,
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.problems.len();
        write!(
            f,
            "{n} problem{} in the manifests:",
            if n == 1 { "" } else { "s" }
        )?;
        for p in &self.problems {
            write!(f, "\n  - {p}")?;
        }
        Ok(())
    }
}

/// Reads the cluster described by `docs`, expanding workloads into the pods their controllers
/// would create; `now` stamps objects that carry no `creationTimestamp`.
///
/// `kind: List` documents (what `kubectl get -o yaml` prints) are read item by item.
pub fn load(docs: &[Document], now: DateTime<Utc>) -> Result<Cluster, LoadError> {
    let mut loader = Loader::new(now);
    for doc in docs {
        loader.document(&doc.source, &doc.value);
    }
    loader.finish()
}

impl Cluster {
    /// Pods the provisioner must find room for: not bound to a node, not nominated to one by
    /// preemption, not finished, not being deleted, not DaemonSet pods (those follow nodes), and
    /// either marked unschedulable by the
    /// scheduler (`PodScheduled=False`, reason `Unschedulable`) or not yet looked at (no
    /// `PodScheduled` condition). Scheduling-gated pods are excluded, as Karpenter excludes them.
    pub fn pending_pods(&self) -> Vec<&ClusterPod> {
        self.pods.iter().filter(|pod| pod.is_pending()).collect()
    }

    /// Pods occupying each node, by node name: bound and not finished (finished pods free their
    /// resources). Nodes without such pods are absent.
    pub fn bound_pods(&self) -> BTreeMap<&str, Vec<&ClusterPod>> {
        let mut by_node: BTreeMap<&str, Vec<&ClusterPod>> = BTreeMap::new();
        for pod in &self.pods {
            if let Some(node) = pod.node_name()
                && !pod.is_terminal()
            {
                by_node.entry(node).or_default().push(pod);
            }
        }
        by_node
    }

    /// The EC2NodeClass called `name`, if loaded.
    pub fn nodeclass(&self, name: &str) -> Option<&EC2NodeClass> {
        self.nodeclasses
            .iter()
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

/// Whether a pod waits for capacity (see [`Cluster::pending_pods`]).
pub fn is_pending(pod: &Pod) -> bool {
    pod_is_pending(&pod.metadata, pod.spec.as_ref(), pod.status.as_ref())
}

/// [`is_pending`] over a pod's parts, for both pod representations.
fn pod_is_pending(meta: &ObjectMeta, spec: Option<&PodSpec>, status: Option<&PodStatus>) -> bool {
    let daemon = meta
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true) && o.kind == "DaemonSet");
    let scheduled = status
        .and_then(|s| s.conditions.as_ref())
        .and_then(|conditions| conditions.iter().find(|c| c.type_ == "PodScheduled"));
    let unschedulable = scheduled
        .is_none_or(|c| c.status == "False" && c.reason.as_deref() == Some("Unschedulable"));
    let preempting = status
        .and_then(|s| s.nominated_node_name.as_deref())
        .is_some_and(|n| !n.is_empty());
    let bound = spec
        .and_then(|s| s.node_name.as_deref())
        .is_some_and(|n| !n.is_empty());
    !bound
        && !preempting
        && !phase_is_terminal(status)
        && meta.deletion_timestamp.is_none()
        && !daemon
        && unschedulable
}

/// How `load` treats an object, by `apiVersion` and `kind`.
#[derive(Clone, Copy)]
enum Route {
    Karpenter(Kind),
    Node,
    Pod,
    Deployment,
    ReplicaSet,
    StatefulSet,
    Job,
    DaemonSet,
    PodDisruptionBudget,
    PersistentVolume,
    PersistentVolumeClaim,
    StorageClass,
    CSINode,
}

/// A kind `load` reads: its name, API group, the version Kubernetes 1.33 / Karpenter v1 serve,
/// whether it is namespaced, and how it is handled.
struct Served {
    kind: &'static str,
    group: &'static str,
    version: &'static str,
    namespaced: bool,
    route: Route,
}

const fn served(
    kind: &'static str,
    group: &'static str,
    version: &'static str,
    namespaced: bool,
    route: Route,
) -> Served {
    Served {
        kind,
        group,
        version,
        namespaced,
        route,
    }
}

const SERVED: &[Served] = &[
    served(
        "NodePool",
        "karpenter.sh",
        "v1",
        false,
        Route::Karpenter(Kind::NodePool),
    ),
    served(
        "NodeClaim",
        "karpenter.sh",
        "v1",
        false,
        Route::Karpenter(Kind::NodeClaim),
    ),
    served(
        "EC2NodeClass",
        "karpenter.k8s.aws",
        "v1",
        false,
        Route::Karpenter(Kind::EC2NodeClass),
    ),
    served("Node", "", "v1", false, Route::Node),
    served("Pod", "", "v1", true, Route::Pod),
    served("Deployment", "apps", "v1", true, Route::Deployment),
    served("ReplicaSet", "apps", "v1", true, Route::ReplicaSet),
    served("StatefulSet", "apps", "v1", true, Route::StatefulSet),
    served("DaemonSet", "apps", "v1", true, Route::DaemonSet),
    served("Job", "batch", "v1", true, Route::Job),
    served(
        "PodDisruptionBudget",
        "policy",
        "v1",
        true,
        Route::PodDisruptionBudget,
    ),
    served("PersistentVolume", "", "v1", false, Route::PersistentVolume),
    served(
        "PersistentVolumeClaim",
        "",
        "v1",
        true,
        Route::PersistentVolumeClaim,
    ),
    served(
        "StorageClass",
        "storage.k8s.io",
        "v1",
        false,
        Route::StorageClass,
    ),
    served("CSINode", "storage.k8s.io", "v1", false, Route::CSINode),
];

/// What to do with one object.
enum Classified {
    Use(&'static Served),
    Ignore(String),
    Reject(String),
}

fn classify(api_version: &str, kind: &str, file: &Path) -> Classified {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let convert = || {
        Classified::Reject(format!(
            "{api_version} {kind} is not served by Karpenter v1; migrate it with \
             `karpenter-rs convert -f {}` and simulate the result",
            file.display()
        ))
    };
    if matches!(
        (group, kind),
        ("karpenter.sh", "Provisioner") | ("karpenter.k8s.aws", "AWSNodeTemplate")
    ) {
        return convert();
    }
    if (group, kind) == ("batch", "CronJob") {
        return Classified::Ignore(
            "CronJobs create Jobs on a schedule, which simulate does not run; to simulate one \
             run, add a Job with the CronJob's jobTemplate"
                .to_owned(),
        );
    }
    // `extensions` is where apps kinds lived before `apps/v1`.
    let Some(entry) = SERVED.iter().find(|s| {
        s.kind == kind && (s.group == group || (s.group == "apps" && group == "extensions"))
    }) else {
        return Classified::Ignore(ignore_reason(kind));
    };
    if group == entry.group && version == entry.version {
        Classified::Use(entry)
    } else if group.starts_with("karpenter.") {
        convert()
    } else {
        let served = if entry.group.is_empty() {
            entry.version.to_owned()
        } else {
            format!("{}/{}", entry.group, entry.version)
        };
        Classified::Reject(format!(
            "Unsupported value: {api_version:?}: Kubernetes 1.33 serves {kind} as {served}; \
             change apiVersion to {served} and update any fields that changed"
        ))
    }
}

/// Why a kind `load` does not read is safe to skip, or what to use instead.
fn ignore_reason(kind: &str) -> String {
    match kind {
        "HorizontalPodAutoscaler" => {
            "autoscaling is not simulated; the workload's spec.replicas is used".to_owned()
        }
        "LimitRange" => "default requests from LimitRanges are not applied; set container \
                         requests explicitly"
            .to_owned(),
        "ReplicationController" => {
            "not expanded into pods; use a Deployment or ReplicaSet".to_owned()
        }
        _ => format!("{kind} does not affect provisioning or disruption"),
    }
}

/// `Kind/name` of a manifest for messages.
fn describe(kind: &str, name: &str) -> String {
    let kind = if kind.is_empty() { "<no kind>" } else { kind };
    let name = if name.is_empty() { "<unnamed>" } else { name };
    format!("{kind}/{name}")
}

fn str_at<'v>(value: &'v Value, pointer: &str) -> &'v str {
    value.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

/// The document and object a problem concerns.
struct At {
    source: Source,
    object: String,
}

/// A workload waiting for expansion, once every explicit pod and PVC is known.
enum Workload {
    Deployment(Box<Deployment>),
    ReplicaSet(Box<ReplicaSet>),
    StatefulSet(Box<StatefulSet>),
    Job(Box<Job>),
}

/// The state of one `load` call.
struct Loader {
    now: Time,
    cluster: Cluster,
    problems: Vec<LoadProblem>,
    /// (kind, namespace, name) → where it was first defined, to report duplicates.
    seen: HashMap<(&'static str, String, String), Source>,
    workloads: Vec<Workload>,
    /// (namespace, name) of every pod so far, so generated names never collide.
    pod_names: HashSet<(String, String)>,
}

impl Loader {
    fn new(now: DateTime<Utc>) -> Self {
        // Kubernetes timestamps have second precision; out-of-range clocks clamp.
        let now = Timestamp::from_second(now.timestamp()).unwrap_or(if now.timestamp() < 0 {
            Timestamp::MIN
        } else {
            Timestamp::MAX
        });
        Self {
            now: Time(now),
            cluster: Cluster::default(),
            problems: Vec::new(),
            seen: HashMap::new(),
            workloads: Vec::new(),
            pod_names: HashSet::new(),
        }
    }

    fn problem(&mut self, at: &At, path: impl Into<String>, message: impl Into<String>) {
        self.problems.push(LoadProblem {
            source: at.source.clone(),
            object: at.object.clone(),
            path: path.into(),
            message: message.into(),
        });
    }

    /// Reads one document, or each item of a `List`.
    fn document(&mut self, source: &Source, value: &Value) {
        let kind = str_at(value, "/kind");
        let items = value.get("items").and_then(Value::as_array);
        let Some(items) = items.filter(|_| kind.ends_with("List")) else {
            self.object(source, value);
            return;
        };
        // Items of typed lists (`PodList`) may omit their kind; plain `List` items carry theirs.
        let item_kind = kind.strip_suffix("List").filter(|k| !k.is_empty());
        let api_version = str_at(value, "/apiVersion");
        for item in items {
            match (item_kind, item.as_object()) {
                (Some(item_kind), Some(map)) if !map.contains_key("kind") => {
                    let mut map = map.clone();
                    map.insert("kind".to_owned(), item_kind.into());
                    map.entry("apiVersion")
                        .or_insert_with(|| api_version.into());
                    self.object(source, &Value::Object(map));
                }
                _ => self.object(source, item),
            }
        }
    }

    fn object(&mut self, source: &Source, value: &Value) {
        let (api_version, kind, name) = (
            str_at(value, "/apiVersion"),
            str_at(value, "/kind"),
            str_at(value, "/metadata/name"),
        );
        let at = At {
            source: source.clone(),
            object: describe(kind, name),
        };
        if !value.is_object() {
            self.problem(
                &at,
                "",
                "not a Kubernetes object: a manifest must be a mapping with apiVersion, kind \
                 and metadata",
            );
            return;
        }
        if api_version.is_empty() || kind.is_empty() {
            let field = if kind.is_empty() {
                "kind"
            } else {
                "apiVersion"
            };
            self.problem(
                &at,
                field,
                format!("Required value: every manifest needs apiVersion and kind; set {field}"),
            );
            return;
        }
        let served = match classify(api_version, kind, &source.file) {
            Classified::Use(served) => served,
            Classified::Ignore(reason) => {
                self.cluster.ignored.push(Ignored {
                    source: source.to_string(),
                    object: at.object,
                    reason,
                });
                return;
            }
            Classified::Reject(message) => {
                self.problem(&at, "apiVersion", message);
                return;
            }
        };
        if name.is_empty() {
            self.problem(
                &at,
                "metadata.name",
                "Required value: name is required; set metadata.name (simulate cannot use \
                 generateName)",
            );
            return;
        }
        let namespace = if served.namespaced {
            Some(str_at(value, "/metadata/namespace"))
                .filter(|ns| !ns.is_empty())
                .unwrap_or(DEFAULT_NAMESPACE)
        } else {
            ""
        };
        let key = (served.kind, namespace.to_owned(), name.to_owned());
        if let Some(first) = self.seen.get(&key) {
            let message = format!(
                "Duplicate value: {kind} {}{name} is also defined in {first}; keep one of them",
                if namespace.is_empty() {
                    String::new()
                } else {
                    format!("{namespace}/")
                }
            );
            self.problem(&at, "metadata.name", message);
            return;
        }
        self.seen.insert(key, source.clone());
        self.route(at, served, value);
    }

    fn route(&mut self, at: At, served: &Served, value: &Value) {
        let namespaced = served.namespaced;
        match served.route {
            Route::Karpenter(kind) => {
                if let Err(mut errors) = validate_value(kind, value, None) {
                    // CEL failures arrive in no stable order; sort so output is reproducible.
                    errors
                        .problems
                        .sort_by(|a, b| (&a.path, &a.message).cmp(&(&b.path, &b.message)));
                    for p in errors.problems {
                        self.problem(&at, p.path, p.message);
                    }
                    return;
                }
                match kind {
                    Kind::NodePool => {
                        if let Some(pool) = self.typed(&at, value, namespaced) {
                            self.cluster.nodepools.push(pool);
                        }
                    }
                    Kind::NodeClaim => {
                        if let Some(claim) = self.typed(&at, value, namespaced) {
                            self.cluster.nodeclaims.push(claim);
                        }
                    }
                    Kind::EC2NodeClass => {
                        if let Some(class) = self.typed(&at, value, namespaced) {
                            self.cluster.nodeclasses.push(class);
                        }
                    }
                }
            }
            Route::Node => {
                let Some(node) = self.typed::<Node>(&at, value, namespaced) else {
                    return;
                };
                if let Some(status) = &node.status {
                    self.check_quantities(&at, "status.capacity", status.capacity.as_ref());
                    self.check_quantities(&at, "status.allocatable", status.allocatable.as_ref());
                }
                self.cluster.nodes.push(node);
            }
            Route::Pod => {
                let Some(mut pod) = self.typed::<Pod>(&at, value, namespaced) else {
                    return;
                };
                match pod.spec.as_mut() {
                    Some(spec) => self.check_pod_spec(&at, "spec", spec),
                    None => self.problem(&at, "spec", "Required value: a Pod needs a spec"),
                }
                if pod.status.is_none()
                    && let Some(spec) = &pod.spec
                {
                    pod.status = Some(settled_status(
                        spec,
                        pod.metadata.creation_timestamp.as_ref(),
                    ));
                }
                self.pod_names.insert((
                    pod.metadata.namespace.clone().unwrap_or_default(),
                    pod.metadata.name.clone().unwrap_or_default(),
                ));
                self.cluster.pods.push(pod.into());
            }
            Route::Deployment => {
                if let Some(d) = self.typed::<Deployment>(&at, value, namespaced)
                    && let Some(d) = self.check_deployment(&at, d)
                {
                    self.workloads.push(Workload::Deployment(Box::new(d)));
                }
            }
            Route::ReplicaSet => {
                if let Some(rs) = self.typed::<ReplicaSet>(&at, value, namespaced)
                    && let Some(rs) = self.check_replicaset(&at, rs)
                {
                    self.workloads.push(Workload::ReplicaSet(Box::new(rs)));
                }
            }
            Route::StatefulSet => {
                if let Some(sts) = self.typed::<StatefulSet>(&at, value, namespaced)
                    && let Some(sts) = self.check_statefulset(&at, sts)
                {
                    self.workloads.push(Workload::StatefulSet(Box::new(sts)));
                }
            }
            Route::Job => {
                if let Some(job) = self.typed::<Job>(&at, value, namespaced)
                    && let Some(job) = self.check_job(&at, job)
                {
                    self.workloads.push(Workload::Job(Box::new(job)));
                }
            }
            Route::DaemonSet => {
                let Some(mut ds) = self.typed::<DaemonSet>(&at, value, namespaced) else {
                    return;
                };
                match ds.spec.as_mut() {
                    Some(spec) => {
                        let labels = spec
                            .template
                            .metadata
                            .as_ref()
                            .and_then(|m| m.labels.as_ref());
                        self.check_selector(&at, "DaemonSet", &spec.selector, labels);
                        self.check_template(&at, &mut spec.template);
                    }
                    None => self.problem(&at, "spec", "Required value: a DaemonSet needs a spec"),
                }
                self.cluster.daemonsets.push(ds);
            }
            Route::PodDisruptionBudget => {
                if let Some(pdb) = self.typed(&at, value, namespaced) {
                    self.cluster.pdbs.push(pdb);
                }
            }
            Route::PersistentVolume => {
                let Some(pv) = self.typed::<PersistentVolume>(&at, value, namespaced) else {
                    return;
                };
                let capacity = pv.spec.as_ref().and_then(|s| s.capacity.as_ref());
                self.check_quantities(&at, "spec.capacity", capacity);
                self.cluster.persistent_volumes.push(pv);
            }
            Route::PersistentVolumeClaim => {
                let Some(pvc) = self.typed::<PersistentVolumeClaim>(&at, value, namespaced) else {
                    return;
                };
                self.check_claim(&at, "spec", &pvc);
                self.cluster.persistent_volume_claims.push(pvc);
            }
            Route::StorageClass => {
                if let Some(class) = self.typed(&at, value, namespaced) {
                    self.cluster.storage_classes.push(class);
                }
            }
            Route::CSINode => {
                if let Some(csi) = self.typed(&at, value, namespaced) {
                    self.cluster.csi_nodes.push(csi);
                }
            }
        }
    }

    /// Deserializes into the typed form, reporting the field that does not fit, and fills in
    /// what the API server would: namespace, uid and creation time.
    fn typed<T>(&mut self, at: &At, value: &Value, namespaced: bool) -> Option<T>
    where
        T: DeserializeOwned + Resource<DynamicType = ()>,
    {
        match serde_path_to_error::deserialize::<_, T>(value) {
            Ok(mut object) => {
                settle_meta(&mut object, namespaced, &self.now);
                Some(object)
            }
            Err(e) => {
                let path = e.path().to_string();
                let path = if path == "." { String::new() } else { path };
                self.problem(
                    at,
                    path,
                    format!(
                        "Invalid value: {}; fix the field to match the {} API",
                        e.inner(),
                        T::kind(&())
                    ),
                );
                None
            }
        }
    }

    fn check_replicas(&mut self, at: &At, path: &str, value: Option<i32>) -> bool {
        match value {
            Some(n) if n < 0 => {
                self.problem(
                    at,
                    path,
                    format!("Invalid value: {n}: must be greater than or equal to 0"),
                );
                false
            }
            _ => true,
        }
    }

    /// Checks what the API server checks of a workload's selector: present, valid, and
    /// selecting the pods of its own template (otherwise the controller could never count them).
    fn check_selector(
        &mut self,
        at: &At,
        kind: &str,
        selector: &LabelSelector,
        labels: Option<&BTreeMap<String, String>>,
    ) -> bool {
        let empty = selector
            .match_labels
            .as_ref()
            .is_none_or(BTreeMap::is_empty)
            && selector
                .match_expressions
                .as_ref()
                .is_none_or(Vec::is_empty);
        if empty {
            self.problem(
                at,
                "spec.selector",
                format!(
                    "Invalid value: empty selector is invalid for {}; select the template's \
                     labels",
                    kind.to_lowercase()
                ),
            );
            return false;
        }
        let no_labels = BTreeMap::new();
        match selects(selector, labels.unwrap_or(&no_labels)) {
            Ok(true) => true,
            Ok(false) => {
                self.problem(
                    at,
                    "spec.template.metadata.labels",
                    "Invalid value: `selector` does not match template `labels`; give the pod \
                     template the labels spec.selector selects",
                );
                false
            }
            Err((path, message)) => {
                self.problem(at, format!("spec.selector.{path}"), message);
                false
            }
        }
    }

    fn check_template(&mut self, at: &At, template: &mut PodTemplateSpec) -> bool {
        let Some(spec) = template.spec.as_mut() else {
            self.problem(
                at,
                "spec.template.spec",
                "Required value: the pod template needs a spec",
            );
            return false;
        };
        self.check_pod_spec(at, "spec.template.spec", spec);
        true
    }

    fn check_deployment(&mut self, at: &At, mut d: Deployment) -> Option<Deployment> {
        let Some(spec) = d.spec.as_mut() else {
            self.problem(at, "spec", "Required value: a Deployment needs a spec");
            return None;
        };
        let replicas = self.check_replicas(at, "spec.replicas", spec.replicas);
        let labels = spec
            .template
            .metadata
            .as_ref()
            .and_then(|m| m.labels.as_ref());
        let selector = self.check_selector(at, "Deployment", &spec.selector, labels);
        let template = self.check_template(at, &mut spec.template);
        (replicas && selector && template).then_some(d)
    }

    fn check_replicaset(&mut self, at: &At, mut rs: ReplicaSet) -> Option<ReplicaSet> {
        let Some(spec) = rs.spec.as_mut() else {
            self.problem(at, "spec", "Required value: a ReplicaSet needs a spec");
            return None;
        };
        let replicas = self.check_replicas(at, "spec.replicas", spec.replicas);
        let Some(template) = spec.template.as_mut() else {
            self.problem(
                at,
                "spec.template",
                "Required value: a ReplicaSet needs a pod template",
            );
            return None;
        };
        let labels = template.metadata.as_ref().and_then(|m| m.labels.as_ref());
        let selector = self.check_selector(at, "ReplicaSet", &spec.selector, labels);
        let template = self.check_template(at, template);
        (replicas && selector && template).then_some(rs)
    }

    fn check_statefulset(&mut self, at: &At, mut sts: StatefulSet) -> Option<StatefulSet> {
        let Some(spec) = sts.spec.as_mut() else {
            self.problem(at, "spec", "Required value: a StatefulSet needs a spec");
            return None;
        };
        let mut ok = self.check_replicas(at, "spec.replicas", spec.replicas);
        let start = spec.ordinals.as_ref().and_then(|o| o.start);
        ok &= self.check_replicas(at, "spec.ordinals.start", start);
        let labels = spec
            .template
            .metadata
            .as_ref()
            .and_then(|m| m.labels.as_ref());
        ok &= self.check_selector(at, "StatefulSet", &spec.selector, labels);
        ok &= self.check_template(at, &mut spec.template);
        for (i, claim) in spec.volume_claim_templates.iter().flatten().enumerate() {
            let path = format!("spec.volumeClaimTemplates[{i}]");
            if claim.metadata.name.as_deref().is_none_or(str::is_empty) {
                self.problem(
                    at,
                    format!("{path}.metadata.name"),
                    "Required value: each volumeClaimTemplate needs a name; pods mount it by \
                     that name",
                );
                ok = false;
            }
            ok &= self.check_claim(at, &format!("{path}.spec"), claim);
        }
        ok.then_some(sts)
    }

    fn check_job(&mut self, at: &At, mut job: Job) -> Option<Job> {
        let Some(spec) = job.spec.as_mut() else {
            self.problem(at, "spec", "Required value: a Job needs a spec");
            return None;
        };
        let mut ok = self.check_replicas(at, "spec.parallelism", spec.parallelism);
        ok &= self.check_replicas(at, "spec.completions", spec.completions);
        ok &= self.check_template(at, &mut spec.template);
        ok.then_some(job)
    }

    fn check_claim(&mut self, at: &At, path: &str, claim: &PersistentVolumeClaim) -> bool {
        let requests = claim
            .spec
            .as_ref()
            .and_then(|s| s.resources.as_ref())
            .and_then(|r| r.requests.as_ref());
        self.check_quantities(at, &format!("{path}.resources.requests"), requests)
    }

    /// Checks the resource quantities of a pod spec and applies the API server's defaulting
    /// that scheduling depends on: a container's requests default to its limits.
    fn check_pod_spec(&mut self, at: &At, path: &str, spec: &mut PodSpec) {
        if spec.containers.is_empty() {
            self.problem(
                at,
                format!("{path}.containers"),
                "Required value: a pod needs at least one container",
            );
        }
        let init = spec.init_containers.as_deref_mut().unwrap_or_default();
        for (list, containers) in [
            ("initContainers", init),
            ("containers", &mut spec.containers),
        ] {
            for (i, container) in containers.iter_mut().enumerate() {
                let path = format!("{path}.{list}[{i}].resources");
                self.check_container(at, &path, container);
            }
        }
        self.check_quantities(at, &format!("{path}.overhead"), spec.overhead.as_ref());
        if let Some(resources) = &spec.resources {
            let path = format!("{path}.resources");
            self.check_quantities(at, &format!("{path}.requests"), resources.requests.as_ref());
            self.check_quantities(at, &format!("{path}.limits"), resources.limits.as_ref());
        }
    }

    fn check_container(&mut self, at: &At, path: &str, container: &mut Container) {
        let Some(ResourceRequirements {
            limits, requests, ..
        }) = container.resources.as_mut()
        else {
            return;
        };
        let valid = self.check_quantities(at, &format!("{path}.limits"), limits.as_ref())
            & self.check_quantities(at, &format!("{path}.requests"), requests.as_ref());
        let Some(limits) = limits.as_ref().filter(|l| valid && !l.is_empty()) else {
            return;
        };
        let requests = requests.get_or_insert_default();
        for (resource, limit) in limits {
            let request = requests
                .entry(resource.clone())
                .or_insert_with(|| limit.clone());
            if let (Some(r), Some(l)) = (quantity_value(&request.0), quantity_value(&limit.0))
                && r > l
            {
                let message = format!(
                    "Invalid value: {:?}: must be less than or equal to {resource} limit of {}",
                    request.0, limit.0
                );
                self.problem(at, format!("{path}.requests.{resource}"), message);
            }
        }
    }

    /// Reports every quantity that is not one; `true` when all are.
    fn check_quantities(
        &mut self,
        at: &At,
        path: &str,
        list: Option<&BTreeMap<String, Quantity>>,
    ) -> bool {
        let mut valid = true;
        for (name, Quantity(q)) in list.into_iter().flatten() {
            let message = match quantity_value(q) {
                None => format!(
                    "Invalid value: {q:?}: quantities must match the regular expression \
                     '{QUANTITY_PATTERN}', e.g. 500m, 2 or 1.5Gi"
                ),
                Some(_) if q.starts_with('-') => {
                    format!("Invalid value: {q:?}: must be greater than or equal to 0")
                }
                Some(_) => continue,
            };
            self.problem(at, format!("{path}.{name}"), message);
            valid = false;
        }
        valid
    }

    /// Applies the default StorageClass, expands workloads, and returns the cluster or every
    /// problem found.
    fn finish(mut self) -> Result<Cluster, LoadError> {
        let default_class = default_storage_class(&self.cluster.storage_classes);
        for pvc in &mut self.cluster.persistent_volume_claims {
            apply_default_class(pvc, default_class.as_deref());
        }
        let workloads = std::mem::take(&mut self.workloads);
        self.reserve_pods(&workloads);
        for workload in workloads {
            match workload {
                Workload::Deployment(d) => self.expand_deployment(&d),
                Workload::ReplicaSet(rs) => self.expand_replicaset(&rs),
                Workload::StatefulSet(sts) => {
                    self.expand_statefulset(&sts, default_class.as_deref())
                }
                Workload::Job(job) => self.expand_job(&job),
            }
        }
        if self.problems.is_empty() {
            Ok(self.cluster)
        } else {
            Err(LoadError {
                problems: self.problems,
            })
        }
    }

    /// A name from `prefix` plus a 5-character suffix, as `generateName` gives, hashed from
    /// `seed` and unique among the pods of the namespace.
    fn generate_pod_name(&mut self, namespace: &str, prefix: &str, seed: &str) -> String {
        let prefix = truncate(prefix, MAX_PREFIX_LEN);
        let mut attempt = 0u32;
        loop {
            let h = hash(&[
                b"pod",
                namespace.as_bytes(),
                prefix.as_bytes(),
                seed.as_bytes(),
                &attempt.to_be_bytes(),
            ]);
            let name = format!("{prefix}{}", encode(h, SUFFIX_LEN));
            if self.pod_names.insert((namespace.to_owned(), name.clone())) {
                return name;
            }
            attempt += 1;
        }
    }

    fn push_pod(&mut self, mut pod: ClusterPod) {
        settle_object_meta(&mut pod.metadata, "Pod", true, &self.now);
        self.cluster.pods.push(pod);
    }

    /// Room for `n` more pods, so expanding 20,000 replicas allocates once.
    fn reserve_pods(&mut self, workloads: &[Workload]) {
        let n: usize = workloads
            .iter()
            .map(|w| {
                let replicas = match w {
                    Workload::Deployment(d) => d.spec.as_ref().and_then(|s| s.replicas),
                    Workload::ReplicaSet(rs) => rs.spec.as_ref().and_then(|s| s.replicas),
                    Workload::StatefulSet(sts) => sts.spec.as_ref().and_then(|s| s.replicas),
                    Workload::Job(job) => job.spec.as_ref().and_then(|s| s.parallelism),
                };
                usize::try_from(replicas.unwrap_or(1)).unwrap_or(0)
            })
            .sum();
        self.cluster.pods.reserve_exact(n);
    }

    /// Deployment → its current ReplicaSet `<deployment>-<pod-template-hash>` → its pods.
    fn expand_deployment(&mut self, d: &Deployment) {
        let Some(spec) = &d.spec else { return };
        let template_hash = encode(
            hash(&[
                b"pod-template-hash",
                &serde_json::to_vec(&spec.template).unwrap_or_default(),
            ]),
            10,
        );
        let namespace = namespace_of(&d.metadata);
        let rs_name = format!(
            "{}-{template_hash}",
            d.metadata.name.as_deref().unwrap_or_default()
        );
        let owner =
            controller_ref::<ReplicaSet>(&rs_name, uid_for("ReplicaSet", namespace, &rs_name));
        let created = created_of(&d.metadata, &self.now);
        let labels = [("pod-template-hash".to_owned(), template_hash)];
        self.replica_pods(
            namespace,
            &owner,
            &spec.template,
            spec.replicas,
            &labels,
            &created,
        );
    }

    fn expand_replicaset(&mut self, rs: &ReplicaSet) {
        let Some(spec) = &rs.spec else { return };
        let Some(template) = &spec.template else {
            return;
        };
        let namespace = namespace_of(&rs.metadata);
        let owner = own_controller_ref::<ReplicaSet>(&rs.metadata);
        let created = created_of(&rs.metadata, &self.now);
        self.replica_pods(namespace, &owner, template, spec.replicas, &[], &created);
    }

    /// `replicas` (default 1) interchangeable pods `<owner>-<suffix>`, as a ReplicaSet creates.
    fn replica_pods(
        &mut self,
        namespace: &str,
        owner: &OwnerReference,
        template: &PodTemplateSpec,
        replicas: Option<i32>,
        labels: &[(String, String)],
        created: &Time,
    ) {
        let prefix = format!("{}-", owner.name);
        let shared = SharedTemplate::new(template, created);
        for i in 0..replicas.unwrap_or(1) {
            let name = self.generate_pod_name(namespace, &prefix, &i.to_string());
            let mut pod = shared.pod(namespace, name, owner);
            pod.metadata.generate_name = Some(prefix.clone());
            extend(&mut pod.metadata.labels, labels);
            self.push_pod(pod);
        }
    }

    /// StatefulSet → pods `<sts>-<ordinal>` with stable hostnames, and a PVC
    /// `<template>-<sts>-<ordinal>` per volumeClaimTemplate (unless one already exists).
    fn expand_statefulset(&mut self, sts: &StatefulSet, default_class: Option<&str>) {
        let Some(spec) = &sts.spec else { return };
        let namespace = namespace_of(&sts.metadata);
        let name = sts.metadata.name.as_deref().unwrap_or_default();
        let owner = own_controller_ref::<StatefulSet>(&sts.metadata);
        let created = created_of(&sts.metadata, &self.now);
        let revision = format!(
            "{name}-{}",
            encode(
                hash(&[
                    b"controller-revision-hash",
                    &serde_json::to_vec(&spec.template).unwrap_or_default()
                ]),
                10
            )
        );
        let start = spec.ordinals.as_ref().and_then(|o| o.start).unwrap_or(0);
        let claims = spec.volume_claim_templates.as_deref().unwrap_or_default();
        let shared = SharedTemplate::new(&spec.template, &created);
        let existing_claims: HashSet<(String, String)> = self
            .cluster
            .persistent_volume_claims
            .iter()
            .map(|c| {
                (
                    namespace_of(&c.metadata).to_owned(),
                    c.metadata.name.clone().unwrap_or_default(),
                )
            })
            .collect();
        for ordinal in (0..spec.replicas.unwrap_or(1)).map(|i| start.saturating_add(i)) {
            let pod_name = format!("{name}-{ordinal}");
            let mut volumes = Vec::new();
            for claim in claims {
                let template_name = claim.metadata.name.as_deref().unwrap_or_default();
                let claim_name = format!("{template_name}-{pod_name}");
                volumes.push(Volume {
                    name: template_name.to_owned(),
                    persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                        claim_name: claim_name.clone(),
                        read_only: None,
                    }),
                    ..Volume::default()
                });
                if !existing_claims.contains(&(namespace.to_owned(), claim_name.clone())) {
                    let pvc = claim_from_template(
                        namespace,
                        claim_name,
                        claim,
                        &spec.selector,
                        &created,
                        default_class,
                    );
                    self.cluster.persistent_volume_claims.push(pvc);
                }
            }
            // A pod of that name in the input is this ordinal, already created.
            if !self
                .pod_names
                .insert((namespace.to_owned(), pod_name.clone()))
            {
                continue;
            }
            let mut pod = shared.pod(namespace, pod_name.clone(), &owner);
            extend(
                &mut pod.metadata.labels,
                &[
                    (
                        "statefulset.kubernetes.io/pod-name".to_owned(),
                        pod_name.clone(),
                    ),
                    (
                        "apps.kubernetes.io/pod-index".to_owned(),
                        ordinal.to_string(),
                    ),
                    ("controller-revision-hash".to_owned(), revision.clone()),
                ],
            );
            // Each ordinal has its own hostname and claims, so its own spec.
            let pod_spec = Arc::make_mut(&mut pod.spec);
            pod_spec.hostname = Some(pod_name);
            pod_spec.subdomain = spec.service_name.clone().filter(|s| !s.is_empty());
            let pod_volumes = pod_spec.volumes.get_or_insert_default();
            pod_volumes.retain(|v| !volumes.iter().any(|c| c.name == v.name));
            pod_volumes.extend(volumes);
            self.push_pod(pod);
        }
    }

    /// Job → the pods running at once: `parallelism` (default 1), at most `completions`, none
    /// while suspended. Indexed Jobs name pods `<job>-<index>-<suffix>`.
    fn expand_job(&mut self, job: &Job) {
        let Some(spec) = &job.spec else { return };
        if spec.suspend == Some(true) {
            return;
        }
        let count = spec
            .parallelism
            .unwrap_or(1)
            .min(spec.completions.unwrap_or(i32::MAX));
        let namespace = namespace_of(&job.metadata);
        let name = job.metadata.name.as_deref().unwrap_or_default();
        let owner = own_controller_ref::<Job>(&job.metadata);
        let created = created_of(&job.metadata, &self.now);
        let indexed = spec.completion_mode.as_deref() == Some("Indexed");
        let shared = SharedTemplate::new(&spec.template, &created);
        let labels = [
            (
                "batch.kubernetes.io/controller-uid".to_owned(),
                owner.uid.clone(),
            ),
            ("batch.kubernetes.io/job-name".to_owned(), name.to_owned()),
            ("controller-uid".to_owned(), owner.uid.clone()),
            ("job-name".to_owned(), name.to_owned()),
        ];
        for i in 0..count {
            let prefix = if indexed {
                format!("{name}-{i}-")
            } else {
                format!("{name}-")
            };
            let pod_name = self.generate_pod_name(namespace, &prefix, &i.to_string());
            let mut pod = shared.pod(namespace, pod_name, &owner);
            pod.metadata.generate_name = Some(prefix);
            extend(&mut pod.metadata.labels, &labels);
            if indexed {
                let index = [(
                    "batch.kubernetes.io/job-completion-index".to_owned(),
                    i.to_string(),
                )];
                extend(&mut pod.metadata.labels, &index);
                extend(&mut pod.metadata.annotations, &index);
                Arc::make_mut(&mut pod.spec)
                    .hostname
                    .get_or_insert_with(|| format!("{name}-{i}"));
            }
            self.push_pod(pod);
        }
    }
}

/// Whether `selector` selects `labels`; `Err((field, message))` for an invalid selector.
fn selects(
    selector: &LabelSelector,
    labels: &BTreeMap<String, String>,
) -> Result<bool, (String, String)> {
    let mut matches = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    for (i, expr) in selector.match_expressions.iter().flatten().enumerate() {
        let value = labels.get(&expr.key);
        let values = expr.values.as_deref().unwrap_or_default();
        matches &= match expr.operator.as_str() {
            "In" => value.is_some_and(|v| values.contains(v)),
            "NotIn" => !value.is_some_and(|v| values.contains(v)),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            other => {
                return Err((
                    format!("matchExpressions[{i}].operator"),
                    format!(
                        "Unsupported value: {other:?}: supported values: \"In\", \"NotIn\", \
                         \"Exists\", \"DoesNotExist\""
                    ),
                ));
            }
        };
    }
    Ok(matches)
}

/// Fills in what the API server sets on create: the default namespace, a uid (hashed from kind,
/// namespace and name, so reloading gives the same uid) and the creation time.
fn settle_meta<T: Resource<DynamicType = ()>>(object: &mut T, namespaced: bool, now: &Time) {
    settle_object_meta(object.meta_mut(), &T::kind(&()), namespaced, now);
}

/// [`settle_meta`] on the metadata of an object of `kind`.
fn settle_object_meta(meta: &mut ObjectMeta, kind: &str, namespaced: bool, now: &Time) {
    if namespaced && meta.namespace.as_deref().is_none_or(str::is_empty) {
        meta.namespace = Some(DEFAULT_NAMESPACE.to_owned());
    }
    if meta.uid.as_deref().is_none_or(str::is_empty) {
        let namespace = meta.namespace.as_deref().unwrap_or_default();
        meta.uid = Some(uid_for(
            kind,
            namespace,
            meta.name.as_deref().unwrap_or_default(),
        ));
    }
    meta.creation_timestamp.get_or_insert_with(|| now.clone());
}

/// The status a pod given without one would have: Running when bound, otherwise Pending and
/// marked unschedulable by the scheduler (or gated, with scheduling gates).
fn settled_status(spec: &PodSpec, created: Option<&Time>) -> PodStatus {
    if spec.node_name.as_deref().is_some_and(|n| !n.is_empty()) {
        return PodStatus {
            phase: Some("Running".to_owned()),
            ..PodStatus::default()
        };
    }
    let gated = spec
        .scheduling_gates
        .as_ref()
        .is_some_and(|g| !g.is_empty());
    PodStatus {
        phase: Some("Pending".to_owned()),
        conditions: Some(vec![PodCondition {
            type_: "PodScheduled".to_owned(),
            status: "False".to_owned(),
            reason: Some(
                if gated {
                    "SchedulingGated"
                } else {
                    "Unschedulable"
                }
                .to_owned(),
            ),
            last_transition_time: created.cloned(),
            ..PodCondition::default()
        }]),
        ..PodStatus::default()
    }
}

/// What the pods a controller stamps from one template have in common: the spec and the
/// status they start with, built once and shared.
struct SharedTemplate<'a> {
    template: &'a PodTemplateSpec,
    created: &'a Time,
    spec: Arc<PodSpec>,
    status: Arc<PodStatus>,
}

impl<'a> SharedTemplate<'a> {
    fn new(template: &'a PodTemplateSpec, created: &'a Time) -> Self {
        let spec = template.spec.clone().unwrap_or_default();
        let status = settled_status(&spec, Some(created));
        Self {
            template,
            created,
            spec: Arc::new(spec),
            status: Arc::new(status),
        }
    }

    /// A pod as a controller stamps it from the template.
    fn pod(&self, namespace: &str, name: String, owner: &OwnerReference) -> ClusterPod {
        let template_meta = self.template.metadata.as_ref();
        ClusterPod {
            metadata: ObjectMeta {
                name: Some(name),
                namespace: Some(namespace.to_owned()),
                labels: template_meta.and_then(|m| m.labels.clone()),
                annotations: template_meta.and_then(|m| m.annotations.clone()),
                owner_references: Some(vec![owner.clone()]),
                creation_timestamp: Some(self.created.clone()),
                ..ObjectMeta::default()
            },
            spec: self.spec.clone(),
            status: Some(self.status.clone()),
        }
    }
}

/// The PVC a StatefulSet creates from a volumeClaimTemplate: unbound, labelled with the set's
/// selector so it can be found again.
fn claim_from_template(
    namespace: &str,
    name: String,
    template: &PersistentVolumeClaim,
    selector: &LabelSelector,
    created: &Time,
    default_class: Option<&str>,
) -> PersistentVolumeClaim {
    let mut labels = template.metadata.labels.clone().unwrap_or_default();
    labels.extend(selector.match_labels.clone().unwrap_or_default());
    let mut pvc = PersistentVolumeClaim {
        metadata: ObjectMeta {
            uid: Some(uid_for("PersistentVolumeClaim", namespace, &name)),
            name: Some(name),
            namespace: Some(namespace.to_owned()),
            labels: Some(labels),
            annotations: template.metadata.annotations.clone(),
            creation_timestamp: Some(created.clone()),
            ..ObjectMeta::default()
        },
        spec: template.spec.clone(),
        status: Some(k8s_openapi::api::core::v1::PersistentVolumeClaimStatus {
            phase: Some("Pending".to_owned()),
            ..Default::default()
        }),
    };
    apply_default_class(&mut pvc, default_class);
    pvc
}

/// The class the DefaultStorageClass admission plugin assigns: of those annotated default, the
/// newest (ties: first by name).
fn default_storage_class(classes: &[StorageClass]) -> Option<String> {
    classes
        .iter()
        .filter(|c| {
            c.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(DEFAULT_CLASS_ANNOTATION))
                .is_some_and(|v| v == "true")
        })
        .max_by(|a, b| {
            a.metadata
                .creation_timestamp
                .cmp(&b.metadata.creation_timestamp)
                .then_with(|| b.metadata.name.cmp(&a.metadata.name))
        })
        .and_then(|c| c.metadata.name.clone())
}

/// Sets the default class on a claim that names none (an explicit `""` means "no class").
fn apply_default_class(pvc: &mut PersistentVolumeClaim, default_class: Option<&str>) {
    let Some(class) = default_class else { return };
    let legacy = pvc
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(BETA_CLASS_ANNOTATION));
    if let Some(spec) = pvc.spec.as_mut()
        && spec.storage_class_name.is_none()
        && !legacy
    {
        spec.storage_class_name = Some(class.to_owned());
    }
}

fn namespace_of(meta: &ObjectMeta) -> &str {
    meta.namespace.as_deref().unwrap_or(DEFAULT_NAMESPACE)
}

fn created_of(meta: &ObjectMeta, now: &Time) -> Time {
    meta.creation_timestamp
        .clone()
        .unwrap_or_else(|| now.clone())
}

/// A controller reference to an object of kind `K`.
fn controller_ref<K: Resource<DynamicType = ()>>(name: &str, uid: String) -> OwnerReference {
    OwnerReference {
        api_version: K::api_version(&()).into_owned(),
        kind: K::kind(&()).into_owned(),
        name: name.to_owned(),
        uid,
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// A controller reference to the object `meta` describes (its uid was settled on load).
fn own_controller_ref<K: Resource<DynamicType = ()>>(meta: &ObjectMeta) -> OwnerReference {
    controller_ref::<K>(
        meta.name.as_deref().unwrap_or_default(),
        meta.uid.clone().unwrap_or_default(),
    )
}

fn extend(map: &mut Option<BTreeMap<String, String>>, entries: &[(String, String)]) {
    if !entries.is_empty() {
        map.get_or_insert_default().extend(entries.iter().cloned());
    }
}

/// At most `max` bytes of `s`, cut at a character boundary.
fn truncate(s: &str, max: usize) -> &str {
    let end = (0..=max.min(s.len()))
        .rev()
        .find(|&i| s.is_char_boundary(i))
        .unwrap_or(0);
    &s[..end]
}

/// 128-bit FNV-1a over the parts, each followed by a 0 byte so `("ab", "c")` and `("a", "bc")`
/// differ, then mixed so that similar inputs (`db-0`, `db-1`) give unrelated-looking outputs.
/// Stable across Rust releases and platforms, unlike `std`'s hasher.
fn hash(parts: &[&[u8]]) -> u128 {
    const OFFSET: u128 = 0x6c62_272e_07bb_0142_62b8_2175_6295_c58d;
    const PRIME: u128 = 0x0000_0000_0100_0000_0000_0000_0000_013b;
    let mut h = OFFSET;
    for part in parts {
        for &b in part.iter().chain(&[0]) {
            h ^= u128::from(b);
            h = h.wrapping_mul(PRIME);
        }
    }
    // Multiplication only carries upwards; xor-shifts carry the high bits back down.
    for multiplier in [
        0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835_u128,
        0xbf58_476d_1ce4_e5b9_94d0_49bb_1331_11eb_u128,
    ] {
        h ^= h >> 67;
        h = h.wrapping_mul(multiplier);
    }
    h ^ (h >> 61)
}

/// `len` characters of Kubernetes' name alphabet from a hash.
fn encode(mut h: u128, len: usize) -> String {
    let base = NAME_ALPHABET.len() as u128;
    (0..len)
        .map(|_| {
            let c = NAME_ALPHABET[(h % base) as usize];
            h /= base;
            char::from(c)
        })
        .collect()
}

/// A UUID-shaped (RFC 9562 version 8) uid hashed from what identifies the object.
fn uid_for(kind: &str, namespace: &str, name: &str) -> String {
    let mut h = hash(&[
        b"uid",
        kind.as_bytes(),
        namespace.as_bytes(),
        name.as_bytes(),
    ]);
    h = (h & !(0xf << 76)) | (0x8 << 76);
    h = (h & !(0x3 << 62)) | (0x2 << 62);
    let hex = format!("{h:032x}");
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}
