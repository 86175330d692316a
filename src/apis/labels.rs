//! Well-known labels, annotations, taints and finalizers, spelled exactly as upstream Karpenter
//! spells them so that nodes, NodeClaims and manifests move between the two controllers unchanged.

/// API group of NodePool and NodeClaim; also the label domain Karpenter reserves for itself.
pub const GROUP: &str = "karpenter.sh";
/// API group of EC2NodeClass; also the AWS provider's reserved label domain.
pub const AWS_GROUP: &str = "karpenter.k8s.aws";

// Core labels.
/// Name of the NodePool that owns a node; set by Karpenter, never by users.
pub const NODEPOOL: &str = "karpenter.sh/nodepool";
/// `spot`, `on-demand` or `reserved`: the purchase option of the instance.
pub const CAPACITY_TYPE: &str = "karpenter.sh/capacity-type";
/// Set to `true` once the node is Ready and its startup taints are gone.
pub const INITIALIZED: &str = "karpenter.sh/initialized";
/// Set to `true` once Karpenter has matched the Node to its NodeClaim.
pub const REGISTERED: &str = "karpenter.sh/registered";
/// Node label that stops Karpenter from syncing NodeClaim taints onto the Node.
pub const DO_NOT_SYNC_TAINTS: &str = "karpenter.sh/do-not-sync-taints";
/// Availability zone of the node.
pub const ZONE: &str = "topology.kubernetes.io/zone";
/// Region of the node.
pub const REGION: &str = "topology.kubernetes.io/region";
/// EC2 instance type of the node.
pub const INSTANCE_TYPE: &str = "node.kubernetes.io/instance-type";
/// CPU architecture (`amd64`, `arm64`).
pub const ARCH: &str = "kubernetes.io/arch";
/// Operating system (`linux`, `windows`).
pub const OS: &str = "kubernetes.io/os";
/// Windows build number, for Windows AMI families.
pub const WINDOWS_BUILD: &str = "node.kubernetes.io/windows-build";
/// Hostname of the node; pods may not require a value of it from a NodePool.
pub const HOSTNAME: &str = "kubernetes.io/hostname";
/// Set on nodes being terminated so load balancers stop sending them traffic.
pub const EXCLUDE_FROM_EXTERNAL_LOAD_BALANCERS: &str =
    "node.kubernetes.io/exclude-from-external-load-balancers";

/// Capacity type values.
pub const CAPACITY_TYPE_SPOT: &str = "spot";
/// On-demand capacity.
pub const CAPACITY_TYPE_ON_DEMAND: &str = "on-demand";
/// Capacity reservations (ODCRs, capacity blocks).
pub const CAPACITY_TYPE_RESERVED: &str = "reserved";

/// Labels that are well known to the core scheduler: pods may select on them before a node exists.
pub const WELL_KNOWN_LABELS: &[&str] = &[
    NODEPOOL,
    ZONE,
    REGION,
    INSTANCE_TYPE,
    ARCH,
    OS,
    CAPACITY_TYPE,
    WINDOWS_BUILD,
];

/// Deprecated label keys that Kubernetes still accepts, with the key each one means today.
pub const NORMALIZED_LABELS: &[(&str, &str)] = &[
    ("failure-domain.beta.kubernetes.io/zone", ZONE),
    ("failure-domain.beta.kubernetes.io/region", REGION),
    ("beta.kubernetes.io/arch", ARCH),
    ("beta.kubernetes.io/os", OS),
    ("beta.kubernetes.io/instance-type", INSTANCE_TYPE),
];

// AWS labels (all in the karpenter.k8s.aws domain unless noted).
/// Capacity reservation ID of a reserved instance.
pub const CAPACITY_RESERVATION_ID: &str = "karpenter.k8s.aws/capacity-reservation-id";
/// `default` or `capacity-block`.
pub const CAPACITY_RESERVATION_TYPE: &str = "karpenter.k8s.aws/capacity-reservation-type";
/// Whether the capacity reservation may be interrupted.
pub const CAPACITY_RESERVATION_INTERRUPTIBLE: &str =
    "karpenter.k8s.aws/capacity-reservation-interruptible";
/// Hypervisor (`nitro`, `xen`, or empty for bare metal).
pub const INSTANCE_HYPERVISOR: &str = "karpenter.k8s.aws/instance-hypervisor";
/// Whether the instance encrypts traffic between instances in transit.
pub const INSTANCE_ENCRYPTION_IN_TRANSIT_SUPPORTED: &str =
    "karpenter.k8s.aws/instance-encryption-in-transit-supported";
/// Whether the instance type supports nitro enclaves sandboxes.
pub const NITRO_SANDBOX: &str = "karpenter.k8s.aws/nitro-sandbox";
/// Letters before the generation digit, e.g. `m` for `m5.large`.
pub const INSTANCE_CATEGORY: &str = "karpenter.k8s.aws/instance-category";
/// `true` for `-flex` instance types.
pub const INSTANCE_CAPABILITY_FLEX: &str = "karpenter.k8s.aws/instance-capability-flex";
/// Part of the type name before the dot, e.g. `m5`.
pub const INSTANCE_FAMILY: &str = "karpenter.k8s.aws/instance-family";
/// Generation digit(s), e.g. `5` for `m5.large`.
pub const INSTANCE_GENERATION: &str = "karpenter.k8s.aws/instance-generation";
/// Part of the type name after the dot, e.g. `large`.
pub const INSTANCE_SIZE: &str = "karpenter.k8s.aws/instance-size";
/// Total local NVMe storage in GB.
pub const INSTANCE_LOCAL_NVME: &str = "karpenter.k8s.aws/instance-local-nvme";
/// Number of vCPUs.
pub const INSTANCE_CPU: &str = "karpenter.k8s.aws/instance-cpu";
/// CPU manufacturer (`intel`, `amd`, `aws`).
pub const INSTANCE_CPU_MANUFACTURER: &str = "karpenter.k8s.aws/instance-cpu-manufacturer";
/// Sustained clock speed in MHz.
pub const INSTANCE_CPU_SUSTAINED_CLOCK_SPEED_MHZ: &str =
    "karpenter.k8s.aws/instance-cpu-sustained-clock-speed-mhz";
/// Memory in MiB.
pub const INSTANCE_MEMORY: &str = "karpenter.k8s.aws/instance-memory";
/// EBS bandwidth in Mbps.
pub const INSTANCE_EBS_BANDWIDTH: &str = "karpenter.k8s.aws/instance-ebs-bandwidth";
/// Network bandwidth in Mbps.
pub const INSTANCE_NETWORK_BANDWIDTH: &str = "karpenter.k8s.aws/instance-network-bandwidth";
/// GPU name, e.g. `t4`.
pub const INSTANCE_GPU_NAME: &str = "karpenter.k8s.aws/instance-gpu-name";
/// GPU manufacturer, e.g. `nvidia`.
pub const INSTANCE_GPU_MANUFACTURER: &str = "karpenter.k8s.aws/instance-gpu-manufacturer";
/// Number of GPUs.
pub const INSTANCE_GPU_COUNT: &str = "karpenter.k8s.aws/instance-gpu-count";
/// Memory per GPU in MiB.
pub const INSTANCE_GPU_MEMORY: &str = "karpenter.k8s.aws/instance-gpu-memory";
/// Accelerator name, e.g. `inferentia`.
pub const INSTANCE_ACCELERATOR_NAME: &str = "karpenter.k8s.aws/instance-accelerator-name";
/// Accelerator manufacturer.
pub const INSTANCE_ACCELERATOR_MANUFACTURER: &str =
    "karpenter.k8s.aws/instance-accelerator-manufacturer";
/// Number of accelerators.
pub const INSTANCE_ACCELERATOR_COUNT: &str = "karpenter.k8s.aws/instance-accelerator-count";
/// `default` or `dedicated`.
pub const INSTANCE_TENANCY: &str = "karpenter.k8s.aws/instance-tenancy";
/// Placement group the instance was launched into.
pub const PLACEMENT_GROUP_ID: &str = "karpenter.k8s.aws/placement-group-id";
/// Partition of a partition placement group.
pub const PLACEMENT_GROUP_PARTITION: &str = "karpenter.k8s.aws/placement-group-partition";
/// Name of the EC2NodeClass a node was launched from.
pub const EC2NODECLASS: &str = "karpenter.k8s.aws/ec2nodeclass";
/// Zone ID (e.g. `use1-az1`), stable across accounts unlike zone names.
pub const ZONE_ID: &str = "topology.k8s.aws/zone-id";

/// AWS labels that users may set or require even though they live in the reserved
/// `karpenter.k8s.aws` domain.
pub const AWS_WELL_KNOWN_LABELS: &[&str] = &[
    CAPACITY_RESERVATION_ID,
    CAPACITY_RESERVATION_TYPE,
    CAPACITY_RESERVATION_INTERRUPTIBLE,
    INSTANCE_HYPERVISOR,
    INSTANCE_ENCRYPTION_IN_TRANSIT_SUPPORTED,
    NITRO_SANDBOX,
    INSTANCE_CATEGORY,
    INSTANCE_CAPABILITY_FLEX,
    INSTANCE_FAMILY,
    INSTANCE_GENERATION,
    INSTANCE_SIZE,
    INSTANCE_LOCAL_NVME,
    INSTANCE_CPU,
    INSTANCE_CPU_MANUFACTURER,
    INSTANCE_CPU_SUSTAINED_CLOCK_SPEED_MHZ,
    INSTANCE_MEMORY,
    INSTANCE_EBS_BANDWIDTH,
    INSTANCE_NETWORK_BANDWIDTH,
    INSTANCE_GPU_NAME,
    INSTANCE_GPU_MANUFACTURER,
    INSTANCE_GPU_COUNT,
    INSTANCE_GPU_MEMORY,
    INSTANCE_ACCELERATOR_NAME,
    INSTANCE_ACCELERATOR_MANUFACTURER,
    INSTANCE_ACCELERATOR_COUNT,
    INSTANCE_TENANCY,
    PLACEMENT_GROUP_ID,
    PLACEMENT_GROUP_PARTITION,
    ZONE_ID,
];

// Annotations.
/// On a pod (`"true"` or a duration) or a node (`"true"`): Karpenter must not voluntarily disrupt it.
pub const DO_NOT_DISRUPT: &str = "karpenter.sh/do-not-disrupt";
/// Static drift hash of the NodePool template, stamped on NodePools and their NodeClaims.
pub const NODEPOOL_HASH: &str = "karpenter.sh/nodepool-hash";
/// Version of the hash algorithm; NodeClaims stamped with another version are re-stamped, not drifted.
pub const NODEPOOL_HASH_VERSION: &str = "karpenter.sh/nodepool-hash-version";
/// Deadline after which a terminating NodeClaim's node is forcibly removed.
pub const NODECLAIM_TERMINATION_TIMESTAMP: &str = "karpenter.sh/nodeclaim-termination-timestamp";
/// Whether `minValues` were relaxed under the BestEffort policy.
pub const NODECLAIM_MIN_VALUES_RELAXED: &str = "karpenter.sh/nodeclaim-min-values-relaxed";
/// DRA drivers a NodeClaim waits for before it counts as initialized.
pub const REQUESTED_DRA_DRIVERS: &str = "karpenter.sh/requested-dra-drivers";
/// Set on NodeClaims whose price came from a NodeOverlay.
pub const PRICE_OVERLAY_APPLIED: &str = "karpenter.sh/price-overlay-applied";
/// Set on NodeClaims whose capacity came from a NodeOverlay.
pub const CAPACITY_OVERLAY_APPLIED: &str = "karpenter.sh/capacity-overlay-applied";
/// Name of the cloud provider that launched a NodeClaim.
pub const PROVIDER_COMPATIBILITY: &str = "compatibility.karpenter.sh/provider";
/// Static drift hash of an EC2NodeClass.
pub const EC2NODECLASS_HASH: &str = "karpenter.k8s.aws/ec2nodeclass-hash";
/// Version of the EC2NodeClass hash algorithm.
pub const EC2NODECLASS_HASH_VERSION: &str = "karpenter.k8s.aws/ec2nodeclass-hash-version";
/// Set on a NodeClaim once its instance carries its post-registration tags (`Name`, the
/// NodeClaim, the cluster).
pub const TAGGED: &str = "karpenter.k8s.aws/tagged";
/// Name of the instance profile Karpenter manages for an EC2NodeClass `role`.
pub const INSTANCE_PROFILE_NAME: &str = "karpenter.k8s.aws/instance-profile-name";
/// Set on a NodeClaim beside [`TAGGED`] once its instance carries `eks:eks-cluster-name` (instances
/// tagged before that tag existed lack it, so upstream remembers the two apart).
pub const CLUSTER_NAME_TAGGED: &str = "compatibility.karpenter.k8s.aws/cluster-name-tagged";

// Annotations and keys from earlier API versions, which `convert` rewrites.
/// v1alpha5/v1beta1 pod annotation replaced by `karpenter.sh/do-not-disrupt`.
pub const LEGACY_DO_NOT_EVICT: &str = "karpenter.sh/do-not-evict";
/// v1alpha5/v1beta1 node annotation replaced by `karpenter.sh/do-not-disrupt`.
pub const LEGACY_DO_NOT_CONSOLIDATE: &str = "karpenter.sh/do-not-consolidate";
/// v1alpha5 label naming the Provisioner, replaced by `karpenter.sh/nodepool`.
pub const LEGACY_PROVISIONER_NAME: &str = "karpenter.sh/provisioner-name";

// Taints.
/// Present on a node until Karpenter registers it; nodes must boot with it.
pub const UNREGISTERED_TAINT_KEY: &str = "karpenter.sh/unregistered";
/// Put on nodes Karpenter is disrupting so nothing new schedules there.
pub const DISRUPTED_TAINT_KEY: &str = "karpenter.sh/disrupted";

// Finalizers.
/// On NodeClaims and Nodes: Karpenter drains and terminates before the object goes.
pub const TERMINATION_FINALIZER: &str = "karpenter.sh/termination";
/// On EC2NodeClasses: blocks deletion while NodeClaims still use the class.
pub const AWS_TERMINATION_FINALIZER: &str = "karpenter.k8s.aws/termination";

/// Label keys no requirement may name: every node has its own value, so no NodePool can promise one.
pub const RESTRICTED_LABELS: &[&str] = &[HOSTNAME];

/// Label domains Karpenter reserves for values it sets itself. Since v1.14 upstream no longer
/// reserves `kubernetes.io` and `k8s.io` (users set `node-role.kubernetes.io/*` labels); kubelet
/// is still never asked to set those itself, as the node-restriction admission rule forbids it.
const RESTRICTED_DOMAINS: &[&str] = &[GROUP, AWS_GROUP];

/// Whether a NodePool or pod may not require this label key (nor a NodePool set it): the
/// well-known labels are always allowed; `kubernetes.io/hostname` and other keys in the reserved
/// domains (`karpenter.sh`, `karpenter.k8s.aws`) are not, because only Karpenter or the cloud
/// provider set them.
pub fn is_restricted_label(key: &str) -> bool {
    let key = normalize(key);
    if WELL_KNOWN_LABELS.contains(&key)
        || AWS_WELL_KNOWN_LABELS.contains(&key)
        || key == EC2NODECLASS
    {
        return false;
    }
    if RESTRICTED_LABELS.contains(&key) {
        return true;
    }
    let Some((domain, _)) = key.split_once('/') else {
        return false;
    };
    RESTRICTED_DOMAINS
        .iter()
        .any(|d| domain == *d || domain.ends_with(&format!(".{d}")))
}

/// Whether Karpenter must not write this label onto a NodeClaim from its requirements (upstream's
/// `IsRestrictedNodeLabel`): well-known labels describe what is launched — a requirement allowing
/// several instance types or zones has no single true value before the launch — so the cloud
/// provider sets them from the instance; restricted ones belong to Kubernetes or other software.
pub fn is_restricted_node_label(key: &str) -> bool {
    let normal = normalize(key);
    WELL_KNOWN_LABELS.contains(&normal)
        || AWS_WELL_KNOWN_LABELS.contains(&normal)
        || is_restricted_label(key)
}

/// The current name of a label key, mapping deprecated beta keys to their GA names.
pub fn normalize(key: &str) -> &str {
    NORMALIZED_LABELS
        .iter()
        .find(|(old, _)| *old == key)
        .map(|(_, new)| *new)
        .unwrap_or(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restricted_domains_allow_well_known_keys_only() {
        assert!(!is_restricted_label(NODEPOOL));
        assert!(!is_restricted_label(ZONE));
        assert!(!is_restricted_label(
            "failure-domain.beta.kubernetes.io/zone"
        ));
        assert!(is_restricted_label(HOSTNAME));
        assert!(!is_restricted_label("kubernetes.io/custom"));
        assert!(!is_restricted_label("node-role.kubernetes.io/worker"));
        assert!(!is_restricted_label("sub.k8s.io/custom"));
        assert!(!is_restricted_label("node.kubernetes.io/role"));
        assert!(is_restricted_label("karpenter.sh/custom"));
        assert!(is_restricted_label("sub.karpenter.sh/custom"));
        assert!(!is_restricted_label(CAPACITY_TYPE));
        assert!(is_restricted_label("karpenter.k8s.aws/custom"));
        assert!(!is_restricted_label(INSTANCE_FAMILY));
        assert!(!is_restricted_label("example.com/team"));
        assert!(!is_restricted_label("team"));
    }

    #[test]
    fn beta_keys_normalize_to_ga_keys() {
        assert_eq!(normalize("beta.kubernetes.io/arch"), ARCH);
        assert_eq!(normalize("failure-domain.beta.kubernetes.io/zone"), ZONE);
        assert_eq!(normalize("example.com/x"), "example.com/x");
    }
}
