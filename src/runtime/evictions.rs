//! Per-pod backoff for evictions a PodDisruptionBudget refused, kept in the [`super::Context`]
//! so every drain of every node shares it.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::apis::duration;

/// Per-pod retry delays for evictions a PodDisruptionBudget refused (HTTP 429): 1 s doubling to
/// 10 s, as upstream's eviction queue. Lost on restart, which only means retrying sooner.
#[derive(Debug, Default)]
pub struct EvictionBackoff {
    attempts: Mutex<HashMap<PodKey, (u32, DateTime<Utc>)>>,
}

/// A pod's namespace and name.
type PodKey = (String, String);

/// Delay before the next eviction attempt after `failures` refusals.
pub fn eviction_delay(failures: u32) -> Duration {
    Duration::from_secs(1u64 << failures.min(4)).min(Duration::from_secs(10))
}

impl EvictionBackoff {
    pub(crate) fn ready(&self, key: &PodKey, now: DateTime<Utc>) -> bool {
        let attempts = self.attempts.lock().unwrap_or_else(|e| e.into_inner());
        attempts.get(key).is_none_or(|(_, next)| now >= *next)
    }

    pub(crate) fn refused(&self, key: PodKey, now: DateTime<Utc>) -> Duration {
        let mut attempts = self.attempts.lock().unwrap_or_else(|e| e.into_inner());
        let entry = attempts.entry(key).or_insert((0, now));
        let delay = eviction_delay(entry.0);
        entry.0 += 1;
        entry.1 = duration::saturating_add(now, delay);
        delay
    }

    pub(crate) fn forget(&self, key: &PodKey) {
        let mut attempts = self.attempts.lock().unwrap_or_else(|e| e.into_inner());
        attempts.remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(secs: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_767_225_600 + secs, 0).unwrap_or_default()
    }

    #[test]
    fn eviction_retries_back_off_to_ten_seconds() {
        let delays: Vec<u64> = (0..6).map(|n| eviction_delay(n).as_secs()).collect();
        assert_eq!(delays, [1, 2, 4, 8, 10, 10]);
        let b = EvictionBackoff::default();
        let key = ("ns".to_string(), "p".to_string());
        assert!(b.ready(&key, t(0)));
        b.refused(key.clone(), t(0));
        assert!(!b.ready(&key, t(0)));
        assert!(b.ready(&key, t(1)));
        b.forget(&key);
        assert!(b.ready(&key, t(0)));
    }
}
