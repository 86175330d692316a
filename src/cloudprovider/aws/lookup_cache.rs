//! The caches in front of the lookups an EC2NodeClass resolution makes, with upstream v1.14.1's
//! lifetimes (`pkg/cache/cache.go`): SSM parameters a day (a user's `ssmParameter` five minutes),
//! DescribeImages queries, subnet and security group selections and placement groups a minute,
//! instance profiles fifteen minutes. Every EC2NodeClass is resolved again each resolution
//! period (one minute by default), so without them each class would re-read every SSM parameter
//! and instance profile every minute; with them classes that select the same things share one
//! lookup, as upstream's providers do.
//!
//! Time comes from the provider's injected [`Clock`], so tests move past a lifetime without
//! sleeping. An entry is live while `now < stored + ttl`: a resolution exactly one period after
//! the last reads afresh what has a one-minute lifetime.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex, MutexGuard};

use chrono::{DateTime, Duration, Utc};

use crate::apis::ec2nodeclass::SecurityGroup;
use crate::clock::Clock;

use super::amis::Described;
use super::placement_groups::PlacementGroup;
use super::subnets::SubnetInfo;

/// Upstream's `DefaultTTL`: DescribeImages queries, subnets, security groups, placement groups.
pub const DEFAULT_TTL: Duration = Duration::minutes(1);
/// Upstream's `SSMCacheTTL`: the EKS-optimized image parameters an alias reads.
pub const SSM_TTL: Duration = Duration::hours(24);
/// A user's own `amiSelectorTerms[].ssmParameter` (upstream's custom parameter type).
pub const SSM_CUSTOM_TTL: Duration = Duration::minutes(5);
/// Upstream's `InstanceProfileTTL`.
pub const INSTANCE_PROFILE_TTL: Duration = Duration::minutes(15);
/// Upstream's `ProtectedProfilesTTL`: how long a managed instance profile a class just left (or
/// just made) is kept from garbage collection, so launches already on their way with it succeed.
pub const PROTECTED_PROFILE_TTL: Duration = Duration::hours(1);
/// How often the `@latest` parameters are checked for a deprecated image (upstream's SSM
/// invalidation controller), so a withdrawn release is left within half an hour, not a day.
pub const SSM_INVALIDATION_PERIOD: Duration = Duration::minutes(30);

/// A map whose entries expire a fixed time after they were stored.
pub struct TtlCache<K, V> {
    clock: Arc<dyn Clock>,
    entries: Mutex<HashMap<K, (V, DateTime<Utc>)>>,
}

impl<K: Eq + Hash + Clone, V: Clone> TtlCache<K, V> {
    /// An empty cache reading time from `clock`.
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        Self {
            clock,
            entries: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<K, (V, DateTime<Utc>)>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The live value under `key`.
    pub fn get(&self, key: &K) -> Option<V> {
        let now = self.clock.now();
        self.lock()
            .get(key)
            .filter(|(_, until)| now < *until)
            .map(|(v, _)| v.clone())
    }

    /// Stores `value` under `key` for `ttl` (expired entries are dropped on the way).
    pub fn insert(&self, key: K, value: V, ttl: Duration) {
        let now = self.clock.now();
        let mut entries = self.lock();
        entries.retain(|_, (_, until)| now < *until);
        entries.insert(key, (value, now + ttl));
    }

    /// Forgets `key`.
    pub fn remove(&self, key: &K) {
        self.lock().remove(key);
    }

    /// The live entries.
    pub fn live(&self) -> Vec<(K, V)> {
        let now = self.clock.now();
        self.lock()
            .iter()
            .filter(|(_, (_, until))| now < *until)
            .map(|(k, (v, _))| (k.clone(), v.clone()))
            .collect()
    }
}

/// The key of a selector as written: classes with the same terms share the lookup (upstream keys
/// subnets and security groups by class and generation, which a change of the terms also
/// invalidates).
pub fn terms_key<T: std::fmt::Debug>(terms: &T) -> String {
    format!("{terms:?}")
}

/// An SSM parameter's value as cached.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SsmValue {
    /// The parameter's value (an AMI ID).
    pub value: String,
    /// Whether the parameter moves with new releases (an alias `@latest`), which the
    /// deprecation check may drop early.
    pub mutable: bool,
}

/// The caches of one provider.
pub struct LookupCache {
    /// SSM parameter name → value.
    pub ssm: TtlCache<String, SsmValue>,
    /// DescribeImages query ([`super::amis::query_key`]) → the images it found.
    pub images: TtlCache<String, Vec<(String, Described)>>,
    /// `subnetSelectorTerms` ([`terms_key`]) → the subnets they select.
    pub subnets: TtlCache<String, Vec<SubnetInfo>>,
    /// `securityGroupSelectorTerms` ([`terms_key`]) → the groups they select.
    pub security_groups: TtlCache<String, Vec<SecurityGroup>>,
    /// `placementGroupSelector` ([`terms_key`]) → the available group it names (a group not
    /// found is not remembered, as upstream).
    pub placement_groups: TtlCache<String, PlacementGroup>,
    /// Instance profile name → the roles it holds (the profile exists).
    pub instance_profiles: TtlCache<String, Vec<String>>,
    /// Managed instance profiles garbage collection leaves alone for now (see
    /// [`PROTECTED_PROFILE_TTL`]).
    pub protected_profiles: TtlCache<String, ()>,
    /// When the `@latest` SSM parameters were last checked for a deprecated image.
    pub ssm_checked: Mutex<DateTime<Utc>>,
}

impl LookupCache {
    /// Empty caches reading time from `clock`; the first deprecation check is due one
    /// [`SSM_INVALIDATION_PERIOD`] from now.
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        let now = clock.now();
        Self {
            ssm: TtlCache::new(clock.clone()),
            images: TtlCache::new(clock.clone()),
            subnets: TtlCache::new(clock.clone()),
            security_groups: TtlCache::new(clock.clone()),
            placement_groups: TtlCache::new(clock.clone()),
            instance_profiles: TtlCache::new(clock.clone()),
            protected_profiles: TtlCache::new(clock),
            ssm_checked: Mutex::new(now),
        }
    }

    /// Whether the deprecation check of the `@latest` parameters is due at `now`; marks it done
    /// when it is.
    pub fn ssm_check_due(&self, now: DateTime<Utc>) -> bool {
        let mut checked = self.ssm_checked.lock().unwrap_or_else(|e| e.into_inner());
        if now - *checked < SSM_INVALIDATION_PERIOD {
            return false;
        }
        *checked = now;
        true
    }

    /// The cached `@latest` parameters as (name, AMI ID).
    pub fn mutable_parameters(&self) -> Vec<(String, String)> {
        self.ssm
            .live()
            .into_iter()
            .filter(|(_, v)| v.mutable)
            .map(|(name, v)| (name, v.value))
            .collect()
    }

    /// Forgets the `@latest` parameters that point at one of the `deprecated` images, so the
    /// next resolution reads them again; returns their names.
    pub fn forget_deprecated(&self, deprecated: &[String]) -> Vec<String> {
        let mut forgotten = Vec::new();
        for (name, id) in self.mutable_parameters() {
            if deprecated.contains(&id) {
                self.ssm.remove(&name);
                forgotten.push(name);
            }
        }
        forgotten.sort();
        forgotten
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::FakeClock;

    #[test]
    fn an_entry_lives_exactly_its_ttl() {
        let clock = Arc::new(FakeClock::new(Utc::now()));
        let cache: TtlCache<&str, u32> = TtlCache::new(clock.clone());
        cache.insert("k", 1, DEFAULT_TTL);
        clock.advance(Duration::seconds(59));
        assert_eq!(cache.get(&"k"), Some(1));
        clock.advance(Duration::seconds(1));
        assert_eq!(
            cache.get(&"k"),
            None,
            "a resolution one period later reads afresh"
        );
        cache.insert("k", 2, SSM_TTL);
        cache.remove(&"k");
        assert_eq!(cache.get(&"k"), None);
    }

    /// A lookup through the cache: counts how often the backing call runs.
    fn lookup(cache: &TtlCache<String, u32>, calls: &mut u32, key: &str, ttl: Duration) -> u32 {
        if let Some(v) = cache.get(&key.to_string()) {
            return v;
        }
        *calls += 1;
        cache.insert(key.to_string(), *calls, ttl);
        *calls
    }

    #[test]
    fn a_second_lookup_within_the_ttl_makes_no_call_and_one_after_it_does() {
        let clock = Arc::new(FakeClock::new(Utc::now()));
        let caches = LookupCache::new(clock.clone());
        let profiles: TtlCache<String, u32> = TtlCache::new(clock.clone());
        let mut calls = 0;
        lookup(&profiles, &mut calls, "demo_1", INSTANCE_PROFILE_TTL);
        clock.advance(Duration::minutes(14));
        lookup(&profiles, &mut calls, "demo_1", INSTANCE_PROFILE_TTL);
        assert_eq!(calls, 1);
        clock.advance(Duration::minutes(1));
        lookup(&profiles, &mut calls, "demo_1", INSTANCE_PROFILE_TTL);
        assert_eq!(calls, 2);
        // Alias parameters a day, a user's parameter five minutes.
        caches.ssm.insert(
            "/aws/service/eks/x/recommended/image_id".into(),
            SsmValue {
                value: "ami-1".into(),
                mutable: true,
            },
            SSM_TTL,
        );
        caches.ssm.insert(
            "/mine".into(),
            SsmValue {
                value: "ami-2".into(),
                mutable: false,
            },
            SSM_CUSTOM_TTL,
        );
        clock.advance(Duration::minutes(5));
        assert!(caches.ssm.get(&"/mine".to_string()).is_none());
        assert_eq!(
            caches.mutable_parameters(),
            [(
                "/aws/service/eks/x/recommended/image_id".to_string(),
                "ami-1".to_string()
            )]
        );
        clock.advance(Duration::hours(24));
        assert!(caches.mutable_parameters().is_empty());
    }

    #[test]
    fn only_latest_parameters_pointing_at_a_deprecated_image_are_forgotten() {
        let clock = Arc::new(FakeClock::new(Utc::now()));
        let caches = LookupCache::new(clock);
        for (name, value, mutable) in [
            ("/eks/x86/recommended", "ami-old", true),
            ("/eks/arm/recommended", "ami-arm", true),
            ("/eks/x86/v20250101", "ami-old", false),
        ] {
            caches.ssm.insert(
                name.into(),
                SsmValue {
                    value: value.into(),
                    mutable,
                },
                SSM_TTL,
            );
        }
        assert_eq!(
            caches.forget_deprecated(&["ami-old".to_string()]),
            ["/eks/x86/recommended"]
        );
        assert!(
            caches
                .ssm
                .get(&"/eks/x86/recommended".to_string())
                .is_none()
        );
        assert!(
            caches
                .ssm
                .get(&"/eks/arm/recommended".to_string())
                .is_some()
        );
        assert!(
            caches.ssm.get(&"/eks/x86/v20250101".to_string()).is_some(),
            "a pinned release stays: its parameter never moves"
        );
    }

    #[test]
    fn the_deprecation_check_is_due_every_thirty_minutes() {
        let clock = Arc::new(FakeClock::new(Utc::now()));
        let caches = LookupCache::new(clock.clone());
        assert!(!caches.ssm_check_due(clock.now()));
        clock.advance(Duration::minutes(30));
        assert!(caches.ssm_check_due(clock.now()));
        assert!(
            !caches.ssm_check_due(clock.now()),
            "done until the next period"
        );
        clock.advance(Duration::minutes(29));
        assert!(!caches.ssm_check_due(clock.now()));
        clock.advance(Duration::minutes(1));
        assert!(caches.ssm_check_due(clock.now()));
    }
}
