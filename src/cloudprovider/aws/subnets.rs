//! Subnet selection: `spec.subnetSelectorTerms` (tags with `*` wildcards, or IDs) resolved with
//! DescribeSubnets. The result is ordered so that the first subnet of each zone is the one with
//! the most free addresses: a launch into that zone uses it.
//!
//! Terms are alternatives (a subnet matching any term is selected); the filters inside one term
//! must all match, which is exactly how EC2 combines filters in one call, so each term is one
//! call.

use std::collections::BTreeMap;

use aws_sdk_ec2::types::Filter;

use crate::apis::ec2nodeclass::{Subnet, SubnetSelectorTerm};
use crate::cloudprovider::CloudError;

use super::lookup_cache::{DEFAULT_TTL, LookupCache, terms_key};
use super::sdk_error;
use super::tags::{filter, selector_filters};

/// A selected subnet with what launch placement needs to know.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubnetInfo {
    /// Subnet ID.
    pub id: String,
    /// Zone name.
    pub zone: String,
    /// Zone ID.
    pub zone_id: Option<String>,
    /// Free IPv4 addresses; launches prefer the emptiest subnet of a zone.
    pub available_ips: i64,
}

impl SubnetInfo {
    /// The status entry.
    pub fn status(&self) -> Subnet {
        Subnet {
            id: self.id.clone(),
            zone: self.zone.clone(),
            zone_id: self.zone_id.clone(),
        }
    }
}

/// The EC2 filters of one selector term.
pub fn term_filters(term: &SubnetSelectorTerm) -> Vec<Filter> {
    let mut out = Vec::new();
    if let Some(id) = &term.id {
        out.push(filter("subnet-id", [id.as_str()]));
    }
    out.extend(selector_filters(
        term.tags.as_ref().unwrap_or(&BTreeMap::new()),
    ));
    out
}

/// The subnets the terms select, sorted by zone then most free addresses first; the same terms
/// are looked up once per [`DEFAULT_TTL`] (upstream's subnet cache, free addresses included).
pub async fn resolve(
    ec2: &aws_sdk_ec2::Client,
    cache: &LookupCache,
    terms: &[SubnetSelectorTerm],
) -> Result<Vec<SubnetInfo>, CloudError> {
    let key = terms_key(&terms);
    if let Some(found) = cache.subnets.get(&key) {
        return Ok(found);
    }
    let found = describe(ec2, terms).await?;
    cache.subnets.insert(key, found.clone(), DEFAULT_TTL);
    Ok(found)
}

async fn describe(
    ec2: &aws_sdk_ec2::Client,
    terms: &[SubnetSelectorTerm],
) -> Result<Vec<SubnetInfo>, CloudError> {
    let mut found: BTreeMap<String, SubnetInfo> = BTreeMap::new();
    for term in terms {
        let mut pages = ec2
            .describe_subnets()
            .set_filters(Some(term_filters(term)))
            .into_paginator()
            .send();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| sdk_error("ec2:DescribeSubnets", e))?;
            for s in page.subnets() {
                let (Some(id), Some(zone)) = (s.subnet_id(), s.availability_zone()) else {
                    continue;
                };
                found.insert(
                    id.to_string(),
                    SubnetInfo {
                        id: id.to_string(),
                        zone: zone.to_string(),
                        zone_id: s.availability_zone_id().map(str::to_string),
                        available_ips: i64::from(s.available_ip_address_count().unwrap_or(0)),
                    },
                );
            }
        }
    }
    let mut out: Vec<SubnetInfo> = found.into_values().collect();
    out.sort_by(|a, b| {
        a.zone
            .cmp(&b.zone)
            .then(b.available_ips.cmp(&a.available_ips))
            .then(a.id.cmp(&b.id))
    });
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_tags_become_filters() {
        let term = SubnetSelectorTerm {
            tags: Some(BTreeMap::from([("tier".to_string(), "*".to_string())])),
            id: None,
        };
        let filters = term_filters(&term);
        let names: Vec<&str> = filters.iter().filter_map(|f| f.name()).collect::<Vec<_>>();
        assert_eq!(names, ["tag-key"]);
        let by_id = SubnetSelectorTerm {
            tags: None,
            id: Some("subnet-1".into()),
        };
        assert_eq!(term_filters(&by_id)[0].values(), ["subnet-1"]);
    }
}
