//! A cloud provider's node repair policy, the vocabulary shared by the cloud providers (which
//! declare their policies) and the pure repair decision (`disruption::repair`), as upstream's
//! `cloudprovider.RepairPolicy`; and EKS's policies, which the AWS provider (and the simulated
//! cloud standing in for it) declare.

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

/// EKS's repair policies.
pub const EKS_POLICIES: [RepairPolicy; 7] = [
    policy("Ready", "False", 30),
    policy("Ready", "Unknown", 30),
    policy("AcceleratedHardwareReady", "False", 10),
    policy("StorageReady", "False", 30),
    policy("NetworkingReady", "False", 30),
    policy("KernelReady", "False", 30),
    policy("ContainerRuntimeReady", "False", 30),
];

const fn policy(
    condition_type: &'static str,
    condition_status: &'static str,
    minutes: i64,
) -> RepairPolicy {
    RepairPolicy {
        condition_type,
        condition_status,
        toleration: chrono::Duration::minutes(minutes),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eks_tolerates_ready_thirty_minutes_and_accelerated_hardware_ten() {
        let listed: Vec<(&str, &str, i64)> = EKS_POLICIES
            .iter()
            .map(|p| {
                (
                    p.condition_type,
                    p.condition_status,
                    p.toleration.num_minutes(),
                )
            })
            .collect();
        assert_eq!(
            listed,
            [
                ("Ready", "False", 30),
                ("Ready", "Unknown", 30),
                ("AcceleratedHardwareReady", "False", 10),
                ("StorageReady", "False", 30),
                ("NetworkingReady", "False", 30),
                ("KernelReady", "False", 30),
                ("ContainerRuntimeReady", "False", 30),
            ]
        );
    }
}
