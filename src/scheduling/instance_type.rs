//! Instance types as the scheduler sees them: labels, capacity, what the node keeps for itself,
//! what is left for pods, and where and how (zone × capacity type) it can be bought at what price.
//!
//! The overhead model follows Karpenter's AWS provider so that a simulated node holds the same pods
//! as a real one: ENI-limited max pods, kube-reserved from max pods and vCPUs, a 100Mi + 10%
//! eviction threshold, and the VM memory overhead EC2 does not report.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::apis::ec2nodeclass::{AMIFamily, KubeletConfiguration, NetworkInterface};
use crate::apis::labels;

use super::requirements::Requirements;
use super::resources::{self, Resources, gib, mib};

/// How an instance is bought.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CapacityType {
    /// Capacity reservations; preferred when allowed because they are already paid for.
    Reserved,
    /// Spare capacity at a discount that EC2 may reclaim.
    Spot,
    /// Regular on-demand capacity.
    OnDemand,
}

impl CapacityType {
    /// The `karpenter.sh/capacity-type` label value.
    pub fn label(self) -> &'static str {
        match self {
            Self::Reserved => labels::CAPACITY_TYPE_RESERVED,
            Self::Spot => labels::CAPACITY_TYPE_SPOT,
            Self::OnDemand => labels::CAPACITY_TYPE_ON_DEMAND,
        }
    }

    /// Parses a `karpenter.sh/capacity-type` label value.
    pub fn from_label(value: &str) -> Option<Self> {
        match value {
            labels::CAPACITY_TYPE_RESERVED => Some(Self::Reserved),
            labels::CAPACITY_TYPE_SPOT => Some(Self::Spot),
            labels::CAPACITY_TYPE_ON_DEMAND => Some(Self::OnDemand),
            _ => None,
        }
    }
}

/// One way to buy an instance type: a zone, a capacity type and an hourly price.
#[derive(Clone, Debug, PartialEq)]
pub struct Offering {
    /// Availability zone name.
    pub zone: Arc<str>,
    /// Availability zone ID, when known.
    pub zone_id: Option<Arc<str>>,
    /// How the instance is bought.
    pub capacity_type: CapacityType,
    /// USD per hour.
    pub price: f64,
    /// False while the offering is known to be out of capacity.
    pub available: bool,
    /// The capacity reservation a reserved offering launches into (None for spot and
    /// on-demand).
    pub reservation: Option<Arc<Reservation>>,
    /// The partition (`karpenter.k8s.aws/placement-group-partition`) of the node class'
    /// partition placement group it launches into: such a class offers every zone and capacity
    /// type once per partition, as upstream, so requirements and topology spread on the label
    /// pick one. None outside partition groups.
    pub partition: Option<Arc<str>>,
}

/// A capacity reservation behind a reserved offering.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reservation {
    /// Reservation ID (`cr-...`).
    pub id: Arc<str>,
    /// `default` (ODCR) or `capacity-block`: the `capacity-reservation-type` label.
    pub reservation_type: Arc<str>,
    /// Instances the reservation can still launch: the scheduler plans at most this many
    /// NodeClaims onto it in one round.
    pub available: i64,
    /// An interruptible reservation (capacity another account lends and may take back): the
    /// `capacity-reservation-interruptible` label, launched with its own market type.
    pub interruptible: bool,
}

impl Reservation {
    /// The `karpenter.k8s.aws/capacity-reservation-interruptible` value of its offerings and
    /// nodes, as upstream labels every reserved offering.
    pub fn interruptible_label(&self) -> &'static str {
        if self.interruptible { "true" } else { "false" }
    }
}

/// The type of an on-demand capacity reservation (EC2's `default`; the other is `capacity-block`).
pub const RESERVATION_TYPE_DEFAULT: &str = "default";

/// A capacity reservation a node class selected, as the provider or `simulate` resolved it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReservedCapacity {
    /// Reservation ID.
    pub id: String,
    /// Instance type reserved.
    pub instance_type: String,
    /// Zone of the reservation.
    pub zone: String,
    /// `default` or `capacity-block`.
    pub reservation_type: String,
    /// Instances it can still launch.
    pub available: i64,
    /// Whether it is an interruptible reservation.
    pub interruptible: bool,
}

impl ReservedCapacity {
    /// A reservation as the EC2NodeClass status records it, with `available` instances left
    /// (the status does not carry the live count). A status without a type is a default
    /// (on-demand) reservation, as EC2's.
    pub fn of_status(
        status: &crate::apis::ec2nodeclass::CapacityReservation,
        available: i64,
    ) -> Self {
        Self {
            id: status.id.clone(),
            instance_type: status.instance_type.clone(),
            zone: status.availability_zone.clone(),
            reservation_type: status
                .reservation_type
                .clone()
                .unwrap_or_else(|| RESERVATION_TYPE_DEFAULT.into()),
            available,
            interruptible: status.interruptible.unwrap_or(false),
        }
    }
}

/// Divides the on-demand price of a type to get its reserved offerings' price: reserved capacity
/// is already paid for, so the cheapest-first choice takes it before spot and on-demand, while
/// reservations of larger types still cost more than those of smaller ones.
const RESERVED_PRICE_DIVISOR: f64 = 10_000_000.0;

/// Adds one reserved offering per reservation to the instance type and zone it reserves (the one
/// place reserved offerings are built, for the AWS provider and `simulate` alike). A reservation
/// of a type or zone the node class cannot launch is skipped; one with nothing left is added
/// unavailable so the type still shows where its reservations are.
pub fn add_reserved_offerings(types: &mut [InstanceType], reservations: &[ReservedCapacity]) {
    for r in reservations {
        let Some(it) = types.iter_mut().find(|t| *t.name == *r.instance_type) else {
            continue;
        };
        let Some(zone_offering) = it.offerings.iter().find(|o| *o.zone == *r.zone) else {
            continue;
        };
        let (zone, zone_id) = (zone_offering.zone.clone(), zone_offering.zone_id.clone());
        let on_demand = it
            .offerings
            .iter()
            .filter(|o| o.capacity_type == CapacityType::OnDemand)
            .map(|o| o.price)
            .min_by(f64::total_cmp)
            .unwrap_or(0.0);
        it.offerings.push(Offering {
            zone,
            zone_id,
            capacity_type: CapacityType::Reserved,
            price: on_demand / RESERVED_PRICE_DIVISOR,
            available: r.available > 0,
            reservation: Some(Arc::new(Reservation {
                id: Arc::from(r.id.as_str()),
                reservation_type: Arc::from(r.reservation_type.as_str()),
                available: r.available.max(0),
                interruptible: r.interruptible,
            })),
            partition: None,
        });
    }
}

/// What a node reserves for itself, subtracted from capacity to get allocatable.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Overhead {
    /// `kube-reserved`: kubelet and container runtime.
    pub kube_reserved: Resources,
    /// `system-reserved`: the OS.
    pub system_reserved: Resources,
    /// Hard eviction thresholds: kubelet evicts pods before these run out.
    pub eviction_threshold: Resources,
}

impl Overhead {
    /// The sum of the three parts.
    pub fn total(&self) -> Resources {
        self.kube_reserved
            .plus(&self.system_reserved)
            .plus(&self.eviction_threshold)
    }
}

/// An instance type resolved for one node class.
#[derive(Clone, Debug)]
pub struct InstanceType {
    /// e.g. `m5.large`.
    pub name: Arc<str>,
    /// Single-valued labels every node of this type carries (arch, os, instance-family, ...);
    /// zone and capacity type come from the offerings.
    pub labels: BTreeMap<&'static str, String>,
    /// Where and how it can be bought.
    pub offerings: Vec<Offering>,
    /// Full capacity of the node.
    pub capacity: Resources,
    /// What the node keeps for itself.
    pub overhead: Overhead,
    /// `capacity - overhead`: what pods can request.
    pub allocatable: Resources,
}

impl InstanceType {
    /// The cheapest available offering accepted by `accept`.
    pub fn cheapest_offering(&self, accept: impl Fn(&Offering) -> bool) -> Option<&Offering> {
        self.offerings
            .iter()
            .filter(|o| o.available && accept(o))
            .min_by(|a, b| a.price.total_cmp(&b.price))
    }
}

/// Hardware facts about an instance type, independent of any node class.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct InstanceTypeInfo {
    /// e.g. `m5.large`.
    pub name: String,
    /// vCPUs.
    pub vcpu: i64,
    /// Memory EC2 reports, in MiB.
    pub memory_mib: i64,
    /// `amd64` or `arm64`.
    pub arch: &'static str,
    /// CPU manufacturer, lower case.
    pub cpu_manufacturer: Option<String>,
    /// Sustained clock speed in GHz.
    pub sustained_clock_ghz: Option<f64>,
    /// `nitro`, `xen`, or empty for bare metal.
    pub hypervisor: String,
    /// Whether the type encrypts traffic in transit.
    pub encryption_in_transit: bool,
    /// GPUs, when the type has exactly one kind.
    pub gpu: Option<Device>,
    /// Inference/training accelerators, when the type has exactly one kind.
    pub accelerator: Option<Device>,
    /// Total local NVMe storage in GB.
    pub local_nvme_gb: i64,
    /// EBS bandwidth in Mbps (0 when unknown).
    pub ebs_bandwidth_mbps: i64,
    /// Network bandwidth in Mbps (0 when unknown).
    pub network_bandwidth_mbps: i64,
    /// Maximum network interfaces.
    pub max_enis: i64,
    /// IPv4 addresses per interface.
    pub ipv4_per_eni: i64,
    /// Branch interfaces for security groups per pod (0 when the type cannot trunk).
    pub branch_enis: i64,
    /// EFA interfaces.
    pub max_efa_interfaces: i64,
    /// Maximum network interfaces per network card, by card index; empty when unknown (the
    /// bundled catalog has no per-card data, EC2's DescribeInstanceTypes has).
    pub network_cards: Vec<i64>,
}

/// A GPU or accelerator kind and how many the type has.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Device {
    /// e.g. `t4`, `inferentia`.
    pub name: String,
    /// e.g. `nvidia`, `aws`.
    pub manufacturer: String,
    /// How many.
    pub count: i64,
    /// Memory per device in MiB (GPUs).
    pub memory_mib: i64,
}

/// The node-class settings that change an instance type's capacity and overhead.
#[derive(Clone, Debug)]
pub struct NodeClassSettings {
    /// AMI family (user data, default volumes, max pods policy).
    pub ami_family: AMIFamily,
    /// Kubelet overrides.
    pub kubelet: KubeletConfiguration,
    /// Size in bytes of the volume that backs ephemeral storage.
    pub ephemeral_storage: i64,
    /// `instanceStorePolicy: RAID0`: the node stripes its local NVMe disks into one array for
    /// ephemeral storage, so types with instance store offer that size instead of the volume's.
    pub instance_store_raid0: bool,
    /// Fraction of memory the hypervisor keeps (`VM_MEMORY_OVERHEAD_PERCENT`, default 0.075).
    pub vm_memory_overhead_percent: f64,
    /// ENIs kept out of pod networking (`RESERVED_ENIS`).
    pub reserved_enis: i64,
    /// `spec.networkInterfaces`: the interfaces every node gets (empty: the primary only).
    pub network_interfaces: Vec<NetworkInterface>,
}

impl NodeClassSettings {
    /// Upstream's defaults for an AMI family: default root (or Bottlerocket data) volume size.
    pub fn for_family(ami_family: AMIFamily) -> Self {
        let ephemeral_storage = match ami_family {
            AMIFamily::Windows2019 | AMIFamily::Windows2022 | AMIFamily::Windows2025 => gib(50),
            _ => gib(20),
        };
        Self {
            ami_family,
            kubelet: KubeletConfiguration::default(),
            ephemeral_storage,
            instance_store_raid0: false,
            vm_memory_overhead_percent: 0.075,
            reserved_enis: 0,
            network_interfaces: Vec::new(),
        }
    }

    /// The settings an EC2NodeClass implies: its AMI family, kubelet overrides and the size of
    /// the volume that backs ephemeral storage (the root volume, or Bottlerocket's data volume).
    pub fn for_nodeclass(nodeclass: &crate::apis::EC2NodeClass) -> Self {
        let family = nodeclass.spec.ami_family().unwrap_or(AMIFamily::AL2023);
        let mut settings = Self::for_family(family);
        if let Some(k) = &nodeclass.spec.kubelet {
            settings.kubelet = k.clone();
        }
        settings.instance_store_raid0 = nodeclass.spec.instance_store_policy
            == Some(crate::apis::ec2nodeclass::InstanceStorePolicy::RAID0);
        settings.network_interfaces = nodeclass.spec.network_interfaces.clone();
        let ephemeral_device = match family {
            AMIFamily::Bottlerocket => "/dev/xvdb",
            AMIFamily::Windows2019 | AMIFamily::Windows2022 | AMIFamily::Windows2025 => "/dev/sda1",
            _ => "/dev/xvda",
        };
        let bdms = &nodeclass.spec.block_device_mappings;
        let volume = bdms
            .iter()
            .find(|b| b.root_volume == Some(true))
            .or_else(|| {
                bdms.iter()
                    .find(|b| b.device_name.as_deref() == Some(ephemeral_device))
            });
        if let Some(size) = volume
            .and_then(|b| b.ebs.as_ref())
            .and_then(|e| e.volume_size.as_deref())
            .and_then(|s| resources::parse_quantity(resources::EPHEMERAL_STORAGE, s).ok())
        {
            settings.ephemeral_storage = size;
        }
        settings
    }

    fn is_windows(&self) -> bool {
        matches!(
            self.ami_family,
            AMIFamily::Windows2019 | AMIFamily::Windows2022 | AMIFamily::Windows2025
        )
    }
}

/// Max pods limited by the IPs of the ENIs: `ENIs × (IPs per ENI − 1) + 2`.
pub fn eni_limited_pods(info: &InstanceTypeInfo, reserved_enis: i64) -> i64 {
    let enis = (info.max_enis - reserved_enis).max(0);
    (enis * (info.ipv4_per_eni - 1).max(0) + 2).max(0)
}

/// The pods resource of a node: `maxPods` if set, else ENI-limited (110 on Windows), capped by
/// `podsPerCore × vCPUs` where the AMI family honours it.
pub fn max_pods(info: &InstanceTypeInfo, settings: &NodeClassSettings) -> i64 {
    let mut pods = match settings.kubelet.max_pods {
        Some(n) => i64::from(n),
        None if settings.is_windows() => 110,
        None => eni_limited_pods(info, settings.reserved_enis),
    };
    if let Some(per_core) = settings.kubelet.pods_per_core.filter(|p| *p > 0)
        && settings.ami_family != AMIFamily::Bottlerocket
    {
        pods = pods.min(i64::from(per_core) * info.vcpu);
    }
    pods
}

/// kube-reserved CPU in millicores: 6% of the first core, 1% of the second, 0.5% of cores three
/// and four, 0.25% of the rest.
pub fn kube_reserved_cpu(vcpu: i64) -> i64 {
    let millis = vcpu * 1000;
    let bands: [(i64, i64, f64); 4] = [
        (0, 1000, 0.06),
        (1000, 2000, 0.01),
        (2000, 4000, 0.005),
        (4000, i64::MAX, 0.0025),
    ];
    bands
        .iter()
        .map(|(lo, hi, rate)| {
            let span = (millis.min(*hi) - lo).max(0);
            span as f64 * rate
        })
        .sum::<f64>() as i64
}

/// The ephemeral storage of a node of this type: with `instanceStorePolicy: RAID0` and local
/// NVMe disks, their total size (EC2 reports it in decimal GB, as upstream counts it); otherwise
/// the size of the volume that backs ephemeral storage.
pub fn ephemeral_storage(info: &InstanceTypeInfo, settings: &NodeClassSettings) -> i64 {
    if settings.instance_store_raid0 && info.local_nvme_gb > 0 {
        info.local_nvme_gb.saturating_mul(1_000_000_000)
    } else {
        settings.ephemeral_storage
    }
}

/// Builds the capacity of a node of this type for a node class.
pub fn capacity(info: &InstanceTypeInfo, settings: &NodeClassSettings) -> Resources {
    let overhead_mib = (info.memory_mib as f64 * settings.vm_memory_overhead_percent).ceil() as i64;
    let mut c = Resources {
        cpu: info.vcpu * 1000,
        memory: mib(info.memory_mib - overhead_mib),
        pods: max_pods(info, settings),
        ephemeral_storage: ephemeral_storage(info, settings),
        extended: Vec::new(),
    };
    if let Some(gpu) = &info.gpu {
        let resource = match gpu.manufacturer.as_str() {
            "nvidia" => Some(resources::NVIDIA_GPU),
            "amd" => Some("amd.com/gpu"),
            "habana" => Some("habana.ai/gaudi"),
            _ => None,
        };
        if let Some(resource) = resource {
            c.set(resource, gpu.count);
        }
    }
    if let Some(acc) = &info.accelerator
        && matches!(
            acc.name.as_str(),
            "inferentia" | "inferentia2" | "trainium" | "trainium2"
        )
    {
        c.set("aws.amazon.com/neuron", acc.count);
    }
    if info.branch_enis > 0 && !settings.is_windows() {
        c.set("vpc.amazonaws.com/pod-eni", info.branch_enis);
    }
    // As upstream: a node class that lists its interfaces offers one EFA device per
    // `efa-only` interface it attaches; otherwise the type's maximum.
    let efas = if settings.network_interfaces.is_empty() {
        info.max_efa_interfaces
    } else {
        efa_only_interfaces(&settings.network_interfaces)
    };
    if efas > 0 {
        c.set(resources::EFA, efas);
    }
    c
}

/// How many of `interfaces` are `efa-only`.
fn efa_only_interfaces(interfaces: &[NetworkInterface]) -> i64 {
    let count = interfaces
        .iter()
        .filter(|n| n.interface_type == EFA_ONLY)
        .count();
    i64::try_from(count).unwrap_or(i64::MAX)
}

/// `interfaceType` of an interface that carries only EFA traffic.
pub const EFA_ONLY: &str = "efa-only";

/// Whether a type can carry a node class' `networkInterfaces` (upstream's compatibility check):
/// each interface's network card exists and has room for its device index, and the type offers
/// as many EFA interfaces as the `efa-only` ones asked for. Per-card limits are checked only
/// where the type's cards are known (EC2's data; not the bundled catalog's).
pub fn supports_interfaces(info: &InstanceTypeInfo, interfaces: &[NetworkInterface]) -> bool {
    if interfaces.is_empty() {
        return true;
    }
    let cards_fit = info.network_cards.is_empty()
        || interfaces.iter().all(|n| {
            usize::try_from(n.network_card_index)
                .ok()
                .and_then(|card| info.network_cards.get(card))
                .is_some_and(|max| i64::from(n.device_index) < *max)
        });
    cards_fit && efa_only_interfaces(interfaces) <= info.max_efa_interfaces
}

/// What a node of this type keeps for itself under a node class.
pub fn overhead(
    info: &InstanceTypeInfo,
    settings: &NodeClassSettings,
    capacity: &Resources,
) -> Overhead {
    // AL2/AL2023/Custom size kube-reserved memory by the ENI-limited pod count even when maxPods
    // is set; Bottlerocket and Windows by the pods resource.
    let pods_for_memory = match settings.ami_family {
        AMIFamily::AL2 | AMIFamily::AL2023 | AMIFamily::Custom => {
            eni_limited_pods(info, settings.reserved_enis)
        }
        _ => capacity.pods,
    };
    let mut kube_reserved = Resources {
        cpu: kube_reserved_cpu(info.vcpu),
        memory: mib(11 * pods_for_memory + 255),
        ephemeral_storage: gib(1),
        ..Resources::default()
    };
    apply_overrides(&mut kube_reserved, settings.kubelet.kube_reserved.as_ref());
    let mut system_reserved = Resources::default();
    apply_overrides(
        &mut system_reserved,
        settings.kubelet.system_reserved.as_ref(),
    );
    let mut eviction_threshold = Resources {
        memory: mib(100),
        ephemeral_storage: (capacity.ephemeral_storage as f64 * 0.10).ceil() as i64,
        ..Resources::default()
    };
    if let Some(hard) = &settings.kubelet.eviction_hard {
        for (signal, resource) in [
            ("memory.available", resources::MEMORY),
            ("nodefs.available", resources::EPHEMERAL_STORAGE),
        ] {
            if let Some(value) = hard.get(signal) {
                let total = capacity.get(resource);
                let amount = match value.strip_suffix('%') {
                    Some(p) => p
                        .parse::<f64>()
                        .map(|p| {
                            if p >= 100.0 {
                                0.0
                            } else {
                                total as f64 * p / 100.0
                            }
                        })
                        .map(|v| v.ceil() as i64)
                        .ok(),
                    None => resources::parse_quantity(resource, value).ok(),
                };
                if let Some(amount) = amount {
                    eviction_threshold.set(resource, amount);
                }
            }
        }
    }
    Overhead {
        kube_reserved,
        system_reserved,
        eviction_threshold,
    }
}

fn apply_overrides(target: &mut Resources, overrides: Option<&BTreeMap<String, String>>) {
    for (name, value) in overrides.into_iter().flatten() {
        if name == "pid" {
            continue;
        }
        if let Ok(amount) = resources::parse_quantity(name, value) {
            target.set(name, amount);
        }
    }
}

/// The well-known labels of an instance type, derived from its name and hardware as the AWS
/// provider derives them.
pub fn instance_labels(
    info: &InstanceTypeInfo,
    settings: &NodeClassSettings,
    region: &str,
) -> BTreeMap<&'static str, String> {
    let mut out = BTreeMap::new();
    out.insert(labels::INSTANCE_TYPE, info.name.clone());
    out.insert(labels::ARCH, info.arch.to_string());
    out.insert(
        labels::OS,
        if settings.is_windows() {
            "windows"
        } else {
            "linux"
        }
        .to_string(),
    );
    if let Some(build) = match settings.ami_family {
        AMIFamily::Windows2019 => Some("10.0.17763"),
        AMIFamily::Windows2022 => Some("10.0.20348"),
        AMIFamily::Windows2025 => Some("10.0.26100"),
        _ => None,
    } {
        out.insert(labels::WINDOWS_BUILD, build.to_string());
    }
    out.insert(labels::REGION, region.to_string());
    let (family, size) = info
        .name
        .split_once('.')
        .unwrap_or((info.name.as_str(), ""));
    out.insert(labels::INSTANCE_FAMILY, family.to_string());
    out.insert(labels::INSTANCE_SIZE, size.to_string());
    let category: String = family
        .chars()
        .take_while(|c| c.is_ascii_lowercase())
        .collect();
    let generation: String = family[category.len()..]
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    if !category.is_empty() {
        out.insert(labels::INSTANCE_CATEGORY, category);
    }
    if !generation.is_empty() {
        out.insert(labels::INSTANCE_GENERATION, generation);
    }
    out.insert(labels::INSTANCE_CPU, info.vcpu.to_string());
    if let Some(m) = &info.cpu_manufacturer {
        out.insert(labels::INSTANCE_CPU_MANUFACTURER, m.clone());
    }
    if let Some(ghz) = info.sustained_clock_ghz {
        out.insert(
            labels::INSTANCE_CPU_SUSTAINED_CLOCK_SPEED_MHZ,
            ((ghz * 1000.0).round() as i64).to_string(),
        );
    }
    out.insert(labels::INSTANCE_MEMORY, info.memory_mib.to_string());
    out.insert(labels::INSTANCE_HYPERVISOR, info.hypervisor.clone());
    out.insert(
        labels::INSTANCE_ENCRYPTION_IN_TRANSIT_SUPPORTED,
        info.encryption_in_transit.to_string(),
    );
    if info.network_bandwidth_mbps > 0 {
        out.insert(
            labels::INSTANCE_NETWORK_BANDWIDTH,
            info.network_bandwidth_mbps.to_string(),
        );
    }
    if info.ebs_bandwidth_mbps > 0 {
        out.insert(
            labels::INSTANCE_EBS_BANDWIDTH,
            info.ebs_bandwidth_mbps.to_string(),
        );
    }
    if info.local_nvme_gb > 0 {
        out.insert(labels::INSTANCE_LOCAL_NVME, info.local_nvme_gb.to_string());
    }
    if let Some(gpu) = &info.gpu {
        out.insert(labels::INSTANCE_GPU_NAME, gpu.name.clone());
        out.insert(labels::INSTANCE_GPU_MANUFACTURER, gpu.manufacturer.clone());
        out.insert(labels::INSTANCE_GPU_COUNT, gpu.count.to_string());
        out.insert(labels::INSTANCE_GPU_MEMORY, gpu.memory_mib.to_string());
    }
    if let Some(acc) = &info.accelerator {
        out.insert(labels::INSTANCE_ACCELERATOR_NAME, acc.name.clone());
        out.insert(
            labels::INSTANCE_ACCELERATOR_MANUFACTURER,
            acc.manufacturer.clone(),
        );
        out.insert(labels::INSTANCE_ACCELERATOR_COUNT, acc.count.to_string());
    }
    out.insert(
        labels::INSTANCE_CAPABILITY_FLEX,
        family.ends_with("-flex").to_string(),
    );
    out.insert(labels::INSTANCE_TENANCY, "default".to_string());
    out
}

/// Resolves an instance type for a node class: labels, capacity, overhead, allocatable.
pub fn resolve(
    info: &InstanceTypeInfo,
    settings: &NodeClassSettings,
    region: &str,
    offerings: Vec<Offering>,
) -> InstanceType {
    let capacity = capacity(info, settings);
    let overhead = overhead(info, settings, &capacity);
    let mut allocatable = capacity.clone();
    allocatable.sub(&overhead.total());
    InstanceType {
        name: Arc::from(info.name.as_str()),
        labels: instance_labels(info, settings, region),
        offerings,
        capacity,
        overhead,
        allocatable,
    }
}

/// The labels a node launched on `offering` of `it` for a NodeClaim with `requirements` carries:
/// the requirements' single values, the instance type's labels, zone, zone ID, capacity type
/// and, in a capacity reservation, its ID, type and whether it is interruptible.
pub fn node_labels(
    it: &InstanceType,
    offering: &Offering,
    requirements: &Requirements,
) -> BTreeMap<String, String> {
    let mut out = requirements.labels();
    for (k, v) in &it.labels {
        out.insert((*k).to_string(), v.clone());
    }
    out.insert(labels::ZONE.into(), offering.zone.to_string());
    if let Some(id) = &offering.zone_id {
        out.insert(labels::ZONE_ID.into(), id.to_string());
    }
    out.insert(
        labels::CAPACITY_TYPE.into(),
        offering.capacity_type.label().into(),
    );
    if let Some(r) = &offering.reservation {
        out.insert(labels::CAPACITY_RESERVATION_ID.into(), r.id.to_string());
        out.insert(
            labels::CAPACITY_RESERVATION_TYPE.into(),
            r.reservation_type.to_string(),
        );
        out.insert(
            labels::CAPACITY_RESERVATION_INTERRUPTIBLE.into(),
            r.interruptible_label().into(),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m5_large() -> InstanceTypeInfo {
        InstanceTypeInfo {
            name: "m5.large".into(),
            vcpu: 2,
            memory_mib: 8192,
            arch: "amd64",
            cpu_manufacturer: Some("intel".into()),
            sustained_clock_ghz: Some(3.1),
            hypervisor: "nitro".into(),
            encryption_in_transit: false,
            max_enis: 3,
            ipv4_per_eni: 10,
            branch_enis: 9,
            network_bandwidth_mbps: 750,
            ebs_bandwidth_mbps: 650,
            ..Default::default()
        }
    }

    fn offering(zone: &str, capacity_type: CapacityType, price: f64) -> Offering {
        Offering {
            zone: Arc::from(zone),
            zone_id: Some(Arc::from(format!("use1-{zone}").as_str())),
            capacity_type,
            price,
            available: true,
            reservation: None,
            partition: None,
        }
    }

    fn reservation(id: &str, zone: &str, available: i64) -> ReservedCapacity {
        ReservedCapacity {
            id: id.into(),
            instance_type: "m5.large".into(),
            zone: zone.into(),
            reservation_type: "capacity-block".into(),
            available,
            interruptible: false,
        }
    }

    #[test]
    fn reserved_offerings_undercut_spot_and_carry_their_reservation() {
        let settings = NodeClassSettings::for_family(AMIFamily::AL2023);
        let offerings = vec![
            offering("a", CapacityType::OnDemand, 0.096),
            offering("a", CapacityType::Spot, 0.03),
            offering("b", CapacityType::OnDemand, 0.096),
        ];
        let mut types = vec![resolve(&m5_large(), &settings, "us-east-1", offerings)];
        add_reserved_offerings(
            &mut types,
            &[
                reservation("cr-1", "a", 2),
                reservation("cr-2", "b", 0),
                // The node class cannot launch in zone c, nor the type c5.large.
                reservation("cr-3", "c", 5),
                ReservedCapacity {
                    instance_type: "c5.large".into(),
                    ..reservation("cr-4", "a", 5)
                },
            ],
        );
        let m5 = &types[0];
        assert_eq!(m5.offerings.len(), 5, "{:?}", m5.offerings);
        let cheapest = m5.cheapest_offering(|_| true).expect("an offering");
        assert_eq!(cheapest.capacity_type, CapacityType::Reserved);
        assert_eq!(&*cheapest.zone, "a");
        assert_eq!(cheapest.zone_id.as_deref(), Some("use1-a"));
        assert!(
            cheapest.price > 0.0 && cheapest.price < 1e-6,
            "{}",
            cheapest.price
        );
        let r = cheapest.reservation.as_ref().expect("reservation");
        assert_eq!(
            (&*r.id, &*r.reservation_type, r.available),
            ("cr-1", "capacity-block", 2)
        );
        let full = m5
            .offerings
            .iter()
            .find(|o| o.reservation.as_ref().is_some_and(|r| &*r.id == "cr-2"))
            .expect("the full reservation is listed");
        assert!(!full.available);
    }

    #[test]
    fn m5_large_matches_the_aws_provider() {
        let settings = NodeClassSettings::for_family(AMIFamily::AL2023);
        let it = resolve(&m5_large(), &settings, "us-east-1", vec![]);
        // 3 ENIs × 9 IPs + 2.
        assert_eq!(it.capacity.pods, 29);
        assert_eq!(it.capacity.cpu, 2000);
        // 8192 MiB less ceil(7.5%) = 615 MiB.
        assert_eq!(it.capacity.memory, mib(8192 - 615));
        assert_eq!(it.capacity.get("vpc.amazonaws.com/pod-eni"), 9);
        // 60m + 10m.
        assert_eq!(it.overhead.kube_reserved.cpu, 70);
        // 11 × 29 + 255 = 574 MiB.
        assert_eq!(it.overhead.kube_reserved.memory, mib(574));
        assert_eq!(it.overhead.eviction_threshold.memory, mib(100));
        assert_eq!(it.allocatable.cpu, 1930);
        assert_eq!(it.allocatable.memory, mib(8192 - 615 - 574 - 100));
        assert_eq!(it.allocatable.ephemeral_storage, gib(20) - gib(1) - gib(2));
        assert_eq!(it.labels[labels::INSTANCE_CATEGORY], "m");
        assert_eq!(it.labels[labels::INSTANCE_GENERATION], "5");
        assert_eq!(it.labels[labels::INSTANCE_FAMILY], "m5");
        assert_eq!(it.labels[labels::INSTANCE_SIZE], "large");
        assert_eq!(
            it.labels[labels::INSTANCE_CPU_SUSTAINED_CLOCK_SPEED_MHZ],
            "3100"
        );
        assert_eq!(it.labels[labels::OS], "linux");
    }

    #[test]
    fn raid0_offers_the_instance_store_as_ephemeral_storage() {
        let mut settings = NodeClassSettings::for_family(AMIFamily::AL2023);
        let m5d = InstanceTypeInfo {
            name: "m5d.large".into(),
            local_nvme_gb: 75,
            ..m5_large()
        };
        let volume = resolve(&m5d, &settings, "us-east-1", vec![]);
        assert_eq!(volume.capacity.ephemeral_storage, gib(20));
        settings.instance_store_raid0 = true;
        let raid = resolve(&m5d, &settings, "us-east-1", vec![]);
        // 75 GB as EC2 counts it (decimal), less 1Gi kube-reserved and the 10% eviction threshold.
        assert_eq!(raid.capacity.ephemeral_storage, 75_000_000_000);
        assert_eq!(
            raid.allocatable.ephemeral_storage,
            75_000_000_000 - gib(1) - 7_500_000_000
        );
        let no_store = resolve(&m5_large(), &settings, "us-east-1", vec![]);
        assert_eq!(
            no_store.capacity.ephemeral_storage,
            gib(20),
            "types without instance store keep the volume's size"
        );
    }

    #[test]
    fn kube_reserved_cpu_bands() {
        assert_eq!(kube_reserved_cpu(1), 60);
        assert_eq!(kube_reserved_cpu(2), 70);
        assert_eq!(kube_reserved_cpu(4), 80);
        assert_eq!(kube_reserved_cpu(8), 90);
        assert_eq!(kube_reserved_cpu(96), 310);
    }

    #[test]
    fn kubelet_settings_change_pods_and_overhead() {
        let mut settings = NodeClassSettings::for_family(AMIFamily::AL2023);
        settings.kubelet.max_pods = Some(110);
        settings.kubelet.kube_reserved = Some([("cpu".to_string(), "200m".to_string())].into());
        settings.kubelet.eviction_hard =
            Some([("memory.available".to_string(), "5%".to_string())].into());
        let it = resolve(&m5_large(), &settings, "us-east-1", vec![]);
        assert_eq!(it.capacity.pods, 110);
        assert_eq!(it.overhead.kube_reserved.cpu, 200);
        // Memory reservation still follows the ENI-limited count on AL2023.
        assert_eq!(it.overhead.kube_reserved.memory, mib(574));
        assert_eq!(
            it.overhead.eviction_threshold.memory,
            (it.capacity.memory as f64 * 0.05).ceil() as i64
        );

        settings.kubelet.pods_per_core = Some(4);
        assert_eq!(max_pods(&m5_large(), &settings), 8);
        settings.ami_family = AMIFamily::Bottlerocket;
        assert_eq!(
            max_pods(&m5_large(), &settings),
            110,
            "Bottlerocket ignores podsPerCore"
        );
    }

    #[test]
    fn windows_nodes_have_110_pods_and_a_build_label() {
        let settings = NodeClassSettings::for_family(AMIFamily::Windows2022);
        let it = resolve(&m5_large(), &settings, "us-east-1", vec![]);
        assert_eq!(it.capacity.pods, 110);
        assert_eq!(it.labels[labels::OS], "windows");
        assert_eq!(it.labels[labels::WINDOWS_BUILD], "10.0.20348");
        assert_eq!(it.capacity.ephemeral_storage, gib(50));
    }

    #[test]
    fn gpus_become_extended_resources() {
        let mut info = m5_large();
        info.name = "g4dn.xlarge".into();
        info.gpu = Some(Device {
            name: "t4".into(),
            manufacturer: "nvidia".into(),
            count: 1,
            memory_mib: 16384,
        });
        let it = resolve(
            &info,
            &NodeClassSettings::for_family(AMIFamily::AL2023),
            "us-east-1",
            vec![],
        );
        assert_eq!(it.allocatable.get(resources::NVIDIA_GPU), 1);
        assert_eq!(it.labels[labels::INSTANCE_GPU_NAME], "t4");
        assert_eq!(it.labels[labels::INSTANCE_GPU_COUNT], "1");
    }

    fn interfaces(list: &[(i32, i32, &str)]) -> Vec<NetworkInterface> {
        list.iter()
            .map(|(card, device, kind)| NetworkInterface {
                network_card_index: *card,
                device_index: *device,
                interface_type: (*kind).to_string(),
            })
            .collect()
    }

    #[test]
    fn listed_interfaces_set_the_efa_devices_and_need_room_on_the_cards() {
        let p4d = InstanceTypeInfo {
            name: "p4d.24xlarge".into(),
            max_efa_interfaces: 4,
            network_cards: vec![15, 15, 15, 15],
            ..m5_large()
        };
        let two_efas = interfaces(&[(0, 0, "interface"), (0, 1, EFA_ONLY), (1, 0, EFA_ONLY)]);
        assert!(supports_interfaces(&p4d, &two_efas));
        let mut settings = NodeClassSettings::for_family(AMIFamily::AL2023);
        assert_eq!(
            capacity(&p4d, &settings).get(resources::EFA),
            4,
            "no list: the type's maximum"
        );
        settings.network_interfaces = two_efas.clone();
        assert_eq!(
            capacity(&p4d, &settings).get(resources::EFA),
            2,
            "one device per efa-only interface"
        );
        settings.network_interfaces = interfaces(&[(0, 0, "interface")]);
        assert_eq!(capacity(&p4d, &settings).get(resources::EFA), 0);

        let m5 = InstanceTypeInfo {
            network_cards: vec![3],
            ..m5_large()
        };
        assert!(supports_interfaces(&m5, &[]));
        assert!(supports_interfaces(
            &m5,
            &interfaces(&[(0, 0, "interface"), (0, 2, "interface")])
        ));
        assert!(
            !supports_interfaces(&m5, &interfaces(&[(0, 3, "interface")])),
            "device 3 of 3"
        );
        assert!(
            !supports_interfaces(&m5, &interfaces(&[(1, 0, "interface")])),
            "no second card"
        );
        assert!(
            !supports_interfaces(&m5, &interfaces(&[(0, 1, EFA_ONLY)])),
            "no EFA"
        );
        let two_cards = InstanceTypeInfo {
            max_efa_interfaces: 1,
            network_cards: vec![15, 15],
            ..m5_large()
        };
        assert!(
            !supports_interfaces(&two_cards, &two_efas),
            "two EFAs on a one-EFA type"
        );
        // Cards unknown (the bundled catalog): only the EFA count is checked.
        let unknown = InstanceTypeInfo {
            max_efa_interfaces: 4,
            ..m5_large()
        };
        assert!(supports_interfaces(&unknown, &two_efas));
    }
}
