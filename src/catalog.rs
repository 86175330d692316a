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

/// The highest price a catalog may give, in USD per hour.
const MAX_PRICE: f64 = 1e6;

/// Why entry `i` of a catalog is unusable, naming the entry, the field and the allowed range.
fn out_of_bounds(i: usize, t: &TypeEntry) -> Option<String> {
    let devices = |list: &[DeviceEntry], count: bool| {
        list.iter()
            .map(|d| if count { d.count } else { d.memory_mib })
            .collect::<Vec<_>>()
    };
    // Far beyond any EC2 instance type, so that the capacity arithmetic (vCPUs × 1000
    // millicores, ENIs × IPs pods, MiB × overhead) cannot overflow whatever a file says.
    const BIG: i64 = 1 << 32;
    let checks: [(&str, i64, i64, Vec<i64>); 13] = [
        ("vcpu", 1, 100_000, vec![t.vcpu]),
        ("memoryMiB", 1, BIG, vec![t.memory_mib]),
        ("maxEnis", 0, 10_000, vec![t.max_enis]),
        ("ipv4PerEni", 0, 10_000, vec![t.ipv4_per_eni]),
        ("branchEnis", 0, 10_000, vec![t.branch_enis]),
        ("maxEfaInterfaces", 0, 10_000, vec![t.max_efa_interfaces]),
        ("localNvmeGB", 0, BIG, vec![t.local_nvme_gb]),
        ("ebsBandwidthMbps", 0, BIG, vec![t.ebs_bandwidth_mbps]),
        (
            "networkBandwidthMbps",
            0,
            BIG,
            vec![t.network_bandwidth_mbps],
        ),
        ("gpus[].count", 0, 10_000, devices(&t.gpus, true)),
        ("gpus[].memoryMiB", 0, BIG, devices(&t.gpus, false)),
        (
            "accelerators[].count",
            0,
            10_000,
            devices(&t.accelerators, true),
        ),
        (
            "accelerators[].memoryMiB",
            0,
            BIG,
            devices(&t.accelerators, false),
        ),
    ];
    for (field, lo, hi, found) in checks {
        if let Some(v) = found.into_iter().find(|v| !(lo..=hi).contains(v)) {
            return Some(format!(
                "instanceTypes[{i}] ({}).{field}: {v} is outside {lo}..={hi}; fix the entry or leave it out",
                t.name
            ));
        }
    }
    let prices = std::iter::once(("onDemandPrice", Some(t.on_demand_price))).chain(
        t.offerings
            .iter()
            .map(|o| ("offerings[].spotPrice", o.spot_price)),
    );
    for (field, price) in prices {
        if let Some(p) = price
            && !(p.is_finite() && (0.0..=MAX_PRICE).contains(&p))
        {
            return Some(format!(
                "instanceTypes[{i}] ({}).{field}: {p:?} is not a price between 0 and {MAX_PRICE} USD per hour",
                t.name
            ));
        }
    }
    None
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
        if let Some(message) = file
            .instance_types
            .iter()
            .enumerate()
            .find_map(|(i, t)| out_of_bounds(i, t))
        {
            return Err(CatalogError::Format {
                origin: origin.to_string(),
                message,
            });
        }
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
                        network_cards: Vec::new(),
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
            .filter(|e| instance_type::supports_interfaces(&e.info, &settings.network_interfaces))
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
                            reservation: None,
                            partition: None,
                        });
                    }
                    if let Some(price) = spot {
                        offerings.push(Offering {
                            zone: zone.clone(),
                            zone_id,
                            capacity_type: CapacityType::Spot,
                            price: *price,
                            available: true,
                            reservation: None,
                            partition: None,
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

    /// A one-type catalog with `field` set to `value`.
    fn catalog_with(field: &str, value: serde_json::Value) -> Result<Catalog, CatalogError> {
        let mut entry = serde_json::json!({
            "name": "x1.huge", "vcpu": 4, "memoryMiB": 16384, "architectures": ["x86_64"],
            "usageClasses": ["on-demand"], "maxEnis": 4, "ipv4PerEni": 15,
            "onDemandPrice": 0.2, "offerings": [{"zone": "us-east-1a", "spotPrice": 0.1}],
            "gpus": [{"name": "t4", "manufacturer": "nvidia", "count": 1, "memoryMiB": 16384}],
        });
        match field {
            "spotPrice" => entry["offerings"][0]["spotPrice"] = value,
            "gpus.count" => entry["gpus"][0]["count"] = value,
            _ => entry[field] = value,
        }
        let file = serde_json::json!({
            "region": "us-east-1",
            "zones": [{"name": "us-east-1a", "zoneId": "use1-az1"}],
            "instanceTypes": [entry],
        });
        Catalog::from_json(&file.to_string(), "absurd.json")
    }

    #[test]
    fn absurd_numbers_in_a_catalog_file_are_rejected_before_any_arithmetic() {
        let sane = catalog_with("vcpu", serde_json::json!(4)).expect("a sane entry loads");
        assert_eq!(
            sane.instance_types(&NodeClassSettings::for_family(AMIFamily::AL2023))
                .len(),
            1
        );
        for (field, value, expected) in [
            (
                "vcpu",
                serde_json::json!(i64::MAX),
                "instanceTypes[0] (x1.huge).vcpu: 9223372036854775807 is outside 1..=100000",
            ),
            (
                "vcpu",
                serde_json::json!(0),
                ".vcpu: 0 is outside 1..=100000",
            ),
            (
                "memoryMiB",
                serde_json::json!(-1),
                ".memoryMiB: -1 is outside",
            ),
            (
                "maxEnis",
                serde_json::json!(1_000_000_000_000_i64),
                ".maxEnis: 1000000000000 is outside 0..=10000",
            ),
            (
                "ipv4PerEni",
                serde_json::json!(i64::MIN),
                ".ipv4PerEni: -9223372036854775808 is outside",
            ),
            (
                "gpus.count",
                serde_json::json!(i64::MAX),
                ".gpus[].count: 9223372036854775807 is outside",
            ),
            (
                "onDemandPrice",
                serde_json::json!(-0.5),
                ".onDemandPrice: -0.5 is not a price",
            ),
            (
                "spotPrice",
                serde_json::json!(1e300),
                ".offerings[].spotPrice: 1e300 is not a price",
            ),
        ] {
            let e = catalog_with(field, value).unwrap_err().to_string();
            assert!(
                e.starts_with("absurd.json: not a valid catalog: instanceTypes[0] (x1.huge)."),
                "{e}"
            );
            assert!(e.contains(expected), "{field}: {e}");
        }
    }
}
