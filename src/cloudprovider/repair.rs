//! The node conditions EKS nodes are repaired on, as upstream's AWS provider declares them
//! (v1.14.1): the kubelet's `Ready` going `False` or `Unknown` for 30 minutes, and the EKS node
//! monitoring agent's conditions going `False` (10 minutes for accelerated hardware, 30 for the
//! rest). The AWS provider returns them, and so does the simulated cloud, which stands in for
//! EKS.

use crate::apis::repair::RepairPolicy;

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
