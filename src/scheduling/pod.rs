//! The scheduler's view of a pod: requests, node constraints, tolerations, topology and affinity,
//! converted once from the Kubernetes object so the bin-packing loop never touches it again.

use std::collections::BTreeMap;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, LabelSelectorRequirement, ObjectMeta,
};

use crate::apis::nodeclaim::Operator;

use super::requirements::NodeSelectorExpression;
use super::resources::{self, Resources};
use super::taints::Toleration;

/// A label selector (`matchLabels` + `matchExpressions`), as pod affinity and topology spread
/// constraints use it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Selector {
    /// `key In [values]`, `key NotIn`, `key Exists`, `key DoesNotExist`, ANDed.
    pub expressions: Vec<(String, SelectorOp, Vec<String>)>,
}

/// Label selector operators.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SelectorOp {
    /// Value in the list.
    In,
    /// Value not in the list, or label absent.
    NotIn,
    /// Label present.
    Exists,
    /// Label absent.
    DoesNotExist,
}

impl Selector {
    /// Converts a Kubernetes label selector; `None` for an invalid operator.
    pub fn from_k8s(s: &LabelSelector) -> Result<Self, String> {
        let mut expressions: Vec<(String, SelectorOp, Vec<String>)> = s
            .match_labels
            .iter()
            .flatten()
            .map(|(k, v)| (k.clone(), SelectorOp::In, vec![v.clone()]))
            .collect();
        for LabelSelectorRequirement {
            key,
            operator,
            values,
        } in s.match_expressions.iter().flatten()
        {
            let op = match operator.as_str() {
                "In" => SelectorOp::In,
                "NotIn" => SelectorOp::NotIn,
                "Exists" => SelectorOp::Exists,
                "DoesNotExist" => SelectorOp::DoesNotExist,
                other => {
                    return Err(format!(
                        "label selector operator {other:?} is not supported; use In, NotIn, Exists or DoesNotExist"
                    ));
                }
            };
            let mut values = values.clone().unwrap_or_default();
            values.sort();
            expressions.push((key.clone(), op, values));
        }
        expressions.sort();
        Ok(Self { expressions })
    }

    /// Whether labels satisfy every expression (an empty selector matches everything).
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.expressions.iter().all(|(key, op, values)| {
            let value = labels.get(key);
            match op {
                SelectorOp::In => value.is_some_and(|v| values.contains(v)),
                SelectorOp::NotIn => value.is_none_or(|v| !values.contains(v)),
                SelectorOp::Exists => value.is_some(),
                SelectorOp::DoesNotExist => value.is_none(),
            }
        })
    }

    /// Adds `key In [value]` for each key of `match_label_keys` the pod carries (topology
    /// spread's `matchLabelKeys`).
    pub fn with_label_keys(mut self, keys: &[String], labels: &BTreeMap<String, String>) -> Self {
        for key in keys {
            if let Some(value) = labels.get(key) {
                self.expressions
                    .push((key.clone(), SelectorOp::In, vec![value.clone()]));
            }
        }
        self.expressions.sort();
        self
    }
}

/// What to do when a topology spread constraint cannot be met.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WhenUnsatisfiable {
    /// Leave the pod pending.
    DoNotSchedule,
    /// A preference: relaxed when it cannot be met.
    ScheduleAnyway,
}

/// A topology spread constraint.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SpreadConstraint {
    /// The label whose values are the domains.
    pub topology_key: String,
    /// Allowed difference between the fullest and emptiest domain.
    pub max_skew: u32,
    /// Minimum number of domains to spread over.
    pub min_domains: Option<u32>,
    /// Hard or soft.
    pub when_unsatisfiable: WhenUnsatisfiable,
    /// Pods counted (already including `matchLabelKeys`).
    pub selector: Selector,
    /// Whether only domains the pod's node affinity allows count (`nodeAffinityPolicy: Honor`,
    /// the default).
    pub honor_node_affinity: bool,
    /// Whether domains of nodes whose taints the pod does not tolerate are skipped
    /// (`nodeTaintsPolicy: Honor`; default Ignore).
    pub honor_node_taints: bool,
}

/// A pod affinity or anti-affinity term.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct AffinityTerm {
    /// The label whose values are the domains.
    pub topology_key: String,
    /// Pods the term refers to.
    pub selector: Selector,
    /// Namespaces of those pods; empty means the pod's own namespace unless `all_namespaces`.
    pub namespaces: Vec<String>,
    /// `namespaceSelector: {}`: every namespace.
    pub all_namespaces: bool,
}

impl AffinityTerm {
    /// Whether the term refers to a pod in `namespace` with `labels`.
    pub fn selects(
        &self,
        owner_namespace: &str,
        namespace: &str,
        labels: &BTreeMap<String, String>,
    ) -> bool {
        let ns_ok = if self.all_namespaces {
            true
        } else if self.namespaces.is_empty() {
            namespace == owner_namespace
        } else {
            self.namespaces.iter().any(|n| n == namespace)
        };
        ns_ok && self.selector.matches(labels)
    }
}

/// A host port a pod binds: two pods with the same one cannot share a node.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HostPort {
    /// Host IP (`0.0.0.0` when unset).
    pub ip: String,
    /// Port.
    pub port: i32,
    /// TCP, UDP or SCTP.
    pub protocol: String,
}

impl HostPort {
    /// Whether two ports collide (same port and protocol, and same IP or either a wildcard).
    pub fn conflicts(&self, other: &HostPort) -> bool {
        let wildcard = |ip: &str| ip == "0.0.0.0" || ip == "::" || ip.is_empty();
        self.port == other.port
            && self.protocol == other.protocol
            && (self.ip == other.ip || wildcard(&self.ip) || wildcard(&other.ip))
    }
}

/// A persistent volume a pod mounts through a CSI driver: nodes can attach only so many volumes
/// per driver (CSINode `allocatable.count`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct VolumeRef {
    /// CSI driver, e.g. `ebs.csi.aws.com`.
    pub driver: Arc<str>,
    /// The volume (PV name, or the claim while unbound).
    pub id: Arc<str>,
}

/// A pod as the scheduler sees it: who it is, and its [`PodShape`] (what its spec asks of a
/// node), which siblings converted from the same spec and labels share (see
/// [`super::pod_shapes::PodShapes`]). Replicas of one workload differ only in their names, so
/// 20,000 of them hold 20,000 names and one shape. The shape's fields read as the pod's own
/// (`pod.requests`); changing one (a volume's zone added to `required_terms`) gives that pod a
/// copy of its own.
#[derive(Clone, Debug)]
pub struct Pod {
    /// Namespace.
    pub namespace: Arc<str>,
    /// Name.
    pub name: Arc<str>,
    /// UID, the last tie-breaker of the queue order.
    pub uid: Arc<str>,
    /// Labels (for selectors of other pods); shared, since replicas of a workload carry the
    /// same labels.
    pub labels: Arc<BTreeMap<String, String>>,
    /// Creation time in seconds since the epoch (queue order).
    pub created: i64,
    /// Owner kind (`DaemonSet`, `ReplicaSet`, `Node`, ...), for filtering.
    pub owner_kind: Option<Arc<str>>,
    /// `karpenter.sh/do-not-disrupt` and other annotations the disruption engine reads; shared
    /// like the labels.
    pub annotations: Arc<BTreeMap<String, String>>,
    /// CSI volumes it mounts (filled in by the caller, which knows the PVCs and PVs).
    pub volumes: Vec<VolumeRef>,
    /// What its spec asks of a node.
    pub shape: Arc<PodShape>,
}

/// What a pod's spec (and, through `matchLabelKeys`, its labels) asks of a node: the part of a
/// [`Pod`] its siblings share.
#[derive(Clone, Debug, Default)]
pub struct PodShape {
    /// Resources requested, including init containers and overhead.
    pub requests: Resources,
    /// `spec.nodeSelector`.
    pub node_selector: BTreeMap<String, String>,
    /// Required node affinity terms, ORed.
    pub required_terms: Vec<Vec<NodeSelectorExpression>>,
    /// Preferred node affinity terms with weights, heaviest first.
    pub preferred_terms: Vec<(i32, Vec<NodeSelectorExpression>)>,
    /// Tolerations.
    pub tolerations: Vec<Toleration>,
    /// Topology spread constraints.
    pub spread: Vec<SpreadConstraint>,
    /// Required pod affinity.
    pub affinity: Vec<AffinityTerm>,
    /// Required pod anti-affinity.
    pub anti_affinity: Vec<AffinityTerm>,
    /// Preferred pod affinity, heaviest first.
    pub preferred_affinity: Vec<(i32, AffinityTerm)>,
    /// Preferred pod anti-affinity, heaviest first.
    pub preferred_anti_affinity: Vec<(i32, AffinityTerm)>,
    /// Host ports.
    pub host_ports: Vec<HostPort>,
    /// Priority (pod cost in disruption).
    pub priority: i32,
}

/// The shape's fields read as the pod's.
impl Deref for Pod {
    type Target = PodShape;

    fn deref(&self) -> &PodShape {
        &self.shape
    }
}

/// Changing a shared shape's field through one pod copies the shape for that pod only.
impl DerefMut for Pod {
    fn deref_mut(&mut self) -> &mut PodShape {
        Arc::make_mut(&mut self.shape)
    }
}

impl Pod {
    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// Whether a DaemonSet owns the pod.
    pub fn is_daemon(&self) -> bool {
        self.owner_kind.as_deref() == Some("DaemonSet")
    }

    /// Converts a Kubernetes pod; the error names the field and what to change.
    pub fn from_k8s(pod: &core::Pod) -> Result<Self, String> {
        let spec = pod.spec.as_ref().ok_or("spec is missing")?;
        Self::from_parts(&pod.metadata, spec)
    }

    /// Converts a pod given as metadata and spec, its shape its own (see
    /// [`super::pod_shapes::PodShapes`] for one shared with its siblings); the error names the
    /// field and what to change.
    pub fn from_parts(meta: &ObjectMeta, spec: &core::PodSpec) -> Result<Self, String> {
        let labels = Arc::new(meta.labels.clone().unwrap_or_default());
        let shape = Arc::new(PodShape::from_spec(spec, &labels)?);
        Ok(Self::with_shape(
            meta,
            Arc::from(meta.namespace.as_deref().unwrap_or(DEFAULT_NAMESPACE)),
            labels,
            Arc::new(meta.annotations.clone().unwrap_or_default()),
            shape,
        ))
    }

    /// The pod of `meta` with an already converted shape and already shared namespace, labels
    /// and annotations (they are `meta`'s).
    pub fn with_shape(
        meta: &ObjectMeta,
        namespace: Arc<str>,
        labels: Arc<BTreeMap<String, String>>,
        annotations: Arc<BTreeMap<String, String>>,
        shape: Arc<PodShape>,
    ) -> Self {
        let name = meta.name.as_deref().unwrap_or_default();
        Self {
            uid: match &meta.uid {
                Some(uid) => Arc::from(uid.as_str()),
                None => Arc::from(format!("{namespace}/{name}")),
            },
            name: Arc::from(name),
            namespace,
            labels,
            created: meta
                .creation_timestamp
                .as_ref()
                .map(|t| t.0.as_second())
                .unwrap_or(0),
            owner_kind: meta
                .owner_references
                .iter()
                .flatten()
                .find(|o| o.controller == Some(true))
                .or_else(|| meta.owner_references.iter().flatten().next())
                .map(|o| Arc::from(o.kind.as_str())),
            annotations,
            volumes: Vec::new(),
            shape,
        }
    }
}

/// Namespace of namespaced objects that do not name one, as with `kubectl apply` without `-n`.
pub const DEFAULT_NAMESPACE: &str = "default";

impl PodShape {
    /// Converts what `spec` asks of a node (`labels` complete the topology spread constraints'
    /// `matchLabelKeys`); the error names the field and what to change.
    pub fn from_spec(
        spec: &core::PodSpec,
        labels: &BTreeMap<String, String>,
    ) -> Result<Self, String> {
        let requests = requests(spec)?;
        let mut required_terms = Vec::new();
        let mut preferred_terms = Vec::new();
        let mut affinity = Vec::new();
        let mut anti_affinity = Vec::new();
        let mut preferred_affinity = Vec::new();
        let mut preferred_anti_affinity = Vec::new();
        if let Some(a) = &spec.affinity {
            if let Some(na) = &a.node_affinity {
                if let Some(req) = &na.required_during_scheduling_ignored_during_execution {
                    for (i, term) in req.node_selector_terms.iter().enumerate() {
                        required_terms.push(expressions(
                            term.match_expressions.as_deref().unwrap_or_default(),
                            &format!("spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[{i}]"),
                        )?);
                    }
                }
                for (i, p) in na
                    .preferred_during_scheduling_ignored_during_execution
                    .iter()
                    .flatten()
                    .enumerate()
                {
                    preferred_terms.push((
                        p.weight,
                        expressions(
                            p.preference.match_expressions.as_deref().unwrap_or_default(),
                            &format!("spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[{i}]"),
                        )?,
                    ));
                }
            }
            if let Some(pa) = &a.pod_affinity {
                for t in pa
                    .required_during_scheduling_ignored_during_execution
                    .iter()
                    .flatten()
                {
                    affinity.push(affinity_term(t)?);
                }
                for t in pa
                    .preferred_during_scheduling_ignored_during_execution
                    .iter()
                    .flatten()
                {
                    preferred_affinity.push((t.weight, affinity_term(&t.pod_affinity_term)?));
                }
            }
            if let Some(pa) = &a.pod_anti_affinity {
                for t in pa
                    .required_during_scheduling_ignored_during_execution
                    .iter()
                    .flatten()
                {
                    anti_affinity.push(affinity_term(t)?);
                }
                for t in pa
                    .preferred_during_scheduling_ignored_during_execution
                    .iter()
                    .flatten()
                {
                    preferred_anti_affinity.push((t.weight, affinity_term(&t.pod_affinity_term)?));
                }
            }
        }
        // Stable sorts: heaviest first, ties in declaration order.
        preferred_terms.sort_by_key(|(w, _)| std::cmp::Reverse(*w));
        preferred_affinity.sort_by_key(|(w, _)| std::cmp::Reverse(*w));
        preferred_anti_affinity.sort_by_key(|(w, _)| std::cmp::Reverse(*w));
        let mut spread = Vec::new();
        for (i, c) in spec
            .topology_spread_constraints
            .iter()
            .flatten()
            .enumerate()
        {
            let field = format!("spec.topologySpreadConstraints[{i}]");
            let selector = c
                .label_selector
                .as_ref()
                .map(Selector::from_k8s)
                .transpose()
                .map_err(|e| format!("{field}.labelSelector: {e}"))?
                .unwrap_or_default()
                .with_label_keys(c.match_label_keys.as_deref().unwrap_or_default(), labels);
            spread.push(SpreadConstraint {
                topology_key: c.topology_key.clone(),
                max_skew: u32::try_from(c.max_skew)
                    .ok()
                    .filter(|s| *s > 0)
                    .ok_or_else(|| format!("{field}.maxSkew: must be at least 1, got {}", c.max_skew))?,
                min_domains: c.min_domains.and_then(|m| u32::try_from(m).ok()),
                when_unsatisfiable: match c.when_unsatisfiable.as_str() {
                    "DoNotSchedule" => WhenUnsatisfiable::DoNotSchedule,
                    "ScheduleAnyway" => WhenUnsatisfiable::ScheduleAnyway,
                    other => {
                        return Err(format!(
                            "{field}.whenUnsatisfiable: {other:?} is not supported; use DoNotSchedule or ScheduleAnyway"
                        ));
                    }
                },
                selector,
                honor_node_affinity: c.node_affinity_policy.as_deref() != Some("Ignore"),
                honor_node_taints: c.node_taints_policy.as_deref() == Some("Honor"),
            });
        }
        let tolerations = spec
            .tolerations
            .iter()
            .flatten()
            .enumerate()
            .map(|(i, t)| {
                Toleration::from_k8s(t).map_err(|e| format!("spec.tolerations[{i}]: {e}"))
            })
            .collect::<Result<_, _>>()?;
        let mut host_ports = Vec::new();
        for c in spec
            .containers
            .iter()
            .chain(spec.init_containers.iter().flatten())
        {
            for p in c.ports.iter().flatten() {
                if let Some(port) = p.host_port.filter(|p| *p > 0) {
                    host_ports.push(HostPort {
                        ip: p.host_ip.clone().unwrap_or_else(|| "0.0.0.0".into()),
                        port,
                        protocol: p.protocol.clone().unwrap_or_else(|| "TCP".into()),
                    });
                }
            }
        }
        host_ports.sort();
        Ok(Self {
            requests,
            node_selector: spec.node_selector.clone().unwrap_or_default(),
            required_terms,
            preferred_terms,
            tolerations,
            spread,
            affinity,
            anti_affinity,
            preferred_affinity,
            preferred_anti_affinity,
            host_ports,
            priority: spec.priority.unwrap_or(0),
        })
    }
}

fn expressions(
    list: &[core::NodeSelectorRequirement],
    field: &str,
) -> Result<Vec<NodeSelectorExpression>, String> {
    list.iter()
        .enumerate()
        .map(|(i, e)| {
            let operator = match e.operator.as_str() {
                "In" => Operator::In,
                "NotIn" => Operator::NotIn,
                "Exists" => Operator::Exists,
                "DoesNotExist" => Operator::DoesNotExist,
                "Gt" => Operator::Gt,
                "Lt" => Operator::Lt,
                other => {
                    return Err(format!(
                        "{field}.matchExpressions[{i}].operator: {other:?} is not supported; use In, NotIn, Exists, DoesNotExist, Gt or Lt"
                    ));
                }
            };
            Ok(NodeSelectorExpression {
                key: e.key.clone(),
                operator,
                values: e.values.clone().unwrap_or_default(),
            })
        })
        .collect()
}

fn affinity_term(t: &core::PodAffinityTerm) -> Result<AffinityTerm, String> {
    let selector = t
        .label_selector
        .as_ref()
        .map(Selector::from_k8s)
        .transpose()?
        .unwrap_or_else(|| Selector {
            // A term without a selector selects no pods.
            expressions: vec![(String::new(), SelectorOp::In, vec![])],
        });
    let all_namespaces = t.namespace_selector.as_ref().is_some_and(|s| {
        s.match_labels.as_ref().is_none_or(BTreeMap::is_empty)
            && s.match_expressions.as_ref().is_none_or(Vec::is_empty)
    });
    Ok(AffinityTerm {
        topology_key: t.topology_key.clone(),
        selector,
        namespaces: t.namespaces.clone().unwrap_or_default(),
        all_namespaces,
    })
}

/// A pod's effective requests, as kube-scheduler computes them: the larger of the sum of its
/// containers plus restartable (sidecar) init containers and the largest regular init container
/// (plus the sidecars started before it), plus the pod overhead; one pod slot.
pub fn requests(spec: &core::PodSpec) -> Result<Resources, String> {
    let container_requests = |c: &core::Container, field: &str| -> Result<Resources, String> {
        let mut r = Resources::default();
        if let Some(res) = &c.resources {
            // Kubernetes defaults requests to limits when only limits are set.
            for (name, q) in res.limits.iter().flatten() {
                r.set(
                    name,
                    resources::parse_quantity(name, &q.0)
                        .map_err(|e| format!("{field}.resources.limits: {e}"))?,
                );
            }
            for (name, q) in res.requests.iter().flatten() {
                r.set(
                    name,
                    resources::parse_quantity(name, &q.0)
                        .map_err(|e| format!("{field}.resources.requests: {e}"))?,
                );
            }
        }
        Ok(r)
    };
    let mut sum = Resources::default();
    for (i, c) in spec.containers.iter().enumerate() {
        sum.add(&container_requests(c, &format!("spec.containers[{i}]"))?);
    }
    let mut sidecars = Resources::default();
    let mut init_peak = Resources::default();
    for (i, c) in spec.init_containers.iter().flatten().enumerate() {
        let r = container_requests(c, &format!("spec.initContainers[{i}]"))?;
        if c.restart_policy.as_deref() == Some("Always") {
            sidecars.add(&r);
            init_peak = init_peak.max(&sidecars);
        } else {
            init_peak = init_peak.max(&sidecars.plus(&r));
        }
    }
    let mut total = sum.plus(&sidecars).max(&init_peak);
    for (name, q) in spec.overhead.iter().flatten() {
        let amount =
            resources::parse_quantity(name, &q.0).map_err(|e| format!("spec.overhead: {e}"))?;
        total.set(name, total.get(name).saturating_add(amount));
    }
    total.pods = 1;
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(spec: serde_json::Value) -> core::Pod {
        serde_json::from_value(json!({"metadata": {"name": "p", "namespace": "ns", "labels": {"app": "a"}}, "spec": spec}))
            .expect("pod")
    }

    #[test]
    fn requests_include_init_containers_sidecars_and_overhead() {
        let p = pod(json!({
            "containers": [
                {"name": "a", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}},
                {"name": "b", "resources": {"limits": {"cpu": "250m", "nvidia.com/gpu": "1"}}}
            ],
            "initContainers": [
                {"name": "sidecar", "restartPolicy": "Always", "resources": {"requests": {"cpu": "100m"}}},
                {"name": "migrate", "resources": {"requests": {"cpu": "2", "memory": "256Mi"}}}
            ],
            "overhead": {"memory": "64Mi"}
        }));
        let r = requests(p.spec.as_ref().unwrap()).unwrap();
        // max(750m + 100m sidecar, 100m sidecar + 2 init) = 2100m.
        assert_eq!(r.cpu, 2100);
        assert_eq!(r.memory, resources::gib(1) + resources::mib(64));
        assert_eq!(r.get(resources::NVIDIA_GPU), 1);
        assert_eq!(r.pods, 1);
    }

    #[test]
    fn converts_affinity_spread_and_ports() {
        let p = pod(json!({
            "containers": [{"name": "a", "ports": [{"containerPort": 80, "hostPort": 8080}]}],
            "nodeSelector": {"kubernetes.io/arch": "arm64"},
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["us-east-1a"]}]}
                    ]},
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {"weight": 1, "preference": {"matchExpressions": [{"key": "a", "operator": "Exists"}]}},
                        {"weight": 50, "preference": {"matchExpressions": [{"key": "b", "operator": "Exists"}]}}
                    ]
                },
                "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                    {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "a"}}}
                ]}
            },
            "topologySpreadConstraints": [{
                "maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"app": "a"}}, "matchLabelKeys": ["app"]
            }]
        }));
        let p = Pod::from_k8s(&p).unwrap();
        assert_eq!(p.required_terms.len(), 1);
        assert_eq!(p.preferred_terms[0].0, 50, "heaviest preference first");
        assert_eq!(p.anti_affinity[0].topology_key, "kubernetes.io/hostname");
        assert!(p.anti_affinity[0].selects("ns", "ns", &p.labels));
        assert!(!p.anti_affinity[0].selects("ns", "other", &p.labels));
        assert_eq!(p.spread[0].selector.expressions.len(), 2);
        assert_eq!(p.host_ports[0].port, 8080);
        assert!(p.host_ports[0].conflicts(&HostPort {
            ip: "10.0.0.1".into(),
            port: 8080,
            protocol: "TCP".into()
        }));
    }

    #[test]
    fn bad_fields_are_named() {
        let p =
            pod(json!({"containers": [{"name": "a", "resources": {"requests": {"cpu": "lots"}}}]}));
        let e = Pod::from_k8s(&p).unwrap_err();
        assert!(
            e.contains("spec.containers[0].resources.requests") && e.contains("lots"),
            "{e}"
        );
        let p = pod(
            json!({"containers": [{"name": "a"}], "tolerations": [{"key": "a", "operator": "Maybe"}]}),
        );
        assert!(
            Pod::from_k8s(&p)
                .unwrap_err()
                .contains("spec.tolerations[0]")
        );
    }

    #[test]
    fn selectors_match_like_kubernetes() {
        let s = Selector::from_k8s(&serde_json::from_value(json!({
            "matchLabels": {"app": "web"},
            "matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["db"]}, {"key": "x", "operator": "DoesNotExist"}]
        })).unwrap()).unwrap();
        let labels = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        assert!(s.matches(&labels(&[("app", "web")])));
        assert!(s.matches(&labels(&[("app", "web"), ("tier", "fe")])));
        assert!(!s.matches(&labels(&[("app", "web"), ("tier", "db")])));
        assert!(!s.matches(&labels(&[("app", "web"), ("x", "1")])));
        assert!(!s.matches(&labels(&[("app", "api")])));
    }
}
