//! `karpenter.sh/v1` NodeClaim: one requested node, from launch to termination.
//!
//! The requirement, taint and class-reference types here are shared with the NodePool template,
//! which stamps them onto the NodeClaims it creates.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::conditions::Condition;
use super::duration::{Duration, NillableDuration};
use super::schema;

/// Resource name → quantity, as `corev1.ResourceList`.
pub type ResourceList = BTreeMap<String, Quantity>;

/// Node selector operators, including Karpenter's inclusive `Gte`/`Lte` (in upstream's CRD enum
/// order).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum Operator {
    /// The label value, an integer, is at least `values[0]`.
    Gte,
    /// The label value, an integer, is at most `values[0]`.
    Lte,
    /// The label value is one of `values`.
    In,
    /// The label value is none of `values` (or the label is absent).
    NotIn,
    /// The label is present.
    Exists,
    /// The label is absent.
    DoesNotExist,
    /// The label value, an integer, is greater than `values[0]`.
    Gt,
    /// The label value, an integer, is less than `values[0]`.
    Lt,
}

/// A node selector requirement with an optional minimum of distinct values the launched
/// instance-type options must keep for this key (`minValues`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeSelectorRequirementWithMinValues {
    /// The label key the selector applies to.
    #[schemars(length(max = 316), pattern(schema::QUALIFIED_NAME_PATTERN))]
    #[schemars(transform = schema::requirement_key_rules)]
    pub key: String,
    /// How the key relates to the values.
    pub operator: Operator,
    /// Values for In/NotIn, or a single integer for Gt/Lt/Gte/Lte.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    #[schemars(transform = schema::requirement_values)]
    pub values: Vec<String>,
    /// The minimum number of distinct values of this key among the instance types considered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 50), transform = schema::without_format)]
    pub min_values: Option<i64>,
}

/// Taint effects Kubernetes knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum TaintEffect {
    /// New pods that do not tolerate the taint are not scheduled.
    NoSchedule,
    /// The scheduler avoids the node for pods that do not tolerate the taint.
    PreferNoSchedule,
    /// Pods that do not tolerate the taint are evicted.
    NoExecute,
}

impl TaintEffect {
    /// The effect as Kubernetes spells it on a Node.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NoSchedule => "NoSchedule",
            Self::PreferNoSchedule => "PreferNoSchedule",
            Self::NoExecute => "NoExecute",
        }
    }
}

/// A node taint, as `corev1.Taint` with the CRD's validation.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Taint {
    /// The taint key.
    #[schemars(length(min = 1), pattern(schema::QUALIFIED_NAME_PATTERN))]
    pub key: String,
    /// The taint value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(schema::QUALIFIED_NAME_PATTERN))]
    pub value: Option<String>,
    /// What happens to pods that do not tolerate the taint.
    pub effect: TaintEffect,
    /// When a NoExecute taint was added; set by the node controller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_added: Option<DateTime<Utc>>,
}

/// Points at the cloud-specific node class (for AWS, an EC2NodeClass).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub struct NodeClassReference {
    /// Kind of the node class, e.g. `EC2NodeClass`.
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "self != ''", "message": "kind may not be empty"}]))]
    pub kind: String,
    /// Name of the node class.
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "self != ''", "message": "name may not be empty"}]))]
    pub name: String,
    /// API group of the node class, e.g. `karpenter.k8s.aws`.
    #[schemars(pattern(r"^[^/]*$"))]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "self != ''", "message": "group may not be empty"}]))]
    pub group: String,
}

/// Resources the NodeClaim's pods request.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ResourceRequirements {
    /// Minimum resources the node must provide.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<BTreeMap<String, schema::QuantitySchema>>")]
    pub requests: Option<ResourceList>,
}

/// Desired state of a NodeClaim. Immutable once created.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "karpenter.sh",
    version = "v1",
    kind = "NodeClaim",
    plural = "nodeclaims",
    singular = "nodeclaim",
    category = "karpenter",
    status = "NodeClaimStatus",
    doc = "NodeClaim is the Schema for the NodeClaims API",
    printcolumn = r#"{"name": "Type", "type": "string", "jsonPath": ".metadata.labels.node\\.kubernetes\\.io/instance-type"}"#,
    printcolumn = r#"{"name": "Capacity", "type": "string", "jsonPath": ".metadata.labels.karpenter\\.sh/capacity-type"}"#,
    printcolumn = r#"{"name": "Zone", "type": "string", "jsonPath": ".metadata.labels.topology\\.kubernetes\\.io/zone"}"#,
    printcolumn = r#"{"name": "Node", "type": "string", "jsonPath": ".status.nodeName"}"#,
    printcolumn = r#"{"name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}"#,
    printcolumn = r#"{"name": "ImageID", "type": "string", "jsonPath": ".status.imageID", "priority": 1}"#,
    printcolumn = r#"{"name": "ID", "type": "string", "jsonPath": ".status.providerID", "priority": 1}"#,
    printcolumn = r#"{"name": "NodePool", "type": "string", "jsonPath": ".metadata.labels.karpenter\\.sh/nodepool", "priority": 1}"#,
    printcolumn = r#"{"name": "NodeClass", "type": "string", "jsonPath": ".spec.nodeClassRef.name", "priority": 1}"#,
    printcolumn = r#"{"name": "Drifted", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Drifted\")].status", "priority": 1}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{"rule": "self == oldSelf", "message": "spec is immutable"}]))]
pub struct NodeClaimSpec {
    /// Taints the node carries for its whole life.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub taints: Vec<Taint>,
    /// Taints present at boot that a daemon removes; pods need not tolerate them to be provisioned for.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub startup_taints: Vec<Taint>,
    /// Constraints on the labels of the node to launch.
    #[schemars(length(max = 100), transform = schema::requirement_list_rules)]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub requirements: Vec<NodeSelectorRequirementWithMinValues>,
    /// Resources the pods bound for this node request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// The cloud-specific node class to launch with.
    pub node_class_ref: NodeClassReference,
    /// How long a draining node waits for its pods before they are forcibly removed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub termination_grace_period: Option<Duration>,
    /// How long the node lives before it is replaced; `Never` disables expiry.
    #[serde(default = "default_expire_after")]
    #[schemars(extend("default" = "720h"))]
    pub expire_after: NillableDuration,
}

/// The default node lifetime, 30 days.
pub fn default_expire_after() -> NillableDuration {
    NillableDuration::After(Duration::from_std(std::time::Duration::from_secs(
        720 * 3600,
    )))
}

/// The NodeClaim's condition types besides [`READY`](super::conditions::READY), as upstream's
/// `nodeclaim_status.go` names them; the lifecycle, disruption and termination controllers set
/// them, the disruption engine and the metrics read them.
pub mod condition {
    /// The instance exists.
    pub const LAUNCHED: &str = "Launched";
    /// The Node joined and was taken over.
    pub const REGISTERED: &str = "Registered";
    /// The Node is Ready with its startup taints gone.
    pub const INITIALIZED: &str = "Initialized";
    /// The node no longer matches its NodePool or EC2NodeClass.
    pub const DRIFTED: &str = "Drifted";
    /// consolidateAfter has passed since the last pod event.
    pub const CONSOLIDATABLE: &str = "Consolidatable";
    /// Why the NodeClaim is being disrupted (`Underutilized`, `Empty`, `Drifted`, `Expired`), set
    /// by the disruption controller before it deletes the NodeClaim.
    pub const DISRUPTION_REASON: &str = "DisruptionReason";
    /// The Node's pods are drained.
    pub const DRAINED: &str = "Drained";
    /// The drained pods' volumes are detached (or the grace period ran out).
    pub const VOLUMES_DETACHED: &str = "VolumesDetached";
    /// The instance is being terminated; its transition time starts
    /// `karpenter_nodeclaims_instance_termination_duration_seconds`.
    pub const INSTANCE_TERMINATING: &str = "InstanceTerminating";
}

/// Observed state of a NodeClaim.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeClaimStatus {
    /// Name of the Node that registered for this NodeClaim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    /// Cloud provider ID of the instance, e.g. `aws:///us-east-1a/i-0123`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "providerID"
    )]
    pub provider_id: Option<String>,
    /// Image the instance booted from.
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "imageID")]
    pub image_id: Option<String>,
    /// Full capacity of the instance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<BTreeMap<String, schema::QuantitySchema>>")]
    pub capacity: Option<ResourceList>,
    /// Capacity available to pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<BTreeMap<String, schema::QuantitySchema>>")]
    pub allocatable: Option<ResourceList>,
    /// Launched, Registered, Initialized, Ready, Drifted, Consolidatable, ...
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = schema::nodeclaim_condition_list)]
    pub conditions: Vec<Condition>,
    /// Last time a pod was bound to or removed from the node; starts the consolidateAfter clock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_pod_event_time: Option<DateTime<Utc>>,
}
