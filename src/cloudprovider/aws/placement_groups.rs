//! Placement groups: `spec.placementGroupSelector` (a name or an ID) resolved with
//! DescribePlacementGroups, as upstream: only an `available` group counts, and the result is
//! kept in memory by the provider (the EC2NodeClass status has no field for it in v1.14.1), read
//! by the launch (the launch template's `Placement`) and by the instance types (the
//! `karpenter.k8s.aws/placement-group-id` label).

use std::sync::Arc;

use aws_sdk_ec2::error::ProvideErrorMetadata;
use aws_sdk_ec2::types::PlacementStrategy;

use crate::apis::ec2nodeclass::PlacementGroupSelector;
use crate::apis::labels;
use crate::cloudprovider::CloudError;
use crate::scheduling::instance_type::{InstanceType, Offering};
use crate::scheduling::requirements::Requirements;

use super::lookup_cache::{DEFAULT_TTL, LookupCache, terms_key};
use super::sdk_error;
use super::tags::filter;

/// A resolved placement group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlacementGroup {
    /// `pg-...`: what launches target and nodes are labelled with (IDs never change; names can
    /// be reused after a group is deleted).
    pub id: String,
    /// The group's name.
    pub name: String,
    /// `cluster`, `partition` or `spread`.
    pub strategy: String,
    /// Partitions of a `partition` group (0 otherwise).
    pub partition_count: i32,
}

/// EC2's answer when a named group does not exist (it fails the call instead of returning none).
const UNKNOWN_GROUP: &str = "InvalidPlacementGroup.Unknown";

/// The available placement group `selector` names, or `None` when there is none (unknown,
/// pending or being deleted). A group found is remembered for [`DEFAULT_TTL`], one not found is
/// looked for again next time (upstream's placement group cache).
pub async fn resolve(
    ec2: &aws_sdk_ec2::Client,
    cache: &LookupCache,
    selector: &PlacementGroupSelector,
) -> Result<Option<PlacementGroup>, CloudError> {
    let key = terms_key(selector);
    if let Some(found) = cache.placement_groups.get(&key) {
        return Ok(Some(found));
    }
    let found = describe_group(ec2, selector).await?;
    match &found {
        Some(group) => cache
            .placement_groups
            .insert(key, group.clone(), DEFAULT_TTL),
        None => cache.placement_groups.remove(&key),
    }
    Ok(found)
}

async fn describe_group(
    ec2: &aws_sdk_ec2::Client,
    selector: &PlacementGroupSelector,
) -> Result<Option<PlacementGroup>, CloudError> {
    let request = ec2
        .describe_placement_groups()
        .filters(filter("state", ["available"]))
        .set_group_ids(selector.id.clone().map(|id| vec![id]))
        .set_group_names(
            selector
                .id
                .is_none()
                .then(|| selector.name.clone().map(|n| vec![n]))
                .flatten(),
        );
    let out = match request.send().await {
        Ok(out) => out,
        Err(e) if e.code() == Some(UNKNOWN_GROUP) => return Ok(None),
        Err(e) => return Err(sdk_error("ec2:DescribePlacementGroups", e)),
    };
    Ok(out.placement_groups().iter().find_map(|g| {
        Some(PlacementGroup {
            id: g.group_id()?.to_string(),
            name: g.group_name().unwrap_or_default().to_string(),
            strategy: g
                .strategy()
                .map(|s| s.as_str().to_string())
                .unwrap_or_default(),
            partition_count: if g.strategy() == Some(&PlacementStrategy::Partition) {
                g.partition_count().unwrap_or(0)
            } else {
                0
            },
        })
    }))
}

/// In a partition group, every offering of `types` once per partition (`1` to the group's
/// count), as upstream: requirements and topology spread on
/// `karpenter.k8s.aws/placement-group-partition` then pick partitions like zones. Reserved
/// offerings too (upstream expands them after adding them): each partition's copy names the same
/// reservation, whose count the scheduler keeps per reservation. Offerings that already name a
/// partition stay as they are, so reserved offerings added later are expanded by a second call;
/// other groups' offerings stay as they are.
pub fn offer_partitions(types: &mut [InstanceType], group: &PlacementGroup) {
    if group.strategy != PlacementStrategy::Partition.as_str() || group.partition_count < 1 {
        return;
    }
    let partitions: Vec<Arc<str>> = (1..=group.partition_count)
        .map(|p| Arc::from(p.to_string()))
        .collect();
    for it in types {
        if it.offerings.iter().all(|o| o.partition.is_some()) {
            continue;
        }
        it.offerings = it
            .offerings
            .iter()
            .flat_map(|o| {
                let copies: Vec<Offering> = match o.partition {
                    Some(_) => vec![o.clone()],
                    None => partitions
                        .iter()
                        .map(|p| Offering {
                            partition: Some(p.clone()),
                            ..o.clone()
                        })
                        .collect(),
                };
                copies
            })
            .collect();
    }
}

/// The partition of `group` a NodeClaim with `reqs` must launch into: `None` when its
/// requirements allow every partition (or the group has none), so EC2 spreads the instances;
/// else the lowest partition they allow. An error when they allow none of the group's.
pub fn required_partition(
    group: &PlacementGroup,
    reqs: &Requirements,
) -> Result<Option<i32>, String> {
    let Some(required) = reqs.get(labels::PLACEMENT_GROUP_PARTITION) else {
        return Ok(None);
    };
    if group.strategy != PlacementStrategy::Partition.as_str() || group.partition_count < 1 {
        return Err(format!(
            "it requires {} but placement group {} is not a partition group; drop the requirement or select a partition group",
            labels::PLACEMENT_GROUP_PARTITION,
            group.name
        ));
    }
    let allowed: Vec<i32> = (1..=group.partition_count)
        .filter(|p| required.has(&p.to_string()))
        .collect();
    match allowed.first() {
        None => Err(format!(
            "it requires a {} the placement group {} does not have (its partitions are 1 to {})",
            labels::PLACEMENT_GROUP_PARTITION,
            group.name,
            group.partition_count
        )),
        Some(_) if allowed.len() == usize::try_from(group.partition_count).unwrap_or(0) => Ok(None),
        Some(first) => Ok(Some(*first)),
    }
}

/// How a selector reads in messages: `name "x"` or `ID pg-...`.
pub fn describe(selector: &PlacementGroupSelector) -> String {
    match (&selector.id, &selector.name) {
        (Some(id), _) => format!("ID {id}"),
        (None, Some(name)) => format!("name {name:?}"),
        (None, None) => "nothing".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apis::nodeclaim::Operator;
    use crate::scheduling::requirements::Requirement;

    fn group(strategy: &str, partition_count: i32) -> PlacementGroup {
        PlacementGroup {
            id: "pg-1".into(),
            name: "kafka".into(),
            strategy: strategy.into(),
            partition_count,
        }
    }

    fn requiring(operator: Operator, values: &[&str]) -> Requirements {
        let mut reqs = Requirements::new();
        reqs.add_requirement(Requirement::new(
            labels::PLACEMENT_GROUP_PARTITION,
            operator,
            values.iter().copied(),
            None,
        ));
        reqs
    }

    #[test]
    fn reserved_offerings_are_offered_in_every_partition_too() {
        use crate::apis::ec2nodeclass::AMIFamily;
        use crate::scheduling::instance_type::{
            CapacityType, NodeClassSettings, ReservedCapacity, add_reserved_offerings,
        };
        let catalog = crate::catalog::Catalog::bundled("us-east-1").expect("catalog");
        let m5 = || -> Vec<InstanceType> {
            catalog
                .instance_types(&NodeClassSettings::for_family(AMIFamily::AL2023))
                .into_iter()
                .filter(|it| &*it.name == "m5.large")
                .collect()
        };
        let mut types = m5();
        let pools = types[0].offerings.len();
        let kafka = group("partition", 3);
        offer_partitions(&mut types, &kafka);
        assert_eq!(types[0].offerings.len(), pools * 3);
        add_reserved_offerings(
            &mut types,
            &[ReservedCapacity {
                id: "cr-1".into(),
                instance_type: "m5.large".into(),
                zone: "us-east-1a".into(),
                reservation_type: "default".into(),
                available: 2,
                interruptible: false,
            }],
        );
        offer_partitions(&mut types, &kafka);
        assert_eq!(
            types[0].offerings.len(),
            pools * 3 + 3,
            "the pools once per partition, not again"
        );
        let reserved: Vec<(Option<&str>, Option<&str>, i64)> = types[0]
            .offerings
            .iter()
            .filter(|o| o.capacity_type == CapacityType::Reserved)
            .map(|o| {
                (
                    o.partition.as_deref(),
                    o.reservation.as_ref().map(|r| &*r.id),
                    o.reservation.as_ref().map_or(0, |r| r.available),
                )
            })
            .collect();
        assert_eq!(
            reserved,
            [
                (Some("1"), Some("cr-1"), 2),
                (Some("2"), Some("cr-1"), 2),
                (Some("3"), Some("cr-1"), 2)
            ],
            "one reservation, offered in each partition"
        );
        // Cluster and spread groups have no partitions.
        let mut plain = m5();
        offer_partitions(&mut plain, &group("cluster", 0));
        assert_eq!(plain[0].offerings.len(), pools);
        assert!(plain[0].offerings.iter().all(|o| o.partition.is_none()));
    }

    #[test]
    fn a_required_partition_is_launched_into_and_an_open_one_left_to_ec2() {
        let kafka = group("partition", 3);
        assert_eq!(required_partition(&kafka, &Requirements::new()), Ok(None));
        assert_eq!(
            required_partition(&kafka, &requiring(Operator::In, &["2"])),
            Ok(Some(2))
        );
        assert_eq!(
            required_partition(&kafka, &requiring(Operator::NotIn, &["1"])),
            Ok(Some(2)),
            "the lowest allowed"
        );
        assert_eq!(
            required_partition(&kafka, &requiring(Operator::Exists, &[])),
            Ok(None),
            "every partition allowed: EC2 spreads"
        );
        let err = required_partition(&kafka, &requiring(Operator::In, &["7"]))
            .expect_err("no partition 7");
        assert!(err.contains("1 to 3"), "{err}");
        let err = required_partition(&group("cluster", 0), &requiring(Operator::In, &["1"]))
            .expect_err("not a partition group");
        assert!(err.contains("not a partition group"), "{err}");
        assert_eq!(
            required_partition(&group("cluster", 0), &Requirements::new()),
            Ok(None)
        );
    }
}
