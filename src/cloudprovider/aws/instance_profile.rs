//! The IAM instance profile nodes launch with: `spec.instanceProfile` as given, or for
//! `spec.role` one Karpenter manages, as upstream v1.14.1 does: each managed profile gets a name
//! of its own (`<cluster>_<hash of region, class and a random nonce>`) under the IAM path
//! `/karpenter/<region>/<cluster>/<class UID>/`, holds the role, and is tagged as the cluster's.
//!
//! A role change does not swap the role of the profile in use (instances being launched with it
//! would lose their permissions mid-boot): a new profile is made for the new role and the class'
//! status names it, so launches from then on use it; the old one stays, protected from garbage
//! collection for [`PROTECTED_PROFILE_TTL`], until no class names it and no NodeClaim was
//! launched with it (`karpenter.k8s.aws/instance-profile-name`).
//!
//! A profile of the class that already holds the role is used again instead of making another:
//! its IAM path finds it after a status write that failed or a restart, without state of our own
//! (upstream remembers it a minute in memory).
//!
//! Profiles earlier versions of this controller made (`<cluster>_<hash of region and class>`,
//! no path) keep serving the classes whose status names them, as long as they hold the role.

use std::collections::BTreeMap;

use crate::apis::EC2NodeClass;
use crate::apis::hash::fnv1a;
use crate::apis::labels;
use crate::cloudprovider::CloudError;

use super::lookup_cache::{INSTANCE_PROFILE_TTL, LookupCache, PROTECTED_PROFILE_TTL};
use super::sdk_error;
use super::tags;

/// The name earlier versions gave a class' managed profile (`<cluster>_<hash of region and
/// class>`); garbage collection keeps it while its class exists.
pub fn legacy_name(cluster: &str, region: &str, nodeclass: &str) -> String {
    let hash = fnv1a(format!("{region}/{nodeclass}").as_bytes());
    let mut name = format!("{cluster}_{hash}");
    name.truncate(128);
    name
}

/// A fresh name for a class' managed profile: `<cluster>_<hash of region, class and a random
/// nonce>` (IAM allows 128 characters), so a role change gets a profile of its own.
fn new_name(cluster: &str, region: &str, nodeclass: &str) -> String {
    use std::hash::{BuildHasher, Hasher};
    // The standard library seeds every `RandomState` at random: no extra dependency.
    let mut nonce = std::collections::hash_map::RandomState::new().build_hasher();
    nonce.write(nodeclass.as_bytes());
    let hash = fnv1a(format!("{region}{nodeclass}{:016x}", nonce.finish()).as_bytes());
    let mut name = format!("{cluster}_{hash}");
    name.truncate(128);
    name
}

/// The IAM path of the profiles managed for the cluster: `/karpenter/<region>/<cluster>/`.
pub fn cluster_path(region: &str, cluster: &str) -> String {
    format!("/karpenter/{region}/{cluster}/")
}

/// The IAM path of one class' managed profiles: `/karpenter/<region>/<cluster>/<class UID>/`
/// (the UID, so a class deleted and made again under its name starts afresh).
pub fn class_path(region: &str, cluster: &str, uid: &str) -> String {
    format!("{}{uid}/", cluster_path(region, cluster))
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

/// The instance profile a node class launches with, making a managed one when the class has
/// none holding its role. What IAM said about a profile is kept for [`INSTANCE_PROFILE_TTL`], so
/// a class resolved every minute reads its profile four times an hour.
pub async fn ensure(
    iam: &aws_sdk_iam::Client,
    cache: &LookupCache,
    cluster: &str,
    region: &str,
    nodeclass: &EC2NodeClass,
) -> Result<String, CloudError> {
    let current = nodeclass
        .status
        .as_ref()
        .and_then(|s| s.instance_profile.clone())
        .filter(|p| !p.is_empty());
    if let Some(profile) = &nodeclass.spec.instance_profile {
        // A class that used to have a managed profile (upstream lets `spec.role` give way to
        // `spec.instanceProfile`): its nodes keep theirs for the protection window.
        if let Some(old) = current.as_ref().filter(|old| *old != profile) {
            protect(cache, old);
        }
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
    let uid = nodeclass
        .metadata
        .uid
        .as_deref()
        .filter(|u| !u.is_empty())
        .ok_or_else(|| {
            CloudError::Invalid(format!(
                "EC2NodeClass {class} has no metadata.uid: its managed instance profile lives under an IAM path named after it; apply the class through the API server"
            ))
        })?;
    if let Some(current) = &current
        && cached_roles(iam, cache, current)
            .await?
            .is_some_and(|roles| roles.iter().any(|r| r == role))
    {
        return Ok(current.clone());
    }
    let path = class_path(region, cluster, uid);
    let name = match list_under(iam, &path)
        .await?
        .into_iter()
        .filter(|p| p.roles.iter().any(|r| r == role))
        .max_by_key(|p| p.created)
    {
        Some(existing) => existing.name,
        None => create(iam, cluster, region, class, &path, role, nodeclass).await?,
    };
    cache
        .instance_profiles
        .insert(name.clone(), vec![role.to_string()], INSTANCE_PROFILE_TTL);
    // Launches may be on their way with the old profile, and garbage collection may run before
    // the class' new status is seen: both stay for the window.
    if let Some(old) = &current {
        protect(cache, old);
    }
    protect(cache, &name);
    Ok(name)
}

/// Keeps `name` from garbage collection for [`PROTECTED_PROFILE_TTL`].
fn protect(cache: &LookupCache, name: &str) {
    cache
        .protected_profiles
        .insert(name.to_string(), (), PROTECTED_PROFILE_TTL);
}

/// Makes a managed profile for `class` under `path` holding `role`. A role IAM does not know
/// leaves no empty profile behind (the class is resolved again every period, and would
/// otherwise leave one each time).
async fn create(
    iam: &aws_sdk_iam::Client,
    cluster: &str,
    region: &str,
    class: &str,
    path: &str,
    role: &str,
    nodeclass: &EC2NodeClass,
) -> Result<String, CloudError> {
    let name = new_name(cluster, region, class);
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
    iam.create_instance_profile()
        .instance_profile_name(&name)
        .path(path)
        .set_tags(Some(tag_list))
        .send()
        .await
        .map_err(|e| sdk_error("iam:CreateInstanceProfile", e))?;
    match iam
        .add_role_to_instance_profile()
        .instance_profile_name(&name)
        .role_name(role)
        .send()
        .await
    {
        Ok(_) => Ok(name),
        Err(e)
            if e.as_service_error()
                .is_some_and(|s| s.is_no_such_entity_exception()) =>
        {
            iam.delete_instance_profile()
                .instance_profile_name(&name)
                .send()
                .await
                .map_err(|e| sdk_error("iam:DeleteInstanceProfile", e))?;
            Err(CloudError::NodeClassNotReady(format!(
                "spec.role: IAM role {role} does not exist"
            )))
        }
        Err(e) => Err(sdk_error("iam:AddRoleToInstanceProfile", e)),
    }
}

/// A profile under a managed path, as ListInstanceProfiles reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListedProfile {
    /// Its name.
    pub name: String,
    /// The roles it holds.
    pub roles: Vec<String>,
    /// When IAM created it.
    pub created: Option<chrono::DateTime<chrono::Utc>>,
}

fn created_at(
    profile: &aws_sdk_iam::types::InstanceProfile,
) -> Option<chrono::DateTime<chrono::Utc>> {
    chrono::DateTime::from_timestamp(
        profile.create_date().secs(),
        profile.create_date().subsec_nanos(),
    )
}

/// The profiles under IAM path `path` (the path is also checked here: not every IAM
/// implementation honours `PathPrefix`).
pub async fn list_under(
    iam: &aws_sdk_iam::Client,
    path: &str,
) -> Result<Vec<ListedProfile>, CloudError> {
    let mut pages = iam
        .list_instance_profiles()
        .path_prefix(path)
        .into_paginator()
        .send();
    let mut out = Vec::new();
    while let Some(page) = pages.next().await {
        let page = page.map_err(|e| sdk_error("iam:ListInstanceProfiles", e))?;
        out.extend(
            page.instance_profiles()
                .iter()
                .filter(|p| p.path().starts_with(path))
                .map(|p| ListedProfile {
                    name: p.instance_profile_name().to_string(),
                    roles: role_names(p),
                    created: created_at(p),
                }),
        );
    }
    Ok(out)
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
                    created: created_at(p),
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
    fn each_managed_profile_gets_a_name_of_its_own_under_its_class_path() {
        let a = new_name("demo", "us-east-1", "default");
        let b = new_name("demo", "us-east-1", "default");
        assert!(a.starts_with("demo_") && b.starts_with("demo_"), "{a} {b}");
        assert_ne!(a, b, "a role change gets a new profile");
        assert_ne!(a, legacy_name("demo", "us-east-1", "default"));
        assert_eq!(
            legacy_name("demo", "us-east-1", "default"),
            legacy_name("demo", "us-east-1", "default")
        );
        assert_eq!(
            new_name(&"c".repeat(200), "us-east-1", "default").len(),
            128
        );
        assert_eq!(
            class_path("us-east-1", "demo", "0d5c-uid"),
            "/karpenter/us-east-1/demo/0d5c-uid/"
        );
        assert!(
            class_path("us-east-1", "demo", "u").starts_with(&cluster_path("us-east-1", "demo"))
        );
        assert_eq!(
            role_name("arn:aws:iam::123456789012:role/path/KarpenterNode"),
            "KarpenterNode"
        );
        assert_eq!(role_name("KarpenterNode"), "KarpenterNode");
    }
}
