//! Drift: a node no longer matches what its NodePool or EC2NodeClass asks for.
//!
//! Static drift compares the hashes stamped at creation with the current ones
//! ([`NodePool::static_hash`], [`EC2NodeClass::static_hash`]); a hash of another version is
//! re-stamped, never drifted, so swapping controllers does not roll a fleet.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::apis::ec2nodeclass::EC2NodeClass;
use crate::apis::hash::{NODECLASS_HASH_VERSION, NODEPOOL_HASH_VERSION};
use crate::apis::labels;
use crate::apis::nodepool::NodePool;
use crate::scheduling::instance_type::{CapacityType, InstanceType};
use crate::scheduling::requirements::Requirements;

/// Why a node is drifted (upstream's condition reasons).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum DriftReason {
    /// The NodePool template (labels, annotations, taints, startup taints, node class reference,
    /// expireAfter, terminationGracePeriod) changed.
    NodePoolDrifted,
    /// The node's labels no longer satisfy the NodePool's requirements.
    RequirementsDrifted,
    /// The node's instance type, or an offering of it in the node's zone and capacity type, is
    /// no longer among the instance types the NodePool's node class offers.
    InstanceTypeNotFound,
    /// A static EC2NodeClass field (user data, tags, block devices, kubelet, ...) changed.
    NodeClassDrift,
    /// The node's AMI is no longer among the EC2NodeClass' resolved AMIs.
    AMIDrift,
    /// The instance's subnet is no longer selected by the EC2NodeClass.
    SubnetDrift,
    /// The instance's security groups differ from the EC2NodeClass' selected ones.
    SecurityGroupDrift,
    /// The capacity reservation a reserved instance runs in is no longer selected by the
    /// EC2NodeClass (or no longer active).
    CapacityReservationDrift,
    /// The instance runs in another placement group than the EC2NodeClass'
    /// `placementGroupSelector` names (or in one when it names none, or in none when it does).
    PlacementGroupDrift,
    /// The node was launched with another instance profile than the EC2NodeClass' current one
    /// (`karpenter.k8s.aws/instance-profile-name` on the NodeClaim against
    /// `status.instanceProfile`): its role changed, or its profile was replaced.
    InstanceProfileDrift,
}

impl DriftReason {
    /// The condition reason string.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::NodePoolDrifted => "NodePoolDrifted",
            Self::RequirementsDrifted => "RequirementsDrifted",
            Self::InstanceTypeNotFound => "InstanceTypeNotFound",
            Self::NodeClassDrift => "NodeClassDrift",
            Self::AMIDrift => "AMIDrift",
            Self::SubnetDrift => "SubnetDrift",
            Self::SecurityGroupDrift => "SecurityGroupDrift",
            Self::CapacityReservationDrift => "CapacityReservationDrift",
            Self::PlacementGroupDrift => "PlacementGroupDrift",
            Self::InstanceProfileDrift => "InstanceProfileDrift",
        }
    }
}

impl DriftReason {
    /// The drift reasons only the cloud provider can tell (it compares the instance with what
    /// the node class resolves to now), read back from a NodeClaim's `Drifted` condition.
    pub fn from_provider(reason: &str) -> Option<Self> {
        match reason {
            "AMIDrift" => Some(Self::AMIDrift),
            "SubnetDrift" => Some(Self::SubnetDrift),
            "SecurityGroupDrift" => Some(Self::SecurityGroupDrift),
            "CapacityReservationDrift" => Some(Self::CapacityReservationDrift),
            "PlacementGroupDrift" => Some(Self::PlacementGroupDrift),
            _ => None,
        }
    }
}

/// What drift detection knows about one node.
pub struct DriftInput<'a> {
    /// The node's (or NodeClaim's) labels.
    pub labels: &'a BTreeMap<String, String>,
    /// The NodeClaim's annotations (hashes and their versions).
    pub annotations: &'a BTreeMap<String, String>,
    /// What is known of the instance itself.
    pub observed: Observed<'a>,
    /// The instance types the NodePool's node class offers now, unavailable offerings included;
    /// empty when unknown, which never drifts.
    pub instance_types: &'a [InstanceType],
}

/// What an instance runs with: the inputs of AMI, subnet, security-group, capacity reservation
/// and placement group drift. The engine knows the image from the NodeClaim's status; the
/// NodeClaim controller asks the cloud provider for all five. `None` means unknown (or, for the
/// reservation, not a reserved instance), which never drifts.
#[derive(Clone, Copy, Debug, Default)]
pub struct Observed<'a> {
    /// The image the instance booted.
    pub image_id: Option<&'a str>,
    /// The instance's subnet.
    pub subnet_id: Option<&'a str>,
    /// The instance's security groups.
    pub security_groups: Option<&'a [String]>,
    /// The capacity reservation a reserved instance runs in.
    pub capacity_reservation_id: Option<&'a str>,
    /// The placement group the instance runs in.
    pub placement_group: Option<ObservedPlacementGroup<'a>>,
}

/// The placement group an instance runs in, as the cloud reports it: both `None` when it runs in
/// none.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ObservedPlacementGroup<'a> {
    /// The group's ID.
    pub id: Option<&'a str>,
    /// The group's name.
    pub name: Option<&'a str>,
}

/// What drift detection decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DriftVerdict {
    /// In sync.
    None,
    /// Stamped with another hash version: re-stamp with ours, do not drift.
    Restamp,
    /// Drifted, with the reason and a human explanation.
    Drifted(DriftReason, String),
}

/// Decides whether a node drifted from its NodePool and EC2NodeClass.
pub fn detect(
    node: &DriftInput<'_>,
    pool: &NodePool,
    class: Option<&EC2NodeClass>,
) -> DriftVerdict {
    let stamped = |hash_key: &str, version_key: &str, version: &str, current: &str| match (
        node.annotations.get(hash_key),
        node.annotations.get(version_key),
    ) {
        (Some(h), Some(v)) if v == version => Some(h != current),
        (Some(_), _) => None,
        (None, _) => Some(false),
    };
    let mut restamp = false;
    match stamped(
        labels::NODEPOOL_HASH,
        labels::NODEPOOL_HASH_VERSION,
        NODEPOOL_HASH_VERSION,
        &pool.static_hash(),
    ) {
        Some(true) => {
            return DriftVerdict::Drifted(
                DriftReason::NodePoolDrifted,
                "the NodePool's template changed since the node was launched (its nodepool-hash no longer matches)".into(),
            );
        }
        None => restamp = true,
        Some(false) => {}
    }
    let reqs = Requirements::from_node_selector_requirements(&pool.spec.template.spec.requirements);
    if !reqs.is_compatible_labels(node.labels) {
        let offending = reqs
            .iter()
            .find(|r| {
                let single = Requirements::from_iter([(*r).clone()]);
                !single.is_compatible_labels(node.labels)
            })
            .map(|r| {
                format!(
                    "{r}, but the node has {}",
                    node.labels
                        .get(r.key())
                        .map(|v| format!("{}={v}", r.key()))
                        .unwrap_or_else(|| format!("no {} label", r.key()))
                )
            })
            .unwrap_or_default();
        return DriftVerdict::Drifted(
            DriftReason::RequirementsDrifted,
            format!("the NodePool now requires {offending}"),
        );
    }
    if let Some(why) = instance_type_not_found(node.labels, node.instance_types) {
        return DriftVerdict::Drifted(DriftReason::InstanceTypeNotFound, why);
    }
    if let Some(class) = class {
        if let Some(why) = instance_profile_drift(node.annotations, class) {
            return DriftVerdict::Drifted(DriftReason::InstanceProfileDrift, why);
        }
        match stamped(
            labels::EC2NODECLASS_HASH,
            labels::EC2NODECLASS_HASH_VERSION,
            NODECLASS_HASH_VERSION,
            &class.static_hash(),
        ) {
            Some(true) => {
                return DriftVerdict::Drifted(
                    DriftReason::NodeClassDrift,
                    format!(
                        "the EC2NodeClass {} changed a static field (user data, tags, block devices, kubelet, metadata options, ...)",
                        class.metadata.name.as_deref().unwrap_or_default()
                    ),
                );
            }
            None => restamp = true,
            Some(false) => {}
        }
        if let Some((reason, why)) = instance_drift(class, &node.observed) {
            return DriftVerdict::Drifted(reason, why);
        }
    }
    if restamp {
        DriftVerdict::Restamp
    } else {
        DriftVerdict::None
    }
}

/// Upstream's instance profile drift, judged before the class' static hash as upstream does: a
/// NodeClaim launched with a profile (`karpenter.k8s.aws/instance-profile-name`) other than the
/// one the class' status names now. A NodeClaim without the annotation (launched by a version
/// that did not record it) or a class whose profile is not resolved yet never drifts.
fn instance_profile_drift(
    annotations: &BTreeMap<String, String>,
    class: &EC2NodeClass,
) -> Option<String> {
    let launched_with = annotations.get(labels::INSTANCE_PROFILE_NAME)?;
    let current = class
        .status
        .as_ref()
        .and_then(|s| s.instance_profile.as_deref())
        .filter(|p| !p.is_empty())?;
    (launched_with != current).then(|| {
        format!(
            "it was launched with instance profile {launched_with}, but EC2NodeClass {} now uses {current}",
            class.metadata.name.as_deref().unwrap_or_default()
        )
    })
}

/// Upstream's `InstanceTypeNotFound`: the node has no instance-type label, its type is not
/// among `types`, or the type has no offering (available or not: a pool that is only
/// temporarily exhausted is no reason to replace a node) in the node's zone and capacity type.
/// `types` empty means they are not known yet, which never drifts.
fn instance_type_not_found(
    labels: &BTreeMap<String, String>,
    types: &[InstanceType],
) -> Option<String> {
    if types.is_empty() {
        return None;
    }
    let Some(name) = labels.get(labels::INSTANCE_TYPE) else {
        return Some(format!("the node has no {} label", labels::INSTANCE_TYPE));
    };
    let Some(it) = types.iter().find(|t| &*t.name == name.as_str()) else {
        return Some(format!(
            "instance type {name} is no longer offered by the node class"
        ));
    };
    let zone = labels.get(labels::ZONE);
    let capacity_type = labels
        .get(labels::CAPACITY_TYPE)
        .and_then(|c| CapacityType::from_label(c));
    let offered = it.offerings.iter().any(|o| {
        zone.is_none_or(|z| *o.zone == **z) && capacity_type.is_none_or(|c| o.capacity_type == c)
    });
    (!offered).then(|| {
        format!(
            "instance type {name} is no longer offered as {} in {}",
            labels
                .get(labels::CAPACITY_TYPE)
                .map_or("any capacity type", String::as_str),
            zone.map_or("any zone", String::as_str)
        )
    })
}

/// Whether an instance drifted from what its EC2NodeClass selects now: its AMI, subnet,
/// security groups or (for a reserved instance) capacity reservation are no longer the ones the
/// class's status lists. A reservation the class no longer selects drifts even when the status
/// lists none, as upstream: its instance would otherwise keep a slot the class gave up. Both the engine and the
/// NodeClaim controller (with what the cloud provider reports) decide it here.
pub fn instance_drift(
    class: &EC2NodeClass,
    observed: &Observed<'_>,
) -> Option<(DriftReason, String)> {
    let status = class.status.as_ref()?;
    let class_name = class.metadata.name.as_deref().unwrap_or_default();
    if let Some(image) = observed.image_id
        && !status.amis.is_empty()
        && !status.amis.iter().any(|a| a.id == image)
    {
        return Some((
            DriftReason::AMIDrift,
            format!(
                "its AMI {image} is no longer selected by EC2NodeClass {class_name} (now: {})",
                status
                    .amis
                    .iter()
                    .map(|a| a.id.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ));
    }
    if let Some(reservation) = observed.capacity_reservation_id
        && !status
            .capacity_reservations
            .iter()
            .any(|r| r.id == reservation)
    {
        return Some((
            DriftReason::CapacityReservationDrift,
            format!(
                "its capacity reservation {reservation} is no longer selected by EC2NodeClass {class_name}"
            ),
        ));
    }
    if let Some(group) = observed.placement_group
        && let Some(why) = placement_group_drift(class, group)
    {
        return Some((DriftReason::PlacementGroupDrift, why));
    }
    if let Some(subnet) = observed.subnet_id
        && !status.subnets.is_empty()
        && !status.subnets.iter().any(|s| s.id == subnet)
    {
        return Some((
            DriftReason::SubnetDrift,
            format!("its subnet {subnet} is no longer selected by EC2NodeClass {class_name}"),
        ));
    }
    let groups = observed.security_groups.filter(|g| !g.is_empty())?;
    if status.security_groups.is_empty() {
        return None;
    }
    let mut have: Vec<&str> = groups.iter().map(String::as_str).collect();
    let mut want: Vec<&str> = status
        .security_groups
        .iter()
        .map(|g| g.id.as_str())
        .collect();
    have.sort_unstable();
    have.dedup();
    want.sort_unstable();
    want.dedup();
    (have != want).then(|| {
        (
            DriftReason::SecurityGroupDrift,
            format!(
                "its security groups [{}] differ from those EC2NodeClass {class_name} selects [{}]",
                have.join(", "),
                want.join(", ")
            ),
        )
    })
}

/// Whether an instance in placement group `group` left the one its class selects: a selector by
/// ID must match the group's ID, one by name its name, and no selector means no group (as
/// upstream compares the node's `placement-group-id` with the group the class resolves to).
fn placement_group_drift(
    class: &EC2NodeClass,
    group: ObservedPlacementGroup<'_>,
) -> Option<String> {
    let class_name = class.metadata.name.as_deref().unwrap_or_default();
    let current = group.id.or(group.name);
    let Some(selector) = &class.spec.placement_group_selector else {
        return current.map(|g| {
            format!("it runs in placement group {g}, but EC2NodeClass {class_name} selects none")
        });
    };
    let (wanted, member) = match (&selector.id, &selector.name) {
        (Some(id), _) => (id, group.id == Some(id.as_str())),
        (None, Some(name)) => (name, group.name == Some(name.as_str())),
        (None, None) => return None,
    };
    (!member).then(|| match current {
        Some(g) => format!(
            "it runs in placement group {g}, but EC2NodeClass {class_name} selects placement group {wanted}"
        ),
        None => format!(
            "it runs in no placement group, but EC2NodeClass {class_name} selects placement group {wanted}"
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apis::ec2nodeclass::EC2NodeClass;
    use serde_json::json;

    fn pool(label: &str) -> NodePool {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "p"},
            "spec": {"template": {
                "metadata": {"labels": {"team": label}},
                "spec": {
                    "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}],
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                    "taints": [{"key": "a", "effect": "NoSchedule"}, {"key": "b", "effect": "NoSchedule"}]
                }
            }}
        }))
        .expect("pool")
    }

    fn stamped(hash: &str, version: &str) -> BTreeMap<String, String> {
        BTreeMap::from([
            (labels::NODEPOOL_HASH.to_string(), hash.to_string()),
            (
                labels::NODEPOOL_HASH_VERSION.to_string(),
                version.to_string(),
            ),
        ])
    }

    #[test]
    fn a_type_or_offering_no_longer_offered_drifts_as_instance_type_not_found() {
        use crate::apis::ec2nodeclass::AMIFamily;
        use crate::scheduling::instance_type::{
            InstanceTypeInfo, NodeClassSettings, Offering, resolve,
        };
        let offering = |zone: &str, capacity_type| Offering {
            zone: zone.into(),
            zone_id: None,
            capacity_type,
            price: 0.1,
            available: false,
            reservation: None,
            partition: None,
        };
        let m5 = resolve(
            &InstanceTypeInfo {
                name: "m5.large".into(),
                vcpu: 2,
                memory_mib: 8192,
                arch: "amd64",
                ..Default::default()
            },
            &NodeClassSettings::for_family(AMIFamily::AL2023),
            "us-east-1",
            vec![offering("us-east-1a", CapacityType::Spot)],
        );
        let types = [m5];
        let node_labels = |instance_type: &str, zone: &str| {
            BTreeMap::from([
                (labels::CAPACITY_TYPE.to_string(), "spot".to_string()),
                (labels::INSTANCE_TYPE.to_string(), instance_type.to_string()),
                (labels::ZONE.to_string(), zone.to_string()),
            ])
        };
        let none = BTreeMap::new();
        let verdict = |labels_: &BTreeMap<String, String>, types: &[InstanceType]| {
            detect(
                &DriftInput {
                    labels: labels_,
                    annotations: &none,
                    observed: Observed::default(),
                    instance_types: types,
                },
                &pool("blue"),
                None,
            )
        };
        let offered = node_labels("m5.large", "us-east-1a");
        assert_eq!(
            verdict(&offered, &types),
            DriftVerdict::None,
            "an unavailable offering still counts"
        );
        assert_eq!(
            verdict(&node_labels("m6i.large", "us-east-1a"), &[]),
            DriftVerdict::None,
            "types unknown"
        );
        for (labels_, want) in [
            (
                node_labels("m6i.large", "us-east-1a"),
                "m6i.large is no longer offered",
            ),
            (
                node_labels("m5.large", "us-east-1b"),
                "no longer offered as spot in us-east-1b",
            ),
        ] {
            match verdict(&labels_, &types) {
                DriftVerdict::Drifted(DriftReason::InstanceTypeNotFound, why) => {
                    assert!(why.contains(want), "{why}")
                }
                other => panic!("{labels_:?}: {other:?}"),
            }
        }
        assert_eq!(
            DriftReason::InstanceTypeNotFound.as_str(),
            "InstanceTypeNotFound"
        );
    }

    #[test]
    fn hash_ignores_requirements_and_taint_order() {
        let a = pool("blue");
        let mut b = pool("blue");
        b.spec.template.spec.requirements.clear();
        b.spec.template.spec.taints.reverse();
        assert_eq!(a.static_hash(), b.static_hash());
        assert_ne!(a.static_hash(), pool("green").static_hash());
    }

    #[test]
    fn template_changes_drift_and_other_versions_restamp() {
        let labels_ =
            BTreeMap::from([("karpenter.sh/capacity-type".to_string(), "spot".to_string())]);
        let old = pool("blue");
        let new = pool("green");
        let ann = stamped(&old.static_hash(), NODEPOOL_HASH_VERSION);
        let node = DriftInput {
            labels: &labels_,
            annotations: &ann,
            observed: Observed::default(),
            instance_types: &[],
        };
        assert_eq!(detect(&node, &old, None), DriftVerdict::None);
        assert!(matches!(
            detect(&node, &new, None),
            DriftVerdict::Drifted(DriftReason::NodePoolDrifted, _)
        ));
        let upstream = stamped("123456", "v3");
        let node = DriftInput {
            labels: &labels_,
            annotations: &upstream,
            observed: Observed::default(),
            instance_types: &[],
        };
        assert_eq!(detect(&node, &new, None), DriftVerdict::Restamp);
    }

    #[test]
    fn a_node_launched_with_another_instance_profile_than_the_class_uses_now_drifts() {
        let class = |profile: Option<&str>| -> EC2NodeClass {
            serde_json::from_value(json!({
                "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": "default"},
                "spec": {"role": "r", "amiSelectorTerms": [{"alias": "al2023@latest"}],
                         "subnetSelectorTerms": [{"tags": {"a": "b"}}], "securityGroupSelectorTerms": [{"tags": {"a": "b"}}]},
                "status": {"instanceProfile": profile}
            }))
            .expect("class")
        };
        let labels_ =
            BTreeMap::from([("karpenter.sh/capacity-type".to_string(), "spot".to_string())]);
        let launched_with = |profile: Option<&str>| -> BTreeMap<String, String> {
            profile
                .map(|p| (labels::INSTANCE_PROFILE_NAME.to_string(), p.to_string()))
                .into_iter()
                .collect()
        };
        let verdict = |annotations: &BTreeMap<String, String>, class: &EC2NodeClass| {
            detect(
                &DriftInput {
                    labels: &labels_,
                    annotations,
                    observed: Observed::default(),
                    instance_types: &[],
                },
                &pool("blue"),
                Some(class),
            )
        };
        let current = class(Some("demo_new"));
        assert_eq!(
            verdict(&launched_with(Some("demo_new")), &current),
            DriftVerdict::None
        );
        match verdict(&launched_with(Some("demo_old")), &current) {
            DriftVerdict::Drifted(DriftReason::InstanceProfileDrift, why) => {
                assert!(
                    why.contains("demo_old") && why.contains("demo_new"),
                    "{why}"
                );
            }
            other => panic!("expected InstanceProfileDrift, got {other:?}"),
        }
        assert_eq!(
            verdict(&launched_with(None), &current),
            DriftVerdict::None,
            "a NodeClaim that recorded no profile"
        );
        assert_eq!(
            verdict(&launched_with(Some("demo_old")), &class(None)),
            DriftVerdict::None,
            "the class' profile is not resolved yet"
        );
        // Judged before the class hash, as upstream: a hash of another version is no excuse.
        let mut other_version = launched_with(Some("demo_old"));
        other_version.insert(labels::EC2NODECLASS_HASH.to_string(), "123".to_string());
        other_version.insert(
            labels::EC2NODECLASS_HASH_VERSION.to_string(),
            "v1".to_string(),
        );
        assert!(matches!(
            verdict(&other_version, &current),
            DriftVerdict::Drifted(DriftReason::InstanceProfileDrift, _)
        ));
        assert_eq!(
            DriftReason::InstanceProfileDrift.as_str(),
            "InstanceProfileDrift"
        );
    }

    #[test]
    fn a_reserved_instance_drifts_once_its_reservation_is_no_longer_selected() {
        let class = |reservations: serde_json::Value| -> EC2NodeClass {
            serde_json::from_value(json!({
                "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": "default"},
                "spec": {"role": "r", "amiSelectorTerms": [{"alias": "al2023@latest"}],
                         "subnetSelectorTerms": [{"tags": {"a": "b"}}], "securityGroupSelectorTerms": [{"tags": {"a": "b"}}]},
                "status": {"capacityReservations": reservations}
            }))
            .expect("class")
        };
        let selected = class(json!([{"availabilityZone": "us-east-1a", "id": "cr-foo",
            "instanceMatchCriteria": "targeted", "instanceType": "m5.large", "ownerID": "012345678901"}]));
        let reserved = |id| Observed {
            capacity_reservation_id: Some(id),
            ..Observed::default()
        };
        assert_eq!(instance_drift(&selected, &reserved("cr-foo")), None);
        let (reason, why) = instance_drift(&selected, &reserved("cr-bar")).expect("drifted");
        assert_eq!(reason, DriftReason::CapacityReservationDrift);
        assert!(why.contains("cr-bar"), "{why}");
        assert_eq!(
            instance_drift(&class(json!([])), &reserved("cr-foo")).map(|(r, _)| r),
            Some(DriftReason::CapacityReservationDrift),
            "no reservation selected any more"
        );
        assert_eq!(
            instance_drift(&class(json!([])), &Observed::default()),
            None,
            "spot and on-demand instances have no reservation to drift from"
        );
        assert_eq!(
            DriftReason::from_provider("CapacityReservationDrift"),
            Some(DriftReason::CapacityReservationDrift)
        );
    }

    #[test]
    fn leaving_the_selected_placement_group_drifts() {
        let class = |selector: serde_json::Value| -> EC2NodeClass {
            let mut spec = json!({"role": "r", "amiSelectorTerms": [{"alias": "al2023@latest"}],
                "subnetSelectorTerms": [{"tags": {"a": "b"}}], "securityGroupSelectorTerms": [{"tags": {"a": "b"}}]});
            if !selector.is_null() {
                spec["placementGroupSelector"] = selector;
            }
            serde_json::from_value(json!({
                "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": "default"},
                "spec": spec, "status": {}
            }))
            .expect("class")
        };
        let in_group = |id: Option<&'static str>, name: Option<&'static str>| Observed {
            placement_group: Some(ObservedPlacementGroup { id, name }),
            ..Observed::default()
        };
        let reason = |class: &EC2NodeClass, observed: &Observed<'_>| {
            instance_drift(class, observed).map(|(r, _)| r)
        };
        let a = in_group(Some("pg-a"), Some("a"));
        let outside = in_group(None, None);
        let by_name = class(json!({"name": "a"}));
        let by_id = class(json!({"id": "pg-a"}));
        let none = class(serde_json::Value::Null);
        assert_eq!(reason(&by_name, &a), None);
        assert_eq!(reason(&by_id, &a), None);
        assert_eq!(reason(&none, &outside), None);
        let drifted = Some(DriftReason::PlacementGroupDrift);
        assert_eq!(
            reason(&class(json!({"name": "b"})), &a),
            drifted,
            "selector changed"
        );
        assert_eq!(
            reason(&class(json!({"id": "pg-b"})), &a),
            drifted,
            "ID changed"
        );
        assert_eq!(reason(&by_name, &outside), drifted, "selector added");
        assert_eq!(reason(&none, &a), drifted, "selector removed");
        assert_eq!(
            reason(&by_name, &Observed::default()),
            None,
            "placement unknown"
        );
        let (_, why) = instance_drift(&by_id, &outside).expect("drifted");
        assert!(
            why.contains("no placement group") && why.contains("pg-a"),
            "{why}"
        );
        assert_eq!(
            DriftReason::from_provider("PlacementGroupDrift"),
            Some(DriftReason::PlacementGroupDrift)
        );
    }

    #[test]
    fn subnet_and_security_group_changes_drift() {
        let class: EC2NodeClass = serde_json::from_value(json!({
            "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": "default"},
            "spec": {"role": "r", "amiSelectorTerms": [{"alias": "al2023@latest"}],
                     "subnetSelectorTerms": [{"tags": {"a": "b"}}], "securityGroupSelectorTerms": [{"tags": {"a": "b"}}]},
            "status": {"subnets": [{"id": "subnet-new", "zone": "us-east-1a"}], "securityGroups": [{"id": "sg-1"}, {"id": "sg-2"}]}
        }))
        .expect("class");
        let labels_ =
            BTreeMap::from([("karpenter.sh/capacity-type".to_string(), "spot".to_string())]);
        let none = BTreeMap::new();
        let same_groups = vec!["sg-2".to_string(), "sg-1".to_string()];
        let node = |subnet, groups| DriftInput {
            labels: &labels_,
            annotations: &none,
            observed: Observed {
                image_id: None,
                subnet_id: subnet,
                security_groups: groups,
                capacity_reservation_id: None,
                placement_group: None,
            },
            instance_types: &[],
        };
        assert_eq!(
            detect(
                &node(Some("subnet-new"), Some(&same_groups)),
                &pool("blue"),
                Some(&class)
            ),
            DriftVerdict::None
        );
        assert!(matches!(
            detect(&node(Some("subnet-old"), None), &pool("blue"), Some(&class)),
            DriftVerdict::Drifted(DriftReason::SubnetDrift, _)
        ));
        let fewer = vec!["sg-1".to_string()];
        assert!(matches!(
            detect(&node(None, Some(&fewer)), &pool("blue"), Some(&class)),
            DriftVerdict::Drifted(DriftReason::SecurityGroupDrift, _)
        ));
        // Unknown (not reported by the provider): no verdict either way.
        assert_eq!(
            detect(&node(None, None), &pool("blue"), Some(&class)),
            DriftVerdict::None
        );
    }

    #[test]
    fn requirement_changes_drift() {
        let on_demand = BTreeMap::from([(
            "karpenter.sh/capacity-type".to_string(),
            "on-demand".to_string(),
        )]);
        let none = BTreeMap::new();
        let node = DriftInput {
            labels: &on_demand,
            annotations: &none,
            observed: Observed::default(),
            instance_types: &[],
        };
        match detect(&node, &pool("blue"), None) {
            DriftVerdict::Drifted(DriftReason::RequirementsDrifted, why) => {
                assert!(
                    why.contains("karpenter.sh/capacity-type=on-demand"),
                    "{why}"
                );
            }
            other => panic!("{other:?}"),
        }
    }
}
