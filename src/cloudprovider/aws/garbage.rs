//! Which launch templates and managed instance profiles are left over from EC2NodeClasses that
//! are gone, as upstream's EC2NodeClass termination and instance-profile garbage collection
//! decide: a template belongs to the class its `karpenter.k8s.aws/ec2nodeclass` tag names. A
//! managed profile goes once no class names it in its status, no NodeClaim was launched with it
//! and its protection (a role change, [`super::lookup_cache::PROTECTED_PROFILE_TTL`]) is over;
//! one named as earlier versions named them ([`super::instance_profile::legacy_name`]) stays
//! while its class exists. What is younger than [`GRACE`] is left alone — a class created while
//! the collection ran may own it.
//!
//! A live class' templates go too once no launch has used them for [`UNUSED`] (its AMI or
//! configuration changed, so launches use a new one), as upstream deletes a template that drops
//! out of its cache; one the process has not used since it started counts from when the
//! collection first saw it.

use chrono::{DateTime, Utc};

use crate::cloudprovider::NodeClassesInUse;

use super::instance_profile::{OwnedProfile, legacy_name};
use super::launch_templates::OwnedTemplate;

/// Templates and profiles made less than this long ago are never collected.
pub const GRACE: chrono::Duration = chrono::Duration::minutes(5);

fn old_enough(created: Option<DateTime<Utc>>, now: DateTime<Utc>) -> bool {
    created.is_none_or(|c| now.signed_duration_since(c) >= GRACE)
}

/// The templates of node classes nothing uses any more.
pub fn stale_templates<'a>(
    templates: &'a [OwnedTemplate],
    in_use: &NodeClassesInUse,
    now: DateTime<Utc>,
) -> Vec<&'a OwnedTemplate> {
    templates
        .iter()
        .filter(|t| !in_use.nodeclasses.contains(&t.nodeclass) && old_enough(t.created, now))
        .collect()
}

/// A live class' template no launch has used for this long is deleted.
pub const UNUSED: chrono::Duration = chrono::Duration::minutes(30);

/// The templates of classes in use that no launch used for [`UNUSED`] (`last_used`: when a
/// launch last used each, or the collection first saw it).
pub fn unused_templates<'a>(
    templates: &'a [OwnedTemplate],
    in_use: &NodeClassesInUse,
    last_used: &std::collections::HashMap<String, DateTime<Utc>>,
    now: DateTime<Utc>,
) -> Vec<&'a OwnedTemplate> {
    templates
        .iter()
        .filter(|t| {
            in_use.nodeclasses.contains(&t.nodeclass)
                && last_used
                    .get(&t.name)
                    .is_some_and(|used| now.signed_duration_since(*used) >= UNUSED)
        })
        .collect()
}

/// The cluster's own profiles nothing keeps: not named by a class or launched with
/// (`in_use.instance_profiles`), not `protected`, not a live class' profile of an earlier version.
pub fn stale_profiles<'a>(
    profiles: &'a [OwnedProfile],
    in_use: &NodeClassesInUse,
    protected: &std::collections::BTreeSet<String>,
    cluster: &str,
    region: &str,
    now: DateTime<Utc>,
) -> Vec<&'a OwnedProfile> {
    let legacy: std::collections::BTreeSet<String> = in_use
        .nodeclasses
        .iter()
        .map(|c| legacy_name(cluster, region, c))
        .collect();
    profiles
        .iter()
        .filter(|p| {
            !legacy.contains(&p.name)
                && !in_use.instance_profiles.contains(&p.name)
                && !protected.contains(&p.name)
                && old_enough(p.created, now)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn in_use(classes: &[&str], profiles: &[&str]) -> NodeClassesInUse {
        NodeClassesInUse {
            nodeclasses: classes.iter().map(|c| c.to_string()).collect(),
            instance_profiles: profiles.iter().map(|p| p.to_string()).collect(),
        }
    }

    #[test]
    fn templates_of_classes_that_are_gone_are_stale_once_old_enough() {
        let now = Utc::now();
        let t = |name: &str, class: &str, age: i64| OwnedTemplate {
            name: name.into(),
            nodeclass: class.into(),
            created: Some(now - chrono::Duration::minutes(age)),
        };
        let templates = [
            t("karpenter.k8s.aws/1", "default", 60),
            t("karpenter.k8s.aws/2", "gone", 60),
            t("karpenter.k8s.aws/3", "gone", 1),
        ];
        let stale: Vec<&str> = stale_templates(&templates, &in_use(&["default"], &[]), now)
            .iter()
            .map(|t| t.name.as_str())
            .collect();
        assert_eq!(stale, ["karpenter.k8s.aws/2"]);
    }

    #[test]
    fn a_live_class_template_no_launch_used_for_thirty_minutes_goes() {
        let now = Utc::now();
        let t = |name: &str, class: &str| OwnedTemplate {
            name: name.into(),
            nodeclass: class.into(),
            created: Some(now - chrono::Duration::hours(5)),
        };
        let templates = [
            t("karpenter.k8s.aws/old", "default"),
            t("karpenter.k8s.aws/current", "default"),
            t("karpenter.k8s.aws/unseen", "default"),
            t("karpenter.k8s.aws/gone", "gone"),
        ];
        let last_used = std::collections::HashMap::from([
            ("karpenter.k8s.aws/old".to_string(), now - UNUSED),
            (
                "karpenter.k8s.aws/current".to_string(),
                now - chrono::Duration::minutes(29),
            ),
            ("karpenter.k8s.aws/gone".to_string(), now - UNUSED),
        ]);
        let unused: Vec<&str> =
            unused_templates(&templates, &in_use(&["default"], &[]), &last_used, now)
                .iter()
                .map(|t| t.name.as_str())
                .collect();
        assert_eq!(
            unused,
            ["karpenter.k8s.aws/old"],
            "a gone class' template is stale_templates' to delete"
        );
    }

    #[test]
    fn profiles_go_once_nothing_names_protects_or_launched_with_them() {
        let now = Utc::now();
        let p = |name: &str, age: i64| OwnedProfile {
            name: name.to_string(),
            created: Some(now - chrono::Duration::minutes(age)),
        };
        let legacy_live = legacy_name("demo", "us-east-1", "default");
        let legacy_gone = legacy_name("demo", "us-east-1", "gone");
        let profiles = [
            p(&legacy_live, 60),
            p(&legacy_gone, 60),
            p("demo_current", 60),
            p("demo_launched-with", 60),
            p("demo_left-by-a-role-change", 60),
            p("demo_protected", 60),
            p("demo_fresh", 1),
        ];
        let protected = std::collections::BTreeSet::from(["demo_protected".to_string()]);
        let stale: Vec<&str> = stale_profiles(
            &profiles,
            &in_use(&["default"], &["demo_current", "demo_launched-with"]),
            &protected,
            "demo",
            "us-east-1",
            now,
        )
        .iter()
        .map(|p| p.name.as_str())
        .collect();
        assert_eq!(stale, [legacy_gone.as_str(), "demo_left-by-a-role-change"]);
    }
}
