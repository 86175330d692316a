//! Launch templates: everything about an instance except its type and subnet, which CreateFleet
//! varies per override.
//!
//! A template is named after a hash of its whole content (`karpenter.k8s.aws/<hash>`), so equal
//! launch needs share one template, a changed node class (hash, AMI, user data, security groups,
//! instance profile, ...) gets a new one, and a template found by name is always the right one —
//! nothing has to be remembered across restarts.

use std::collections::BTreeMap;

use aws_sdk_ec2::types::{
    CapacityReservationPreference, CapacityReservationTarget,
    LaunchTemplateBlockDeviceMappingRequest, LaunchTemplateCapacityReservationSpecificationRequest,
    LaunchTemplateCpuOptionsRequest, LaunchTemplateEbsBlockDeviceRequest,
    LaunchTemplateHttpTokensState, LaunchTemplateIamInstanceProfileSpecificationRequest,
    LaunchTemplateInstanceMarketOptionsRequest, LaunchTemplateInstanceMetadataEndpointState,
    LaunchTemplateInstanceMetadataOptionsRequest, LaunchTemplateInstanceMetadataProtocolIpv6,
    LaunchTemplateInstanceNetworkInterfaceSpecificationRequest, LaunchTemplatePlacementRequest,
    LaunchTemplatesMonitoringRequest, MarketType, NestedVirtualizationSpecification,
    RequestLaunchTemplateData, ResourceType, TagSpecification, VolumeType,
};
use serde::Serialize;

use crate::apis::ec2nodeclass::{
    AMIFamily, BlockDevice, BlockDeviceMapping, MetadataOptions, NetworkInterface,
};
use crate::apis::hash::fnv1a;
use crate::apis::labels;
use crate::cloudprovider::CloudError;
use crate::scheduling::instance_type::EFA_ONLY;
use crate::scheduling::resources::{self, gib};

use super::sdk_error;
use super::tags::{filter, to_ec2};

/// Prefix of the templates Karpenter manages.
pub const NAME_PREFIX: &str = "karpenter.k8s.aws/";

/// Everything a launch template holds.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LaunchTemplateSpec {
    /// Image to boot.
    pub image_id: String,
    /// User data, base64-encoded.
    pub user_data: String,
    /// Volumes.
    pub block_devices: Vec<BlockDeviceMapping>,
    /// Instance metadata service settings.
    pub metadata: MetadataOptions,
    /// Instance profile name.
    pub instance_profile: String,
    /// Security group IDs.
    pub security_groups: Vec<String>,
    /// 1-minute CloudWatch monitoring.
    pub detailed_monitoring: bool,
    /// Public IP on the primary interface, when the node class says.
    pub associate_public_ip: Option<bool>,
    /// An IPv6 cluster: the primary interface gets a primary IPv6 address, as upstream's.
    pub ipv6: bool,
    /// `spec.ipPrefixCount`: prefixes assigned to the primary interface (IPv4 /28s, or IPv6 /80s
    /// in an IPv6 cluster).
    pub ip_prefix_count: Option<i32>,
    /// The placement group (ID) instances launch into (`Placement.GroupId`); left out of the
    /// name's hash when unset, so templates without one keep their names.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub placement_group: Option<String>,
    /// The partition of a partition placement group the NodeClaim requires
    /// (`Placement.PartitionNumber`; unset, EC2 spreads instances over the partitions); left out
    /// of the name's hash when unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub placement_partition: Option<i32>,
    /// `spec.networkInterfaces`: every interface the instance gets (empty: the primary only);
    /// left out of the name's hash when empty.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub network_interfaces: Vec<NetworkInterface>,
    /// Without `network_interfaces`: EFA interfaces to attach, one per network card (a NodeClaim
    /// that asks for `vpc.amazonaws.com/efa` gets as many as its type offers, as upstream); left
    /// out of the name's hash when 0.
    #[serde(skip_serializing_if = "is_zero")]
    pub efa_interfaces: i32,
    /// `spec.cpuOptions.nestedVirtualization` (`enabled` or `disabled`), sent as the template's
    /// `CpuOptions.NestedVirtualization` as upstream does (no `CpuOptions` when unset); left out
    /// of the name's hash when unset, so templates without it keep their names.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nested_virtualization: Option<String>,
    /// Tags of the template itself.
    pub tags: BTreeMap<String, String>,
    /// Which capacity reservations instances of the template may run in.
    pub reservations: ReservationTargeting,
}

/// How a template's instances relate to capacity reservations (its
/// `CapacityReservationSpecification`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum ReservationTargeting {
    /// EC2's default (`open`): instances may run in any matching open reservation. With the
    /// `ReservedCapacity` gate off nothing is said, as before reservations were supported.
    Open,
    /// Spot and on-demand launches with the gate on stay out of reservations (`none`), as
    /// upstream's do: reserved capacity is used only where it was planned.
    Avoid,
    /// A reserved launch: only this reservation (`capacity-reservations-only` with it as the
    /// target); a capacity block also needs the `capacity-block` market type, an interruptible
    /// reservation the `interruptible-capacity-reservation` one.
    Target {
        /// Reservation ID.
        id: String,
        /// Whether it is a capacity block.
        capacity_block: bool,
        /// Whether it is an interruptible reservation; left out of the name's hash when not,
        /// so the templates of other reservations keep their names.
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        interruptible: bool,
    },
}

impl LaunchTemplateSpec {
    /// `karpenter.k8s.aws/<hash of the content>`.
    pub fn name(&self) -> String {
        let json = serde_json::to_vec(self).unwrap_or_default();
        format!("{NAME_PREFIX}{:016x}", fnv1a(&json))
    }
}

/// The volumes an AMI family gets when the node class names none: a 20Gi encrypted gp3 root
/// volume; Bottlerocket a 4Gi OS volume plus a 20Gi data volume; Windows a 50Gi root volume;
/// Custom none (the AMI's own mappings apply).
pub fn default_block_devices(family: AMIFamily) -> Vec<BlockDeviceMapping> {
    let ebs = |size: &str| BlockDevice {
        encrypted: Some(true),
        volume_type: Some("gp3".into()),
        volume_size: Some(size.into()),
        ..Default::default()
    };
    let device = |name: &str, size: &str| BlockDeviceMapping {
        device_name: Some(name.into()),
        ebs: Some(ebs(size)),
        root_volume: None,
    };
    match family {
        AMIFamily::AL2 | AMIFamily::AL2023 => vec![device("/dev/xvda", "20Gi")],
        AMIFamily::Bottlerocket => vec![device("/dev/xvda", "4Gi"), device("/dev/xvdb", "20Gi")],
        AMIFamily::Windows2019 | AMIFamily::Windows2022 | AMIFamily::Windows2025 => {
            vec![device("/dev/sda1", "50Gi")]
        }
        AMIFamily::Custom => Vec::new(),
    }
}

/// A volume size (`100Gi`, `64T`, ...) in whole GiB, as EC2 takes it.
pub fn volume_size_gib(size: &str) -> Result<i32, CloudError> {
    let bytes = resources::parse_quantity(resources::EPHEMERAL_STORAGE, size).map_err(|e| {
        CloudError::Invalid(format!(
            "spec.blockDeviceMappings: volumeSize {size:?}: {e}"
        ))
    })?;
    i32::try_from((bytes + gib(1) - 1) / gib(1)).map_err(|_| {
        CloudError::Invalid(format!(
            "spec.blockDeviceMappings: volumeSize {size:?} is too large"
        ))
    })
}

/// The EC2 request data of a template.
pub fn request_data(spec: &LaunchTemplateSpec) -> Result<RequestLaunchTemplateData, CloudError> {
    let mut devices = Vec::new();
    for bdm in &spec.block_devices {
        let mut ebs = LaunchTemplateEbsBlockDeviceRequest::builder();
        if let Some(e) = &bdm.ebs {
            if let Some(size) = &e.volume_size {
                ebs = ebs.volume_size(volume_size_gib(size)?);
            }
            ebs = ebs
                .set_encrypted(e.encrypted)
                .set_delete_on_termination(e.delete_on_termination.or(Some(true)))
                .set_iops(e.iops.and_then(|v| i32::try_from(v).ok()))
                .set_throughput(e.throughput.and_then(|v| i32::try_from(v).ok()))
                .set_kms_key_id(e.kms_key_id.clone())
                .set_snapshot_id(e.snapshot_id.clone())
                .set_volume_initialization_rate(e.volume_initialization_rate)
                .set_volume_type(e.volume_type.as_deref().map(VolumeType::from));
        }
        devices.push(
            LaunchTemplateBlockDeviceMappingRequest::builder()
                .set_device_name(bdm.device_name.clone())
                .ebs(ebs.build())
                .build(),
        );
    }
    let md = &spec.metadata;
    let metadata = LaunchTemplateInstanceMetadataOptionsRequest::builder()
        .http_endpoint(LaunchTemplateInstanceMetadataEndpointState::from(
            md.http_endpoint.as_deref().unwrap_or("enabled"),
        ))
        .http_protocol_ipv6(LaunchTemplateInstanceMetadataProtocolIpv6::from(
            md.http_protocol_ipv6.as_deref().unwrap_or("disabled"),
        ))
        .http_put_response_hop_limit(
            md.http_put_response_hop_limit
                .and_then(|v| i32::try_from(v).ok())
                .unwrap_or(1),
        )
        .http_tokens(LaunchTemplateHttpTokensState::from(
            md.http_tokens.as_deref().unwrap_or("required"),
        ))
        .build();
    let mut data = RequestLaunchTemplateData::builder()
        .image_id(&spec.image_id)
        .user_data(&spec.user_data)
        .set_block_device_mappings(Some(devices))
        .metadata_options(metadata)
        .iam_instance_profile(
            LaunchTemplateIamInstanceProfileSpecificationRequest::builder()
                .name(&spec.instance_profile)
                .build(),
        )
        .monitoring(
            LaunchTemplatesMonitoringRequest::builder()
                .enabled(spec.detailed_monitoring)
                .build(),
        );
    data = if !spec.network_interfaces.is_empty() {
        data.set_network_interfaces(Some(
            spec.network_interfaces
                .iter()
                .map(|n| network_interface(spec, n))
                .collect(),
        ))
    } else if spec.efa_interfaces > 0 {
        // Upstream's layout: card i, device 0 on the first card and 1 on the others (so the
        // first card's interface stays the primary), each an EFA (ENA + EFA) interface.
        data.set_network_interfaces(Some(
            (0..spec.efa_interfaces)
                .map(|card| {
                    primary_interface(spec)
                        .network_card_index(card)
                        .device_index(if card == 0 { 0 } else { 1 })
                        .interface_type("efa")
                        .build()
                })
                .collect(),
        ))
    } else if spec.associate_public_ip.is_some() || spec.ipv6 || spec.ip_prefix_count.is_some() {
        data.network_interfaces(primary_interface(spec).build())
    } else {
        data.set_security_group_ids(Some(spec.security_groups.clone()))
    };
    if let Some(nested) = &spec.nested_virtualization {
        data = data.cpu_options(
            LaunchTemplateCpuOptionsRequest::builder()
                .nested_virtualization(NestedVirtualizationSpecification::from(nested.as_str()))
                .build(),
        );
    }
    if let Some(group) = &spec.placement_group {
        data = data.placement(
            LaunchTemplatePlacementRequest::builder()
                .group_id(group)
                .set_partition_number(spec.placement_partition)
                .build(),
        );
    }
    data = match &spec.reservations {
        ReservationTargeting::Open => data,
        ReservationTargeting::Avoid => data.capacity_reservation_specification(
            LaunchTemplateCapacityReservationSpecificationRequest::builder()
                .capacity_reservation_preference(CapacityReservationPreference::None)
                .build(),
        ),
        ReservationTargeting::Target {
            id,
            capacity_block,
            interruptible,
        } => {
            let data = data.capacity_reservation_specification(
                LaunchTemplateCapacityReservationSpecificationRequest::builder()
                    .capacity_reservation_preference(
                        CapacityReservationPreference::CapacityReservationsOnly,
                    )
                    .capacity_reservation_target(
                        CapacityReservationTarget::builder()
                            .capacity_reservation_id(id)
                            .build(),
                    )
                    .build(),
            );
            let market = if *capacity_block {
                Some(MarketType::CapacityBlock)
            } else if *interruptible {
                Some(MarketType::InterruptibleCapacityReservation)
            } else {
                None
            };
            match market {
                Some(market) => data.instance_market_options(
                    LaunchTemplateInstanceMarketOptionsRequest::builder()
                        .market_type(market)
                        .build(),
                ),
                None => data,
            }
        }
    };
    Ok(data.build())
}

fn is_zero(n: &i32) -> bool {
    *n == 0
}

/// The primary interface (device 0): the security groups, the public IP choice, the prefixes
/// and, in an IPv6 cluster, a primary IPv6 address.
fn primary_interface(
    spec: &LaunchTemplateSpec,
) -> aws_sdk_ec2::types::builders::LaunchTemplateInstanceNetworkInterfaceSpecificationRequestBuilder
{
    let interface = LaunchTemplateInstanceNetworkInterfaceSpecificationRequest::builder()
        .device_index(0)
        .set_associate_public_ip_address(spec.associate_public_ip)
        .set_groups(Some(spec.security_groups.clone()));
    if spec.ipv6 {
        interface
            .primary_ipv6(true)
            .ipv6_address_count(1)
            .set_ipv6_prefix_count(spec.ip_prefix_count)
    } else {
        interface.set_ipv4_prefix_count(spec.ip_prefix_count)
    }
}

/// One of `spec.networkInterfaces`: the primary (card 0, device 0) as without the list; every
/// other interface on its card and device with the security groups, `efa-only` ones as such
/// (EFA traffic only, no IP address) and `interface` ones as ordinary ENA interfaces.
fn network_interface(
    spec: &LaunchTemplateSpec,
    n: &NetworkInterface,
) -> LaunchTemplateInstanceNetworkInterfaceSpecificationRequest {
    if n.network_card_index == 0 && n.device_index == 0 {
        return primary_interface(spec).network_card_index(0).build();
    }
    let interface = LaunchTemplateInstanceNetworkInterfaceSpecificationRequest::builder()
        .network_card_index(n.network_card_index)
        .device_index(n.device_index)
        .set_groups(Some(spec.security_groups.clone()));
    if n.interface_type == EFA_ONLY {
        interface.interface_type(EFA_ONLY).build()
    } else {
        interface.build()
    }
}

/// Makes sure the template exists (creating it when EC2 has none by that name) and returns its
/// name.
pub async fn ensure(
    ec2: &aws_sdk_ec2::Client,
    spec: &LaunchTemplateSpec,
) -> Result<String, CloudError> {
    let name = spec.name();
    let found = ec2
        .describe_launch_templates()
        .filters(filter("launch-template-name", [name.as_str()]))
        .send()
        .await
        .map_err(|e| sdk_error("ec2:DescribeLaunchTemplates", e))?;
    if !found.launch_templates().is_empty() {
        return Ok(name);
    }
    let created = ec2
        .create_launch_template()
        .launch_template_name(&name)
        .launch_template_data(request_data(spec)?)
        .tag_specifications(
            TagSpecification::builder()
                .resource_type(ResourceType::LaunchTemplate)
                .set_tags(Some(to_ec2(&spec.tags)))
                .build(),
        )
        .send()
        .await;
    match created {
        Ok(_) => Ok(name),
        Err(e)
            if aws_sdk_ec2::error::ProvideErrorMetadata::code(&e)
                == Some("InvalidLaunchTemplateName.AlreadyExistsException") =>
        {
            Ok(name)
        }
        Err(e) => Err(sdk_error("ec2:CreateLaunchTemplate", e)),
    }
}

/// A launch template this cluster's controller made, as garbage collection sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnedTemplate {
    /// Its name.
    pub name: String,
    /// The EC2NodeClass it was made for (`karpenter.k8s.aws/ec2nodeclass` tag).
    pub nodeclass: String,
    /// When EC2 created it.
    pub created: Option<chrono::DateTime<chrono::Utc>>,
}

/// The launch templates tagged for `cluster` (`eks:eks-cluster-name`) and an EC2NodeClass, as
/// every template [`ensure`] makes is.
pub async fn list_owned(
    ec2: &aws_sdk_ec2::Client,
    cluster: &str,
) -> Result<Vec<OwnedTemplate>, CloudError> {
    let mut pages = ec2
        .describe_launch_templates()
        .filters(filter(
            &format!("tag:{}", super::tags::EKS_CLUSTER_NAME),
            [cluster],
        ))
        .filters(filter("tag-key", [labels::EC2NODECLASS]))
        .into_paginator()
        .send();
    let mut out = Vec::new();
    while let Some(page) = pages.next().await {
        let page = page.map_err(|e| sdk_error("ec2:DescribeLaunchTemplates", e))?;
        for t in page.launch_templates() {
            let (Some(name), Some(nodeclass)) = (
                t.launch_template_name(),
                t.tags()
                    .iter()
                    .find(|tag| tag.key() == Some(labels::EC2NODECLASS))
                    .and_then(|tag| tag.value()),
            ) else {
                continue;
            };
            out.push(OwnedTemplate {
                name: name.to_string(),
                nodeclass: nodeclass.to_string(),
                created: t
                    .create_time()
                    .and_then(|c| chrono::DateTime::from_timestamp(c.secs(), c.subsec_nanos())),
            });
        }
    }
    Ok(out)
}

/// Deletes launch template `name`; one already gone is fine.
pub async fn delete(ec2: &aws_sdk_ec2::Client, name: &str) -> Result<(), CloudError> {
    match ec2
        .delete_launch_template()
        .launch_template_name(name)
        .send()
        .await
    {
        Ok(_) => Ok(()),
        Err(e)
            if matches!(
                aws_sdk_ec2::error::ProvideErrorMetadata::code(&e),
                Some(
                    "InvalidLaunchTemplateName.NotFoundException"
                        | "InvalidLaunchTemplateId.NotFound"
                )
            ) =>
        {
            Ok(())
        }
        Err(e) => Err(sdk_error("ec2:DeleteLaunchTemplate", e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    fn spec() -> LaunchTemplateSpec {
        LaunchTemplateSpec {
            image_id: "ami-1".into(),
            user_data: "dXNlcg==".into(),
            block_devices: default_block_devices(AMIFamily::Bottlerocket),
            metadata: MetadataOptions::default_for_nodeclass(),
            instance_profile: "profile".into(),
            security_groups: vec!["sg-1".into()],
            detailed_monitoring: false,
            associate_public_ip: None,
            ipv6: false,
            ip_prefix_count: None,
            placement_group: None,
            placement_partition: None,
            network_interfaces: Vec::new(),
            efa_interfaces: 0,
            nested_virtualization: None,
            tags: BTreeMap::new(),
            reservations: ReservationTargeting::Open,
        }
    }

    #[test]
    fn nested_virtualization_reaches_the_cpu_options() {
        assert!(request_data(&spec()).expect("data").cpu_options().is_none());
        let nested = |value: &str| {
            let mut s = spec();
            s.nested_virtualization = Some(value.into());
            s
        };
        for (value, expected) in [
            ("enabled", NestedVirtualizationSpecification::Enabled),
            ("disabled", NestedVirtualizationSpecification::Disabled),
        ] {
            let data = request_data(&nested(value)).expect("data");
            assert_eq!(
                data.cpu_options().and_then(|c| c.nested_virtualization()),
                Some(&expected),
                "{value}"
            );
        }
        let names: BTreeSet<String> = [spec(), nested("enabled"), nested("disabled")]
            .iter()
            .map(|s| s.name())
            .collect();
        assert_eq!(names.len(), 3, "each setting is its own template");
    }

    #[test]
    fn names_follow_the_content() {
        let a = spec();
        assert!(a.name().starts_with("karpenter.k8s.aws/"));
        assert_eq!(a.name(), spec().name());
        let mut b = spec();
        b.image_id = "ami-2".into();
        assert_ne!(a.name(), b.name());
    }

    #[test]
    fn request_data_carries_volumes_metadata_and_network() {
        let data = request_data(&spec()).expect("data");
        let sizes: Vec<(Option<&str>, Option<i32>)> = data
            .block_device_mappings()
            .iter()
            .map(|b| (b.device_name(), b.ebs().and_then(|e| e.volume_size())))
            .collect();
        assert_eq!(
            sizes,
            [(Some("/dev/xvda"), Some(4)), (Some("/dev/xvdb"), Some(20))]
        );
        let md = data.metadata_options().expect("metadata");
        assert_eq!(
            md.http_tokens(),
            Some(&LaunchTemplateHttpTokensState::Required)
        );
        assert_eq!(md.http_put_response_hop_limit(), Some(1));
        assert_eq!(data.security_group_ids(), ["sg-1"]);
        let mut public = spec();
        public.associate_public_ip = Some(true);
        let data = request_data(&public).expect("data");
        assert!(data.security_group_ids().is_empty());
        assert_eq!(
            data.network_interfaces()[0].associate_public_ip_address(),
            Some(true)
        );
        assert_eq!(data.network_interfaces()[0].groups(), ["sg-1"]);
        assert_eq!(data.network_interfaces()[0].primary_ipv6(), None);
        assert!(data.capacity_reservation_specification().is_none());
        let mut ipv6 = spec();
        ipv6.ipv6 = true;
        assert_ne!(ipv6.name(), spec().name());
        let data = request_data(&ipv6).expect("data");
        assert!(data.security_group_ids().is_empty());
        let primary = &data.network_interfaces()[0];
        assert_eq!(
            (
                primary.device_index(),
                primary.primary_ipv6(),
                primary.ipv6_address_count(),
                primary.associate_public_ip_address(),
                primary.groups(),
            ),
            (
                Some(0),
                Some(true),
                Some(1),
                None,
                &["sg-1".to_string()][..]
            )
        );
        assert_eq!(primary.ipv6_prefix_count(), None);
        ipv6.ip_prefix_count = Some(2);
        let data = request_data(&ipv6).expect("data");
        let primary = &data.network_interfaces()[0];
        assert_eq!(
            (primary.ipv6_prefix_count(), primary.ipv4_prefix_count()),
            (Some(2), None)
        );
        let mut prefixes = spec();
        prefixes.ip_prefix_count = Some(3);
        let data = request_data(&prefixes).expect("data");
        assert!(data.security_group_ids().is_empty());
        let primary = &data.network_interfaces()[0];
        assert_eq!(
            (
                primary.device_index(),
                primary.ipv4_prefix_count(),
                primary.ipv6_prefix_count(),
                primary.primary_ipv6(),
                primary.groups()
            ),
            (Some(0), Some(3), None, None, &["sg-1".to_string()][..])
        );
        assert_eq!(volume_size_gib("100Gi").expect("size"), 100);
        assert!(volume_size_gib("lots").is_err());
    }

    #[test]
    fn reservation_targeting_is_part_of_the_template_and_its_name() {
        let mut avoid = spec();
        avoid.reservations = ReservationTargeting::Avoid;
        let data = request_data(&avoid).expect("data");
        let crs = data.capacity_reservation_specification().expect("spec");
        assert_eq!(
            crs.capacity_reservation_preference(),
            Some(&CapacityReservationPreference::None)
        );
        assert!(crs.capacity_reservation_target().is_none());
        let mut block = spec();
        block.reservations = ReservationTargeting::Target {
            id: "cr-1".into(),
            capacity_block: true,
            interruptible: false,
        };
        let data = request_data(&block).expect("data");
        let crs = data.capacity_reservation_specification().expect("spec");
        assert_eq!(
            crs.capacity_reservation_preference(),
            Some(&CapacityReservationPreference::CapacityReservationsOnly)
        );
        assert_eq!(
            crs.capacity_reservation_target()
                .and_then(|t| t.capacity_reservation_id()),
            Some("cr-1")
        );
        assert_eq!(
            data.instance_market_options().and_then(|m| m.market_type()),
            Some(&MarketType::CapacityBlock)
        );
        let mut odcr = block.clone();
        odcr.reservations = ReservationTargeting::Target {
            id: "cr-1".into(),
            capacity_block: false,
            interruptible: false,
        };
        assert!(
            request_data(&odcr)
                .expect("data")
                .instance_market_options()
                .is_none()
        );
        let mut lent = odcr.clone();
        lent.reservations = ReservationTargeting::Target {
            id: "cr-1".into(),
            capacity_block: false,
            interruptible: true,
        };
        let data = request_data(&lent).expect("data");
        assert_eq!(
            data.instance_market_options().and_then(|m| m.market_type()),
            Some(&MarketType::InterruptibleCapacityReservation)
        );
        assert_eq!(
            data.capacity_reservation_specification()
                .and_then(|c| c.capacity_reservation_target())
                .and_then(|t| t.capacity_reservation_id()),
            Some("cr-1")
        );
        // Without the interruptible flag in the hash, ODCR templates keep the names they had.
        assert_eq!(
            serde_json::to_value(&odcr.reservations).expect("json"),
            serde_json::json!({"Target": {"id": "cr-1", "capacity_block": false}})
        );
        let names: BTreeSet<String> = [spec(), avoid, block, odcr, lent]
            .iter()
            .map(|s| s.name())
            .collect();
        assert_eq!(names.len(), 5, "each targeting is its own template");
    }

    #[test]
    fn listed_interfaces_each_reach_their_card_and_device() {
        let mut with = spec();
        with.associate_public_ip = Some(false);
        with.network_interfaces = [(0, 0, "interface"), (0, 1, EFA_ONLY), (1, 0, EFA_ONLY)]
            .into_iter()
            .map(|(card, device, kind)| NetworkInterface {
                network_card_index: card,
                device_index: device,
                interface_type: kind.into(),
            })
            .collect();
        assert_ne!(with.name(), spec().name());
        let data = request_data(&with).expect("data");
        assert!(data.security_group_ids().is_empty());
        let got: Vec<_> = data
            .network_interfaces()
            .iter()
            .map(|n| {
                (
                    n.network_card_index(),
                    n.device_index(),
                    n.interface_type(),
                    n.groups().to_vec(),
                    n.associate_public_ip_address(),
                )
            })
            .collect();
        let groups = vec!["sg-1".to_string()];
        assert_eq!(
            got,
            [
                (Some(0), Some(0), None, groups.clone(), Some(false)),
                (Some(0), Some(1), Some(EFA_ONLY), groups.clone(), None),
                (Some(1), Some(0), Some(EFA_ONLY), groups, None),
            ]
        );
    }

    #[test]
    fn efa_devices_asked_for_become_one_efa_interface_per_card() {
        let mut with = spec();
        with.efa_interfaces = 2;
        assert_ne!(with.name(), spec().name());
        let data = request_data(&with).expect("data");
        let got: Vec<_> = data
            .network_interfaces()
            .iter()
            .map(|n| {
                (
                    n.network_card_index(),
                    n.device_index(),
                    n.interface_type(),
                    n.groups().len(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                (Some(0), Some(0), Some("efa"), 1),
                (Some(1), Some(1), Some("efa"), 1)
            ]
        );
    }
}
