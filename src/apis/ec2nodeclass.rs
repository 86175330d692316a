//! `karpenter.k8s.aws/v1` EC2NodeClass: how to launch an EC2 instance (AMI, subnets, security
//! groups, IAM, storage, user data, kubelet settings) for the NodePools that reference it.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::conditions::Condition;
use super::nodeclaim::Operator;
use super::schema;

/// Desired state of an EC2NodeClass.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "karpenter.k8s.aws",
    version = "v1",
    kind = "EC2NodeClass",
    plural = "ec2nodeclasses",
    singular = "ec2nodeclass",
    shortname = "ec2nc",
    shortname = "ec2ncs",
    category = "karpenter",
    status = "EC2NodeClassStatus",
    doc = "EC2NodeClass is the Schema for the EC2NodeClass API",
    printcolumn = r#"{"name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}"#,
    printcolumn = r#"{"name": "Role", "type": "string", "jsonPath": ".spec.role", "priority": 1}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "(has(self.role) && !has(self.instanceProfile)) || (!has(self.role) && has(self.instanceProfile))", "message": "must specify exactly one of ['role', 'instanceProfile']"},
    {"rule": "!has(self.amiFamily) || (self.amiSelectorTerms.exists(x, has(x.alias) && x.alias.find('^[^@]+') == 'al2') ? (self.amiFamily == 'Custom' || self.amiFamily == 'AL2') : true)", "message": "if set, amiFamily must be 'AL2' or 'Custom' when using an AL2 alias"},
    {"rule": "!has(self.amiFamily) || (self.amiSelectorTerms.exists(x, has(x.alias) && x.alias.find('^[^@]+') == 'al2023') ? (self.amiFamily == 'Custom' || self.amiFamily == 'AL2023') : true)", "message": "if set, amiFamily must be 'AL2023' or 'Custom' when using an AL2023 alias"},
    {"rule": "!has(self.amiFamily) || (self.amiSelectorTerms.exists(x, has(x.alias) && x.alias.find('^[^@]+') == 'bottlerocket') ? (self.amiFamily == 'Custom' || self.amiFamily == 'Bottlerocket') : true)", "message": "if set, amiFamily must be 'Bottlerocket' or 'Custom' when using a Bottlerocket alias"},
    {"rule": "!has(self.amiFamily) || (self.amiSelectorTerms.exists(x, has(x.alias) && x.alias.find('^[^@]+') == 'windows2019') ? (self.amiFamily == 'Custom' || self.amiFamily == 'Windows2019') : true)", "message": "if set, amiFamily must be 'Windows2019' or 'Custom' when using a Windows2019 alias"},
    {"rule": "!has(self.amiFamily) || (self.amiSelectorTerms.exists(x, has(x.alias) && x.alias.find('^[^@]+') == 'windows2022') ? (self.amiFamily == 'Custom' || self.amiFamily == 'Windows2022') : true)", "message": "if set, amiFamily must be 'Windows2022' or 'Custom' when using a Windows2022 alias"},
    {"rule": "!has(self.amiFamily) || (self.amiSelectorTerms.exists(x, has(x.alias) && x.alias.find('^[^@]+') == 'windows2025') ? (self.amiFamily == 'Custom' || self.amiFamily == 'Windows2025') : true)", "message": "if set, amiFamily must be 'Windows2025' or 'Custom' when using a Windows2025 alias"},
    {"rule": "self.amiSelectorTerms.exists(x, has(x.alias)) ? true : has(self.amiFamily)", "message": "must specify amiFamily if amiSelectorTerms does not contain an alias"}
]))]
pub struct EC2NodeClassSpec {
    /// Subnets to launch into, by tags or ID; any match is used.
    #[schemars(length(max = 30))]
    #[schemars(extend("x-kubernetes-validations" = [
        {"rule": "self.size() != 0", "message": "subnetSelectorTerms cannot be empty"},
        {"rule": "self.all(x, has(x.tags) || has(x.id))", "message": "expected at least one, got none, ['tags', 'id']"},
        {"rule": "!self.all(x, has(x.id) && has(x.tags))", "message": "'id' is mutually exclusive, cannot be set with a combination of other fields in a subnet selector term"}
    ]))]
    pub subnet_selector_terms: Vec<SubnetSelectorTerm>,
    /// Security groups for the instances, by tags, ID or name.
    #[schemars(length(max = 30))]
    #[schemars(extend("x-kubernetes-validations" = [
        {"rule": "self.size() != 0", "message": "securityGroupSelectorTerms cannot be empty"},
        {"rule": "self.all(x, has(x.tags) || has(x.id) || has(x.name))", "message": "expected at least one, got none, ['tags', 'id', 'name']"},
        {"rule": "!self.all(x, has(x.id) && (has(x.tags) || has(x.name)))", "message": "'id' is mutually exclusive, cannot be set with a combination of other fields in a security group selector term"},
        {"rule": "!self.all(x, has(x.name) && (has(x.tags) || has(x.id)))", "message": "'name' is mutually exclusive, cannot be set with a combination of other fields in a security group selector term"}
    ]))]
    pub security_group_selector_terms: Vec<SecurityGroupSelectorTerm>,
    /// On-demand capacity reservations and capacity blocks to launch into.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 30))]
    #[schemars(extend("x-kubernetes-validations" = [
        {"rule": "self.all(x, has(x.tags) || has(x.id) || has(x.instanceMatchCriteria))", "message": "expected at least one, got none, ['tags', 'id', 'instanceMatchCriteria']"},
        {"rule": "!self.all(x, has(x.id) && (has(x.tags) || has(x.ownerID) || has(x.instanceMatchCriteria)))", "message": "'id' is mutually exclusive, cannot be set along with other fields in a capacity reservation selector term"}
    ]))]
    pub capacity_reservation_selector_terms: Vec<CapacityReservationSelectorTerm>,
    /// Placement group to launch into.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement_group_selector: Option<PlacementGroupSelector>,
    /// Whether instances get a public IP address (default: the subnet's setting).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "associatePublicIPAddress"
    )]
    pub associate_public_ip_address: Option<bool>,
    /// AMIs to boot, by alias (`al2023@latest`), ID, name, tags or SSM parameter.
    #[schemars(length(min = 1, max = 30))]
    #[schemars(extend("x-kubernetes-validations" = [
        {"rule": "self.all(x, has(x.tags) || has(x.id) || has(x.name) || has(x.alias) || has(x.ssmParameter))", "message": "expected at least one, got none, ['tags', 'id', 'name', 'alias', 'ssmParameter']"},
        {"rule": "!self.exists(x, has(x.id) && (has(x.alias) || has(x.tags) || has(x.name) || has(x.owner)))", "message": "'id' is mutually exclusive, cannot be set with a combination of other fields in amiSelectorTerms"},
        {"rule": "!self.exists(x, has(x.alias) && (has(x.id) || has(x.tags) || has(x.name) || has(x.owner)))", "message": "'alias' is mutually exclusive, cannot be set with a combination of other fields in amiSelectorTerms"},
        {"rule": "!(self.exists(x, has(x.alias)) && self.size() != 1)", "message": "'alias' is mutually exclusive, cannot be set with a combination of other amiSelectorTerms"}
    ]))]
    pub ami_selector_terms: Vec<AMISelectorTerm>,
    /// User-data format and default block devices; inferred from an alias when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ami_family: Option<AMIFamily>,
    /// User data merged with (or, for Custom, used instead of) what Karpenter generates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_data: Option<String>,
    /// IAM role for the nodes; Karpenter manages an instance profile for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "self != ''", "message": "role cannot be empty"}]))]
    pub role: Option<String>,
    /// An existing instance profile to use instead of `role`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "self != ''", "message": "instanceProfile cannot be empty"}]))]
    pub instance_profile: Option<String>,
    /// Tags for instances, volumes, launch templates and fleets.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("x-kubernetes-validations" = [
        {"rule": "self.all(k, k != '')", "message": "empty tag keys aren't supported"},
        {"rule": "self.all(k, k !='eks:eks-cluster-name')", "message": "tag contains a restricted tag matching eks:eks-cluster-name"},
        {"rule": "self.all(k, !k.startsWith('kubernetes.io/cluster') )", "message": "tag contains a restricted tag matching kubernetes.io/cluster/"},
        {"rule": "self.all(k, k != 'karpenter.sh/nodepool')", "message": "tag contains a restricted tag matching karpenter.sh/nodepool"},
        {"rule": "self.all(k, k !='karpenter.sh/nodeclaim')", "message": "tag contains a restricted tag matching karpenter.sh/nodeclaim"},
        {"rule": "self.all(k, k !='karpenter.k8s.aws/ec2nodeclass')", "message": "tag contains a restricted tag matching karpenter.k8s.aws/ec2nodeclass"}
    ]))]
    pub tags: BTreeMap<String, String>,
    /// Kubelet settings for the nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubelet: Option<KubeletConfiguration>,
    /// Volumes attached at launch; defaults depend on the AMI family.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 50))]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "self.filter(x, has(x.rootVolume)?x.rootVolume==true:false).size() <= 1", "message": "must have only one blockDeviceMappings with rootVolume"}]))]
    pub block_device_mappings: Vec<BlockDeviceMapping>,
    /// `RAID0` combines instance-store disks into one volume for ephemeral storage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_store_policy: Option<InstanceStorePolicy>,
    /// Network interfaces (e.g. EFA) to attach at launch.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 150))]
    #[schemars(extend("x-kubernetes-validations" = [
        {"rule": "self.all(x, self.filter(y, x.networkCardIndex == y.networkCardIndex && x.deviceIndex == y.deviceIndex).size() == 1 && (x.interfaceType != 'efa-only' || self.filter(y, x.networkCardIndex == y.networkCardIndex && y.interfaceType == 'efa-only').size() == 1))", "message": "networkInterfaces must not have duplicate networkCardIndex and deviceIndex pairs, and can have at most one efa device per network card"},
        {"rule": "self.size() == 0 || self.exists(x, x.deviceIndex == 0 && x.networkCardIndex == 0 && x.interfaceType == 'interface')", "message": "networkInterfaces must include a primary interface with interfaceType='interface'"}
    ]))]
    pub network_interfaces: Vec<NetworkInterface>,
    /// Number of /28 IPv4 prefixes per interface (prefix delegation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub ip_prefix_count: Option<i32>,
    /// Whether detailed (1-minute) CloudWatch monitoring is on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detailed_monitoring: Option<bool>,
    /// Instance metadata service options; IMDSv2 with a hop limit of 1 by default.
    #[serde(default = "MetadataOptions::default_for_nodeclass")]
    #[schemars(extend("default" = {"httpEndpoint": "enabled", "httpProtocolIPv6": "disabled", "httpPutResponseHopLimit": 1, "httpTokens": "required"}))]
    pub metadata_options: MetadataOptions,
    /// Connection tracking timeouts for the primary interface.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connection_tracking: Option<ConnectionTracking>,
    /// Reserved CreateFleet context (for EC2 features in private preview).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    /// CPU options for the instances.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_options: Option<CpuOptions>,
}

/// Selects subnets by tags (with `*` for any value) or by ID.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SubnetSelectorTerm {
    /// Tags the subnet must carry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = schema::selector_tags)]
    pub tags: Option<BTreeMap<String, String>>,
    /// The subnet ID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern("subnet-[0-9a-z]+"))]
    pub id: Option<String>,
}

/// Selects security groups by tags, ID or name.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SecurityGroupSelectorTerm {
    /// Tags the security group must carry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = schema::selector_tags)]
    pub tags: Option<BTreeMap<String, String>>,
    /// The security group ID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern("sg-[0-9a-z]+"))]
    pub id: Option<String>,
    /// The security group name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// Selects capacity reservations.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CapacityReservationSelectorTerm {
    /// Tags the reservation must carry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = schema::selector_tags)]
    pub tags: Option<BTreeMap<String, String>>,
    /// The reservation ID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern("^cr-[0-9a-z]+$"))]
    pub id: Option<String>,
    /// Account that owns the reservation.
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "ownerID")]
    #[schemars(pattern("^[0-9]{12}$"))]
    pub owner_id: Option<String>,
    /// `open` or `targeted` reservations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["open", "targeted"]))]
    pub instance_match_criteria: Option<String>,
}

/// Selects a placement group by name or ID.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "!(has(self.name) && has(self.id))", "message": "'name' and 'id' are mutually exclusive"},
    {"rule": "has(self.name) || has(self.id)", "message": "expected at least one, got none, ['name', 'id']"}
]))]
pub struct PlacementGroupSelector {
    /// The placement group name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub name: Option<String>,
    /// The placement group ID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern("^pg-[0-9a-z]+$"))]
    pub id: Option<String>,
}

/// Selects AMIs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AMISelectorTerm {
    /// An EKS-optimized AMI family and version, `family@version` (e.g. `al2023@latest`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 30))]
    #[schemars(extend("x-kubernetes-validations" = [
        {"rule": "self.matches('^[a-zA-Z0-9]+@.+$')", "message": "'alias' is improperly formatted, must match the format 'family@version'"},
        {"rule": "self.split('@')[0] in ['al2','al2023','bottlerocket','windows2019','windows2022','windows2025']", "message": "family is not supported, must be one of the following: 'al2', 'al2023', 'bottlerocket', 'windows2019', 'windows2022', 'windows2025'"},
        {"rule": "self.split('@')[0] in ['windows2019','windows2022','windows2025'] ? self.split('@')[1] == 'latest' : true", "message": "windows families may only specify version 'latest'"}
    ]))]
    pub alias: Option<String>,
    /// Tags the AMI must carry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = schema::selector_tags)]
    pub tags: Option<BTreeMap<String, String>>,
    /// The AMI ID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern("ami-[0-9a-z]+"))]
    pub id: Option<String>,
    /// AMI name, with `*` wildcards.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// AMI owner account or alias (`self`, `amazon`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// An SSM parameter holding an AMI ID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssm_parameter: Option<String>,
}

/// The AMI family decides the user-data format and default block devices.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum AMIFamily {
    /// Amazon Linux 2 (bootstrap.sh).
    AL2,
    /// Amazon Linux 2023 (nodeadm NodeConfig).
    AL2023,
    /// Bottlerocket (TOML settings).
    Bottlerocket,
    /// User data passed through unchanged.
    Custom,
    /// Windows Server 2019 (PowerShell).
    Windows2019,
    /// Windows Server 2022 (PowerShell).
    Windows2022,
    /// Windows Server 2025 (PowerShell).
    Windows2025,
}

impl AMIFamily {
    /// The family an alias such as `al2023@latest` names.
    pub fn from_alias(alias: &str) -> Option<Self> {
        match alias.split('@').next()? {
            "al2" => Some(Self::AL2),
            "al2023" => Some(Self::AL2023),
            "bottlerocket" => Some(Self::Bottlerocket),
            "windows2019" => Some(Self::Windows2019),
            "windows2022" => Some(Self::Windows2022),
            "windows2025" => Some(Self::Windows2025),
            _ => None,
        }
    }

    /// The alias family prefix for this AMI family, if it has EKS-optimized images.
    pub fn alias_prefix(self) -> Option<&'static str> {
        match self {
            Self::AL2 => Some("al2"),
            Self::AL2023 => Some("al2023"),
            Self::Bottlerocket => Some("bottlerocket"),
            Self::Windows2019 => Some("windows2019"),
            Self::Windows2022 => Some("windows2022"),
            Self::Windows2025 => Some("windows2025"),
            Self::Custom => None,
        }
    }
}

impl EC2NodeClassSpec {
    /// The effective AMI family: the explicit field, else the alias' family.
    pub fn ami_family(&self) -> Option<AMIFamily> {
        self.ami_family.or_else(|| {
            self.ami_selector_terms
                .iter()
                .find_map(|t| t.alias.as_deref().and_then(AMIFamily::from_alias))
        })
    }
}

/// Kubelet settings Karpenter renders into user data and uses for allocatable.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "has(self.imageGCHighThresholdPercent) && has(self.imageGCLowThresholdPercent) ?  self.imageGCHighThresholdPercent > self.imageGCLowThresholdPercent  : true", "message": "imageGCHighThresholdPercent must be greater than imageGCLowThresholdPercent"},
    {"rule": "has(self.evictionSoft) ? self.evictionSoft.all(e, (e in self.evictionSoftGracePeriod)):true", "message": "evictionSoft OwnerKey does not have a matching evictionSoftGracePeriod"},
    {"rule": "has(self.evictionSoftGracePeriod) ? self.evictionSoftGracePeriod.all(e, (e in self.evictionSoft)):true", "message": "evictionSoftGracePeriod OwnerKey does not have a matching evictionSoft"}
]))]
pub struct KubeletConfiguration {
    /// DNS server IPs for pods, instead of the cluster DNS service.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "clusterDNS"
    )]
    pub cluster_dns: Option<Vec<String>>,
    /// Pod limit per node, instead of the ENI-based default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub max_pods: Option<i32>,
    /// Pod limit per vCPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub pods_per_core: Option<i32>,
    /// Resources reserved for the OS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = schema::quantity_string_map)]
    #[schemars(extend("x-kubernetes-validations" = [
        {"rule": "self.all(x, x=='cpu' || x=='memory' || x=='ephemeral-storage' || x=='pid')", "message": "valid keys for systemReserved are ['cpu','memory','ephemeral-storage','pid']"},
        {"rule": "self.all(x, !self[x].startsWith('-'))", "message": "systemReserved value cannot be a negative resource quantity"}
    ]))]
    pub system_reserved: Option<BTreeMap<String, String>>,
    /// Resources reserved for Kubernetes daemons; replaces Karpenter's computed defaults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = schema::quantity_string_map)]
    #[schemars(extend("x-kubernetes-validations" = [
        {"rule": "self.all(x, x=='cpu' || x=='memory' || x=='ephemeral-storage' || x=='pid')", "message": "valid keys for kubeReserved are ['cpu','memory','ephemeral-storage','pid']"},
        {"rule": "self.all(x, !self[x].startsWith('-'))", "message": "kubeReserved value cannot be a negative resource quantity"}
    ]))]
    pub kube_reserved: Option<BTreeMap<String, String>>,
    /// Hard eviction thresholds; they reduce allocatable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = schema::eviction_threshold_map)]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "self.all(x, x in ['memory.available','nodefs.available','nodefs.inodesFree','imagefs.available','imagefs.inodesFree','pid.available'])", "message": "valid keys for evictionHard are ['memory.available','nodefs.available','nodefs.inodesFree','imagefs.available','imagefs.inodesFree','pid.available']"}]))]
    pub eviction_hard: Option<BTreeMap<String, String>>,
    /// Soft eviction thresholds; each needs a grace period.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = schema::eviction_threshold_map)]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "self.all(x, x in ['memory.available','nodefs.available','nodefs.inodesFree','imagefs.available','imagefs.inodesFree','pid.available'])", "message": "valid keys for evictionSoft are ['memory.available','nodefs.available','nodefs.inodesFree','imagefs.available','imagefs.inodesFree','pid.available']"}]))]
    pub eviction_soft: Option<BTreeMap<String, String>>,
    /// Grace periods for the soft eviction thresholds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "self.all(x, x in ['memory.available','nodefs.available','nodefs.inodesFree','imagefs.available','imagefs.inodesFree','pid.available'])", "message": "valid keys for evictionSoftGracePeriod are ['memory.available','nodefs.available','nodefs.inodesFree','imagefs.available','imagefs.inodesFree','pid.available']"}]))]
    pub eviction_soft_grace_period: Option<BTreeMap<String, String>>,
    /// Longest grace period given to pods evicted for a soft threshold, in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eviction_max_pod_grace_period: Option<i32>,
    /// Disk usage percentage that starts image garbage collection.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "imageGCHighThresholdPercent"
    )]
    #[schemars(range(min = 0, max = 100))]
    pub image_gc_high_threshold_percent: Option<i32>,
    /// Disk usage percentage image garbage collection frees down to.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "imageGCLowThresholdPercent"
    )]
    #[schemars(range(min = 0, max = 100))]
    pub image_gc_low_threshold_percent: Option<i32>,
    /// Whether CPU limits are enforced with CFS quota.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "cpuCFSQuota"
    )]
    pub cpu_cfs_quota: Option<bool>,
}

/// A volume attached at launch.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BlockDeviceMapping {
    /// Device name, e.g. `/dev/xvda`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_name: Option<String>,
    /// The EBS volume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ebs: Option<BlockDevice>,
    /// Whether this is the root volume, whose size sets ephemeral storage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root_volume: Option<bool>,
}

/// EBS volume settings.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "has(self.snapshotID) || has(self.volumeSize)", "message": "snapshotID or volumeSize must be defined"},
    {"rule": "!has(self.volumeInitializationRate) || (has(self.snapshotID) && self.snapshotID != '')", "message": "snapshotID must be set when volumeInitializationRate is set"}
]))]
pub struct BlockDevice {
    /// Whether the volume is deleted with the instance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delete_on_termination: Option<bool>,
    /// Whether the volume is encrypted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encrypted: Option<bool>,
    /// Provisioned IOPS (io1, io2, gp3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iops: Option<i64>,
    /// KMS key for encryption.
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "kmsKeyID")]
    pub kms_key_id: Option<String>,
    /// Snapshot to create the volume from.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "snapshotID"
    )]
    pub snapshot_id: Option<String>,
    /// Throughput in MiB/s (gp3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throughput: Option<i64>,
    /// Rate in MiB/s at which a snapshot-backed volume is initialized.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 100, max = 300))]
    pub volume_initialization_rate: Option<i32>,
    /// Volume size, e.g. `100Gi`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(r"^((?:[1-9][0-9]{0,3}|[1-4][0-9]{4}|[5][0-8][0-9]{3}|59000)Gi|(?:[1-9][0-9]{0,3}|[1-5][0-9]{4}|[6][0-3][0-9]{3}|64000)G|([1-9]||[1-5][0-7]|58)Ti|([1-9]||[1-5][0-9]|6[0-3]|64)T)$"))]
    pub volume_size: Option<String>,
    /// EBS volume type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["standard", "io1", "io2", "gp2", "sc1", "st1", "gp3"]))]
    pub volume_type: Option<String>,
}

/// How instance-store disks are used.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum InstanceStorePolicy {
    /// Stripe all instance-store disks into one RAID0 array for ephemeral storage.
    RAID0,
}

/// A network interface attached at launch.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NetworkInterface {
    /// Network card the interface is on.
    #[schemars(range(min = 0))]
    pub network_card_index: i32,
    /// Device index on the card.
    #[schemars(range(min = 0))]
    pub device_index: i32,
    /// `interface` (ENA, optionally with EFA) or `efa-only`.
    #[schemars(extend("enum" = ["interface", "efa-only"]))]
    pub interface_type: String,
}

/// Instance metadata service settings.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MetadataOptions {
    /// Whether IMDS is reachable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "enabled", "enum" = ["enabled", "disabled"]))]
    pub http_endpoint: Option<String>,
    /// Whether IMDS has an IPv6 endpoint.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "httpProtocolIPv6"
    )]
    #[schemars(extend("default" = "disabled", "enum" = ["enabled", "disabled"]))]
    pub http_protocol_ipv6: Option<String>,
    /// How many network hops IMDS responses survive; 1 keeps them away from pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 64), extend("default" = 1))]
    pub http_put_response_hop_limit: Option<i64>,
    /// `required` enforces IMDSv2 session tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "required", "enum" = ["required", "optional"]))]
    pub http_tokens: Option<String>,
}

impl MetadataOptions {
    /// The API server's default: IMDSv2 only, hop limit 1, no IPv6 endpoint.
    pub fn default_for_nodeclass() -> Self {
        Self {
            http_endpoint: Some("enabled".into()),
            http_protocol_ipv6: Some("disabled".into()),
            http_put_response_hop_limit: Some(1),
            http_tokens: Some("required".into()),
        }
    }
}

/// Connection tracking timeouts, in seconds.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{"rule": "has(self.tcpEstablishedTimeout) || has(self.udpStreamTimeout) || has(self.udpTimeout)", "message": "at least one of tcpEstablishedTimeout, udpStreamTimeout, or udpTimeout must be set"}]))]
pub struct ConnectionTracking {
    /// Idle timeout for established TCP connections.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 60, max = 432000))]
    pub tcp_established_timeout: Option<i32>,
    /// Idle timeout for UDP flows seen in both directions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 60, max = 180))]
    pub udp_stream_timeout: Option<i32>,
    /// Idle timeout for UDP flows seen in one direction.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 30, max = 60))]
    pub udp_timeout: Option<i32>,
}

/// CPU options.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CpuOptions {
    /// Whether nested virtualization is enabled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["enabled", "disabled"]))]
    pub nested_virtualization: Option<String>,
}

impl CpuOptions {
    /// Whether the class asks for nested virtualization (`nestedVirtualization: enabled`): as
    /// upstream, it then offers only the instance types EC2 says support it.
    pub fn nested_virtualization_enabled(&self) -> bool {
        self.nested_virtualization.as_deref() == Some("enabled")
    }
}

/// The EC2NodeClass status conditions a resolution can turn false: each points at the part of
/// the node class (or of the controller's setup) to fix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeClassCondition {
    /// `spec.subnetSelectorTerms`.
    SubnetsReady,
    /// `spec.securityGroupSelectorTerms`.
    SecurityGroupsReady,
    /// `spec.amiSelectorTerms`.
    AMIsReady,
    /// `spec.role` / `spec.instanceProfile`.
    InstanceProfileReady,
    /// `spec.capacityReservationSelectorTerms`.
    CapacityReservationsReady,
    /// `spec.placementGroupSelector` (reported only while the class selects a placement group).
    PlacementGroupReady,
    /// Everything else a launch needs, e.g. user data that renders.
    ValidationSucceeded,
}

impl NodeClassCondition {
    /// The condition's `type` in the status.
    pub fn type_(self) -> &'static str {
        match self {
            Self::SubnetsReady => "SubnetsReady",
            Self::SecurityGroupsReady => "SecurityGroupsReady",
            Self::AMIsReady => "AMIsReady",
            Self::InstanceProfileReady => "InstanceProfileReady",
            Self::CapacityReservationsReady => "CapacityReservationsReady",
            Self::PlacementGroupReady => "PlacementGroupReady",
            Self::ValidationSucceeded => "ValidationSucceeded",
        }
    }
}

/// Observed state of an EC2NodeClass: what its selectors resolved to.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EC2NodeClassStatus {
    /// Resolved subnets.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subnets: Vec<Subnet>,
    /// Resolved security groups.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub security_groups: Vec<SecurityGroup>,
    /// Resolved capacity reservations.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub capacity_reservations: Vec<CapacityReservation>,
    /// Resolved AMIs, each with the instance requirements it serves.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub amis: Vec<AMI>,
    /// The instance profile in use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_profile: Option<String>,
    /// Ready, SubnetsReady, SecurityGroupsReady, AMIsReady, InstanceProfileReady, ValidationSucceeded, ...
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// A resolved subnet.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Subnet {
    /// Subnet ID.
    pub id: String,
    /// Availability zone name.
    pub zone: String,
    /// Availability zone ID.
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "zoneID")]
    pub zone_id: Option<String>,
}

/// A resolved security group.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SecurityGroup {
    /// Security group ID.
    pub id: String,
    /// Security group name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// A resolved capacity reservation.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CapacityReservation {
    /// Zone of the reservation.
    pub availability_zone: String,
    /// When the reservation ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_time: Option<DateTime<Utc>>,
    /// Reservation ID.
    #[schemars(pattern("^cr-[0-9a-z]+$"))]
    pub id: String,
    /// `open` or `targeted`.
    #[schemars(extend("enum" = ["open", "targeted"]))]
    pub instance_match_criteria: String,
    /// Instance type reserved.
    pub instance_type: String,
    /// Owning account.
    #[serde(rename = "ownerID")]
    #[schemars(pattern("^[0-9]{12}$"))]
    pub owner_id: String,
    /// `default` (ODCR) or `capacity-block`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "default", "enum" = ["default", "capacity-block"]))]
    pub reservation_type: Option<String>,
    /// Whether EC2 may interrupt instances in the reservation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interruptible: Option<bool>,
    /// `active` or `expiring`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "active", "enum" = ["active", "expiring"]))]
    pub state: Option<String>,
}

/// A resolved AMI.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AMI {
    /// AMI ID.
    pub id: String,
    /// AMI name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Whether the AMI is deprecated (used only when nothing else matches).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deprecated: Option<bool>,
    /// Instance requirements this AMI serves (architecture, GPU, ...).
    pub requirements: Vec<AMIRequirement>,
}

/// A node selector requirement an AMI is compatible with.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AMIRequirement {
    /// Label key.
    pub key: String,
    /// Operator (a plain string in the schema, as `corev1.NodeSelectorRequirement` has it).
    #[schemars(with = "String")]
    pub operator: Operator,
    /// Values.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub values: Vec<String>,
}
