//! Whether an instance type's labels agree with a requirement, read from the type itself.
//!
//! A type is seen as a finite, single-valued set per well-known label: its own label (or none,
//! `DoesNotExist`), and for the labels its offerings decide (zone, capacity type, placement
//! partition) the values of its available offerings. The solver used to build those sets as a
//! [`Requirements`] per type for every solve (about 35 requirements, ~8 KB a type, 11 MB over
//! the bundled catalog at each provisioning round and disruption simulation, issue #15); asking
//! the labels and offerings directly gives the same answers and holds nothing.

use std::sync::LazyLock;

use crate::apis::labels;

use super::instance_type::InstanceType;
use super::requirements::{Requirement, Requirements};

/// The labels an instance type is judged on: the well-known ones, sorted for a binary search.
/// A key outside them does not constrain a type.
static JUDGED: LazyLock<Vec<&'static str>> = LazyLock::new(|| {
    let mut keys: Vec<&'static str> = labels::WELL_KNOWN_LABELS
        .iter()
        .chain(labels::AWS_WELL_KNOWN_LABELS)
        .copied()
        .collect();
    keys.sort_unstable();
    keys.dedup();
    keys
});

/// Whether every requirement of `reqs` allows some value of the type's labels (see [`allows`]).
pub fn agree(it: &InstanceType, reqs: &Requirements) -> bool {
    reqs.iter().all(|r| allows(it, r))
}

/// Whether `r` allows the type, key by key, by upstream's `Intersects` rule: a value the type
/// has for the key satisfies `r`, or the type has none (no GPU, say) and `r` is satisfied by
/// the label's absence (`DoesNotExist`, `NotIn`: how NodePools keep GPU types out with
/// `instance-gpu-name DoesNotExist`). A key the type is not judged on passes. The zone ID comes
/// from the offerings where the cloud reports it (the AWS provider does; the bundled catalog
/// does not, and an unknown zone ID is not judged, as the launch's offering filter does not).
pub fn allows(it: &InstanceType, r: &Requirement) -> bool {
    let available = || it.offerings.iter().filter(|o| o.available);
    match r.key() {
        // Offerings decide these per launch (a type may be sold in and outside reservations).
        labels::NODEPOOL
        | labels::CAPACITY_RESERVATION_ID
        | labels::CAPACITY_RESERVATION_TYPE
        | labels::CAPACITY_RESERVATION_INTERRUPTIBLE => true,
        labels::ZONE => available().any(|o| r.has(&o.zone)),
        labels::CAPACITY_TYPE => available().any(|o| r.has(o.capacity_type.label())),
        labels::PLACEMENT_GROUP_PARTITION => available().any(|o| match o.partition.as_deref() {
            Some(p) => r.has(p),
            None => r.allows_absence(),
        }),
        labels::ZONE_ID => {
            let label = it.labels.get(labels::ZONE_ID).map(String::as_str);
            available().any(|o| o.zone_id.as_deref().or(label).is_none_or(|id| r.has(id)))
        }
        key if JUDGED.binary_search(&key).is_ok() => match it.labels.get(key) {
            Some(value) => r.has(value),
            None => r.allows_absence(),
        },
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::sync::Arc;

    use super::*;
    use crate::apis::ec2nodeclass::AMIFamily;
    use crate::apis::nodeclaim::Operator;
    use crate::catalog::Catalog;
    use crate::scheduling::instance_type::{CapacityType, NodeClassSettings, Offering};

    /// The type's label sets as the solver built them before: what [`allows`] must agree with.
    fn materialized(it: &InstanceType) -> Requirements {
        let mut reqs = Requirements::new();
        for key in labels::WELL_KNOWN_LABELS
            .iter()
            .chain(labels::AWS_WELL_KNOWN_LABELS)
        {
            if [
                labels::ZONE,
                labels::CAPACITY_TYPE,
                labels::NODEPOOL,
                labels::CAPACITY_RESERVATION_ID,
                labels::CAPACITY_RESERVATION_TYPE,
                labels::CAPACITY_RESERVATION_INTERRUPTIBLE,
                labels::PLACEMENT_GROUP_PARTITION,
            ]
            .contains(key)
            {
                continue;
            }
            reqs.add_requirement(match it.labels.get(key) {
                Some(v) => Requirement::new(key, Operator::In, [v.as_str()], None),
                None => Requirement::new(key, Operator::DoesNotExist, [""; 0], None),
            });
        }
        let available: Vec<&Offering> = it.offerings.iter().filter(|o| o.available).collect();
        let values = |f: &dyn Fn(&Offering) -> Option<&str>| -> Vec<String> {
            let set: BTreeSet<&str> = available.iter().filter_map(|o| f(o)).collect();
            set.into_iter().map(str::to_string).collect()
        };
        reqs.add_requirement(Requirement::new(
            labels::ZONE,
            Operator::In,
            values(&|o| Some(&o.zone)),
            None,
        ));
        let ids = values(&|o| o.zone_id.as_deref());
        if !ids.is_empty() {
            reqs.add_requirement(Requirement::new(labels::ZONE_ID, Operator::In, ids, None));
        }
        reqs.add_requirement(Requirement::new(
            labels::CAPACITY_TYPE,
            Operator::In,
            values(&|o| Some(o.capacity_type.label())),
            None,
        ));
        let partitions = values(&|o| o.partition.as_deref());
        let operator = if partitions.is_empty() {
            Operator::DoesNotExist
        } else {
            Operator::In
        };
        reqs.add_requirement(Requirement::new(
            labels::PLACEMENT_GROUP_PARTITION,
            operator,
            partitions,
            None,
        ));
        reqs
    }

    /// Requirements on every judged key and a few others, with each operator, over values the
    /// types have and values none has.
    fn probes(types: &[InstanceType]) -> Vec<Requirement> {
        let mut keys: Vec<&str> = JUDGED.clone();
        keys.extend([labels::HOSTNAME, "example.com/team"]);
        let mut out = Vec::new();
        for key in keys {
            let mut seen: BTreeSet<String> = types
                .iter()
                .filter_map(|it| it.labels.get(key).cloned())
                .collect();
            for it in types {
                for o in &it.offerings {
                    let value = match key {
                        labels::ZONE => Some(&*o.zone),
                        labels::ZONE_ID => o.zone_id.as_deref(),
                        labels::CAPACITY_TYPE => Some(o.capacity_type.label()),
                        labels::PLACEMENT_GROUP_PARTITION => o.partition.as_deref(),
                        _ => None,
                    };
                    seen.extend(value.map(str::to_string));
                }
            }
            let values: Vec<&str> = seen.iter().map(String::as_str).take(4).collect();
            for v in values.iter().copied().chain(["none-has-this", "3"]) {
                for op in [Operator::In, Operator::NotIn, Operator::Gt, Operator::Lt] {
                    out.push(Requirement::new(key, op, [v], None));
                }
            }
            out.push(Requirement::new(key, Operator::In, values.clone(), None));
            out.push(Requirement::new(key, Operator::NotIn, values, None));
            out.push(Requirement::new(key, Operator::Exists, [""; 0], None));
            out.push(Requirement::new(key, Operator::DoesNotExist, [""; 0], None));
        }
        out
    }

    #[test]
    fn every_catalog_type_answers_as_its_materialized_requirements_did() {
        let catalog = Catalog::bundled("us-east-1").expect("bundled catalog");
        let mut types = catalog.instance_types(&NodeClassSettings::for_family(AMIFamily::AL2023));
        // Offerings out of capacity, zone IDs narrowing a labelled type, partitions.
        types[0].offerings[0].available = false;
        types[1].labels.insert(labels::ZONE_ID, "use1-az1".into());
        types[2].labels.insert(labels::ZONE_ID, "use1-az9".into());
        for it in &mut types[3..5] {
            for (k, o) in it.offerings.iter_mut().enumerate() {
                o.partition = Some(Arc::from(format!("{}", k % 2 + 1)));
            }
        }
        types[5]
            .offerings
            .iter_mut()
            .for_each(|o| o.available = o.capacity_type == CapacityType::Spot);
        let probes = probes(&types);
        for it in &types {
            let reqs = materialized(it);
            // Zone IDs are judged from the offerings: see `zone_ids_are_judged_by_the_offerings`.
            for r in probes.iter().filter(|r| r.key() != labels::ZONE_ID) {
                let expected = reqs.get(r.key()).is_none_or(|t| t.coexists_with(r));
                assert_eq!(allows(it, r), expected, "{} against {r}", it.name);
            }
        }
    }

    fn requirement(key: &str, op: Operator, values: &[&str]) -> Requirement {
        Requirement::new(key, op, values.iter().copied(), None)
    }

    /// `instance-gpu-name DoesNotExist` (or `NotIn [...]`) is how NodePools keep GPU types out;
    /// a type without a GPU passes it, as upstream's `Intersects` lets it, rather than every
    /// type being refused.
    #[test]
    fn a_type_without_a_label_passes_what_the_labels_absence_satisfies() {
        let catalog = Catalog::bundled("us-east-1").expect("bundled catalog");
        let types = catalog.instance_types(&NodeClassSettings::for_family(AMIFamily::AL2023));
        let find = |name: &str| {
            types
                .iter()
                .find(|it| it.name.as_ref() == name)
                .unwrap_or_else(|| panic!("{name} in the catalog"))
        };
        let (cpu, gpu) = (find("m5.large"), find("g4dn.xlarge"));
        let gpu_name = labels::INSTANCE_GPU_NAME;
        let gpu_label = gpu
            .labels
            .get(gpu_name)
            .expect("g4dn has a GPU name")
            .clone();
        for (r, on_cpu, on_gpu) in [
            (
                requirement(gpu_name, Operator::DoesNotExist, &[]),
                true,
                false,
            ),
            (
                requirement(gpu_name, Operator::NotIn, &[&gpu_label]),
                true,
                false,
            ),
            (
                requirement(gpu_name, Operator::NotIn, &["a100"]),
                true,
                true,
            ),
            (requirement(gpu_name, Operator::Exists, &[]), false, true),
            (
                requirement(gpu_name, Operator::In, &[&gpu_label]),
                false,
                true,
            ),
        ] {
            assert_eq!(allows(cpu, &r), on_cpu, "m5.large against {r}");
            assert_eq!(allows(gpu, &r), on_gpu, "g4dn.xlarge against {r}");
        }
    }

    /// Offerings carry their zone ID (the bundled catalog's and the AWS provider's); a
    /// requirement on `topology.k8s.aws/zone-id` is met by an available offering in one of its
    /// IDs. An offering whose zone ID is unknown is not judged on it.
    #[test]
    fn zone_ids_are_judged_by_the_offerings() {
        let catalog = Catalog::bundled("us-east-1").expect("bundled catalog");
        let mut types = catalog.instance_types(&NodeClassSettings::for_family(AMIFamily::AL2023));
        let in_az = |id: &str| requirement(labels::ZONE_ID, Operator::In, &[id]);
        let it = &mut types[0];
        let id = it.offerings[0]
            .zone_id
            .clone()
            .expect("the catalog knows zone IDs");
        assert!(allows(it, &in_az(&id)));
        assert!(!allows(it, &in_az("use1-az-none")));
        assert!(allows(
            it,
            &requirement(labels::ZONE_ID, Operator::NotIn, &["use1-az-none"])
        ));
        for o in it
            .offerings
            .iter_mut()
            .filter(|o| o.zone_id.as_deref() == Some(&*id))
        {
            o.available = false;
        }
        assert!(!allows(it, &in_az(&id)), "no available offering there");
        for o in &mut it.offerings {
            o.zone_id = None;
        }
        assert!(allows(it, &in_az("use1-az-none")), "unknown zone IDs");
    }
}
