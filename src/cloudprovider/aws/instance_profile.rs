//! The IAM instance profile nodes launch with: `spec.instanceProfile` as given, or for
//! `spec.role` one Karpenter manages — created on first use with the role added, and the role
//! swapped when the node class names another.
//!
//! The managed profile's name is derived from the cluster, region and node class, so it is found
//! again after a restart without any state of our own.

use std::collections::BTreeMap;

use crate::apis::EC2NodeClass;
use crate::apis::hash::fnv1a;
use crate::apis::labels;
use crate::cloudprovider::CloudError;

use super::lookup_cache::{INSTANCE_PROFILE_TTL, LookupCache};
use super::sdk_error;
use super::tags;

/// The name of the instance profile Karpenter manages for a node class with `spec.role`:
/// `<cluster>_<hash of region and node class>` (IAM allows 128 characters).
pub fn managed_name(cluster: &str, region: &str, nodeclass: &str) -> String {
    let hash = fnv1a(format!("{region}/{nodeclass}").as_bytes());
    let mut name = format!("{cluster}_{hash}");
    name.truncate(128);
    name
}

/// The role name of `spec.role`, which may be given as a name or an ARN with a path.
pub fn role_name(role: &str) -> &str {
    role.rsplit('/').next().unwrap_or(role)
}

fn iam_tag(key: &str, value: &str) -> Result<aws_sdk_iam::types::Tag, CloudError> {
    aws_sdk_iam::types::Tag::builder()
        .key(key)
        .value(value)
        .build()
        .map_err(|e| CloudError::Invalid(format!("instance profile tag {key}: {e}")))
}

/// Instance profile `name` (GetInstanceProfile, which carries its roles and tags), `None` when
/// IAM has no such profile.
async fn get(
    iam: &aws_sdk_iam::Client,
    name: &str,
) -> Result<Option<aws_sdk_iam::types::InstanceProfile>, CloudError> {
    match iam
        .get_instance_profile()
        .instance_profile_name(name)
        .send()
        .await
    {
        Ok(out) => Ok(out.instance_profile().cloned()),
        Err(e)
            if e.as_service_error()
                .is_some_and(|s| s.is_no_such_entity_exception()) =>
        {
            Ok(None)
        }
        Err(e) => Err(sdk_error("iam:GetInstanceProfile", e)),
    }
}

fn role_names(profile: &aws_sdk_iam::types::InstanceProfile) -> Vec<String> {
    profile
        .roles()
        .iter()
        .map(|r| r.role_name().to_string())
        .collect()
}

/// The roles of instance profile `name` through the cache (upstream's instance profile cache:
/// [`INSTANCE_PROFILE_TTL`] by name); `None` when IAM has no such profile (not remembered).
async fn cached_roles(
    iam: &aws_sdk_iam::Client,
    cache: &LookupCache,
    name: &str,
) -> Result<Option<Vec<String>>, CloudError> {
    if let Some(roles) = cache.instance_profiles.get(&name.to_string()) {
        return Ok(Some(roles));
    }
    let Some(profile) = get(iam, name).await? else {
        return Ok(None);
    };
    let roles = role_names(&profile);
    cache
        .instance_profiles
        .insert(name.to_string(), roles.clone(), INSTANCE_PROFILE_TTL);
    Ok(Some(roles))
}

/// The instance profile a node class launches with, creating or fixing the managed one. What
/// IAM said about a profile is kept for [`INSTANCE_PROFILE_TTL`], so a class resolved every
/// minute reads its profile four times an hour.
pub async fn ensure(
    iam: &aws_sdk_iam::Client,
    cache: &LookupCache,
    cluster: &str,
    region: &str,
    nodeclass: &EC2NodeClass,
) -> Result<String, CloudError> {
    if let Some(profile) = &nodeclass.spec.instance_profile {
        return match cached_roles(iam, cache, profile).await? {
            Some(_) => Ok(profile.clone()),
            None => Err(CloudError::NodeClassNotReady(format!(
                "spec.instanceProfile: instance profile {profile} does not exist"
            ))),
        };
    }
    let Some(role) = nodeclass.spec.role.as_deref() else {
        return Err(CloudError::Invalid(
            "set spec.role or spec.instanceProfile".into(),
        ));
    };
    let role = role_name(role);
    let class = nodeclass.metadata.name.as_deref().unwrap_or_default();
    let name = managed_name(cluster, region, class);
    let roles: Vec<String> = match cached_roles(iam, cache, &name).await? {
        Some(roles) => roles,
        None => {
            let mut wanted = BTreeMap::from([
                (tags::cluster_tag_key(cluster), "owned".to_string()),
                (tags::EKS_CLUSTER_NAME.to_string(), cluster.to_string()),
                (labels::EC2NODECLASS.to_string(), class.to_string()),
                (labels::REGION.to_string(), region.to_string()),
            ]);
            for (k, v) in &nodeclass.spec.tags {
                wanted.entry(k.clone()).or_insert_with(|| v.clone());
            }
            let tag_list = wanted
                .iter()
                .map(|(k, v)| iam_tag(k, v))
                .collect::<Result<Vec<_>, _>>()?;
            match iam
                .create_instance_profile()
                .instance_profile_name(&name)
                .set_tags(Some(tag_list))
                .send()
                .await
            {
                Ok(_) => {}
                Err(e)
                    if e.as_service_error()
                        .is_some_and(|s| s.is_entity_already_exists_exception()) => {}
                Err(e) => return Err(sdk_error("iam:CreateInstanceProfile", e)),
            }
            Vec::new()
        }
    };
    if roles.iter().any(|r| r == role) {
        return Ok(name);
    }
    for other in &roles {
        iam.remove_role_from_instance_profile()
            .instance_profile_name(&name)
            .role_name(other)
            .send()
            .await
            .map_err(|e| sdk_error("iam:RemoveRoleFromInstanceProfile", e))?;
    }
    match iam
        .add_role_to_instance_profile()
        .instance_profile_name(&name)
        .role_name(role)
        .send()
        .await
    {
        Ok(_) => {
            cache.instance_profiles.insert(
                name.clone(),
                vec![role.to_string()],
                INSTANCE_PROFILE_TTL,
            );
            Ok(name)
        }
        Err(e)
            if e.as_service_error()
                .is_some_and(|s| s.is_no_such_entity_exception()) =>
        {
            Err(CloudError::NodeClassNotReady(format!(
                "spec.role: IAM role {role} does not exist"
            )))
        }
        Err(e) => Err(sdk_error("iam:AddRoleToInstanceProfile", e)),
    }
}

/// Deletes the instance profile `name` (its roles removed first, as IAM requires) and forgets
/// it; one already gone is fine.
pub async fn delete(
    iam: &aws_sdk_iam::Client,
    cache: &LookupCache,
    name: &str,
) -> Result<(), CloudError> {
    cache.instance_profiles.remove(&name.to_string());
    let profile = match iam
        .get_instance_profile()
        .instance_profile_name(name)
        .send()
        .await
    {
        Ok(out) => out.instance_profile().cloned(),
        Err(e)
            if e.as_service_error()
                .is_some_and(|s| s.is_no_such_entity_exception()) =>
        {
            return Ok(());
        }
        Err(e) => return Err(sdk_error("iam:GetInstanceProfile", e)),
    };
    for role in profile.iter().flat_map(|p| p.roles()) {
        match iam
            .remove_role_from_instance_profile()
            .instance_profile_name(name)
            .role_name(role.role_name())
            .send()
            .await
        {
            Ok(_) => {}
            Err(e)
                if e.as_service_error()
                    .is_some_and(|s| s.is_no_such_entity_exception()) => {}
            Err(e) => return Err(sdk_error("iam:RemoveRoleFromInstanceProfile", e)),
        }
    }
    match iam
        .delete_instance_profile()
        .instance_profile_name(name)
        .send()
        .await
    {
        Ok(_) => Ok(()),
        Err(e)
            if e.as_service_error()
                .is_some_and(|s| s.is_no_such_entity_exception()) =>
        {
            Ok(())
        }
        Err(e) => Err(sdk_error("iam:DeleteInstanceProfile", e)),
    }
}

/// An instance profile this cluster's controller made, as garbage collection sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnedProfile {
    /// Its name.
    pub name: String,
    /// When IAM created it.
    pub created: Option<chrono::DateTime<chrono::Utc>>,
}

/// The instance profiles named like the managed ones of `cluster` (`<cluster>_…`) and tagged as
/// its own (`kubernetes.io/cluster/<cluster>=owned` and `eks:eks-cluster-name=<cluster>`, as
/// [`ensure`] tags them): those garbage collection may delete, never one a user made.
pub async fn list_owned(
    iam: &aws_sdk_iam::Client,
    cluster: &str,
) -> Result<Vec<OwnedProfile>, CloudError> {
    let prefix = format!("{cluster}_");
    let mut pages = iam.list_instance_profiles().into_paginator().send();
    let mut candidates = Vec::new();
    while let Some(page) = pages.next().await {
        let page = page.map_err(|e| sdk_error("iam:ListInstanceProfiles", e))?;
        candidates.extend(
            page.instance_profiles()
                .iter()
                .filter(|p| p.instance_profile_name().starts_with(&prefix))
                .map(|p| OwnedProfile {
                    name: p.instance_profile_name().to_string(),
                    created: chrono::DateTime::from_timestamp(
                        p.create_date().secs(),
                        p.create_date().subsec_nanos(),
                    ),
                }),
        );
    }
    let mut owned = Vec::new();
    for profile in candidates {
        // GetInstanceProfile carries the tags (ListInstanceProfiles does not).
        let found = get(iam, &profile.name).await?;
        let tag = |key: &str| {
            found
                .iter()
                .flat_map(|p| p.tags())
                .find(|t| t.key() == key)
                .map(|t| t.value().to_string())
        };
        if tag(&tags::cluster_tag_key(cluster)).as_deref() == Some("owned")
            && tag(tags::EKS_CLUSTER_NAME).as_deref() == Some(cluster)
        {
            owned.push(profile);
        }
    }
    Ok(owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn managed_names_are_stable_and_differ_per_node_class() {
        let a = managed_name("demo", "us-east-1", "default");
        assert_eq!(a, managed_name("demo", "us-east-1", "default"));
        assert!(a.starts_with("demo_"));
        assert_ne!(a, managed_name("demo", "us-east-1", "gpu"));
        assert_ne!(a, managed_name("demo", "us-west-2", "default"));
        assert_eq!(
            role_name("arn:aws:iam::123456789012:role/path/KarpenterNode"),
            "KarpenterNode"
        );
        assert_eq!(role_name("KarpenterNode"), "KarpenterNode");
    }
}
