//! Taints a node carries while it comes up — set by the kubelet, the cloud controller,
//! Karpenter's registration or the Node Readiness Controller — which say nothing about where
//! pods may run once the node is initialized. Upstream calls them known ephemeral taints; while a
//! Karpenter node is not yet initialized the scheduler adapter plans through them (else it would
//! launch a second node for pods about to land on this one), and initialization waits for them
//! to go.

use crate::apis::labels;

/// (key, effect) of each known ephemeral taint; the value is not compared.
pub const EPHEMERAL_TAINTS: &[(&str, &str)] = &[
    ("node.kubernetes.io/not-ready", "NoSchedule"),
    ("node.kubernetes.io/not-ready", "NoExecute"),
    ("node.kubernetes.io/unreachable", "NoSchedule"),
    (
        "node.cloudprovider.kubernetes.io/uninitialized",
        "NoSchedule",
    ),
    (labels::UNREGISTERED_TAINT_KEY, "NoExecute"),
];

/// Key prefixes of ephemeral taint families whose key ends in a name chosen by whoever sets them:
/// the Node Readiness Controller taints a new node `readiness.k8s.io/<rule>` (any effect) until
/// the rule's conditions hold.
pub const EPHEMERAL_TAINT_KEY_PREFIXES: &[&str] = &["readiness.k8s.io/"];

/// Whether a taint with this key and effect is a known ephemeral one.
pub fn is_ephemeral(key: &str, effect: &str) -> bool {
    EPHEMERAL_TAINTS.contains(&(key, effect))
        || EPHEMERAL_TAINT_KEY_PREFIXES
            .iter()
            .any(|prefix| key.starts_with(prefix))
}

#[cfg(test)]
mod tests {
    use super::is_ephemeral;

    #[test]
    fn listed_taints_match_on_key_and_effect() {
        assert!(is_ephemeral("node.kubernetes.io/not-ready", "NoSchedule"));
        assert!(is_ephemeral("node.kubernetes.io/not-ready", "NoExecute"));
        assert!(is_ephemeral("karpenter.sh/unregistered", "NoExecute"));
        assert!(!is_ephemeral("node.kubernetes.io/unreachable", "NoExecute"));
        assert!(!is_ephemeral("karpenter.sh/unregistered", "NoSchedule"));
    }

    #[test]
    fn node_readiness_controller_taints_match_by_prefix_with_any_effect() {
        assert!(is_ephemeral("readiness.k8s.io/network-ready", "NoSchedule"));
        assert!(is_ephemeral(
            "readiness.k8s.io/acme.com/storage",
            "NoExecute"
        ));
        assert!(!is_ephemeral(
            "example.com/readiness.k8s.io/x",
            "NoSchedule"
        ));
        assert!(!is_ephemeral("readiness.k8s.io", "NoSchedule"));
        assert!(!is_ephemeral("example.com/agent-not-ready", "NoSchedule"));
    }
}
