//! Offerings EC2 recently could not fill, skipped for a while so the next launch asks for
//! something else (upstream's unavailable-offerings cache: three minutes per pool).
//!
//! A launch into a placement group that EC2 cannot fill says nothing about the pool outside the
//! group: as upstream, such an entry is scoped to the group (and to the partition the launch
//! named), and only offerings in that group (partition) are skipped.
//!
//! Time comes from the injected [`Clock`], so tests move past the TTL without sleeping. A
//! sequence number changes whenever the set changes, so cached instance-type lists know when to
//! re-mark their offerings.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use chrono::{DateTime, Duration, Utc};

use crate::clock::Clock;
use crate::scheduling::instance_type::CapacityType;

/// How long an offering stays unavailable after EC2 reported it out of capacity.
pub const UNAVAILABLE_OFFERINGS_TTL: Duration = Duration::minutes(3);

/// One capacity pool: instance type, zone and capacity type.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct OfferingKey {
    /// e.g. `m5.large`.
    pub instance_type: String,
    /// e.g. `us-east-1a`.
    pub zone: String,
    /// How it is bought.
    pub capacity_type: CapacityType,
}

/// Where in a placement group a launch failed: the group's ID, and the partition when the
/// launch named one.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct GroupScope {
    /// `pg-...`.
    pub group_id: String,
    /// The partition of a partition group the launch targeted.
    pub partition: Option<String>,
}

/// What is unavailable: one pool (everywhere, or only in a placement group), or a whole capacity
/// type (spot, when the account cannot use it).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Scope {
    Offering(OfferingKey, Option<GroupScope>),
    CapacityType(CapacityType),
}

/// The cache.
pub struct UnavailableOfferings {
    clock: Arc<dyn Clock>,
    entries: Mutex<HashMap<Scope, DateTime<Utc>>>,
    seq: AtomicU64,
}

impl UnavailableOfferings {
    /// An empty cache reading time from `clock`.
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        Self {
            clock,
            entries: Mutex::new(HashMap::new()),
            seq: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<Scope, DateTime<Utc>>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn insert(&self, scope: Scope) {
        let until = self.clock.now() + UNAVAILABLE_OFFERINGS_TTL;
        let mut entries = self.lock();
        let now = self.clock.now();
        entries.retain(|_, expiry| *expiry > now);
        entries.insert(scope, until);
        self.seq.fetch_add(1, Ordering::Relaxed);
    }

    /// Marks a pool unavailable for [`UNAVAILABLE_OFFERINGS_TTL`]; marking it again extends it.
    pub fn mark(&self, key: OfferingKey) {
        self.insert(Scope::Offering(key, None));
    }

    /// Marks a pool unavailable inside one placement group (or one partition of it) only.
    pub fn mark_in_group(&self, key: OfferingKey, group: GroupScope) {
        self.insert(Scope::Offering(key, Some(group)));
    }

    /// Marks a whole capacity type unavailable (e.g. spot when the spot service-linked role is
    /// missing).
    pub fn mark_capacity_type(&self, capacity_type: CapacityType) {
        self.insert(Scope::CapacityType(capacity_type));
    }

    /// Whether a pool is currently skipped outside any placement group, on its own or through
    /// its capacity type.
    pub fn is_unavailable(&self, instance_type: &str, zone: &str, ct: CapacityType) -> bool {
        self.is_unavailable_in(instance_type, zone, ct, None, None)
    }

    /// Whether a pool is currently skipped for an offering in placement group `group_id`
    /// (partition `partition`): as outside, or through an entry of that group, or of that
    /// partition of it.
    pub fn is_unavailable_in(
        &self,
        instance_type: &str,
        zone: &str,
        ct: CapacityType,
        group_id: Option<&str>,
        partition: Option<&str>,
    ) -> bool {
        let now = self.clock.now();
        let entries = self.lock();
        if entries.is_empty() {
            return false;
        }
        let live = |scope: &Scope| entries.get(scope).is_some_and(|until| *until > now);
        let pool = || OfferingKey {
            instance_type: instance_type.to_string(),
            zone: zone.to_string(),
            capacity_type: ct,
        };
        let in_group = |partition: Option<&str>| {
            group_id.is_some_and(|id| {
                live(&Scope::Offering(
                    pool(),
                    Some(GroupScope {
                        group_id: id.to_string(),
                        partition: partition.map(str::to_string),
                    }),
                ))
            })
        };
        live(&Scope::CapacityType(ct))
            || live(&Scope::Offering(pool(), None))
            || in_group(None)
            || (partition.is_some() && in_group(partition))
    }

    /// Changes whenever an entry is added.
    pub fn seq(&self) -> u64 {
        self.seq.load(Ordering::Relaxed)
    }
}

/// Whether a CreateFleet error code means the pool has no capacity for us right now (as opposed
/// to a configuration or permission problem), so the pool should be skipped for a while.
pub fn is_unfulfillable_capacity(code: &str) -> bool {
    matches!(
        code,
        "InsufficientInstanceCapacity"
            | "MaxSpotInstanceCountExceeded"
            | "VcpuLimitExceeded"
            | "UnfulfillableCapacity"
            | "Unsupported"
            | "InsufficientFreeAddressesInSubnet"
            | "MaxFleetCountExceeded"
    )
}

/// The error code that means spot cannot be used at all in this account until a service-linked
/// role exists.
pub const SPOT_SERVICE_LINKED_ROLE_MISSING: &str =
    "AuthFailure.ServiceLinkedRoleCreationNotPermitted";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::FakeClock;

    #[test]
    fn entries_expire_after_three_minutes_and_remarking_extends_them() {
        let clock = Arc::new(FakeClock::new(Utc::now()));
        let cache = UnavailableOfferings::new(clock.clone());
        let key = OfferingKey {
            instance_type: "m5.large".into(),
            zone: "us-east-1a".into(),
            capacity_type: CapacityType::Spot,
        };
        let seq = cache.seq();
        cache.mark(key.clone());
        assert_ne!(cache.seq(), seq);
        assert!(cache.is_unavailable("m5.large", "us-east-1a", CapacityType::Spot));
        assert!(!cache.is_unavailable("m5.large", "us-east-1a", CapacityType::OnDemand));
        assert!(!cache.is_unavailable("m5.large", "us-east-1b", CapacityType::Spot));
        clock.advance(Duration::minutes(2));
        cache.mark(key);
        clock.advance(Duration::minutes(2));
        assert!(cache.is_unavailable("m5.large", "us-east-1a", CapacityType::Spot));
        clock.advance(Duration::minutes(1) + Duration::seconds(1));
        assert!(!cache.is_unavailable("m5.large", "us-east-1a", CapacityType::Spot));
    }

    #[test]
    fn a_placement_group_entry_skips_the_pool_only_in_that_group_and_partition() {
        let clock = Arc::new(FakeClock::new(Utc::now()));
        let cache = UnavailableOfferings::new(clock.clone());
        let key = || OfferingKey {
            instance_type: "c5n.18xlarge".into(),
            zone: "us-east-1a".into(),
            capacity_type: CapacityType::OnDemand,
        };
        let od = CapacityType::OnDemand;
        cache.mark_in_group(
            key(),
            GroupScope {
                group_id: "pg-1".into(),
                partition: Some("2".into()),
            },
        );
        assert!(!cache.is_unavailable("c5n.18xlarge", "us-east-1a", od));
        let in_pg = |group, partition| {
            cache.is_unavailable_in("c5n.18xlarge", "us-east-1a", od, group, partition)
        };
        assert!(in_pg(Some("pg-1"), Some("2")));
        assert!(!in_pg(Some("pg-1"), Some("1")), "other partitions stay");
        assert!(!in_pg(Some("pg-2"), Some("2")), "other groups stay");
        // A launch that let EC2 pick the partition blocks the whole group.
        cache.mark_in_group(
            key(),
            GroupScope {
                group_id: "pg-1".into(),
                partition: None,
            },
        );
        assert!(in_pg(Some("pg-1"), Some("1")));
        assert!(in_pg(Some("pg-1"), None));
        assert!(!in_pg(None, None));
        // An entry outside any group applies inside every group too.
        cache.mark(OfferingKey {
            zone: "us-east-1b".into(),
            ..key()
        });
        assert!(cache.is_unavailable_in("c5n.18xlarge", "us-east-1b", od, Some("pg-9"), Some("3")));
        clock.advance(UNAVAILABLE_OFFERINGS_TTL);
        assert!(!in_pg(Some("pg-1"), Some("2")));
    }

    #[test]
    fn a_capacity_type_can_be_blocked_whole() {
        let clock = Arc::new(FakeClock::new(Utc::now()));
        let cache = UnavailableOfferings::new(clock);
        cache.mark_capacity_type(CapacityType::Spot);
        assert!(cache.is_unavailable("c5.large", "us-east-1c", CapacityType::Spot));
        assert!(!cache.is_unavailable("c5.large", "us-east-1c", CapacityType::OnDemand));
    }

    #[test]
    fn capacity_errors_are_told_apart_from_configuration_errors() {
        assert!(is_unfulfillable_capacity("InsufficientInstanceCapacity"));
        assert!(is_unfulfillable_capacity(
            "InsufficientFreeAddressesInSubnet"
        ));
        assert!(!is_unfulfillable_capacity(
            "InvalidLaunchTemplateName.NotFoundException"
        ));
        assert!(!is_unfulfillable_capacity("UnauthorizedOperation"));
    }
}
