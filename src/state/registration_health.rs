//! NodePools' recent registration outcomes, which upstream v1.14 keeps in memory
//! (`nodepoolhealth`) to set the NodePool's `NodeRegistrationHealthy` condition: the last four
//! NodeClaims of a pool that registered (a success) or were given up on at the launch or
//! registration timeout (a failure). Two failures among them make the pool unhealthy; a pool
//! with no outcome yet is unknown. A changed NodePool or EC2NodeClass starts the count afresh.
//!
//! Kept per NodePool UID, in memory only, as upstream's: a restarted controller starts every
//! pool's count afresh, so its first registration sets the condition `True` again.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

/// How many recent outcomes count.
pub const OUTCOMES: usize = 4;
/// How many failures among them make the pool unhealthy (half of [`OUTCOMES`]).
pub const UNHEALTHY_FAILURES: usize = OUTCOMES / 2;

/// What the recent outcomes say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Health {
    /// No outcome since the pool (or its node class) last changed.
    Unknown,
    /// Fewer than [`UNHEALTHY_FAILURES`] failures among the last [`OUTCOMES`].
    Healthy,
    /// At least [`UNHEALTHY_FAILURES`] failures among the last [`OUTCOMES`].
    Unhealthy,
}

/// The health `outcomes` (oldest first, `true` for a registration) say.
pub fn health(outcomes: &VecDeque<bool>) -> Health {
    if outcomes.is_empty() {
        Health::Unknown
    } else if outcomes.iter().filter(|ok| !**ok).count() >= UNHEALTHY_FAILURES {
        Health::Unhealthy
    } else {
        Health::Healthy
    }
}

/// Every NodePool's recent outcomes, shared by the NodeClaim lifecycle (which records them) and
/// the NodePool controller (which starts them afresh).
#[derive(Debug, Default)]
pub struct RegistrationHealth {
    pools: Mutex<HashMap<String, VecDeque<bool>>>,
}

impl RegistrationHealth {
    /// Records one outcome for the pool with `uid`; returns the health after.
    pub fn record(&self, uid: &str, registered: bool) -> Health {
        let mut pools = match self.pools.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        let outcomes = pools.entry(uid.to_string()).or_default();
        outcomes.push_back(registered);
        while outcomes.len() > OUTCOMES {
            outcomes.pop_front();
        }
        health(outcomes)
    }

    /// Forgets the pool's outcomes: it (or its node class) changed.
    pub fn reset(&self, uid: &str) {
        let mut pools = match self.pools.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        pools.remove(uid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_failures_among_the_last_four_are_unhealthy() {
        let h = RegistrationHealth::default();
        assert_eq!(h.record("p", true), Health::Healthy);
        assert_eq!(h.record("p", false), Health::Healthy);
        assert_eq!(h.record("p", false), Health::Unhealthy);
        assert_eq!(h.record("p", true), Health::Unhealthy);
        // The first failure drops out once four newer outcomes are recorded.
        assert_eq!(h.record("p", true), Health::Unhealthy);
        assert_eq!(h.record("p", true), Health::Healthy);
        assert_eq!(h.record("other", false), Health::Healthy);
    }

    #[test]
    fn a_reset_pool_starts_afresh() {
        let h = RegistrationHealth::default();
        h.record("p", false);
        assert_eq!(h.record("p", false), Health::Unhealthy);
        h.reset("p");
        assert_eq!(h.record("p", false), Health::Healthy);
        assert_eq!(health(&VecDeque::new()), Health::Unknown);
    }
}
