//! The static drift hashes of NodePools and EC2NodeClasses, and the stable hash they and the
//! AWS provider's generated names use.
//!
//! Static drift compares a hash stamped on a NodeClaim at creation with the current one. Every
//! hash carries a version; a NodeClaim stamped by another implementation (upstream Karpenter
//! writes `v3`) or an older version of ours is re-stamped, never drifted, so a fleet does not
//! roll just because the hashing code changed.

use serde_json::Value;

use super::ec2nodeclass::EC2NodeClass;
use super::nodepool::NodePool;

/// The version of our NodePool template hash (`karpenter.sh/nodepool-hash-version`).
pub const NODEPOOL_HASH_VERSION: &str = "karpenter-rs-v1";
/// The version of our EC2NodeClass hash (`karpenter.k8s.aws/ec2nodeclass-hash-version`).
pub const NODECLASS_HASH_VERSION: &str = "karpenter-rs-v1";

/// Stable 64-bit FNV-1a: hashes and names derived from it must not change between builds or
/// platforms, which rules out the standard library's randomized hasher.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Canonical JSON: object keys sorted (serde_json's map is ordered), arrays of objects that are
/// sets (taints) sorted, so equal templates hash equally whatever the order users wrote.
fn canonical(mut value: Value) -> String {
    fn sort_sets(v: &mut Value) {
        match v {
            Value::Object(map) => {
                for (k, child) in map.iter_mut() {
                    sort_sets(child);
                    if matches!(k.as_str(), "taints" | "startupTaints")
                        && let Value::Array(items) = child
                    {
                        items.sort_by_key(|a| a.to_string());
                    }
                }
            }
            Value::Array(items) => items.iter_mut().for_each(sort_sets),
            _ => {}
        }
    }
    sort_sets(&mut value);
    value.to_string()
}

impl NodePool {
    /// The template hash (`karpenter.sh/nodepool-hash`): everything in `spec.template` except
    /// `requirements`, which drift by comparing the node's labels instead.
    pub fn static_hash(&self) -> String {
        let mut template = serde_json::to_value(&self.spec.template).unwrap_or(Value::Null);
        if let Some(spec) = template.get_mut("spec").and_then(Value::as_object_mut) {
            spec.remove("requirements");
        }
        fnv1a(canonical(template).as_bytes()).to_string()
    }
}

impl EC2NodeClass {
    /// The static hash (`karpenter.k8s.aws/ec2nodeclass-hash`): the fields that shape a launch
    /// but are not re-resolved dynamically (selectors are: their results drift through AMIs,
    /// subnets, security groups, capacity reservations and the placement group).
    pub fn static_hash(&self) -> String {
        let mut spec = serde_json::to_value(&self.spec).unwrap_or(Value::Null);
        if let Some(map) = spec.as_object_mut() {
            for dynamic in [
                "subnetSelectorTerms",
                "securityGroupSelectorTerms",
                "amiSelectorTerms",
                "capacityReservationSelectorTerms",
                "placementGroupSelector",
                "ipPrefixCount",
            ] {
                map.remove(dynamic);
            }
            map.insert(
                "amiFamily".into(),
                serde_json::to_value(self.spec.ami_family()).unwrap_or(Value::Null),
            );
        }
        fnv1a(canonical(spec).as_bytes()).to_string()
    }
}
