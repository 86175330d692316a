//! The EC2 instance-type catalog `simulate` and the simulated cloud provider use: instance
//! shapes, zones, on-demand prices and estimated spot prices, bundled for us-east-1 and us-west-2
//! (see `catalog/README.md`) or loaded from a file in the same format.

use std::path::Path;
use std::sync::Arc;

use serde::Deserialize;

use crate::scheduling::instance_type::{
    self, CapacityType, Device, InstanceType, InstanceTypeInfo, NodeClassSettings, Offering,
};

/// Regions whose catalogs are compiled into the binary.
pub const BUNDLED_REGIONS: &[&str] = &["us-east-1", "us-west-2"];

/// The region `simulate` uses when nothing in the input names one.
pub const DEFAULT_REGION: &str = "us-east-1";

fn bundled_json(region: &str) -> Option<&'static str> {
    match region {
        "us-east-1" => Some(include_str!("../catalog/us-east-1.json")),
        "us-west-2" => Some(include_str!("../catalog/us-west-2.json")),
        _ => None,
    }
}

/// Why a catalog could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    /// No bundled catalog for the region.
    #[error(
        "no bundled catalog for region {region:?}; bundled regions are {bundled}; pass --catalog FILE for others"
    )]
    UnknownRegion {
        /// The region asked for.
        region: String,
        /// The regions we have.
        bundled: String,
    },
    /// The catalog file could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The catalog is not in the expected format.
    #[error("{origin}: not a valid catalog: {message}")]
    Format {
        /// The file or bundled region.
        origin: String,
        /// What was wrong, with the field path.
        message: String,
    },
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct CatalogFile {
    region: String,
    zones: Vec<ZoneEntry>,
    instance_types: Vec<TypeEntry>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ZoneEntry {
    name: String,
    zone_id: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct TypeEntry {
    name: String,
    vcpu: i64,
    #[serde(rename = "memoryMiB")]
    memory_mib: i64,
    architectures: Vec<String>,
    #[serde(default)]
    cpu_manufacturer: Option<String>,
    #[serde(default, rename = "sustainedClockSpeedGHz")]
    sustained_clock_speed_ghz: Option<f64>,
    #[serde(default)]
    hypervisor: String,
    #[serde(default)]
    encryption_in_transit_supported: bool,
    usage_classes: Vec<String>,
    #[serde(default)]
    gpus: Vec<DeviceEntry>,
    #[serde(default)]
    accelerators: Vec<DeviceEntry>,
    #[serde(default, rename = "localNvmeGB")]
    local_nvme_gb: i64,
    #[serde(default)]
    ebs_bandwidth_mbps: i64,
    #[serde(default)]
    network_bandwidth_mbps: i64,
    max_enis: i64,
    ipv4_per_eni: i64,
    #[serde(default)]
    branch_enis: i64,
    #[serde(default)]
    trunking: bool,
    #[serde(default)]
    max_efa_interfaces: i64,
    on_demand_price: f64,
    offerings: Vec<OfferingEntry>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct DeviceEntry {
    name: String,
    manufacturer: String,
    count: i64,
    #[serde(default, rename = "memoryMiB")]
    memory_mib: i64,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct OfferingEntry {
    zone: String,
    #[serde(default)]
    spot_price: Option<f64>,
}

/// Instance types of one region with their zones and prices.
#[derive(Clone, Debug)]
pub struct Catalog {
    /// The region.
    pub region: String,
    /// Zone names with their IDs.
    pub zones: Vec<(Arc<str>, Arc<str>)>,
    entries: Vec<Entry>,
}

#[derive(Clone, Debug)]
struct Entry {
    info: InstanceTypeInfo,
    on_demand: bool,
    on_demand_price: f64,
    offerings: Vec<(Arc<str>, Option<f64>)>,
}

impl Catalog {
    /// The catalog compiled into the binary for a region.
    pub fn bundled(region: &str) -> Result<Self, CatalogError> {
        let json = bundled_json(region).ok_or_else(|| CatalogError::UnknownRegion {
            region: region.to_string(),
            bundled: BUNDLED_REGIONS.join(", "),
        })?;
        Self::from_json(json, &format!("bundled catalog {region}"))
    }

    /// A catalog file in the bundled format.
    pub fn from_file(path: &Path) -> Result<Self, CatalogError> {
        let text = std::fs::read_to_string(path).map_err(|source| CatalogError::Io {
            path: path.display().to_string(),
            source,
        })?;
        Self::from_json(&text, &path.display().to_string())
    }

    /// Parses a catalog.
    pub fn from_json(json: &str, origin: &str) -> Result<Self, CatalogError> {
        let de = &mut serde_json::Deserializer::from_str(json);
        let file: CatalogFile =
            serde_path_to_error::deserialize(de).map_err(|e| CatalogError::Format {
                origin: origin.to_string(),
                message: e.to_string(),
            })?;
        let zones: Vec<(Arc<str>, Arc<str>)> = file
            .zones
            .iter()
            .map(|z| (Arc::from(z.name.as_str()), Arc::from(z.zone_id.as_str())))
            .collect();
        let entries = file
            .instance_types
            .into_iter()
            .filter_map(|t| {
                let arch = if t.architectures.iter().any(|a| a == "x86_64") {
                    "amd64"
                } else if t.architectures.iter().any(|a| a == "arm64") {
                    "arm64"
                } else {
                    return None;
                };
                let single = |devices: &[DeviceEntry]| match devices {
                    [d] => Some(Device {
                        name: d.name.clone(),
                        manufacturer: d.manufacturer.clone(),
                        count: d.count,
                        memory_mib: d.memory_mib,
                    }),
                    _ => None,
                };
                let offerings = t
                    .offerings
                    .iter()
                    .map(|o| {
                        let zone = zones
                            .iter()
                            .find(|(name, _)| name.as_ref() == o.zone)
                            .map(|(name, _)| name.clone())
                            .unwrap_or_else(|| Arc::from(o.zone.as_str()));
                        let spot = o
                            .spot_price
                            .filter(|_| t.usage_classes.iter().any(|u| u == "spot"));
                        (zone, spot)
                    })
                    .collect();
                Some(Entry {
                    info: InstanceTypeInfo {
                        name: t.name,
                        vcpu: t.vcpu,
                        memory_mib: t.memory_mib,
                        arch,
                        cpu_manufacturer: t.cpu_manufacturer,
                        sustained_clock_ghz: t.sustained_clock_speed_ghz,
                        hypervisor: t.hypervisor,
                        encryption_in_transit: t.encryption_in_transit_supported,
                        gpu: single(&t.gpus),
                        accelerator: single(&t.accelerators),
                        local_nvme_gb: t.local_nvme_gb,
                        ebs_bandwidth_mbps: t.ebs_bandwidth_mbps,
                        network_bandwidth_mbps: t.network_bandwidth_mbps,
                        max_enis: t.max_enis,
                        ipv4_per_eni: t.ipv4_per_eni,
                        branch_enis: if t.trunking { t.branch_enis } else { 0 },
                        max_efa_interfaces: t.max_efa_interfaces,
                    },
                    on_demand: t.usage_classes.iter().any(|u| u == "on-demand"),
                    on_demand_price: t.on_demand_price,
                    offerings,
                })
            })
            .collect();
        Ok(Self {
            region: file.region,
            zones,
            entries,
        })
    }

    /// How many instance types the catalog holds.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the catalog holds no instance types.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The zone ID of a zone name.
    pub fn zone_id(&self, zone: &str) -> Option<&Arc<str>> {
        self.zones
            .iter()
            .find(|(name, _)| name.as_ref() == zone)
            .map(|(_, id)| id)
    }

    /// On-demand price per instance type: the AWS provider's fallback when the Price List API
    /// cannot be reached.
    pub fn on_demand_prices(&self) -> impl Iterator<Item = (&str, f64)> + '_ {
        self.entries
            .iter()
            .filter(|e| e.on_demand)
            .map(|e| (e.info.name.as_str(), e.on_demand_price))
    }

    /// Hardware facts per instance type: the AWS provider fills in what DescribeInstanceTypes
    /// does not report (network bandwidth, branch interfaces for pod ENIs) from here.
    pub fn infos(&self) -> impl Iterator<Item = &InstanceTypeInfo> + '_ {
        self.entries.iter().map(|e| &e.info)
    }

    /// Every instance type resolved for a node class, with on-demand and spot offerings in each
    /// zone it is sold in.
    pub fn instance_types(&self, settings: &NodeClassSettings) -> Vec<InstanceType> {
        self.entries
            .iter()
            .map(|e| {
                let mut offerings = Vec::with_capacity(e.offerings.len() * 2);
                for (zone, spot) in &e.offerings {
                    let zone_id = self.zone_id(zone).cloned();
                    if e.on_demand {
                        offerings.push(Offering {
                            zone: zone.clone(),
                            zone_id: zone_id.clone(),
                            capacity_type: CapacityType::OnDemand,
                            price: e.on_demand_price,
                            available: true,
                        });
                    }
                    if let Some(price) = spot {
                        offerings.push(Offering {
                            zone: zone.clone(),
                            zone_id,
                            capacity_type: CapacityType::Spot,
                            price: *price,
                            available: true,
                        });
                    }
                }
                instance_type::resolve(&e.info, settings, &self.region, offerings)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apis::ec2nodeclass::AMIFamily;
    use crate::apis::labels;

    #[test]
    fn bundled_catalogs_load_with_prices_and_zones() {
        for region in BUNDLED_REGIONS {
            let c = Catalog::bundled(region).expect("bundled catalog parses");
            assert_eq!(c.region, *region);
            assert!(c.len() > 1000, "{region}: {} types", c.len());
            assert!(c.zones.len() >= 4);
            let types = c.instance_types(&NodeClassSettings::for_family(AMIFamily::AL2023));
            let m5 = types
                .iter()
                .find(|t| &*t.name == "m5.large")
                .expect("m5.large");
            let od = m5
                .cheapest_offering(|o| o.capacity_type == CapacityType::OnDemand)
                .expect("on-demand offering");
            assert!((od.price - 0.096).abs() < 1e-9, "{region}: {}", od.price);
            let spot = m5
                .cheapest_offering(|o| o.capacity_type == CapacityType::Spot)
                .expect("spot offering");
            assert!(spot.price < od.price);
            assert!(spot.zone.starts_with(region));
            assert!(od.zone_id.is_some());
            let graviton = types
                .iter()
                .find(|t| &*t.name == "c7g.large")
                .expect("c7g.large");
            assert_eq!(graviton.labels[labels::ARCH], "arm64");
        }
    }

    #[test]
    fn unknown_regions_and_bad_files_are_explained() {
        let e = Catalog::bundled("eu-west-9").unwrap_err().to_string();
        assert!(
            e.contains("eu-west-9") && e.contains("us-east-1") && e.contains("--catalog"),
            "{e}"
        );
        let e = Catalog::from_json(
            r#"{"region":"x","zones":[],"instanceTypes":[{"name":"a"}]}"#,
            "test.json",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("test.json") && e.contains("instanceTypes[0]"),
            "{e}"
        );
    }
}
