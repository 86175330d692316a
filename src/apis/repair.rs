//! A cloud provider's node repair policy, the vocabulary shared by the cloud providers (which
//! declare their policies) and the pure repair decision (`disruption::repair`), as upstream's
//! `cloudprovider.RepairPolicy`.

/// A Node condition that makes a Node unhealthy when it holds for longer than the toleration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RepairPolicy {
    /// The Node condition type (`Ready`, or a node monitoring agent's such as `KernelReady`).
    pub condition_type: &'static str,
    /// The status that is unhealthy (`False`, `Unknown`, `True`).
    pub condition_status: &'static str,
    /// How long the condition may hold, from its `lastTransitionTime`, before the Node is
    /// replaced.
    pub toleration: chrono::Duration,
}
