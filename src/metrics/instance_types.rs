//! The instance-type families (`karpenter_cloudprovider_instance_type_offering_available` and
//! `_offering_price_estimate` by instance_type, capacity_type and zone; `_cpu_cores` and
//! `_memory_bytes` by instance_type), written from the cloud provider's instance types when
//! scraped.
//!
//! Why not publish them every refresh: the bundled catalog offers ~1,340 types in up to six
//! zones, on demand and spot, so the two offering families have ~16,000 series, and a
//! publication held a label vector and three label strings for each between refreshes (~4 MB,
//! with the refresh's sort beside it). The provider's cache holds the types anyway; the metrics
//! pass hands the families the types it last read ([`Offered::set`]), and a scrape keeps one row
//! per series (indices into the types) while it writes the text.

use std::sync::{Arc, Mutex, PoisonError};

use super::published::{PublishedGauges, Rows};
use crate::scheduling::instance_type::{InstanceType, Offering};

/// The families [`serve`] fills.
pub struct InstanceTypeFamilies<'a> {
    /// `karpenter_cloudprovider_instance_type_offering_available`: 1 when the offering can be
    /// launched now, else 0.
    pub offering_available: &'a PublishedGauges,
    /// `karpenter_cloudprovider_instance_type_offering_price_estimate`: the offering's hourly
    /// price.
    pub offering_price_estimate: &'a PublishedGauges,
    /// `karpenter_cloudprovider_instance_type_cpu_cores`: vCPUs per instance type.
    pub cpu_cores: &'a PublishedGauges,
    /// `karpenter_cloudprovider_instance_type_memory_bytes`: memory bytes per instance type.
    pub memory_bytes: &'a PublishedGauges,
}

/// The instance types of every node class as the metrics pass last read them, shared with the
/// scrapes.
#[derive(Clone, Default)]
pub struct Offered(Arc<Mutex<Vec<Arc<Vec<InstanceType>>>>>);

impl Offered {
    /// Makes the families show `types` (one list per node class) from the next scrape on. A
    /// type several lists hold is written once per offering; of equal label sets the last
    /// list's value counts, as a publication's last series would.
    pub fn set(&self, types: Vec<Arc<Vec<InstanceType>>>) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = types;
    }

    fn get(&self) -> Vec<Arc<Vec<InstanceType>>> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// Makes `families` computed from what `offered` holds at every scrape.
pub fn serve(families: InstanceTypeFamilies<'_>, offered: &Offered) {
    for (family, kind) in [
        (families.offering_available, Family::Available),
        (families.offering_price_estimate, Family::Price),
        (families.cpu_cores, Family::CpuCores),
        (families.memory_bytes, Family::MemoryBytes),
    ] {
        let offered = offered.clone();
        family.serve(Arc::new(move || {
            Box::new(TypeRows::new(kind, offered.get()))
        }));
    }
}

/// Which family a [`TypeRows`] writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Family {
    Available,
    Price,
    CpuCores,
    MemoryBytes,
}

impl Family {
    /// Whether the family has a series per offering (else one per type).
    fn per_offering(self) -> bool {
        matches!(self, Self::Available | Self::Price)
    }
}

/// One scrape's rows of a family: a row is a type (list, index) and, for the offering
/// families, one of its offerings.
struct TypeRows {
    family: Family,
    types: Vec<Arc<Vec<InstanceType>>>,
    rows: Vec<[usize; 3]>,
}

impl TypeRows {
    fn new(family: Family, types: Vec<Arc<Vec<InstanceType>>>) -> Self {
        let mut rows = Vec::new();
        for (list, its) in types.iter().enumerate() {
            for (index, it) in its.iter().enumerate() {
                if family.per_offering() {
                    rows.extend((0..it.offerings.len()).map(|o| [list, index, o]));
                } else {
                    rows.push([list, index, 0]);
                }
            }
        }
        Self {
            family,
            types,
            rows,
        }
    }

    /// Row `row`'s type and, in an offering family, its offering.
    fn at(&self, row: usize) -> Option<(&InstanceType, Option<&Offering>)> {
        let &[list, index, offering] = self.rows.get(row)?;
        let it = self.types.get(list)?.get(index)?;
        let offering = if self.family.per_offering() {
            it.offerings.get(offering)
        } else {
            None
        };
        Some((it, offering))
    }
}

impl Rows for TypeRows {
    fn len(&self) -> usize {
        self.rows.len()
    }

    /// Labels in the families' order: instance_type, then capacity_type and zone.
    fn label(&self, row: usize, label: usize) -> &str {
        let Some((it, offering)) = self.at(row) else {
            return "";
        };
        match label {
            0 => &it.name,
            1 => offering.map_or("", |o| o.capacity_type.label()),
            2 => offering.map_or("", |o| &*o.zone),
            _ => "",
        }
    }

    fn value(&self, row: usize) -> f64 {
        let Some((it, offering)) = self.at(row) else {
            return 0.0;
        };
        match self.family {
            Family::Available => offering.map_or(0.0, |o| f64::from(u8::from(o.available))),
            Family::Price => offering.map_or(0.0, |o| o.price),
            Family::CpuCores => it.capacity.get("cpu") as f64 / 1000.0,
            Family::MemoryBytes => it.capacity.get("memory") as f64,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::metrics::METRICS;
    use crate::metrics::tests::{fresh, text};
    use crate::scheduling::instance_type::CapacityType;
    use crate::scheduling::resources::Resources;

    fn offering(zone: &str, capacity_type: CapacityType, price: f64, available: bool) -> Offering {
        Offering {
            zone: Arc::from(zone),
            zone_id: None,
            capacity_type,
            price,
            available,
            reservation: None,
            partition: None,
        }
    }

    fn instance_type(name: &str, cpu_millis: i64, offerings: Vec<Offering>) -> InstanceType {
        InstanceType {
            name: Arc::from(name),
            labels: BTreeMap::new(),
            offerings,
            capacity: Resources::cpu_memory(cpu_millis, 8 << 30),
            overhead: Default::default(),
            allocatable: Resources::cpu_memory(cpu_millis, 8 << 30),
        }
    }

    /// The registry's instance-type families, fresh, with help `Help.`.
    fn families() -> [PublishedGauges; 4] {
        [
            &METRICS.cloudprovider_instance_type_offering_available,
            &METRICS.cloudprovider_instance_type_offering_price_estimate,
            &METRICS.cloudprovider_instance_type_cpu_cores,
            &METRICS.cloudprovider_instance_type_memory_bytes,
        ]
        .map(fresh)
    }

    /// Two node classes share `m5.large` (the second sees its spot offering unavailable and
    /// adds a zone): each type is written once per offering, in label order, the later class's
    /// value counting for an offering both have; a refresh replaces what the next scrape
    /// writes; nothing is written before the first.
    #[test]
    fn the_families_write_each_offering_of_the_types_last_handed_to_them() {
        let [available, price, cpu, memory] = families();
        let offered = Offered::default();
        serve(
            InstanceTypeFamilies {
                offering_available: &available,
                offering_price_estimate: &price,
                cpu_cores: &cpu,
                memory_bytes: &memory,
            },
            &offered,
        );
        assert_eq!(text(&available), "");

        let first = vec![
            instance_type(
                "m5.large",
                2000,
                vec![
                    offering("us-east-1a", CapacityType::Spot, 0.04, true),
                    offering("us-east-1a", CapacityType::OnDemand, 0.096, true),
                ],
            ),
            instance_type(
                "c5.large",
                2000,
                vec![offering("us-east-1a", CapacityType::OnDemand, 0.085, true)],
            ),
        ];
        let second = vec![instance_type(
            "m5.large",
            2000,
            vec![
                offering("us-east-1a", CapacityType::Spot, 0.05, false),
                offering("us-east-1b", CapacityType::OnDemand, 0.096, true),
            ],
        )];
        offered.set(vec![Arc::new(first), Arc::new(second)]);

        let available_family = "karpenter_cloudprovider_instance_type_offering_available";
        let series = |family: &str, ct: &str, it: &str, zone: &str, value: &str| {
            format!(
                "{family}{{capacity_type=\"{ct}\",instance_type=\"{it}\",zone=\"{zone}\"}} {value}\n"
            )
        };
        let header = |family: &str| format!("# HELP {family} Help.\n# TYPE {family} gauge\n");
        assert_eq!(
            text(&available),
            [
                header(available_family),
                series(available_family, "on-demand", "c5.large", "us-east-1a", "1"),
                series(available_family, "on-demand", "m5.large", "us-east-1a", "1"),
                series(available_family, "on-demand", "m5.large", "us-east-1b", "1"),
                series(available_family, "spot", "m5.large", "us-east-1a", "0"),
            ]
            .concat()
        );
        let price_family = "karpenter_cloudprovider_instance_type_offering_price_estimate";
        assert!(
            text(&price).contains(&series(
                price_family,
                "spot",
                "m5.large",
                "us-east-1a",
                "0.05"
            )),
            "{}",
            text(&price)
        );
        let cpu_family = "karpenter_cloudprovider_instance_type_cpu_cores";
        assert_eq!(
            text(&cpu),
            format!(
                "{}{cpu_family}{{instance_type=\"c5.large\"}} 2\n{cpu_family}{{instance_type=\"m5.large\"}} 2\n",
                header(cpu_family)
            )
        );
        assert!(text(&memory).contains("{instance_type=\"m5.large\"} 8589934592\n"));

        offered.set(vec![Arc::new(vec![instance_type(
            "t3.micro",
            2000,
            vec![offering("us-east-1a", CapacityType::OnDemand, 0.0104, true)],
        )])]);
        assert_eq!(
            text(&available),
            [
                header(available_family),
                series(available_family, "on-demand", "t3.micro", "us-east-1a", "1"),
            ]
            .concat()
        );
    }
}
