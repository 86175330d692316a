//! The objects the in-memory controller tests start from, defined once: an EC2NodeClass, a
//! NodePool that consolidates at once, a NodeClaim of that pool, pods and PodDisruptionBudgets.
//! Nodes are not built here: the stand-in kubelet's `node_for` registers them exactly as it does
//! for `run --cloud-provider simulated` (see `Env::join`).

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use karpenter_rs::apis::{EC2NodeClass, NodeClaim, NodePool};
use serde_json::json;

/// The namespace of the tests' pods.
pub const NAMESPACE: &str = "default";
/// The NodePool (and EC2NodeClass) every test uses.
pub const POOL: &str = "default";

/// An EC2NodeClass selecting AL2023 images and subnets by tag; not yet resolved (no status).
pub fn nodeclass(name: &str) -> EC2NodeClass {
    serde_json::from_value(json!({
        "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
        "metadata": {"name": name},
        "spec": {
            "role": "KarpenterNodeRole",
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}],
            "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}],
        },
    }))
    .expect("EC2NodeClass")
}

/// A NodePool of on-demand amd64 m5 instances that consolidates empty or underused nodes at
/// once, all of them at a time.
pub fn nodepool(name: &str) -> NodePool {
    serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {
            "disruption": {
                "consolidationPolicy": "WhenEmptyOrUnderutilized",
                "consolidateAfter": "0s",
                "budgets": [{"nodes": "100%"}],
            },
            "template": {"spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": POOL},
                "requirements": [
                    {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                    {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large", "m5.xlarge"]},
                ],
            }},
        },
    }))
    .expect("NodePool")
}

/// A static NodePool (`spec.replicas`) on [`POOL`]'s EC2NodeClass, of on-demand m5.large or
/// m5.xlarge instances, with a label, a taint and an `expireAfter` its NodeClaims inherit, and
/// `limits.nodes` when given. Its consolidation settings would empty a dynamic pool's nodes at
/// once, so tests can show they do not apply.
pub fn static_nodepool(name: &str, replicas: i64, nodes_limit: Option<&str>) -> NodePool {
    let mut pool: NodePool = serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "disruption": {
                "consolidationPolicy": "WhenEmptyOrUnderutilized",
                "consolidateAfter": "0s",
                "budgets": [{"nodes": "100%"}],
            },
            "template": {
                "metadata": {"labels": {"example.com/tier": "static"}},
                "spec": {
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": POOL},
                    "expireAfter": "720h",
                    "taints": [{"key": "example.com/static", "effect": "NoSchedule"}],
                    "requirements": [
                        {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                        {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.xlarge", "m5.large"]},
                    ],
                },
            },
        },
    }))
    .expect("NodePool");
    if let Some(limit) = nodes_limit {
        pool.spec.limits = Some(
            [(
                "nodes".to_string(),
                k8s_openapi::apimachinery::pkg::api::resource::Quantity(limit.into()),
            )]
            .into(),
        );
    }
    pool
}

/// A NodeClaim of [`POOL`] for one m5.large on-demand instance requesting one CPU, as the
/// provisioner creates them.
pub fn nodeclaim(name: &str) -> NodeClaim {
    serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": name, "labels": {"karpenter.sh/nodepool": POOL}},
        "spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": POOL},
            "resources": {"requests": {"cpu": "1"}},
            "requirements": [
                {"key": "karpenter.sh/nodepool", "operator": "In", "values": [POOL]},
                {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large"]},
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
            ],
        },
    }))
    .expect("NodeClaim")
}

/// A running pod of app `name` (label `app: <name>`) bound to `node`, requesting 100m CPU.
pub fn pod(name: &str, node: &str) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"app": name}},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "app", "image": "pause", "resources": {"requests": {"cpu": "100m"}}}],
        },
        "status": {"phase": "Running"},
    }))
    .expect("Pod")
}

/// A PodDisruptionBudget over the pods of app `app` that currently allows `allowed`
/// disruptions (its status, as the disruption controller would compute it).
pub fn pdb(name: &str, app: &str, allowed: i32) -> PodDisruptionBudget {
    serde_json::from_value(json!({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": app}}},
        "status": {
            "disruptionsAllowed": allowed, "currentHealthy": 1, "desiredHealthy": 1,
            "expectedPods": 1, "observedGeneration": 1,
        },
    }))
    .expect("PodDisruptionBudget")
}
