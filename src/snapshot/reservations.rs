//! The capacity reservations `simulate` offers a node class: those in its status'
//! `capacityReservations`, with the instances each can still launch taken from the
//! [`AVAILABLE_ANNOTATION`] (the status does not carry counts; EC2 reports them to the controller).

use std::collections::BTreeMap;

use crate::apis::ec2nodeclass::EC2NodeClass;
use crate::scheduling::instance_type::ReservedCapacity;

/// `cr-id=count,...`: instances each reservation of the class can still launch. A reservation in
/// the status but not listed here is offered with none left, as the controller does when EC2
/// reports none.
pub const AVAILABLE_ANNOTATION: &str = "karpenter-rs.sh/capacity-reservations-available";

/// The counts the annotation gives, by reservation ID; an error names the entry and the fix.
pub fn available_counts(class: &EC2NodeClass) -> Result<BTreeMap<String, i64>, String> {
    let Some(text) = class
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(AVAILABLE_ANNOTATION))
    else {
        return Ok(BTreeMap::new());
    };
    let mut out = BTreeMap::new();
    for entry in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let parsed = entry
            .split_once('=')
            .and_then(|(id, n)| Some((id.trim(), n.trim().parse::<i64>().ok()?)))
            .filter(|(id, n)| !id.is_empty() && *n >= 0);
        let Some((id, n)) = parsed else {
            return Err(format!(
                "entry {entry:?} is not `<reservation id>=<instances left>` (e.g. cr-0123=2)"
            ));
        };
        out.insert(id.to_string(), n);
    }
    Ok(out)
}

/// The active reservations of the class' status with their counts (none left for an unlisted
/// one or when the annotation does not parse; loading a manifest reports the latter).
pub fn reserved_capacity(class: &EC2NodeClass) -> Vec<ReservedCapacity> {
    let counts = available_counts(class).unwrap_or_default();
    class
        .status
        .as_ref()
        .map(|s| s.capacity_reservations.as_slice())
        .unwrap_or_default()
        .iter()
        .filter(|r| r.state.as_deref().is_none_or(|s| s == "active"))
        .map(|r| ReservedCapacity::of_status(r, counts.get(&r.id).copied().unwrap_or(0)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(annotation: &str) -> EC2NodeClass {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.k8s.aws/v1",
            "kind": "EC2NodeClass",
            "metadata": {"name": "c", "annotations": {AVAILABLE_ANNOTATION: annotation}},
            "spec": {
                "role": "r",
                "amiSelectorTerms": [{"alias": "al2023@latest"}],
                "subnetSelectorTerms": [{"id": "subnet-1"}],
                "securityGroupSelectorTerms": [{"id": "sg-1"}]
            },
            "status": {"capacityReservations": [
                {"availabilityZone": "us-east-1a", "id": "cr-1", "instanceMatchCriteria": "targeted",
                 "instanceType": "m5.large", "ownerID": "123456789012"},
                {"availabilityZone": "us-east-1b", "id": "cr-2", "instanceMatchCriteria": "open",
                 "instanceType": "c5.large", "ownerID": "123456789012",
                 "reservationType": "capacity-block", "state": "expiring"}
            ]}
        }))
        .expect("EC2NodeClass parses")
    }

    #[test]
    fn counts_come_from_the_annotation_and_unlisted_reservations_have_none() {
        let c = class("cr-1=3");
        let r = reserved_capacity(&c);
        assert_eq!(r.len(), 1, "the expiring reservation is not offered: {r:?}");
        assert_eq!(r[0].id, "cr-1");
        assert_eq!(r[0].available, 3);
        assert_eq!(r[0].reservation_type, "default");
        assert_eq!(reserved_capacity(&class(""))[0].available, 0);
    }

    #[test]
    fn a_malformed_entry_is_named() {
        let err = available_counts(&class("cr-1=3, cr-2=many")).unwrap_err();
        assert!(err.contains("\"cr-2=many\""), "{err}");
        assert!(available_counts(&class("cr-1=-1")).is_err());
    }
}
