//! Placement groups: `spec.placementGroupSelector` (a name or an ID) resolved with
//! DescribePlacementGroups, as upstream: only an `available` group counts, and the result is
//! kept in memory by the provider (the EC2NodeClass status has no field for it in v1.14.1), read
//! by the launch (the launch template's `Placement`) and by the instance types (the
//! `karpenter.k8s.aws/placement-group-id` label).

use aws_sdk_ec2::error::ProvideErrorMetadata;
use aws_sdk_ec2::types::PlacementStrategy;

use crate::apis::ec2nodeclass::PlacementGroupSelector;
use crate::cloudprovider::CloudError;

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
/// pending or being deleted).
pub async fn resolve(
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

/// How a selector reads in messages: `name "x"` or `ID pg-...`.
pub fn describe(selector: &PlacementGroupSelector) -> String {
    match (&selector.id, &selector.name) {
        (Some(id), _) => format!("ID {id}"),
        (None, Some(name)) => format!("name {name:?}"),
        (None, None) => "nothing".into(),
    }
}
