//! Security group selection: `spec.securityGroupSelectorTerms` (tags with `*` wildcards, IDs or
//! names) resolved with DescribeSecurityGroups, one call per term (terms are alternatives).

use std::collections::BTreeMap;

use aws_sdk_ec2::types::Filter;

use crate::apis::ec2nodeclass::{SecurityGroup, SecurityGroupSelectorTerm};
use crate::cloudprovider::CloudError;

use super::lookup_cache::{DEFAULT_TTL, LookupCache, terms_key};
use super::sdk_error;
use super::tags::{filter, selector_filters};

/// The EC2 filters of one selector term.
pub fn term_filters(term: &SecurityGroupSelectorTerm) -> Vec<Filter> {
    let mut out = Vec::new();
    if let Some(id) = &term.id {
        out.push(filter("group-id", [id.as_str()]));
    }
    if let Some(name) = &term.name {
        out.push(filter("group-name", [name.as_str()]));
    }
    out.extend(selector_filters(
        term.tags.as_ref().unwrap_or(&BTreeMap::new()),
    ));
    out
}

/// The security groups the terms select, sorted by ID; the same terms are looked up once per
/// [`DEFAULT_TTL`] (upstream's security group cache).
pub async fn resolve(
    ec2: &aws_sdk_ec2::Client,
    cache: &LookupCache,
    terms: &[SecurityGroupSelectorTerm],
) -> Result<Vec<SecurityGroup>, CloudError> {
    let key = terms_key(&terms);
    if let Some(found) = cache.security_groups.get(&key) {
        return Ok(found);
    }
    let found = describe(ec2, terms).await?;
    cache
        .security_groups
        .insert(key, found.clone(), DEFAULT_TTL);
    Ok(found)
}

async fn describe(
    ec2: &aws_sdk_ec2::Client,
    terms: &[SecurityGroupSelectorTerm],
) -> Result<Vec<SecurityGroup>, CloudError> {
    let mut found: BTreeMap<String, SecurityGroup> = BTreeMap::new();
    for term in terms {
        let mut pages = ec2
            .describe_security_groups()
            .set_filters(Some(term_filters(term)))
            .into_paginator()
            .send();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| sdk_error("ec2:DescribeSecurityGroups", e))?;
            for g in page.security_groups() {
                if let Some(id) = g.group_id() {
                    found.insert(
                        id.to_string(),
                        SecurityGroup {
                            id: id.to_string(),
                            name: g.group_name().map(str::to_string),
                        },
                    );
                }
            }
        }
    }
    Ok(found.into_values().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_ids_and_tags_become_filters() {
        let term = SecurityGroupSelectorTerm {
            tags: Some(BTreeMap::from([(
                "karpenter.sh/discovery".to_string(),
                "demo".to_string(),
            )])),
            id: None,
            name: Some("nodes".into()),
        };
        let filters = term_filters(&term);
        let shown: Vec<(&str, &[String])> = filters
            .iter()
            .map(|f| (f.name().unwrap_or_default(), f.values()))
            .collect();
        assert_eq!(
            shown,
            [
                ("group-name", &["nodes".to_string()][..]),
                ("tag:karpenter.sh/discovery", &["demo".to_string()][..]),
            ]
        );
    }
}
