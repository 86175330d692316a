//! Loading a [`Snapshot`](crate::snapshot::Snapshot) from the ordinary manifests users already
//! have.
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

mod checks;
mod workloads;

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

use crate::apis::validation::{Kind, validate_value};
use crate::apis::{NodeClaim, NodeOverlay, NodePool};
use crate::manifest::{Document, Source};
use crate::scheduling::pod_shapes::PodShapes;
use crate::scheduling::resources::quantity_value;
use crate::snapshot::{ClusterPod, DEFAULT_NAMESPACE, Ignored, Snapshot};
use workloads::{apply_default_class, default_storage_class};

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
/// Most pods one input may describe, explicit and expanded from workloads together. Each pod
/// costs memory and scheduling time, so `replicas: 2000000000` must be an error naming the field
/// rather than an allocation that aborts the process; the limit is above the largest cluster
/// simulate is built for (150,000 pods in the benchmarks).
pub const MAX_PODS: usize = 200_000;
/// The API server's rule for quantities, quoted in errors so users see what is accepted.
const QUANTITY_PATTERN: &str = r"^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$";

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
pub fn load(docs: &[Document], now: DateTime<Utc>) -> Result<Snapshot, LoadError> {
    let mut loader = Loader::new(now);
    for doc in docs {
        loader.document(&doc.source, &doc.value);
    }
    loader.finish()
}

/// How `load` treats an object, by `apiVersion` and `kind`.
#[derive(Clone, Copy)]
enum Route {
    Karpenter(Kind),
    NodeOverlay,
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
    served(
        "NodeOverlay",
        "karpenter.sh",
        "v1alpha1",
        false,
        Route::NodeOverlay,
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
    } else if kind == "NodeOverlay" {
        Classified::Reject(format!(
            "{api_version} {kind} is not served: Karpenter v1.14 serves NodeOverlay as \
             karpenter.sh/v1alpha1; change apiVersion to karpenter.sh/v1alpha1"
        ))
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
    cluster: Snapshot,
    problems: Vec<LoadProblem>,
    /// (kind, namespace, name) → where it was first defined, to report duplicates.
    seen: HashMap<(&'static str, String, String), Source>,
    workloads: Vec<Workload>,
    /// (namespace, name) of every pod so far, so generated names never collide.
    pod_names: HashSet<(String, String)>,
    /// Pods the input describes so far, explicit and to be expanded; at most [`MAX_PODS`].
    planned_pods: usize,
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
            cluster: Snapshot::default(),
            problems: Vec::new(),
            seen: HashMap::new(),
            workloads: Vec::new(),
            pod_names: HashSet::new(),
            planned_pods: 0,
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
                        if let Some(pool) = self.typed::<NodePool>(&at, value, namespaced) {
                            self.cluster.nodepools.push(Arc::new(pool));
                        }
                    }
                    Kind::NodeClaim => {
                        if let Some(claim) = self.typed::<NodeClaim>(&at, value, namespaced) {
                            self.cluster.nodeclaims.push(Arc::new(claim));
                        }
                    }
                    Kind::EC2NodeClass => {
                        if let Some(class) = self.typed(&at, value, namespaced) {
                            if let Err(e) = crate::snapshot::reservations::available_counts(&class)
                            {
                                self.problem(
                                    &at,
                                    format!(
                                        "metadata.annotations[{}]",
                                        crate::snapshot::reservations::AVAILABLE_ANNOTATION
                                    ),
                                    e,
                                );
                            }
                            self.cluster.nodeclasses.push(Arc::new(class));
                        }
                    }
                }
            }
            Route::NodeOverlay => {
                let Some(overlay) = self.typed::<NodeOverlay>(&at, value, namespaced) else {
                    return;
                };
                let quantities_valid =
                    self.check_quantities(&at, "spec.capacity", overlay.spec.capacity.as_ref());
                match overlay.validate() {
                    Ok(()) if quantities_valid => {
                        self.cluster.node_overlays.push(Arc::new(overlay))
                    }
                    Ok(()) => {}
                    Err(problems) => {
                        for p in problems {
                            self.problem(&at, p.path, p.message);
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
                self.cluster.nodes.push(Arc::new(node));
            }
            Route::Pod => {
                let Some(mut pod) = self.typed::<Pod>(&at, value, namespaced) else {
                    return;
                };
                if !self.plan_pods(&at, "", 1) {
                    return;
                }
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
                self.cluster.pods.push(Arc::new(pod.into()));
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
                self.cluster.daemonsets.push(Arc::new(ds));
            }
            Route::PodDisruptionBudget => {
                if let Some(pdb) = self.typed::<PodDisruptionBudget>(&at, value, namespaced) {
                    self.cluster.pdbs.push(Arc::new(pdb));
                }
            }
            Route::PersistentVolume => {
                let Some(pv) = self.typed::<PersistentVolume>(&at, value, namespaced) else {
                    return;
                };
                let capacity = pv.spec.as_ref().and_then(|s| s.capacity.as_ref());
                self.check_quantities(&at, "spec.capacity", capacity);
                self.cluster.persistent_volumes.push(Arc::new(pv));
            }
            Route::PersistentVolumeClaim => {
                let Some(pvc) = self.typed::<PersistentVolumeClaim>(&at, value, namespaced) else {
                    return;
                };
                self.check_claim(&at, "spec", &pvc);
                self.cluster.persistent_volume_claims.push(Arc::new(pvc));
            }
            Route::StorageClass => {
                if let Some(class) = self.typed::<StorageClass>(&at, value, namespaced) {
                    self.cluster.storage_classes.push(Arc::new(class));
                }
            }
            Route::CSINode => {
                if let Some(csi) = self.typed::<CSINode>(&at, value, namespaced) {
                    self.cluster.csi_nodes.push(Arc::new(csi));
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

    /// Applies the default StorageClass, expands workloads, and returns the cluster or every
    /// problem found.
    fn finish(mut self) -> Result<Snapshot, LoadError> {
        if !self.problems.is_empty() {
            // Expansion finds no problems of its own; skip the work when the input is rejected.
            return Err(LoadError {
                problems: self.problems,
            });
        }
        let default_class = default_storage_class(&self.cluster.storage_classes);
        for pvc in &mut self.cluster.persistent_volume_claims {
            // Loaded just now, the claims are not shared yet: no copy is made.
            apply_default_class(Arc::make_mut(pvc), default_class.as_deref());
        }
        let workloads = std::mem::take(&mut self.workloads);
        // Bounded by MAX_PODS: every workload's count was checked on the way in.
        self.cluster.pods.reserve_exact(self.planned_pods);
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
        // The pods are final: converted once, replicas sharing their shape.
        let mut shapes = PodShapes::default();
        for pod in &self.cluster.pods {
            pod.convert_with(&mut shapes);
        }
        Ok(self.cluster)
    }
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
