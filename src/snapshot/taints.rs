//! Taints a node carries while it comes up or goes away — set by the kubelet, the cloud
//! controller or Karpenter's registration — which say nothing about where pods may run or
//! whether the node is initialized. Upstream calls them known ephemeral taints; the scheduler
//! adapter plans through them (else it would launch a second node for pods about to land on
//! this one) and initialization waits for them to go.

use crate::apis::labels;

/// (key, effect) of each known ephemeral taint.
pub const EPHEMERAL_TAINTS: &[(&str, &str)] = &[
    ("node.kubernetes.io/not-ready", "NoSchedule"),
    ("node.kubernetes.io/unreachable", "NoSchedule"),
    (
        "node.cloudprovider.kubernetes.io/uninitialized",
        "NoSchedule",
    ),
    (labels::UNREGISTERED_TAINT_KEY, "NoExecute"),
];

/// Whether a taint with this key and effect is a known ephemeral one.
pub fn is_ephemeral(key: &str, effect: &str) -> bool {
    EPHEMERAL_TAINTS.contains(&(key, effect))
}
