//! Instance types as EC2 describes them (DescribeInstanceTypes, DescribeInstanceTypeOfferings,
//! DescribeAvailabilityZones), turned into the scheduler's [`InstanceType`]s for a node class.
//!
//! Hardware facts become an [`InstanceTypeInfo`], the same struct the bundled catalog fills, and
//! [`instance_type::resolve`] adds labels, capacity and overhead exactly as it does for
//! `simulate` — so a real cluster and a simulation of it plan with the same numbers. What the EC2
//! API does not report (network bandwidth, branch interfaces) comes from the bundled catalog.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use aws_sdk_ec2::types::{
    ArchitectureType, EbsOptimizedSupport, EphemeralNvmeSupport, LocationType, UsageClassType,
};
use chrono::{DateTime, Utc};

use crate::catalog::Catalog;
use crate::cloudprovider::CloudError;
use crate::scheduling::instance_type::{
    self, CapacityType, Device, InstanceType, InstanceTypeInfo, NodeClassSettings, Offering,
};

use super::pricing::Prices;
use super::sdk_error;
use super::tags::filter;
use super::unavailable::UnavailableOfferings;

/// How often the instance-type catalogue and prices are refreshed (upstream: 12 hours).
pub const REFRESH_INTERVAL: chrono::Duration = chrono::Duration::hours(12);

/// One instance type EC2 sells in the region.
#[derive(Clone, Debug, PartialEq)]
pub struct TypeEntry {
    /// Hardware facts.
    pub info: InstanceTypeInfo,
    /// Whether it is sold on demand.
    pub on_demand: bool,
    /// Whether it is sold as spot.
    pub spot: bool,
    /// Whether EC2 lists `nested-virtualization` among its processor's supported features: a
    /// class with `cpuOptions.nestedVirtualization: enabled` offers only such types.
    pub nested_virtualization: bool,
    /// The placement group strategies (`cluster`, `partition`, `spread`) EC2 lists for it
    /// (`PlacementGroupInfo.SupportedStrategies`; burstable types lack `cluster`). `None` when
    /// EC2 does not say, which restricts nothing.
    pub placement_strategies: Option<Vec<String>>,
}

impl TypeEntry {
    /// Whether EC2 can place it in a placement group of `strategy` (any type without a group).
    pub fn placeable(&self, strategy: Option<&str>) -> bool {
        match (strategy, &self.placement_strategies) {
            (Some(strategy), Some(supported)) => supported.iter().any(|s| s == strategy),
            _ => true,
        }
    }
}

/// The processor feature DescribeInstanceTypes reports for types that can run a hypervisor of
/// their own (not a variant of the pinned SDK's enum, so compared as text).
const NESTED_VIRTUALIZATION_FEATURE: &str = "nested-virtualization";

/// Everything EC2 says about the region's instance types, as of `fetched_at`.
#[derive(Clone, Debug, Default)]
pub struct Ec2Catalogue {
    /// Instance types.
    pub types: Vec<TypeEntry>,
    /// The zones each instance type is offered in.
    pub zones: HashMap<String, BTreeSet<String>>,
    /// Zone name → zone ID.
    pub zone_ids: HashMap<String, String>,
    /// When EC2 was asked.
    pub fetched_at: Option<DateTime<Utc>>,
}

/// Turns one DescribeInstanceTypes entry into hardware facts; `None` for architectures
/// Kubernetes nodes here do not run (32-bit, Mac).
pub fn info_from_ec2(
    t: &aws_sdk_ec2::types::InstanceTypeInfo,
    fallback: Option<&InstanceTypeInfo>,
) -> Option<TypeEntry> {
    let name = t.instance_type()?.as_str().to_string();
    let processor = t.processor_info();
    let archs = processor
        .map(|p| p.supported_architectures())
        .unwrap_or_default();
    let arch = if archs.contains(&ArchitectureType::X8664) {
        "amd64"
    } else if archs.contains(&ArchitectureType::Arm64) {
        "arm64"
    } else {
        return None;
    };
    let network = t.network_info();
    let default_card = network.and_then(|n| {
        let index = n.default_network_card_index().unwrap_or(0);
        n.network_cards()
            .iter()
            .find(|c| c.network_card_index() == Some(index))
            .and_then(|c| c.maximum_network_interfaces())
    });
    let max_enis = default_card
        .or_else(|| network.and_then(|n| n.maximum_network_interfaces()))
        .unwrap_or(0);
    // Per card, by index (a card EC2 lists out of order or leaves a gap before has 0).
    let mut network_cards: Vec<i64> = Vec::new();
    for card in network.map(|n| n.network_cards()).unwrap_or_default() {
        let (Some(index), Some(max)) = (
            card.network_card_index()
                .and_then(|i| usize::try_from(i).ok()),
            card.maximum_network_interfaces(),
        ) else {
            continue;
        };
        if index < 64 {
            if network_cards.len() <= index {
                network_cards.resize(index + 1, 0);
            }
            network_cards[index] = i64::from(max);
        }
    }
    let single_gpu = t.gpu_info().and_then(|g| match g.gpus() {
        [d] => Some(Device {
            name: d.name().unwrap_or_default().to_lowercase(),
            manufacturer: d.manufacturer().unwrap_or_default().to_lowercase(),
            count: i64::from(d.count().unwrap_or(0)),
            memory_mib: i64::from(d.memory_info().and_then(|m| m.size_in_mib()).unwrap_or(0)),
        }),
        _ => None,
    });
    let neuron = t.neuron_info().and_then(|n| match n.neuron_devices() {
        [d] => Some(Device {
            name: d.name().unwrap_or_default().to_lowercase(),
            manufacturer: "aws".into(),
            count: i64::from(d.count().unwrap_or(0)),
            memory_mib: i64::from(d.memory_info().and_then(|m| m.size_in_mib()).unwrap_or(0)),
        }),
        _ => None,
    });
    let inference = t
        .inference_accelerator_info()
        .and_then(|i| match i.accelerators() {
            [d] => Some(Device {
                name: d.name().unwrap_or_default().to_lowercase(),
                manufacturer: d.manufacturer().unwrap_or_default().to_lowercase(),
                count: i64::from(d.count().unwrap_or(0)),
                memory_mib: 0,
            }),
            _ => None,
        });
    let local_nvme_gb = t
        .instance_storage_info()
        .filter(|s| {
            matches!(
                s.nvme_support(),
                Some(EphemeralNvmeSupport::Required | EphemeralNvmeSupport::Supported)
            )
        })
        .and_then(|s| s.total_size_in_gb())
        .unwrap_or(0);
    let ebs_bandwidth_mbps = t
        .ebs_info()
        .filter(|e| e.ebs_optimized_support() == Some(&EbsOptimizedSupport::Default))
        .and_then(|e| e.ebs_optimized_info())
        .and_then(|i| i.maximum_bandwidth_in_mbps())
        .map(i64::from)
        .unwrap_or(0);
    let usage = t.supported_usage_classes();
    Some(TypeEntry {
        info: InstanceTypeInfo {
            name,
            vcpu: i64::from(t.v_cpu_info().and_then(|v| v.default_v_cpus()).unwrap_or(0)),
            memory_mib: t.memory_info().and_then(|m| m.size_in_mib()).unwrap_or(0),
            arch,
            cpu_manufacturer: processor
                .and_then(|p| p.manufacturer())
                .map(|m| m.to_lowercase()),
            sustained_clock_ghz: processor.and_then(|p| p.sustained_clock_speed_in_ghz()),
            hypervisor: if t.bare_metal() == Some(true) {
                String::new()
            } else {
                t.hypervisor()
                    .map(|h| h.as_str().to_string())
                    .unwrap_or_default()
            },
            encryption_in_transit: network
                .and_then(|n| n.encryption_in_transit_supported())
                .unwrap_or(false),
            gpu: single_gpu,
            accelerator: neuron.or(inference),
            local_nvme_gb,
            ebs_bandwidth_mbps,
            network_bandwidth_mbps: fallback.map(|f| f.network_bandwidth_mbps).unwrap_or(0),
            max_enis: i64::from(max_enis),
            ipv4_per_eni: i64::from(
                network
                    .and_then(|n| n.ipv4_addresses_per_interface())
                    .unwrap_or(0),
            ),
            branch_enis: fallback.map(|f| f.branch_enis).unwrap_or(0),
            max_efa_interfaces: i64::from(
                network
                    .and_then(|n| n.efa_info())
                    .and_then(|e| e.maximum_efa_interfaces())
                    .unwrap_or(0),
            ),
            network_cards,
        },
        on_demand: usage.contains(&UsageClassType::OnDemand),
        spot: usage.contains(&UsageClassType::Spot),
        nested_virtualization: processor.is_some_and(|p| {
            p.supported_features()
                .iter()
                .any(|f| f.as_str() == NESTED_VIRTUALIZATION_FEATURE)
        }),
        placement_strategies: t.placement_group_info().map(|p| {
            p.supported_strategies()
                .iter()
                .map(|s| s.as_str().to_string())
                .collect()
        }),
    })
}

/// Asks EC2 for the region's instance types, their zones and the zone IDs.
pub async fn describe(
    ec2: &aws_sdk_ec2::Client,
    fallback: &Catalog,
    now: DateTime<Utc>,
) -> Result<Ec2Catalogue, CloudError> {
    let known: HashMap<&str, &InstanceTypeInfo> =
        fallback.infos().map(|i| (i.name.as_str(), i)).collect();
    let mut types = Vec::new();
    let mut pages = ec2
        .describe_instance_types()
        .filters(filter("supported-virtualization-type", ["hvm"]))
        .filters(filter(
            "processor-info.supported-architecture",
            ["x86_64", "arm64"],
        ))
        .max_results(100)
        .into_paginator()
        .send();
    while let Some(page) = pages.next().await {
        let page = page.map_err(|e| sdk_error("ec2:DescribeInstanceTypes", e))?;
        for t in page.instance_types() {
            let name = t.instance_type().map(|n| n.as_str()).unwrap_or_default();
            if let Some(entry) = info_from_ec2(t, known.get(name).copied()) {
                types.push(entry);
            }
        }
    }
    types.sort_by(|a, b| a.info.name.cmp(&b.info.name));
    let mut zones: HashMap<String, BTreeSet<String>> = HashMap::new();
    let mut pages = ec2
        .describe_instance_type_offerings()
        .location_type(LocationType::AvailabilityZone)
        .max_results(1000)
        .into_paginator()
        .send();
    while let Some(page) = pages.next().await {
        let page = page.map_err(|e| sdk_error("ec2:DescribeInstanceTypeOfferings", e))?;
        for o in page.instance_type_offerings() {
            if let (Some(t), Some(zone)) = (o.instance_type(), o.location()) {
                zones
                    .entry(t.as_str().to_string())
                    .or_default()
                    .insert(zone.to_string());
            }
        }
    }
    let azs = ec2
        .describe_availability_zones()
        .send()
        .await
        .map_err(|e| sdk_error("ec2:DescribeAvailabilityZones", e))?;
    let zone_ids = azs
        .availability_zones()
        .iter()
        .filter_map(|z| Some((z.zone_name()?.to_string(), z.zone_id()?.to_string())))
        .collect();
    Ok(Ec2Catalogue {
        types,
        zones,
        zone_ids,
        fetched_at: Some(now),
    })
}

/// The instance types a node class can launch: every type offered in one of `zones` (the zones
/// of the node class' subnets; all zones when empty), with an on-demand and a spot offering per
/// zone where EC2 sells them and a price is known, all available ([`mark_unavailable`] applies
/// the unavailable-offerings cache on every read, so entries expire on time). With
/// `nested_virtualization` (the class' `cpuOptions.nestedVirtualization: enabled`) only the types
/// that support it, and with `placement_strategy` (that of the class' placement group) only the
/// types EC2 can place in such a group, as upstream's node class compatibility check.
pub fn build(
    catalogue: &Ec2Catalogue,
    prices: &Prices,
    zones: &[String],
    settings: &NodeClassSettings,
    nested_virtualization: bool,
    placement_strategy: Option<&str>,
    region: &str,
) -> Vec<InstanceType> {
    let zone_ids: HashMap<&str, Arc<str>> = catalogue
        .zone_ids
        .iter()
        .map(|(z, id)| (z.as_str(), Arc::from(id.as_str())))
        .collect();
    let mut out = Vec::with_capacity(catalogue.types.len());
    for entry in &catalogue.types {
        if !instance_type::supports_interfaces(&entry.info, &settings.network_interfaces)
            || (nested_virtualization && !entry.nested_virtualization)
            || !entry.placeable(placement_strategy)
        {
            continue;
        }
        let name = entry.info.name.as_str();
        let Some(type_zones) = catalogue.zones.get(name) else {
            continue;
        };
        let on_demand_price = prices.on_demand.get(name).copied();
        let mut offerings = Vec::new();
        for zone in type_zones
            .iter()
            .filter(|z| zones.is_empty() || zones.iter().any(|s| s == *z))
        {
            let zone_arc: Arc<str> = Arc::from(zone.as_str());
            let zone_id = zone_ids.get(zone.as_str()).cloned();
            let mut offer = |capacity_type: CapacityType, price: f64| {
                offerings.push(Offering {
                    zone: zone_arc.clone(),
                    zone_id: zone_id.clone(),
                    capacity_type,
                    price,
                    available: true,
                    reservation: None,
                    partition: None,
                });
            };
            if entry.on_demand
                && let Some(price) = on_demand_price
            {
                offer(CapacityType::OnDemand, price);
            }
            if entry.spot
                && let Some(price) = prices.spot_price(name, zone)
            {
                offer(CapacityType::Spot, price);
            }
        }
        if offerings.is_empty() {
            continue;
        }
        out.push(instance_type::resolve(
            &entry.info,
            settings,
            region,
            offerings,
        ));
    }
    out
}

/// `types` with the offerings in the unavailable cache marked unavailable (the same list when
/// none are); a class launching into placement group `group_id` also skips the pools that
/// group (or the offering's partition of it) could not fill.
pub fn mark_unavailable(
    types: Arc<Vec<InstanceType>>,
    unavailable: &UnavailableOfferings,
    group_id: Option<&str>,
) -> Arc<Vec<InstanceType>> {
    let blocked = |name: &str, o: &Offering| {
        unavailable.is_unavailable_in(
            name,
            &o.zone,
            o.capacity_type,
            group_id,
            o.partition.as_deref(),
        )
    };
    if !types
        .iter()
        .any(|it| it.offerings.iter().any(|o| blocked(&it.name, o)))
    {
        return types;
    }
    let mut marked = (*types).clone();
    for it in &mut marked {
        let name = it.name.clone();
        for o in &mut it.offerings {
            if blocked(&name, o) {
                o.available = false;
            }
        }
    }
    Arc::new(marked)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apis::ec2nodeclass::AMIFamily;
    use crate::apis::labels;
    use crate::clock::FakeClock;
    use aws_sdk_ec2::types::{
        GpuDeviceInfo, GpuDeviceMemoryInfo, GpuInfo, InstanceTypeHypervisor, MemoryInfo,
        NetworkInfo, PlacementGroupInfo, PlacementGroupStrategy, ProcessorInfo,
        SupportedAdditionalProcessorFeature, VCpuInfo,
    };

    fn g4dn() -> aws_sdk_ec2::types::InstanceTypeInfo {
        aws_sdk_ec2::types::InstanceTypeInfo::builder()
            .instance_type(aws_sdk_ec2::types::InstanceType::G4dnXlarge)
            .hypervisor(InstanceTypeHypervisor::Nitro)
            .supported_usage_classes(UsageClassType::OnDemand)
            .supported_usage_classes(UsageClassType::Spot)
            .processor_info(
                ProcessorInfo::builder()
                    .supported_architectures(ArchitectureType::X8664)
                    .manufacturer("Intel")
                    .sustained_clock_speed_in_ghz(2.5)
                    .build(),
            )
            .v_cpu_info(VCpuInfo::builder().default_v_cpus(4).build())
            .memory_info(MemoryInfo::builder().size_in_mib(16384).build())
            .network_info(
                NetworkInfo::builder()
                    .maximum_network_interfaces(3)
                    .ipv4_addresses_per_interface(10)
                    .build(),
            )
            .gpu_info(
                GpuInfo::builder()
                    .gpus(
                        GpuDeviceInfo::builder()
                            .name("T4")
                            .manufacturer("NVIDIA")
                            .count(1)
                            .memory_info(GpuDeviceMemoryInfo::builder().size_in_mib(16384).build())
                            .build(),
                    )
                    .build(),
            )
            .build()
    }

    #[test]
    fn ec2_descriptions_become_labelled_instance_types_with_priced_offerings() {
        let entry = info_from_ec2(&g4dn(), None).expect("entry");
        assert_eq!(entry.info.arch, "amd64");
        assert_eq!(entry.info.max_enis, 3);
        assert_eq!(entry.info.gpu.as_ref().map(|g| g.name.as_str()), Some("t4"));
        let catalogue = Ec2Catalogue {
            types: vec![entry],
            zones: HashMap::from([(
                "g4dn.xlarge".to_string(),
                BTreeSet::from(["us-east-1a".to_string(), "us-east-1b".to_string()]),
            )]),
            zone_ids: HashMap::from([("us-east-1a".to_string(), "use1-az1".to_string())]),
            fetched_at: None,
        };
        let prices = Prices {
            on_demand: HashMap::from([("g4dn.xlarge".to_string(), 0.526)]),
            spot: HashMap::from([(("g4dn.xlarge".to_string(), "us-east-1a".to_string()), 0.2)]),
            spot_fetched: true,
        };
        let clock = Arc::new(FakeClock::new(Utc::now()));
        let unavailable = UnavailableOfferings::new(clock);
        unavailable.mark(super::super::unavailable::OfferingKey {
            instance_type: "g4dn.xlarge".into(),
            zone: "us-east-1a".into(),
            capacity_type: CapacityType::OnDemand,
        });
        let settings = NodeClassSettings::for_family(AMIFamily::AL2023);
        let types = mark_unavailable(
            Arc::new(build(
                &catalogue,
                &prices,
                &["us-east-1a".to_string()],
                &settings,
                false,
                None,
                "us-east-1",
            )),
            &unavailable,
            None,
        );
        assert_eq!(types.len(), 1);
        let it = &types[0];
        assert_eq!(it.labels[labels::INSTANCE_GPU_MANUFACTURER], "nvidia");
        assert_eq!(it.labels[labels::INSTANCE_CPU], "4");
        assert_eq!(it.capacity.pods, 29);
        assert_eq!(it.capacity.get("nvidia.com/gpu"), 1);
        let shown: Vec<(CapacityType, f64, bool, Option<&str>)> = it
            .offerings
            .iter()
            .map(|o| (o.capacity_type, o.price, o.available, o.zone_id.as_deref()))
            .collect();
        assert_eq!(
            shown,
            [
                (CapacityType::OnDemand, 0.526, false, Some("use1-az1")),
                (CapacityType::Spot, 0.2, true, Some("use1-az1")),
            ]
        );
        let all_zones = build(
            &catalogue,
            &prices,
            &[],
            &settings,
            false,
            None,
            "us-east-1",
        );
        let b_offerings: Vec<CapacityType> = all_zones[0]
            .offerings
            .iter()
            .filter(|o| &*o.zone == "us-east-1b")
            .map(|o| o.capacity_type)
            .collect();
        assert_eq!(
            b_offerings,
            [CapacityType::OnDemand],
            "no spot price known for us-east-1b after a spot refresh: no spot offering"
        );
    }

    #[test]
    fn nested_virtualization_offers_only_the_types_ec2_says_support_it() {
        let plain = info_from_ec2(&g4dn(), None).expect("entry");
        assert!(!plain.nested_virtualization);
        let mut described = g4dn();
        described.processor_info = Some(
            ProcessorInfo::builder()
                .supported_architectures(ArchitectureType::X8664)
                .supported_features(SupportedAdditionalProcessorFeature::from(
                    "nested-virtualization",
                ))
                .build(),
        );
        described.instance_type = Some(aws_sdk_ec2::types::InstanceType::from("c8i.large"));
        let capable = info_from_ec2(&described, None).expect("entry");
        assert!(capable.nested_virtualization);
        let zones = BTreeSet::from(["us-east-1a".to_string()]);
        let catalogue = Ec2Catalogue {
            types: vec![plain, capable],
            zones: HashMap::from([
                ("g4dn.xlarge".to_string(), zones.clone()),
                ("c8i.large".to_string(), zones),
            ]),
            zone_ids: HashMap::new(),
            fetched_at: None,
        };
        let prices = Prices {
            on_demand: HashMap::from([
                ("g4dn.xlarge".to_string(), 0.526),
                ("c8i.large".to_string(), 0.09),
            ]),
            spot: HashMap::new(),
            spot_fetched: true,
        };
        let settings = NodeClassSettings::for_family(AMIFamily::AL2023);
        let names = |nested: bool| -> Vec<String> {
            build(
                &catalogue,
                &prices,
                &[],
                &settings,
                nested,
                None,
                "us-east-1",
            )
            .iter()
            .map(|it| it.name.to_string())
            .collect()
        };
        assert_eq!(names(false), ["g4dn.xlarge", "c8i.large"]);
        assert_eq!(names(true), ["c8i.large"]);
    }

    #[test]
    fn a_cluster_placement_group_offers_only_the_types_ec2_can_place_in_one() {
        let described = |name: &str, strategies: Option<&[PlacementGroupStrategy]>| {
            let mut t = g4dn();
            t.instance_type = Some(aws_sdk_ec2::types::InstanceType::from(name));
            t.placement_group_info = strategies.map(|s| {
                PlacementGroupInfo::builder()
                    .set_supported_strategies(Some(s.to_vec()))
                    .build()
            });
            info_from_ec2(&t, None).expect("entry")
        };
        use PlacementGroupStrategy as S;
        let types = vec![
            described("m5.large", Some(&[S::Cluster, S::Partition, S::Spread])),
            // Burstable: EC2 lists no `cluster` for the t families.
            described("t3.medium", Some(&[S::Partition, S::Spread])),
            described("x9.unknown", None),
        ];
        assert_eq!(
            types[1].placement_strategies.as_deref(),
            Some(&["partition".to_string(), "spread".to_string()][..])
        );
        let zones = BTreeSet::from(["us-east-1a".to_string()]);
        let catalogue = Ec2Catalogue {
            zones: types
                .iter()
                .map(|t| (t.info.name.clone(), zones.clone()))
                .collect(),
            types,
            zone_ids: HashMap::new(),
            fetched_at: None,
        };
        let prices = Prices {
            on_demand: catalogue
                .types
                .iter()
                .map(|t| (t.info.name.clone(), 0.1))
                .collect(),
            spot: HashMap::new(),
            spot_fetched: true,
        };
        let settings = NodeClassSettings::for_family(AMIFamily::AL2023);
        let names = |strategy: Option<&str>| -> Vec<String> {
            build(
                &catalogue,
                &prices,
                &[],
                &settings,
                false,
                strategy,
                "us-east-1",
            )
            .iter()
            .map(|it| it.name.to_string())
            .collect()
        };
        assert_eq!(names(None), ["m5.large", "t3.medium", "x9.unknown"]);
        assert_eq!(
            names(Some("cluster")),
            ["m5.large", "x9.unknown"],
            "no burstable type in a cluster group; a type EC2 says nothing about stays"
        );
        assert_eq!(
            names(Some("spread")),
            ["m5.large", "t3.medium", "x9.unknown"]
        );
    }
}
